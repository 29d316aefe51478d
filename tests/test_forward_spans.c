/* One prompt processed as one span equals the same prompt processed as 2, 3
 * and 7 consecutive spans (including 1-token spans): final logits and every
 * KV row. This is the property the KV-Runahead chain rests on. */
#include "random_model.h"
#include "ra_core.h"
#include "test.h"

/* OpenBLAS picks kernels by the GEMM's row count, so a row's rounding depends
 * on the span length: differences of ~1e-5 after a few layers are fp32 noise.
 * A wrong mask, position or cache row gives differences of order 1. */
#define TOL 1e-4

/* The linear layers' compute of the backends check_model makes. bf16 rounds
 * each activation row on its own, and oneDNN's kernels sum a row's products
 * in an order that does not depend on the row count, so bf16 compute must
 * meet the same bound. */
static enum ra_compute compute = RA_COMPUTE_AUTO;

/* Except in one case: a 1-token span is a decode step, which runs a GEMV
 * (cpu_kernels.h gemv) and the decode attention, each summing in its own
 * order. In fp32 that moves results by ~1e-7; with bf16 compute such a move
 * can flip the bf16 rounding of an activation element (one bf16 ulp, 2^-8)
 * and that shows downstream as up to ~1e-3. So bf16 compute gets a bound of
 * a few bf16 ulps; a wrong mask, position or row is still of order 1. */
#define TOL_BF16 1e-2

static double kv_diff(const struct ra_kvcache *a, const struct ra_kvcache *b, int rows)
{
    double worst = 0;
    for (int l = 0; l < a->n_layers; l++) {
        double dk = test_max_rel_diff(ra_kvcache_k(a, l, 0), ra_kvcache_k(b, l, 0), (size_t)rows * a->kv_dim);
        double dv = test_max_rel_diff(ra_kvcache_v(a, l, 0), ra_kvcache_v(b, l, 0), (size_t)rows * a->kv_dim);
        worst = fmax(worst, fmax(dk, dv));
    }
    return worst;
}

/* Splits [0, n) into `parts` spans at random boundaries (1-token spans allowed). */
static void random_bounds(int n, int parts, int *b)
{
    b[0] = 0;
    b[parts] = n;
    for (int i = 1; i < parts; i++) {
        int lo = b[i - 1] + 1, hi = n - (parts - i);
        b[i] = test_rand_int(lo, hi);
    }
}

static void check_model(const char *name, struct ra_model *m, int n, int threads)
{
    const struct ra_config *c = &m->config;
    struct ra_backend *be;
    struct ra_context cx;
    struct ra_kvcache whole, split;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    float *ref = malloc((size_t)c->vocab_size * sizeof(float)), *got = malloc((size_t)c->vocab_size * sizeof(float));
    for (int i = 0; i < n; i++)
        tokens[i] = test_rand_int(0, c->vocab_size - 1);

    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = threads }));
    be->compute = compute;
    CHECK_OK(ra_context_init(&cx, m, be));
    CHECK_OK(ra_kvcache_init(&whole, be, c->n_layers, ra_config_kv_dim(c), n));
    CHECK_OK(ra_forward_span(&cx, tokens, 0, n, &whole, ref));

    const int parts_list[] = { 2, 3, 7 };
    for (int pi = 0; pi < 3; pi++) {
        for (int trial = 0; trial < 2; trial++) {
            const int parts = parts_list[pi];
            int b[8];
            if (trial == 0) { /* the extreme: 1-token spans first, the rest last */
                for (int i = 0; i < parts; i++)
                    b[i] = i;
                b[parts] = n;
            } else {
                random_bounds(n, parts, b);
            }
            CHECK_OK(ra_kvcache_init(&split, be, c->n_layers, ra_config_kv_dim(c), n));
            for (int i = 0; i < parts; i++)
                CHECK_OK(ra_forward_span(&cx, tokens + b[i], b[i], b[i + 1] - b[i], &split,
                                         i == parts - 1 ? got : NULL));
            double dl = test_max_rel_diff(got, ref, (size_t)c->vocab_size), dk = kv_diff(&split, &whole, n);
            const double tol = compute == RA_COMPUTE_BF16 || m->weights.layers[0].wq.dtype == RA_DTYPE_BF16
                                   ? TOL_BF16
                                   : TOL;
            if (dl > tol || dk > tol)
                fprintf(stderr, "%s: %d spans (%s): logits differ by %.3g, KV by %.3g\n", name, parts,
                        trial ? "random" : "1-token first", dl, dk);
            CHECK(dl <= tol && dk <= tol);
            CHECK(ra_argmax(got, c->vocab_size) == ra_argmax(ref, c->vocab_size));
            ra_kvcache_free(&split);
        }
    }
    /* Guard against a vacuous pass: logits must carry information. */
    CHECK(ref[ra_argmax(ref, c->vocab_size)] != ref[0] || ref[1] != ref[0]);

    /* A span past the cache or the context, and a token outside the vocabulary, fail cleanly. */
    CHECK(ra_forward_span(&cx, tokens, n, 1, &whole, NULL) == RA_ERANGE);
    int32_t bad = c->vocab_size;
    CHECK(ra_forward_span(&cx, &bad, 0, 1, &whole, NULL) == RA_ERANGE);
    CHECK(strstr(ra_error_message(), "outside the vocabulary") != NULL);

    ra_kvcache_free(&whole);
    ra_context_free(&cx);
    ra_backend_free(be);
    free(tokens);
    free(ref);
    free(got);
}

