/* Cache-Craft (src/reuse/craft.h).
 *
 * The plan, pure: ratio 1 takes every row and 0 the must rows only; alpha's
 * mean recompute fraction over the loaded rows meets the ratio (within a
 * row's rounding per chunk); a chunk whose stored context is present in
 * order gets less than one whose context is absent, out of order between the
 * two; a chunk without a record is never recomputed; within a chunk the rows
 * of highest context score are taken. The overlap by hand.
 *
 * Records: on a model whose queries are zero every softmax is uniform, so a
 * chunk row at position p behind a chunk start s has sink mass 1/(p+1) and
 * context mass (s-1)/(p+1) (the analytic reference); the masses sum to 1 on a
 * random model; the rows stored with the recorder on are the plain pass's
 * bit for bit. Through the store: records survive reopening; craft at ratio 1
 * is `none` and at ratio 0 `full`, bit for bit; a request stored under its
 * context (--store-write) makes variants that the next request finds and
 * prefers (its rows then within fp32 rounding of none at ratio 0); a
 * corrupted record is an error naming it; chunks without records (an older
 * store) load as full reuse. Eviction: on a trace of a hot set interleaved
 * with bursts of one-off chunks, the craft policy keeps more hits than LRU. */
#include "random_model.h"
#include "ra_core.h"
#include "reuse/blend.h"
#include "reuse/craft.h"
#include "reuse/store_impl.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[64] = "/tmp/ra_test_craft.XXXXXX";

/* ------------------------------------------------------------ the plan */

static void fake_record(struct ra_craft_record *r, int n, double cci, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->n_groups = 2;
    r->n_tokens = n;
    r->token_context = malloc(sizeof(float) * 2 * (size_t)n);
    for (int g = 0; g < 2; g++) {
        r->context[g] = (float)cci;
        r->self[g] = (float)(1 - cci);
        for (int t = 0; t < n; t++)
            r->token_context[g * n + t] = (float)((t * 7 + seed * 3) % 11) / 11.0f;
    }
}

static void check_overlap(void)
{
    uint8_t k[4][RA_STORE_HASH_BYTES];
    for (int i = 0; i < 4; i++)
        memset(k[i], i + 1, RA_STORE_HASH_BYTES);
    const uint8_t(*K)[RA_STORE_HASH_BYTES] = (const uint8_t(*)[RA_STORE_HASH_BYTES])k;
    uint8_t rev[2][RA_STORE_HASH_BYTES];
    memcpy(rev[0], k[1], RA_STORE_HASH_BYTES);
    memcpy(rev[1], k[0], RA_STORE_HASH_BYTES);
    const double same = ra_craft_overlap(K, 2, K, 2), none = ra_craft_overlap(K, 2, K + 2, 2),
                 order = ra_craft_overlap(K, 2, (const uint8_t(*)[RA_STORE_HASH_BYTES])rev, 2),
                 empty = ra_craft_overlap(K, 0, K, 0), extra = ra_craft_overlap(K, 2, K, 4),
                 alone = ra_craft_overlap(K, 0, K, 2);
    printf("overlap: same %.2f, absent %.2f, reversed %.2f (1.5/2), both empty %.2f, two more ahead %.2f, "
           "none stored %.2f\n", same, none, order, empty, extra, alone);
    CHECK(same == 1 && none == 0 && fabs(order - 0.75) < 1e-12 && empty == 1 && fabs(extra - 0.5) < 1e-12 &&
          alone == 0);
}

