/* The prefill GEMM on packed panels and its activation quantizer (part of
 * kernels_impl.h; panel.h has the layouts and the formula).
 *
 * A tile of T tokens by P panels (16 rows each) keeps T x P int32 sums and
 * T x P float accumulators in registers. Per 4 columns it loads each panel's
 * u once (16 rows x 4 bytes) and each token's 4 activation bytes once,
 * broadcast, and adds their products to the int32 sums (vpdpbusd, or
 * vpmaddubsw + vpmaddwd on AVX2); once per group the sums are converted and
 * scaled into the float accumulators. AVX512-VNNI, per 32 columns (one d):
 *     f = sum over the block's groups of float(sum) * scale
 *     acc = fma(f, d, acc);  acc = fma(offset, s, acc) per group
 * (Q6_K's two groups of 16 share the multiply by d); AVX2 per group:
 *     acc = fma(float(sum), scale * d, acc);  acc = fma(offset, s, acc)
 * The same operations, in the same order, for every token whatever T, P and
 * the other tokens of the call: a token's outputs do not depend on them.
 *
 * The AVX2 form (vpmaddubsw) adds pairs of u x q into int16 with saturation:
 * exact for u < 128 (2 x 127 x 127 < 32768), so Q4_*, Q6_K, not Q8_0's u up
 * to 255 (the table says so: gemm_u7). AVX-VNNI and AVX512-VNNI take any u. */

#if defined(RA_QK_AVX2) || defined(RA_QK_AVXVNNI) || defined(RA_QK_AVX512VNNI)

#define QG_INLINE static inline __attribute__((always_inline))
#define QG_UNROLL _Pragma("GCC unroll 16")
/* Array bounds of a tile (its T and P are constants once inlined). */
#define QG_TMAX 8
#define QG_PMAX 4

/* 4 bytes at p as one int32 (to broadcast). */
QG_INLINE int32_t qg_load4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ------------------------------------------------------------------ activations */

/* The sum of 16 int8: psadbw on the bytes + 128 (their sums of 8 against
 * zero), less 16 x 128. */
QG_INLINE int qg_sum16(const int8_t *q)
{
    const __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)q), _mm_set1_epi8((char)0x80));
    const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
    return _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128;
}

/* ra_qact_quantize_ref's bytes: act_q8x's blocks (the GEMV's quantizer, the
 * same q and d), copied out in chunks, with the sums per group. */
static void qg_quantize_qact(struct ra_qact *a, int t, const float *x)
{
    enum { CHUNK = 8 };
    const int64_t k = a->k, nb = k / RA_QK;
    const int group = a->group;
    int8_t *q = a->q + (size_t)t * (size_t)k;
    float *d = a->d + (size_t)t * (size_t)nb, *s = a->s + (size_t)t * (size_t)(k / group);
    struct ra_block_q8x blk[CHUNK];
    for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {
        const int nc = nb - b0 < CHUNK ? (int)(nb - b0) : CHUNK;
        act_q8x(blk, x + RA_QK * b0, (int64_t)nc * RA_QK);
        for (int i = 0; i < nc; i++) { /* group 32 or 16 (Q6_K) */
            const int64_t b = b0 + i;
            memcpy(q + RA_QK * b, blk[i].qs, RA_QK);
            d[b] = blk[i].d;
            if (group == RA_QK) {
                s[b] = blk[i].s;
                continue;
            }
            for (int h = 0; h < RA_QK / group; h++)
                s[b * (RA_QK / group) + h] = blk[i].d * (float)qg_sum16(blk[i].qs + group * h);
        }
    }
}

#define QK_QUANTIZE_QACT qg_quantize_qact

/* Token t's row of a: quants, d per 32, s per group. */
struct qg_tok {
    const int8_t *q;
    const float *d, *s;
};

QG_INLINE struct qg_tok qg_token(const struct ra_qact *a, int t)
{
    const int64_t k = a->k;
    return (struct qg_tok){ a->q + (size_t)t * (size_t)k, a->d + (size_t)t * (size_t)(k / RA_QK),
                            a->s + (size_t)t * (size_t)(k / a->group) };
}

#endif

