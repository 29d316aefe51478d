/* CacheBlend's passes over loaded chunks (reuse.h, blend.h): pass A (every
 * row through the check layers, deviations), the selection, pass B (the
 * selected rows through every layer over the installed rows), the schedule
 * (gradual filtering) and the controller of the auto ratio. */
#include "reuse/blend.h"
#include "backend.h"
#include "forward.h"
#include "half.h"
#include "status.h"
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ modes, report */

static const char *const mode_names[] = { "none", "prefix", "full", "blend", "craft" };

int ra_reuse_mode_parse(const char *s, const char *opt, enum ra_reuse_mode *mode)
{
    for (int i = 0; i < 5; i++)
        if (s && strcmp(s, mode_names[i]) == 0) {
            *mode = (enum ra_reuse_mode)i;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "%s: '%s' is not none, prefix, full, blend or craft", opt ? opt : "--reuse",
                        s ? ra_esc(s) : "");
}

const char *ra_reuse_mode_name(enum ra_reuse_mode mode)
{
    return (unsigned)mode < 5 ? mode_names[mode] : "?";
}

void ra_reuse_report_free(struct ra_reuse_report *rep)
{
    if (!rep)
        return;
    free(rep->recomputed);
    rep->recomputed = NULL;
    rep->n_layers = 0;
}

/* ------------------------------------------------------------ selection */

struct ranked {
    float dev;
    int32_t i;
};

/* Higher deviation first (NaN highest: a broken row is recomputed), then the lower index. */
static int by_deviation(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    const int xn = isnan(x->dev), yn = isnan(y->dev);
    if (xn != yn)
        return xn ? -1 : 1;
    if (!xn && x->dev != y->dev)
        return x->dev > y->dev ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

int ra_blend_select_count(const float *dev, const uint8_t *must, int n, int k, int32_t *out, int *n_out)
{
    struct ranked *r = malloc(sizeof *r * (size_t)(n > 0 ? n : 1));
    uint8_t *take = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!r || !take) {
        free(r), free(take);
        return ra_error_set(RA_ENOMEM, "blend: out of memory selecting %d rows", n);
    }
    int others = 0;
    for (int i = 0; i < n; i++) {
        if (must && must[i])
            take[i] = 1;
        else
            r[others++] = (struct ranked){ dev[i], i };
    }
    if (k > others)
        k = others;
    qsort(r, (size_t)others, sizeof *r, by_deviation);
    for (int j = 0; j < k; j++)
        take[r[j].i] = 1;
    *n_out = 0;
    for (int i = 0; i < n; i++)
        if (take[i])
            out[(*n_out)++] = i;
    free(r);
    free(take);
    return RA_OK;
}

int ra_blend_select(const float *dev, const uint8_t *must, int n, double ratio, int32_t *out, int *n_out)
{
    if (!(ratio >= 0 && ratio <= 1) || n < 0)
        return ra_error_set(RA_EINVAL, "blend: ratio %g is not in [0, 1]", ratio);
    int others = 0;
    for (int i = 0; i < n; i++)
        others += !(must && must[i]);
    return ra_blend_select_count(dev, must, n, (int)lround(ratio * others), out, n_out);
}

/* ------------------------------------------------------------ the engine */

struct ra_blend {
    struct ra_context *ctx;
    struct ra_kvcache *kv;
    const struct ra_blend_load *loads;
    const int32_t *ids;     /* the prompt's [n] */
    int n_loads, n, n_layers, kvd;
    int lo, hi;             /* the rows this engine computes: [lo, hi) of the prompt */
    const struct ra_reuse_config *cfg;
    struct ra_loader ld;
    int32_t *load_of;       /* [n] the load holding a row, -1: none */
    uint8_t *must;          /* [n] rows of [lo, hi) no load holds (0 outside the slice) */
    int n_loaded;           /* loaded rows in [lo, hi) */
    float *dev;             /* [n] pass A: summed over the check layers */
    int check_last;         /* the last check layer (blend) */
    void *scratch;          /* backend rows of the largest load, to rotate stored K */
    uint8_t *stored_k;      /* [n][row] host: stored K at the prompt's positions, one layer (deviations) */
    float *fresh_k, *fresh_v; /* [n][kvd] host: a pass's fresh rows, one layer */
    float *dev_cur;         /* [n] pass B with a schedule: this layer's deviation of each computed row */
    int *recomputed;        /* [n_layers] */
    int schedule_on;
};

