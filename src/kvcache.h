/* KV cache: per layer one contiguous buffer [pos][kv_head][head_dim] for K and
 * one for V, so rows [0, n) of a layer are one message. Buffers belong to the
 * backend (device memory on a GPU backend). Rows are fp32 or bf16 (`dtype`):
 * bf16 halves the cache's memory and the bytes every exchange moves; the
 * forward pass rounds K (after RoPE) and V to it, to nearest even. */
#ifndef RA_KVCACHE_H
#define RA_KVCACHE_H

#include <stddef.h>

#include "backend.h"
#include "model.h"

struct ra_kvcache {
    struct ra_backend *backend;
    enum ra_mem mem; /* where the rows live: the backend's mem_kind (device memory on a GPU) */
    int n_layers;
    int kv_dim;      /* n_kv_heads * head_dim: elements per row */
    int capacity;    /* rows per layer */
    enum ra_dtype dtype; /* RA_DTYPE_F32 or RA_DTYPE_BF16 */
    void **k;        /* [n_layers] backend buffers of capacity*kv_dim elements */
    void **v;
    /* [n_layers] the position of each buffer's first row: row pos of layer l
     * is at row pos - first[l] of k[l] and v[l], so a buffer may hold a window
     * of positions (the offload engine's slots). NULL: 0 for every layer.
     * Freed by ra_kvcache_free. */
    int *first;
    /* 1: k[l] and v[l] belong to someone else (a view of the offload
     * engine's host pool): ra_kvcache_free frees only the arrays. */
    int borrowed;
};

/* An fp32 cache. */
int ra_kvcache_init(struct ra_kvcache *kv, struct ra_backend *be, int n_layers, int kv_dim, int capacity);
/* A cache of `dtype` rows: RA_DTYPE_F32 or RA_DTYPE_BF16 (RA_EUNSUPPORTED otherwise). */
int ra_kvcache_init_dtype(struct ra_kvcache *kv, struct ra_backend *be, int n_layers, int kv_dim, int capacity,
                          enum ra_dtype dtype);
void ra_kvcache_free(struct ra_kvcache *kv);

/* "f32" or "bf16" to a KV cache dtype (for --kv-dtype); RA_EINVAL naming `opt` otherwise. */
int ra_kv_dtype_parse(const char *s, const char *opt, enum ra_dtype *dtype);

/* Bytes of one row of kv_dim elements of dtype. */
static inline size_t ra_kv_row_bytes(int kv_dim, enum ra_dtype dtype)
{
    return (size_t)kv_dim * ra_dtype_size(dtype);
}
static inline size_t ra_kvcache_row_bytes(const struct ra_kvcache *kv)
{
    return ra_kv_row_bytes(kv->kv_dim, kv->dtype);
}

/* The position of the first row of layer `layer`'s buffers. */
static inline int ra_kvcache_first(const struct ra_kvcache *kv, int layer)
{
    return kv->first ? kv->first[layer] : 0;
}

/* Address of row `pos` (>= ra_kvcache_first) of layer `layer` (a backend pointer). */
static inline void *ra_kvcache_k(const struct ra_kvcache *kv, int layer, int pos)
{
    return (char *)kv->k[layer] + (size_t)(pos - ra_kvcache_first(kv, layer)) * ra_kvcache_row_bytes(kv);
}
static inline void *ra_kvcache_v(const struct ra_kvcache *kv, int layer, int pos)
{
    return (char *)kv->v[layer] + (size_t)(pos - ra_kvcache_first(kv, layer)) * ra_kvcache_row_bytes(kv);
}

#endif
