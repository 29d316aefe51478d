/* Causal attention of a prefill span, block by block with an online softmax.
 *
 * Work is split into (query head, block of queries) items. Each item walks the
 * key blocks [0, BK), [BK, 2BK), ... up to its last query's position and stops
 * there, so the masked upper triangle is never computed: attention work
 * follows the lower triangle. Key blocks sit at absolute positions, so a
 * query's result does not depend on how the prompt was split into spans.
 * A list of query positions (CacheBlend's recomputed rows, scattered over the
 * prompt) runs the same items: each query carries its own key limit, masked
 * lane by lane, and an item stops after its last query's limit, so a list of
 * a sixth of the rows costs about a sixth of the span's work.
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
 * kernel there too.
 *
 * Part of the CPU kernels (cpu_kernels_impl.h includes it once per
 * instruction set, after cpu_kernels_simd.h); not a header of its own. */

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
    float lim[BQ] __attribute__((aligned(64)));                       /* each query's last visible key row */
};

/* The item's queries [q0, q0+nq) see key rows [0, lim): start + q0 + r for a
 * span, lim[q0 + r] for a position list (ascending). Lanes past nq repeat the
 * last query's, so the item never reads a key row beyond it. Returns the last
 * query's limit: the item's key blocks end there. */
static int item_limits(struct item *it, int start, const int *lim, int q0, int nq, int ld)
{
    for (int r = 0; r < ld; r++) {
        const int qi = q0 + (r < nq ? r : nq - 1);
        it->lim[r] = (float)(lim ? lim[qi] : start + qi);
    }
    return (int)it->lim[nq - 1];
}

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

/* Online softmax over keys [kb, kb+nk) for the item's queries, query r seeing
 * keys up to it->lim[r]: St becomes P (zero where masked), m and l advance,
 * and alpha is the factor Ot must be rescaled by. j outer, v inner: W
 * independent max and sum chains instead of one. */
static inline __attribute__((always_inline)) void softmax_w(const int W, struct item *it, int kb, int nk)
{
    const int full = kb + nk - 1 <= it->lim[0]; /* every query sees every key of the block */
    vf pos[NV], m_old[NV], mx[NV], sum[NV];
    for (int v = 0; v < W; v++) {
        pos[v] = vload(it->lim + v * VL);
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

static void softmax_block(int w, struct item *it, int kb, int nk)
{
    switch (w) {
    case 1: softmax_w(1, it, kb, nk); break;
#if NV >= 2
    case 2: softmax_w(2, it, kb, nk); break;
#endif
#if NV >= 4
    case 4: softmax_w(4, it, kb, nk); break;
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

static void softmax_block(int w, struct item *it, int kb, int nk)
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
            const float v = (float)(kb + j) <= it->lim[r] ? s[r] : -FLT_MAX;
            mx[r] = v > mx[r] ? v : mx[r];
        }
    }
    for (int j = 0; j < nk; j++) {
        float *s = it->st + j * BQ;
#pragma omp simd
        for (int r = 0; r < BQ; r++) {
            const float p = exp2_neg_s(s[r] - mx[r]);
            s[r] = (float)(kb + j) <= it->lim[r] ? p : 0.0f;
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
                            int start, const int *lim, int q0, int nq, int h, int w,
                            const struct ra_attention_shape *s)
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

    const int last = item_limits(&it, start, lim, q0, nq, ld);
    for (int kb = 0; kb <= last; kb += BK) {
        const int nk = last - kb + 1 < BK ? last - kb + 1 : BK, np = (nk + 1) / 2;
        const uint16_t *kblk = k_cache + head + (size_t)kb * kvs, *vblk = v_cache + head + (size_t)kb * kvs;
        /* St[j][r] = K[kb+j] · Q[r]: K's pairs (2i, 2i+1) are adjacent in the row */
        micro_dp_rows(w, nk, it.st, NULL, (const pair_t *)kblk, kvs / 2, 1, dp.qp, hp);
        softmax_block(w, &it, kb, nk);
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
        const float inv = it.l[r] > 0 ? 1.0f / it.l[r] : 0.0f; /* a query before every key gets zeros */
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

/* One item: queries [q0, q0+nq) of head h (key limits as item_limits), in w
 * vectors of VL lanes; all rows of the item's arrays are w*VL floats. */
static void attend_block(float *out, const float *q, const void *k_cache, const void *v_cache,
                         int start, const int *lim, int q0, int nq, int h, int w, const struct ra_attention_shape *s)
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

    const int last = item_limits(&it, start, lim, q0, nq, ld); /* the item's last visible key row */
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
        softmax_block(w, &it, kb, nk);
        /* Ot[d][r] = Ot[d][r] alpha[r] + sum_j V[kb+j][d] P[j][r] */
        micro_rows(w, hd, it.ot, it.alpha, vblk, 1, ldkv, it.st, nk, NULL);
    }
    for (int r = 0; r < nq; r++) {
        float *o = out + (size_t)(q0 + r) * s->q_stride + (size_t)h * hd;
        const float inv = it.l[r] > 0 ? 1.0f / it.l[r] : 0.0f; /* a query before every key gets zeros */
        for (int d = 0; d < hd; d++)
            o[d] = it.ot[d * ld + r] * inv;
    }
}

/* Queries [0, n): query t sees key rows [0, start + t] (lim NULL: a span) or
 * [0, lim[t]] (ascending; below 0: none, and the query gets zeros). */
static int attention_items(float *out, const float *q, const void *k_cache, const void *v_cache, int start,
                           const int *lim, int n, const struct ra_attention_shape *s, int n_threads)
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
            attend_block_dp(out, q, k_cache, v_cache, start, lim, q0, nq, h, w, s);
            continue;
        }
#endif
        attend_block(out, q, k_cache, v_cache, start, lim, q0, nq, h, w, s);
    }
    return RA_OK;
}
