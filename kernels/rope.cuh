/* Rotary position embedding of each head of rows x[i] (stride ld floats) at
 * positions pos[i] (device ints) or, pos NULL, pos0 + i, in either pairing
 * convention (enum ra_rope_style). */
#ifndef RA_CUDA_ROPE_CUH
#define RA_CUDA_ROPE_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* factors: head_dim/2 host floats dividing pair j's frequency (RoPE scaling), or NULL. */
int ra_cuda_rope(float *x, int ld, int n, int n_heads, int head_dim, int pos0, const int32_t *pos, float theta,
                 int style, const float *factors, cudaStream_t stream);
/* The same over rows of dtype (RA_DTYPE_F32 or RA_DTYPE_BF16, rounded back to
 * nearest even), row i at pos[i] or, pos NULL, pos0 + step * i: rope_shift.cu
 * rotates every row by one delta with step 0. */
int ra_cuda_rope_rows(void *x, int dtype, int ld, int n, int n_heads, int head_dim, int pos0, int step,
                      const int32_t *pos, float theta, int style, const float *factors, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
