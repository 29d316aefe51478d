/* Status codes and the last error message.
 *
 * Library functions return RA_OK (0) or a negative RA_E* code. Where there is
 * more to say than the code (which file, which tensor, which value), the
 * function records one line with ra_error_set() before returning; programs
 * print ra_error_message() and exit. */
#ifndef RA_STATUS_H
#define RA_STATUS_H

#include <stddef.h>

enum ra_status {
    RA_OK = 0,
    RA_EINVAL = -1,       /* bad argument or option value */
    RA_ENOMEM = -2,       /* allocation failed */
    RA_EIO = -3,          /* open/read/write/mmap failed */
    RA_EFORMAT = -4,      /* a file is malformed or lies about its contents */
    RA_ERANGE = -5,       /* a value exceeds a limit (context length, vocabulary) */
    RA_EUNSUPPORTED = -6, /* valid but not implemented (a dtype, a version) */
    RA_EBACKEND = -7,     /* the compute backend failed */
    RA_ECOMM = -8,        /* communication between ranks failed */
};

const char *ra_strerror(int status);

/* Record a one-line message for the calling thread and return `status`, so
 * that `return ra_error_set(RA_EFORMAT, "%s: ...", path);` reads naturally.
 * An argument may be ra_error_message(), to add context to an earlier error.
 * Whatever the arguments hold, the message stays one line of text: control
 * characters and invalid UTF-8 in it are escaped (as ra_escape does, but
 * backslashes are left alone, since escaped arguments already doubled theirs). */
int ra_error_set(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last message recorded by this thread, or ra_strerror() of nothing. */
const char *ra_error_message(void);
void ra_error_clear(void);

/* Text read from a file (a tensor name, a dtype, a config value, an HDF5 name),
 * made fit for a one-line message: control characters become \n, \t, \r or
 * \xNN (so no terminal escape sequence or line break gets through), so do
 * bytes that are not valid UTF-8, C1 controls and the invisible characters
 * that reorder or break lines (U+2028, U+2029, bidirectional overrides, as
 * \u202e), and a backslash becomes \\; valid UTF-8 text stays as it is. The
 * result is cut to fit `size` (at least 4), ending in "..." when cut. NULL
 * prints as (null). Returns buf. */
const char *ra_escape(const char *s, char *buf, size_t size);

/* ra_escape into one of RA_ESC_SLOTS thread-local buffers of RA_ESC_SIZE bytes,
 * used in turn, so that one message can escape several arguments:
 *   ra_error_set(RA_EFORMAT, "%s: tensor %s: dtype %s ...", path, ra_esc(name), ra_esc(dtype));
 * Strings past RA_ESC_SIZE - 1 bytes, escaped, end in "...". */
#define RA_ESC_SLOTS 8
#define RA_ESC_SIZE 256
const char *ra_esc(const char *s);

#endif
