/* One prompt processed as one span equals the same prompt processed as 2, 3
 * and 7 consecutive spans (including 1-token spans): final logits and every
 * KV row. This is the property the KV-Runahead chain rests on. */
#include "random_model.h"
#include "runahead.h"
#include "test.h"

/* OpenBLAS picks kernels by the GEMM's row count, so a row's rounding depends
 * on the span length: differences of ~1e-5 after a few layers are fp32 noise.
 * A wrong mask, position or cache row gives differences of order 1. */
#define TOL 1e-4

static double kv_diff(const struct ra_kvcache *a, const struct ra_kvcache *b, int rows)
{
    double worst = 0;
    for (int l = 0; l < a->n_layers; l++) {
        double dk = test_max_rel_diff(a->k[l], b->k[l], (size_t)rows * a->kv_dim);
        double dv = test_max_rel_diff(a->v[l], b->v[l], (size_t)rows * a->kv_dim);
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
    struct ra_kvcache whole, split;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    float *ref = malloc((size_t)c->vocab_size * sizeof(float)), *got = malloc((size_t)c->vocab_size * sizeof(float));
    for (int i = 0; i < n; i++)
        tokens[i] = test_rand_int(0, c->vocab_size - 1);

    CHECK_OK(ra_backend_cpu_init(&be, threads));
    CHECK_OK(ra_model_attach(m, be));
    CHECK_OK(ra_kvcache_init(&whole, be, c->n_layers, ra_config_kv_dim(c), n));
    CHECK_OK(ra_forward_span(m, tokens, 0, n, &whole, NULL, ref));

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
                CHECK_OK(ra_forward_span(m, tokens + b[i], b[i], b[i + 1] - b[i], &split, NULL,
                                         i == parts - 1 ? got : NULL));
            double dl = test_max_rel_diff(got, ref, (size_t)c->vocab_size), dk = kv_diff(&split, &whole, n);
            if (dl > TOL || dk > TOL)
                fprintf(stderr, "%s: %d spans (%s): logits differ by %.3g, KV by %.3g\n", name, parts,
                        trial ? "random" : "1-token first", dl, dk);
            CHECK(dl <= TOL && dk <= TOL);
            CHECK(ra_argmax(got, c->vocab_size) == ra_argmax(ref, c->vocab_size));
            ra_kvcache_free(&split);
        }
    }
    /* Guard against a vacuous pass: logits must carry information. */
    CHECK(ref[ra_argmax(ref, c->vocab_size)] != ref[0] || ref[1] != ref[0]);

    /* A span past the cache or the context, and a token outside the vocabulary, fail cleanly. */
    CHECK(ra_forward_span(m, tokens, n, 1, &whole, NULL, NULL) == RA_ERANGE);
    int32_t bad = c->vocab_size;
    CHECK(ra_forward_span(m, &bad, 0, 1, &whole, NULL, NULL) == RA_ERANGE);
    CHECK(strstr(ra_error_message(), "outside the vocabulary") != NULL);

    ra_kvcache_free(&whole);
    ra_model_detach(m);
    ra_backend_free(be);
    free(tokens);
    free(ref);
    free(got);
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
    ra_model_free(&m);
    test_random_model(&m, &gqa, RA_DTYPE_BF16, 1.0f);
    check_model("gqa bf16", &m, 200, 1);
    ra_model_free(&m);
    test_random_model(&m, &gqa, RA_DTYPE_F16, 1.0f);
    check_model("gqa f16", &m, 130, 2);
    ra_model_free(&m);

    const char *s260k = test_fixture("stories260K.bin");
    if (s260k) {
        CHECK_OK(ra_model_load(&m, s260k));
        if (!test_failures)
            check_model("stories260K", &m, 320, 2);
        ra_model_free(&m);
    }
    return test_result("test_forward_spans");
}
