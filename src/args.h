/* Command-line arguments shared by the programs: numbers with their range
 * checked, lists of them, and the two ways a program reports a failure. */
#ifndef RA_ARGS_H
#define RA_ARGS_H

/* "--flag: 'x' is not an integer in lo..hi" (RA_EINVAL) unless s is one. */
int ra_arg_int(const char *s, const char *flag, int lo, int hi, int *out);
int ra_arg_u64(const char *s, const char *flag, unsigned long long *out);
/* Bytes with an optional K/M/G/T suffix (powers of 1024): "512M". */
int ra_arg_size(const char *s, const char *flag, unsigned long long *out);
int ra_arg_double(const char *s, const char *flag, double *out);
int ra_arg_float(const char *s, const char *flag, float *out);
/* Comma-separated integers in lo..hi, at most max of them, at least one. */
int ra_arg_int_list(const char *s, const char *flag, int lo, int hi, int *out, int max, int *n);

/* Prints "PROG: <message> (see --help)" and returns 2, the exit code of a usage error. */
int ra_arg_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "PROG: <ra_error_message()>" and returns 1. */
int ra_arg_fail(const char *prog);

/* --version: "PROG VERSION" and, for programs that compute, the CPU kernels in use. */
void ra_print_version(const char *prog);

#endif
