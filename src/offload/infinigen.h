/* InfiniGen (Lee et al., OSDI'24): decode with the KV cache in a host pool, fetching per layer only
 * the tokens a cheap rehearsal of that layer's attention, run one layer
 * ahead, finds important.
 *
 *  - Skewing: per layer and KV head an orthogonal d×d matrix A (the right
 *    singular vectors of the post-RoPE queries of a calibration prompt; for
 *    GQA the group's queries stacked) concentrates the energy of q̃ = q·A and
 *    k̃ = k·A in a few columns. For Llama it is applied after RoPE at run
 *    time (RoPE does not commute with A): q̃k̃ᵀ = q A Aᵀ kᵀ = q kᵀ.
 *  - Partial columns: per layer and KV head the d' = ratio·d columns with the
 *    largest sums of |Q̃|+|K̃| over the calibration prompt; the partial key
 *    cache Kp holds those columns of every pooled key (the device copy).
 *  - Speculation: for layer l >= dense_layers (2: as the paper's code, whose
 *    accuracy and FlexGen paths both speculate from layer 2 on; layers 0 and
 *    1 fetch every token), q = RoPE(x_a(l−1)·W_Q^l) at the current
 *    position (RoPE needs the full query row, so the full W_Q^l GEMV; only
 *    Kp saves memory), scores ŝ = q̃[idx]·Kp[idx]/√d; per query head the
 *    count of tokens with ŝ > max − α, n_sel = mean over heads (truncated),
 *    at most cap·n tokens; per KV head the top n_sel by the group's largest
 *    ŝ − max ŝ (GQA: the digest's "max over the group", each head relative
 *    to its own maximum).
 *
 * Buffers here are host memory: on the CPU backend the device is emulated
 * and Kp is a host array; the offload framework moves and accounts bytes. */
#ifndef RA_INFINIGEN_H
#define RA_INFINIGEN_H

#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "kvpool.h"

struct ra_context;

struct ra_infinigen_params {
    float ratio; /* partial columns per head, a fraction of head_dim (0.3) */
    float alpha; /* keep tokens within alpha of the max score; INFINITY keeps all (5: Llama 2, 4: OPT) */
    float cap;   /* at most this fraction of a layer's tokens (0.2); >= 1: no cap */
    int skew;    /* 1: SVD skewing (default); 0: A = identity */
    int oracle;  /* 1: layer l speculates from its own query instead of layer l−1's input (a check
                    of the selection rule, not a usable mode: it needs the whole layer before the fetch) */
    int dense_layers; /* layers [0, dense_layers) fetch every token (2, as InfiniGen's code; below 1
                         means 1: layer 0 has no previous layer to rehearse it; clipped to n_layers) */
};

void ra_infinigen_params_default(struct ra_infinigen_params *p);
/* P's dense layers for a model of N_LAYERS, in [1, n_layers] (what ra_infinigen_init keeps in ig->p). */
int ra_infinigen_dense_layers(const struct ra_infinigen_params *p, int n_layers);

struct ra_infinigen {
    struct ra_config c;
    struct ra_infinigen_params p;
    int n_part;        /* d' = max(1, (int)(ratio·head_dim)) */
    int capacity;      /* Kp rows per layer: the pool's slots */
    float *A;          /* [n_layers][n_kv_heads][head_dim][head_dim]: x̃[j] = Σ_i x[i]·A[i][j] */
    int32_t *idx;      /* [n_layers][n_kv_heads][n_part], ascending */
    float *kp;         /* [n_layers][capacity][n_kv_heads][n_part]: skewed partial keys by pool slot */
    int32_t *kp_token; /* [n_layers][capacity]: the token of each Kp row, -1 if none */
    struct ra_backend *kp_backend; /* non-NULL: kp is its device memory (alloc_mem RA_MEM_DEVICE) */
};

/* d' for RATIO of HEAD_DIM columns: int(ratio·d) as the paper's code, in [1, d]. */
int ra_infinigen_n_part(float ratio, int head_dim);

/* A = identity and idx = the first n_part columns until calibrated. Kp in host memory. */
int ra_infinigen_init(struct ra_infinigen *ig, const struct ra_config *c, const struct ra_infinigen_params *p,
                      int capacity);
