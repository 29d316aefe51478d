/* The test oracle: a scalar double-precision Llama forward pass, see ref_forward.h.
 *
 * Deliberately naive. Its value is that it shares nothing with the kernels it
 * checks (no blocking, no online softmax, no fast exp, no BLAS, its own bf16
 * and f16 decoding), so a bug there cannot hide by being repeated here. */
#include "ref_forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ref_kv_init(struct ref_kv *kv, int n_layers, int kv_dim, int capacity)
{
    const size_t count = (size_t)n_layers * capacity * kv_dim;
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->capacity = capacity;
    kv->round_bf16 = 0;
    kv->k = calloc(count, sizeof(double));
    kv->v = calloc(count, sizeof(double));
    if (!kv->k || !kv->v) {
        ref_kv_free(kv);
        return -1;
    }
    return 0;
}

void ref_kv_free(struct ref_kv *kv)
{
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

/* ---------------------------------------------------------------- weights */

/* Decoded from the bit fields by the formats' definitions, not by the
 * runtime's half.h, so a decoding bug there shows up as a difference. */
static double bf16_value(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16; /* bf16 is the top half of an fp32 */
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* x to the nearest value with 8 significant bits (bf16's), ties to even, by
 * frexp and rint rather than half.h's bit arithmetic; as bf16, the exponent
 * range of fp32 (the oracle's values are far inside it). */
static double bf16_round(double x)
{
    int e;
    const double m = frexp(x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    return ldexp(rint(m * 256.0), e - 8);
}

static double f16_value(uint16_t h)
{
    const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 31)
        return mant ? NAN : sign ? -INFINITY : INFINITY;
    /* (1024 + mant) * 2^(exp-25), or mant * 2^-24 when subnormal (exp == 0),
     * with the power of two built from a double's exponent field */
    const double significand = exp ? 1024 + mant : mant;
    const uint64_t bits = (uint64_t)(1023 + (exp ? exp - 25 : -24)) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return sign ? -significand * scale : significand * scale;
}

/* Row r of a weight tensor, widened to double element by element. */
static void weight_row(double *dst, const struct ra_tensor *t, int64_t r)
{
    const int64_t n = t->cols, first = r * n;
    const float *f32 = t->data;
    const uint16_t *u16 = t->data;
    for (int64_t j = 0; j < n; j++)
        switch (t->dtype) {
        case RA_DTYPE_F32: dst[j] = f32[first + j]; break;
        case RA_DTYPE_BF16: dst[j] = bf16_value(u16[first + j]); break;
        case RA_DTYPE_F16: dst[j] = f16_value(u16[first + j]); break;
        default: dst[j] = NAN;
        }
}

/* ---------------------------------------------------------------- the ops, as llama2.c writes them */

static void rmsnorm(double *o, const double *x, const struct ra_tensor *w, int size, double eps)
{
    double wrow[size], ss = 0;
    weight_row(wrow, w, 0);
    for (int j = 0; j < size; j++)
        ss += x[j] * x[j];
    const double inv = 1.0 / sqrt(ss / size + eps);
    for (int j = 0; j < size; j++)
        o[j] = wrow[j] * (inv * x[j]);
}

/* xout[d] = W[d][n] · x[n] */
static void matmul(double *xout, const double *x, const struct ra_tensor *w, int n, int d)
{
    double row[n];
    for (int i = 0; i < d; i++) {
        weight_row(row, w, i);
        double val = 0;
        for (int j = 0; j < n; j++)
            val += row[j] * x[j];
        xout[i] = val;
    }
}

/* Rotates pair p of each head of x at position pos by the angle
 * pos * theta^(-2p/head_dim): the pair is (2p, 2p+1) in Meta's and
 * llama2.c's convention, (p, p + head_dim/2) in Hugging Face's rotate_half.
 * The pair's dimensions are named explicitly, apart from the kernels' loops.
 * The angle is llama2.c's, rounded to float exactly as llama2.c rounds it:
 * that float is what the model means by "position pos" (the golden tokens
 * are llama2.c's), and at pos ~ 1000 an exact angle differs from it by up
 * to 1e-4 rad, which would force a tolerance loose enough to hide real bugs.
 * Everything after the angle is double. */
void ref_rope(double *x, int n_heads, int head_dim, int pos, float theta, enum ra_rope_style style,
              const float *factors)
{
    for (int h = 0; h < n_heads; h++)
        for (int p = 0; p < head_dim / 2; p++) {
            const float base = 1.0f / powf(theta, (float)(2 * p) / (float)head_dim);
            const float freq = factors ? base / factors[p] : base; /* scaled: the same float division */
            const float angle = (float)pos * freq;
            const double c = cos(angle), s = sin(angle);
            const int first = style == RA_ROPE_HALF ? p : 2 * p;
            const int second = style == RA_ROPE_HALF ? p + head_dim / 2 : 2 * p + 1;
            double *v = x + h * head_dim;
            const double a = v[first], b = v[second];
            v[first] = a * c - b * s;
            v[second] = a * s + b * c;
        }
}

int ref_attention_rows(double *out, const double *q, const int *qpos, int n, const double *k, const double *v,
                       const int *kpos, int nk, int n_heads, int n_kv_heads, int head_dim)
{
    const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    double *att = malloc((size_t)(nk > 0 ? nk : 1) * sizeof(double));
    if (!att)
        return -1;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < n_heads; h++) {
            const double *qh = q + (size_t)i * q_dim + h * head_dim;
            const int g = h / group;
            double max = -INFINITY, sum = 0;
            for (int t = 0; t < nk; t++) {
                att[t] = -INFINITY; /* masked: weight 0 */
                if (kpos[t] > qpos[i])
                    continue;
                const double *kt = k + (size_t)t * kv_dim + g * head_dim;
                double score = 0;
                for (int d = 0; d < head_dim; d++)
                    score += qh[d] * kt[d];
                att[t] = score / sqrt((double)head_dim);
                max = att[t] > max ? att[t] : max;
            }
            for (int t = 0; t < nk; t++) {
                att[t] = kpos[t] <= qpos[i] ? exp(att[t] - max) : 0;
                sum += att[t];
            }
            double *oh = out + (size_t)i * q_dim + h * head_dim;
            for (int d = 0; d < head_dim; d++)
                oh[d] = 0;
            for (int t = 0; t < nk && sum > 0; t++) {
                const double *vt = v + (size_t)t * kv_dim + g * head_dim;
                for (int d = 0; d < head_dim; d++)
                    oh[d] += att[t] / sum * vt[d];
            }
        }
    free(att);
    return 0;
}

int ref_attention(double *out, const double *q, const double *k, const double *v, int start, int n,
                  int n_heads, int n_kv_heads, int head_dim)
{
    const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    double *att = malloc((size_t)(start + n) * sizeof(double));
    if (!att)
        return -1;
    for (int i = 0; i < n; i++) {
        const int pos = start + i;
        for (int h = 0; h < n_heads; h++) {
            const double *qh = q + (size_t)i * q_dim + h * head_dim;
            const int g = h / group;
            /* scores over keys 0..pos, then their softmax */
            double max = -INFINITY;
            for (int t = 0; t <= pos; t++) {
                const double *kt = k + (size_t)t * kv_dim + g * head_dim;
                double score = 0;
                for (int d = 0; d < head_dim; d++)
                    score += qh[d] * kt[d];
                att[t] = score / sqrt((double)head_dim);
                if (att[t] > max)
                    max = att[t];
            }
            double sum = 0;
            for (int t = 0; t <= pos; t++) {
                att[t] = exp(att[t] - max);
                sum += att[t];
            }
            /* the weighted sum of the values */
            double *oh = out + (size_t)i * q_dim + h * head_dim;
            for (int d = 0; d < head_dim; d++)
                oh[d] = 0;
            for (int t = 0; t <= pos; t++) {
                const double *vt = v + (size_t)t * kv_dim + g * head_dim;
                const double a = att[t] / sum;
                for (int d = 0; d < head_dim; d++)
                    oh[d] += a * vt[d];
            }
        }
    }
    free(att);
    return 0;
}

/* ---------------------------------------------------------------- the forward pass */

int ref_forward(const struct ra_model *m, const int32_t *tokens, int start, int n, struct ref_kv *kv,
                double *logits)
{
    const struct ra_config *c = &m->config;
    const struct ra_weights *w = &m->weights;
    const int dim = c->dim, hidden = c->hidden_dim, hd = c->head_dim, kv_dim = c->n_kv_heads * hd;
    if (start < 0 || start + n > kv->capacity || kv->n_layers != c->n_layers || kv->kv_dim != kv_dim)
        return -1;
    double *x = malloc(dim * sizeof(double)), *xb = malloc(dim * sizeof(double));
    double *q = malloc(dim * sizeof(double)), *att = malloc(dim * sizeof(double));
    double *hb = malloc(hidden * sizeof(double)), *hb2 = malloc(hidden * sizeof(double));
    int rc = x && xb && q && att && hb && hb2 ? 0 : -1;

    for (int i = 0; rc == 0 && i < n; i++) {
        const int pos = start + i;
        weight_row(x, &w->embed, tokens[i]);

        for (int l = 0; l < c->n_layers; l++) {
            const struct ra_layer_weights *lw = &w->layers[l];
            double *k = ref_kv_k(kv, l, pos), *v = ref_kv_v(kv, l, pos);

            /* attention: q, k, v of this token, RoPE, then attend over rows 0..pos */
            rmsnorm(xb, x, &lw->attn_norm, dim, c->norm_eps);
            matmul(q, xb, &lw->wq, dim, dim);
            matmul(k, xb, &lw->wk, dim, kv_dim);
            matmul(v, xb, &lw->wv, dim, kv_dim);
            const float *factors = c->rope_scaled ? c->rope_factors : NULL;
            ref_rope(q, c->n_heads, hd, pos, c->rope_theta, c->rope_style, factors);
            ref_rope(k, c->n_kv_heads, hd, pos, c->rope_theta, c->rope_style, factors);
            for (int j = 0; kv->round_bf16 && j < kv_dim; j++) {
                k[j] = bf16_round(k[j]);
                v[j] = bf16_round(v[j]);
            }
            if (ref_attention(att, q, ref_kv_k(kv, l, 0), ref_kv_v(kv, l, 0), pos, 1, c->n_heads, c->n_kv_heads,
                              hd) != 0) {
                rc = -1;
                break;
            }
            matmul(xb, att, &lw->wo, dim, dim);
            for (int j = 0; j < dim; j++)
                x[j] += xb[j];

            /* feed-forward: w2(silu(w1(x)) * w3(x)) */
            rmsnorm(xb, x, &lw->ffn_norm, dim, c->norm_eps);
            matmul(hb, xb, &lw->w_gate, dim, hidden);
            matmul(hb2, xb, &lw->w_up, dim, hidden);
            for (int j = 0; j < hidden; j++)
                hb[j] = hb[j] / (1.0 + exp(-hb[j])) * hb2[j];
            matmul(xb, hb, &lw->w_down, hidden, dim);
            for (int j = 0; j < dim; j++)
                x[j] += xb[j];
        }

        if (rc == 0 && logits) {
            rmsnorm(xb, x, &w->final_norm, dim, c->norm_eps);
            matmul(logits + (size_t)i * c->vocab_size, xb, &w->output, dim, c->vocab_size);
        }
    }
    free(x);
    free(xb);
    free(q);
    free(att);
    free(hb);
    free(hb2);
    return rc;
}
