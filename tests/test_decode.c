/* The decode-step kernels against the paths they stand in for, on every
 * instruction set this CPU and build have (portable, avx2, avx512):
 *
 * - GEMV (cpu_kernels.h gemv; the CPU backend's matmul for n <= 4): f32,
 *   bf16 and f16 weights, odd sizes, 1-4 tokens, row strides larger than
 *   the rows, against a double-precision oracle of the same widened weights
 *   and against OpenBLAS sgemm (the prefill path): within 1e-5 of the sum of
 *   |products| per output.
 * - The bf16 x bf16 GEMV (gemv_bf16, AVX512-BF16 builds) against the oracle
 *   and the widening GEMV on the same bf16 values, same bound.
 * - The backend's matmul with 1 token (GEMV) against the same rows of an
 *   8-token matmul (the GEMM path), f32 weights in fp32, bf16 weights in bf16
 *   compute (activations rounded to bf16 on both paths, products exact in
 *   fp32): within 1e-5 of the sum of |products|, 1e-4 for bf16.
 * - Decode attention (1-4 queries per head, keys split into chunks that merge
 *   at the end) against the block kernel on the same cache, f32 and bf16 rows:
 *   contexts of 1 to 5000 keys (one chunk and several), GQA groups, head_dim
 *   8-128.
 *
 * A wrong row, stride, tail or chunk merge gives differences of order 1. */
#include "cpu_kernels.h"
#include "half.h"
#include "random_model.h"
#include "ra_core.h"
#include "test.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(void) { return (float)test_rand_int(-1000, 1000) * 1e-3f; }

/* w [rows][k] in dt, plus its widened fp32 values. */
static void make_weights(enum ra_dtype dt, int64_t rows, int64_t k, void **w, float **wf)
{
    const size_t n = (size_t)rows * (size_t)k;
    *wf = malloc(n * sizeof(float));
    *w = malloc(n * (dt == RA_DTYPE_F32 ? 4 : 2));
    for (size_t i = 0; i < n; i++) {
        const float v = frand();
        if (dt == RA_DTYPE_F32) {
            ((float *)*w)[i] = v;
            (*wf)[i] = v;
        } else if (dt == RA_DTYPE_BF16) {
            ((uint16_t *)*w)[i] = ra_f32_to_bf16(v);
            (*wf)[i] = ra_bf16_to_f32(((uint16_t *)*w)[i]);
        } else {
            ((uint16_t *)*w)[i] = ra_f32_to_f16(v);
            (*wf)[i] = ra_f16_to_f32(((uint16_t *)*w)[i]);
        }
    }
}

static void check_gemv(const struct ra_cpu_kernels *kt, enum ra_dtype dt, int rows, int k, int n)
{
    const int ldx = k + 3, ldy = rows + 5;
    void *w;
    float *wf;
    make_weights(dt, rows, k, &w, &wf);
    float *x = malloc((size_t)n * ldx * sizeof(float)), *y = malloc((size_t)n * ldy * sizeof(float));
    float *ys = malloc((size_t)n * ldy * sizeof(float));
    for (int i = 0; i < n * ldx; i++)
        x[i] = frand();
    for (int i = 0; i < n * ldy; i++)
        y[i] = ys[i] = 12345.0f; /* the gaps between rows must stay untouched */
    kt->gemv(y, ldy, x, ldx, n, w, dt, rows, k);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, k, 1.0f, x, ldx, wf, k, 0.0f, ys, ldy);
    double worst = 0, worst_blas = 0;
    int gaps_ok = 1;
    for (int t = 0; t < n; t++) {
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 1e-30;
            for (int j = 0; j < k; j++) {
                ref += (double)wf[(size_t)r * k + j] * x[(size_t)t * ldx + j];
                mag += fabs((double)wf[(size_t)r * k + j] * x[(size_t)t * ldx + j]);
            }
            const float got = y[(size_t)t * ldy + r];
            worst = fmax(worst, fabs(got - ref) / mag);
            worst_blas = fmax(worst_blas, fabs(got - ys[(size_t)t * ldy + r]) / mag);
        }
        for (int r = rows; r < ldy; r++)
            gaps_ok &= y[(size_t)t * ldy + r] == 12345.0f;
    }
    if (worst > 1e-5 || worst_blas > 1e-5 || !gaps_ok)
        fprintf(stderr, "gemv %s %s %dx%d n=%d: %.3g vs oracle, %.3g vs sgemm, gaps %s\n", ra_cpu_isa_name(kt->isa),
                ra_dtype_name(dt), rows, k, n, worst, worst_blas, gaps_ok ? "kept" : "written");
    CHECK(worst <= 1e-5 && worst_blas <= 1e-5 && gaps_ok);
    free(w);
    free(wf);
    free(x);
    free(y);
    free(ys);
}

/* The bf16 x bf16 GEMV (AVX512-BF16 builds): bf16 activations, packed,
 * against the oracle on the same values and against the widening GEMV. */
