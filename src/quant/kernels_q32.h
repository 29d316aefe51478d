/* Q8_0, Q4_0 and Q4_1 weights against ra_block_q8x activations (part of
 * kernels_impl.h). Per 32-element block b of a row and token t:
 *   Q8_0: dw * dx * sum(qw * qx)
 *   Q4_0: dw * (dx * sum(q4 * qx) - 8 * sx)
 *   Q4_1: dw * dx * sum(q4 * qx) + m * sx
 * with the integer sums exact; the portable code below is the reference form
 * of every instruction set's version, the SIMD code after it (AVX2, AVX-VNNI,
 * AVX512-VNNI) computes the same sums in another float order. */

#if defined(RA_QK_AVX2) || defined(RA_QK_AVXVNNI) || defined(RA_QK_AVX512VNNI)
#define Q32_SIMD 1
#endif

#ifndef Q32_SIMD

static void act_q8x(void *xq, const float *x, int64_t k) { ra_quant_act_ref(RA_DTYPE_Q8_0, x, xq, k); }

/* sum(q4 * qx) over a block: element j is byte j's low nibble, j + 16 its high. */
static int dot_q4_q8(const uint8_t *q4, const int8_t *qx)
{
    int sum = 0;
    for (int j = 0; j < RA_QK / 2; j++)
        sum += (q4[j] & 0x0f) * qx[j] + (q4[j] >> 4) * qx[j + RA_QK / 2];
    return sum;
}

static void gemv_q8_0(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK;
    for (int64_t r = 0; r < rows; r++) {
        const struct ra_block_q8_0 *wb = (const struct ra_block_q8_0 *)w + r * nb;
        for (int t = 0; t < n; t++) {
            const struct ra_block_q8x *xb = (const struct ra_block_q8x *)xq + t * nb;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                int sum = 0;
                for (int j = 0; j < RA_QK; j++)
                    sum += wb[b].qs[j] * xb[b].qs[j];
                acc += ra_f16_to_f32(wb[b].d) * xb[b].d * (float)sum;
            }
            y[(size_t)t * ldy + r] = acc;
        }
    }
}

static void gemv_q4_0(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK;
    for (int64_t r = 0; r < rows; r++) {
        const struct ra_block_q4_0 *wb = (const struct ra_block_q4_0 *)w + r * nb;
        for (int t = 0; t < n; t++) {
            const struct ra_block_q8x *xb = (const struct ra_block_q8x *)xq + t * nb;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++)
                acc += ra_f16_to_f32(wb[b].d) * (xb[b].d * (float)dot_q4_q8(wb[b].qs, xb[b].qs) - 8.0f * xb[b].s);
            y[(size_t)t * ldy + r] = acc;
        }
    }
}

static void gemv_q4_1(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK;
    for (int64_t r = 0; r < rows; r++) {
        const struct ra_block_q4_1 *wb = (const struct ra_block_q4_1 *)w + r * nb;
        for (int t = 0; t < n; t++) {
            const struct ra_block_q8x *xb = (const struct ra_block_q8x *)xq + t * nb;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++)
                acc += ra_f16_to_f32(wb[b].d) * xb[b].d * (float)dot_q4_q8(wb[b].qs, xb[b].qs) +
                       ra_f16_to_f32(wb[b].m) * xb[b].s;
            y[(size_t)t * ldy + r] = acc;
        }
    }
}

static void dequantize_q8_0(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q8_0, w, dst, count);
}

static void dequantize_q4_0(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q4_0, w, dst, count);
}

static void dequantize_q4_1(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q4_1, w, dst, count);
}

#else /* Q32_SIMD */

#define Q32_UNROLL _Pragma("GCC unroll 4")
#define Q32_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------ activations, dequantize
 * 256-bit in every SIMD build: bit-exact with the references, which the
 * build's -ffp-contract=off keeps (no multiply fused into a later add). */

/* roundf (ties away from zero) of v to int32: trunc(v + copysign(0.49999997,
 * v)). Plain v + 0.5 would take 0.49999997 to 1; this form equals roundf for
 * every |v| <= 128 (checked over all those floats), which covers the
 * activations' |x| * 127 / max|x| <= 127. */
