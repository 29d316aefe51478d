/* Dtype conversion: weights at load (f32 -> bf16/f16 per --device-dtype) and
 * activations before a reduced-precision GEMM. */
#ifndef RA_CUDA_CONVERT_CUH
#define RA_CUDA_CONVERT_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[r][c] (row stride ld_dst, dtype DST_DT) = src[r][c] (stride ld_src,
 * dtype SRC_DT) for ROWS x COLS elements, rounding to nearest even. */
int ra_cuda_convert(void *dst, int dst_dt, size_t ld_dst, const void *src, int src_dt, size_t ld_src,
                    size_t rows, size_t cols, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
