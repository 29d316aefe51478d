/* The forward pass over a span of tokens.
 *
 * Everything is a forward pass over tokens [start, start+n) that appends to a
 * KV cache which already holds, or will receive, rows [0, start). A
 * single-process prompt is one span from 0; decode is a span of length 1; a
 * rank of the KV-Runahead chain runs its slice as one span and receives the
 * rows before it through a hook of its context (context.h). */
#ifndef RA_FORWARD_H
#define RA_FORWARD_H

#include <stdint.h>

#include "context.h"
#include "kvcache.h"
#include "model.h"
#include "rows.h"

/* One pass over tokens [start, start+n) on CTX's backend, running its hooks
 * (context.h); logits_last: host [vocab], the span's last logits, or NULL
 * unless this span ends the prompt. */
int ra_forward_span(struct ra_context *ctx, const int32_t *tokens, int start, int n, struct ra_kvcache *kv,
                    float *logits_last);

/* The forward pass over token rows at positions `rows` (rows.h): a span
 * (rows->pos NULL) is ra_forward_span's; a position list (sorted, with gaps)
 * writes its K and V rows at those positions and attends, each row, to the
 * cache's rows at or before its position, which must be there already (from
 * an earlier pass): e.g. some rows recomputed at their original positions
 * over a full cache. The context's hooks run as for a span, their args
 * carrying the rows. logits_last: the last row's, or NULL. A list of no
 * rows (n 0, logits_last NULL) computes nothing and runs every layer's hook
 * points with n = 0, start = rows->start. */
int ra_forward_rows(struct ra_context *ctx, const int32_t *tokens, const struct ra_rows *rows, struct ra_kvcache *kv,
                    float *logits_last);

/* RA_OK if logits[vocab] (the last logits of span [start, start+n) of TOKENS)
 * are all finite. Otherwise RA_ERANGE naming the first layer and position
 * where a non-finite value appears: found by re-running the span with every
 * stage checked (rows [0, start) must be in the cache, as after any pass), so
 * the forward pass itself never pays for the search. TOKENS NULL: no search. */
int ra_forward_check_logits(struct ra_context *ctx, const int32_t *tokens, int start, int n, struct ra_kvcache *kv,
                            const float *logits);

/* Useful FLOPs of one span (linear layers + causal attention, no lm-head). */
void ra_forward_flops(const struct ra_config *c, int start, int n, double *linear, double *attention);

#endif
