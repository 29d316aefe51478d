/* InfiniGen's decode over a host KV pool, on a host-memory backend (the CPU
 * backend): the reference the offload framework's integration is checked
 * against, and what bench-decode measures quality with. Every pass is the
 * real forward pass (ra_forward_span) with a hook of this file in the
 * context's list, so with every token selected a step equals a dense
 * step bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "infinigen.h"
#include "kvcache.h"
#include "sampler.h"
#include "status.h"

static int check_model(const struct ra_infinigen *ig, const struct ra_context *ctx)
{
    const struct ra_config *a = &ig->c, *b = &ctx->model->config;
    if (!ctx->backend)
        return ra_error_set(RA_EINVAL, "infinigen: the context has no backend");
    if (ctx->backend->ops->mem_kind(ctx->backend) != RA_MEM_HOST)
        return ra_error_set(RA_EUNSUPPORTED, "infinigen: the reference decode needs a host-memory backend, "
                            "not %s", ctx->backend->ops->name);
    if (a->n_layers != b->n_layers || a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
        a->head_dim != b->head_dim)
        return ra_error_set(RA_EINVAL, "infinigen: state made for another model shape");
    return RA_OK;
}

/* ---------------------------------------------------------------- the dense pass */

/* Calibrates the skewing (pool NULL) or fills the pool and Kp, per layer from
 * the pass's fresh post-RoPE Q and K. */
struct dense_hook {
    struct ra_hook hook;
    struct ra_infinigen *ig;
    struct ra_kvpool *pool;
};

static int dense_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct dense_hook *h = self;
    const int l = a->layer, kvd = a->kv->kv_dim;
    if (!h->pool)
        return ra_infinigen_skew_layer(h->ig, l, a->q, a->k, a->n);
    int rc = RA_OK;
    for (int t = 0; t < a->n && rc == RA_OK; t++) {
        const float *k = a->k + (size_t)t * kvd, *v = a->v + (size_t)t * kvd;
        int slot;
        if ((rc = ra_kvpool_insert(h->pool, l, a->start + t, k, v, &slot, NULL)) == RA_OK)
            rc = ra_infinigen_kp_store(h->ig, l, slot, a->start + t, k);
    }
    return rc;
}

/* A dense pass over tokens [0, n) with the hook in the context's list. */
static int dense_pass(struct ra_infinigen *ig, struct ra_kvpool *pool, struct ra_context *ctx, const int32_t *tokens,
                      int n, float *logits)
{
    int rc;
    if ((rc = check_model(ig, ctx)) != RA_OK)
        return rc;
    const struct ra_config *c = &ctx->model->config;
    if (n <= 0 || n > c->seq_len)
        return ra_error_set(RA_ERANGE, "infinigen: %d prompt tokens for a context of %d", n, c->seq_len);
    struct dense_hook h = { .hook = { .kv_ready = dense_kv_ready }, .ig = ig, .pool = pool };
    h.hook.self = &h;
    struct ra_kvcache kv;
    if ((rc = ra_kvcache_init(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), n)) != RA_OK)
        return rc;
    if ((rc = ra_context_hook_add(ctx, &h.hook)) == RA_OK) {
        rc = ra_forward_span(ctx, tokens, 0, n, &kv, logits);
        ra_context_hook_remove(ctx, &h.hook);
    }
    ra_kvcache_free(&kv);
    return rc;
}

int ra_infinigen_calibrate(struct ra_infinigen *ig, struct ra_context *ctx, const int32_t *tokens, int n)
{
    return dense_pass(ig, NULL, ctx, tokens, n, NULL);
}

int ra_infinigen_prefill(struct ra_infinigen *ig, struct ra_kvpool *pool, struct ra_context *ctx,
                         const int32_t *tokens, int n, float *logits)
{
    if (pool->capacity > ig->capacity)
        return ra_error_set(RA_EINVAL, "infinigen: pool of %d slots, partial key cache of %d", pool->capacity,
                            ig->capacity);
    return dense_pass(ig, pool, ctx, tokens, n, logits);
}

/* ---------------------------------------------------------------- a decode step */

/* The decode hook: at attend, layer l attends the pooled tokens the
 * speculation at layer l-1 chose (every one for a dense layer) and the
 * current token, rehearses layer l+1 from this layer's attention input, then
 * adds the current token's K and V to the pool. */
struct decode_hook {
    struct ra_hook hook;
    struct ra_infinigen *ig;
    struct ra_kvpool *pool;
    const struct ra_context *ctx;
    int pos;
    int n_sel;            /* -1: no speculation for this layer, fetch every token */
    float *qs, *kg, *vg, *kd;
    int32_t *sel;
    double *head_recall;
    struct ra_infinigen_step_stats *stats;
    int recall_n;
};

static void decode_hook_free(struct decode_hook *h)
{
    free(h->qs);
    free(h->kg);
    free(h->vg);
    free(h->kd);
    free(h->sel);
    free(h->head_recall);
}

