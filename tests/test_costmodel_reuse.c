/* The cost model of a reuse run (costmodel.h, "reuse runs") and the reuse
 * auto split (autosplit.h): nothing loaded is the plain model exactly; one
 * rank's passes and a two-rank chain by hand from the FLOP formulas; loads
 * that pace the pass; delta sends; the balanced split against the plain one. */
#include "autosplit.h"
#include "costmodel.h"
#include "spec.h"
#include "status.h"
#include "test.h"

static struct ra_config bench_small(void)
{
    return (struct ra_config){ .dim = 768, .hidden_dim = 2048, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
                               .vocab_size = 32000, .seq_len = 16384, .head_dim = 64, .rope_theta = 10000,
                               .norm_eps = 1e-5f };
}

static int close_rel(double a, double b, double tol)
{
    return fabs(a - b) <= tol * fabs(b);
}

/* One layer of TOKENS rows seeing PAIRS keys, from the FLOP formulas: a
 * GEMM's FLOPs are twice its weights per row, attention 4·d per key. */
static double layer_s(const struct ra_config *c, const struct ra_cost_profile *pf, double tokens, double pairs)
{
    const double d = c->dim, kv = (double)c->n_kv_heads * c->head_dim, h = c->hidden_dim;
    const double lin = 2.0 * tokens * (2 * d * d + 2 * d * kv + 3 * d * h);
    return lin / pf->gemm_flops + 4 * d * pairs / pf->attn_flops + pf->other_s_per_token_layer * tokens;
}

/* The part of layer_s before the KV hook: the QKV projection's share of the
 * linear layers (its weights), the memory-bound ops' share by elements touched. */
static double qkv_s(const struct ra_config *c, const struct ra_cost_profile *pf, double tokens)
{
    const double d = c->dim, kv = (double)c->n_kv_heads * c->head_dim, h = c->hidden_dim;
    const double lin = 2.0 * tokens * (2 * d * d + 2 * d * kv + 3 * d * h);
    return lin * (d + 2 * kv) / (2 * d + 2 * kv + 3 * h) / pf->gemm_flops +
           pf->other_s_per_token_layer * tokens * (2 * d + kv) / (5 * d + kv + h);
}

/* Keys seen by the rows [a, b) under the causal rule. */
static double keys(int a, int b)
{
    double s = 0;
    for (int q = a; q < b; q++)
        s += q + 1;
    return s;
}

static double classifier(const struct ra_config *c, const struct ra_cost_profile *pf)
{
    return 2.0 * c->dim * c->vocab_size / pf->gemm_flops;
}

static const struct ra_cost_profile PF = { .gemm_flops = 70e9, .attn_flops = 25e9, .other_s_per_token_layer = 2e-6,
                                           .p2p_bandwidth = 2e9, .p2p_latency = 1e-4 };

/* Nothing loaded (no spans, or spans outside a shorter prompt): the plain model. */
static void test_nothing_loaded(void)
{
    struct ra_config c = bench_small();
    const struct ra_cost_reuse ru = { .pass_a = 1, .ratio = 0.15, .check = 1, .global = 1 };
    const int b1[] = { 0, 3000 }, b2[] = { 0, 1700, 3000 }, b3[] = { 0, 1000, 1800, 3000 };
    const int *bs[] = { b1, b2, b3 };
    for (int m = 0; m < 2; m++)
        for (int p = 1; p <= 3; p++) {
            double plain, reuse, fin[3];
            CHECK_OK(ra_cost_predict(&c, &PF, m ? RA_COST_TSP : RA_COST_KVR, bs[p - 1], p, &plain, NULL));
            CHECK_OK(ra_cost_reuse_replay(&c, &PF, m ? RA_COST_TSP : RA_COST_KVR, &ru, bs[p - 1], p, &reuse, fin,
                                          NULL));
            CHECK(reuse == plain);
        }
}

