/* Every op of the CUDA backend against the CPU backend on random inputs, in
 * each weight dtype the GPU holds (bf16, f16, f32), with tolerances per dtype;
 * RoPE in both pairing conventions, and the device memory model (buffers,
 * asynchronous copies ordered by events).
 * Built only with --with-cuda; exits 77 on a machine without a GPU. */
#include "backend_cuda.h"
#include "half.h"
#include "ops.cuh"
#include "random_model.h"
#include "ra_core.h"
#include "test.h"

#include <cuda_runtime_api.h>

static struct ra_backend *cpu, *gpu;

/* Tolerances on max |a-b| / (1+|b|) of a GEMM's output with weights in the
 * device dtype: its inputs are rounded to it too (8 bits of mantissa for
 * bf16, 11 for f16), so the error of a sum of k products of order 1 grows as
 * sqrt(k) (at k = 512 an H200 measured 0.044 and 0.0053, 2026-11-26). */
static double gemm_tol(enum ra_dtype dt, int k)
{
    const double per_128 = dt == RA_DTYPE_BF16 ? 3e-2 : dt == RA_DTYPE_F16 ? 4e-3 : 1e-5;
    return per_128 * (k > 128 ? sqrt(k / 128.0) : 1.0);
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * test_frand();
}

/* A device copy of host floats. */
static float *to_gpu(const float *x, size_t n)
{
    float *d = ra_backend_alloc(gpu, n * sizeof(float));
    CHECK(d != NULL);
    if (d)
        CHECK_OK(gpu->ops->upload(gpu, d, x, n * sizeof(float)));
    return d;
}

static void from_gpu(float *x, const float *d, size_t n)
{
    CHECK_OK(gpu->ops->download(gpu, x, d, n * sizeof(float)));
}

static void report(const char *what, double diff, double tol)
{
    if (!(diff <= tol))
        fprintf(stderr, "%s: differs by %.3g (tolerance %.3g)\n", what, diff, tol);
    CHECK(diff <= tol);
}

static void check_embed(void)
{
    const int vocab = 50, dim = 72, n = 9;
    float *table = malloc(sizeof(float) * vocab * dim), *ref = malloc(sizeof(float) * n * dim),
          *got = malloc(sizeof(float) * n * dim);
    int32_t tokens[9] = { 0, 49, 3, 3, 17, 1, 48, 25, 0 };
    fill(table, (size_t)vocab * dim, 2.0f);
    struct ra_tensor t = { RA_DTYPE_F32, vocab, dim, table, NULL };
    const struct ra_tensor host = t; /* the CPU's view: T->device is the GPU's copy */
    CHECK_OK(gpu->ops->weight_prepare(gpu, &t, 1));
    float *x = ra_backend_alloc(gpu, sizeof(float) * n * dim);
    CHECK_OK(cpu->ops->embed(cpu, ref, &host, tokens, n));
    CHECK_OK(gpu->ops->embed(gpu, x, &t, tokens, n));
    from_gpu(got, x, (size_t)n * dim);
    report("embed (bf16 table)", test_max_rel_diff(got, ref, (size_t)n * dim), 1.0 / 128);
    ra_backend_release(gpu, x);
    gpu->ops->weight_release(gpu, &t);
    free(table);
    free(ref);
    free(got);
}

/* y[n][rows] (stride ldy) = x[n][k] (stride ldx) · wᵀ, including n = 1 (decode). */
static void check_matmul(enum ra_dtype dt, int rows, int k, int n)
{
    const int ldx = k + 3, ldy = rows + 5;
    float *w = malloc(sizeof(float) * rows * k), *x = malloc(sizeof(float) * n * ldx);
    float *ref = calloc((size_t)n * ldy, sizeof(float)), *got = calloc((size_t)n * ldy, sizeof(float));
    fill(w, (size_t)rows * k, 1.0f);
    fill(x, (size_t)n * ldx, 1.0f);
    struct ra_tensor t = { RA_DTYPE_F32, rows, k, w, NULL };
    const struct ra_tensor host = t;
    CHECK_OK(ra_backend_cuda_set_dtype(gpu, dt));
    CHECK_OK(gpu->ops->weight_prepare(gpu, &t, 1));
    float *dx = to_gpu(x, (size_t)n * ldx), *dy = to_gpu(ref, (size_t)n * ldy);
    CHECK_OK(cpu->ops->matmul(cpu, ref, ldy, x, ldx, &host, n));
    CHECK_OK(gpu->ops->matmul(gpu, dy, ldy, dx, ldx, &t, n));
    from_gpu(got, dy, (size_t)n * ldy);
    char what[96];
    snprintf(what, sizeof what, "matmul %s %dx%d, %d tokens", ra_dtype_name(dt), rows, k, n);
    report(what, test_max_rel_diff(got, ref, (size_t)n * ldy), gemm_tol(dt, k));
    for (int i = 0; i < n; i++) /* the gaps between rows of y are left alone */
        for (int j = rows; j < ldy; j++)
            CHECK(got[(size_t)i * ldy + j] == 0.0f);
    ra_backend_release(gpu, dx);
    ra_backend_release(gpu, dy);
    gpu->ops->weight_release(gpu, &t);
    free(w);
    free(x);
    free(ref);
    free(got);
}

