/* The cost model of a reuse run: see costmodel.h ("reuse runs"). */
#include "costmodel.h"
#include "forward.h"
#include "status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What one rank does in one pass, per layer. */
struct pass_rank {
    double t0;          /* when the rank begins the pass */
    double qkv, rest;   /* seconds before and after the KV hook */
    double install;     /* seconds at the layer's begin (its loaded rows) */
    double transfer;    /* seconds of the message into this rank (chain, r > 0) */
    double load_layer;  /* seconds the loader needs for one layer; 0: free */
};

/* The request's loaded rows inside [a, b): their count and the sum of their
 * positions + 1 (the keys each sees under the causal rule). */
static void loaded_in(const struct ra_cost_reuse *ru, int a, int b, double *rows, double *keys)
{
    *rows = *keys = 0;
    for (int i = 0; i < ru->n_loaded; i++) {
        const int x = ru->loaded[i].start > a ? ru->loaded[i].start : a;
        const int end = ru->loaded[i].start + ru->loaded[i].n, y = end < b ? end : b;
        if (y <= x)
            continue;
        *rows += y - x;
        *keys += ((double)y * (y + 1) - (double)x * (x + 1)) / 2;
    }
}

static double keys_of_span(int a, int b)
{
    return ((double)b * (b + 1) - (double)a * (a + 1)) / 2;
}

/* Seconds per layer of TOKENS rows seeing PAIRS keys in all, split at the
 * hook as costmodel.c's rank_cost_of does, times FACTOR. */
static void layer_times(const struct ra_config *c, const struct ra_cost_profile *pf, double tokens, double pairs,
                        double factor, double *qkv, double *rest)
{
    double lin1, att1;
    ra_forward_flops(c, 0, 1, &lin1, &att1); /* one token seeing one key */
    const double L = c->n_layers, d = c->dim, kv = ra_config_kv_dim(c), h = c->hidden_dim;
    const double qkv_share = (d + 2 * kv) / (2 * d + 2 * kv + 3 * h);
    const double other_pre = (2 * d + kv) / (5 * d + kv + h);
    const double lin = lin1 / L * tokens, att = att1 / L * pairs, other = pf->other_s_per_token_layer * tokens;
    *qkv = factor * (lin * qkv_share / pf->gemm_flops + other * other_pre);
    *rest = factor * (att / pf->attn_flops + lin * (1 - qkv_share) / pf->gemm_flops + other * (1 - other_pre));
}

static double row_bytes(const struct ra_config *c, const struct ra_cost_reuse *ru)
{
    return (double)ra_config_kv_dim(c) * (ru->kv_elem_bytes > 0 ? ru->kv_elem_bytes : 4.0);
}

/* The chain's replay (costmodel.c's KVR) over N_LAYERS layers from each
 * rank's t0, with the loader's pace and the installs; writes each rank's end.
 * STOP: the last layer ends at its KV hook (pass A), receiving nothing. */
static void chain_pass(const struct pass_rank *pr, int p, int n_layers, double lat, int wait_loads, int stop,
                       double *send, double *prev, double *end, struct ra_cost_layer *layers, int layer_stride)
{
    for (int r = 0; r < p; r++) {
        double t = pr[r].t0, link_free = 0;
        for (int l = 0; l < n_layers; l++) {
            double start = t;
            if (wait_loads)
                start = fmax(start, (l + 1) * pr[r].load_layer);
            start += wait_loads ? pr[r].install : 0;
            double wait_end = start + pr[r].qkv;
            if (stop && l == n_layers - 1) {
                send[l] = t = wait_end;
                break;
            }
            if (r > 0) {
                const double begin = fmax(fmax(prev[l], start), link_free);
                link_free = begin + lat + pr[r].transfer;
                wait_end = fmax(wait_end, link_free);
            }
            send[l] = wait_end;
            t = wait_end + pr[r].rest;
            if (layers)
                layers[r * layer_stride + l] = (struct ra_cost_layer){ start, wait_end, t };
        }
        end[r] = t;
        memcpy(prev, send, sizeof(double) * (size_t)n_layers);
    }
}

