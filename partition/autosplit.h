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
#include "reuse/reuse.h"

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

/* The cost model's view of a reuse run of REQ in MODE, before any lookup:
 * every chunk stored (the chunk holding the prompt's last row is computed,
 * as the engine does), the other rows must rows; blend: CFG's ratio (auto:
 * RA_BLEND_MIN_RATIO) and last check layer; craft: CFG's ratio as its mean,
 * no pass A; full and prefix: ratio 0 (prefix as if every chunk were its
 * exact context's: a bound); none: nothing loaded. SPANS[req->n_chunks]
 * receives the loaded spans RU points at. KV_DTYPE: the cache's rows. */
int ra_cost_reuse_of_request(const struct ra_request *req, enum ra_reuse_mode mode, const struct ra_reuse_config *cfg,
                             int global, int delta, enum ra_dtype kv_dtype, struct ra_cost_span *spans,
                             struct ra_cost_reuse *ru);

/* The hardware tag of partition tables for reuse runs on hardware HW (table.h's
 * groups): "HW+reuse-MODE-rRATIO-SCOPE-SEND", e.g.
 * "AMD_EPYC-2c+reuse-blend-r0.15-global-full": a reuse run's table:FILE and
 * runahead-tune --reuse use it, so plain and reuse splits never mix. */
void ra_partition_reuse_tag(const char *hw, enum ra_reuse_mode mode, double ratio, int global, int delta, char *buf,
                            size_t len);

/* The cost-model profile runahead-tune --calibrate stored in the table at path
 * for this model id and hardware tag (table.h); unknown names are ignored. busy
 * (NULL: not wanted) gets 1 when the profile is flagged calibration_busy. */
int ra_cost_profile_load(const char *path, const char *model_id, const char *hw_tag, struct ra_cost_profile *pf,
                         int *busy);

#endif