static void check_rmsnorm(void)
{
    const int n = 13, dim = 200;
    float *x = malloc(sizeof(float) * n * dim), *w = malloc(sizeof(float) * dim);
    float *ref = malloc(sizeof(float) * n * dim), *got = malloc(sizeof(float) * n * dim);
    fill(x, (size_t)n * dim, 3.0f);
    fill(w, dim, 1.5f);
    struct ra_tensor t = { RA_DTYPE_F32, 1, dim, w, NULL };
    const struct ra_tensor host = t;
    CHECK_OK(gpu->ops->weight_prepare(gpu, &t, 1)); /* a vector: stays fp32 whatever the dtype */
    float *dx = to_gpu(x, (size_t)n * dim), *dy = to_gpu(x, (size_t)n * dim);
    CHECK_OK(cpu->ops->rmsnorm(cpu, ref, x, &host, n, dim, 1e-5f));
    CHECK_OK(gpu->ops->rmsnorm(gpu, dy, dx, &t, n, dim, 1e-5f));
    from_gpu(got, dy, (size_t)n * dim);
    report("rmsnorm", test_max_rel_diff(got, ref, (size_t)n * dim), 1e-5);
    ra_backend_release(gpu, dx);
    ra_backend_release(gpu, dy);
    gpu->ops->weight_release(gpu, &t);
    free(x);
    free(w);
    free(ref);
    free(got);
}

/* The rotate-half convention by its definition: pairs (j, j + head_dim/2),
 * the angle rounded to float as both backends round it (the interleaved
 * pairs are checked against the CPU backend itself). */
static void check_rope(int pos0)
{
    const int n = 11, n_heads = 6, hd = 32, ld = n_heads * hd + 8;
    float *x = malloc(sizeof(float) * n * ld), *ref = malloc(sizeof(float) * n * ld),
          *got = malloc(sizeof(float) * n * ld);
    fill(x, (size_t)n * ld, 1.0f);
    memcpy(ref, x, sizeof(float) * n * ld);
    float *dx = to_gpu(x, (size_t)n * ld);
    /* At position p the angle is p * freq, a float rounded alike on both sides:
     * the tolerance grows with the position (an ulp of 4000 rad is 2.4e-4). */
    const double tol = 2e-6 + 1e-7 * pos0;
    struct ra_rope r = { 10000.0f, RA_ROPE_INTERLEAVED, NULL };
    CHECK_OK(cpu->ops->rope(cpu, ref, ld, &(struct ra_rows){ n, pos0, NULL }, n_heads, hd, &r));
    CHECK_OK(gpu->ops->rope(gpu, dx, ld, &(struct ra_rows){ n, pos0, NULL }, n_heads, hd, &r));
    from_gpu(got, dx, (size_t)n * ld);
    report("rope (interleaved)", test_max_rel_diff(got, ref, (size_t)n * ld), tol);

    memcpy(ref, x, sizeof(float) * n * ld);
    r.style = RA_ROPE_HALF;
    CHECK_OK(cpu->ops->rope(cpu, ref, ld, &(struct ra_rows){ n, pos0, NULL }, n_heads, hd, &r));
    CHECK_OK(gpu->ops->upload(gpu, dx, x, sizeof(float) * n * ld));
    CHECK_OK(gpu->ops->rope(gpu, dx, ld, &(struct ra_rows){ n, pos0, NULL }, n_heads, hd, &r));
    from_gpu(got, dx, (size_t)n * ld);
    report("rope (rotate-half)", test_max_rel_diff(got, ref, (size_t)n * ld), tol);

    /* scaled frequencies (Llama 3's factors, per pair): the same table on both sides */
    struct ra_config sc = { .head_dim = hd, .rope_theta = 10000.0f };
    CHECK_OK(ra_rope_set_llama3(&sc, 8, 1, 4, 64, "test"));
    r.factors = sc.rope_factors;
    memcpy(ref, x, sizeof(float) * n * ld);
    CHECK_OK(cpu->ops->rope(cpu, ref, ld, &(struct ra_rows){ n, pos0, NULL }, n_heads, hd, &r));
    CHECK_OK(gpu->ops->upload(gpu, dx, x, sizeof(float) * n * ld));
    CHECK_OK(gpu->ops->rope(gpu, dx, ld, &(struct ra_rows){ n, pos0, NULL }, n_heads, hd, &r));
    from_gpu(got, dx, (size_t)n * ld);
    report("rope (rotate-half, llama3-scaled)", test_max_rel_diff(got, ref, (size_t)n * ld), tol);
    /* the padding after the heads is not touched */
    for (int i = 0; i < n; i++)
        for (int j = n_heads * hd; j < ld; j++)
            CHECK(got[(size_t)i * ld + j] == x[(size_t)i * ld + j]);
    ra_backend_release(gpu, dx);
    free(x);
    free(ref);
    free(got);
}

