/* --offload infinigen: InfiniGen (infinigen.h) as a policy of the offload
 * engine (offload.h).
 *
 *  begin   calibrates the skewing and the partial columns from the prompt's
 *          own post-RoPE queries (Q = RoPE(X·W_Q) of the rows whose
 *          attention input X the engine captured: the last rank's span after
 *          a chain) and keys (the pool), then moves the prompt's rows into
 *          InfiniGen's host pool (memory limit, counter eviction) and their
 *          skewed partial columns into the partial key cache.
 *  fetch   the dense layers (0 and 1 by default, infinigen.h): every pooled
 *          row, each into its own full slot; a later layer l: the rows
 *          speculated at layer l−1. The host gathers them into a pinned staging buffer
 *          (one message each for K and V), into slot rows [0, m).
 *  new_row the new token goes to slot row m, so attention reads m + 1 rows.
 *  attend  rehearses layer l+1 from this layer's attention input:
 *          q = RoPE(x_a·W_Q^(l+1)), scored against the partial key cache.
 *  store   the new token's K and V into the pool (a victim's slot when full)
 *          and its partial columns into the partial key cache.
 *
 * The partial key cache is the backend's device memory (alloc_mem
 * RA_MEM_DEVICE, counted in the engine's fixed_bytes), but the speculation
 * reads it on the host: the policy runs on the CPU backend's emulated device
 * only, whose device memory is host memory. */
#include "infinigen.h"
#include "offload.h"
#include "../status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ig_state {
    struct ra_infinigen ig;
    struct ra_kvpool pool;
    float *stage_k[2], *stage_v[2]; /* pinned host: the gathered rows of a fetch */
    float *qs;                      /* [dim] the rehearsal's query */
    int32_t *sel;                   /* [n_kv_heads][capacity] the next layer's selection */
    int *rows;                      /* [n_layers] rows fetched for each layer in this step */
    int sel_layer;                  /* the layer sel was speculated for, -1: none */
    int64_t steps_rows;             /* pooled rows fetched, all layers and steps */
};

static struct ig_state *state(struct ra_offload *o) { return ra_offload_view(o)->policy_state; }

int ra_infinigen_params_of(const struct ra_offload_config *cfg, struct ra_infinigen_params *p)
{
    ra_infinigen_params_default(p);
    if (cfg->ig_ratio > 0)
        p->ratio = cfg->ig_ratio;
    if (cfg->ig_alpha > 0)
        p->alpha = cfg->ig_alpha;
    if (cfg->ig_cap > 0)
        p->cap = cfg->ig_cap;
    if (!(p->ratio > 0 && p->ratio <= 1) || isnan(p->alpha) || !(p->cap > 0))
        return ra_error_set(RA_EINVAL, "infinigen: --infinigen-ratio %g must be in (0, 1], --infinigen-alpha %g "
                            "> 0, --infinigen-cap %g > 0", p->ratio, p->alpha, p->cap);
    return RA_OK;
}

/* Slots of the pool per layer: max_rows, or fewer under --infinigen-pool-mem. */
static int pool_capacity(const struct ra_config *c, const struct ra_offload_config *cfg, int max_rows, int *cap)
{
    const int kvd = ra_config_kv_dim(c);
    const size_t per_slot = ra_kvpool_bytes(c->n_layers, kvd, 1);
    *cap = max_rows;
    if (!cfg->ig_pool_mem)
        return RA_OK;
    if (cfg->ig_pool_mem < per_slot)
        return ra_error_set(RA_EINVAL, "--infinigen-pool-mem %zu bytes holds no token (one needs %zu bytes)",
                            cfg->ig_pool_mem, per_slot);
    if (cfg->ig_pool_mem / per_slot < (size_t)max_rows)
        *cap = (int)(cfg->ig_pool_mem / per_slot);
    return RA_OK;
}

/* The most rows speculation can select from n pooled tokens (infinigen.c's rule). */
static int cap_rows(const struct ra_infinigen_params *p, int n)
{
    int most = p->cap < 1 ? (int)(p->cap * n) : n;
    return most < 1 ? 1 : most > n ? n : most;
}

int ra_infinigen_offload_sizes(const struct ra_config *c, const struct ra_offload_config *cfg, int max_rows,
                               int *full_layers, size_t *full_rows, size_t *slot_rows, size_t *kp_bytes)
{
    struct ra_infinigen_params p;
    int cap, rc;
    if ((rc = ra_infinigen_params_of(cfg, &p)) != RA_OK || (rc = pool_capacity(c, cfg, max_rows, &cap)) != RA_OK)
        return rc;
    const int n_part = ra_infinigen_n_part(p.ratio, c->head_dim); /* as ra_infinigen_init's */
    *full_layers = ra_infinigen_dense_layers(&p, c->n_layers); /* as ra_infinigen_init keeps it */
    *full_rows = (size_t)cap + 1;
    *slot_rows = (size_t)cap_rows(&p, cap) + 1;
    *kp_bytes = (size_t)c->n_layers * cap * c->n_kv_heads * n_part * sizeof(float);
    return RA_OK;
}

