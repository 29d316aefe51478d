/* The triad of membw.h. Plain C over restrict pointers, which the compiler
 * vectorises; the loop is bound by memory, not by its instructions. */
#include "membw.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_REPS 101

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void triad(double *restrict a, const double *restrict b, const double *restrict c, double s, size_t n,
                  int threads)
{
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

int ra_membw_triad(size_t array_bytes, int threads, int reps, struct ra_membw *out)
{
    memset(out, 0, sizeof *out);
    if (threads < 1 || reps < 1 || reps > MAX_REPS)
        return ra_error_set(RA_EINVAL, "membw: %d threads, %d repetitions (1-%d)", threads, reps, MAX_REPS);
    if (array_bytes == 0)
        array_bytes = (size_t)256 << 20;
    const size_t n = array_bytes / sizeof(double);
    double *a = NULL, *b = NULL, *c = NULL;
    if (posix_memalign((void **)&a, 4096, n * sizeof(double)) || posix_memalign((void **)&b, 4096, n * sizeof(double)) ||
        posix_memalign((void **)&c, 4096, n * sizeof(double))) {
        free(a);
        free(b);
        free(c);
        return ra_error_set(RA_ENOMEM, "membw: cannot allocate 3 arrays of %zu bytes", array_bytes);
    }
    /* First touch by the threads that stream them (static schedule, as below). */
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) {
        a[i] = 0;
        b[i] = 1;
        c[i] = 2;
    }
    double t[MAX_REPS];
    triad(a, b, c, 3.0, n, threads);
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        triad(a, b, c, 3.0, n, threads);
        t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    const double bytes = 3.0 * (double)(n * sizeof(double));
    out->best_gbs = bytes / t[0] * 1e-9;
    out->median_gbs = bytes / (reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2])) * 1e-9;
    out->array_bytes = n * sizeof(double);
    out->threads = threads;
    out->reps = reps;
    free(a);
    free(b);
    free(c);
    return RA_OK;
}
