/* --partition auto (partition/autosplit.h): the equal-work split gives every
 * rank the same modelled FLOPs within one token's worth (busiest minus idlest
 * rank at most the costliest token's FLOPs), for 2-4 ranks, MHA and GQA shapes; with a profile it balances predicted seconds, and with a link the
 * cost model's refinement never predicts a longer TTFT than its seed or even;
 * a profile stored in a table loads back. */
#include "autosplit.h"
#include "forward.h"
#include "partition.h"
#include "status.h"
#include "table.h"
#include "test.h"

static struct ra_config shape(int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int seq)
{
    return (struct ra_config){ .dim = dim, .hidden_dim = hidden, .n_layers = layers, .n_heads = heads,
                               .n_kv_heads = kv_heads, .vocab_size = vocab, .seq_len = seq,
                               .head_dim = dim / heads, .rope_theta = 10000, .norm_eps = 1e-5f };
}

static double work(const struct ra_config *c, const struct ra_cost_profile *pf, int start, int n)
{
    double lin, att;
    ra_forward_flops(c, start, n, &lin, &att);
    if (!pf)
        return lin + att;
    return lin / pf->gemm_flops + att / pf->attn_flops + pf->other_s_per_token_layer * n * c->n_layers;
}

static int valid(const int *b, int n, int p)
{
    if (b[0] != 0 || b[p] != n)
        return 0;
    for (int r = 0; r < p; r++)
        if (b[r + 1] <= b[r])
            return 0;
    return 1;
}

/* The gap between the busiest and the idlest rank's work, in tokens' worth
 * (the costliest token: the last). */
static double balance(const struct ra_config *c, const struct ra_cost_profile *pf, const int *b, int n, int p)
{
    const double token = work(c, pf, n - 1, 1);
    double hi = 0, lo = INFINITY;
    for (int r = 0; r < p; r++) {
        const double w = work(c, pf, b[r], b[r + 1] - b[r]);
        hi = w > hi ? w : hi;
        lo = w < lo ? w : lo;
    }
    return (hi - lo) / token;
}

static void test_equal_flops(void)
{
    const struct ra_config shapes[] = {
        shape(768, 2048, 12, 12, 12, 32000, 16384), /* bench-small, MHA */
        shape(2048, 5632, 22, 32, 4, 32000, 16384), /* tinyllama-1.1b, GQA 32/4 */
        shape(64, 172, 5, 8, 4, 512, 16384),        /* stories260K, GQA 8/4 */
    };
    const int contexts[] = { 8, 9, 14, 16, 19, 97, 140, 212, 312, 1000, 2048, 2302, 4096, 8192, 16384 };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int p = 2; p <= 4; p++)
            for (size_t i = 0; i < sizeof contexts / sizeof contexts[0]; i++) {
                int b[5];
                char how[256];
                const int C = contexts[i];
                CHECK_OK(ra_partition_auto(&shapes[s], NULL, C, p, b, how, sizeof how));
                CHECK(valid(b, C, p));
                const double dev = balance(&shapes[s], NULL, b, C, p);
                if (!(dev <= 1.0))
                    fprintf(stderr, "shape %zu, p=%d, C=%d: the ranks' work differs by %.2f tokens' worth\n", s, p,
                            C, dev);
                CHECK(dev <= 1.0);
                CHECK(strstr(how, "equal-work from FLOPs") != NULL);
                /* Attention makes later tokens dearer: later ranks get fewer of them. */
                for (int r = 0; r + 1 < p && C >= 1000; r++)
                    CHECK(b[r + 1] - b[r] >= b[r + 2] - b[r + 1]);
            }
    /* performance-targets.md's rank-0 shares for bench-small on 2 ranks (all FLOPs at one
     * rate, free links): the equal-work split is where those came from. */
    const struct { int C; double share; } want[] = { { 2048, 0.545 }, { 4096, 0.575 }, { 8192, 0.612 },
                                                     { 16384, 0.646 } };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int b[3];
        CHECK_OK(ra_partition_auto(&shapes[0], NULL, want[i].C, 2, b, NULL, 0));
        printf("bench-small p=2 C=%d: auto gives rank 0 %.3f (targets table %.3f)\n", want[i].C,
               (double)b[1] / want[i].C, want[i].share);
        CHECK(fabs((double)b[1] / want[i].C - want[i].share) < 0.01);
    }
    /* Many ranks: still balanced, and quick. */
    {
        static int b[257];
        CHECK_OK(ra_partition_auto(&shapes[1], NULL, 16384, 256, b, NULL, 0));
        CHECK(valid(b, 16384, 256) && balance(&shapes[1], NULL, b, 16384, 256) <= 1.0);
    }
    /* Tiny prompts: still a partition, 1-token slices at least. */
    for (int p = 2; p <= 4; p++)
        for (int C = p; C < p + 4; C++) {
            int b[5];
            CHECK_OK(ra_partition_auto(&shapes[1], NULL, C, p, b, NULL, 0));
            CHECK(valid(b, C, p));
        }
}

