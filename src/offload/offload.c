/* The offload engine: host pool, device slots, transfer engine on an
 * emulated (CPU) or real (GPU) host link, and the none/full policies. See
 * offload.h for the design and the policy hooks. */
#include "offload.h"
#include "kvpr.h"
#include "infinigen.h"
#include "../status.h"
#include "../timing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS 2

struct ra_offload {
    struct ra_offload_view view;
    struct ra_offload_config cfg;
    const struct ra_offload_policy *policy;
    int emulated;          /* the CPU backend: the device and its link are emulated */
    size_t row_bytes;      /* one K (or V) row of cfg.kv_dtype */
    size_t slot_bytes;     /* one slot: K and V of max_rows rows, + X rows for kvpr */
    size_t fixed_bytes;    /* device bytes besides the slots (KVPR's recompute output) */
    int n_slots;
    void *l0_k, *l0_v;     /* infinigen: the dense layers' full slots, n_full of full_rows rows each (device, in
                              fixed_bytes) */
    int n_full;
    size_t full_rows;
    void *slot_k[MAX_SLOTS], *slot_v[MAX_SLOTS]; /* device, rows of cfg.kv_dtype */
    float *slot_x[MAX_SLOTS];                    /* device */
    void **pool_k, **pool_v;                     /* pinned host, rows of cfg.kv_dtype */
    float **pool_x;                              /* pinned host */
    struct ra_event *fetched[MAX_SLOTS], *x_fetched[MAX_SLOTS], *computed[MAX_SLOTS];
    struct ra_kvcache dev;        /* the forward pass's view: k[l] = slot of layer l, first[l] = the
                                     position of its row 0 */
    struct ra_hook hook;          /* the engine's entry of the context's list, for a step */
    struct ra_hook capture;       /* keeps the prefill's layer inputs, until begin */
    int pos;                      /* the step's position */
    int cur_layer;                /* the layer whose fetch ra_offload_send adds to */
    int issued;                   /* layers of this step whose fetch was issued */
    /* The emulated clock (seconds): the device's, the link's, and per slot
     * when its fetch's X and all of its messages arrive. */
    double clock, link_free, x_arrive[MAX_SLOTS], all_arrive[MAX_SLOTS];
    double mark;                  /* wall time of the last clock update */
    struct ra_offload_stats stats;
    int begun;
};

static const char *const mode_names[] = { "none", "full", "kvpr", "infinigen" };

int ra_offload_mode_parse(const char *s, enum ra_offload_mode *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, mode_names[i])) {
            *out = (enum ra_offload_mode)i;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "--offload: '%s' is not none, full, kvpr or infinigen", s);
}

const char *ra_offload_mode_name(enum ra_offload_mode m)
{
    return (unsigned)m < 4 ? mode_names[m] : "?";
}

struct ra_offload_view *ra_offload_view(struct ra_offload *o) { return &o->view; }
static int slot_of(const struct ra_offload *o, int layer) { return layer % o->n_slots; }
void *ra_offload_slot_k(struct ra_offload *o, int layer)
{
    return layer < o->n_full ? (char *)o->l0_k + (size_t)layer * o->full_rows * o->row_bytes
                             : o->slot_k[slot_of(o, layer)];
}
void *ra_offload_slot_v(struct ra_offload *o, int layer)
{
    return layer < o->n_full ? (char *)o->l0_v + (size_t)layer * o->full_rows * o->row_bytes
                             : o->slot_v[slot_of(o, layer)];
}
float *ra_offload_slot_x(struct ra_offload *o, int layer) { return o->slot_x[slot_of(o, layer)]; }
void *ra_offload_pool_k(struct ra_offload *o, int layer) { return o->pool_k[layer]; }
void *ra_offload_pool_v(struct ra_offload *o, int layer) { return o->pool_v[layer]; }
float *ra_offload_pool_x(struct ra_offload *o, int layer) { return o->pool_x ? o->pool_x[layer] : NULL; }
const struct ra_offload_stats *ra_offload_stats(const struct ra_offload *o) { return &o->stats; }
struct ra_offload_stats *ra_offload_counters(struct ra_offload *o) { return &o->stats; }

