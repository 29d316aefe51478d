/* The cost model: predicted TTFT of a partition for KV-Runahead and TSP.
 *
 * Per layer, rank r with slice [b_r, b_{r+1}) of n_r tokens spends
 *   t_qkv  = QKV-projection FLOPs / gemm_flops + its share of "other"
 *   t_rest = attention FLOPs / attn_flops + (o-projection + FFN FLOPs) / gemm_flops
 *            + the rest of "other"
 * FLOPs come from ra_forward_flops() (linear layers and the causal attention of
 * queries [b_r, b_{r+1}) against keys [0, b_{r+1})). The linear FLOPs are split
 * between QKV and the rest in proportion to their weights, d·(d + 2·kv_dim)
 * against d·(d + 3·hidden): a GEMM's FLOPs per token are twice its weights.
 * "other" (rmsnorm, RoPE, SwiGLU, residual adds; memory-bound) is split in
 * proportion to the elements those ops touch before the KV hook (rmsnorm, RoPE
 * of q and k: 2·d + kv_dim per token) and after it (add, rmsnorm, SwiGLU, add:
 * 3·d + hidden). The final norm and the classifier for the one token that needs
 * logits add 2·d·vocab FLOPs at gemm_flops on the last rank. The embedding
 * lookup is left out (a copy of n·d floats).
 *
 * KVR (the chain route of mpi/chain.c) is replayed rank by rank, layer by layer:
 *   start(r,l)    = end(r,l-1)                  the receive is posted here
 *   ready(r,l)    = start(r,l) + t_qkv(r)
 *   arrive(r,l)   = max(send(r-1,l), start(r,l), link_free(r,l-1))
 *                   + p2p_latency + 2·b_r·kv_dim·4 bytes / p2p_bandwidth
 *                   (K and V of rows [0, b_r); the transfer needs both sides'
 *                   calls posted and the link to be free of the previous layer)
 *   wait_end(r,l) = max(ready, arrive)          (rank 0: ready)
 *   send(r,l)     = wait_end(r,l)               rows [0, b_{r+1}) go on to r+1
 *   end(r,l)      = wait_end(r,l) + t_rest(r)
 * TTFT = the last rank's end + the classifier. Sends are assumed to progress
 * while both ranks compute (no CPU time charged to them).
 *
 * TSP (mpi/tsp.c) uses the bounds given (the runtime uses even ones): per layer
 * every rank does its QKV, the all-gather completes when the last rank reaches
 * it plus 2·(allgather_latency + (C - min n_r)·kv_dim·4 / allgather_bandwidth)
 * (two calls, K and V; each rank receives every other rank's rows), then each
 * rank does its attention and the rest. TTFT = the latest finish, the last
 * rank's including the classifier. Without measured all-gather figures
 * (bandwidth 0) a ring is assumed: bandwidth = p2p_bandwidth and latency =
 * (p-1)·p2p_latency.
 *
 * One rank (p = 1) is the single-process forward pass for both methods. */
#ifndef RA_COSTMODEL_H
#define RA_COSTMODEL_H

#include "model.h"

struct ra_cost_profile {
    double gemm_flops;              /* achieved linear-layer FLOP/s per rank (with its threads) */
    double attn_flops;              /* achieved causal-attention FLOP/s per rank (lower triangle) */
    double other_s_per_token_layer; /* rmsnorm/rope/swiglu/residual seconds per token per layer */
    double p2p_bandwidth;           /* bytes/s between neighbouring ranks; 0 = not measured (p = 1 only) */
    double p2p_latency;             /* seconds per message */
    double allgather_bandwidth;     /* bytes received per rank per second in MPI_Allgatherv; 0 = from p2p */
    double allgather_latency;       /* seconds per MPI_Allgatherv call (at the rank count measured) */
    /* Reuse runs (ra_cost_reuse_replay); 0: not measured. */
    double row_list_factor;         /* a pass over a position list: its time / the model's for those rows
                                     * (0 or missing: 1) */
    double install_s_per_row_layer; /* installing a loaded row: RoPE shift of K, copy into the cache */
    double load_bandwidth;          /* bytes/s one loader reads and verifies stored rows (page cache) */
};

enum ra_cost_method { RA_COST_KVR, RA_COST_TSP };

/* One rank's layer, in seconds from the start of the prompt (like
 * struct ra_layer_times of mpi/exchange.h, for comparison with traces). */
struct ra_cost_layer {
    double start, wait_end, end;
};

/* Predicted TTFT for the model shape, partition bounds[p+1] (0 = b_0 < ... <
 * b_p = C) and method; optionally each rank's finish time (rank_finish[p]). */
int ra_cost_predict(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                    const int *bounds, int p, double *ttft, double *rank_finish /* [p] or NULL */);

/* The same, also filling layers[r * n_layers + l] (NULL to skip). */
int ra_cost_replay(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                   const int *bounds, int p, double *ttft, double *rank_finish, struct ra_cost_layer *layers);

/* The cost model as a search objective (ra_objective_fn of search.h): pass
 * ra_cost_objective_eval with a struct ra_cost_objective as its ctx. */
struct ra_cost_objective {
    const struct ra_config *config;
    const struct ra_cost_profile *profile;
    enum ra_cost_method method;
};
int ra_cost_objective_eval(void *ctx, const int *bounds, int p, double *value);