enum att_kernel { ATT_AUTO, ATT_REF, ATT_TC, ATT_SPLIT };
static const char *const att_names[] = { "auto", "ref", "tc", "split" };

/* One kernel of the three (attention.cuh), or the backend's choice. */
static int gpu_attention(enum att_kernel kern, float *out, const float *q, const void *k, const void *v, int start,
                         int n, const struct ra_attention_shape *s)
{
    cudaStream_t st = (cudaStream_t)gpu->ops->stream_native(gpu, RA_STREAM_COMPUTE);
    static void *work;
    static size_t work_bytes;
    const size_t need = ra_cuda_attention_work_bytes(start, n, s);
    if (need > work_bytes) {
        cudaFree(work);
        work_bytes = cudaMalloc(&work, need) == cudaSuccess ? need : 0;
    }
    switch (kern) {
    case ATT_REF: return ra_cuda_attention_ref(out, q, k, v, start, n, s, st);
    case ATT_TC: return ra_cuda_attention_tc(out, q, k, v, start, n, s, st);
    case ATT_SPLIT: return ra_cuda_attention_split(out, q, k, v, start, n, s, work, work_bytes, st);
    default: return gpu->ops->attention(gpu, out, q, &(struct ra_rows){ n, start, NULL }, k, v,
                                        &(struct ra_rows){ start + n, 0, NULL }, s);
    }
}

/* Span [start, start+n) over cache rows [0, start+n) of shape H/KVH/HD, with
 * fp32 and bf16 cache rows, through every kernel that takes the shape, against
 * the CPU backend on the same rows. Tolerances on max |a-b| / (1+|b|): fp32
 * sums in another order (ref, split) are near 1e-6; the tensor-core kernel
 * rounds Q, K, V and P to bf16 (about 3.5e-3 in a model of its fragments),
 * and so may the CPU's AVX512-BF16 kernels over bf16 rows. */
