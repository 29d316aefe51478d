/* Positions as data: which positions a set of token rows holds. */
#ifndef RA_ROWS_H
#define RA_ROWS_H

#include <stdint.h>

/* The positions of n token rows: pos[i] when pos is set (sorted, strictly increasing),
 * else start + i (one contiguous span, every op's fast path). */
struct ra_rows { int n; int start; const int32_t *pos; };
static inline int ra_rows_pos(const struct ra_rows *r, int i) { return r->pos ? r->pos[i] : r->start + i; }

#endif
