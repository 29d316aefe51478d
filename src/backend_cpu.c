/* The CPU backend: host memory, OpenBLAS for the GEMMs, hand-written kernels
 * for the rest, OpenMP for every thread.
 *
 * Why one threading runtime: OpenBLAS's pthreads spin for a while after each
 * call, and on a machine with as many threads as cores they then fight the
 * OpenMP threads of the next kernel. So OpenBLAS runs single-threaded and each
 * OpenMP thread multiplies its own block of output columns (on bench-small at
 * 2 threads this runs one layer's GEMMs at 99% of OpenBLAS's own threading).
 * Weights stored as f16/bf16 are widened block by block into a per-thread
 * scratch. A decode step (up to GEMV_MAX_N tokens; also a prompt's
 * classifier) is memory bound: it goes to the kernel table's GEMV, which
 * streams the weights once in their stored dtype (bf16/f16 widened in
 * registers: half the bytes of f32), rows in chunks handed out dynamically.
 *
 * Thread policy for decode: an op below GEMV_PARALLEL_BYTES of weights runs
 * on one thread (a team's fork/join costs microseconds); larger ones split
 * into GEMV_CHUNKS_PER_THREAD chunks per thread, dynamically, so that a
 * thread that another process delays (2 cores shared with other jobs: the
 * "2 threads slower than 1" of a loaded run came from every statically split
 * op waiting at its barrier for a descheduled thread) does not hold up the
 * op. OMP_WAIT_POLICY stays the runtime's default: with passive waits the
 * threads sleep between the ~100 ops of a step and wake late for each
 * (2-thread decode much slower: jobs/README.md).
 *
 * With bf16 compute (backend.h: enum ra_compute) the linear layers are
 * bf16 x bf16 -> fp32 GEMMs on the CPU's bf16 unit (gemm_bf16.h): bf16
 * weights straight from the mapping, f32 or f16 ones from a bf16 copy made
 * once at attach (weight_prepare, kept in w->device: half the f32 bytes).
 *
 * Attention and the small ops come from the kernel table of the instruction
 * set chosen at run time (cpu_kernels.h); RoPE keeps the cos/sin table of the
 * current span, so at 512+ tokens the small ops stay a few percent of a
 * forward pass. */
#include "backend.h"
#include "cpu_kernels.h"
#include "gemm_bf16.h"
#include "hugepage.h"
#include "model.h"
#include "quant/quant.h"
#include "status.h"
#include "sysinfo.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Rows of a weight matrix widened at a time (bounds the scratch). */
#define WIDEN_ROWS 256

struct cpu_backend {
    struct ra_backend base;
    const struct ra_cpu_kernels *k;
    struct ra_gemm_bf16 *bf16; /* NULL: no bf16 unit */
    struct ra_quant_matmul *qm; /* block-quantized weights' matmul (quant/quant.h) */
    float **scratch;    /* [n_threads], each WIDEN_ROWS x max cols */
    size_t scratch_floats;
    /* RoPE's cos/sin of the last span or position list, [n][head_dim/2]
     * each: every layer's q and k rotate the same positions, so the table is
     * computed once a pass. A list's positions are kept to recognise it. */
    float *rope_cos, *rope_sin;
    size_t rope_floats;
    int rope_pos0, rope_n, rope_head_dim;
    int32_t *rope_list; /* the tables' list (rope_listed), capacity rope_list_cap */
    int rope_listed, rope_list_cap;
    float rope_theta;
    int rope_scaled;                          /* the tables' key covers the factors too */
    float rope_factors[RA_ROPE_MAX_PAIRS];
    /* A decode step's activations rounded to bf16 for a bf16-compute GEMV
     * (as the bf16 unit rounds them), kept as bf16 and as fp32 values. */
    uint16_t *gemv_xb;
    float *gemv_xr;
    size_t gemv_floats;
};

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static void cpu_destroy(struct ra_backend *be)
{
    struct cpu_backend *cb = (struct cpu_backend *)be;
    for (int i = 0; cb->scratch && i < cb->base.n_threads; i++)
        free(cb->scratch[i]);
    free(cb->scratch);
    ra_quant_matmul_free(cb->qm);
    ra_gemm_bf16_free(cb->bf16);
    free(cb->rope_cos);
    free(cb->rope_sin);
    free(cb->rope_list);
    free(cb->gemv_xb);
    free(cb->gemv_xr);
    free(cb);
}

/* KV caches and weight copies: in huge pages from 2 MiB (hugepage.h). Every kind is host memory. */
static void *cpu_alloc_mem(struct ra_backend *be, size_t bytes, enum ra_mem where)
{
    void *p = ra_huge_alloc(bytes);
    if (p)
        memset(p, 0, bytes); /* after the hint, so that first touch takes huge pages */
    return p;
}

