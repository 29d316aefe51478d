/* The forward pass over a span of tokens.
 *
 * Everything is a forward pass over tokens [start, start+n) that appends to a
 * KV cache which already holds, or will receive, rows [0, start). A
 * single-process prompt is one span from 0; decode is a span of length 1; a
 * rank of the KV-Runahead chain runs its slice as one span and receives the
 * rows before it through a struct ra_kv_exchange. */
#ifndef RA_FORWARD_H
#define RA_FORWARD_H

#include <stdint.h>

#include "kvcache.h"
#include "model.h"
#include "rows.h"

/* A layer's activations (backend buffers, n rows each) for the hooks that need them. */
struct ra_layer_acts {
    const float *x;  /* [n][dim] residual stream entering the layer */
    const float *xa; /* [n][dim] attention input (after the attention RMSNorm) */
    const float *q;  /* [n][dim] queries, RoPE applied */
};

/* Per-layer hooks that say how rows [0, start) arrive and where new rows go.
 * Any hook may be NULL; a NULL exchange means the cache already holds them.
 * A hook returns RA_OK or a negative status, which aborts the pass. */
struct ra_kv_exchange {
    void *ctx;
    /* Before the layer's QKV projection (post receives here to overlap it). */
    int (*layer_begin)(void *ctx, int layer, struct ra_kvcache *kv, int start, int n);
    /* Rows [start, start+n) of K and V of this layer are in the cache, RoPE
     * applied. On return rows [0, start) must be there too: attention follows. */
    int (*kv_ready)(void *ctx, int layer, struct ra_kvcache *kv, int start, int n);
    /* Optional (decode from an offloaded cache, src/offload): the rows
     * attention reads, *rows of them at *k, *v (the span's n rows last, RoPE
     * applied), after kv_ready. NULL: kv's rows [0, start+n) of the layer. */
    int (*attend)(void *ctx, int layer, struct ra_kvcache *kv, int start, int n, const struct ra_layer_acts *a,
                  const float **k, const float **v, int *rows);
    /* After the layer's output (e.g. to test or complete sends). */
    int (*layer_end)(void *ctx, int layer, struct ra_kvcache *kv, int start, int n);
};

/* Optional accounting of where a forward pass spends its time. */
struct ra_forward_stats {
    double t_linear, t_attention, t_other, t_exchange; /* seconds */
    double flop_linear, flop_attention;
    int64_t tokens;
};

/* Optional observer of the forward pass (m->tap): KVPR keeps the layer inputs. */
struct ra_forward_tap {
    void *ctx;
    /* xa: n rows of the layer's attention input (backend buffer) at positions [start, start+n). */
    int (*attn_input)(void *ctx, int layer, int start, int n, const float *xa);
};

/* Binds a backend to a loaded model (uploads weights if the backend needs to;
 * the CPU backend makes bf16 copies of f32/f16 weights for bf16 compute, see
 * enum ra_compute). Detach, or free the model, before freeing that backend. */
int ra_model_attach(struct ra_model *m, struct ra_backend *be);
/* Releases what the forward pass allocated on the backend (ra_model_free calls it). */
void ra_model_detach(struct ra_model *m);

int ra_forward_span(struct ra_model *m, const int32_t *tokens, int start, int n,
                    struct ra_kvcache *kv, const struct ra_kv_exchange *xchg,
                    float *logits_last /* host [vocab]; NULL unless this span ends the prompt */);

/* The forward pass over token rows at positions `rows` (rows.h): a span
 * (rows->pos NULL) is ra_forward_span's; a position list (sorted, with gaps)
 * writes its K and V rows at those positions and attends, each row, to the
 * cache's rows at or before its position, which must be there already (from
 * an earlier pass): e.g. some rows recomputed at their original positions
 * over a full cache. logits_last: the last row's, or NULL. */
int ra_forward_rows(struct ra_model *m, const int32_t *tokens, const struct ra_rows *rows, struct ra_kvcache *kv,
                    float *logits_last);

/* RA_OK if logits[vocab] (the last logits of span [start, start+n) of TOKENS)
 * are all finite. Otherwise RA_ERANGE naming the first layer and position
 * where a non-finite value appears: found by re-running the span with every
 * stage checked (rows [0, start) must be in the cache, as after any pass), so
 * the forward pass itself never pays for the search. TOKENS NULL: no search. */
int ra_forward_check_logits(struct ra_model *m, const int32_t *tokens, int start, int n, struct ra_kvcache *kv,
                            const float *logits);

/* Useful FLOPs of one span (linear layers + causal attention, no lm-head). */
void ra_forward_flops(const struct ra_config *c, int start, int n, double *linear, double *attention);

#endif
