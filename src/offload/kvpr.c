/* KVPR: profiler, planner, runtime. See kvpr.h. */
#include "kvpr.h"
#include "../status.h"
#include "../timing.h"

#include <math.h>
#include <stdlib.h>

int ra_kvpr_x_rows(const struct ra_kvpr_shape *sh, int l)
{
    (void)sh;
    return l;
}

static int kv_elem(const struct ra_kvpr_shape *sh) { return sh->kv_elem ? sh->kv_elem : sh->elem; }

void ra_kvpr_bytes(const struct ra_kvpr_shape *sh, int l, int64_t *x_bytes, int64_t *kv_bytes)
{
    *x_bytes = (int64_t)ra_kvpr_x_rows(sh, l) * sh->dim * sh->elem;
    *kv_bytes = 2 * (int64_t)(sh->s - l) * sh->kv_dim * kv_elem(sh);
}

/* Messages of K (as many of V) for split l: the rows before x0 and after x0+l. */
static int kv_segments(const struct ra_kvpr_shape *sh, int l)
{
    const int before = sh->x0 < sh->s ? sh->x0 : sh->s;
    return (before > 0) + (sh->x0 + l < sh->s);
}

double ra_kvpr_cost(const struct ra_kvpr_profile *p, const struct ra_kvpr_shape *sh, int l)
{
    int64_t xb, kvb;
    ra_kvpr_bytes(sh, l, &xb, &kvb);
    const double inv = isinf(p->v_com) ? 0 : 1.0 / p->v_com;
    const double t_x = l ? p->lat_s + (double)xb * inv : 0;
    const double t_kv = 2 * kv_segments(sh, l) * p->lat_s + (double)kvb * inv;
    const double t_re = !l ? 0 : p->fixed_s > 0 ? p->fixed_s
                                 : p->gemm_s0 + 4.0 * l * (double)sh->dim * sh->kv_dim / p->v_gpu;
    return t_x + (t_re > t_kv ? t_re : t_kv);
}

int ra_kvpr_plan_scan(const struct ra_kvpr_profile *p, const struct ra_kvpr_shape *sh)
{
    const int lmax = sh->x_rows < sh->s - sh->x0 ? sh->x_rows : sh->s - sh->x0;
    int best = 0;
    double tbest = ra_kvpr_cost(p, sh, 0);
    for (int l = 1; l <= lmax; l++) {
        const double t = ra_kvpr_cost(p, sh, l);
        if (t < tbest)
            tbest = t, best = l;
    }
    return best;
}

int ra_kvpr_plan_closed(const struct ra_kvpr_profile *p, const struct ra_kvpr_shape *sh)
{
    const int lmax = sh->x_rows < sh->s - sh->x0 ? sh->x_rows : sh->s - sh->x0;
    if (lmax <= 0 || isinf(p->v_com))
        return 0;
    const double a = (double)sh->dim * sh->elem / p->v_com, c = 2.0 * sh->kv_dim * kv_elem(sh) / p->v_com;
    const double r = 4.0 * sh->dim * (double)sh->kv_dim / p->v_gpu;
    if (c <= a)
        return 0;
    const double ls = c * sh->s / (r + c);
    int lo = (int)floor(ls), hi = lo + 1;
    lo = lo < 0 ? 0 : lo > lmax ? lmax : lo;
    hi = hi < 0 ? 0 : hi > lmax ? lmax : hi;
    const struct ra_kvpr_profile q = { p->v_com, 0, p->v_gpu, 0, 0 }; /* the closed form's own model */
    return ra_kvpr_cost(&q, sh, hi) < ra_kvpr_cost(&q, sh, lo) ? hi : lo;
}

