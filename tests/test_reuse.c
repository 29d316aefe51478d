/* The reuse engine (src/reuse/reuse.h, blend.h).
 *
 * RoPE shift algebra in both conventions: K rotated at p and shifted by d is
 * K rotated at p + d (fp32 rounding), q·k depends only on the offset, and a
 * shift of 0 leaves the rows bit for bit. The selection is deterministic,
 * keeps every must row, breaks ties by index and is nested across ratios.
 * Over chunks computed in isolation behind a prefix (each chunk's rows made
 * here by a plain pass, the store's job): blend at ratio 1 is `none` bit for
 * bit (logits and every layer's K and V, f32 and bf16 caches) and at ratio 0
 * is `full` bit for bit; recomputed rows per layer follow the formula (with
 * and without a schedule); a chunk at the position it was computed at gives
 * `prefix` and `blend` at any ratio within fp32 rounding of `none`; a missing
 * chunk's rows are computed; a failing read is an error naming the chunk; the
 * loader behind an emulated store bandwidth takes at least bytes / bandwidth;
 * the auto ratio is at least RA_BLEND_MIN_RATIO. Through the chunk store
 * (ra_reuse_prefill): a first run adds its misses (--store-write) and the
 * equalities hold over the stored chunks; prefix stores chunks behind their
 * exact context and finds them; a deleted chunk file is a miss, a corrupted
 * one an error naming the file. */
#include "half.h"
#include "random_model.h"
#include "ra_core.h"
#include "reuse/blend.h"
#include "reuse/store_impl.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ RoPE shift */

static void check_rope_shift(enum ra_rope_style style)
{
    enum { N = 5, HEADS = 3, HD = 16 };
    const int ld = HEADS * HD;
    struct ra_backend *be;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    const struct ra_rope rope = { 10000.0f, style, NULL };
    float x[N * HEADS * HD], a[N * HEADS * HD], b[N * HEADS * HD], q[N * HEADS * HD], qa[N * HEADS * HD];
    for (int i = 0; i < N * ld; i++)
        x[i] = test_frand(), q[i] = test_frand();
    double worst = 0, dot_worst = 0;
    const int p = 7, shifts[3] = { 13, -5, 200 };
    for (int s = 0; s < 3; s++) {
        memcpy(a, x, sizeof x);
        memcpy(b, x, sizeof x);
        const struct ra_rows at_p = { N, p, NULL }, at_q = { N, p + shifts[s], NULL };
        CHECK_OK(be->ops->rope(be, a, ld, &at_p, HEADS, HD, &rope));
        CHECK_OK(be->ops->rope_shift(be, a, RA_DTYPE_F32, ld, N, HEADS, HD, shifts[s], &rope));
        CHECK_OK(be->ops->rope(be, b, ld, &at_q, HEADS, HD, &rope));
        for (int i = 0; i < N * ld; i++)
            worst = fmax(worst, fabs((double)a[i] - b[i]));
        /* q at position p + shift + 3 against k at p + shift (a) and at p (the unshifted k): the same score */
        memcpy(qa, q, sizeof q);
        const struct ra_rows qs = { N, p + shifts[s] + 3, NULL }, q0 = { N, p + 3, NULL };
        float k0[N * HEADS * HD], qb[N * HEADS * HD];
        memcpy(k0, x, sizeof x);
        memcpy(qb, q, sizeof q);
        CHECK_OK(be->ops->rope(be, qa, ld, &qs, HEADS, HD, &rope));
        CHECK_OK(be->ops->rope(be, k0, ld, &at_p, HEADS, HD, &rope));
        CHECK_OK(be->ops->rope(be, qb, ld, &q0, HEADS, HD, &rope));
        for (int i = 0; i < N * HEADS; i++) {
            double d1 = 0, d0 = 0;
            for (int j = 0; j < HD; j++)
                d1 += (double)qa[i * HD + j] * a[i * HD + j], d0 += (double)qb[i * HD + j] * k0[i * HD + j];
            dot_worst = fmax(dot_worst, fabs(d1 - d0));
        }
    }
    memcpy(a, x, sizeof x);
    CHECK_OK(be->ops->rope_shift(be, a, RA_DTYPE_F32, ld, N, HEADS, HD, 0, &rope));
    const int zero_exact = memcmp(a, x, sizeof x) == 0;
    printf("rope_shift, %s pairs: shifted K equals K at the new position within %.2g, q.k within %.2g, shift 0 "
           "%s\n", ra_rope_style_name(style), worst, dot_worst, zero_exact ? "bit for bit" : "CHANGES THE ROWS");
    CHECK(worst < 1e-5 && dot_worst < 1e-4 && zero_exact);
    ra_backend_free(be);
}

/* ------------------------------------------------------------ selection */

static int contains(const int32_t *set, int n, int32_t x)
{
    for (int i = 0; i < n; i++)
        if (set[i] == x)
            return 1;
    return 0;
}

