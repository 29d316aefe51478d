/* Causal attention of a few queries (decode: one) over a long cache, the keys
 * split across blocks (flash-decoding).
 *
 * One query per head would keep a handful of warps busy while the GPU has
 * over a hundred multiprocessors, each of them walking the whole cache. Here
 * the keys [0, start+n) are cut into `splits` chunks; block (split, head)
 * walks its chunk for every query of the span (at most
 * RA_CUDA_ATTN_SPLIT_MAX_Q), each warp taking every SPLIT_WARPS-th key: a
 * lane holds head dimensions lane, lane+32, ..., a key's score is a warp sum,
 * and each warp keeps a running max, sum and output per query (online
 * softmax, fp32). The block merges its warps and writes one partial result
 * (max, sum, unnormalised output) per query; a second kernel merges the
 * chunks: out = sum_c o_c 2^(m_c - M) / sum_c l_c 2^(m_c - M), M = max_c m_c.
 * Chunks and queries with no visible key carry m = -inf, l = 0 and weigh 0. */
#include "attention.cuh"
#include "common.cuh"

#define SPLIT_WARPS 4
#define SPLIT_DPL (RA_CUDA_ATTN_MAX_HEAD_DIM / RA_WARP) /* head dimensions per lane, at most */
#define SPLIT_MIN_KEYS 64                                 /* keys per chunk, at least */
#define SPLIT_LOG2E 1.4426950408889634f

/* A partial result: m, l, then head_dim floats of output. */
static __host__ __device__ size_t part_floats(int hd) { return (size_t)hd + 2; }

template <typename T>
__global__ static void __launch_bounds__(SPLIT_WARPS * RA_WARP)
attention_split_kernel(float *part, const float *q, const T *k, const T *v, int start, int n, int group, int hd,
                       int q_stride, int kv_stride, float qscale, int chunk)
{
    __shared__ float qs[RA_CUDA_ATTN_SPLIT_MAX_Q][RA_CUDA_ATTN_MAX_HEAD_DIM];
    __shared__ float wm[SPLIT_WARPS][RA_CUDA_ATTN_SPLIT_MAX_Q], wl[SPLIT_WARPS][RA_CUDA_ATTN_SPLIT_MAX_Q];
    __shared__ float wo[SPLIT_WARPS][RA_CUDA_ATTN_MAX_HEAD_DIM];
    const int warp = threadIdx.x / RA_WARP, lane = threadIdx.x % RA_WARP;
    const int split = blockIdx.x, h = blockIdx.y, heads = gridDim.y, col0 = (h / group) * hd;
    const int k_begin = split * chunk, k_end = min(start + n, k_begin + chunk);

    for (int i = threadIdx.x; i < n * hd; i += blockDim.x)
        qs[i / hd][i % hd] = q[(size_t)(i / hd) * q_stride + (size_t)h * hd + i % hd] * qscale;
    __syncthreads();

    float m[RA_CUDA_ATTN_SPLIT_MAX_Q], l[RA_CUDA_ATTN_SPLIT_MAX_Q], acc[RA_CUDA_ATTN_SPLIT_MAX_Q][SPLIT_DPL];
#pragma unroll
    for (int qi = 0; qi < RA_CUDA_ATTN_SPLIT_MAX_Q; qi++) {
        m[qi] = -INFINITY;
        l[qi] = 0.0f;
#pragma unroll
        for (int i = 0; i < SPLIT_DPL; i++)
            acc[qi][i] = 0.0f;
    }
    for (int key = k_begin + warp; key < k_end; key += SPLIT_WARPS) {
        float kr[SPLIT_DPL], vr[SPLIT_DPL];
        const size_t off = (size_t)key * kv_stride + col0;
#pragma unroll
        for (int i = 0; i < SPLIT_DPL; i++) {
            const int d = lane + i * RA_WARP;
            kr[i] = d < hd ? ra_widen(k[off + d]) : 0.0f;
            vr[i] = d < hd ? ra_widen(v[off + d]) : 0.0f;
        }
#pragma unroll
        for (int qi = 0; qi < RA_CUDA_ATTN_SPLIT_MAX_Q; qi++) {
            if (qi >= n || key > start + qi) /* warp-uniform: no query there, or the key is after it */
                continue;
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < SPLIT_DPL; i++)
                if (lane + i * RA_WARP < hd)
                    dot += qs[qi][lane + i * RA_WARP] * kr[i];
            const float sc = ra_warp_sum(dot);
            const float m_new = fmaxf(m[qi], sc), corr = exp2f(m[qi] - m_new), p = exp2f(sc - m_new);
            m[qi] = m_new;
            l[qi] = l[qi] * corr + p;
#pragma unroll
            for (int i = 0; i < SPLIT_DPL; i++)
                acc[qi][i] = acc[qi][i] * corr + p * vr[i];
        }
    }
    /* The warps' partial results merged into one per query, through shared memory. */
