#include "calibrate.h"
#include "ra_mpi.h"
#include "status.h"
#include "timing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SMALL_BYTES 8192      /* OSU's LARGE_MESSAGE_SIZE: up to here, many iterations */
#define FIT_FROM_BYTES 262144 /* bandwidth from these sizes up */
#define MAX_ITERS_SMALL 1000
#define MAX_ITERS_LARGE 100
#define MIN_ITERS 10
#define MAX_WARMUP_SMALL 100
#define MAX_WARMUP_LARGE 10
#define ALLGATHER_MAX_BUFFER (128.0 * 1024 * 1024) /* all ranks' rows together */

static const double p2p_sizes[] = { 8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20, 16 << 20 };
static const double allgather_sizes[] = { 8, 512, 32768, 262144, 2 << 20, 8 << 20 };
#define N_P2P (int)(sizeof p2p_sizes / sizeof p2p_sizes[0])
#define N_ALLGATHER (int)(sizeof allgather_sizes / sizeof allgather_sizes[0])

/* Where a rank's CPU went while it measured: thread CPU seconds over wall seconds. */
struct cpu_meter {
    double cpu, wall, c0, w0;
};

static void meter_start(struct cpu_meter *m)
{
    m->c0 = ra_thread_cpu_s();
    m->w0 = ra_wall_s();
}

static void meter_stop(struct cpu_meter *m)
{
    m->cpu += ra_thread_cpu_s() - m->c0;
    m->wall += ra_wall_s() - m->w0;
}

static void size_stats(struct ra_calib_size *s, const double *t, int n)
{
    s->iters = n;
    s->median_s = ra_median(t, n);
    s->min_s = ra_min(t, n);
}

/* Latency from the smallest size; bandwidth from the large ones after it, as bytes over
 * (t - latency) fitted through the origin. x_scale: bytes moved per byte of the size. */
static void link_fit(struct ra_calib_link *l, double x_scale)
{
    const struct ra_calib_size *top = &l->size[l->n_sizes - 1];
    double sxx = 0, sxm = 0, sxn = 0;
    l->latency_s = l->size[0].median_s;
    l->latency_min_s = l->size[0].min_s;
    for (int i = 0; i < l->n_sizes; i++) {
        const struct ra_calib_size *s = &l->size[i];
        if (s->bytes < FIT_FROM_BYTES)
            continue;
        const double x = s->bytes * x_scale;
        sxx += x * x;
        sxm += x * (s->median_s - l->latency_s);
        sxn += x * (s->min_s - l->latency_min_s);
    }
    /* No large size (many ranks cap the all-gather's), or a slope <= 0 (latency swamps every
     * large size): the largest size alone. */
    l->bandwidth = sxm > 0 ? sxx / sxm : top->bytes * x_scale / top->median_s;
    l->bandwidth_peak = sxn > 0 ? sxx / sxn : top->bytes * x_scale / top->min_s;
}

/* One ping-pong phase between ranks 0 and 1. Rank 0 decides when it ends (after max_iters,
 * or min_iters once budget_s has passed) and says so in the first byte of each message, so
 * rank 1 needs no count. times (rank 0, may be NULL) gets each one-way time; *done the count. */
static int pingpong(MPI_Comm comm, int rank, char *buf, int n, int min_iters, int max_iters, double budget_s,
                    double *times, int *done)
{
    int rc = RA_OK, i = 0;
    const double start = ra_wall_s();
    if (rank == 0) {
        for (;; i++) {
            const int last = i + 1 >= max_iters || (i + 1 >= min_iters && ra_wall_s() - start > budget_s);
            buf[0] = (char)!last;
            const double t0 = MPI_Wtime();
            MPI_CHECK(MPI_Send(buf, n, MPI_BYTE, 1, 0, comm));
            MPI_CHECK(MPI_Recv(buf, n, MPI_BYTE, 1, 0, comm, MPI_STATUS_IGNORE));
            if (times)
                times[i] = 0.5 * (MPI_Wtime() - t0);
            if (last)
                break;
        }
    } else {
        for (;; i++) {
            MPI_CHECK(MPI_Recv(buf, n, MPI_BYTE, 0, 0, comm, MPI_STATUS_IGNORE));
            const int last = !buf[0];
            MPI_CHECK(MPI_Send(buf, n, MPI_BYTE, 0, 0, comm));
            if (last)
                break;
        }
    }
    *done = i + 1;
out:
    return rc;
}

