/* SwiGLU, a grid-stride loop; silu(g) = g / (1 + exp(-g)) with the accurate expf. */
#include "common.cuh"
#include "swiglu.cuh"

__global__ static void swiglu_kernel(float *gate, const float *up, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

extern "C" int ra_cuda_swiglu(float *gate, const float *up, size_t count, cudaStream_t stream)
{
    if (count == 0)
        return RA_OK;
    swiglu_kernel<<<ra_grid_1d(count), 256, 0, stream>>>(gate, up, count);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}
