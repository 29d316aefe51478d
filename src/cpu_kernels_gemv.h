/* The GEMV of a decode step.
 *
 * y[t][r] = w[r] · x[t] for a few tokens t: one decode step's linear layers
 * are memory bound, so the kernel's job is to stream each weight row once at
 * the memory's rate. Rows go one at a time, in memory order: the matrix is
 * one sequential stream for the prefetchers (groups of rows read in parallel
 * stream slower on one core, and software prefetch does not help:
 * jobs/README.md); 2 vectors in flight per step for the FMA latency,
 * 4 for bf16 (the same bytes per step as f32); f16/bf16
 * weights are widened in registers (bf16: a 32-bit lane holds an even and an
 * odd weight, one shift and one mask make both fp32, against x split into
 * even and odd elements once per call; f16: vcvtph2ps), so they cost half
 * the bytes of f32. Activations stay fp32 (the backend rounds them to bf16
 * first for bf16 compute): the result is the fp32 product of the widened
 * weights, the prefill path's numerics up to summation order. With more
 * than one token a row is re-read from L1 for the next token.
 *
 * Part of the CPU kernels (cpu_kernels_impl.h includes it once per
 * instruction set, after cpu_kernels_simd.h); not a header of its own. */
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

/* Row r of w against every token. */
static inline __attribute__((always_inline)) void gemv_row(const int DT, float *y, int ldy, const float *x, int ldx,
                                                            int n, const void *w, int64_t r, int64_t k,
                                                            const float *xeo)
{
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * ldx;
        float s;
        int64_t j = 0;
#if ATTN_SIMD
        vf acc0 = vzero(), acc1 = vzero();
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
                const uint16_t *wr = (const uint16_t *)w + (size_t)r * (size_t)k + (size_t)j;
                const __typeof__(LOADW(wr)) v = LOADW(wr), u = LOADW(wr + 2 * VL);
                acc0 = vfma(EVEN(v), x0, acc0);
                acc1 = vfma(ODD(v), x1, acc1);
                acc0 = vfma(EVEN(u), x2, acc0);
                acc1 = vfma(ODD(u), x3, acc1);
            }
            for (; j + 2 * VL <= k; j += 2 * VL) {
                const vf x0 = vloadu(xe + j / 2), x1 = vloadu(xo + j / 2);
                const uint16_t *wr = (const uint16_t *)w + (size_t)r * (size_t)k + (size_t)j;
                const __typeof__(LOADW(wr)) v = LOADW(wr);
                acc0 = vfma(EVEN(v), x0, acc0);
                acc1 = vfma(ODD(v), x1, acc1);
            }
#undef LOADW
#undef EVEN
#undef ODD
        }
        for (; j + 2 * VL <= k; j += 2 * VL) {
            const vf x0 = vloadu(xt + j), x1 = vloadu(xt + j + VL);
            const size_t o = (size_t)r * (size_t)k + (size_t)j;
            acc0 = vfma(wload(DT, w, o), x0, acc0);
            acc1 = vfma(wload(DT, w, o + VL), x1, acc1);
        }
        for (; j + VL <= k; j += VL) {
            const vf x0 = vloadu(xt + j);
            acc0 = vfma(wload(DT, w, (size_t)r * (size_t)k + (size_t)j), x0, acc0);
        }
        s = vsum(vadd(acc0, acc1));
#else
        const size_t o = (size_t)r * (size_t)k;
        float a = 0;
#pragma omp simd reduction(+ : a)
        for (int64_t jj = 0; jj < k - k % 16; jj++)
            a += wscalar(DT, w, o + (size_t)jj) * xt[jj];
        s = a;
        j = k - k % 16;
#endif
        for (int64_t jj = j; jj < k; jj++)
            s += wscalar(DT, w, (size_t)r * (size_t)k + (size_t)jj) * xt[jj];
        y[(size_t)t * ldy + (size_t)r] = s;
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
    for (int64_t r = 0; r < rows; r++)
        gemv_row(DT, y, ldy, x, ldx, n, w, r, k, xeo);
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
 * tails, runs bench-small's bf16 decode GEMVs slower, and one inline row
 * helper with the tails, shared by both, slower still (jobs/README.md). */
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
 * time in memory order, as in gemv_row; k's tail (k % 32) in scalar code. */
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