/* The skewing of every layer from the captured prompt rows [x0, x1). */
static int calibrate(struct ra_offload *o, struct ig_state *st)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    const int x0 = vw->x_start, n = vw->x_end - vw->x_start;
    if (n <= 0) /* nothing captured: identity skew, the first columns */
        return RA_OK;
    const struct ra_weights *w = &vw->ctx->weights;
    struct ra_backend *be = vw->be;
    const struct ra_config *c = &vw->m->config;
    const struct ra_rope rope = ra_config_rope(c);
    float *q = malloc((size_t)n * c->dim * sizeof(float));
    if (!q)
        return ra_error_set(RA_ENOMEM, "infinigen: out of memory for %d calibration rows", n);
    int rc = RA_OK;
    for (int l = 0; l < c->n_layers && rc == RA_OK; l++) {
        const float *x = ra_offload_pool_x(o, l) + (size_t)x0 * c->dim;
        if ((rc = be->ops->matmul(be, q, c->dim, x, c->dim, &w->layers[l].wq, n)) != RA_OK ||
            (rc = be->ops->rope(be, q, c->dim, &(struct ra_rows){ n, x0, NULL }, c->n_heads, c->head_dim,
                                &rope)) != RA_OK ||
            (rc = be->ops->synchronize(be)) != RA_OK)
            break;
        rc = ra_infinigen_skew_layer(&st->ig, l, q, (const float *)ra_offload_pool_k(o, l) + (size_t)x0 * vw->kv_dim, n);
    }
    free(q);
    return rc;
}

static void ig_end(struct ra_offload *o)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct ig_state *st = vw->policy_state;
    if (!st)
        return;
    for (int i = 0; i < 2; i++) {
        if (st->stage_k[i]) vw->be->ops->release_mem(vw->be, st->stage_k[i], RA_MEM_HOST_PINNED);
        if (st->stage_v[i]) vw->be->ops->release_mem(vw->be, st->stage_v[i], RA_MEM_HOST_PINNED);
    }
    ra_infinigen_free(&st->ig);
    ra_kvpool_free(&st->pool);
    free(st->qs);
    free(st->sel);
    free(st->rows);
    free(st);
    vw->policy_state = NULL;
}

static int ig_begin(struct ra_offload *o)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    const struct ra_config *c = &vw->m->config;
    struct ra_infinigen_params p;
    int cap, rc;
    if ((rc = ra_infinigen_params_of(vw->cfg, &p)) != RA_OK ||
        (rc = pool_capacity(c, vw->cfg, vw->max_rows, &cap)) != RA_OK)
        return rc;
    struct ig_state *st = calloc(1, sizeof *st);
    if (!st)
        return ra_error_set(RA_ENOMEM, "infinigen: out of memory");
    vw->policy_state = st;
    st->sel_layer = -1;
    if ((rc = ra_infinigen_init_on(&st->ig, c, &p, cap, vw->be)) != RA_OK || /* Kp: device memory */
        (rc = ra_kvpool_init(&st->pool, c->n_layers, c->n_kv_heads, c->head_dim, vw->max_rows,
                             vw->cfg->ig_pool_mem)) != RA_OK)
        goto fail;
    const size_t stage = (size_t)(cap + 1) * vw->kv_dim * sizeof(float);
    for (int i = 0; i < 2; i++) {
        st->stage_k[i] = vw->be->ops->alloc_mem(vw->be, stage, RA_MEM_HOST_PINNED);
        st->stage_v[i] = vw->be->ops->alloc_mem(vw->be, stage, RA_MEM_HOST_PINNED);
    }
    st->qs = malloc((size_t)c->dim * sizeof(float));
    st->sel = malloc((size_t)c->n_kv_heads * (cap + 1) * sizeof(int32_t));
    st->rows = calloc((size_t)c->n_layers, sizeof(int));
    if (!st->stage_k[0] || !st->stage_k[1] || !st->stage_v[0] || !st->stage_v[1] || !st->qs || !st->sel ||
        !st->rows) {
        rc = ra_error_set(RA_ENOMEM, "infinigen: out of memory for %d slots", cap);
        goto fail;
    }
    if ((rc = calibrate(o, st)) != RA_OK)
        goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        const float *k = ra_offload_pool_k(o, l), *v = ra_offload_pool_v(o, l);
        for (int t = 0; t < vw->n_prompt; t++) {
            const size_t off = (size_t)t * vw->kv_dim;
            int slot;
            if ((rc = ra_kvpool_insert(&st->pool, l, t, k + off, v + off, &slot, NULL)) != RA_OK ||
                (rc = ra_infinigen_kp_store(&st->ig, l, slot, t, k + off)) != RA_OK)
                goto fail;
        }
    }
    return RA_OK;
fail:
    ig_end(o);
    return rc;
}