static int measure_p2p(MPI_Comm comm, int rank, double budget_s, struct ra_calib_link *l, struct cpu_meter *m)
{
    char *buf = malloc((size_t)p2p_sizes[N_P2P - 1]);
    double *t = malloc(sizeof(double) * MAX_ITERS_SMALL);
    int rc = RA_OK;
    if (!buf || !t) {
        rc = ra_error_set(RA_ENOMEM, "calibration: out of memory");
        goto out;
    }
    memset(buf, 1, (size_t)p2p_sizes[N_P2P - 1]);
    memset(l, 0, sizeof *l);
    l->n_sizes = N_P2P;
    for (int s = 0; s < N_P2P && rank < 2; s++) {
        struct ra_calib_size *sz = &l->size[s];
        const int n = (int)p2p_sizes[s], small = n <= SMALL_BYTES;
        sz->bytes = n;
        meter_start(m);
        rc = pingpong(comm, rank, buf, n, 2, small ? MAX_WARMUP_SMALL : MAX_WARMUP_LARGE, budget_s / 4, NULL,
                      &sz->warmup);
        if (rc == RA_OK)
            rc = pingpong(comm, rank, buf, n, MIN_ITERS, small ? MAX_ITERS_SMALL : MAX_ITERS_LARGE, budget_s, t,
                          &sz->iters);
        meter_stop(m);
        if (rc != RA_OK)
            goto out;
        if (rank == 0)
            size_stats(sz, t, sz->iters);
    }
    if (rank == 0)
        link_fit(l, 1.0);
    MPI_CHECK(MPI_Bcast(l, (int)sizeof *l, MPI_BYTE, 0, comm));
out:
    free(buf);
    free(t);
    return rc;
}

/* Each call timed on every rank between barriers; the slowest rank's time is the call's. */
static int allgather_phase(MPI_Comm comm, char *buf, int *counts, int *displs, int iters, double *t)
{
    int rc = RA_OK;
    for (int i = 0; i < iters; i++) {
        MPI_CHECK(MPI_Barrier(comm));
        const double t0 = MPI_Wtime();
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_BYTE, comm));
        t[i] = MPI_Wtime() - t0;
    }
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, comm));
out:
    return rc;
}

static int measure_allgather(MPI_Comm comm, int world, double budget_s, struct ra_calib_link *l,
                             struct cpu_meter *m)
{
    const double per_rank_max = fmin(allgather_sizes[N_ALLGATHER - 1], ALLGATHER_MAX_BUFFER / world);
    char *buf = malloc((size_t)per_rank_max * (size_t)world);
    double *t = malloc(sizeof(double) * MAX_ITERS_SMALL);
    int *counts = malloc(sizeof(int) * 2 * (size_t)world), *displs = counts + world, rc = RA_OK;
    if (!buf || !t || !counts) {
        rc = ra_error_set(RA_ENOMEM, "calibration: out of memory");
        goto out;
    }
    memset(buf, 1, (size_t)per_rank_max * (size_t)world);
    memset(l, 0, sizeof *l);
    for (int s = 0; s < N_ALLGATHER && allgather_sizes[s] <= per_rank_max; s++) {
        struct ra_calib_size *sz = &l->size[l->n_sizes++];
        const int n = (int)allgather_sizes[s], small = n <= SMALL_BYTES;
        for (int r = 0; r < world; r++) {
            counts[r] = n;
            displs[r] = r * n;
        }
        sz->bytes = n;
        /* Warm-up, then as many timed calls as the budget allows at the warm-up's pace
         * (every rank computes the same count from the same slowest times). */
        sz->warmup = small ? MAX_WARMUP_SMALL / 10 : 3;
        meter_start(m);
        rc = allgather_phase(comm, buf, counts, displs, sz->warmup, t);
        if (rc == RA_OK) {
            const double per_call = ra_median(t, sz->warmup), most = small ? MAX_ITERS_SMALL : MAX_ITERS_LARGE;
            const double fit = per_call > 0 ? budget_s / per_call : most;
            sz->iters = (int)fmax(MIN_ITERS, fmin(most, fit));
            rc = allgather_phase(comm, buf, counts, displs, sz->iters, t);
        }
        meter_stop(m);
        if (rc != RA_OK)
            goto out;
        size_stats(sz, t, sz->iters);
    }
    link_fit(l, world - 1); /* each rank receives every other rank's rows */
out:
    free(buf);
    free(t);
    free(counts);
    return rc;
}

/* Every rank sleeps (no MPI call spins meanwhile) while rank 0 samples /proc/stat: first a
 * pause so that worker threads of earlier compute (OpenMP, OpenBLAS) stop spinning. */