/* Modelled time of one message on the host link. */
double ra_offload_link_time(const struct ra_offload_config *cfg, size_t bytes)
{
    if (cfg->link_gbps <= 0)
        return 0;
    return cfg->link_latency_us * 1e-6 + (double)bytes / (cfg->link_gbps * 1e9);
}

int ra_offload_send(struct ra_offload *o, void *dst, const void *src, size_t bytes, int is_x)
{
    if (!bytes)
        return RA_OK;
    struct ra_backend *be = o->view.be;
    int rc = be->ops->copy_async(be, dst, src, bytes, RA_STREAM_COPY);
    if (rc != RA_OK)
        return rc;
    const int s = slot_of(o, o->cur_layer);
    /* X goes first: KVPR's recompute waits for it alone, not for the KV behind it */
    if (is_x && (rc = be->ops->event_record(be, o->x_fetched[s], RA_STREAM_COPY)) != RA_OK)
        return rc;
    const double t = ra_offload_link_time(&o->cfg, bytes);
    const double start = o->link_free > o->clock ? o->link_free : o->clock;
    o->link_free = start + t;
    o->all_arrive[s] = o->link_free;
    if (is_x)
        o->x_arrive[s] = o->link_free;
    o->stats.link_s += t;
    o->stats.messages++;
    if (is_x)
        o->stats.bytes_x += (int64_t)bytes;
    else
        o->stats.bytes_kv += (int64_t)bytes;
    return RA_OK;
}

/* Advances the device clock by the wall time since the last mark (compute). */
static void clock_run(struct ra_offload *o)
{
    const double t = ra_wall_s();
    o->clock += t - o->mark;
    o->mark = t;
}

int ra_offload_wait_link(struct ra_offload *o, int x_only)
{
    const int s = slot_of(o, o->cur_layer);
    struct ra_backend *be = o->view.be;
    int rc = x_only ? RA_OK : be->ops->event_record(be, o->fetched[s], RA_STREAM_COPY);
    if (rc == RA_OK)
        rc = be->ops->stream_wait(be, RA_STREAM_COMPUTE, x_only ? o->x_fetched[s] : o->fetched[s]);
    const double t = x_only ? o->x_arrive[s] : o->all_arrive[s];
    if (t > o->clock) {
        o->stats.stall_s += t - o->clock;
        o->clock = t;
    }
    o->mark = ra_wall_s();
    return rc;
}

void ra_offload_charge(struct ra_offload *o, double seconds)
{
    o->clock += seconds;
    o->mark = ra_wall_s();
}

/* ---------------------------------------------------------------- full */

static int full_fetch(struct ra_offload *o, int layer, int pos)
{
    const size_t bytes = (size_t)pos * o->row_bytes;
    int rc = ra_offload_send(o, ra_offload_slot_k(o, layer), o->pool_k[layer], bytes, 0);
    if (rc == RA_OK)
        rc = ra_offload_send(o, ra_offload_slot_v(o, layer), o->pool_v[layer], bytes, 0);
    return rc;
}

static const struct ra_offload_policy policy_full = { .name = "full", .fetch = full_fetch };

/* ---------------------------------------------------------------- the engine's hooks */

static int issue_fetch(struct ra_offload *o, int layer)
{
    const int saved = o->cur_layer;
    struct ra_backend *be = o->view.be;
    o->cur_layer = layer;
    const int s = slot_of(o, layer);
    /* the slot's previous layer must be done before its rows are overwritten */
    int rc = be->ops->stream_wait(be, RA_STREAM_COPY, o->computed[s]);
    o->x_arrive[s] = o->all_arrive[s] = o->clock;
    if (rc == RA_OK)
        rc = o->policy->fetch(o, layer, o->pos);
    o->issued = layer + 1;
    o->cur_layer = saved;
    return rc;
}

