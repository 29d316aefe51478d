/* Causal attention on the CPU, block by block with an online softmax.
 *
 * Work is split into (query head, block of BQ queries) items. Each item walks
 * the key blocks [0, BK), [BK, 2BK), ... up to its last query's position and
 * stops there, so the masked upper triangle is never computed: attention work
 * follows the lower triangle. Key blocks sit at absolute positions, so a
 * query's result does not depend on how the prompt was split into spans. */
#include "attention_cpu.h"
#include "status.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define BQ 32
#define BK 64

/* exp(x) for x <= 0 (softmax arguments), ~2 ulp, branch-free so it vectorises:
 * x = k ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^k by bits. */
static inline float exp_neg(float x)
{
    x = x < -87.0f ? -87.0f : x;
    float k = __builtin_roundf(x * 1.44269504088896341f);
    float r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { float f; int i; } scale = { .i = ((int)k + 127) << 23 };
    return p * scale.f;
}

/* One item: queries [q0, q0+nq) of head h (positions start+q0...). */
static void attend_block(float *out, const float *q, const float *k_cache, const float *v_cache,
                         int start, int q0, int nq, int h, const struct ra_attention_shape *s)
{
    const int hd = s->head_dim, kvh = h / (s->n_heads / s->n_kv_heads);
    const float scale = 1.0f / sqrtf((float)hd);
    float kt[RA_ATTN_MAX_HEAD_DIM * BK] __attribute__((aligned(64)));
    float acc[BQ * RA_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float qs[BQ * RA_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float sc[BQ][BK] __attribute__((aligned(64)));
    float mx[BQ], sum[BQ];

    for (int r = 0; r < nq; r++) {
        const float *qr = q + (size_t)(q0 + r) * s->q_stride + (size_t)h * hd;
        for (int d = 0; d < hd; d++)
            qs[r * hd + d] = qr[d] * scale;
        mx[r] = -FLT_MAX;
        sum[r] = 0;
    }
    memset(acc, 0, sizeof(float) * (size_t)nq * hd);

    const int last = start + q0 + nq - 1; /* position of the item's last query */
    for (int kb = 0; kb <= last; kb += BK) {
        const int nk = last - kb + 1 < BK ? last - kb + 1 : BK;
        /* K block transposed, so scores vectorise over keys. */
        for (int j = 0; j < nk; j++) {
            const float *kr = k_cache + (size_t)(kb + j) * s->kv_stride + (size_t)kvh * hd;
            for (int d = 0; d < hd; d++)
                kt[d * BK + j] = kr[d];
        }
        for (int j = nk; j < BK; j++)
            for (int d = 0; d < hd; d++)
                kt[d * BK + j] = 0;

        for (int r = 0; r < nq; r++) {
            const int pos = start + q0 + r;
            if (pos < kb)
                continue; /* this query sees nothing of the block */
            float srow[BK] __attribute__((aligned(64))) = { 0 };
            const float *qr = qs + r * hd;
            for (int d = 0; d < hd; d++) {
                const float qv = qr[d];
                const float *kd = kt + d * BK;
                for (int j = 0; j < BK; j++)
                    srow[j] += qv * kd[j];
            }
            const int visible = pos - kb + 1 < nk ? pos - kb + 1 : nk;
            float m = mx[r];
            for (int j = 0; j < visible; j++)
                m = srow[j] > m ? srow[j] : m;
            const float rescale = exp_neg(mx[r] - m);
            float l = 0;
            for (int j = 0; j < BK; j++) {
                float e = exp_neg(srow[j] - m);
                sc[r][j] = j < visible ? e : 0.0f;
                l += sc[r][j];
            }
            sum[r] = sum[r] * rescale + l;
            mx[r] = m;
            float *ar = acc + r * hd;
            if (rescale != 1.0f)
                for (int d = 0; d < hd; d++)
                    ar[d] *= rescale;
            for (int j = 0; j < visible; j++) {
                const float p = sc[r][j];
                const float *vr = v_cache + (size_t)(kb + j) * s->kv_stride + (size_t)kvh * hd;
                for (int d = 0; d < hd; d++)
                    ar[d] += p * vr[d];
            }
        }
    }
    for (int r = 0; r < nq; r++) {
        float *o = out + (size_t)(q0 + r) * s->q_stride + (size_t)h * hd;
        const float inv = 1.0f / sum[r];
        for (int d = 0; d < hd; d++)
            o[d] = acc[r * hd + d] * inv;
    }
}

int ra_attention_cpu(float *out, const float *q, const float *k_cache, const float *v_cache,
                     int start, int n, const struct ra_attention_shape *s)
{
    if (s->head_dim > RA_ATTN_MAX_HEAD_DIM || s->n_heads % s->n_kv_heads != 0)
        return ra_error_set(RA_EUNSUPPORTED, "attention: head dimension %d exceeds %d or heads %d/%d do not group",
                            s->head_dim, RA_ATTN_MAX_HEAD_DIM, s->n_heads, s->n_kv_heads);
    const int qblocks = (n + BQ - 1) / BQ;
    const int items = qblocks * s->n_heads;
    /* Later query blocks see more keys: hand them out first, dynamically. */
#pragma omp parallel for schedule(dynamic, 1)
    for (int it = 0; it < items; it++) {
        const int qb = qblocks - 1 - it / s->n_heads, h = it % s->n_heads;
        const int q0 = qb * BQ, nq = n - q0 < BQ ? n - q0 : BQ;
        attend_block(out, q, k_cache, v_cache, start, q0, nq, h, s);
    }
    return RA_OK;
}
