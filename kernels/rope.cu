/* RoPE: one thread per rotated pair. The angle is computed as the CPU
 * backend (and llama2.c) computes it, powf then a float product, so that both
 * backends rotate by the same float angle. */
#include "common.cuh"
#include "rope.cuh"

#include <string.h>

/* The factors travel by value in the launch's parameters (1 KiB): no device
 * buffer to keep in step with the model. */
struct rope_factors {
    int scaled;
    float f[RA_ROPE_MAX_PAIRS];
};

/* Row i at pos[i] or, pos NULL, pos0 + step * i (step 0: every row at pos0,
 * which is rope_shift's rotation by a delta); rows of dtype dt. */
__global__ static void rope_kernel(void *x, int dt, int ld, int n, int n_heads, int head_dim, int pos0, int step,
                                   const int32_t *pos, float theta, int style, struct rope_factors sf)
{
    const int half = head_dim / 2;
    const size_t total = (size_t)n * n_heads * half;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total; t += (size_t)gridDim.x * blockDim.x) {
        const int j = (int)(t % half);
        const int h = (int)(t / half % n_heads);
        const int i = (int)(t / ((size_t)half * n_heads));
        float freq = 1.0f / powf(theta, (float)(2 * j) / (float)head_dim);
        if (sf.scaled)
            freq /= sf.f[j];
        const float a = (float)(pos ? pos[i] : pos0 + step * i) * freq;
        const float c = cosf(a), s = sinf(a);
        const size_t row = (size_t)i * ld + (size_t)h * head_dim;
        const int i0 = style == RA_ROPE_HALF ? j : 2 * j, i1 = style == RA_ROPE_HALF ? j + half : 2 * j + 1;
        const float v0 = ra_load(x, dt, row + i0), v1 = ra_load(x, dt, row + i1);
        ra_store(x, dt, row + i0, v0 * c - v1 * s);
        ra_store(x, dt, row + i1, v0 * s + v1 * c);
    }
}

extern "C" int ra_cuda_rope_rows(void *x, int dtype, int ld, int n, int n_heads, int head_dim, int pos0, int step,
                                 const int32_t *pos, float theta, int style, const float *factors,
                                 cudaStream_t stream)
{
    if (head_dim % 2 != 0 || (style != RA_ROPE_INTERLEAVED && style != RA_ROPE_HALF))
        return ra_error_set(RA_EINVAL, "cuda rope: head dimension %d is odd or style %d unknown", head_dim, style);
    if (dtype != RA_DTYPE_F32 && dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "cuda rope: %s rows (f32 or bf16)", ra_dtype_name((enum ra_dtype)dtype));
    if (factors && head_dim / 2 > RA_ROPE_MAX_PAIRS)
        return ra_error_set(RA_EINVAL, "cuda rope: scaled RoPE with head dimension %d (at most %d)", head_dim,
                            2 * RA_ROPE_MAX_PAIRS);
    const size_t total = (size_t)n * n_heads * (head_dim / 2);
    if (total == 0)
        return RA_OK;
    struct rope_factors sf;
    memset(&sf, 0, sizeof sf);
    sf.scaled = factors != NULL;
    if (factors)
        memcpy(sf.f, factors, (size_t)(head_dim / 2) * sizeof(float));
    rope_kernel<<<ra_grid_1d(total), 256, 0, stream>>>(x, dtype, ld, n, n_heads, head_dim, pos0, step, pos, theta,
                                                        style, sf);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}

extern "C" int ra_cuda_rope(float *x, int ld, int n, int n_heads, int head_dim, int pos0, const int32_t *pos,
                            float theta, int style, const float *factors, cudaStream_t stream)
{
    return ra_cuda_rope_rows(x, RA_DTYPE_F32, ld, n, n_heads, head_dim, pos0, 1, pos, theta, style, factors, stream);
}
