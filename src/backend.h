/* The compute backend interface.
 *
 * The forward pass never dereferences an activation or a KV cache pointer: it
 * asks the backend to allocate them and to run every op on them. The CPU
 * backend (backend_cpu.c) uses host memory, OpenBLAS for the GEMMs and
 * hand-written kernels for the rest; a GPU backend implements the same table
 * with device memory. All float pointers below are backend buffers except
 * where a parameter says "host". */
#ifndef RA_BACKEND_H
#define RA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model.h" /* struct ra_rope */
#include "rows.h"
#include "status.h"

struct ra_tensor;

struct ra_attention_shape {
    int n_heads, n_kv_heads, head_dim;
    int q_stride;   /* floats between query rows (n_heads*head_dim) */
    int kv_stride;  /* elements between cache rows (n_kv_heads*head_dim) */
    enum ra_dtype kv_dtype; /* of the cache rows: RA_DTYPE_F32 (0, the default) or RA_DTYPE_BF16 */
};

struct ra_backend;

/* Where a buffer lives. The KV cache and the activations live where
 * mem_kind() says; pinned host memory is what asynchronous host<->device
 * copies and host-staged transfers between ranks go through. */
enum ra_mem { RA_MEM_HOST = 0, RA_MEM_HOST_PINNED, RA_MEM_DEVICE };

static inline const char *ra_mem_name(enum ra_mem m)
{
    return m == RA_MEM_DEVICE ? "device" : m == RA_MEM_HOST_PINNED ? "pinned host" : "host";
}

/* The backend's queues of work. Compute ops run in order on RA_STREAM_COMPUTE;
 * copies may run beside them on RA_STREAM_COPY, communication (NCCL) on
 * RA_STREAM_COMM. Work on different streams is ordered only by events. */
enum ra_stream { RA_STREAM_COMPUTE = 0, RA_STREAM_COPY, RA_STREAM_COMM, RA_N_STREAMS };

struct ra_event; /* opaque, backend-defined */

/* What ra_backend_supports asks about: an op of struct ra_backend_ops on
 * data of a dtype, or one of the dtypes a run chooses. The dtype is: for
 * EMBED, MATMUL and RMSNORM the weight's; for ATTENTION the KV cache rows';
 * for NARROW the target's; for ROPE, SWIGLU and ADD the activations' (f32);
 * for WEIGHT_PREPARE the weight's; for GET_ROWS, SET_ROWS (the target's) and
 * ROPE_SHIFT the rows'; POSITIONS: rope and attention at position lists
 * (struct ra_rows with pos) over a KV cache of the dtype. KV_CACHE: the cache's rows (--kv-dtype);
 * COMPUTE: what the linear layers compute in (--compute-dtype on the CPU,
 * --device-dtype on CUDA); WEIGHTS: weight matrices as a model file holds
 * them. As ggml's supports_op: ask before a run, instead of failing in it. */
enum ra_op {
    RA_OP_EMBED = 0, RA_OP_MATMUL, RA_OP_RMSNORM, RA_OP_ROPE, RA_OP_ATTENTION, RA_OP_SWIGLU, RA_OP_ADD,
    RA_OP_NARROW, RA_OP_WEIGHT_PREPARE, RA_OP_GET_ROWS, RA_OP_SET_ROWS, RA_OP_ROPE_SHIFT, RA_OP_POSITIONS,
    RA_OP_KV_CACHE, RA_OP_COMPUTE, RA_OP_WEIGHTS,
    RA_N_OPS
};

/* "embed", "matmul", ..., "kv_cache", "compute", "weights" */
const char *ra_op_name(enum ra_op op);

struct ra_backend_ops {
    const char *name;
    void (*destroy)(struct ra_backend *be);

    int (*upload)(struct ra_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*download)(struct ra_backend *be, void *host_dst, const void *src, size_t bytes);
    int (*synchronize)(struct ra_backend *be);

