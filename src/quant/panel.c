/* Panels of int8-ready weights and their activations: packing and the plain-C
 * reference GEMM; see panel.h. */
#include "panel.h"
#include "half.h"
#include "quant.h"

#include <math.h>
#include <string.h>

int ra_qpanel_group(enum ra_dtype t) { return t == RA_DTYPE_Q6_K ? 16 : RA_QK; }

int ra_qpanel_max_u(enum ra_dtype t) { return t == RA_DTYPE_Q8_0 ? 255 : t == RA_DTYPE_Q6_K ? 63 : 15; }

size_t ra_qpanel_bytes(int group, int64_t k)
{
    const size_t bytes = (size_t)k * RA_QP_ROWS + 2 * sizeof(float) * RA_QP_ROWS * (size_t)(k / group);
    return (bytes + 63) / 64 * 64;
}

/* Row n of a panel being packed: its groups' scales and offsets, and its
 * bytes, decoded a block at a time into element order (e) and stored 4 at a
 * time into their place in u (columns c..c+3 of row n at u[16 c + 4 n]). */
struct qp_row {
    uint8_t *u;
    float *scale, *offset;
    int n;
};

static void put_u(const struct qp_row *r, int64_t c0, const uint8_t *e, int count)
{
    for (int i = 0; i < count; i += 4)
        memcpy(r->u + 16 * (c0 + i) + 4 * r->n, e + i, 4);
}

static void put_group(const struct qp_row *r, int64_t g, float scale, float offset)
{
    r->scale[RA_QP_ROWS * g + r->n] = scale;
    r->offset[RA_QP_ROWS * g + r->n] = offset;
}

static void row_q8_0(const struct qp_row *r, const void *w, int64_t k)
{
    const struct ra_block_q8_0 *b = w;
    uint8_t e[RA_QK];
    for (int64_t i = 0; i < k / RA_QK; i++) {
        const float d = ra_f16_to_f32(b[i].d);
        put_group(r, i, d, -128.0f * d);
        for (int j = 0; j < RA_QK; j++)
            e[j] = (uint8_t)(b[i].qs[j] + 128);
        put_u(r, RA_QK * i, e, RA_QK);
    }
}

/* Q4_0 and Q4_1 block i: element j in byte j's low nibble, j + 16 in its high. */
static void nibbles32(const struct qp_row *r, int64_t i, const uint8_t *qs)
{
    uint8_t e[RA_QK];
    for (int j = 0; j < RA_QK / 2; j++) {
        e[j] = qs[j] & 0x0f;
        e[j + RA_QK / 2] = qs[j] >> 4;
    }
    put_u(r, RA_QK * i, e, RA_QK);
}

static void row_q4_0(const struct qp_row *r, const void *w, int64_t k)
{
    const struct ra_block_q4_0 *b = w;
    for (int64_t i = 0; i < k / RA_QK; i++) {
        const float d = ra_f16_to_f32(b[i].d);
        put_group(r, i, d, -8.0f * d);
        nibbles32(r, i, b[i].qs);
    }
}

static void row_q4_1(const struct qp_row *r, const void *w, int64_t k)
{
    const struct ra_block_q4_1 *b = w;
    for (int64_t i = 0; i < k / RA_QK; i++) {
        put_group(r, i, ra_f16_to_f32(b[i].d), ra_f16_to_f32(b[i].m));
        nibbles32(r, i, b[i].qs);
    }
}

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

/* Q4_K: each 32 bytes of qs hold sub-block 2i (low nibbles) and 2i + 1 (high). */
static void row_q4_k(const struct qp_row *r, const void *w, int64_t k)
{
    const struct ra_block_q4_k *b = w;
    uint8_t e[RA_QK_K];
    for (int64_t i = 0; i < k / RA_QK_K; i++) {
        const float d = ra_f16_to_f32(b[i].d), dmin = ra_f16_to_f32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            q4k_scale_min(j, b[i].scales, &sc, &mn);
            put_group(r, 8 * i + j, d * (float)sc, -(dmin * (float)mn));
        }
        for (int h = 0; h < 4; h++)
            for (int l = 0; l < 32; l++) {
                e[64 * h + l] = b[i].qs[32 * h + l] & 0x0f;
                e[64 * h + 32 + l] = b[i].qs[32 * h + l] >> 4;
            }
        put_u(r, RA_QK_K * i, e, RA_QK_K);
    }
}

/* Q6_K: per half of 128 elements, element l of quarter g takes its low 4
 * bits from ql (g = 0, 1: low nibbles of ql[l], ql[l + 32]; g = 2, 3: their
 * high nibbles) and its high 2 from bits 2g of qh[l]; 16 int8 scales of 16. */
