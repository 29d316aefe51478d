/* ra_quant_quantize: floats to ggml's block formats, as llama.cpp's reference
 * quantizers compute them without an importance matrix (quantize_row_*_ref),
 * so a file written here holds the bytes llama-quantize --pure would write.
 *
 * Q8_0, Q4_0 and Q4_1 take their scale (and Q4_1 its min) from the block's
 * extremes. Q4_K and Q6_K search each sub-block's scale (and Q4_K's min) for
 * the least weighted squared error, then quantize those to 6 or 8 bits
 * relative to the super-block's largest, and round the values again against
 * the scales as stored. Every step keeps ggml's order of float operations:
 * changing a sum's order changes which candidate wins a tie and so the
 * bytes. */
#include "quant.h"
#include "half.h"
#include "status.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define NEAR_ZERO 1e-15f /* a sub-block whose largest |x| is below this quantizes to zeros */

/* Round to nearest, ties to even (the default rounding mode), as ggml's
 * nearest_int. Values past +-2^30 and NaN (which only values near FLT_MAX or
 * subnormal scales produce) are clamped first: every caller clamps the
 * result to a few bits anyway, and converting them to int would be undefined. */
static inline int round_even(float f)
{
    if (!(f > -1073741824.0f && f < 1073741824.0f))
        return f > 0 ? 1073741824 : -1073741824;
    return (int)nearbyintf(f);
}

/* v truncated toward zero into [0, 15] (NaN: 0): ggml's MIN(15, (int8_t)v) for v >= 0, without its
 * undefined conversions of out-of-range values. */
static inline int trunc_q4(float v) { return v >= 15.0f ? 15 : v > 0.0f ? (int)v : 0; }

