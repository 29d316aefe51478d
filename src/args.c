#include "args.h"
#include "cpu_isa.h"
#include "status.h"

#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ra_arg_int(const char *s, const char *flag, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return ra_error_set(RA_EINVAL, "%s: '%s' is not an integer in %d..%d", flag, s, lo, hi);
    *out = (int)v;
    return RA_OK;
}

int ra_arg_u64(const char *s, const char *flag, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || *s == '-')
        return ra_error_set(RA_EINVAL, "%s: '%s' is not a non-negative integer", flag, s);
    *out = v;
    return RA_OK;
}

int ra_arg_double(const char *s, const char *flag, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !isfinite(v))
        return ra_error_set(RA_EINVAL, "%s: '%s' is not a number", flag, s);
    *out = v;
    return RA_OK;
}

int ra_arg_float(const char *s, const char *flag, float *out)
{
    double v = 0;
    int rc = ra_arg_double(s, flag, &v);
    if (rc == RA_OK)
        *out = (float)v;
    return rc;
}

int ra_arg_int_list(const char *s, const char *flag, int lo, int hi, int *out, int max, int *n)
{
    char *copy = strdup(s), *save = NULL;
    int rc = RA_OK;
    if (!copy)
        return ra_error_set(RA_ENOMEM, "out of memory");
    *n = 0;
    for (char *t = strtok_r(copy, ",", &save); t && rc == RA_OK; t = strtok_r(NULL, ",", &save)) {
        if (*n == max)
            rc = ra_error_set(RA_EINVAL, "%s: more than %d values", flag, max);
        else
            rc = ra_arg_int(t, flag, lo, hi, &out[(*n)++]);
    }
    free(copy);
    if (rc == RA_OK && *n == 0)
        rc = ra_error_set(RA_EINVAL, "%s: no values given", flag);
    return rc;
}

int ra_arg_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    return 2;
}

int ra_arg_fail(const char *prog)
{
    fprintf(stderr, "%s: %s\n", prog, ra_error_message());
    return 1;
}

void ra_print_version(const char *prog)
{
    char kernels[256];
    ra_cpu_isa_describe(kernels, sizeof kernels);
    printf("%s %s\ncpu kernels: %s\n", prog, PACKAGE_VERSION, kernels);
}