Q32_INLINE __m256i q32_round(__m256 v)
{
    const __m256 half = _mm256_or_ps(_mm256_set1_ps(0x1.fffffep-2f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_cvttps_epi32(_mm256_add_ps(v, half));
}

Q32_INLINE int q32_hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* ra_quant_act_ref's blocks of 32: the same max, the same divisions, the same
 * products x * (127 / max|x|) rounded as roundf. */
static void act_q8x(void *xq, const float *x, int64_t k)
{
    struct ra_block_q8x *b = xq;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < k / RA_QK; i++, x += RA_QK) {
        const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absmask), _mm256_and_ps(v1, absmask)),
                                       _mm256_max_ps(_mm256_and_ps(v2, absmask), _mm256_and_ps(v3, absmask)));
        const float amax = qk_hmax_ps(m);
        const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        const __m256i q0 = q32_round(_mm256_mul_ps(v0, id)), q1 = q32_round(_mm256_mul_ps(v1, id));
        const __m256i q2 = q32_round(_mm256_mul_ps(v2, id)), q3 = q32_round(_mm256_mul_ps(v3, id));
        /* packs interleave 128-bit lanes: 4-quant groups come out as 0,2,4,6,1,3,5,7 */
        const __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
        _mm256_storeu_si256((__m256i *)b[i].qs, _mm256_permutevar8x32_epi32(q, order));
        b[i].d = amax / 127.0f;
        b[i].s = b[i].d * (float)q32_hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
    }
}

/* The f16 at h, widened and broadcast. */
Q32_INLINE __m256 q32_f16x8(const uint16_t *h) { return _mm256_cvtph_ps(_mm_set1_epi16((short)*h)); }

/* 16 bytes of 4-bit quants as 32 bytes in element order: low nibbles, then high. */
Q32_INLINE __m256i q32_nibbles(const uint8_t *qs)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* dst[0..32) = (float)q[j] * d (+ m if ADD_M), as the references compute them. */
Q32_INLINE void q32_store_block(float *dst, __m256i q, __m256 d, __m256 m, int add_m)
{
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i part[4] = { lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi) };
    Q32_UNROLL
    for (int i = 0; i < 4; i++) {
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[i])), d);
        _mm256_storeu_ps(dst + 8 * i, add_m ? _mm256_add_ps(v, m) : v);
    }
}

static void dequantize_q8_0(float *dst, const void *w, int64_t count)
{
    const struct ra_block_q8_0 *b = w;
    for (int64_t i = 0; i < count / RA_QK; i++, dst += RA_QK)
        q32_store_block(dst, _mm256_loadu_si256((const __m256i *)b[i].qs), q32_f16x8(&b[i].d), _mm256_setzero_ps(), 0);
}

static void dequantize_q4_0(float *dst, const void *w, int64_t count)
{
    const struct ra_block_q4_0 *b = w;
    for (int64_t i = 0; i < count / RA_QK; i++, dst += RA_QK)
        q32_store_block(dst, _mm256_sub_epi8(q32_nibbles(b[i].qs), _mm256_set1_epi8(8)), q32_f16x8(&b[i].d),
                        _mm256_setzero_ps(), 0);
}

static void dequantize_q4_1(float *dst, const void *w, int64_t count)
{
    const struct ra_block_q4_1 *b = w;
    for (int64_t i = 0; i < count / RA_QK; i++, dst += RA_QK)
        q32_store_block(dst, q32_nibbles(b[i].qs), q32_f16x8(&b[i].d), q32_f16x8(&b[i].m), 1);
}

/* ------------------------------------------------ gemv
 * One row at a time walks its blocks once for up to 4 tokens: each weight
 * block is loaded and unpacked once for all of them, and every token keeps
 * its sum in a register. Per block the integer dot product is exact and
 * scaled in float, the formats' offsets (Q4_0's -8, Q4_1's m) spread over the
 * lanes that add up to the block. */

#if defined(RA_QK_AVXVNNI) || defined(RA_QK_AVX512VNNI)
/* vpdpbusd (VEX on AVX-VNNI, EVEX on 256-bit vectors of AVX512-VNNI): four
 * u8 x s8 products added to each int32 lane; DOT2 two such dot products. */
