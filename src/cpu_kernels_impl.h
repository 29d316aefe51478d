/* The CPU kernels, compiled once per instruction set (see cpu_kernels.h).
 *
 * Not an ordinary header: cpu_kernels_<isa>.c defines RA_KERNELS_AVX512
 * (and RA_KERNELS_BF16DP for avx512bf16), RA_KERNELS_AVX2 or nothing
 * (portable), then includes this file, and the build compiles each with that
 * instruction set's flags (AVX512BF16_CFLAGS, AVX512_CFLAGS, AVX2_CFLAGS or
 * none, from configure). The marker picks the intrinsics; the
 * plain loops are written to vectorise for whatever the flags allow.
 *
 * Causal attention, block by block with an online softmax.
 *
 * Work is split into (query head, block of queries) items. Each item walks the
 * key blocks [0, BK), [BK, 2BK), ... up to its last query's position and stops
 * there, so the masked upper triangle is never computed: attention work
 * follows the lower triangle. Key blocks sit at absolute positions, so a
 * query's result does not depend on how the prompt was split into spans.
 *
 * Layout: an item keeps its queries transposed, Qt[d][r], and everything per
 * query in the same orientation: scores St[j][r] (key j, query r), the output
 * accumulator Ot[d][r], and the softmax state m[r], l[r]. Then both products
 * are one micro-kernel shape, acc[a][r] += x(a, k) * Y[k][r], with a scalar
 * broadcast of K or V read straight from the cache (no transposed copy of the
 * cache is ever made) and vectors running over the item's queries:
 *
 *   S = Q·Kᵀ: a = key j, k = d, x = K[kb+j][d], Y = Qt     -> St[j][r]
 *   O += P·V: a = d,     k = j, x = V[kb+j][d], Y = St (P) -> Ot[d][r]
 *
 * and the online softmax (column max, exp, column sum, the rescale of Ot that
 * the P·V kernel applies as it loads Ot) is vertical, lane by lane. Scores are
 * kept in log2 units (Q is prescaled by log2(e)/sqrt(head_dim)), so the
 * softmax needs 2^x, which is cheaper than e^x. Every query's arithmetic is
 * the same sequence of fp32 operations whatever the other queries of its item
 * are and however wide the item is, so results are also independent of how
 * queries are grouped into items.
 *
 * Three builds of the same algorithm: AVX-512F (items of up to 4 x 16
 * queries), AVX2+FMA (4 x 8), and portable C (16, inner loops over the
 * queries so that a compiler can vectorise them).
 *
 * bf16 KV rows: every build widens each K and V block to fp32 and runs the
 * fp32 kernel on it (the results are the fp32 kernel's on the widened rows,
 * bit for bit). A fourth build, AVX-512 with AVX512-BF16 (RA_KERNELS_BF16DP),
 * instead multiplies in bf16 with vdpbf16ps, two products a lane per
 * instruction summed into fp32: the same micro-kernel shape with k running
 * over pairs, Q rounded to bf16 pairs [d/2][r], K's pairs broadcast straight
 * from the cache, P rounded to bf16 pairs [j/2][r] after the fp32 softmax,
 * and V's rows interleaved in pairs per block. fp32 rows take the fp32
 * kernel there too. */
#include "cpu_kernels.h"
#include "half.h"
#include "status.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(RA_KERNELS_BF16DP)
#if !defined(__AVX512F__) || !defined(__FMA__) || !defined(__AVX512BF16__) || !defined(RA_KERNELS_AVX512)
#error "the AVX512-BF16 kernels must be compiled with -mavx512f -mfma -mavx512bf16 (AVX512BF16_CFLAGS)"
#endif
#define KERNELS_ISA RA_CPU_ISA_AVX512BF16
#define KERNELS_TABLE ra_cpu_kernels_avx512bf16
#elif defined(RA_KERNELS_AVX512)
#if !defined(__AVX512F__) || !defined(__FMA__)
#error "the AVX-512 kernels must be compiled with -mavx512f -mfma (AVX512_CFLAGS)"
#endif
#define KERNELS_ISA RA_CPU_ISA_AVX512
#define KERNELS_TABLE ra_cpu_kernels_avx512
#elif defined(RA_KERNELS_AVX2)
#if !defined(__AVX2__) || !defined(__FMA__)
#error "the AVX2 kernels must be compiled with -mavx2 -mfma (AVX2_CFLAGS)"
#endif
#define KERNELS_ISA RA_CPU_ISA_AVX2
#define KERNELS_TABLE ra_cpu_kernels_avx2
#else
#define KERNELS_ISA RA_CPU_ISA_PORTABLE
#define KERNELS_TABLE ra_cpu_kernels_portable
#endif

#if defined(RA_KERNELS_AVX512)
#include <immintrin.h>
#define ATTN_SIMD 512
#define VL 16
#define NV 4 /* vectors of queries per item (prefill) */
/* micro-kernel rows for items of 1, 2, 4 vectors: about 24 accumulators of 32 registers */
#define NA_FOR(nv) ((nv) == 4 ? 6 : 12)
typedef __m512 vf;
#define vload _mm512_load_ps
#define vstore _mm512_store_ps
#define vset1 _mm512_set1_ps
#define vzero _mm512_setzero_ps
#define vadd _mm512_add_ps
#define vsub _mm512_sub_ps
#define vmul _mm512_mul_ps
#define vmax _mm512_max_ps
#define vfma _mm512_fmadd_ps
#define vle(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ)
#define vselect(mask, yes, no) _mm512_mask_blend_ps(mask, no, yes)
#define vpow2bits(t) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(t), 23))
#define vlanes() _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define vloadu _mm512_loadu_ps
static inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vmaxall(vf v) { return _mm512_reduce_max_ps(v); }
#elif defined(RA_KERNELS_AVX2)
#include <immintrin.h>
#define ATTN_SIMD 256
#define VL 8
#define NV 4 /* vectors of queries per item (prefill) */
/* micro-kernel rows for items of 1, 2, 4 vectors: 12 accumulators of 16
 * registers (with 4 vectors, 3 rows: 20% faster at 4096 tokens than 2 x 6) */
