/* `--partition auto`: see autosplit.h. */
#include "autosplit.h"
#include "forward.h"
#include "search.h"
#include "status.h"
#include "table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-token work a and per-pair attention work c of the family (search.h):
 * the span [0, x) costs a·x + c·x(x+1)/2 = (a + c/2)·x + (c/2)·x², so in the
 * family's form a·n + c·(n·b + n²/2) the linear term is a + c/2. In FLOPs, or
 * in seconds when a profile gives the rates. */
static double family_k(const struct ra_config *c, const struct ra_cost_profile *pf, int n_tokens)
{
    double lin, att;
    ra_forward_flops(c, 0, 1, &lin, &att); /* one token: its linear FLOPs, one query-key pair */
    double a = lin, pair = att;
    if (pf) {
        a = lin / pf->gemm_flops + pf->other_s_per_token_layer * c->n_layers;
        pair = att / pf->attn_flops;
    }
    return pair * n_tokens / (2.0 * (a + pair / 2));
}

/* The work of the slice [start, start + n): FLOPs, or predicted seconds with a profile. */
static double slice_work(const struct ra_config *c, const struct ra_cost_profile *pf, int start, int n)
{
    double lin, att;
    ra_forward_flops(c, start, n, &lin, &att);
    if (!pf)
        return lin + att;
    return lin / pf->gemm_flops + att / pf->attn_flops + pf->other_s_per_token_layer * n * c->n_layers;
}

/* Each rank's work and the running extremes from either end, so a move that
 * changes ranks i-1..j costs O(j - i) to judge: hi/lo[0..p) over ranks [0, r],
 * hi/lo[p..2p) over ranks [r, p). */
struct balance {
    double *w, *hi, *lo;
};

static void balance_update(const struct ra_config *c, const struct ra_cost_profile *pf, const int *b, int p,
                           struct balance *bl, int first, int last)
{
    for (int r = first; r <= last; r++)
        bl->w[r] = slice_work(c, pf, b[r], b[r + 1] - b[r]);
    for (int r = 0; r < p; r++) {
        bl->hi[r] = r ? fmax(bl->hi[r - 1], bl->w[r]) : bl->w[r];
        bl->lo[r] = r ? fmin(bl->lo[r - 1], bl->w[r]) : bl->w[r];
    }
    for (int r = p - 1; r >= 0; r--) {
        bl->hi[p + r] = r < p - 1 ? fmax(bl->hi[p + r + 1], bl->w[r]) : bl->w[r];
        bl->lo[p + r] = r < p - 1 ? fmin(bl->lo[p + r + 1], bl->w[r]) : bl->w[r];
    }
}

/* The gap between the busiest and the idlest rank if b_i..b_j moved by step. */
static double moved_gap(const struct ra_config *c, const struct ra_cost_profile *pf, const int *b, int p,
                        const struct balance *bl, int i, int j, int step)
{
    double hi = -INFINITY, lo = INFINITY;
    if (i >= 2) {
        hi = bl->hi[i - 2];
        lo = bl->lo[i - 2];
    }
    if (j + 1 < p) {
        hi = fmax(hi, bl->hi[p + j + 1]);
        lo = fmin(lo, bl->lo[p + j + 1]);
    }
    for (int r = i - 1; r <= j; r++) {
        const int start = r == i - 1 ? b[r] : b[r] + step, end = r == j ? b[r + 1] : b[r + 1] + step;
        const double w = slice_work(c, pf, start, end - start);
        hi = fmax(hi, w);
        lo = fmin(lo, w);
    }
    return hi - lo;
}

/* Rounding each family boundary to the nearest token leaves every rank within
 * one token's work of its share, but two ranks can still differ by nearly two
 * tokens' work. So, while it narrows the gap, boundaries b_i..b_j move together
 * by one token: rank i-1 gains a token at its end, rank j loses one at its
 * start, and the ranks between keep their sizes (a single boundary's move is
 * the case i = j). Each accepted move lowers the gap, so this ends; blocks are
 * at most 32 boundaries long, so a sweep costs O(p·32²) FLOP counts. It leaves
 * the busiest and the idlest rank within one token's work of each other for
 * 2-256 ranks (tests/test_autosplit.c); at 1024 ranks of 4 tokens, 1.3. */