static void check_select(void)
{
    /* rows 0 and 9 must; ties: 2, 4, 6 at 5.0 (taken in that order), 1 and 8 at 1.0 */
    const float dev[10] = { 0, 1, 5, 3, 5, 0.5f, 5, 4, 1, 0 };
    const uint8_t must[10] = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 1 };
    int32_t out[10];
    int n_out = -1;
    CHECK_OK(ra_blend_select(dev, must, 10, 0.25, out, &n_out)); /* round(0.25 * 8) = 2 */
    CHECK(n_out == 4 && out[0] == 0 && out[1] == 2 && out[2] == 4 && out[3] == 9);
    CHECK_OK(ra_blend_select(dev, must, 10, 0.0, out, &n_out));
    CHECK(n_out == 2 && out[0] == 0 && out[1] == 9);
    CHECK_OK(ra_blend_select(dev, must, 10, 1.0, out, &n_out));
    CHECK(n_out == 10);
    CHECK(ra_blend_select(dev, must, 10, 1.5, out, &n_out) == RA_EINVAL);
    CHECK(ra_blend_select(dev, must, 10, -0.1, out, &n_out) == RA_EINVAL);

    /* random deviations with many ties: nested across ratios, counts as the formula, deterministic */
    enum { N = 97 };
    float d[N];
    uint8_t m[N];
    int others = 0;
    for (int i = 0; i < N; i++) {
        d[i] = (float)test_rand_int(0, 9);
        m[i] = test_rand_int(0, 6) == 0;
        others += !m[i];
    }
    int32_t prev[N], cur[N], again[N];
    int n_prev = 0, nested = 1, counts = 1, same = 1, ascending = 1;
    for (int s = 0; s <= 20; s++) {
        int n_cur, n_again;
        CHECK_OK(ra_blend_select(d, m, N, s / 20.0, cur, &n_cur));
        CHECK_OK(ra_blend_select(d, m, N, s / 20.0, again, &n_again));
        same &= n_cur == n_again && memcmp(cur, again, sizeof *cur * (size_t)n_cur) == 0;
        counts &= n_cur == (N - others) + (int)lround(s / 20.0 * others);
        for (int i = 0; i < n_prev; i++)
            nested &= contains(cur, n_cur, prev[i]);
        for (int i = 1; i < n_cur; i++)
            ascending &= cur[i] > cur[i - 1];
        for (int i = 0; i < N; i++)
            nested &= !m[i] || contains(cur, n_cur, i);
        memcpy(prev, cur, sizeof *cur * (size_t)n_cur);
        n_prev = n_cur;
    }
    printf("selection: ties to the lower index, must rows always, counts round(ratio x others) + must, nested "
           "across 21 ratios, deterministic: %s\n", nested && counts && same && ascending ? "ok" : "FAIL");
    CHECK(nested && counts && same && ascending);
}

/* ------------------------------------------------------------ the engine over hand-made chunks */

enum { MAX_CHUNKS = 4, MAX_LAYERS = 8 };

/* A chunk's rows as the store would hold them: computed behind the prefix, per layer. */
struct hand_chunk {
    void *k[MAX_LAYERS], *v[MAX_LAYERS];
    int layers;
    int fail_layer; /* read fails there; -1: never */
};

static int hand_read(void *src, int layer, const void **k, const void **v)
{
    struct hand_chunk *h = src;
    if (layer == h->fail_layer)
        return ra_error_set(RA_EFORMAT, "hand chunk: layer %d's checksum does not match", layer);
    *k = h->k[layer];
    *v = h->v[layer];
    return RA_OK;
}

/* A prompt: prefix [0, np), chunks, suffix; each chunk also computed alone behind the prefix. */
struct prompt {
    int32_t ids[256];
    int n, np, n_chunks, start[MAX_CHUNKS], len[MAX_CHUNKS];
    struct hand_chunk ch[MAX_CHUNKS];
};

static void make_prompt(struct prompt *p, struct ra_context *ctx, enum ra_dtype dt, int np, const int *lens,
                        int n_chunks, int n_suffix)
{
    const struct ra_config *c = &ctx->model->config;
    memset(p, 0, sizeof *p);
    p->np = np;
    p->n_chunks = n_chunks;
    int at = 0;
    for (int i = 0; i < np; i++)
        p->ids[at++] = test_rand_int(0, c->vocab_size - 1);
    for (int k = 0; k < n_chunks; k++) {
        p->start[k] = at, p->len[k] = lens[k];
        for (int i = 0; i < lens[k]; i++)
            p->ids[at++] = test_rand_int(0, c->vocab_size - 1);
    }
    for (int i = 0; i < n_suffix; i++)
        p->ids[at++] = test_rand_int(0, c->vocab_size - 1);
    p->n = at;
    int32_t alone[256];
    memcpy(alone, p->ids, sizeof *alone * (size_t)np);
    for (int k = 0; k < n_chunks; k++) {
        struct ra_kvcache kv;
        const int len = lens[k];
        memcpy(alone + np, p->ids + p->start[k], sizeof *alone * (size_t)len);
        CHECK_OK(ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), np + len, dt));
        CHECK_OK(ra_forward_span(ctx, alone, 0, np + len, &kv, NULL));
        const size_t bytes = (size_t)len * ra_kvcache_row_bytes(&kv);
        p->ch[k].layers = c->n_layers;
        p->ch[k].fail_layer = -1;
        for (int l = 0; l < c->n_layers; l++) {
            p->ch[k].k[l] = malloc(bytes);
            p->ch[k].v[l] = malloc(bytes);
            CHECK_OK(ctx->backend->ops->download(ctx->backend, p->ch[k].k[l], ra_kvcache_k(&kv, l, np), bytes));
            CHECK_OK(ctx->backend->ops->download(ctx->backend, p->ch[k].v[l], ra_kvcache_v(&kv, l, np), bytes));
        }
        ra_kvcache_free(&kv);
    }
}