static size_t row_bytes(const struct ra_blend *e)
{
    return ra_kvcache_row_bytes(e->kv);
}

/* Layer L of every load into the cache at its rows, K moved by its shift. */
static int install_layer(struct ra_blend *e, int l)
{
    int rc = ra_loader_wait(&e->ld, l);
    if (rc != RA_OK)
        return rc;
    struct ra_backend *be = e->ctx->backend;
    const struct ra_config *c = &e->ctx->model->config;
    const struct ra_rope rope = ra_config_rope(c);
    for (int i = 0; i < e->n_loads && rc == RA_OK; i++) {
        const struct ra_blend_load *d = &e->loads[i];
        const size_t bytes = (size_t)d->n * row_bytes(e);
        void *k = ra_kvcache_k(e->kv, l, d->start), *v = ra_kvcache_v(e->kv, l, d->start);
        if ((rc = be->ops->upload(be, k, e->ld.k[(size_t)l * e->n_loads + i], bytes)) == RA_OK &&
            (rc = be->ops->upload(be, v, e->ld.v[(size_t)l * e->n_loads + i], bytes)) == RA_OK && d->shift)
            rc = be->ops->rope_shift(be, k, e->kv->dtype, e->kvd, d->n, c->n_kv_heads, c->head_dim, d->shift, &rope);
    }
    return rc;
}

/* The stored K of layer L at the prompt's positions into e->stored_k (host),
 * rotated on the backend as install_layer rotates it, without touching the cache. */
static int stored_layer_k(struct ra_blend *e, int l)
{
    struct ra_backend *be = e->ctx->backend;
    const struct ra_config *c = &e->ctx->model->config;
    const struct ra_rope rope = ra_config_rope(c);
    int rc = ra_loader_wait(&e->ld, l);
    for (int i = 0; i < e->n_loads && rc == RA_OK; i++) {
        const struct ra_blend_load *d = &e->loads[i];
        const size_t bytes = (size_t)d->n * row_bytes(e);
        uint8_t *host = e->stored_k + (size_t)d->start * row_bytes(e);
        const void *src = e->ld.k[(size_t)l * e->n_loads + i];
        if (!d->shift) {
            memcpy(host, src, bytes);
            continue;
        }
        if ((rc = be->ops->upload(be, e->scratch, src, bytes)) == RA_OK &&
            (rc = be->ops->rope_shift(be, e->scratch, e->kv->dtype, e->kvd, d->n, c->n_kv_heads, c->head_dim,
                                      d->shift, &rope)) == RA_OK)
            rc = be->ops->download(be, host, e->scratch, bytes);
    }
    return rc;
}

/* Element j of a stored row of the KV dtype, and a fresh value as the cache would hold it. */
static float stored_at(const struct ra_blend *e, const void *row, int j)
{
    return e->kv->dtype == RA_DTYPE_BF16 ? ra_bf16_to_f32(((const uint16_t *)row)[j]) : ((const float *)row)[j];
}
static float cached(const struct ra_blend *e, float x)
{
    return e->kv->dtype == RA_DTYPE_BF16 ? ra_bf16_to_f32(ra_f32_to_bf16(x)) : x;
}

/* Deviation |K - K'|^2 + |V - V'|^2 of the pass's fresh rows (args) against the
 * stored rows of layer a->layer, per computed row (0 for must rows), into OUT[a->n]. */
