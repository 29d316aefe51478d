/* Rows by index, as struct ra_backend_ops.get_rows: dst row i = src row
 * idx[i] (ggml's get_rows), rows of `width` elements of `esize` bytes. */
#ifndef RA_CUDA_GET_ROWS_CUH
#define RA_CUDA_GET_ROWS_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* idx: n device ints, each a row of src. */
int ra_cuda_get_rows(void *dst, const void *src, size_t esize, size_t width, const int32_t *idx, int n,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
