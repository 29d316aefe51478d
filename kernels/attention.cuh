/* Causal attention of the n queries at positions [start, start+n) over cache
 * rows [0, start+n), as struct ra_backend_ops.attention. */
#ifndef RA_CUDA_ATTENTION_CUH
#define RA_CUDA_ATTENTION_CUH

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ra_attention_shape;

/* The largest head dimension the kernel takes. */
#define RA_CUDA_ATTN_MAX_HEAD_DIM 256

/* OUT and Q rows have s->q_stride floats, K and V cache rows s->kv_stride;
 * query head h reads KV head h / (n_heads / n_kv_heads) in place (GQA, MQA). */
int ra_cuda_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int start, int n,
                      const struct ra_attention_shape *s, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