/* ------------------------------------------------------------------ AVX512-VNNI */

#if defined(RA_QK_AVX512VNNI) && !defined(RA_QK_TILE_GEMM) /* the AMX builds: kernels_amx.h */

/* Tokens t0..t0+T by panels p..p+P (pan = panel p); cols: how many of
 * this tile's 16 P rows are stored. GROUP 32 or 16. */
QG_INLINE void qg512_tile(float *y, int ldy, const struct ra_qact *a, int t0, const char *pan, size_t pbytes,
                          int cols, const int T, const int P, const int GROUP)
{
    const int64_t k = a->k;
    struct qg_tok tk[QG_TMAX];
    const uint8_t *u[QG_PMAX];
    const float *sc[QG_PMAX], *of[QG_PMAX];
    __m512 acc[QG_TMAX][QG_PMAX];
    QG_UNROLL
    for (int t = 0; t < T; t++)
        tk[t] = qg_token(a, t0 + t);
    QG_UNROLL
    for (int p = 0; p < P; p++) {
        void *pp = (void *)(pan + (size_t)p * pbytes);
        u[p] = ra_qpanel_u(pp);
        sc[p] = ra_qpanel_scale(pp, k);
        of[p] = ra_qpanel_offset(pp, k, GROUP);
        QG_UNROLL
        for (int t = 0; t < T; t++)
            acc[t][p] = _mm512_setzero_ps();
    }
    const int H = RA_QK / GROUP; /* groups per activation block of 32 (one d) */
    for (int64_t blk = 0; blk < k / RA_QK; blk++) {
        __m512 ft[QG_TMAX][QG_PMAX]; /* sum over the block's groups of scale x float(sum) */
        QG_UNROLL
        for (int h = 0; h < H; h++) {
            const int64_t g = H * blk + h;
            __m512i is[QG_TMAX][QG_PMAX];
            QG_UNROLL
            for (int t = 0; t < T; t++)
                QG_UNROLL
                for (int p = 0; p < P; p++)
                    is[t][p] = _mm512_setzero_si512();
            QG_UNROLL
            for (int i = 0; i < GROUP / 4; i++) {
                const int64_t c = GROUP * g + 4 * i;
                __m512i w[QG_PMAX];
                QG_UNROLL
                for (int p = 0; p < P; p++)
                    w[p] = _mm512_load_si512((const void *)(u[p] + 16 * c));
                QG_UNROLL
                for (int t = 0; t < T; t++) {
                    const __m512i b = _mm512_set1_epi32(qg_load4(tk[t].q + c));
                    QG_UNROLL
                    for (int p = 0; p < P; p++)
                        is[t][p] = _mm512_dpbusd_epi32(is[t][p], w[p], b);
                }
            }
            QG_UNROLL
            for (int p = 0; p < P; p++) {
                const __m512 scale = _mm512_load_ps(sc[p] + RA_QP_ROWS * g);
                QG_UNROLL
                for (int t = 0; t < T; t++) {
                    const __m512 f = _mm512_cvtepi32_ps(is[t][p]);
                    ft[t][p] = h == 0 ? _mm512_mul_ps(f, scale) : _mm512_fmadd_ps(f, scale, ft[t][p]);
                }
            }
        }
        QG_UNROLL
        for (int t = 0; t < T; t++) {
            const __m512 d = _mm512_set1_ps(tk[t].d[blk]);
            QG_UNROLL
            for (int p = 0; p < P; p++)
                acc[t][p] = _mm512_fmadd_ps(ft[t][p], d, acc[t][p]);
            QG_UNROLL
            for (int h = 0; h < H; h++) {
                const __m512 s = _mm512_set1_ps(tk[t].s[H * blk + h]);
                QG_UNROLL
                for (int p = 0; p < P; p++)
                    acc[t][p] = _mm512_fmadd_ps(_mm512_load_ps(of[p] + RA_QP_ROWS * (H * blk + h)), s, acc[t][p]);
            }
        }
    }
    QG_UNROLL
    for (int t = 0; t < T; t++)
        QG_UNROLL
        for (int p = 0; p < P; p++) {
            float *dst = y + (size_t)(t0 + t) * ldy + RA_QP_ROWS * p;
            const int n = cols - RA_QP_ROWS * p;
            if (n >= RA_QP_ROWS)
                _mm512_storeu_ps(dst, acc[t][p]);
            else if (n > 0)
                _mm512_mask_storeu_ps(dst, (__mmask16)((1u << n) - 1), acc[t][p]);
        }
}