static int deviations(struct ra_blend *e, const struct ra_hook_args *a, float *out)
{
    struct ra_backend *be = e->ctx->backend;
    const size_t fbytes = (size_t)a->n * e->kvd * sizeof(float);
    int rc;
    if ((rc = stored_layer_k(e, a->layer)) != RA_OK || (rc = be->ops->download(be, e->fresh_k, a->k, fbytes)) != RA_OK ||
        (rc = be->ops->download(be, e->fresh_v, a->v, fbytes)) != RA_OK)
        return rc;
    for (int i = 0; i < a->n; i++) {
        const int p = ra_rows_pos(a->rows, i), li = e->load_of[p];
        out[i] = 0;
        if (li < 0)
            continue;
        const struct ra_blend_load *d = &e->loads[li];
        const void *sk = e->stored_k + (size_t)p * row_bytes(e);
        const void *sv = (const uint8_t *)e->ld.v[(size_t)a->layer * e->n_loads + li] + (size_t)(p - d->start) * row_bytes(e);
        const float *fk = e->fresh_k + (size_t)i * e->kvd, *fv = e->fresh_v + (size_t)i * e->kvd;
        double s = 0;
        for (int j = 0; j < e->kvd; j++) {
            const double dk = cached(e, fk[j]) - stored_at(e, sk, j), dv = cached(e, fv[j]) - stored_at(e, sv, j);
            s += dk * dk + dv * dv;
        }
        out[i] = (float)s;
    }
    return RA_OK;
}

/* Pass A's kv_ready: deviations at each check layer, the pass ended after the last. */
static int pass_a_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct ra_blend *e = self;
    int is_check = 0;
    for (int i = 0; i < e->cfg->n_check; i++)
        is_check |= e->cfg->check[i] == a->layer;
    if (!is_check)
        return RA_OK;
    int rc = deviations(e, a, e->dev_cur);
    if (rc != RA_OK)
        return rc;
    for (int i = 0; i < a->n; i++)
        e->dev[ra_rows_pos(a->rows, i)] += e->dev_cur[i];
    return a->layer == e->check_last ? RA_HOOK_STOP : RA_OK;
}

static int pass_b_layer_begin(void *self, const struct ra_hook_args *a)
{
    return install_layer(self, a->layer);
}

/* The ratio of layer L with a schedule (layers after the last check layer). */
static double schedule_ratio(const struct ra_blend *e, int l)
{
    const int j = l - e->check_last - 1;
    return e->cfg->schedule[j < e->cfg->n_schedule ? j : e->cfg->n_schedule - 1];
}

/* Pass B's kv_ready: counts the layer's rows; with a schedule, their deviations. */
static int pass_b_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct ra_blend *e = self;
    e->recomputed[a->layer] = a->n > e->recomputed[a->layer] ? a->n : e->recomputed[a->layer];
    if (!e->schedule_on || a->layer <= e->check_last || a->layer + 1 >= e->n_layers)
        return RA_OK;
    return deviations(e, a, e->dev_cur);
}

/* Pass B's narrow: after a layer past the check, the next layer's count by this layer's deviations. */
static int pass_b_narrow(void *self, const struct ra_hook_args *a, int32_t *keep, int *n_keep)
{
    struct ra_blend *e = self;
    if (!e->schedule_on || a->layer <= e->check_last)
        return RA_OK;
    uint8_t *must = malloc((size_t)a->n);
    if (!must)
        return ra_error_set(RA_ENOMEM, "blend: out of memory");
    for (int i = 0; i < a->n; i++)
        must[i] = e->must[ra_rows_pos(a->rows, i)];
    const int k = (int)lround(schedule_ratio(e, a->layer + 1) * e->n_loaded);
    int rc = ra_blend_select_count(e->dev_cur, must, a->n, k, keep, n_keep);
    free(must);
    return rc;
}

/* Runs one pass over ROWS with HOOK on the context, the hook removed after. */
static int run_pass(struct ra_blend *e, struct ra_hook *hook, const int32_t *ids, const struct ra_rows *rows,
                    float *logits)
{
    int32_t *tok = NULL;
    int rc = ra_context_hook_add(e->ctx, hook);
    if (rc != RA_OK)
        return rc;
    if (rows->pos) {
        if (!(tok = malloc(sizeof *tok * (size_t)rows->n))) {
            rc = ra_error_set(RA_ENOMEM, "blend: out of memory");
            goto out;
        }
        for (int i = 0; i < rows->n; i++)
            tok[i] = ids[rows->pos[i]];
    }
    rc = ra_forward_rows(e->ctx, tok ? tok : ids + rows->start, rows, e->kv, logits);
out:
    ra_context_hook_remove(e->ctx, hook);
    free(tok);
    return rc;
}

