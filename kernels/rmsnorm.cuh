/* RMSNorm: y[i] = x[i] / rms(x[i]) * w, rows of DIM floats. */
#ifndef RA_CUDA_RMSNORM_CUH
#define RA_CUDA_RMSNORM_CUH

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* W [dim] of dtype DTYPE (enum ra_dtype); Y may be X. */
int ra_cuda_rmsnorm(float *y, const float *x, const void *w, int dtype, int n, int dim, float eps,
                    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