static void free_prompt(struct prompt *p)
{
    for (int k = 0; k < p->n_chunks; k++)
        for (int l = 0; l < p->ch[k].layers; l++)
            free(p->ch[k].k[l]), free(p->ch[k].v[l]);
}

/* The loads of P's chunks but those in SKIP (a mask). */
static int loads_of(struct prompt *p, unsigned skip, struct ra_blend_load *loads)
{
    int n = 0;
    for (int k = 0; k < p->n_chunks; k++)
        if (!(skip >> k & 1))
            loads[n++] = (struct ra_blend_load){ .start = p->start[k], .n = p->len[k], .shift = p->start[k] - p->np,
                                                 .read = hand_read, .src = &p->ch[k] };
    return n;
}

/* How far logits computed with other row counts may be: fp32 rounding (a GEMM over other rows may sum
 * in another order), which in a bf16 cache can flip a value's rounding (one bf16 ulp, 2^-8) and show
 * downstream as ~1e-3. A wrong row, position or mask is of order 1e-1 (full against none). */
static double tol(enum ra_dtype dt)
{
    return dt == RA_DTYPE_BF16 ? 1e-2 : 1e-4;
}

/* A result: the logits and every layer's K and V rows on the host. */
struct result {
    float *logits;
    uint8_t *kv;
    size_t kv_bytes;
    struct ra_reuse_report rep;
};

static void take(struct result *r, const struct ra_kvcache *kv, int n, int V, const float *logits)
{
    const size_t layer = (size_t)n * ra_kvcache_row_bytes(kv);
    r->kv_bytes = 2 * layer * (size_t)kv->n_layers;
    r->kv = malloc(r->kv_bytes);
    r->logits = malloc(sizeof(float) * (size_t)V);
    memcpy(r->logits, logits, sizeof(float) * (size_t)V);
    for (int l = 0; l < kv->n_layers; l++) {
        CHECK_OK(kv->backend->ops->download(kv->backend, r->kv + 2 * l * layer, kv->k[l], layer));
        CHECK_OK(kv->backend->ops->download(kv->backend, r->kv + (2 * l + 1) * layer, kv->v[l], layer));
    }
}

static void drop(struct result *r)
{
    free(r->logits);
    free(r->kv);
    ra_reuse_report_free(&r->rep);
}

/* One run: none (loads NULL) or MODE over LOADS. */
static int run(struct ra_context *ctx, struct prompt *p, enum ra_dtype dt, enum ra_reuse_mode mode,
               const struct ra_blend_load *loads, int n_loads, const struct ra_reuse_config *cfg, struct result *r)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_kvcache kv;
    float *logits = calloc((size_t)c->vocab_size, sizeof(float));
    memset(r, 0, sizeof *r);
    CHECK_OK(ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), p->n, dt));
    int rc = mode == RA_REUSE_NONE ? ra_forward_span(ctx, p->ids, 0, p->n, &kv, logits)
                                   : ra_blend_prefill(ctx, p->ids, p->n, loads, n_loads, mode, cfg, &kv, logits, &r->rep);
    if (rc == RA_OK)
        take(r, &kv, p->n, c->vocab_size, logits);
    ra_kvcache_free(&kv);
    free(logits);
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