static int even_out(const struct ra_config *c, const struct ra_cost_profile *pf, int *b, int p)
{
    struct balance bl = { malloc(sizeof(double) * (size_t)p), malloc(sizeof(double) * 2 * (size_t)p),
                          malloc(sizeof(double) * 2 * (size_t)p) };
    const int span = p - 1 < 32 ? p - 1 : 32;
    int rc = RA_OK;
    if (!bl.w || !bl.hi || !bl.lo) {
        rc = ra_error_set(RA_ENOMEM, "auto partition: out of memory for %d ranks", p);
        goto out;
    }
    balance_update(c, pf, b, p, &bl, 0, p - 1);
    double gap = bl.hi[p - 1] - bl.lo[p - 1];
    for (int improved = 1; improved;) {
        improved = 0;
        for (int i = 1; i < p; i++)
            for (int j = i; j < p && j < i + span; j++)
                for (int step = -1; step <= 1; step += 2) {
                    if (b[i] + step <= b[i - 1] || b[j] + step >= b[j + 1])
                        continue;
                    const double g = moved_gap(c, pf, b, p, &bl, i, j, step);
                    if (!(g < gap))
                        continue;
                    for (int k = i; k <= j; k++)
                        b[k] += step;
                    balance_update(c, pf, b, p, &bl, i - 1, j);
                    gap = g;
                    improved = 1;
                }
    }
out:
    free(bl.w);
    free(bl.hi);
    free(bl.lo);
    return rc;
}

int ra_partition_equal_work(const struct ra_config *c, const struct ra_cost_profile *pf, int n_tokens, int p,
                            int *bounds)
{
    int rc;
    if (!c || !bounds)
        return ra_error_set(RA_EINVAL, "auto partition: no model config or output");
    if ((rc = ra_config_validate(c, "auto partition")) != RA_OK || (pf && (rc = ra_cost_profile_check(pf)) != RA_OK))
        return rc;
    if (p < 1)
        return ra_error_set(RA_EINVAL, "auto partition: %d ranks", p);
    if (n_tokens < p)
        return ra_error_set(RA_EINVAL, "the prompt has %d tokens, fewer than the %d ranks: every rank needs at least one",
                            n_tokens, p);
    if ((rc = ra_search_family_bounds(n_tokens, p, family_k(c, pf, n_tokens), bounds)) != RA_OK)
        return rc;
    return even_out(c, pf, bounds, p);
}

int ra_partition_auto(const struct ra_config *c, const struct ra_cost_profile *pf, int n_tokens, int p,
                      int *bounds, char *how, size_t how_len)
{
    int rc = ra_partition_equal_work(c, pf, n_tokens, p, bounds);
    if (rc != RA_OK)
        return rc;
    if (!pf || !(pf->p2p_bandwidth > 0) || p == 1) {
        if (how)
            snprintf(how, how_len, "%s", pf ? "equal-time from the profile's compute rates (no link measured)"
                                            : "equal-work from FLOPs: linear layers + causal attention");
        return RA_OK;
    }
    /* The cost model's KVR replay, searched around the equal-time split; the
     * search keeps its seed unless a point predicts a shorter TTFT. */
    int *seed = malloc(sizeof(int) * (size_t)(p + 1));
    if (!seed)
        return ra_error_set(RA_ENOMEM, "auto partition: out of memory");
    memcpy(seed, bounds, sizeof(int) * (size_t)(p + 1));
    struct ra_cost_objective obj = { c, pf, RA_COST_KVR };
    struct ra_search_opts so = { .seed = seed, .initial_span = 0.25, .min_stride = 1 };
    double ttft = 0;
    rc = ra_search_partition(n_tokens, p, ra_cost_objective_eval, &obj, &so, bounds, &ttft, NULL);
    free(seed);
    if (rc != RA_OK)
        return rc;
    if (how)
        snprintf(how, how_len, "equal-time from the profile, refined by the cost model (predicted TTFT %.4g s)", ttft);
    return RA_OK;
}

