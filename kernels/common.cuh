/* What the .cu files share: the project's C headers with C linkage, the
 * check macros, dtype loads and stores, warp and block reductions. */
#ifndef RA_CUDA_COMMON_CUH
#define RA_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

extern "C" {
#include "backend.h"
#include "model.h"
#include "status.h"
}
#include "cuda_check.h"

#define RA_WARP 32
#define RA_FULL_MASK 0xffffffffu

/* Element i of a buffer of dtype DT, widened to float. */
__device__ __forceinline__ float ra_load(const void *p, int dt, size_t i)
{
    if (dt == RA_DTYPE_BF16)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == RA_DTYPE_F16)
        return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* Stores V as dtype DT, rounding to nearest even. */
__device__ __forceinline__ void ra_store(void *p, int dt, size_t i, float v)
{
    if (dt == RA_DTYPE_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (dt == RA_DTYPE_F16)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
}

/* A cache element as float (templates over the KV dtype). */
__device__ __forceinline__ float ra_widen(float x) { return x; }
__device__ __forceinline__ float ra_widen(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float ra_warp_sum(float v)
{
    for (int o = RA_WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(RA_FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float ra_warp_max(float v)
{
    for (int o = RA_WARP / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(RA_FULL_MASK, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. SHARED holds 32 floats. */
__device__ __forceinline__ float ra_block_sum(float v, float *shared)
{
    const int lane = threadIdx.x % RA_WARP, warp = threadIdx.x / RA_WARP, warps = blockDim.x / RA_WARP;
    v = ra_warp_sum(v);
    __syncthreads(); /* SHARED may still be read from a previous call */
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : 0.0f;
    return ra_warp_sum(v);
}

/* Blocks for a grid-stride loop over COUNT elements, 256 threads a block. */
static inline unsigned ra_grid_1d(size_t count)
{
    size_t blocks = (count + 255) / 256;
    if (blocks > 65535u * 16u)
        blocks = 65535u * 16u;
    return blocks ? (unsigned)blocks : 1u;
}

#endif
