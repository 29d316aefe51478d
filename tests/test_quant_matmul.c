/* ra_quant_matmul and the CPU backend on block-quantized weights: decode
 * steps (1-4 tokens) and prefill (5-70 tokens) on every prefill path
 * (int8, f32, bf16 where there is a bf16 unit) and every quant instruction
 * set this CPU and build run, against a double-precision product on the
 * dequantized weights (ra_quant_dequantize, the reference). Each path's
 * tolerance is the bound of what it rounds: int8 activations (half a step,
 * max|x| / 254, per element), bf16 weights and activations (2^-9 relative
 * each), fp32 sums. Bad shapes are errors, not crashes. */
#include "backend.h"
#include "gemm_bf16.h"
#include "quant/quant.h"
#include "status.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_N 70

static const enum ra_dtype types[] = { RA_DTYPE_Q8_0, RA_DTYPE_Q4_0, RA_DTYPE_Q4_1, RA_DTYPE_Q4_K, RA_DTYPE_Q6_K };

static uint32_t rng = 12345;
static uint32_t next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}
static float uniform(void) { return (float)next() / (float)(1u << 24) * 2.0f - 1.0f; } /* [-1, 1) */

/* Random blocks: random quants and scales of a realistic size (half floats
 * around 0.01, K formats' 6-bit scales and mins anything). */
static void random_blocks(enum ra_dtype t, uint8_t *w, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)next();
    const size_t bb = ra_dtype_block_bytes(t);
    for (size_t off = 0; off + bb <= bytes; off += bb) {
        uint16_t d = ra_f32_to_f16(0.002f + 0.02f * (uniform() + 1.0f) / 2), m = ra_f32_to_f16(0.01f * uniform());
        switch (t) {
        case RA_DTYPE_Q8_0:
        case RA_DTYPE_Q4_0: memcpy(w + off, &d, 2); break;
        case RA_DTYPE_Q4_1:
        case RA_DTYPE_Q4_K: /* d, then m (Q4_1) or dmin (Q4_K, positive) */
            if (t == RA_DTYPE_Q4_K)
                m = ra_f32_to_f16(0.001f + 0.002f * (uniform() + 1.0f));
            memcpy(w + off, &d, 2);
            memcpy(w + off + 2, &m, 2);
            break;
        case RA_DTYPE_Q6_K: memcpy(w + off + bb - 2, &d, 2); break;
        default: break;
        }
    }
}

/* One weight matrix, its dequantized values, activations and the exact
 * products with the bounds each path's rounding allows. */
struct fixture {
    enum ra_dtype t;
    int64_t rows, k;
    uint8_t *w;
    float *wf, *x;
    double *ref;      /* [MAX_N][rows] */
    double *abs_wx;   /* sum |w x|: fp32 and bf16 rounding bounds */
    double *int8_err; /* sum |w| * max|x| of the block / 254: int8 activations' bound */
};

static int fixture_make(struct fixture *f, enum ra_dtype t, int64_t rows, int64_t k)
{
    const size_t wbytes = ra_dtype_row_bytes(t, k) * (size_t)rows;
    *f = (struct fixture){ .t = t, .rows = rows, .k = k };
    f->w = malloc(wbytes);
    f->wf = malloc(sizeof(float) * (size_t)(rows * k));
    f->x = malloc(sizeof(float) * (size_t)(MAX_N * k));
    f->ref = malloc(sizeof(double) * (size_t)(MAX_N * rows) * 3);
    if (!f->w || !f->wf || !f->x || !f->ref)
        return -1;
    f->abs_wx = f->ref + MAX_N * rows;
    f->int8_err = f->abs_wx + MAX_N * rows;
    random_blocks(t, f->w, wbytes);
    if (ra_quant_dequantize(t, f->w, f->wf, rows * k) != RA_OK)
        return -1;
    for (int64_t i = 0; i < MAX_N * k; i++)
        f->x[i] = uniform() * (i % 7 == 0 ? 4.0f : 1.0f);
    const int64_t ab = t == RA_DTYPE_Q4_K || t == RA_DTYPE_Q6_K ? RA_QK_K : RA_QK;
    for (int n = 0; n < MAX_N; n++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0, a = 0, e = 0;
            for (int64_t b = 0; b < k; b += ab) {
                double amax = 0, wsum = 0;
                for (int64_t j = b; j < b + ab; j++) {
                    const double wv = f->wf[r * k + j], xv = f->x[n * k + j];
                    s += wv * xv;
                    a += fabs(wv * xv);
                    wsum += fabs(wv);
                    amax = fmax(amax, fabs(xv));
                }
                e += wsum * amax / 254.0;
            }
            f->ref[n * rows + r] = s;
            f->abs_wx[n * rows + r] = a;
            f->int8_err[n * rows + r] = e;
        }
    return 0;
}