/* TSP's replay (costmodel.c's) over N_LAYERS layers: GATHER seconds after
 * the last rank reaches each layer's hook. STOP: as chain_pass's. */
static void tsp_pass(const struct pass_rank *pr, int p, int n_layers, double gather, int wait_loads, int stop,
                     double *t, struct ra_cost_layer *layers, int layer_stride)
{
    for (int r = 0; r < p; r++)
        t[r] = pr[r].t0;
    for (int l = 0; l < n_layers; l++) {
        double all_in = 0;
        for (int r = 0; r < p; r++) {
            if (wait_loads)
                t[r] = fmax(t[r], (l + 1) * pr[r].load_layer) + pr[r].install;
            all_in = fmax(all_in, t[r] + pr[r].qkv);
        }
        if (stop && l == n_layers - 1) {
            for (int r = 0; r < p; r++)
                t[r] += pr[r].qkv;
            break;
        }
        for (int r = 0; r < p; r++) {
            const double start = t[r];
            t[r] = all_in + gather + pr[r].rest;
            if (layers)
                layers[r * layer_stride + l] = (struct ra_cost_layer){ start, all_in + gather, t[r] };
        }
    }
}

/* ------------------------------------------------------------------ checks */

static int check_reuse(const struct ra_config *c, const struct ra_cost_reuse *ru, int n_rows)
{
    if (!ru)
        return ra_error_set(RA_EINVAL, "reuse cost model: no reuse description");
    if (ru->n_loaded < 0 || (ru->n_loaded > 0 && !ru->loaded))
        return ra_error_set(RA_EINVAL, "reuse cost model: %d loaded spans and no list", ru->n_loaded);
    for (int i = 0; i < ru->n_loaded; i++) {
        const struct ra_cost_span *s = &ru->loaded[i];
        if (s->n < 1 || s->start < 0 || s->start + s->n > n_rows || (i > 0 && s->start < s[-1].start + s[-1].n))
            return ra_error_set(RA_EINVAL, "reuse cost model: loaded span %d [%d, %d) is empty, outside the %d "
                                "rows or overlaps the one before", i, s->start, s->start + s->n, n_rows);
    }
    if (!(ru->ratio >= 0 && ru->ratio <= 1))
        return ra_error_set(RA_EINVAL, "reuse cost model: ratio %g is outside [0, 1]", ru->ratio);
    if (ru->pass_a && (ru->check < 0 || ru->check >= c->n_layers))
        return ra_error_set(RA_EINVAL, "reuse cost model: check layer %d outside the %d layers", ru->check,
                            c->n_layers);
    if (!(ru->kv_elem_bytes >= 0) || !(ru->load_bandwidth >= 0) || isinf(ru->kv_elem_bytes))
        return ra_error_set(RA_EINVAL, "reuse cost model: element bytes %g or load bandwidth %g is negative",
                            ru->kv_elem_bytes, ru->load_bandwidth);
    return RA_OK;
}

/* ------------------------------------------------------------------ rows */

/* Pass B's rows of the slice [a, b): must rows and round(ratio x loaded). */
static int rows_b(const struct ra_cost_reuse *ru, int a, int b, double *loaded, double *loaded_keys)
{
    loaded_in(ru, a, b, loaded, loaded_keys);
    return (b - a) - (int)*loaded + (int)llround(ru->ratio * *loaded);
}

int ra_cost_reuse_rows(const struct ra_cost_reuse *ru, const int *bounds, int p, int *rows)
{
    if (!ru || !bounds || !rows || p < 1)
        return ra_error_set(RA_EINVAL, "reuse cost model: no request, bounds or output");
    double l, k;
    for (int r = 0; r < p; r++)
        rows[r] = rows_b(ru, bounds[r], bounds[r + 1], &l, &k);
    return RA_OK;
}

/* ------------------------------------------------------------------ the replay */

struct reuse_plan {
    struct pass_rank *a, *b; /* per rank, pass A and pass B */
    double *send, *prev, *end_a, *end_b;
};

static void plan_free(struct reuse_plan *pl)
{
    free(pl->a);
    free(pl->b);
    free(pl->send);
    free(pl->prev);
    free(pl->end_a);
    free(pl->end_b);
}

