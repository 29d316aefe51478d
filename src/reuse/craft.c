/* Cache-Craft's budgets, variants and `--reuse craft` (craft.h); the records
 * are craft_record.c's. */
#include "reuse/craft.h"
#include "forward.h"
#include "reuse/blend.h"
#include "reuse/store_impl.h"
#include "status.h"
#include "timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ budgets */

double ra_craft_overlap(const uint8_t (*ctx)[RA_STORE_HASH_BYTES], int m, const uint8_t (*new_keys)[RA_STORE_HASH_BYTES],
                        int j)
{
    if (m == 0 && j == 0)
        return 1;
    if (m == 0 || j == 0)
        return 0;
    int present = 0;
    for (int a = 0; a < m; a++)
        for (int b = 0; b < j; b++)
            if (memcmp(ctx[a], new_keys[b], RA_STORE_HASH_BYTES) == 0) {
                present++;
                break;
            }
    /* the longest common subsequence: the stored context's chunks in order */
    int *row = calloc((size_t)j + 1, sizeof *row), *prev = calloc((size_t)j + 1, sizeof *prev);
    int lcs = 0;
    if (row && prev) {
        for (int a = 1; a <= m; a++) {
            for (int b = 1; b <= j; b++)
                row[b] = memcmp(ctx[a - 1], new_keys[b - 1], RA_STORE_HASH_BYTES) == 0
                             ? prev[b - 1] + 1
                             : (row[b - 1] > prev[b] ? row[b - 1] : prev[b]);
            int *t = prev;
            prev = row;
            row = t;
        }
        lcs = prev[j];
    }
    free(row);
    free(prev);
    const double matched = present - RA_CRAFT_ORDER_PENALTY * (present - lcs);
    return matched / (m > j ? m : j);
}

double ra_craft_impact(const struct ra_craft_chunk *c)
{
    if (!c->rec)
        return 0;
    const double ov = c->overlap < 0 ? 0 : c->overlap > 1 ? 1 : c->overlap;
    return ra_craft_cci(c->rec) * (1 - ov);
}

#define CRAFT_EPS 1e-6

static double frac_at(const struct ra_craft_chunk *c, double alpha)
{
    if (!c->rec)
        return 0;
    const double f = alpha * (ra_craft_impact(c) + CRAFT_EPS);
    return f > 1 ? 1 : f;
}

/* Mean recompute fraction over the loaded rows at ALPHA. */
static double mean_at(const struct ra_craft_chunk *chunks, int n_chunks, double alpha, double loaded)
{
    double s = 0;
    for (int i = 0; i < n_chunks; i++)
        s += frac_at(&chunks[i], alpha) * chunks[i].n;
    return loaded > 0 ? s / loaded : 0;
}

