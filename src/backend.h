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

struct ra_tensor;

struct ra_attention_shape {
    int n_heads, n_kv_heads, head_dim;
    int q_stride;   /* floats between query rows (n_heads*head_dim) */
    int kv_stride;  /* floats between cache rows (n_kv_heads*head_dim) */
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
    /* Causal attention of n queries at positions [start, start+n) over cache rows [0, start+n). */
    int (*attention)(struct ra_backend *be, float *out, const float *q, const float *k_cache,
                     const float *v_cache, int start, int n, const struct ra_attention_shape *s);
    /* gate[i] = silu(gate[i]) * up[i] */
    int (*swiglu)(struct ra_backend *be, float *gate, const float *up, size_t count);
    /* x[i] += y[i] */
    int (*add)(struct ra_backend *be, float *x, const float *y, size_t count);

    /* Optional (NULL: nothing to do). Called by ra_model_attach for every
     * weight matrix that matmul sees, and by ra_model_detach: the backend may
     * keep its own copy of w in w->device (a bf16 copy of f32 weights for
     * bf16 compute, device memory on a GPU) and frees it on release. */
    int (*weight_prepare)(struct ra_backend *be, struct ra_tensor *w);
    void (*weight_release)(struct ra_backend *be, struct ra_tensor *w);
};

/* What the linear layers compute in. AUTO: bf16 where the weights are bf16
 * or f16 and the CPU has a bf16 unit (AMX-BF16, AVX512-BF16), else fp32.
 * BF16 also converts f32 weights once, at attach. F32: always fp32. */
enum ra_compute { RA_COMPUTE_AUTO = 0, RA_COMPUTE_F32, RA_COMPUTE_BF16 };

/* "auto", "f32", "bf16" */
const char *ra_compute_name(enum ra_compute c);
/* RA_EINVAL ("--compute-dtype: ...") unless s is one of those names. */
int ra_compute_parse(const char *s, enum ra_compute *out);

struct ra_backend {
    const struct ra_backend_ops *ops;
    int n_threads;
    enum ra_compute compute; /* set before ra_model_attach; AUTO after init */
};

/* The CPU backend; n_threads <= 0 means all online cores. */
int ra_backend_cpu_init(struct ra_backend **out, int n_threads);
/* One line on what runs a CPU backend's linear layers in bf16: "oneDNN
 * brg:avx512_core_amx" (the unit of its last bf16 GEMM), or "none (why)". */
void ra_backend_cpu_describe_linear(const struct ra_backend *be, char *buf, size_t size);
void ra_backend_free(struct ra_backend *be);

#endif
