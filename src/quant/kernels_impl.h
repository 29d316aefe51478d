/* The quantized-weight kernels, compiled once per instruction set (quant.h).
 *
 * Not an ordinary header: kernels_<isa>.c defines its marker (RA_QK_AVX2,
 * RA_QK_AVXVNNI, RA_QK_AVX512VNNI, RA_QK_AMX, RA_QK_AMX_MODEL, or none for
 * portable) and includes this file, and the build compiles each with that
 * set's flags (AVX2_CFLAGS, AVXVNNI_CFLAGS, AVX512VNNI_CFLAGS, AMX_CFLAGS).
 * The formats' kernels are in two files: kernels_q32.h (Q8_0, Q4_0, Q4_1
 * against ra_block_q8x activations) and kernels_qk.h (Q4_K, Q6_K against
 * ra_block_q8k); each defines, per type T, gemv_T (quant.h's gemv for one
 * type), dequantize_T, and its activation quantizer act_q8x / act_q8k. */
#include "quant.h"
#include "half.h"

#include <math.h>
#include <string.h>

#if defined(RA_QK_AMX) || defined(RA_QK_AMX_MODEL)
/* The AVX512-VNNI kernels, the prefill GEMM on AMX-INT8 tiles (kernels_amx.h):
 * the tiles themselves, or their plain-C model for tests (RA_QK_AMX_MODEL,
 * AVX512VNNI_CFLAGS). */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VNNI__)
#error "the AMX quant kernels need AVX512VNNI_CFLAGS"
#endif
#if defined(RA_QK_AMX) && !(defined(__AMX_TILE__) && defined(__AMX_INT8__)) && \
    !(defined(__AMXTILE__) && defined(__AMXINT8__)) /* GCC's names, clang's */
#error "the AMX quant kernels need AVX512VNNI_CFLAGS -mamx-tile -mamx-int8 (AMX_CFLAGS)"
#endif
#define RA_QK_AVX512VNNI 1
#define RA_QK_TILE_GEMM 1
#define QK_ISA RA_QUANT_ISA_AMX
#ifdef RA_QK_AMX
#define QK_TABLE ra_quant_kernels_amx
#else
#define QK_TABLE ra_quant_kernels_amx_model
#endif
#elif defined(RA_QK_AVX512VNNI)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VNNI__)
#error "the AVX512-VNNI quant kernels need -mavx512f -mavx512bw -mavx512vnni (AVX512VNNI_CFLAGS)"
#endif
#define QK_ISA RA_QUANT_ISA_AVX512VNNI
#define QK_TABLE ra_quant_kernels_avx512vnni
#elif defined(RA_QK_AVXVNNI)
#if !defined(__AVX2__) || !defined(__AVXVNNI__)
#error "the AVX-VNNI quant kernels need -mavx2 -mfma -mavxvnni (AVXVNNI_CFLAGS)"
#endif
#define QK_ISA RA_QUANT_ISA_AVXVNNI
#define QK_TABLE ra_quant_kernels_avxvnni
#elif defined(RA_QK_AVX2)
#if !defined(__AVX2__) || !defined(__FMA__)
#error "the AVX2 quant kernels need -mavx2 -mfma (AVX2_CFLAGS)"
#endif
#define QK_ISA RA_QUANT_ISA_AVX2
#define QK_TABLE ra_quant_kernels_avx2
#else
#define QK_ISA RA_QUANT_ISA_PORTABLE
#define QK_TABLE ra_quant_kernels_portable
#endif

#if defined(RA_QK_AVX2) || defined(RA_QK_AVXVNNI) || defined(RA_QK_AVX512VNNI)
#include <immintrin.h>

/* The sum and the maximum of a vector's 8 floats, for both formats' files. */
static inline float qk_hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float qk_hmax_ps(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

#include "kernels_q32.h"
#include "kernels_qk.h"
#include "kernels_gemm.h"
#ifdef RA_QK_TILE_GEMM
#include "kernels_amx.h"
#define QK_GEMM amx_gemm
#endif

/* The panel GEMM and its activations: the references until an instruction
 * set's file defines its own. */
#ifndef QK_GEMM
#define QK_GEMM ra_qpanel_gemm_ref
#endif
#ifndef QK_QUANTIZE_QACT
#define QK_QUANTIZE_QACT ra_qact_quantize_ref
#endif
#ifndef QK_GEMM_U7
#define QK_GEMM_U7 0
#endif

static int is_k_format(enum ra_dtype t) { return t == RA_DTYPE_Q4_K || t == RA_DTYPE_Q6_K; }

static void quantize_act(void *xq, const float *x, int64_t k, enum ra_dtype wtype)
{
    if (is_k_format(wtype))
        act_q8k(xq, x, k);
    else
        act_q8x(xq, x, k);
}

static void gemv(float *y, int ldy, const void *xq, int n, const void *w, enum ra_dtype wtype, int64_t rows,
                 int64_t k)
{
    switch (wtype) {
    case RA_DTYPE_Q8_0: gemv_q8_0(y, ldy, xq, n, w, rows, k); break;
    case RA_DTYPE_Q4_0: gemv_q4_0(y, ldy, xq, n, w, rows, k); break;
    case RA_DTYPE_Q4_1: gemv_q4_1(y, ldy, xq, n, w, rows, k); break;
    case RA_DTYPE_Q4_K: gemv_q4_k(y, ldy, xq, n, w, rows, k); break;
    case RA_DTYPE_Q6_K: gemv_q6_k(y, ldy, xq, n, w, rows, k); break;
    default: break;
    }
}

static void dequantize(float *dst, const void *w, enum ra_dtype wtype, int64_t count)
{
    switch (wtype) {
    case RA_DTYPE_Q8_0: dequantize_q8_0(dst, w, count); break;
    case RA_DTYPE_Q4_0: dequantize_q4_0(dst, w, count); break;
    case RA_DTYPE_Q4_1: dequantize_q4_1(dst, w, count); break;
    case RA_DTYPE_Q4_K: dequantize_q4_k(dst, w, count); break;
    case RA_DTYPE_Q6_K: dequantize_q6_k(dst, w, count); break;
    default: break;
    }
}

const struct ra_quant_kernels QK_TABLE = {
    .isa = QK_ISA,
    .quantize_act = quantize_act,
    .gemv = gemv,
    .dequantize = dequantize,
    .gemm = QK_GEMM,
    .quantize_qact = QK_QUANTIZE_QACT,
    .gemm_u7 = QK_GEMM_U7,
};
