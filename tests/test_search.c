/* The partition search on synthetic objectives with known minima (no timing):
 * quadratic bowls, the balance shape of real TTFT, deterministic noise, seeds,
 * invalid grid points, memoisation, trial counts and the large-P fallback. */
#include "search.h"
#include "status.h"
#include "test.h"

#include <stdint.h>

#define MAX_P 64
#define MAX_CALLS 200000

/* What every objective records about its calls. */
struct probe {
    int calls, invalid, p, n_tokens;
    uint64_t trace;       /* hash of the call sequence, for determinism */
    int fail_at;          /* return an error on this call (0: never) */
    double noise;         /* relative amplitude of the pseudo-noise */
    const double *target; /* bowls: the minimum's boundaries */
    double a, c;          /* balance: per-rank work speed_r·(a·n + c·n·b) */
    int hetero;           /* ranks of unequal speed: speed_r = 1 + 0.3·sin(r) */
    int (*seen)[MAX_P + 1];
};

static int valid(const int *b, int n, int p)
{
    if (b[0] != 0 || b[p] != n)
        return 0;
    for (int r = 0; r < p; r++)
        if (b[r + 1] <= b[r])
            return 0;
    return 1;
}

static uint64_t hash_bounds(const int *b, int p)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i <= p; i++) {
        h ^= (uint32_t)b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* Deterministic pseudo-noise in [-1, 1] from the bounds. */
static double noise_of(const int *b, int p)
{
    uint64_t h = hash_bounds(b, p);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (double)(h >> 11) / (double)(1ULL << 53) * 2.0 - 1.0;
}

/* Every call: bounds must be valid and new (memoisation). */
static int record(struct probe *pr, const int *b, int p)
{
    if (p != pr->p || !valid(b, pr->n_tokens, p))
        pr->invalid++;
    if (pr->seen && pr->calls < MAX_CALLS) {
        for (int i = 0; i < pr->calls; i++)
            if (!memcmp(pr->seen[i], b, sizeof(int) * (size_t)(p + 1)))
                pr->invalid++; /* evaluated twice */
        memcpy(pr->seen[pr->calls], b, sizeof(int) * (size_t)(p + 1));
    }
    pr->calls++;
    pr->trace = (pr->trace ^ hash_bounds(b, p)) * 1099511628211ULL;
    if (pr->fail_at && pr->calls == pr->fail_at)
        return ra_error_set(RA_ECOMM, "synthetic failure at call %d", pr->calls);
    return RA_OK;
}

/* A bowl: 1e6 + Σ_i i·(b_i - t_i)² (the constant lets relative noise matter). */
static int bowl(void *ctx, const int *b, int p, double *value)
{
    struct probe *pr = ctx;
    int rc = record(pr, b, p);
    double v = 1e6;
    for (int i = 1; i < p; i++)
        v += i * (b[i] - pr->target[i]) * (b[i] - pr->target[i]);
    *value = v * (1 + pr->noise * noise_of(b, p));
    return rc;
}

static double speed(const struct probe *pr, int r)
{
    return pr->hetero ? 1 + 0.3 * sin(r) : 1;
}

static double balance_value(const struct probe *pr, const int *b, int p)
{
    double worst = 0;
    for (int r = 0; r < p; r++) {
        double n = b[r + 1] - b[r];
        worst = fmax(worst, speed(pr, r) * (pr->a * n + pr->c * n * b[r]));
    }
    return worst;
}

/* TTFT's shape: the slowest rank, rank r doing a·n_r + c·n_r·b_r. */
static int balance(void *ctx, const int *b, int p, double *value)
{
    struct probe *pr = ctx;
    int rc = record(pr, b, p);
    *value = balance_value(pr, b, p) * (1 + pr->noise * noise_of(b, p));
    return rc;
}

/* The balance problem's optimum (continuous slices): bisection on the work W
 * such that greedy slices of work W exactly cover the prompt. */
static double balance_optimum(const struct probe *pr, int n_tokens, int p)
{
    double lo = 0, hi = pr->a * n_tokens + pr->c * (double)n_tokens * n_tokens;
    for (int it = 0; it < 200; it++) {
        double w = 0.5 * (lo + hi), b = 0;
        for (int r = 0; r < p; r++)
            b += w / (speed(pr, r) * (pr->a + pr->c * b));
        if (b >= n_tokens)
            hi = w;
        else
            lo = w;
    }
    return hi;
}

static struct probe probe_new(int n_tokens, int p)
{
    struct probe pr = { 0 };
    pr.n_tokens = n_tokens;
    pr.p = p;
    return pr;
}

static int last_done, progress_calls, progress_bad;

static void on_progress(void *ctx, int done, int planned, double best, const int *best_bounds)
{
    (void)ctx;
    progress_calls++;
    if (done != last_done + 1 || planned < done || !best_bounds || !(best > 0))
        progress_bad++;
    last_done = done;
}

static void test_one_rank(void)
{
    struct probe pr = probe_new(100, 1);
    int b[2], n = -1;
    double v;
    pr.target = (double[]){ 0 };
    CHECK_OK(ra_search_partition(100, 1, bowl, &pr, NULL, b, &v, &n));
    CHECK(b[0] == 0 && b[1] == 100 && n == 1 && pr.calls == 1 && v == 1e6);
    CHECK(!strcmp(ra_search_method_name(1, NULL), "trivial"));
}

/* P = 2: a quadratic with its minimum off any grid, found within min_stride. */
static void test_two_ranks(void)
{
    const double t[] = { 0, 3217.3 };
    int b[3], n;
    double v;
    int(*seen)[MAX_P + 1] = malloc(sizeof *seen * MAX_CALLS);
    struct probe pr = probe_new(5000, 2);
    pr.target = t;
    pr.seen = seen;
    struct ra_search_opts o = { .progress = on_progress };
    last_done = progress_calls = progress_bad = 0;
    CHECK_OK(ra_search_partition(5000, 2, bowl, &pr, &o, b, &v, &n));
    printf("P=2 quadratic: b_1 = %d (minimum at %.1f), %d trials\n", b[1], t[1], n);
    CHECK(fabs(b[1] - t[1]) <= 16);
    CHECK(pr.invalid == 0 && n == pr.calls && n <= 40);
    CHECK(progress_calls == n && progress_bad == 0);
    CHECK(!strcmp(ra_search_method_name(2, NULL), "grid"));

    /* Off the first grid entirely (initial span 0.1 of C/P): recentering reaches it. */
    struct probe far = probe_new(5000, 2);
    far.target = (double[]){ 0, 4601 };
    o = (struct ra_search_opts){ .initial_span = 0.1 };
    CHECK_OK(ra_search_partition(5000, 2, bowl, &far, &o, b, &v, &n));
    printf("P=2 far minimum: b_1 = %d (minimum at 4601), %d trials\n", b[1], n);
    CHECK(abs(b[1] - 4601) <= 16 && far.invalid == 0);

    /* ±1% deterministic noise on a bowl 1e6 deep: ~100 tokens of slack. */
    struct probe noisy = probe_new(5000, 2);
    noisy.target = t;
    noisy.noise = 0.01;
    CHECK_OK(ra_search_partition(5000, 2, bowl, &noisy, NULL, b, &v, &n));
    printf("P=2 noisy quadratic: b_1 = %d, %d trials\n", b[1], n);
    CHECK(fabs(b[1] - t[1]) <= 200 && noisy.invalid == 0);
    free(seen);
}

/* P = 8 (the coordinate-wise fallback): a separable bowl far from any family. */
static void test_bowl_fallback(void)
{
    double t[9] = { 0 };
    int b[9], n;
    double v;
    for (int i = 1; i < 8; i++)
        t[i] = i * 512 + ((i * 37) % 11 - 5) * 40.3;
    struct probe pr = probe_new(4096, 8);
    pr.target = t;
    CHECK_OK(ra_search_partition(4096, 8, bowl, &pr, NULL, b, &v, &n));
    printf("P=8 bowl (%s): %d trials\n", ra_search_method_name(8, NULL), n);
    for (int i = 1; i < 8; i++)
        CHECK(fabs(b[i] - t[i]) <= 16);
    CHECK(pr.invalid == 0 && n == pr.calls);
}

/* P = 3 and 4: separable bowls in the offsets from even. */
static void test_bowls(void)
{
    const double t3[] = { 0, 1900.4, 2711.8 }, t4[] = { 0, 700.2, 2222.6, 3111.1 };
    const double *targets[] = { t3, t4 };
    int(*seen)[MAX_P + 1] = malloc(sizeof *seen * MAX_CALLS);
    for (int k = 0; k < 2; k++) {
        const int p = 3 + k, C = 4096;
        int b[MAX_P + 1], n;
        double v;
        struct probe pr = probe_new(C, p);
        pr.target = targets[k];
        pr.seen = seen;
        CHECK_OK(ra_search_partition(C, p, bowl, &pr, NULL, b, &v, &n));
        printf("P=%d bowl: %d trials:", p, n);
        for (int i = 1; i < p; i++) {
            printf(" b_%d = %d (%.1f)", i, b[i], targets[k][i]);
            CHECK(fabs(b[i] - targets[k][i]) <= 16);
        }
        printf("\n");
        CHECK(pr.invalid == 0 && n == pr.calls);
        /* Exhaustive: C(4095, p-1) partitions (8.4e6 for p = 3); a level's grid bound. */
        CHECK(n < (p == 3 ? 400 : 2500));

        struct probe noisy = probe_new(C, p);
        noisy.target = targets[k];
        noisy.noise = 0.01;
        CHECK_OK(ra_search_partition(C, p, bowl, &noisy, NULL, b, &v, &n));
        for (int i = 1; i < p; i++)
            CHECK(fabs(b[i] - targets[k][i]) <= 200);
        CHECK(noisy.invalid == 0);
    }
    free(seen);
}

/* The shape of real TTFT: the search must balance the ranks' work. */
static void check_balance(int C, int p, double noise, int hetero, double tol)
{
    int b[MAX_P + 1], n;
    double v;
    struct probe pr = probe_new(C, p);
    pr.a = 4608; /* bench-small: linear/attention FLOPs per token pair */
    pr.c = 1;
    pr.noise = noise;
    pr.hetero = hetero;
    CHECK_OK(ra_search_partition(C, p, balance, &pr, NULL, b, &v, &n));
    const double opt = balance_optimum(&pr, C, p), got = balance_value(&pr, b, p);
    printf("balance C=%d P=%d noise %.0f%%%s (%s): %.4f of the optimum, %d trials, b_1 = %d, b_p-1 = %d\n", C, p,
           100 * noise, hetero ? " unequal ranks" : "", ra_search_method_name(p, NULL), got / opt, n, b[1], b[p - 1]);
    CHECK(got <= opt * (1 + tol));
    CHECK(pr.invalid == 0 && n == pr.calls);
}

static void test_balance(void)
{
    check_balance(16384, 2, 0, 0, 0.005);
    check_balance(16384, 3, 0, 0, 0.01);
    check_balance(16384, 4, 0, 0, 0.01);
    check_balance(16384, 4, 0, 1, 0.01);
    check_balance(4096, 6, 0, 0, 0.02);
    check_balance(16384, 2, 0.01, 0, 0.025);
    check_balance(16384, 4, 0.01, 0, 0.03);
    check_balance(16384, 16, 0, 0, 0.02);
    check_balance(16384, 16, 0.01, 0, 0.03);
    /* Unequal ranks: the optimum is off the equal-work family, the sweeps must find it. */
    check_balance(16384, 16, 0, 1, 0.03);
    /* With noise too, single moves gain less than the noise hides: a documented limit. */
    check_balance(16384, 16, 0.01, 1, 0.2);
    check_balance(65536, 64, 0, 0, 0.03);
    CHECK(!strcmp(ra_search_method_name(16, NULL), "coordinate"));
    CHECK(!strcmp(ra_search_method_name(4, NULL), "grid"));
    CHECK(!strcmp(ra_search_method_name(5, NULL), "coordinate"));
    CHECK(!strcmp(ra_search_method_name(5, &(struct ra_search_opts){ .points_per_axis = 3 }), "grid"));
}

/* A seed at the optimum with a small span: few trials, and it stays there. */
static void test_seed(void)
{
    const double t[] = { 0, 900, 2100, 3000 };
    const int seed[] = { 0, 900, 2100, 3000, 4096 };
    int b[5], n_seeded, n_even;
    double v;
    struct probe pr = probe_new(4096, 4);
    pr.target = t;
    CHECK_OK(ra_search_partition(4096, 4, bowl, &pr, NULL, b, &v, &n_even));
    struct probe seeded = probe_new(4096, 4);
    seeded.target = t;
    struct ra_search_opts o = { .seed = seed, .initial_span = 0.03 };
    CHECK_OK(ra_search_partition(4096, 4, bowl, &seeded, &o, b, &v, &n_seeded));
    printf("seeded at the optimum: %d trials (from even: %d)\n", n_seeded, n_even);
    CHECK(!memcmp(b, seed, sizeof seed) && v == 1e6);
    CHECK(n_seeded <= 2 * 125 && n_seeded * 3 < n_even);

    /* P = 2 from the optimum: one level of 5 points, 4 of them new. */
    const int seed2[] = { 0, 3000, 4096 };
    struct probe two = probe_new(4096, 2);
    two.target = (double[]){ 0, 3000 };
    o = (struct ra_search_opts){ .seed = seed2, .initial_span = 0.015 }; /* first stride 16 */
    CHECK_OK(ra_search_partition(4096, 2, bowl, &two, &o, b, &v, &n_seeded));
    CHECK(b[1] == 3000 && n_seeded <= 5);

    /* A seed that is not a partition. */
    const int bad[] = { 0, 900, 900, 3000, 4096 };
    o.seed = bad;
    CHECK(ra_search_partition(4096, 4, bowl, &seeded, &o, b, &v, NULL) == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "seed") != NULL);
}