/* Tiles of QG512_T tokens by QG512_P panels (2 for groups of 16, which keep
 * a block's first group's products while the second's are summed), the
 * tails in smaller ones. */
#define QG512_T 4
#define QG512_P 3
_Static_assert(QG512_T <= 4, "the tails below take up to 3 tokens");

#define QG512_TOKENS(NAME, P, GROUP)                                                                              \
    static void qg512_tokens_##NAME##_##GROUP(float *y, int ldy, const struct ra_qact *a, int n_tok,              \
                                           const char *pan, size_t pbytes, int cols)                           \
    {                                                                                                          \
        int t = 0;                                                                                             \
        for (; t + QG512_T <= n_tok; t += QG512_T)                                                             \
            qg512_tile(y, ldy, a, t, pan, pbytes, cols, QG512_T, P, GROUP);                                    \
        switch (n_tok - t) {                                                                                   \
        case 3: qg512_tile(y, ldy, a, t, pan, pbytes, cols, 3, P, GROUP); break;                               \
        case 2: qg512_tile(y, ldy, a, t, pan, pbytes, cols, 2, P, GROUP); break;                               \
        case 1: qg512_tile(y, ldy, a, t, pan, pbytes, cols, 1, P, GROUP); break;                               \
        default: break;                                                                                        \
        }                                                                                                      \
    }
QG512_TOKENS(wide, QG512_P, 32)
QG512_TOKENS(two, 2, 32)
QG512_TOKENS(one, 1, 32)
QG512_TOKENS(two, 2, 16)
QG512_TOKENS(one, 1, 16)

static void qg512_gemm(float *y, int ldy, const struct ra_qact *a, int n_tok, const void *panels, int np, int ncols)
{
    const size_t pbytes = ra_qpanel_bytes(a->group, a->k);
    const char *pan = panels;
    const int g16 = a->group == 16, wide = g16 ? 2 : QG512_P;
    for (int p = 0; p < np;) {
        const int left = np - p, cols = ncols - RA_QP_ROWS * p;
        float *yp = y + RA_QP_ROWS * p;
        const char *pp = pan + (size_t)p * pbytes;
        if (left >= wide && !g16) {
            qg512_tokens_wide_32(yp, ldy, a, n_tok, pp, pbytes, cols);
            p += wide;
        } else if (left >= 2) {
            if (g16)
                qg512_tokens_two_16(yp, ldy, a, n_tok, pp, pbytes, cols);
            else
                qg512_tokens_two_32(yp, ldy, a, n_tok, pp, pbytes, cols);
            p += 2;
        } else {
            if (g16)
                qg512_tokens_one_16(yp, ldy, a, n_tok, pp, pbytes, cols);
            else
                qg512_tokens_one_32(yp, ldy, a, n_tok, pp, pbytes, cols);
            p++;
        }
    }
}

#define QK_GEMM qg512_gemm

/* ------------------------------------------------------------------ AVX2, AVX-VNNI */

#elif defined(RA_QK_AVX2) || defined(RA_QK_AVXVNNI)

/* acc + the sums of 4 products u x b per int32 lane. */
QG_INLINE __m256i qg256_dot(__m256i acc, __m256i u, __m256i b)
{
#if defined(RA_QK_AVXVNNI)
    return _mm256_dpbusd_avx_epi32(acc, u, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, b), _mm256_set1_epi16(1)));
#endif
}