static void fixture_free(struct fixture *f)
{
    free(f->w);
    free(f->wf);
    free(f->x);
    free(f->ref);
}

/* y against the reference within the bound of `path` (decode: int8). */
static int within(const struct fixture *f, const float *y, int ldy, int n, enum ra_quant_gemm path, const char *what)
{
    for (int t = 0; t < n; t++)
        for (int64_t r = 0; r < f->rows; r++) {
            const size_t i = (size_t)t * f->rows + (size_t)r;
            double tol = 1e-5 * f->abs_wx[i] + 1e-6; /* fp32 sums */
            if (path == RA_QUANT_GEMM_INT8 || path == RA_QUANT_GEMM_GEMV)
                tol += 1.001 * f->int8_err[i];
            else if (path == RA_QUANT_GEMM_BF16)
                tol += (2.0 / 256 + 1e-4) * f->abs_wx[i];
            const double got = y[(size_t)t * ldy + r];
            if (!(fabs(got - f->ref[i]) <= tol)) {
                fprintf(stderr, "%s: %s %lldx%lld, %d tokens: y[%d][%lld] = %.6g, want %.6g within %.3g\n", what,
                        ra_dtype_name(f->t), (long long)f->rows, (long long)f->k, n, t, (long long)r, got,
                        f->ref[i], tol);
                return 0;
            }
        }
    return 1;
}

static const int decode_n[] = { 1, 2, 3, 4 };
static const int prefill_n[] = { 5, 17, MAX_N };

/* Every n on every path of qm (ISA already set), threads 1 and 2. */
static void run_paths(struct ra_quant_matmul *qm, const struct fixture *f, int have_bf16, const char *isa)
{
    const int ldy = (int)f->rows + 3;
    float *y = malloc(sizeof(float) * (size_t)ldy * MAX_N);
    if (!y) {
        CHECK(0);
        return;
    }
    const struct ra_tensor w = { .dtype = f->t, .rows = f->rows, .cols = f->k, .data = f->w };
    char what[96];
    for (int nt = 1; nt <= 2; nt++) {
        for (size_t i = 0; i < sizeof decode_n / sizeof *decode_n; i++) {
            snprintf(what, sizeof what, "decode %s, %d threads", isa, nt);
            CHECK_OK(ra_quant_matmul(qm, y, ldy, f->x, (int)f->k, &w, decode_n[i], nt));
            CHECK(within(f, y, ldy, decode_n[i], RA_QUANT_GEMM_INT8, what));
        }
        for (int p = RA_QUANT_GEMM_INT8; p < RA_QUANT_GEMM_COUNT; p++) {
            if (p == RA_QUANT_GEMM_BF16 && !have_bf16)
                continue;
            CHECK_OK(ra_quant_matmul_set_gemm(qm, (enum ra_quant_gemm)p));
            for (size_t i = 0; i < sizeof prefill_n / sizeof *prefill_n; i++) {
                snprintf(what, sizeof what, "prefill %s %s, %d threads", ra_quant_gemm_name(p), isa, nt);
                CHECK_OK(ra_quant_matmul(qm, y, ldy, f->x, (int)f->k, &w, prefill_n[i], nt));
                CHECK(within(f, y, ldy, prefill_n[i], (enum ra_quant_gemm)p, what));
            }
        }
        CHECK_OK(ra_quant_matmul_set_gemm(qm, RA_QUANT_GEMM_AUTO));
    }
    free(y);
}