/* More threads than the 64 the backend once capped at silently: the backend
 * runs with exactly as many as asked (bf16 weights use a widening scratch per
 * thread) and computes the same logits. */
static void check_many_threads(struct ra_model *m, int threads)
{
    const struct ra_config *c = &m->config;
    struct ra_backend *one, *many;
    struct ra_context c1, cn; /* one model, a context on each backend */
    struct ra_kvcache kv;
    int32_t tokens[40];
    float *ref = malloc((size_t)c->vocab_size * sizeof(float)), *got = malloc((size_t)c->vocab_size * sizeof(float));
    for (int i = 0; i < 40; i++)
        tokens[i] = test_rand_int(0, c->vocab_size - 1);
    CHECK_OK(ra_backend_open(&one, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    CHECK_OK(ra_backend_open(&many, "cpu", &(struct ra_backend_params){ .threads = threads }));
    CHECK(many->n_threads == threads);
    CHECK_OK(ra_context_init(&c1, m, one));
    CHECK_OK(ra_context_init(&cn, m, many));
    CHECK_OK(ra_kvcache_init(&kv, one, c->n_layers, ra_config_kv_dim(c), 40));
    CHECK_OK(ra_forward_span(&c1, tokens, 0, 40, &kv, ref));
    ra_kvcache_free(&kv);
    CHECK_OK(ra_kvcache_init(&kv, many, c->n_layers, ra_config_kv_dim(c), 40));
    CHECK_OK(ra_forward_span(&cn, tokens, 0, 40, &kv, got));
    CHECK(test_max_rel_diff(got, ref, (size_t)c->vocab_size) <= TOL);
    ra_kvcache_free(&kv);
    ra_context_free(&c1);
    ra_context_free(&cn);
    ra_backend_free(one);
    ra_backend_free(many);
    free(ref);
    free(got);
}

/* Runs tokens [0, n) as SPANS equal spans and generates 3 tokens greedily,
 * which must fail with a message naming WHERE after WANT_OUT tokens (WHERE
 * NULL: succeed). Returns the first generated token. */
static int check_nonfinite(struct ra_model *m, const int32_t *tokens, int n, int spans, const char *where,
                           int want_out)
{
    const struct ra_config *c = &m->config;
    struct ra_backend *be;
    struct ra_context cx;
    struct ra_kvcache kv;
    struct ra_sampler s;
    int32_t out[3];
    int n_out = -1;
    float *logits = malloc((size_t)c->vocab_size * sizeof(float));
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 2 }));
    CHECK_OK(ra_context_init(&cx, m, be));
    CHECK_OK(ra_kvcache_init(&kv, be, c->n_layers, ra_config_kv_dim(c), n + 3));
    const int last = n - n / spans;
    for (int i = 0; i < spans; i++) {
        const int b0 = i * (n / spans), b1 = i == spans - 1 ? n : b0 + n / spans;
        CHECK_OK(ra_forward_span(&cx, tokens + b0, b0, b1 - b0, &kv, i == spans - 1 ? logits : NULL));
    }
    CHECK_OK(ra_sampler_init(&s, c->vocab_size, 0.0f, 0.9f, 1));
    const struct ra_generate g = { .max_tokens = 3, .eos_id = -1, .prompt = tokens, .prompt_start = last };
    ra_error_clear();
    int rc = ra_generate_run(&cx, &kv, n, logits, &s, &g, out, &n_out);
    if (where) {
        if (rc != RA_ERANGE || !strstr(ra_error_message(), where))
            fprintf(stderr, "  expected an error naming \"%s\", got %d: %s\n", where, rc, ra_error_message());
        CHECK(rc == RA_ERANGE && strstr(ra_error_message(), where) && n_out == want_out);
    } else {
        CHECK(rc == RA_OK && n_out == 3);
    }
    ra_sampler_free(&s);
    ra_kvcache_free(&kv);
    ra_context_free(&cx);
    ra_backend_free(be);
    free(logits);
    return n_out > 0 ? out[0] : -1;
}

