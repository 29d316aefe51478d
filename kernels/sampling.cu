/* Sampling on the device. The reductions (argmax, max, sum) run in one block
 * of 1024 threads: a vocabulary is 32k-256k ids, one block streams it in a
 * few microseconds. Top-p sorts the probabilities with CUB's radix sort (the
 * toolkit's own, stable: equal probabilities keep the lower id first), then
 * one thread walks the sorted prefix in order, so the cumulative sums add in
 * the same order as the CPU sampler's. */
#include "common.cuh"
#include "sampling.cuh"

#include <cub/device/device_radix_sort.cuh>

#define SAMPLE_THREADS 1024

struct ra_cuda_sampler {
    int vocab;
    float *probs, *sorted;
    int *ids, *sorted_ids, *token;
    void *temp;
    size_t temp_bytes;
};

/* The first index of the largest value, as ra_argmax: NaN never wins (unless first). */
__device__ static void argmax_block(const float *x, int n, float *best_v, int *best_i)
{
    __shared__ float sv[SAMPLE_THREADS];
    __shared__ int si[SAMPLE_THREADS];
    float bv = x[0];
    int bi = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (x[i] > bv || (i < bi && x[i] == bv))
            bv = x[i], bi = i;
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            const float ov = sv[threadIdx.x + w];
            const int oi = si[threadIdx.x + w];
            if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x]))
                sv[threadIdx.x] = ov, si[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    *best_v = sv[0];
    *best_i = si[0];
    __syncthreads();
}

__global__ static void argmax_kernel(const float *x, int n, int *token)
{
    float v;
    int i;
    argmax_block(x, n, &v, &i);
    if (threadIdx.x == 0)
        *token = i;
}

/* probs = softmax(logits / temperature), as softmax_scaled in src/sampler.c,
 * including its fallback to all mass on the argmax when the top logit or its
 * quotient by the temperature is not finite. ids = 0..n-1 for the sort. */
__global__ static void softmax_kernel(const float *logits, int n, float temperature, float *probs, int *ids)
{
    __shared__ float red[32];
    float top_v;
    int top_i;
    argmax_block(logits, n, &top_v, &top_i);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ids[i] = i;
    if (!isfinite(top_v / temperature) || !isfinite(top_v)) {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            probs[i] = i == top_i ? 1.0f : 0.0f;
        return;
    }
    const float mx = top_v / temperature;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = expf(logits[i] / temperature - mx);
        probs[i] = e;
        sum += e;
    }
    sum = ra_block_sum(sum, red);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        probs[i] /= sum;
}

/* sample_mult: the first id whose cumulative probability exceeds the coin. */
__global__ static void multinomial_kernel(const float *p, int n, float coin, int *token)
{
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += p[i];
        if (coin < cdf) {
            *token = i;
            return;
        }
    }
    *token = n - 1;
}

/* sample_top_p over probabilities already sorted in descending order. */
__global__ static void top_p_kernel(const float *p, const int *ids, int n, float top_p, float coin, int *token)
{
    const float cutoff = (1.0f - top_p) / (float)(n - 1 > 0 ? n - 1 : 1);
    int m = 0;
    while (m < n && p[m] >= cutoff) /* the ids the CPU keeps before sorting: a prefix here */
        m++;
    if (m == 0) {
        *token = ids[0];
        return;
    }
    float cum = 0.0f;
    int last = m - 1;
    for (int i = 0; i < m; i++) {
        cum += p[i];
        if (cum > top_p) {
            last = i;
            break;
        }
    }
    const float r = coin * cum;
    float cdf = 0.0f;
    for (int i = 0; i <= last; i++) {
        cdf += p[i];
        if (r < cdf) {
            *token = ids[i];
            return;
        }
    }
    *token = ids[last];
}

extern "C" void ra_cuda_sampler_free(struct ra_cuda_sampler *s)
{
    if (!s)
        return;
    cudaFree(s->probs);
    cudaFree(s->sorted);
    cudaFree(s->ids);
    cudaFree(s->sorted_ids);
    cudaFree(s->token);
    cudaFree(s->temp);
    free(s);
}

static int sampler_alloc(struct ra_cuda_sampler *s, int vocab)
{
    const size_t n = (size_t)vocab;
    CUDA_CHECK(cudaMalloc((void **)&s->probs, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&s->sorted, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&s->ids, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc((void **)&s->sorted_ids, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc((void **)&s->token, sizeof(int)));
    CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(NULL, s->temp_bytes, s->probs, s->sorted, s->ids,
                                                         s->sorted_ids, vocab));
    CUDA_CHECK(cudaMalloc(&s->temp, s->temp_bytes));
    return RA_OK;
}

extern "C" int ra_cuda_sampler_init(struct ra_cuda_sampler **out, int vocab)
{
    *out = NULL;
    if (vocab <= 0)
        return ra_error_set(RA_EINVAL, "cuda sampler: vocabulary of %d ids", vocab);
    struct ra_cuda_sampler *s = (struct ra_cuda_sampler *)calloc(1, sizeof *s);
    if (!s)
        return ra_error_set(RA_ENOMEM, "cuda sampler: out of memory");
    s->vocab = vocab;
    int rc = sampler_alloc(s, vocab);
    if (rc != RA_OK) {
        ra_cuda_sampler_free(s);
        return rc;
    }
    *out = s;
    return RA_OK;
}

extern "C" int ra_cuda_sample(struct ra_cuda_sampler *s, const float *logits, float temperature, float top_p,
                              float coin, cudaStream_t stream, int *token)
{
    const int n = s->vocab;
    if (temperature == 0.0f) {
        argmax_kernel<<<1, SAMPLE_THREADS, 0, stream>>>(logits, n, s->token);
        CUDA_CHECK_LAUNCH();
    } else {
        softmax_kernel<<<1, SAMPLE_THREADS, 0, stream>>>(logits, n, temperature, s->probs, s->ids);
        CUDA_CHECK_LAUNCH();
        if (top_p >= 1.0f) {
            multinomial_kernel<<<1, 1, 0, stream>>>(s->probs, n, coin, s->token);
            CUDA_CHECK_LAUNCH();
        } else {
            size_t bytes = s->temp_bytes;
            CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(s->temp, bytes, s->probs, s->sorted, s->ids,
                                                                 s->sorted_ids, n, 0, 32, stream));
            top_p_kernel<<<1, 1, 0, stream>>>(s->sorted, s->sorted_ids, n, top_p, coin, s->token);
            CUDA_CHECK_LAUNCH();
        }
    }
    CUDA_CHECK(cudaMemcpyAsync(token, s->token, sizeof(int), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return RA_OK;
}