static int hook_layer_begin(void *self, const struct ra_hook_args *a)
{
    struct ra_offload *o = self;
    const int layer = a->layer;
    clock_run(o);
    int rc = RA_OK;
    if (o->issued <= layer)
        rc = issue_fetch(o, layer);
    o->cur_layer = layer;
    if (rc == RA_OK && o->policy->ready)
        rc = o->policy->ready(o, layer, o->pos);
    if (rc == RA_OK)
        rc = ra_offload_wait_link(o, 0);
    /* The forward pass writes the new row at position pos of dev: a policy
     * that wants it at slot row r makes the slot's first row position pos − r. */
    const int row = rc == RA_OK && o->policy->new_row ? o->policy->new_row(o, layer, o->pos) : o->pos;
    o->dev.k[layer] = ra_offload_slot_k(o, layer);
    o->dev.v[layer] = ra_offload_slot_v(o, layer);
    o->dev.first[layer] = o->pos - row;
    /* two slots: the next layer's rows travel while this one computes */
    if (rc == RA_OK && o->n_slots > 1 && !o->policy->fetch_after_attend && layer + 1 < o->view.n_layers)
        rc = issue_fetch(o, layer + 1);
    o->mark = ra_wall_s();
    return rc;
}

static int hook_attend(void *self, const struct ra_hook_args *a, const float **k, const float **v, int *rows)
{
    struct ra_offload *o = self;
    const int layer = a->layer;
    int rc = RA_OK;
    if (o->policy->attend) /* its time is device work: it stays on the clock */
        rc = o->policy->attend(o, layer, a->start, a, k, v, rows);
    /* a policy that picks layer l+1's rows from layer l's activations fetches now */
    if (rc == RA_OK && o->n_slots > 1 && o->policy->fetch_after_attend && layer + 1 < o->view.n_layers)
        rc = issue_fetch(o, layer + 1);
    o->stats.rows_attended += *rows;
    return rc;
}

static int hook_layer_end(void *self, const struct ra_hook_args *a)
{
    struct ra_offload *o = self;
    struct ra_backend *be = o->view.be;
    const int layer = a->layer, start = a->start;
    clock_run(o);
    const size_t off = (size_t)start * o->row_bytes;
    const int s = slot_of(o, layer);
    const void *new_k = ra_kvcache_k(&o->dev, layer, start), *new_v = ra_kvcache_v(&o->dev, layer, start);
    int rc = be->ops->event_record(be, o->computed[s], RA_STREAM_COMPUTE);
    /* the new row into the pool (the other direction of the link: not a stall) */
    if (rc == RA_OK)
        rc = be->ops->stream_wait(be, RA_STREAM_COPY, o->computed[s]);
    if (rc == RA_OK && o->pool_k[layer]) /* NULL: the policy keeps the pool (its store hook) */
        rc = be->ops->copy_async(be, (char *)o->pool_k[layer] + off, new_k, o->row_bytes, RA_STREAM_COPY);
    if (rc == RA_OK && o->pool_v[layer])
        rc = be->ops->copy_async(be, (char *)o->pool_v[layer] + off, new_v, o->row_bytes, RA_STREAM_COPY);
    o->stats.bytes_store += 2 * (int64_t)o->row_bytes;
    if (rc == RA_OK && o->policy->store)
        rc = o->policy->store(o, layer, start);
    /* one slot: the next layer's fetch waits for this layer */
    if (rc == RA_OK && o->n_slots == 1 && layer + 1 < o->view.n_layers)
        rc = issue_fetch(o, layer + 1);
    o->mark = ra_wall_s();
    return rc;
}

int ra_offload_step(struct ra_offload *o, int32_t token, int pos, float *logits)
{
    if (!o->begun)
        return ra_error_set(RA_EINVAL, "offload: decode step before ra_offload_begin");
    if (pos >= o->view.max_rows)
        return ra_error_set(RA_ERANGE, "offload: position %d beyond the %d rows the engine was made for", pos,
                            o->view.max_rows);
    struct ra_backend *be = o->view.be;
    const double c0 = o->clock;
    o->pos = pos;
    o->issued = 0;
    for (int l = 0; l < o->view.n_layers; l++) /* the layer hooks set them; the span check sees slots from 0 */
        o->dev.first[l] = 0;
    o->mark = ra_wall_s();
    int rc = ra_context_hook_add(o->view.ctx, &o->hook);
    if (rc == RA_OK) {
        rc = ra_forward_span(o->view.ctx, &token, pos, 1, &o->dev, logits);
        ra_context_hook_remove(o->view.ctx, &o->hook);
    }
    if (rc == RA_OK)
        rc = be->ops->synchronize(be);
    clock_run(o);
    o->stats.emulated_s += o->clock - c0;
    o->stats.steps++;
    return rc;
}

