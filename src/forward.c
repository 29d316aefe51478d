/* The forward pass over a span of tokens [start, start+n): see forward.h. */
#include "forward.h"
#include "backend.h"
#include "finite.h"
#include "status.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    float *kf, *vf; /* [n][kv_dim] fp32 K and V before a bf16 cache rounds them; only for one */
};

void ra_workspace_free(struct ra_backend *be, struct ra_workspace *ws)
{
    if (!ws)
        return;
    float *bufs[] = { ws->x, ws->xb, ws->q, ws->att, ws->hb, ws->hb2, ws->logits, ws->kf, ws->vf };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            ra_backend_release(be, bufs[i]);
    free(ws);
}

/* Makes room for n tokens; with narrow_kv (a cache that is not fp32, or a position list), also
 * the fp32 K and V rows the projections and RoPE write before rounding. */
static int workspace_reserve(struct ra_context *ctx, int n, int narrow_kv)
{
    struct ra_workspace *ws = ctx->ws;
    if (ws && ws->capacity >= n && (!narrow_kv || ws->kf))
        return RA_OK;
    struct ra_backend *be = ctx->backend;
    const struct ra_config *c = &ctx->model->config;
    if (ws && ws->capacity >= n) { /* only the fp32 K and V rows are missing (a list after spans): add them */
        const size_t kvb = (size_t)ws->capacity * ra_config_kv_dim(c) * sizeof(float);
        ws->kf = ra_backend_alloc(be, kvb);
        ws->vf = ra_backend_alloc(be, kvb);
        if (ws->kf && ws->vf)
            return RA_OK;
        ra_workspace_free(be, ws);
        ctx->ws = NULL;
        return ra_error_set(RA_ENOMEM, "forward: cannot allocate K and V rows for %d tokens", n);
    }
    if (ws && ws->capacity > n)
        n = ws->capacity;
    ra_workspace_free(be, ws);
    ctx->ws = ws = calloc(1, sizeof *ws);
    if (!ws)
        return ra_error_set(RA_ENOMEM, "forward: out of memory");
    const size_t d = (size_t)n * c->dim * sizeof(float), h = (size_t)n * c->hidden_dim * sizeof(float);
    ws->capacity = n;
    ws->x = ra_backend_alloc(be, d);
    ws->xb = ra_backend_alloc(be, d);
    ws->q = ra_backend_alloc(be, d);
    ws->att = ra_backend_alloc(be, d);
    ws->hb = ra_backend_alloc(be, h);
    ws->hb2 = ra_backend_alloc(be, h);
    ws->logits = ra_backend_alloc(be, (size_t)c->vocab_size * sizeof(float));
    if (narrow_kv) {
        const size_t kvb = (size_t)n * ra_config_kv_dim(c) * sizeof(float);
        ws->kf = ra_backend_alloc(be, kvb);
        ws->vf = ra_backend_alloc(be, kvb);
    }
    if (!ws->x || !ws->xb || !ws->q || !ws->att || !ws->hb || !ws->hb2 || !ws->logits ||
        (narrow_kv && (!ws->kf || !ws->vf))) {
        ra_workspace_free(be, ws);
        ctx->ws = NULL;
        return ra_error_set(RA_ENOMEM, "forward: cannot allocate activations for %d tokens (%.1f MiB)", n,
                            (4.0 * (double)d + 2.0 * (double)h) / 1048576.0);
    }
    return RA_OK;
}

void ra_forward_flops(const struct ra_config *c, int start, int n, double *linear, double *attention)
{
    const double d = c->dim, kv = ra_config_kv_dim(c), h = c->hidden_dim, L = c->n_layers;
    const double tokens = n, pairs = (double)n * start + (double)n * (n + 1) / 2.0;
    *linear = L * 2.0 * tokens * (2.0 * d * d + 2.0 * d * kv + 3.0 * d * h);
    *attention = L * 4.0 * d * pairs; /* QKᵀ and PV over the visible keys */
}

/* A position list: sorted, strictly increasing, not negative. */
static int check_positions(const struct ra_rows *rows)
{
    if (!rows->pos)
        return RA_OK;
    for (int i = 0; i < rows->n; i++)
        if (rows->pos[i] < 0 || (i > 0 && rows->pos[i] <= rows->pos[i - 1]))
            return ra_error_set(RA_EINVAL, "forward: position %d (row %d) is negative or not above the one before",
                                rows->pos[i], i);
    return RA_OK;
}