#define NA_FOR(nv) ((nv) == 4 ? 3 : (nv) == 2 ? 6 : 12)
typedef __m256 vf;
#define vload _mm256_load_ps
#define vstore _mm256_store_ps
#define vset1 _mm256_set1_ps
#define vzero _mm256_setzero_ps
#define vadd _mm256_add_ps
#define vsub _mm256_sub_ps
#define vmul _mm256_mul_ps
#define vmax _mm256_max_ps
#define vfma _mm256_fmadd_ps
#define vle(a, b) _mm256_cmp_ps(a, b, _CMP_LE_OQ)
#define vselect(mask, yes, no) _mm256_blendv_ps(no, yes, mask)
#define vpow2bits(t) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23))
#define vlanes() _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7)
#define vloadu _mm256_loadu_ps
static inline float vsum(vf v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vmaxall(vf v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
#else
#define ATTN_SIMD 0
#define VL 8
#define NV 2
#define NA_MAX 4
#endif

/* Queries per item: 64 with AVX-512, 32 with AVX2, 16 in portable C. Spans
 * shorter than that (decode is a span of 1) use items of fewer vectors, down
 * to one: the arithmetic of a query does not depend on the width of its item. */
#define BQ (NV * VL)
#define BK 64         /* keys per block, blocks at absolute positions */
#define RA_ATTN_MAX_HEADS_DEC 512 /* query rows (heads x tokens) of the decode path */

/* Prefetches rows [r0, r0+rows) of kc floats, `stride` apart, into L1. */
static inline void prefetch_rows(const float *x, size_t stride, int r0, int rows, int kc)
{
    for (int i = r0; i < r0 + rows; i++)
        for (int l = 0; l < kc; l += 64 / (int)sizeof(float))
            __builtin_prefetch(x + i * stride + l, 0, 3);
}

/* Per item scratch, on the stack of the thread running it. */
struct item {
    float qt[RA_ATTN_MAX_HEAD_DIM * BQ] __attribute__((aligned(64))); /* scaled queries, [d][r] */
    float ot[RA_ATTN_MAX_HEAD_DIM * BQ] __attribute__((aligned(64))); /* output accumulator, [d][r] */
    float st[BK * BQ] __attribute__((aligned(64)));                   /* scores, then P, [j][r] */
    float m[BQ] __attribute__((aligned(64)));                         /* running max */
    float l[BQ] __attribute__((aligned(64)));                         /* running sum */
    float alpha[BQ] __attribute__((aligned(64)));                     /* this block's rescale of ot */
};

/* 2^x for x <= 0 in scalar code (the vector kernels use vexp2_neg, the same
 * polynomial): the portable attention and the decode path. */
static inline float exp2_neg_s(float x)
{
    x = x < -126.0f ? -126.0f : x;
    const float t = x + 12583039.0f;
    const float r = x - (t - 12583039.0f);
    float p = 1.5403530393381606e-4f;
    p = p * r + 1.3333558146428443e-3f;
    p = p * r + 9.6181291076284772e-3f;
    p = p * r + 5.5504108664821580e-2f;
    p = p * r + 2.4022650695910071e-1f;
    p = p * r + 6.9314718055994531e-1f;
    p = p * r + 1.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits <<= 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#if ATTN_SIMD
/* 2^x for x <= 0 (softmax arguments: scores are kept in log2 units), ~1 ulp:
 * t = x + 1.5*2^23 + 127 rounds k = round(x) into t's low mantissa bits, so
 * t's bits shifted left by 23 are the float 2^k; r = x - k is exact and in
 * [-1/2, 1/2], where 2^r is its degree-6 Taylor polynomial. */
static inline vf vexp2_neg(vf x)
{
    x = vmax(x, vset1(-126.0f));
    const vf t = vadd(x, vset1(12583039.0f)); /* 1.5*2^23 + 127 */
    const vf r = vsub(x, vsub(t, vset1(12583039.0f)));
    vf p = vset1(1.5403530393381606e-4f);
    p = vfma(p, r, vset1(1.3333558146428443e-3f));
    p = vfma(p, r, vset1(9.6181291076284772e-3f));
    p = vfma(p, r, vset1(5.5504108664821580e-2f));
    p = vfma(p, r, vset1(2.4022650695910071e-1f));
    p = vfma(p, r, vset1(6.9314718055994531e-1f));
    p = vfma(p, r, vset1(1.0f));
    return vmul(p, vpow2bits(t));
}

/* The micro-kernel: for a < NA, c[a][:] = (cs ? c[a][:] * cs[:] : 0) + sum_{k < kc}
 * x[a*sa + k*sk] * y[k][:], rows of c and y W vectors (W*VL floats) apart. NA
 * and W are constants at every call, so the accumulators live in registers. */
static inline __attribute__((always_inline)) void micro(const int NA, const int W, float *c, const float *cs,
                                                        const float *x, size_t sa, size_t sk, const float *y, int kc)
{
    vf acc[12][NV];
#pragma GCC unroll 16
    for (int a = 0; a < NA; a++)
#pragma GCC unroll 4
        for (int v = 0; v < W; v++)
            acc[a][v] = cs ? vmul(vload(c + (a * W + v) * VL), vload(cs + v * VL)) : vzero();
    for (int k = 0; k < kc; k++) {
        vf yv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < W; v++)
            yv[v] = vload(y + ((size_t)k * W + v) * VL);
        const float *xk = x + (size_t)k * sk;
#pragma GCC unroll 16
        for (int a = 0; a < NA; a++) {
            const vf b = vset1(xk[a * sa]);
#pragma GCC unroll 4
            for (int v = 0; v < W; v++)
                acc[a][v] = vfma(b, yv[v], acc[a][v]);
        }
    }
#pragma GCC unroll 16
    for (int a = 0; a < NA; a++)
#pragma GCC unroll 4
        for (int v = 0; v < W; v++)
            vstore(c + (a * W + v) * VL, acc[a][v]);
}

/* Rows [0, na) of c in tiles of NA_FOR(W) rows, the remainder with a smaller
 * constant tile. When pf is set (the S step: x rows are keys, sk == 1), each
 * tile first prefetches the next tile's rows of x and its own rows of pf (the
 * V block the P·V step reads next): the K/V block comes from L2 or L3, and the
 * hardware prefetchers do not follow a dozen rows read in parallel. */
static inline __attribute__((always_inline)) void micro_rows_w(const int W, int na, float *c, const float *cs,
                                                               const float *x, size_t sa, size_t sk, const float *y,
                                                               int kc, const float *pf)
{
    const int NA = NA_FOR(W);
    int a = 0;
    for (; a + NA <= na; a += NA) {
        if (pf) {
            prefetch_rows(x, sa, a + NA, NA, kc);
            prefetch_rows(pf, sa, a, NA, kc);
        }
        micro(NA, W, c + (size_t)a * W * VL, cs, x + a * sa, sa, sk, y, kc);
    }
    if (pf)
        prefetch_rows(pf, sa, a, na - a, kc);
    float *ca = c + (size_t)a * W * VL;
    const float *xa = x + a * sa;
    switch (na - a) {
#define TAIL(n) case n: if (n < NA) micro(n, W, ca, cs, xa, sa, sk, y, kc); break;
    TAIL(1) TAIL(2) TAIL(3) TAIL(4) TAIL(5) TAIL(6) TAIL(7) TAIL(8) TAIL(9) TAIL(10) TAIL(11)
#undef TAIL
    default: break;
    }
}

static void micro_rows(int w, int na, float *c, const float *cs, const float *x, size_t sa, size_t sk, const float *y,
                       int kc, const float *pf)
{
    switch (w) {
    case 1: micro_rows_w(1, na, c, cs, x, sa, sk, y, kc, pf); break;
#if NV >= 2
    case 2: micro_rows_w(2, na, c, cs, x, sa, sk, y, kc, pf); break;
#endif
#if NV >= 4
    case 4: micro_rows_w(4, na, c, cs, x, sa, sk, y, kc, pf); break;
#endif
    default: break;
    }
}

/* Online softmax over keys [kb, kb+nk) for the item's queries at positions
 * pos0 + r: St becomes P (zero where masked), m and l advance, and alpha is
 * the factor Ot must be rescaled by. j outer, v inner: W independent max and
 * sum chains instead of one. */
static inline __attribute__((always_inline)) void softmax_w(const int W, struct item *it, int kb, int nk, int pos0)
{
    const int full = kb + nk - 1 <= pos0; /* every query sees every key of the block */
    vf pos[NV], m_old[NV], mx[NV], sum[NV];
    for (int v = 0; v < W; v++) {
        pos[v] = vadd(vset1((float)(pos0 + v * VL)), vlanes());
        m_old[v] = mx[v] = vload(it->m + v * VL);
        sum[v] = vzero();
    }
    if (full) {
        for (int j = 0; j < nk; j++)
            for (int v = 0; v < W; v++)
                mx[v] = vmax(mx[v], vload(it->st + (j * W + v) * VL));
        for (int j = 0; j < nk; j++)
            for (int v = 0; v < W; v++) {
                float *s = it->st + (j * W + v) * VL;
                const vf p = vexp2_neg(vsub(vload(s), mx[v]));
                vstore(s, p);
                sum[v] = vadd(sum[v], p);
            }
    } else {
        for (int j = 0; j < nk; j++) {
            const vf key = vset1((float)(kb + j));
            for (int v = 0; v < W; v++)
                mx[v] = vmax(mx[v], vselect(vle(key, pos[v]), vload(it->st + (j * W + v) * VL), vset1(-FLT_MAX)));
        }
        for (int j = 0; j < nk; j++) {
            const vf key = vset1((float)(kb + j));
            for (int v = 0; v < W; v++) {
                float *s = it->st + (j * W + v) * VL;
                const vf p = vselect(vle(key, pos[v]), vexp2_neg(vsub(vload(s), mx[v])), vzero());
                vstore(s, p);
                sum[v] = vadd(sum[v], p);
            }
        }
    }
    for (int v = 0; v < W; v++) {
        const vf alpha = vexp2_neg(vsub(m_old[v], mx[v]));
        vstore(it->l + v * VL, vadd(vmul(vload(it->l + v * VL), alpha), sum[v]));
        vstore(it->m + v * VL, mx[v]);
        vstore(it->alpha + v * VL, alpha);
    }
}

static void softmax_block(int w, struct item *it, int kb, int nk, int pos0)
{
    switch (w) {
    case 1: softmax_w(1, it, kb, nk, pos0); break;
#if NV >= 2
    case 2: softmax_w(2, it, kb, nk, pos0); break;
#endif
#if NV >= 4
    case 4: softmax_w(4, it, kb, nk, pos0); break;
#endif
    default: break;
    }
}

#else /* portable C */


/* Rows of c in tiles of NA_MAX rows, written so that a compiler keeps the
 * tile in vector registers and vectorises over the BQ queries. */
static inline void micro_tile(const int NA, float *c, const float *cs, const float *x, size_t sa, size_t sk,
                              const float *y, int kc)
{
    float acc[NA_MAX][BQ];
    for (int a = 0; a < NA; a++)
        for (int r = 0; r < BQ; r++)
            acc[a][r] = cs ? c[a * BQ + r] * cs[r] : 0.0f;
    for (int k = 0; k < kc; k++) {
        const float *yk = y + (size_t)k * BQ;
        for (int a = 0; a < NA; a++) {
            const float b = x[a * sa + k * sk];
#pragma omp simd
            for (int r = 0; r < BQ; r++)
                acc[a][r] += b * yk[r];
        }
    }
    for (int a = 0; a < NA; a++)
        for (int r = 0; r < BQ; r++)
            c[a * BQ + r] = acc[a][r];
}

static void micro_rows(int w, int na, float *c, const float *cs, const float *x, size_t sa, size_t sk, const float *y,
                       int kc, const float *pf)
{
    (void)w, (void)pf; /* items are always NV vectors wide */
    int a = 0;
    for (; a + NA_MAX <= na; a += NA_MAX)
        micro_tile(NA_MAX, c + (size_t)a * BQ, cs, x + a * sa, sa, sk, y, kc);
    for (; a < na; a++)
        micro_tile(1, c + (size_t)a * BQ, cs, x + a * sa, sa, sk, y, kc);
}

static void softmax_block(int w, struct item *it, int kb, int nk, int pos0)
{
    (void)w;
    float mx[BQ], sum[BQ];
    for (int r = 0; r < BQ; r++) {
        mx[r] = it->m[r];
        sum[r] = 0;
    }
    for (int j = 0; j < nk; j++) {
        const float *s = it->st + j * BQ;
#pragma omp simd
        for (int r = 0; r < BQ; r++) {
            const float v = kb + j <= pos0 + r ? s[r] : -FLT_MAX;
            mx[r] = v > mx[r] ? v : mx[r];
        }
    }
    for (int j = 0; j < nk; j++) {
        float *s = it->st + j * BQ;
#pragma omp simd
        for (int r = 0; r < BQ; r++) {
            const float p = exp2_neg_s(s[r] - mx[r]);
            s[r] = kb + j <= pos0 + r ? p : 0.0f;
            sum[r] += s[r];
        }
    }
    for (int r = 0; r < BQ; r++) {
        it->alpha[r] = exp2_neg_s(it->m[r] - mx[r]);
        it->l[r] = it->l[r] * it->alpha[r] + sum[r];
        it->m[r] = mx[r];
    }
}
#endif

#if defined(RA_KERNELS_BF16DP)
/* A bf16 pair read as one 32-bit lane out of a uint16_t array (the cache's K rows). */
typedef uint32_t __attribute__((may_alias)) pair_t;

/* The bf16 micro-kernel: as micro, with k over pairs: c[a][:] = (cs ? c[a][:] *
 * cs[:] : 0) + sum_{i < kp} x[a*sa + i*sk] . y[i][:], where x holds a bf16
 * pair per uint32 (broadcast) and y rows W vectors of bf16 pairs; each
 * vdpbf16ps adds both products of a pair to a lane's fp32 sum. */
static inline __attribute__((always_inline)) void micro_dp(const int NA, const int W, float *c, const float *cs,
                                                           const pair_t *x, size_t sa, size_t sk,
                                                           const uint32_t *y, int kp)
{
    vf acc[12][NV];
#pragma GCC unroll 16
    for (int a = 0; a < NA; a++)
#pragma GCC unroll 4
        for (int v = 0; v < W; v++)
            acc[a][v] = cs ? vmul(vload(c + (a * W + v) * VL), vload(cs + v * VL)) : vzero();
    for (int i = 0; i < kp; i++) {
        __m512bh yv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < W; v++)
            yv[v] = (__m512bh)_mm512_load_si512(y + ((size_t)i * W + v) * VL);
        const pair_t *xi = x + (size_t)i * sk;
#pragma GCC unroll 16
        for (int a = 0; a < NA; a++) {
            const __m512bh b = (__m512bh)_mm512_set1_epi32((int)xi[a * sa]);
#pragma GCC unroll 4
            for (int v = 0; v < W; v++)
                acc[a][v] = _mm512_dpbf16_ps(acc[a][v], b, yv[v]);
        }
    }
#pragma GCC unroll 16
    for (int a = 0; a < NA; a++)
#pragma GCC unroll 4
        for (int v = 0; v < W; v++)
            vstore(c + (a * W + v) * VL, acc[a][v]);
}

/* Rows [0, na) of c in tiles, as micro_rows_w. */
static inline __attribute__((always_inline)) void micro_dp_rows_w(const int W, int na, float *c, const float *cs,
                                                                  const pair_t *x, size_t sa, size_t sk,
                                                                  const uint32_t *y, int kp)
{
    const int NA = NA_FOR(W);
    int a = 0;
    for (; a + NA <= na; a += NA)
        micro_dp(NA, W, c + (size_t)a * W * VL, cs, x + a * sa, sa, sk, y, kp);
    float *ca = c + (size_t)a * W * VL;
    const pair_t *xa = x + a * sa;
    switch (na - a) {
#define TAIL(n) case n: if (n < NA) micro_dp(n, W, ca, cs, xa, sa, sk, y, kp); break;
    TAIL(1) TAIL(2) TAIL(3) TAIL(4) TAIL(5) TAIL(6) TAIL(7) TAIL(8) TAIL(9) TAIL(10) TAIL(11)
#undef TAIL
    default: break;
    }
}

static void micro_dp_rows(int w, int na, float *c, const float *cs, const pair_t *x, size_t sa, size_t sk,
                          const uint32_t *y, int kp)
{
    switch (w) {
    case 1: micro_dp_rows_w(1, na, c, cs, x, sa, sk, y, kp); break;
    case 2: micro_dp_rows_w(2, na, c, cs, x, sa, sk, y, kp); break;
    case 4: micro_dp_rows_w(4, na, c, cs, x, sa, sk, y, kp); break;
    default: break;
    }
}

/* Lanes of lo and hi rounded to bf16 (to nearest even) and paired: lo in the
 * low half of each 32-bit lane, as vdpbf16ps pairs them. */
static inline __m512i pack_pairs(vf lo, vf hi)
{
    const __m512i l = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
    const __m512i h = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
    return _mm512_or_si512(l, _mm512_slli_epi32(h, 16));
}

/* The bf16 products' scratch, beside struct item. */
struct item_dp {
    uint32_t qp[RA_ATTN_MAX_HEAD_DIM / 2 * BQ] __attribute__((aligned(64))); /* scaled queries, pairs [d/2][r] */
    uint32_t pp[BK / 2 * BQ] __attribute__((aligned(64)));                  /* P, pairs [j/2][r] */
    uint32_t vp[BK / 2 * RA_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64))); /* V block, pairs [j/2][d] */
};

