/* Causal attention on the tensor cores: bf16 products, fp32 sums, the loop of
 * FlashAttention-2 in plain CUDA C with mma.sync (sm_80 and later).
 *
 * A block of TC_WARPS warps takes TC_BQ consecutive queries of one head; each
 * warp owns 16 of them, held as bf16 A fragments (pre-scaled by
 * log2(e)/sqrt(head_dim), so the softmax runs on exp2). The block walks the
 * keys in tiles of TC_BK rows, staged in shared memory as bf16 (fp32 cache
 * rows rounded as they are staged, bf16 rows copied), up to its last query's
 * position: tiles above the diagonal are never loaded. Per tile a warp forms
 * its 16 x TC_BK scores with mma (K fragments by ldmatrix), masks the keys
 * after each query's own position (key j is visible to the query at position
 * p iff j <= p), rescales its running max, sum and output (online softmax),
 * and adds P·V with P taken straight from the score registers as the next A
 * operand (V fragments by ldmatrix.trans). Nothing of size n x n is stored.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, lane = 4 * g + t):
 *   A 16x16: a0 = (row g, cols 2t, 2t+1), a1 = (row g+8, same), a2 = (row g, cols 2t+8, 2t+9), a3 = (row g+8, same)
 *   B 16x8:  b0 = (rows 2t, 2t+1, col g), b1 = (rows 2t+8, 2t+9, col g)
 *   C 16x8:  c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g+8, same)
 * so a C tile of scores is, pairwise, the A fragment of P for the next product.
 *
 * Query blocks run last-first, so the longest rows of the causal triangle
 * start first. Each head dimension is its own instantiation (64, 128). */
#include "attention.cuh"
#include "common.cuh"

#include <type_traits>

#define TC_WARPS 4
#define TC_BQ (16 * TC_WARPS) /* queries per block */
#define TC_BK 64              /* keys per tile */
#define TC_PAD 8              /* bf16 of padding per staged row: rows fall 16 bytes apart in the banks */
#define TC_LOG2E 1.4426950408889634f

/* d += a (16x16 bf16, row-major) · b (16x8 bf16, column-major), fp32 accumulation. */
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8x8 bf16 matrices from shared memory: lane i gives the address of row
 * i % 8 of matrix i / 8 (16 bytes, 16-byte aligned); r[m] gets matrix m, each
 * lane holding row lane / 4, columns 2 * (lane % 4) and the next; with .trans,
 * the same of the transposed matrix. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const __nv_bfloat16 *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const __nv_bfloat16 *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Two floats as a bf16 pair, LO in the low half (the lower column or row). */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

/* Four consecutive cache elements as four bf16 (16-byte or 8-byte aligned). */
__device__ __forceinline__ uint2 load4_bf16(const float *p)
{
    const float4 f = *(const float4 *)p;
    return make_uint2(pack_bf16(f.x, f.y), pack_bf16(f.z, f.w));
}

__device__ __forceinline__ uint2 load4_bf16(const __nv_bfloat16 *p) { return *(const uint2 *)p; }

/* Rows [t0, t0 + TC_BK) of K and V (from column col0 of each row) into
 * shared memory as bf16, keys from kv_end on as zeros: four elements a thread
 * at a time, for fp32 rows (rounded here) or bf16 rows. */
template <int D, typename T>
__device__ __forceinline__ void stage_narrow(__nv_bfloat16 (*ks)[D + TC_PAD], __nv_bfloat16 (*vs)[D + TC_PAD],
                                             const T *k, const T *v, int t0, int kv_end, int kv_stride, int col0)
{
    for (int i = threadIdx.x; i < TC_BK * (D / 4); i += TC_WARPS * RA_WARP) {
        const int j = i / (D / 4), c = (i % (D / 4)) * 4, key = t0 + j;
        uint2 kb = make_uint2(0, 0), vb = make_uint2(0, 0);
        if (key < kv_end) {
            const size_t off = (size_t)key * kv_stride + col0 + c;
            kb = load4_bf16(k + off);
            vb = load4_bf16(v + off);
        }
        *(uint2 *)&ks[j][c] = kb;
        *(uint2 *)&vs[j][c] = vb;
    }
}

/* One of K or V for bf16 rows, 16 bytes a load, every load issued before the
 * first store, so that their latencies overlap (faster than stage_narrow,
 * most at head dimension 128: jobs/README.md). */
