/* Q4_K and Q6_K weights against ra_block_q8k activations (part of
 * kernels_impl.h). Per 256-element super-block of a row and token t:
 *   Q4_K: d * dx * sum_s sc_s * sum(q4 * qx over sub-block s of 32)
 *         - dmin * dx * sum_s mn_s * (bsums[2s] + bsums[2s + 1])
 *   Q6_K: d * dx * sum_i scales[i] * sum((q6 - 32) * qx over elements 16i..16i+15)
 * with the integer sums exact; the portable code below is the reference form
 * of every instruction set's version.
 *
 * The SIMD versions multiply the u8 weights by the s8 activations with
 * vpmaddubsw (pairs of products into int16: at most 2 * 63 * 128 = 16128 for
 * 6-bit weights, so never saturating) and the 16-bit pair sums by the
 * sub-blocks' scales into int32 with QKK_DP: vpdpwssd on AVX-VNNI, vpmaddwd +
 * vpaddd on AVX2, equal for these operands. That is the only difference
 * between the two builds of the 256-bit rows; qemu-user does not emulate
 * AVX-VNNI, so on a CPU without it the AVX2 tests are what cover that code.
 * AVX512-VNNI has a 512-bit Q6_K row of its own and shares the rest (act_q8k,
 * dequantize). Q6_K's -32 goes through the bsums (sum of (q - 32) * qx = sum
 * q * qx - 32 * bsum), so q stays unsigned. gemv takes up to 4 tokens per
 * pass over a row's super-blocks: each weight load and unpacking serves all
 * of them. */

#if defined(RA_QK_AVX2) || defined(RA_QK_AVXVNNI) || defined(RA_QK_AVX512VNNI)
#define QKK_SIMD 1
#endif

#if !defined(QKK_SIMD)
static void act_q8k(void *xq, const float *x, int64_t k) { ra_quant_act_ref(RA_DTYPE_Q4_K, x, xq, k); }

/* Sub-block j's 6-bit scale and min (ggml's get_scale_min_k4). */
static void q4k_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

static float dot_q4_k_block(const struct ra_block_q4_k *wb, const struct ra_block_q8k *xb)
{
    int32_t sum = 0, msum = 0;
    for (int s = 0; s < 8; s++) {
        int sc, mn, isum = 0;
        q4k_scale_min(s, wb->scales, &sc, &mn);
        const uint8_t *q = wb->qs + 32 * (s / 2);
        const int8_t *qx = xb->qs + 32 * s;
        for (int l = 0; l < 32; l++)
            isum += (s % 2 ? q[l] >> 4 : q[l] & 0x0f) * qx[l];
        sum += sc * isum;
        msum += mn * (xb->bsums[2 * s] + xb->bsums[2 * s + 1]);
    }
    return xb->d * (ra_f16_to_f32(wb->d) * (float)sum - ra_f16_to_f32(wb->dmin) * (float)msum);
}

/* Element e (< 256) of a Q6_K super-block, in [0, 64). */
static int q6k_quant(const struct ra_block_q6_k *wb, int e)
{
    const int half = e / 128, g = e % 128 / 32, l = e % 32;
    const uint8_t *ql = wb->ql + 64 * half, *qh = wb->qh + 32 * half;
    const int lo = (g & 1 ? ql[l + 32] : ql[l]) >> (g & 2 ? 4 : 0) & 0x0f;
    return lo | (qh[l] >> (2 * g) & 3) << 4;
}

static float dot_q6_k_block(const struct ra_block_q6_k *wb, const struct ra_block_q8k *xb)
{
    int32_t sum = 0;
    for (int i = 0; i < RA_QK_K / 16; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += (q6k_quant(wb, 16 * i + j) - 32) * xb->qs[16 * i + j];
        sum += wb->scales[i] * isum;
    }
    return xb->d * ra_f16_to_f32(wb->d) * (float)sum;
}

