/* The CPU backend's hand-written kernels, one table per instruction set.
 *
 * cpu_kernels_impl.h is compiled once per instruction set, each time with that
 * set's compiler flags (cpu_kernels_portable.c, _avx2.c, _avx512.c, _avx512bf16.c), so one
 * binary holds every version and none of them runs an instruction the CPU
 * lacks: the backend picks its table at run time (cpu_isa.h). The GEMMs are
 * OpenBLAS's, which does its own run-time dispatch. All pointers are host
 * memory; `n_threads` bounds every OpenMP region. */
#ifndef RA_CPU_KERNELS_H
#define RA_CPU_KERNELS_H

#include "backend.h"
#include "cpu_isa.h"

#include <stddef.h>
#include <stdint.h>

#define RA_ATTN_MAX_HEAD_DIM 256

struct ra_cpu_kernels {
    enum ra_cpu_isa isa;
    /* Causal attention; see ra_backend_ops.attention. bf16 cache rows are
     * widened block by block; the arithmetic is then the fp32 kernel's. */
    int (*attention)(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                     const struct ra_attention_shape *s, int n_threads);
    /* Attention at positions; see ra_backend_ops.attention. A contiguous span
     * over the keys up to it is `attention`'s call; otherwise each query's
     * visible keys (a prefix of the key rows) go to the decode path for up to
     * a decode step's queries, else to the span's block kernel. */
    int (*attention_rows)(float *out, const float *q, const struct ra_rows *qrows, const void *k_cache,
                          const void *v_cache, const struct ra_rows *krows, const struct ra_attention_shape *s,
                          int n_threads);
    /* y[i] = x[i] / rms(x[i]) * w for n rows of dim floats; w is fp32. */
    void (*rmsnorm)(float *y, const float *x, const float *w, int n, int dim, float eps, int n_threads);
    /* Rotates pair j of every head of n rows (stride ld) by the angle whose
     * cos/sin are cs/sn[i][j] ([n][head_dim/2]): pairs (2j, 2j+1) for rope
     * (RA_ROPE_INTERLEAVED), (j, j + head_dim/2) for rope_half (RA_ROPE_HALF). */
    void (*rope)(float *x, int ld, int n, int n_heads, int head_dim, const float *cs, const float *sn,
                 int n_threads);
    void (*rope_half)(float *x, int ld, int n, int n_heads, int head_dim, const float *cs, const float *sn,
                      int n_threads);
    /* gate[i] = silu(gate[i]) * up[i] */
    void (*swiglu)(float *gate, const float *up, size_t count, int n_threads);
    /* x[i] += y[i] */
    void (*add)(float *x, const float *y, size_t count, int n_threads);
    /* dst[i] = (float)src[i], one thread */
    void (*widen_bf16)(float *dst, const uint16_t *src, size_t count);
    void (*widen_f16)(float *dst, const uint16_t *src, size_t count);
    /* dst[i] = src[i] rounded to bf16, to nearest even (NaN stays NaN) */
    void (*narrow_bf16)(uint16_t *dst, const float *src, size_t count, int n_threads);
    /* y[t*ldy + r] = w[r] · x[t*ldx] for t < n, r < rows, w [rows][k]
     * row-major in wdtype (f32, f16 or bf16, widened in registers), x fp32;
     * one thread. For the few tokens of a decode step: the weights are
     * streamed once (rows re-read from L1 per token), no packing (bf16: x split into even/odd
     * elements once per call, in a per-thread buffer that grows once). */
    void (*gemv)(float *y, int ldy, const float *x, int ldx, int n, const void *w, enum ra_dtype wdtype,
                 int64_t rows, int64_t k);
    /* The same for bf16 activations x (n rows of k, packed) and bf16 weights,
     * both read as pairs by vdpbf16ps: the products are exact, as in the
     * widening kernel, and sums run in pairs. NULL in the builds without
     * AVX512-BF16 (the caller widens x and uses gemv). */
    void (*gemv_bf16)(float *y, int ldy, const uint16_t *x, int n, const uint16_t *w, int64_t rows, int64_t k);
};

/* One table per instruction set; the x86 ones exist where configure found
 * the compiler flags for them (RA_HAVE_X86_KERNELS). */
extern const struct ra_cpu_kernels ra_cpu_kernels_portable, ra_cpu_kernels_avx2, ra_cpu_kernels_avx512;
/* Where configure found flags for AVX512-BF16 too (RA_HAVE_AVX512BF16_KERNELS). */
extern const struct ra_cpu_kernels ra_cpu_kernels_avx512bf16;

/* The kernels of `isa`, or NULL if this build has none for it. */
const struct ra_cpu_kernels *ra_cpu_kernels_for(enum ra_cpu_isa isa);

/* The kernels of the active instruction set (ra_cpu_isa_active); an error if
 * RA_CPU_ISA names one this CPU or build cannot run. */
int ra_cpu_kernels_active(const struct ra_cpu_kernels **out);

#endif