/* ---------------------------------------------------------------- the prefill's layer inputs */

static int capture_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct ra_offload *o = self;
    struct ra_backend *be = o->view.be;
    const int layer = a->layer, start = a->start, n = a->n;
    const float *xa = a->xa;
    if (start + n > o->view.max_rows)
        return ra_error_set(RA_ERANGE, "offload: prefill rows [%d, %d) beyond the pool's %d", start, start + n,
                            o->view.max_rows);
    if (layer == 0) {
        o->view.x_start = start;
        o->view.x_end = start + n;
    }
    int rc = be->ops->copy_async(be, o->pool_x[layer] + (size_t)start * o->view.dim, xa,
                                 (size_t)n * o->view.dim * sizeof(float), RA_STREAM_COMPUTE);
    return rc == RA_OK ? be->ops->synchronize(be) : rc;
}

int ra_offload_capture(struct ra_offload *o)
{
    if (!o || !o->pool_x)
        return RA_OK;
    o->capture = (struct ra_hook){ .self = o, .kv_ready = capture_kv_ready };
    return ra_context_hook_add(o->view.ctx, &o->capture);
}

/* ---------------------------------------------------------------- life cycle */

int ra_offload_begin(struct ra_offload *o, const struct ra_kvcache *prefill, int n_prompt)
{
    struct ra_backend *be = o->view.be;
    ra_context_hook_remove(o->view.ctx, &o->capture);
    if (n_prompt <= 0 || n_prompt > o->view.max_rows || n_prompt > prefill->capacity ||
        prefill->n_layers != o->view.n_layers || prefill->kv_dim != o->view.kv_dim)
        return ra_error_set(RA_EINVAL, "offload: a prompt of %d rows does not fit the engine (%d rows)", n_prompt,
                            o->view.max_rows);
    if (prefill->dtype != o->cfg.kv_dtype) /* the pool and the slots hold rows of the engine's dtype */
        return ra_error_set(RA_EINVAL, "offload: a %s KV cache (the host pool holds %s rows)",
                            ra_dtype_name(prefill->dtype), ra_dtype_name(o->cfg.kv_dtype));
    int rc = RA_OK;
    const size_t bytes = (size_t)n_prompt * o->row_bytes;
    for (int l = 0; l < o->view.n_layers && rc == RA_OK; l++) {
        if (ra_kvcache_first(prefill, l) != 0) {
            rc = ra_error_set(RA_EINVAL, "offload: the prefill's layer %d does not start at position 0", l);
            break;
        }
        if (prefill->k[l] == o->pool_k[l] && prefill->v[l] == o->pool_v[l])
            continue; /* the view: the prefill wrote into the pool */
        rc = be->ops->copy_async(be, o->pool_k[l], prefill->k[l], bytes, RA_STREAM_COPY);
        if (rc == RA_OK)
            rc = be->ops->copy_async(be, o->pool_v[l], prefill->v[l], bytes, RA_STREAM_COPY);
        o->stats.bytes_prefill_moved += 2 * (int64_t)bytes;
    }
    if (rc == RA_OK)
        rc = be->ops->synchronize(be);
    o->view.n_prompt = n_prompt;
    if (o->pool_x && (o->view.x_end > n_prompt || o->view.x_end <= o->view.x_start))
        o->view.x_start = o->view.x_end = 0; /* no X captured: KVPR transfers everything, InfiniGen
                                                  keeps the identity skew */
    if (rc == RA_OK && o->policy->begin)
        rc = o->policy->begin(o);
    if (rc == RA_OK && o->policy->owns_pool) /* the policy moved the rows into its own pool */
        for (int l = 0; l < o->view.n_layers; l++) {
            be->ops->release_mem(be, o->pool_k[l], RA_MEM_HOST_PINNED);
            be->ops->release_mem(be, o->pool_v[l], RA_MEM_HOST_PINNED);
            o->pool_k[l] = o->pool_v[l] = NULL;
            if (o->pool_x) {
                be->ops->release_mem(be, o->pool_x[l], RA_MEM_HOST_PINNED);
                o->pool_x[l] = NULL;
            }
        }
    o->begun = rc == RA_OK;
    return rc;
}