/* The auto ratio: the larger of RA_BLEND_MIN_RATIO and the ratio whose pass B
 * takes the load time left, at the rate per row and layer pass A measured. */
static double auto_ratio(struct ra_blend *e, double t_pass_a)
{
    const int rows = e->hi - e->lo;
    const double rate = t_pass_a / ((double)rows * (e->check_last + 1));
    const double left = ra_loader_total_s(&e->ld) - (ra_wall_s() - e->ld.t0);
    const int must = rows - e->n_loaded;
    double r = e->n_loaded > 0 && rate > 0 ? (left / (rate * e->n_layers) - must) / e->n_loaded : 1.0;
    r = r > RA_BLEND_MIN_RATIO ? r : RA_BLEND_MIN_RATIO;
    return r < 1 ? r : 1;
}

/* ------------------------------------------------------------ modes */

static int check_config(const struct ra_blend *e, enum ra_reuse_mode mode)
{
    const struct ra_reuse_config *c = e->cfg;
    if (mode != RA_REUSE_BLEND)
        return RA_OK;
    if (c->n_check < 1 || c->n_check > RA_BLEND_MAX_CHECK)
        return ra_error_set(RA_EINVAL, "blend: %d check layers (1 to %d)", c->n_check, RA_BLEND_MAX_CHECK);
    for (int i = 0; i < c->n_check; i++)
        if (c->check[i] < 0 || c->check[i] >= e->n_layers || (i > 0 && c->check[i] <= c->check[i - 1]))
            return ra_error_set(RA_EINVAL, "blend: check layer %d is not ascending within the model's %d layers",
                                c->check[i], e->n_layers);
    if (!(c->ratio <= 1) || isnan(c->ratio))
        return ra_error_set(RA_EINVAL, "blend: ratio %g is above 1", c->ratio);
    if (c->n_schedule > 0) {
        if (c->ratio < 0)
            return ra_error_set(RA_EINVAL, "blend: a schedule takes no auto ratio");
        for (int i = 0; i < c->n_schedule; i++)
            if (!(c->schedule[i] >= 0 && c->schedule[i] <= 1) || (i > 0 && c->schedule[i] > c->schedule[i - 1]))
                return ra_error_set(RA_EINVAL, "blend: schedule entry %d (%g) is not in [0, 1] or not non-increasing",
                                    i, c->schedule[i]);
    }
    if (c->pick != RA_BLEND_PICK_DEVIATION && c->pick != RA_BLEND_PICK_RANDOM)
        return ra_error_set(RA_EINVAL, "blend: unknown pick rule %d", (int)c->pick);
    return RA_OK;
}

