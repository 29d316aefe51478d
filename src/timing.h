/* What every measurement in runahead shares (the calibration in mpi/calibrate.c, the benchmarks
 * in jobs/, the run reports): order statistics of repeated timings and clocks, and whether
 * the machine was quiet while they were taken. No MPI: collective checks build on these. */
#ifndef RA_TIMING_H
#define RA_TIMING_H

#include <stddef.h>

/* The median of v[n] (n >= 1; the mean of the middle two for even n); v is not changed. */
double ra_median(const double *v, int n);
/* The index of the run whose value is the median: the lower middle for even n. */
int ra_median_index(const double *v, int n);
double ra_min(const double *v, int n);
double ra_max(const double *v, int n);
/* "median [min-max]" of v[n], each printed with FMT (a double's format): how the
 * benchmarks report a figure. NAN for n == 0, as the three above. */
const char *ra_spread_format(char *buf, size_t size, const double *v, int n, const char *fmt);

/* Seconds on CLOCK_MONOTONIC, and CPU seconds of this process / this thread. A thread's CPU
 * time over the wall time it spent says whether another process took its core. */
double ra_wall_s(void);
double ra_process_cpu_s(void);
double ra_thread_cpu_s(void);

/* Busy and total jiffies of all cores since boot, from /proc/stat; RA_EIO where it cannot be
 * read (not Linux). */
int ra_cpu_jiffies(double *busy, double *total);

/* The share of all cores' time (0..1) that was busy over the next `seconds`, sampled from
 * /proc/stat while this thread sleeps: with every process of a measurement asleep, this is
 * what other processes use. RA_EIO where /proc/stat cannot be read. */
int ra_cpu_busy_share(double seconds, double *share);

#endif
