/* The forward pass over a span of tokens [start, start+n): see forward.h. */
#include "forward.h"
#include "backend.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Activations for up to `capacity` tokens, all backend buffers. */
struct ra_workspace {
    int capacity;
    float *x;      /* [n][dim] residual stream */
    float *xb;     /* [n][dim] normed input / projection output */
    float *q;      /* [n][dim] queries */
    float *att;    /* [n][dim] attention output */
    float *hb;     /* [n][hidden] gate */
    float *hb2;    /* [n][hidden] up */
    float *logits; /* [vocab] */
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void workspace_free(struct ra_backend *be, struct ra_workspace *ws)
{
    if (!ws)
        return;
    float *bufs[] = { ws->x, ws->xb, ws->q, ws->att, ws->hb, ws->hb2, ws->logits };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->ops->release(be, bufs[i]);
    free(ws);
}

static int workspace_reserve(struct ra_model *m, int n)
{
    struct ra_workspace *ws = m->ws;
    if (ws && ws->capacity >= n)
        return RA_OK;
    struct ra_backend *be = m->backend;
    const struct ra_config *c = &m->config;
    workspace_free(be, ws);
    m->ws = ws = calloc(1, sizeof *ws);
    if (!ws)
        return ra_error_set(RA_ENOMEM, "forward: out of memory");
    const size_t d = (size_t)n * c->dim * sizeof(float), h = (size_t)n * c->hidden_dim * sizeof(float);
    ws->capacity = n;
    ws->x = be->ops->alloc(be, d);
    ws->xb = be->ops->alloc(be, d);
    ws->q = be->ops->alloc(be, d);
    ws->att = be->ops->alloc(be, d);
    ws->hb = be->ops->alloc(be, h);
    ws->hb2 = be->ops->alloc(be, h);
    ws->logits = be->ops->alloc(be, (size_t)c->vocab_size * sizeof(float));
    if (!ws->x || !ws->xb || !ws->q || !ws->att || !ws->hb || !ws->hb2 || !ws->logits) {
        workspace_free(be, ws);
        m->ws = NULL;
        return ra_error_set(RA_ENOMEM, "forward: cannot allocate activations for %d tokens (%.1f MiB)", n,
                            (4.0 * (double)d + 2.0 * (double)h) / 1048576.0);
    }
    return RA_OK;
}

int ra_model_attach(struct ra_model *m, struct ra_backend *be)
{
    if (m->backend && m->ws)
        workspace_free(m->backend, m->ws);
    m->ws = NULL;
    m->backend = be;
    return RA_OK;
}

void ra_model_detach(struct ra_model *m)
{
    if (m->backend)
        workspace_free(m->backend, m->ws);
    m->ws = NULL;
    m->backend = NULL;
}

void ra_forward_flops(const struct ra_config *c, int start, int n, double *linear, double *attention)
{
    const double d = c->dim, kv = ra_config_kv_dim(c), h = c->hidden_dim, L = c->n_layers;
    const double tokens = n, pairs = (double)n * start + (double)n * (n + 1) / 2.0;
    *linear = L * 2.0 * tokens * (2.0 * d * d + 2.0 * d * kv + 3.0 * d * h);
    *attention = L * 4.0 * d * pairs; /* QKᵀ and PV over the visible keys */
}

static int check_span(const struct ra_model *m, const int32_t *tokens, int start, int n, const struct ra_kvcache *kv)
{
    const struct ra_config *c = &m->config;
    if (!m->backend)
        return ra_error_set(RA_EINVAL, "forward: no backend attached to the model");
    if (n <= 0 || start < 0)
        return ra_error_set(RA_EINVAL, "forward: empty or negative span [%d, %d)", start, start + n);
    if (start + n > c->seq_len)
        return ra_error_set(RA_ERANGE, "forward: positions up to %d exceed the model's context of %d tokens",
                            start + n, c->seq_len);
    if (start + n > kv->capacity || kv->n_layers != c->n_layers || kv->kv_dim != ra_config_kv_dim(c))
        return ra_error_set(RA_ERANGE, "forward: span [%d, %d) does not fit the KV cache (%d rows)",
                            start, start + n, kv->capacity);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return ra_error_set(RA_ERANGE, "forward: token id %d at position %d is outside the vocabulary (0..%d)",
                                tokens[i], start + i, c->vocab_size - 1);
    return RA_OK;
}

/* Runs one backend op, charging its time to a stats bucket when stats are on. */
#define OP(bucket, call)                                                 \
    do {                                                                 \
        double t0_ = m->stats ? now() : 0;                               \
        if ((rc = (call)) != RA_OK)                                      \
            goto out;                                                    \
        if (m->stats)                                                    \
            m->stats->bucket += now() - t0_;                             \
    } while (0)

#define HOOK(name)                                                               \
    do {                                                                         \
        if (xchg && xchg->name) {                                                \
            double t0_ = m->stats ? now() : 0;                                   \
            if ((rc = xchg->name(xchg->ctx, l, kv, start, n)) != RA_OK)          \
                goto out;                                                        \
            if (m->stats)                                                        \
                m->stats->t_exchange += now() - t0_;                             \
        }                                                                        \
    } while (0)

int ra_forward_span(struct ra_model *m, const int32_t *tokens, int start, int n,
                    struct ra_kvcache *kv, const struct ra_kv_exchange *xchg, float *logits_last)
{
    int rc;
    if ((rc = check_span(m, tokens, start, n, kv)) != RA_OK || (rc = workspace_reserve(m, n)) != RA_OK)
        return rc;
    struct ra_backend *be = m->backend;
    const struct ra_backend_ops *op = be->ops;
    const struct ra_config *c = &m->config;
    struct ra_workspace *ws = m->ws;
    const int d = c->dim, kvd = ra_config_kv_dim(c), hid = c->hidden_dim;
    const struct ra_attention_shape shape = { c->n_heads, c->n_kv_heads, c->head_dim, d, kvd };