static void gemv_q4_k(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK_K;
    for (int64_t r = 0; r < rows; r++)
        for (int t = 0; t < n; t++) {
            float acc = 0;
            for (int64_t b = 0; b < nb; b++)
                acc += dot_q4_k_block((const struct ra_block_q4_k *)w + r * nb + b,
                                      (const struct ra_block_q8k *)xq + t * nb + b);
            y[(size_t)t * ldy + r] = acc;
        }
}

static void gemv_q6_k(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)
{
    const int64_t nb = k / RA_QK_K;
    for (int64_t r = 0; r < rows; r++)
        for (int t = 0; t < n; t++) {
            float acc = 0;
            for (int64_t b = 0; b < nb; b++)
                acc += dot_q6_k_block((const struct ra_block_q6_k *)w + r * nb + b,
                                      (const struct ra_block_q8k *)xq + t * nb + b);
            y[(size_t)t * ldy + r] = acc;
        }
}

static void dequantize_q4_k(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q4_K, w, dst, count);
}

static void dequantize_q6_k(float *dst, const void *w, int64_t count)
{
    ra_quant_dequantize(RA_DTYPE_Q6_K, w, dst, count);
}
#else /* the SIMD builds */
/* acc + a0 * b0 + a1 * b1 per int32 lane, a and b int16 pairs (exact: no
 * operand here is -32768) */
#if defined(RA_QK_AVX2)
#define QKK_DP(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#elif defined(RA_QK_AVXVNNI)
#define QKK_DP(acc, a, b) _mm256_dpwssd_avx_epi32((acc), (a), (b))
#else
#define QKK_DP(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
#endif
#define QKK_INLINE static inline __attribute__((always_inline))
/* Independent integer sums per token and super-block: vpdpwssd adds into its
 * destination, so one sum would chain a super-block's 8 of them at their
 * full latency; two sums halve that (AVX2's vpmaddwd + vpaddd chains only
 * the add). Integer sums: the same result either way. */
#if defined(RA_QK_AVX2)
#define QKK_CHAINS 1
#else
#define QKK_CHAINS 2
#endif
/* the token and chunk loops unrolled, so the accumulators live in registers */
#define QKK_UNROLL _Pragma("GCC unroll 8")

/* roundf on 8 lanes: ties away from zero (the rounding instructions' modes
 * have ties to even only). v - trunc(v) is exact. */
static inline __m256 qkk_round_away(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

/* ra_quant_act_ref for the K formats, 8 lanes at a time: the same bytes. */
static void act_q8k(void *xq, const float *x, int64_t k)
{
    struct ra_block_q8k *b = xq;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7), flip = _mm256_set1_epi8((char)0x80);
    for (int64_t i = 0; i < k / RA_QK_K; i++, x += RA_QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < RA_QK_K; j += 8) /* the new value first: a NaN is skipped, as by fmaxf */
            mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), mx);
        const float amax = qk_hmax_ps(mx);
        b[i].d = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        for (int j = 0; j < RA_QK_K; j += 32) {
            __m256i v[4];
            for (int u = 0; u < 4; u++)
                v[u] = _mm256_cvtps_epi32(qkk_round_away(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * u), id)));
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
            const __m256i q = _mm256_permutevar8x32_epi32(p, order);
            _mm256_storeu_si256((__m256i *)(b[i].qs + j), q);
            /* bsums: sums of q + 128 over each 8 bytes, then of each 16 */
            __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q, flip), _mm256_setzero_si256());
            s = _mm256_add_epi64(s, _mm256_srli_si256(s, 8));
            b[i].bsums[j / 16] = (int16_t)(_mm256_extract_epi16(s, 0) - 16 * 128);
            b[i].bsums[j / 16 + 1] = (int16_t)(_mm256_extract_epi16(s, 8) - 16 * 128);
        }
    }
}

