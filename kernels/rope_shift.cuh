/* RoPE shift: rows already rotated at some positions p, rotated on to
 * p + delta (each pair by delta's angle), as struct ra_backend_ops.rope_shift:
 * stored K rows re-positioned in place, f32 or bf16 (widened, rotated,
 * rounded back to nearest even). */
#ifndef RA_CUDA_ROPE_SHIFT_CUH
#define RA_CUDA_ROPE_SHIFT_CUH

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* n rows of n_heads*head_dim elements of dtype (RA_DTYPE_F32 or RA_DTYPE_BF16), ld elements apart;
 * factors: head_dim/2 host floats dividing pair j's frequency, or NULL. */
int ra_cuda_rope_shift(void *x, int dtype, int ld, int n, int n_heads, int head_dim, int delta, float theta,
                       int style, const float *factors, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
