/* The helpers of bench_util.h. */
#include "bench_util.h"
#include "args.h"
#include "ra_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int bench_parse_list(const char *s, int *out, int max, const char *flag)
{
    int n = 0;
    if (ra_arg_int_list(s, flag, 1, 1000000, out, max, &n) != RA_OK)
        exit(ra_arg_usage_error(bench_name, "%s", ra_error_message()));
    return n;
}

void bench_die(const char *what, int rc)
{
    fprintf(stderr, "%s: %s: %s\n", bench_name, what, ra_error_message());
    exit(rc == RA_ENOMEM ? 3 : 1);
}

void bench_add(struct bench_samples *s, double v)
{
    if (s->n < BENCH_MAX_REPEAT)
        s->v[s->n++] = v;
}

double bench_median(const struct bench_samples *s)
{
    return ra_median(s->v, s->n);
}

const char *bench_spread(char *buf, size_t size, const struct bench_samples *s, const char *fmt)
{
    return ra_spread_format(buf, size, s->v, s->n, fmt);
}

void bench_default_model(char *buf, size_t size)
{
    const char *base = getenv("RA_BENCH_DIR");
    if (base && *base)
        snprintf(buf, size, "%s/bench-small", base);
    else
        snprintf(buf, size, "%s/.cache/runahead/bench-small", getenv("HOME") ? getenv("HOME") : ".");
}

int bench_bf16_beside(const char *model_dir, char *buf, size_t size)
{
    const int len = snprintf(buf, size, "%s-bf16", model_dir);
    return len >= 0 && (size_t)len < size && access(buf, R_OK) == 0;
}
