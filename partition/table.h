/* Partition lookup tables (HDF5) and their interpolation (paper §4.2).
 *
 * Layout (see DESIGN.md, "Partitions and lookup tables"):
 *   /                          attribute schema_version (int) = RA_TABLE_SCHEMA_VERSION
 *   /<model-id>/<hw-tag>/p<P>/ datasets context_lengths[N] (int, ascending, unique),
 *                              boundaries[N][P+1] (int), ratios[N][P] (double),
 *                              ttft_kvr_s[N], ttft_even_s[N], ttft_tsp_s[N] (double, NaN = not measured);
 *                              attributes objective ("measure"|"model"), min_stride (int),
 *                              repeats (int), date (string), runahead_version (string)
 *   /<model-id>/<hw-tag>/profile  scalar double attributes of the cost model
 *
 * Nothing here uses MPI or exposes HDF5 types: callers include only this header.
 * Errors: RA_EIO (cannot open / not HDF5 / I/O failed), RA_EFORMAT (a malformed file),
 * RA_EINVAL (bad arguments, or the asked-for group is not in the file), RA_ENOMEM. */
#ifndef RA_TABLE_H
#define RA_TABLE_H

#include <stddef.h>
#include <stdio.h>

#include "model.h"

#define RA_TABLE_SCHEMA_VERSION 1
#define RA_TABLE_MAX_RANKS 4096      /* guards allocations against corrupt shapes */
#define RA_TABLE_MAX_ENTRIES 1000000
#define RA_TABLE_MAX_PROFILE 256     /* attributes in one profile group */

struct ra_table_group {
    char model_id[128], hw_tag[128];
    int p, n;                 /* ranks, entries */
    int *context_lengths;     /* [n] ascending */
    int *boundaries;          /* [n][p+1] */
    double *ratios;           /* [n][p] */
    double *ttft_kvr_s, *ttft_even_s, *ttft_tsp_s; /* [n]; NaN where not measured */
    char objective[16];       /* "measure" or "model" */
    int min_stride, repeats;
    char date[32], version[32];
};

/* Allocates n entries (n >= 0) for p ranks: zero bounds and ratios, NaN TTFTs, and search
 * attributes defaulting to objective "measure", min_stride 1, repeats 1, today's UTC date and
 * this build's version. model_id and hw_tag must be usable as HDF5 group names (no '/'). */
int ra_table_group_init(struct ra_table_group *g, const char *model_id, const char *hw_tag, int p, int n);
void ra_table_group_free(struct ra_table_group *g);

/* Sets entry i from a partition: context = bounds[p], ratios = slice lengths / context. */
int ra_table_entry_set(struct ra_table_group *g, int i, const int *bounds,
                       double ttft_kvr_s, double ttft_even_s, double ttft_tsp_s);

/* Reads /<model_id>/<hw_tag>/p<p> into g (initialised here; free with ra_table_group_free).
 * The group is checked as ra_table_validate() checks it; the first problem is the error.
 * A missing group is RA_EINVAL naming what was asked and which groups the file has. */
int ra_table_read(const char *path, const char *model_id, const char *hw_tag, int p,
                  struct ra_table_group *g);

/* Adds or replaces (by context length) g's entries in the file's group, keeping every other
 * group and entry; the group's search attributes become g's. Creates the file if absent.
 * Writes a temporary file beside it (PATH.tmp.PID, fsynced) and renames it over, so a crash
 * mid-write never leaves a corrupt table. g's entries need not be sorted but must be valid.
 * Not safe against two concurrent writers of one file (the last rename wins). */
int ra_table_merge(const char *path, const struct ra_table_group *g);

/* The shares at `context`: linear interpolation in context length between the two nearest
 * entries (a convex combination, so every share stays > 0 and they sum to 1). Outside
 * [first, last] it takes the nearest entry's ratios and sets *extrapolated (which may be NULL):
 * shares extrapolated linearly leave (0,1) a short way past the table, and clamping them gives
 * a worse split than the nearest one measured. */
int ra_table_ratios_at(const struct ra_table_group *g, int context, double *ratios, int *extrapolated);

/* Rounds shares to whole-token boundaries: b[r] = round(context * (r_0 + ... + r_{r-1})),
 * then nudged so every slice holds at least one token (needs context >= p). */
int ra_table_ratios_to_bounds(const double *ratios, int p, int context, int *bounds);

/* bounds[p+1] for `context`: an entry's stored boundaries when context is in the table,
 * else ra_table_ratios_at() rounded by ra_table_ratios_to_bounds(). */
int ra_table_interpolate(const struct ra_table_group *g, int context, int *bounds, int *extrapolated);

/* Checks the whole file: schema version, every group's datasets present with matching shapes
 * and types, boundaries strictly increasing from 0 to the context length, ratios in (0,1]
 * summing to 1 within 1e-6 and consistent with the boundaries (within 1 token), context lengths
 * ascending and unique, search attributes present, profile attributes scalar doubles.
 * Prints every problem (one line each, naming the group and dataset) to `out` (may be NULL);
 * *n_problems (may be NULL) gets their count. Returns RA_OK if none, else RA_EFORMAT (or RA_EIO
 * when the file cannot be opened as HDF5) with the first problem as the error message. */
int ra_table_validate(const char *path, FILE *out, int *n_problems);

/* The cost model's measured rates: /<model_id>/<hw_tag>/profile with one scalar double
 * attribute per name. Writing replaces the whole profile (stale rates would mislead) and keeps
 * everything else, atomically as ra_table_merge does. Names: 1..63 characters. Reading returns
 * them sorted by name; more than `max` is RA_ERANGE. */
int ra_table_profile_write(const char *path, const char *model_id, const char *hw_tag,
                           const char *const *names, const double *values, int n);
int ra_table_profile_read(const char *path, const char *model_id, const char *hw_tag,
                          char (*names)[64], double *values, int max, int *n);

/* Calls fn for every group /<model>/<hw>/<leaf> of the file (leaf "p<P>" or "profile"), in
 * name order, after checking the schema version; stops at and returns fn's first non-zero. */
typedef int (*ra_table_each_fn)(const char *model_id, const char *hw_tag, const char *leaf, void *ctx);
int ra_table_each(const char *path, ra_table_each_fn fn, void *ctx);

/* Lists the groups a file has ("model/hw/p2, model/hw/profile", or "no tables"), for error
 * messages; truncated with "..." to fit buf. */
int ra_table_list(const char *path, char *buf, size_t len);

/* Identity of a model for table lookup: "<shape>-<8 hex of an FNV-1a hash of every config
 * field>", e.g. "llama-d768-l12-h12-kv12-f2048-v32000-3f2a9c1e". The weights' dtype is not in
 * the config and so not in the id. */
void ra_table_model_id(const struct ra_config *c, char *buf, size_t len);

/* Default hardware tag "<cpu model>-<n>c" from /proc/cpuinfo's first "model name" and the
 * online cores; every character outside [A-Za-z0-9.+-] becomes '_' (runs collapsed), so
 * "Intel(R) Xeon(R) Processor" on 2 cores gives "Intel_R_Xeon_R_Processor-2c". */
void ra_table_default_hw_tag(char *buf, size_t len);

#endif
