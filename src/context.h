/* A run context: what one stream of forward passes over a model needs besides
 * the model's weights and configuration.
 *
 * The model (model.h) is read-only here: a context holds the backend the
 * passes run on, the backend's prepared copies of the weights (device copies
 * on a GPU, bf16 copies for bf16 compute on the CPU), the activations'
 * workspace, optional timing and an ordered list of hooks. Several contexts
 * over one model work side by side, on one backend or on different ones.
 *
 * HOOKS. A hook is a feature that joins the forward pass at its fixed points
 * (the chain's KV exchange, an offload policy, an observer in a test). Per
 * layer l of a pass over rows [start, start+n), the pass runs:
 *
 *   layer_begin   before the layer's attention RMSNorm (the chain posts its
 *                 receives here, the offload engine fetches the layer's rows)
 *   -- RMSNorm, Q, K, V projections, RoPE; K and V into the KV cache --
 *   kv_ready      the span's rows of K and V are in the cache; a->k, a->v are
 *                 the FRESH fp32 rows (before a bf16 cache rounded them); on
 *                 return rows [first, start) of the layer must be in the cache
 *                 too (the chain's receives complete here)
 *   attend        which rows attention reads: *k, *v, *rows of them, the
 *                 span's n rows last (offload: a device slot). They start as
 *                 the cache's rows [first, start+n) of the layer
 *   -- attention, output projection, feed-forward --
 *   layer_end     the layer's output is in a->x (the chain completes sends)
 *   narrow        (not after the last layer) which of the n rows the rest of
 *                 the pass computes: keep[0..*n_keep) holds row indices,
 *                 ascending, first all n; a hook may remove some. The pass
 *                 gathers the kept rows of the residual stream (get_rows) and
 *                 goes on over their positions, a position list (the last row
 *                 stays when the pass writes logits). CacheBlend's gradual
 *                 filtering.
 *
 * ENDING A PASS. A hook that returns RA_HOOK_STOP at layer_begin, kv_ready or
 * layer_end ends the pass there (the hooks after it at that point still
 * run): no later layer, no logits, and the pass returns RA_OK. CacheBlend's
 * first pass ends at its check layer's kv_ready.
 *
 * Every point runs the context's hooks in list order (the order they were
 * added); a hook may leave any point NULL. ATTEND COMPOSES AS A PIPELINE: each
 * attend hook receives the rows the hooks before it chose (or the cache's) in
 * *k, *v, *rows and may replace them; attention reads what the last one left.
 * A hook that returns a status other than RA_OK stops the pass with it. The
 * time of layer_begin, kv_ready and layer_end is charged to
 * stats->t_exchange; attend's is left out (the offload engine counts its own
 * device work). */
#ifndef RA_CONTEXT_H
#define RA_CONTEXT_H

#include "kvcache.h"
#include "model.h"
#include "rows.h"

struct ra_backend;
struct ra_workspace;

/* What a hook sees at each point of a pass. Activations are backend buffers
 * of n rows; a field is NULL where the pass has not made it yet. */
struct ra_hook_args {
    int layer;
    int start, n;           /* the pass's n rows, the first at position start */
    const struct ra_rows *rows; /* their positions (rows.h): [start, start+n), or a sorted list */
    struct ra_kvcache *kv;  /* the cache the pass reads and writes */
    const float *x;         /* [n][dim] residual stream: the layer's input, at layer_end its output */
    const float *xa;        /* [n][dim] attention input (after the RMSNorm); kv_ready, attend */
    const float *q;         /* [n][n_heads*head_dim] queries, RoPE applied; kv_ready, attend */
    const float *k, *v;     /* [n][kv_dim] the span's fresh fp32 K (RoPE applied) and V; kv_ready, attend */
};

struct ra_hook {
    void *self; /* the hook's state, passed back to each function */
    int (*layer_begin)(void *self, const struct ra_hook_args *a);
    int (*kv_ready)(void *self, const struct ra_hook_args *a);
    int (*attend)(void *self, const struct ra_hook_args *a, const float **k, const float **v, int *rows);
    int (*layer_end)(void *self, const struct ra_hook_args *a);
    int (*narrow)(void *self, const struct ra_hook_args *a, int32_t *keep, int *n_keep);
};

/* A hook's status that ends the pass without an error (ENDING A PASS above). */
#define RA_HOOK_STOP 1

/* Optional accounting of where a context's passes spend their time. */
struct ra_forward_stats {
    double t_linear, t_attention, t_other, t_exchange; /* seconds; t_exchange: the hooks but attend */
    double flop_linear, flop_attention;
    int64_t tokens;
};

#define RA_CONTEXT_MAX_HOOKS 8

struct ra_context {
    const struct ra_model *model;
    struct ra_backend *backend;
    struct ra_weights weights;      /* the model's tensors; .device: this context's backend copies */
    struct ra_workspace *ws;        /* activations, grown on demand */
    struct ra_forward_stats *stats; /* optional (the caller's): per-op timing, NULL: none */
    const struct ra_hook *hooks[RA_CONTEXT_MAX_HOOKS];
    int n_hooks;
    void **widened;                 /* f32 copies of block-quantized weights the backend has no kernels for */
    int n_widened;
};

/* A context for passes of MODEL on BE: lets the backend prepare its copies of
 * the weights (be->compute decides bf16 copies on the CPU). A block-quantized
 * weight the backend computes no matmul (or, the table, no embedding) on gets
 * an f32 copy here, the values ra_quant_dequantize gives, so that every
 * backend runs every file. The model and the backend must outlive it. */
int ra_context_init(struct ra_context *ctx, const struct ra_model *model, struct ra_backend *be);
/* Releases what the context holds on its backend; a zeroed context may be freed. */
void ra_context_free(struct ra_context *ctx);

/* Appends HOOK (the caller's; it must outlive its membership) to the list:
 * RA_EINVAL when it is already there, RA_ERANGE when the list is full. */
int ra_context_hook_add(struct ra_context *ctx, const struct ra_hook *hook);
/* Removes HOOK from the list if it is there; the others keep their order. */
void ra_context_hook_remove(struct ra_context *ctx, const struct ra_hook *hook);

/* Internal to the forward pass (forward.c). */
void ra_workspace_free(struct ra_backend *be, struct ra_workspace *ws);

#endif
