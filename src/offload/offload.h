/* Decode with the KV cache offloaded to host memory.
 *
 * After the prefill, the prompt's KV rows (and, for KVPR, the layer inputs X)
 * live in a HOST POOL (pinned host memory). A decode step attends from a
 * DEVICE WORKING SET: per layer a slot of K and V rows, filled by one transfer
 * engine from the pool. Two slots when --device-kv-mem holds two layers'
 * working sets (layer l+1's fetch overlaps layer l's compute), one when it
 * holds one (no overlap), an error when it holds less.
 *
 * On the CPU backend the device is EMULATED: the rows are really copied (the
 * backend's copy_async), the host link's time is modelled (latency + bytes /
 * bandwidth per message) on an emulated device clock beside the measured
 * compute, and every report says "emulated". On a GPU backend the same calls
 * are cudaMemcpyAsync on the copy stream, ordered by events.
 *
 * One policy interface, chosen by --offload:
 *   none       no offload: the prefill's cache is decoded in place (no engine).
 *   full       every step fetches each layer's rows [0, s') from the pool.
 *   kvpr       KVPR (exact): X of rows [x0, x0+l) is sent first and K, V of
 *              those rows recomputed on the device (K = RoPE(X·W_K), V = X·W_V)
 *              while K, V of the other rows transfer; l planned per step.
 *   infinigen  InfiniGen (approximate, src/offload/infinigen_policy.c): layer 0
 *              fetches every pooled row; layer l >= 1 only the rows a rehearsal
 *              of its attention from layer l−1's input selects (partial key
 *              cache on the device, counter-evicting host pool). Its rotating
 *              slots hold the cap's rows + 1; layer 0 has a full slot of its
 *              own (fixed_bytes, with the partial key cache).
 *
 * THE POLICY HOOKS (struct ra_offload_policy). The engine calls them from the
 * forward pass of each decode step (token at position pos, s' = pos rows
 * before it), per layer l, in this order:
 *
 *   fetch(l)        issue the transfer of layer l's working set into device
 *                   slot ra_offload_slot_k/v(o, l) (rows in any layout the
 *                   policy likes) with ra_offload_send() only: no device work.
 *                   Called for layer 0 at the start of the step (no prefetch
 *                   across steps), and for layer l+1 as soon as layer l is
 *                   ready (or, with fetch_after_attend, right after attend(l),
 *                   when layer l's activations exist: InfiniGen speculates
 *                   layer l+1's tokens from them), so it overlaps layer l's
 *                   compute when there are two slots; with one slot, after
 *                   layer l's end.
 *   ready(l)        layer l is about to run: finish its working set on the
 *                   device once its messages arrived (KVPR: wait for X with
 *                   ra_offload_wait_link(o, 1), recompute, charge it with
 *                   ra_offload_charge()). The engine then waits for every
 *                   message of the fetch. May be NULL.
 *   -- the layer's RMSNorm and Q, K, V projections run; the new token's K
 *      (RoPE applied) and V are written at row pos of the slot --
 *   attend(l, acts) says which rows attention reads: *k, *v and *rows, the
 *                   new token's row LAST (a policy that compacts selected rows
 *                   copies row pos of the slot after them). acts gives the
 *                   layer's activations for speculation (InfiniGen predicts
 *                   layer l+1's tokens from layer l's attention input).
 *                   NULL hook: the slot's rows [0, pos] in place.
 *   store(l)        the new row goes to the pool (the engine does this for
 *                   K and V: ra_offload_pool_k/v); the hook stores anything
 *                   more the policy keeps (partial keys, counters). May be NULL.
 *
 * THE PREFILL WRITES INTO THE POOL. The last rank's prefill cache comes from
 * ra_offload_prefill_cache: on a host-memory backend (the CPU backend, whose
 * host memory is also the emulated device's) a view of the pool, so the
 * chain's received rows and the rank's own rows land in the pool as they are
 * made, and ra_offload_begin moves nothing (stats.bytes_prefill_moved 0). On
 * a GPU backend the prefill's kernels need device memory: there it is a device
 * cache, and begin copies its prompt rows into the pool.
 *
 * begin() runs once after the prefill, with the prompt's rows already in the
 * pool; end() frees the policy's state. A policy keeps its state in
 * policy_state. Byte counters go through ra_offload_send() so that every
 * policy's bytes and link time are accounted alike. */
