/* bf16 x bf16 -> fp32 GEMMs for the CPU backend's linear layers.
 *
 * The unit is chosen at run time: oneDNN's matmul (its JIT picks AMX-BF16
 * tiles where the CPU and kernel allow them, else AVX512-BF16 dot products)
 * or OpenBLAS's cblas_sbgemm where that build has it; with neither, or on a
 * CPU without AVX512-BF16/AMX-BF16, or when RA_CPU_ISA selects kernels below
 * avx512, there is no bf16 unit and the backend keeps its fp32 path.
 * RA_GEMM=auto|onednn|sbgemm|f32 forces one (f32: no bf16 unit), for tests
 * and benchmarks; ONEDNN_MAX_CPU_ISA still limits what oneDNN uses.
 *
 * Weights are bf16 [rows][k] row-major, used where they lie (a memory-mapped
 * file): oneDNN reads them as a strided k x rows matrix, no copy. Activations
 * arrive as fp32 and are rounded to bf16 (nearest even) per call. Each shape
 * (tokens, rows, k, output stride) gets a plan, kept in a small cache: oneDNN
 * primitives are JIT-compiled, so a plan is built once per shape. */
#ifndef RA_GEMM_BF16_H
#define RA_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

struct ra_gemm_bf16;

/* Which bf16 units this process may use, as a word: "onednn", "sbgemm",
 * "onednn,sbgemm", or "none (why)". */
void ra_gemm_bf16_units(char *buf, size_t size);

/* A context for n_threads threads; *out is NULL (and RA_OK returned) when
 * there is no bf16 unit. */
int ra_gemm_bf16_create(struct ra_gemm_bf16 **out, int n_threads);
void ra_gemm_bf16_free(struct ra_gemm_bf16 *g);

/* y[n][rows] (row stride ldy) = x[n][k] (fp32, row stride ldx) · wᵀ, w bf16
 * [rows][k]. RA_EUNSUPPORTED when no unit takes this shape (the caller then
 * runs its fp32 path); RA_ENOMEM. */
int ra_gemm_bf16_run(struct ra_gemm_bf16 *g, float *y, int ldy, const float *x, int ldx, const uint16_t *w,
                     int rows, int k, int n);

/* Weights in oneDNN's blocked layout, for copies the backend makes anyway
 * (f32/f16 weights in bf16 compute): the layout oneDNN's matmul reads
 * fastest, the same bytes as plain bf16. RA_EUNSUPPORTED without oneDNN. */
struct ra_bf16_packed;
int ra_gemm_bf16_pack(struct ra_gemm_bf16 *g, const uint16_t *plain, int rows, int k, struct ra_bf16_packed **out);
int ra_gemm_bf16_run_packed(struct ra_gemm_bf16 *g, float *y, int ldy, const float *x, int ldx,
                            const struct ra_bf16_packed *w, int n);
void ra_bf16_packed_free(struct ra_bf16_packed *w);

/* The unit of the last plan made, e.g. "oneDNN brg:avx512_core_amx". */
const char *ra_gemm_bf16_describe(const struct ra_gemm_bf16 *g);

/* dst[i] = bf16(src[i]), round to nearest even, one thread; vectorised where
 * the CPU has AVX512-BF16. */
void ra_narrow_bf16(uint16_t *dst, const float *src, size_t n);

/* Non-zero when the CPU (and OS) have AVX512-BF16 / AMX-BF16 tiles. */
int ra_cpu_has_avx512_bf16(void);
int ra_cpu_has_amx_bf16(void);

#endif
