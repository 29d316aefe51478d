/* Block-quantized weights as a model holds them (src/loader_gguf.c):
 *  - each GGUF given (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K matrices) loads with its
 *    matrices in their blocks, in the mapping, and norm vectors in f32; the
 *    same file loaded with ra_load_options.dequantize_weights holds f32 only;
 *  - a prompt and 16 decode steps on the CPU backend give logits within
 *    TOL_LOGITS of the dequantized model's (the kernels quantize activations
 *    to int8 per block, llama.cpp's scheme, or round them to bf16 on that
 *    prefill path; the f32 model multiplies floats; RA_QUANT_GEMM picks the
 *    prefill path, tests/quant_model.sh runs each), and, fed
 *    the dequantized model's tokens, the same greedy token at every step
 *    where that model's top two logits are further apart than the logits
 *    may move;
 *  - the same for a random model in each of the five formats (no file:
 *    ra_quant_quantize's blocks, against the values they hold);
 *  - the scan for non-finite weights reads each block format's f16 scales
 *    and names the block and the scale (d, m, dmin). */
#include "context.h"
#include "finite.h"
#include "forward.h"
#include "half.h"
#include "kvcache.h"
#include "model.h"
#include "quant/quant.h"
#include "random_model.h"
#include "status.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest |native - dequantized| over the logits, relative to the largest
 * |logit|. The int8 activations (every decode step; prefill too on the int8
 * path) round each element by up to half a step of its block's max|x|/127;
 * bf16 panels round activations to 8 bits of mantissa. Through 4 layers and
 * the classifier of these random models that moved the logits by at most
 * 1.27% of the largest (Q8_0, bf16 prefill; 0.8-1.1% on every other type and
 * path, Zen 4): 3% leaves room for other CPUs' paths, and a wrong scale or
 * sub-block moves them by far more. */
#define TOL_LOGITS 0.03
#define PROMPT 24
#define STEPS 16

static void check_dtypes(const char *path, const struct ra_model *q, const struct ra_model *f)
{
    const struct ra_layer_weights *lq = &q->weights.layers[0], *lf = &f->weights.layers[0];
    if (!ra_dtype_is_quant(lq->wq.dtype) || !ra_dtype_is_quant(lq->w_down.dtype)) {
        fprintf(stderr, "%s: wq is %s and w_down %s: not kept in their blocks\n", path, ra_dtype_name(lq->wq.dtype),
                ra_dtype_name(lq->w_down.dtype));
        test_failures++;
    }
    CHECK(lq->attn_norm.dtype == RA_DTYPE_F32 && q->weights.final_norm.dtype == RA_DTYPE_F32);
    CHECK(lf->wq.dtype == RA_DTYPE_F32 && lf->w_down.dtype == RA_DTYPE_F32 && f->weights.embed.dtype == RA_DTYPE_F32);
    /* the blocks stay in the file's mapping: no copy of a matrix */
    const struct ra_mapped_file *mf = &q->files[0];
    const char *p = lq->wq.data, *base = (const char *)mf->data;
    CHECK(p >= base && p < base + mf->size);
    CHECK(ra_model_weight_bytes(q) < ra_model_weight_bytes(f) / 3);
    CHECK(ra_model_n_params(q) == ra_model_n_params(f));
}

