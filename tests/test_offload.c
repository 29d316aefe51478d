/* Decode from the host KV pool (src/offload): full and KVPR equal the
 * in-place decode (--offload none) bit for bit; KVPR's recomputed K, V are
 * the stored rows bit for bit; byte counters equal the plan; the planner's
 * closed form agrees with its brute force; bad budgets fail clearly.
 * InfiniGen: with every column, alpha = inf and no cap it equals none bit for
 * bit; at its defaults it equals the reference decode loop over the pool
 * (infinigen_decode.c) bit for bit, with the pool's invariants kept under
 * eviction and the byte counters equal to the rows fetched. With the prefill
 * written into the pool (ra_offload_prefill_cache), begin moves no byte and
 * full, KVPR and exact InfiniGen still equal none bit for bit. With bf16
 * rows, full and KVPR equal the in-place bf16 decode bit for bit. */
#include "offload/infinigen.h"
#include "offload/kvpr.h"
#include "offload/offload.h"
#include "random_model.h"
#include "ra_core.h"
#include "test.h"

#define STEPS 6

/* Prefill N tokens into a fresh cache (capacity N + STEPS), with O's capture on. */
static void prefill(struct ra_context *cx, const int32_t *tokens, int n, struct ra_kvcache *kv, float *logits,
                    struct ra_offload *o)
{
    const struct ra_config *c = &cx->model->config;
    CHECK_OK(ra_kvcache_init(kv, cx->backend, c->n_layers, ra_config_kv_dim(c), n + STEPS));
    if (o)
        CHECK_OK(ra_offload_capture(o));
    CHECK_OK(ra_forward_span(cx, tokens, 0, n, kv, logits));
}

/* Greedy decode of STEPS tokens; logits of every step into out[STEPS][vocab]. */
static void decode(struct ra_context *cx, struct ra_kvcache *kv, int n, float *logits, struct ra_offload *o, float *out)
{
    const int V = cx->model->config.vocab_size;
    for (int i = 0; i < STEPS; i++) {
        int best = 0;
        for (int j = 1; j < V; j++)
            best = logits[j] > logits[best] ? j : best;
        if (o)
            CHECK_OK(ra_offload_step(o, best, n + i, logits));
        else
            CHECK_OK(ra_forward_span(cx, &best, n + i, 1, kv, logits));
        memcpy(out + (size_t)i * V, logits, (size_t)V * sizeof(float));
    }
}

/* K, V recomputed from the pool's X equal the prefill's rows, bit for bit. */
static void check_recompute(struct ra_context *cx, struct ra_offload *o, const struct ra_kvcache *kv, int n)
{
    struct ra_backend *be = cx->backend;
    const int kvd = ra_config_kv_dim(&cx->model->config);
    float *k = ra_backend_alloc(be, (size_t)n * kvd * sizeof(float)), *v = ra_backend_alloc(be, (size_t)n * kvd * sizeof(float));
    const int ls[] = { 2, 3, n / 2, n - 1, n };
    for (int layer = 0; layer < cx->model->config.n_layers; layer++)
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
            /* on the span's row count (kvpr.h): the first l rows are the ones used */
            CHECK_OK(ra_kvpr_recompute(cx, layer, ra_offload_pool_x(o, layer), 0, n, k, v));
            const size_t bytes = (size_t)ls[i] * kvd * sizeof(float);
            if (memcmp(k, kv->k[layer], bytes) || memcmp(v, kv->v[layer], bytes)) {
                fprintf(stderr, "layer %d, l = %d: recomputed K/V differ from the stored rows\n", layer, ls[i]);
                test_failures++;
            }
        }
    ra_backend_release(be, k);
    ra_backend_release(be, v);
}

/* A policy of the test's own through ra_offload_create_policy: fetches like
 * full, but after attend (as InfiniGen will), and names the rows attention
 * reads through its attend hook. Logs the order of the hooks. */
