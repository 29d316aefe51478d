/* Chunk-cache reuse on one rank: a request's prompt prefilled from the chunk
 * store (store.h) in one of five modes.
 *
 *   none    full prefill of the whole prompt: the reference.
 *   prefix  exact prefix caching (what vLLM and SGLang do): chunk c is
 *           looked up behind the prefix and chunks 1..c-1 (its exact
 *           context), the longest run of hits loaded as they are, the rest
 *           computed as one span (the leading prefix, which no chunk holds,
 *           as one span before it). Equal to `none` within fp32 rounding:
 *           a GEMM over fewer rows may sum in another order.
 *   full    every chunk's isolated rows loaded and re-positioned (K rotated
 *           by the shift of its positions, rope_shift), nothing recomputed
 *           but the rows no chunk holds: the prefix, missing chunks and the
 *           question (PromptCache).
 *   blend   CacheBlend: as full, then
 *           pass A  every row through layers 0..check (the last check
 *                   layer) into the cache; at each check layer a row's
 *                   deviation is |K - K'|^2 + |V - V'|^2 of its fresh rows
 *                   against the loaded ones (summed over the check layers);
 *           select  the top ratio of the loaded rows by deviation (ties to
 *                   the lower position: deterministic, and nested across
 *                   ratios), with every row no chunk holds;
 *           pass B  the selected rows (a position list; the whole prompt
 *                   at ratio 1 is the span of `none`) through every layer,
 *                   attending over the fused cache with the exact causal
 *                   rule; every other row keeps its loaded K and V in every
 *                   layer, so ratio 0 is `full` and ratio 1 is `none`, bit
 *                   for bit. A schedule narrows the rows layer by layer
 *                   (gradual filtering): its first ratio is the selection's,
 *                   and after each layer past the check the next layer keeps
 *                   the top round(ratio_j x loaded) of the rows it computed
 *                   by their deviation in that layer (nested, must rows
 *                   kept); the forward pass's narrow hook (context.h).
 *           Pass A ends at the last check layer's kv_ready (RA_HOOK_STOP).
 *   craft   Cache-Craft as craft.h reads it: each chunk's stored variant of
 *           least impact loaded, a recompute budget per chunk from its
 *           attention record and how much of its stored context precedes it
 *           (their mean the ratio), the rows of most attention to context
 *           recomputed by pass B (no pass A): 1 is none, 0 is full.
 *
 * Loading is a pipeline: a loader thread reads and verifies layer l+1 of
 * every hit (and, with store_gbps, waits as a store of that bandwidth would)
 * while the pass computes layer l; the pass installs layer l's rows into the
 * cache (upload and rope_shift, on the context's backend) when it begins the
 * layer. Missing chunks count as recomputed rows; with store_write they are
 * computed in isolation and added after the first token (not in the TTFT). */
#ifndef RA_REUSE_H
#define RA_REUSE_H

#include <stdint.h>

#include "context.h"
#include "kvcache.h"
#include "reuse/request.h"
#include "reuse/store.h"

enum ra_reuse_mode { RA_REUSE_NONE, RA_REUSE_PREFIX, RA_REUSE_FULL, RA_REUSE_BLEND, RA_REUSE_CRAFT };

/* "none", "prefix", "full", "blend", "craft" (--reuse); RA_EINVAL naming OPT otherwise. */
int ra_reuse_mode_parse(const char *s, const char *opt, enum ra_reuse_mode *mode);
const char *ra_reuse_mode_name(enum ra_reuse_mode mode);

#define RA_BLEND_MAX_CHECK 8

enum ra_blend_pick {
    RA_BLEND_PICK_DEVIATION = 0, /* CacheBlend's rule */
    RA_BLEND_PICK_RANDOM,        /* the same count drawn at random (seed): the control of the quality study */
};

struct ra_reuse_config {
    double ratio;          /* blend: fraction of the loaded rows recomputed, [0, 1]; < 0: auto (controller) */
    int check[RA_BLEND_MAX_CHECK]; /* check layers, ascending (default {1}) */
    int n_check;
    const double *schedule; /* NULL, or ratios for the layers after the last check layer, non-increasing
                             * (the last repeats; the first is the selection's and ratio is unused) */
    int n_schedule;
    enum ra_blend_pick pick;
    uint64_t seed;         /* for RA_BLEND_PICK_RANDOM */
    double store_gbps;     /* emulated store bandwidth in GB/s (1e9 B/s); 0: as fast as it reads */
    int store_write;       /* compute and add missing chunks after the first token */
    const int *quota_bounds; /* NULL, or p+1 bounds: blend selects within each slice [b_i, b_{i+1})
                              * separately (ra_blend_select_local): the chain's local scope on one rank */
    int n_quota;           /* p */
};
#define RA_REUSE_CONFIG_INIT { .ratio = 0.15, .check = { 1 }, .n_check = 1 }

/* Auto ratio (CacheBlend section 5): the larger of RA_BLEND_MIN_RATIO and the
 * ratio whose recompute time equals the load time, from the rates measured
 * in pass A and by the loader. */
#define RA_BLEND_MIN_RATIO 0.15

struct ra_reuse_report {
    enum ra_reuse_mode mode;
    int n_rows;             /* the prompt's rows */
    int hits, misses;       /* chunks */
    int loaded_rows;        /* rows whose K and V came from the store */
    int64_t bytes_loaded;
    double ratio;           /* the ratio used (auto: the controller's) */
    int *recomputed;        /* [n_layers] rows computed per layer by either pass, each once (blend: every
                             * row up to the last check layer); owned: ra_reuse_report_free */
    int n_layers;
    double ttft;            /* seconds to the first token's logits */
    double t_pass_a, t_select, t_pass_b, t_load_wait; /* parts of it; t_load_wait: the pass waiting for the loader */
    double t_load;          /* the loader's own time (reads, checks, emulated waits) */
    double t_store_write;   /* after the first token: misses computed and added */
};
void ra_reuse_report_free(struct ra_reuse_report *rep);

/* Prefills REQ's prompt into KV (rows [0, req->n), every layer) in MODE and
 * writes the last row's logits; ST may be NULL for `none`; CFG NULL: the
 * defaults. KV's dtype must be the store's: a chunk of other rows is an
 * error naming its file. A chunk holding the prompt's last row is computed
 * (the logits need it). REP is overwritten (free it before reusing it). On
 * return KV is the decode cache. */
int ra_reuse_prefill(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req,
                     enum ra_reuse_mode mode, const struct ra_reuse_config *cfg, struct ra_kvcache *kv,
                     float *logits, struct ra_reuse_report *rep);

/* The selection rule, pure (shared with the chain): of N rows with
 * deviations DEV, the MUST rows (nonzero) are always taken; of the others,
 * the top round(ratio * n_others) by deviation, ties to the lower index.
 * OUT receives the taken rows' indices, ascending; *n_out their count. */
int ra_blend_select(const float *dev, const uint8_t *must, int n, double ratio, int32_t *out, int *n_out);

#endif