/* Rows of layer LAYER's working set: everything pooled for a dense layer, else the speculation's. */
static int ig_fetch(struct ra_offload *o, int layer, int pos)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct ig_state *st = vw->policy_state;
    (void)pos;
    const int spec = layer >= st->ig.p.dense_layers;
    if (spec && st->sel_layer != layer)
        return ra_error_set(RA_EINVAL, "infinigen: layer %d fetched before its speculation", layer);
    const int m = spec ? st->rows[layer] : st->pool.n_used[layer];
    if (!spec)
        st->rows[layer] = m;
    float *sk = st->stage_k[layer & 1], *sv = st->stage_v[layer & 1];
    int rc = ra_kvpool_gather(&st->pool, layer, spec ? st->sel : NULL, m, sk, sv);
    const size_t bytes = (size_t)m * vw->kv_dim * sizeof(float);
    if (rc == RA_OK)
        rc = ra_offload_send(o, ra_offload_slot_k(o, layer), sk, bytes, 0);
    if (rc == RA_OK)
        rc = ra_offload_send(o, ra_offload_slot_v(o, layer), sv, bytes, 0);
    st->steps_rows += m;
    return rc;
}

static int ig_new_row(struct ra_offload *o, int layer, int pos)
{
    (void)pos;
    return state(o)->rows[layer];
}

static int ig_attend(struct ra_offload *o, int layer, int pos, const struct ra_hook_args *a, const float **k,
                     const float **v, int *rows)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct ig_state *st = vw->policy_state;
    const struct ra_weights *w = &vw->ctx->weights;
    struct ra_backend *be = vw->be;
    const struct ra_config *c = &vw->m->config;
    const struct ra_rope rope = ra_config_rope(c);
    *k = ra_offload_slot_k(o, layer);
    *v = ra_offload_slot_v(o, layer);
    *rows = st->rows[layer] + 1;
    if (layer + 1 >= c->n_layers || layer + 1 < st->ig.p.dense_layers)
        return RA_OK;
    /* the rehearsal of layer l+1 from this layer's attention input */
    int rc = be->ops->matmul(be, st->qs, c->dim, a->xa, c->dim, &w->layers[layer + 1].wq, 1);
    if (rc == RA_OK)
        rc = be->ops->rope(be, st->qs, c->dim, &(struct ra_rows){ 1, pos, NULL }, c->n_heads, c->head_dim, &rope);
    if (rc == RA_OK)
        rc = be->ops->synchronize(be);
    if (rc == RA_OK)
        rc = ra_infinigen_speculate(&st->ig, layer + 1, st->qs, st->pool.n_used[layer + 1], st->sel,
                                    &st->rows[layer + 1]);
    st->sel_layer = rc == RA_OK ? layer + 1 : -1;
    return rc;
}

static int ig_store(struct ra_offload *o, int layer, int pos)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct ig_state *st = vw->policy_state;
    const size_t off = (size_t)st->rows[layer] * vw->kv_dim;
    const float *sk = ra_offload_slot_k(o, layer), *sv = ra_offload_slot_v(o, layer); /* f32 (offload.c) */
    const float *k = sk + off, *v = sv + off;
    int slot;
    int rc = ra_kvpool_insert(&st->pool, layer, pos, k, v, &slot, NULL);
    return rc == RA_OK ? ra_infinigen_kp_store(&st->ig, layer, slot, pos, k) : rc;
}

const struct ra_offload_policy ra_infinigen_policy = {
    .name = "infinigen",
    .fetch_after_attend = 1,
    .begin = ig_begin,
    .fetch = ig_fetch,
    .attend = ig_attend,
    .store = ig_store,
    .end = ig_end,
    .new_row = ig_new_row,
    .owns_pool = 1,
};

const struct ra_kvpool *ra_infinigen_offload_pool(struct ra_offload *o)
{
    struct ig_state *st = state(o);
    return st ? &st->pool : NULL;
}

const struct ra_infinigen *ra_infinigen_offload_state(struct ra_offload *o)
{
    struct ig_state *st = state(o);
    return st ? &st->ig : NULL;
}

int ra_infinigen_offload_rows(struct ra_offload *o, int layer)
{
    struct ig_state *st = state(o);
    return st && layer >= 0 && layer < ra_offload_view(o)->n_layers ? st->rows[layer] : -1;
}

void ra_infinigen_offload_report(struct ra_offload *o, FILE *f)
{
    struct ig_state *st = state(o);
    if (!st)
        return;
    const struct ra_offload_view *vw = ra_offload_view(o);
    const struct ra_offload_stats *s = ra_offload_stats(o);
    const double per = s->steps > 0 ? (double)s->steps * vw->n_layers : 1;
    fprintf(f, ", ratio %g alpha %g cap %g: %.1f of %d pooled rows per layer and token, pool of %d slots (%lld "
            "evictions), partial key cache %zu bytes",
            st->ig.p.ratio, st->ig.p.alpha, st->ig.p.cap, (double)st->steps_rows / per, st->pool.n_used[0],
            st->pool.capacity, (long long)st->pool.evictions, ra_infinigen_kp_bytes(&st->ig));
}