static char order[4096];
static size_t order_len;
static void log_hook(char what, int layer)
{
    if (order_len + 3 < sizeof order)
        order_len += (size_t)snprintf(order + order_len, sizeof order - order_len, "%c%d", what, layer);
}
static int spec_fetch(struct ra_offload *o, int layer, int pos)
{
    log_hook('f', layer);
    const size_t row = (size_t)ra_offload_view(o)->kv_dim * sizeof(float), bytes = (size_t)pos * row;
    int rc = ra_offload_send(o, ra_offload_slot_k(o, layer), ra_offload_pool_k(o, layer), bytes, 0);
    return rc ? rc : ra_offload_send(o, ra_offload_slot_v(o, layer), ra_offload_pool_v(o, layer), bytes, 0);
}
static int spec_attend(struct ra_offload *o, int layer, int pos, const struct ra_hook_args *a, const float **k,
                       const float **v, int *rows)
{
    log_hook('a', layer);
    CHECK(a && a->x && a->xa && a->q);
    *k = ra_offload_slot_k(o, layer);
    *v = ra_offload_slot_v(o, layer);
    *rows = pos + 1;
    return RA_OK;
}
static const struct ra_offload_policy spec_policy = { .name = "test", .fetch_after_attend = 1, .fetch = spec_fetch,
                                                      .attend = spec_attend };

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int j = 1; j < n; j++)
        best = x[j] > x[best] ? j : best;
    return best;
}

/* One InfiniGen decode of STEPS greedy steps through the engine; logits into
 * got; per step: the pool's invariants, bytes = rows fetched x row bytes. */
static void infinigen_run(struct ra_context *cx, const int32_t *tokens, int n, const struct ra_offload_config *cfg,
                          float *got, int32_t *fed, int want_slots)
{
    const struct ra_config *c = &cx->model->config;
    const int V = c->vocab_size;
    const size_t row = (size_t)ra_config_kv_dim(c) * sizeof(float);
    float *logits = malloc((size_t)V * sizeof(float));
    struct ra_kvcache kv;
    struct ra_offload *o;
    CHECK_OK(ra_offload_create(&o, cx, cfg, n + STEPS));
    if (!o)
        goto out;
    CHECK(ra_offload_slots(o) == want_slots);
    prefill(cx, tokens, n, &kv, logits, o);
    CHECK_OK(ra_offload_begin(o, &kv, n));
    { /* Kp is the backend's device memory, the bytes the budget counts */
        const struct ra_infinigen *ig = ra_infinigen_offload_state(o);
        size_t full_rows, slot_rows, kp_bytes;
        int full;
        CHECK_OK(ra_infinigen_offload_sizes(c, cfg, n + STEPS, &full, &full_rows, &slot_rows, &kp_bytes));
        CHECK(ig && ig->kp_backend == cx->backend && ra_infinigen_kp_bytes(ig) == kp_bytes);
        CHECK(ig && full == ig->p.dense_layers && full == (c->n_layers < 2 ? c->n_layers : 2));
    }
    for (int l = 0; l < c->n_layers; l++) /* decode reads the pool only */
        for (size_t i = 0; i < (size_t)(n + STEPS) * kv.kv_dim; i++)
            ((float *)kv.k[l])[i] = ((float *)kv.v[l])[i] = NAN;
    int64_t kv0 = 0;
    for (int i = 0; i < STEPS; i++) {
        fed[i] = argmax(logits, V);
        CHECK_OK(ra_offload_step(o, fed[i], n + i, logits));
        memcpy(got + (size_t)i * V, logits, (size_t)V * sizeof(float));
        const struct ra_kvpool *pool = ra_infinigen_offload_pool(o);
        CHECK_OK(ra_kvpool_check(pool));
        CHECK_OK(ra_infinigen_check_pool(ra_infinigen_offload_state(o), pool));
        int64_t rows = 0;
        for (int l = 0; l < c->n_layers; l++) {
            const int r = ra_infinigen_offload_rows(o, l);
            const int dense = ra_infinigen_offload_state(o)->p.dense_layers; /* they fetch every pooled row */
            CHECK(r >= 1 && r <= pool->capacity &&
                  (l >= dense || r == (n + i < pool->capacity ? n + i : pool->capacity)));
            rows += r;
        }
        const int64_t bytes = ra_offload_stats(o)->bytes_kv - kv0;
        if (bytes != 2 * rows * (int64_t)row)
            fprintf(stderr, "infinigen: step %d fetched %lld bytes for %lld rows\n", i, (long long)bytes,
                    (long long)rows), test_failures++;
        kv0 = ra_offload_stats(o)->bytes_kv;
    }
    ra_kvcache_free(&kv);
out:
    ra_offload_free(o);
    free(logits);
}

