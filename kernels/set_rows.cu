/* set_rows: one thread per element, widened to float and stored in the
 * target dtype (bf16: to nearest even; the same dtype: the same bits, as
 * bf16 -> float -> bf16 is exact). */
#include "common.cuh"
#include "set_rows.cuh"

__global__ static void set_rows_kernel(void *dst, int dt, const void *src, int st, size_t width, const int32_t *idx,
                                       int n)
{
    const size_t total = (size_t)n * width;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total; t += (size_t)gridDim.x * blockDim.x) {
        const size_t i = t / width, e = t % width;
        ra_store(dst, dt, (size_t)idx[i] * width + e, ra_load(src, st, t));
    }
}

extern "C" int ra_cuda_set_rows(void *dst, int dtype, const void *src, int src_dtype, size_t width,
                                const int32_t *idx, int n, cudaStream_t stream)
{
    if ((dtype != RA_DTYPE_F32 && dtype != RA_DTYPE_BF16) || (src_dtype != RA_DTYPE_F32 && src_dtype != dtype))
        return ra_error_set(RA_EUNSUPPORTED, "cuda set_rows: %s rows into %s (f32 or bf16, from f32 or the same)",
                            ra_dtype_name((enum ra_dtype)src_dtype), ra_dtype_name((enum ra_dtype)dtype));
    const size_t total = (size_t)n * width;
    if (total == 0)
        return RA_OK;
    set_rows_kernel<<<ra_grid_1d(total), 256, 0, stream>>>(dst, dtype, src, src_dtype, width, idx, n);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}