static void check_attention(int n_heads, int n_kv, int hd, int start, int n, float qk_scale)
{
    const int rows = start + n;
    const size_t nq = (size_t)n * n_heads * hd, nkv = (size_t)rows * n_kv * hd;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nkv), *v = malloc(sizeof(float) * nkv);
    uint16_t *kb = malloc(sizeof(uint16_t) * nkv), *vb = malloc(sizeof(uint16_t) * nkv);
    float *ref = malloc(sizeof(float) * nq), *got = malloc(sizeof(float) * nq), *poison = malloc(sizeof(float) * nq);
    fill(q, nq, qk_scale);
    fill(k, nkv, 1.0f);
    fill(v, nkv, 1.0f);
    for (size_t i = 0; i < nq; i++)
        poison[i] = NAN;
    for (size_t i = 0; i < nkv; i++) {
        kb[i] = ra_f32_to_bf16(k[i]);
        vb[i] = ra_f32_to_bf16(v[i]);
    }
    float *dq = to_gpu(q, nq), *dout = to_gpu(q, nq);
    void *dk = ra_backend_alloc(gpu, sizeof(float) * nkv), *dv = ra_backend_alloc(gpu, sizeof(float) * nkv);
    for (int bf = 0; bf < 2; bf++) {
        const struct ra_attention_shape s = { n_heads, n_kv, hd, n_heads * hd, n_kv * hd,
                                              bf ? RA_DTYPE_BF16 : RA_DTYPE_F32 };
        const void *hk = bf ? (const void *)kb : k, *hv = bf ? (const void *)vb : v;
        const size_t bytes = nkv * (bf ? sizeof(uint16_t) : sizeof(float));
        CHECK_OK(gpu->ops->upload(gpu, dk, hk, bytes));
        CHECK_OK(gpu->ops->upload(gpu, dv, hv, bytes));
        CHECK_OK(cpu->ops->attention(cpu, ref, q, &(struct ra_rows){ n, start, NULL }, hk, hv,
                                     &(struct ra_rows){ start + n, 0, NULL }, &s));
        for (int kern = ATT_AUTO; kern <= ATT_SPLIT; kern++) {
            if ((kern == ATT_TC && !ra_cuda_attention_tc_takes(dk, dv, &s)) ||
                (kern == ATT_SPLIT && n > RA_CUDA_ATTN_SPLIT_MAX_Q))
                continue;
            CHECK_OK(gpu->ops->upload(gpu, dout, poison, sizeof(float) * nq)); /* NaN wherever unwritten */
            CHECK_OK(gpu_attention((enum att_kernel)kern, dout, dq, dk, dv, start, n, &s));
            from_gpu(got, dout, nq);
            const int tc = kern == ATT_TC ||
                           (kern == ATT_AUTO && n > RA_CUDA_ATTN_SPLIT_MAX_Q && ra_cuda_attention_tc_takes(dk, dv, &s));
            const double tol = tc || bf ? 1.5e-2 : kern == ATT_SPLIT || kern == ATT_AUTO ? 1e-4 : 5e-5;
            char what[160];
            snprintf(what, sizeof what, "attention (%s) %d/%d heads of %d, %s rows, span [%d, %d)", att_names[kern],
                     n_heads, n_kv, hd, bf ? "bf16" : "f32", start, rows);
            report(what, test_max_rel_diff(got, ref, nq), tol);
        }
    }
    ra_backend_release(gpu, dq);
    ra_backend_release(gpu, dk);
    ra_backend_release(gpu, dv);
    ra_backend_release(gpu, dout);
    free(q);
    free(k);
    free(v);
    free(kb);
    free(vb);
    free(ref);
    free(got);
    free(poison);
}

/* Positions as data, CPU against GPU: rope at a gapped position list and
 * rope_shift of f32 and bf16 rows (both conventions, Llama 3's scaling);
 * get_rows and set_rows of f32 and bf16 rows (exact); attention of gapped
 * queries over a whole cache, over gathered keys (queries before every key
 * get zeros), and of a span over a cache whose rows start later. */
