/* Q4_K and Q6_K weights against ra_block_q8k activations (part of
 * kernels_impl.h). Per 256-element super-block of a row and token t:
 *   Q4_K: d * dx * sum_s sc_s * sum(q4 * qx over sub-block s of 32)
 *         - dmin * dx * sum_s mn_s * (bsums[2s] + bsums[2s + 1])
 *   Q6_K: d * dx * sum_i scales[i] * sum((q6 - 32) * qx over elements 16i..16i+15)
 * with the integer sums exact; the portable code below is the reference form
 * of every instruction set's version. */

static void act_q8k(void *xq, const float *x, int64_t k) { ra_quant_act_ref(RA_DTYPE_Q4_K, x, xq, k); }

/* Sub-block j's 6-bit scale and min (ggml's get_scale_min_k4). */
static void q4k_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

static float dot_q4_k_block(const struct ra_block_q4_k *wb, const struct ra_block_q8k *xb)
{
    int32_t sum = 0, msum = 0;
    for (int s = 0; s < 8; s++) {
        int sc, mn, isum = 0;
        q4k_scale_min(s, wb->scales, &sc, &mn);
        const uint8_t *q = wb->qs + 32 * (s / 2);
        const int8_t *qx = xb->qs + 32 * s;
        for (int l = 0; l < 32; l++)
            isum += (s % 2 ? q[l] >> 4 : q[l] & 0x0f) * qx[l];
        sum += sc * isum;
        msum += mn * (xb->bsums[2 * s] + xb->bsums[2 * s + 1]);
    }
    return xb->d * (ra_f16_to_f32(wb->d) * (float)sum - ra_f16_to_f32(wb->dmin) * (float)msum);
}

/* Element e (< 256) of a Q6_K super-block, in [0, 64). */
static int q6k_quant(const struct ra_block_q6_k *wb, int e)
{
    const int half = e / 128, g = e % 128 / 32, l = e % 32;
    const uint8_t *ql = wb->ql + 64 * half, *qh = wb->qh + 32 * half;
    const int lo = (g & 1 ? ql[l + 32] : ql[l]) >> (g & 2 ? 4 : 0) & 0x0f;
    return lo | (qh[l] >> (2 * g) & 3) << 4;
}

static float dot_q6_k_block(const struct ra_block_q6_k *wb, const struct ra_block_q8k *xb)
{
    int32_t sum = 0;
    for (int i = 0; i < RA_QK_K / 16; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += (q6k_quant(wb, 16 * i + j) - 32) * xb->qs[16 * i + j];
        sum += wb->scales[i] * isum;
    }
    return xb->d * ra_f16_to_f32(wb->d) * (float)sum;
}

static void gemv_q4_k(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK_K;
    for (int64_t r = 0; r < rows; r++)
        for (int t = 0; t < n; t++) {
            float acc = 0;
            for (int64_t b = 0; b < nb; b++)
                acc += dot_q4_k_block((const struct ra_block_q4_k *)w + r * nb + b,
                                      (const struct ra_block_q8k *)xq + t * nb + b);
            y[(size_t)t * ldy + r] = acc;
        }
}

static void gemv_q6_k(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK_K;
    for (int64_t r = 0; r < rows; r++)
        for (int t = 0; t < n; t++) {
            float acc = 0;
            for (int64_t b = 0; b < nb; b++)
                acc += dot_q6_k_block((const struct ra_block_q6_k *)w + r * nb + b,
                                      (const struct ra_block_q8k *)xq + t * nb + b);
            y[(size_t)t * ldy + r] = acc;
        }
}

static void dequantize_q4_k(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q4_K, w, dst, count);
}

static void dequantize_q6_k(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q6_K, w, dst, count);
}