    /* The memory model (as ggml's buffer types): the CPU backend is the host
     * case of it, where every kind is plain host memory, copies are memcpy and
     * events cost nothing. ra_backend_alloc(b) is alloc_mem(b, mem_kind()). */
    enum ra_mem (*mem_kind)(struct ra_backend *be); /* where activations and the KV cache live */
    void *(*alloc_mem)(struct ra_backend *be, size_t bytes, enum ra_mem where); /* zeroed */
    void (*release_mem)(struct ra_backend *be, void *buf, enum ra_mem where);
    /* Any direction, ordered after earlier work on stream s; the host does not wait. */
    int (*copy_async)(struct ra_backend *be, void *dst, const void *src, size_t bytes, enum ra_stream s);
    int (*event_create)(struct ra_backend *be, struct ra_event **ev);
    void (*event_destroy)(struct ra_backend *be, struct ra_event *ev);
    /* ev completes when the work queued on s so far has. */
    int (*event_record)(struct ra_backend *be, struct ra_event *ev, enum ra_stream s);
    /* Later work on s waits for ev; the host does not block. */
    int (*stream_wait)(struct ra_backend *be, enum ra_stream s, struct ra_event *ev);
    /* The host blocks until ev has completed. */
    int (*event_sync)(struct ra_backend *be, struct ra_event *ev);
    /* The native stream behind s (a cudaStream_t, for NCCL); NULL where there is none. */
    void *(*stream_native)(struct ra_backend *be, enum ra_stream s);

    /* x[i][:] = table[tokens[i]][:] for i < n; tokens are host ids already range-checked. */
    int (*embed)(struct ra_backend *be, float *x, const struct ra_tensor *table, const int32_t *tokens, int n);
    /* y[n][w->rows] (row stride ldy) = x[n][w->cols] (row stride ldx) · wᵀ */
    int (*matmul)(struct ra_backend *be, float *y, int ldy, const float *x, int ldx,
                  const struct ra_tensor *w, int n);
    /* y[i] = x[i] / rms(x[i]) * weight, rows of `dim` floats */
    int (*rmsnorm)(struct ra_backend *be, float *y, const float *x, const struct ra_tensor *weight,
                   int n, int dim, float eps);
    /* Rotates the pairs of each head of rows x[i] (stride ld, i < rows->n) at
     * positions p = ra_rows_pos(rows, i): (2j, 2j+1) for RA_ROPE_INTERLEAVED,
     * (j, j + head_dim/2) for RA_ROPE_HALF, pair j by the angle
     * p * theta^(-2j/head_dim) / factors[j] (model.h: struct ra_rope; no
     * factors: the unscaled angle, computed as llama2.c does). */
    int (*rope)(struct ra_backend *be, float *x, int ld, const struct ra_rows *rows, int n_heads, int head_dim,
                const struct ra_rope *rope);
    /* Causal attention of the query rows q (positions qrows) over the key and
     * value rows k_cache, v_cache (row j at position ra_rows_pos(krows, j),
     * elements of s->kv_dtype): query i attends to every key whose position
     * is <= its own (a query before every key gets zeros). A cache is krows
     * {len, first, NULL}; gathered keys a list. Softmax and sums in fp32
     * whatever the cache's dtype. */
    int (*attention)(struct ra_backend *be, float *out, const float *q, const struct ra_rows *qrows,
                     const void *k_cache, const void *v_cache, const struct ra_rows *krows,
                     const struct ra_attention_shape *s);
    /* gate[i] = silu(gate[i]) * up[i] */
    int (*swiglu)(struct ra_backend *be, float *gate, const float *up, size_t count);
    /* x[i] += y[i] */
    int (*add)(struct ra_backend *be, float *x, const float *y, size_t count);

    /* Optional (NULL: the backend reads T->data where the loader left it).
     * ra_context_init calls it once for every weight of the context's copy of
     * the tensors (a tied classifier is the embedding's tensor and shares its
     * copy); MATMUL says whether matmul reads T. The backend may keep its own
     * copy in T->device (device memory on a GPU, a bf16 copy of f32 weights
     * for bf16 compute on the CPU), freed by weight_release, which
     * ra_context_free calls for each T with one. */
    int (*weight_prepare)(struct ra_backend *be, struct ra_tensor *t, int matmul);
    void (*weight_release)(struct ra_backend *be, struct ra_tensor *t);
    /* dst[i] = src[i] rounded to dtype (to nearest even; RA_DTYPE_F32 copies): KV rows into a bf16 cache. */
    int (*narrow)(struct ra_backend *be, void *dst, enum ra_dtype dtype, const float *src, size_t count);

