/* InfiniGen's decode loop over a host KV pool, on a host-memory backend (the
 * CPU backend): the reference the offload framework's integration is checked
 * against, and what bench-decode measures quality with. The ops are the
 * backend's, called as forward.c calls them, so with every token selected a
 * step equals ra_forward_span's bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "infinigen.h"
#include "kvcache.h"
#include "sampler.h"
#include "status.h"

/* Host scratch for a pass over n tokens. */
struct pass {
    float *x, *xa, *q, *att, *hb, *hb2, *qs, *kg, *vg, *kd;
    int32_t *sel;
};

static void pass_free(struct pass *p)
{
    free(p->x);
    free(p->xa);
    free(p->q);
    free(p->att);
    free(p->hb);
    free(p->hb2);
    free(p->qs);
    free(p->kg);
    free(p->vg);
    free(p->kd);
    free(p->sel);
    memset(p, 0, sizeof *p);
}

/* rows: tokens of the pass; keys: rows a gathered K/V buffer must hold; att
 * also holds the logits. */
static int pass_init(struct pass *p, const struct ra_config *c, int rows, int keys)
{
    const size_t d = c->dim, h = c->hidden_dim, kvd = ra_config_kv_dim(c);
    memset(p, 0, sizeof *p);
    p->x = malloc(rows * d * sizeof(float));
    p->xa = malloc(rows * d * sizeof(float));
    p->q = malloc(rows * d * sizeof(float));
    p->att = malloc((rows * d > (size_t)c->vocab_size ? rows * d : (size_t)c->vocab_size) * sizeof(float));
    p->hb = malloc(rows * h * sizeof(float));
    p->hb2 = malloc(rows * h * sizeof(float));
    p->qs = malloc(d * sizeof(float));
    p->kg = malloc((size_t)(keys + 1) * kvd * sizeof(float));
    p->vg = malloc((size_t)(keys + 1) * kvd * sizeof(float));
    p->kd = malloc((size_t)(keys + 1) * kvd * sizeof(float));
    p->sel = malloc((size_t)(keys + 1) * c->n_kv_heads * sizeof(int32_t));
    if (!p->x || !p->xa || !p->q || !p->att || !p->hb || !p->hb2 || !p->qs || !p->kg || !p->vg || !p->kd ||
        !p->sel) {
        pass_free(p);
        return ra_error_set(RA_ENOMEM, "infinigen: out of memory for a pass over %d tokens", rows);
    }
    return RA_OK;
}

static int check_model(const struct ra_infinigen *ig, const struct ra_model *m)
{
    const struct ra_config *a = &ig->c, *b = &m->config;
    if (!m->backend)
        return ra_error_set(RA_EINVAL, "infinigen: no backend attached to the model");
    if (m->backend->ops->mem_kind(m->backend) != RA_MEM_HOST)
        return ra_error_set(RA_EUNSUPPORTED, "infinigen: the reference decode loop needs a host-memory backend, "
                            "not %s", m->backend->ops->name);
    if (a->n_layers != b->n_layers || a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
        a->head_dim != b->head_dim)
        return ra_error_set(RA_EINVAL, "infinigen: state made for another model shape");
    return RA_OK;
}

/* The feed-forward half of layer l over rows x [n] (attention output in att). */
static int layer_tail(struct ra_model *m, struct pass *p, int l, int n)
{
    struct ra_backend *be = m->backend;
    const struct ra_backend_ops *op = be->ops;
    const struct ra_config *c = &m->config;
    const struct ra_layer_weights *w = &m->weights.layers[l];
    const int d = c->dim, hid = c->hidden_dim;
    int rc;
    if ((rc = op->matmul(be, p->xa, d, p->att, d, &w->wo, n)) != RA_OK ||
        (rc = op->add(be, p->x, p->xa, (size_t)n * d)) != RA_OK ||
        (rc = op->rmsnorm(be, p->xa, p->x, &w->ffn_norm, n, d, c->norm_eps)) != RA_OK ||
        (rc = op->matmul(be, p->hb, hid, p->xa, d, &w->w_gate, n)) != RA_OK ||
        (rc = op->matmul(be, p->hb2, hid, p->xa, d, &w->w_up, n)) != RA_OK ||
        (rc = op->swiglu(be, p->hb, p->hb2, (size_t)n * hid)) != RA_OK ||
        (rc = op->matmul(be, p->xa, d, p->hb, hid, &w->w_down, n)) != RA_OK)
        return rc;
    return op->add(be, p->x, p->xa, (size_t)n * d);
}