static void test_profile(void)
{
    const struct ra_config c = shape(768, 2048, 12, 12, 12, 32000, 16384);
    /* Attention at a third of the GEMM rate: rank 0 takes more of the prompt than by FLOPs. */
    const struct ra_cost_profile slow_attn = { .gemm_flops = 90e9, .attn_flops = 30e9,
                                               .other_s_per_token_layer = 1e-6 };
    int flops[4], timed[4], refined[4], even[4];
    char how[256];
    for (int p = 2; p <= 3; p++) {
        CHECK_OK(ra_partition_auto(&c, NULL, 8192, p, flops, NULL, 0));
        CHECK_OK(ra_partition_auto(&c, &slow_attn, 8192, p, timed, how, sizeof how));
        CHECK(strstr(how, "equal-time") != NULL);
        CHECK(timed[1] > flops[1]);
        CHECK(balance(&c, &slow_attn, timed, 8192, p) <= 1.0);
        /* With a link, the cost model refines; never worse than its seed or even. */
        struct ra_cost_profile linked = slow_attn;
        linked.p2p_bandwidth = 2e9;
        linked.p2p_latency = 20e-6;
        double t_ref, t_seed, t_even;
        CHECK_OK(ra_partition_auto(&c, &linked, 8192, p, refined, how, sizeof how));
        CHECK(strstr(how, "refined by the cost model") != NULL && valid(refined, 8192, p));
        CHECK_OK(ra_partition_parse("even", 8192, p, even));
        CHECK_OK(ra_cost_predict(&c, &linked, RA_COST_KVR, refined, p, &t_ref, NULL));
        CHECK_OK(ra_cost_predict(&c, &linked, RA_COST_KVR, timed, p, &t_seed, NULL));
        CHECK_OK(ra_cost_predict(&c, &linked, RA_COST_KVR, even, p, &t_even, NULL));
        printf("p=%d: predicted TTFT auto %.4f s, equal-time %.4f s, even %.4f s\n", p, t_ref, t_seed, t_even);
        CHECK(t_ref <= t_seed && t_ref < t_even);
    }
    /* Bad input: one clear error. */
    CHECK(ra_partition_auto(&c, NULL, 3, 4, flops, NULL, 0) == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "fewer than the 4 ranks") != NULL);
    struct ra_cost_profile bad = slow_attn;
    bad.attn_flops = 0;
    CHECK(ra_partition_auto(&c, &bad, 100, 2, flops, NULL, 0) == RA_EINVAL);
}

static void test_profile_load(void)
{
    char dir[] = "/tmp/test_autosplit.XXXXXX", path[256];
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    snprintf(path, sizeof path, "%s/t.h5", dir);
    const char *names[] = { "gemm_flops", "attn_flops", "p2p_bandwidth", "p2p_latency", "some_future_field" };
    const double values[] = { 5e10, 2e10, 3e9, 4e-6, 7 };
    struct ra_cost_profile pf;
    CHECK_OK(ra_table_profile_write(path, "m", "hw", names, values, 5, NULL));
    int busy = -1;
    CHECK_OK(ra_cost_profile_load(path, "m", "hw", &pf, &busy));
    CHECK(pf.gemm_flops == 5e10 && pf.attn_flops == 2e10 && pf.p2p_bandwidth == 3e9 && pf.p2p_latency == 4e-6);
    CHECK(busy == 0);
    CHECK(ra_cost_profile_load(path, "m", "other-hw", &pf, NULL) != RA_OK);
    /* a profile taken on a busy machine says so */
    const char *busy_names[] = { "gemm_flops", "attn_flops", "p2p_bandwidth", "p2p_latency", "calibration_busy" };
    const double busy_values[] = { 5e10, 2e10, 3e9, 4e-6, 1 };
    CHECK_OK(ra_table_profile_write(path, "m", "busy-hw", busy_names, busy_values, 5, NULL));
    CHECK_OK(ra_cost_profile_load(path, "m", "busy-hw", &pf, &busy));
    CHECK(busy == 1 && pf.gemm_flops == 5e10);
    char lock[300];
    snprintf(lock, sizeof lock, "%s.lock", path);
    unlink(lock);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_equal_flops();
    test_profile();
    test_profile_load();
    return test_result("test_autosplit");
}
