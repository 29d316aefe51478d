/* An independent scalar reference for the kernels: the test oracle.
 *
 * Written like llama2.c's forward(): one token at a time, plain loops, every
 * activation and every sum in double, no SIMD, no blocking, no call into the
 * runtime's compute code (it reads only the model's config and weights). Its
 * only float arithmetic is RoPE's angle, which follows llama2.c's float formula
 * on purpose: that rounding is part of the model's definition (see ref_forward.c). */
#ifndef RA_REF_FORWARD_H
#define RA_REF_FORWARD_H

#include <stdint.h>

#include "model.h"

/* The reference's own KV cache: rows [pos][n_kv_heads*head_dim] per layer, in double. */
struct ref_kv {
    int n_layers, kv_dim, capacity;
    int round_bf16; /* set: K (after RoPE) and V rows are stored rounded to bf16, as a bf16 cache holds them */
    double *k, *v; /* [n_layers][capacity][kv_dim] */
};

int ref_kv_init(struct ref_kv *kv, int n_layers, int kv_dim, int capacity); /* 0, or -1 out of memory */
void ref_kv_free(struct ref_kv *kv);
static inline double *ref_kv_k(const struct ref_kv *kv, int layer, int pos)
{
    return kv->k + ((size_t)layer * kv->capacity + pos) * kv->kv_dim;
}
static inline double *ref_kv_v(const struct ref_kv *kv, int layer, int pos)
{
    return kv->v + ((size_t)layer * kv->capacity + pos) * kv->kv_dim;
}

/* RoPE of one row x[n_heads*head_dim] at position pos, in either convention
 * (model.h: enum ra_rope_style). */
void ref_rope(double *x, int n_heads, int head_dim, int pos, float theta, enum ra_rope_style style,
              const float *factors /* [head_dim/2] frequency divisors, or NULL */);

/* Causal attention: for each query i < n (at position start+i) and head h,
 * out[i][h] = softmax_j(q[i][h] · k[j][g] / sqrt(head_dim)) · v[j][g] over keys
 * j = 0..start+i, where g = h / (n_heads/n_kv_heads) is h's KV head. q and out
 * have rows of n_heads*head_dim, k and v rows of n_kv_heads*head_dim.
 * 0, or -1 out of memory. */
int ref_attention(double *out, const double *q, const double *k, const double *v, int start, int n,
                  int n_heads, int n_kv_heads, int head_dim);

/* Causal attention at positions: query i (at qpos[i]) over the key rows j < nk
 * (at kpos[j]) whose position is <= qpos[i], as ref_attention; a query with
 * no such key gets zeros. 0, or -1 out of memory. */
int ref_attention_rows(double *out, const double *q, const int *qpos, int n, const double *k, const double *v,
                       const int *kpos, int nk, int n_heads, int n_kv_heads, int head_dim);

/* Runs tokens [start, start+n) through the Llama model m, appending their K,V
 * rows to kv (which must hold rows [0, start) already). logits: NULL, or
 * [n][vocab_size]: the classifier's output at every position of the span.
 * 0, or -1 if kv is too small or memory runs out. */
int ref_forward(const struct ra_model *m, const int32_t *tokens, int start, int n, struct ref_kv *kv,
                double *logits);

#endif