#ifndef RA_OFFLOAD_H
#define RA_OFFLOAD_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "../backend.h"
#include "../context.h"
#include "../forward.h"
#include "../kvcache.h"
#include "../model.h"

enum ra_offload_mode { RA_OFFLOAD_NONE = 0, RA_OFFLOAD_FULL, RA_OFFLOAD_KVPR, RA_OFFLOAD_INFINIGEN };

int ra_offload_mode_parse(const char *s, enum ra_offload_mode *out);
const char *ra_offload_mode_name(enum ra_offload_mode m);

struct ra_offload_config {
    enum ra_offload_mode mode;
    size_t device_kv_mem;   /* bytes of device KV working set; 0: unlimited */
    double link_gbps;       /* emulated host link, 1e9 bytes/s; 0: no link time */
    double link_latency_us; /* per message */
    int kvpr_force_l;       /* -1: planned; else l, clamped to the rows with X */
    double kvpr_v_com;      /* > 0: bytes/s, overrides the profiler */
    double kvpr_v_gpu;      /* > 0: FLOP/s of the recompute GEMM, overrides the profiler */
    /* InfiniGen (0: the default in brackets): partial key columns, a fraction
     * of head_dim (0.3); threshold max − alpha (5; INFINITY keeps every
     * token); cap, a fraction of the layer's pooled tokens (0.2; >= 1: none);
     * host pool limit in bytes of K and V over all layers (unlimited). */
    float ig_ratio, ig_alpha, ig_cap;
    size_t ig_pool_mem;
    /* The rows of the pool and the slots: the KV cache's dtype (RA_DTYPE_F32,
     * 0, or RA_DTYPE_BF16; InfiniGen: f32). Byte counters count these rows. */
    enum ra_dtype kv_dtype;
};

/* Counters of one decode step (and, summed, of the run). */
struct ra_offload_stats {
    int64_t steps;
    int64_t bytes_kv, bytes_x;  /* host->device: K/V rows, layer inputs */
    int64_t bytes_store;        /* device->host: new rows into the pool */
    int64_t messages;
    double link_s;              /* modelled link busy time (emulated) */
    double stall_s;             /* emulated time the device waited for the link */
    double emulated_s;          /* emulated device clock: measured compute + link stalls */
    double recompute_s;         /* measured KVPR recompute */
    int64_t kvpr_l;             /* last step's split */
    int64_t kvpr_l_closed;      /* the closed form's split for the same step (cross-check) */
    double kvpr_v_com, kvpr_v_gpu, kvpr_fixed_s; /* the profile the plan used */
    int64_t rows_attended;      /* summed over layers and steps */
    int64_t bytes_prefill_moved; /* prompt rows ra_offload_begin copied into the pool (0: the prefill
                                    wrote into it, ra_offload_prefill_cache's view) */
};

struct ra_offload;

struct ra_offload_policy {
    const char *name;
    int fetch_after_attend; /* issue fetch(l+1) after attend(l), not when layer l is ready */
    int (*begin)(struct ra_offload *o);
    int (*fetch)(struct ra_offload *o, int layer, int pos);
    int (*ready)(struct ra_offload *o, int layer, int pos);
    int (*attend)(struct ra_offload *o, int layer, int pos, const struct ra_hook_args *acts, const float **k,
                  const float **v, int *rows);
    int (*store)(struct ra_offload *o, int layer, int pos);
    void (*end)(struct ra_offload *o);
    /* The slot row where the forward pass writes the new token's K and V
     * (called after fetch(l) was issued); NULL: row pos. A compacting
     * policy puts it right after its m selected rows, so attend returns
     * rows = m + 1 with no copy, and its slots need not hold pos + 1 rows. */
    int (*new_row)(struct ra_offload *o, int layer, int pos);
    /* 1: begin() moves the prompt's rows into a pool of the policy's own (with
     * its own memory limit): the engine's pool is released after begin and
     * ra_offload_pool_k/v/x return NULL from then on; store() keeps new rows. */
    int owns_pool;
};

/* Creates the engine for the passes of CTX (its model and backend), for up to
 * MAX_ROWS rows (prompt + generated). Checks the budget: RA_EINVAL when
 * --device-kv-mem cannot hold one layer's working set of MAX_ROWS rows.
 * mode none gives *out = NULL and RA_OK; infinigen needs a host-memory
 * backend (the CPU backend: its speculation runs on the host). */
int ra_offload_create(struct ra_offload **out, struct ra_context *ctx, const struct ra_offload_config *cfg,
                      int max_rows);
