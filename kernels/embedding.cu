/* Token embedding: one block per token, threads stride over the row. */
#include "common.cuh"
#include "embedding.cuh"

__global__ static void embed_kernel(float *x, const void *table, int dtype, int cols, const int32_t *tokens)
{
    const size_t row = (size_t)tokens[blockIdx.x] * cols;
    float *xi = x + (size_t)blockIdx.x * cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        xi[j] = ra_load(table, dtype, row + j);
}

extern "C" int ra_cuda_embed(float *x, const void *table, int dtype, int cols, const int32_t *tokens, int n,
                             cudaStream_t stream)
{
    if (n <= 0)
        return RA_OK;
    embed_kernel<<<n, 256, 0, stream>>>(x, table, dtype, cols, tokens);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}
