/* Finding non-finite values (NaN, ±Inf) in weights and activations by their
 * exponent bits, so f16 and bf16 are checked without widening them. */
#ifndef RA_FINITE_H
#define RA_FINITE_H

#include <stdint.h>

#include "model.h"

/* An array to check: count elements of dtype at data. */
struct ra_finite_span {
    const void *data;
    enum ra_dtype dtype;
    int64_t count;
};

/* The first span (in order) with a non-finite element, or -1; *element gets
 * that element's index. A block format's span (count elements, whole blocks)
 * is checked through its f16 scales (d; m of Q4_1, dmin of Q4_K), which
 * multiply every element of their block: there, *element is a block's index. All spans are scanned in one OpenMP region on up to
 * n_threads threads (<= 0: OpenMP's default), block by block. */
int ra_first_nonfinite_span(const struct ra_finite_span *spans, int n, int n_threads, int64_t *element);

/* Index of the first non-finite element of data[n] (dtype t; a block
 * format: of the first block with a non-finite scale), or -1. */
int64_t ra_first_nonfinite(const void *data, enum ra_dtype t, int64_t n, int n_threads);

/* "NaN", "+Inf" or "-Inf" for element i (which must be non-finite); of
 * block i's first non-finite scale for a block format. */
const char *ra_nonfinite_name(const void *data, enum ra_dtype t, int64_t i);
/* The name of block i's first non-finite scale ("d", "m", "dmin"). */
const char *ra_nonfinite_scale(const void *data, enum ra_dtype t, int64_t i);

#endif
