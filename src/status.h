/* Status codes and the last error message.
 *
 * Library functions return RA_OK (0) or a negative RA_E* code. Where there is
 * more to say than the code (which file, which tensor, which value), the
 * function records one line with ra_error_set() before returning; programs
 * print ra_error_message() and exit. */
#ifndef RA_STATUS_H
#define RA_STATUS_H

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
 * An argument may be ra_error_message(), to add context to an earlier error. */
int ra_error_set(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last message recorded by this thread, or ra_strerror() of nothing. */
const char *ra_error_message(void);
void ra_error_clear(void);

#endif
