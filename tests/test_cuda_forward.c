/* A whole prompt on the CUDA backend equals the CPU backend: the prompt's
 * last logits (also when the prompt runs as two spans, the second over the
 * cache rows of the first) and greedy decoding, on the trained stories260K
 * checkpoint (GQA, llama2.c format) and a synthetic GQA model, for each weight
 * dtype the GPU holds. Decoding is teacher-forced with the CPU's tokens so
 * that one near-tie cannot make every later step differ; a token must agree
 * wherever the CPU's top two logits are further apart than the tolerance, and
 * with fp32 weights the free-running greedy tokens must be the CPU's.
 * Exits 77 without a GPU or without a CUDA build. */
#include "backend_cuda.h"
#include "random_model.h"
#include "ra_core.h"
#include "test.h"

#define N_GEN 24

/* Tolerances on the normwise relative error ||gpu - cpu|| / ||cpu|| of a row of
 * logits. fp32: GEMMs summed in another order (cuBLAS vs OpenBLAS), a few
 * layers deep; bf16/f16: weights and GEMM inputs rounded to 8/11 mantissa
 * bits in every layer. The trained stories260K amplifies rounding most: an
 * H200 measured 0.0999 (bf16), 0.0159 (f16) and 5.0e-6 (f32) there, against
 * 0.0042, 0.0005 and 2.9e-7 on the random GQA model (2026-11-26). A wrong
 * mask, position or head moves the whole row: an error of order 1. */
static double tol_of(enum ra_dtype dt)
{
    return dt == RA_DTYPE_BF16 ? 0.15 : dt == RA_DTYPE_F16 ? 0.025 : 1e-4;
}

/* ||a - b|| / ||b|| over n floats (NaN anywhere: infinite). */
static double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    const double r = sqrt(num / (den > 0 ? den : 1));
    return r == r ? r : INFINITY;
}

/* Runs TOKENS[0, n) (in two spans when split > 0) and N_GEN decode steps fed
 * with FEED (or, when FEED is NULL, with its own greedy tokens, written to
 * OUT). LOGITS gets 1 + N_GEN rows of vocab floats. */
static int run(struct ra_model *m, struct ra_backend *be, const int32_t *tokens, int n, int split,
               const int32_t *feed, int32_t *out, float *logits)
{
    const struct ra_config *c = &m->config;
    const int V = c->vocab_size;
    struct ra_kvcache kv;
    struct ra_context cx; /* the backend's copies of the weights, for this run */
    int rc = ra_context_init(&cx, m, be);
    if (rc != RA_OK)
        return rc;
    if ((rc = ra_kvcache_init(&kv, be, c->n_layers, ra_config_kv_dim(c), n + N_GEN)) != RA_OK) {
        ra_context_free(&cx);
        return rc;
    }
    if (split > 0 && (rc = ra_forward_span(&cx, tokens, 0, split, &kv, NULL)) != RA_OK)
        goto out;
    if ((rc = ra_forward_span(&cx, tokens + split, split, n - split, &kv, logits)) != RA_OK)
        goto out;
    for (int i = 0; i < N_GEN; i++) {
        const int32_t next = feed ? feed[i] : ra_argmax(logits + (size_t)i * V, V);
        if (out)
            out[i] = next;
        if ((rc = ra_forward_span(&cx, &next, n + i, 1, &kv, logits + (size_t)(i + 1) * V)) != RA_OK)
            goto out;
    }
out:
    ra_kvcache_free(&kv);
    ra_context_free(&cx);
    return rc;
}

static double rms(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return sqrt(s / n);
}

/* How far apart the two largest of x[n] are. */
static float margin(const float *x, int n)
{
    const int top = ra_argmax(x, n);
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != top && x[i] > second)
            second = x[i];
    return x[top] - second;
}

/* ATT_TOL: the logits' error the attention kernels add (the tensor-core kernel
 * rounds Q, K, V and P to bf16; 0 where fp32 kernels run), on top of the
 * weights' dtype's. With it, fp32 weights are not held to the CPU's greedy
 * continuation, which one near-tie can turn. */
static void compare_on(const char *name, struct ra_model *m, struct ra_model *mg, struct ra_backend *cpu,
                       struct ra_backend *gpu, int n, double att_tol)
{
    const int V = m->config.vocab_size;
    const size_t rows = (size_t)(N_GEN + 1) * V;
    int32_t *tokens = malloc(sizeof(int32_t) * n), ref_ids[N_GEN], gpu_ids[N_GEN];
    float *ref = malloc(sizeof(float) * rows), *got = malloc(sizeof(float) * rows);
    for (int i = 0; i < n; i++)
        tokens[i] = i == 0 ? 1 : test_rand_int(2, V - 1);
    CHECK_OK(run(m, cpu, tokens, n, 0, NULL, ref_ids, ref));
    /* sanity: the reference carries information */
    CHECK(margin(ref, V) > 0.0f);