int ra_offload_prefill_cache(struct ra_offload *o, struct ra_kvcache *kv, enum ra_dtype dtype)
{
    struct ra_backend *be = o->view.be;
    const int L = o->view.n_layers;
    memset(kv, 0, sizeof *kv);
    if (o->begun || !o->pool_k[0])
        return ra_error_set(RA_EINVAL, "offload: the prefill cache is made before ra_offload_begin");
    if (dtype != o->cfg.kv_dtype)
        return ra_error_set(RA_EINVAL, "offload: a %s KV cache (the host pool holds %s rows)", ra_dtype_name(dtype),
                            ra_dtype_name(o->cfg.kv_dtype));
    /* Device kernels cannot read the pinned host pool (mapped host memory
     * would be read over the link on every access): a device cache, copied
     * into the pool by ra_offload_begin. */
    if (!o->emulated)
        return ra_kvcache_init_dtype(kv, be, L, o->view.kv_dim, o->view.max_rows, dtype);
    *kv = (struct ra_kvcache){ .backend = be, .mem = be->ops->mem_kind(be), .n_layers = L,
                               .kv_dim = o->view.kv_dim, .capacity = o->view.max_rows, .dtype = dtype,
                               .borrowed = 1 };
    kv->k = calloc((size_t)L, sizeof *kv->k);
    kv->v = calloc((size_t)L, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        ra_kvcache_free(kv);
        return ra_error_set(RA_ENOMEM, "offload: out of memory");
    }
    for (int l = 0; l < L; l++) { /* on the CPU backend every memory kind is host memory */
        kv->k[l] = o->pool_k[l];
        kv->v[l] = o->pool_v[l];
    }
    return RA_OK;
}

static void *pool_alloc(struct ra_backend *be, size_t bytes)
{
    return be->ops->alloc_mem(be, bytes, RA_MEM_HOST_PINNED);
}

void ra_offload_free(struct ra_offload *o)
{
    if (!o)
        return;
    struct ra_backend *be = o->view.be;
    if (o->policy && o->policy->end)
        o->policy->end(o);
    if (o->view.ctx)
        ra_context_hook_remove(o->view.ctx, &o->capture);
    if (o->l0_k) be->ops->release_mem(be, o->l0_k, RA_MEM_DEVICE);
    if (o->l0_v) be->ops->release_mem(be, o->l0_v, RA_MEM_DEVICE);
    for (int s = 0; s < MAX_SLOTS; s++) {
        if (o->slot_k[s]) be->ops->release_mem(be, o->slot_k[s], RA_MEM_DEVICE);
        if (o->slot_v[s]) be->ops->release_mem(be, o->slot_v[s], RA_MEM_DEVICE);
        if (o->slot_x[s]) be->ops->release_mem(be, o->slot_x[s], RA_MEM_DEVICE);
        if (o->fetched[s]) be->ops->event_destroy(be, o->fetched[s]);
        if (o->x_fetched[s]) be->ops->event_destroy(be, o->x_fetched[s]);
        if (o->computed[s]) be->ops->event_destroy(be, o->computed[s]);
    }
    for (int l = 0; l < o->view.n_layers; l++) {
        if (o->pool_k && o->pool_k[l]) be->ops->release_mem(be, o->pool_k[l], RA_MEM_HOST_PINNED);
        if (o->pool_v && o->pool_v[l]) be->ops->release_mem(be, o->pool_v[l], RA_MEM_HOST_PINNED);
        if (o->pool_x && o->pool_x[l]) be->ops->release_mem(be, o->pool_x[l], RA_MEM_HOST_PINNED);
    }
    free(o->pool_k);
    free(o->pool_v);
    free(o->pool_x);
    free(o->dev.k);
    free(o->dev.v);
    free(o->dev.first);
    free(o);
}