int ra_kvpr_recompute(struct ra_context *ctx, int layer, const float *x, int x0, int nx, float *k, float *v)
{
    struct ra_backend *be = ctx->backend;
    const struct ra_config *c = &ctx->model->config;
    const struct ra_rope rope = ra_config_rope(c);
    const struct ra_layer_weights *w = &ctx->weights.layers[layer];
    const int kvd = ra_config_kv_dim(c);
    int rc = be->ops->matmul(be, k, kvd, x, c->dim, &w->wk, nx);
    if (rc == RA_OK)
        rc = be->ops->matmul(be, v, kvd, x, c->dim, &w->wv, nx);
    if (rc == RA_OK)
        rc = be->ops->rope(be, k, kvd, &(struct ra_rows){ nx, x0, NULL }, c->n_kv_heads, c->head_dim, &rope);
    return rc;
}

/* ---------------------------------------------------------------- profiler */

/* The best of three runs, each waited for, of one step: the recompute of n rows of layer 0 into
 * k, v (f32, n rows), or where k is NULL a copy of `bytes` from the host pool to a device slot. */
static int time_best(struct ra_offload *o, int n, size_t bytes, float *k, float *v, double *t)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct ra_backend *be = vw->be;
    int rc = RA_OK;
    double best = INFINITY;
    for (int rep = 0; rep < 3 && rc == RA_OK; rep++) {
        const double t0 = ra_wall_s();
        rc = k ? ra_kvpr_recompute(vw->ctx, 0, ra_offload_slot_x(o, 0), 0, n, k, v)
               : be->ops->copy_async(be, ra_offload_slot_k(o, 0), ra_offload_pool_k(o, 0), bytes, RA_STREAM_COPY);
        if (rc == RA_OK)
            rc = be->ops->synchronize(be);
        const double dt = ra_wall_s() - t0;
        best = dt < best ? dt : best;
    }
    *t = best;
    return rc;
}

static int profile(struct ra_offload *o, struct ra_kvpr_profile *p, float *k, float *v)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    const struct ra_offload_config *cfg = vw->cfg;
    struct ra_backend *be = vw->be;
    int rc = RA_OK;
    *p = (struct ra_kvpr_profile){ INFINITY, 0, INFINITY, 0, 0 };
    /* the link: modelled where it is emulated, timed where it is real */
    if (be->ops->mem_kind(be) != RA_MEM_DEVICE) {
        if (cfg->link_gbps > 0)
            p->v_com = cfg->link_gbps * 1e9, p->lat_s = cfg->link_latency_us * 1e-6;
    } else {
        const size_t big = (size_t)vw->max_rows * vw->row_bytes, small = big / 16 ? big / 16 : big;
        double t_small, t_big;
        if ((rc = time_best(o, 0, small, NULL, NULL, &t_small)) == RA_OK &&
            (rc = time_best(o, 0, big, NULL, NULL, &t_big)) == RA_OK && t_big > t_small && big > small) {
            p->v_com = (double)(big - small) / (t_big - t_small);
            p->lat_s = fmax(0, t_small - (double)small / p->v_com);
        }
    }
    /* the recompute GEMM, at two sizes of the shape it runs */
    const int n1 = vw->max_rows >= 4 ? vw->max_rows / 4 : 2, n2 = vw->max_rows >= 2 ? vw->max_rows : 2;
    double t1, t2;
    if (rc == RA_OK && vw->max_rows >= 2 && (rc = time_best(o, n1, 0, k, v, &t1)) == RA_OK &&
        (rc = time_best(o, n2, 0, k, v, &t2)) == RA_OK) {
        const double flop_row = 4.0 * vw->dim * (double)vw->kv_dim;
        const double per_row = n2 > n1 && t2 > t1 ? (t2 - t1) / (n2 - n1) : t2 / n2;
        p->v_gpu = flop_row / per_row;
        p->gemm_s0 = fmax(0, t2 - per_row * n2);
    }
    /* the CPU backend recomputes on the prefill span's row count (kvpr.h): a constant */
    const int span = vw->x_end - vw->x_start;
    if (rc == RA_OK && be->ops->mem_kind(be) != RA_MEM_DEVICE && span > 0)
        rc = time_best(o, span, 0, k, v, &p->fixed_s);
    if (cfg->kvpr_v_com > 0)
        p->v_com = cfg->kvpr_v_com;
    if (cfg->kvpr_v_gpu > 0)
        p->v_gpu = cfg->kvpr_v_gpu, p->gemm_s0 = 0, p->fixed_s = 0;
    return rc;
}