/* Ratio 1 == none, ratio 0 == full, bit for bit; recomputed rows per layer. */
static void check_equalities(struct ra_context *ctx, enum ra_dtype dt)
{
    const struct ra_config *c = &ctx->model->config;
    const int V = c->vocab_size, L = c->n_layers, lens[3] = { 11, 7, 13 };
    struct prompt p;
    make_prompt(&p, ctx, dt, 3, lens, 3, 5);
    struct ra_blend_load loads[MAX_CHUNKS];
    const int nl = loads_of(&p, 0, loads);
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    struct result none, full, b0, b1, b3;
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_NONE, NULL, 0, NULL, &none));
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_FULL, loads, nl, &cfg, &full));
    cfg.ratio = 1;
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_BLEND, loads, nl, &cfg, &b1));
    cfg.ratio = 0;
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_BLEND, loads, nl, &cfg, &b0));
    cfg.ratio = 0.3;
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_BLEND, loads, nl, &cfg, &b3));
    const int one_none = same(&b1, &none, V), zero_full = same(&b0, &full, V);
    printf("%s KV: blend at ratio 1 %s none, at ratio 0 %s full (logits and every layer's K and V); full differs "
           "from none by %.3g, blend 0.3 by %.3g\n", ra_dtype_name(dt), one_none ? "==" : "!=",
           zero_full ? "==" : "!=", logits_diff(&full, &none, V), logits_diff(&b3, &none, V));
    CHECK(one_none && zero_full);
    CHECK(!same(&full, &none, V)); /* the test can tell: chunks moved and without their context differ */

    /* recomputed rows: check layers all, then round(ratio x loaded) + must */
    const int loaded = lens[0] + lens[1] + lens[2], must = p.n - loaded;
    int formula = b3.rep.n_layers == L && full.rep.loaded_rows == loaded && b3.rep.ratio == 0.3;
    for (int l = 0; l < L; l++) {
        formula &= b3.rep.recomputed[l] == (l <= 1 ? p.n : must + (int)lround(0.3 * loaded));
        formula &= full.rep.recomputed[l] == must && b1.rep.recomputed[l] == p.n;
    }
    formula &= full.rep.bytes_loaded == 2LL * loaded * L * (int64_t)ra_kv_row_bytes(ra_config_kv_dim(c), dt);

    /* a schedule: layer 2 at 0.5, layer 3 at 0.2, then 0.2 */
    const double sched[2] = { 0.5, 0.2 };
    cfg.schedule = sched, cfg.n_schedule = 2;
    struct result bs;
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_BLEND, loads, nl, &cfg, &bs));
    for (int l = 0; l < L; l++)
        formula &= bs.rep.recomputed[l] == (l <= 1 ? p.n : must + (int)lround((l == 2 ? 0.5 : 0.2) * loaded));
    printf("%s KV: recomputed rows per layer (ratio 0.3: %d %d %d %d; schedule 0.5, 0.2: %d %d %d %d) equal the "
           "formula: %s\n", ra_dtype_name(dt), b3.rep.recomputed[0], b3.rep.recomputed[1], b3.rep.recomputed[2],
           b3.rep.recomputed[3], bs.rep.recomputed[0], bs.rep.recomputed[1], bs.rep.recomputed[2],
           bs.rep.recomputed[3], formula ? "ok" : "FAIL");
    CHECK(formula);
    drop(&bs);

    /* a missing chunk: its rows computed; ratio 1 is still none */
    struct result miss1;
    const int nm = loads_of(&p, 2, loads);
    cfg.schedule = NULL, cfg.n_schedule = 0, cfg.ratio = 1;
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_BLEND, loads, nm, &cfg, &miss1));
    cfg.ratio = 0;
    struct result miss0;
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_BLEND, loads, nm, &cfg, &miss0));
    const int miss_ok = same(&miss1, &none, V) && miss0.rep.recomputed[L - 1] == must + lens[1] &&
                        miss0.rep.loaded_rows == loaded - lens[1];
    printf("%s KV: a missing chunk's rows are must rows, ratio 1 still == none: %s\n", ra_dtype_name(dt),
           miss_ok ? "ok" : "FAIL");
    CHECK(miss_ok);
    drop(&miss1), drop(&miss0);
    drop(&none), drop(&full), drop(&b0), drop(&b1), drop(&b3);
    free_prompt(&p);
}

/* A load clipped to a slice: rows [skip, skip+n) of the load it came from. */
struct clipped {
    const struct ra_blend_load *from;
    int skip;
    size_t row;
};

static int clipped_read(void *src, int layer, const void **k, const void **v)
{
    const struct clipped *c = src;
    int rc = c->from->read(c->from->src, layer, k, v);
    if (rc == RA_OK) {
        *k = (const uint8_t *)*k + (size_t)c->skip * c->row;
        *v = (const uint8_t *)*v + (size_t)c->skip * c->row;
    }
    return rc;
}

/* The loads' rows inside [lo, hi), as a rank of the chain loads them. */
static int clip_loads(const struct ra_blend_load *loads, int n_loads, int lo, int hi, size_t row,
                      struct clipped *clip, struct ra_blend_load *out)
{
    int m = 0;
    for (int i = 0; i < n_loads; i++) {
        const int a = loads[i].start > lo ? loads[i].start : lo;
        const int b = loads[i].start + loads[i].n < hi ? loads[i].start + loads[i].n : hi;
        if (a >= b)
            continue;
        clip[m] = (struct clipped){ &loads[i], a - loads[i].start, row };
        out[m] = (struct ra_blend_load){ .start = a, .n = b - a, .shift = loads[i].shift, .read = clipped_read,
                                         .src = &clip[m] };
        m++;
    }
    return m;
}

enum { MAX_SLICES = 4 };

/* The chain's phases run one slice after another on one cache (what the
 * ranks do, the exchange being the shared cache): every slice's pass A, the
 * selection (global over the prompt, or LOCAL per slice), every slice's
 * pass B; a slice with nothing selected runs its hooks only. */