    /* Optional: 1 when the backend runs op on dtype (ra_backend_supports). */
    int (*supports)(struct ra_backend *be, enum ra_op op, enum ra_dtype dtype);
    /* Rows by index (as ggml's get_rows/set_rows), rows of `width` elements;
     * idx: n host indices, each within the indexed buffer's rows.
     * get_rows: dst row i = src row idx[i], both of dtype (f32 or bf16).
     * set_rows: dst row idx[i] = src row i, src of src_dtype (f32, or dtype)
     * rounded to dtype (to nearest even). */
    int (*get_rows)(struct ra_backend *be, void *dst, const void *src, enum ra_dtype dtype, size_t width,
                    const int32_t *idx, int n);
    int (*set_rows)(struct ra_backend *be, void *dst, enum ra_dtype dtype, const void *src, enum ra_dtype src_dtype,
                    size_t width, const int32_t *idx, int n);
    /* Rows x[i] (i < n, stride ld elements of dtype, f32 or bf16) rotated as
     * rope does at some positions p are rotated to p + delta: each pair by
     * delta's angle (the same frequencies, scaling and conventions; bf16 rows
     * are widened, rotated and rounded back). Re-positions stored K rows. */
    int (*rope_shift)(struct ra_backend *be, void *x, enum ra_dtype dtype, int ld, int n, int n_heads, int head_dim,
                      int delta, const struct ra_rope *rope);
};

/* What the linear layers compute in. AUTO: bf16 where the weights are bf16
 * or f16 and the CPU has a bf16 unit (AMX-BF16, AVX512-BF16), else fp32.
 * BF16 also converts f32 weights once, in ra_context_init. F32: always fp32. */
enum ra_compute { RA_COMPUTE_AUTO = 0, RA_COMPUTE_F32, RA_COMPUTE_BF16 };

/* "auto", "f32", "bf16" */
const char *ra_compute_name(enum ra_compute c);
/* RA_EINVAL ("--compute-dtype: ...") unless s is one of those names. */
int ra_compute_parse(const char *s, enum ra_compute *out);

struct ra_backend {
    const struct ra_backend_ops *ops;
    int n_threads;
    enum ra_compute compute; /* set before ra_context_init; AUTO after init */
};

/* The CPU backend; n_threads <= 0 means one per CPU of the process's affinity mask (ra_cpus_allowed).
 * Programs and tests call ra_backend_open instead (tests/layering.sh checks it). */
int ra_backend_cpu_init(struct ra_backend **out, int n_threads);
/* One line on what runs a CPU backend's linear layers in bf16: "oneDNN
 * brg:avx512_core_amx" (the unit of its last bf16 GEMM), or "none (why)". */
void ra_backend_cpu_describe_linear(const struct ra_backend *be, char *buf, size_t size);
/* One line on how a CPU backend multiplies block-quantized weights (ra_quant_matmul_describe):
 * "prefill: dequantized to bf16 (oneDNN ...), ...; decode: int8 avx512vnni". */
void ra_backend_cpu_describe_quant(const struct ra_backend *be, char *buf, size_t size);
/* The dtype a CPU backend's linear layers compute in for weights stored as `weights`, after
 * its compute setting and its bf16 unit: RA_DTYPE_BF16 for bf16 GEMMs, else RA_DTYPE_F32 (block-quantized
 * weights: BF16 where prefill dequantizes them for the bf16 unit, else F32: sgemm on dequantized
 * panels or int8 products, both summed in fp32). */
enum ra_dtype ra_backend_cpu_linear_dtype(const struct ra_backend *be, enum ra_dtype weights);
void ra_backend_free(struct ra_backend *be);

