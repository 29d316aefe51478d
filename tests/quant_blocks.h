/* Random block-quantized weights for the quant tests (test_quant,
 * test_quant_panel, test_quant_amx): one xorshift stream per test program,
 * scales log-uniform as models have them, quants uniform, or every quant
 * at its extremes (qb_extreme), where the integer sums are largest and a
 * 16-bit intermediate would saturate. */
#ifndef RA_TEST_QUANT_BLOCKS_H
#define RA_TEST_QUANT_BLOCKS_H

#include "half.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

/* The stream; a test may reseed it. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static inline uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* Uniform in [0, 1). */
static inline double rnd_unit(void) { return rnd() / 4294967296.0; }

/* A scale as models have them: log-uniform magnitude in [1e-4, 1e-1], with a random sign if SIGNED. */
static inline uint16_t rnd_scale(int is_signed)
{
    float v = (float)exp(log(1e-4) + rnd_unit() * (log(1e-1) - log(1e-4)));
    if (is_signed && (rnd() & 1))
        v = -v;
    return ra_f32_to_f16(v);
}

/* Non-zero: rnd_weights (and a test's activations) at their extremes. */
static int qb_extreme;

static inline void rnd_bytes(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

/* COUNT elements (whole blocks) of type T with random quants and scales. */
static inline void rnd_weights(enum ra_dtype t, void *w, int64_t count)
{
    const int64_t nb = count / ra_dtype_block(t);
    for (int64_t b = 0; b < nb; b++) {
        switch (t) {
        case RA_DTYPE_Q8_0: {
            struct ra_block_q8_0 *x = (struct ra_block_q8_0 *)w + b;
            x->d = rnd_scale(0);
            rnd_bytes((uint8_t *)x->qs, sizeof x->qs); /* -128 included: ggml never writes it, a file may */
            if (qb_extreme) /* every quant -128 or 127 by blocks */
                memset(x->qs, b % 3 ? 0x80 : 0x7f, sizeof x->qs);
            break;
        }
        case RA_DTYPE_Q4_0: {
            struct ra_block_q4_0 *x = (struct ra_block_q4_0 *)w + b;
            x->d = rnd_scale(1);
            rnd_bytes(x->qs, sizeof x->qs);
            if (qb_extreme) /* every quant 15 or 0 by blocks */
                memset(x->qs, b % 3 ? 0xff : 0, sizeof x->qs);
            break;
        }
        case RA_DTYPE_Q4_1: {
            struct ra_block_q4_1 *x = (struct ra_block_q4_1 *)w + b;
            x->d = rnd_scale(0);
            x->m = rnd_scale(1);
            rnd_bytes(x->qs, sizeof x->qs);
            if (qb_extreme)
                memset(x->qs, b % 3 ? 0xff : 0, sizeof x->qs);
            break;
        }
        case RA_DTYPE_Q4_K: {
            struct ra_block_q4_k *x = (struct ra_block_q4_k *)w + b;
            x->d = rnd_scale(0);
            x->dmin = rnd_scale(0);
            rnd_bytes(x->scales, sizeof x->scales);
            rnd_bytes(x->qs, sizeof x->qs);
            if (qb_extreme) { /* every scale and min 63, quants 15 or 0 by halves, dmin far above d */
                x->d = ra_f32_to_f16(1e-4f);
                x->dmin = ra_f32_to_f16(0.5f);
                memset(x->scales, 0xff, sizeof x->scales);
                memset(x->qs, b & 1 ? 0x0f : 0xff, sizeof x->qs);
            }
            break;
        }
        case RA_DTYPE_Q6_K: {
            struct ra_block_q6_k *x = (struct ra_block_q6_k *)w + b;
            rnd_bytes(x->ql, sizeof x->ql);
            rnd_bytes(x->qh, sizeof x->qh);
            rnd_bytes((uint8_t *)x->scales, sizeof x->scales);
            x->d = rnd_scale(1);
            if (qb_extreme) { /* scales -128 and 127, quants 63 or 0 (-32) by blocks */
                for (int i = 0; i < RA_QK_K / 16; i++)
                    x->scales[i] = (int8_t)(i & 1 ? -128 : 127);
                memset(x->ql, b & 1 ? 0 : 0xff, sizeof x->ql);
                memset(x->qh, b & 1 ? 0 : 0xff, sizeof x->qh);
            }
            break;
        }
        default: break;
        }
    }
}

/* The kernel table of isa where this build has it and this CPU runs it;
 * NULL after a line saying why not (not a skip: hardware a machine lacks,
 * which cpu_isa.sh covers on emulated CPUs). */
static inline const struct ra_quant_kernels *qb_table(enum ra_quant_isa isa)
{
    const struct ra_quant_kernels *qk = ra_quant_kernels_for(isa);
    if (qk && ra_quant_isa_supported(isa))
        return qk;
    printf("%s: not run (%s)\n", ra_quant_isa_name(isa), qk ? "this CPU lacks it" : "not in this build");
    return NULL;
}

#endif