/* Tiny prompts: most grid points are invalid and must never be evaluated. */
static void test_invalid_points(void)
{
    int(*seen)[MAX_P + 1] = malloc(sizeof *seen * MAX_CALLS);
    const int sizes[][2] = { { 4, 4 }, { 5, 4 }, { 12, 4 }, { 40, 5 }, { 20, 3 }, { 9, 8 }, { 3, 2 } };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int C = sizes[k][0], p = sizes[k][1];
        int b[MAX_P + 1], n;
        double v, t[MAX_P + 1] = { 0 };
        for (int i = 1; i < p; i++)
            t[i] = i * (double)C / p + 0.7;
        struct probe pr = probe_new(C, p);
        pr.target = t;
        pr.seen = seen;
        struct ra_search_opts o = { .min_stride = 1 };
        CHECK_OK(ra_search_partition(C, p, bowl, &pr, &o, b, &v, &n));
        CHECK(pr.invalid == 0 && n == pr.calls && valid(b, C, p));
        if (C == p)
            CHECK(n == 1);
    }
    free(seen);
}

static void test_errors_and_determinism(void)
{
    const double t[] = { 0, 1000, 2000, 3000 };
    int b[5], n;
    double v;
    struct probe pr = probe_new(4096, 4);
    pr.target = t;
    pr.fail_at = 7;
    CHECK(ra_search_partition(4096, 4, bowl, &pr, NULL, b, &v, &n) == RA_ECOMM);
    CHECK(pr.calls == 7 && strstr(ra_error_message(), "synthetic failure"));

    CHECK(ra_search_partition(3, 4, bowl, &pr, NULL, b, &v, &n) == RA_EINVAL);
    struct ra_search_opts o = { .points_per_axis = 2 };
    CHECK(ra_search_partition(4096, 4, bowl, &pr, &o, b, &v, &n) == RA_EINVAL);
    o = (struct ra_search_opts){ .min_stride = -3 };
    CHECK(ra_search_partition(4096, 4, bowl, &pr, &o, b, &v, &n) == RA_EINVAL);

    /* Same inputs and values: the same sequence of calls (the objective is collective). */
    struct probe one = probe_new(16384, 5), two = probe_new(16384, 5);
    one.a = two.a = 4608;
    one.c = two.c = 1;
    one.noise = two.noise = 0.01;
    int b1[6], b2[6], n1, n2;
    double v1, v2;
    CHECK_OK(ra_search_partition(16384, 5, balance, &one, NULL, b1, &v1, &n1));
    CHECK_OK(ra_search_partition(16384, 5, balance, &two, NULL, b2, &v2, &n2));
    CHECK(one.trace == two.trace && n1 == n2 && !memcmp(b1, b2, sizeof b1) && v1 == v2);
}

int main(void)
{
    test_one_rank();
    test_two_ranks();
    test_bowls();
    test_bowl_fallback();
    test_balance();
    test_seed();
    test_invalid_points();
    test_errors_and_determinism();
    return test_result("test_search");
}
