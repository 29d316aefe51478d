/* The triad and the read of membw.h. Plain C over restrict pointers, which
 * the compiler vectorises; the loops are bound by memory, not by their
 * instructions. */
#include "membw.h"
#include "hugepage.h"
#include "status.h"
#include "timing.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_REPS 101

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

/* An array of n doubles for a measurement, in huge pages as the runtime's KV
 * caches and --no-mmap weights are (hugepage.h): on 4 KiB pages one core's
 * stream is slower, which would understate the bound. */
static double *membw_array(size_t n) { return ra_huge_alloc(n * sizeof(double)); }

/* Best and median of the sorted times t[0..reps) for `bytes` per repetition. */
static void membw_fill(struct ra_membw *out, double *t, int reps, double bytes, size_t array_bytes, int threads)
{
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    out->best_gbs = bytes / t[0] * 1e-9;
    out->median_gbs = bytes / (reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2])) * 1e-9;
    out->array_bytes = array_bytes;
    out->threads = threads;
    out->reps = reps;
}

/* Checks the arguments both measurements take and clears *out; *n: the
 * doubles per array (array_bytes 0: the default 256 MiB). */
static int membw_begin(struct ra_membw *out, size_t array_bytes, int threads, int reps, size_t *n)
{
    memset(out, 0, sizeof *out);
    if (threads < 1 || reps < 1 || reps > MAX_REPS)
        return ra_error_set(RA_EINVAL, "membw: %d threads, %d repetitions (1-%d)", threads, reps, MAX_REPS);
    if (array_bytes == 0)
        array_bytes = (size_t)256 << 20;
    if (array_bytes < sizeof(double))
        return ra_error_set(RA_EINVAL, "membw: an array of %zu bytes holds no double", array_bytes);
    *n = array_bytes / sizeof(double);
    return RA_OK;
}

int ra_membw_triad(size_t array_bytes, int threads, int reps, struct ra_membw *out)
{
    size_t n = 0;
    int rc = membw_begin(out, array_bytes, threads, reps, &n);
    if (rc != RA_OK)
        return rc;
    double *a = NULL, *b = NULL, *c = NULL;
    if (!(a = membw_array(n)) || !(b = membw_array(n)) || !(c = membw_array(n))) {
        free(a);
        free(b);
        free(c);
        return ra_error_set(RA_ENOMEM, "membw: cannot allocate 3 arrays of %zu bytes", n * sizeof(double));
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
        const double t0 = ra_wall_s();
        triad(a, b, c, 3.0, n, threads);
        t[r] = ra_wall_s() - t0;
    }
    membw_fill(out, t, reps, 3.0 * (double)(n * sizeof(double)), n * sizeof(double), threads);
    free(a);
    free(b);
    free(c);
    return RA_OK;
}

/* Independent sums per thread: one vector accumulator would make the loop
 * wait on the latency of its adds (4 cycles for 16 bytes on SSE2, about
 * 12 GB/s at 3 GHz: below one core's share of DRAM); 16 lanes in 8 SSE2 or
 * 4 AVX registers keep the loads, not the adds, the limit. Unrolled, the
 * lanes live in registers (GCC 12 -O2 otherwise adds through the stack). */
#define READ_LANES 16

static double read_sum(const double *restrict a, size_t n, int threads)
{
    double total = 0;
    const size_t blocks = n / READ_LANES;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        double acc[READ_LANES] = { 0 };
#pragma omp for schedule(static)
        for (size_t b = 0; b < blocks; b++)
#pragma GCC unroll 16
            for (int j = 0; j < READ_LANES; j++)
                acc[j] += a[b * READ_LANES + j];
        for (int j = 0; j < READ_LANES; j++)
            total += acc[j];
    }
    for (size_t i = blocks * READ_LANES; i < n; i++)
        total += a[i];
    return total;
}

int ra_membw_read(size_t array_bytes, int threads, int reps, struct ra_membw *out)
{
    size_t n = 0;
    int rc = membw_begin(out, array_bytes, threads, reps, &n);
    if (rc != RA_OK)
        return rc;
    double *a = NULL;
    if (!(a = membw_array(n)))
        return ra_error_set(RA_ENOMEM, "membw: cannot allocate an array of %zu bytes", n * sizeof(double));
    /* First touch in the blocks the sum's static schedule gives each thread. */
    const size_t blocks = n / READ_LANES;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t b = 0; b < blocks; b++)
        for (int j = 0; j < READ_LANES; j++)
            a[b * READ_LANES + j] = 1;
    for (size_t i = blocks * READ_LANES; i < n; i++)
        a[i] = 1;
    double t[MAX_REPS];
    /* Every sum is checked (n ones add up to n exactly below 2^53), so the
     * compiler cannot drop a repetition whose result nobody reads. */
    for (int r = -1; r < reps && rc == RA_OK; r++) {
        const double t0 = ra_wall_s();
        const double sum = read_sum(a, n, threads);
        if (r >= 0)
            t[r] = ra_wall_s() - t0;
        if (sum != (double)n)
            rc = ra_error_set(RA_EBACKEND, "membw: the read summed %.17g, not %zu", sum, n);
    }
    if (rc == RA_OK)
        membw_fill(out, t, reps, (double)(n * sizeof(double)), n * sizeof(double), threads);
    free(a);
    return rc;
}