/* Tokens t0..t0+T by one panel, as two halves of 8 rows (a ymm each). */
QG_INLINE void qg256_tile(float *y, int ldy, const struct ra_qact *a, int t0, const char *pan, int cols,
                          const int T, const int GROUP)
{
    const int64_t k = a->k, ng = k / GROUP;
    struct qg_tok tk[QG_TMAX];
    void *pp = (void *)pan;
    const uint8_t *u = ra_qpanel_u(pp);
    const float *sc = ra_qpanel_scale(pp, k), *of = ra_qpanel_offset(pp, k, GROUP);
    __m256 acc[QG_TMAX][2];
    QG_UNROLL
    for (int t = 0; t < T; t++) {
        tk[t] = qg_token(a, t0 + t);
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    }
    for (int64_t g = 0; g < ng; g++) {
        __m256i is[QG_TMAX][2];
        QG_UNROLL
        for (int t = 0; t < T; t++)
            is[t][0] = is[t][1] = _mm256_setzero_si256();
        QG_UNROLL
        for (int i = 0; i < GROUP / 4; i++) {
            const int64_t c = GROUP * g + 4 * i;
            const __m256i w0 = _mm256_load_si256((const __m256i *)(u + 16 * c));
            const __m256i w1 = _mm256_load_si256((const __m256i *)(u + 16 * c + 32));
            QG_UNROLL
            for (int t = 0; t < T; t++) {
                const __m256i b = _mm256_set1_epi32(qg_load4(tk[t].q + c));
                is[t][0] = qg256_dot(is[t][0], w0, b);
                is[t][1] = qg256_dot(is[t][1], w1, b);
            }
        }
        QG_UNROLL
        for (int t = 0; t < T; t++) {
            const __m256 d = _mm256_set1_ps(tk[t].d[GROUP * g / RA_QK]), s = _mm256_set1_ps(tk[t].s[g]);
            QG_UNROLL
            for (int h = 0; h < 2; h++) {
                const __m256 f = _mm256_mul_ps(_mm256_load_ps(sc + RA_QP_ROWS * g + 8 * h), d);
                acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t][h]), f, acc[t][h]);
                acc[t][h] = _mm256_fmadd_ps(_mm256_load_ps(of + RA_QP_ROWS * g + 8 * h), s, acc[t][h]);
            }
        }
    }
    QG_UNROLL
    for (int t = 0; t < T; t++) {
        float *dst = y + (size_t)(t0 + t) * ldy;
        if (cols >= RA_QP_ROWS) {
            _mm256_storeu_ps(dst, acc[t][0]);
            _mm256_storeu_ps(dst + 8, acc[t][1]);
        } else {
            float tmp[RA_QP_ROWS];
            _mm256_storeu_ps(tmp, acc[t][0]);
            _mm256_storeu_ps(tmp + 8, acc[t][1]);
            memcpy(dst, tmp, sizeof(float) * (size_t)cols);
        }
    }
}

#define QG256_T 2

#define QG256_TOKENS(GROUP)                                                                                       \
    static void qg256_tokens_##GROUP(float *y, int ldy, const struct ra_qact *a, int n_tok, const char *pan,    \
                                     int cols)                                                                 \
    {                                                                                                          \
        int t = 0;                                                                                             \
        for (; t + QG256_T <= n_tok; t += QG256_T)                                                             \
            qg256_tile(y, ldy, a, t, pan, cols, QG256_T, GROUP);                                               \
        if (t < n_tok)                                                                                         \
            qg256_tile(y, ldy, a, t, pan, cols, 1, GROUP);                                                     \
    }
QG256_TOKENS(32)
QG256_TOKENS(16)

static void qg256_gemm(float *y, int ldy, const struct ra_qact *a, int n_tok, const void *panels, int np, int ncols)
{
    const size_t pbytes = ra_qpanel_bytes(a->group, a->k);
    for (int p = 0; p < np; p++) {
        const char *pan = (const char *)panels + (size_t)p * pbytes;
        const int cols = ncols - RA_QP_ROWS * p;
        if (cols <= 0)
            break;
        if (a->group == 16)
            qg256_tokens_16(y + RA_QP_ROWS * p, ldy, a, n_tok, pan, cols);
        else
            qg256_tokens_32(y + RA_QP_ROWS * p, ldy, a, n_tok, pan, cols);
    }
}

#define QK_GEMM qg256_gemm
#if defined(RA_QK_AVX2)
#define QK_GEMM_U7 1
#endif

#endif
