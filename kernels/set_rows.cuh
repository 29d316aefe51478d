/* Rows by index, as struct ra_backend_ops.set_rows: dst row idx[i] = src
 * row i (ggml's set_rows), rounded from src_dtype to dtype: K/V rows written
 * into a cache at their positions. */
#ifndef RA_CUDA_SET_ROWS_CUH
#define RA_CUDA_SET_ROWS_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dtype f32 or bf16, src_dtype f32 or dtype; idx: n device ints, each a row of dst. */
int ra_cuda_set_rows(void *dst, int dtype, const void *src, int src_dtype, size_t width, const int32_t *idx, int n,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
