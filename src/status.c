#include "status.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdint.h>
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

static const char *escape(const char *s, char *buf, size_t size, int backslashes);

int ra_error_set(int status, const char *fmt, ...)
{
    /* Formatted apart first: an argument may be ra_error_message() itself. */
    char raw[sizeof last_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* A safety net under ra_esc(): whatever an argument held, one line of text. */
    escape(raw, last_message, sizeof last_message, 0);
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

/* ------------------------------------------------------------------ escaping */

/* Code points that print nothing yet change how a line reads: C1 controls, zero
 * widths, line and paragraph separators, bidirectional overrides and isolates. */
static int invisible(uint32_t cp)
{
    return cp < 0xa0 || cp == 0x061c || (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
           (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff;
}

/* Writes the escaped form of the character at p into piece; returns the bytes it took. */
static size_t escape_one(const unsigned char *p, char piece[12], int backslashes)
{
    uint32_t cp = 0;
    size_t n;
    if (*p >= 0x20 && *p < 0x7f) {
        if (*p == '\\' && backslashes)
            snprintf(piece, 12, "\\\\");
        else
            snprintf(piece, 12, "%c", *p);
        return 1;
    }
    if (*p == '\n' || *p == '\t' || *p == '\r') {
        snprintf(piece, 12, "\\%c", *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r');
        return 1;
    }
    if (*p < 0x80 || !(n = ra_utf8_decode(p, 4, &cp))) { /* (a NUL ends a sequence early) */
        snprintf(piece, 12, "\\x%02x", *p);
        return 1;
    }
    if (invisible(cp)) {
        snprintf(piece, 12, "\\u%04x", (unsigned)cp);
    } else {
        memcpy(piece, p, n);
        piece[n] = '\0';
    }
    return n;
}

static const char *escape(const char *s, char *buf, size_t size, int backslashes)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "(null)");
    size_t used = 0, keep = 0; /* keep: the last cut that leaves room for "..." */
    if (size < 4) {
        if (size)
            buf[0] = '\0';
        return buf;
    }
    while (*p) {
        char piece[12];
        const size_t took = escape_one(p, piece, backslashes), n = strlen(piece);
        if (used + n > size - 1) {
            memcpy(buf + keep, "...", 4);
            return buf;
        }
        memcpy(buf + used, piece, n);
        used += n;
        if (used <= size - 4)
            keep = used;
        p += took;
    }
    buf[used] = '\0';
    return buf;
}

const char *ra_escape(const char *s, char *buf, size_t size)
{
    return escape(s, buf, size, 1);
}

const char *ra_esc(const char *s)
{
    static _Thread_local char ring[RA_ESC_SLOTS][RA_ESC_SIZE];
    static _Thread_local unsigned next;
    return escape(s, ring[next++ % RA_ESC_SLOTS], RA_ESC_SIZE, 1);
}
