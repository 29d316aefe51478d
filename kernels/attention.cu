/* Causal attention, flash-style: each block takes ATT_ROWS consecutive
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
 * Plain fp32 on the CUDA cores: simple and obviously correct rather than the
 * fastest; the tensor-core version is future work (see README). */
#include "attention.cuh"
#include "common.cuh"

#define ATT_ROWS 8             /* queries (warps) per block */
#define ATT_TILE RA_WARP       /* keys per tile: one per lane */
#define ATT_DPL (RA_CUDA_ATTN_MAX_HEAD_DIM / RA_WARP) /* head dims per lane, at most */

static size_t shared_bytes(int hd)
{
    return sizeof(float) * ((size_t)ATT_TILE * (hd + 1) + (size_t)ATT_TILE * hd + (size_t)ATT_ROWS * hd);
}

__global__ static void __launch_bounds__(ATT_ROWS * RA_WARP)
attention_kernel(float *out, const float *q, const float *k, const float *v, int start, int n, int group, int hd,
                 int q_stride, int kv_stride, float scale)
{
    extern __shared__ float sm[];
    float *ks = sm;                               /* [ATT_TILE][hd + 1] */
    float *vs = ks + (size_t)ATT_TILE * (hd + 1); /* [ATT_TILE][hd] */
    float *qs = vs + (size_t)ATT_TILE * hd;       /* [ATT_ROWS][hd], pre-scaled */
    const int warp = threadIdx.x / RA_WARP, lane = threadIdx.x % RA_WARP;
    const int h = blockIdx.y, g = h / group;
    const int q0 = blockIdx.x * ATT_ROWS, qi = q0 + warp;
    const bool active = qi < n; /* the last block may have fewer queries than warps */
    const int pos = start + qi;
    const int last = (q0 + ATT_ROWS < n ? q0 + ATT_ROWS : n) - 1;
    const int kv_end = start + last + 1; /* keys [0, kv_end) are visible to some query of the block */

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
                kk = k[off];
                vv = v[off];
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
        /* Tile 0 holds key 0, visible to every query: m is finite from then on. */
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
    const float inv = 1.0f / l;
    float *o = out + (size_t)qi * q_stride + (size_t)h * hd;
#pragma unroll
    for (int t = 0; t < ATT_DPL; t++) {
        const int d = lane + t * RA_WARP;
        if (d < hd)
            o[d] = acc[t] * inv;
    }
}

extern "C" int ra_cuda_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int start,
                                 int n, const struct ra_attention_shape *s, cudaStream_t stream)
{
    const int hd = s->head_dim;
    if (hd <= 0 || hd > RA_CUDA_ATTN_MAX_HEAD_DIM || s->n_kv_heads <= 0 || s->n_heads % s->n_kv_heads != 0)
        return ra_error_set(RA_EUNSUPPORTED, "cuda attention: head dimension %d (at most %d) or heads %d/%d that "
                            "do not group", hd, RA_CUDA_ATTN_MAX_HEAD_DIM, s->n_heads, s->n_kv_heads);
    if (n <= 0)
        return RA_OK;
    const size_t smem = shared_bytes(hd);
    if (smem > 48 * 1024) /* above the default limit a kernel must opt in */
        CUDA_CHECK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((n + ATT_ROWS - 1) / ATT_ROWS), (unsigned)s->n_heads);
    attention_kernel<<<grid, ATT_ROWS * RA_WARP, smem, stream>>>(out, q, k_cache, v_cache, start, n,
                                                                s->n_heads / s->n_kv_heads, hd, s->q_stride,
                                                                s->kv_stride, 1.0f / sqrtf((float)hd));
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}
