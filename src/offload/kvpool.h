/* InfiniGen's host KV pool: every token's K and V rows of every layer, in
 * slots, under a memory limit; when the limit is reached a new token takes
 * the slot of a victim chosen by fetch counters (InfiniGen §4.4, "Counter").
 *
 * Each slot has a uint8 counter, incremented each time one of its KV-head
 * rows is gathered (fetched to the device); on saturation (255) all counters
 * of the layer are halved. The victim is the slot with the smallest counter
 * among those holding the older half of the tokens seen so far (as the
 * paper's simulation does, so that a token is not evicted before anyone had
 * the chance to fetch it); ties go to the lowest slot. A slot's rows stay
 * together: K, V and the caller's partial key row (same slot index) always
 * belong to the same token. RoPE keys carry their position, so slot order
 * does not matter to attention. */
#ifndef RA_KVPOOL_H
#define RA_KVPOOL_H

#include <stddef.h>
#include <stdint.h>

#define RA_KVPOOL_COUNT_MAX 255

struct ra_kvpool {
    int n_layers, n_kv_heads, head_dim, kv_dim;
    int capacity;      /* slots per layer */
    int *n_used;       /* [n_layers] slots [0, n_used) are filled */
    int *n_seen;       /* [n_layers] tokens inserted so far */
    float *k, *v;      /* [n_layers][capacity][kv_dim] host rows */
    uint8_t *count;    /* [n_layers][capacity] fetch counters */
    int32_t *token;    /* [n_layers][capacity] the position held, -1 when free */
    int64_t evictions, halvings, rows_fetched; /* rows_fetched: KV-head rows (K and V) gathered */
};

/* Room for at most max_tokens per layer, and for mem_limit bytes of K and V
 * over all layers (0: no limit). RA_EINVAL if the limit holds less than one
 * row per layer. */
int ra_kvpool_init(struct ra_kvpool *p, int n_layers, int n_kv_heads, int head_dim, int max_tokens,
                   size_t mem_limit);
void ra_kvpool_free(struct ra_kvpool *p);
/* Bytes one pool of this shape needs for `slots` slots per layer. */
size_t ra_kvpool_bytes(int n_layers, int kv_dim, int slots);

static inline float *ra_kvpool_k(const struct ra_kvpool *p, int layer, int slot)
{
    return p->k + ((size_t)layer * p->capacity + slot) * p->kv_dim;
}
static inline float *ra_kvpool_v(const struct ra_kvpool *p, int layer, int slot)
{
    return p->v + ((size_t)layer * p->capacity + slot) * p->kv_dim;
}

/* Stores TOKEN's rows k, v [kv_dim] in a free slot, or in the victim's when
 * the layer is full; *slot says which (the caller updates its partial key
 * cache row there); *evicted the token that lost it, or -1. Tokens must
 * arrive in increasing order per layer. */
int ra_kvpool_insert(struct ra_kvpool *p, int layer, int token, const float *k, const float *v, int *slot,
                     int *evicted);

/* Gathers, for each KV head g, the rows of slots sel[g*n_sel + i] (i < n_sel)
 * into row i, head g of k_dst, v_dst [n_sel][kv_dim], and counts the fetches
 * (counter + 1 per head row; halving on saturation). sel NULL: every filled
 * slot in slot order (n_sel must be n_used). */
int ra_kvpool_gather(struct ra_kvpool *p, int layer, const int32_t *sel, int n_sel, float *k_dst, float *v_dst);

/* Checks the pool's invariants: fill levels, tokens unique and below n_seen,
 * free slots empty, the eviction count. RA_OK, or RA_ERANGE naming the first
 * broken one. */
int ra_kvpool_check(const struct ra_kvpool *p);

#endif