/* Shapes: a small one (one thread, a partial group of rows) and one whose
 * bytes exceed the one-thread limit (decode and prefill split). */
static void test_matmul(struct ra_gemm_bf16 *bf16)
{
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const enum ra_dtype t = types[ti];
        const int kq = t == RA_DTYPE_Q4_K || t == RA_DTYPE_Q6_K;
        const int64_t shapes[2][2] = { { 37, kq ? 256 : 96 }, { 1200, 512 } };
        for (int s = 0; s < 2; s++) {
            struct fixture f;
            if (fixture_make(&f, t, shapes[s][0], shapes[s][1]) != 0) {
                CHECK(0);
                fixture_free(&f);
                continue;
            }
            struct ra_quant_matmul *qm = NULL;
            CHECK_OK(ra_quant_matmul_create(&qm, 2, bf16));
            for (int isa = 0; qm && isa < RA_QUANT_ISA_COUNT; isa++) {
                if (!ra_quant_isa_supported((enum ra_quant_isa)isa)) {
                    CHECK(ra_quant_matmul_set_isa(qm, (enum ra_quant_isa)isa) == RA_EUNSUPPORTED);
                    continue;
                }
                CHECK_OK(ra_quant_matmul_set_isa(qm, (enum ra_quant_isa)isa));
                run_paths(qm, &f, bf16 != NULL, ra_quant_isa_name((enum ra_quant_isa)isa));
            }
            ra_quant_matmul_free(qm);
            fixture_free(&f);
        }
    }
}

/* k not whole blocks, strides below the shape, non-block weights: errors. */
static void test_bad_shapes(void)
{
    struct ra_quant_matmul *qm = NULL;
    CHECK_OK(ra_quant_matmul_create(&qm, 1, NULL));
    if (!qm)
        return;
    static uint8_t w[4096];
    static float x[4 * 512], y[4 * 512];
    struct ra_tensor t = { .dtype = RA_DTYPE_Q8_0, .rows = 4, .cols = 48, .data = w };
    CHECK(ra_quant_matmul(qm, y, 512, x, 512, &t, 1, 1) == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "whole 32-element blocks") != NULL);
    t = (struct ra_tensor){ .dtype = RA_DTYPE_Q4_K, .rows = 4, .cols = 128, .data = w };
    CHECK(ra_quant_matmul(qm, y, 512, x, 512, &t, 8, 1) == RA_EINVAL);
    t = (struct ra_tensor){ .dtype = RA_DTYPE_Q4_0, .rows = 4, .cols = 64, .data = w };
    CHECK(ra_quant_matmul(qm, y, 512, x, 32, &t, 2, 1) == RA_EINVAL); /* strides matter from 2 tokens */
    CHECK(ra_quant_matmul(qm, y, 2, x, 64, &t, 2, 1) == RA_EINVAL);
    CHECK_OK(ra_quant_matmul(qm, y, 0, x, 0, &t, 1, 1));
    t.dtype = RA_DTYPE_F32;
    CHECK(ra_quant_matmul(qm, y, 512, x, 512, &t, 1, 1) == RA_EINVAL);
    t.dtype = RA_DTYPE_Q4_0;
    CHECK_OK(ra_quant_matmul(qm, y, 512, x, 64, &t, 0, 1));
    CHECK(ra_quant_matmul_set_gemm(qm, RA_QUANT_GEMM_BF16) == RA_EUNSUPPORTED); /* no unit given */
    ra_quant_matmul_free(qm);

    enum ra_quant_gemm g;
    CHECK(ra_quant_gemm_parse("f32", &g) == RA_OK && g == RA_QUANT_GEMM_F32);
    setenv("RA_QUANT_GEMM", "int4", 1);
    qm = NULL;
    CHECK(ra_quant_matmul_create(&qm, 1, NULL) == RA_EINVAL && !qm);
    CHECK(strstr(ra_error_message(), "RA_QUANT_GEMM='int4'") != NULL);
    setenv("RA_QUANT_GEMM", "f32", 1);
    CHECK_OK(ra_quant_matmul_create(&qm, 1, NULL));
    CHECK(qm && ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q4_K) == RA_QUANT_GEMM_F32);
    ra_quant_matmul_free(qm);
    unsetenv("RA_QUANT_GEMM");
}

