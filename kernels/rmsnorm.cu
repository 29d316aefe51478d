/* RMSNorm: one block per row; the sum of squares in fp32, as the CPU does it. */
#include "common.cuh"
#include "rmsnorm.cuh"

__global__ static void rmsnorm_kernel(float *y, const float *x, const void *w, int dtype, int dim, float eps)
{
    __shared__ float red[32];
    const float *xi = x + (size_t)blockIdx.x * dim;
    float *yi = y + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        ss += xi[j] * xi[j];
    ss = ra_block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        yi[j] = ra_load(w, dtype, j) * (inv * xi[j]);
}

extern "C" int ra_cuda_rmsnorm(float *y, const float *x, const void *w, int dtype, int n, int dim, float eps,
                               cudaStream_t stream)
{
    if (n <= 0)
        return RA_OK;
    rmsnorm_kernel<<<n, 256, 0, stream>>>(y, x, w, dtype, dim, eps);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}