#if defined(RA_QK_AVXVNNI)
#define Q32_DPBUSD _mm256_dpbusd_avx_epi32
#else
#define Q32_DPBUSD _mm256_dpbusd_epi32
#endif
#define Q32_DOT(u, s) Q32_DPBUSD(_mm256_setzero_si256(), (u), (s))
#define Q32_DOT2(u1, s1, u2, s2) Q32_DPBUSD(Q32_DPBUSD(_mm256_setzero_si256(), (u1), (s1)), (u2), (s2))
#else
/* The same on AVX2: vpmaddubsw's u8 x s8 pair sums saturate at int16, which
 * none reaches here: u is |Q8_0 quant| <= 128 or a nibble <= 15, s an
 * activation quant (|q| <= 127, sign-moved for Q8_0), so |pair| <= 2 * 128 *
 * 127 = 32512, and DOT2's two nibble pair sums add to at most 4 * 15 * 127.
 * One code path for both: CPUs without AVX-VNNI (Zen 4) and qemu-user,
 * which cannot emulate it, test the AVX-VNNI build's logic through the AVX2
 * build. */
#define Q32_DOT(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#define Q32_DOT2(u1, s1, u2, s2)                                                                     \
    _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16((u1), (s1)), _mm256_maddubs_epi16((u2), (s2))), \
                      _mm256_set1_epi16(1))
#endif

/* y[t * ldy] for t < T: one row of Q8_0 at w against T tokens' activation
 * blocks at x (nb apart); lanes of dx * dot times dw, the dot as |w| times x
 * with w's signs. A token's float operations are the same whatever T. */
Q32_INLINE void q32_tile(float *y, int64_t ldy, const struct ra_block_q8x *x, const unsigned char *w, int64_t nb,
                         const int T)
{
    const struct ra_block_q8_0 *wb = (const struct ra_block_q8_0 *)w;
    __m256 acc[4];
    Q32_UNROLL
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i sgn = _mm256_loadu_si256((const __m256i *)wb[b].qs);
        const __m256i u = _mm256_abs_epi8(sgn);
        const __m256 dw = q32_f16x8(&wb[b].d);
        Q32_UNROLL
        for (int t = 0; t < T; t++) {
            const struct ra_block_q8x *xb = x + t * nb + b;
            const __m256i xq = _mm256_loadu_si256((const __m256i *)xb->qs);
            const __m256 p = _mm256_cvtepi32_ps(Q32_DOT(u, _mm256_sign_epi8(xq, sgn)));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(p, _mm256_set1_ps(xb->d)), dw, acc[t]);
        }
    }
    Q32_UNROLL
    for (int t = 0; t < T; t++)
        y[t * ldy] = qk_hsum_ps(acc[t]);
}

/* One block's 8 lanes (they add up to its contribution): the odd last block
 * of the tiles that take blocks in pairs. */
Q32_INLINE __m256 q32_block256(enum ra_dtype type, const unsigned char *wb, const struct ra_block_q8x *xb)
{
    const __m256i xq = _mm256_loadu_si256((const __m256i *)xb->qs);
    const __m256 dx = _mm256_set1_ps(xb->d);
    if (type == RA_DTYPE_Q8_0) {
        const struct ra_block_q8_0 *b = (const struct ra_block_q8_0 *)wb;
        const __m256i q = _mm256_loadu_si256((const __m256i *)b->qs);
        const __m256 p = _mm256_cvtepi32_ps(Q32_DOT(_mm256_abs_epi8(q), _mm256_sign_epi8(xq, q)));
        return _mm256_mul_ps(_mm256_mul_ps(p, dx), q32_f16x8(&b->d));
    }
    if (type == RA_DTYPE_Q4_0) {
        const struct ra_block_q4_0 *b = (const struct ra_block_q4_0 *)wb;
        const __m256 p = _mm256_cvtepi32_ps(Q32_DOT(q32_nibbles(b->qs), xq));
        return _mm256_mul_ps(_mm256_fmsub_ps(p, dx, _mm256_set1_ps(xb->s)), q32_f16x8(&b->d));
    }
    const struct ra_block_q4_1 *b = (const struct ra_block_q4_1 *)wb;
    const __m256 p = _mm256_cvtepi32_ps(Q32_DOT(q32_nibbles(b->qs), xq));
    const __m256 m8 = _mm256_mul_ps(q32_f16x8(&b->m), _mm256_set1_ps(0.125f));
    return _mm256_fmadd_ps(m8, _mm256_set1_ps(xb->s), _mm256_mul_ps(_mm256_mul_ps(p, dx), q32_f16x8(&b->d)));
}

