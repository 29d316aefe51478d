/* Q8_0, Q4_0 and Q4_1 weights against ra_block_q8x activations (part of
 * kernels_impl.h). Per 32-element block b of a row and token t:
 *   Q8_0: dw * dx * sum(qw * qx)
 *   Q4_0: dw * (dx * sum(q4 * qx) - 8 * sx)
 *   Q4_1: dw * dx * sum(q4 * qx) + m * sx
 * with the integer sums exact; the portable code below is the reference form
 * of every instruction set's version. */

static void act_q8x(void *xq, const float *x, int64_t k) { ra_quant_act_ref(RA_DTYPE_Q8_0, x, xq, k); }

/* sum(q4 * qx) over a block: element j is byte j's low nibble, j + 16 its high. */
static int dot_q4_q8(const uint8_t *q4, const int8_t *qx)
{
    int sum = 0;
    for (int j = 0; j < RA_QK / 2; j++)
        sum += (q4[j] & 0x0f) * qx[j] + (q4[j] >> 4) * qx[j + RA_QK / 2];
    return sum;
}

static void gemv_q8_0(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK;
    for (int64_t r = 0; r < rows; r++) {
        const struct ra_block_q8_0 *wb = (const struct ra_block_q8_0 *)w + r * nb;
        for (int t = 0; t < n; t++) {
            const struct ra_block_q8x *xb = (const struct ra_block_q8x *)xq + t * nb;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                int sum = 0;
                for (int j = 0; j < RA_QK; j++)
                    sum += wb[b].qs[j] * xb[b].qs[j];
                acc += ra_f16_to_f32(wb[b].d) * xb[b].d * (float)sum;
            }
            y[(size_t)t * ldy + r] = acc;
        }
    }
}

static void gemv_q4_0(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK;
    for (int64_t r = 0; r < rows; r++) {
        const struct ra_block_q4_0 *wb = (const struct ra_block_q4_0 *)w + r * nb;
        for (int t = 0; t < n; t++) {
            const struct ra_block_q8x *xb = (const struct ra_block_q8x *)xq + t * nb;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++)
                acc += ra_f16_to_f32(wb[b].d) * (xb[b].d * (float)dot_q4_q8(wb[b].qs, xb[b].qs) - 8.0f * xb[b].s);
            y[(size_t)t * ldy + r] = acc;
        }
    }
}

static void gemv_q4_1(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK;
    for (int64_t r = 0; r < rows; r++) {
        const struct ra_block_q4_1 *wb = (const struct ra_block_q4_1 *)w + r * nb;
        for (int t = 0; t < n; t++) {
            const struct ra_block_q8x *xb = (const struct ra_block_q8x *)xq + t * nb;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++)
                acc += ra_f16_to_f32(wb[b].d) * xb[b].d * (float)dot_q4_q8(wb[b].qs, xb[b].qs) +
                       ra_f16_to_f32(wb[b].m) * xb[b].s;
            y[(size_t)t * ldy + r] = acc;
        }
    }
}

static void dequantize_q8_0(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q8_0, w, dst, count);
}

static void dequantize_q4_0(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q4_0, w, dst, count);
}

static void dequantize_q4_1(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q4_1, w, dst, count);
}
