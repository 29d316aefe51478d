/* SwiGLU: gate[i] = silu(gate[i]) * up[i]. */
#ifndef RA_CUDA_SWIGLU_CUH
#define RA_CUDA_SWIGLU_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int ra_cuda_swiglu(float *gate, const float *up, size_t count, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
