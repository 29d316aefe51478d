/* Seeded random numbers and random-weight models held in memory, for tests. */
#ifndef RA_TEST_RANDOM_MODEL_H
#define RA_TEST_RANDOM_MODEL_H

#include "model.h"

#include <stdint.h>

void test_rand_seed(uint64_t seed);
float test_frand(void);             /* uniform in [-1, 1) */
int test_rand_int(int lo, int hi);  /* uniform in [lo, hi] */

/* A model of shape `c` (head_dim 0 means dim / n_heads) with weights of
 * dtype `dt`: projections scaled by 1/sqrt(fan-in) so activations stay of
 * order 1 through the layers, as in a trained model, and wq, wk further by
 * qk_gain (above 1: scores of a few units, a peaked softmax). */
void test_random_model(struct ra_model *m, const struct ra_config *c, enum ra_dtype dt, float qk_gain);

/* Every f32 matrix of M whose rows are whole blocks of the block format T
 * becomes its blocks (ra_quant_quantize); with DEQUANTIZED set, the f32
 * values those blocks hold instead (the reference a quantized model is
 * compared with: the same weights, multiplied as floats). */
int test_quantize_model(struct ra_model *m, enum ra_dtype t, int dequantized);

#endif
