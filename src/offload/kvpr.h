/* KVPR (Jiang et al., 2025, "KVPR: Efficient LLM Inference with I/O-Aware KV
 * Cache Partial Recomputation"): per decode step and
 * layer, the layer inputs X of rows [x0, x0+l) cross the host link instead of
 * their K and V, which the device recomputes (K = RoPE(X·W_K), V = X·W_V)
 * while the K, V of the other rows transfer. Exact.
 *
 * Rows with X in the pool are the prefill span's own, [x0, x1): the whole
 * prompt on one process (x0 = 0, the paper's case), the last rank's slice
 * after a chain. The split is bounded by them (the paper's l <= s): generated
 * rows always transfer as KV.
 *
 * Bit-exactness on the CPU backend: OpenBLAS picks its kernel (and the
 * threads their split) by the GEMM's row count, so a row's bits depend on M
 * (tests/test_forward_spans.c). The CPU backend therefore recomputes on the
 * prefill span's row count (rows [l, span) of the X buffer are stale and their
 * output discarded): bytes are KVPR's, the recompute time is that of the span
 * (profile.fixed_s). A GPU backend recomputes the l rows (tolerance there). */
#ifndef RA_KVPR_H
#define RA_KVPR_H

#include <stdint.h>

#include "offload.h"

struct ra_kvpr_profile {
    double v_com;   /* host link, bytes/s (asymptotic); INFINITY: free link */
    double lat_s;   /* host link, seconds per message */
    double v_gpu;   /* recompute GEMM, FLOP/s */
    double gemm_s0; /* recompute GEMM, fixed seconds per call */
    double fixed_s; /* > 0: every recompute takes this long whatever l (the CPU backend, above) */
};

/* Per-layer sizes of one step. */
struct ra_kvpr_shape {
    int dim, kv_dim;
    int elem;        /* bytes per element of X (4: f32), and of K, V unless kv_elem */
    int s;           /* rows before the new token (s') */
    int x0, x_rows;  /* rows with X in the pool: [x0, x0 + x_rows) */
    int kv_elem;     /* bytes per K or V element (2: a bf16 cache); 0: elem */
};

/* Profiles the link (model on the emulated link; copies timed on a device
 * backend) and the recompute GEMM of layer 0 on the backend (into the slots:
 * an f32 engine). Config overrides win. */
int ra_kvpr_profile(struct ra_offload *o, struct ra_kvpr_profile *p);

/* Rows of X sent for split l (l). */
int ra_kvpr_x_rows(const struct ra_kvpr_shape *sh, int l);
/* Bytes per layer the split sends: X, and K+V. */
void ra_kvpr_bytes(const struct ra_kvpr_shape *sh, int l, int64_t *x_bytes, int64_t *kv_bytes);
/* Modelled per-layer load time (digest eq. 10 with per-message latency):
 * X first, then max(recompute, KV transfer). */
double ra_kvpr_cost(const struct ra_kvpr_profile *p, const struct ra_kvpr_shape *sh, int l);
/* Brute force over l in [0, x_rows]. */
int ra_kvpr_plan_scan(const struct ra_kvpr_profile *p, const struct ra_kvpr_shape *sh);
/* Closed form (no latency): l* = c·s/(r+c), a = dim·p/v_com, c = 2·kv_dim·p_kv/v_com,
 * r = 4·dim·kv_dim/v_gpu; 0 when c <= a (GQA 2:1 or more); floor or ceiling,
 * whichever costs less, clamped to [0, x_rows]. */
int ra_kvpr_plan_closed(const struct ra_kvpr_profile *p, const struct ra_kvpr_shape *sh);

/* Recomputes K, V of rows [x0, x0+nx) of LAYER from X (device, nx rows of dim)
 * into k, v (device, row stride kv_dim, row x0 first). */
int ra_kvpr_recompute(struct ra_context *ctx, int layer, const float *x, int x0, int nx, float *k, float *v);

/* This step's split for s' = pos: forced (clamped) or planned by the scan. */
int ra_kvpr_split(struct ra_offload *o, int pos);

extern const struct ra_offload_policy ra_kvpr_policy;

#endif