static void check_plan(void)
{
    enum { C = 4, LEN = 20, N = 3 + C * LEN + 2 };
    struct ra_craft_record rec[C];
    struct ra_craft_chunk ch[C];
    uint8_t must[N] = { 0 };
    for (int i = 0; i < 3; i++)
        must[i] = 1;
    must[N - 1] = must[N - 2] = 1;
    const double cci[C] = { 0.6, 0.6, 0.2, 0.9 }, ov[C] = { 1.0, 0.0, 0.0, 0.5 };
    for (int i = 0; i < C; i++) {
        fake_record(&rec[i], LEN, cci[i], (uint64_t)i);
        ch[i] = (struct ra_craft_chunk){ .start = 3 + i * LEN, .n = LEN, .rec = &rec[i], .overlap = ov[i] };
    }
    int32_t out[N];
    double frac[C], alpha;
    int n_out, ok = 1;
    CHECK_OK(ra_craft_plan(ch, C, must, N, 1.0, out, &n_out, frac, &alpha));
    CHECK(n_out == N);
    CHECK_OK(ra_craft_plan(ch, C, must, N, 0.0, out, &n_out, frac, &alpha));
    CHECK(n_out == 5 && out[0] == 0 && out[3] == N - 2);
    const double ratios[4] = { 0.05, 0.15, 0.4, 0.8 };
    for (int r = 0; r < 4; r++) {
        CHECK_OK(ra_craft_plan(ch, C, must, N, ratios[r], out, &n_out, frac, &alpha));
        const double mean = (double)(n_out - 5) / (C * LEN);
        double fmean = 0;
        for (int i = 0; i < C; i++)
            fmean += frac[i] / C;
        printf("plan at %.2f: alpha %.3g, fractions %.3f %.3f %.3f %.3f (mean %.4f), rows %.4f of the loaded\n",
               ratios[r], alpha, frac[0], frac[1], frac[2], frac[3], fmean, mean);
        ok &= fabs(fmean - ratios[r]) < 1e-6 && fabs(mean - ratios[r]) <= (double)C / (2.0 * C * LEN) + 1e-12;
        ok &= frac[0] < frac[3] && frac[3] <= frac[1] && frac[2] <= frac[1]; /* present context: least */
        for (int i = 1; i < n_out; i++)
            ok &= out[i] > out[i - 1];
    }
    CHECK(ok);
    /* within chunk 1: the rows of highest context score */
    CHECK_OK(ra_craft_plan(ch, C, must, N, 0.15, out, &n_out, frac, &alpha));
    int chosen_min = 99, other_max = -1;
    uint8_t in[N] = { 0 };
    for (int i = 0; i < n_out; i++)
        in[out[i]] = 1;
    for (int t = 0; t < LEN; t++) {
        const int s = (int)(ra_craft_token_score(&rec[1], t) * 11 + 0.5);
        if (in[ch[1].start + t])
            chosen_min = s < chosen_min ? s : chosen_min;
        else
            other_max = s > other_max ? s : other_max;
    }
    printf("plan: chunk 1's chosen rows score at least %d/11, the others at most %d/11\n", chosen_min, other_max);
    CHECK(chosen_min >= other_max && chosen_min < 99);
    /* a chunk without a record: never recomputed below ratio 1 */
    ch[1].rec = NULL;
    CHECK_OK(ra_craft_plan(ch, C, must, N, 0.5, out, &n_out, frac, &alpha));
    int in1 = 0;
    for (int i = 0; i < n_out; i++)
        in1 += out[i] >= ch[1].start && out[i] < ch[1].start + LEN;
    CHECK(in1 == 0 && frac[1] == 0);
    CHECK(ra_craft_plan(ch, C, must, N, 1.5, out, &n_out, NULL, NULL) == RA_EINVAL);
    for (int i = 0; i < C; i++)
        ra_craft_record_free(&rec[i]);
}

/* ------------------------------------------------------------ through the store */

struct result {
    float *logits;
    uint8_t *kv;
    size_t kv_bytes;
    struct ra_reuse_report rep;
};

static void drop(struct result *r)
{
    free(r->logits);
    free(r->kv);
    ra_reuse_report_free(&r->rep);
}

static int prefill(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req, enum ra_reuse_mode mode,
                   const struct ra_reuse_config *cfg, struct result *r)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_kvcache kv;
    memset(r, 0, sizeof *r);
    r->logits = calloc((size_t)c->vocab_size, sizeof(float));
    CHECK_OK(ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), req->n, RA_DTYPE_F32));
    int rc = ra_reuse_prefill(ctx, st, req, mode, cfg, &kv, r->logits, &r->rep);
    const size_t layer = (size_t)req->n * ra_kvcache_row_bytes(&kv);
    r->kv_bytes = 2 * layer * (size_t)c->n_layers;
    r->kv = malloc(r->kv_bytes);
    for (int l = 0; rc == RA_OK && l < c->n_layers; l++) {
        CHECK_OK(kv.backend->ops->download(kv.backend, r->kv + 2 * l * layer, kv.k[l], layer));
        CHECK_OK(kv.backend->ops->download(kv.backend, r->kv + (2 * l + 1) * layer, kv.v[l], layer));
    }
    ra_kvcache_free(&kv);
    return rc;
}

