/* bench-cuda: the CUDA backend's own pieces at one model shape, timed with
 * CUDA events on the backend's compute stream (a GPU is needed; the CUDA
 * build only):
 *   linear     the layer's seven GEMMs as the forward pass runs them (the fp32
 *              input narrowed to bf16, cuBLAS bf16 x bf16, fp32 out), TFLOP/s
 *   attention  prefill at each prompt length over the tensor-core kernel and
 *              the fp32 reference one, causal FLOPs (QKᵀ and PV of the lower
 *              triangle) per second
 *   decode     one query over a cache of that many rows (the split kernel),
 *              GB/s of K and V rows read
 * Medians of --repeat timed runs after one warm-up. With --json, one JSON
 * line per prompt length for jobs/gpu-check, which sets PyTorch's SDPA and
 * cuBLAS beside them (jobs/gpu-anchor.py). */
#include "attention.cuh"
#include "backend_cuda.h"
#include "bench_util.h"
#include "ra_core.h"

#include <cuda_runtime_api.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char bench_name[] = "bench-cuda";

struct shape {
    int dim, hidden, heads, kv_heads;
};

static struct ra_backend *be;
static cudaStream_t stream;

static void cuda_die(cudaError_t e, const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", bench_name, what, cudaGetErrorString(e));
    exit(1);
}

