/* Memory bandwidth, for benchmarks that report a rate against what the
 * memory can deliver (decode is memory bound): a STREAM-like triad and a
 * read-only stream. A decode step reads weights and K/V rows and writes
 * almost nothing, so its bound is the read; the triad (two streams read,
 * one written, plus the write-allocate reads it does not count) is lower. */
#ifndef RA_MEMBW_H
#define RA_MEMBW_H

#include <stddef.h>

struct ra_membw {
    double best_gbs;   /* the fastest repetition, GB/s (1e9 bytes) */
    double median_gbs; /* the median repetition */
    size_t array_bytes;
    int threads, reps;
};

/* a[i] = b[i] + s * c[i] over three arrays of array_bytes each (0: 256 MiB,
 * far beyond any last-level cache), on `threads` OpenMP threads, each
 * touching the pages it later streams (first touch); `reps` timed
 * repetitions after one untimed. Bytes counted per repetition: 3 arrays,
 * as STREAM counts them (2 read, 1 written; write-allocate traffic not
 * counted). RA_ENOMEM if the arrays cannot be allocated. */
int ra_membw_triad(size_t array_bytes, int threads, int reps, struct ra_membw *out);

/* The sum of one array of array_bytes (0: 256 MiB), on `threads` OpenMP
 * threads with several accumulators each (a vectorised reduction, bound by
 * the loads), first touch as above; `reps` timed repetitions after one
 * untimed. Bytes counted per repetition: the array. Each sum is checked
 * against its known value (RA_EBACKEND if it differs), so none is elided.
 * RA_ENOMEM if the array cannot be allocated. Both: RA_EINVAL for threads
 * < 1, reps outside 1-101, or an array smaller than one double. */
int ra_membw_read(size_t array_bytes, int threads, int reps, struct ra_membw *out);

#endif
