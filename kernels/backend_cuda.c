/* The CUDA backend: struct ra_backend_ops on one GPU.
 *
 * Activations and the KV cache are fp32 device buffers, so the forward pass
 * and the transports see the same layout as on the CPU. Weight matrices live
 * on the device in the dtype chosen by --device-dtype (bf16 by default),
 * converted once at ra_context_init; norm weights stay fp32. A GEMM with
 * bf16/f16 weights first narrows its fp32 input into a scratch of the same
 * dtype (cuBLAS takes both operands of one type) and accumulates in fp32
 * (cublasGemmEx, CUBLAS_COMPUTE_32F); fp32 weights run a plain fp32 GEMM.
 *
 * Three streams: compute (every op and the blocking upload/download), copy
 * and comm, ordered against each other with events (copy_async,
 * event_record, stream_wait). The other ops are asynchronous on the compute
 * stream; synchronize() and download() wait for it. */
#include "cuda_check.h"
#include "module.h"
#include "ops.cuh"
#include "quant/quant.h"
#include "status.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ra_event {
    cudaEvent_t ev;
};

struct cuda_backend {
    struct ra_backend base;
    int device;
    enum ra_dtype dtype;          /* of weight matrices on the device */
    cudaStream_t stream[RA_N_STREAMS];
    cublasHandle_t blas;
    void *narrow;                 /* a GEMM's input narrowed to dtype */
    size_t narrow_bytes;
    int32_t *tokens;              /* embed()'s ids on the device */
    int tokens_cap;
    void *att_work;               /* attention's scratch (partial results of decode's split kernel) */
    size_t att_work_bytes;
    int32_t *idx;                 /* positions, row indices or attention's last keys on the device */
    int idx_cap;
};

static struct cuda_backend *cb_of(struct ra_backend *be) { return (struct cuda_backend *)be; }

/* ------------------------------------------------------------ errors */

int ra_cuda_fail(cudaError_t err, const char *expr, const char *file, int line)
{
    int dev = -1;
    cudaGetDevice(&dev);
    return ra_error_set(RA_EBACKEND, "cuda device %d: %s: %s (%s at %s:%d)", dev, cudaGetErrorName(err),
                        cudaGetErrorString(err), expr, file, line);
}

int ra_cublas_fail(cublasStatus_t st, const char *expr, const char *file, int line)
{
    int dev = -1;
    cudaGetDevice(&dev);
    return ra_error_set(RA_EBACKEND, "cuda device %d: cuBLAS %s: %s (%s at %s:%d)", dev, cublasGetStatusName(st),
                        cublasGetStatusString(st), expr, file, line);
}

/* ------------------------------------------------------------ memory */

