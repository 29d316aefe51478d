/* The reuse engine's entry (reuse.h): a request's chunks looked up in the
 * store, the plan of loaded and computed rows handed to the passes
 * (blend.c), misses written back after the first token. */
#include "reuse/reuse.h"
#include "forward.h"
#include "reuse/blend.h"
#include "reuse/craft.h"
#include "status.h"
#include "timing.h"

#include <stdlib.h>
#include <string.h>

static int chunk_read(void *src, int layer, const void **k, const void **v)
{
    return ra_chunk_layer(src, layer, k, v);
}

int ra_reuse_lookup(struct ra_store *st, const struct ra_request *req, int c, enum ra_reuse_mode mode,
                  const struct ra_kvcache *kv, struct ra_chunk **ch)
{
    const int start = req->chunk_start[c], len = req->chunk_len[c];
    const int behind = mode == RA_REUSE_PREFIX ? start : req->n_prefix;
    int rc = ra_store_get(st, req->ids, behind, req->ids + start, len, ch);
    if (rc != RA_OK || !*ch)
        return rc;
    const size_t want = 2 * (size_t)len * ra_kvcache_row_bytes(kv);
    if (ra_chunk_tokens(*ch) != len || ra_chunk_layer_bytes(*ch) != want)
        return ra_error_set(RA_EFORMAT, "%s: %d tokens of %zu bytes a layer, where %s needs %d of %zu (another KV "
                            "dtype or model shape)", ra_chunk_path(*ch), ra_chunk_tokens(*ch),
                            ra_chunk_layer_bytes(*ch), req->chunk_name ? req->chunk_name[c] : "the request", len,
                            want);
    return RA_OK;
}

/* The plan: every chunk looked up (prefix: until the first miss), the hits as loads. */
static int plan(struct ra_store *st, const struct ra_request *req, enum ra_reuse_mode mode,
                const struct ra_kvcache *kv, struct ra_chunk **chunks, struct ra_blend_load *loads, int *n_loads)
{
    *n_loads = 0;
    for (int c = 0; c < req->n_chunks; c++) {
        int rc = ra_reuse_lookup(st, req, c, mode, kv, &chunks[c]);
        if (rc != RA_OK)
            return rc;
        if (!chunks[c] && mode == RA_REUSE_PREFIX)
            break;
        if (!chunks[c])
            continue;
        const int start = req->chunk_start[c], len = req->chunk_len[c];
        if (start + len >= req->n) { /* the last row gives the logits: computed */
            ra_chunk_close(chunks[c]);
            chunks[c] = NULL;
            break;
        }
        loads[(*n_loads)++] = (struct ra_blend_load){ .start = start, .n = len,
                                                      .shift = start - ra_chunk_n_prefix(chunks[c]),
                                                      .read = chunk_read, .src = chunks[c] };
    }
    return RA_OK;
}

/* After the first token: misses computed and stored. prefix: every chunk the
 * span computed, stored behind its exact context from the cache itself. */
static int write_misses(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req,
                        enum ra_reuse_mode mode, struct ra_chunk **chunks, const struct ra_kvcache *kv)
{
    int rc = RA_OK;
    for (int c = 0; c < req->n_chunks && rc == RA_OK; c++) {
        const int start = req->chunk_start[c], len = req->chunk_len[c];
        if (chunks[c])
            continue;
        if (mode == RA_REUSE_PREFIX) {
            rc = ra_store_put(st, req->ids, start, req->ids + start, len, kv);
        } else {
            rc = ra_store_add(st, ctx, req->ids, req->n_prefix, req->ids + start, len);
        }
    }
    return rc;
}