static int engine_init(struct ra_blend *e, struct ra_context *ctx, const int32_t *ids, int n, int lo, int hi,
                       const struct ra_blend_load *loads, int n_loads, const struct ra_reuse_config *cfg,
                       struct ra_kvcache *kv)
{
    const struct ra_config *c = &ctx->model->config;
    memset(e, 0, sizeof *e);
    e->ctx = ctx, e->kv = kv, e->ids = ids, e->loads = loads, e->n_loads = n_loads, e->n = n, e->cfg = cfg;
    e->lo = lo, e->hi = hi;
    e->n_layers = c->n_layers, e->kvd = ra_config_kv_dim(c);
    e->check_last = cfg->n_check > 0 ? cfg->check[cfg->n_check - 1] : 0;
    if (n < 1 || lo < 0 || hi <= lo || hi > n)
        return ra_error_set(RA_EINVAL, "reuse: rows [%d, %d) are not a slice of the prompt's %d", lo, hi, n);
    if (kv->n_layers != c->n_layers || kv->kv_dim != e->kvd || kv->capacity < hi)
        return ra_error_set(RA_EINVAL, "reuse: the KV cache (%d layers, %d rows) does not hold rows [0, %d)",
                            kv->n_layers, kv->capacity, hi);
    e->load_of = malloc(sizeof *e->load_of * (size_t)n);
    e->must = calloc((size_t)n, 1);
    e->dev = calloc((size_t)n, sizeof *e->dev);
    e->dev_cur = calloc((size_t)n, sizeof *e->dev_cur);
    e->recomputed = calloc((size_t)c->n_layers, sizeof *e->recomputed);
    if (!e->load_of || !e->must || !e->dev || !e->dev_cur || !e->recomputed)
        return ra_error_set(RA_ENOMEM, "reuse: out of memory for %d rows", n);
    for (int i = 0; i < n; i++)
        e->load_of[i] = -1;
    int largest = 0;
    for (int i = 0; i < n_loads; i++) {
        const struct ra_blend_load *d = &loads[i];
        if (d->start < 0 || d->n < 1 || d->start + d->n > hi || (i > 0 && d->start < loads[i - 1].start + loads[i - 1].n))
            return ra_error_set(RA_EINVAL, "reuse: loaded rows [%d, %d) are outside rows [0, %d) or overlap",
                                d->start, d->start + d->n, hi);
        for (int p = d->start; p < d->start + d->n; p++)
            e->load_of[p] = i;
        largest = d->n > largest ? d->n : largest;
    }
    for (int i = lo; i < hi; i++) {
        e->must[i] = e->load_of[i] < 0;
        e->n_loaded += !e->must[i];
    }
    if (hi == n && e->load_of[n - 1] >= 0)
        return ra_error_set(RA_EINVAL, "reuse: the prompt's last row is loaded; it must be computed for the logits");
    if (largest > 0 && !(e->scratch = ra_backend_alloc(ctx->backend, (size_t)largest * ra_kvcache_row_bytes(kv))))
        return ra_error_set(RA_ENOMEM, "reuse: out of backend memory for %d rows", largest);
    e->stored_k = malloc((size_t)n * ra_kvcache_row_bytes(kv));
    e->fresh_k = malloc((size_t)n * e->kvd * sizeof(float));
    e->fresh_v = malloc((size_t)n * e->kvd * sizeof(float));
    if (!e->stored_k || !e->fresh_k || !e->fresh_v)
        return ra_error_set(RA_ENOMEM, "reuse: out of memory for %d rows", n);
    return ra_loader_start(&e->ld, loads, n_loads, c->n_layers, ra_kvcache_row_bytes(kv), cfg->store_gbps);
}

static void engine_free(struct ra_blend *e)
{
    ra_loader_stop(&e->ld);
    if (e->scratch)
        ra_backend_release(e->ctx->backend, e->scratch);
    free(e->load_of), free(e->must), free(e->dev), free(e->dev_cur), free(e->recomputed);
    free(e->stored_k), free(e->fresh_k), free(e->fresh_v);
}

/* ------------------------------------------------------------ phases */

int ra_blend_open(struct ra_blend **out, struct ra_context *ctx, const int32_t *ids, int n, int lo, int hi,
                  const struct ra_blend_load *loads, int n_loads, const struct ra_reuse_config *cfg,
                  struct ra_kvcache *kv)
{
    static const struct ra_reuse_config defaults = RA_REUSE_CONFIG_INIT;
    struct ra_blend *e = malloc(sizeof *e);
    *out = NULL;
    if (!e)
        return ra_error_set(RA_ENOMEM, "reuse: out of memory");
    int rc = engine_init(e, ctx, ids, n, lo, hi, loads, n_loads, cfg ? cfg : &defaults, kv);
    if (rc != RA_OK) {
        engine_free(e);
        free(e);
        return rc;
    }
    *out = e;
    return RA_OK;
}

const uint8_t *ra_blend_must(const struct ra_blend *e)
{
    return e->must + e->lo;
}

int ra_blend_pass_a(struct ra_blend *e, const float **dev, const uint8_t **must)
{
    int rc = check_config(e, RA_REUSE_BLEND);
    if (rc != RA_OK)
        return rc;
    struct ra_hook a = { .self = e, .kv_ready = pass_a_kv_ready };
    const struct ra_rows slice = { e->hi - e->lo, e->lo, NULL };
    if ((rc = run_pass(e, &a, e->ids, &slice, NULL)) != RA_OK)
        return rc;
    for (int l = 0; l <= e->check_last; l++)
        e->recomputed[l] = slice.n;
    if (dev)
        *dev = e->dev + e->lo;
    if (must)
        *must = e->must + e->lo;
    return RA_OK;
}