/* The same with Kp in BE's device memory (the offload engine: Kp counts in
 * --device-kv-mem). The speculation reads Kp on the host, so BE must be a
 * host-memory backend (the CPU backend's emulated device) for now. */
int ra_infinigen_init_on(struct ra_infinigen *ig, const struct ra_config *c, const struct ra_infinigen_params *p,
                         int capacity, struct ra_backend *be);
void ra_infinigen_free(struct ra_infinigen *ig);

static inline float *ra_infinigen_A(const struct ra_infinigen *ig, int layer, int kv_head)
{
    const int d = ig->c.head_dim;
    return ig->A + ((size_t)layer * ig->c.n_kv_heads + kv_head) * d * d;
}
static inline int32_t *ra_infinigen_idx(const struct ra_infinigen *ig, int layer, int kv_head)
{
    return ig->idx + ((size_t)layer * ig->c.n_kv_heads + kv_head) * ig->n_part;
}
static inline float *ra_infinigen_kp(const struct ra_infinigen *ig, int layer, int slot)
{
    return ig->kp + ((size_t)layer * ig->capacity + slot) * ig->c.n_kv_heads * ig->n_part;
}

/* Skewing and partial index of one layer from its post-RoPE queries q
 * [n][n_heads·head_dim] and keys k [n][kv_dim] (LAPACKE sgesvd per KV head,
 * then the column sums of |Q̃|+|K̃|). With skew off only the index. */
int ra_infinigen_skew_layer(struct ra_infinigen *ig, int layer, const float *q, const float *k, int n);

/* Calibrates every layer from a forward pass of CTX (on a host-memory
 * backend, e.g. the CPU backend) over tokens [0, n). */
int ra_infinigen_calibrate(struct ra_infinigen *ig, struct ra_context *ctx, const int32_t *tokens, int n);

/* x̃ = x·A in place for rows x [n] (stride ld) of `heads` heads: n_heads
 * (queries: head h uses its KV head's A) or n_kv_heads (keys). */
void ra_infinigen_skew(const struct ra_infinigen *ig, int layer, float *x, int n, int ld, int heads);

/* Stores the skewed partial columns of TOKEN's post-RoPE key k_rot [kv_dim]
 * in Kp row SLOT (the pool slot that holds its K and V). */
int ra_infinigen_kp_store(struct ra_infinigen *ig, int layer, int slot, int token, const float *k_rot);

/* Speculates the tokens layer LAYER will need: q_rot [n_heads·head_dim] is
 * the post-RoPE (unskewed) query, scored against Kp rows [0, n_slots).
 * Writes sel [n_kv_heads][*n_sel] (pool slots, ascending per KV head; room
 * for n_kv_heads·n_slots) and *n_sel, the same for every KV head. */
int ra_infinigen_speculate(const struct ra_infinigen *ig, int layer, const float *q_rot, int n_slots,
                           int32_t *sel, int *n_sel);

/* Bytes of the partial key cache (the device's share: about ratio × the K cache). */
size_t ra_infinigen_kp_bytes(const struct ra_infinigen *ig);

/* Kp and the pool hold the same token at every slot (RA_OK), else RA_ERANGE. */
int ra_infinigen_check_pool(const struct ra_infinigen *ig, const struct ra_kvpool *pool);

/* ---- decode with the pool, for tests and bench-decode (a context on a host-memory backend):
 * each call is one forward pass of the context with a hook of InfiniGen's added for it */

/* Per decode step (filled by ra_infinigen_decode when not NULL). */
struct ra_infinigen_step_stats {
    int64_t rows_fetched;  /* KV-head rows gathered from the pool, all layers */
    int64_t rows_dense;    /* what fetching every pooled token would gather */
    double recall;         /* attention mass (dense softmax over pool + current token) on the attended
                              tokens, mean over the speculated layers (>= dense_layers) and query heads */
    double recall_min;     /* the smallest per-(layer, head) recall of the step */
    double q_cos;          /* cosine of the speculative query (layer l−1's input through W_Q^l) and layer
                              l's real query, mean over the speculated layers: how well the rehearsal works */
    int *tokens_layer;     /* NULL, or [n_layers] (caller's): pooled tokens each layer attended */
};

