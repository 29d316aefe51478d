#include "kvcache.h"
#include "backend.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>

int ra_kvcache_init_dtype(struct ra_kvcache *kv, struct ra_backend *be, int n_layers, int kv_dim, int capacity,
                          enum ra_dtype dtype)
{
    memset(kv, 0, sizeof *kv);
    if (n_layers <= 0 || kv_dim <= 0 || capacity <= 0)
        return ra_error_set(RA_EINVAL, "kv cache: invalid shape %d layers x %d rows x %d elements", n_layers,
                            capacity, kv_dim);
    if (dtype != RA_DTYPE_F32 && dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "kv cache: %s rows are not supported (f32 or bf16)",
                            ra_dtype_name(dtype));
    kv->backend = be;
    kv->mem = be->ops->mem_kind(be);
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->capacity = capacity;
    kv->dtype = dtype;
    kv->k = calloc((size_t)n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v)
        goto oom;
    const size_t bytes = (size_t)capacity * ra_kvcache_row_bytes(kv);
    for (int l = 0; l < n_layers; l++) {
        kv->k[l] = ra_backend_alloc(be, bytes);
        kv->v[l] = ra_backend_alloc(be, bytes);
        if (!kv->k[l] || !kv->v[l])
            goto oom;
    }
    return RA_OK;
oom:
    ra_kvcache_free(kv);
    return ra_error_set(RA_ENOMEM, "kv cache: cannot allocate %d layers x %d rows x %d %s elements",
                        n_layers, capacity, kv_dim, ra_dtype_name(dtype));
}

int ra_kvcache_init(struct ra_kvcache *kv, struct ra_backend *be, int n_layers, int kv_dim, int capacity)
{
    return ra_kvcache_init_dtype(kv, be, n_layers, kv_dim, capacity, RA_DTYPE_F32);
}

int ra_kv_dtype_parse(const char *s, const char *opt, enum ra_dtype *dtype)
{
    if (!strcmp(s, "f32"))
        *dtype = RA_DTYPE_F32;
    else if (!strcmp(s, "bf16"))
        *dtype = RA_DTYPE_BF16;
    else
        return ra_error_set(RA_EINVAL, "%s: '%s' is not f32 or bf16", opt, s);
    return RA_OK;
}

void ra_kvcache_free(struct ra_kvcache *kv)
{
    for (int l = 0; kv->k && !kv->borrowed && l < kv->n_layers; l++) {
        if (kv->k[l])
            ra_backend_release(kv->backend, kv->k[l]);
        if (kv->v && kv->v[l])
            ra_backend_release(kv->backend, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->first);
    memset(kv, 0, sizeof *kv);
}