static int run_slices(struct ra_context *ctx, struct prompt *p, enum ra_dtype dt, const struct ra_blend_load *loads,
                      int n_loads, double ratio, const int *bounds, int ns, int local, struct result *r)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    struct ra_kvcache kv;
    struct ra_blend *e[MAX_SLICES] = { 0 };
    struct clipped clip[MAX_SLICES][MAX_CHUNKS];
    struct ra_blend_load sl[MAX_SLICES][MAX_CHUNKS];
    float dev[256], *logits = calloc((size_t)c->vocab_size, sizeof(float));
    uint8_t must[256];
    int32_t sel[256];
    int n_sel = 0, rc = RA_OK;
    memset(r, 0, sizeof *r);
    CHECK_OK(ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), p->n, dt));
    for (int s = 0; s < ns && rc == RA_OK; s++) {
        const int m = clip_loads(loads, n_loads, bounds[s], bounds[s + 1], ra_kvcache_row_bytes(&kv), clip[s], sl[s]);
        rc = ra_blend_open(&e[s], ctx, p->ids, p->n, bounds[s], bounds[s + 1], sl[s], m, &cfg, &kv);
    }
    for (int s = 0; s < ns && rc == RA_OK; s++) {
        const float *d;
        const uint8_t *mu;
        if ((rc = ra_blend_pass_a(e[s], &d, &mu)) == RA_OK) {
            memcpy(dev + bounds[s], d, sizeof *d * (size_t)(bounds[s + 1] - bounds[s]));
            memcpy(must + bounds[s], mu, (size_t)(bounds[s + 1] - bounds[s]));
        }
    }
    if (rc == RA_OK)
        rc = local ? ra_blend_select_local(dev, must, p->n, ratio, bounds, ns, sel, &n_sel)
                   : ra_blend_select(dev, must, p->n, ratio, sel, &n_sel);
    for (int s = 0, at = 0; s < ns && rc == RA_OK; s++) {
        int k = 0;
        while (at + k < n_sel && sel[at + k] < bounds[s + 1])
            k++;
        rc = ra_blend_pass_b(e[s], sel + at, k, s == ns - 1 ? logits : NULL);
        at += k;
    }
    for (int s = 0; s < ns; s++)
        ra_blend_close(e[s], ratio, NULL);
    if (rc == RA_OK)
        take(r, &kv, p->n, c->vocab_size, logits);
    ra_kvcache_free(&kv);
    free(logits);
    return rc;
}

static double kv_diff(const struct result *a, const struct result *b, enum ra_dtype dt)
{
    const size_t n = a->kv_bytes / (dt == RA_DTYPE_BF16 ? 2 : sizeof(float));
    return test_max_rel_diff_rows(a->kv, b->kv, n, dt == RA_DTYPE_BF16);
}

/* The engine's phases over slices equal one rank: global selection its
 * result, local selection its result with the slices as quotas; ratio 1 is
 * none and ratio 0 full for either. Slices cut chunks, and one lies inside a
 * chunk (nothing to recompute there at ratio 0). */
static void check_slices(struct ra_context *ctx, enum ra_dtype dt)
{
    const struct ra_config *c = &ctx->model->config;
    const int V = c->vocab_size, lens[3] = { 11, 7, 13 };
    struct prompt p;
    make_prompt(&p, ctx, dt, 3, lens, 3, 5); /* chunks [3,14) [14,21) [21,34), n 39 */
    struct ra_blend_load loads[MAX_CHUNKS];
    const int nl = loads_of(&p, 0, loads);
    const int two[3] = { 0, 17, 39 }, four[5] = { 0, 17, 25, 30, 39 };
    const int *parts[2] = { two, four }, nparts[2] = { 2, 4 };
    const double ratios[3] = { 0, 0.15, 1 };
    double worst = 0;
    int ok = 1;
    for (int pi = 0; pi < 2; pi++)
        for (int ri = 0; ri < 3; ri++)
            for (int local = 0; local < 2; local++) {
                struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
                cfg.ratio = ratios[ri];
                if (local)
                    cfg.quota_bounds = parts[pi], cfg.n_quota = nparts[pi];
                struct result one, sliced;
                CHECK_OK(run(ctx, &p, dt, RA_REUSE_BLEND, loads, nl, &cfg, &one));
                CHECK_OK(run_slices(ctx, &p, dt, loads, nl, ratios[ri], parts[pi], nparts[pi], local, &sliced));
                const double dl = logits_diff(&one, &sliced, V), dk = kv_diff(&one, &sliced, dt);
                worst = fmax(worst, fmax(dl, dk));
                if (!(dl <= tol(dt) && dk <= tol(dt))) {
                    ok = 0;
                    printf("  %d slices, ratio %g, %s: logits %.3g, KV %.3g apart\n", nparts[pi], ratios[ri],
                           local ? "local" : "global", dl, dk);
                }
                drop(&one), drop(&sliced);
            }
    printf("%s KV: the phases over 2 and 4 slices (chunks cut, a slice inside a chunk) equal one rank, global and "
           "local scope, ratios 0, 0.15, 1: %s (worst %.3g)\n", ra_dtype_name(dt), ok ? "ok" : "FAIL", worst);
    CHECK(ok);
    /* local quotas differ from the global top-k: the test can tell them apart */
    const float dv[6] = { 9, 8, 7, 1, 2, 3 };
    const int halves[3] = { 0, 3, 6 };
    int32_t g[6], l6[6];
    int ng, nloc;
    CHECK_OK(ra_blend_select(dv, NULL, 6, 0.5, g, &ng));
    CHECK_OK(ra_blend_select_local(dv, NULL, 6, 0.34, halves, 2, l6, &nloc));
    CHECK(ng == 3 && g[0] == 0 && g[2] == 2 && nloc == 2 && l6[0] == 0 && l6[1] == 5);
    free_prompt(&p);
}