/* Checks that every field is usable: compute rates > 0, bandwidths > 0 or 0
 * (not measured; predictions for p > 1 then fail), +inf = free, times finite >= 0. */
int ra_cost_profile_check(const struct ra_cost_profile *pf);

/* The profile as named doubles, for the HDF5 table's attributes. */
#define RA_COST_PROFILE_N 10
/* The field names in packing order, NULL-terminated. */
const char *const *ra_cost_profile_names(void);
/* values[RA_COST_PROFILE_N] in the order of ra_cost_profile_names(). */
void ra_cost_profile_pack(const struct ra_cost_profile *pf, double *values);
/* Sets pf from n (name, value) pairs in any order: unknown names are ignored
 * (newer writers), missing fields are 0, and the result is checked (so
 * gemm_flops and attn_flops are required). */
int ra_cost_profile_unpack(struct ra_cost_profile *pf, const char *const *names, const double *values, int n);

/* ------------------------------------------------------------ reuse runs
 *
 * A prefill from the chunk store along the chain (mpi/reuse_chain.h), per
 * rank r with slice [b_r, b_{r+1}) holding l_r loaded rows (K and V from the
 * store) and m_r = n_r - l_r must rows (no chunk holds them):
 *
 *   pass A   (blend only) every row of the slice through layers 0..check-1
 *            and the check layer's QKV (the pass stops at its KV hook), a
 *            plain pass (the chain's or TSP's replay above); the deviations
 *            need the check layer's loads and re-position the slice's stored
 *            K rows (an install's work).
 *   select   global gathers every rank's deviations (an all-gather of 5
 *            bytes a row) and agrees on its status: pass B starts on every
 *            rank after the last rank's pass A and these; local selects
 *            without synchronisation: pass B starts after the rank's own
 *            pass A.
 *   pass B   s_r = m_r + round(ratio * l_r) rows through every layer
 *            (full and prefix: ratio 0; craft: its mean ratio, no pass A),
 *            attending over the whole prefix: the must rows at their
 *            positions, the selected loaded rows counted as ratio of the
 *            loaded rows' keys (the top deviations are spread over the
 *            slice). A pass over a position list (0 < s_r < n_r) costs
 *            row_list_factor times the span's model; every layer begins by
 *            installing its loaded rows (install_s_per_row_layer each) once
 *            the loader has read them. What travels per layer:
 *              full   as a plain pass (chain: K and V of [0, b_r) into rank
 *                     r; TSP: every slice to all);
 *              delta  only the rows recomputed before the slice (chain:
 *                     sum of s_q over q < r) or anywhere (TSP); their
 *                     positions (4 bytes each) travel once, before layer 0.
 *   loads    a loader per rank reads its loaded rows layer by layer from
 *            time 0: full sends, the slice's; delta, every loaded row before
 *            b_{r+1} (the receiver rebuilds the rows that did not travel). A
 *            layer takes the longer of its bytes at the profile's
 *            load_bandwidth (reads and checksums: the loader's own CPU time)
 *            and at the run's store bandwidth (0: none). With shared_core
 *            (no core spare for the loader thread) its CPU time also adds to
 *            each pass-B layer of the rank.
 *
 * TTFT is the last rank's finish (KVR) or the latest (TSP), with the
 * classifier. Without loaded rows it is ra_cost_replay's figure exactly
 * (nothing is reused: a plain pass). */
struct ra_cost_span {
    int start, n;
};

struct ra_cost_reuse {
    const struct ra_cost_span *loaded; /* the request's loaded rows: sorted, disjoint, inside [0, bounds[p]) */
    int n_loaded;
    int pass_a;            /* 1: blend (pass A, then the selection); 0: none (full, prefix, craft) */
    double ratio;          /* the recomputed fraction of each rank's loaded rows, [0, 1]: blend's and
                            * craft's ratio, 0 for full and prefix */
    int check;             /* blend: the last check layer */
    int global;            /* blend: the global selection (an all-gather between the passes) */
    int delta;             /* only recomputed rows travel in pass B */
    double kv_elem_bytes;  /* bytes of one K or V element: 4 (f32), 2 (bf16); 0: 4 */
    double load_bandwidth; /* bytes/s of the store (an emulated --store-gbps); 0: as fast as it reads */
    int shared_core;       /* the loader thread has no core of its own: its CPU time slows the pass */
};

/* Each rank's rows in pass B (s_r above), for reports and tests: rows[p]. */
int ra_cost_reuse_rows(const struct ra_cost_reuse *ru, const int *bounds, int p, int *rows);

/* Predicted TTFT of a reuse run (as ra_cost_replay; layers, when given, get
 * pass B's layers). */
int ra_cost_reuse_replay(const struct ra_config *c, const struct ra_cost_profile *pf, enum ra_cost_method m,
                         const struct ra_cost_reuse *ru, const int *bounds, int p, double *ttft, double *rank_finish,
                         struct ra_cost_layer *layers);

/* As a search objective: pass a struct ra_cost_reuse_objective. */
struct ra_cost_reuse_objective {
    const struct ra_config *config;
    const struct ra_cost_profile *profile;
    enum ra_cost_method method;
    const struct ra_cost_reuse *reuse;
};
int ra_cost_reuse_objective_eval(void *ctx, const int *bounds, int p, double *value);

#endif
