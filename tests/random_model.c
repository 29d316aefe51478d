#include "random_model.h"
#include "half.h"
#include "quant/quant.h"
#include "status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15u;

void test_rand_seed(uint64_t seed)
{
    rng = seed * 0x9e3779b97f4a7c15u + 1; /* never 0, the one state xorshift cannot leave */
}

static uint64_t next_rand(void) /* xorshift64 */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

float test_frand(void)
{
    return (float)(next_rand() >> 40) / 8388608.0f - 1.0f;
}

int test_rand_int(int lo, int hi)
{
    return lo + (int)(next_rand() % (uint64_t)(hi - lo + 1));
}

static void random_tensor(struct ra_model *m, struct ra_tensor *t, int64_t rows, int64_t cols, enum ra_dtype dt,
                          float scale, float offset)
{
    const size_t n = (size_t)(rows * cols);
    void *data = ra_model_own(m, n * ra_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        const float v = offset + scale * test_frand();
        if (dt == RA_DTYPE_F32)
            ((float *)data)[i] = v;
        else if (dt == RA_DTYPE_BF16)
            ((uint16_t *)data)[i] = ra_f32_to_bf16(v);
        else
            ((uint16_t *)data)[i] = ra_f32_to_f16(v);
    }
    *t = (struct ra_tensor){ dt, rows, cols, data, NULL };
}

void test_random_model(struct ra_model *m, const struct ra_config *cfg, enum ra_dtype dt, float qk_gain)
{
    memset(m, 0, sizeof *m);
    m->config = *cfg;
    struct ra_config *c = &m->config;
    if (c->head_dim == 0)
        c->head_dim = c->dim / c->n_heads;
    const int64_t d = c->dim, kv = ra_config_kv_dim(c), h = c->hidden_dim;
    const float sd = 1.0f / sqrtf((float)d), sh = 1.0f / sqrtf((float)h);
    m->weights.layers = calloc((size_t)c->n_layers, sizeof *m->weights.layers);
    random_tensor(m, &m->weights.embed, c->vocab_size, d, dt, 1.0f, 0);
    for (int l = 0; l < c->n_layers; l++) {
        struct ra_layer_weights *w = &m->weights.layers[l];
        random_tensor(m, &w->attn_norm, 1, d, dt, 0.1f, 1.0f);
        random_tensor(m, &w->wq, d, d, dt, qk_gain * sd, 0);
        random_tensor(m, &w->wk, kv, d, dt, qk_gain * sd, 0);
        random_tensor(m, &w->wv, kv, d, dt, sd, 0);
        random_tensor(m, &w->wo, d, d, dt, sd, 0);
        random_tensor(m, &w->ffn_norm, 1, d, dt, 0.1f, 1.0f);
        random_tensor(m, &w->w_gate, h, d, dt, sd, 0);
        random_tensor(m, &w->w_down, d, h, dt, sh, 0);
        random_tensor(m, &w->w_up, h, d, dt, sd, 0);
    }
    random_tensor(m, &m->weights.final_norm, 1, d, dt, 0.1f, 1.0f);
    random_tensor(m, &m->weights.output, c->vocab_size, d, dt, sd, 0);
}

static int quantize_tensor(struct ra_model *m, struct ra_tensor *t, enum ra_dtype q, int dequantized)
{
    if (t->dtype != RA_DTYPE_F32 || t->rows < 2 || t->cols % ra_dtype_block(q) != 0)
        return RA_OK;
    const int64_t n = t->rows * t->cols;
    void *blocks = ra_model_own(m, (size_t)t->rows * ra_dtype_row_bytes(q, t->cols));
    float *values = dequantized ? ra_model_own(m, sizeof(float) * (size_t)n) : NULL;
    if (!blocks || (dequantized && !values))
        return ra_error_set(RA_ENOMEM, "test_quantize_model: out of memory");
    int rc = ra_quant_quantize(q, t->data, blocks, n);
    if (rc == RA_OK && dequantized)
        rc = ra_quant_dequantize(q, blocks, values, n);
    if (rc == RA_OK) {
        t->data = dequantized ? (const void *)values : blocks;
        t->dtype = dequantized ? RA_DTYPE_F32 : q;
    }
    return rc;
}

int test_quantize_model(struct ra_model *m, enum ra_dtype t, int dequantized)
{
    struct ra_weights *w = &m->weights;
    const int tied = w->output.data == w->embed.data;
    int rc = quantize_tensor(m, &w->embed, t, dequantized);
    for (int l = 0; rc == RA_OK && l < m->config.n_layers; l++) {
        struct ra_layer_weights *lw = &w->layers[l];
        struct ra_tensor *x[] = { &lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_down, &lw->w_up };
        for (size_t i = 0; i < sizeof x / sizeof x[0] && rc == RA_OK; i++)
            rc = quantize_tensor(m, x[i], t, dequantized);
    }
    if (rc == RA_OK && tied)
        w->output = w->embed;
    else if (rc == RA_OK)
        rc = quantize_tensor(m, &w->output, t, dequantized);
    return rc;
}
