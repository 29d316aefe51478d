/* RoPE shift: rows rotated at some positions p rotated on to p + delta, by
 * rope.cu's kernel with every row at position delta: the angle is computed as
 * a position's (powf, then a float product), so that rotating at p then
 * shifting by d is rotating by the two float angles in turn. */
#include "common.cuh"
#include "rope.cuh"
#include "rope_shift.cuh"

extern "C" int ra_cuda_rope_shift(void *x, int dtype, int ld, int n, int n_heads, int head_dim, int delta,
                                  float theta, int style, const float *factors, cudaStream_t stream)
{
    if (delta == 0)
        return RA_OK;
    return ra_cuda_rope_rows(x, dtype, ld, n, n_heads, head_dim, delta, 0, NULL, theta, style, factors, stream);
}