/* attend_block for bf16 rows (head_dim even) with bf16 products. */
static void attend_block_dp(float *out, const float *q, const uint16_t *k_cache, const uint16_t *v_cache,
                            int start, int q0, int nq, int h, int w, const struct ra_attention_shape *s)
{
    struct item it;
    struct item_dp dp;
    const int hd = s->head_dim, hp = hd / 2, kvh = h / (s->n_heads / s->n_kv_heads), ld = w * VL;
    const float scale = 1.4426950408889634f / sqrtf((float)hd); /* scores in log2 units */
    const size_t kvs = (size_t)s->kv_stride, head = (size_t)kvh * hd;

    memset(dp.qp, 0, sizeof(uint32_t) * (size_t)hp * ld);
    for (int r = 0; r < nq; r++) {
        const float *qr = q + (size_t)(q0 + r) * s->q_stride + (size_t)h * hd;
        for (int i = 0; i < hp; i++)
            dp.qp[i * ld + r] = (uint32_t)ra_f32_to_bf16(qr[2 * i] * scale) |
                                (uint32_t)ra_f32_to_bf16(qr[2 * i + 1] * scale) << 16;
    }
    for (int r = 0; r < ld; r++) {
        it.m[r] = -FLT_MAX;
        it.l[r] = 0;
    }
    memset(it.ot, 0, sizeof(float) * (size_t)hd * ld);

    const int pos0 = start + q0, last = pos0 + nq - 1;
    for (int kb = 0; kb <= last; kb += BK) {
        const int nk = last - kb + 1 < BK ? last - kb + 1 : BK, np = (nk + 1) / 2;
        const uint16_t *kblk = k_cache + head + (size_t)kb * kvs, *vblk = v_cache + head + (size_t)kb * kvs;
        /* St[j][r] = K[kb+j] · Q[r]: K's pairs (2i, 2i+1) are adjacent in the row */
        micro_dp_rows(w, nk, it.st, NULL, (const pair_t *)kblk, kvs / 2, 1, dp.qp, hp);
        softmax_block(w, &it, kb, nk, pos0);
        /* P and V in pairs of keys; an odd block's last pair gets a zero partner */
        for (int i = 0; i < np; i++) {
            const int odd = 2 * i + 1 == nk;
            for (int v = 0; v < w; v++) {
                const vf lo = vload(it.st + (2 * i * w + v) * VL);
                const vf hi = odd ? vzero() : vload(it.st + ((2 * i + 1) * w + v) * VL);
                _mm512_store_si512(dp.pp + (i * w + v) * VL, pack_pairs(lo, hi));
            }
            const uint16_t *v0 = vblk + (size_t)(2 * i) * kvs, *v1 = odd ? v0 : v0 + kvs;
            uint32_t *vpi = dp.vp + (size_t)i * hd;
            const uint32_t keep = odd ? 0 : 0xffffu;
#pragma omp simd
            for (int d = 0; d < hd; d++)
                vpi[d] = (uint32_t)v0[d] | ((uint32_t)v1[d] & keep) << 16;
        }
        /* Ot[d][r] = Ot[d][r] alpha[r] + sum_j V[kb+j][d] P[j][r] */
        micro_dp_rows(w, hd, it.ot, it.alpha, dp.vp, 1, (size_t)hd, dp.pp, np);
    }
    for (int r = 0; r < nq; r++) {
        float *o = out + (size_t)(q0 + r) * s->q_stride + (size_t)h * hd;
        const float inv = 1.0f / it.l[r];
        for (int d = 0; d < hd; d++)
            o[d] = it.ot[d * ld + r] * inv;
    }
}
#endif

