/* Interpolating a partition table group in context length (paper §4.2): arithmetic only, no
 * HDF5 (table.h reads the groups from files and includes this header). */
#ifndef RA_INTERP_H
#define RA_INTERP_H

struct ra_table_group; /* table.h */

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

#endif