/* roundf(v) into [-128, 127] (NaN: 0). */
static inline int8_t round_q8(float v)
{
    v = roundf(v);
    return v >= 127.0f ? 127 : v <= -128.0f ? -128 : v == v ? (int8_t)v : 0;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ------------------------------------------------------------------ 32-element blocks */

static void q8_0_block(const float *x, struct ra_block_q8_0 *b)
{
    float amax = 0.0f;
    for (int j = 0; j < RA_QK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = ra_f32_to_f16(d);
    for (int j = 0; j < RA_QK; j++)
        b->qs[j] = round_q8(x[j] * id);
}

/* Q4_0: the element of largest magnitude maps to -8 exactly (d carries its sign). */
static void q4_0_block(const float *x, struct ra_block_q4_0 *b)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < RA_QK; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = ra_f32_to_f16(d);
    for (int j = 0; j < RA_QK / 2; j++) {
        /* the +8.5 shift and truncation: rounding half up */
        const int lo = trunc_q4(x[j] * id + 8.5f);
        const int hi = trunc_q4(x[j + RA_QK / 2] * id + 8.5f);
        b->qs[j] = (uint8_t)(lo | hi << 4);
    }
}

/* Q4_1: 16 levels from the block's min to its max. */
static void q4_1_block(const float *x, struct ra_block_q4_1 *b)
{
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < RA_QK; j++) {
        min = x[j] < min ? x[j] : min;
        max = x[j] > max ? x[j] : max;
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = ra_f32_to_f16(d);
    b->m = ra_f32_to_f16(min);
    for (int j = 0; j < RA_QK / 2; j++) {
        const int lo = trunc_q4((x[j] - min) * id + 0.5f);
        const int hi = trunc_q4((x[j + RA_QK / 2] - min) * id + 0.5f);
        b->qs[j] = (uint8_t)(lo | hi << 4);
    }
}

/* ------------------------------------------------------------------ Q4_K */

/* The weighted least-squares fit of x[0..n) ~ scale * L + min, L in
 * [0, nmax], min <= 0 (ggml's make_qkx2_quants with Q4_K's arguments): start
 * from the range [min(x, 0), max(x)] split in nmax steps, then try 21 grid
 * spacings (nmax - 1 + 0.1 s, s = 0..20), solving for scale and min on each
 * rounding and keeping the one of least error. Returns the scale; *neg_min =
 * -min. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min)
{
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        min = x[i] < min ? x[i] : min;
        max = x[i] > max ? x[i] : max;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(round_even(iscale * (x[i] - min)), 0, nmax);
        const float diff = scale * L[i] + min - x[i];
        best += w[i] * (diff * diff);
    }
    uint8_t trial[RA_QK];
    for (int s = 0; s <= 20; s++) {
        iscale = (-1.0f + 0.1f * s + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(round_even(iscale * (x[i] - min)), 0, nmax);
            trial[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0))
            continue;
        float t_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float t_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (t_min > 0) {
            t_min = 0;
            t_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            const float diff = t_scale * trial[i] + t_min - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best) {
            memcpy(L, trial, (size_t)n);
            best = err;
            scale = t_scale;
            min = t_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Sub-block j's 6-bit scale and min into Q4_K's 12 bytes: j < 4 in the low 6
 * bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4, their top 2
 * bits in the spare top bits of bytes j - 4 and j. */
static void pack_k4(uint8_t *sc, int j, int ls, int lm)
{
    if (j < 4) {
        sc[j] = (uint8_t)ls;
        sc[j + 4] = (uint8_t)lm;
    } else {
        sc[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
        sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
        sc[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

static void unpack_k4(const uint8_t *sc, int j, int *ls, int *lm)
{
    if (j < 4) {
        *ls = sc[j] & 63;
        *lm = sc[j + 4] & 63;
    } else {
        *ls = (sc[j + 4] & 0xF) | (sc[j - 4] >> 6) << 4;
        *lm = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
    }
}

static void q4_k_block(const float *x, struct ra_block_q4_k *b)
{
    uint8_t L[RA_QK_K];
    float w[32], scales[8], mins[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        const float rms = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = rms + fabsf(xs[l]); /* favour the larger values, but never ignore the small */
        scales[j] = fit_scale_min(32, 15, xs, w, L + 32 * j, &mins[j]);
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(b->scales, 0, sizeof b->scales);
    for (int j = 0; j < 8; j++) {
        const uint8_t ls = (uint8_t)round_even(inv_scale * scales[j]), lm = (uint8_t)round_even(inv_min * mins[j]);
        pack_k4(b->scales, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
    b->d = ra_f32_to_f16(max_scale / 63.f);
    b->dmin = ra_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int ls, lm;
        unpack_k4(b->scales, j, &ls, &lm);
        const float d = ra_f16_to_f32(b->d) * ls;
        if (d == 0.0f)
            continue; /* the fit's values stay: they dequantize to the min either way */
        const float dm = ra_f16_to_f32(b->dmin) * lm;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)clampi(round_even((x[32 * j + i] + dm) / d), 0, 15);
    }
    /* each 64 values: the first 32 in the low nibbles of 32 bytes, the next 32 in the high */
    for (int j = 0; j < RA_QK_K / 64; j++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * j + l] = (uint8_t)(L[64 * j + l] | L[64 * j + 32 + l] << 4);
}

/* ------------------------------------------------------------------ Q6_K */

/* The scale of x[0..n) ~ scale * (L - nmax), L - nmax in [-nmax, nmax - 1],
 * weighted by x² (ggml's make_qx_quants, rmse_type 1): the largest |x|
 * takes -nmax, then 18 other spacings (nmax ± 0.1 s) are tried, keeping the
 * one of least weighted error (largest sumlx² / suml2). */
static float fit_scale(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < NEAR_ZERO) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int s = -9; s <= 9; s++) {
        if (s == 0)
            continue;
        iscale = -(nmax + 0.1f * s) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(round_even(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void q6_k_block(const float *x, struct ra_block_q6_k *b)
{
    int8_t L[RA_QK_K];
    float scales[RA_QK_K / 16], max_scale = 0, max_abs = 0;
    for (int s = 0; s < RA_QK_K / 16; s++) {
        scales[s] = fit_scale(16, 32, x + 16 * s, L + 16 * s);
        if (fabsf(scales[s]) > max_abs) {
            max_abs = fabsf(scales[s]);
            max_scale = scales[s];
        }
    }
    memset(b, 0, sizeof *b);
    if (max_abs < NEAR_ZERO)
        return;
    const float iscale = -128.f / max_scale; /* the largest scale becomes -128 (clamped to 127 if positive) */
    b->d = ra_f32_to_f16(1 / iscale);
    for (int s = 0; s < RA_QK_K / 16; s++) {
        const int v = round_even(iscale * scales[s]);
        b->scales[s] = (int8_t)(v < 127 ? v : 127);
    }
    for (int s = 0; s < RA_QK_K / 16; s++) {
        const float d = ra_f16_to_f32(b->d) * b->scales[s];
        if (d == 0.0f)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * s + i] = (int8_t)(clampi(round_even(x[16 * s + i] / d), -32, 31) + 32);
    }
    /* each 128 values, in four quarters q0..q3 of 32: low nibbles of q0 and
     * q2 share 32 bytes of ql, q1 and q3 the next 32; the top 2 bits of all
     * four go into one byte of qh (q0 lowest) */
    for (int h = 0; h < RA_QK_K / 128; h++) {
        const uint8_t *Lh = (const uint8_t *)L + 128 * h;
        uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((Lh[l] & 0xF) | (Lh[l + 64] & 0xF) << 4);
            ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | (Lh[l + 96] & 0xF) << 4);
            qh[l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
        }
    }
}

/* ------------------------------------------------------------------ the entry */

int ra_quant_quantize(enum ra_dtype t, const float *src, void *dst, int64_t n)
{
    if (!ra_dtype_is_quant(t))
        return ra_error_set(RA_EINVAL, "quantize: %s is not a block format", ra_dtype_name(t));
    const int64_t block = ra_dtype_block(t);
    if (n < 0 || n % block != 0)
        return ra_error_set(RA_EINVAL, "quantize: %lld values are not whole blocks of %lld (%s)", (long long)n,
                            (long long)block, ra_dtype_name(t));
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(src[i]))
            return ra_error_set(RA_EINVAL, "quantize: value %lld is %s (only finite values quantize)", (long long)i,
                                isnan(src[i]) ? "NaN" : src[i] > 0 ? "+Inf" : "-Inf");
    unsigned char *out = dst;
    const size_t bytes = ra_dtype_block_bytes(t);
    for (int64_t i = 0; i < n / block; i++, src += block, out += bytes) {
        switch (t) {
        case RA_DTYPE_Q8_0: q8_0_block(src, (struct ra_block_q8_0 *)out); break;
        case RA_DTYPE_Q4_0: q4_0_block(src, (struct ra_block_q4_0 *)out); break;
        case RA_DTYPE_Q4_1: q4_1_block(src, (struct ra_block_q4_1 *)out); break;
        case RA_DTYPE_Q4_K: q4_k_block(src, (struct ra_block_q4_k *)out); break;
        case RA_DTYPE_Q6_K: q6_k_block(src, (struct ra_block_q6_k *)out); break;
        default: break;
        }
    }
    return RA_OK;
}