static void check_gemv_bf16(const struct ra_cpu_kernels *kt, int rows, int k, int n)
{
    const int ldy = rows + 5;
    void *w;
    float *wf;
    make_weights(RA_DTYPE_BF16, rows, k, &w, &wf);
    uint16_t *xb = malloc((size_t)n * k * sizeof(uint16_t));
    float *xf = malloc((size_t)n * k * sizeof(float));
    float *y = malloc((size_t)n * ldy * sizeof(float)), *yw = malloc((size_t)n * ldy * sizeof(float));
    for (int i = 0; i < n * k; i++) {
        xb[i] = ra_f32_to_bf16(frand());
        xf[i] = ra_bf16_to_f32(xb[i]);
    }
    for (int i = 0; i < n * ldy; i++)
        y[i] = yw[i] = 12345.0f;
    kt->gemv_bf16(y, ldy, xb, n, w, rows, k);
    kt->gemv(yw, ldy, xf, k, n, w, RA_DTYPE_BF16, rows, k);
    double worst = 0, worst_w = 0;
    int gaps_ok = 1;
    for (int t = 0; t < n; t++) {
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 1e-30;
            for (int j = 0; j < k; j++) {
                ref += (double)wf[(size_t)r * k + j] * xf[(size_t)t * k + j];
                mag += fabs((double)wf[(size_t)r * k + j] * xf[(size_t)t * k + j]);
            }
            worst = fmax(worst, fabs(y[(size_t)t * ldy + r] - ref) / mag);
            worst_w = fmax(worst_w, fabs(y[(size_t)t * ldy + r] - yw[(size_t)t * ldy + r]) / mag);
        }
        for (int r = rows; r < ldy; r++)
            gaps_ok &= y[(size_t)t * ldy + r] == 12345.0f;
    }
    if (worst > 1e-5 || worst_w > 1e-5 || !gaps_ok)
        fprintf(stderr, "gemv_bf16 %s %dx%d n=%d: %.3g vs oracle, %.3g vs the widening gemv, gaps %s\n",
                ra_cpu_isa_name(kt->isa), rows, k, n, worst, worst_w, gaps_ok ? "kept" : "written");
    CHECK(worst <= 1e-5 && worst_w <= 1e-5 && gaps_ok);
    free(w);
    free(wf);
    free(xb);
    free(xf);
    free(y);
    free(yw);
}

static void check_attention_kv(const struct ra_cpu_kernels *kt, int n_heads, int n_kv_heads, int hd, int ctx, int n,
                               enum ra_dtype kvt)
{
    const struct ra_attention_shape s = { n_heads, n_kv_heads, hd, n_heads * hd, n_kv_heads * hd, kvt };
    const int total = ctx + n;
    float *kc = malloc((size_t)total * s.kv_stride * sizeof(float));
    float *vc = malloc((size_t)total * s.kv_stride * sizeof(float));
    float *q = malloc((size_t)total * s.q_stride * sizeof(float));
    float *ref = malloc((size_t)total * s.q_stride * sizeof(float));
    float *got = malloc((size_t)n * s.q_stride * sizeof(float));
    for (size_t i = 0; i < (size_t)total * s.kv_stride; i++) {
        kc[i] = 2 * frand();
        vc[i] = frand();
    }
    if (kvt == RA_DTYPE_BF16) { /* bf16 rows, in place: the first half of each buffer */
        for (size_t i = 0; i < (size_t)total * s.kv_stride; i++) {
            ((uint16_t *)kc)[i] = ra_f32_to_bf16(kc[i]);
            ((uint16_t *)vc)[i] = ra_f32_to_bf16(vc[i]);
        }
    }
    for (size_t i = 0; i < (size_t)total * s.q_stride; i++)
        q[i] = 2 * frand();
    /* The block kernel: a span of more tokens than the decode path takes
     * (prefill of [0, total) with its queries), its last n rows. bf16 rows on
     * the AVX512-BF16 build take bf16 products (Q and P rounded) on both
     * paths; P is rounded at a chunk's running max there and at the block
     * kernel's running max here, which moves the result by about 1e-4. */
    const double tol = kt->isa == RA_CPU_ISA_AVX512BF16 && kvt == RA_DTYPE_BF16 ? 1e-3 : 1e-5;
    CHECK_OK(kt->attention(ref, q, kc, vc, 0, total, &s, 2));
    CHECK_OK(kt->attention(got, q + (size_t)ctx * s.q_stride, kc, vc, ctx, n, &s, 2));
    const double d = test_max_rel_diff(got, ref + (size_t)ctx * s.q_stride, (size_t)n * s.q_stride);
    if (!(d <= tol))
        fprintf(stderr, "attention %s %s KV heads %d/%d hd %d ctx %d n %d: differs by %.3g\n",
                ra_cpu_isa_name(kt->isa), ra_dtype_name(kvt), n_heads, n_kv_heads, hd, ctx, n, d);
    CHECK(d <= tol);
    /* Thread counts must not change the result (the chunks are fixed by the context). */
    float *got1 = malloc((size_t)n * s.q_stride * sizeof(float));
    CHECK_OK(kt->attention(got1, q + (size_t)ctx * s.q_stride, kc, vc, ctx, n, &s, 1));
    CHECK(memcmp(got1, got, (size_t)n * s.q_stride * sizeof(float)) == 0);
    free(got1);
    free(kc);
    free(vc);
    free(q);
    free(ref);
    free(got);
}