static int same(const struct result *a, const struct result *b, int V)
{
    return a->kv_bytes == b->kv_bytes && memcmp(a->kv, b->kv, a->kv_bytes) == 0 &&
           memcmp(a->logits, b->logits, sizeof(float) * (size_t)V) == 0;
}

static double logits_diff(const struct result *a, const struct result *b, int V)
{
    double w = 0;
    for (int i = 0; i < V; i++)
        w = fmax(w, fabs((double)a->logits[i] - b->logits[i]));
    return w;
}

static struct ra_store *open_store(struct ra_context *ctx, const char *name, uint64_t capacity)
{
    char dir[160];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    struct ra_store_identity id = { .kv_dtype = RA_DTYPE_F32 };
    struct ra_store *st = NULL;
    CHECK_OK(ra_store_model_identity(ctx->model, id.model));
    CHECK_OK(ra_store_vocab_identity(NULL, id.tokenizer));
    CHECK_OK(ra_store_open(&st, dir, ctx->model, &id, capacity, RA_STORE_CREATE));
    return st;
}

/* A request: prefix NP, chunks LENS[n], a suffix of 3. */
struct req {
    int32_t ids[256];
    int starts[8], lens[8];
    struct ra_request r;
};

static void make_req(struct req *q, const struct ra_config *c, int np, const int *lens, int n, const int32_t *chunk_ids)
{
    memset(q, 0, sizeof *q);
    int at = 0;
    for (int i = 0; i < np; i++)
        q->ids[at++] = (int32_t)(i * 5 + 1) % c->vocab_size;
    int from = 0;
    for (int k = 0; k < n; k++) {
        q->starts[k] = at, q->lens[k] = lens[k];
        for (int i = 0; i < lens[k]; i++)
            q->ids[at++] = chunk_ids[from++];
    }
    for (int i = 0; i < 3; i++)
        q->ids[at++] = (int32_t)(i * 13 + 7) % c->vocab_size;
    q->r = (struct ra_request){ .ids = q->ids, .n = at, .n_prefix = np, .n_chunks = n, .chunk_start = q->starts,
                                .chunk_len = q->lens, .suffix_start = at - 3 };
}

/* Uniform attention (zero queries): the records by the formula. */
static void check_uniform_records(const struct ra_model *m)
{
    struct ra_backend *be;
    struct ra_context ctx;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    CHECK_OK(ra_context_init(&ctx, m, be));
    struct ra_store *st = open_store(&ctx, "uniform", 0);
    const int np = 5, n = 6;
    int32_t prefix[5] = { 1, 2, 3, 4, 5 }, tok[6] = { 9, 8, 7, 6, 5, 4 };
    CHECK_OK(ra_store_add(st, &ctx, prefix, np, tok, n));
    struct ra_chunk **vc;
    struct ra_craft_record *vr;
    int *vh, nv = 0;
    CHECK_OK(ra_craft_variants(st, prefix, np, tok, n, &vc, &vr, &vh, &nv));
    double worst = 0, want_ctx = 0, want_sink = 0;
    for (int t = 0; t < n; t++) {
        const int p = np + t;
        want_sink += 1.0 / (p + 1) / n;
        want_ctx += (double)(np - 1) / (p + 1) / n;
    }
    if (nv == 1 && vh[0]) {
        for (int g = 0; g < vr[0].n_groups; g++) {
            worst = fmax(worst, fabs(vr[0].sink[g] - want_sink));
            worst = fmax(worst, fabs(vr[0].context[g] - want_ctx));
            for (int t = 0; t < n; t++)
                worst = fmax(worst, fabs(vr[0].token_context[g * n + t] - (double)(np - 1) / (np + t + 1)));
        }
    }
    printf("records under uniform attention: %d variant(s), masses and token scores within %.2g of the formula\n", nv,
           worst);
    CHECK(nv == 1 && vh[0] && worst < 1e-5);
    ra_craft_variants_free(vc, vr, vh, nv);
    ra_store_close(st);
    ra_context_free(&ctx);
    ra_backend_free(be);
}