static int plan_alloc(struct reuse_plan *pl, int p, int n_layers)
{
    pl->a = calloc((size_t)p, sizeof *pl->a);
    pl->b = calloc((size_t)p, sizeof *pl->b);
    pl->send = calloc((size_t)n_layers, sizeof(double));
    pl->prev = calloc((size_t)n_layers, sizeof(double));
    pl->end_a = calloc((size_t)p, sizeof(double));
    pl->end_b = calloc((size_t)p, sizeof(double));
    if (!pl->a || !pl->b || !pl->send || !pl->prev || !pl->end_a || !pl->end_b)
        return ra_error_set(RA_ENOMEM, "reuse cost model: out of memory");
    return RA_OK;
}

/* Per rank: pass A as a plain slice, pass B's rows; RECOMPUTED[r] = s_r. */
static void plan_ranks(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                       const struct ra_cost_reuse *ru, const int *bounds, int p, struct reuse_plan *pl)
{
    const double rb = row_bytes(c, ru), bw = pf->p2p_bandwidth, factor = pf->row_list_factor > 0 ? pf->row_list_factor : 1;
    double before = 0; /* rows recomputed on the ranks before this one */
    for (int r = 0; r < p; r++) {
        const int a = bounds[r], b = bounds[r + 1], n = b - a;
        double loaded, loaded_keys, held, held_keys;
        const int s = rows_b(ru, a, b, &loaded, &loaded_keys);
        const double sel = loaded > 0 ? (s - (n - loaded)) / loaded : 0;
        const double pairs = keys_of_span(a, b) - loaded_keys + sel * loaded_keys;
        struct pass_rank *pa = &pl->a[r], *pb = &pl->b[r];
        layer_times(c, pf, n, keys_of_span(a, b), 1, &pa->qkv, &pa->rest);
        layer_times(c, pf, s, pairs, s > 0 && s < n ? factor : 1, &pb->qkv, &pb->rest);
        /* Loads: the slice's, or with delta every loaded row before its end. */
        if (ru->delta)
            loaded_in(ru, 0, b, &held, &held_keys);
        else
            held = loaded;
        const double bytes = 2 * held * rb, cpu = pf->load_bandwidth > 0 ? bytes / pf->load_bandwidth : 0;
        pa->load_layer = pb->load_layer = fmax(cpu, ru->load_bandwidth > 0 ? bytes / ru->load_bandwidth : 0);
        pb->install = held * pf->install_s_per_row_layer + (ru->shared_core ? cpu : 0);
        pa->install = loaded * pf->install_s_per_row_layer;
        if (m == RA_COST_KVR && r > 0) {
            pa->transfer = 2.0 * a * rb / bw;
            pb->transfer = ru->delta ? before * 2 * rb / bw : pa->transfer; /* the positions: once, start_pass_b */
        }
        before += s;
    }
}

static double gather_time(const struct ra_cost_profile *pf, int p, double bytes_per_rank, int calls)
{
    if (p == 1)
        return 0;
    const int measured = pf->allgather_bandwidth > 0;
    const double bw = measured ? pf->allgather_bandwidth : pf->p2p_bandwidth;
    const double lat = measured ? pf->allgather_latency : (p - 1) * pf->p2p_latency;
    return calls * lat + bytes_per_rank / bw;
}

/* Pass B's start per rank: global scope after every rank's pass A and the
 * deviations' all-gather (and the agreement on its status); local scope
 * right after the rank's own pass A (no synchronisation). Delta sends first
 * move the travelling positions, once a pass (4 bytes each). */
static void start_pass_b(const struct ra_cost_profile *pf, const struct ra_cost_reuse *ru, const int *bounds, int p,
                         struct reuse_plan *pl)
{
    double last = 0, before = 0;
    for (int r = 0; r < p; r++)
        last = fmax(last, pl->end_a[r]);
    const double sel = gather_time(pf, p, 5.0 * bounds[p], 2);
    for (int r = 0; r < p; r++) {
        double l, k;
        const double lists = ru->delta && r > 0 ? pf->p2p_latency + 4 * before / pf->p2p_bandwidth : 0;
        pl->b[r].t0 = (!ru->pass_a ? 0 : ru->global ? last + sel : pl->end_a[r]) + lists;
        before += rows_b(ru, bounds[r], bounds[r + 1], &l, &k);
    }
}