static void *cuda_alloc_mem(struct ra_backend *be, size_t bytes, enum ra_mem where)
{
    void *p = NULL;
    const size_t n = bytes ? bytes : 1;
    if (where == RA_MEM_HOST)
        return calloc(1, n);
    if (cudaSetDevice(cb_of(be)->device) != cudaSuccess)
        return NULL;
    if (where == RA_MEM_HOST_PINNED) {
        if (cudaMallocHost(&p, n) != cudaSuccess)
            return NULL;
        memset(p, 0, n);
        return p;
    }
    if (cudaMalloc(&p, n) != cudaSuccess)
        return NULL;
    /* Zeroed on the compute stream, and waited for: a plain cudaMemset runs on
     * the legacy stream, which the non-blocking streams do not wait for, so it
     * could land after the first copy into the buffer (weights read as zeros). */
    cudaStream_t s = cb_of(be)->stream[RA_STREAM_COMPUTE];
    if (cudaMemsetAsync(p, 0, n, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_release_mem(struct ra_backend *be, void *buf, enum ra_mem where)
{
    if (!buf)
        return;
    if (where == RA_MEM_HOST)
        free(buf);
    else if (where == RA_MEM_HOST_PINNED)
        cudaFreeHost(buf);
    else
        cudaFree(buf);
}

static enum ra_mem cuda_mem_kind(struct ra_backend *be) { return RA_MEM_DEVICE; }

/* Blocking copies on the compute stream, so they follow the ops before them. */
static int cuda_copy_sync(struct ra_backend *be, void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = cb_of(be)->stream[RA_STREAM_COMPUTE];
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return RA_OK;
}

static int cuda_synchronize(struct ra_backend *be)
{
    CUDA_CHECK(cudaStreamSynchronize(cb_of(be)->stream[RA_STREAM_COMPUTE]));
    return RA_OK;
}

/* Host memory given to it should be pinned for the copy to overlap. */
static int cuda_copy_async(struct ra_backend *be, void *dst, const void *src, size_t bytes, enum ra_stream s)
{
    if ((unsigned)s >= RA_N_STREAMS)
        return ra_error_set(RA_EINVAL, "cuda device %d: no stream %d", cb_of(be)->device, (int)s);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cb_of(be)->stream[s]));
    return RA_OK;
}

/* ------------------------------------------------------------ events */

static int cuda_event_create(struct ra_backend *be, struct ra_event **out)
{
    struct ra_event *e = calloc(1, sizeof *e);
    *out = NULL;
    if (!e)
        return ra_error_set(RA_ENOMEM, "cuda device %d: out of memory for an event", cb_of(be)->device);
    cudaError_t err = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
    if (err != cudaSuccess) {
        free(e);
        return ra_cuda_fail(err, "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
    *out = e;
    return RA_OK;
}

static void cuda_event_destroy(struct ra_backend *be, struct ra_event *e)
{
    if (!e)
        return;
    cudaEventDestroy(e->ev);
    free(e);
}

static int cuda_event_record(struct ra_backend *be, struct ra_event *e, enum ra_stream s)
{
    CUDA_CHECK(cudaEventRecord(e->ev, cb_of(be)->stream[s]));
    return RA_OK;
}

static int cuda_stream_wait(struct ra_backend *be, enum ra_stream s, struct ra_event *e)
{
    CUDA_CHECK(cudaStreamWaitEvent(cb_of(be)->stream[s], e->ev, 0));
    return RA_OK;
}

static int cuda_event_sync(struct ra_backend *be, struct ra_event *e)
{
    CUDA_CHECK(cudaEventSynchronize(e->ev));
    return RA_OK;
}

static void *cuda_stream_native(struct ra_backend *be, enum ra_stream s)
{
    return (unsigned)s < RA_N_STREAMS ? (void *)cb_of(be)->stream[s] : NULL;
}

/* ------------------------------------------------------------ weights */

/* A tensor's device dtype: vectors (norm weights) stay fp32, matrices take the backend's. */
static enum ra_dtype device_dtype(const struct cuda_backend *cb, const struct ra_tensor *t)
{
    return t->rows == 1 ? RA_DTYPE_F32 : cb->dtype;
}

/* Elements converted per chunk: bounds the staging buffer to 64 MiB of fp32
 * (a multiple of every block format's block). */
#define UPLOAD_CHUNK ((size_t)16 << 20)

/* The host bytes of chunk [off, off + m) of t as the device converts them: in
 * place for an element type; a block format's values dequantized into HOST
 * (fp32) first, since the device has no kernels for the blocks. */
static int upload_source(const struct ra_tensor *t, size_t off, size_t m, float *host, const void **src)
{
    if (!ra_dtype_is_quant(t->dtype)) {
        *src = (const char *)t->data + off * ra_dtype_size(t->dtype);
        return RA_OK;
    }
    const size_t first = off / (size_t)ra_dtype_block(t->dtype);
    *src = host;
    return ra_quant_dequantize(t->dtype, (const char *)t->data + first * ra_dtype_block_bytes(t->dtype), host,
                               (int64_t)m);
}

static int upload_converted(struct cuda_backend *cb, void *dst, enum ra_dtype to, const struct ra_tensor *t,
                            size_t count)
{
    const int quant = ra_dtype_is_quant(t->dtype);
    const enum ra_dtype from = quant ? RA_DTYPE_F32 : t->dtype;
    const size_t in_size = ra_dtype_size(from), chunk = count < UPLOAD_CHUNK ? count : UPLOAD_CHUNK;
    cudaStream_t s = cb->stream[RA_STREAM_COMPUTE];
    void *stage = NULL;
    float *host = quant ? malloc(chunk * sizeof *host) : NULL;
    if (quant && !host)
        return ra_error_set(RA_ENOMEM, "cuda device %d: out of memory dequantizing a %s weight", cb->device,
                            ra_dtype_name(t->dtype));
    cudaError_t err = cudaMalloc(&stage, chunk * in_size);
    int rc = err == cudaSuccess ? RA_OK : ra_cuda_fail(err, "cudaMalloc (weights)", __FILE__, __LINE__);
    for (size_t off = 0; off < count && rc == RA_OK; off += chunk) {
        const size_t m = count - off < chunk ? count - off : chunk;
        const void *src = NULL;
        if ((rc = upload_source(t, off, m, host, &src)) != RA_OK)
            break;
        err = cudaMemcpyAsync(stage, src, m * in_size, cudaMemcpyHostToDevice, s);
        if (err != cudaSuccess) {
            rc = ra_cuda_fail(err, "cudaMemcpyAsync (weights)", __FILE__, __LINE__);
            break;
        }
        rc = ra_cuda_convert((char *)dst + off * ra_dtype_size(to), to, 0, stage, from, 0, 1, m, s);
        /* the next chunk overwrites the staging buffer (and the host one) */
        if (rc == RA_OK && (err = cudaStreamSynchronize(s)) != cudaSuccess)
            rc = ra_cuda_fail(err, "cudaStreamSynchronize (weights)", __FILE__, __LINE__);
    }
    cudaFree(stage);
    free(host);
    return rc;
}

/* Every weight gets a device copy: matrices in the --device-dtype, vectors
 * fp32; block-quantized matrices are dequantized on the host on the way. */
static int cuda_weight_prepare(struct ra_backend *be, struct ra_tensor *t, int matmul)
{
    (void)matmul;
    struct cuda_backend *cb = cb_of(be);
    const enum ra_dtype to = device_dtype(cb, t);
    const size_t count = (size_t)t->rows * (size_t)t->cols, bytes = count * ra_dtype_size(to);
    void *dst = cuda_alloc_mem(be, bytes, RA_MEM_DEVICE);
    if (!dst)
        return ra_error_set(RA_ENOMEM, "cuda device %d: cannot allocate %.1f MiB for a %lld x %lld weight", cb->device,
                            (double)bytes / 1048576.0, (long long)t->rows, (long long)t->cols);
    int rc = to == t->dtype ? cuda_copy_sync(be, dst, t->data, bytes) : upload_converted(cb, dst, to, t, count);
    if (rc != RA_OK) {
        cudaFree(dst);
        return rc;
    }
    t->device = dst;
    return RA_OK;
}

static void cuda_weight_release(struct ra_backend *be, struct ra_tensor *t)
{
    cuda_release_mem(be, t->device, RA_MEM_DEVICE);
    t->device = NULL;
}

static int need_device(const struct cuda_backend *cb, const struct ra_tensor *t)
{
    if (t->device)
        return RA_OK;
    return ra_error_set(RA_EINVAL, "cuda device %d: a %lld x %lld weight has no device copy (not attached?)",
                        cb->device, (long long)t->rows, (long long)t->cols);
}

/* ------------------------------------------------------------ ops */

static int cuda_embed(struct ra_backend *be, float *x, const struct ra_tensor *table, const int32_t *tokens, int n)
{
    struct cuda_backend *cb = cb_of(be);
    int rc = need_device(cb, table);
    if (rc != RA_OK)
        return rc;
    if (n > cb->tokens_cap) {
        cudaFree(cb->tokens);
        cb->tokens = NULL;
        cb->tokens_cap = 0;
        CUDA_CHECK(cudaMalloc((void **)&cb->tokens, (size_t)n * sizeof(int32_t)));
        cb->tokens_cap = n;
    }
    /* from pageable memory: returns once TOKENS is staged, so the caller may reuse it */
    CUDA_CHECK(cudaMemcpyAsync(cb->tokens, tokens, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice,
                               cb->stream[RA_STREAM_COMPUTE]));
    return ra_cuda_embed(x, table->device, device_dtype(cb, table), (int)table->cols, cb->tokens, n,
                         cb->stream[RA_STREAM_COMPUTE]);
}

static int ensure_narrow(struct cuda_backend *cb, size_t bytes)
{
    if (bytes <= cb->narrow_bytes)
        return RA_OK;
    cudaFree(cb->narrow);
    cb->narrow = NULL;
    cb->narrow_bytes = 0;
    CUDA_CHECK(cudaMalloc(&cb->narrow, bytes));
    cb->narrow_bytes = bytes;
    return RA_OK;
}

static cudaDataType_t cuda_type(enum ra_dtype dt)
{
    return dt == RA_DTYPE_BF16 ? CUDA_R_16BF : dt == RA_DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* y[n][rows] = x[n][k] · wᵀ, w [rows][k] row-major. In cuBLAS's column-major
 * terms y is a rows x n matrix (leading dimension ldy) = wᵀ(rows x k, w read
 * as a k x rows matrix, transposed) · x (k x n, leading dimension ldx). */
static int cuda_matmul(struct ra_backend *be, float *y, int ldy, const float *x, int ldx, const struct ra_tensor *w,
                       int n)
{
    struct cuda_backend *cb = cb_of(be);
    int rc = need_device(cb, w);
    if (rc != RA_OK)
        return rc;
    const enum ra_dtype dt = device_dtype(cb, w);
    const int rows = (int)w->rows, k = (int)w->cols;
    const void *b = x;
    int ldb = ldx;
    if (dt != RA_DTYPE_F32) {
        if ((rc = ensure_narrow(cb, (size_t)n * k * ra_dtype_size(dt))) != RA_OK)
            return rc;
        rc = ra_cuda_convert(cb->narrow, dt, (size_t)k, x, RA_DTYPE_F32, (size_t)ldx, (size_t)n, (size_t)k,
                             cb->stream[RA_STREAM_COMPUTE]);
        if (rc != RA_OK)
            return rc;
        b = cb->narrow;
        ldb = k;
    }
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, k, &one, w->device, cuda_type(dt), k, b,
                              cuda_type(dt), ldb, &zero, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return RA_OK;
}

static int cuda_rmsnorm(struct ra_backend *be, float *y, const float *x, const struct ra_tensor *weight, int n,
                        int dim, float eps)
{
    struct cuda_backend *cb = cb_of(be);
    int rc = need_device(cb, weight);
    if (rc != RA_OK)
        return rc;
    return ra_cuda_rmsnorm(y, x, weight->device, device_dtype(cb, weight), n, dim, eps,
                           cb->stream[RA_STREAM_COMPUTE]);
}

/* n host ints onto the device (cb->idx), ordered on the compute stream. */
static int upload_idx(struct cuda_backend *cb, const int32_t *host, int n)
{
    if (n > cb->idx_cap) {
        CUDA_CHECK(cudaStreamSynchronize(cb->stream[RA_STREAM_COMPUTE])); /* earlier ops may still read it */
        cudaFree(cb->idx);
        cb->idx = NULL;
        cb->idx_cap = 0;
        CUDA_CHECK(cudaMalloc((void **)&cb->idx, (size_t)n * sizeof(int32_t)));
        cb->idx_cap = n;
    }
    /* from pageable memory: returns once HOST is staged, so the caller may reuse it */
    CUDA_CHECK(cudaMemcpyAsync(cb->idx, host, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice,
                               cb->stream[RA_STREAM_COMPUTE]));
    return RA_OK;
}

static int cuda_rope(struct ra_backend *be, float *x, int ld, const struct ra_rows *rows, int n_heads, int head_dim,
                     const struct ra_rope *r)
{
    struct cuda_backend *cb = cb_of(be);
    int rc;
    if (rows->pos && rows->n > 0 && (rc = upload_idx(cb, rows->pos, rows->n)) != RA_OK)
        return rc;
    return ra_cuda_rope(x, ld, rows->n, n_heads, head_dim, rows->start, rows->pos ? cb->idx : NULL, r->theta,
                        (int)r->style, r->factors, cb->stream[RA_STREAM_COMPUTE]);
}

static int cuda_rope_shift(struct ra_backend *be, void *x, enum ra_dtype dtype, int ld, int n, int n_heads,
                           int head_dim, int delta, const struct ra_rope *r)
{
    return ra_cuda_rope_shift(x, (int)dtype, ld, n, n_heads, head_dim, delta, r->theta, (int)r->style, r->factors,
                              cb_of(be)->stream[RA_STREAM_COMPUTE]);
}

static int cuda_get_rows(struct ra_backend *be, void *dst, const void *src, enum ra_dtype dtype, size_t width,
                         const int32_t *idx, int n)
{
    struct cuda_backend *cb = cb_of(be);
    int rc;
    if (n <= 0)
        return RA_OK;
    if (dtype != RA_DTYPE_F32 && dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "cuda backend: get_rows of %s rows (f32 or bf16)", ra_dtype_name(dtype));
    if ((rc = upload_idx(cb, idx, n)) != RA_OK)
        return rc;
    return ra_cuda_get_rows(dst, src, ra_dtype_size(dtype), width, cb->idx, n, cb->stream[RA_STREAM_COMPUTE]);
}

static int cuda_set_rows(struct ra_backend *be, void *dst, enum ra_dtype dtype, const void *src,
                         enum ra_dtype src_dtype, size_t width, const int32_t *idx, int n)
{
    struct cuda_backend *cb = cb_of(be);
    int rc;
    if (n <= 0)
        return RA_OK;
    if ((rc = upload_idx(cb, idx, n)) != RA_OK)
        return rc;
    return ra_cuda_set_rows(dst, (int)dtype, src, (int)src_dtype, width, cb->idx, n,
                            cb->stream[RA_STREAM_COMPUTE]);
}

/* Position lists: each query's last visible key row (the lists are sorted,
 * so a query's keys are a prefix of the key rows), then the ref kernel. */
static int attention_lists(struct cuda_backend *cb, float *out, const float *q, const struct ra_rows *qr,
                           const void *k_cache, const void *v_cache, const struct ra_rows *kr,
                           const struct ra_attention_shape *s)
{
    int32_t *last = malloc((size_t)qr->n * sizeof *last);
    if (!last)
        return ra_error_set(RA_ENOMEM, "cuda backend: out of memory for %d query positions", qr->n);
    for (int i = 0, j = 0; i < qr->n; i++) {
        const int p = ra_rows_pos(qr, i);
        while (j < kr->n && ra_rows_pos(kr, j) <= p)
            j++;
        last[i] = j - 1;
    }
    int rc = upload_idx(cb, last, qr->n);
    free(last);
    if (rc != RA_OK)
        return rc;
    return ra_cuda_attention_rows(out, q, k_cache, v_cache, cb->idx, qr->n, s, cb->stream[RA_STREAM_COMPUTE]);
}

/* The kernel is chosen per call (attention.cuh); decode's needs scratch for its partial results. */
static int cuda_attention(struct ra_backend *be, float *out, const float *q, const struct ra_rows *qrows,
                          const void *k_cache, const void *v_cache, const struct ra_rows *krows,
                          const struct ra_attention_shape *s)
{
    struct cuda_backend *cb = cb_of(be);
    const int start = qrows->start - krows->start, n = qrows->n;
    if (n <= 0)
        return RA_OK;
    if (qrows->pos || krows->pos || start < 0 || krows->n < start + n) /* else one span over the keys up to it */
        return attention_lists(cb, out, q, qrows, k_cache, v_cache, krows, s);
    const size_t need = ra_cuda_attention_work_bytes(start, n, s);
    if (need > cb->att_work_bytes) {
        /* the compute stream may still read the old scratch */
        CUDA_CHECK(cudaStreamSynchronize(cb->stream[RA_STREAM_COMPUTE]));
        cudaFree(cb->att_work);
    cudaFree(cb->idx);
        cb->att_work = NULL;
        cb->att_work_bytes = 0;
        CUDA_CHECK(cudaMalloc(&cb->att_work, need));
        cb->att_work_bytes = need;
    }
    return ra_cuda_attention(out, q, k_cache, v_cache, start, n, s, cb->att_work, cb->att_work_bytes,
                             cb->stream[RA_STREAM_COMPUTE]);
}

/* K and V rows into a reduced-precision cache (round to nearest even). */
static int cuda_narrow(struct ra_backend *be, void *dst, enum ra_dtype dtype, const float *src, size_t count)
{
    return ra_cuda_convert(dst, (int)dtype, count, src, (int)RA_DTYPE_F32, count, 1, count,
                           cb_of(be)->stream[RA_STREAM_COMPUTE]);
}

static int cuda_swiglu(struct ra_backend *be, float *gate, const float *up, size_t count)
{
    return ra_cuda_swiglu(gate, up, count, cb_of(be)->stream[RA_STREAM_COMPUTE]);
}

static int cuda_add(struct ra_backend *be, float *x, const float *y, size_t count)
{
    return ra_cuda_add(x, y, count, cb_of(be)->stream[RA_STREAM_COMPUTE]);
}

/* ------------------------------------------------------------ life cycle */

static void cuda_destroy(struct ra_backend *be)
{
    struct cuda_backend *cb = cb_of(be);
    cudaSetDevice(cb->device);
    if (cb->stream[RA_STREAM_COMPUTE])
        cudaStreamSynchronize(cb->stream[RA_STREAM_COMPUTE]);
    if (cb->blas)
        cublasDestroy(cb->blas);
    cudaFree(cb->narrow);
    cudaFree(cb->tokens);
    cudaFree(cb->att_work);
    cudaFree(cb->idx);
    for (int i = 0; i < RA_N_STREAMS; i++)
        if (cb->stream[i])
            cudaStreamDestroy(cb->stream[i]);
    free(cb);
}

/* Weights of any dtype (converted to the device dtype on upload);
 * activations f32; the KV cache f32 or bf16; compute in the device dtypes. */
static int cuda_supports(struct ra_backend *be, enum ra_op op, enum ra_dtype dtype)
{
    (void)be;
    switch (op) {
    case RA_OP_EMBED:
    case RA_OP_MATMUL:
    case RA_OP_RMSNORM:
    case RA_OP_WEIGHT_PREPARE:
    case RA_OP_WEIGHTS:
    case RA_OP_NARROW:
    case RA_OP_COMPUTE: return 1;
    case RA_OP_ATTENTION:
    case RA_OP_GET_ROWS:
    case RA_OP_SET_ROWS:
    case RA_OP_ROPE_SHIFT:
    case RA_OP_POSITIONS:
    case RA_OP_KV_CACHE: return dtype == RA_DTYPE_F32 || dtype == RA_DTYPE_BF16;
    default: return dtype == RA_DTYPE_F32;
    }
}

static const struct ra_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .upload = cuda_copy_sync,
    .download = cuda_copy_sync,
    .synchronize = cuda_synchronize,
    .embed = cuda_embed,
    .matmul = cuda_matmul,
    .rmsnorm = cuda_rmsnorm,
    .rope = cuda_rope,
    .attention = cuda_attention,
    .get_rows = cuda_get_rows,
    .set_rows = cuda_set_rows,
    .rope_shift = cuda_rope_shift,
    .narrow = cuda_narrow,
    .swiglu = cuda_swiglu,
    .add = cuda_add,
    .mem_kind = cuda_mem_kind,
    .alloc_mem = cuda_alloc_mem,
    .release_mem = cuda_release_mem,
    .copy_async = cuda_copy_async,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait = cuda_stream_wait,
    .event_sync = cuda_event_sync,
    .stream_native = cuda_stream_native,
    .weight_prepare = cuda_weight_prepare,
    .weight_release = cuda_weight_release,
    .supports = cuda_supports,
};

int ra_cuda_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { /* no driver or no device: not an error here */
        cudaGetLastError();
        return 0;
    }
    return n;
}

void ra_cuda_versions(char *buf, size_t size)
{
    int runtime = 0, driver = 0, nccl = 0, blas[3] = { 0 };
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cublasGetProperty(MAJOR_VERSION, &blas[0]);
    cublasGetProperty(MINOR_VERSION, &blas[1]);
    cublasGetProperty(PATCH_LEVEL, &blas[2]);
    ncclGetVersion(&nccl);
    snprintf(buf, size, "CUDA runtime %d.%d, driver %d.%d, cuBLAS %d.%d.%d, NCCL %d.%d.%d", runtime / 1000,
             runtime % 1000 / 10, driver / 1000, driver % 1000 / 10, blas[0], blas[1], blas[2], nccl / 10000,
             nccl % 10000 / 100, nccl % 100);
}

static int cuda_setup(struct cuda_backend *cb)
{
    CUDA_CHECK(cudaSetDevice(cb->device));
    for (int i = 0; i < RA_N_STREAMS; i++)
        CUDA_CHECK(cudaStreamCreateWithFlags(&cb->stream[i], cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&cb->blas));
    CUBLAS_CHECK(cublasSetStream(cb->blas, cb->stream[RA_STREAM_COMPUTE]));
    /* fp32 GEMMs stay fp32: no TF32 unless asked for (it is not) */
    CUBLAS_CHECK(cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH));
    return RA_OK;
}

int ra_cuda_backend_open(struct ra_backend **out, int device)
{
    *out = NULL;
    const int count = ra_cuda_devices();
    if (device < 0 || device >= count)
        return ra_error_set(RA_EINVAL, "cuda backend: no device %d (%d visible)", device, count);
    struct cuda_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return ra_error_set(RA_ENOMEM, "cuda backend: out of memory");
    cb->base.ops = &cuda_ops;
    cb->base.n_threads = 1; /* host threads of the forward pass's own host work */
    cb->device = device;
    cb->dtype = RA_DTYPE_BF16;
    int rc = cuda_setup(cb);
    if (rc != RA_OK) {
        cuda_destroy(&cb->base);
        return rc;
    }
    *out = &cb->base;
    return RA_OK;
}

int ra_cuda_backend_dtype(struct ra_backend *be, enum ra_dtype dtype)
{
    if (dtype != RA_DTYPE_BF16 && dtype != RA_DTYPE_F16 && dtype != RA_DTYPE_F32)
        return ra_error_set(RA_EINVAL, "cuda backend: unknown weight dtype %d", (int)dtype);
    cb_of(be)->dtype = dtype;
    return RA_OK;
}