static double find_alpha(const struct ra_craft_chunk *chunks, int n_chunks, double ratio, double loaded)
{
    double lo = 0, hi = 1;
    while (mean_at(chunks, n_chunks, hi, loaded) < ratio && hi < 1e12)
        hi *= 2;
    for (int it = 0; it < 100; it++) {
        const double mid = 0.5 * (lo + hi);
        if (mean_at(chunks, n_chunks, mid, loaded) < ratio)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

/* Chunk C's K rows of highest token score into TAKE (ties to the lower position). */
static int take_top(const struct ra_craft_chunk *c, int k, uint8_t *take)
{
    if (k <= 0)
        return RA_OK;
    float *score = malloc(sizeof *score * (size_t)c->n);
    uint8_t *none = calloc((size_t)c->n, 1);
    int32_t *sel = malloc(sizeof *sel * (size_t)c->n);
    int n_sel = 0, rc = RA_OK;
    if (!score || !none || !sel)
        rc = ra_error_set(RA_ENOMEM, "craft: out of memory");
    for (int t = 0; rc == RA_OK && t < c->n; t++)
        score[t] = (float)ra_craft_token_score(c->rec, t);
    if (rc == RA_OK)
        rc = ra_blend_select_count(score, none, c->n, k, sel, &n_sel);
    for (int i = 0; rc == RA_OK && i < n_sel; i++)
        take[c->start + sel[i]] = 1;
    free(score);
    free(none);
    free(sel);
    return rc;
}

int ra_craft_plan(const struct ra_craft_chunk *chunks, int n_chunks, const uint8_t *must, int n, double ratio,
                  int32_t *out, int *n_out, double *frac, double *alpha_out)
{
    if (!(ratio >= 0 && ratio <= 1) || n < 0)
        return ra_error_set(RA_EINVAL, "craft: ratio %g is not in [0, 1]", ratio);
    double loaded = 0;
    for (int i = 0; i < n_chunks; i++) {
        if (chunks[i].start < 0 || chunks[i].n < 0 || chunks[i].start + chunks[i].n > n ||
            (chunks[i].rec && chunks[i].rec->n_tokens != chunks[i].n))
            return ra_error_set(RA_EINVAL, "craft: chunk %d's rows [%d, %d) are outside the prompt of %d or its "
                                "record's", i, chunks[i].start, chunks[i].start + chunks[i].n, n);
        loaded += chunks[i].n;
    }
    uint8_t *take = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!take)
        return ra_error_set(RA_ENOMEM, "craft: out of memory");
    const double alpha = ratio >= 1 ? INFINITY : ratio <= 0 ? 0 : find_alpha(chunks, n_chunks, ratio, loaded);
    int rc = RA_OK;
    for (int i = 0; i < n && must; i++)
        take[i] = must[i] != 0;
    for (int i = 0; i < n_chunks && rc == RA_OK; i++) {
        const struct ra_craft_chunk *c = &chunks[i];
        const double f = ratio >= 1 ? 1 : ratio <= 0 ? 0 : frac_at(c, alpha);
        if (frac)
            frac[i] = f;
        if (f >= 1 || !c->rec)
            for (int t = 0; t < c->n && f >= 1; t++)
                take[c->start + t] = 1;
        else
            rc = take_top(c, (int)lround(f * c->n), take);
    }
    *n_out = 0;
    for (int i = 0; i < n; i++)
        if (take[i])
            out[(*n_out)++] = i;
    if (alpha_out)
        *alpha_out = alpha;
    free(take);
    return rc;
}

/* ------------------------------------------------------------ variants */

/* Opens the file of hex key KEY when it holds TOKENS[n] behind a prefix that
 * begins with LEAD[n_lead] (a variant's prefix is the lead and its context). */
static int open_variant(struct ra_store *st, const char *key, const int32_t *lead, int n_lead, const int32_t *tokens,
                        int n, struct ra_chunk **out)
{
    char why[128];
    struct ra_chunk *c = NULL;
    *out = NULL;
    char *path = ra_store_chunk_path(st, key);
    if (!path)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
    int rc = ra_chunk_open(path, &c);
    if (rc == RA_OK && c) {
        const int np = ra_chunk_n_prefix(c);
        int32_t *prefix = malloc(sizeof *prefix * (size_t)(np + 1));
        if (!prefix) {
            rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
        } else {
            if (np)
                memcpy(prefix, c->layout.prefix, sizeof *prefix * (size_t)np);
            if (np >= n_lead && (n_lead == 0 || memcmp(prefix, lead, sizeof *lead * (size_t)n_lead) == 0) &&
                ra_chunk_matches(c, st, prefix, np, tokens, n, why, sizeof why))
                *out = c;
            else
                fprintf(stderr, "runahead: warning: %s: not a variant of the chunk it is indexed as: skipped\n", path);
        }
        free(prefix);
        if (!*out)
            ra_chunk_close(c);
    }
    free(path);
    return rc;
}

void ra_craft_variants_free(struct ra_chunk **c, struct ra_craft_record *r, int *have, int n)
{
    for (int i = 0; i < n; i++) {
        if (c && c[i])
            ra_chunk_close(c[i]);
        if (r)
            ra_craft_record_free(&r[i]);
    }
    free(c);
    free(r);
    free(have);
}

int ra_craft_variants(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                      struct ra_chunk ***c_out, struct ra_craft_record **r_out, int **have_out, int *n_out)
{
    uint8_t base[RA_STORE_HASH_BYTES];
    char hex[2 * RA_STORE_HASH_BYTES + 1];
    struct ra_store_entry *e = NULL;
    int n_e = 0, nv = 0;
    *c_out = NULL;
    *r_out = NULL;
    *have_out = NULL;
    *n_out = 0;
    int rc = ra_store_chunk_key(st, prefix, n_prefix, tokens, n, base);
    if (rc != RA_OK || (rc = ra_store_index_read(st, &e, &n_e)) != RA_OK)
        return rc;
    ra_store_hex(base, hex);
    struct ra_chunk **c = calloc((size_t)n_e + 1, sizeof *c);
    struct ra_craft_record *r = calloc((size_t)n_e + 1, sizeof *r);
    int *have = calloc((size_t)n_e + 1, sizeof *have);
    if (!c || !r || !have)
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
    /* the base variant first (an index of an older store names no base) */
    if (rc == RA_OK && (rc = open_variant(st, hex, prefix, n_prefix, tokens, n, &c[nv])) == RA_OK && c[nv])
        nv++;
    for (int i = 0; rc == RA_OK && i < n_e; i++) {
        if (strcmp(e[i].base, hex) != 0 || strcmp(e[i].key, hex) == 0)
            continue;
        if ((rc = open_variant(st, e[i].key, prefix, n_prefix, tokens, n, &c[nv])) == RA_OK && c[nv])
            nv++;
    }
    for (int i = 0; rc == RA_OK && i < nv; i++) {
        rc = ra_craft_record_load(c[i], &r[i], &have[i]);
        if (rc == RA_OK && have[i] && memcmp(r[i].base, base, RA_STORE_HASH_BYTES) != 0)
            rc = ra_error_set(RA_EFORMAT, "%s: a craft record of another chunk", ra_chunk_path(c[i]));
    }
    free(e);
    if (rc != RA_OK) {
        ra_craft_variants_free(c, r, have, nv);
        return rc;
    }
    *c_out = c;
    *r_out = r;
    *have_out = have;
    *n_out = nv;
    return RA_OK;
}

/* ------------------------------------------------------------ the mode */

void ra_craft_choices_free(struct ra_craft_choice *ch, int n)
{
    for (int i = 0; ch && i < n; i++) {
        if (ch[i].chunk)
            ra_chunk_close(ch[i].chunk);
        ra_craft_record_free(&ch[i].rec);
    }
    free(ch);
}

/* Chunk C's variants; the one of least impact x rows (a variant with a
 * record before one without) into OUT, its use recorded. BASE: the request's
 * chunks' base keys. */
static int choose(struct ra_store *st, const struct ra_request *req, int c, const uint8_t (*base)[RA_STORE_HASH_BYTES],
                  struct ra_craft_choice *out)
{
    const int len = req->chunk_len[c];
    struct ra_chunk **vc;
    struct ra_craft_record *vr;
    int *vh, nv, best = -1, rc;
    double best_cost = INFINITY, best_ov = 0;
    if ((rc = ra_craft_variants(st, req->ids, req->n_prefix, req->ids + req->chunk_start[c], len, &vc, &vr, &vh,
                                &nv)) != RA_OK)
        return rc;
    for (int v = 0; v < nv; v++) {
        if (!vh[v]) {
            if (best < 0)
                best = v, best_ov = 0;
            continue;
        }
        const double ov = ra_craft_overlap((const uint8_t(*)[RA_STORE_HASH_BYTES])vr[v].ctx_keys, vr[v].n_ctx_keys,
                                           base, c);
        const struct ra_craft_chunk cc = { .start = req->chunk_start[c], .n = len, .rec = &vr[v], .overlap = ov };
        const double cost = ra_craft_impact(&cc) * len;
        if (best < 0 || !vh[best] || cost < best_cost)
            best = v, best_cost = cost, best_ov = ov;
    }
    if (best >= 0) {
        char hex[2 * RA_STORE_HASH_BYTES + 1];
        ra_store_hex(vc[best]->layout.h.key, hex);
        if ((rc = ra_store_record_use(st, hex)) == RA_OK) {
            out->chunk = vc[best];
            out->rec = vr[best];
            out->have_rec = vh[best];
            out->overlap = best_ov;
            vc[best] = NULL;
            memset(&vr[best], 0, sizeof vr[best]);
        }
    }
    ra_craft_variants_free(vc, vr, vh, nv);
    return rc;
}

int ra_craft_choose(struct ra_store *st, const struct ra_request *req, const struct ra_kvcache *kv,
                    struct ra_craft_choice **out)
{
    const int C = req->n_chunks;
    int rc = RA_OK, warned = 0;
    uint8_t(*base)[RA_STORE_HASH_BYTES] = calloc((size_t)C + 1, sizeof *base);
    struct ra_craft_choice *ch = calloc((size_t)C + 1, sizeof *ch);
    *out = NULL;
    if (!base || !ch)
        rc = ra_error_set(RA_ENOMEM, "craft: out of memory");
    for (int c = 0; c < C && rc == RA_OK; c++)
        rc = ra_store_chunk_key(st, req->ids, req->n_prefix, req->ids + req->chunk_start[c], req->chunk_len[c],
                                base[c]);
    for (int c = 0; c < C && rc == RA_OK; c++) {
        if (req->chunk_start[c] + req->chunk_len[c] >= req->n) /* the last row gives the logits: computed */
            break;
        if ((rc = choose(st, req, c, (const uint8_t(*)[RA_STORE_HASH_BYTES])base, &ch[c])) != RA_OK || !ch[c].chunk)
            continue;
        const size_t want = 2 * (size_t)req->chunk_len[c] * ra_kvcache_row_bytes(kv);
        if (ra_chunk_layer_bytes(ch[c].chunk) != want)
            rc = ra_error_set(RA_EFORMAT, "%s: %zu bytes a layer, where the request needs %zu (another KV dtype "
                              "or model shape)", ra_chunk_path(ch[c].chunk), ra_chunk_layer_bytes(ch[c].chunk), want);
        else if (!ch[c].have_rec && !warned++)
            fprintf(stderr, "runahead: warning: %s: a chunk without craft records: loaded as full reuse\n",
                    ra_chunk_path(ch[c].chunk));
    }
    free(base);
    if (rc != RA_OK) {
        ra_craft_choices_free(ch, C);
        return rc;
    }
    *out = ch;
    return RA_OK;
}

int ra_craft_select(const struct ra_request *req, const struct ra_craft_choice *ch, const uint8_t *loaded,
                    double ratio, int32_t *out, int *n_out)
{
    const int C = req->n_chunks;
    struct ra_craft_chunk *cc = calloc((size_t)C + 1, sizeof *cc);
    uint8_t *must = malloc((size_t)req->n);
    int n_cc = 0, rc = RA_OK;
    if (!cc || !must)
        rc = ra_error_set(RA_ENOMEM, "craft: out of memory");
    for (int i = 0; rc == RA_OK && i < req->n; i++)
        must[i] = 1;
    for (int c = 0; rc == RA_OK && c < C; c++) {
        if (!ch[c].chunk || (loaded && !loaded[c]))
            continue;
        cc[n_cc++] = (struct ra_craft_chunk){ .start = req->chunk_start[c], .n = req->chunk_len[c],
                                              .rec = ch[c].have_rec ? &ch[c].rec : NULL, .overlap = ch[c].overlap };
        memset(must + req->chunk_start[c], 0, (size_t)req->chunk_len[c]);
    }
    if (rc == RA_OK)
        rc = ra_craft_plan(cc, n_cc, must, req->n, ratio, out, n_out, NULL, NULL);
    free(cc);
    free(must);
    return rc;
}

static int chunk_read_whole(void *src, int layer, const void **k, const void **v)
{
    return ra_chunk_layer(src, layer, k, v);
}

int ra_craft_prefill(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req,
                     const struct ra_reuse_config *cfg, struct ra_kvcache *kv, float *logits,
                     struct ra_reuse_report *rep)
{
    struct ra_craft_choice *ch = NULL;
    struct ra_blend_load *loads = NULL;
    struct ra_blend *e = NULL;
    int32_t *sel = NULL;
    int n_sel = 0, n_loads = 0, rc;
    if (cfg->ratio < 0 || cfg->ratio > 1 || cfg->schedule || cfg->pick != RA_BLEND_PICK_DEVIATION || cfg->quota_bounds)
        return ra_error_set(RA_EINVAL, "--reuse craft: takes a --blend-ratio in [0, 1] (no auto ratio, schedule, "
                            "random pick or quotas)");
    rc = ra_craft_choose(st, req, kv, &ch);
    const double t0 = ra_wall_s();
    if (rc == RA_OK && (!(sel = malloc(sizeof *sel * (size_t)req->n)) ||
                        !(loads = calloc((size_t)req->n_chunks + 1, sizeof *loads))))
        rc = ra_error_set(RA_ENOMEM, "craft: out of memory");
    for (int c = 0; rc == RA_OK && c < req->n_chunks; c++)
        if (ch[c].chunk)
            loads[n_loads++] = (struct ra_blend_load){ .start = req->chunk_start[c], .n = req->chunk_len[c],
                                                       .shift = req->chunk_start[c] - ra_chunk_n_prefix(ch[c].chunk),
                                                       .read = chunk_read_whole, .src = ch[c].chunk };
    if (rc == RA_OK)
        rc = ra_craft_select(req, ch, NULL, cfg->ratio, sel, &n_sel);
    if (rc == RA_OK)
        rc = ra_blend_open(&e, ctx, req->ids, req->n, 0, req->n, loads, n_loads, cfg, kv);
    const double t_select = ra_wall_s() - t0, t1 = ra_wall_s();
    if (rc == RA_OK)
        rc = ra_blend_pass_b(e, sel, n_sel, logits);
    rep->t_pass_b = ra_wall_s() - t1;
    if (e)
        ra_blend_close(e, cfg->ratio, rep);
    rep->n_rows = req->n;
    rep->t_select = t_select;
    rep->hits = n_loads;
    rep->misses = req->n_chunks - n_loads;
    ra_craft_choices_free(ch, req->n_chunks);
    free(loads);
    free(sel);
    return rc;
}

/* ------------------------------------------------------------ storing variants */

int ra_craft_store_request(struct ra_store *st, struct ra_context *ctx, const struct ra_request *req)
{
    const struct ra_config *c = &ctx->model->config;
    const int C = req->n_chunks;
    int end = 0, rc;
    for (int i = 0; i < C; i++)
        end = req->chunk_start[i] + req->chunk_len[i];
    if (C == 0 || end < 1)
        return RA_OK;
    struct ra_kvcache kv;
    struct ra_craft_recorder *r = NULL;
    uint8_t(*base)[RA_STORE_HASH_BYTES] = calloc((size_t)C, sizeof *base);
    if (!base)
        return ra_error_set(RA_ENOMEM, "craft: out of memory");
    if ((rc = ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), end, st->id.kv_dtype)) !=
        RA_OK) {
        free(base);
        return rc;
    }
    for (int i = 0; i < C && rc == RA_OK; i++)
        rc = ra_store_chunk_key(st, req->ids, req->n_prefix, req->ids + req->chunk_start[i], req->chunk_len[i],
                                base[i]);
    if (rc == RA_OK)
        rc = ra_craft_recorder_new(&r, ctx, req->chunk_start, req->chunk_len, C);
    if (rc == RA_OK && (rc = ra_context_hook_add(ctx, ra_craft_recorder_hook(r))) == RA_OK) {
        rc = ra_forward_span(ctx, req->ids, 0, end, &kv, NULL);
        ra_context_hook_remove(ctx, ra_craft_recorder_hook(r));
    }
    for (int i = 0; i < C && rc == RA_OK; i++) {
        struct ra_craft_record rec;
        const int start = req->chunk_start[i], len = req->chunk_len[i];
        if ((rc = ra_craft_recorder_take(r, i, &rec)) != RA_OK)
            break;
        rec.n_lead = req->n_prefix;
        rec.n_context = start - req->n_prefix;
        rec.n_ctx_keys = i;
        memcpy(rec.base, base[i], RA_STORE_HASH_BYTES);
        free(rec.ctx_keys);
        rec.ctx_keys = NULL;
        if (i > 0 && !(rec.ctx_keys = malloc((size_t)i * RA_STORE_HASH_BYTES)))
            rc = ra_error_set(RA_ENOMEM, "craft: out of memory");
        else if (i > 0)
            memcpy(rec.ctx_keys, base, (size_t)i * RA_STORE_HASH_BYTES);
        if (rc == RA_OK)
            rc = ra_store_put_record(st, req->ids, start, req->ids + start, len, &kv, &rec);
        ra_craft_record_free(&rec);
    }
    ra_craft_recorder_free(r);
    ra_kvcache_free(&kv);
    free(base);
    return rc;
}