template <int D>
__device__ __forceinline__ void stage_wide(__nv_bfloat16 (*dst)[D + TC_PAD], const __nv_bfloat16 *src, int t0,
                                           int kv_end, int kv_stride, int col0)
{
    constexpr int PER_ROW = D / 8, CH = TC_BK * PER_ROW / (TC_WARPS * RA_WARP); /* 16-byte chunks a thread */
    uint4 r[CH];
#pragma unroll
    for (int u = 0; u < CH; u++) {
        const int i = threadIdx.x + u * TC_WARPS * RA_WARP, j = i / PER_ROW, c = (i % PER_ROW) * 8;
        r[u] = t0 + j < kv_end ? *(const uint4 *)(src + (size_t)(t0 + j) * kv_stride + col0 + c)
                               : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < CH; u++) {
        const int i = threadIdx.x + u * TC_WARPS * RA_WARP, j = i / PER_ROW, c = (i % PER_ROW) * 8;
        *(uint4 *)&dst[j][c] = r[u];
    }
}

template <int D, typename T>
__global__ static void __launch_bounds__(TC_WARPS * RA_WARP)
attention_tc_kernel(float *out, const float *q, const T *k, const T *v, int start, int n, int group, int q_stride,
                    int kv_stride, float qscale)
{
    __shared__ __align__(16) __nv_bfloat16 ks[TC_BK][D + TC_PAD];
    __shared__ __align__(16) __nv_bfloat16 vs[TC_BK][D + TC_PAD];
    const int warp = threadIdx.x / RA_WARP, lane = threadIdx.x % RA_WARP, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y, col0 = (h / group) * D; /* the KV head's columns in a cache row */
    const int q0 = (gridDim.x - 1 - blockIdx.x) * TC_BQ, wq0 = q0 + warp * 16;
    const int rows[2] = { wq0 + g, wq0 + g + 8 };
    const int kv_end = start + min(q0 + TC_BQ, n); /* keys [0, kv_end) are visible to some query of the block */
    const bool busy = wq0 < n;                   /* the warp has queries (warp-uniform) */
    const int warp_first = start + wq0, warp_last = start + min(wq0 + 15, n - 1);

    /* The warp's queries as A fragments, D/16 steps of 16 columns; rows past n are zeros. */
    uint32_t qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int row = rows[r & 1], c = kk * 16 + 2 * t + (r >> 1) * 8;
            float2 x = make_float2(0.0f, 0.0f);
            if (row < n)
                x = *(const float2 *)(q + (size_t)row * q_stride + (size_t)h * D + c);
            qa[kk][r] = pack_bf16(x.x * qscale, x.y * qscale);
        }
    float o[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++)
        o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f }; /* l: this lane's part of the row sums */

    for (int t0 = 0; t0 < kv_end; t0 += TC_BK) {
        __syncthreads(); /* every warp is done with the previous tile */
        if constexpr (std::is_same<T, __nv_bfloat16>::value) {
            stage_wide<D>(ks, k, t0, kv_end, kv_stride, col0);
            stage_wide<D>(vs, v, t0, kv_end, kv_stride, col0);
        } else
            stage_narrow<D, T>(ks, vs, k, v, t0, kv_end, kv_stride, col0);
        __syncthreads();
        if (!busy || t0 > warp_last) /* no query of the warp sees a key of this tile */
            continue;

        /* S = Q Kᵀ: 8 column tiles of 8 keys; ldmatrix gives b0, b1 of two k-steps. */
        float s[TC_BK / 8][4];
#pragma unroll
        for (int nt = 0; nt < TC_BK / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk += 2) {
                uint32_t b[4];
                ldmatrix_x4(b, &ks[nt * 8 + lane % 8][kk * 16 + (lane / 8) * 8]);
                mma_bf16(s[nt], qa[kk], b[0], b[1]);
                mma_bf16(s[nt], qa[kk + 1], b[2], b[3]);
            }
        }
        /* Keys after a query's own position (and past the cache's rows) are masked. */
        if (t0 + TC_BK - 1 > warp_first) {
#pragma unroll
            for (int nt = 0; nt < TC_BK / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = t0 + nt * 8 + 2 * t + (e & 1), pos = start + rows[e >> 1];
                    if (key > pos || key >= kv_end)
                        s[nt][e] = -INFINITY;
                }
        }
        /* Online softmax per row: the tile's max over the 4 lanes of a row group. */
        float corr[2], base[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < TC_BK / 8; nt++)
                mx = fmaxf(mx, fmaxf(s[nt][2 * i], s[nt][2 * i + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(RA_FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(RA_FULL_MASK, mx, 2));
            const float m_new = fmaxf(m[i], mx);
            base[i] = m_new == -INFINITY ? 0.0f : m_new; /* a row with nothing visible yet stays at zero */
            corr[i] = exp2f(m[i] - base[i]);
            m[i] = m_new;
        }
        float sum[2] = { 0.0f, 0.0f };
#pragma unroll
        for (int nt = 0; nt < TC_BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[nt][e] = exp2f(s[nt][e] - base[e >> 1]);
                sum[e >> 1] += s[nt][e];
            }
        l[0] = l[0] * corr[0] + sum[0];
        l[1] = l[1] * corr[1] + sum[1];
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            o[dt][0] *= corr[0];
            o[dt][1] *= corr[0];
            o[dt][2] *= corr[1];
            o[dt][3] *= corr[1];
        }
        /* O += P V: P's k-step kk is score tiles 2kk and 2kk+1; ldmatrix.trans gives b0, b1 of two d-tiles. */
#pragma unroll
        for (int kk = 0; kk < TC_BK / 16; kk++) {
            const uint32_t pa[4] = { pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                     pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                     pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]) };
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                uint32_t b[4];
                const int mat = lane / 8;
                ldmatrix_x4_trans(b, &vs[kk * 16 + (mat & 1) * 8 + lane % 8][(dt + (mat >> 1)) * 8]);
                mma_bf16(o[dt], pa, b[0], b[1]);
                mma_bf16(o[dt + 1], pa, b[2], b[3]);
            }
        }
    }
    if (!busy)
        return;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float sum = l[i];
        sum += __shfl_xor_sync(RA_FULL_MASK, sum, 1);
        sum += __shfl_xor_sync(RA_FULL_MASK, sum, 2);
        if (rows[i] >= n)
            continue;
        const float inv = 1.0f / sum; /* key 0 is visible to every query: sum > 0 */
        float *dst = out + (size_t)rows[i] * q_stride + (size_t)h * D + 2 * t;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            *(float2 *)(dst + dt * 8) = make_float2(o[dt][2 * i] * inv, o[dt][2 * i + 1] * inv);
    }
}