static void check_infinigen(const char *name, struct ra_context *cx, const int32_t *tokens, int n, const float *ref)
{
    const struct ra_config *c = &cx->model->config;
    const int V = c->vocab_size;
    float *got = malloc((size_t)STEPS * V * sizeof(float)), *want = malloc((size_t)V * sizeof(float));
    int32_t fed[STEPS];
    /* exact: every column, alpha = inf, no cap: none's logits, two slots and one */
    struct ra_offload_config cfg = { .mode = RA_OFFLOAD_INFINIGEN, .kvpr_force_l = -1, .link_gbps = 8,
                                     .link_latency_us = 1, .ig_ratio = 1, .ig_alpha = INFINITY, .ig_cap = 1 };
    for (int slots = 2; slots >= 1; slots--) {
        struct ra_offload *o;
        cfg.device_kv_mem = 0;
        CHECK_OK(ra_offload_create(&o, cx, &cfg, n + STEPS));
        const size_t ws = o ? ra_offload_working_set(o) : 0; /* fixed + 2 slots */
        ra_offload_free(o);
        /* one slot: the fixed part (the dense layers' full slots, Kp) and one rotating slot */
        const size_t slot = 2 * (size_t)(n + STEPS + 1) * ra_config_kv_dim(c) * sizeof(float);
        cfg.device_kv_mem = slots == 2 ? 0 : ws - slot;
        infinigen_run(cx, tokens, n, &cfg, got, fed, slots);
        if (memcmp(ref, got, (size_t)STEPS * V * sizeof(float)))
            fprintf(stderr, "%s: infinigen (exact settings, %d slots) differs from none\n", name, slots),
                test_failures++;
    }
    /* defaults, a pool smaller than the prompt (evictions): the reference loop's logits */
    const int keep = n / 2 > 4 ? n / 2 : 4;
    cfg = (struct ra_offload_config){ .mode = RA_OFFLOAD_INFINIGEN, .kvpr_force_l = -1,
                                      .ig_pool_mem = ra_kvpool_bytes(c->n_layers, ra_config_kv_dim(c), keep) };
    infinigen_run(cx, tokens, n, &cfg, got, fed, c->n_layers > 1 ? 2 : 1);
    struct ra_infinigen ig;
    struct ra_kvpool pool;
    struct ra_infinigen_params p;
    CHECK_OK(ra_infinigen_params_of(&cfg, &p));
    CHECK_OK(ra_kvpool_init(&pool, c->n_layers, c->n_kv_heads, c->head_dim, n + STEPS, cfg.ig_pool_mem));
    CHECK(pool.capacity == keep);
    CHECK_OK(ra_infinigen_init(&ig, c, &p, pool.capacity));
    CHECK_OK(ra_infinigen_calibrate(&ig, cx, tokens, n));
    CHECK_OK(ra_infinigen_prefill(&ig, &pool, cx, tokens, n, want));
    for (int i = 0; i < STEPS; i++) {
        CHECK_OK(ra_infinigen_decode(&ig, &pool, cx, fed[i], n + i, want, NULL));
        if (memcmp(want, got + (size_t)i * V, (size_t)V * sizeof(float))) {
            fprintf(stderr, "%s: infinigen step %d differs from the reference decode loop\n", name, i);
            test_failures++;
            break;
        }
    }
    CHECK(pool.evictions > 0);
    ra_infinigen_free(&ig);
    ra_kvpool_free(&pool);
    free(got), free(want);
}