/* One rank, two layers: pass A through layer 0, then pass B's rows. */
static void test_one_rank(void)
{
    struct ra_config c = bench_small();
    c.n_layers = 2;
    struct ra_cost_profile pf = PF;
    pf.row_list_factor = 1.3;
    const struct ra_cost_span loads[] = { { 100, 500 }, { 600, 300 } }; /* 800 rows, two chunks back to back */
    struct ra_cost_reuse ru = { .loaded = loads, .n_loaded = 2, .pass_a = 1, .ratio = 0.25, .check = 0 };
    const int b[] = { 0, 1000 };
    double t, want;
    int rows;
    CHECK_OK(ra_cost_reuse_rows(&ru, b, 1, &rows));
    CHECK(rows == 200 + 200);
    const double pass_a = qkv_s(&c, &pf, 1000); /* check layer 0: its QKV, then the pass stops */
    const double pairs_b = keys(0, 100) + keys(900, 1000) + 0.25 * keys(100, 900);
    want = pass_a + 2 * 1.3 * layer_s(&c, &pf, 400, pairs_b) + classifier(&c, &pf);
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 1, &t, NULL, NULL));
    printf("one rank, blend 0.25: %.6f s predicted, %.6f s by hand\n", t, want);
    CHECK(close_rel(t, want, 1e-12));

    /* A later check layer: layers before it in full. */
    ru.check = 1;
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 1, &t, NULL, NULL));
    CHECK(close_rel(t, want + layer_s(&c, &pf, 1000, keys(0, 1000)), 1e-12));
    ru.check = 0;
    /* Ratio 1: pass B is the whole span (no list factor): the plain pass after pass A. */
    ru.ratio = 1;
    double plain;
    CHECK_OK(ra_cost_predict(&c, &pf, RA_COST_KVR, b, 1, &plain, NULL));
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_TSP, &ru, b, 1, &t, NULL, NULL));
    CHECK(close_rel(t, plain + pass_a, 1e-12));

    /* full: no pass A, only the must rows; installs at each layer's begin. */
    ru.pass_a = 0;
    ru.ratio = 0;
    pf.install_s_per_row_layer = 1e-7;
    want = 2 * (1.3 * layer_s(&c, &pf, 200, keys(0, 100) + keys(900, 1000)) + 800 * 1e-7) + classifier(&c, &pf);
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 1, &t, NULL, NULL));
    CHECK(close_rel(t, want, 1e-12));

    /* A slow store paces the pass: layer 1 begins when its rows are read. */
    pf.install_s_per_row_layer = 0;
    ru.load_bandwidth = 1e6;
    ru.kv_elem_bytes = 2;
    const double per_layer = 2.0 * 800 * 768 * 2 / 1e6;
    want = 2 * per_layer + 1.3 * layer_s(&c, &pf, 200, keys(0, 100) + keys(900, 1000)) + classifier(&c, &pf);
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 1, &t, NULL, NULL));
    CHECK(close_rel(t, want, 1e-12));

    /* The loader's own rate (the profile's): the same pacing when slower than the pass's layers;
     * with no core of its own its time also adds to every layer. */
    ru.load_bandwidth = 0;
    pf.load_bandwidth = 1e8;
    const double cpu = 2.0 * 800 * 768 * 2 / 1e8, c1 = 1.3 * layer_s(&c, &pf, 200, keys(0, 100) + keys(900, 1000));
    CHECK(c1 > cpu); /* the pass is the slower: only layer 0 waits */
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 1, &t, NULL, NULL));
    CHECK(close_rel(t, cpu + 2 * c1 + classifier(&c, &pf), 1e-12));
    ru.shared_core = 1;
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 1, &t, NULL, NULL));
    CHECK(close_rel(t, 3 * cpu + 2 * c1 + classifier(&c, &pf), 1e-12));
}

/* Two ranks, one layer, chain: rank 1's receive of [0, b_1) (full) or of
 * rank 0's recomputed rows with their positions (delta). */