/* The halves at bytes ia, ia + 2 of p and ib, ib + 2 of p + 16 (ia, ib <= 12),
 * 4 copies each: 64-bit groups [A's h(ia), A's h(ia + 2) | B's h(ib), B's h(ib + 2)]. */
Q32_INLINE __m256i q32_pair_halves(const unsigned char *p, const int ia, const int ib)
{
    const __m256i ctl = _mm256_setr_epi8(
        (char)ia, (char)(ia + 1), (char)ia, (char)(ia + 1), (char)ia, (char)(ia + 1), (char)ia, (char)(ia + 1),
        (char)(ia + 2), (char)(ia + 3), (char)(ia + 2), (char)(ia + 3), (char)(ia + 2), (char)(ia + 3), (char)(ia + 2),
        (char)(ia + 3), (char)ib, (char)(ib + 1), (char)ib, (char)(ib + 1), (char)ib, (char)(ib + 1), (char)ib,
        (char)(ib + 1), (char)(ib + 2), (char)(ib + 3), (char)(ib + 2), (char)(ib + 3), (char)(ib + 2), (char)(ib + 3),
        (char)(ib + 2), (char)(ib + 3));
    return _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)p), ctl);
}

/* 64-bit groups G0 and G1 of h (halves) widened to 8 floats. */
#define Q32_HALVES_PS(h, g0, g1) _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64((h), (g0) | (g1) << 2)))

/* Q4_0 and Q4_1 on pairs of blocks (A, B) in 256 bits: the nibbles of both
 * as one vector of low nibbles [A's | B's] and one of high ones, against x's
 * halves rearranged to match ([A's x0-15 | B's x0-15], [A's x16-31 | B's
 * x16-31]). Lanes 0-3 are A's, 4-7 B's, so half the float work of one block
 * at a time: per lane,
 *   Q4_0: dw * (dx * dot - 2 sx), 4 lanes: dw * (dx * dot - 8 sx);
 *   Q4_1: dw * dx * dot + m * sx / 4.
 * One token's pair so rearranged (struct q32_xpair) is kept for a sweep over
 * the rows (q32_rows4): done once per token and sweep, not once per row. */
struct q32_xpair {
    __m256i lo, hi;
    __m256 dx, sx;
};

/* Pairs per sweep and token: 16 KiB, k <= 8192 in one sweep, so that a row
 * is read whole, in one stream (a longer row is read in parts, one sweep over
 * the rows each: a strided walk the prefetchers follow worse). The same for
 * any number of tokens: the parts set the float order of a row's sum. */
#define Q32_XPAIRS 128

Q32_INLINE void q32_xpairs(struct q32_xpair *p, const struct ra_block_q8x *x, int64_t np, enum ra_dtype type)
{
    const float f = type == RA_DTYPE_Q4_0 ? 2.0f : 0.25f;
    for (int64_t i = 0; i < np; i++) {
        const struct ra_block_q8x *xa = x + 2 * i, *xb = xa + 1;
        const __m256i qa = _mm256_loadu_si256((const __m256i *)xa->qs);
        const __m256i qb = _mm256_loadu_si256((const __m256i *)xb->qs);
        p[i].lo = _mm256_permute2x128_si256(qa, qb, 0x20);
        p[i].hi = _mm256_permute2x128_si256(qa, qb, 0x31);
        p[i].dx = _mm256_setr_m128(_mm_set1_ps(xa->d), _mm_set1_ps(xb->d));
        p[i].sx = _mm256_setr_m128(_mm_set1_ps(xa->s * f), _mm_set1_ps(xb->s * f));
    }
}

/* y[t * ldy] = (FIRST) or += one row's np pairs of blocks at a against T
 * tokens' prepared pairs (Q32_XPAIRS apart), the lanes summed, the
 * weights unpacked once for all tokens. A token's float operations are the
 * same whatever T, so its outputs do not depend on the tokens beside it. */
