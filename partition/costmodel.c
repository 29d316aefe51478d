/* The cost model: see costmodel.h. */
#include "costmodel.h"
#include "forward.h"
#include "status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROW_BYTES(c) ((double)ra_config_kv_dim(c) * sizeof(float))

/* ------------------------------------------------------------------ per-rank times */

struct rank_cost {
    double qkv, rest; /* seconds per layer before and after the KV hook */
};

static struct rank_cost rank_cost_of(const struct ra_config *c, const struct ra_cost_profile *pf, int start, int n)
{
    double lin, att;
    ra_forward_flops(c, start, n, &lin, &att);
    const double L = c->n_layers, d = c->dim, kv = ra_config_kv_dim(c), h = c->hidden_dim;
    /* Weights per layer: wq, wk, wv before the hook; wo, gate, up, down after. */
    const double qkv_share = (d + 2 * kv) / (2 * d + 2 * kv + 3 * h);
    /* Elements touched by the memory-bound ops before and after the hook. */
    const double other_pre = (2 * d + kv) / (5 * d + kv + h);
    const double other = pf->other_s_per_token_layer * n;
    lin /= L;
    att /= L;
    return (struct rank_cost){
        .qkv = lin * qkv_share / pf->gemm_flops + other * other_pre,
        .rest = att / pf->attn_flops + lin * (1 - qkv_share) / pf->gemm_flops + other * (1 - other_pre),
    };
}

/* The final norm and classifier for the one token that needs logits. */
static double classifier_time(const struct ra_config *c, const struct ra_cost_profile *pf)
{
    return 2.0 * c->dim * (double)c->vocab_size / pf->gemm_flops;
}

/* ------------------------------------------------------------------ checks */

static int check_rate(const char *name, double v)
{
    if (!(v > 0)) /* also NaN; +inf is allowed: free */
        return ra_error_set(RA_EINVAL, "cost profile: %s = %g must be positive", name, v);
    return RA_OK;
}

/* Bandwidths may be 0: not measured (a one-rank calibration). */
static int check_bandwidth(const char *name, double v)
{
    if (!(v >= 0))
        return ra_error_set(RA_EINVAL, "cost profile: %s = %g must be positive (or 0: not measured)", name, v);
    return RA_OK;
}

static int check_time(const char *name, double v)
{
    if (!(v >= 0) || isinf(v))
        return ra_error_set(RA_EINVAL, "cost profile: %s = %g must be a finite time >= 0", name, v);
    return RA_OK;
}

int ra_cost_profile_check(const struct ra_cost_profile *pf)
{
    int rc;
    if (!pf)
        return ra_error_set(RA_EINVAL, "cost profile: none given");
    if ((rc = check_rate("gemm_flops", pf->gemm_flops)) != RA_OK ||
        (rc = check_rate("attn_flops", pf->attn_flops)) != RA_OK ||
        (rc = check_bandwidth("p2p_bandwidth", pf->p2p_bandwidth)) != RA_OK ||
        (rc = check_bandwidth("allgather_bandwidth", pf->allgather_bandwidth)) != RA_OK ||
        (rc = check_time("other_s_per_token_layer", pf->other_s_per_token_layer)) != RA_OK ||
        (rc = check_time("p2p_latency", pf->p2p_latency)) != RA_OK ||
        (rc = check_time("allgather_latency", pf->allgather_latency)) != RA_OK ||
        (rc = check_time("row_list_factor", pf->row_list_factor)) != RA_OK ||
        (rc = check_time("install_s_per_row_layer", pf->install_s_per_row_layer)) != RA_OK ||
        (rc = check_bandwidth("load_bandwidth", pf->load_bandwidth)) != RA_OK)
        return rc;
    return RA_OK;
}