static void check_positions(int n_heads, int n_kv, int hd)
{
    enum { T = 300, NQ = 70, NK = 90 };
    int32_t qpos[NQ], kpos[NK];
    for (int i = 0, p = 5; i < NQ; i++, p += 1 + i % 4)
        qpos[i] = p;
    for (int j = 0, p = 9; j < NK; j++, p += 1 + j % 5)
        kpos[j] = p;
    const int qd = n_heads * hd, kvd = n_kv * hd;
    const size_t nq = (size_t)T * qd, nkv = (size_t)T * kvd;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nkv), *v = malloc(sizeof(float) * nkv);
    float *ref = malloc(sizeof(float) * nq), *got = malloc(sizeof(float) * nq);
    uint16_t *kb = malloc(sizeof(uint16_t) * nkv), *vb = malloc(sizeof(uint16_t) * nkv);
    uint16_t *rb = malloc(sizeof(uint16_t) * nkv), *gb = malloc(sizeof(uint16_t) * nkv);
    fill(q, nq, 2.0f);
    fill(k, nkv, 1.0f);
    fill(v, nkv, 1.0f);
    for (size_t i = 0; i < nkv; i++) {
        kb[i] = ra_f32_to_bf16(k[i]);
        vb[i] = ra_f32_to_bf16(v[i]);
    }
    char what[160];

    /* rope at positions, then shifted by +41 and -17; rows of K's width */
    struct ra_config sc = { .head_dim = hd, .rope_theta = 10000.0f };
    CHECK_OK(ra_rope_set_llama3(&sc, 8, 1, 4, 64, "test"));
    for (int style = 0; style < 2; style++) {
        const struct ra_rope r = { 10000.0f, style ? RA_ROPE_HALF : RA_ROPE_INTERLEAVED,
                                   style ? sc.rope_factors : NULL };
        const struct ra_rows rows = { NK, 0, kpos };
        const size_t cnt = (size_t)NK * kvd;
        float *dx = to_gpu(k, cnt);
        uint16_t *dxb = ra_backend_alloc(gpu, cnt * sizeof(uint16_t));
        memcpy(ref, k, cnt * sizeof(float));
        memcpy(rb, kb, cnt * sizeof(uint16_t));
        CHECK_OK(gpu->ops->upload(gpu, dxb, kb, cnt * sizeof(uint16_t)));
        CHECK_OK(cpu->ops->rope(cpu, ref, kvd, &rows, n_kv, hd, &r));
        CHECK_OK(gpu->ops->rope(gpu, dx, kvd, &rows, n_kv, hd, &r));
        from_gpu(got, dx, cnt);
        snprintf(what, sizeof what, "rope (%s) at %d gapped positions", style ? "rotate-half, llama3" : "interleaved",
                 NK);
        report(what, test_max_rel_diff(got, ref, cnt), 1e-4); /* float angles of positions up to ~300 */
        const int deltas[] = { 41, -17 };
        for (int d = 0; d < 2; d++) {
            CHECK_OK(cpu->ops->rope_shift(cpu, ref, RA_DTYPE_F32, kvd, NK, n_kv, hd, deltas[d], &r));
            CHECK_OK(gpu->ops->rope_shift(gpu, dx, RA_DTYPE_F32, kvd, NK, n_kv, hd, deltas[d], &r));
            CHECK_OK(cpu->ops->rope_shift(cpu, rb, RA_DTYPE_BF16, kvd, NK, n_kv, hd, deltas[d], &r));
            CHECK_OK(gpu->ops->rope_shift(gpu, dxb, RA_DTYPE_BF16, kvd, NK, n_kv, hd, deltas[d], &r));
        }
        from_gpu(got, dx, cnt);
        snprintf(what, sizeof what, "rope_shift (%s) of f32 rows", style ? "rotate-half, llama3" : "interleaved");
        report(what, test_max_rel_diff(got, ref, cnt), 1e-4);
        CHECK_OK(gpu->ops->download(gpu, gb, dxb, cnt * sizeof(uint16_t)));
        double worst = 0; /* bf16 rows: the two sides may round a value to neighbours (2^-8) */
        for (size_t i = 0; i < cnt; i++) {
            const double a = ra_bf16_to_f32(gb[i]), b = ra_bf16_to_f32(rb[i]);
            worst = fmax(worst, fabs(a - b) / (1.0 + fabs(b)));
        }
        snprintf(what, sizeof what, "rope_shift (%s) of bf16 rows", style ? "rotate-half, llama3" : "interleaved");
        report(what, worst, 1e-2);
        ra_backend_release(gpu, dx);
        ra_backend_release(gpu, dxb);
    }

    /* get_rows / set_rows: exact, both dtypes (set_rows also from f32 into bf16) */
    {
        float *dk = to_gpu(k, nkv), *dg = to_gpu(k, nkv);
        uint16_t *dkb = ra_backend_alloc(gpu, nkv * sizeof(uint16_t));
        uint16_t *dgb = ra_backend_alloc(gpu, nkv * sizeof(uint16_t));
        CHECK_OK(gpu->ops->upload(gpu, dkb, kb, nkv * sizeof(uint16_t)));
        CHECK_OK(gpu->ops->get_rows(gpu, dg, dk, RA_DTYPE_F32, kvd, kpos, NK));
        CHECK_OK(gpu->ops->get_rows(gpu, dgb, dkb, RA_DTYPE_BF16, kvd, kpos, NK));
        CHECK_OK(cpu->ops->get_rows(cpu, ref, k, RA_DTYPE_F32, kvd, kpos, NK));
        CHECK_OK(cpu->ops->get_rows(cpu, rb, kb, RA_DTYPE_BF16, kvd, kpos, NK));
        from_gpu(got, dg, (size_t)NK * kvd);
        CHECK_OK(gpu->ops->download(gpu, gb, dgb, (size_t)NK * kvd * sizeof(uint16_t)));
        CHECK(!memcmp(got, ref, (size_t)NK * kvd * sizeof(float)) && !memcmp(gb, rb, (size_t)NK * kvd * 2));
        /* set_rows of v's first NK rows at kpos, into copies of k */
        memcpy(ref, k, nkv * sizeof(float));
        memcpy(rb, kb, nkv * sizeof(uint16_t));
        float *dv = to_gpu(v, nkv);
        CHECK_OK(gpu->ops->upload(gpu, dg, k, nkv * sizeof(float)));
        CHECK_OK(gpu->ops->upload(gpu, dgb, kb, nkv * sizeof(uint16_t)));
        CHECK_OK(gpu->ops->set_rows(gpu, dg, RA_DTYPE_F32, dv, RA_DTYPE_F32, kvd, kpos, NK));
        CHECK_OK(gpu->ops->set_rows(gpu, dgb, RA_DTYPE_BF16, dv, RA_DTYPE_F32, kvd, kpos, NK));
        CHECK_OK(cpu->ops->set_rows(cpu, ref, RA_DTYPE_F32, v, RA_DTYPE_F32, kvd, kpos, NK));
        CHECK_OK(cpu->ops->set_rows(cpu, rb, RA_DTYPE_BF16, v, RA_DTYPE_F32, kvd, kpos, NK));
        from_gpu(got, dg, nkv);
        CHECK_OK(gpu->ops->download(gpu, gb, dgb, nkv * sizeof(uint16_t)));
        CHECK(!memcmp(got, ref, nkv * sizeof(float)) && !memcmp(gb, rb, nkv * sizeof(uint16_t)));
        ra_backend_release(gpu, dk);
        ra_backend_release(gpu, dg);
        ra_backend_release(gpu, dkb);
        ra_backend_release(gpu, dgb);
        ra_backend_release(gpu, dv);
    }

    /* attention at positions */
    float *dq = to_gpu(q, nq), *dout = to_gpu(q, nq);
    void *dk = ra_backend_alloc(gpu, sizeof(float) * nkv), *dv = ra_backend_alloc(gpu, sizeof(float) * nkv);
    void *dkg = ra_backend_alloc(gpu, sizeof(float) * nkv), *dvg = ra_backend_alloc(gpu, sizeof(float) * nkv);
    void *hkg = malloc(sizeof(float) * nkv), *hvg = malloc(sizeof(float) * nkv);
    for (int bf = 0; bf < 2; bf++) {
        const enum ra_dtype dt = bf ? RA_DTYPE_BF16 : RA_DTYPE_F32;
        const struct ra_attention_shape s = { n_heads, n_kv, hd, qd, kvd, dt };
        const void *hk = bf ? (const void *)kb : k, *hv = bf ? (const void *)vb : v;
        const size_t es = ra_dtype_size(dt);
        const double tol = bf ? 1.5e-2 : 5e-5; /* the CPU's avx512bf16 kernels round Q and P over bf16 rows */
        CHECK_OK(gpu->ops->upload(gpu, dk, hk, nkv * es));
        CHECK_OK(gpu->ops->upload(gpu, dv, hv, nkv * es));
        const struct ra_rows qrows = { NQ, 0, qpos }, cache = { T, 0, NULL }, gathered = { NK, 0, kpos };
        const struct ra_rows span = { 40, 210, NULL }, late = { 80, 180, NULL };
        /* gapped queries (their rows of q) over the whole cache */
        CHECK_OK(cpu->ops->attention(cpu, ref, q, &qrows, hk, hv, &cache, &s));
        CHECK_OK(gpu->ops->attention(gpu, dout, dq, &qrows, dk, dv, &cache, &s));
        from_gpu(got, dout, (size_t)NQ * qd);
        snprintf(what, sizeof what, "attention %d/%d heads of %d, %s rows: %d gapped queries over a cache", n_heads,
                 n_kv, hd, ra_dtype_name(dt), NQ);
        report(what, test_max_rel_diff(got, ref, (size_t)NQ * qd), tol);
        /* over gathered keys */
        CHECK_OK(cpu->ops->get_rows(cpu, hkg, hk, dt, kvd, kpos, NK));
        CHECK_OK(cpu->ops->get_rows(cpu, hvg, hv, dt, kvd, kpos, NK));
        CHECK_OK(gpu->ops->get_rows(gpu, dkg, dk, dt, kvd, kpos, NK));
        CHECK_OK(gpu->ops->get_rows(gpu, dvg, dv, dt, kvd, kpos, NK));
        CHECK_OK(cpu->ops->attention(cpu, ref, q, &qrows, hkg, hvg, &gathered, &s));
        CHECK_OK(gpu->ops->attention(gpu, dout, dq, &qrows, dkg, dvg, &gathered, &s));
        from_gpu(got, dout, (size_t)NQ * qd);
        snprintf(what, sizeof what, "attention %d/%d heads of %d, %s rows: %d gapped queries over %d gathered keys",
                 n_heads, n_kv, hd, ra_dtype_name(dt), NQ, NK);
        report(what, test_max_rel_diff(got, ref, (size_t)NQ * qd), tol);
        /* a span over a cache from a later position */
        const char *k0 = (const char *)hk + (size_t)late.start * kvd * es;
        const char *v0 = (const char *)hv + (size_t)late.start * kvd * es;
        CHECK_OK(cpu->ops->attention(cpu, ref, q + (size_t)span.start * qd, &span, k0, v0, &late, &s));
        CHECK_OK(gpu->ops->attention(gpu, dout, dq + (size_t)span.start * qd, &span,
                                     (const char *)dk + (size_t)late.start * kvd * es,
                                     (const char *)dv + (size_t)late.start * kvd * es, &late, &s));
        from_gpu(got, dout, (size_t)span.n * qd);
        snprintf(what, sizeof what, "attention %d/%d heads of %d, %s rows: span [210, 250) over a cache from 180",
                 n_heads, n_kv, hd, ra_dtype_name(dt));
        report(what, test_max_rel_diff(got, ref, (size_t)span.n * qd), tol);
    }
    ra_backend_release(gpu, dq);
    ra_backend_release(gpu, dout);
    ra_backend_release(gpu, dk);
    ra_backend_release(gpu, dv);
    ra_backend_release(gpu, dkg);
    ra_backend_release(gpu, dvg);
    void *hbufs[] = { q, k, v, ref, got, kb, vb, rb, gb, hkg, hvg };
    for (size_t i = 0; i < sizeof hbufs / sizeof hbufs[0]; i++)
        free(hbufs[i]);
}