Q32_INLINE void q32_row4(float *y, int64_t ldy, const struct q32_xpair *p, int64_t np, const unsigned char *a,
                         enum ra_dtype type, int first, const int T)
{
    const size_t bb = ra_dtype_block_bytes(type), qs = type == RA_DTYPE_Q4_0 ? 2 : 4;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256 acc[4];
    Q32_UNROLL
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < np; i++, a += 2 * bb) {
        const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + qs))),
                                                  _mm_loadu_si128((const __m128i *)(a + bb + qs)), 1);
        const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        const __m256i h = q32_pair_halves(a, 0, (int)bb - 16);
        const __m256 dw = Q32_HALVES_PS(h, 0, 2);
        const __m256 mw = type == RA_DTYPE_Q4_0 ? dw : Q32_HALVES_PS(h, 1, 3);
        Q32_UNROLL
        for (int t = 0; t < T; t++) {
            const struct q32_xpair *x = p + t * Q32_XPAIRS + i;
            const __m256 pr = _mm256_cvtepi32_ps(Q32_DOT2(lo, x->lo, hi, x->hi));
            if (type == RA_DTYPE_Q4_0) {
                acc[t] = _mm256_fmadd_ps(_mm256_fmsub_ps(pr, x->dx, x->sx), dw, acc[t]);
            } else {
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(pr, x->dx), dw, acc[t]);
                acc[t] = _mm256_fmadd_ps(mw, x->sx, acc[t]);
            }
        }
    }
    Q32_UNROLL
    for (int t = 0; t < T; t++) {
        const float s = qk_hsum_ps(acc[t]);
        y[t * ldy] = first ? s : y[t * ldy] + s;
    }
}

/* y[t * ldy + r] for every row and T tokens, Q4_0 or Q4_1: the activation
 * pairs prepared Q32_XPAIRS at a time, each such part swept over the rows,
 * one row at a time (one sequential stream: several rows read side by side
 * stream slower here). */
Q32_INLINE void q32_rows4(float *y, int64_t ldy, const struct ra_block_q8x *x, const unsigned char *w,
                          int64_t rows, int64_t nb, size_t rb, enum ra_dtype type, const int T)
{
    const size_t bb = ra_dtype_block_bytes(type);
    const int64_t np = nb / 2;
    struct q32_xpair p[4 * Q32_XPAIRS];
    for (int64_t p0 = 0; p0 < np || p0 == 0; p0 += Q32_XPAIRS) {
        const int64_t pc = np - p0 < Q32_XPAIRS ? np - p0 : Q32_XPAIRS;
        for (int t = 0; t < T; t++)
            q32_xpairs(p + t * Q32_XPAIRS, x + t * nb + 2 * p0, pc, type);
        for (int64_t r = 0; r < rows; r++)
            q32_row4(y + r, ldy, p, pc, w + (size_t)r * rb + (size_t)(2 * p0) * bb, type, p0 == 0, T);
    }
    if (nb % 2)
        for (int t = 0; t < T; t++)
            for (int64_t r = 0; r < rows; r++)
                y[t * ldy + r] +=
                    qk_hsum_ps(q32_block256(type, w + (size_t)r * rb + (size_t)(nb - 1) * bb, x + t * nb + nb - 1));
}

#if defined(RA_QK_AVX512VNNI)
/* ------------------------------------------------ Q8_0 gemv on AVX512-VNNI
 * Two blocks per zmm (blocks 2j and 2j + 1 of a row: A and B), vpdpbusd on
 * 64 bytes at once, int32 lanes 0-7 A's and 8-15 B's. vpdpbusd takes u8
 * times s8, so one side is flipped to u8 (+ 128, the top bit) and the lanes
 * start at -128 times the other side's sum over their 4 bytes: u = x + 128,
 * s = w, the start from w. The rows are taken one at a time (one sequential
 * stream: several rows read side by side stream slower here):
 * - one token: each row against the token's blocks as they are (q8_row1);
 * - several tokens: each token's pairs flipped once per sweep over the rows,
 *   Q8_XPAIRS pairs at a time (struct q8_xupair), the row's start once for
 *   all tokens (q8_rowt).
 * Both give the same integer lanes, scaled by the same float operations and
 * summed in the same parts: a token's outputs do not depend on how many
 * tokens share the call.
 * An odd last block goes through the 256-bit code. */

/* Pairs per part of a row's sum (and prepared per sweep for several
 * tokens: 4 KiB a token). */
#define Q8_XPAIRS 32

