/* Link calibration for the cost model: point-to-point and all-gather micro-benchmarks measured
 * the way the OSU micro-benchmarks measure (osu_latency, osu_allgatherv): per message size a
 * warm-up, then many timed iterations, and the median and the minimum kept; and a verdict on
 * whether the machine was quiet, since a profile taken while other processes took the cores
 * describes the load, not the link.
 *
 * Point-to-point is a ping-pong between ranks 0 and 1, each iteration timed on its own (one-way
 * time = half the round trip). The all-gather is MPI_Allgatherv as TSP calls it (MPI_IN_PLACE,
 * equal counts), each iteration timed on every rank between barriers and the slowest rank kept.
 * Per kind: latency = the median (and the min) at the smallest size; bandwidth = the large
 * sizes' times after that latency, fitted as bytes / (t - latency) by least squares through the
 * origin (the large messages dominate, so small-message noise cannot make it up). */
#ifndef RA_CALIBRATE_H
#define RA_CALIBRATE_H

#include <mpi.h>
#include <stdio.h>

#define RA_CALIB_MAX_SIZES 12

struct ra_calib_size {
    double bytes;           /* per message (point-to-point) or per rank (all-gather) */
    int warmup, iters;      /* untimed, then timed iterations */
    double median_s, min_s; /* one-way time (point-to-point), slowest rank's call (all-gather) */
};

struct ra_calib_link {
    struct ra_calib_size size[RA_CALIB_MAX_SIZES];
    int n_sizes;
    double latency_s, latency_min_s; /* the smallest size's median and min */
    double bandwidth, bandwidth_peak; /* bytes/s from the large sizes' medians and mins */
};

struct ra_calibration {
    struct ra_calib_link p2p, allgather; /* all zero with one rank */
    int ranks;
    /* Whether the machine was quiet. */
    double others_busy;    /* share of all cores busy while every rank slept before measuring
                            * (rank 0's /proc/stat): other processes; -1 = unknown */
    double cpu_share;      /* lowest over the measuring ranks of thread CPU time / wall time:
                            * below 1, another process took a rank's core */
    double latency_spread; /* point-to-point median / min at the smallest size */
    int busy;              /* 1: a check failed, the figures describe the load (see why) */
    char why[256];
};

/* Thresholds of the verdict: beyond any of these the calibration is flagged busy. */
#define RA_CALIB_MAX_OTHERS_BUSY 0.25
#define RA_CALIB_MIN_CPU_SHARE 0.80
#define RA_CALIB_MAX_SPREAD 3.0

/* Measures both kinds on comm (collective; every rank gets the same result). With one rank
 * only the quiet check runs. budget_s bounds the timed iterations of one size (0: 0.1 s):
 * each size runs between a floor and the OSU counts (1000 small, 100 large), as the budget
 * allows. */
int ra_calibrate_links(MPI_Comm comm, double budget_s, struct ra_calibration *c);

/* An OSU-style table of both kinds (size, median, min, iterations) and the verdict. */
void ra_calibration_print(FILE *f, const char *prog, const struct ra_calibration *c);

#endif