static void check_model(const char *name, struct ra_model *m, int n, int threads)
{
    const struct ra_config *c = &m->config;
    const int V = c->vocab_size;
    struct ra_backend *be;
    struct ra_context cx;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    float *logits = malloc((size_t)V * sizeof(float)), *ref = malloc((size_t)STEPS * V * sizeof(float)),
          *got = malloc((size_t)STEPS * V * sizeof(float));
    for (int i = 0; i < n; i++)
        tokens[i] = test_rand_int(0, V - 1);
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = threads }));
    CHECK_OK(ra_context_init(&cx, m, be));

    struct ra_kvcache kv;
    prefill(&cx, tokens, n, &kv, logits, NULL);
    decode(&cx, &kv, n, logits, NULL, ref);
    ra_kvcache_free(&kv);

    /* full, kvpr with l forced to 0, 1, s/2, s (clamped to the prompt) and planned */
    const int forced[] = { -2, 0, 1, n / 2, n, -1 };
    for (size_t f = 0; f < sizeof forced / sizeof forced[0]; f++) {
        struct ra_offload_config cfg = { .mode = forced[f] == -2 ? RA_OFFLOAD_FULL : RA_OFFLOAD_KVPR,
                                         .link_gbps = 16, .link_latency_us = 2, .kvpr_force_l = forced[f],
                                         /* a fast device: the plan recomputes part (MHA) */
                                         .kvpr_v_gpu = 1e15 };
        struct ra_offload *o;
        CHECK_OK(ra_offload_create(&o, &cx, &cfg, n + STEPS));
        if (!o)
            continue;
        prefill(&cx, tokens, n, &kv, logits, o);
        if (cfg.mode == RA_OFFLOAD_KVPR && f == 1)
            check_recompute(&cx, o, &kv, n);
        CHECK_OK(ra_offload_begin(o, &kv, n));
        CHECK(ra_offload_stats(o)->bytes_prefill_moved ==
              2 * (int64_t)n * kv.kv_dim * (int64_t)sizeof(float) * c->n_layers); /* a cache of its own: copied */
        /* the prefill's cache is no longer read: poison it */
        for (int l = 0; l < c->n_layers; l++)
            for (size_t i = 0; i < (size_t)(n + STEPS) * kv.kv_dim; i++)
                ((float *)kv.k[l])[i] = ((float *)kv.v[l])[i] = NAN; /* f32 cache */
        int64_t x0 = 0, kv0 = 0;
        for (int i = 0; i < STEPS; i++) { /* step by step: bytes per step against the plan */
            int best = 0;
            for (int j = 1; j < V; j++)
                best = logits[j] > logits[best] ? j : best;
            const int l = cfg.mode == RA_OFFLOAD_KVPR ? ra_kvpr_split(o, n + i) : 0;
            CHECK_OK(ra_offload_step(o, best, n + i, logits));
            memcpy(got + (size_t)i * V, logits, (size_t)V * sizeof(float));
            const struct ra_offload_stats *st = ra_offload_stats(o);
            const struct ra_kvpr_shape sh = { c->dim, ra_config_kv_dim(c), 4, n + i, 0, n, 0 };
            int64_t xb, kvb;
            ra_kvpr_bytes(&sh, l, &xb, &kvb);
            CHECK(st->bytes_x - x0 == xb * c->n_layers);
            CHECK(st->bytes_kv - kv0 == kvb * c->n_layers);
            if (forced[f] >= 0)
                CHECK(l == (forced[f] < n ? forced[f] : n));
            x0 = st->bytes_x, kv0 = st->bytes_kv;
        }
        if (memcmp(ref, got, (size_t)STEPS * V * sizeof(float))) {
            fprintf(stderr, "%s: %s (l %d): logits differ from the in-place decode\n", name,
                    ra_offload_mode_name(cfg.mode), forced[f]);
            test_failures++;
        }
        if (forced[f] == -1 && c->n_kv_heads * 2 <= c->n_heads)
            CHECK(ra_offload_stats(o)->kvpr_l == 0); /* GQA 2:1: activations cost more than KV */
        ra_offload_free(o);
        ra_kvcache_free(&kv);
    }

    { /* a caller's policy: fetch(l+1) comes after attend(l), and it equals none */
        const struct ra_offload_config pc = { .mode = RA_OFFLOAD_FULL, .link_gbps = 4, .link_latency_us = 10,
                                              .kvpr_force_l = -1 };
        struct ra_offload *o;
        CHECK_OK(ra_offload_create_policy(&o, &cx, &pc, n + STEPS, &spec_policy));
        if (o) {
            prefill(&cx, tokens, n, &kv, logits, o);
            CHECK_OK(ra_offload_begin(o, &kv, n));
            order_len = 0;
            decode(&cx, NULL, n, logits, o, got);
            CHECK(!memcmp(ref, got, (size_t)STEPS * V * sizeof(float)));
            char want[4096] = "";
            for (int i = 0, len = 0; i < STEPS; i++)
                for (int l = 0; l < c->n_layers; l++)
                    len += snprintf(want + len, sizeof want - len, l ? "a%df%d" : "f0", l - 1, l),
                    len += l == c->n_layers - 1 ? snprintf(want + len, sizeof want - len, "a%d", l) : 0;
            if (strcmp(order, want))
                fprintf(stderr, "hook order %s, expected %s\n", order, want), test_failures++;
            /* the link: every message's latency plus the bytes at the link's rate */
            const struct ra_offload_stats *st = ra_offload_stats(o);
            const double want_s = st->messages * 10e-6 + (double)(st->bytes_kv + st->bytes_x) / 4e9;
            CHECK(fabs(st->link_s - want_s) <= 1e-9 * want_s);
            CHECK(st->emulated_s >= st->stall_s && st->steps == STEPS);
            ra_kvcache_free(&kv);
        }
        ra_offload_free(o);
    }

    /* the prefill writes into the pool (the CPU backend): begin moves nothing, decode equals none */
    const enum ra_offload_mode in_pool[] = { RA_OFFLOAD_FULL, RA_OFFLOAD_KVPR, RA_OFFLOAD_INFINIGEN };
    for (size_t i = 0; i < sizeof in_pool / sizeof in_pool[0]; i++) {
        const struct ra_offload_config vc = { .mode = in_pool[i], .link_gbps = 16, .kvpr_force_l = -1,
                                              .ig_ratio = 1, .ig_alpha = INFINITY, .ig_cap = 1 }; /* exact */
        struct ra_offload *o;
        CHECK_OK(ra_offload_create(&o, &cx, &vc, n + STEPS));
        if (!o)
            continue;
        CHECK_OK(ra_offload_prefill_cache(o, &kv, RA_DTYPE_F32));
        CHECK(kv.borrowed && kv.capacity == n + STEPS && kv.k[0] == (void *)ra_offload_pool_k(o, 0) &&
              kv.v[c->n_layers - 1] == (void *)ra_offload_pool_v(o, c->n_layers - 1));
        CHECK_OK(ra_offload_capture(o));
        CHECK_OK(ra_forward_span(&cx, tokens, 0, n, &kv, logits));
        CHECK_OK(ra_offload_begin(o, &kv, n));
        ra_kvcache_free(&kv); /* the arrays only: InfiniGen released the pool in begin */
        CHECK(ra_offload_stats(o)->bytes_prefill_moved == 0);
        decode(&cx, NULL, n, logits, o, got);
        if (memcmp(ref, got, (size_t)STEPS * V * sizeof(float)))
            fprintf(stderr, "%s: %s with the prefill in the pool differs from none\n", name,
                    ra_offload_mode_name(vc.mode)), test_failures++;
        ra_offload_free(o);
    }

    { /* bf16 rows in the pool and the slots: full and KVPR (forced, planned; KVPR rounds its recompute as
       * the forward pass does) equal the in-place bf16 decode bit for bit, with half the KV bytes */
        const int kvd = ra_config_kv_dim(c);
        float *ref16 = malloc((size_t)STEPS * V * sizeof(float));
        CHECK_OK(ra_kvcache_init_dtype(&kv, be, c->n_layers, kvd, n + STEPS, RA_DTYPE_BF16));
        CHECK_OK(ra_forward_span(&cx, tokens, 0, n, &kv, logits));
        decode(&cx, &kv, n, logits, NULL, ref16);
        ra_kvcache_free(&kv);
        CHECK(memcmp(ref, ref16, (size_t)STEPS * V * sizeof(float)) != 0); /* bf16 rows change the logits */
        const int ls[] = { -2, n / 2, -1 };
        for (size_t f = 0; f < sizeof ls / sizeof ls[0]; f++) {
            const struct ra_offload_config bc = { .mode = ls[f] == -2 ? RA_OFFLOAD_FULL : RA_OFFLOAD_KVPR,
                                                  .link_gbps = 16, .kvpr_force_l = ls[f], .kvpr_v_gpu = 1e15,
                                                  .kv_dtype = RA_DTYPE_BF16 };
            struct ra_offload *o;
            CHECK_OK(ra_offload_create(&o, &cx, &bc, n + STEPS));
            if (!o)
                continue;
            CHECK(ra_offload_prefill_cache(o, &kv, RA_DTYPE_F32) == RA_EINVAL); /* the pool's dtype only */
            CHECK_OK(ra_offload_prefill_cache(o, &kv, RA_DTYPE_BF16));
            CHECK_OK(ra_offload_capture(o));
            CHECK_OK(ra_forward_span(&cx, tokens, 0, n, &kv, logits));
            CHECK_OK(ra_offload_begin(o, &kv, n));
            ra_kvcache_free(&kv);
            decode(&cx, NULL, n, logits, o, got);
            const struct ra_offload_stats *st = ra_offload_stats(o);
            int64_t kv_rows = 0; /* KV rows fetched: s' minus the recomputed rows, per step and layer */
            for (int i = 0; i < STEPS; i++)
                kv_rows += (n + i - (ls[f] >= 0 ? ls[f] : 0)) * (int64_t)c->n_layers;
            CHECK(st->bytes_prefill_moved == 0 && st->bytes_store == 2 * (int64_t)STEPS * c->n_layers * kvd * 2);
            if (ls[f] != -1)
                CHECK(st->bytes_kv == 2 * kv_rows * kvd * 2);
            if (memcmp(ref16, got, (size_t)STEPS * V * sizeof(float)))
                fprintf(stderr, "%s: %s (l %d) with bf16 rows differs from the in-place bf16 decode\n", name,
                        ra_offload_mode_name(bc.mode), ls[f]), test_failures++;
            ra_offload_free(o);
        }
        free(ref16);
    }

    /* budgets: one layer's working set gives one slot, less fails */
    struct ra_offload_config cfg = { .mode = RA_OFFLOAD_FULL, .kvpr_force_l = -1 };
    struct ra_offload *o;
    const size_t one = 2 * (size_t)(n + STEPS) * ra_config_kv_dim(c) * sizeof(float);
    cfg.device_kv_mem = one;
    CHECK_OK(ra_offload_create(&o, &cx, &cfg, n + STEPS));
    CHECK(o && ra_offload_slots(o) == 1);
    if (o) { /* one slot: no overlap, still exact */
        prefill(&cx, tokens, n, &kv, logits, o);
        CHECK_OK(ra_offload_begin(o, &kv, n));
        decode(&cx, NULL, n, logits, o, got);
        CHECK(!memcmp(ref, got, (size_t)STEPS * V * sizeof(float)));
        ra_kvcache_free(&kv);
    }
    ra_offload_free(o);
    cfg.device_kv_mem = one - 1;
    CHECK(ra_offload_create(&o, &cx, &cfg, n + STEPS) == RA_EINVAL && !o);
    CHECK(strstr(ra_error_message(), "cannot hold one layer's working set") != NULL);
    check_infinigen(name, &cx, tokens, n, ref);
    cfg.mode = RA_OFFLOAD_INFINIGEN;
    cfg.device_kv_mem = 64;
    CHECK(ra_offload_create(&o, &cx, &cfg, n + STEPS) == RA_EINVAL && !o);
    CHECK(strstr(ra_error_message(), "the dense layers' full slots and the partial key cache") != NULL);

    ra_context_free(&cx);
    ra_backend_free(be);
    free(tokens), free(logits), free(ref), free(got);
}

