#include "kvcache.h"
#include "backend.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>

int ra_kvcache_init(struct ra_kvcache *kv, struct ra_backend *be, int n_layers, int kv_dim, int capacity)
{
    memset(kv, 0, sizeof *kv);
    if (n_layers <= 0 || kv_dim <= 0 || capacity <= 0)
        return ra_error_set(RA_EINVAL, "kv cache: invalid shape %d layers x %d rows x %d floats", n_layers, capacity, kv_dim);
    kv->backend = be;
    kv->mem = be->ops->mem_kind(be);
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->capacity = capacity;
    kv->k = calloc((size_t)n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v)
        goto oom;
    const size_t bytes = (size_t)capacity * (size_t)kv_dim * sizeof(float);
    for (int l = 0; l < n_layers; l++) {
        kv->k[l] = be->ops->alloc(be, bytes);
        kv->v[l] = be->ops->alloc(be, bytes);
        if (!kv->k[l] || !kv->v[l])
            goto oom;
    }
    return RA_OK;
oom:
    ra_kvcache_free(kv);
    return ra_error_set(RA_ENOMEM, "kv cache: cannot allocate %d layers x %d rows x %d floats",
                        n_layers, capacity, kv_dim);
}

void ra_kvcache_free(struct ra_kvcache *kv)
{
    for (int l = 0; kv->k && l < kv->n_layers; l++) {
        if (kv->k[l])
            kv->backend->ops->release(kv->backend, kv->k[l]);
        if (kv->v && kv->v[l])
            kv->backend->ops->release(kv->backend, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}
