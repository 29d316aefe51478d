/* Dtype conversion, a grid-stride loop over a strided 2-D block. */
#include "common.cuh"
#include "convert.cuh"

__global__ static void convert_kernel(void *dst, int dst_dt, size_t ld_dst, const void *src, int src_dt,
                                      size_t ld_src, size_t rows, size_t cols)
{
    const size_t total = rows * cols;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total; t += (size_t)gridDim.x * blockDim.x) {
        const size_t r = t / cols, c = t % cols;
        ra_store(dst, dst_dt, r * ld_dst + c, ra_load(src, src_dt, r * ld_src + c));
    }
}

extern "C" int ra_cuda_convert(void *dst, int dst_dt, size_t ld_dst, const void *src, int src_dt, size_t ld_src,
                               size_t rows, size_t cols, cudaStream_t stream)
{
    if (rows == 0 || cols == 0)
        return RA_OK;
    convert_kernel<<<ra_grid_1d(rows * cols), 256, 0, stream>>>(dst, dst_dt, ld_dst, src, src_dt, ld_src, rows,
                                                                  cols);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}