static void row_q6_k(const struct qp_row *r, const void *w, int64_t k)
{
    const struct ra_block_q6_k *b = w;
    uint8_t e[RA_QK_K];
    for (int64_t i = 0; i < k / RA_QK_K; i++) {
        const float d = ra_f16_to_f32(b[i].d);
        for (int s = 0; s < RA_QK_K / 16; s++) {
            const float scale = d * (float)b[i].scales[s];
            put_group(r, 16 * i + s, scale, -32.0f * scale);
        }
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = b[i].ql + 64 * half, *qh = b[i].qh + 32 * half;
            uint8_t *o = e + 128 * half;
            for (int l = 0; l < 32; l++) {
                o[l] = (uint8_t)((ql[l] & 0x0f) | (qh[l] & 3) << 4);
                o[l + 32] = (uint8_t)((ql[l + 32] & 0x0f) | (qh[l] >> 2 & 3) << 4);
                o[l + 64] = (uint8_t)(ql[l] >> 4 | (qh[l] >> 4 & 3) << 4);
                o[l + 96] = (uint8_t)(ql[l + 32] >> 4 | (qh[l] >> 6 & 3) << 4);
            }
        }
        put_u(r, RA_QK_K * i, e, RA_QK_K);
    }
}

void ra_qpanel_pack(void *panel, const void *w, enum ra_dtype t, int64_t k, int nrows)
{
    const int group = ra_qpanel_group(t);
    const size_t row_bytes = ra_dtype_row_bytes(t, k);
    if (nrows < RA_QP_ROWS) /* every byte of a full panel is written below */
        memset(panel, 0, ra_qpanel_bytes(group, k));
    for (int n = 0; n < nrows && n < RA_QP_ROWS; n++) {
        const struct qp_row r = { ra_qpanel_u(panel), ra_qpanel_scale(panel, k), ra_qpanel_offset(panel, k, group), n };
        const void *src = (const char *)w + (size_t)n * row_bytes;
        switch (t) {
        case RA_DTYPE_Q8_0: row_q8_0(&r, src, k); break;
        case RA_DTYPE_Q4_0: row_q4_0(&r, src, k); break;
        case RA_DTYPE_Q4_1: row_q4_1(&r, src, k); break;
        case RA_DTYPE_Q4_K: row_q4_k(&r, src, k); break;
        case RA_DTYPE_Q6_K: row_q6_k(&r, src, k); break;
        default: return;
        }
    }
}

/* ------------------------------------------------------------------ activations */

static size_t align64(size_t b) { return (b + 63) / 64 * 64; }

size_t ra_qact_bytes(int64_t k, int group, int n)
{
    return align64((size_t)n * (size_t)k) + align64(sizeof(float) * (size_t)n * (size_t)(k / RA_QK)) +
           align64(sizeof(float) * (size_t)n * (size_t)(k / group));
}

void ra_qact_bind(struct ra_qact *a, void *buf, int64_t k, int group, int n)
{
    char *p = buf;
    a->q = (int8_t *)p;
    p += align64((size_t)n * (size_t)k);
    a->d = (float *)p;
    p += align64(sizeof(float) * (size_t)n * (size_t)(k / RA_QK));
    a->s = (float *)p;
    a->k = k;
    a->group = group;
}

void ra_qact_quantize_ref(struct ra_qact *a, int t, const float *x)
{
    const int64_t k = a->k;
    int8_t *q = a->q + (size_t)t * (size_t)k;
    float *d = a->d + (size_t)t * (size_t)(k / RA_QK), *s = a->s + (size_t)t * (size_t)(k / a->group);
    for (int64_t i = 0; i < k / RA_QK; i++) {
        struct ra_block_q8x b;
        ra_quant_act_ref(RA_DTYPE_Q8_0, x + RA_QK * i, &b, RA_QK);
        memcpy(q + RA_QK * i, b.qs, RA_QK);
        d[i] = b.d;
    }
    for (int64_t g = 0; g < k / a->group; g++) {
        int sum = 0;
        for (int c = 0; c < a->group; c++)
            sum += q[a->group * g + c];
        s[g] = d[a->group * g / RA_QK] * (float)sum;
    }
}

/* ------------------------------------------------------------------ reference GEMM */

void ra_qpanel_gemm_ref(float *y, int ldy, const struct ra_qact *a, int n_tok, const void *panels, int np,
                        int ncols)
{
    const int64_t k = a->k;
    const int group = a->group;
    const size_t pbytes = ra_qpanel_bytes(group, k);
    for (int p = 0; p < np; p++) {
        void *panel = (char *)panels + (size_t)p * pbytes;
        const uint8_t *u = ra_qpanel_u(panel);
        const float *scale = ra_qpanel_scale(panel, k), *offset = ra_qpanel_offset(panel, k, group);
        for (int n = 0; n < RA_QP_ROWS && RA_QP_ROWS * p + n < ncols; n++)
            for (int t = 0; t < n_tok; t++) {
                const int8_t *q = a->q + (size_t)t * (size_t)k;
                const float *d = a->d + (size_t)t * (size_t)(k / RA_QK), *s = a->s + (size_t)t * (size_t)(k / group);
                float acc = 0;
                for (int64_t g = 0; g < k / group; g++) {
                    int32_t dot = 0;
                    for (int c = 0; c < group; c++) {
                        const int64_t col = group * g + c;
                        dot += u[64 * (col / 4) + 4 * n + col % 4] * q[col];
                    }
                    acc += scale[RA_QP_ROWS * g + n] * d[group * g / RA_QK] * (float)dot +
                           offset[RA_QP_ROWS * g + n] * s[g];
                }
                y[(size_t)t * ldy + RA_QP_ROWS * p + n] = acc;
            }
    }
}
