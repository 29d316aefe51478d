/* Minimal test support: CHECK counts failures and goes on, so one run reports
 * every broken assertion; a test's main returns test_result(). Exit 77 = skip. */
#ifndef RA_TEST_H
#define RA_TEST_H

#include "half.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_SKIP 77

static int test_failures;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                          \
        }                                                                             \
    } while (0)

#define CHECK_OK(expr)                                                                    \
    do {                                                                                  \
        int check_rc_ = (expr);                                                           \
        if (check_rc_ != 0) {                                                             \
            fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr,     \
                    check_rc_, ra_error_message());                                       \
            test_failures++;                                                              \
        }                                                                                 \
    } while (0)

static inline int test_result(const char *name)
{
    if (test_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
    else
        printf("%s: all checks passed\n", name);
    return test_failures ? 1 : 0;
}

/* The fixtures directory: RA_MODELS_DIR, default ../shared/models. */
/* Up to MAX whitespace-separated ids from PATH (a fixture's expected tokens); -1 if unreadable. */
static inline int test_read_ids(const char *path, int32_t *ids, int max)
{
    FILE *f = fopen(path, "r");
    int n = 0;
    if (!f)
        return -1;
    while (n < max && fscanf(f, "%d", &ids[n]) == 1)
        n++;
    fclose(f);
    return n;
}

static inline const char *test_models_dir(void)
{
    const char *dir = getenv("RA_MODELS_DIR");
    return dir && *dir ? dir : "../shared/models";
}

/* Strict when the fixtures directory exists (jobs/test and CI have every
 * fixture and tool): then a skip, whole or partial, is a failure, since a
 * green run must mean everything ran. RA_ALLOW_SKIPS=1 relaxes it; a missing
 * GPU never counts (test_skip_no_device). */
static inline int test_strict(void)
{
    const char *allow = getenv("RA_ALLOW_SKIPS");
    return access(test_models_dir(), F_OK) == 0 && !(allow && strcmp(allow, "1") == 0);
}

/* A part of the test cannot run: say why ("skip: ..." is what jobs/test lists
 * at the end); a failure when strict. */
static inline void test_skip_part(const char *why)
{
    printf("skip: %s\n", why);
    fflush(stdout);
    if (test_strict()) {
        fprintf(stderr, "FAIL: skipped although the fixtures directory %s exists (RA_ALLOW_SKIPS=1 allows it): %s\n",
                test_models_dir(), why);
        test_failures++;
    }
}

/* The whole test needs a GPU and there is none (or the build has no CUDA):
 * main returns this. Always 77, strict or not: hardware a machine lacks is
 * no missing fixture, and the build has already proved the code compiles
 * and links. Listed by jobs/test with the other skips. */
static inline int test_skip_no_device(const char *name, const char *why)
{
    printf("skip: %s: %s\n", name, why);
    fflush(stdout);
    return test_failures ? test_result(name) : TEST_SKIP;
}

/* Path of a fixture, or NULL (after test_skip_part) if it is absent: the
 * caller then skips what needs it. */
static inline const char *test_fixture(const char *name)
{
    static char path[4][4096];
    static int slot;
    char *p = path[slot++ & 3];
    snprintf(p, sizeof path[0], "%s/%s", test_models_dir(), name);
    if (access(p, R_OK) != 0) {
        char why[4200];
        snprintf(why, sizeof why, "fixture %s not found (set RA_MODELS_DIR)", p);
        test_skip_part(why);
        return NULL;
    }
    return p;
}

/* A scratch directory for this test, under the build tree. */
static inline const char *test_tmpdir(const char *name)
{
    static char dir[4096];
    const char *b = getenv("RA_BUILDDIR");
    snprintf(dir, sizeof dir, "%s/tests/tmp/%s", b && *b ? b : ".", name);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0)
        return NULL;
    return dir;
}

/* Largest |a-b| / (1 + |b|) over n floats. */
static inline double test_max_rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
        if (d > worst || d != d)
            worst = d != d ? INFINITY : d;
    }
    return worst;
}

/* The same over n cache elements: floats, or bf16 values widened (BF16 set). */
static inline double test_max_rel_diff_rows(const void *a, const void *b, size_t n, int bf16)
{
    if (!bf16)
        return test_max_rel_diff(a, b, n);
    const uint16_t *x = a, *y = b;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double u = ra_bf16_to_f32(x[i]), v = ra_bf16_to_f32(y[i]);
        const double d = fabs(u - v) / (1.0 + fabs(v));
        if (d > worst || d != d)
            worst = d != d ? INFINITY : d;
    }
    return worst;
}

#endif