static void test_two_ranks(void)
{
    struct ra_config c = bench_small();
    c.n_layers = 1;
    const struct ra_cost_span loads[] = { { 0, 1500 }, { 1500, 1000 } }; /* rows 2500..3000 computed */
    struct ra_cost_reuse ru = { .loaded = loads, .n_loaded = 2, .pass_a = 0 };
    struct ra_cost_profile pf = PF;
    pf.p2p_bandwidth = 1e8; /* a slow link: the transfer outlasts rank 1's QKV */
    const int b[] = { 0, 2000, 3000 };
    const double kv_row = 768 * 4.0;
    double t, fin[2];
    /* full: rank 0 recomputes nothing (hooks only), rank 1 its 500 must rows. */
    const double r1 = layer_s(&c, &pf, 500, keys(2500, 3000));
    const double arrive = 1e-4 + 2.0 * 2000 * kv_row / 1e8;
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 2, &t, fin, NULL));
    CHECK(fin[0] == 0);
    /* rank 1: its QKV (before the hook) runs while the rows travel; the rest after both. */
    CHECK(t >= arrive + classifier(&c, &pf) && t <= arrive + r1 + classifier(&c, &pf) + 1e-12);
    CHECK(t > r1 + classifier(&c, &pf) + 1e-3);
    /* delta: rank 0 recomputed no rows, so only the latency travels. */
    ru.delta = 1;
    double td;
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 2, &td, fin, NULL));
    CHECK(td >= r1 + classifier(&c, &pf) - 1e-12 && td <= r1 + 1e-4 + classifier(&c, &pf) + 1e-12);
    CHECK(td < t);
    /* delta loads every loaded row before the slice's end: a slow store makes it slower than full. */
    ru.load_bandwidth = 1e7;
    double slow_delta, slow_full;
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 2, &slow_delta, NULL, NULL));
    ru.delta = 0;
    CHECK_OK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 2, &slow_full, NULL, NULL));
    CHECK(slow_delta > slow_full);
    /* full: rank 0 passes its 2000 rows on once read, then they travel; delta:
     * rank 1 reads 2500 rows itself. */
    printf("slow store: delta %.4f s, full %.4f s\n", slow_delta, slow_full);
    CHECK(slow_full >= 2.0 * 2000 * kv_row / 1e7 + arrive && slow_delta >= 2.0 * 2500 * kv_row / 1e7);
}

/* Global selection waits for every rank's pass A; local does not. TSP with
 * delta sends moves fewer bytes than with full ones. */
static void test_scope_and_tsp(void)
{
    struct ra_config c = bench_small();
    const struct ra_cost_span loads[] = { { 64, 2000 }, { 2064, 2000 } };
    struct ra_cost_reuse ru = { .loaded = loads, .n_loaded = 2, .pass_a = 1, .ratio = 0.15, .check = 1 };
    const int b[] = { 0, 2100, 4200 };
    double local, global, full, delta;
    struct ra_cost_layer *ll = calloc(2 * (size_t)c.n_layers, sizeof *ll), *gl = calloc(2 * (size_t)c.n_layers, sizeof *gl);
    CHECK_OK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, b, 2, &local, NULL, ll));
    ru.global = 1;
    CHECK_OK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, b, 2, &global, NULL, gl));
    CHECK(global > local);
    /* local: rank 0 begins pass B once its own pass A ends, before rank 1's pass A (which waits on
     * rank 0's rows) ends; global waits for rank 1's too, longer than its all-gather takes */
    CHECK(ll[0].start + 1e-3 < gl[0].start);
    free(ll), free(gl);
    CHECK_OK(ra_cost_reuse_replay(&c, &PF, RA_COST_TSP, &ru, b, 2, &full, NULL, NULL));
    ru.delta = 1;
    CHECK_OK(ra_cost_reuse_replay(&c, &PF, RA_COST_TSP, &ru, b, 2, &delta, NULL, NULL));
    CHECK(delta < full);
    /* Reuse is faster than a full prefill on the same split. */
    double plain;
    CHECK_OK(ra_cost_predict(&c, &PF, RA_COST_KVR, b, 2, &plain, NULL));
    printf("4200 rows, 2 ranks: plain KVR %.4f s, blend 0.15 KVR local %.4f global %.4f, TSP full %.4f delta %.4f\n",
           plain, local, global, full, delta);
    CHECK(local < plain);
}

/* The balanced split: ranks finish together, and no worse than the plain
 * auto split under the model; loaded rows shift work to the ranks that hold them. */