/* The prompt tokens [0, n), dense: fills the pool and Kp with every layer's
 * K and V; logits [vocab] of the last token when not NULL. */
int ra_infinigen_prefill(struct ra_infinigen *ig, struct ra_kvpool *pool, struct ra_context *ctx,
                         const int32_t *tokens, int n, float *logits);

/* One token at position pos (= the pool's tokens seen so far): the dense
 * layers attend every pooled token, a later layer l the tokens speculated at
 * layer l−1, each plus the current token; then its K and V join the pool. */
int ra_infinigen_decode(struct ra_infinigen *ig, struct ra_kvpool *pool, struct ra_context *ctx, int32_t token, int pos,
                        float *logits, struct ra_infinigen_step_stats *stats);

/* ---- quality metrics */

/* Dense softmax mass, for one query row q [n_heads·head_dim] over keys
 * k [n][kv_dim] (the last row the current token), that the selection sel
 * [n_kv_heads][n_sel] (row indices below n−1) plus the current token keeps;
 * per query head into recall[n_heads] when not NULL; returns the mean. */
double ra_infinigen_recall(const struct ra_config *c, const float *q, const float *k, int n, const int32_t *sel,
                           int n_sel, double *recall);

/* KL(softmax(p) ‖ softmax(q)) of two logit vectors [n], in nats. */
double ra_infinigen_kl(const float *logits_p, const float *logits_q, int n);

/* Quality of InfiniGen's decode against dense decode (--offload none) over
 * STEPS steps after PROMPT [n_prompt], TEACHER-FORCED: both decode the dense
 * run's greedy tokens, so every step compares the two next-token
 * distributions from the same context. Calibrates on the prompt (post-RoPE Q
 * and K of a dense pass), prefills a pool of POOL_MEM bytes (0: unlimited),
 * then runs ra_infinigen_decode beside ra_forward_span. CTX: on a
 * host-memory backend. */
struct ra_infinigen_quality {
    int steps;
    double agreement;       /* fraction of steps whose greedy tokens agree */
    double kl_mean, kl_max; /* KL(dense ‖ infinigen) of the next-token distributions, nats */
    double recall_mean;     /* attention mass on the attended tokens (speculated layers), mean over steps */
    double recall_min;      /* the smallest per-(layer, head) recall of any step */
    double q_cos;           /* speculative vs real query cosine, mean */
    double rows_per_layer;  /* pooled tokens fetched per layer and output token (all layers) */
    double bytes_per_layer; /* K and V bytes fetched per layer and output token */
    double bytes_dense_per_layer; /* the same for fetching every pooled token */
    int64_t evictions;      /* pool evictions over the run */
};
int ra_infinigen_quality(struct ra_context *ctx, const struct ra_infinigen_params *p, size_t pool_mem,
                         const int32_t *prompt, int n_prompt, int steps, struct ra_infinigen_quality *out);

/* ---- the policy of the offload framework (--offload infinigen), infinigen_policy.c */

struct ra_offload;
struct ra_offload_config;
struct ra_offload_policy;
extern const struct ra_offload_policy ra_infinigen_policy;
/* The parameters a config asks for (its zeros: the defaults). */
int ra_infinigen_params_of(const struct ra_offload_config *cfg, struct ra_infinigen_params *p);
/* Device sizing for MAX_ROWS rows: the dense layers' count (*full_layers,
 * layers [0, n) with a full slot each), a full slot's rows (the pool's
 * capacity + 1), a rotating slot's rows (the cap's rows + 1) and the partial
 * key cache's bytes. */
int ra_infinigen_offload_sizes(const struct ra_config *c, const struct ra_offload_config *cfg, int max_rows,
                               int *full_layers, size_t *full_rows, size_t *slot_rows, size_t *kp_bytes);
/* The policy's pool and state (after ra_offload_begin; NULL before). */
const struct ra_kvpool *ra_infinigen_offload_pool(struct ra_offload *o);
const struct ra_infinigen *ra_infinigen_offload_state(struct ra_offload *o);
/* Pooled rows (per KV head) fetched for LAYER in the last step. */
int ra_infinigen_offload_rows(struct ra_offload *o, int layer);
void ra_infinigen_offload_report(struct ra_offload *o, FILE *f);

#endif