static int check_args(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                      const int *bounds, int p, const double *ttft)
{
    int rc;
    if (!c || !bounds || !ttft || p < 1)
        return ra_error_set(RA_EINVAL, "cost model: %d ranks, or no config, bounds or output", p);
    if ((rc = ra_config_validate(c, "cost model")) != RA_OK || (rc = ra_cost_profile_check(pf)) != RA_OK)
        return rc;
    if (p > 1 && !(pf->p2p_bandwidth > 0) && !(m == RA_COST_TSP && pf->allgather_bandwidth > 0))
        return ra_error_set(RA_EINVAL, "cost model: the profile has no point-to-point bandwidth for %d ranks "
                                       "(calibrate with 2 or more ranks)", p);
    if (bounds[0] != 0)
        return ra_error_set(RA_EINVAL, "cost model: boundaries must start at 0 (got %d)", bounds[0]);
    for (int r = 0; r < p; r++)
        if (bounds[r + 1] <= bounds[r])
            return ra_error_set(RA_EINVAL, "cost model: rank %d gets an empty slice [%d, %d)", r, bounds[r],
                                bounds[r + 1]);
    return RA_OK;
}

/* ------------------------------------------------------------------ KVR: the chain */

static void put_layer(struct ra_cost_layer *layers, int index, double start, double wait_end, double end)
{
    if (layers)
        layers[index] = (struct ra_cost_layer){ start, wait_end, end };
}

/* Replays rank r's layers given the previous rank's send times (prev_send[l]);
 * writes its own into send[l] and returns its last layer's end. */
static double replay_chain_rank(const struct ra_config *c, const struct ra_cost_profile *pf, const int *bounds, int r,
                                const double *prev_send, double *send, struct ra_cost_layer *layers)
{
    const struct rank_cost cost = rank_cost_of(c, pf, bounds[r], bounds[r + 1] - bounds[r]);
    const double transfer = pf->p2p_latency + 2.0 * bounds[r] * ROW_BYTES(c) / pf->p2p_bandwidth;
    double t = 0, link_free = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const double start = t;
        double wait_end = start + cost.qkv;
        if (r > 0) {
            /* The receive is posted at the layer's start, the send after r-1's wait. */
            double begin = fmax(fmax(prev_send[l], start), link_free);
            link_free = begin + transfer;
            wait_end = fmax(wait_end, link_free);
        }
        send[l] = wait_end;
        t = wait_end + cost.rest;
        put_layer(layers, r * c->n_layers + l, start, wait_end, t);
    }
    return t;
}

static int replay_kvr(const struct ra_config *c, const struct ra_cost_profile *pf, const int *bounds, int p,
                      double *ttft, double *rank_finish, struct ra_cost_layer *layers)
{
    const int L = c->n_layers;
    int rc = RA_OK;
    double finish = 0, *prev = calloc((size_t)L, sizeof(double)), *cur = calloc((size_t)L, sizeof(double));
    if (!prev || !cur) {
        rc = ra_error_set(RA_ENOMEM, "cost model: out of memory");
        goto cleanup;
    }
    for (int r = 0; r < p; r++) {
        finish = replay_chain_rank(c, pf, bounds, r, prev, cur, layers);
        if (r == p - 1)
            finish += classifier_time(c, pf);
        if (rank_finish)
            rank_finish[r] = finish;
        double *swap = prev;
        prev = cur;
        cur = swap;
    }
    *ttft = finish;
cleanup:
    free(prev);
    free(cur);
    return rc;
}

/* ------------------------------------------------------------------ TSP: the all-gather */

/* Two MPI_Allgatherv calls per layer (K, V); each rank receives the others' rows. */
static double allgather_time(const struct ra_config *c, const struct ra_cost_profile *pf, const int *bounds, int p)
{
    if (p == 1)
        return 0;
    int min_n = bounds[1] - bounds[0];
    for (int r = 1; r < p; r++)
        if (bounds[r + 1] - bounds[r] < min_n)
            min_n = bounds[r + 1] - bounds[r];
    const int measured = pf->allgather_bandwidth > 0;
    const double bw = measured ? pf->allgather_bandwidth : pf->p2p_bandwidth;
    const double lat = measured ? pf->allgather_latency : (p - 1) * pf->p2p_latency;
    return 2.0 * (lat + (double)(bounds[p] - min_n) * ROW_BYTES(c) / bw);
}