    OP(t_other, op->embed(be, ws->x, &m->weights.embed, tokens, n));
    for (int l = 0; l < c->n_layers; l++) {
        const struct ra_layer_weights *w = &m->weights.layers[l];
        HOOK(layer_begin);
        OP(t_other, op->rmsnorm(be, ws->xb, ws->x, &w->attn_norm, n, d, c->norm_eps));
        OP(t_linear, op->matmul(be, ws->q, d, ws->xb, d, &w->wq, n));
        OP(t_linear, op->matmul(be, ra_kvcache_k(kv, l, start), kvd, ws->xb, d, &w->wk, n));
        OP(t_linear, op->matmul(be, ra_kvcache_v(kv, l, start), kvd, ws->xb, d, &w->wv, n));
        OP(t_other, op->rope(be, ws->q, d, n, c->n_heads, c->head_dim, start, c->rope_theta));
        OP(t_other, op->rope(be, ra_kvcache_k(kv, l, start), kvd, n, c->n_kv_heads, c->head_dim, start, c->rope_theta));
        HOOK(kv_ready);
        OP(t_attention, op->attention(be, ws->att, ws->q, kv->k[l], kv->v[l], start, n, &shape));
        OP(t_linear, op->matmul(be, ws->xb, d, ws->att, d, &w->wo, n));
        OP(t_other, op->add(be, ws->x, ws->xb, (size_t)n * d));
        OP(t_other, op->rmsnorm(be, ws->xb, ws->x, &w->ffn_norm, n, d, c->norm_eps));
        OP(t_linear, op->matmul(be, ws->hb, hid, ws->xb, d, &w->w_gate, n));
        OP(t_linear, op->matmul(be, ws->hb2, hid, ws->xb, d, &w->w_up, n));
        OP(t_other, op->swiglu(be, ws->hb, ws->hb2, (size_t)n * hid));
        OP(t_linear, op->matmul(be, ws->xb, d, ws->hb, hid, &w->w_down, n));
        OP(t_other, op->add(be, ws->x, ws->xb, (size_t)n * d));
        HOOK(layer_end);
    }
    if (logits_last) { /* only the span's last token needs the classifier */
        float *last = ws->x + (size_t)(n - 1) * d;
        OP(t_other, op->rmsnorm(be, ws->xb, last, &m->weights.final_norm, 1, d, c->norm_eps));
        OP(t_other, op->matmul(be, ws->logits, c->vocab_size, ws->xb, d, &m->weights.output, 1));
        OP(t_other, op->download(be, logits_last, ws->logits, (size_t)c->vocab_size * sizeof(float)));
    }
    if (m->stats) {
        double lin, att;
        ra_forward_flops(c, start, n, &lin, &att);
        m->stats->flop_linear += lin;
        m->stats->flop_attention += att;
        m->stats->tokens += n;
    }
out:
    return rc;
}
