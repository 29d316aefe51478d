/* get_rows: one thread per element (2 or 4 bytes), rows copied whole. */
#include "common.cuh"
#include "get_rows.cuh"

template <typename T>
__global__ static void get_rows_kernel(T *dst, const T *src, size_t width, const int32_t *idx, int n)
{
    const size_t total = (size_t)n * width;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total; t += (size_t)gridDim.x * blockDim.x) {
        const size_t i = t / width, e = t % width;
        dst[t] = src[(size_t)idx[i] * width + e];
    }
}

extern "C" int ra_cuda_get_rows(void *dst, const void *src, size_t esize, size_t width, const int32_t *idx, int n,
                                cudaStream_t stream)
{
    const size_t total = (size_t)n * width;
    if (total == 0)
        return RA_OK;
    if (esize == 4)
        get_rows_kernel<uint32_t><<<ra_grid_1d(total), 256, 0, stream>>>((uint32_t *)dst, (const uint32_t *)src,
                                                                          width, idx, n);
    else if (esize == 2)
        get_rows_kernel<uint16_t><<<ra_grid_1d(total), 256, 0, stream>>>((uint16_t *)dst, (const uint16_t *)src,
                                                                          width, idx, n);
    else
        return ra_error_set(RA_EUNSUPPORTED, "cuda get_rows: elements of %zu bytes (2 or 4)", esize);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}