/* Logits of the prompt, then STEPS greedy steps fed FEED's tokens (or its own when FEED is NULL). */
static int run(struct ra_context *cx, struct ra_kvcache *kv, const int32_t *prompt, int32_t *toks, float *logits,
               const int32_t *feed)
{
    const int V = cx->model->config.vocab_size;
    int rc = ra_forward_span(cx, prompt, 0, PROMPT, kv, logits);
    for (int s = 0; s < STEPS && rc == RA_OK; s++) {
        int best = 0;
        for (int j = 1; j < V; j++)
            if (logits[(size_t)s * V + j] > logits[(size_t)s * V + best])
                best = j;
        toks[s] = best;
        const int32_t next = feed ? feed[s] : best;
        if (s + 1 < STEPS)
            rc = ra_forward_span(cx, &next, PROMPT + s, 1, kv, logits + (size_t)(s + 1) * V);
    }
    return rc;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

/* Q (block weights) against F (the same values in f32): logits and greedy tokens. */
static void check_pair(const char *name, struct ra_model *q, struct ra_model *f, struct ra_backend *be)
{
    const struct ra_config *c = &q->config;
    const size_t V = (size_t)c->vocab_size;
    int32_t prompt[PROMPT], tq[STEPS], tf[STEPS];
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)c->vocab_size);
    float *lq = malloc(sizeof(float) * V * STEPS), *lf = malloc(sizeof(float) * V * STEPS);
    struct ra_context cq, cf;
    struct ra_kvcache kq, kf;
    CHECK_OK(ra_context_init(&cq, q, be));
    CHECK_OK(ra_context_init(&cf, f, be));
    CHECK_OK(ra_kvcache_init(&kq, be, c->n_layers, ra_config_kv_dim(c), PROMPT + STEPS));
    CHECK_OK(ra_kvcache_init(&kf, be, c->n_layers, ra_config_kv_dim(c), PROMPT + STEPS));
    CHECK_OK(run(&cf, &kf, prompt, tf, lf, NULL));
    CHECK_OK(run(&cq, &kq, prompt, tq, lq, tf));
    double worst = 0;
    int agree = 0, decided = 0, equal = 0;
    for (int s = 0; s < STEPS; s++) {
        const float *a = lq + s * V, *b = lf + s * V;
        const double scale = max_abs(b, V);
        double d = 0, top = -INFINITY, second = -INFINITY;
        for (size_t j = 0; j < V; j++) {
            d = fmax(d, fabs((double)a[j] - b[j]));
            if (b[j] > top)
                second = top, top = b[j];
            else if (b[j] > second)
                second = b[j];
        }
        worst = fmax(worst, d / scale);
        equal += tq[s] == tf[s];
        if (top - second > 2 * TOL_LOGITS * scale) { /* no error within the tolerance can swap them */
            decided++;
            agree += tq[s] == tf[s];
        }
    }
    const int ok = worst <= TOL_LOGITS && agree == decided && decided > 0;
    printf("%s: %s weights, native against dequantized: logits within %.3g of the largest (tolerance %.2g), "
           "greedy tokens equal at %d of %d clear steps (%d of %d overall): %s\n", name,
           ra_dtype_name(q->weights.layers[0].wq.dtype), worst, TOL_LOGITS, agree, decided, equal, STEPS,
           ok ? "ok" : "FAIL");
    if (!ok)
        test_failures++;
    ra_kvcache_free(&kq);
    ra_kvcache_free(&kf);
    ra_context_free(&cq);
    ra_context_free(&cf);
    free(lq);
    free(lf);
}

static void check_file(const char *path, struct ra_backend *be)
{
    struct ra_model q, f;
    const struct ra_load_options widen = { .dequantize_weights = 1 };
    CHECK_OK(ra_model_load(&q, path));
    CHECK_OK(ra_model_load_opts(&f, path, &widen));
    if (test_failures)
        return;
    check_dtypes(path, &q, &f);
    check_pair(path, &q, &f, be);
    ra_model_free(&q);
    ra_model_free(&f);
}

/* Every block format without a file: a random model (rows of 256: the K
 * formats' super-blocks) quantized by ra_quant_quantize, against the values
 * its blocks hold. */
