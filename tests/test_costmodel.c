/* The cost model: hand-computable cases, the chain's compute replay, the KVR
 * splits and TSP/KVR ratios that bench-chain and the quick start print as
 * expected (found with the search on the model) and the profile's names. */
#include "costmodel.h"
#include "forward.h"
#include "search.h"
#include "status.h"
#include "test.h"

#define G 80e9 /* FLOP/s: the rate of performance-targets.md's arithmetic */

static struct ra_config bench_small(void)
{
    return (struct ra_config){ .dim = 768, .hidden_dim = 2048, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
                               .vocab_size = 32000, .seq_len = 16384, .head_dim = 64, .rope_theta = 10000,
                               .norm_eps = 1e-5f };
}

/* Compute only, transfers free: what performance-targets.md assumes. */
static struct ra_cost_profile free_links(void)
{
    return (struct ra_cost_profile){ .gemm_flops = G, .attn_flops = G, .p2p_bandwidth = INFINITY };
}

static int close_rel(double a, double b, double tol)
{
    return fabs(a - b) <= tol * fabs(b);
}

/* Per-layer seconds of a slice, split at the KV hook as costmodel.h says. */
static void slice_times(const struct ra_config *c, const struct ra_cost_profile *pf, int start, int n, double *qkv,
                        double *rest)
{
    double lin, att;
    ra_forward_flops(c, start, n, &lin, &att);
    const double d = c->dim, kv = ra_config_kv_dim(c), h = c->hidden_dim, L = c->n_layers;
    const double share = d * (d + 2 * kv) / (d * (2 * d + 2 * kv + 3 * h));
    const double pre = (2 * d + kv) / (5 * d + kv + h), other = pf->other_s_per_token_layer * n;
    *qkv = lin / L * share / pf->gemm_flops + other * pre;
    *rest = att / L / pf->attn_flops + lin / L * (1 - share) / pf->gemm_flops + other * (1 - pre);
}

static double classifier(const struct ra_config *c, const struct ra_cost_profile *pf)
{
    return 2.0 * c->dim * c->vocab_size / pf->gemm_flops;
}

static void test_one_rank(void)
{
    struct ra_config c = bench_small();
    struct ra_cost_profile pf = { .gemm_flops = 70e9, .attn_flops = 25e9, .other_s_per_token_layer = 2e-6,
                                  .p2p_bandwidth = 1e9, .p2p_latency = 1e-3 };
    const int b[] = { 0, 3000 };
    double lin, att, t_kvr, t_tsp, fin;
    ra_forward_flops(&c, 0, 3000, &lin, &att);
    const double want = lin / 70e9 + att / 25e9 + 2e-6 * 3000 * 12 + classifier(&c, &pf);
    CHECK_OK(ra_cost_predict(&c, &pf, RA_COST_KVR, b, 1, &t_kvr, &fin));
    CHECK_OK(ra_cost_predict(&c, &pf, RA_COST_TSP, b, 1, &t_tsp, NULL));
    printf("P=1: %.6f s predicted, %.6f s by hand\n", t_kvr, want);
    CHECK(close_rel(t_kvr, want, 1e-12) && close_rel(t_tsp, want, 1e-12) && fin == t_kvr);
}

/* Free transfers: KVR is the chain's compute replay, each layer of rank r
 * waiting for rank r-1 to reach the same layer's hook. */
static double compute_replay(const struct ra_config *c, const struct ra_cost_profile *pf, const int *b, int p)
{
    double send[64], t = 0;
    for (int r = 0; r < p; r++) {
        double qkv, rest;
        slice_times(c, pf, b[r], b[r + 1] - b[r], &qkv, &rest);
        t = 0;
        for (int l = 0; l < c->n_layers; l++) {
            double ready = t + qkv;
            if (r > 0 && send[l] > ready)
                ready = send[l];
            send[l] = ready;
            t = ready + rest;
        }
    }
    return t + classifier(c, pf);
}