/* Rows [0, rows) of a bf16 cache block (stride elements apart) widened to
 * fp32, hd floats a row: exact, so the fp32 kernel then computes on the
 * values the cache holds. Once per item and key block: 2/BQ of the block's
 * multiply-adds, against the bandwidth of reading half the bytes. */
static void widen_rows(float *dst, const uint16_t *src, size_t stride, int rows, int hd)
{
    for (int j = 0; j < rows; j++) {
        const uint16_t *sj = src + (size_t)j * stride;
        float *dj = dst + (size_t)j * hd;
#pragma omp simd
        for (int d = 0; d < hd; d++)
            dj[d] = ra_bf16_to_f32(sj[d]);
    }
}

/* One item: queries [q0, q0+nq) of head h (positions start+q0...), in w
 * vectors of VL lanes; all rows of the item's arrays are w*VL floats. */
static void attend_block(float *out, const float *q, const void *k_cache, const void *v_cache,
                         int start, int q0, int nq, int h, int w, const struct ra_attention_shape *s)
{
    struct item it;
    const int hd = s->head_dim, kvh = h / (s->n_heads / s->n_kv_heads), ld = w * VL;
    const float scale = 1.4426950408889634f / sqrtf((float)hd); /* scores in log2 units */
    const size_t kvs = (size_t)s->kv_stride, head = (size_t)kvh * hd;
    const int bf16 = s->kv_dtype == RA_DTYPE_BF16;
    /* bf16 rows: this item's fp32 copy of the current K and V blocks, [j][d] */
    float kv_tile[bf16 ? 2 * BK * hd : 1];

    memset(it.qt, 0, sizeof(float) * (size_t)hd * ld);
    for (int r = 0; r < nq; r++) {
        const float *qr = q + (size_t)(q0 + r) * s->q_stride + (size_t)h * hd;
        for (int d = 0; d < hd; d++)
            it.qt[d * ld + r] = qr[d] * scale;
    }
    for (int r = 0; r < ld; r++) {
        it.m[r] = -FLT_MAX;
        it.l[r] = 0;
    }
    memset(it.ot, 0, sizeof(float) * (size_t)hd * ld);

    const int pos0 = start + q0, last = pos0 + nq - 1; /* positions of the item's first and last query */
    for (int kb = 0; kb <= last; kb += BK) {
        const int nk = last - kb + 1 < BK ? last - kb + 1 : BK;
        const float *kblk, *vblk;
        size_t ldkv;
        if (bf16) {
            widen_rows(kv_tile, (const uint16_t *)k_cache + head + (size_t)kb * kvs, kvs, nk, hd);
            widen_rows(kv_tile + BK * hd, (const uint16_t *)v_cache + head + (size_t)kb * kvs, kvs, nk, hd);
            kblk = kv_tile;
            vblk = kv_tile + BK * hd;
            ldkv = (size_t)hd;
        } else {
            kblk = (const float *)k_cache + head + (size_t)kb * kvs;
            vblk = (const float *)v_cache + head + (size_t)kb * kvs;
            ldkv = kvs;
        }
        /* St[j][r] = K[kb+j] · Q[r] */
        micro_rows(w, nk, it.st, NULL, kblk, ldkv, 1, it.qt, hd, vblk);
        softmax_block(w, &it, kb, nk, pos0);
        /* Ot[d][r] = Ot[d][r] alpha[r] + sum_j V[kb+j][d] P[j][r] */
        micro_rows(w, hd, it.ot, it.alpha, vblk, 1, ldkv, it.st, nk, NULL);
    }
    for (int r = 0; r < nq; r++) {
        float *o = out + (size_t)(q0 + r) * s->q_stride + (size_t)h * hd;
        const float inv = 1.0f / it.l[r];
        for (int d = 0; d < hd; d++)
            o[d] = it.ot[d * ld + r] * inv;
    }
}

static int attention_items(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                           const struct ra_attention_shape *s, int n_threads)
{
    int w = NV; /* item width in vectors: the fewest that hold the span, at most NV */
#if ATTN_SIMD
    while (w > 1 && (w / 2) * VL >= n)
        w /= 2;
#endif
    const int bq = w * VL, qblocks = (n + bq - 1) / bq;
    const int items = qblocks * s->n_heads;
    /* Head by head, so that a thread's consecutive items reuse the head's K and
     * V from its cache; within a head, later query blocks see more keys: hand
     * them out first, dynamically, so the last items are the cheapest. */
#pragma omp parallel for schedule(dynamic, 1) if (items > 1) num_threads(n_threads)
    for (int it = 0; it < items; it++) {
        const int h = it / qblocks, qb = qblocks - 1 - it % qblocks;
        const int q0 = qb * bq, nq = n - q0 < bq ? n - q0 : bq;
#if defined(RA_KERNELS_BF16DP)
        if (s->kv_dtype == RA_DTYPE_BF16 && s->head_dim % 2 == 0) {
            attend_block_dp(out, q, k_cache, v_cache, start, q0, nq, h, w, s);
            continue;
        }
#endif
        attend_block(out, q, k_cache, v_cache, start, q0, nq, h, w, s);
    }
    return RA_OK;
}

/* ------------------------------------------------------------ attention of a decode step
 *
 * A decode step has one query (or a few) per head. The item layout above
 * would use one lane of each vector and read each head's 256 bytes of a
 * cache row separately, kilobytes apart: a long context's attention then
 * runs at a fraction of the memory's rate. Here every head is done at once,
 * key by key: each K and V row is read whole and in order (the prefetchers
 * stream it), vectors run along head_dim (q·K[j], o += p V[j]). The keys are
 * split into at most DEC_CHUNKS chunks of whole BK blocks, fixed by the
 * context alone (not the thread count, so results do not depend on it); the
 * chunks run in parallel, each with its own online softmax state, merged in
 * order at the end (flash-decoding). Within a chunk the blocks and the
 * softmax are the block kernel's (absolute blocks of BK keys, scores in log2
 * units, the same 2^x): results match it to rounding of the sums' order. */
#define DEC_MAX_N 4      /* tokens per step this path takes */
#define DEC_CHUNKS 8     /* key chunks at most */
#define DEC_CHUNK_MIN 512 /* keys per chunk at least */


/* A bf16 cache row's elements [0, VL) widened to fp32 in registers (exact). */
#if ATTN_SIMD == 512
static inline vf vload_bf16(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline __m256 vload_bf16_half(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
#elif ATTN_SIMD == 256
static inline vf vload_bf16(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
#endif

static inline const float *dec_widen(float *dst, const uint16_t *src, int hd)
{
    for (int d = 0; d < hd; d++)
        dst[d] = ra_bf16_to_f32(src[d]);
    return dst;
}

/* a · b over hd elements; a is the (aligned) query, b a head's slice of a
 * cache row in the cache's dtype, widened in registers. */
static inline float dec_dot(const float *a, const void *bv, enum ra_dtype dt, int hd)
{
#if ATTN_SIMD
    if (hd % VL == 0) {
        vf acc = vzero();
        if (dt == RA_DTYPE_F32)
            for (int d = 0; d < hd; d += VL)
                acc = vfma(vload(a + d), vloadu((const float *)bv + d), acc);
        else
            for (int d = 0; d < hd; d += VL)
                acc = vfma(vload(a + d), vload_bf16((const uint16_t *)bv + d), acc);
        return vsum(acc);
    }
#endif
#if ATTN_SIMD == 512
    if (hd % 8 == 0) { /* small heads (stories260K: 8) in half vectors */
        __m256 acc = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d),
                                  dt == RA_DTYPE_F32 ? _mm256_loadu_ps((const float *)bv + d)
                                                     : vload_bf16_half((const uint16_t *)bv + d),
                                  acc);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        return _mm_cvtss_f32(h);
    }
#endif
    /* Scalar code: bf16 rows widened first, so that both dtypes run the
     * one loop (the compiler's order of the sums is then the same). */
    float wide[dt == RA_DTYPE_F32 ? 1 : hd];
    const float *b = dt == RA_DTYPE_F32 ? bv : dec_widen(wide, bv, hd);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < hd; d++)
        s += a[d] * b[d];
    return s;
}