static int format_size(char *buf, size_t n, double bytes)
{
    const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int i = 0;
    while (bytes >= 1024 && i < 4)
        bytes /= 1024, i++;
    return snprintf(buf, n, "%.1f %s", bytes, u[i]);
}

int ra_offload_create(struct ra_offload **out, struct ra_context *ctx, const struct ra_offload_config *cfg,
                      int max_rows)
{
    *out = NULL;
    if (cfg->mode == RA_OFFLOAD_NONE)
        return RA_OK;
    struct ra_backend *be = ctx->backend;
    if (cfg->mode == RA_OFFLOAD_INFINIGEN && be && be->ops->mem_kind(be) == RA_MEM_DEVICE)
        return ra_error_set(RA_EUNSUPPORTED, "--offload infinigen: the %s backend is not supported yet (the "
                            "speculation and the partial key cache run in host memory: use the CPU backend)",
                            be->ops->name);
    return ra_offload_create_policy(out, ctx, cfg, max_rows,
                                    cfg->mode == RA_OFFLOAD_KVPR        ? &ra_kvpr_policy
                                    : cfg->mode == RA_OFFLOAD_INFINIGEN ? &ra_infinigen_policy
                                                                        : &policy_full);
}

int ra_offload_create_policy(struct ra_offload **out, struct ra_context *ctx, const struct ra_offload_config *cfg,
                             int max_rows, const struct ra_offload_policy *policy)
{
    *out = NULL;
    if (!ctx->backend || !ctx->model)
        return ra_error_set(RA_EINVAL, "offload: the context has no model or no backend");
    if (cfg->link_gbps < 0 || cfg->link_latency_us < 0 || !isfinite(cfg->link_gbps) ||
        !isfinite(cfg->link_latency_us))
        return ra_error_set(RA_EINVAL, "--host-link-gbps and --host-link-latency-us must be finite and >= 0");
    if (max_rows <= 0)
        return ra_error_set(RA_EINVAL, "offload: no rows to decode");
    if (cfg->kv_dtype != RA_DTYPE_F32 && cfg->kv_dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "offload: %s KV rows are not supported (f32 or bf16)",
                            ra_dtype_name(cfg->kv_dtype));
    if (cfg->kv_dtype != RA_DTYPE_F32 && cfg->mode == RA_OFFLOAD_INFINIGEN) /* its pool and speculation: f32 */
        return ra_error_set(RA_EUNSUPPORTED, "--offload infinigen needs --kv-dtype f32 (its host pool and "
                            "partial key cache hold f32 rows)");
    const struct ra_config *c = &ctx->model->config;
    struct ra_backend *be = ctx->backend;
    struct ra_offload *o = calloc(1, sizeof *o);
    if (!o)
        return ra_error_set(RA_ENOMEM, "offload: out of memory");
    o->cfg = *cfg;
    o->view = (struct ra_offload_view){ .ctx = ctx, .m = ctx->model, .be = be, .cfg = &o->cfg, .n_layers = c->n_layers,
                                        .kv_dim = ra_config_kv_dim(c), .dim = c->dim, .max_rows = max_rows };
    o->policy = policy;
    o->emulated = be->ops->mem_kind(be) != RA_MEM_DEVICE;
    o->row_bytes = ra_kv_row_bytes(o->view.kv_dim, cfg->kv_dtype);
    o->view.kv_dtype = cfg->kv_dtype;
    o->view.row_bytes = o->row_bytes;
    size_t slot_rows = (size_t)max_rows, l0_rows = 0; /* l0_rows: the full slots' rows together */
    if (cfg->mode == RA_OFFLOAD_INFINIGEN) {
        size_t kp_bytes;
        int rc0 = ra_infinigen_offload_sizes(c, cfg, max_rows, &o->n_full, &o->full_rows, &slot_rows, &kp_bytes);
        if (rc0 != RA_OK) {
            free(o);
            return rc0;
        }
        l0_rows = (size_t)o->n_full * o->full_rows;
        o->fixed_bytes = 2 * l0_rows * o->row_bytes + kp_bytes;
    }
    o->slot_bytes = 2 * slot_rows * o->row_bytes;
    if (cfg->mode == RA_OFFLOAD_KVPR) { /* X rows per slot; one recompute output */
        o->slot_bytes += (size_t)max_rows * (size_t)c->dim * sizeof(float);
        o->fixed_bytes = 2 * (size_t)max_rows * o->view.kv_dim * sizeof(float); /* f32 whatever the rows */
    }
    const size_t budget = cfg->device_kv_mem ? cfg->device_kv_mem : o->fixed_bytes + 2 * o->slot_bytes;
    const size_t avail = budget > o->fixed_bytes ? budget - o->fixed_bytes : 0;
    o->n_slots = avail >= 2 * o->slot_bytes ? 2 : avail >= o->slot_bytes ? 1 : 0;
    if (o->n_slots > c->n_layers)
        o->n_slots = c->n_layers;
    int rc = RA_OK;
    if (!o->n_slots) {
        char need[32], got[32];
        format_size(need, sizeof need, (double)(o->slot_bytes + o->fixed_bytes));
        format_size(got, sizeof got, (double)budget);
        rc = ra_error_set(RA_EINVAL, "--device-kv-mem %s cannot hold one layer's working set (%s: K and V of %zu "
                          "rows%s); give at least %zu bytes", got, need, slot_rows,
                          cfg->mode == RA_OFFLOAD_KVPR        ? ", their layer inputs and the recompute's output"
                          : cfg->mode == RA_OFFLOAD_INFINIGEN ? ", the dense layers' full slots and the partial "
                                                                "key cache"
                                                              : "",
                          o->slot_bytes + o->fixed_bytes);
        goto fail;
    }
    const int L = c->n_layers;
    o->pool_k = calloc((size_t)L, sizeof *o->pool_k);
    o->pool_v = calloc((size_t)L, sizeof *o->pool_v);
    o->dev = (struct ra_kvcache){ .backend = be, .mem = be->ops->mem_kind(be), .n_layers = L,
                                  .kv_dim = o->view.kv_dim, .capacity = max_rows, .dtype = cfg->kv_dtype };
    o->dev.k = calloc((size_t)L, sizeof *o->dev.k);
    o->dev.v = calloc((size_t)L, sizeof *o->dev.v);
    o->dev.first = calloc((size_t)L, sizeof *o->dev.first);
    const int keep_x = cfg->mode == RA_OFFLOAD_KVPR || cfg->mode == RA_OFFLOAD_INFINIGEN;
    if (keep_x)
        o->pool_x = calloc((size_t)L, sizeof *o->pool_x);
    if (!o->pool_k || !o->pool_v || !o->dev.k || !o->dev.v || !o->dev.first || (keep_x && !o->pool_x)) {
        rc = ra_error_set(RA_ENOMEM, "offload: out of memory");
        goto fail;
    }
    const size_t pool_rows = (size_t)max_rows * o->row_bytes;
    for (int l = 0; l < L; l++) {
        o->pool_k[l] = pool_alloc(be, pool_rows);
        o->pool_v[l] = pool_alloc(be, pool_rows);
        if (o->pool_x)
            o->pool_x[l] = pool_alloc(be, (size_t)max_rows * (size_t)c->dim * sizeof(float));
        if (!o->pool_k[l] || !o->pool_v[l] || (o->pool_x && !o->pool_x[l])) {
            rc = ra_error_set(RA_ENOMEM, "offload: cannot allocate the host pool (%d layers of %d rows)", L, max_rows);
            goto fail;
        }
    }
    if (l0_rows) {
        o->l0_k = be->ops->alloc_mem(be, l0_rows * o->row_bytes, RA_MEM_DEVICE);
        o->l0_v = be->ops->alloc_mem(be, l0_rows * o->row_bytes, RA_MEM_DEVICE);
        if (!o->l0_k || !o->l0_v) {
            rc = ra_error_set(RA_ENOMEM, "offload: cannot allocate the device working set");
            goto fail;
        }
    }
    for (int s = 0; s < o->n_slots; s++) {
        o->slot_k[s] = be->ops->alloc_mem(be, slot_rows * o->row_bytes, RA_MEM_DEVICE);
        o->slot_v[s] = be->ops->alloc_mem(be, slot_rows * o->row_bytes, RA_MEM_DEVICE);
        if (cfg->mode == RA_OFFLOAD_KVPR)
            o->slot_x[s] = be->ops->alloc_mem(be, (size_t)max_rows * (size_t)c->dim * sizeof(float), RA_MEM_DEVICE);
        if (!o->slot_k[s] || !o->slot_v[s] || (cfg->mode == RA_OFFLOAD_KVPR && !o->slot_x[s])) {
            rc = ra_error_set(RA_ENOMEM, "offload: cannot allocate the device working set");
            goto fail;
        }
        if ((rc = be->ops->event_create(be, &o->fetched[s])) != RA_OK ||
            (rc = be->ops->event_create(be, &o->x_fetched[s])) != RA_OK ||
            (rc = be->ops->event_create(be, &o->computed[s])) != RA_OK)
            goto fail;
    }
    for (int l = 0; l < L; l++) {
        o->dev.k[l] = ra_offload_slot_k(o, l);
        o->dev.v[l] = ra_offload_slot_v(o, l);
    }
    o->hook = (struct ra_hook){ .self = o, .layer_begin = hook_layer_begin, .attend = hook_attend,
                                .layer_end = hook_layer_end };
    *out = o;
    return RA_OK;
fail:
    ra_offload_free(o);
    return rc;
}

