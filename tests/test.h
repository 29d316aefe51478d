/* Minimal test support: CHECK counts failures and goes on, so one run reports
 * every broken assertion; a test's main returns test_result(). Exit 77 = skip. */
#ifndef RA_TEST_H
#define RA_TEST_H

#include <math.h>
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

/* Path of a fixture in RA_MODELS_DIR (default ../shared/models), or NULL with
 * a message if it is absent: the caller then exits TEST_SKIP. */
static inline const char *test_fixture(const char *name)
{
    static char path[4][4096];
    static int slot;
    const char *dir = getenv("RA_MODELS_DIR");
    if (!dir || !*dir)
        dir = "../shared/models";
    char *p = path[slot++ & 3];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    if (access(p, R_OK) != 0) {
        printf("skip: fixture %s not found (set RA_MODELS_DIR)\n", p);
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

#endif