static void test_compute_replay(void)
{
    struct ra_config c = bench_small();
    struct ra_cost_profile pf = free_links();
    pf.attn_flops = 30e9;
    pf.other_s_per_token_layer = 1e-6;
    const int b2[] = { 0, 2500, 4096 }, b4[] = { 0, 1500, 2600, 3500, 4096 }, b4e[] = { 0, 1024, 2048, 3072, 4096 };
    const int *cases[] = { b2, b4, b4e };
    const int ps[] = { 2, 4, 4 };
    for (int k = 0; k < 6; k++) {
        double t, fin[4];
        pf.p2p_bandwidth = k < 3 ? INFINITY : 1e30; /* free, or as good as free */
        CHECK_OK(ra_cost_predict(&c, &pf, RA_COST_KVR, cases[k % 3], ps[k % 3], &t, fin));
        CHECK(close_rel(t, compute_replay(&c, &pf, cases[k % 3], ps[k % 3]), 1e-12) && fin[ps[k % 3] - 1] == t);
    }

    /* One layer, two ranks, by hand: rank 1 waits for rank 0's hook, then the transfer. */
    c.n_layers = 1;
    pf.p2p_bandwidth = 2e9;
    pf.p2p_latency = 1e-4;
    const int b[] = { 0, 3000, 4096 };
    double q0, r0, q1, r1, t, fin[2];
    slice_times(&c, &pf, 0, 3000, &q0, &r0);
    slice_times(&c, &pf, 3000, 1096, &q1, &r1);
    const double arrive = q0 + 1e-4 + 2.0 * 3000 * 768 * 4 / 2e9;
    CHECK_OK(ra_cost_predict(&c, &pf, RA_COST_KVR, b, 2, &t, fin));
    CHECK(close_rel(fin[0], q0 + r0, 1e-12));
    CHECK(close_rel(t, fmax(q1, arrive) + r1 + classifier(&c, &pf), 1e-12));

    /* TSP by hand: the all-gather starts when both reached it (ring: latency per step). */
    const double gather = 2 * (1e-4 + (4096.0 - 1096) * 768 * 4 / 2e9);
    CHECK_OK(ra_cost_predict(&c, &pf, RA_COST_TSP, b, 2, &t, fin));
    CHECK(close_rel(fin[0], fmax(q0, q1) + gather + r0, 1e-12));
    CHECK(close_rel(t, fmax(fin[0], fmax(q0, q1) + gather + r1 + classifier(&c, &pf)), 1e-12));
}

/* The layer trace: contiguous layers, waits inside them, ends at the finish. */
static void test_layer_trace(void)
{
    struct ra_config c = bench_small();
    struct ra_cost_profile pf = { .gemm_flops = 70e9, .attn_flops = 25e9, .p2p_bandwidth = 5e9, .p2p_latency = 2e-5 };
    const int b[] = { 0, 1800, 3100, 4096 }, L = c.n_layers;
    struct ra_cost_layer lay[3 * 12];
    double t, fin[3];
    for (int m = 0; m < 2; m++) {
        CHECK_OK(ra_cost_replay(&c, &pf, m ? RA_COST_TSP : RA_COST_KVR, b, 3, &t, fin, lay));
        for (int r = 0; r < 3; r++)
            for (int l = 0; l < L; l++) {
                const struct ra_cost_layer *x = &lay[r * L + l];
                CHECK(x->start <= x->wait_end && x->wait_end <= x->end);
                if (l > 0)
                    CHECK(x->start == lay[r * L + l - 1].end);
            }
        CHECK(lay[0].start == 0 && lay[L - 1].end == fin[0]);
        CHECK(close_rel(lay[3 * L - 1].end + classifier(&c, &pf), fin[2], 1e-12));
    }
}

/* performance-targets.md: best KVR split (rank 0's share) and TSP/KVR-S. */
static void test_targets(void)
{
    const int lens[] = { 2048, 4096, 8192, 16384 };
    const double share[] = { 0.545, 0.575, 0.612, 0.646 }, ratio[] = { 1.09, 1.15, 1.24, 1.32 };
    struct ra_config c = bench_small();
    struct ra_cost_profile free = free_links(), link = free;
    link.p2p_bandwidth = 5e9; /* a plausible shared-memory link, for the report */
    link.p2p_latency = 20e-6;
    const struct ra_cost_profile *pfs[] = { &free, &link };
    printf("context | best KVR share (target) | TSP/KVR (target) | KVR/(single/2) | trials "
           "|| with 5 GB/s, 20 us: share, TSP/KVR, KVR/(single/2)\n");
    for (int i = 0; i < 4; i++) {
        const int C = lens[i], even[] = { 0, C / 2, C };
        double got_share[2], got_ratio[2], half[2];
        int n = 0;
        for (int k = 0; k < 2; k++) {
            struct ra_cost_objective mo = { &c, pfs[k], RA_COST_KVR };
            struct ra_search_opts o = { .min_stride = 4 };
            int b[3];
            double kvr, tsp;
            CHECK_OK(ra_search_partition(C, 2, ra_cost_objective_eval, &mo, &o, b, &kvr, &n));
            CHECK_OK(ra_cost_predict(&c, pfs[k], RA_COST_TSP, even, 2, &tsp, NULL));
            got_share[k] = (double)b[1] / C;
            got_ratio[k] = tsp / kvr;
            CHECK_OK(ra_cost_predict(&c, pfs[k], RA_COST_KVR, (int[]){ 0, C }, 1, &half[k], NULL));
            half[k] = kvr / (half[k] / 2); /* against the no-communication bound */
        }
        printf("%7d | %.3f (%.3f) | %.3f (%.2f) | %.4f | %d || %.3f, %.3f, %.4f\n", C, got_share[0], share[i],
               got_ratio[0], ratio[i], half[0], n, got_share[1], got_ratio[1], half[1]);
        CHECK(fabs(got_share[0] - share[i]) <= 0.01);
        CHECK(fabs(got_ratio[0] - ratio[i]) <= 0.03 * ratio[i]);
        CHECK(half[0] < 1.01); /* only pipeline fill and the classifier on top */
    }
}

