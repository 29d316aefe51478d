#include "partition.h"
#include "status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ra_partition_parse_list(const char *spec, const char *s, double *v, int max, int *n)
{
    *n = 0;
    while (*s) {
        const int len = (int)strcspn(s, ",");
        char *end;
        double x = strtod(s, &end);
        if (end != s + len || len == 0)
            return ra_error_set(RA_EINVAL, "partition '%s': '%.*s' is not a number", spec, len, s);
        if (!isfinite(x))
            return ra_error_set(RA_EINVAL, "partition '%s': '%.*s' is not a finite number", spec, len, s);
        if (*n < max)
            v[*n] = x;
        (*n)++;
        s += len;
        if (*s == ',' && !*++s)
            return ra_error_set(RA_EINVAL, "partition '%s': a number is missing after the last comma", spec);
    }
    return RA_OK;
}

static int check_bounds(const char *spec, const int *b, int n_tokens, int p)
{
    if (b[0] != 0 || b[p] != n_tokens)
        return ra_error_set(RA_EINVAL, "partition '%s': boundaries must run from 0 to the prompt length %d (got %d..%d)",
                            spec, n_tokens, b[0], b[p]);
    for (int r = 0; r < p; r++)
        if (b[r + 1] <= b[r])
            return ra_error_set(RA_EINVAL, "partition '%s': rank %d gets an empty slice [%d, %d) of the %d-token prompt",
                                spec, r, b[r], b[r + 1], n_tokens);
    return RA_OK;
}

int ra_partition_parse(const char *spec, int n_tokens, int p, int *bounds)
{
    if (p < 1)
        return ra_error_set(RA_EINVAL, "partition: %d ranks", p);
    if (n_tokens < p)
        return ra_error_set(RA_EINVAL, "the prompt has %d tokens, fewer than the %d ranks: every rank needs at least one",
                            n_tokens, p);
    if (!strcmp(spec, "even")) {
        for (int r = 0; r <= p; r++)
            bounds[r] = (int)((long long)r * n_tokens / p);
        return check_bounds(spec, bounds, n_tokens, p);
    }
    double *v = malloc(sizeof(double) * (size_t)(p + 2));
    int rc = RA_OK;
    if (!v)
        return ra_error_set(RA_ENOMEM, "out of memory");
    if (!strncmp(spec, "ratios:", 7)) {
        int n = 0;
        if ((rc = ra_partition_parse_list(spec, spec + 7, v, p, &n)) != RA_OK)
            goto out;
        if (n != p) {
            rc = ra_error_set(RA_EINVAL, "partition '%s': need %d comma-separated ratios, one per rank (got %d)",
                              spec, p, n);
            goto out;
        }
        double sum = 0;
        for (int r = 0; r < p; r++) {
            if (!(v[r] > 0)) {
                rc = ra_error_set(RA_EINVAL, "partition '%s': ratio %d (%g) must be positive", spec, r, v[r]);
                goto out;
            }
            sum += v[r];
        }
        if (fabs(sum - 1.0) > 1e-6) {
            rc = ra_error_set(RA_EINVAL, "partition '%s': ratios sum to %.9g, not 1", spec, sum);
            goto out;
        }
        double acc = 0;
        bounds[0] = 0;
        for (int r = 1; r < p; r++) {
            acc += v[r - 1];
            bounds[r] = (int)lround(acc * n_tokens);
        }
        bounds[p] = n_tokens;
    } else if (!strncmp(spec, "bounds:", 7)) {
        int n = 0;
        if ((rc = ra_partition_parse_list(spec, spec + 7, v, p + 1, &n)) != RA_OK)
            goto out;
        if (n != p + 1) {
            rc = ra_error_set(RA_EINVAL, "partition '%s': need %d boundaries for %d ranks (0 first, the prompt length "
                              "%d last), got %d", spec, p + 1, p, n_tokens, n);
            goto out;
        }
        for (int r = 0; r <= p; r++) {
            if (v[r] != floor(v[r]) || v[r] < 0 || v[r] > n_tokens) {
                rc = ra_error_set(RA_EINVAL, "partition '%s': boundary %g is not a position in 0..%d", spec, v[r], n_tokens);
                goto out;
            }
            bounds[r] = (int)v[r];
        }
    } else {
        rc = ra_error_set(RA_EINVAL, "partition '%s' is not 'even', 'ratios:...' or 'bounds:...'", spec);
        goto out;
    }
    rc = check_bounds(spec, bounds, n_tokens, p);
out:
    free(v);
    return rc;
}

void ra_partition_format(const int *bounds, int p, char *buf, int len)
{
    int used = 0;
    buf[0] = '\0';
    for (int r = 0; r <= p && used < len; r++)
        used += snprintf(buf + used, (size_t)(len - used), r ? ",%d" : "%d", bounds[r]);
}