/* A Q4_K super-block's eight 6-bit scales and mins from its 12 bytes: bytes
 * 0-3 and 4-7 hold sub-blocks 0-3's in their low 6 bits; bytes 8-11 hold
 * sub-blocks 4-7's low 4 bits (scale low nibble, min high), the top 2 bits in
 * the spare bits of bytes 0-3 (scales) and 4-7 (mins). */
static inline void qkk_q4k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8])
{
    uint32_t a, b, c;
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, top2 = 0x03030303u;
    const uint32_t v[4] = { a & low6, (c & low4) | (a >> 6 & top2) << 4, b & low6,
                            (c >> 4 & low4) | (b >> 6 & top2) << 4 };
    memcpy(sc, v, 8);
    memcpy(mn, v + 2, 8);
}

/* qkk_q4k_scales in a vector: bytes 0-7 the scales, 8-15 the mins. Reads 16
 * bytes at s (the block's scales and the first 4 of its quants). */
static inline __m128i qkk_q4k_scales_v(const uint8_t *s)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)s); /* words a, b, c */
    const __m128i acbc = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));
    const __m128i aabb = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(acbc, _mm_setr_epi32(0, 0, 0, 4)),
                                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i top = _mm_and_si128(_mm_srli_epi32(aabb, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(low, top);
}

/* y[t * ldy] = row w . token t for t < nt (a constant after inlining). */
QKK_INLINE void qkk_q4k_row(float *y, int ldy, const struct ra_block_q8k *x, int64_t nb,
                            const struct ra_block_q4_k *w, const int nt)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 f[4];
    QKK_UNROLL
    for (int t = 0; t < nt; t++)
        f[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct ra_block_q4_k *wb = w + b;
        const __m128i sm8 = qkk_q4k_scales_v(wb->scales);
        /* the 8 scales as int16 in both 128-bit lanes, for vpshufb to broadcast one */
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm8));
        __m256i acc[QKK_CHAINS][4];
        QKK_UNROLL
        for (int i = 0; i < QKK_CHAINS; i++)
            QKK_UNROLL
            for (int t = 0; t < nt; t++)
                acc[i][t] = _mm256_setzero_si256();
        QKK_UNROLL
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0404 * c)));
            const __m256i shi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0302 + 0x0404 * c)));
            QKK_UNROLL
            for (int t = 0; t < nt; t++) {
                const int8_t *xs = x[t * nb + b].qs + 64 * c;
                __m256i *a0 = &acc[0][t], *a1 = &acc[QKK_CHAINS - 1][t];
                *a0 = QKK_DP(*a0, _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xs)), slo);
                *a1 = QKK_DP(*a1, _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xs + 32))), shi);
            }
        }
        /* (mn_s, mn_s) against bsums 2s, 2s + 1 */
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm8, sm8));
        const float d = ra_f16_to_f32(wb->d), dmin = ra_f16_to_f32(wb->dmin);
        QKK_UNROLL
        for (int t = 0; t < nt; t++) {
            const struct ra_block_q8k *xb = x + t * nb + b;
            const __m256i ms = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), mins);
            const __m256i sum = QKK_CHAINS > 1 ? _mm256_add_epi32(acc[0][t], acc[QKK_CHAINS - 1][t]) : acc[0][t];
            f[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb->d), _mm256_cvtepi32_ps(sum), f[t]);
            f[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * xb->d), _mm256_cvtepi32_ps(ms), f[t]);
        }
    }
    QKK_UNROLL
    for (int t = 0; t < nt; t++)
        y[(size_t)t * ldy] = qk_hsum_ps(f[t]);
}

/* Q6_K's quarter g of a half: 32 quants in [0, 64) from the low nibbles ql
 * (ql0: bytes 0-31, ql1: 32-63, low nibble for quarters 0-1, high for 2-3)
 * and bits 2g, 2g + 1 of qh. */
