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
    return ra_search_family_bounds(n_tokens, p, family_k(c, pf, n_tokens), bounds);
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

int ra_cost_profile_load(const char *path, const char *model_id, const char *hw_tag, struct ra_cost_profile *pf)
{
    char names[RA_TABLE_MAX_PROFILE][64];
    const char *list[RA_TABLE_MAX_PROFILE];
    double values[RA_TABLE_MAX_PROFILE];
    int n = 0, rc = ra_table_profile_read(path, model_id, hw_tag, names, values, RA_TABLE_MAX_PROFILE, &n);
    if (rc != RA_OK)
        return rc;
    for (int i = 0; i < n; i++)
        list[i] = names[i];
    return ra_cost_profile_unpack(pf, list, values, n);
}