static void check_random(struct ra_backend *be)
{
    const struct ra_config c = { .dim = 256, .hidden_dim = 512, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                                 .vocab_size = 300, .seq_len = 128, .head_dim = 64, .rope_theta = 10000.0f,
                                 .norm_eps = 1e-5f };
    const enum ra_dtype types[] = { RA_DTYPE_Q8_0, RA_DTYPE_Q4_0, RA_DTYPE_Q4_1, RA_DTYPE_Q4_K, RA_DTYPE_Q6_K };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        struct ra_model q, f;
        test_rand_seed(5);
        test_random_model(&q, &c, RA_DTYPE_F32, 1.0f);
        test_rand_seed(5);
        test_random_model(&f, &c, RA_DTYPE_F32, 1.0f);
        CHECK_OK(test_quantize_model(&q, types[i], 0));
        CHECK_OK(test_quantize_model(&f, types[i], 1));
        CHECK(q.weights.layers[1].w_down.dtype == types[i] && f.weights.layers[1].w_down.dtype == RA_DTYPE_F32);
        check_pair("random model", &q, &f, be);
        ra_model_free(&q);
        ra_model_free(&f);
    }
}

/* Three blocks of type T, all finite, then block 2's scale SCALE (d, m or dmin) set to BITS. */
static void check_scan(enum ra_dtype t, size_t offset, const char *scale, uint16_t bits, const char *what)
{
    const size_t bb = ra_dtype_block_bytes(t);
    unsigned char *blocks = calloc(3, bb);
    const int64_t count = 3 * ra_dtype_block(t);
    for (int b = 0; b < 3; b++) { /* finite scales (1.0) everywhere; quants zero */
        const uint16_t one = ra_f32_to_f16(1.0f);
        memcpy(blocks + b * bb + (t == RA_DTYPE_Q6_K ? 208 : 0), &one, 2);
    }
    CHECK(ra_first_nonfinite(blocks, t, count, 1) == -1);
    memcpy(blocks + 2 * bb + offset, &bits, 2);
    const int64_t bad = ra_first_nonfinite(blocks, t, count, 2);
    if (bad != 2 || strcmp(ra_nonfinite_scale(blocks, t, 2), scale) != 0 ||
        strcmp(ra_nonfinite_name(blocks, t, 2), what) != 0) {
        fprintf(stderr, "%s: scale %s of block 2 set to %s: found block %lld, scale %s, %s\n", ra_dtype_name(t), scale,
                what, (long long)bad, bad >= 0 ? ra_nonfinite_scale(blocks, t, bad) : "-",
                bad >= 0 ? ra_nonfinite_name(blocks, t, bad) : "-");
        test_failures++;
    }
    /* and as ra_model_load reports it */
    struct ra_model m;
    memset(&m, 0, sizeof m);
    struct ra_tensor tensor = { .dtype = t, .rows = 1, .cols = count, .data = blocks };
    CHECK_OK(ra_model_add_source(&m, "x.gguf", "blk.0.attn_q.weight", &tensor));
    char want[160];
    snprintf(want, sizeof want, "x.gguf: tensor blk.0.attn_q.weight: %s block 2's scale %s is %s", ra_dtype_name(t),
             scale, what);
    CHECK(ra_model_check_weights(&m, 1) == RA_EFORMAT && strcmp(ra_error_message(), want) == 0);
    ra_model_free(&m);
    free(blocks);
}

static void check_scans(void)
{
    check_scan(RA_DTYPE_Q8_0, 0, "d", 0x7e00, "NaN");
    check_scan(RA_DTYPE_Q4_0, 0, "d", 0xfc00, "-Inf");
    check_scan(RA_DTYPE_Q4_1, 2, "m", 0x7c00, "+Inf");
    check_scan(RA_DTYPE_Q4_K, 0, "d", 0x7e01, "NaN");
    check_scan(RA_DTYPE_Q4_K, 2, "dmin", 0x7e00, "NaN");
    check_scan(RA_DTYPE_Q6_K, 208, "d", 0x7c00, "+Inf");
}

int main(int argc, char **argv)
{
    check_scans();
    struct ra_backend *be = NULL;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 2 }));
    if (be)
        check_random(be);
    for (int i = 1; i < argc && be; i++)
        check_file(argv[i], be);
    ra_backend_free(be);
    return test_result("test_quant_model");
}