/* Non-finite logits stop generation with the first layer and position where a
 * non-finite value appears (found by a checked re-run of the span) instead of
 * greedy decoding id 0 forever. */
static void check_nonfinite_cases(void)
{
    const struct ra_config cfg = { .dim = 64, .hidden_dim = 128, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                                   .vocab_size = 100, .seq_len = 64, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    int32_t tokens[12];
    struct ra_model m;
    for (int i = 0; i < 12; i++)
        tokens[i] = 10 + i;
    test_rand_seed(0x5eed); /* the same weights again below; a seed whose first greedy token is not in the prompt */
    test_random_model(&m, &cfg, RA_DTYPE_F32, 1.0f);
    const int first = check_nonfinite(&m, tokens, 12, 1, NULL, 3);
    /* finite weights whose activations overflow: layer 1's norm weight huge */
    float *w = (float *)m.weights.layers[1].attn_norm.data;
    for (int i = 0; i < cfg.dim; i++)
        w[i] = 3e38f;
    check_nonfinite(&m, tokens, 12, 1, "the first non-finite value (NaN) is in layer 1's keys at position 0", 0);
    check_nonfinite(&m, tokens, 12, 3, "layer 1's keys at position 0", 0); /* rows before the last span, too */
    ra_model_free(&m);

    test_random_model(&m, &cfg, RA_DTYPE_F32, 1.0f);
    ((float *)m.weights.final_norm.data)[17] = NAN; /* the case */
    check_nonfinite(&m, tokens, 12, 2, "the logits at position 11 are not finite (id 0 is NaN); the first non-finite "
                                       "value (NaN) is in the final norm at position 11", 0);
    ra_model_free(&m);

    test_random_model(&m, &cfg, RA_DTYPE_F32, 1.0f);
    ((float *)m.weights.embed.data)[(size_t)tokens[5] * cfg.dim + 3] = INFINITY; /* the token at position 5 */
    check_nonfinite(&m, tokens, 12, 1, "(+Inf) is in the token embedding at position 5", 0);
    ra_model_free(&m);

    /* appearing while decoding: the first generated token's embedding is bad,
     * so the prompt's logits are fine and the span searched is that token's */
    test_rand_seed(0x5eed);
    test_random_model(&m, &cfg, RA_DTYPE_F32, 1.0f);
    CHECK(first >= 0 && (first < tokens[0] || first > tokens[11]));
    if (first >= 0 && (first < tokens[0] || first > tokens[11])) {
        ((float *)m.weights.embed.data)[(size_t)first * cfg.dim + 1] = NAN;
        check_nonfinite(&m, tokens, 12, 1, "the logits at position 12 are not finite (id 0 is NaN); the first "
                        "non-finite value (NaN) is in the token embedding at position 12", 1);
    }
    ra_model_free(&m);
}

int main(void)
{
    struct ra_model m;
    const struct ra_config mha = { .dim = 96, .hidden_dim = 256, .n_layers = 3, .n_heads = 6, .n_kv_heads = 6,
                                   .vocab_size = 300, .seq_len = 1024, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    struct ra_config gqa = mha;
    gqa.n_kv_heads = 2;
    gqa.rope_theta = 500000.0f;

    test_random_model(&m, &mha, RA_DTYPE_F32, 1.0f);
    check_model("mha f32", &m, 301, 2);
    compute = RA_COMPUTE_BF16;
    check_model("mha f32, bf16 compute", &m, 301, 2);
    compute = RA_COMPUTE_AUTO;
    ra_model_free(&m);
    test_random_model(&m, &gqa, RA_DTYPE_BF16, 1.0f);
    check_model("gqa bf16", &m, 200, 1);
    ra_model_free(&m);
    test_random_model(&m, &gqa, RA_DTYPE_F16, 1.0f);
    check_model("gqa f16", &m, 130, 2);
    ra_model_free(&m);
    test_random_model(&m, &gqa, RA_DTYPE_BF16, 1.0f);
    check_many_threads(&m, 80);
    ra_model_free(&m);
    check_nonfinite_cases();

    const char *s260k = test_fixture("stories260K.bin");
    if (s260k) {
        CHECK_OK(ra_model_load(&m, s260k));
        if (!test_failures)
            check_model("stories260K", &m, 320, 2);
        compute = RA_COMPUTE_BF16; /* f32 weights: a prepacked bf16 copy */
        if (!test_failures)
            check_model("stories260K bf16 compute", &m, 320, 2);
        compute = RA_COMPUTE_AUTO;
        ra_model_free(&m);
    }
    return test_result("test_forward_spans");
}