static void cpu_release_mem(struct ra_backend *be, void *buf, enum ra_mem where) { free(buf); }

static int cpu_copy(struct ra_backend *be, void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    return RA_OK;
}

static int cpu_synchronize(struct ra_backend *be) { return RA_OK; }

/* ------------------------------------------------------------------ memory model: the host case
 * Every kind of memory is host memory, every copy is done when it returns, and
 * the host runs every stream in order, so events have nothing to wait for: one
 * static event stands for all of them and each event op is a return. */
struct ra_event {
    char unused;
};
static struct ra_event cpu_event;

static enum ra_mem cpu_mem_kind(struct ra_backend *be) { return RA_MEM_HOST; }

static int cpu_copy_async(struct ra_backend *be, void *dst, const void *src, size_t bytes, enum ra_stream s)
{
    memcpy(dst, src, bytes);
    return RA_OK;
}

static int cpu_event_create(struct ra_backend *be, struct ra_event **ev)
{
    *ev = &cpu_event;
    return RA_OK;
}

static void cpu_event_destroy(struct ra_backend *be, struct ra_event *ev) {}

static int cpu_event_record(struct ra_backend *be, struct ra_event *ev, enum ra_stream s) { return RA_OK; }

static int cpu_stream_wait(struct ra_backend *be, enum ra_stream s, struct ra_event *ev) { return RA_OK; }

static int cpu_event_sync(struct ra_backend *be, struct ra_event *ev) { return RA_OK; }

static void *cpu_stream_native(struct ra_backend *be, enum ra_stream s) { return NULL; }

static void widen(const struct ra_cpu_kernels *k, float *dst, const struct ra_tensor *t, int64_t first, int64_t count)
{
    const size_t n = (size_t)count;
    if (t->dtype == RA_DTYPE_F32)
        memcpy(dst, (const float *)t->data + first, n * sizeof(float));
    else if (t->dtype == RA_DTYPE_BF16)
        k->widen_bf16(dst, (const uint16_t *)t->data + first, n);
    else
        k->widen_f16(dst, (const uint16_t *)t->data + first, n);
}

static int cpu_embed(struct ra_backend *be, float *x, const struct ra_tensor *table, const int32_t *tokens, int n)
{
    const struct ra_cpu_kernels *k = ((struct cpu_backend *)be)->k;
    if (ra_dtype_is_quant(table->dtype)) { /* a quantized table: its rows dequantized */
        const struct ra_quant_kernels *qk;
        int rc = ra_quant_kernels_active(&qk);
        if (rc != RA_OK)
            return rc;
        if (table->cols % ra_dtype_block(table->dtype) != 0)
            return ra_error_set(RA_EINVAL, "cpu backend: a %s embedding of %lld columns (not whole blocks)",
                                ra_dtype_name(table->dtype), (long long)table->cols);
        const size_t row_bytes = ra_dtype_row_bytes(table->dtype, table->cols);
        for (int i = 0; i < n; i++)
            qk->dequantize(x + (size_t)i * table->cols, (const char *)table->data + (size_t)tokens[i] * row_bytes,
                           table->dtype, table->cols);
        return RA_OK;
    }
    for (int i = 0; i < n; i++)
        widen(k, x + (size_t)i * table->cols, table, (int64_t)tokens[i] * table->cols, table->cols);
    return RA_OK;
}

static int ensure_scratch(struct cpu_backend *cb, int64_t cols)
{
    size_t need = (size_t)WIDEN_ROWS * (size_t)cols;
    if (need <= cb->scratch_floats)
        return RA_OK;
    for (int i = 0; i < cb->base.n_threads; i++) {
        free(cb->scratch[i]);
        cb->scratch[i] = NULL;
        if (posix_memalign((void **)&cb->scratch[i], 64, need * sizeof(float)) != 0)
            return ra_error_set(RA_ENOMEM, "cpu backend: cannot allocate %zu bytes of widening scratch", need * 4);
    }
    cb->scratch_floats = need;
    return RA_OK;
}

/* y[:n, :rows] = x · wᵀ for w [rows][k] row-major. One token (decode, the
 * classifier of a prompt's last token) is a matrix-vector product: sgemm would
 * first pack all of w, which for the classifier is most of the work. */
static void gemm(float *y, int ldy, const float *x, int ldx, const float *w, int rows, int k, int n)
{
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, k, 1.0f, w, k, x, 1, 0.0f, y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, k, 1.0f, x, ldx, w, k, 0.0f, y, ldy);
}