/* The store, the mode, variants, records on disk. */
static void check_store(const struct ra_model *m)
{
    struct ra_backend *be;
    struct ra_context ctx;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    CHECK_OK(ra_context_init(&ctx, m, be));
    const struct ra_config *c = &m->config;
    const int V = c->vocab_size, lens[3] = { 9, 12, 7 };
    int32_t chunk_ids[28];
    for (int i = 0; i < 28; i++)
        chunk_ids[i] = test_rand_int(0, V - 1);
    struct req q;
    make_req(&q, c, 3, lens, 3, chunk_ids);
    struct ra_store *st = open_store(&ctx, "mode", 0);
    for (int k = 0; k < 3; k++)
        CHECK_OK(ra_store_add(st, &ctx, q.ids, 3, q.ids + q.starts[k], lens[k]));
    /* the rows the recorder watched are the plain pass's */
    {
        struct ra_kvcache kv;
        struct ra_chunk *ch = NULL;
        int32_t alone[64];
        memcpy(alone, q.ids, 3 * sizeof *alone);
        memcpy(alone + 3, q.ids + q.starts[1], (size_t)lens[1] * sizeof *alone);
        CHECK_OK(ra_kvcache_init_dtype(&kv, be, c->n_layers, ra_config_kv_dim(c), 3 + lens[1], RA_DTYPE_F32));
        CHECK_OK(ra_forward_span(&ctx, alone, 0, 3, &kv, NULL));
        CHECK_OK(ra_forward_span(&ctx, alone + 3, 3, lens[1], &kv, NULL));
        CHECK_OK(ra_store_get(st, q.ids, 3, q.ids + q.starts[1], lens[1], &ch));
        int eq = ch != NULL;
        const size_t bytes = (size_t)lens[1] * ra_kvcache_row_bytes(&kv);
        for (int l = 0; eq && l < c->n_layers; l++) {
            const void *k, *v;
            CHECK_OK(ra_chunk_layer(ch, l, &k, &v));
            eq = memcmp(k, ra_kvcache_k(&kv, l, 3), bytes) == 0 && memcmp(v, ra_kvcache_v(&kv, l, 3), bytes) == 0;
        }
        printf("store: rows added with the recorder on equal the plain pass's bit for bit: %s\n", eq ? "ok" : "FAIL");
        CHECK(eq);
        ra_chunk_close(ch);
        ra_kvcache_free(&kv);
    }
    /* masses sum to 1; records survive reopening */
    struct ra_chunk **vc;
    struct ra_craft_record *vr;
    int *vh, nv = 0;
    ra_store_close(st);
    st = open_store(&ctx, "mode", 0);
    CHECK_OK(ra_craft_variants(st, q.ids, 3, q.ids + q.starts[2], lens[2], &vc, &vr, &vh, &nv));
    double sum_err = 0;
    for (int g = 0; nv == 1 && vh[0] && g < vr[0].n_groups; g++)
        sum_err = fmax(sum_err, fabs(vr[0].sink[g] + vr[0].context[g] + vr[0].self[g] - 1));
    printf("store: after reopening, chunk 2 has %d variant with a record (%d), cci %.3f, masses sum to 1 within %.2g\n",
           nv, nv ? vh[0] : 0, nv && vh[0] ? ra_craft_cci(&vr[0]) : -1.0, sum_err);
    CHECK(nv == 1 && vh[0] && sum_err < 1e-5 && vr[0].n_groups == (c->n_layers < 4 ? c->n_layers : 4));
    ra_craft_variants_free(vc, vr, vh, nv);

    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    struct result none, full, c0, c1, ch;
    CHECK_OK(prefill(&ctx, NULL, &q.r, RA_REUSE_NONE, NULL, &none));
    CHECK_OK(prefill(&ctx, st, &q.r, RA_REUSE_FULL, &cfg, &full));
    cfg.ratio = 1;
    CHECK_OK(prefill(&ctx, st, &q.r, RA_REUSE_CRAFT, &cfg, &c1));
    cfg.ratio = 0;
    CHECK_OK(prefill(&ctx, st, &q.r, RA_REUSE_CRAFT, &cfg, &c0));
    cfg.ratio = 0.3;
    CHECK_OK(prefill(&ctx, st, &q.r, RA_REUSE_CRAFT, &cfg, &ch));
    const int eq = c1.rep.hits == 3 && same(&c1, &none, V) && same(&c0, &full, V) && !same(&full, &none, V);
    printf("craft: ratio 1 == none, ratio 0 == full, bit for bit (%d hits): %s; at 0.3 it recomputes %d of %d rows, "
           "logits %.3g from none (full %.3g)\n", c1.rep.hits, eq ? "ok" : "FAIL", ch.rep.recomputed[c->n_layers - 1],
           q.r.n, logits_diff(&ch, &none, V), logits_diff(&full, &none, V));
    CHECK(eq);
    const int want = 3 + 3 + (int)lround(0.3 * 9) + (int)lround(0.3 * 12) + (int)lround(0.3 * 7); /* +-1 a chunk */
    CHECK(abs(ch.rep.recomputed[c->n_layers - 1] - want) <= 3);

    /* a request stored under its context: variants, found and preferred */
    cfg.store_write = 1;
    struct result w;
    cfg.ratio = 0;
    CHECK_OK(prefill(&ctx, st, &q.r, RA_REUSE_CRAFT, &cfg, &w));
    cfg.store_write = 0;
    nv = 0;
    CHECK_OK(ra_craft_variants(st, q.ids, 3, q.ids + q.starts[1], lens[1], &vc, &vr, &vh, &nv));
    const int two = nv == 2 && vh[1] && vr[1].n_ctx_keys == 1 && vr[1].n_context == lens[0];
    ra_craft_variants_free(vc, vr, vh, nv);
    struct result v0;
    CHECK_OK(prefill(&ctx, st, &q.r, RA_REUSE_CRAFT, &cfg, &v0));
    printf("variants: chunk 1 has %d (its context's record: %s); at ratio 0 the variants under the request's own "
           "context give logits %.3g from none (the base variants: %.3g)\n", nv, two ? "ok" : "FAIL",
           logits_diff(&v0, &none, V), logits_diff(&c0, &none, V));
    CHECK(two && logits_diff(&v0, &none, V) < 1e-4 && logits_diff(&c0, &none, V) > 1e-3);
    /* chunks 2 and 0 alone: chunk 2's base variant (no context) is cheaper than the one computed behind 0, 1 */
    {
        struct req r2;
        int32_t ids2[16];
        const int l2[2] = { 7, 9 };
        memcpy(ids2, chunk_ids + 21, 7 * sizeof *ids2);
        memcpy(ids2 + 7, chunk_ids, 9 * sizeof *ids2);
        make_req(&r2, c, 3, l2, 2, ids2);
        struct result o0, ofull;
        CHECK_OK(prefill(&ctx, st, &r2.r, RA_REUSE_CRAFT, &cfg, &o0));
        CHECK_OK(prefill(&ctx, st, &r2.r, RA_REUSE_FULL, &cfg, &ofull));
        const int base_used = same(&o0, &ofull, V);
        printf("variants: chunk 2 moved first takes its base variant (ratio 0 == full): %s\n", base_used ? "ok" : "FAIL");
        CHECK(base_used);
        drop(&o0), drop(&ofull);
    }

    /* a corrupted record: an error naming it */
    struct ra_chunk *chunk = NULL;
    CHECK_OK(ra_store_get(st, q.ids, 3, q.ids + q.starts[0], lens[0], &chunk));
    char *rpath = chunk ? ra_craft_record_path(ra_chunk_path(chunk)) : NULL;
    ra_chunk_close(chunk);
    FILE *f = rpath ? fopen(rpath, "r+b") : NULL;
    CHECK(f != NULL);
    if (f) {
        unsigned char b = 0;
        CHECK(fseek(f, 70, SEEK_SET) == 0 && fread(&b, 1, 1, f) == 1);
        b ^= 0x21;
        CHECK(fseek(f, 70, SEEK_SET) == 0 && fwrite(&b, 1, 1, f) == 1);
        fclose(f);
    }
    struct result bad;
    int rc = prefill(&ctx, st, &q.r, RA_REUSE_CRAFT, &cfg, &bad);
    printf("a corrupted record: %s\n", rc != RA_OK ? ra_error_message() : "NO ERROR");
    CHECK(rc == RA_EFORMAT && rpath && strstr(ra_error_message(), rpath) != NULL);
    drop(&bad);
    free(rpath);
    ra_store_close(st);

    /* an older store: chunk files without records load as full reuse */
    st = open_store(&ctx, "old", 0);
    for (int k = 0; k < 3; k++) {
        struct ra_chunk *x = NULL;
        CHECK_OK(ra_store_add(st, &ctx, q.ids, 3, q.ids + q.starts[k], lens[k]));
        CHECK_OK(ra_store_get(st, q.ids, 3, q.ids + q.starts[k], lens[k], &x));
        char *p = x ? ra_craft_record_path(ra_chunk_path(x)) : NULL;
        CHECK(p && unlink(p) == 0);
        free(p);
        ra_chunk_close(x);
    }
    struct result old;
    cfg.ratio = 0.5;
    CHECK_OK(prefill(&ctx, st, &q.r, RA_REUSE_CRAFT, &cfg, &old));
    printf("chunks without records at ratio 0.5: %d hits, == full bit for bit: %s\n", old.rep.hits,
           same(&old, &full, V) ? "ok" : "FAIL");
    CHECK(old.rep.hits == 3 && same(&old, &full, V));
    drop(&old);
    ra_store_close(st);
    drop(&none), drop(&full), drop(&c0), drop(&c1), drop(&ch), drop(&w), drop(&v0);
    ra_context_free(&ctx);
    ra_backend_free(be);
}

