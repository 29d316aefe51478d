/* KV cache: per layer one contiguous buffer [pos][kv_head][head_dim] for K and
 * one for V, so rows [0, n) of a layer are one message. Buffers belong to the
 * backend (device memory on a GPU backend). */
#ifndef RA_KVCACHE_H
#define RA_KVCACHE_H

#include <stddef.h>

#include "backend.h"

struct ra_kvcache {
    struct ra_backend *backend;
    enum ra_mem mem; /* where the rows live: the backend's mem_kind (device memory on a GPU) */
    int n_layers;
    int kv_dim;      /* n_kv_heads * head_dim: floats per row */
    int capacity;    /* rows per layer */
    float **k;       /* [n_layers] backend buffers of capacity*kv_dim floats */
    float **v;
};

int ra_kvcache_init(struct ra_kvcache *kv, struct ra_backend *be, int n_layers, int kv_dim, int capacity);
void ra_kvcache_free(struct ra_kvcache *kv);

/* Address of row `pos` of layer `layer` (a backend pointer). */
static inline float *ra_kvcache_k(const struct ra_kvcache *kv, int layer, int pos)
{
    return kv->k[layer] + (size_t)pos * kv->kv_dim;
}
static inline float *ra_kvcache_v(const struct ra_kvcache *kv, int layer, int pos)
{
    return kv->v[layer] + (size_t)pos * kv->kv_dim;
}
static inline size_t ra_kvcache_row_bytes(const struct ra_kvcache *kv)
{
    return (size_t)kv->kv_dim * sizeof(float);
}

#endif