/* [f[a] x 8, f[b] x 8]: a pair's activation scales for its lanes. */
Q32_INLINE __m512 q32_pair_ps(const float *a, const float *b)
{
    const __m128 v = _mm_insert_ps(_mm_load_ss(a), _mm_load_ss(b), 0x10);
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(v));
}

/* A's 32 bytes at a, B's at b, as one zmm. */
Q32_INLINE __m512i q32_pair_bytes(const int8_t *a, const int8_t *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* The f16 scales of the pair at a (bytes 0 and 34) as [dA x 8, dB x 8]. */
Q32_INLINE __m512 q8_pair_dw(const struct ra_block_q8_0 *a)
{
    return _mm512_cvtph_ps(_mm256_mask_set1_epi16(_mm256_set1_epi16((short)a[0].d), 0xff00, (short)a[1].d));
}

/* y = one row at w against one token's np pairs at x, read in one stream
 * (a token has no weight loads to share, and a prepared copy of its pairs
 * read beside the stream slows long rows): the start from
 * w, u = x + 128, so the same integer lanes and float operations as
 * q8_rowt's, the sum in parts of Q8_XPAIRS pairs as the sweeps add them. */
Q32_INLINE float q8_row1(const struct ra_block_q8x *x, int64_t np, const unsigned char *w)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    float y = 0;
    for (int64_t p0 = 0; p0 < np; p0 += Q8_XPAIRS) {
        const int64_t pe = np - p0 < Q8_XPAIRS ? np : p0 + Q8_XPAIRS;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = p0; j < pe; j++) {
            const struct ra_block_q8_0 *a = (const struct ra_block_q8_0 *)w + 2 * j;
            const struct ra_block_q8x *xa = x + 2 * j;
            const __m512i wq = q32_pair_bytes(a[0].qs, a[1].qs);
            const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, wq));
            const __m512i u = _mm512_xor_si512(q32_pair_bytes(xa[0].qs, xa[1].qs), flip);
            const __m512 pr = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, u, wq));
            acc = _mm512_fmadd_ps(_mm512_mul_ps(pr, q32_pair_ps(&xa[0].d, &xa[1].d)), q8_pair_dw(a), acc);
        }
        const float s = _mm512_reduce_add_ps(acc);
        y = p0 == 0 ? s : y + s;
    }
    return y;
}

/* One token's pair for the rows of several tokens: its bytes flipped to u8
 * (x + 128) and dx per lane. */
struct q8_xupair {
    __m512i u;
    __m512 dx;
};

Q32_INLINE void q8_xupairs(struct q8_xupair *p, const struct ra_block_q8x *x, int64_t np)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t i = 0; i < np; i++) {
        p[i].u = _mm512_xor_si512(q32_pair_bytes(x[2 * i].qs, x[2 * i + 1].qs), flip);
        p[i].dx = q32_pair_ps(&x[2 * i].d, &x[2 * i + 1].d);
    }
}

/* y[t * ldy] = (FIRST) or += one row's pairs [0, np) at w against T tokens'
 * (Q8_XPAIRS apart): the same integer lanes and float operations per token
 * as q8_row1, so a token's outputs do not depend on the tokens beside it. */
Q32_INLINE void q8_rowt(float *y, int64_t ldy, const struct q8_xupair *p, int64_t np, const unsigned char *w,
                        int first, const int T)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512 acc[4];
    Q32_UNROLL
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < np; j++) {
        const struct ra_block_q8_0 *a = (const struct ra_block_q8_0 *)w + 2 * j;
        const __m512i wq = q32_pair_bytes(a[0].qs, a[1].qs);
        const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, wq));
        const __m512 dw = q8_pair_dw(a);
        Q32_UNROLL
        for (int t = 0; t < T; t++) {
            const struct q8_xupair *xp = p + t * Q8_XPAIRS + j;
            const __m512 pr = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, xp->u, wq));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(pr, xp->dx), dw, acc[t]);
        }
    }
    Q32_UNROLL
    for (int t = 0; t < T; t++) {
        const float s = _mm512_reduce_add_ps(acc[t]);
        y[t * ldy] = first ? s : y[t * ldy] + s;
    }
}

/* Tokens in groups of 4: a lone token row by row, several with the pairs in
 * parts of Q8_XPAIRS, each prepared once and swept over the rows. */