static void test_balance(void)
{
    struct ra_config c = bench_small();
    const int C = 8192;
    /* The first half is stored chunks (cheap), the rest fresh. */
    const struct ra_cost_span loads[] = { { 32, 1024 }, { 1056, 1024 }, { 2080, 1024 }, { 3104, 1000 } };
    const struct ra_cost_reuse ru = { .loaded = loads, .n_loaded = 4, .pass_a = 1, .ratio = 0.15, .check = 1,
                                      .global = 1 };
    for (int p = 2; p <= 4; p++) {
        int plain[5], bal[5];
        double t_plain, t_bal, fin[4];
        char how[200];
        CHECK_OK(ra_partition_auto(&c, &PF, C, p, plain, NULL, 0));
        CHECK_OK(ra_partition_auto_reuse(&c, &PF, RA_COST_KVR, &ru, C, p, bal, how, sizeof how));
        CHECK_OK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, plain, p, &t_plain, NULL, NULL));
        CHECK_OK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, bal, p, &t_bal, fin, NULL));
        printf("P=%d: plain auto [%d..%d] %.4f s, reuse auto first boundary %d %.4f s (%s)\n", p, plain[1],
               plain[p - 1], t_plain, bal[1], t_bal, how);
        CHECK(t_bal <= t_plain);
        CHECK(bal[1] > plain[1]); /* rank 0 holds cheap loaded rows: it takes more of them */
        CHECK(strstr(how, "reuse-balanced") != NULL);
    }
    /* Without a profile: FLOPs; still valid bounds. */
    int b[3];
    CHECK_OK(ra_partition_auto_reuse(&c, NULL, RA_COST_TSP, &ru, C, 2, b, NULL, 0));
    CHECK(b[0] == 0 && b[1] > 0 && b[1] < C && b[2] == C);
}

/* A request's view before any lookup, the tables' tag, and --partition
 * resolved for a reuse run. */
static void test_request_and_resolve(void)
{
    struct ra_config c = bench_small();
    int starts[] = { 5, 15, 25 }, lens[] = { 10, 10, 15 };
    struct ra_request req = { .n = 44, .n_prefix = 5, .n_chunks = 3, .chunk_start = starts, .chunk_len = lens,
                              .suffix_start = 40 };
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    struct ra_cost_span spans[3];
    struct ra_cost_reuse ru;
    cfg.ratio = -1; /* auto: the floor */
    CHECK_OK(ra_cost_reuse_of_request(&req, RA_REUSE_BLEND, &cfg, 1, 0, RA_DTYPE_BF16, spans, &ru));
    CHECK(ru.n_loaded == 3 && ru.loaded == spans && spans[2].start == 25 && spans[2].n == 15);
    CHECK(ru.pass_a == 1 && ru.ratio == RA_BLEND_MIN_RATIO && ru.check == 1 && ru.global && !ru.delta &&
          ru.kv_elem_bytes == 2);
    CHECK_OK(ra_cost_reuse_of_request(&req, RA_REUSE_FULL, &cfg, 0, 1, RA_DTYPE_F32, spans, &ru));
    CHECK(ru.n_loaded == 3 && ru.pass_a == 0 && ru.ratio == 0 && ru.delta && ru.kv_elem_bytes == 4);
    CHECK_OK(ra_cost_reuse_of_request(&req, RA_REUSE_NONE, &cfg, 0, 0, RA_DTYPE_F32, spans, &ru));
    CHECK(ru.n_loaded == 0);
    req.n = 40; /* the last chunk holds the last row: computed */
    CHECK_OK(ra_cost_reuse_of_request(&req, RA_REUSE_BLEND, NULL, 1, 0, RA_DTYPE_F32, spans, &ru));
    CHECK(ru.n_loaded == 2 && ru.ratio == 0.15);

    char tag[256];
    ra_partition_reuse_tag("CPU-2c", RA_REUSE_BLEND, 0.15, 1, 0, tag, sizeof tag);
    CHECK(!strcmp(tag, "CPU-2c+reuse-blend-r0.15-global-full"));
    ra_partition_reuse_tag("CPU-2c", RA_REUSE_FULL, 0.15, 0, 1, tag, sizeof tag);
    CHECK(!strcmp(tag, "CPU-2c+reuse-full-local-delta"));

    /* --partition auto for a reuse run is the reuse auto split (no profile: FLOPs). */
    const int C = 6000;
    const struct ra_cost_span loads[] = { { 16, 2000 }, { 2016, 2000 } };
    const struct ra_cost_reuse big = { .loaded = loads, .n_loaded = 2, .pass_a = 1, .ratio = 0.15, .check = 1 };
    const struct ra_partition_run run = { &c, C, 2, "CPU-2c", NULL };
    const struct ra_partition_reuse pr = { &big, RA_COST_KVR, "CPU-2c+reuse-blend-r0.15-local-full" };
    struct ra_partition_spec spec;
    int b[3], want[3], plain[3];
    char source[512];
    unsetenv("RA_PROFILE");
    CHECK_OK(ra_partition_spec_parse("auto", &spec));
    CHECK_OK(ra_partition_resolve_reuse(&spec, &run, &pr, b, source, sizeof source, NULL));
    CHECK_OK(ra_partition_auto_reuse(&c, NULL, RA_COST_KVR, &big, C, 2, want, NULL, 0));
    CHECK_OK(ra_partition_resolve(&spec, &run, plain, source + 256, 256, NULL));
    CHECK(b[1] == want[1] && b[1] != plain[1] && strstr(source, "reuse-balanced") != NULL);
    CHECK_OK(ra_partition_spec_parse("even", &spec));
    CHECK_OK(ra_partition_resolve_reuse(&spec, &run, &pr, b, source, sizeof source, NULL));
    CHECK(b[1] == 3000);
    /* table: reads the reuse tag's group: a missing file names it. */
    CHECK_OK(ra_partition_spec_parse("table:/nonexistent/t.h5", &spec));
    CHECK(ra_partition_resolve_reuse(&spec, &run, &pr, b, source, sizeof source, NULL) != RA_OK);
    const struct ra_partition_reuse none = { NULL, RA_COST_KVR, NULL };
    CHECK(ra_partition_resolve_reuse(&spec, &run, &none, b, source, sizeof source, NULL) == RA_EINVAL);
}