int ra_partition_auto_reuse(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                            const struct ra_cost_reuse *ru, int n_tokens, int p, int *bounds, char *how,
                            size_t how_len)
{
    /* Without a profile: FLOPs at unit rates over free links, so the search balances work. */
    const struct ra_cost_profile flops = { .gemm_flops = 1, .attn_flops = 1, .p2p_bandwidth = INFINITY };
    int rc = ra_partition_equal_work(c, pf, n_tokens, p, bounds);
    if (rc != RA_OK || p == 1) {
        if (rc == RA_OK && how)
            snprintf(how, how_len, "one rank");
        return rc;
    }
    const struct ra_cost_profile *model = pf && pf->p2p_bandwidth > 0 ? pf : &flops;
    struct ra_cost_profile rates;
    if (pf && model == &flops) { /* the profile's compute rates, links free */
        rates = *pf;
        rates.p2p_bandwidth = INFINITY;
        rates.allgather_bandwidth = 0;
        model = &rates;
    }
    int *seed = malloc(sizeof(int) * (size_t)(p + 1));
    if (!seed)
        return ra_error_set(RA_ENOMEM, "auto partition: out of memory");
    memcpy(seed, bounds, sizeof(int) * (size_t)(p + 1));
    struct ra_cost_reuse_objective obj = { c, model, m, ru };
    struct ra_search_opts so = { .seed = seed, .initial_span = 1, .min_stride = 1 };
    double ttft = 0;
    rc = ra_search_partition(n_tokens, p, ra_cost_reuse_objective_eval, &obj, &so, bounds, &ttft, NULL);
    free(seed);
    if (rc == RA_OK && how)
        snprintf(how, how_len, "reuse-balanced by the cost model (%s; predicted TTFT %.4g%s)",
                 model == &flops ? "FLOPs, links free" : model == pf ? "the profile" : "the profile's rates, links free",
                 ttft, model == &flops ? " FLOP units" : " s");
    return rc;
}

int ra_cost_reuse_of_request(const struct ra_request *req, enum ra_reuse_mode mode, const struct ra_reuse_config *cfg,
                             int global, int delta, enum ra_dtype kv_dtype, struct ra_cost_span *spans,
                             struct ra_cost_reuse *ru)
{
    static const struct ra_reuse_config defaults = RA_REUSE_CONFIG_INIT;
    if (!req || !spans || !ru)
        return ra_error_set(RA_EINVAL, "reuse cost model: no request or output");
    if (!cfg)
        cfg = &defaults;
    *ru = (struct ra_cost_reuse){ .loaded = spans, .global = global, .delta = delta,
                                  .kv_elem_bytes = (double)ra_dtype_size(kv_dtype) };
    if (mode == RA_REUSE_NONE)
        return RA_OK;
    for (int c = 0; c < req->n_chunks; c++)
        if (req->chunk_len[c] > 0 && req->chunk_start[c] + req->chunk_len[c] < req->n) /* the last row: computed */
            spans[ru->n_loaded++] = (struct ra_cost_span){ req->chunk_start[c], req->chunk_len[c] };
    const double ratio = cfg->ratio < 0 ? RA_BLEND_MIN_RATIO : cfg->ratio;
    ru->pass_a = mode == RA_REUSE_BLEND;
    ru->ratio = mode == RA_REUSE_BLEND || mode == RA_REUSE_CRAFT ? ratio : 0;
    ru->check = cfg->n_check > 0 ? cfg->check[cfg->n_check - 1] : 1;
    return RA_OK;
}

void ra_partition_reuse_tag(const char *hw, enum ra_reuse_mode mode, double ratio, int global, int delta, char *buf,
                            size_t len)
{
    char r[32] = "";
    if (mode == RA_REUSE_BLEND || mode == RA_REUSE_CRAFT) {
        if (ratio < 0)
            snprintf(r, sizeof r, "-rauto");
        else
            snprintf(r, sizeof r, "-r%g", ratio);
    }
    snprintf(buf, len, "%s+reuse-%s%s-%s-%s", hw, ra_reuse_mode_name(mode), r, global ? "global" : "local",
             delta ? "delta" : "full");
}

int ra_cost_profile_load(const char *path, const char *model_id, const char *hw_tag, struct ra_cost_profile *pf,
                         int *busy)
{
    char names[RA_TABLE_MAX_PROFILE][64];
    const char *list[RA_TABLE_MAX_PROFILE];
    double values[RA_TABLE_MAX_PROFILE];
    int n = 0, rc = ra_table_profile_read(path, model_id, hw_tag, names, values, RA_TABLE_MAX_PROFILE, &n);
    if (rc != RA_OK)
        return rc;
    if (busy)
        *busy = 0;
    for (int i = 0; i < n; i++) {
        list[i] = names[i];
        if (busy && !strcmp(names[i], "calibration_busy") && values[i] != 0)
            *busy = 1;
    }
    return ra_cost_profile_unpack(pf, list, values, n);
}
