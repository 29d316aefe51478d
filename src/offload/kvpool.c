/* InfiniGen's host KV pool, see kvpool.h. */
#include "kvpool.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

size_t ra_kvpool_bytes(int n_layers, int kv_dim, int slots)
{
    return 2 * (size_t)n_layers * (size_t)slots * (size_t)kv_dim * sizeof(float);
}

int ra_kvpool_init(struct ra_kvpool *p, int n_layers, int n_kv_heads, int head_dim, int max_tokens,
                   size_t mem_limit)
{
    memset(p, 0, sizeof *p);
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || max_tokens <= 0)
        return ra_error_set(RA_EINVAL, "kv pool: bad shape (%d layers, %d KV heads of %d, %d tokens)", n_layers,
                            n_kv_heads, head_dim, max_tokens);
    const int kv_dim = n_kv_heads * head_dim;
    int cap = max_tokens;
    if (mem_limit) {
        const size_t per_slot = ra_kvpool_bytes(n_layers, kv_dim, 1);
        if (mem_limit < per_slot)
            return ra_error_set(RA_EINVAL, "kv pool: a limit of %zu bytes holds no token (one needs %zu bytes)",
                                mem_limit, per_slot);
        if (mem_limit / per_slot < (size_t)cap)
            cap = (int)(mem_limit / per_slot);
    }
    p->n_layers = n_layers;
    p->n_kv_heads = n_kv_heads;
    p->head_dim = head_dim;
    p->kv_dim = kv_dim;
    p->capacity = cap;
    const size_t slots = (size_t)n_layers * cap;
    p->n_used = calloc(n_layers, sizeof *p->n_used);
    p->n_seen = calloc(n_layers, sizeof *p->n_seen);
    p->k = malloc(slots * kv_dim * sizeof(float));
    p->v = malloc(slots * kv_dim * sizeof(float));
    p->count = calloc(slots, 1);
    p->token = malloc(slots * sizeof *p->token);
    if (!p->n_used || !p->n_seen || !p->k || !p->v || !p->count || !p->token) {
        ra_kvpool_free(p);
        return ra_error_set(RA_ENOMEM, "kv pool: out of memory for %d slots of %d layers", cap, n_layers);
    }
    for (size_t i = 0; i < slots; i++)
        p->token[i] = -1;
    return RA_OK;
}

void ra_kvpool_free(struct ra_kvpool *p)
{
    free(p->n_used);
    free(p->n_seen);
    free(p->k);
    free(p->v);
    free(p->count);
    free(p->token);
    memset(p, 0, sizeof *p);
}

/* The counter policy's victim: the least fetched slot of the older half. */
static int victim(const struct ra_kvpool *p, int layer)
{
    const uint8_t *cnt = p->count + (size_t)layer * p->capacity;
    const int32_t *tok = p->token + (size_t)layer * p->capacity;
    const int old = p->n_seen[layer] / 2;
    int best = -1, any = 0;
    for (int s = 0; s < p->capacity; s++) {
        if (tok[s] >= old)
            continue;
        if (best < 0 || cnt[s] < cnt[best])
            best = s;
    }
    if (best >= 0)
        return best;
    for (int s = 1; s < p->capacity; s++) /* a tiny pool: no slot holds an old token */
        if (cnt[s] < cnt[any])
            any = s;
    return any;
}

int ra_kvpool_insert(struct ra_kvpool *p, int layer, int token, const float *k, const float *v, int *slot,
                     int *evicted)
{
    if (layer < 0 || layer >= p->n_layers)
        return ra_error_set(RA_EINVAL, "kv pool: layer %d out of range", layer);
    if (token < p->n_seen[layer])
        return ra_error_set(RA_EINVAL, "kv pool: token %d of layer %d arrives after token %d", token, layer,
                            p->n_seen[layer] - 1);
    int s, old = -1;
    if (p->n_used[layer] < p->capacity) {
        s = p->n_used[layer]++;
    } else {
        s = victim(p, layer);
        old = p->token[(size_t)layer * p->capacity + s];
        p->evictions++;
    }
    memcpy(ra_kvpool_k(p, layer, s), k, (size_t)p->kv_dim * sizeof(float));
    memcpy(ra_kvpool_v(p, layer, s), v, (size_t)p->kv_dim * sizeof(float));
    p->token[(size_t)layer * p->capacity + s] = token;
    p->count[(size_t)layer * p->capacity + s] = 0;
    p->n_seen[layer] = token + 1;
    if (slot)
        *slot = s;
    if (evicted)
        *evicted = old;
    return RA_OK;
}