size_t ra_offload_working_set(const struct ra_offload *o)
{
    return (size_t)o->n_slots * o->slot_bytes + o->fixed_bytes;
}

int ra_offload_slots(const struct ra_offload *o) { return o->n_slots; }

void ra_offload_report(const struct ra_offload *o, FILE *f)
{
    const struct ra_offload_stats *s = &o->stats;
    char ws[32], kv[32], x[32];
    format_size(ws, sizeof ws, (double)ra_offload_working_set(o));
    const double steps = s->steps > 0 ? (double)s->steps : 1;
    format_size(kv, sizeof kv, (double)s->bytes_kv / steps / o->view.n_layers);
    format_size(x, sizeof x, (double)s->bytes_x / steps / o->view.n_layers);
    fprintf(f, "offload: %s, %d device slot%s (working set %s), per step and layer %s of KV + %s of X fetched, "
            "%lld bytes of prompt rows moved into the pool after the prefill",
            o->policy->name, o->n_slots, o->n_slots == 1 ? "" : "s", ws, kv, x, (long long)s->bytes_prefill_moved);
    if (o->cfg.mode == RA_OFFLOAD_KVPR)
        fprintf(f, ", last l = %lld of X rows [%d, %d) (closed form %lld; link %.3g GB/s, recompute %.3g GFLOP/s%s)",
                (long long)s->kvpr_l, o->view.x_start, o->view.x_end, (long long)s->kvpr_l_closed,
                s->kvpr_v_com / 1e9, s->kvpr_v_gpu / 1e9,
                s->kvpr_fixed_s > 0 ? ", CPU: the span's GEMM whatever l" : "");
    if (o->cfg.mode == RA_OFFLOAD_INFINIGEN && o->policy == &ra_infinigen_policy)
        ra_infinigen_offload_report((struct ra_offload *)o, f); /* reads the policy state only */
    fprintf(f, "\noffload: %s host link %.3g GB/s + %.3g us/message: link %.3f ms/token, stalls %.3f ms/token, "
            "%.3f ms/token on the %s device clock\n", o->emulated ? "emulated" : "real", o->cfg.link_gbps,
            o->cfg.link_latency_us, 1e3 * s->link_s / steps, 1e3 * s->stall_s / steps, 1e3 * s->emulated_s / steps,
            o->emulated ? "emulated" : "device");
}