/* 1 when BE runs OP on DTYPE (enum ra_op says what the dtype is of), else 0.
 * A backend without a supports op runs the ops it has, on f32 only. */
int ra_backend_supports(struct ra_backend *be, enum ra_op op, enum ra_dtype dtype);

/* How ra_backend_open makes a backend; RA_BACKEND_PARAMS_INIT gives the defaults. */
struct ra_backend_params {
    int device;       /* CUDA device; -1: local_rank modulo the visible devices */
    int local_rank;   /* the process's index on its node */
    int rank;         /* named in error lines */
    int threads;      /* CPU threads; <= 0: one per CPU of the affinity mask */
    enum ra_compute compute;    /* the CPU's linear layers (--compute-dtype) */
    enum ra_dtype device_dtype; /* weights on a CUDA device (--device-dtype): bf16, f16 or f32 */
    enum ra_dtype kv_dtype;     /* the KV cache the run will use (--kv-dtype): refused unless supported */
};
#define RA_BACKEND_PARAMS_INIT { .device = -1, .device_dtype = RA_DTYPE_BF16 }

/* The one place a program gets a backend. NAME: "cpu", "cuda", or NULL or ""
 * for the default: $RA_BACKEND when set, else cuda where the CUDA module loads
 * and sees a device, else cpu. Errors are one line: an unknown name, a build
 * without CUDA, a node where the module does not load, no device, a device
 * index out of range, a KV dtype the backend does not support. */
int ra_backend_open(struct ra_backend **out, const char *name, const struct ra_backend_params *params);
/* RA_EINVAL ("OPT: 'x' is not cpu or cuda") unless NAME is cpu, cuda, NULL or "". */
int ra_backend_name_check(const char *name, const char *opt);

/* The CUDA backend's loader (kernels/cuda_loader.c, part of the core
 * library; kernels/backend_cuda.h has the rest of its interface). */
/* 1 when the library was built with the CUDA module (configure --with-cuda). */
int ra_cuda_built(void);
/* Loads the module once: RA_OK, or RA_EUNSUPPORTED with one line saying what
 * is missing (the module, or a CUDA library it needs) and where it looked. */
int ra_cuda_load(void);
/* Visible CUDA devices: 0 when none (no driver, no GPU, no module). */
int ra_cuda_device_count(void);
/* A backend on DEVICE (0-based). Weights go to the device as bf16 unless
 * ra_backend_cuda_set_dtype says otherwise; activations are fp32, the KV
 * cache fp32 or bf16 (--kv-dtype). Errors name the device. */
int ra_backend_cuda_init(struct ra_backend **out, int device);
/* The dtype weight matrices take on the device (--device-dtype): bf16 (the
 * default) or f16, with fp32 accumulation, or f32. Norm weights stay fp32.
 * Set it before ra_context_init. */
int ra_backend_cuda_set_dtype(struct ra_backend *be, enum ra_dtype dtype);

/* Zeroed memory of `bytes` where the backend keeps activations and the KV cache (its mem_kind),
 * NULL when out of memory; ra_backend_release frees it (NULL is a no-op). */
static inline void *ra_backend_alloc(struct ra_backend *be, size_t bytes)
{
    return be->ops->alloc_mem(be, bytes, be->ops->mem_kind(be));
}

static inline void ra_backend_release(struct ra_backend *be, void *buf)
{
    be->ops->release_mem(be, buf, be->ops->mem_kind(be));
}

/* Later work on `waiter` waits for what is queued on `s` now, through the event ev. */
static inline int ra_backend_fence(struct ra_backend *be, struct ra_event *ev, enum ra_stream s, enum ra_stream waiter)
{
    int rc = be->ops->event_record(be, ev, s);
    return rc == RA_OK ? be->ops->stream_wait(be, waiter, ev) : rc;
}

/* The host waits for what is queued on `s` now, through the event ev. */
static inline int ra_backend_drain(struct ra_backend *be, struct ra_event *ev, enum ra_stream s)
{
    int rc = be->ops->event_record(be, ev, s);
    return rc == RA_OK ? be->ops->event_sync(be, ev) : rc;
}

#endif