int ra_kvpr_profile(struct ra_offload *o, struct ra_kvpr_profile *p)
{
    if (ra_offload_view(o)->kv_dtype != RA_DTYPE_F32) /* the slots cannot hold the f32 output */
        return ra_error_set(RA_EINVAL, "kvpr: ra_kvpr_profile times the recompute into f32 slots");
    return profile(o, p, ra_offload_slot_k(o, 0), ra_offload_slot_v(o, 0));
}

/* ---------------------------------------------------------------- runtime */

struct kvpr_state {
    struct ra_kvpr_profile prof;
    int l, nx;                   /* this step's split and X rows sent */
    float *scratch_k, *scratch_v; /* device, the span's rows: the CPU backend's recompute output */
};

static struct ra_kvpr_shape shape_at(struct ra_offload *o, int pos)
{
    const struct ra_offload_view *vw = ra_offload_view(o);
    return (struct ra_kvpr_shape){ .dim = vw->dim, .kv_dim = vw->kv_dim, .elem = (int)sizeof(float), .s = pos,
                                   .x0 = vw->x_start, .x_rows = vw->x_end - vw->x_start,
                                   .kv_elem = (int)ra_dtype_size(vw->kv_dtype) };
}

static int kvpr_begin(struct ra_offload *o)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct kvpr_state *st = calloc(1, sizeof *st);
    if (!st)
        return ra_error_set(RA_ENOMEM, "kvpr: out of memory");
    vw->policy_state = st;
    const size_t two = (size_t)(vw->max_rows > 1 ? vw->max_rows : 1) * vw->kv_dim * sizeof(float);
    st->scratch_k = vw->be->ops->alloc_mem(vw->be, two, RA_MEM_DEVICE);
    st->scratch_v = vw->be->ops->alloc_mem(vw->be, two, RA_MEM_DEVICE);
    if (!st->scratch_k || !st->scratch_v)
        return ra_error_set(RA_ENOMEM, "kvpr: cannot allocate device scratch");
    if (vw->kv_dtype != RA_DTYPE_F32 && !vw->be->ops->narrow)
        return ra_error_set(RA_EUNSUPPORTED, "kvpr: the %s backend cannot round K, V to %s",
                            vw->be->ops->name, ra_dtype_name(vw->kv_dtype));
    return profile(o, &st->prof, st->scratch_k, st->scratch_v);
}

static void kvpr_end(struct ra_offload *o)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct kvpr_state *st = vw->policy_state;
    if (!st)
        return;
    if (st->scratch_k) vw->be->ops->release_mem(vw->be, st->scratch_k, RA_MEM_DEVICE);
    if (st->scratch_v) vw->be->ops->release_mem(vw->be, st->scratch_v, RA_MEM_DEVICE);
    free(st);
    vw->policy_state = NULL;
}

int ra_kvpr_split(struct ra_offload *o, int pos)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct kvpr_state *st = vw->policy_state;
    const struct ra_kvpr_shape sh = shape_at(o, pos);
    const int lmax = sh.x_rows < sh.s - sh.x0 ? sh.x_rows : sh.s - sh.x0;
    if (lmax <= 0)
        return 0;
    if (vw->cfg->kvpr_force_l >= 0)
        return vw->cfg->kvpr_force_l < lmax ? vw->cfg->kvpr_force_l : lmax;
    return ra_kvpr_plan_scan(&st->prof, &sh);
}