/* The backend: matmul on block weights (decode and prefill, its own
 * choice), a quantized embedding's rows, supports, the describe line. */
static void test_backend(void)
{
    struct ra_backend *be = NULL;
    struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
    p.threads = 2;
    CHECK_OK(ra_backend_open(&be, "cpu", &p));
    const struct ra_quant_kernels *qk = NULL;
    CHECK_OK(ra_quant_kernels_active(&qk));
    if (!be || !qk)
        return;
    const int portable = qk->isa == RA_QUANT_ISA_PORTABLE;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const enum ra_dtype t = types[ti];
        struct fixture f;
        if (fixture_make(&f, t, 300, 512) != 0) {
            CHECK(0);
            fixture_free(&f);
            continue;
        }
        CHECK(ra_backend_supports(be, RA_OP_MATMUL, t) && ra_backend_supports(be, RA_OP_EMBED, t));
        CHECK(ra_backend_supports(be, RA_OP_WEIGHTS, t) && ra_backend_supports(be, RA_OP_WEIGHT_PREPARE, t));
        CHECK(!ra_backend_supports(be, RA_OP_RMSNORM, t) && !ra_backend_supports(be, RA_OP_KV_CACHE, t));
        struct ra_tensor w = { .dtype = t, .rows = f.rows, .cols = f.k, .data = f.w };
        CHECK_OK(be->ops->weight_prepare(be, &w, 1));
        CHECK(w.device == NULL && w.data == f.w); /* used in place */
        const enum ra_dtype lin = ra_backend_cpu_linear_dtype(be, t);
        /* the int8 products' bound covers the f32 path too (it is the looser one) */
        const enum ra_quant_gemm path = lin == RA_DTYPE_BF16 ? RA_QUANT_GEMM_BF16 : RA_QUANT_GEMM_INT8;
        CHECK(lin == RA_DTYPE_BF16 || lin == RA_DTYPE_F32);
        float *y = malloc(sizeof(float) * (size_t)(MAX_N * f.rows));
        CHECK(y != NULL);
        const int ns[] = { 1, 4, 16, MAX_N };
        for (size_t i = 0; y && i < sizeof ns / sizeof *ns; i++) {
            CHECK_OK(be->ops->matmul(be, y, (int)f.rows, f.x, (int)f.k, &w, ns[i]));
            /* decode steps are the int8 GEMV; prefill up to RA_QMM_INT8_MAX_N tokens too, but for
             * the portable kernels (their prefill path then) */
            const enum ra_quant_gemm small = portable ? path : RA_QUANT_GEMM_INT8;
            CHECK(within(&f, y, (int)f.rows, ns[i], ns[i] <= RA_QMM_GEMV_MAX_N ? RA_QUANT_GEMM_INT8
                                                    : ns[i] <= RA_QMM_INT8_MAX_N ? small : path, "backend"));
        }
        /* The embedding: rows of the dequantized table, exactly. */
        const int32_t tokens[3] = { 5, 0, (int32_t)f.rows - 1 };
        CHECK_OK(be->ops->embed(be, y, &w, tokens, 3));
        for (int i = 0; y && i < 3; i++)
            CHECK(memcmp(y + (size_t)i * f.k, f.wf + (size_t)tokens[i] * f.k, sizeof(float) * (size_t)f.k) == 0);
        free(y);
        fixture_free(&f);
    }
    char line[256];
    ra_backend_cpu_describe_quant(be, line, sizeof line);
    printf("quantized weights: %s\n", line);
    CHECK(strncmp(line, "prefill: ", 9) == 0 && strstr(line, "; decode: int8 ") != NULL);
    ra_backend_free(be);
}

