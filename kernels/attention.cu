/* The reference causal attention, and the choice among the three kernels
 * (attention.cuh).
 *
 * Flash-style: each block takes ATT_ROWS consecutive
 * queries of one head (one warp per query) and walks the keys in tiles of
 * ATT_TILE rows staged in shared memory, keeping a running max and sum per
 * query (online softmax), so no score matrix is ever stored. The block stops
 * at its last query's position, so tiles above the diagonal are never loaded;
 * inside the last tiles each query masks the keys after its own position.
 *
 * Inside a tile, lane j of a warp computes the score of key j (a full dot
 * product over the head from shared memory: no reduction per key), the warp
 * then reduces the tile's max and sum, and for the output each lane owns the
 * head dimensions lane, lane+32, ..., broadcasting p_j with a shuffle.
 * K rows in shared memory are padded by one float so that the 32 lanes,
 * reading 32 different rows at the same column, hit 32 different banks.
 *
 * Plain fp32 on the CUDA cores (bf16 cache rows widened as they are staged):
 * simple and obviously correct rather than fast; attention_tc.cu and
 * attention_split.cu are tested against it. */
#include "attention.cuh"
#include "common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATT_ROWS 8             /* queries (warps) per block */
#define ATT_TILE RA_WARP       /* keys per tile: one per lane */
#define ATT_DPL (RA_CUDA_ATTN_MAX_HEAD_DIM / RA_WARP) /* head dims per lane, at most */

static size_t shared_bytes(int hd)
{
    return sizeof(float) * ((size_t)ATT_TILE * (hd + 1) + (size_t)ATT_TILE * hd + (size_t)ATT_ROWS * hd);
}

template <typename T>
__global__ static void __launch_bounds__(ATT_ROWS * RA_WARP)
attention_kernel(float *out, const float *q, const T *k, const T *v, int start, int n, const int *lastk, int group,
                 int hd, int q_stride, int kv_stride, float scale)
{
    extern __shared__ float sm[];
    float *ks = sm;                               /* [ATT_TILE][hd + 1] */
    float *vs = ks + (size_t)ATT_TILE * (hd + 1); /* [ATT_TILE][hd] */
    float *qs = vs + (size_t)ATT_TILE * hd;       /* [ATT_ROWS][hd], pre-scaled */
    const int warp = threadIdx.x / RA_WARP, lane = threadIdx.x % RA_WARP;
    const int h = blockIdx.y, g = h / group;
    const int q0 = blockIdx.x * ATT_ROWS, qi = q0 + warp;
    const bool active = qi < n; /* the last block may have fewer queries than warps */
    /* the last key row query qi sees: start + qi, or lastk[qi] (-1: none) for rows at positions */
    const int pos = lastk ? (active ? lastk[qi] : -1) : start + qi;
    const int last = (q0 + ATT_ROWS < n ? q0 + ATT_ROWS : n) - 1;
    /* keys [0, kv_end) are visible to some query of the block (lastk grows with qi) */
    const int kv_end = lastk ? lastk[last] + 1 : start + last + 1;

    if (active)
        for (int d = lane; d < hd; d += RA_WARP)
            qs[warp * hd + d] = q[(size_t)qi * q_stride + (size_t)h * hd + d] * scale;
    float acc[ATT_DPL];
#pragma unroll
    for (int t = 0; t < ATT_DPL; t++)
        acc[t] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int t0 = 0; t0 < kv_end; t0 += ATT_TILE) {
        __syncthreads(); /* the previous tile is consumed (and qs is written) */
        for (int idx = threadIdx.x; idx < ATT_TILE * hd; idx += blockDim.x) {
            const int j = idx / hd, d = idx % hd, key = t0 + j;
            float kk = 0.0f, vv = 0.0f;
            if (key < kv_end) {
                const size_t off = (size_t)key * kv_stride + (size_t)g * hd + d;
                kk = ra_widen(k[off]);
                vv = ra_widen(v[off]);
            }
            ks[j * (hd + 1) + d] = kk;
            vs[j * hd + d] = vv;
        }
        __syncthreads();
        if (!active || t0 > pos) /* warp-uniform: this query sees no key of the tile */
            continue;
        const int key = t0 + lane;
        float s = -INFINITY;
        if (key <= pos) {
            float dot = 0.0f;
            const float *qr = qs + warp * hd, *kr = ks + lane * (hd + 1);
            for (int d = 0; d < hd; d++)
                dot += qr[d] * kr[d];
            s = dot;
        }
        /* Tile 0 holds key 0, visible to every query that sees a key: m is finite from then on. */
        const float m_new = fmaxf(m, ra_warp_max(s));
        const float p = key <= pos ? expf(s - m_new) : 0.0f;
        const float corr = expf(m - m_new); /* 0 on the first tile (m = -inf) */
        l = l * corr + ra_warp_sum(p);
        m = m_new;
        const int nk = pos - t0 + 1 < ATT_TILE ? pos - t0 + 1 : ATT_TILE;
#pragma unroll
        for (int t = 0; t < ATT_DPL; t++)
            acc[t] *= corr;
        for (int j = 0; j < nk; j++) {
            const float pj = __shfl_sync(RA_FULL_MASK, p, j);
            const float *vr = vs + j * hd;
#pragma unroll
            for (int t = 0; t < ATT_DPL; t++) {
                const int d = lane + t * RA_WARP;
                if (d < hd)
                    acc[t] += pj * vr[d];
            }
        }
    }
    if (!active)
        return;
    const float inv = lastk && pos < 0 ? 0.0f : 1.0f / l; /* a query before every key: zeros */
    float *o = out + (size_t)qi * q_stride + (size_t)h * hd;