int ra_blend_pass_b(struct ra_blend *e, const int32_t *sel, int n_sel, float *logits)
{
    for (int i = 0; i < n_sel; i++)
        if (sel[i] < e->lo || sel[i] >= e->hi || (i > 0 && sel[i] <= sel[i - 1]))
            return ra_error_set(RA_EINVAL, "reuse: selected row %d is outside rows [%d, %d) or out of order", sel[i],
                                e->lo, e->hi);
    if (logits && (n_sel < 1 || sel[n_sel - 1] != e->n - 1))
        return ra_error_set(RA_EINVAL, "reuse: the logits need the prompt's last row among the selected");
    if (e->cfg->n_schedule > 0 && (e->lo > 0 || e->hi < e->n))
        return ra_error_set(RA_EINVAL, "reuse: a blend schedule runs on one rank only");
    /* the whole slice is the span of a plain pass (`none` at ratio 1) */
    const int whole = n_sel == e->hi - e->lo;
    const struct ra_rows rows = whole ? (struct ra_rows){ n_sel, e->lo, NULL }
                                      : (struct ra_rows){ n_sel, n_sel ? sel[0] : e->lo, n_sel ? sel : NULL };
    e->schedule_on = e->cfg->n_schedule > 0;
    struct ra_hook b = { .self = e, .layer_begin = pass_b_layer_begin, .kv_ready = pass_b_kv_ready,
                         .narrow = e->schedule_on ? pass_b_narrow : NULL };
    return run_pass(e, &b, e->ids, &rows, logits);
}

void ra_blend_close(struct ra_blend *e, double ratio, struct ra_reuse_report *rep)
{
    if (!e)
        return;
    if (rep) {
        rep->ratio = ratio;
        rep->loaded_rows = e->n_loaded;
        rep->bytes_loaded = e->ld.bytes;
        rep->t_load = e->ld.t_load;
        rep->t_load_wait = e->ld.t_wait;
        free(rep->recomputed);
        rep->recomputed = e->recomputed;
        rep->n_layers = e->n_layers;
        e->recomputed = NULL;
    }
    engine_free(e);
    free(e);
}

int ra_blend_select_local(const float *dev, const uint8_t *must, int n, double ratio, const int *bounds, int p,
                          int32_t *out, int *n_out)
{
    if (p < 1 || bounds[0] != 0 || bounds[p] != n)
        return ra_error_set(RA_EINVAL, "blend: %d slices do not cover the prompt's %d rows", p, n);
    int rc = RA_OK, total = 0;
    for (int i = 0; i < p && rc == RA_OK; i++) {
        const int b = bounds[i], m = bounds[i + 1] - b;
        int got = 0;
        if (m < 0)
            return ra_error_set(RA_EINVAL, "blend: slice %d [%d, %d) is reversed", i, b, b + m);
        if ((rc = ra_blend_select(dev + b, must ? must + b : NULL, m, ratio, out + total, &got)) != RA_OK)
            break;
        for (int j = 0; j < got; j++)
            out[total + j] += b;
        total += got;
    }
    *n_out = total;
    return rc;
}

/* ------------------------------------------------------------ one rank */

/* Random deviations (the control of the quality study): the same count of rows, drawn by SEED. */
static void random_deviations(float *dev, int n, uint64_t seed)
{
    uint64_t s = seed ? seed : 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17; /* xorshift64 */
        dev[i] = (float)(s >> 40);
    }
}

