/* The SIMD shim of the CPU kernels: the vector type vf and its operations for
 * the instruction set being compiled (AVX-512F, AVX2+FMA), or ATTN_SIMD 0 for
 * portable C, and the attention item shape of each (NV vectors of VL lanes).
 *
 * Part of the CPU kernels (cpu_kernels_impl.h includes it once per
 * instruction set); not a header of its own. */

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
#define vloadu _mm512_loadu_ps
static inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vmaxall(vf v) { return _mm512_reduce_max_ps(v); }
#elif defined(RA_KERNELS_AVX2)
#include <immintrin.h>
#define ATTN_SIMD 256
#define VL 8
#define NV 4 /* vectors of queries per item (prefill) */
/* micro-kernel rows for items of 1, 2, 4 vectors: 12 accumulators of 16
 * registers (with 4 vectors, 3 rows: faster than 2 x 6, jobs/README.md) */
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