static void check_elementwise(void)
{
    const size_t n = 100003; /* not a multiple of a block */
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n),
          *got = malloc(sizeof(float) * n);
    fill(a, n, 6.0f);
    fill(b, n, 2.0f);
    float *da = to_gpu(a, n), *db = to_gpu(b, n);
    memcpy(ref, a, sizeof(float) * n);
    CHECK_OK(cpu->ops->swiglu(cpu, ref, b, n));
    CHECK_OK(gpu->ops->swiglu(gpu, da, db, n));
    from_gpu(got, da, n);
    report("swiglu", test_max_rel_diff(got, ref, n), 2e-6); /* the CPU's exp is a polynomial of ~2 ulp */
    CHECK_OK(gpu->ops->upload(gpu, da, a, sizeof(float) * n));
    memcpy(ref, a, sizeof(float) * n);
    CHECK_OK(cpu->ops->add(cpu, ref, b, n));
    CHECK_OK(gpu->ops->add(gpu, da, db, n));
    from_gpu(got, da, n);
    report("residual add", test_max_rel_diff(got, ref, n), 0.0);
    ra_backend_release(gpu, da);
    ra_backend_release(gpu, db);
    free(a);
    free(b);
    free(ref);
    free(got);
}

/* Pinned host -> device on the copy stream, the compute stream waits for it
 * through an event, device -> device there, then back to pageable host. */