#pragma unroll
    for (int qi = 0; qi < RA_CUDA_ATTN_SPLIT_MAX_Q; qi++) {
        if (qi >= n)
            break;
        if (lane == 0) {
            wm[warp][qi] = m[qi];
            wl[warp][qi] = l[qi];
        }
        __syncthreads();
        float mx = -INFINITY;
        for (int w = 0; w < SPLIT_WARPS; w++)
            mx = fmaxf(mx, wm[w][qi]);
        const float base = mx == -INFINITY ? 0.0f : mx, mine = exp2f(m[qi] - base);
#pragma unroll
        for (int i = 0; i < SPLIT_DPL; i++)
            if (lane + i * RA_WARP < hd)
                wo[warp][lane + i * RA_WARP] = acc[qi][i] * mine;
        __syncthreads();
        float *dst = part + (((size_t)split * n + qi) * heads + h) * part_floats(hd);
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < SPLIT_WARPS; w++)
                o += wo[w][d];
            dst[2 + d] = o;
        }
        if (threadIdx.x == 0) {
            float sum = 0.0f;
            for (int w = 0; w < SPLIT_WARPS; w++)
                sum += wl[w][qi] * exp2f(wm[w][qi] - base);
            dst[0] = mx;
            dst[1] = sum;
        }
        __syncthreads(); /* wm, wl and wo are rewritten for the next query */
    }
}

/* One block per (query, head): the chunks' partial results merged. */
__global__ static void attention_merge_kernel(float *out, const float *part, int n, int hd, int q_stride, int splits)
{
    const int qi = blockIdx.x, h = blockIdx.y, heads = gridDim.y;
    float mx = -INFINITY;
    for (int c = 0; c < splits; c++)
        mx = fmaxf(mx, part[(((size_t)c * n + qi) * heads + h) * part_floats(hd)]);
    float sum = 0.0f;
    for (int c = 0; c < splits; c++) {
        const float *p = part + (((size_t)c * n + qi) * heads + h) * part_floats(hd);
        sum += p[1] * exp2f(p[0] - mx);
    }
    const float inv = 1.0f / sum; /* key 0 is visible to every query: sum > 0 */
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int c = 0; c < splits; c++) {
            const float *p = part + (((size_t)c * n + qi) * heads + h) * part_floats(hd);
            o += p[2 + d] * exp2f(p[0] - mx);
        }
        out[(size_t)qi * q_stride + (size_t)h * hd + d] = o * inv;
    }
}

/* Chunks: blocks for about four waves of the GPU (loads in flight), at least SPLIT_MIN_KEYS keys each. */
static int split_count(int keys, int heads)
{
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
            sms = 108;
    }
    int splits = (4 * sms + heads - 1) / heads;
    const int most = (keys + SPLIT_MIN_KEYS - 1) / SPLIT_MIN_KEYS;
    if (splits > most)
        splits = most;
    return splits > 0 ? splits : 1;
}

extern "C" size_t ra_cuda_attention_work_bytes(int start, int n, const struct ra_attention_shape *s)
{
    if (n <= 0 || n > RA_CUDA_ATTN_SPLIT_MAX_Q || s->head_dim <= 0)
        return 0;
    return (size_t)split_count(start + n, s->n_heads) * n * s->n_heads * part_floats(s->head_dim) * sizeof(float);
}

template <typename T>
static int launch_split(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                        const struct ra_attention_shape *s, float *part, cudaStream_t stream)
{
    const int keys = start + n, splits = split_count(keys, s->n_heads);
    const int chunk = (keys + splits - 1) / splits;
    attention_split_kernel<T><<<dim3((unsigned)splits, (unsigned)s->n_heads), SPLIT_WARPS * RA_WARP, 0, stream>>>(
        part, q, (const T *)k_cache, (const T *)v_cache, start, n, s->n_heads / s->n_kv_heads, s->head_dim,
        s->q_stride, s->kv_stride, SPLIT_LOG2E / sqrtf((float)s->head_dim), chunk);
    CUDA_CHECK_LAUNCH();
    attention_merge_kernel<<<dim3((unsigned)n, (unsigned)s->n_heads), 128, 0, stream>>>(out, part, n, s->head_dim,
                                                                                       s->q_stride, splits);
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}

extern "C" int ra_cuda_attention_split(float *out, const float *q, const void *k_cache, const void *v_cache,
                                       int start, int n, const struct ra_attention_shape *s, void *work,
                                       size_t work_bytes, cudaStream_t stream)
{
    const int hd = s->head_dim;
    if (hd <= 0 || hd > RA_CUDA_ATTN_MAX_HEAD_DIM || n > RA_CUDA_ATTN_SPLIT_MAX_Q || s->n_kv_heads <= 0 ||
        s->n_heads % s->n_kv_heads != 0 || (s->kv_dtype != RA_DTYPE_F32 && s->kv_dtype != RA_DTYPE_BF16))
        return ra_error_set(RA_EUNSUPPORTED, "cuda attention (split): %d queries (at most %d), head dimension %d "
                            "(at most %d), heads %d/%d, %s cache rows", n, RA_CUDA_ATTN_SPLIT_MAX_Q, hd,
                            RA_CUDA_ATTN_MAX_HEAD_DIM, s->n_heads, s->n_kv_heads, ra_dtype_name(s->kv_dtype));
    if (n <= 0)
        return RA_OK;
    const size_t need = ra_cuda_attention_work_bytes(start, n, s);
    if (!work || work_bytes < need)
        return ra_error_set(RA_EINVAL, "cuda attention (split): %zu bytes of scratch given, %zu needed", work_bytes,
                            need);
    return s->kv_dtype == RA_DTYPE_BF16
               ? launch_split<__nv_bfloat16>(out, q, k_cache, v_cache, start, n, s, (float *)work, stream)
               : launch_split<float>(out, q, k_cache, v_cache, start, n, s, (float *)work, stream);
}