extern "C" int ra_cuda_attention_tc_takes(const void *k_cache, const void *v_cache, const struct ra_attention_shape *s)
{
    return (s->head_dim == 64 || s->head_dim == 128) && s->n_kv_heads > 0 && s->n_heads % s->n_kv_heads == 0 &&
           (s->kv_dtype == RA_DTYPE_F32 || s->kv_dtype == RA_DTYPE_BF16) && s->kv_stride % 8 == 0 &&
           s->q_stride % 2 == 0 && (uintptr_t)k_cache % 16 == 0 && (uintptr_t)v_cache % 16 == 0;
}

template <int D, typename T>
static int launch_tc(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                     const struct ra_attention_shape *s, cudaStream_t stream)
{
    const dim3 grid((unsigned)((n + TC_BQ - 1) / TC_BQ), (unsigned)s->n_heads);
    attention_tc_kernel<D, T><<<grid, TC_WARPS * RA_WARP, 0, stream>>>(
        out, q, (const T *)k_cache, (const T *)v_cache, start, n, s->n_heads / s->n_kv_heads, s->q_stride,
        s->kv_stride, TC_LOG2E / sqrtf((float)D));
    CUDA_CHECK_LAUNCH();
    return RA_OK;
}

extern "C" int ra_cuda_attention_tc(float *out, const float *q, const void *k_cache, const void *v_cache, int start,
                                    int n, const struct ra_attention_shape *s, cudaStream_t stream)
{
    if (!ra_cuda_attention_tc_takes(k_cache, v_cache, s))
        return ra_error_set(RA_EUNSUPPORTED, "cuda attention (tc): head dimension %d, %s cache rows of %d elements: "
                            "the tensor-core kernel takes head dimensions 64 and 128, f32 or bf16 rows in multiples "
                            "of 8, 16-byte aligned", s->head_dim, ra_dtype_name(s->kv_dtype), s->kv_stride);
    if (n <= 0)
        return RA_OK;
    const bool bf16 = s->kv_dtype == RA_DTYPE_BF16;
    if (s->head_dim == 64)
        return bf16 ? launch_tc<64, __nv_bfloat16>(out, q, k_cache, v_cache, start, n, s, stream)
                    : launch_tc<64, float>(out, q, k_cache, v_cache, start, n, s, stream);
    return bf16 ? launch_tc<128, __nv_bfloat16>(out, q, k_cache, v_cache, start, n, s, stream)
                : launch_tc<128, float>(out, q, k_cache, v_cache, start, n, s, stream);
}
