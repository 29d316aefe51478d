#include "args.h"
#include "cpu_isa.h"
#include "gemm_bf16.h"
#include "quant/quant.h"
#include "status.h"

#include "config.h"

#include <errno.h>
#include <float.h>
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

int ra_arg_size(const char *s, const char *flag, unsigned long long *out)
{
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ULL << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1ULL << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1ULL << 30, end++;
    else if (*end == 'T' || *end == 't') mul = 1ULL << 40, end++;
    if (!*s || *s < '0' || *s > '9' || end == s || *end || errno || v > ~0ULL / mul)
        return ra_error_set(RA_EINVAL, "%s: '%s' is not a size (bytes, with an optional K, M, G or T suffix "
                            "of powers of 1024)", flag, s);
    *out = v * mul;
    return RA_OK;
}

int ra_arg_double(const char *s, const char *flag, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end)
        return ra_error_set(RA_EINVAL, "%s: '%s' is not a number", flag, s);
    if (!isfinite(v))
        return ra_error_set(RA_EINVAL, "%s: '%s' is %s", flag, s,
                            errno == ERANGE ? "too large for a double" : "not a finite number");
    *out = v;
    return RA_OK;
}

/* A value a float cannot hold is refused rather than rounded: 1e300 would
 * become inf and 1e-50 would become 0 (for --temperature, silently greedy). */
int ra_arg_float(const char *s, const char *flag, float *out)
{
    double v = 0;
    int rc = ra_arg_double(s, flag, &v);
    if (rc != RA_OK)
        return rc;
    if (fabs(v) > FLT_MAX)
        return ra_error_set(RA_EINVAL, "%s: '%s' is too large for a float (largest %g)", flag, s, (double)FLT_MAX);
    if (v != 0 && fabs(v) < FLT_MIN)
        return ra_error_set(RA_EINVAL, "%s: '%s' is below the smallest normal float %g (0 is allowed)", flag, s,
                            (double)FLT_MIN);
    *out = (float)v;
    return RA_OK;
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
    char units[256];
    ra_gemm_bf16_units(units, sizeof units);
    char quant[256];
    ra_quant_isa_describe(quant, sizeof quant);
    printf("%s %s\ncpu kernels: %s\nquant kernels: %s\nbf16 GEMM: %s\n", prog, PACKAGE_VERSION, kernels, quant,
           units);
}