/* One chunk where it was computed: prefix and blend at any ratio give none's result within fp32 rounding. */
static void check_in_place(struct ra_context *ctx, enum ra_dtype dt)
{
    const int V = ctx->model->config.vocab_size, lens[1] = { 17 };
    struct prompt p;
    make_prompt(&p, ctx, dt, 4, lens, 1, 6);
    struct ra_blend_load loads[1];
    loads_of(&p, 0, loads);
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    struct result none, pre, full;
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_NONE, NULL, 0, NULL, &none));
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_PREFIX, loads, 1, &cfg, &pre));
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_FULL, loads, 1, &cfg, &full));
    double worst = fmax(logits_diff(&pre, &none, V), logits_diff(&full, &none, V));
    const double ratios[4] = { 0, 0.15, 0.5, 1 };
    for (int i = 0; i < 4; i++) {
        struct result b;
        cfg.ratio = ratios[i];
        CHECK_OK(run(ctx, &p, dt, RA_REUSE_BLEND, loads, 1, &cfg, &b));
        worst = fmax(worst, logits_diff(&b, &none, V));
        drop(&b);
    }
    printf("%s KV: one chunk at the position it was computed at: prefix %s none (logits within %.2g), full and "
           "blend at ratios 0-1 within %.2g\n", ra_dtype_name(dt), same(&pre, &none, V) ? "==" : "~",
           logits_diff(&pre, &none, V), worst);
    CHECK(worst < tol(dt));
    drop(&none), drop(&pre), drop(&full);
    free_prompt(&p);
}

/* A failing read is the error, the loader's message; a store of some bandwidth takes its time; auto ratio. */
static void check_loader(struct ra_context *ctx)
{
    const struct ra_config *c = &ctx->model->config;
    const int lens[2] = { 40, 30 };
    struct prompt p;
    make_prompt(&p, ctx, RA_DTYPE_F32, 2, lens, 2, 3);
    struct ra_blend_load loads[2];
    const int nl = loads_of(&p, 0, loads);
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    struct result r;
    p.ch[1].fail_layer = 2;
    CHECK(run(ctx, &p, RA_DTYPE_F32, RA_REUSE_BLEND, loads, nl, &cfg, &r) == RA_EFORMAT);
    CHECK(strstr(ra_error_message(), "hand chunk: layer 2") != NULL);
    printf("a failing read: %s\n", ra_error_message());
    p.ch[1].fail_layer = -1;

    const double bytes = 2.0 * (lens[0] + lens[1]) * c->n_layers * ra_kv_row_bytes(ra_config_kv_dim(c), RA_DTYPE_F32);
    cfg.store_gbps = bytes / 0.15 / 1e9; /* 0.15 s for every layer */
    CHECK_OK(run(ctx, &p, RA_DTYPE_F32, RA_REUSE_FULL, loads, nl, &cfg, &r));
    const int paced = r.rep.t_load >= 0.15 && r.rep.bytes_loaded == (int64_t)bytes && r.rep.t_load_wait > 0;
    printf("loader at %.3g GB/s: %.0f bytes in %.3f s (at least %.3f), the pass waited %.3f s: %s\n", cfg.store_gbps,
           bytes, r.rep.t_load, 0.15, r.rep.t_load_wait, paced ? "ok" : "FAIL");
    CHECK(paced);
    drop(&r);
    cfg.ratio = -1;
    CHECK_OK(run(ctx, &p, RA_DTYPE_F32, RA_REUSE_BLEND, loads, nl, &cfg, &r));
    const double slow = r.rep.ratio;
    drop(&r);
    cfg.store_gbps = 0;
    CHECK_OK(run(ctx, &p, RA_DTYPE_F32, RA_REUSE_BLEND, loads, nl, &cfg, &r));
    printf("auto ratio: %.3f behind the slow store, %.3f from memory (at least %.2f)\n", slow, r.rep.ratio,
           RA_BLEND_MIN_RATIO);
    CHECK(slow >= RA_BLEND_MIN_RATIO && slow <= 1 && r.rep.ratio >= RA_BLEND_MIN_RATIO && slow >= r.rep.ratio);
    drop(&r);
    free_prompt(&p);
}