static void check_planner(void)
{
    /* MHA: closed form within 1 of the scan over many shapes and rates */
    for (int t = 0; t < 200; t++) {
        const int dim = 64 * test_rand_int(1, 64), s = test_rand_int(1, 4096);
        const struct ra_kvpr_shape sh = { dim, dim, 2, s, 0, s, 0 };
        const struct ra_kvpr_profile p = { 1e9 * test_rand_int(1, 64), 0, 1e12 * test_rand_int(1, 500), 0, 0 };
        const int a = ra_kvpr_plan_scan(&p, &sh), b = ra_kvpr_plan_closed(&p, &sh);
        if (abs(a - b) > 1 && fabs(ra_kvpr_cost(&p, &sh, a) - ra_kvpr_cost(&p, &sh, b)) > 1e-12)
            fprintf(stderr, "planner: dim %d s %d: scan %d, closed form %d\n", dim, s, a, b), test_failures++;
    }
    /* the KVPR paper's example: OPT-6.7B, 32 GB/s, 312 TFLOP/s, fp16: l/s' = 0.70 */
    const struct ra_kvpr_shape opt = { 4096, 4096, 2, 10000, 0, 10000, 0 };
    const struct ra_kvpr_profile a100 = { 32e9, 0, 312e12, 0, 0 };
    const int l = ra_kvpr_plan_closed(&a100, &opt);
    CHECK(fabs(l / 10000.0 - 0.70) < 0.01);
    CHECK(abs(ra_kvpr_plan_scan(&a100, &opt) - l) <= 1);
    /* limits: an infinitely fast device recomputes everything, a free link nothing */
    const struct ra_kvpr_profile fast = { 32e9, 0, INFINITY, 0, 0 }, free_link = { INFINITY, 0, 312e12, 0, 0 };
    CHECK(ra_kvpr_plan_scan(&fast, &opt) == 10000 && ra_kvpr_plan_closed(&fast, &opt) == 10000);
    CHECK(ra_kvpr_plan_scan(&free_link, &opt) == 0 && ra_kvpr_plan_closed(&free_link, &opt) == 0);
    /* GQA 4:1: sending X costs more than sending KV */
    const struct ra_kvpr_shape gqa = { 4096, 1024, 2, 1000, 0, 1000, 0 };
    CHECK(ra_kvpr_plan_scan(&a100, &gqa) == 0 && ra_kvpr_plan_closed(&a100, &gqa) == 0);
    /* X only for a slice [x0, x1): l never goes past it */
    const struct ra_kvpr_shape slice = { 4096, 4096, 2, 1000, 600, 300, 0 };
    CHECK(ra_kvpr_plan_scan(&fast, &slice) == 300 && ra_kvpr_plan_closed(&fast, &slice) == 300);
}

int main(void)
{
    struct ra_model m;
    const struct ra_config mha = { .dim = 96, .hidden_dim = 256, .n_layers = 3, .n_heads = 6, .n_kv_heads = 6,
                                   .vocab_size = 300, .seq_len = 1024, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    struct ra_config gqa = mha;
    gqa.n_kv_heads = 2;
    gqa.rope_style = RA_ROPE_HALF;
    check_planner();
    test_random_model(&m, &mha, RA_DTYPE_F32, 1.0f);
    check_model("mha f32", &m, 77, 2);
    ra_model_free(&m);
    test_random_model(&m, &gqa, RA_DTYPE_BF16, 1.0f);
    check_model("gqa bf16 rope-half", &m, 41, 1);
    ra_model_free(&m);
    const char *s260k = test_fixture("stories260K.bin");
    if (s260k) {
        CHECK_OK(ra_model_load(&m, s260k));
        if (!test_failures)
            check_model("stories260K", &m, 120, 2);
        ra_model_free(&m);
    }
    return test_result("test_offload");
}
