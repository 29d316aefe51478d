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

__global__ static void rope_kernel(float *x, int ld, int n, int n_heads, int head_dim, int pos0,
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
        const float a = (float)(pos ? pos[i] : pos0 + i) * freq;
        const float c = cosf(a), s = sinf(a);
        float *v = x + (size_t)i * ld + (size_t)h * head_dim;
        const int i0 = style == RA_ROPE_HALF ? j : 2 * j, i1 = style == RA_ROPE_HALF ? j + half : 2 * j + 1;
        const float v0 = v[i0], v1 = v[i1];
        v[i0] = v0 * c - v1 * s;
        v[i1] = v0 * s + v1 * c;
    }
}

extern "C" int ra_cuda_rope(float *x, int ld, int n, int n_heads, int head_dim, int pos0, const int32_t *pos,
                            float theta, int style, const float *factors, cudaStream_t stream)
{
    if (head_dim % 2 != 0 || (style != RA_ROPE_INTERLEAVED && style != RA_ROPE_HALF))
        return ra_error_set(RA_EINVAL, "cuda rope: head dimension %d is odd or style %d unknown", head_dim, style);
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
    rope_kernel<<<ra_grid_1d(total), 256, 0, stream>>>(x, ld, n, n_heads, head_dim, pos0, pos, theta, style, sf);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}