/* ------------------------------------------------------------ through the store */

static char root[64] = "/tmp/ra_test_reuse.XXXXXX";

/* A request over P's ids: its prefix, chunks and suffix. */
static void request_of(struct prompt *p, struct ra_request *r, int *starts, int *lens)
{
    memset(r, 0, sizeof *r);
    r->ids = p->ids, r->n = p->n, r->n_prefix = p->np, r->n_chunks = p->n_chunks;
    for (int k = 0; k < p->n_chunks; k++)
        starts[k] = p->start[k], lens[k] = p->len[k];
    r->chunk_start = starts, r->chunk_len = lens;
    r->suffix_start = p->start[p->n_chunks - 1] + p->len[p->n_chunks - 1];
}

static int prefill(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req, enum ra_dtype dt,
                   enum ra_reuse_mode mode, const struct ra_reuse_config *cfg, struct result *r)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_kvcache kv;
    float *logits = calloc((size_t)c->vocab_size, sizeof(float));
    memset(r, 0, sizeof *r);
    CHECK_OK(ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), req->n, dt));
    int rc = ra_reuse_prefill(ctx, st, req, mode, cfg, &kv, logits, &r->rep);
    if (rc == RA_OK)
        take(r, &kv, req->n, c->vocab_size, logits);
    ra_kvcache_free(&kv);
    free(logits);
    return rc;
}

/* The modes from a store the first run fills (--store-write): ratio 1 == none,
 * ratio 0 == full, prefix stores and finds chunks behind their exact context,
 * a deleted chunk file is a miss (ratio 1 still none), a corrupted one an
 * error naming it. */
static void check_store(struct ra_context *ctx, enum ra_dtype dt, int model)
{
    const struct ra_config *c = &ctx->model->config;
    const int V = c->vocab_size, lens[3] = { 9, 14, 6 };
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%d-%s", root, model, ra_dtype_name(dt));
    struct ra_store_identity id = { .kv_dtype = dt };
    struct ra_store *st = NULL;
    CHECK_OK(ra_store_model_identity(ctx->model, id.model));
    CHECK_OK(ra_store_vocab_identity(NULL, id.tokenizer));
    CHECK_OK(ra_store_open(&st, dir, ctx->model, &id, 0, RA_STORE_CREATE));
    if (!st)
        return;
    struct prompt p;
    make_prompt(&p, ctx, dt, 3, lens, 3, 4);
    struct ra_request req;
    int starts[3], ls[3];
    request_of(&p, &req, starts, ls);
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    struct result none, first, full, b0, b1;
    CHECK_OK(prefill(ctx, NULL, &req, dt, RA_REUSE_NONE, NULL, &none));
    cfg.store_write = 1;
    CHECK_OK(prefill(ctx, st, &req, dt, RA_REUSE_BLEND, &cfg, &first)); /* every chunk a miss, then stored */
    cfg.store_write = 0;
    const int first_ok = first.rep.misses == 3 && first.rep.hits == 0 && same(&first, &none, V) &&
                         first.rep.t_store_write > 0;
    CHECK_OK(prefill(ctx, st, &req, dt, RA_REUSE_FULL, &cfg, &full));
    cfg.ratio = 1;
    CHECK_OK(prefill(ctx, st, &req, dt, RA_REUSE_BLEND, &cfg, &b1));
    cfg.ratio = 0;
    CHECK_OK(prefill(ctx, st, &req, dt, RA_REUSE_BLEND, &cfg, &b0));
    const int eq = first_ok && full.rep.hits == 3 && same(&b1, &none, V) && same(&b0, &full, V) && !same(&full, &none, V);
    printf("store, %s KV: a first blend run adds its 3 misses; then blend 1 == none, blend 0 == full, bit for bit: %s\n",
           ra_dtype_name(dt), eq ? "ok" : "FAIL");
    CHECK(eq);

    /* the chunks as the hand-made ones: the store's rows are the isolated pass's */
    struct ra_blend_load loads[3];
    struct result hand;
    const int nl = loads_of(&p, 0, loads);
    CHECK_OK(run(ctx, &p, dt, RA_REUSE_FULL, loads, nl, &cfg, &hand));
    printf("store, %s KV: full over the store's chunks and over chunks made here: logits within %.2g\n", ra_dtype_name(dt),
           logits_diff(&hand, &full, V));
    CHECK(logits_diff(&hand, &full, V) < tol(dt)); /* the store computes the prefix as its own span */
    drop(&hand);

    /* prefix: the first chunk (behind the leading prefix, its exact context) is there; the others are
     * stored behind their exact context by the first run; the second finds them */
    struct result pre1, pre2;
    cfg.store_write = 1;
    CHECK_OK(prefill(ctx, st, &req, dt, RA_REUSE_PREFIX, &cfg, &pre1));
    cfg.store_write = 0;
    CHECK_OK(prefill(ctx, st, &req, dt, RA_REUSE_PREFIX, &cfg, &pre2));
    const double pd = logits_diff(&pre2, &none, V);
    printf("store, %s KV: prefix stores its chunks behind their exact context (%d misses), then finds them (%d hits), "
           "logits within %.2g of none\n", ra_dtype_name(dt), pre1.rep.misses, pre2.rep.hits, pd);
    CHECK(pre1.rep.misses == 2 && pre1.rep.hits == 1 && pre2.rep.hits == 3 && pd < tol(dt));

    /* a deleted chunk file: a miss, its rows computed */
    struct ra_chunk *ch = NULL;
    CHECK_OK(ra_store_get(st, p.ids, p.np, p.ids + p.start[1], p.len[1], &ch));
    char path[512] = "";
    if (ch)
        snprintf(path, sizeof path, "%s", ra_chunk_path(ch));
    ra_chunk_close(ch);
    CHECK(unlink(path) == 0);
    struct result m1;
    cfg.ratio = 1;
    CHECK_OK(prefill(ctx, st, &req, dt, RA_REUSE_BLEND, &cfg, &m1));
    const int miss_ok = m1.rep.misses == 1 && m1.rep.hits == 2 && same(&m1, &none, V);
    printf("store, %s KV: a deleted chunk file is a miss, ratio 1 still == none: %s\n", ra_dtype_name(dt),
           miss_ok ? "ok" : "FAIL");
    CHECK(miss_ok);
    drop(&m1);

    /* a corrupted chunk file: an error naming it */
    ch = NULL;
    CHECK_OK(ra_store_get(st, p.ids, p.np, p.ids + p.start[2], p.len[2], &ch));
    if (ch)
        snprintf(path, sizeof path, "%s", ra_chunk_path(ch));
    ra_chunk_close(ch);
    /* a flipped byte in layer 1's K (the file's layout: store_impl.h) */
    long off = -1;
    ch = NULL;
    CHECK_OK(ra_store_get(st, p.ids, p.np, p.ids + p.start[2], p.len[2], &ch));
    if (ch)
        off = (long)ch->layout.h.data_offset + (long)ch->layout.h.layer_stride + 3;
    ra_chunk_close(ch);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL && off > 0);
    if (f) {
        unsigned char b = 0;
        CHECK(fseek(f, off, SEEK_SET) == 0 && fread(&b, 1, 1, f) == 1);
        b ^= 0x5a;
        CHECK(fseek(f, off, SEEK_SET) == 0 && fwrite(&b, 1, 1, f) == 1);
        fclose(f);
    }
    struct result bad;
    const int rc = prefill(ctx, st, &req, dt, RA_REUSE_BLEND, &cfg, &bad);
    printf("store, %s KV: a corrupted chunk: %s\n", ra_dtype_name(dt), rc != RA_OK ? ra_error_message() : "NO ERROR");
    CHECK(rc == RA_EFORMAT && strstr(ra_error_message(), path) != NULL);
    drop(&pre1), drop(&pre2), drop(&none), drop(&first), drop(&full), drop(&b0), drop(&b1);
    free_prompt(&p);
    ra_store_close(st);
}

