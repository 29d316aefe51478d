/* One distributed prompt pass, and what it measured. */
#ifndef RA_PREFILL_H
#define RA_PREFILL_H

#include "exchange.h"

/* Every rank: barrier, then the rank's slice [b_r, b_{r+1}) as one span of
 * CTX with the exchange's hook added to its list (after the hooks already
 * there) for the pass, then all sends completed. The last rank gets the
 * prompt's last logits (host, vocab floats) and its TTFT: from the barrier to
 * the logits of the first token. */
int ra_prefill_run(struct ra_context *ctx, struct ra_exchange *x, struct ra_kvcache *kv,
                   const int32_t *tokens, float *logits, double *ttft);

/* ra_prefill_run's steps, for passes of another shape (reuse_chain.c):
 * ra_prefill_start attaches the transport where none is (collective), checks
 * it fits KV and waits at the start barrier; ra_prefill_pass begins the
 * exchange (its t0), runs BODY(ARG) with the exchange's hook added to CTX's
 * list, then completes every send. */
int ra_prefill_start(struct ra_exchange *x, const struct ra_kvcache *kv);
int ra_prefill_pass(struct ra_context *ctx, struct ra_exchange *x, int (*body)(void *arg), void *arg);

/* Runs `repeats` passes of one method and partition (a fresh exchange each
 * time it is called) and gives every rank the last rank's median TTFT. The
 * KV cache must hold ra_prefill_kv_rows() rows. Collective. */
int ra_prefill_median(struct ra_context *ctx, MPI_Comm comm, enum ra_method method, enum ra_route route,
                      const int *bounds, struct ra_kvcache *kv, const int32_t *tokens, int repeats,
                      double *median_ttft);

/* What --repeat N measured: every pass's TTFT (the last rank's, known to every
 * rank), which pass is the median one, and this rank's spread over the passes. */
struct ra_passes {
    int n;               /* passes */
    int median;          /* the pass whose TTFT is the median (for even n the lower middle) */
    double *ttft;        /* [n], filled by ra_prefill_repeat */
    double spread[3][3]; /* this rank's total, wait and drain seconds: median, min, max over the passes */
};

/* Runs n passes with the same exchange (n >= 1; ps->ttft holds n doubles).
 * Afterwards x->stats holds the median pass's figures (per-layer times
 * included), so reports and traces show that pass, not the last one.
 * Collective; a pass that fails returns its status at once. */
int ra_prefill_repeat(struct ra_context *ctx, struct ra_exchange *x, struct ra_kvcache *kv, const int32_t *tokens,
                      float *logits, int n, struct ra_passes *ps);

/* The same, giving every rank the median, min and max of the passes' TTFTs. */
int ra_prefill_spread(struct ra_context *ctx, MPI_Comm comm, enum ra_method method, enum ra_route route,
                      const int *bounds, struct ra_kvcache *kv, const int32_t *tokens, int repeats,
                      double spread[3]);

/* Rows of KV cache a rank needs: KVR rank r only ever holds [0, b_{r+1}). */
int ra_prefill_kv_rows(const struct ra_exchange *x);

/* All ranks' stats of the pass x->stats holds (the last one, or the median
 * one after ra_prefill_repeat), gathered to the last rank. */
struct ra_all_stats {
    int size, n_layers;
    double *t_total, *t_wait;          /* [size] */
    double *bytes_sent, *bytes_recv;   /* [size] */
    double *msgs_sent, *msgs_recv;     /* [size] */
    double *t_drain;                   /* [size] */
    struct ra_layer_times *layers;     /* [size][n_layers] */
    double *spread;                    /* [size][3][3] as ra_passes.spread, or NULL */
};

/* Gathers them into ALL, with every rank's spread over the passes where ps is not NULL. */
int ra_stats_gather_passes(struct ra_exchange *x, const struct ra_passes *ps, struct ra_all_stats *all);
void ra_stats_free(struct ra_all_stats *all);

#endif
