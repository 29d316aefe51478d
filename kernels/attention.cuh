/* Causal attention of the n queries at positions [start, start+n) over cache
 * rows [0, start+n), as struct ra_backend_ops.attention over spans; position
 * lists take ra_cuda_attention_rows.
 *
 * Three kernels compute it; ra_cuda_attention picks one per call:
 *   split (attention_split.cu)  n <= RA_CUDA_ATTN_SPLIT_MAX_Q (decode): the keys
 *                               split over many blocks, partial softmaxes merged
 *   tc    (attention_tc.cu)     longer spans, head_dim 64 or 128: bf16 tensor
 *                               cores (mma.sync), flash-style online softmax
 *   ref   (attention.cu)        everything else: fp32 on the CUDA cores, the
 *                               reference the others are tested against
 * RA_CUDA_ATTN=ref|tc|split forces one (tc and split refuse shapes they do not
 * take with RA_EUNSUPPORTED). The cache rows are fp32 or bf16 (s->kv_dtype);
 * scores, softmax and sums are fp32 in every kernel, tc rounds Q and P to bf16
 * for its products. */
#ifndef RA_CUDA_ATTENTION_CUH
#define RA_CUDA_ATTENTION_CUH

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ra_attention_shape;

/* The largest head dimension ref and split take. */
#define RA_CUDA_ATTN_MAX_HEAD_DIM 256
/* The most queries split takes (and ra_cuda_attention sends to it). */
#define RA_CUDA_ATTN_SPLIT_MAX_Q 8

/* OUT and Q rows have s->q_stride floats, K and V cache rows s->kv_stride
 * elements of s->kv_dtype; query head h reads KV head h / (n_heads /
 * n_kv_heads) in place (GQA, MQA). WORK is device scratch of at least
 * ra_cuda_attention_work_bytes(start, n, s) bytes (split's partial results). */
int ra_cuda_attention(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                      const struct ra_attention_shape *s, void *work, size_t work_bytes, cudaStream_t stream);
size_t ra_cuda_attention_work_bytes(int start, int n, const struct ra_attention_shape *s);

/* The kernels one by one (tests). */
int ra_cuda_attention_ref(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                          const struct ra_attention_shape *s, cudaStream_t stream);
int ra_cuda_attention_tc(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                         const struct ra_attention_shape *s, cudaStream_t stream);
int ra_cuda_attention_split(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                            const struct ra_attention_shape *s, void *work, size_t work_bytes, cudaStream_t stream);
/* Attention at positions (the ref kernel): query i (rows of q and out) sees
 * key rows [0, lastk[i]] (lastk: n device ints, non-decreasing; -1: no key,
 * zeros out). The backend turns the queries' and keys' positions into lastk. */
int ra_cuda_attention_rows(float *out, const float *q, const void *k_cache, const void *v_cache, const int *lastk,
                           int n, const struct ra_attention_shape *s, cudaStream_t stream);
/* Does tc take this shape (head_dim 64 or 128, rows aligned for 16-byte loads)? */
int ra_cuda_attention_tc_takes(const void *k_cache, const void *v_cache, const struct ra_attention_shape *s);

#ifdef __cplusplus
}
#endif
#endif
