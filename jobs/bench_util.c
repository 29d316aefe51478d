/* The helpers of bench_util.h. */
#include "bench_util.h"
#include "args.h"
#include "ra_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void bench_cpu_name(char *buf, size_t len)
{
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t')
                    c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, len, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

int bench_cpu_has(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return 0;
    char line[8192];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        for (char *t = strtok(strchr(line, ':') + 1, " \t\n"); t; t = strtok(NULL, " \t\n"))
            if (strcmp(t, flag) == 0)
                found = 1;
        break;
    }
    fclose(f);
    return found;
}

void bench_cpu_flags(char *buf, size_t size)
{
    snprintf(buf, size, "%s%s%s%s%s", bench_cpu_has("avx2") ? "AVX2" : "no AVX2", bench_cpu_has("fma") ? "+FMA" : "",
             bench_cpu_has("avx512f") ? ", AVX-512" : "", bench_cpu_has("avx512_bf16") ? ", AVX512-BF16" : "",
             bench_cpu_has("amx_bf16") ? ", AMX-BF16" : "");
}

double bench_kl_logits(const float *p, const float *q, int n)
{
    double mp = -INFINITY, mq = -INFINITY, zp = 0, zq = 0, kl = 0;
    for (int i = 0; i < n; i++)
        mp = fmax(mp, p[i]), mq = fmax(mq, q[i]);
    for (int i = 0; i < n; i++)
        zp += exp(p[i] - mp), zq += exp(q[i] - mq);
    const double lzp = log(zp), lzq = log(zq);
    for (int i = 0; i < n; i++) {
        const double lp = p[i] - mp - lzp, lq = q[i] - mq - lzq;
        kl += exp(lp) * (lp - lq);
    }
    return fmax(kl, 0.0);
}