static void test_bad_input(void)
{
    struct ra_config c = bench_small();
    const int b[] = { 0, 500, 1000 };
    double t;
    const struct ra_cost_span overlap[] = { { 0, 100 }, { 50, 100 } }, outside[] = { { 900, 200 } };
    struct ra_cost_reuse ru = { .loaded = overlap, .n_loaded = 2, .pass_a = 1, .ratio = 0.2, .check = 1 };
    CHECK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, b, 2, &t, NULL, NULL) == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "overlaps") != NULL);
    ru.loaded = outside;
    ru.n_loaded = 1;
    CHECK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, b, 2, &t, NULL, NULL) == RA_EINVAL);
    ru.loaded = overlap;
    ru.n_loaded = 1;
    ru.ratio = 1.5;
    CHECK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, b, 2, &t, NULL, NULL) == RA_EINVAL);
    ru.ratio = 0.2;
    ru.check = 12;
    CHECK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, b, 2, &t, NULL, NULL) == RA_EINVAL);
    ru.check = 1;
    CHECK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, NULL, b, 2, &t, NULL, NULL) == RA_EINVAL);
    CHECK(ra_cost_reuse_objective_eval(NULL, b, 2, &t) == RA_EINVAL);
    struct ra_cost_profile pf = PF;
    pf.row_list_factor = -1;
    CHECK(ra_cost_reuse_replay(&c, &pf, RA_COST_KVR, &ru, b, 2, &t, NULL, NULL) == RA_EINVAL);
    CHECK_OK(ra_cost_reuse_replay(&c, &PF, RA_COST_KVR, &ru, b, 2, &t, NULL, NULL));
}

int main(void)
{
    test_nothing_loaded();
    test_one_rank();
    test_two_ranks();
    test_scope_and_tsp();
    test_balance();
    test_request_and_resolve();
    test_bad_input();
    return test_result("test_costmodel_reuse");
}
