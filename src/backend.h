/* The compute backend interface.
 *
 * The forward pass never dereferences an activation or a KV cache pointer: it
 * asks the backend to allocate them and to run every op on them. The CPU
 * backend (backend_cpu.c) uses host memory, OpenBLAS for the GEMMs and
 * hand-written kernels for the rest; a GPU backend implements the same table
 * with device memory. All float pointers below are backend buffers except
 * where a parameter says "host". */
#ifndef RA_BACKEND_H
#define RA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

struct ra_tensor;

struct ra_attention_shape {
    int n_heads, n_kv_heads, head_dim;
    int q_stride;   /* floats between query rows (n_heads*head_dim) */
    int kv_stride;  /* elements between cache rows (n_kv_heads*head_dim) */
    enum ra_dtype kv_dtype; /* of the cache rows: RA_DTYPE_F32 (0, the default) or RA_DTYPE_BF16 */
};

struct ra_backend;

struct ra_backend_ops {
    const char *name;
    void (*destroy)(struct ra_backend *be);

    void *(*alloc)(struct ra_backend *be, size_t bytes); /* zeroed */
    void (*release)(struct ra_backend *be, void *buf);
    int (*upload)(struct ra_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*download)(struct ra_backend *be, void *host_dst, const void *src, size_t bytes);
    int (*synchronize)(struct ra_backend *be);

    /* x[i][:] = table[tokens[i]][:] for i < n; tokens are host ids already range-checked. */
    int (*embed)(struct ra_backend *be, float *x, const struct ra_tensor *table, const int32_t *tokens, int n);
    /* y[n][w->rows] (row stride ldy) = x[n][w->cols] (row stride ldx) · wᵀ */
    int (*matmul)(struct ra_backend *be, float *y, int ldy, const float *x, int ldx,
                  const struct ra_tensor *w, int n);
    /* y[i] = x[i] / rms(x[i]) * weight, rows of `dim` floats */
    int (*rmsnorm)(struct ra_backend *be, float *y, const float *x, const struct ra_tensor *weight,
                   int n, int dim, float eps);
    /* Rotates adjacent pairs of each head of rows x[i] (stride ld) at positions pos0 + i. */
    int (*rope)(struct ra_backend *be, float *x, int ld, int n, int n_heads, int head_dim, int pos0, float theta);
    /* Causal attention of n queries at positions [start, start+n) over cache rows [0, start+n)
     * (elements of s->kv_dtype); softmax and sums in fp32 whatever the cache's dtype. */
    int (*attention)(struct ra_backend *be, float *out, const float *q, const void *k_cache,
                     const void *v_cache, int start, int n, const struct ra_attention_shape *s);
    /* gate[i] = silu(gate[i]) * up[i] */
    int (*swiglu)(struct ra_backend *be, float *gate, const float *up, size_t count);
    /* x[i] += y[i] */
    int (*add)(struct ra_backend *be, float *x, const float *y, size_t count);
    /* dst[i] = src[i] rounded to dtype (to nearest even; RA_DTYPE_F32 copies): KV rows into a bf16 cache. */
    int (*narrow)(struct ra_backend *be, void *dst, enum ra_dtype dtype, const float *src, size_t count);
};

struct ra_backend {
    const struct ra_backend_ops *ops;
    int n_threads;
};

/* The CPU backend; n_threads <= 0 means all online cores. */
int ra_backend_cpu_init(struct ra_backend **out, int n_threads);
void ra_backend_free(struct ra_backend *be);

#endif