static int logits_of(struct ra_model *m, struct pass *p, int row, float *logits)
{
    struct ra_backend *be = m->backend;
    const struct ra_config *c = &m->config;
    int rc = be->ops->rmsnorm(be, p->xa, p->x + (size_t)row * c->dim, &m->weights.final_norm, 1, c->dim,
                              c->norm_eps);
    if (rc == RA_OK)
        rc = be->ops->matmul(be, p->att, c->vocab_size, p->xa, c->dim, &m->weights.output, 1);
    if (rc == RA_OK)
        memcpy(logits, p->att, (size_t)c->vocab_size * sizeof(float));
    return rc;
}

/* A dense pass over tokens [0, n): calibrates (pool NULL) or fills the pool. */
static int dense_pass(struct ra_infinigen *ig, struct ra_kvpool *pool, struct ra_model *m, const int32_t *tokens,
                      int n, float *logits)
{
    int rc;
    if ((rc = check_model(ig, m)) != RA_OK)
        return rc;
    const struct ra_config *c = &m->config;
    const struct ra_rope rope = ra_config_rope(c);
    if (n <= 0 || n > c->seq_len)
        return ra_error_set(RA_ERANGE, "infinigen: %d prompt tokens for a context of %d", n, c->seq_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return ra_error_set(RA_ERANGE, "infinigen: token id %d outside the vocabulary", tokens[i]);
    struct ra_backend *be = m->backend;
    const struct ra_backend_ops *op = be->ops;
    const int d = c->dim, kvd = ra_config_kv_dim(c);
    const struct ra_attention_shape shape = { c->n_heads, c->n_kv_heads, c->head_dim, d, kvd, RA_DTYPE_F32 };
    struct pass p;
    struct ra_kvcache kv;
    if ((rc = pass_init(&p, c, n, 0)) != RA_OK)
        return rc;
    if ((rc = ra_kvcache_init(&kv, be, c->n_layers, kvd, n)) != RA_OK) {
        pass_free(&p);
        return rc;
    }
    if ((rc = op->embed(be, p.x, &m->weights.embed, tokens, n)) != RA_OK)
        goto out;
    for (int l = 0; l < c->n_layers; l++) {
        const struct ra_layer_weights *w = &m->weights.layers[l];
        float *k = ra_kvcache_k(&kv, l, 0), *v = ra_kvcache_v(&kv, l, 0);
        if ((rc = op->rmsnorm(be, p.xa, p.x, &w->attn_norm, n, d, c->norm_eps)) != RA_OK ||
            (rc = op->matmul(be, p.q, d, p.xa, d, &w->wq, n)) != RA_OK ||
            (rc = op->matmul(be, k, kvd, p.xa, d, &w->wk, n)) != RA_OK ||
            (rc = op->matmul(be, v, kvd, p.xa, d, &w->wv, n)) != RA_OK ||
            (rc = op->rope(be, p.q, d, &(struct ra_rows){ n, 0, NULL }, c->n_heads, c->head_dim, &rope)) != RA_OK ||
            (rc = op->rope(be, k, kvd, &(struct ra_rows){ n, 0, NULL }, c->n_kv_heads, c->head_dim, &rope)) != RA_OK)
            goto out;
        if (!pool) {
            if ((rc = ra_infinigen_skew_layer(ig, l, p.q, k, n)) != RA_OK)
                goto out;
        } else {
            for (int t = 0; t < n; t++) {
                int slot;
                if ((rc = ra_kvpool_insert(pool, l, t, k + (size_t)t * kvd, v + (size_t)t * kvd, &slot, NULL)) !=
                        RA_OK ||
                    (rc = ra_infinigen_kp_store(ig, l, slot, t, k + (size_t)t * kvd)) != RA_OK)
                    goto out;
            }
        }
        if (l + 1 == c->n_layers && !logits)
            break;
        if ((rc = op->attention(be, p.att, p.q, &(struct ra_rows){ n, 0, NULL }, k, v, &(struct ra_rows){ n, 0, NULL },
                                &shape)) != RA_OK ||
            (rc = layer_tail(m, &p, l, n)) != RA_OK)
            goto out;
    }
    if (logits)
        rc = logits_of(m, &p, n - 1, logits);
out:
    ra_kvcache_free(&kv);
    pass_free(&p);
    return rc;
}

int ra_infinigen_calibrate(struct ra_infinigen *ig, struct ra_model *m, const int32_t *tokens, int n)
{
    return dense_pass(ig, NULL, m, tokens, n, NULL);
}

int ra_infinigen_prefill(struct ra_infinigen *ig, struct ra_kvpool *pool, struct ra_model *m,
                         const int32_t *tokens, int n, float *logits)
{
    if (pool->capacity > ig->capacity)
        return ra_error_set(RA_EINVAL, "infinigen: pool of %d slots, partial key cache of %d", pool->capacity,
                            ig->capacity);
    return dense_pass(ig, pool, m, tokens, n, logits);
}

int ra_infinigen_decode(struct ra_infinigen *ig, struct ra_kvpool *pool, struct ra_model *m, int32_t token, int pos,
                        float *logits, struct ra_infinigen_step_stats *stats)
{
    int rc;
    if ((rc = check_model(ig, m)) != RA_OK)
        return rc;
    const struct ra_config *c = &m->config;
    const struct ra_rope rope = ra_config_rope(c);
    if (pos < 0 || pos >= c->seq_len || token < 0 || token >= c->vocab_size)
        return ra_error_set(RA_ERANGE, "infinigen: token %d at position %d (context %d, vocabulary %d)", token, pos,
                            c->seq_len, c->vocab_size);
    if (pool->capacity > ig->capacity)
        return ra_error_set(RA_EINVAL, "infinigen: pool of %d slots, partial key cache of %d", pool->capacity,
                            ig->capacity);
    struct ra_backend *be = m->backend;
    const struct ra_backend_ops *op = be->ops;
    const int d = c->dim, kvd = ra_config_kv_dim(c), G = c->n_kv_heads, H = c->n_heads;
    const int dense = ig->p.dense_layers; /* layers [0, dense) fetch every token */
    const struct ra_attention_shape shape = { H, G, c->head_dim, d, kvd, RA_DTYPE_F32 };
    struct pass p;
    double *head_recall = malloc((size_t)H * sizeof(double));
    int n_sel = -1; /* -1: no speculation for this layer, fetch every token */
    if (!head_recall)
        return ra_error_set(RA_ENOMEM, "infinigen: out of memory");
    if ((rc = pass_init(&p, c, 1, pool->capacity)) != RA_OK) {
        free(head_recall);
        return rc;
    }
    if (stats) {
        int *per_layer = stats->tokens_layer;
        *stats = (struct ra_infinigen_step_stats){ .recall_min = 1, .tokens_layer = per_layer };
    }
    int recall_n = 0;
    if ((rc = op->embed(be, p.x, &m->weights.embed, &token, 1)) != RA_OK)
        goto out;
    for (int l = 0; l < c->n_layers; l++) {
        const struct ra_layer_weights *w = &m->weights.layers[l];
        const int n_slots = pool->n_used[l];
        if ((rc = op->rmsnorm(be, p.xa, p.x, &w->attn_norm, 1, d, c->norm_eps)) != RA_OK ||
            (rc = op->matmul(be, p.q, d, p.xa, d, &w->wq, 1)) != RA_OK ||
            (rc = op->rope(be, p.q, d, &(struct ra_rows){ 1, pos, NULL }, H, c->head_dim, &rope)) != RA_OK)
            goto out;
        if (ig->p.oracle && l >= dense && (rc = ra_infinigen_speculate(ig, l, p.q, n_slots, p.sel, &n_sel)) != RA_OK)
            goto out;
        float *k = p.kg, *v = p.vg; /* the current token's row goes after the gathered ones */
        const int n_att = n_sel < 0 ? n_slots : n_sel;
        k += (size_t)n_att * kvd;
        v += (size_t)n_att * kvd;
        if ((rc = op->matmul(be, k, kvd, p.xa, d, &w->wk, 1)) != RA_OK ||
            (rc = op->matmul(be, v, kvd, p.xa, d, &w->wv, 1)) != RA_OK ||
            (rc = op->rope(be, k, kvd, &(struct ra_rows){ 1, pos, NULL }, G, c->head_dim, &rope)) != RA_OK)
            goto out;
        /* the fetch: what the speculation at layer l-1 chose, or everything */
        if ((rc = ra_kvpool_gather(pool, l, n_sel < 0 ? NULL : p.sel, n_att, p.kg, p.vg)) != RA_OK)
            goto out;
        if (stats) {
            if (stats->tokens_layer)
                stats->tokens_layer[l] = n_att;
            if (l >= dense && !ig->p.oracle) { /* p.qs still holds the rehearsal's query for this layer */
                double dot = 0, a2 = 0, b2 = 0;
                for (int i = 0; i < d; i++) {
                    dot += (double)p.qs[i] * p.q[i];
                    a2 += (double)p.qs[i] * p.qs[i];
                    b2 += (double)p.q[i] * p.q[i];
                }
                stats->q_cos += dot / sqrt(a2 * b2 + 1e-300) / (c->n_layers - dense);
            }
            stats->rows_fetched += (int64_t)n_att * G;
            stats->rows_dense += (int64_t)n_slots * G;
            if (n_sel >= 0) {
                memcpy(p.kd, pool->k + (size_t)l * pool->capacity * kvd, (size_t)n_slots * kvd * sizeof(float));
                memcpy(p.kd + (size_t)n_slots * kvd, k, (size_t)kvd * sizeof(float));
                const double r = ra_infinigen_recall(c, p.q, p.kd, n_slots + 1, p.sel, n_sel, head_recall);
                stats->recall += r;
                recall_n++;
                for (int h = 0; h < H; h++)
                    stats->recall_min = fmin(stats->recall_min, head_recall[h]);
            }
        }
        if ((rc = op->attention(be, p.att, p.q, &(struct ra_rows){ 1, n_att, NULL }, p.kg, p.vg,
                                &(struct ra_rows){ n_att + 1, 0, NULL }, &shape)) != RA_OK)
            goto out;
        /* the rehearsal of layer l+1 from this layer's attention input (not for a dense layer) */
        n_sel = -1;
        if (l + 1 < c->n_layers && l + 1 >= dense && !ig->p.oracle) {
            if ((rc = op->matmul(be, p.qs, d, p.xa, d, &m->weights.layers[l + 1].wq, 1)) != RA_OK ||
                (rc = op->rope(be, p.qs, d, &(struct ra_rows){ 1, pos, NULL }, H, c->head_dim, &rope)) != RA_OK ||
                (rc = ra_infinigen_speculate(ig, l + 1, p.qs, pool->n_used[l + 1], p.sel, &n_sel)) != RA_OK)
                goto out;
        }
        int slot;
        if ((rc = ra_kvpool_insert(pool, l, pos, k, v, &slot, NULL)) != RA_OK ||
            (rc = ra_infinigen_kp_store(ig, l, slot, pos, k)) != RA_OK || (rc = layer_tail(m, &p, l, 1)) != RA_OK)
            goto out;
    }
    if (stats)
        stats->recall = recall_n ? stats->recall / recall_n : 1;
    if (logits)
        rc = logits_of(m, &p, 0, logits);
out:
    free(head_recall);
    pass_free(&p);
    return rc;
}

int ra_infinigen_quality(struct ra_model *m, const struct ra_infinigen_params *p, size_t pool_mem,
                         const int32_t *prompt, int n_prompt, int steps, struct ra_infinigen_quality *out)
{
    const struct ra_config *c = &m->config;
    memset(out, 0, sizeof *out);
    if (n_prompt <= 0 || steps <= 0 || n_prompt + steps > c->seq_len)
        return ra_error_set(RA_ERANGE, "infinigen quality: %d prompt tokens + %d steps for a context of %d",
                            n_prompt, steps, c->seq_len);
    if (!m->backend)
        return ra_error_set(RA_EINVAL, "infinigen quality: no backend attached to the model");
    const int rows = n_prompt + steps, V = c->vocab_size, kvd = ra_config_kv_dim(c);
    struct ra_infinigen ig = { 0 };
    struct ra_kvpool pool = { 0 };
    struct ra_kvcache kv = { 0 };
    float *ld = malloc((size_t)V * sizeof(float)), *li = malloc((size_t)V * sizeof(float));
    int rc = RA_OK;
    if (!ld || !li) {
        rc = ra_error_set(RA_ENOMEM, "infinigen quality: out of memory");
        goto out;
    }
    if ((rc = ra_kvpool_init(&pool, c->n_layers, c->n_kv_heads, c->head_dim, rows, pool_mem)) != RA_OK ||
        (rc = ra_infinigen_init(&ig, c, p, pool.capacity)) != RA_OK ||
        (rc = ra_kvcache_init(&kv, m->backend, c->n_layers, kvd, rows)) != RA_OK ||
        (rc = ra_infinigen_calibrate(&ig, m, prompt, n_prompt)) != RA_OK ||
        (rc = ra_infinigen_prefill(&ig, &pool, m, prompt, n_prompt, li)) != RA_OK ||
        (rc = ra_forward_span(m, prompt, 0, n_prompt, &kv, NULL, ld)) != RA_OK)
        goto out;
    out->recall_min = 1;
    int64_t fetched = 0, dense = 0;
    for (int i = 0; i < steps; i++) {
        const int32_t tok = ra_argmax(ld, V); /* teacher forcing: dense decode's token feeds both */
        const int pos = n_prompt + i;
        struct ra_infinigen_step_stats s = { 0 };
        if ((rc = ra_forward_span(m, &tok, pos, 1, &kv, NULL, ld)) != RA_OK ||
            (rc = ra_infinigen_decode(&ig, &pool, m, tok, pos, li, &s)) != RA_OK)
            goto out;
        out->agreement += ra_argmax(ld, V) == ra_argmax(li, V);
        const double kl = ra_infinigen_kl(ld, li, V);
        out->kl_mean += kl;
        out->kl_max = fmax(out->kl_max, kl);
        out->recall_mean += s.recall;
        out->recall_min = fmin(out->recall_min, s.recall_min);
        out->q_cos += s.q_cos;
        fetched += s.rows_fetched;
        dense += s.rows_dense;
    }
    out->steps = steps;
    out->agreement /= steps;
    out->kl_mean /= steps;
    out->recall_mean /= steps;
    out->q_cos /= steps;
    /* rows_fetched counts KV-head rows: G of them make one token's K (or V) row */
    const double per = (double)steps * c->n_layers, head_row = (double)c->head_dim * sizeof(float);
    out->rows_per_layer = (double)fetched / c->n_kv_heads / per;
    out->bytes_per_layer = 2 * head_row * (double)fetched / per;
    out->bytes_dense_per_layer = 2 * head_row * (double)dense / per;
    out->evictions = pool.evictions;
out:
    free(ld);
    free(li);
    ra_kvcache_free(&kv);
    ra_kvpool_free(&pool);
    ra_infinigen_free(&ig);
    return rc;
}