QKK_INLINE __m256i qkk_q6k_quarter(__m256i ql0, __m256i ql1, __m256i qh, const int g)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i lo = _mm256_and_si256(g >= 2 ? _mm256_srli_epi16(g & 1 ? ql1 : ql0, 4) : g & 1 ? ql1 : ql0, m4);
    const __m256i h = g == 0 ? _mm256_slli_epi16(qh, 4) : g == 1 ? _mm256_slli_epi16(qh, 2) : g == 2 ? qh
                                                                                          : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(h, m30));
}

QKK_INLINE void qkk_q6k_row(float *y, int ldy, const struct ra_block_q8k *x, int64_t nb,
                            const struct ra_block_q6_k *w, const int nt)
{
    __m256 f[4];
    QKK_UNROLL
    for (int t = 0; t < nt; t++)
        f[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct ra_block_q6_k *wb = w + b;
        const __m128i s8 = _mm_loadu_si128((const __m128i *)wb->scales);
        /* -32 * scales[i] against bsums[i]: the offset of every quant */
        const __m256i off = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 5));
        __m256i acc[QKK_CHAINS][4];
        QKK_UNROLL
        for (int t = 0; t < nt; t++) {
            acc[0][t] = QKK_DP(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)x[t * nb + b].bsums), off);
            if (QKK_CHAINS > 1)
                acc[QKK_CHAINS - 1][t] = _mm256_setzero_si256();
        }
        QKK_UNROLL
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h));
            /* the half's 8 scales as int16 in both 128-bit lanes */
            const __m128i s8h = _mm_loadl_epi64((const __m128i *)(wb->scales + 8 * h));
            const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s8h));
            QKK_UNROLL
            for (int g = 0; g < 4; g++) {
                /* quarter g's first 16 quants take scale 2g (low lane), the next 16 scale 2g + 1 */
                const __m256i pick = _mm256_add_epi8(_mm256_setr_epi64x(0x0100010001000100, 0x0100010001000100,
                                                                        0x0302030203020302, 0x0302030203020302),
                                                     _mm256_set1_epi8((char)(4 * g)));
                const __m256i sg = _mm256_shuffle_epi8(s16, pick);
                const __m256i q = qkk_q6k_quarter(ql0, ql1, qh, g);
                QKK_UNROLL
                for (int t = 0; t < nt; t++) {
                    const int8_t *xs = x[t * nb + b].qs + 128 * h + 32 * g;
                    __m256i *a = &acc[g % QKK_CHAINS][t];
                    *a = QKK_DP(*a, _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)xs)), sg);
                }
            }
        }
        const float d = ra_f16_to_f32(wb->d);
        QKK_UNROLL
        for (int t = 0; t < nt; t++) {
            const __m256i sum = QKK_CHAINS > 1 ? _mm256_add_epi32(acc[0][t], acc[QKK_CHAINS - 1][t]) : acc[0][t];
            f[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[t * nb + b].d), _mm256_cvtepi32_ps(sum), f[t]);
        }
    }
    QKK_UNROLL
    for (int t = 0; t < nt; t++)
        y[(size_t)t * ldy] = qk_hsum_ps(f[t]);
}

#if defined(RA_QK_AVX512VNNI)
/* The AVX512-VNNI Q6_K row: 64 quants a vector, multiplied by vpdpbusd into
 * 16 int32 lanes, each the sum of 4 products (at most 4 * 63 * 128 = 32256:
 * an int16). Two such vectors are interleaved as the int16 halves of one
 * (qkk_pair) and vpdpwssd multiplies both by their scales and accumulates:
 * three multiplying instructions for 128 quants against four for
 * vpmaddubsw + vpdpwssd. A half's 64 bytes of ql against its 32 bytes of qh
 * in both halves, shifted per half, are quarters 0-1 and 2-3. Q4_K takes the
 * 256-bit row for any number of tokens: as fast here for one token, faster
 * for several, and a token's outputs stay the same whatever the tokens
 * beside it. */