/* The step's figures for layer l: q the real query, k the current token's key. */
static void step_stats(struct decode_hook *h, int l, const float *q, const float *k, int n_slots, int n_att)
{
    struct ra_infinigen_step_stats *st = h->stats;
    const struct ra_config *c = &h->ctx->model->config;
    const int d = c->dim, kvd = ra_config_kv_dim(c), G = c->n_kv_heads, dense = h->ig->p.dense_layers;
    if (st->tokens_layer)
        st->tokens_layer[l] = n_att;
    if (l >= dense && !h->ig->p.oracle) { /* qs still holds the rehearsal's query for this layer */
        double dot = 0, a2 = 0, b2 = 0;
        for (int i = 0; i < d; i++) {
            dot += (double)h->qs[i] * q[i];
            a2 += (double)h->qs[i] * h->qs[i];
            b2 += (double)q[i] * q[i];
        }
        st->q_cos += dot / sqrt(a2 * b2 + 1e-300) / (c->n_layers - dense);
    }
    st->rows_fetched += (int64_t)n_att * G;
    st->rows_dense += (int64_t)n_slots * G;
    if (h->n_sel >= 0) {
        memcpy(h->kd, h->pool->k + (size_t)l * h->pool->capacity * kvd, (size_t)n_slots * kvd * sizeof(float));
        memcpy(h->kd + (size_t)n_slots * kvd, k, (size_t)kvd * sizeof(float));
        const double r = ra_infinigen_recall(c, q, h->kd, n_slots + 1, h->sel, h->n_sel, h->head_recall);
        st->recall += r;
        h->recall_n++;
        for (int i = 0; i < c->n_heads; i++)
            st->recall_min = fmin(st->recall_min, h->head_recall[i]);
    }
}

/* The rehearsal of layer l+1 from layer l's attention input xa (not for a dense layer). */
static int rehearse(struct decode_hook *h, int l, const float *xa)
{
    const struct ra_config *c = &h->ctx->model->config;
    struct ra_backend *be = h->ctx->backend;
    const struct ra_rope rope = ra_config_rope(c);
    h->n_sel = -1;
    if (l + 1 >= c->n_layers || l + 1 < h->ig->p.dense_layers || h->ig->p.oracle)
        return RA_OK;
    int rc = be->ops->matmul(be, h->qs, c->dim, xa, c->dim, &h->ctx->weights.layers[l + 1].wq, 1);
    if (rc == RA_OK)
        rc = be->ops->rope(be, h->qs, c->dim, &(struct ra_rows){ 1, h->pos, NULL }, c->n_heads, c->head_dim, &rope);
    if (rc == RA_OK)
        rc = ra_infinigen_speculate(h->ig, l + 1, h->qs, h->pool->n_used[l + 1], h->sel, &h->n_sel);
    return rc;
}

static int decode_attend(void *self, const struct ra_hook_args *a, const float **k, const float **v, int *rows)
{
    struct decode_hook *h = self;
    const int l = a->layer, kvd = a->kv->kv_dim, n_slots = h->pool->n_used[l];
    int rc = RA_OK;
    if (h->ig->p.oracle && l >= h->ig->p.dense_layers &&
        (rc = ra_infinigen_speculate(h->ig, l, a->q, n_slots, h->sel, &h->n_sel)) != RA_OK)
        return rc;
    /* the fetch: what the speculation chose, or everything; the current token's row after it */
    const int n_att = h->n_sel < 0 ? n_slots : h->n_sel;
    memcpy(h->kg + (size_t)n_att * kvd, a->k, (size_t)kvd * sizeof(float));
    memcpy(h->vg + (size_t)n_att * kvd, a->v, (size_t)kvd * sizeof(float));
    if ((rc = ra_kvpool_gather(h->pool, l, h->n_sel < 0 ? NULL : h->sel, n_att, h->kg, h->vg)) != RA_OK)
        return rc;
    if (h->stats)
        step_stats(h, l, a->q, a->k, n_slots, n_att);
    *k = h->kg;
    *v = h->vg;
    *rows = n_att + 1;
    int slot;
    if ((rc = rehearse(h, l, a->xa)) != RA_OK ||
        (rc = ra_kvpool_insert(h->pool, l, h->pos, a->k, a->v, &slot, NULL)) != RA_OK)
        return rc;
    return ra_infinigen_kp_store(h->ig, l, slot, h->pos, a->k);
}