/* The automatic choice: int8 panels on VNNI; on AVX2 bf16 where there is a
 * unit (and compute allows it), else int8 panels but for Q8_0 (f32); on the
 * portable kernels bf16 or f32; the GEMV up to RA_QMM_INT8_MAX_N tokens
 * where there is SIMD; the describe line says so. */
static void test_choice(struct ra_gemm_bf16 *bf16)
{
    struct ra_quant_matmul *qm = NULL;
    char line[320];
    CHECK_OK(ra_quant_matmul_create(&qm, 1, bf16));
    if (!qm)
        return;
    if (ra_quant_matmul_set_isa(qm, RA_QUANT_ISA_AVX2) == RA_OK && bf16) {
        CHECK(ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q4_0) == RA_QUANT_GEMM_BF16);
        ra_quant_matmul_describe(qm, line, sizeof line);
        CHECK(strncmp(line, "prefill: dequantized to bf16 (", 30) == 0 &&
              strstr(line, "), int8 avx2 GEMV up to 16 tokens; decode: int8 avx2") != NULL);
    }
    ra_quant_matmul_allow_bf16(qm, 0);
    if (ra_quant_matmul_set_isa(qm, RA_QUANT_ISA_AVX2) == RA_OK) {
        CHECK(ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q8_0) == RA_QUANT_GEMM_F32);
        CHECK(ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q4_0) == RA_QUANT_GEMM_INT8);
        CHECK(ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q6_K) == RA_QUANT_GEMM_INT8);
        ra_quant_matmul_describe(qm, line, sizeof line);
        CHECK(strcmp(line, "prefill: dequantized to f32 (OpenBLAS sgemm) (q8_0), int8 avx2 panels (q4_0, q4_1, "
                           "q4_k, q6_k), int8 avx2 GEMV up to 16 tokens; decode: int8 avx2") == 0);
    }
    if (ra_quant_matmul_set_isa(qm, RA_QUANT_ISA_AVX512VNNI) == RA_OK) {
        for (int allow = 1; allow >= 0; allow--) { /* with or without the bf16 unit */
            ra_quant_matmul_allow_bf16(qm, allow);
            CHECK(ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q8_0) == RA_QUANT_GEMM_INT8);
            CHECK(ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q6_K) == RA_QUANT_GEMM_INT8);
            ra_quant_matmul_describe(qm, line, sizeof line);
            CHECK(strcmp(line, "prefill: int8 avx512vnni panels, int8 avx512vnni GEMV up to 16 tokens; decode: int8 "
                               "avx512vnni") == 0);
        }
    }
    CHECK_OK(ra_quant_matmul_set_isa(qm, RA_QUANT_ISA_PORTABLE));
    if (bf16) {
        ra_quant_matmul_allow_bf16(qm, 1);
        CHECK(ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q4_K) == RA_QUANT_GEMM_BF16);
        ra_quant_matmul_allow_bf16(qm, 0);
    }
    CHECK(ra_quant_matmul_prefill_path(qm, RA_DTYPE_Q4_K) == RA_QUANT_GEMM_F32);
    ra_quant_matmul_describe(qm, line, sizeof line);
    CHECK(strcmp(line, "prefill: dequantized to f32 (OpenBLAS sgemm); decode: int8 portable") == 0);
    ra_quant_matmul_free(qm);
}

int main(void)
{
    struct ra_gemm_bf16 *bf16 = NULL;
    CHECK_OK(ra_gemm_bf16_create(&bf16, 2));
    if (!bf16)
        printf("note: no bf16 unit here: the bf16 path is not tested\n");
    test_matmul(bf16);
    test_bad_shapes();
    test_choice(bf16);
    test_backend();
    ra_gemm_bf16_free(bf16);
    return test_result("test_quant_matmul");
}