/* Rows of positions [start, start+n) (a list: its first to its last) fit the model and the cache. */
static int check_span(const struct ra_context *ctx, const int32_t *tokens, const struct ra_rows *rows, int start, int n,
                      const struct ra_kvcache *kv)
{
    if (!ctx || !ctx->model || !ctx->backend)
        return ra_error_set(RA_EINVAL, "forward: the context has no model or no backend");
    const struct ra_config *c = &ctx->model->config;
    if (n <= 0 || start < 0)
        return ra_error_set(RA_EINVAL, "forward: empty or negative span [%d, %d)", start, start + n);
    if (start + n > c->seq_len)
        return ra_error_set(RA_ERANGE, "forward: positions up to %d exceed the model's context of %d tokens",
                            start + n, c->seq_len);
    if (kv->n_layers != c->n_layers || kv->kv_dim != ra_config_kv_dim(c))
        return ra_error_set(RA_ERANGE, "forward: the KV cache's shape (%d layers of %d elements) is not the model's",
                            kv->n_layers, kv->kv_dim);
    for (int l = 0; l < kv->n_layers; l++) { /* layer l holds positions [first, first + capacity) */
        const int first = ra_kvcache_first(kv, l);
        if (start < first || start + n - first > kv->capacity)
            return ra_error_set(RA_ERANGE, "forward: span [%d, %d) does not fit the KV cache (%d rows from "
                                "position %d)", start, start + n, kv->capacity, first);
    }
    if (!ra_backend_supports(ctx->backend, RA_OP_KV_CACHE, kv->dtype))
        return ra_error_set(RA_EUNSUPPORTED, "forward: the %s backend has no %s KV cache", ctx->backend->ops->name,
                            ra_dtype_name(kv->dtype));
    for (int i = 0; i < rows->n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return ra_error_set(RA_ERANGE, "forward: token id %d at position %d is outside the vocabulary (0..%d)",
                                tokens[i], ra_rows_pos(rows, i), c->vocab_size - 1);
    return RA_OK;
}

/* Runs one backend op, charging its time to a stats bucket when stats are on. */
#define OP(bucket, call)                                                 \
    do {                                                                 \
        double t0_ = stats ? ra_wall_s() : 0;                            \
        if ((rc = (call)) != RA_OK)                                      \
            goto out;                                                    \
        if (stats)                                                       \
            stats->bucket += ra_wall_s() - t0_;                          \
    } while (0)

enum hook_point { AT_LAYER_BEGIN, AT_KV_READY, AT_LAYER_END };

/* Runs the first N hooks of CTX at one point, in list order, the first
 * failure stopping them; RA_HOOK_STOP when one asked to end the pass (the
 * others still run). */
static int run_hooks(struct ra_context *ctx, int n, enum hook_point at, const struct ra_hook_args *a)
{
    if (n == 0)
        return RA_OK;
    const double t0 = ctx->stats ? ra_wall_s() : 0;
    int rc = RA_OK, stop = 0;
    for (int i = 0; i < n && rc == RA_OK; i++) {
        const struct ra_hook *h = ctx->hooks[i];
        int (*fn)(void *, const struct ra_hook_args *) = at == AT_LAYER_BEGIN ? h->layer_begin
                                                         : at == AT_KV_READY  ? h->kv_ready
                                                                              : h->layer_end;
        if (fn && (rc = fn(h->self, a)) == RA_HOOK_STOP)
            stop = 1, rc = RA_OK;
    }
    if (ctx->stats)
        ctx->stats->t_exchange += ra_wall_s() - t0;
    return rc == RA_OK && stop ? RA_HOOK_STOP : rc;
}

/* The narrow hooks in list order over KEEP (every row at first); *n_keep
 * left at N when none removed a row. */
static int run_narrow(struct ra_context *ctx, int n_hooks, const struct ra_hook_args *a, int32_t *keep, int *n_keep)
{
    *n_keep = a->n;
    for (int i = 0; i < a->n; i++)
        keep[i] = i;
    for (int i = 0; i < n_hooks; i++) {
        const struct ra_hook *h = ctx->hooks[i];
        if (!h->narrow)
            continue;
        const int before = *n_keep;
        int rc = h->narrow(h->self, a, keep, n_keep);
        if (rc != RA_OK)
            return rc;
        if (*n_keep < 1 || *n_keep > before)
            return ra_error_set(RA_EINVAL, "forward: a narrow hook kept %d of %d rows at layer %d", *n_keep,
                                before, a->layer);
        for (int j = 0; j < *n_keep; j++)
            if (keep[j] < 0 || keep[j] >= a->n || (j > 0 && keep[j] <= keep[j - 1]))
                return ra_error_set(RA_EINVAL, "forward: a narrow hook's rows at layer %d are not ascending "
                                    "indices below %d", a->layer, a->n);
    }
    return RA_OK;
}

static int has_narrow(const struct ra_context *ctx, int n_hooks)
{
    for (int i = 0; i < n_hooks; i++)
        if (ctx->hooks[i]->narrow)
            return 1;
    return 0;
}

/* One layer's FLOPs over rows ROWS (keys up to each row's position). */
static void layer_flops(const struct ra_config *c, const struct ra_rows *rows, double *linear, double *attention)
{
    const double d = c->dim, kv = ra_config_kv_dim(c), h = c->hidden_dim, n = rows->n;
    double pairs = 0;
    if (rows->pos)
        for (int i = 0; i < rows->n; i++)
            pairs += rows->pos[i] + 1.0;
    else
        pairs = n * rows->start + n * (n + 1) / 2.0;
    *linear += 2.0 * n * (2.0 * d * d + 2.0 * d * kv + 3.0 * d * h);
    *attention += 4.0 * d * pairs;
}

/* The attend hooks as a pipeline: each sees the rows the ones before it chose. */
static int run_attend(struct ra_context *ctx, int n, const struct ra_hook_args *a, const float **k,
                      const float **v, int *rows)
{
    int rc = RA_OK;
    for (int i = 0; i < n && rc == RA_OK; i++)
        if (ctx->hooks[i]->attend)
            rc = ctx->hooks[i]->attend(ctx->hooks[i]->self, a, k, v, rows);
    return rc;
}

#define HOOKS(at)                                                          \
    do {                                                                   \
        if ((rc = run_hooks(ctx, n_hooks, at, &args)) != RA_OK)            \
            goto stop;                                                     \
    } while (0)

/* The diagnostic pass's state: host scratch for downloads, and where the
 * first non-finite value was found. */
struct probe {
    float *host;
    size_t floats;
    int logits_pos;          /* the position whose logits were not finite */
    const char *logits_kind; /* and what the first bad logit was */
    int64_t logits_id;
};

/* Checks rows [0, rows) of BUF (a backend buffer, WIDTH elements of DT a row,
 * the first at position POS0): RA_ERANGE with the whole story if one is not finite. */
static int probe_rows_dt(struct ra_backend *be, struct probe *p, const void *buf, enum ra_dtype dt, int rows,
                         int width, int pos0, int layer, const char *what)
{
    const size_t need = (size_t)rows * (size_t)width;
    if (need > p->floats) {
        free(p->host);
        p->floats = 0;
        if (!(p->host = malloc(need * sizeof(float))))
            return ra_error_set(RA_ENOMEM, "forward: out of memory while locating non-finite logits");
        p->floats = need;
    }
    int rc = be->ops->download(be, p->host, buf, need * ra_dtype_size(dt));
    if (rc != RA_OK)
        return rc;
    const int64_t bad = ra_first_nonfinite(p->host, dt, (int64_t)need, be->n_threads);
    if (bad < 0)
        return RA_OK;
    char in[64] = "the ";
    if (layer >= 0)
        snprintf(in, sizeof in, "layer %d's ", layer);
    return ra_error_set(RA_ERANGE, "forward: the logits at position %d are not finite (id %lld is %s); the first "
                        "non-finite value (%s) is in %s%s at position %d", p->logits_pos, (long long)p->logits_id,
                        p->logits_kind, ra_nonfinite_name(p->host, dt, bad), in, what,
                        pos0 + (int)(bad / width));
}

static int probe_rows(struct ra_backend *be, struct probe *p, const float *buf, int rows, int width, int pos0,
                      int layer, const char *what)
{
    return probe_rows_dt(be, p, buf, RA_DTYPE_F32, rows, width, pos0, layer, what);
}

/* Runs a probe when there is one (the diagnostic pass); nothing otherwise. */
#define PROBE(...)                                                        \
    do {                                                                  \
        if (probe && (rc = probe_rows(be, probe, __VA_ARGS__)) != RA_OK)  \
            goto out;                                                     \
    } while (0)
#define PROBE_DT(...)                                                     \
    do {                                                                  \
        if (probe && (rc = probe_rows_dt(be, probe, __VA_ARGS__)) != RA_OK) \
            goto out;                                                     \
    } while (0)

/* The forward pass; with PROBE set, also the diagnostic pass that checks each
 * stage's output for non-finite values and stops at the first (without the
 * hooks: the rows before the span are in the cache already). */
/* The K and V rows of a position list are made in the workspace and written
 * to the cache at their positions with set_rows (the cache rows between them
 * must be there already); attention then reads the cache's rows up to the
 * last position, each query the keys at or before its own. A narrow hook
 * turns the rest of the pass into such a list (`cur`, positions in `pos`). */
static int forward(struct ra_context *ctx, const int32_t *tokens, const struct ra_rows *rows_in,
                   struct ra_kvcache *kv, float *logits_last, struct probe *probe)
{
    int rc;
    struct ra_rows cur = *rows_in;
    const struct ra_rows *rows = &cur;
    int n = rows->n, gapped = rows->pos != NULL;
    int start = ra_rows_pos(rows, 0), end = rows->n > 0 ? ra_rows_pos(rows, n - 1) + 1 : start;
    const int narrow_kv = kv->dtype != RA_DTYPE_F32;
    const int n_hooks = probe ? 0 : ctx->n_hooks;
    const int narrows = has_narrow(ctx, n_hooks);
    int32_t *idx = NULL, *pos = NULL, *keep = NULL; /* a list's cache rows per layer; narrowed positions, kept rows */
    double lin = 0, att = 0;
    if ((rc = check_positions(rows)) != RA_OK ||
        (rc = check_span(ctx, tokens, rows, start, end - start, kv)) != RA_OK ||
        (rc = workspace_reserve(ctx, n, narrow_kv || gapped || narrows)) != RA_OK)
        return rc;
    if ((gapped || narrows) && !ra_backend_supports(ctx->backend, RA_OP_POSITIONS, kv->dtype))
        return ra_error_set(RA_EUNSUPPORTED, "forward: the %s backend takes no position lists over a %s KV cache",
                            ctx->backend->ops->name, ra_dtype_name(kv->dtype));
    if ((gapped || narrows) && !(idx = malloc(sizeof *idx * (size_t)n)))
        return ra_error_set(RA_ENOMEM, "forward: out of memory");
    if (narrows && (!(pos = malloc(sizeof *pos * (size_t)n)) || !(keep = malloc(sizeof *keep * (size_t)n)))) {
        rc = ra_error_set(RA_ENOMEM, "forward: out of memory");
        goto out;
    }
    struct ra_backend *be = ctx->backend;
    const struct ra_backend_ops *op = be->ops;
    const struct ra_config *c = &ctx->model->config;
    const struct ra_weights *wt = &ctx->weights;
    struct ra_forward_stats *stats = probe ? NULL : ctx->stats; /* the diagnosis is no part of the timings */
    const struct ra_rope rope = ra_config_rope(c);
    struct ra_workspace *ws = ctx->ws;
    const int d = c->dim, kvd = ra_config_kv_dim(c), hid = c->hidden_dim;
    const struct ra_attention_shape shape = { c->n_heads, c->n_kv_heads, c->head_dim, d, kvd, kv->dtype };

    OP(t_other, op->embed(be, ws->x, &wt->embed, tokens, n));
    PROBE(ws->x, n, d, start, -1, "token embedding");
    for (int l = 0; l < c->n_layers; l++) {
        const struct ra_layer_weights *w = &wt->layers[l];
        struct ra_hook_args args = { .layer = l, .start = start, .n = n, .rows = rows, .kv = kv, .x = ws->x };
        HOOKS(AT_LAYER_BEGIN);
        OP(t_other, op->rmsnorm(be, ws->xb, ws->x, &w->attn_norm, n, d, c->norm_eps));
        OP(t_linear, op->matmul(be, ws->q, d, ws->xb, d, &w->wq, n));
        /* An fp32 cache takes K and V straight from the GEMMs; another is
         * written once K is rotated, each value rounded once. */
        float *kf = narrow_kv || gapped ? ws->kf : ra_kvcache_k(kv, l, start);
        float *vf = narrow_kv || gapped ? ws->vf : ra_kvcache_v(kv, l, start);
        OP(t_linear, op->matmul(be, kf, kvd, ws->xb, d, &w->wk, n));
        OP(t_linear, op->matmul(be, vf, kvd, ws->xb, d, &w->wv, n));
        OP(t_other, op->rope(be, ws->q, d, rows, c->n_heads, c->head_dim, &rope));
        OP(t_other, op->rope(be, kf, kvd, rows, c->n_kv_heads, c->head_dim, &rope));
        const int first = ra_kvcache_first(kv, l);
        if (gapped) {
            for (int i = 0; i < n; i++)
                idx[i] = rows->pos[i] - first;
            void *k0 = ra_kvcache_k(kv, l, first), *v0 = ra_kvcache_v(kv, l, first);
            OP(t_other, op->set_rows(be, k0, kv->dtype, kf, RA_DTYPE_F32, (size_t)kvd, idx, n));
            OP(t_other, op->set_rows(be, v0, kv->dtype, vf, RA_DTYPE_F32, (size_t)kvd, idx, n));
        } else if (narrow_kv) {
            OP(t_other, op->narrow(be, ra_kvcache_k(kv, l, start), kv->dtype, kf, (size_t)n * kvd));
            OP(t_other, op->narrow(be, ra_kvcache_v(kv, l, start), kv->dtype, vf, (size_t)n * kvd));
        }
        args.xa = ws->xb;
        args.q = ws->q;
        args.k = kf;
        args.v = vf;
        layer_flops(c, rows, &lin, &att);
        HOOKS(AT_KV_READY);
        /* every row attention will read, the earlier positions' too: the
         * layer's buffer holds positions [first, end) */
        const float *ak = ra_kvcache_k(kv, l, first), *av = ra_kvcache_v(kv, l, first);
        PROBE_DT(ak, kv->dtype, end - first, kvd, first, l, "keys");
        PROBE_DT(av, kv->dtype, end - first, kvd, first, l, "values");
        int nk = end - first;
        if ((rc = run_attend(ctx, n_hooks, &args, &ak, &av, &nk)) != RA_OK)
            goto out;
        /* the keys end at the last query: nk rows up to position end - 1 */
        const struct ra_rows keys = { nk, end - nk, NULL };
        OP(t_attention, op->attention(be, ws->att, ws->q, rows, ak, av, &keys, &shape));
        OP(t_linear, op->matmul(be, ws->xb, d, ws->att, d, &w->wo, n));
        OP(t_other, op->add(be, ws->x, ws->xb, (size_t)n * d));
        OP(t_other, op->rmsnorm(be, ws->xb, ws->x, &w->ffn_norm, n, d, c->norm_eps));
        OP(t_linear, op->matmul(be, ws->hb, hid, ws->xb, d, &w->w_gate, n));
        OP(t_linear, op->matmul(be, ws->hb2, hid, ws->xb, d, &w->w_up, n));
        OP(t_other, op->swiglu(be, ws->hb, ws->hb2, (size_t)n * hid));
        OP(t_linear, op->matmul(be, ws->xb, d, ws->hb, hid, &w->w_down, n));
        OP(t_other, op->add(be, ws->x, ws->xb, (size_t)n * d));
        PROBE(ws->x, n, d, start, l, "output");
        args.xa = args.q = args.k = args.v = NULL; /* overwritten by the layer's tail */
        HOOKS(AT_LAYER_END);
        if (narrows && l + 1 < c->n_layers) {
            int n_keep;
            if ((rc = run_narrow(ctx, n_hooks, &args, keep, &n_keep)) != RA_OK)
                goto out;
            if (logits_last && keep[n_keep - 1] != n - 1)
                keep[n_keep++] = n - 1; /* the last row's logits were asked for */
            if (n_keep < n) { /* the kept rows of the residual stream, at their positions */
                OP(t_other, op->get_rows(be, ws->xb, ws->x, RA_DTYPE_F32, (size_t)d, keep, n_keep));
                float *t = ws->x;
                ws->x = ws->xb, ws->xb = t;
                for (int i = 0; i < n_keep; i++)
                    pos[i] = ra_rows_pos(rows, keep[i]); /* keep[i] >= i: in place */
                cur = (struct ra_rows){ n_keep, pos[0], pos };
                n = n_keep, gapped = 1, start = pos[0], end = pos[n - 1] + 1;
            }
        }
    }
    if (logits_last) { /* only the span's last token needs the classifier */
        float *last = ws->x + (size_t)(n - 1) * d;
        OP(t_other, op->rmsnorm(be, ws->xb, last, &wt->final_norm, 1, d, c->norm_eps));
        PROBE(ws->xb, 1, d, end - 1, -1, "final norm");
        OP(t_other, op->matmul(be, ws->logits, c->vocab_size, ws->xb, d, &wt->output, 1));
        PROBE(ws->logits, 1, c->vocab_size, end - 1, -1, "classifier's output");
        OP(t_other, op->download(be, logits_last, ws->logits, (size_t)c->vocab_size * sizeof(float)));
    }
stop:
    if (rc == RA_HOOK_STOP)
        rc = RA_OK;
    if (stats && rc == RA_OK) {
        stats->flop_linear += lin;
        stats->flop_attention += att;
        stats->tokens += rows_in->n;
    }
out:
    free(idx);
    free(pos);
    free(keep);
    return rc;
}

int ra_forward_span(struct ra_context *ctx, const int32_t *tokens, int start, int n, struct ra_kvcache *kv,
                    float *logits_last)
{
    const struct ra_rows rows = { n, start, NULL };
    return forward(ctx, tokens, &rows, kv, logits_last, NULL);
}

/* A pass over no rows: every layer's hook points with n = 0 and nothing
 * computed (a rank of the chain with nothing to recompute still passes the
 * rows before it on). */
static int hooks_only(struct ra_context *ctx, int start, struct ra_kvcache *kv)
{
    const struct ra_rows rows = { 0, start, NULL };
    int rc = RA_OK;
    for (int l = 0; l < ctx->model->config.n_layers && rc == RA_OK; l++) {
        const struct ra_hook_args args = { .layer = l, .start = start, .n = 0, .rows = &rows, .kv = kv };
        if ((rc = run_hooks(ctx, ctx->n_hooks, AT_LAYER_BEGIN, &args)) == RA_OK &&
            (rc = run_hooks(ctx, ctx->n_hooks, AT_KV_READY, &args)) == RA_OK)
            rc = run_hooks(ctx, ctx->n_hooks, AT_LAYER_END, &args);
    }
    return rc == RA_HOOK_STOP ? RA_OK : rc;
}

int ra_forward_rows(struct ra_context *ctx, const int32_t *tokens, const struct ra_rows *rows, struct ra_kvcache *kv,
                    float *logits_last)
{
    if (!rows || rows->n < 0 || (rows->n == 0 && logits_last))
        return ra_error_set(RA_EINVAL, "forward: no rows%s", rows && rows->n == 0 ? " to give logits" : "");
    if (rows->n == 0)
        return hooks_only(ctx, rows->start, kv);
    return forward(ctx, tokens, rows, kv, logits_last, NULL);
}

/* Re-runs the span locally (its KV rows are recomputed to the same values,
 * the rows before it are already in the cache) with every stage checked. */
static int locate_nonfinite(struct ra_context *ctx, const int32_t *tokens, int start, int n, struct ra_kvcache *kv,
                            struct probe *p)
{
    float *logits = malloc((size_t)ctx->model->config.vocab_size * sizeof(float));
    if (!logits)
        return ra_error_set(RA_ENOMEM, "forward: out of memory while locating non-finite logits");
    const struct ra_rows rows = { n, start, NULL };
    int rc = forward(ctx, tokens, &rows, kv, logits, p);
    free(logits);
    free(p->host);
    if (rc == RA_OK) /* not reproduced: say what is known */
        rc = ra_error_set(RA_ERANGE, "forward: the logits at position %d are not finite (id %lld is %s); a "
                          "checked re-run of positions [%d, %d) gave finite values", p->logits_pos,
                          (long long)p->logits_id, p->logits_kind, start, start + n);
    return rc;
}

int ra_forward_check_logits(struct ra_context *ctx, const int32_t *tokens, int start, int n, struct ra_kvcache *kv,
                            const float *logits)
{
    const int64_t bad = ra_first_nonfinite(logits, RA_DTYPE_F32, ctx->model->config.vocab_size, 1);
    if (bad < 0)
        return RA_OK;
    struct probe p = { .logits_pos = start + n - 1, .logits_id = bad,
                       .logits_kind = ra_nonfinite_name(logits, RA_DTYPE_F32, bad) };
    if (!tokens)
        return ra_error_set(RA_ERANGE, "forward: the logits at position %d are not finite (id %lld is %s)",
                            p.logits_pos, (long long)bad, p.logits_kind);
    return locate_nonfinite(ctx, tokens, start, n, kv, &p);
}
