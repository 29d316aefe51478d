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
 * that element's index. All spans are scanned in one OpenMP region on up to
 * n_threads threads (<= 0: OpenMP's default), block by block. */
int ra_first_nonfinite_span(const struct ra_finite_span *spans, int n, int n_threads, int64_t *element);

/* Index of the first non-finite element of data[n] (dtype t), or -1. */
int64_t ra_first_nonfinite(const void *data, enum ra_dtype t, int64_t n, int n_threads);

/* "NaN", "+Inf" or "-Inf" for element i (which must be non-finite). */
const char *ra_nonfinite_name(const void *data, enum ra_dtype t, int64_t i);

#endif
