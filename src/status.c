#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[1024];

const char *ra_strerror(int status)
{
    switch (status) {
    case RA_OK: return "success";
    case RA_EINVAL: return "invalid argument";
    case RA_ENOMEM: return "out of memory";
    case RA_EIO: return "input/output error";
    case RA_EFORMAT: return "malformed file";
    case RA_ERANGE: return "value out of range";
    case RA_EUNSUPPORTED: return "not supported";
    case RA_EBACKEND: return "compute backend error";
    case RA_ECOMM: return "communication error";
    default: return "unknown error";
    }
}

/* Formats into a local buffer first: an argument may be ra_error_message()
 * itself (a caller adding context to the error it got), and vsnprintf into
 * the buffer it is reading from overlaps, which garbles the text. */
int ra_error_set(int status, const char *fmt, ...)
{
    char line[sizeof last_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    memcpy(last_message, line, sizeof line);
    return status;
}

const char *ra_error_message(void)
{
    return last_message[0] ? last_message : "no error recorded";
}

void ra_error_clear(void)
{
    last_message[0] = '\0';
}
