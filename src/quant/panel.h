/* Block-quantized weights repacked for the int8 prefill GEMM.
 *
 * The five block formats differ in how they store a weight, not in what the
 * products need: every one of them is, per group of `group` consecutive
 * elements of a row,
 *     w[c] = scale * u[c] + offset,   u[c] an unsigned byte
 * (Q8_0: u = q + 128, offset = -128 d; Q4_0: u = the nibble, offset = -8 d;
 * Q4_1: offset = m; Q4_K: scale = d * sc, offset = -dmin * mn per sub-block
 * of 32; Q6_K: scale = d * sc, offset = -32 d * sc per sub-block of 16). A
 * panel holds RA_QP_ROWS consecutive rows (output channels) of one matrix in
 * that form, the bytes interleaved for the int8 dot-product units:
 *
 *   u: k * RA_QP_ROWS bytes; row n's bytes at columns 4i..4i+3 are
 *      u[64 i + 4 n + 0..3] (the lanes of AVX512-VNNI's vpdpbusd, which adds
 *      four u8 x s8 products to each int32 lane, and the rows of an AMX B
 *      tile: 64 bytes per 4 columns);
 *   scale: float [k / group][RA_QP_ROWS];
 *   offset: float [k / group][RA_QP_ROWS];
 *
 * one after the other, 64-byte aligned when the panel is. Rows past the
 * matrix's last (a short last panel) are zeros: their products are 0.
 *
 * Activations for it (struct ra_qact) are quantized per 32 elements as the
 * GEMV's are (d = max|x| / 127, q = roundf(x / d)), kept as plain rows of
 * int8 (an AMX A tile, or a broadcast per 4 bytes), with the sums the
 * offsets multiply. Then for token t and output row n
 *     y = sum_g scale[g][n] * d[g'] * (sum_{c in g} u[c] q[c]) + offset[g][n] * s[g]
 * (g' = the 32-element block of group g, s[g] = d[g'] * sum_{c in g} q[c]),
 * the integer sums exact. */
#ifndef RA_QUANT_PANEL_H
#define RA_QUANT_PANEL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define RA_QP_ROWS 16

/* Elements per scale group of weight type t: 16 for Q6_K, 32 for the other
 * block types. */
int ra_qpanel_group(enum ra_dtype t);
/* The largest u a panel of type t holds: 255 (Q8_0), 15 (Q4_*), 63 (Q6_K). */
int ra_qpanel_max_u(enum ra_dtype t);
/* Bytes of one panel of k columns in groups of `group` (a multiple of 64). */
size_t ra_qpanel_bytes(int group, int64_t k);

static inline uint8_t *ra_qpanel_u(void *panel) { return panel; }
static inline float *ra_qpanel_scale(void *panel, int64_t k) { return (float *)((char *)panel + RA_QP_ROWS * k); }
static inline float *ra_qpanel_offset(void *panel, int64_t k, int group)
{
    return ra_qpanel_scale(panel, k) + RA_QP_ROWS * (k / group);
}

/* Packs nrows (1..RA_QP_ROWS) rows of w (type t, k columns, rows
 * ra_dtype_row_bytes(t, k) apart) into one panel, the rows past nrows zero.
 * Plain C, one thread: a panel is packed once per prefill matmul and used by
 * every token. */
void ra_qpanel_pack(void *panel, const void *w, enum ra_dtype t, int64_t k, int nrows);

/* n tokens' activations of k elements for the weights of one group size. */
struct ra_qact {
    int8_t *q; /* [n][k] */
    float *d;  /* [n][k / 32] */
    float *s;  /* [n][k / group] */
    int64_t k;
    int group;
};

/* Bytes of the three arrays for n tokens (ra_qact_bind lays them out). */
size_t ra_qact_bytes(int64_t k, int group, int n);
/* Points a at buf (ra_qact_bytes, 64-byte aligned) for n tokens. */
void ra_qact_bind(struct ra_qact *a, void *buf, int64_t k, int group, int n);
/* Token t's row x (k floats) quantized into a: the same q and d as
 * ra_quant_act_ref's ra_block_q8x. Plain C. */
void ra_qact_quantize_ref(struct ra_qact *a, int t, const float *x);

/* y[t * ldy + 16 p + n] for t < n_tok, panels p < np (ra_qpanel_bytes
 * apart), rows n < 16, only the first ncols (<= 16 np) columns stored: the
 * formula above in float, the groups in order. The plain-C reference of the
 * kernel tables' gemm. */
void ra_qpanel_gemm_ref(float *y, int ldy, const struct ra_qact *a, int n_tok, const void *panels, int np,
                        int ncols);

#endif