    const enum ra_dtype dts[] = { RA_DTYPE_F32, RA_DTYPE_BF16, RA_DTYPE_F16 };
    for (int di = 0; di < 3; di++) {
        const enum ra_dtype dt = dts[di];
        const double tol = tol_of(dt) + att_tol;
        CHECK_OK(ra_backend_cuda_set_dtype(gpu, dt));
        for (int split = 0; split <= n / 3; split += n / 3) {
            CHECK_OK(run(mg, gpu, tokens, n, split, ref_ids, NULL, got));
            double worst = 0;
            int disagree = 0;
            for (int i = 0; i <= N_GEN; i++) {
                const float *r = ref + (size_t)i * V, *g = got + (size_t)i * V;
                worst = fmax(worst, rel_l2(g, r, (size_t)V));
                /* clear: the top two further apart than twice the error a logit may have
                 * (the tolerance spread evenly: tol times the row's rms), each way */
                if (margin(r, V) > 4.0 * tol * rms(r, V) && ra_argmax(g, V) != ra_argmax(r, V))
                    disagree++;
            }
            if (worst > tol || disagree)
                fprintf(stderr, "%s, %s weights, %s: logits' relative error %.3g (tolerance %.3g), %d clear greedy "
                        "token(s) differ\n", name, ra_dtype_name(dt), split ? "two spans" : "one span", worst, tol,
                        disagree);
            else
                printf("%s, %s weights, %s: logits' relative error %.3g\n", name, ra_dtype_name(dt),
                       split ? "two spans" : "one span", worst);
            CHECK(worst <= tol);
            CHECK(disagree == 0);
        }
    }
    /* fp32 weights: the free-running greedy continuation is the CPU's */
    CHECK_OK(ra_backend_cuda_set_dtype(gpu, RA_DTYPE_F32));
    CHECK_OK(run(mg, gpu, tokens, n, 0, NULL, gpu_ids, got));
    CHECK(att_tol > 0 || memcmp(gpu_ids, ref_ids, sizeof ref_ids) == 0);
    free(tokens);
    free(ref);
    free(got);
}

static void compare(const char *name, struct ra_model *m, struct ra_backend *cpu, struct ra_backend *gpu, int n,
                    double att_tol)
{
    compare_on(name, m, m, cpu, gpu, n, att_tol);
}

/* ra_forward_rows on the GPU (fp32 weights): after a prefill of n tokens,
 * every third-ish row recomputed at its position over that cache, with those
 * rows first overwritten by set_rows, gives back the prefill's K and V rows
 * and its last logits (GPU against GPU: the same kernels up to the attention,
 * which now runs the reference kernel over position lists). */
static void rows_case(const char *name, struct ra_model *m, struct ra_backend *gpu, int n)
{
    const struct ra_config *c = &m->config;
    const int V = c->vocab_size, kvd = ra_config_kv_dim(c);
    int32_t *tokens = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n);
    int32_t *sub = malloc(sizeof(int32_t) * n);
    float *full = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    float *before = malloc(sizeof(float) * (size_t)n * kvd), *after = malloc(sizeof(float) * (size_t)n * kvd);
    float *junk = malloc(sizeof(float) * (size_t)n * kvd);
    for (int i = 0; i < n; i++)
        tokens[i] = test_rand_int(1, V - 1);
    int ns = 0;
    for (int p = 1; p < n - 1; p += 1 + p % 4)
        pos[ns++] = p;
    pos[ns++] = n - 1;
    for (int i = 0; i < ns; i++)
        sub[i] = tokens[pos[i]];
    for (size_t i = 0; i < (size_t)ns * kvd; i++)
        junk[i] = 1e3f;
    struct ra_kvcache kv;
    struct ra_context cx;
    CHECK_OK(ra_backend_cuda_set_dtype(gpu, RA_DTYPE_F32));
    CHECK_OK(ra_context_init(&cx, m, gpu));
    CHECK_OK(ra_kvcache_init(&kv, gpu, c->n_layers, kvd, n));
    CHECK_OK(ra_forward_span(&cx, tokens, 0, n, &kv, full));
    const int L = c->n_layers - 1; /* the last layer's K rows: every layer before feeds them */
    CHECK_OK(gpu->ops->download(gpu, before, ra_kvcache_k(&kv, L, 0), sizeof(float) * (size_t)n * kvd));
    float *djunk = ra_backend_alloc(gpu, sizeof(float) * (size_t)ns * kvd);
    CHECK_OK(gpu->ops->upload(gpu, djunk, junk, sizeof(float) * (size_t)ns * kvd));
    for (int l = 0; l < c->n_layers; l++) {
        CHECK_OK(gpu->ops->set_rows(gpu, ra_kvcache_k(&kv, l, 0), RA_DTYPE_F32, djunk, RA_DTYPE_F32, kvd, pos, ns));
        CHECK_OK(gpu->ops->set_rows(gpu, ra_kvcache_v(&kv, l, 0), RA_DTYPE_F32, djunk, RA_DTYPE_F32, kvd, pos, ns));
    }
    CHECK_OK(ra_forward_rows(&cx, sub, &(struct ra_rows){ ns, 0, pos }, &kv, got));
    CHECK_OK(gpu->ops->download(gpu, after, ra_kvcache_k(&kv, L, 0), sizeof(float) * (size_t)n * kvd));
    const double el = rel_l2(got, full, (size_t)V), ek = rel_l2(after, before, (size_t)n * kvd);
    printf("%s: %d of %d rows at their positions: logits' relative error %.3g, K rows' %.3g\n", name, ns, n, el, ek);
    CHECK(el <= 1e-4 && ek <= 1e-4);
    ra_backend_release(gpu, djunk);
    ra_kvcache_free(&kv);
    ra_context_free(&cx);
    void *bufs[] = { tokens, pos, sub, full, got, before, after, junk };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