/* blend: pass A, the selection (over the prompt, or per quota slice), pass B. */
static int run_blend(struct ra_blend *e, float *logits, struct ra_reuse_report *rep)
{
    const struct ra_reuse_config *cfg = e->cfg;
    double t = ra_wall_s();
    int rc = ra_blend_pass_a(e, NULL, NULL);
    if (rc != RA_OK)
        return rc;
    rep->t_pass_a = ra_wall_s() - t;
    t = ra_wall_s();
    const double ratio = cfg->n_schedule > 0 ? cfg->schedule[0] : cfg->ratio >= 0 ? cfg->ratio : auto_ratio(e, rep->t_pass_a);
    rep->ratio = ratio;
    if (cfg->pick == RA_BLEND_PICK_RANDOM)
        random_deviations(e->dev, e->n, cfg->seed);
    int32_t *sel = malloc(sizeof *sel * (size_t)e->n);
    int n_sel = 0;
    if (!sel)
        return ra_error_set(RA_ENOMEM, "blend: out of memory");
    rc = cfg->quota_bounds ? ra_blend_select_local(e->dev, e->must, e->n, ratio, cfg->quota_bounds, cfg->n_quota, sel, &n_sel)
                           : ra_blend_select(e->dev, e->must, e->n, ratio, sel, &n_sel);
    rep->t_select = ra_wall_s() - t;
    t = ra_wall_s();
    if (rc == RA_OK)
        rc = ra_blend_pass_b(e, sel, n_sel, logits);
    rep->t_pass_b = ra_wall_s() - t;
    for (int l = 0; l <= e->check_last; l++)
        e->recomputed[l] = e->n; /* pass A computed every row there */
    free(sel);
    return rc;
}

/* full: the must rows over every installed layer. */
static int run_full(struct ra_blend *e, float *logits, struct ra_reuse_report *rep)
{
    int32_t *rows = malloc(sizeof *rows * (size_t)e->n);
    if (!rows)
        return ra_error_set(RA_ENOMEM, "reuse: out of memory");
    int m = 0;
    for (int i = 0; i < e->n; i++)
        if (e->must[i])
            rows[m++] = i;
    const double t = ra_wall_s();
    int rc = ra_blend_pass_b(e, rows, m, logits);
    rep->t_pass_b = ra_wall_s() - t;
    free(rows);
    return rc;
}

/* prefix: the rows before the first load, then (over the installed loads)
 * the rows after the last: two spans, as a prefix cache runs them. */
static int run_prefix(struct ra_blend *e, float *logits, struct ra_reuse_report *rep)
{
    const double t = ra_wall_s();
    const int head = e->n_loads ? e->loads[0].start : e->n;
    const int tail = e->n_loads ? e->loads[e->n_loads - 1].start + e->loads[e->n_loads - 1].n : e->n;
    for (int i = head; i < tail; i++)
        if (e->must[i])
            return ra_error_set(RA_EINVAL, "reuse: prefix loads leave row %d between them", i);
    struct ra_hook none = { .self = e }, b = { .self = e, .layer_begin = pass_b_layer_begin };
    int rc = RA_OK;
    if (e->n_loads && head > 0) {
        const struct ra_rows r0 = { head, 0, NULL };
        rc = run_pass(e, &none, e->ids, &r0, NULL);
    }
    if (rc == RA_OK) {
        const struct ra_rows r1 = e->n_loads ? (struct ra_rows){ e->n - tail, tail, NULL } : (struct ra_rows){ e->n, 0, NULL };
        rc = run_pass(e, e->n_loads ? &b : &none, e->ids, &r1, logits);
    }
    for (int l = 0; l < e->n_layers; l++)
        e->recomputed[l] = e->n - e->n_loaded;
    rep->t_pass_b = ra_wall_s() - t;
    return rc;
}

int ra_blend_prefill(struct ra_context *ctx, const int32_t *ids, int n, const struct ra_blend_load *loads,
                     int n_loads, enum ra_reuse_mode mode, const struct ra_reuse_config *cfg, struct ra_kvcache *kv,
                     float *logits, struct ra_reuse_report *rep)
{
    struct ra_blend *e = NULL;
    if (n < 1)
        return ra_error_set(RA_EINVAL, "reuse: an empty prompt");
    int rc = ra_blend_open(&e, ctx, ids, n, 0, n, loads, n_loads, cfg, kv);
    if (rc == RA_OK)
        rc = check_config(e, mode);
    if (rc == RA_OK) {
        rep->mode = mode;
        rep->n_rows = n;
        rep->ratio = mode == RA_REUSE_BLEND ? cfg->ratio : 0;
        rc = mode == RA_REUSE_BLEND ? run_blend(e, logits, rep)
             : mode == RA_REUSE_FULL ? run_full(e, logits, rep)
                                     : run_prefix(e, logits, rep);
    }
    /* every layer was installed: the loader is done */
    ra_blend_close(e, rep->ratio, rc == RA_OK ? rep : NULL);
    return rc;
}
