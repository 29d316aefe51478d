/* The CPU kernels, compiled once per instruction set (see cpu_kernels.h).
 *
 * Not an ordinary header: cpu_kernels_<isa>.c defines RA_KERNELS_AVX512
 * (and RA_KERNELS_BF16DP for avx512bf16), RA_KERNELS_AVX2 or nothing
 * (portable), then includes this file, and the build compiles each with that
 * instruction set's flags (AVX512BF16_CFLAGS, AVX512_CFLAGS, AVX2_CFLAGS or
 * none, from configure). The marker picks the intrinsics; the
 * plain loops are written to vectorise for whatever the flags allow.
 *
 * The kernels by role, each in its own file, included here in this order:
 * cpu_kernels_simd.h (the vector shim), cpu_kernels_prefill.h (attention of
 * a span), cpu_kernels_decode.h (attention of a decode step and the op that
 * picks between them), cpu_kernels_eltwise.h (RMSNorm, RoPE, SwiGLU, add,
 * conversions), cpu_kernels_gemv.h (the decode GEMV). */
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

#include "cpu_kernels_simd.h"
#include "cpu_kernels_prefill.h"
#include "cpu_kernels_decode.h"
#include "cpu_kernels_eltwise.h"
#include "cpu_kernels_gemv.h"

const struct ra_cpu_kernels KERNELS_TABLE = {
    .isa = KERNELS_ISA,
    .attention = attention,
    .attention_rows = attention_rows,
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