/* int16 lanes 2m, 2m + 1 = lane m of a, of b (each fits an int16). */
static inline __m512i qkk_pair(__m512i a, __m512i b)
{
    return _mm512_mask_blend_epi16(0xaaaaaaaau, a, _mm512_slli_epi32(b, 16));
}

QKK_INLINE void qkk_q6k_row512(float *y, int ldy, const struct ra_block_q8k *x, int64_t nb,
                               const struct ra_block_q6_k *w, const int nt)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    /* qh's bits 2g, 2g + 1 to bits 4, 5: quarters 0, 1 (left 4, 2) and 2, 3 (right 0, 2) */
    const __m512i left01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i right23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    /* lane m of group i's products (elements 64i + 4m .. 64i + 4m + 3) takes
     * scale 4i + m / 4: the scales of qkk_pair(group 0, group 1) and of (2, 3) */
    const __m512i order01 = _mm512_set_epi16(7, 3, 7, 3, 7, 3, 7, 3, 6, 2, 6, 2, 6, 2, 6, 2,
                                             5, 1, 5, 1, 5, 1, 5, 1, 4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i order23 = _mm512_add_epi16(order01, _mm512_set1_epi16(8));
    __m512 f[4];
    QKK_UNROLL
    for (int t = 0; t < nt; t++)
        f[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct ra_block_q6_k *wb = w + b;
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales));
        const __m512i s01 = _mm512_permutexvar_epi16(order01, _mm512_castsi256_si512(s16));
        const __m512i s23 = _mm512_permutexvar_epi16(order23, _mm512_castsi256_si512(s16));
        /* -32 * scales[i] against bsums[i]: the offset of every quant */
        const __m256i off = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s16, 5));
        __m512i v[4];
        QKK_UNROLL
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512((const void *)(wb->ql + 64 * h));
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h)));
            v[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, left01), m30));
            v[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                           _mm512_and_si512(_mm512_srlv_epi16(qh, right23), m30));
        }
        const float d = ra_f16_to_f32(wb->d);
        QKK_UNROLL
        for (int t = 0; t < nt; t++) {
            const struct ra_block_q8k *xb = x + t * nb + b;
            __m512i p[4];
            QKK_UNROLL
            for (int i = 0; i < 4; i++)
                p[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[i],
                                           _mm512_loadu_si512((const void *)(xb->qs + 64 * i)));
            const __m256i o = QKK_DP(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)xb->bsums), off);
            __m512i acc = _mm512_dpwssd_epi32(_mm512_zextsi256_si512(o), qkk_pair(p[0], p[1]), s01);
            acc = _mm512_dpwssd_epi32(acc, qkk_pair(p[2], p[3]), s23);
            f[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * xb->d), _mm512_cvtepi32_ps(acc), f[t]);
        }
    }
    QKK_UNROLL
    for (int t = 0; t < nt; t++)
        y[(size_t)t * ldy] = _mm512_reduce_add_ps(f[t]);
}
#define QKK_Q6K_ROW qkk_q6k_row512
#else
#define QKK_Q6K_ROW qkk_q6k_row
#endif

/* Every row against the tokens in groups of 4 (a row of super-blocks stays in
 * L1 for the next group). */