/* y[:, r0:r1] = x · w[r0:r1]ᵀ for one thread's block of output columns. */
static void matmul_block(struct cpu_backend *cb, float *y, int ldy, const float *x, int ldx,
                         const struct ra_tensor *w, int n, int64_t r0, int64_t r1)
{
    const int64_t k = w->cols;
    if (w->dtype == RA_DTYPE_F32) {
        gemm(y + r0, ldy, x, ldx, (const float *)w->data + r0 * k, (int)(r1 - r0), (int)k, n);
        return;
    }
    float *buf = cb->scratch[thread_id()];
    for (int64_t r = r0; r < r1; r += WIDEN_ROWS) {
        const int64_t rows = r1 - r < WIDEN_ROWS ? r1 - r : WIDEN_ROWS;
        widen(cb->k, buf, w, r * k, rows * k);
        gemm(y + r, ldy, x, ldx, buf, (int)rows, (int)k, n);
    }
}

/* The backend's bf16 copy of an f32 or f16 weight (w->device): in oneDNN's
 * blocked layout where it can pack it, else plain [rows][k]. */
struct bf16_copy {
    uint16_t *plain;
    struct ra_bf16_packed *packed;
};

/* The plain bf16 weights a bf16 GEMM would use for w, or NULL. */
static const uint16_t *bf16_weights(const struct cpu_backend *cb, const struct ra_tensor *w)
{
    if (!cb->bf16 || cb->base.compute == RA_COMPUTE_F32)
        return NULL;
    if (w->device)
        return ((const struct bf16_copy *)w->device)->plain;
    return w->dtype == RA_DTYPE_BF16 ? w->data : NULL;
}

/* RA_GEMV=0 sends decode steps through the GEMM path (sgemv / the bf16
 * unit) instead, for A/B comparisons; read once. */
static int getenv_gemv_off(void)
{
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("RA_GEMV");
        off = e && strcmp(e, "0") == 0;
    }
    return off;
}

/* Decode steps (n <= GEMV_MAX_N tokens) are memory bound: the kernel
 * table's GEMV streams the weights once, in their stored dtype. */
#define GEMV_MAX_N 4
/* Below this many weight bytes a GEMV runs on one thread: a team's fork and
 * join barrier (microseconds, more when a thread waits for a core on a busy
 * machine) would cost more than the split saves. */
#define GEMV_PARALLEL_BYTES (256 * 1024)
/* Rows per work item of a parallel GEMV: large enough to stream (>= 16
 * rows), small enough (8 per thread) that a thread delayed by another
 * process does not hold up the whole op (dynamic schedule). */
#define GEMV_CHUNKS_PER_THREAD 8

static int gemv_threads(const struct ra_backend *be, int64_t rows, int64_t k, enum ra_dtype dt)
{
    const size_t bytes = (size_t)rows * (size_t)k * (dt == RA_DTYPE_F32 ? 4 : 2);
    return bytes < GEMV_PARALLEL_BYTES || rows < 32 ? 1 : be->n_threads;
}

/* Rows [r0, r0 + nr) of a GEMV: x fp32 (ldx apart) with kt->gemv, or, where
 * xb is given, bf16 (packed) with kt->gemv_bf16 and bf16 weights. */
static void gemv_part(const struct ra_cpu_kernels *kt, float *y, int ldy, const float *x, int ldx,
                      const uint16_t *xb, const void *w, enum ra_dtype dt, int64_t r0, int64_t nr, int64_t k, int n)
{
    const size_t esz = dt == RA_DTYPE_F32 ? 4 : 2;
    const void *wr = (const char *)w + (size_t)r0 * (size_t)k * esz;
    if (xb)
        kt->gemv_bf16(y + r0, ldy, xb, n, wr, nr, k);
    else
        kt->gemv(y + r0, ldy, x, ldx, n, wr, dt, nr, k);
}

static void matmul_gemv(const struct cpu_backend *cb, float *y, int ldy, const float *x, int ldx,
                        const uint16_t *xb, const void *w, enum ra_dtype dt, int64_t rows, int64_t k, int n)
{
    const struct ra_cpu_kernels *kt = cb->k;
    const int nt = gemv_threads(&cb->base, rows, k, dt);
    if (nt == 1) {
        gemv_part(kt, y, ldy, x, ldx, xb, w, dt, 0, rows, k, n);
        return;
    }
    int64_t chunk = (rows + (int64_t)nt * GEMV_CHUNKS_PER_THREAD - 1) / ((int64_t)nt * GEMV_CHUNKS_PER_THREAD);
    chunk = (chunk + 15) / 16 * 16;
    const int64_t nchunks = (rows + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t r0 = c * chunk, nr = rows - r0 < chunk ? rows - r0 : chunk;
        gemv_part(kt, y, ldy, x, ldx, xb, w, dt, r0, nr, k, n);
    }
}