static void q8_gemv512(float *y, int ldy, const struct ra_block_q8x *x, int n, const unsigned char *w,
                       int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK, np = nb / 2;
    const size_t rb = ra_dtype_row_bytes(RA_DTYPE_Q8_0, k), bb = sizeof(struct ra_block_q8_0);
    struct q8_xupair pt[4 * Q8_XPAIRS];
    for (int t0 = 0; t0 < n; t0 += 4) {
        const int T = n - t0 < 4 ? n - t0 : 4;
        float *yt = y + (size_t)t0 * ldy;
        const struct ra_block_q8x *xt = x + t0 * nb;
        for (int64_t r = 0; T == 1 && r < rows; r++)
            yt[r] = q8_row1(xt, np, w + (size_t)r * rb);
        for (int64_t p0 = 0; T > 1 && (p0 < np || p0 == 0); p0 += Q8_XPAIRS) {
            const int64_t pc = np - p0 < Q8_XPAIRS ? np - p0 : Q8_XPAIRS;
            const unsigned char *wp = w + (size_t)(2 * p0) * bb;
            for (int t = 0; t < T; t++)
                q8_xupairs(pt + t * Q8_XPAIRS, xt + t * nb + 2 * p0, pc);
            for (int64_t r = 0; r < rows; r++) {
                const unsigned char *wr = wp + (size_t)r * rb;
                switch (T) {
                case 2: q8_rowt(yt + r, ldy, pt, pc, wr, p0 == 0, 2); break;
                case 3: q8_rowt(yt + r, ldy, pt, pc, wr, p0 == 0, 3); break;
                default: q8_rowt(yt + r, ldy, pt, pc, wr, p0 == 0, 4); break;
                }
            }
        }
        if (nb % 2)
            for (int t = 0; t < T; t++)
                for (int64_t r = 0; r < rows; r++)
                    yt[(size_t)t * ldy + r] += qk_hsum_ps(
                        q32_block256(RA_DTYPE_Q8_0, w + (size_t)r * rb + (size_t)(nb - 1) * bb, xt + t * nb + nb - 1));
    }
}
#endif

/* Every row, one at a time, for T tokens: a decode step streams the weights
 * from memory, where one sequential stream keeps the hardware prefetchers
 * ahead better than several rows read side by side. */
Q32_INLINE void q32_rows(float *y, int64_t ldy, const struct ra_block_q8x *x, const void *w, int64_t rows,
                         int64_t k, enum ra_dtype type, const int T)
{
    const int64_t nb = k / RA_QK;
    const size_t rb = ra_dtype_row_bytes(type, k);
    const unsigned char *wr = w;
    if (type == RA_DTYPE_Q8_0)
        for (int64_t r = 0; r < rows; r++)
            q32_tile(y + r, ldy, x, wr + (size_t)r * rb, nb, T);
    else
        q32_rows4(y, ldy, x, wr, rows, nb, rb, type, T);
}

/* Tokens in groups of 4, then the 1-3 left. */
Q32_INLINE void q32_gemv(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k,
                         enum ra_dtype type)
{
    const int64_t nb = k / RA_QK;
    const struct ra_block_q8x *x = xq;
    int t = 0;
    for (; t + 4 <= n; t += 4)
        q32_rows(y + (size_t)t * ldy, ldy, x + t * nb, w, rows, k, type, 4);
    switch (n - t) {
    case 3: q32_rows(y + (size_t)t * ldy, ldy, x + t * nb, w, rows, k, type, 3); break;
    case 2: q32_rows(y + (size_t)t * ldy, ldy, x + t * nb, w, rows, k, type, 2); break;
    case 1: q32_rows(y + (size_t)t * ldy, ldy, x + t * nb, w, rows, k, type, 1); break;
    default: break;
    }
}

static void gemv_q8_0(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
#if defined(RA_QK_AVX512VNNI)
    q8_gemv512(y, ldy, xq, n, w, rows, k);
#else
    q32_gemv(y, ldy, xq, n, w, rows, k, RA_DTYPE_Q8_0);
#endif
}

static void gemv_q4_0(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    q32_gemv(y, ldy, xq, n, w, rows, k, RA_DTYPE_Q4_0);
}

static void gemv_q4_1(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    q32_gemv(y, ldy, xq, n, w, rows, k, RA_DTYPE_Q4_1);
}

#endif /* Q32_SIMD */