static int sample_others(MPI_Comm comm, int rank, double *busy)
{
    int rc = RA_OK;
    *busy = -1;
    MPI_CHECK(MPI_Barrier(comm));
    struct timespec settle = { 0, 200000000 }, nap = { 0, 300000000 };
    nanosleep(&settle, NULL);
    if (rank == 0) {
        if (ra_cpu_busy_share(0.3, busy) != RA_OK)
            *busy = -1;
    } else {
        nanosleep(&nap, NULL);
    }
    MPI_CHECK(MPI_Bcast(busy, 1, MPI_DOUBLE, 0, comm));
out:
    return rc;
}

static void verdict(struct ra_calibration *c)
{
    size_t k = 0;
    c->why[0] = '\0';
    c->busy = 0;
#define WHY(...)                                                                         \
    do {                                                                                 \
        int w_ = snprintf(c->why + k, sizeof c->why - k, "%s", k ? "; " : "");          \
        if (w_ > 0 && k + (size_t)w_ < sizeof c->why)                                    \
            k += (size_t)w_;                                                             \
        w_ = snprintf(c->why + k, sizeof c->why - k, __VA_ARGS__);                       \
        if (w_ > 0 && k + (size_t)w_ < sizeof c->why)                                    \
            k += (size_t)w_;                                                             \
        c->busy = 1;                                                                     \
    } while (0)
    if (c->others_busy > RA_CALIB_MAX_OTHERS_BUSY)
        WHY("other processes kept %.0f%% of the cores busy before the measurement", 100 * c->others_busy);
    if (c->cpu_share < RA_CALIB_MIN_CPU_SHARE)
        WHY("a rank got only %.0f%% of its core while measuring", 100 * c->cpu_share);
    if (c->latency_spread > RA_CALIB_MAX_SPREAD)
        WHY("point-to-point latency median %.1fx its minimum", c->latency_spread);
#undef WHY
}

int ra_calibrate_links(MPI_Comm comm, double budget_s, struct ra_calibration *c)
{
    int rc = RA_OK, rank, world;
    struct cpu_meter m = { 0 };
    memset(c, 0, sizeof *c);
    c->cpu_share = 1;
    if (!(budget_s > 0))
        budget_s = 0.1;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &world));
    c->ranks = world;
    if ((rc = sample_others(comm, rank, &c->others_busy)) != RA_OK)
        goto out;
    if (world >= 2) {
        if ((rc = measure_p2p(comm, rank, budget_s, &c->p2p, &m)) != RA_OK ||
            (rc = measure_allgather(comm, world, budget_s, &c->allgather, &m)) != RA_OK)
            goto out;
        double share = m.wall > 0 ? m.cpu / m.wall : 1;
        MPI_CHECK(MPI_Allreduce(&share, &c->cpu_share, 1, MPI_DOUBLE, MPI_MIN, comm));
        c->latency_spread = c->p2p.latency_min_s > 0 ? c->p2p.latency_s / c->p2p.latency_min_s : 1;
    }
    verdict(c);
out:
    return rc;
}

static void print_link(FILE *f, const struct ra_calib_link *l, const char *what, const char *bytes_what)
{
    fprintf(f, "# %s\n# %10s %12s %12s %7s\n", what, bytes_what, "median_us", "min_us", "iters");
    for (int i = 0; i < l->n_sizes; i++)
        fprintf(f, "  %10.0f %12.2f %12.2f %7d\n", l->size[i].bytes, 1e6 * l->size[i].median_s,
                1e6 * l->size[i].min_s, l->size[i].iters);
    fprintf(f, "# latency %.2f us (min %.2f), bandwidth %.2f GB/s (from the minima %.2f)\n", 1e6 * l->latency_s,
            1e6 * l->latency_min_s, l->bandwidth / 1e9, l->bandwidth_peak / 1e9);
}

void ra_calibration_print(FILE *f, const char *prog, const struct ra_calibration *c)
{
    if (c->ranks >= 2) {
        print_link(f, &c->p2p, "point-to-point, ranks 0 and 1, one-way time (ping-pong / 2)", "bytes");
        char what[96];
        snprintf(what, sizeof what, "MPI_Allgatherv on %d ranks, slowest rank's time per call", c->ranks);
        print_link(f, &c->allgather, what, "bytes/rank");
    }
    char others[32] = "unknown";
    if (c->others_busy >= 0)
        snprintf(others, sizeof others, "%.0f%%", 100 * c->others_busy);
    if (c->busy)
        fprintf(f, "%s: WARNING: the machine was busy (%s): the figures describe the load, not the machine; "
                   "the profile is flagged (calibration_busy = 1): calibrate again on a quiet machine\n",
                prog, c->why);
    else
        fprintf(f, "%s: the machine was quiet: other processes used %s of the cores, the ranks got %.0f%% of "
                   "theirs, latency median/min %.2f\n", prog, others, 100 * c->cpu_share, c->latency_spread);
}