int ra_reuse_request_fits(const struct ra_request *req, const struct ra_kvcache *kv)
{
    if (!req || !req->ids || req->n < 1)
        return ra_error_set(RA_EINVAL, "reuse: an empty request");
    if (kv && kv->capacity < req->n)
        return ra_error_set(RA_ERANGE, "reuse: the request's %d tokens exceed the KV cache's %d rows", req->n,
                            kv->capacity);
    for (int c = 0; c < req->n_chunks; c++)
        if (req->chunk_start[c] < req->n_prefix || req->chunk_len[c] < 1 ||
            req->chunk_start[c] + req->chunk_len[c] > req->n ||
            (c > 0 && req->chunk_start[c] < req->chunk_start[c - 1] + req->chunk_len[c - 1]))
            return ra_error_set(RA_EINVAL, "reuse: chunk %d's rows [%d, %d) are outside the request or overlap", c,
                                req->chunk_start[c], req->chunk_start[c] + req->chunk_len[c]);
    return RA_OK;
}

int ra_reuse_prefill(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req,
                     enum ra_reuse_mode mode, const struct ra_reuse_config *cfg, struct ra_kvcache *kv,
                     float *logits, struct ra_reuse_report *rep)
{
    const double t0 = ra_wall_s();
    static const struct ra_reuse_config defaults = RA_REUSE_CONFIG_INIT;
    memset(rep, 0, sizeof *rep);
    rep->mode = mode;
    if (!cfg)
        cfg = &defaults;
    int rc = ra_reuse_request_fits(req, kv);
    if (rc != RA_OK)
        return rc;
    if (mode != RA_REUSE_NONE && !st)
        return ra_error_set(RA_EINVAL, "reuse: --reuse %s needs a chunk store", ra_reuse_mode_name(mode));
    if (mode == RA_REUSE_NONE) {
        const int L = ctx->model->config.n_layers;
        if ((rc = ra_forward_span(ctx, req->ids, 0, req->n, kv, logits)) != RA_OK)
            return rc;
        if (!(rep->recomputed = malloc(sizeof *rep->recomputed * (size_t)L)))
            return ra_error_set(RA_ENOMEM, "reuse: out of memory");
        for (int l = 0; l < L; l++)
            rep->recomputed[l] = req->n;
        rep->n_layers = L;
        rep->n_rows = req->n;
        rep->ratio = 1;
        rep->ttft = rep->t_pass_b = ra_wall_s() - t0;
        return RA_OK;
    }
    if (mode == RA_REUSE_CRAFT) {
        rc = ra_craft_prefill(ctx, st, req, cfg, kv, logits, rep);
        rep->mode = mode;
        rep->ttft = ra_wall_s() - t0;
        if (rc == RA_OK && cfg->store_write) {
            const double t = ra_wall_s();
            rc = ra_craft_store_request(st, ctx, req);
            rep->t_store_write = ra_wall_s() - t;
        }
        return rc;
    }
    struct ra_chunk **chunks = calloc((size_t)req->n_chunks + 1, sizeof *chunks);
    struct ra_blend_load *loads = calloc((size_t)req->n_chunks + 1, sizeof *loads);
    int n_loads = 0;
    if (!chunks || !loads)
        rc = ra_error_set(RA_ENOMEM, "reuse: out of memory");
    if (rc == RA_OK)
        rc = plan(st, req, mode, kv, chunks, loads, &n_loads);
    if (rc == RA_OK)
        rc = ra_blend_prefill(ctx, req->ids, req->n, loads, n_loads, mode, cfg, kv, logits, rep);
    rep->ttft = ra_wall_s() - t0;
    rep->hits = n_loads;
    rep->misses = req->n_chunks - n_loads;
    if (rc == RA_OK && cfg->store_write && rep->misses > 0) {
        const double t = ra_wall_s();
        rc = write_misses(ctx, st, req, mode, chunks, kv);
        rep->t_store_write = ra_wall_s() - t;
    }
    for (int c = 0; chunks && c < req->n_chunks; c++)
        if (chunks[c])
            ra_chunk_close(chunks[c]);
    free(chunks);
    free(loads);
    return rc;
}