static void check_memory_model(void)
{
    const size_t n = 1 << 20;
    const struct ra_backend_ops *op = gpu->ops;
    CHECK(op->mem_kind(gpu) == RA_MEM_DEVICE);
    float *pinned = op->alloc_mem(gpu, n * sizeof(float), RA_MEM_HOST_PINNED);
    float *host = op->alloc_mem(gpu, n * sizeof(float), RA_MEM_HOST);
    float *d1 = op->alloc_mem(gpu, n * sizeof(float), RA_MEM_DEVICE), *d2 = ra_backend_alloc(gpu, n * sizeof(float));
    CHECK(pinned && host && d1 && d2);
    if (!pinned || !host || !d1 || !d2)
        return;
    CHECK(pinned[n - 1] == 0.0f && host[n / 2] == 0.0f); /* zeroed */
    from_gpu(host, d1, n);
    CHECK(host[0] == 0.0f && host[n - 1] == 0.0f);
    for (size_t i = 0; i < n; i++)
        pinned[i] = (float)i;
    struct ra_event *copied, *done;
    CHECK_OK(op->event_create(gpu, &copied));
    CHECK_OK(op->event_create(gpu, &done));
    CHECK_OK(op->copy_async(gpu, d1, pinned, n * sizeof(float), RA_STREAM_COPY));
    CHECK_OK(op->event_record(gpu, copied, RA_STREAM_COPY));
    CHECK_OK(op->stream_wait(gpu, RA_STREAM_COMPUTE, copied));
    CHECK_OK(op->copy_async(gpu, d2, d1, n * sizeof(float), RA_STREAM_COMPUTE));
    CHECK_OK(op->add(gpu, d2, d1, n)); /* an op after the copy, on the same stream */
    CHECK_OK(op->event_record(gpu, done, RA_STREAM_COMPUTE));
    CHECK_OK(op->stream_wait(gpu, RA_STREAM_COMM, done));
    CHECK_OK(op->copy_async(gpu, host, d2, n * sizeof(float), RA_STREAM_COMM));
    CHECK_OK(op->event_record(gpu, copied, RA_STREAM_COMM));
    CHECK_OK(op->event_sync(gpu, copied));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += host[i] != 2.0f * (float)i;
    CHECK(bad == 0);
    CHECK(op->stream_native(gpu, RA_STREAM_COMM) != NULL);
    op->event_destroy(gpu, copied);
    op->event_destroy(gpu, done);
    op->release_mem(gpu, pinned, RA_MEM_HOST_PINNED);
    op->release_mem(gpu, host, RA_MEM_HOST);
    op->release_mem(gpu, d1, RA_MEM_DEVICE);
    ra_backend_release(gpu, d2);
}

