/* What the single-process benchmarks in jobs/ (bench-prefill, bench-decode-speed) share: option
 * lists, the exit on a library error, samples and their "median [min-max]", and where the
 * synthetic models live. Each program defines bench_name, the first word of its error lines. */
#ifndef RA_BENCH_UTIL_H
#define RA_BENCH_UTIL_H

#include <stddef.h>

#define BENCH_MAX_REPEAT 101

extern const char bench_name[];

/* A comma-separated list of positive integers (at most max) into out: the count; exits 2 with
 * one line naming `flag` if the list is bad. */
int bench_parse_list(const char *s, int *out, int max, const char *flag);

/* One line "NAME: WHAT: the library's message", then exit 3 for RA_ENOMEM, else 1. */
void bench_die(const char *what, int rc) __attribute__((noreturn));

/* One figure's samples, one per run; those past BENCH_MAX_REPEAT are dropped. */
struct bench_samples {
    double v[BENCH_MAX_REPEAT];
    int n;
};

void bench_add(struct bench_samples *s, double v);
double bench_median(const struct bench_samples *s);
/* "median [min-max]" in one field, each printed with fmt. */
const char *bench_spread(char *buf, size_t size, const struct bench_samples *s, const char *fmt);

/* The synthetic bench-small model's directory: $RA_BENCH_DIR/bench-small, default
 * $HOME/.cache/runahead/bench-small (what the jobs/ wrappers write). */
void bench_default_model(char *buf, size_t size);

/* The bf16 copy beside a model, DIR-bf16 (the wrappers write it with runahead-synth --dtype bf16),
 * into buf: 1 if it is there to read, else 0. */
int bench_bf16_beside(const char *model_dir, char *buf, size_t size);

/* The CPU's model name from /proc/cpuinfo ("unknown CPU" where it does not say). */
void bench_cpu_name(char *buf, size_t size);
/* 1 if /proc/cpuinfo lists FLAG (avx2, avx512f, avx512_bf16, amx_bf16, ...). */
int bench_cpu_has(const char *flag);
/* The vector units the kernels care about: "AVX2+FMA, AVX-512, AVX512-BF16, AMX-BF16", those present. */
void bench_cpu_flags(char *buf, size_t size);
/* KL(p || q) in nats of the softmax of logits P and Q over N classes (double, max-shifted). */
double bench_kl_logits(const float *p, const float *q, int n);

#endif