static int cpu_matmul(struct ra_backend *be, float *y, int ldy, const float *x, int ldx,
                      const struct ra_tensor *w, int n)
{
    struct cpu_backend *cb = (struct cpu_backend *)be;
    if (ra_dtype_is_quant(w->dtype)) { /* in place, in their blocks */
        ra_quant_matmul_allow_bf16(cb->qm, be->compute != RA_COMPUTE_F32);
        return ra_quant_matmul(cb->qm, y, ldy, x, ldx, w, n, be->n_threads);
    }
    const uint16_t *wb = bf16_weights(cb, w);
    const struct ra_bf16_packed *pw = w->device && cb->bf16 && be->compute != RA_COMPUTE_F32
                                          ? ((const struct bf16_copy *)w->device)->packed
                                          : NULL;
    if (n <= GEMV_MAX_N && !pw && !getenv_gemv_off()) {
        /* bf16 compute reads the bf16 weights (half the bytes); the GEMV
         * keeps the activations in fp32, within the bf16 GEMM's tolerance. */
        if (wb) {
            /* Round the activations to bf16 as the bf16 unit does: products
             * of two bf16 values are exact in fp32, so a decode step equals
             * the GEMM path up to the order of the sums. */
            const size_t kk = (size_t)w->cols, need = kk * (size_t)n;
            if (need > cb->gemv_floats) {
                free(cb->gemv_xb);
                free(cb->gemv_xr);
                /* 64-byte aligned: the GEMV loads 64 bytes of x per weight
                 * load, and malloc's 16-byte alignment split every one of them
                 * over two cache lines. */
                if (posix_memalign((void **)&cb->gemv_xb, 64, need * sizeof(uint16_t)) != 0)
                    cb->gemv_xb = NULL;
                if (posix_memalign((void **)&cb->gemv_xr, 64, need * sizeof(float)) != 0)
                    cb->gemv_xr = NULL;
                cb->gemv_floats = cb->gemv_xb && cb->gemv_xr ? need : 0;
                if (!cb->gemv_floats)
                    return ra_error_set(RA_ENOMEM, "cpu backend: out of memory for %zu activations", need);
            }
            for (int t = 0; t < n; t++) {
                ra_narrow_bf16(cb->gemv_xb + t * kk, x + (size_t)t * ldx, kk);
                if (!cb->k->gemv_bf16)
                    cb->k->widen_bf16(cb->gemv_xr + t * kk, cb->gemv_xb + t * kk, kk);
            }
            matmul_gemv(cb, y, ldy, cb->gemv_xr, (int)kk, cb->k->gemv_bf16 ? cb->gemv_xb : NULL, wb, RA_DTYPE_BF16,
                        w->rows, w->cols, n);
        } else
            matmul_gemv(cb, y, ldy, x, ldx, NULL, w->data, w->dtype, w->rows, w->cols, n);
        return RA_OK;
    }
    if (wb || pw) {
        int rc = pw ? ra_gemm_bf16_run_packed(cb->bf16, y, ldy, x, ldx, pw, n)
                    : ra_gemm_bf16_run(cb->bf16, y, ldy, x, ldx, wb, (int)w->rows, (int)w->cols, n);
        if (rc != RA_EUNSUPPORTED) /* else no unit takes this shape: fp32 below, from w->data */
            return rc;
    }
    if (w->dtype != RA_DTYPE_F32 && ensure_scratch(cb, w->cols) != RA_OK)
        return RA_ENOMEM;
    const int nt = be->n_threads;
    /* Blocks are multiples of 16 so every thread's sgemm stays on full tiles. */
    const int64_t rows = w->rows, per = ((rows + nt - 1) / nt + 15) / 16 * 16;
    if (nt == 1 || (rows < 64 && n < 64)) {
        matmul_block(cb, y, ldy, x, ldx, w, n, 0, rows);
        return RA_OK;
    }
    if (w->dtype == RA_DTYPE_F32 && n >= rows) {
        /* More tokens than output columns: split the tokens. Each thread's
         * sgemm packs all of the operand that is not split, so split the
         * larger one: packing the weights twice costs less than packing the
         * activations twice (measured: jobs/README.md). */
        const int tper = ((n + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel num_threads(nt)
        {
            const int m0 = thread_id() * tper, m1 = m0 + tper < n ? m0 + tper : n;
            if (m0 < m1)
                gemm(y + (size_t)m0 * ldy, ldy, x + (size_t)m0 * ldx, ldx, (const float *)w->data, (int)rows,
                     (int)w->cols, m1 - m0);
        }
        return RA_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        const int64_t r0 = thread_id() * per, r1 = r0 + per < rows ? r0 + per : rows;
        if (r0 < r1)
            matmul_block(cb, y, ldy, x, ldx, w, n, r0, r1);
    }
    return RA_OK;
}

static int cpu_rmsnorm(struct ra_backend *be, float *y, const float *x, const struct ra_tensor *weight,
                       int n, int dim, float eps)
{
    const struct ra_cpu_kernels *k = ((struct cpu_backend *)be)->k;
    float wf[dim];
    widen(k, wf, weight, 0, dim);
    k->rmsnorm(y, x, wf, n, dim, eps, be->n_threads);
    return RA_OK;
}

/* Whether the cached cos/sin tables are those of these positions and
 * frequencies (a list's by its positions, compared whole). */
static int rope_tables_match(const struct cpu_backend *cb, const struct ra_rows *rows, int head_dim,
                             const struct ra_rope *r)
{
    if (!cb->rope_cos || cb->rope_n != rows->n || cb->rope_listed != (rows->pos != NULL) ||
        (rows->pos ? memcmp(cb->rope_list, rows->pos, sizeof(int32_t) * (size_t)rows->n) != 0
                   : cb->rope_pos0 != rows->start) ||
        cb->rope_head_dim != head_dim || cb->rope_theta != r->theta || cb->rope_scaled != (r->factors != NULL))
        return 0;
    return !r->factors || !memcmp(cb->rope_factors, r->factors, (size_t)(head_dim / 2) * sizeof(float));
}

/* cos/sin of rows->n rows at their positions; with `same`, every row at rows->start. */
static int rope_tables(struct ra_backend *be, const struct ra_rows *rows, int same, int head_dim,
                       const struct ra_rope *r)
{
    struct cpu_backend *cb = (struct cpu_backend *)be;
    const int half = head_dim / 2, n = rows->n;
    if (r->factors && half > RA_ROPE_MAX_PAIRS)
        return ra_error_set(RA_EINVAL, "cpu backend: scaled RoPE with head dimension %d (at most %d)", head_dim,
                            2 * RA_ROPE_MAX_PAIRS);
    const size_t need = (size_t)n * half;
    cb->rope_n = -1; /* until the tables are whole */
    if (need > cb->rope_floats) {
        free(cb->rope_cos);
        free(cb->rope_sin);
        cb->rope_cos = malloc(need * sizeof(float));
        cb->rope_sin = malloc(need * sizeof(float));
        cb->rope_floats = 0;
        if (!cb->rope_cos || !cb->rope_sin)
            return ra_error_set(RA_ENOMEM, "cpu backend: cannot allocate the RoPE table for %d positions", n);
        cb->rope_floats = need;
    }
    float freq[half];
    for (int j = 0; j < half; j++) { /* as llama2.c computes it, so the golden tokens match */
        freq[j] = 1.0f / powf(r->theta, (float)(2 * j) / (float)head_dim);
        if (r->factors)
            freq[j] /= r->factors[j];
    }
    float *cs = cb->rope_cos, *sn = cb->rope_sin;
#pragma omp parallel for schedule(static) if (n > 64) num_threads(be->n_threads)
    for (int i = 0; i < n; i++) {
        const int p = same ? rows->start : ra_rows_pos(rows, i);
        for (int j = 0; j < half; j++) {
            const float a = (float)p * freq[j];
            cs[(size_t)i * half + j] = cosf(a);
            sn[(size_t)i * half + j] = sinf(a);
        }
    }
    if (same)
        return RA_OK;
    if (rows->pos && n > cb->rope_list_cap) { /* without room for the list the tables serve this call only */
        int32_t *grown = realloc(cb->rope_list, sizeof(int32_t) * (size_t)n);
        if (!grown)
            return RA_OK;
        cb->rope_list = grown;
        cb->rope_list_cap = n;
    }
    if (rows->pos)
        memcpy(cb->rope_list, rows->pos, sizeof(int32_t) * (size_t)n);
    cb->rope_listed = rows->pos != NULL;
    cb->rope_pos0 = rows->start;
    cb->rope_n = n;
    cb->rope_head_dim = head_dim;
    cb->rope_theta = r->theta;
    cb->rope_scaled = r->factors != NULL;
    if (r->factors)
        memcpy(cb->rope_factors, r->factors, (size_t)half * sizeof(float));
    return RA_OK;
}

static void rope_apply(struct cpu_backend *cb, float *x, int ld, int n, int n_heads, int head_dim,
                       enum ra_rope_style style)
{
    if (style == RA_ROPE_HALF)
        cb->k->rope_half(x, ld, n, n_heads, head_dim, cb->rope_cos, cb->rope_sin, cb->base.n_threads);
    else
        cb->k->rope(x, ld, n, n_heads, head_dim, cb->rope_cos, cb->rope_sin, cb->base.n_threads);
}

static int cpu_rope(struct ra_backend *be, float *x, int ld, const struct ra_rows *rows, int n_heads, int head_dim,
                    const struct ra_rope *r)
{
    struct cpu_backend *cb = (struct cpu_backend *)be;
    int rc;
    if (rows->n <= 0)
        return RA_OK;
    if (!rope_tables_match(cb, rows, head_dim, r) && (rc = rope_tables(be, rows, 0, head_dim, r)) != RA_OK)
        return rc;
    rope_apply(cb, x, ld, rows->n, n_heads, head_dim, r->style);
    return RA_OK;
}

/* Rotating by delta's angle after p's is rotating by p + delta's: the angles
 * add. f32 rows in place; bf16 rows widened into scratch, rotated, rounded
 * back, a bounded batch of rows at a time. */
static int cpu_rope_shift(struct ra_backend *be, void *x, enum ra_dtype dtype, int ld, int n, int n_heads,
                          int head_dim, int delta, const struct ra_rope *r)
{
    struct cpu_backend *cb = (struct cpu_backend *)be;
    if (dtype != RA_DTYPE_F32 && dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "cpu backend: RoPE shift of %s rows", ra_dtype_name(dtype));
    if (n <= 0 || delta == 0)
        return RA_OK;
    const int batch = n < 256 ? n : 256, width = n_heads * head_dim;
    int rc = rope_tables(be, &(struct ra_rows){ batch, delta, NULL }, 1, head_dim, r);
    if (rc != RA_OK)
        return rc;
    if (dtype == RA_DTYPE_F32) {
        for (int i0 = 0; i0 < n; i0 += batch)
            rope_apply(cb, (float *)x + (size_t)i0 * ld, ld, n - i0 < batch ? n - i0 : batch, n_heads, head_dim,
                       r->style);
        return RA_OK;
    }
    float *tmp = malloc((size_t)batch * width * sizeof(float));
    if (!tmp)
        return ra_error_set(RA_ENOMEM, "cpu backend: out of memory for a RoPE shift of %d rows", batch);
    for (int i0 = 0; i0 < n; i0 += batch) {
        const int nb = n - i0 < batch ? n - i0 : batch;
        uint16_t *rows = (uint16_t *)x + (size_t)i0 * ld;
        for (int i = 0; i < nb; i++)
            cb->k->widen_bf16(tmp + (size_t)i * width, rows + (size_t)i * ld, (size_t)width);
        rope_apply(cb, tmp, width, nb, n_heads, head_dim, r->style);
        for (int i = 0; i < nb; i++)
            cb->k->narrow_bf16(rows + (size_t)i * ld, tmp + (size_t)i * width, (size_t)width, 1);
    }
    free(tmp);
    return RA_OK;
}

static int cpu_attention(struct ra_backend *be, float *out, const float *q, const struct ra_rows *qrows,
                         const void *k_cache, const void *v_cache, const struct ra_rows *krows,
                         const struct ra_attention_shape *s)
{
    return ((struct cpu_backend *)be)->k->attention_rows(out, q, qrows, k_cache, v_cache, krows, s, be->n_threads);
}

static int rows_dtype_ok(enum ra_dtype dt, const char *op)
{
    if (dt != RA_DTYPE_F32 && dt != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "cpu backend: %s of %s rows (f32 or bf16)", op, ra_dtype_name(dt));
    return RA_OK;
}

static int cpu_get_rows(struct ra_backend *be, void *dst, const void *src, enum ra_dtype dtype, size_t width,
                        const int32_t *idx, int n)
{
    (void)be;
    int rc = rows_dtype_ok(dtype, "get_rows");
    const size_t row = width * ra_dtype_size(dtype);
    for (int i = 0; i < n && rc == RA_OK; i++)
        memcpy((char *)dst + (size_t)i * row, (const char *)src + (size_t)idx[i] * row, row);
    return rc;
}

static int cpu_set_rows(struct ra_backend *be, void *dst, enum ra_dtype dtype, const void *src,
                        enum ra_dtype src_dtype, size_t width, const int32_t *idx, int n)
{
    struct cpu_backend *cb = (struct cpu_backend *)be;
    int rc = rows_dtype_ok(dtype, "set_rows");
    if (rc == RA_OK && src_dtype != RA_DTYPE_F32 && src_dtype != dtype)
        rc = ra_error_set(RA_EUNSUPPORTED, "cpu backend: set_rows from %s rows into %s", ra_dtype_name(src_dtype),
                          ra_dtype_name(dtype));
    const size_t row = width * ra_dtype_size(dtype), src_row = width * ra_dtype_size(src_dtype);
    for (int i = 0; i < n && rc == RA_OK; i++) {
        char *d = (char *)dst + (size_t)idx[i] * row;
        const char *sr = (const char *)src + (size_t)i * src_row;
        if (src_dtype == dtype)
            memcpy(d, sr, row);
        else
            cb->k->narrow_bf16((uint16_t *)d, (const float *)sr, width, 1);
    }
    return rc;
}

static int cpu_swiglu(struct ra_backend *be, float *gate, const float *up, size_t count)
{
    ((struct cpu_backend *)be)->k->swiglu(gate, up, count, be->n_threads);
    return RA_OK;
}

static int cpu_add(struct ra_backend *be, float *x, const float *y, size_t count)
{
    ((struct cpu_backend *)be)->k->add(x, y, count, be->n_threads);
    return RA_OK;
}

/* bf16 compute of f32 weights, and of f16 ones (no f16 GEMM unit here): a
 * bf16 copy, made once, in oneDNN's blocked layout where it packs (the same
 * bytes; RA_GEMM_PREPACK=0 keeps it plain). bf16 weights need none: they are
 * used in place, straight from the mapping. */
static int cpu_weight_prepare(struct ra_backend *be, struct ra_tensor *w, int matmul)
{
    struct cpu_backend *cb = (struct cpu_backend *)be;
    if (!matmul || !cb->bf16 || w->device || w->dtype == RA_DTYPE_BF16 || ra_dtype_is_quant(w->dtype) ||
        be->compute == RA_COMPUTE_F32 ||
        (w->dtype == RA_DTYPE_F32 && be->compute != RA_COMPUTE_BF16))
        return RA_OK;
    const size_t count = (size_t)w->rows * (size_t)w->cols;
    uint16_t *copy = NULL;
    if (posix_memalign((void **)&copy, 64, count * sizeof(uint16_t) + 64) != 0)
        return ra_error_set(RA_ENOMEM, "cpu backend: cannot allocate %.1f MiB for a bf16 copy of a %lldx%lld weight",
                            (double)count * 2 / 1048576.0, (long long)w->rows, (long long)w->cols);
    const struct ra_cpu_kernels *k = cb->k;
    const int64_t cols = w->cols;
#pragma omp parallel num_threads(be->n_threads)
    {
        float row[cols];
#pragma omp for schedule(static)
        for (int64_t r = 0; r < w->rows; r++) {
            const float *src = row;
            if (w->dtype == RA_DTYPE_F32)
                src = (const float *)w->data + r * cols;
            else
                k->widen_f16(row, (const uint16_t *)w->data + r * cols, (size_t)cols);
            ra_narrow_bf16(copy + r * cols, src, (size_t)cols);
        }
    }
    struct bf16_copy *c = calloc(1, sizeof *c);
    if (!c) {
        free(copy);
        return ra_error_set(RA_ENOMEM, "cpu backend: out of memory");
    }
    const char *env = getenv("RA_GEMM_PREPACK");
    int rc = RA_EUNSUPPORTED;
    if (!env || strcmp(env, "0") != 0)
        rc = ra_gemm_bf16_pack(cb->bf16, copy, (int)w->rows, (int)cols, &c->packed);
    if (rc == RA_OK)
        free(copy);
    else if (rc == RA_EUNSUPPORTED)
        c->plain = copy;
    else {
        free(copy);
        free(c);
        return rc;
    }
    w->device = c;
    return RA_OK;
}

static void cpu_weight_release(struct ra_backend *be, struct ra_tensor *w)
{
    struct bf16_copy *c = w->device;
    if (c) {
        free(c->plain);
        ra_bf16_packed_free(c->packed);
    }
    free(c);
    w->device = NULL;
}

void ra_backend_cpu_describe_linear(const struct ra_backend *be, char *buf, size_t size)
{
    const struct cpu_backend *cb = (const struct cpu_backend *)be;
    if (cb->bf16 && be->compute != RA_COMPUTE_F32)
        snprintf(buf, size, "%s", ra_gemm_bf16_describe(cb->bf16));
    else if (cb->bf16)
        snprintf(buf, size, "none (--compute-dtype f32)");
    else
        ra_gemm_bf16_units(buf, size);
}

void ra_backend_cpu_describe_quant(const struct ra_backend *be, char *buf, size_t size)
{
    const struct cpu_backend *cb = (const struct cpu_backend *)be;
    ra_quant_matmul_allow_bf16(cb->qm, be->compute != RA_COMPUTE_F32);
    ra_quant_matmul_describe(cb->qm, buf, size);
}

enum ra_dtype ra_backend_cpu_linear_dtype(const struct ra_backend *be, enum ra_dtype weights)
{
    const struct cpu_backend *cb = (const struct cpu_backend *)be;
    if (ra_dtype_is_quant(weights)) { /* prefill's path: the bf16 unit, else sgemm or int8 products into fp32 */
        ra_quant_matmul_allow_bf16(cb->qm, be->compute != RA_COMPUTE_F32);
        return ra_quant_matmul_prefill_path(cb->qm, weights) == RA_QUANT_GEMM_BF16 ? RA_DTYPE_BF16 : RA_DTYPE_F32;
    }
    int bf16 = cb->bf16 && be->compute != RA_COMPUTE_F32 && (be->compute == RA_COMPUTE_BF16 || weights != RA_DTYPE_F32);
    return bf16 ? RA_DTYPE_BF16 : RA_DTYPE_F32;
}

const char *ra_compute_name(enum ra_compute c)
{
    return c == RA_COMPUTE_F32 ? "f32" : c == RA_COMPUTE_BF16 ? "bf16" : "auto";
}

int ra_compute_parse(const char *s, enum ra_compute *out)
{
    for (int c = RA_COMPUTE_AUTO; c <= RA_COMPUTE_BF16; c++)
        if (strcmp(s, ra_compute_name((enum ra_compute)c)) == 0) {
            *out = (enum ra_compute)c;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "--compute-dtype: '%s' is not one of auto, f32, bf16", s);
}

static int cpu_narrow(struct ra_backend *be, void *dst, enum ra_dtype dtype, const float *src, size_t count)
{
    if (dtype == RA_DTYPE_F32)
        memcpy(dst, src, count * sizeof(float));
    else if (dtype == RA_DTYPE_BF16)
        ((struct cpu_backend *)be)->k->narrow_bf16(dst, src, count, be->n_threads);
    else
        return ra_error_set(RA_EUNSUPPORTED, "cpu backend: cannot narrow to %s", ra_dtype_name(dtype));
    return RA_OK;
}

/* Weights in any of the three dtypes (widened or read by a bf16 unit) and
 * in the block formats (matrices and embeddings: ra_quant_matmul, rows
 * dequantized); activations f32; the KV cache f32 or bf16; bf16 compute
 * where the CPU has a bf16 unit (elsewhere bf16 would quietly run in f32). */
static int cpu_supports(struct ra_backend *be, enum ra_op op, enum ra_dtype dtype)
{
    switch (op) {
    case RA_OP_EMBED:
    case RA_OP_MATMUL:
    case RA_OP_WEIGHT_PREPARE:
    case RA_OP_WEIGHTS: return 1;
    case RA_OP_RMSNORM: return !ra_dtype_is_quant(dtype);
    case RA_OP_ATTENTION:
    case RA_OP_NARROW:
    case RA_OP_GET_ROWS:
    case RA_OP_SET_ROWS:
    case RA_OP_ROPE_SHIFT:
    case RA_OP_POSITIONS:
    case RA_OP_KV_CACHE: return dtype == RA_DTYPE_F32 || dtype == RA_DTYPE_BF16;
    case RA_OP_COMPUTE: return dtype == RA_DTYPE_F32 || (dtype == RA_DTYPE_BF16 && ((struct cpu_backend *)be)->bf16);
    default: return dtype == RA_DTYPE_F32;
    }
}

static const struct ra_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .upload = cpu_copy,
    .download = cpu_copy,
    .synchronize = cpu_synchronize,
    .mem_kind = cpu_mem_kind,
    .alloc_mem = cpu_alloc_mem,
    .release_mem = cpu_release_mem,
    .copy_async = cpu_copy_async,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_sync = cpu_event_sync,
    .stream_native = cpu_stream_native,
    .embed = cpu_embed,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .get_rows = cpu_get_rows,
    .set_rows = cpu_set_rows,
    .rope_shift = cpu_rope_shift,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .weight_prepare = cpu_weight_prepare,
    .weight_release = cpu_weight_release,
    .narrow = cpu_narrow,
    .supports = cpu_supports,
};

int ra_backend_cpu_init(struct ra_backend **out, int n_threads)
{
    const struct ra_cpu_kernels *k;
    int rc = ra_cpu_kernels_active(&k);
    if (rc != RA_OK)
        return rc;
    struct cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return ra_error_set(RA_ENOMEM, "cpu backend: out of memory");
    cb->k = k;
    if (n_threads <= 0) /* the CPUs this process may use (taskset, Slurm), not all the node's */
        n_threads = ra_cpus_allowed();
    cb->base.ops = &cpu_ops;
    cb->base.n_threads = n_threads;
    /* One widening scratch slot per thread, however many: the buffers
     * themselves come with the first f16/bf16 matmul. */
    cb->scratch = calloc((size_t)n_threads, sizeof *cb->scratch);
    if (!cb->scratch) {
        free(cb);
        return ra_error_set(RA_ENOMEM, "cpu backend: out of memory for %d threads", n_threads);
    }
    if ((rc = ra_gemm_bf16_create(&cb->bf16, n_threads)) != RA_OK ||
        (rc = ra_quant_matmul_create(&cb->qm, n_threads, cb->bf16)) != RA_OK) {
        ra_gemm_bf16_free(cb->bf16);
        free(cb->scratch);
        free(cb);
        return rc;
    }
    /* Every parallel region names this backend's thread count, never the process-wide default. */
    openblas_set_num_threads(1);
    *out = &cb->base;
    return RA_OK;
}

void ra_backend_free(struct ra_backend *be)
{
    if (be)
        be->ops->destroy(be);
}