/* o += p v over hd elements, o aligned, v a head's slice of a cache row in the cache's dtype */
static inline void dec_axpy(float *o, float p, const void *vv, enum ra_dtype dt, int hd)
{
#if ATTN_SIMD
    if (hd % VL == 0) {
        const vf pv = vset1(p);
        if (dt == RA_DTYPE_F32)
            for (int d = 0; d < hd; d += VL)
                vstore(o + d, vfma(pv, vloadu((const float *)vv + d), vload(o + d)));
        else
            for (int d = 0; d < hd; d += VL)
                vstore(o + d, vfma(pv, vload_bf16((const uint16_t *)vv + d), vload(o + d)));
        return;
    }
#endif
#if ATTN_SIMD == 512
    if (hd % 8 == 0) {
        const __m256 pv = _mm256_set1_ps(p);
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pv,
                                                    dt == RA_DTYPE_F32 ? _mm256_loadu_ps((const float *)vv + d)
                                                                       : vload_bf16_half((const uint16_t *)vv + d),
                                                    _mm256_loadu_ps(o + d)));
        return;
    }
#endif
    float wide[dt == RA_DTYPE_F32 ? 1 : hd];
    const float *v = dt == RA_DTYPE_F32 ? vv : dec_widen(wide, vv, hd);
#pragma omp simd
    for (int d = 0; d < hd; d++)
        o[d] += p * v[d];
}

/* The largest of mx and st[0, nk) (st aligned). This, the rescale of the
 * output and the rounding of P to bf16 run in vectors, as dec_exp does: a
 * lane at a time they took a fifth of the bf16 decode attention's time with
 * its rows in cache, and a sixth from memory. */
static inline float dec_max(const float *st, int nk, float mx)
{
    int j = 0;
#if ATTN_SIMD
    vf m = vset1(mx);
    for (; j + VL <= nk; j += VL)
        m = vmax(vload(st + j), m); /* m where either is NaN: a NaN score is skipped, as below */
    mx = vmaxall(m);
#endif
    for (; j < nk; j++)
        mx = st[j] > mx ? st[j] : mx;
    return mx;
}

/* o[0, hd) *= a (o aligned) */
static inline void dec_scale(float *o, float a, int hd)
{
    int d = 0;
#if ATTN_SIMD
    for (; d + VL <= hd; d += VL)
        vstore(o + d, vmul(vload(o + d), vset1(a)));
#endif
    for (; d < hd; d++)
        o[d] *= a;
}

/* st[0, nk) rounded to bf16 values in place, to nearest even: by vcvtneps2bf16
 * as the prefill's pack_pairs rounds P (P = 2^x >= 2^-126 is never subnormal,
 * so its flush to zero never applies and the result is ra_f32_to_bf16's). */
static inline void dec_round_bf16(float *st, int nk)
{
    int j = 0;
#if defined(RA_KERNELS_BF16DP)
    for (; j + VL <= nk; j += VL)
        vstore(st + j, _mm512_castsi512_ps(_mm512_slli_epi32(
                           _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(vload(st + j))), 16)));
#endif
    for (; j < nk; j++)
        st[j] = ra_bf16_to_f32(ra_f32_to_bf16(st[j]));
}

/* st[0, nk) = 2^(st - mx) in place; returns their sum. */
static inline float dec_exp(float *st, int nk, float mx)
{
    float sum = 0;
    int j = 0;
#if ATTN_SIMD
    vf sv = vzero();
    for (; j + VL <= nk; j += VL) {
        const vf p = vexp2_neg(vsub(vload(st + j), vset1(mx)));
        vstore(st + j, p);
        sv = vadd(sv, p);
    }
    sum = vsum(sv);
#endif
    for (; j < nk; j++) {
        st[j] = exp2_neg_s(st[j] - mx);
        sum += st[j];
    }
    return sum;
}

/* Per chunk state: per query row r (token r / n_heads, head r % n_heads)
 * the running max m, sum l, output o[hd]; scores st[BK] of the block. */
struct dec_chunk {
    float *o, *m, *l, *st;
};

/* What the chunks share: per query row r its scaled query qs[r*ldo...], the
 * offset of its KV head in a cache row and its position (the last key it
 * sees); and whether P is rounded to bf16 before P·V (bf16 rows on the
 * AVX512-BF16 build, see attention()). */
struct dec_rows {
    const float *qs;
    const uint16_t *qb; /* with round_p: the same queries in bf16, for vdpbf16ps */
    const int *koff, *pos;
    int rows, round_p;
    size_t ldo;
};

#if defined(RA_KERNELS_BF16DP)
/* q · k for a bf16 query and a bf16 row (hd a multiple of 32): vdpbf16ps
 * takes 32 of each per instruction, with the products dec_dot forms from the
 * same values (exact in fp32), summed in pairs. */
static inline float dec_dot_dp(const uint16_t *q, const uint16_t *k, int hd)
{
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 32)
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(k + d), (__m512bh)_mm512_load_si512(q + d));
    return _mm512_reduce_add_ps(acc);
}
#endif

#if ATTN_SIMD == 512
/* O += P·V for a group of rows over the keys [kb, kb+nkb) of a block, with
 * their outputs in 24 registers (nvec = head_dim/16 vectors a row, 24/nvec
 * rows): each V row is still read whole and in order, but the outputs are
 * loaded and stored once a block instead of once a key. bf16 rows in cache
 * went from 44-47 to 57-66 GB/s (12 heads of 64, one thread), and decode at
 * 8192 positions with an f32 cache from 23 to 27-29 tokens/s; reading a
 * block head by head instead, to keep one head's output in registers, loses
 * the hardware prefetch here. The same fma(p, v, o) in the same key order as
 * dec_axpy, so the results are the same bit for bit. */
#define DEC_PV_REGS 24
static inline __attribute__((always_inline)) vf dec_pv_load(const int bf16, const char *row, int e)
{
    return bf16 ? vload_bf16((const uint16_t *)row + e) : vloadu((const float *)row + e);
}
static inline __attribute__((always_inline)) void dec_pv_regs(const int nvec, const int bf16, float *o, size_t ldo,
                                                              const float *st, const int *koff, const char *vc,
                                                              size_t row_bytes, int nkb)
{
#define DEC_ROW(s) ((s) / nvec)
#define DEC_OFF(s) ((size_t)DEC_ROW(s) * ldo + VL * ((s) % nvec))
#define DEC_X(m) m(0) m(1) m(2) m(3) m(4) m(5) m(6) m(7) m(8) m(9) m(10) m(11) m(12) m(13) m(14) m(15) m(16) \
    m(17) m(18) m(19) m(20) m(21) m(22) m(23)
#define DEC_DECL(s) vf a##s = vload(o + DEC_OFF(s));
#define DEC_FMA(s) a##s = vfma(vset1(st[DEC_ROW(s) * BK + j]), \
                               dec_pv_load(bf16, vrow, koff[DEC_ROW(s)] + VL * ((s) % nvec)), a##s);
#define DEC_STORE(s) vstore(o + DEC_OFF(s), a##s);
    DEC_X(DEC_DECL)
    for (int j = 0; j < nkb; j++) {
        const char *vrow = vc + (size_t)j * row_bytes;
        DEC_X(DEC_FMA)
    }
    DEC_X(DEC_STORE)
#undef DEC_ROW
#undef DEC_OFF
#undef DEC_X
#undef DEC_DECL
#undef DEC_FMA
#undef DEC_STORE
}

/* dec_pv_regs over the rows [0, rows - rows % group); returns that count (0
 * where it does not apply: head_dim not 16, 32, 64 or 128, or a row that
 * sees fewer than all nkb keys). */