static int replay_tsp(const struct ra_config *c, const struct ra_cost_profile *pf, const int *bounds, int p,
                      double *ttft, double *rank_finish, struct ra_cost_layer *layers)
{
    const int L = c->n_layers;
    const double gather = allgather_time(c, pf, bounds, p);
    int rc = RA_OK;
    struct rank_cost *cost = malloc(sizeof *cost * (size_t)p);
    double *t = calloc((size_t)p, sizeof(double));
    if (!cost || !t) {
        rc = ra_error_set(RA_ENOMEM, "cost model: out of memory");
        goto cleanup;
    }
    for (int r = 0; r < p; r++)
        cost[r] = rank_cost_of(c, pf, bounds[r], bounds[r + 1] - bounds[r]);
    for (int l = 0; l < L; l++) {
        double all_in = 0; /* the collective completes after the last rank joins */
        for (int r = 0; r < p; r++)
            all_in = fmax(all_in, t[r] + cost[r].qkv);
        for (int r = 0; r < p; r++) {
            const double start = t[r];
            t[r] = all_in + gather + cost[r].rest;
            put_layer(layers, r * L + l, start, all_in + gather, t[r]);
        }
    }
    t[p - 1] += classifier_time(c, pf);
    *ttft = 0;
    for (int r = 0; r < p; r++) {
        *ttft = fmax(*ttft, t[r]);
        if (rank_finish)
            rank_finish[r] = t[r];
    }
cleanup:
    free(cost);
    free(t);
    return rc;
}

/* ------------------------------------------------------------------ prediction */

int ra_cost_replay(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                   const int *bounds, int p, double *ttft, double *rank_finish, struct ra_cost_layer *layers)
{
    int rc = check_args(c, pf, m, bounds, p, ttft);
    if (rc != RA_OK)
        return rc;
    switch (m) {
    case RA_COST_KVR:
        return replay_kvr(c, pf, bounds, p, ttft, rank_finish, layers);
    case RA_COST_TSP:
        return replay_tsp(c, pf, bounds, p, ttft, rank_finish, layers);
    }
    return ra_error_set(RA_EINVAL, "cost model: unknown method %d", (int)m);
}

int ra_cost_predict(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                    const int *bounds, int p, double *ttft, double *rank_finish)
{
    return ra_cost_replay(c, pf, m, bounds, p, ttft, rank_finish, NULL);
}

int ra_cost_objective_eval(void *ctx, const int *bounds, int p, double *value)
{
    const struct ra_cost_objective *o = ctx;
    if (!o)
        return ra_error_set(RA_EINVAL, "cost objective: no context");
    return ra_cost_predict(o->config, o->profile, o->method, bounds, p, value, NULL);
}

/* ------------------------------------------------------------------ names <-> values */

static const char *const profile_names[RA_COST_PROFILE_N + 1] = {
    "gemm_flops",    "attn_flops",          "other_s_per_token_layer", "p2p_bandwidth",
    "p2p_latency",   "allgather_bandwidth", "allgather_latency",       "row_list_factor",
    "install_s_per_row_layer", "load_bandwidth", NULL,
};

/* The fields in the order of profile_names. */
static double *profile_field(struct ra_cost_profile *pf, int i)
{
    double *fields[RA_COST_PROFILE_N] = {
        &pf->gemm_flops,  &pf->attn_flops,          &pf->other_s_per_token_layer, &pf->p2p_bandwidth,
        &pf->p2p_latency, &pf->allgather_bandwidth, &pf->allgather_latency,   &pf->row_list_factor,
        &pf->install_s_per_row_layer, &pf->load_bandwidth,
    };
    return fields[i];
}

const char *const *ra_cost_profile_names(void)
{
    return profile_names;
}

void ra_cost_profile_pack(const struct ra_cost_profile *pf, double *values)
{
    struct ra_cost_profile copy = *pf;
    for (int i = 0; i < RA_COST_PROFILE_N; i++)
        values[i] = *profile_field(&copy, i);
}

int ra_cost_profile_unpack(struct ra_cost_profile *pf, const char *const *names, const double *values, int n)
{
    if (!pf || (n > 0 && (!names || !values)) || n < 0)
        return ra_error_set(RA_EINVAL, "cost profile: nothing to unpack");
    struct ra_cost_profile out;
    memset(&out, 0, sizeof out);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < RA_COST_PROFILE_N; i++)
            if (names[j] && !strcmp(names[j], profile_names[i]))
                *profile_field(&out, i) = values[j];
    int rc = ra_cost_profile_check(&out);
    if (rc == RA_OK)
        *pf = out;
    return rc;
}
