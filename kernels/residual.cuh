/* Residual add: x[i] += y[i]. */
#ifndef RA_CUDA_RESIDUAL_CUH
#define RA_CUDA_RESIDUAL_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int ra_cuda_add(float *x, const float *y, size_t count, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