static int dec_pv_blocks(const struct dec_chunk *c, const struct dec_rows *q, const char *vblk, size_t row_bytes,
                         enum ra_dtype dt, int hd, int nkb, const int *nk)
{
    const int nvec = hd / VL, bf16 = dt == RA_DTYPE_BF16;
    if (hd % VL != 0 || nvec > 8 || DEC_PV_REGS % nvec != 0)
        return 0;
    const int group = DEC_PV_REGS / nvec, done = q->rows - q->rows % group;
    for (int r = 0; r < done; r++)
        if (nk[r] != nkb)
            return 0;
    for (int r0 = 0; r0 < done; r0 += group) {
        float *o = c->o + r0 * q->ldo;
        const float *st = c->st + r0 * BK;
        const int *koff = q->koff + r0;
        switch (nvec * 2 + bf16) {
        case 2: dec_pv_regs(1, 0, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 3: dec_pv_regs(1, 1, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 4: dec_pv_regs(2, 0, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 5: dec_pv_regs(2, 1, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 8: dec_pv_regs(4, 0, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 9: dec_pv_regs(4, 1, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 16: dec_pv_regs(8, 0, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 17: dec_pv_regs(8, 1, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        default: return 0;
        }
    }
    return done;
}
#endif

/* Asks for rows [0, n) of row_bytes each into the cache hierarchy ahead of
 * use. One thread's decode attention over bf16 rows ran at about 60% of the
 * read bandwidth from memory: the hardware prefetchers stop running ahead
 * while a block is computed. Asking for the block's V rows during its K pass,
 * and for the next block's K rows before its P·V, took bf16 rows at 8192
 * positions from 12.1-12.4 to 9.9-10.3 ms for twelve layers (the hint T2: T0
 * was 10.2-10.9). Only there: f32 rows were level or a little slower with it,
 * and the AVX2 build, which has more arithmetic per row, slower (13.5-13.9 ms
 * to 14.3-14.5). */
static inline void dec_prefetch(const char *rows, int n, size_t row_bytes)
{
    for (size_t b = 0; b < (size_t)n * row_bytes; b += 64)
        __builtin_prefetch(rows + b, 0, 1); /* prefetcht2 on x86 */
}

/* Keys [k0, k1) (whole blocks from k0) for every row, from a fresh state.
 * Each K and V row is read once, whole and in order; its elements are
 * widened in registers when the cache is bf16. */
static void dec_run_chunk(const struct dec_chunk *c, const struct dec_rows *q, const void *k_cache,
                          const void *v_cache, int k0, int k1, const struct ra_attention_shape *s)
{
    const int hd = s->head_dim, rows = q->rows;
    const enum ra_dtype dt = s->kv_dtype;
    const size_t row_bytes = (size_t)s->kv_stride * ra_dtype_size(dt), esize = ra_dtype_size(dt), ldo = q->ldo;
    const char *kc = k_cache, *vc = v_cache;
    const int ahead = ATTN_SIMD == 512 && dt == RA_DTYPE_BF16; /* see dec_prefetch */
    for (int r = 0; r < rows; r++) {
        c->m[r] = -FLT_MAX;
        c->l[r] = 0;
        memset(c->o + r * ldo, 0, sizeof(float) * (size_t)hd);
    }
    for (int kb = k0; kb < k1; kb += BK) {
        const int nkb = k1 - kb < BK ? k1 - kb : BK;
        for (int j = 0; j < nkb; j++) { /* S: row by row of K, every head */
            const char *krow = kc + (size_t)(kb + j) * row_bytes;
            if (ahead)
                dec_prefetch(vc + (size_t)(kb + j) * row_bytes, 1, row_bytes);
#if defined(RA_KERNELS_BF16DP)
            if (q->qb) {
                for (int r = 0; r < rows; r++)
                    if (kb + j <= q->pos[r])
                        c->st[r * BK + j] = dec_dot_dp(q->qb + r * ldo, (const uint16_t *)krow + q->koff[r], hd);
                continue;
            }
#endif
            for (int r = 0; r < rows; r++)
                if (kb + j <= q->pos[r])
                    c->st[r * BK + j] = dec_dot(q->qs + r * ldo, krow + (size_t)q->koff[r] * esize, dt, hd);
        }
        int nk[RA_ATTN_MAX_HEADS_DEC];
        for (int r = 0; r < rows; r++) { /* the online softmax, row by row */
            nk[r] = q->pos[r] - kb + 1 < nkb ? q->pos[r] - kb + 1 : nkb;
            if (nk[r] <= 0)
                continue;
            float *st = c->st + r * BK;
            const float mx = dec_max(st, nk[r], c->m[r]);
            const float sum = dec_exp(st, nk[r], mx), alpha = exp2_neg_s(c->m[r] - mx);
            c->l[r] = c->l[r] * alpha + sum;
            c->m[r] = mx;
            dec_scale(c->o + r * ldo, alpha, hd);
            if (q->round_p)
                dec_round_bf16(st, nk[r]);
        }
        if (ahead && kb + BK < k1)
            dec_prefetch(kc + (size_t)(kb + BK) * row_bytes, k1 - kb - BK < BK ? k1 - kb - BK : BK, row_bytes);
        int r0 = 0; /* rows whose P·V is done */
#if ATTN_SIMD == 512
        r0 = dec_pv_blocks(c, q, vc + (size_t)kb * row_bytes, row_bytes, dt, hd, nkb, nk);
#endif
        for (int j = 0; j < nkb; j++) { /* O += P·V: row by row of V */
            const char *vrow = vc + (size_t)(kb + j) * row_bytes;
            for (int r = r0; r < rows; r++)
                if (j < nk[r])
                    dec_axpy(c->o + r * ldo, c->st[r * BK + j], vrow + (size_t)q->koff[r] * esize, dt, hd);
        }
    }
}

/* The chunks' scratch, per calling thread, grown as needed (no allocation
 * per step once it has grown). */
static __thread float *dec_buf;
static __thread size_t dec_floats;

static int attention_decode(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                            const struct ra_attention_shape *s, int round_qp, int n_threads)
{
    const int hd = s->head_dim, nh = s->n_heads, rows = nh * n, keys = start + n;
    const size_t ldo = (size_t)((hd + 15) / 16 * 16);
    int nc = (keys + DEC_CHUNK_MIN - 1) / DEC_CHUNK_MIN;
    nc = nc > DEC_CHUNKS ? DEC_CHUNKS : nc;
    const int per = ((keys + nc - 1) / nc + BK - 1) / BK * BK;
    nc = (keys + per - 1) / per;
    const size_t ml = ((size_t)rows + 15) / 16 * 16; /* m and l, each rounded to 64 bytes */
    const size_t chunk_floats = (size_t)rows * (ldo + BK) + 2 * ml;
    const size_t q_floats = (size_t)rows * ldo + ((size_t)rows * ldo / 2 + 15) / 16 * 16; /* qs, qb: 64-byte multiples */
    const size_t need = q_floats + (size_t)nc * chunk_floats + 16;
    if (need > dec_floats) {
        free(dec_buf);
        dec_floats = 0;
        if (posix_memalign((void **)&dec_buf, 64, need * sizeof(float)) != 0) {
            dec_buf = NULL;
            return ra_error_set(RA_ENOMEM, "attention: cannot allocate %zu bytes of decode scratch", need * 4);
        }
        dec_floats = need;
    }
    float *qs = dec_buf;
    uint16_t *qb = (uint16_t *)(dec_buf + (size_t)rows * ldo); /* 64-byte aligned: ldo is a multiple of 16 */
    const float scale = 1.4426950408889634f / sqrtf((float)hd); /* scores in log2 units */
    int koff[RA_ATTN_MAX_HEADS_DEC], pos[RA_ATTN_MAX_HEADS_DEC];
    for (int r = 0; r < rows; r++) {
        const int t = r / nh, h = r % nh;
        koff[r] = h / (nh / s->n_kv_heads) * hd;
        pos[r] = start + t;
        for (int d = 0; d < hd; d++) {
            const float x = q[(size_t)t * s->q_stride + (size_t)h * hd + d] * scale;
            if (round_qp)
                qb[r * ldo + d] = ra_f32_to_bf16(x);
            qs[r * ldo + d] = round_qp ? ra_bf16_to_f32(qb[r * ldo + d]) : x;
        }
    }
    const struct dec_rows dr = { .qs = qs, .qb = round_qp && hd % 32 == 0 ? qb : NULL, .koff = koff, .pos = pos,
                                 .rows = rows, .round_p = round_qp, .ldo = ldo };
    struct dec_chunk ch[DEC_CHUNKS];
    for (int c = 0; c < nc; c++) {
        float *base = dec_buf + q_floats + (size_t)c * chunk_floats;
        ch[c] = (struct dec_chunk){ base, base + (size_t)rows * ldo, base + (size_t)rows * ldo + ml,
                                    base + (size_t)rows * ldo + 2 * ml };
    }
#pragma omp parallel for schedule(dynamic, 1) if (nc > 1) num_threads(n_threads)
    for (int c = 0; c < nc; c++)
        dec_run_chunk(&ch[c], &dr, k_cache, v_cache, c * per, (c + 1) * per < keys ? (c + 1) * per : keys, s);
    for (int r = 0; r < rows; r++) { /* merge the chunks in order */
        float mx = -FLT_MAX;
        for (int c = 0; c < nc; c++)
            mx = ch[c].m[r] > mx ? ch[c].m[r] : mx;
        float l = 0, w[DEC_CHUNKS];
        for (int c = 0; c < nc; c++) {
            w[c] = exp2_neg_s(ch[c].m[r] - mx);
            l += ch[c].l[r] * w[c];
        }
        float *o = out + (size_t)(r / nh) * s->q_stride + (size_t)(r % nh) * hd;
        for (int d = 0; d < hd; d++) {
            float a = 0;
            for (int c = 0; c < nc; c++)
                a += ch[c].o[r * ldo + d] * w[c];
            o[d] = a / l;
        }
    }
    return RA_OK;
}

static int attention(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                     const struct ra_attention_shape *s, int n_threads)
{
    if (s->head_dim > RA_ATTN_MAX_HEAD_DIM || s->n_heads % s->n_kv_heads != 0)
        return ra_error_set(RA_EUNSUPPORTED, "attention: head dimension %d exceeds %d or heads %d/%d do not group",
                            s->head_dim, RA_ATTN_MAX_HEAD_DIM, s->n_heads, s->n_kv_heads);
    if (s->kv_dtype != RA_DTYPE_F32 && s->kv_dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "attention: %s KV rows are not supported (f32 or bf16)",
                            ra_dtype_name(s->kv_dtype));
#if defined(RA_KERNELS_BF16DP)
    /* bf16 rows take bf16 products in this build's prefill (Q and P rounded
     * to bf16 for vdpbf16ps); a decode step rounds Q and P alike, so that a
     * span of a few tokens computes what the block kernel would, up to the
     * order of the sums (and P rounded at its chunk's running max). */
    const int round_qp = s->kv_dtype == RA_DTYPE_BF16 && s->head_dim % 2 == 0;
#else
    const int round_qp = 0;
#endif
    if (n <= DEC_MAX_N && s->n_heads * n <= RA_ATTN_MAX_HEADS_DEC)
        return attention_decode(out, q, k_cache, v_cache, start, n, s, round_qp, n_threads);
    return attention_items(out, q, k_cache, v_cache, start, n, s, n_threads);
}

/* ------------------------------------------------------------ element-wise ops */

static void rmsnorm(float *y, const float *x, const float *w, int n, int dim, float eps, int n_threads)
{
#pragma omp parallel for schedule(static) if (n > 16) num_threads(n_threads)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *yi = y + (size_t)i * dim;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int j = 0; j < dim; j++)
            ss += xi[j] * xi[j];
        const float inv = 1.0f / sqrtf(ss / dim + eps);
#pragma omp simd
        for (int j = 0; j < dim; j++)
            yi[j] = w[j] * (inv * xi[j]);
    }
}

/* RoPE in both conventions. The two loops are the same arithmetic on
 * different pairs: interleaved reads its pairs with a stride of 2, which the
 * compiler vectorises with even/odd shuffles; rotate-half reads two
 * contiguous halves and needs none. */
static void rope(float *x, int ld, int n, int n_heads, int head_dim, const float *cs, const float *sn, int n_threads)
{
    const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (n > 16) num_threads(n_threads)
    for (int i = 0; i < n; i++) {
        const float *c = cs + (size_t)i * half, *s = sn + (size_t)i * half;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)i * ld + (size_t)h * head_dim;
#pragma omp simd
            for (int j = 0; j < half; j++) {
                const float a = v[2 * j], b = v[2 * j + 1];
                v[2 * j] = a * c[j] - b * s[j];
                v[2 * j + 1] = a * s[j] + b * c[j];
            }
        }
    }
}

static void rope_half(float *x, int ld, int n, int n_heads, int head_dim, const float *cs, const float *sn,
                      int n_threads)
{
    const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (n > 16) num_threads(n_threads)
    for (int i = 0; i < n; i++) {
        const float *c = cs + (size_t)i * half, *s = sn + (size_t)i * half;
        for (int h = 0; h < n_heads; h++) {
            float *lo = x + (size_t)i * ld + (size_t)h * head_dim, *hi = lo + half;
#pragma omp simd
            for (int j = 0; j < half; j++) {
                const float a = lo[j], b = hi[j];
                lo[j] = a * c[j] - b * s[j];
                hi[j] = a * s[j] + b * c[j];
            }
        }
    }
}

/* exp(x), ~2 ulp, by float arithmetic only so that loops around it vectorise:
 * x = k ln2 + r with |r| <= ln2/2 (round-to-nearest by the 1.5*2^23 trick),
 * exp(r) by its degree-6 Taylor polynomial, 2^k by building the exponent. The
 * clamp to [-87, 88] keeps 2^k a normal float; silu only meets the ends with
 * |g| > 87, where it is g or 0 to far below fp32 resolution of its use. */
static inline float exp_clamped(float x)
{
    /* Written so that NaN fails both tests and is clamped too: converting a
     * NaN k to int32_t below would be undefined behaviour. The caller's own
     * NaN operand still makes its result NaN. */
    x = x > -87.0f ? x : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - k * 0.693145751953125f;
    r = r - k * 1.428606765330187e-06f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const uint32_t e = (uint32_t)((int32_t)k + 127) << 23; /* k in [-126, 127]: a normal float's exponent */
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

static void swiglu(float *gate, const float *up, size_t count, int n_threads)
{
#pragma omp parallel for simd schedule(static) if (count > 65536) num_threads(n_threads)
    for (size_t i = 0; i < count; i++) {
        const float g = gate[i];
        gate[i] = g * (1.0f / (1.0f + exp_clamped(-g))) * up[i]; /* llama2.c's order */
    }
}

static void add(float *x, const float *y, size_t count, int n_threads)
{
#pragma omp parallel for simd schedule(static) if (count > 65536) num_threads(n_threads)
    for (size_t i = 0; i < count; i++)
        x[i] += y[i];
}

static void widen_bf16(float *dst, const uint16_t *src, size_t count)
{
#pragma omp simd
    for (size_t i = 0; i < count; i++)
        dst[i] = ra_bf16_to_f32(src[i]);
}

static void narrow_bf16(uint16_t *dst, const float *src, size_t count, int n_threads)
{
#pragma omp parallel for simd schedule(static) if (count > 65536) num_threads(n_threads)
    for (size_t i = 0; i < count; i++)
        dst[i] = ra_f32_to_bf16(src[i]);
}

static void widen_f16(float *dst, const uint16_t *src, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dst[i] = ra_f16_to_f32(src[i]);
}

/* ------------------------------------------------------------ GEMV (decode)
 *
 * y[t][r] = w[r] · x[t] for a few tokens t: one decode step's linear layers
 * are memory bound, so the kernel's job is to stream each weight row once at
 * the memory's rate. Rows go one at a time, in memory order: the matrix is
 * one sequential stream for the prefetchers (on the EPYC here, groups of 2, 4
 * or 8 rows read in parallel streamed 30-50% slower on one core, and software
 * prefetch did not help); 2 vectors in flight per step for the FMA latency,
 * 4 for bf16 (the same bytes per step as f32); f16/bf16
 * weights are widened in registers (bf16: a 32-bit lane holds an even and an
 * odd weight, one shift and one mask make both fp32, against x split into
 * even and odd elements once per call; f16: vcvtph2ps), so they cost half
 * the bytes of f32. Activations stay fp32 (the backend rounds them to bf16
 * first for bf16 compute): the result is the fp32 product of the widened
 * weights, the prefill path's numerics up to summation order. With more
 * than one token a row is re-read from L1 for the next token. */
#define GEMV_ROWS 1

#if ATTN_SIMD
#if ATTN_SIMD == 512
static inline vf wload_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline vf wload_bf16(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline vf wload_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
#else
static inline vf wload_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline vf wload_bf16(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline vf wload_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
#endif

static inline __attribute__((always_inline)) vf wload(const int DT, const void *w, size_t i)
{
    if (DT == RA_DTYPE_F32)
        return wload_f32((const float *)w + i);
    if (DT == RA_DTYPE_BF16)
        return wload_bf16((const uint16_t *)w + i);
    return wload_f16((const uint16_t *)w + i);
}
#endif

static inline __attribute__((always_inline)) float wscalar(const int DT, const void *w, size_t i)
{
    if (DT == RA_DTYPE_F32)
        return ((const float *)w)[i];
    if (DT == RA_DTYPE_BF16)
        return ra_bf16_to_f32(((const uint16_t *)w)[i]);
    return ra_f16_to_f32(((const uint16_t *)w)[i]);
}

/* NR rows starting at row r (NR constant at each call). */
static inline __attribute__((always_inline)) void gemv_rows(const int DT, const int NR, float *y, int ldy,
                                                             const float *x, int ldx, int n, const void *w,
                                                             int64_t r, int64_t k, const float *xeo)
{
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * ldx;
        float s[GEMV_ROWS];
        int64_t j = 0;
#if ATTN_SIMD
        vf acc[GEMV_ROWS][2];
        for (int i = 0; i < NR; i++)
            acc[i][0] = acc[i][1] = vzero();
        if (DT == RA_DTYPE_BF16 && xeo) {
            /* A vector of 2*VL bf16 is VL 32-bit pairs: the even weight
             * shifted up and the odd one masked are both fp32 already, and
             * meet x's even and odd elements (xeo, split once per call). Two
             * in-lane ops per 2*VL weights instead of two cross-lane
             * widenings (vpmovzxwd), which bound the rate on one core. */
            const float *xe = xeo + (size_t)t * (size_t)k, *xo = xe + k / 2;
#if ATTN_SIMD == 512
            const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
#define LOADW(p) _mm512_loadu_si512((const void *)(p))
#define EVEN(v) _mm512_castsi512_ps(_mm512_slli_epi32(v, 16))
#define ODD(v) _mm512_castsi512_ps(_mm512_and_si512(v, hi))
#else
            const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
#define LOADW(p) _mm256_loadu_si256((const __m256i *)(p))
#define EVEN(v) _mm256_castsi256_ps(_mm256_slli_epi32(v, 16))
#define ODD(v) _mm256_castsi256_ps(_mm256_and_si256(v, hi))
#endif
            /* Two vectors (128 bytes with AVX-512) per row per step, as
             * many bytes in flight as the f32 loop: one core's rate is
             * bound by its outstanding misses, not by the arithmetic. */
            for (; j + 4 * VL <= k; j += 4 * VL) {
                const vf x0 = vloadu(xe + j / 2), x1 = vloadu(xo + j / 2);
                const vf x2 = vloadu(xe + j / 2 + VL), x3 = vloadu(xo + j / 2 + VL);
#pragma GCC unroll 4
                for (int i = 0; i < NR; i++) {
                    const uint16_t *wr = (const uint16_t *)w + (size_t)(r + i) * (size_t)k + (size_t)j;
                    const __typeof__(LOADW(wr)) v = LOADW(wr), u = LOADW(wr + 2 * VL);
                    acc[i][0] = vfma(EVEN(v), x0, acc[i][0]);
                    acc[i][1] = vfma(ODD(v), x1, acc[i][1]);
                    acc[i][0] = vfma(EVEN(u), x2, acc[i][0]);
                    acc[i][1] = vfma(ODD(u), x3, acc[i][1]);
                }
            }
            for (; j + 2 * VL <= k; j += 2 * VL) {
                const vf x0 = vloadu(xe + j / 2), x1 = vloadu(xo + j / 2);
                for (int i = 0; i < NR; i++) {
                    const uint16_t *wr = (const uint16_t *)w + (size_t)(r + i) * (size_t)k + (size_t)j;
                    const __typeof__(LOADW(wr)) v = LOADW(wr);
                    acc[i][0] = vfma(EVEN(v), x0, acc[i][0]);
                    acc[i][1] = vfma(ODD(v), x1, acc[i][1]);
                }
            }
#undef LOADW
#undef EVEN
#undef ODD
        }
        for (; j + 2 * VL <= k; j += 2 * VL) {
            const vf x0 = vloadu(xt + j), x1 = vloadu(xt + j + VL);
#pragma GCC unroll 4
            for (int i = 0; i < NR; i++) {
                const size_t o = (size_t)(r + i) * (size_t)k + (size_t)j;
                acc[i][0] = vfma(wload(DT, w, o), x0, acc[i][0]);
                acc[i][1] = vfma(wload(DT, w, o + VL), x1, acc[i][1]);
            }
        }
        for (; j + VL <= k; j += VL) {
            const vf x0 = vloadu(xt + j);
            for (int i = 0; i < NR; i++)
                acc[i][0] = vfma(wload(DT, w, (size_t)(r + i) * (size_t)k + (size_t)j), x0, acc[i][0]);
        }
        for (int i = 0; i < NR; i++)
            s[i] = vsum(vadd(acc[i][0], acc[i][1]));
#else
        for (int i = 0; i < NR; i++) {
            const size_t o = (size_t)(r + i) * (size_t)k;
            float a = 0;
#pragma omp simd reduction(+ : a)
            for (int64_t jj = 0; jj < k - k % 16; jj++)
                a += wscalar(DT, w, o + (size_t)jj) * xt[jj];
            s[i] = a;
        }
        j = k - k % 16;
#endif
        for (int i = 0; i < NR; i++) {
            float a = s[i];
            for (int64_t jj = j; jj < k; jj++)
                a += wscalar(DT, w, (size_t)(r + i) * (size_t)k + (size_t)jj) * xt[jj];
            y[(size_t)t * ldy + (size_t)(r + i)] = a;
        }
    }
}

#if ATTN_SIMD
/* x split into even and odd elements for the bf16 GEMV, per thread, grown
 * as needed (no allocation per call once grown). */
static __thread float *gemv_xeo;
static __thread size_t gemv_xeo_floats;

static const float *gemv_split(const float *x, int ldx, int n, int64_t k)
{
    const size_t need = (size_t)n * (size_t)k;
    if (k % 2 || k < 4 * VL)
        return NULL;
    if (need > gemv_xeo_floats) {
        free(gemv_xeo);
        gemv_xeo_floats = 0;
        gemv_xeo = malloc(need * sizeof(float));
        if (!gemv_xeo)
            return NULL; /* the widening path needs no buffer */
        gemv_xeo_floats = need;
    }
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * ldx;
        float *xe = gemv_xeo + (size_t)t * (size_t)k, *xo = xe + k / 2;
        for (int64_t j = 0; j < k / 2; j++) {
            xe[j] = xt[2 * j];
            xo[j] = xt[2 * j + 1];
        }
    }
    return gemv_xeo;
}
#endif

static inline __attribute__((always_inline)) void gemv_dt(const int DT, float *y, int ldy, const float *x, int ldx,
                                                           int n, const void *w, int64_t rows, int64_t k)
{
    const float *xeo = NULL;
#if ATTN_SIMD
    if (DT == RA_DTYPE_BF16)
        xeo = gemv_split(x, ldx, n, k);
#endif
    int64_t r = 0;
    for (; r + GEMV_ROWS <= rows; r += GEMV_ROWS)
        gemv_rows(DT, GEMV_ROWS, y, ldy, x, ldx, n, w, r, k, xeo);
    for (; r < rows; r++)
        gemv_rows(DT, 1, y, ldy, x, ldx, n, w, r, k, xeo);
}

static void gemv(float *y, int ldy, const float *x, int ldx, int n, const void *w, enum ra_dtype wdtype,
                 int64_t rows, int64_t k)
{
    switch (wdtype) {
    case RA_DTYPE_F32: gemv_dt(RA_DTYPE_F32, y, ldy, x, ldx, n, w, rows, k); break;
    case RA_DTYPE_BF16: gemv_dt(RA_DTYPE_BF16, y, ldy, x, ldx, n, w, rows, k); break;
    default: gemv_dt(RA_DTYPE_F16, y, ldy, x, ldx, n, w, rows, k); break;
    }
}

#if defined(RA_KERNELS_BF16DP)
/* gemv_bf16 for one token and k a multiple of 64: the same sums in a loop
 * with nothing else in it. The general loop below, with its token loop and
 * tails, ran bench-small's bf16 decode GEMVs 1.2-1.3x slower (8.0-8.6 ms
 * against 6.6-7.2 for the 85 matrices, one thread); one inline row helper
 * with the tails, shared by both, was slower still (9.7-10.1 ms). */
static void gemv_bf16_1(float *y, const uint16_t *x, const uint16_t *w, int64_t rows, int64_t k)
{
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *wr = w + (size_t)r * (size_t)k;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        for (int64_t j = 0; j < k; j += 64) {
            a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(wr + j), (__m512bh)_mm512_loadu_si512(x + j));
            a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(wr + j + 32),
                                  (__m512bh)_mm512_loadu_si512(x + j + 32));
        }
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
}

/* bf16 x bf16 GEMV by vdpbf16ps: a lane takes the pair (2i, 2i+1) of a weight
 * row and of x, as they lie in memory, so neither is rearranged; one
 * instruction per 32 weights, against the widening kernel's shift, mask and
 * two FMAs, which leaves one core's load pipes to the stream. Rows one at a
 * time in memory order, as in gemv_rows; k's tail (k % 32) in scalar code. */
static void gemv_bf16(float *y, int ldy, const uint16_t *x, int n, const uint16_t *w, int64_t rows, int64_t k)
{
    if (n == 1 && k % 64 == 0) {
        gemv_bf16_1(y, x, w, rows, k);
        return;
    }
    const int64_t k64 = k - k % 64, k32 = k - k % 32;
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *wr = w + (size_t)r * (size_t)k;
        for (int t = 0; t < n; t++) {
            const uint16_t *xt = x + (size_t)t * (size_t)k;
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            int64_t j = 0;
            for (; j < k64; j += 64) {
                a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(wr + j), (__m512bh)_mm512_loadu_si512(xt + j));
                a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(wr + j + 32),
                                      (__m512bh)_mm512_loadu_si512(xt + j + 32));
            }
            for (; j < k32; j += 32)
                a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(wr + j), (__m512bh)_mm512_loadu_si512(xt + j));
            float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
            for (; j < k; j++)
                s += ra_bf16_to_f32(wr[j]) * ra_bf16_to_f32(xt[j]);
            y[(size_t)t * ldy + (size_t)r] = s;
        }
    }
}
#endif

const struct ra_cpu_kernels KERNELS_TABLE = {
    .isa = KERNELS_ISA,
    .attention = attention,
    .rmsnorm = rmsnorm,
    .rope = rope,
    .rope_half = rope_half,
    .swiglu = swiglu,
    .add = add,
    .widen_bf16 = widen_bf16,
    .widen_f16 = widen_f16,
    .narrow_bf16 = narrow_bf16,
    .gemv = gemv,
#if defined(RA_KERNELS_BF16DP)
    .gemv_bf16 = gemv_bf16,
#endif
};