static void check_model(const struct ra_model *m, const char *name, int model)
{
    struct ra_backend *be;
    struct ra_context ctx;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    CHECK_OK(ra_context_init(&ctx, m, be));
    printf("-- %s\n", name);
    check_equalities(&ctx, RA_DTYPE_F32);
    check_equalities(&ctx, RA_DTYPE_BF16);
    check_slices(&ctx, RA_DTYPE_F32);
    check_slices(&ctx, RA_DTYPE_BF16);
    check_in_place(&ctx, RA_DTYPE_F32);
    check_in_place(&ctx, RA_DTYPE_BF16);
    check_store(&ctx, RA_DTYPE_F32, model);
    check_store(&ctx, RA_DTYPE_BF16, model);
    ra_context_free(&ctx);
    ra_backend_free(be);
}

int main(void)
{
    test_rand_seed(22);
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    check_rope_shift(RA_ROPE_INTERLEAVED);
    check_rope_shift(RA_ROPE_HALF);
    check_select();
    struct ra_model m;
    struct ra_config cfg = { .dim = 64, .hidden_dim = 160, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2,
                             .vocab_size = 211, .seq_len = 256, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    test_random_model(&m, &cfg, RA_DTYPE_F32, 2.0f);
    check_model(&m, "random GQA model, interleaved pairs", 0);
    {
        struct ra_backend *be;
        struct ra_context ctx;
        CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
        CHECK_OK(ra_context_init(&ctx, &m, be));
        check_loader(&ctx);
        ra_context_free(&ctx);
        ra_backend_free(be);
    }
    ra_model_free(&m);
    cfg.rope_style = RA_ROPE_HALF;
    test_random_model(&m, &cfg, RA_DTYPE_F32, 2.0f);
    check_model(&m, "random GQA model, half pairs", 1);
    ra_model_free(&m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "test_reuse: could not remove %s\n", root);
    return test_result("test_reuse");
}