/* The same with a policy of the caller's (how InfiniGen plugs in; tests).
 * The slots hold K and V of MAX_ROWS rows (+ X for cfg->mode kvpr). */
int ra_offload_create_policy(struct ra_offload **out, struct ra_context *ctx, const struct ra_offload_config *cfg,
                             int max_rows, const struct ra_offload_policy *policy);
void ra_offload_free(struct ra_offload *o);

/* Before the prefill (KVPR and InfiniGen; a no-op otherwise): keep the layer
 * inputs X of the prefill's span in the pool. Adds a hook to the context's
 * list (its kv_ready copies a->xa) until ra_offload_begin. */
int ra_offload_capture(struct ra_offload *o);

/* Before the prefill: *KV becomes the cache of DTYPE rows the prefill writes,
 * positions [0, max_rows). A host-memory backend: a view of the pool
 * (kv->borrowed; ra_kvcache_free leaves the pool alone). A device-memory
 * backend: a device cache of its own (see the header comment). Free it with
 * ra_kvcache_free before or after the engine. */
int ra_offload_prefill_cache(struct ra_offload *o, struct ra_kvcache *kv, enum ra_dtype dtype);

/* After the prefill: rows [0, n_prompt) of every layer of PREFILL go into the
 * pool (nothing to move for ra_offload_prefill_cache's view); from then on
 * decode reads only the pool (the prefill cache is unused). */
int ra_offload_begin(struct ra_offload *o, const struct ra_kvcache *prefill, int n_prompt);

/* One decode step: the token at position pos; logits (host) of it. The
 * engine's hook joins the context's list for the step, after the hooks
 * already there. */
int ra_offload_step(struct ra_offload *o, int32_t token, int pos, float *logits);

const struct ra_offload_stats *ra_offload_stats(const struct ra_offload *o);
size_t ra_offload_working_set(const struct ra_offload *o); /* device bytes of the slots */
int ra_offload_slots(const struct ra_offload *o);
/* Modelled time of one message of BYTES on the host link (0 without --host-link-gbps). */
double ra_offload_link_time(const struct ra_offload_config *cfg, size_t bytes);
/* One line per run: mode, slots, working set, bytes, link, "emulated" when it is. */
void ra_offload_report(const struct ra_offload *o, FILE *f);

/* ---- for policies ---- */
struct ra_offload_view {
    struct ra_context *ctx;     /* the passes' context: its weights are the backend's copies */
    const struct ra_model *m;
    struct ra_backend *be;
    const struct ra_offload_config *cfg;
    int n_layers, kv_dim, dim, max_rows;
    enum ra_dtype kv_dtype; /* of the K, V rows in the pool and the slots (X is f32) */
    size_t row_bytes;       /* one K (or V) row: ra_kv_row_bytes(kv_dim, kv_dtype) */
    int n_prompt;   /* rows of the prompt in the pool */
    int x_start, x_end; /* rows whose layer input X is in the pool: [x_start, x_end) */
    void *policy_state;
};
struct ra_offload_view *ra_offload_view(struct ra_offload *o);
void *ra_offload_slot_k(struct ra_offload *o, int layer);   /* device, max_rows rows of kv_dtype (infinigen:
                                                               fewer) */
void *ra_offload_slot_v(struct ra_offload *o, int layer);
float *ra_offload_slot_x(struct ra_offload *o, int layer);  /* device, rows of dim; NULL unless kvpr */
void *ra_offload_pool_k(struct ra_offload *o, int layer);   /* pinned host, max_rows rows of kv_dtype */
void *ra_offload_pool_v(struct ra_offload *o, int layer);
float *ra_offload_pool_x(struct ra_offload *o, int layer);  /* pinned host, rows of dim; NULL unless kvpr
                                                              or infinigen (its calibration) */
/* One host->device message on the copy stream, counted as KV (is_x 0) or X bytes
 * and put on the emulated link; returns when queued. */
int ra_offload_send(struct ra_offload *o, void *dst, const void *src, size_t bytes, int is_x);
/* The device waits (host and emulated clock) for the X messages (x_only) or
 * all messages of the current layer's fetch. */
int ra_offload_wait_link(struct ra_offload *o, int x_only);
/* The counters, for a policy's own fields (KVPR's l, recompute time). */
struct ra_offload_stats *ra_offload_counters(struct ra_offload *o);
/* Charge measured device work done inside a hook (the recompute) to the clock. */
void ra_offload_charge(struct ra_offload *o, double seconds);

#endif