int main(void)
{
    if (!ra_cuda_built())
        return test_skip_no_device("test_cuda_forward", "this build has no CUDA (configure --with-cuda)");
    if (ra_cuda_device_count() == 0)
        return test_skip_no_device("test_cuda_forward", "no CUDA device (the CUDA backend compiled and linked)");
    struct ra_backend *cpu = NULL, *gpu = NULL;
    CHECK_OK(ra_backend_open(&cpu, "cpu", &(struct ra_backend_params){ .threads = 2 }));
    const struct ra_backend_params on0 = { .device = 0, .device_dtype = RA_DTYPE_BF16 };
    CHECK_OK(ra_backend_open(&gpu, "cuda", &on0));
    if (!cpu || !gpu)
        return test_result("test_cuda_forward");
    test_rand_seed(7);

    /* GQA 8/2 heads of 16, prompts over several attention tiles */
    const struct ra_config gqa = { .dim = 128, .hidden_dim = 288, .n_layers = 3, .n_heads = 8, .n_kv_heads = 2,
                                   .vocab_size = 300, .seq_len = 512, .head_dim = 16, .rope_theta = 10000.0f,
                                   .norm_eps = 1e-5f };
    struct ra_model synth = { 0 };
    test_random_model(&synth, &gqa, RA_DTYPE_F32, 2.0f);
    compare("synthetic GQA", &synth, cpu, gpu, 200, 0);
    rows_case("synthetic GQA", &synth, gpu, 200);
    ra_model_free(&synth);

    /* heads of 64: spans on the tensor-core kernel, decode steps on the split one */
    const struct ra_config wide = { .dim = 256, .hidden_dim = 512, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                                    .vocab_size = 300, .seq_len = 512, .head_dim = 64, .rope_theta = 10000.0f,
                                    .norm_eps = 1e-5f };
    struct ra_model synth64 = { 0 };
    test_random_model(&synth64, &wide, RA_DTYPE_F32, 2.0f);
    compare("synthetic GQA, heads of 64", &synth64, cpu, gpu, 200, 1e-2);
    ra_model_free(&synth64);

    const char *path = test_fixture("stories260K.bin");
    if (path) {
        struct ra_model m = { 0 };
        CHECK_OK(ra_model_load(&m, path));
        if (m.config.dim)
            compare("stories260K", &m, cpu, gpu, 150, 0);
        ra_model_free(&m);
    }
    /* block-quantized weights: the GPU dequantizes them at upload, so it
     * matches the CPU on the values the blocks hold (in f32) */
    const enum ra_dtype qts[] = { RA_DTYPE_Q8_0, RA_DTYPE_Q4_1 };
    for (int qi = 0; qi < 2; qi++) {
        struct ra_model q = { 0 }, qf = { 0 };
        test_rand_seed(11);
        test_random_model(&q, &gqa, RA_DTYPE_F32, 2.0f);
        test_rand_seed(11);
        test_random_model(&qf, &gqa, RA_DTYPE_F32, 2.0f);
        CHECK_OK(test_quantize_model(&q, qts[qi], 0));
        CHECK_OK(test_quantize_model(&qf, qts[qi], 1));
        char name[64];
        snprintf(name, sizeof name, "synthetic GQA, %s blocks", ra_dtype_name(qts[qi]));
        if (ra_dtype_is_quant(q.weights.layers[0].wq.dtype))
            compare_on(name, &qf, &q, cpu, gpu, 200, 0);
        ra_model_free(&q);
        ra_model_free(&qf);
    }
    ra_backend_free(gpu);
    ra_backend_free(cpu);
    return test_result("test_cuda_forward");
}