/* The deviations at the check layer: its loads read, the slice's stored K
 * rows re-positioned (an install's work). */
static void finish_pass_a(struct reuse_plan *pl, int p, int la)
{
    for (int r = 0; r < p && la > 0; r++)
        pl->end_a[r] = fmax(pl->end_a[r], la * pl->a[r].load_layer) + pl->a[r].install;
}

static int replay_reuse(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                        const struct ra_cost_reuse *ru, const int *bounds, int p, double *ttft, double *rank_finish,
                        struct ra_cost_layer *layers)
{
    const int L = c->n_layers, C = bounds[p], la = ru->pass_a ? ru->check + 1 : 0;
    const double rb = row_bytes(c, ru);
    struct reuse_plan pl = { 0 };
    int rc = plan_alloc(&pl, p, L);
    if (rc != RA_OK)
        goto out;
    plan_ranks(c, pf, m, ru, bounds, p, &pl);
    if (m == RA_COST_KVR) {
        if (la > 0)
            chain_pass(pl.a, p, la, pf->p2p_latency, 0, 1, pl.send, pl.prev, pl.end_a, NULL, L);
        finish_pass_a(&pl, p, la);
        start_pass_b(pf, ru, bounds, p, &pl);
        chain_pass(pl.b, p, L, pf->p2p_latency, 1, 0, pl.send, pl.prev, pl.end_b, layers, L);
    } else {
        int min_n = C, min_s = C;
        double tot_s = 0;
        for (int r = 0; r < p; r++) {
            double l, k;
            const int s = rows_b(ru, bounds[r], bounds[r + 1], &l, &k);
            min_n = bounds[r + 1] - bounds[r] < min_n ? bounds[r + 1] - bounds[r] : min_n;
            min_s = s < min_s ? s : min_s;
            tot_s += s;
        }
        const double full = gather_time(pf, p, 2.0 * (C - min_n) * rb, 2);
        const double delta = gather_time(pf, p, (tot_s - min_s) * 2 * rb, 2);
        if (la > 0)
            tsp_pass(pl.a, p, la, full, 0, 1, pl.end_a, NULL, L);
        finish_pass_a(&pl, p, la);
        start_pass_b(pf, ru, bounds, p, &pl);
        tsp_pass(pl.b, p, L, ru->delta ? delta : full, 1, 0, pl.end_b, layers, L);
    }
    pl.end_b[p - 1] += 2.0 * c->dim * (double)c->vocab_size / pf->gemm_flops; /* the classifier */
    *ttft = m == RA_COST_KVR ? pl.end_b[p - 1] : 0;
    for (int r = 0; r < p; r++) {
        if (m == RA_COST_TSP)
            *ttft = fmax(*ttft, pl.end_b[r]);
        if (rank_finish)
            rank_finish[r] = pl.end_b[r];
    }
out:
    plan_free(&pl);
    return rc;
}

int ra_cost_reuse_replay(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                         const struct ra_cost_reuse *ru, const int *bounds, int p, double *ttft, double *rank_finish,
                         struct ra_cost_layer *layers)
{
    /* The plain replay checks the shape, the profile and the bounds, and is
     * the answer when nothing is loaded. */
    int rc = ra_cost_replay(c, pf, m, bounds, p, ttft, rank_finish, layers);
    if (rc != RA_OK || (rc = check_reuse(c, ru, bounds[p])) != RA_OK)
        return rc;
    double loaded, keys;
    loaded_in(ru, 0, bounds[p], &loaded, &keys);
    if (loaded == 0)
        return RA_OK;
    return replay_reuse(c, pf, m, ru, bounds, p, ttft, rank_finish, layers);
}

int ra_cost_reuse_objective_eval(void *ctx, const int *bounds, int p, double *value)
{
    const struct ra_cost_reuse_objective *o = ctx;
    if (!o)
        return ra_error_set(RA_EINVAL, "reuse cost objective: no context");
    return ra_cost_reuse_replay(o->config, o->profile, o->method, o->reuse, bounds, p, value, NULL, NULL);
}