static void check_attention(const struct ra_cpu_kernels *kt, int n_heads, int n_kv_heads, int hd, int ctx, int n)
{
    check_attention_kv(kt, n_heads, n_kv_heads, hd, ctx, n, RA_DTYPE_F32);
    check_attention_kv(kt, n_heads, n_kv_heads, hd, ctx, n, RA_DTYPE_BF16);
}

/* Backend matmul of one token (GEMV) against row t of an 8-token one (GEMM). */
static void check_backend(enum ra_dtype dt, enum ra_compute compute, int rows, int k, int threads, double tol)
{
    struct ra_backend *be;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = threads }));
    be->compute = compute;
    void *w;
    float *wf;
    make_weights(dt, rows, k, &w, &wf);
    struct ra_tensor t = { dt, rows, k, w, NULL };
    CHECK_OK(be->ops->weight_prepare(be, &t, 1));
    const int n = 8;
    float *x = malloc((size_t)n * k * sizeof(float)), *yg = malloc((size_t)n * rows * sizeof(float));
    float *y1 = malloc((size_t)rows * sizeof(float));
    for (int i = 0; i < n * k; i++)
        x[i] = frand();
    CHECK_OK(be->ops->matmul(be, yg, rows, x, k, &t, n));
    double worst = 0;
    for (int tok = 0; tok < n; tok += 3) {
        CHECK_OK(be->ops->matmul(be, y1, rows, x + (size_t)tok * k, k, &t, 1));
        for (int r = 0; r < rows; r++) { /* relative to the sum of |products|: the order of the sums differs */
            double mag = 1e-30;
            for (int j = 0; j < k; j++)
                mag += fabs((double)wf[(size_t)r * k + j] * x[(size_t)tok * k + j]);
            worst = fmax(worst, fabs((double)y1[r] - yg[(size_t)tok * rows + r]) / mag);
        }
    }
    if (!(worst <= tol))
        fprintf(stderr, "backend %s weights, %s compute, %dx%d, %d threads: 1 token vs 8 differs by %.3g\n",
                ra_dtype_name(dt), ra_compute_name(compute), rows, k, threads, worst);
    CHECK(worst <= tol);
    be->ops->weight_release(be, &t);
    ra_backend_free(be);
    free(w);
    free(wf);
    free(x);
    free(yg);
    free(y1);
}

int main(void)
{
    test_rand_seed(20261123);
    static const int sizes[][2] = { { 1, 1 }, { 3, 7 }, { 7, 13 }, { 33, 100 }, { 130, 257 }, { 64, 768 }, { 5, 2048 } };
    static const enum ra_dtype dts[] = { RA_DTYPE_F32, RA_DTYPE_BF16, RA_DTYPE_F16 };
    for (int isa = 0; isa < RA_CPU_ISA_COUNT; isa++) {
        const struct ra_cpu_kernels *kt = ra_cpu_kernels_for((enum ra_cpu_isa)isa);
        if (!kt || !ra_cpu_isa_supported((enum ra_cpu_isa)isa)) {
            fprintf(stderr, "test_decode: no %s kernels here\n", ra_cpu_isa_name((enum ra_cpu_isa)isa));
            continue;
        }
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
                for (int n = 1; n <= 4; n++)
                    check_gemv(kt, dts[d], sizes[i][0], sizes[i][1], n);
        if (kt->gemv_bf16)
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
                for (int n = 1; n <= 4; n++)
                    check_gemv_bf16(kt, sizes[i][0], sizes[i][1], n);
        const int ctxs[] = { 0, 1, 63, 64, 511, 1000, 2100, 5000 };
        for (size_t c = 0; c < sizeof ctxs / sizeof ctxs[0]; c++) {
            check_attention(kt, 4, 4, 64, ctxs[c], 1);
            check_attention(kt, 8, 2, 8, ctxs[c], 1); /* stories260K's head_dim, GQA */
        }
        check_attention(kt, 6, 3, 128, 1300, 3);
        check_attention(kt, 12, 4, 64, 2100, 1); /* bench-small's heads, GQA: two register groups of P·V */
        check_attention(kt, 2, 1, 24, 700, 4);
    }
    for (int th = 1; th <= 2; th++) {
        check_backend(RA_DTYPE_F32, RA_COMPUTE_F32, 300, 200, th, 1e-5);
        check_backend(RA_DTYPE_F32, RA_COMPUTE_F32, 2000, 768, th, 1e-5); /* parallel GEMV */
        check_backend(RA_DTYPE_F16, RA_COMPUTE_F32, 2000, 768, th, 1e-5); /* f16 read in place */
        check_backend(RA_DTYPE_F16, RA_COMPUTE_AUTO, 2000, 768, th, 1e-4); /* a bf16 copy where a unit is */
        check_backend(RA_DTYPE_BF16, RA_COMPUTE_AUTO, 2000, 768, th, 1e-4);
        check_backend(RA_DTYPE_BF16, RA_COMPUTE_F32, 777, 129, th, 1e-5);
    }
    return test_result("test_decode");
}