/* ------------------------------------------------------------ eviction */

/* ROUNDS of: the hot chunks H0..H2 twice, then BURST one-off chunks; a store
 * of room for 5. LRU keeps the hot set from one round to the next only where
 * the burst is shorter than the room; the craft policy weighs the hot
 * chunks' uses. Returns the hits. */
static int trace_hits(struct ra_context *ctx, enum ra_store_policy policy, int rounds)
{
    enum { LEN = 8, HOT = 3, BURST = 4 };
    const struct ra_config *c = &ctx->model->config;
    char name[32];
    snprintf(name, sizeof name, "trace-%d", (int)policy);
    int32_t prefix[1] = { 1 }, tok[LEN];
    struct ra_store *st = open_store(ctx, name, 0);
    if (!st)
        return -1;
    /* one chunk's size: the capacity holds five */
    for (int i = 0; i < LEN; i++)
        tok[i] = 7;
    CHECK_OK(ra_store_add(st, ctx, prefix, 1, tok, LEN));
    struct ra_store_entry *e = NULL;
    int n = 0;
    CHECK_OK(ra_store_list(st, &e, &n));
    const uint64_t one = n == 1 ? e[0].bytes : 0;
    free(e);
    CHECK_OK(ra_store_evict(st, 0, NULL));
    ra_store_close(st);
    st = open_store(ctx, name, 5 * one);
    ra_store_set_policy(st, policy);
    int hits = 0, cold = 0;
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < 2 * HOT + BURST; j++) {
            const int id = j < 2 * HOT ? j % HOT : HOT + cold++;
            for (int i = 0; i < LEN; i++)
                tok[i] = (int32_t)((id * 31 + i * 17 + 3) % c->vocab_size);
            struct ra_chunk *ch = NULL;
            CHECK_OK(ra_store_get(st, prefix, 1, tok, LEN, &ch));
            if (ch)
                hits++, ra_chunk_close(ch);
            else
                CHECK_OK(ra_store_add(st, ctx, prefix, 1, tok, LEN));
        }
    ra_store_close(st);
    return hits;
}