static void check_errors(void)
{
    struct ra_backend *none;
    CHECK(ra_backend_cuda_init(&none, 1000) == RA_EINVAL && none == NULL);
    CHECK(strstr(ra_error_message(), "device 1000") != NULL);
    /* a shape the kernel refuses: one clear error, nothing launched */
    const struct ra_attention_shape s = { 2, 2, 512, 1024, 1024, RA_DTYPE_F32 };
    CHECK(gpu->ops->attention(gpu, NULL, NULL, &(struct ra_rows){ 1, 0, NULL }, NULL, NULL,
                              &(struct ra_rows){ 1, 0, NULL }, &s) == RA_EUNSUPPORTED);
    /* a weight that was never uploaded */
    float w[4] = { 0 };
    struct ra_tensor t = { RA_DTYPE_F32, 2, 2, w, NULL };
    CHECK(gpu->ops->matmul(gpu, NULL, 2, NULL, 2, &t, 1) == RA_EINVAL);
    /* a failing runtime call (a grid of 70000 heads exceeds gridDim.y, so the
     * launch fails before any pointer is read) becomes RA_EBACKEND naming the device */
    const struct ra_attention_shape wide = { 70000, 70000, 16, 70000 * 16, 70000 * 16, RA_DTYPE_F32 };
    CHECK(ra_cuda_attention_ref(NULL, NULL, NULL, NULL, 0, 1, &wide,
                                (cudaStream_t)gpu->ops->stream_native(gpu, RA_STREAM_COMPUTE)) == RA_EBACKEND);
    CHECK(strstr(ra_error_message(), "cuda device 0") != NULL);
    fprintf(stderr, "expected error: %s\n", ra_error_message());
}

int main(void)
{
    const int gpus = ra_cuda_device_count();
    if (gpus == 0)
        return test_skip_no_device("test_cuda_ops", "no CUDA device (the CUDA kernels compiled and linked)");
    test_rand_seed(42);
    CHECK_OK(ra_backend_open(&cpu, "cpu", &(struct ra_backend_params){ .threads = 2 }));
    const struct ra_backend_params on0 = { .device = 0, .device_dtype = RA_DTYPE_BF16 };
    CHECK_OK(ra_backend_open(&gpu, "cuda", &on0));
    if (!cpu || !gpu)
        return test_result("test_cuda_ops");
    check_embed();
    const enum ra_dtype dts[] = { RA_DTYPE_BF16, RA_DTYPE_F16, RA_DTYPE_F32 };
    for (int i = 0; i < 3; i++) {
        check_matmul(dts[i], 96, 136, 37);
        check_matmul(dts[i], 257, 64, 1);
        check_matmul(dts[i], 32, 512, 300);
    }
    CHECK_OK(ra_backend_cuda_set_dtype(gpu, RA_DTYPE_BF16));
    check_rmsnorm();
    check_rope(0);
    check_rope(4000);
    /* MHA, GQA, MQA; spans from 0, after a prefix, single tokens (decode);
     * head sizes of 16 to 256; peaked softmax (scale 4) too; each through
     * every kernel that takes it, over fp32 and bf16 cache rows */
    check_attention(4, 4, 16, 0, 37, 1.0f);
    check_attention(8, 2, 64, 50, 1, 1.0f);
    check_attention(8, 2, 64, 13, 70, 4.0f);
    check_attention(4, 1, 128, 100, 33, 1.0f);
    check_attention(2, 2, 256, 31, 40, 1.0f);
    check_attention(6, 3, 48, 0, 1, 1.0f);
    check_attention(32, 8, 128, 200, 300, 2.0f);
    check_attention(2, 1, 64, 0, 128, 1.0f);   /* whole tiles of queries and keys */
    check_attention(8, 2, 64, 3000, 1, 2.0f);  /* decode: the keys in many chunks */
    check_attention(4, 1, 128, 5000, 5, 1.0f); /* a few queries over many chunks */
    check_attention(8, 8, 64, 700, 8, 1.0f);   /* as many queries as split takes */
    check_positions(8, 2, 64);
    check_positions(4, 4, 128);
    check_elementwise();
    check_memory_model();
    check_errors();
    ra_backend_free(gpu);
    ra_backend_free(cpu);
    return test_result("test_cuda_ops");
}