static int decode_hook_init(struct decode_hook *h, struct ra_infinigen *ig, struct ra_kvpool *pool,
                            const struct ra_context *ctx, int pos, struct ra_infinigen_step_stats *stats)
{
    const struct ra_config *c = &ctx->model->config;
    const size_t rows = (size_t)pool->capacity + 1, kvd = ra_config_kv_dim(c);
    *h = (struct decode_hook){ .hook = { .attend = decode_attend }, .ig = ig, .pool = pool, .ctx = ctx, .pos = pos,
                               .n_sel = -1, .stats = stats };
    h->hook.self = h;
    h->qs = malloc((size_t)c->dim * sizeof(float));
    h->kg = malloc(rows * kvd * sizeof(float));
    h->vg = malloc(rows * kvd * sizeof(float));
    h->kd = malloc(rows * kvd * sizeof(float));
    h->sel = malloc(rows * (size_t)c->n_kv_heads * sizeof(int32_t));
    h->head_recall = malloc((size_t)c->n_heads * sizeof(double));
    if (!h->qs || !h->kg || !h->vg || !h->kd || !h->sel || !h->head_recall) {
        decode_hook_free(h);
        return ra_error_set(RA_ENOMEM, "infinigen: out of memory for a pool of %d tokens", pool->capacity);
    }
    return RA_OK;
}

int ra_infinigen_decode(struct ra_infinigen *ig, struct ra_kvpool *pool, struct ra_context *ctx, int32_t token,
                        int pos, float *logits, struct ra_infinigen_step_stats *stats)
{
    int rc;
    if ((rc = check_model(ig, ctx)) != RA_OK)
        return rc;
    const struct ra_config *c = &ctx->model->config;
    if (pos < 0 || pos >= c->seq_len || token < 0 || token >= c->vocab_size)
        return ra_error_set(RA_ERANGE, "infinigen: token %d at position %d (context %d, vocabulary %d)", token, pos,
                            c->seq_len, c->vocab_size);
    if (pool->capacity > ig->capacity)
        return ra_error_set(RA_EINVAL, "infinigen: pool of %d slots, partial key cache of %d", pool->capacity,
                            ig->capacity);
    if (stats) {
        int *per_layer = stats->tokens_layer;
        *stats = (struct ra_infinigen_step_stats){ .recall_min = 1, .tokens_layer = per_layer };
    }
    /* The pass writes the token's K and V into a one-row window at position
     * pos; the hook hands attention the pooled rows and that one. */
    struct decode_hook h;
    struct ra_kvcache kv = { 0 };
    if ((rc = decode_hook_init(&h, ig, pool, ctx, pos, stats)) != RA_OK)
        return rc;
    if ((rc = ra_kvcache_init(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), 1)) != RA_OK)
        goto out;
    if (!(kv.first = malloc(sizeof *kv.first * (size_t)c->n_layers))) {
        rc = ra_error_set(RA_ENOMEM, "infinigen: out of memory");
        goto out;
    }
    for (int l = 0; l < c->n_layers; l++)
        kv.first[l] = pos;
    if ((rc = ra_context_hook_add(ctx, &h.hook)) == RA_OK) {
        rc = ra_forward_span(ctx, &token, pos, 1, &kv, logits);
        ra_context_hook_remove(ctx, &h.hook);
    }
    if (stats)
        stats->recall = h.recall_n ? stats->recall / h.recall_n : 1;
out:
    ra_kvcache_free(&kv);
    decode_hook_free(&h);
    return rc;
}

int ra_infinigen_quality(struct ra_context *ctx, const struct ra_infinigen_params *p, size_t pool_mem,
                         const int32_t *prompt, int n_prompt, int steps, struct ra_infinigen_quality *out)
{
    const struct ra_config *c = &ctx->model->config;
    memset(out, 0, sizeof *out);
    if (n_prompt <= 0 || steps <= 0 || n_prompt + steps > c->seq_len)
        return ra_error_set(RA_ERANGE, "infinigen quality: %d prompt tokens + %d steps for a context of %d",
                            n_prompt, steps, c->seq_len);
    if (!ctx->backend)
        return ra_error_set(RA_EINVAL, "infinigen quality: the context has no backend");
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
        (rc = ra_kvcache_init(&kv, ctx->backend, c->n_layers, kvd, rows)) != RA_OK ||
        (rc = ra_infinigen_calibrate(&ig, ctx, prompt, n_prompt)) != RA_OK ||
        (rc = ra_infinigen_prefill(&ig, &pool, ctx, prompt, n_prompt, li)) != RA_OK ||
        (rc = ra_forward_span(ctx, prompt, 0, n_prompt, &kv, ld)) != RA_OK)
        goto out;
    out->recall_min = 1;
    int64_t fetched = 0, dense = 0;
    for (int i = 0; i < steps; i++) {
        const int32_t tok = ra_argmax(ld, V); /* teacher forcing: dense decode's token feeds both */
        const int pos = n_prompt + i;
        struct ra_infinigen_step_stats s = { 0 };
        if ((rc = ra_forward_span(ctx, &tok, pos, 1, &kv, ld)) != RA_OK ||
            (rc = ra_infinigen_decode(&ig, &pool, ctx, tok, pos, li, &s)) != RA_OK)
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