#pragma unroll
    for (int t = 0; t < ATT_DPL; t++) {
        const int d = lane + t * RA_WARP;
        if (d < hd)
            o[d] = acc[t] * inv;
    }
}

static int check_shape(const struct ra_attention_shape *s, int max_hd, const char *kernel)
{
    const int hd = s->head_dim;
    if (hd <= 0 || hd > max_hd || s->n_kv_heads <= 0 || s->n_heads % s->n_kv_heads != 0)
        return ra_error_set(RA_EUNSUPPORTED, "cuda attention (%s): head dimension %d (at most %d) or heads %d/%d "
                            "that do not group", kernel, hd, max_hd, s->n_heads, s->n_kv_heads);
    if (s->kv_dtype != RA_DTYPE_F32 && s->kv_dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "cuda attention (%s): a %s KV cache (f32 and bf16 are built)", kernel,
                            ra_dtype_name(s->kv_dtype));
    return RA_OK;
}

template <typename T>
static int launch_ref(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                      const int *lastk, const struct ra_attention_shape *s, cudaStream_t stream)
{
    const int hd = s->head_dim;
    const size_t smem = shared_bytes(hd);
    if (smem > 48 * 1024) /* above the default limit a kernel must opt in */
        CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((n + ATT_ROWS - 1) / ATT_ROWS), (unsigned)s->n_heads);
    attention_kernel<T><<<grid, ATT_ROWS * RA_WARP, smem, stream>>>(out, q, (const T *)k_cache, (const T *)v_cache,
                                                                   start, n, lastk, s->n_heads / s->n_kv_heads, hd,
                                                                   s->q_stride, s->kv_stride,
                                                                   1.0f / sqrtf((float)hd));
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}

extern "C" int ra_cuda_attention_ref(float *out, const float *q, const void *k_cache, const void *v_cache, int start,
                                     int n, const struct ra_attention_shape *s, cudaStream_t stream)
{
    int rc = check_shape(s, RA_CUDA_ATTN_MAX_HEAD_DIM, "ref");
    if (rc != RA_OK || n <= 0)
        return rc;
    return s->kv_dtype == RA_DTYPE_BF16
               ? launch_ref<__nv_bfloat16>(out, q, k_cache, v_cache, start, n, NULL, s, stream)
               : launch_ref<float>(out, q, k_cache, v_cache, start, n, NULL, s, stream);
}

extern "C" int ra_cuda_attention_rows(float *out, const float *q, const void *k_cache, const void *v_cache,
                                      const int *lastk, int n, const struct ra_attention_shape *s,
                                      cudaStream_t stream)
{
    int rc = check_shape(s, RA_CUDA_ATTN_MAX_HEAD_DIM, "ref");
    if (rc != RA_OK || n <= 0)
        return rc;
    return s->kv_dtype == RA_DTYPE_BF16
               ? launch_ref<__nv_bfloat16>(out, q, k_cache, v_cache, 0, n, lastk, s, stream)
               : launch_ref<float>(out, q, k_cache, v_cache, 0, n, lastk, s, stream);
}

enum kernel { K_AUTO = 0, K_REF, K_TC, K_SPLIT };

/* RA_CUDA_ATTN, read once: the kernel every call takes. */
static enum kernel forced_kernel(void)
{
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("RA_CUDA_ATTN");
        forced = !e || !*e ? K_AUTO : !strcmp(e, "ref") ? K_REF : !strcmp(e, "tc") ? K_TC
                 : !strcmp(e, "split") ? K_SPLIT : K_AUTO;
        if (e && *e && forced == K_AUTO)
            fprintf(stderr, "runahead: RA_CUDA_ATTN='%s' is not ref, tc or split: ignored\n", e);
    }
    return (enum kernel)forced;
}

/* split for decode-sized spans, tc for longer ones where it takes the shape, ref otherwise. */
static enum kernel choose(const void *k_cache, const void *v_cache, int n, const struct ra_attention_shape *s)
{
    const enum kernel f = forced_kernel();
    if (f != K_AUTO)
        return f;
    if (n <= RA_CUDA_ATTN_SPLIT_MAX_Q && s->head_dim <= RA_CUDA_ATTN_MAX_HEAD_DIM)
        return K_SPLIT;
    return ra_cuda_attention_tc_takes(k_cache, v_cache, s) ? K_TC : K_REF;
}

extern "C" int ra_cuda_attention(float *out, const float *q, const void *k_cache, const void *v_cache, int start,
                                 int n, const struct ra_attention_shape *s, void *work, size_t work_bytes,
                                 cudaStream_t stream)
{
    switch (choose(k_cache, v_cache, n, s)) {
    case K_SPLIT:
        return ra_cuda_attention_split(out, q, k_cache, v_cache, start, n, s, work, work_bytes, stream);
    case K_TC:
        return ra_cuda_attention_tc(out, q, k_cache, v_cache, start, n, s, stream);
    default:
        return ra_cuda_attention_ref(out, q, k_cache, v_cache, start, n, s, stream);
    }
}