/* Median milliseconds of REPEAT runs of fn(arg), after one untimed. */
static double time_ms(int (*fn)(void *), void *arg, int repeat)
{
    struct bench_samples s = { .n = 0 };
    cudaEvent_t a, b;
    cudaError_t e;
    if ((e = cudaEventCreate(&a)) != cudaSuccess || (e = cudaEventCreate(&b)) != cudaSuccess)
        cuda_die(e, "cudaEventCreate");
    for (int r = -1; r < repeat; r++) {
        cudaEventRecord(a, stream);
        int rc = fn(arg);
        if (rc != RA_OK)
            bench_die("timed call", rc);
        cudaEventRecord(b, stream);
        if ((e = cudaEventSynchronize(b)) != cudaSuccess)
            cuda_die(e, "the timed work");
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (r >= 0)
            bench_add(&s, ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return bench_median(&s);
}

static double or_none(double x) { return isnan(x) ? -1.0 : x; }

static void *device_random(size_t floats)
{
    float *h = malloc(floats * sizeof(float));
    void *d = ra_backend_alloc(be, floats * sizeof(float));
    if (!h || !d)
        bench_die("allocation", RA_ENOMEM);
    for (size_t i = 0; i < floats; i++)
        h[i] = (float)((int)(i * 2654435761u % 2001) - 1000) * 1e-3f;
    int rc = be->ops->upload(be, d, h, floats * sizeof(float));
    if (rc != RA_OK)
        bench_die("upload", rc);
    free(h);
    return d;
}

/* ------------------------------------------------------------ linear layers */

struct linear {
    struct ra_tensor w[7];
    float *x, *y;
    int n;
};

static int run_linear(void *arg)
{
    struct linear *L = arg;
    int rc = RA_OK;
    for (int i = 0; i < 7 && rc == RA_OK; i++)
        rc = be->ops->matmul(be, L->y, (int)L->w[i].rows, L->x, (int)L->w[i].cols, &L->w[i], L->n);
    return rc;
}

/* ------------------------------------------------------------ attention */

struct attn {
    struct ra_attention_shape s;
    float *q, *out;
    void *k, *v, *work;
    size_t work_bytes;
    int start, n, kernel; /* 0 tc, 1 ref, 2 split */
};

static int run_attention(void *arg)
{
    struct attn *A = arg;
    if (A->kernel == 0)
        return ra_cuda_attention_tc(A->out, A->q, A->k, A->v, A->start, A->n, &A->s, stream);
    if (A->kernel == 1)
        return ra_cuda_attention_ref(A->out, A->q, A->k, A->v, A->start, A->n, &A->s, stream);
    return ra_cuda_attention_split(A->out, A->q, A->k, A->v, A->start, A->n, &A->s, A->work, A->work_bytes, stream);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-cuda [--dim N --hidden N --heads N --kv-heads N] [--tokens N,N,...] [--repeat N]\n"
               "                  [--kv-dtype f32|bf16] [--no-ref] [--json] [--device N]\n\n"
               "The CUDA backend's linear layers (bf16 weights), its attention kernels (tensor-core and\n"
               "fp32 reference prefill, split decode) at one model shape, timed with CUDA events.\n"
               "Default shape: tinyllama-1.1b (2048, 5632, 32 heads over 4 KV heads of 64).\n");
}

int main(int argc, char **argv)
{
    struct shape sh = { 2048, 5632, 32, 4 };
    int tokens[16] = { 2048, 8192 }, n_tokens = 2, repeat = 5, json = 0, no_ref = 0, device = 0;
    enum ra_dtype kv_dt = RA_DTYPE_F32;
    static const struct option opts[] = {
        { "dim", required_argument, NULL, 'd' },      { "hidden", required_argument, NULL, 'H' },
        { "heads", required_argument, NULL, 'h' },    { "kv-heads", required_argument, NULL, 'k' },
        { "tokens", required_argument, NULL, 't' },   { "repeat", required_argument, NULL, 'r' },
        { "kv-dtype", required_argument, NULL, 'K' }, { "json", no_argument, NULL, 'j' },
        { "no-ref", no_argument, NULL, 'n' },         { "device", required_argument, NULL, 'D' },
        { "help", no_argument, NULL, '?' },           { 0 } };
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        int one[1];
        switch (c) {
        case 'd': bench_parse_list(optarg, one, 1, "--dim"); sh.dim = one[0]; break;
        case 'H': bench_parse_list(optarg, one, 1, "--hidden"); sh.hidden = one[0]; break;
        case 'h': bench_parse_list(optarg, one, 1, "--heads"); sh.heads = one[0]; break;
        case 'k': bench_parse_list(optarg, one, 1, "--kv-heads"); sh.kv_heads = one[0]; break;
        case 't': n_tokens = bench_parse_list(optarg, tokens, 16, "--tokens"); break;
        case 'r': bench_parse_list(optarg, one, 1, "--repeat"); repeat = one[0]; break;
        case 'D': {
            char *end;
            const long d = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || d < 0 || d > 1024) {
                fprintf(stderr, "%s: --device: '%s' is not a device number\n", bench_name, optarg);
                return 2;
            }
            device = (int)d;
            break;
        }
        case 'K':
            if (strcmp(optarg, "f32") && strcmp(optarg, "bf16")) {
                fprintf(stderr, "%s: --kv-dtype: '%s' is not f32 or bf16\n", bench_name, optarg);
                return 2;
            }
            kv_dt = strcmp(optarg, "bf16") ? RA_DTYPE_F32 : RA_DTYPE_BF16;
            break;
        case 'j': json = 1; break;
        case 'n': no_ref = 1; break;
        default: usage(c == '?' && optind > 0 && !strcmp(argv[optind - 1], "--help") ? stdout : stderr); return 2;
        }
    }
    if (sh.dim % sh.heads || sh.heads % sh.kv_heads) {
        fprintf(stderr, "%s: %d heads over %d KV heads do not divide a width of %d\n", bench_name, sh.heads,
                sh.kv_heads, sh.dim);
        return 2;
    }
    const struct ra_backend_params params = { .device = device, .device_dtype = RA_DTYPE_BF16 };
    int rc = ra_backend_open(&be, "cuda", &params);
    if (rc != RA_OK)
        bench_die("--device", rc);
    stream = (cudaStream_t)be->ops->stream_native(be, RA_STREAM_COMPUTE);
    const int hd = sh.dim / sh.heads, kvd = sh.kv_heads * hd;
    int max_n = 0;
    for (int i = 0; i < n_tokens; i++)
        max_n = tokens[i] > max_n ? tokens[i] : max_n;

    /* The layer's weights as the model's: q, k, v, o, gate, up, down; bf16 on the device. */
    struct linear L = { .n = 0 };
    const int64_t rows[7] = { sh.dim, kvd, kvd, sh.dim, sh.hidden, sh.hidden, sh.dim };
    const int64_t cols[7] = { sh.dim, sh.dim, sh.dim, sh.dim, sh.dim, sh.dim, sh.hidden };
    double linear_flop_per_token = 0;
    for (int i = 0; i < 7; i++) {
        float *h = calloc((size_t)rows[i] * cols[i], sizeof(float));
        if (!h)
            bench_die("allocation", RA_ENOMEM);
        for (int64_t j = 0; j < rows[i] * cols[i]; j++)
            h[j] = (float)((j * 40503) % 2001 - 1000) * 1e-4f;
        L.w[i] = (struct ra_tensor){ RA_DTYPE_F32, rows[i], cols[i], h, NULL };
        if ((rc = be->ops->weight_prepare(be, &L.w[i], 1)) != RA_OK)
            bench_die("weights", rc);
        free(h);
        L.w[i].data = NULL;
        linear_flop_per_token += 2.0 * (double)rows[i] * (double)cols[i];
    }
    L.x = device_random((size_t)max_n * sh.hidden);
    L.y = device_random((size_t)max_n * sh.hidden);

    struct attn A = { .s = { sh.heads, sh.kv_heads, hd, sh.dim, kvd, kv_dt } };
    A.q = device_random((size_t)max_n * sh.dim);
    A.out = device_random((size_t)max_n * sh.dim);
    A.k = device_random((size_t)max_n * kvd); /* as floats: room for either dtype */
    A.v = device_random((size_t)max_n * kvd);
    A.work_bytes = ra_cuda_attention_work_bytes(max_n - 1, 1, &A.s);
    if (cudaMalloc(&A.work, A.work_bytes) != cudaSuccess)
        bench_die("scratch", RA_ENOMEM);

    char dev[256];
    ra_cuda_describe(dev, sizeof dev);
    if (!json) {
        printf("# runahead bench-cuda: %s\n", dev);
        printf("# shape: width %d, FFN %d, %d heads over %d KV heads of %d; %s KV rows; medians of %d runs\n",
               sh.dim, sh.hidden, sh.heads, sh.kv_heads, hd, ra_dtype_name(kv_dt), repeat);
        printf("# %7s %12s %12s %13s %14s\n", "tokens", "linear TF/s", "attn-tc TF/s", "attn-ref TF/s",
               "decode GB/s");
    }
    const size_t kv_row_bytes = (size_t)kvd * ra_dtype_size(kv_dt);
    for (int i = 0; i < n_tokens; i++) {
        const int n = tokens[i];
        L.n = n;
        const double lin_ms = time_ms(run_linear, &L, repeat);
        const double att_flop = 4.0 * sh.heads * hd * ((double)n * (n + 1) / 2);
        A.start = 0;
        A.n = n;
        A.kernel = 0;
        const int tc_ok = ra_cuda_attention_tc_takes(A.k, A.v, &A.s);
        const double tc_ms = tc_ok ? time_ms(run_attention, &A, repeat) : NAN;
        A.kernel = 1;
        const double ref_ms = no_ref ? NAN : time_ms(run_attention, &A, repeat);
        A.kernel = 2;
        A.start = n - 1;
        A.n = 1;
        const double dec_ms = time_ms(run_attention, &A, repeat);
        const double lin_tf = linear_flop_per_token * n / lin_ms * 1e-9, tc_tf = att_flop / tc_ms * 1e-9;
        const double ref_tf = att_flop / ref_ms * 1e-9, dec_gbs = 2.0 * n * kv_row_bytes / dec_ms * 1e-6;
        if (json) /* a kernel not run is -1 */
            printf("{\"tokens\": %d, \"linear_ms\": %.4f, \"linear_tflops\": %.2f, \"attn_tc_ms\": %.4f, "
                   "\"attn_tc_tflops\": %.2f, \"attn_ref_ms\": %.4f, \"attn_ref_tflops\": %.3f, "
                   "\"decode_attn_ms\": %.4f, \"decode_attn_gbs\": %.1f}\n",
                   n, lin_ms, lin_tf, or_none(tc_ms), or_none(tc_tf), or_none(ref_ms), or_none(ref_tf), dec_ms,
                   dec_gbs);
        else
            printf("  %7d %12.1f %12.1f %13.2f %14.0f\n", n, lin_tf, tc_tf, ref_tf, dec_gbs);
        fflush(stdout);
    }
    ra_backend_free(be);
    return 0;
}