static void count_fetch(struct ra_kvpool *p, int layer, int s)
{
    uint8_t *cnt = p->count + (size_t)layer * p->capacity;
    if (cnt[s] == RA_KVPOOL_COUNT_MAX) {
        for (int i = 0; i < p->capacity; i++)
            cnt[i] /= 2;
        p->halvings++;
    }
    cnt[s]++;
}

int ra_kvpool_gather(struct ra_kvpool *p, int layer, const int32_t *sel, int n_sel, float *k_dst, float *v_dst)
{
    if (layer < 0 || layer >= p->n_layers || n_sel < 0 || n_sel > p->n_used[layer] ||
        (!sel && n_sel != p->n_used[layer]))
        return ra_error_set(RA_EINVAL, "kv pool: gather of %d rows from layer %d (%d filled)", n_sel, layer,
                            layer >= 0 && layer < p->n_layers ? p->n_used[layer] : 0);
    const int hd = p->head_dim;
    const size_t row_bytes = (size_t)hd * sizeof(float);
    for (int g = 0; g < p->n_kv_heads; g++)
        for (int i = 0; i < n_sel; i++) {
            const int s = sel ? sel[(size_t)g * n_sel + i] : i;
            if (s < 0 || s >= p->n_used[layer])
                return ra_error_set(RA_EINVAL, "kv pool: gather of slot %d from layer %d (%d filled)", s, layer,
                                    p->n_used[layer]);
            memcpy(k_dst + (size_t)i * p->kv_dim + g * hd, ra_kvpool_k(p, layer, s) + g * hd, row_bytes);
            memcpy(v_dst + (size_t)i * p->kv_dim + g * hd, ra_kvpool_v(p, layer, s) + g * hd, row_bytes);
            count_fetch(p, layer, s);
        }
    p->rows_fetched += (int64_t)n_sel * p->n_kv_heads;
    return RA_OK;
}

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int ra_kvpool_check(const struct ra_kvpool *p)
{
    int64_t evicted = 0;
    int32_t *seen = malloc((size_t)p->capacity * sizeof *seen);
    if (!seen)
        return ra_error_set(RA_ENOMEM, "kv pool: out of memory for the check");
    int rc = RA_OK;
    for (int l = 0; l < p->n_layers && rc == RA_OK; l++) {
        const int used = p->n_used[l], n_seen = p->n_seen[l];
        const int32_t *tok = p->token + (size_t)l * p->capacity;
        if (used < 0 || used > p->capacity || used != (n_seen < p->capacity ? n_seen : p->capacity)) {
            rc = ra_error_set(RA_ERANGE, "kv pool: layer %d has %d slots filled of %d after %d tokens", l, used,
                              p->capacity, n_seen);
            break;
        }
        evicted += n_seen - used;
        for (int s = 0; s < p->capacity; s++) {
            if (s < used && (tok[s] < 0 || tok[s] >= n_seen))
                rc = ra_error_set(RA_ERANGE, "kv pool: layer %d slot %d holds token %d of %d seen", l, s, tok[s],
                                  n_seen);
            else if (s >= used && tok[s] != -1)
                rc = ra_error_set(RA_ERANGE, "kv pool: layer %d free slot %d holds token %d", l, s, tok[s]);
            if (rc != RA_OK)
                break;
        }
        if (rc != RA_OK)
            break;
        memcpy(seen, tok, (size_t)used * sizeof *seen);
        qsort(seen, used, sizeof *seen, cmp_i32);
        for (int i = 1; i < used; i++)
            if (seen[i] == seen[i - 1]) {
                rc = ra_error_set(RA_ERANGE, "kv pool: layer %d holds token %d twice", l, seen[i]);
                break;
            }
    }
    if (rc == RA_OK && evicted != p->evictions)
        rc = ra_error_set(RA_ERANGE, "kv pool: %lld evictions counted, %lld tokens missing", (long long)p->evictions,
                          (long long)evicted);
    free(seen);
    return rc;
}