static void test_names(void)
{
    const char *const *names = ra_cost_profile_names();
    int n = 0;
    while (names[n])
        n++;
    CHECK(n == RA_COST_PROFILE_N && !strcmp(names[0], "gemm_flops") && !strcmp(names[6], "allgather_latency"));
    struct ra_cost_profile pf = { 70e9, 25e9, 2e-6, 5e9, 2e-5, 4e9, 3e-5, 1.25, 1e-8, 2e9 }, back;
    double v[RA_COST_PROFILE_N];
    ra_cost_profile_pack(&pf, v);
    CHECK(v[0] == 70e9 && v[3] == 5e9 && v[6] == 3e-5 && v[7] == 1.25 && v[8] == 1e-8);
    CHECK(!strcmp(names[7], "row_list_factor") && !strcmp(names[8], "install_s_per_row_layer") &&
          !strcmp(names[9], "load_bandwidth") && v[9] == 2e9);
    CHECK_OK(ra_cost_profile_unpack(&back, names, v, n));
    CHECK(!memcmp(&back, &pf, sizeof pf));
    /* Any order, unknown names ignored, optional fields missing. */
    const char *some[] = { "p2p_bandwidth", "future_field", "attn_flops", "gemm_flops" };
    const double sv[] = { 1e9, 42, 2e10, 3e10 };
    CHECK_OK(ra_cost_profile_unpack(&back, some, sv, 4));
    CHECK(back.gemm_flops == 3e10 && back.attn_flops == 2e10 && back.p2p_bandwidth == 1e9 && back.p2p_latency == 0);
    CHECK(ra_cost_profile_unpack(&back, some, sv, 3) == RA_EINVAL); /* no gemm_flops */
    CHECK(strstr(ra_error_message(), "gemm_flops") != NULL);
}

static void test_bad_input(void)
{
    struct ra_config c = bench_small();
    struct ra_cost_profile pf = free_links();
    double t;
    CHECK(ra_cost_predict(&c, &pf, RA_COST_KVR, (int[]){ 0, 10, 10, 20 }, 3, &t, NULL) == RA_EINVAL);
    CHECK(ra_cost_predict(&c, &pf, RA_COST_KVR, (int[]){ 5, 10 }, 1, &t, NULL) == RA_EINVAL);
    CHECK(ra_cost_predict(&c, &pf, (enum ra_cost_method)7, (int[]){ 0, 10 }, 1, &t, NULL) == RA_EINVAL);
    pf.gemm_flops = 0;
    CHECK(ra_cost_predict(&c, &pf, RA_COST_KVR, (int[]){ 0, 10 }, 1, &t, NULL) == RA_EINVAL);
    pf = free_links();
    pf.p2p_latency = NAN;
    CHECK(ra_cost_predict(&c, &pf, RA_COST_TSP, (int[]){ 0, 10 }, 1, &t, NULL) == RA_EINVAL);
    CHECK(ra_cost_objective_eval(NULL, (int[]){ 0, 10 }, 1, &t) == RA_EINVAL);
    pf = free_links();
    pf.p2p_bandwidth = 0; /* a one-rank calibration: fine for p = 1 only */
    CHECK_OK(ra_cost_predict(&c, &pf, RA_COST_KVR, (int[]){ 0, 10 }, 1, &t, NULL));
    CHECK(ra_cost_predict(&c, &pf, RA_COST_KVR, (int[]){ 0, 5, 10 }, 2, &t, NULL) == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "point-to-point bandwidth") != NULL);
    pf.p2p_bandwidth = -1;
    CHECK(ra_cost_profile_check(&pf) == RA_EINVAL);
    pf = free_links();
    c.n_kv_heads = 5;
    CHECK(ra_cost_predict(&c, &pf, RA_COST_KVR, (int[]){ 0, 10 }, 1, &t, NULL) != RA_OK);
}

int main(void)
{
    test_one_rank();
    test_compute_replay();
    test_layer_trace();
    test_targets();
    test_names();
    test_bad_input();
    return test_result("test_costmodel");
}
