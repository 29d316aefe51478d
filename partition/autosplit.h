/* `--partition auto`: the KV-Runahead split chosen without a searched table.
 *
 * The prompt's work is the cost model's: per layer, a slice of n tokens after a
 * prefix of b costs 2·n·(linear weights) FLOPs plus 4·d·(n·b + n(n+1)/2) of
 * causal attention (ra_forward_flops: GQA/MQA and the FFN width from the
 * config). Without a profile every rank gets the same FLOPs: the member of the
 * search's equal-work family (search.h) whose k fits this model and length,
 * rounded to tokens and then evened out by one-token moves until the busiest
 * and the idlest rank differ by less than one token's work.
 * With a calibrated profile (costmodel.h) the same family balances predicted
 * seconds instead (GEMM and attention rates, the per-token "other" time), and
 * when the profile has a point-to-point link the cost model's KVR replay then
 * refines it (pipeline fill, transfers, the last rank's classifier) by the
 * hierarchical search, seeded there. Everything is arithmetic on the config
 * and the profile: every rank computes the same split. */
#ifndef RA_AUTOSPLIT_H
#define RA_AUTOSPLIT_H

#include <stddef.h>

#include "costmodel.h"
#include "model.h"

/* The equal-work (pf NULL) or equal-time (pf given) member of the family for
 * n_tokens over p ranks, in bounds[p+1]. */
int ra_partition_equal_work(const struct ra_config *c, const struct ra_cost_profile *pf, int n_tokens, int p,
                            int *bounds);

/* The auto split: equal work from FLOPs without pf; with pf equal time,
 * refined by the cost model when pf->p2p_bandwidth > 0. how (may be NULL)
 * gets a short description for reports ("equal-work from FLOPs", ...). */
int ra_partition_auto(const struct ra_config *c, const struct ra_cost_profile *pf, int n_tokens, int p,
                      int *bounds, char *how, size_t how_len);

/* The auto split of a reuse run (costmodel.h's ra_cost_reuse_replay): the
 * bounds where the ranks finish together under that model, searched from
 * the plain auto split (the hierarchical search, min stride 1). Slice and
 * chunk boundaries need not align. Without pf: the FLOP model (unit rates,
 * free links). how as for ra_partition_auto. */
int ra_partition_auto_reuse(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                            const struct ra_cost_reuse *ru, int n_tokens, int p, int *bounds, char *how,
                            size_t how_len);

/* The cost-model profile runahead-tune --calibrate stored in the table at path
 * for this model id and hardware tag (table.h); unknown names are ignored. busy
 * (NULL: not wanted) gets 1 when the profile is flagged calibration_busy. */
int ra_cost_profile_load(const char *path, const char *model_id, const char *hw_tag, struct ra_cost_profile *pf,
                         int *busy);

#endif