static int kvpr_fetch(struct ra_offload *o, int layer, int pos)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct kvpr_state *st = vw->policy_state;
    if (layer == 0) { /* re-planned every step as the context grows; the same l for every layer */
        const struct ra_kvpr_shape sh = shape_at(o, pos);
        st->l = ra_kvpr_split(o, pos);
        st->nx = ra_kvpr_x_rows(&sh, st->l);
        struct ra_offload_stats *c = ra_offload_counters(o);
        c->kvpr_l = st->l;
        c->kvpr_l_closed = ra_kvpr_plan_closed(&st->prof, &sh);
        c->kvpr_v_com = st->prof.v_com, c->kvpr_v_gpu = st->prof.v_gpu, c->kvpr_fixed_s = st->prof.fixed_s;
    }
    const size_t row = vw->row_bytes;
    const int x0 = vw->x_start, x1 = x0 + st->l;
    char *k = ra_offload_slot_k(o, layer), *v = ra_offload_slot_v(o, layer);
    const char *pk = ra_offload_pool_k(o, layer), *pv = ra_offload_pool_v(o, layer);
    /* activations first: the recompute starts as soon as they arrive */
    int rc = ra_offload_send(o, ra_offload_slot_x(o, layer), ra_offload_pool_x(o, layer) + (size_t)x0 * vw->dim,
                             (size_t)st->nx * vw->dim * sizeof(float), 1);
    const int b = st->l ? (x0 < pos ? x0 : pos) : pos; /* KV rows [0, b) and [x1, pos) */
    if (rc == RA_OK)
        rc = ra_offload_send(o, k, pk, (size_t)b * row, 0);
    if (rc == RA_OK)
        rc = ra_offload_send(o, v, pv, (size_t)b * row, 0);
    if (rc == RA_OK && st->l && x1 < pos) {
        const size_t off = (size_t)x1 * row, bytes = (size_t)(pos - x1) * row;
        if ((rc = ra_offload_send(o, k + off, pk + off, bytes, 0)) == RA_OK)
            rc = ra_offload_send(o, v + off, pv + off, bytes, 0);
    }
    return rc;
}

static int kvpr_ready(struct ra_offload *o, int layer, int pos)
{
    struct ra_offload_view *vw = ra_offload_view(o);
    struct kvpr_state *st = vw->policy_state;
    (void)pos;
    if (!st->l)
        return RA_OK;
    int rc = ra_offload_wait_link(o, 1);
    if (rc != RA_OK)
        return rc;
    const double t0 = ra_wall_s();
    const size_t off = (size_t)vw->x_start * vw->row_bytes, count = (size_t)st->l * vw->kv_dim;
    char *k = (char *)ra_offload_slot_k(o, layer) + off, *v = (char *)ra_offload_slot_v(o, layer) + off;
    struct ra_backend *be = vw->be;
    const int device = be->ops->mem_kind(be) == RA_MEM_DEVICE, narrow = vw->kv_dtype != RA_DTYPE_F32;
    if (device && !narrow) {
        rc = ra_kvpr_recompute(vw->ctx, layer, ra_offload_slot_x(o, layer), vw->x_start, st->l, (float *)k,
                               (float *)v);
    } else { /* into the f32 scratch: the CPU backend on the span's row count (kvpr.h; rows [l, span) of
                X are stale and unused), then rounded to the cache's dtype as the forward pass does */
        rc = ra_kvpr_recompute(vw->ctx, layer, ra_offload_slot_x(o, layer), vw->x_start,
                               device ? st->l : vw->x_end - vw->x_start, st->scratch_k, st->scratch_v);
        if (rc == RA_OK)
            rc = narrow ? be->ops->narrow(be, k, vw->kv_dtype, st->scratch_k, count)
                        : be->ops->copy_async(be, k, st->scratch_k, count * sizeof(float), RA_STREAM_COMPUTE);
        if (rc == RA_OK)
            rc = narrow ? be->ops->narrow(be, v, vw->kv_dtype, st->scratch_v, count)
                        : be->ops->copy_async(be, v, st->scratch_v, count * sizeof(float), RA_STREAM_COMPUTE);
    }
    if (rc == RA_OK && be->ops->mem_kind(be) != RA_MEM_DEVICE)
        rc = be->ops->synchronize(be);
    ra_offload_counters(o)->recompute_s += ra_wall_s() - t0;
    ra_offload_charge(o, ra_wall_s() - t0);
    return rc;
}

const struct ra_offload_policy ra_kvpr_policy = {
    .name = "kvpr", .begin = kvpr_begin, .fetch = kvpr_fetch, .ready = kvpr_ready, .end = kvpr_end,
};