#define QKK_GEMV(name, row1, row, wtype)                                                                               \
    static void name(float *y, int ldy, const void *xq, int n, const void *w, int64_t rows, int64_t k)             \
    {                                                                                                              \
        const int64_t nb = k / RA_QK_K;                                                                            \
        const struct ra_block_q8k *x = xq;                                                                         \
        for (int64_t r = 0; r < rows; r++) {                                                                       \
            const wtype *wr = (const wtype *)w + r * nb;                                                           \
            for (int t = 0; t < n; t += 4) {                                                                       \
                float *yt = y + (size_t)t * ldy + r;                                                               \
                const struct ra_block_q8k *xt = x + t * nb;                                                        \
                switch (n - t) {                                                                                   \
                case 1: row1(yt, ldy, xt, nb, wr, 1); break;                                                       \
                case 2: row(yt, ldy, xt, nb, wr, 2); break;                                                        \
                case 3: row(yt, ldy, xt, nb, wr, 3); break;                                                        \
                default: row(yt, ldy, xt, nb, wr, 4); break;                                                       \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }
QKK_GEMV(gemv_q4_k, qkk_q4k_row, qkk_q4k_row, struct ra_block_q4_k)
QKK_GEMV(gemv_q6_k, QKK_Q6K_ROW, QKK_Q6K_ROW, struct ra_block_q6_k)

/* ra_quant_dequantize's Q4_K floats: d * sc * q is exact (17 + 4 bits), so
 * one fused multiply-subtract rounds as its product then difference. */
static void dequantize_q4_k(float *dst, const void *w, int64_t count)
{
    const struct ra_block_q4_k *wb = w;
    const __m256i m4 = _mm256_set1_epi32(0x0f);
    for (int64_t i = 0; i < count / RA_QK_K; i++, wb++, dst += RA_QK_K) {
        uint8_t sc[8], mn[8];
        qkk_q4k_scales(wb->scales, sc, mn);
        const float d = ra_f16_to_f32(wb->d), dmin = ra_f16_to_f32(wb->dmin);
        QKK_UNROLL
        for (int c = 0; c < 4; c++) {
            const __m256 d1 = _mm256_set1_ps(d * (float)sc[2 * c]), m1 = _mm256_set1_ps(dmin * (float)mn[2 * c]);
            const __m256 d2 = _mm256_set1_ps(d * (float)sc[2 * c + 1]);
            const __m256 m2 = _mm256_set1_ps(dmin * (float)mn[2 * c + 1]);
            for (int l = 0; l < 32; l += 8) {
                const __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(wb->qs + 32 * c + l)));
                const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(q, m4));
                const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4));
                _mm256_storeu_ps(dst + 64 * c + l, _mm256_fmsub_ps(d1, lo, m1));
                _mm256_storeu_ps(dst + 64 * c + 32 + l, _mm256_fmsub_ps(d2, hi, m2));
            }
        }
    }
}

/* ra_quant_dequantize's Q6_K floats: (d * scale) * (q - 32), the same two
 * roundings. */
static void dequantize_q6_k(float *dst, const void *w, int64_t count)
{
    const struct ra_block_q6_k *wb = w;
    const __m256i m4 = _mm256_set1_epi32(0x0f), m30 = _mm256_set1_epi32(0x30), m3 = _mm256_set1_epi32(3);
    const __m256i k32 = _mm256_set1_epi32(32);
    for (int64_t i = 0; i < count / RA_QK_K; i++, wb++) {
        const float d = ra_f16_to_f32(wb->d);
        for (int h = 0; h < 2; h++, dst += 128) {
            const uint8_t *ql = wb->ql + 64 * h, *qh = wb->qh + 32 * h;
            const int8_t *s = wb->scales + 8 * h;
            for (int l = 0; l < 32; l += 8) {
                const __m256i l0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
                const __m256i l1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + 32 + l)));
                const __m256i hb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
                const __m256i q[4] = {
                    _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi32(_mm256_and_si256(hb, m3), 4)),
                    _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi32(hb, 2), m30)),
                    _mm256_or_si256(_mm256_srli_epi32(l0, 4), _mm256_and_si256(hb, m30)),
                    _mm256_or_si256(_mm256_srli_epi32(l1, 4), _mm256_and_si256(_mm256_srli_epi32(hb, 2), m30)),
                };
                QKK_UNROLL
                for (int g = 0; g < 4; g++) {
                    const __m256 ds = _mm256_set1_ps(d * (float)s[l / 16 + 2 * g]);
                    _mm256_storeu_ps(dst + 32 * g + l,
                                     _mm256_mul_ps(ds, _mm256_cvtepi32_ps(_mm256_sub_epi32(q[g], k32))));
                }
            }
        }
    }
}
#endif