static void check_eviction(const struct ra_model *m)
{
    struct ra_backend *be;
    struct ra_context ctx;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    CHECK_OK(ra_context_init(&ctx, m, be));
    const int rounds = 12, lru = trace_hits(&ctx, RA_STORE_EVICT_LRU, rounds),
              craft = trace_hits(&ctx, RA_STORE_EVICT_CRAFT, rounds);
    printf("eviction: %d rounds of 3 hot chunks twice and 4 one-off ones through a store of 5: LRU %d hits, "
           "craft %d (at most %d)\n", rounds, lru, craft, 3 + 6 * (rounds - 1));
    CHECK(lru >= 0 && craft > lru && craft >= 6 * (rounds - 1));
    enum ra_store_policy p;
    CHECK(ra_store_policy_parse("craft", NULL, &p) == RA_OK && p == RA_STORE_EVICT_CRAFT);
    CHECK(ra_store_policy_parse("lfu", "--policy", &p) == RA_EINVAL);
    ra_context_free(&ctx);
    ra_backend_free(be);
}

int main(void)
{
    test_rand_seed(23);
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    check_overlap();
    check_plan();
    struct ra_model m;
    struct ra_config cfg = { .dim = 64, .hidden_dim = 160, .n_layers = 6, .n_heads = 4, .n_kv_heads = 2,
                             .vocab_size = 211, .seq_len = 256, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    test_random_model(&m, &cfg, RA_DTYPE_F32, 0.0f);
    check_uniform_records(&m);
    ra_model_free(&m);
    test_random_model(&m, &cfg, RA_DTYPE_F32, 2.0f);
    check_store(&m);
    check_eviction(&m);
    ra_model_free(&m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "test_craft: could not remove %s\n", root);
    return test_result("test_craft");
}
