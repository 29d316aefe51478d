/* Token embedding: x[i][:] = table[tokens[i]][:], widened to fp32. */
#ifndef RA_CUDA_EMBEDDING_CUH
#define RA_CUDA_EMBEDDING_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TABLE [vocab][cols] of dtype DTYPE (enum ra_dtype) and TOKENS [n] are device
 * buffers; the ids are already range-checked. */
int ra_cuda_embed(float *x, const void *table, int dtype, int cols, const int32_t *tokens, int n,
                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
