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

/* Where a buffer lives, and the streams that order a backend's work. */
enum ra_mem { RA_MEM_HOST = 0, RA_MEM_HOST_PINNED, RA_MEM_DEVICE };
enum ra_stream { RA_STREAM_COMPUTE = 0, RA_STREAM_COPY, RA_STREAM_COMM, RA_N_STREAMS };
struct ra_event;

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

    /* Device memory model (NULL where a backend has only host memory). */
    enum ra_mem (*mem_kind)(struct ra_backend *be); /* where alloc() puts buffers */
    void *(*alloc_mem)(struct ra_backend *be, size_t bytes, enum ra_mem where); /* zeroed */
    void (*release_mem)(struct ra_backend *be, void *buf, enum ra_mem where);
    int (*copy_async)(struct ra_backend *be, void *dst, const void *src, size_t bytes, enum ra_stream s);
    int (*event_create)(struct ra_backend *be, struct ra_event **ev);
    void (*event_destroy)(struct ra_backend *be, struct ra_event *ev);
    int (*event_record)(struct ra_backend *be, struct ra_event *ev, enum ra_stream s);
    int (*stream_wait)(struct ra_backend *be, enum ra_stream s, struct ra_event *ev);
    int (*event_sync)(struct ra_backend *be, struct ra_event *ev);
    void *(*stream_native)(struct ra_backend *be, enum ra_stream s);

    /* Optional: gives weight T a backend copy in T->device (converted to the
     * backend's weight dtype), released with release(). ra_model_attach calls
     * it for every tensor; NULL: the backend reads T->data where it is. */
    int (*upload_weight)(struct ra_backend *be, struct ra_tensor *t);
};

struct ra_backend {
    const struct ra_backend_ops *ops;
    int n_threads;
};

/* The CPU backend; n_threads <= 0 means all online cores. */
int ra_backend_cpu_init(struct ra_backend **out, int n_threads);
void ra_backend_free(struct ra_backend *be);

#endif
