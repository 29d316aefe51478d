/* The matmul on block-quantized weights (quant.h's op): the CPU backend's
 * linear layers for Q8_0, Q4_0, Q4_1, Q4_K and Q6_K.
 *
 * Decode (n <= RA_QMM_GEMV_MAX_N tokens) is bound by the weight bytes: the
 * activations are quantized to int8 once and the kernel table's GEMV streams
 * the weights once, rows in chunks handed out dynamically (as the backend's
 * bf16 GEMV: a thread another process delays does not hold up the op), on one
 * thread below RA_QMM_PARALLEL_BYTES where a fork costs more than it saves.
 *
 * Prefill has four paths (enum ra_quant_gemm):
 *   int8: the activations quantized to int8 once (struct ra_qact), then
 *     blocks of rows, handed out dynamically, each packed by its thread into
 *     panels (panel.h) and multiplied by every token with the kernel table's
 *     panel GEMM. A table that cannot take a type's panels (AVX2 and Q8_0)
 *     runs the gemv path instead.
 *   gemv: llama.cpp's scheme: the activations quantized to int8 once, then
 *     the GEMV over groups of 4 tokens on the weights as stored,
 *     cache-blocked: a block of rows that fits L2 is multiplied by every
 *     token group before the next block.
 *   f32: each thread dequantizes panels of rows into fp32 and multiplies them
 *     with cblas_sgemm; activations stay fp32.
 *   bf16: panels of rows dequantized (by every thread) and rounded to bf16
 *     for the backend's bf16 unit (gemm_bf16.h); activations rounded to bf16.
 * The default is chosen by choose_path (the rule and the numbers behind it
 * are there); RA_QUANT_GEMM=int8|f32|bf16|gemv|auto or ra_quant_matmul_set_gemm
 * forces one. */
#include "quant.h"
#include "gemm_bf16.h"
#include "status.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many weight bytes a GEMV runs on one thread. */
#define RA_QMM_PARALLEL_BYTES (256 * 1024)
/* Work items per thread of a parallel GEMV (dynamic schedule). */
#define RA_QMM_CHUNKS_PER_THREAD 8
/* Weight bytes of one int8 prefill block: half of a Zen 4 / Sapphire Rapids
 * core's L2 (1-2 MiB), leaving the rest to the activation blocks streaming
 * past and the outputs. */
#define RA_QMM_L2_BLOCK_BYTES (512 * 1024)
/* Panels of 16 rows a thread packs and multiplies at a time (int8 path):
 * the AVX512-VNNI tile's width, so that every token's activations stream
 * past each 48 rows once; small blocks keep 2 threads even on 576 rows. */
#define RA_QMM_PANELS 3
/* fp32 bytes of one thread's dequantized panel (f32 path). */
#define RA_QMM_F32_PANEL_BYTES (512 * 1024)
/* bf16 bytes of the shared dequantized panel (bf16 path): large enough for
 * the bf16 unit to run on full tiles, small enough to stay in the caches. */
#define RA_QMM_BF16_PANEL_BYTES (4 * 1024 * 1024)

struct ra_quant_matmul {
    const struct ra_quant_kernels *k;
    struct ra_gemm_bf16 *bf16; /* the backend's unit, or NULL; not owned */
    int n_threads;
    enum ra_quant_gemm gemm;   /* forced path, or RA_QUANT_GEMM_AUTO */
    int bf16_allowed;          /* ra_quant_matmul_allow_bf16 */
    void *xq;                  /* quantized activations, xq_bytes */
    size_t xq_bytes;
    void **scratch;            /* [n_threads], scratch_bytes each: a thread's packed panels (int8),
                                  fp32 panel (f32) or fp32 row (bf16); one path per call */
    size_t scratch_bytes;
    uint16_t *bpanel;          /* the bf16 panel, bpanel_count elements */
    size_t bpanel_count;
};

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static const char *const gemm_names[RA_QUANT_GEMM_COUNT] = { "auto", "int8", "f32", "bf16", "gemv" };

const char *ra_quant_gemm_name(enum ra_quant_gemm g)
{
    return (unsigned)g < RA_QUANT_GEMM_COUNT ? gemm_names[g] : "?";
}

int ra_quant_gemm_parse(const char *s, enum ra_quant_gemm *out)
{
    for (int g = RA_QUANT_GEMM_AUTO; g < RA_QUANT_GEMM_COUNT; g++)
        if (strcmp(s, gemm_names[g]) == 0) {
            *out = (enum ra_quant_gemm)g;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "RA_QUANT_GEMM='%s': not one of int8, f32, bf16, gemv, auto", s);
}

int ra_quant_matmul_set_gemm(struct ra_quant_matmul *qm, enum ra_quant_gemm g)
{
    if ((unsigned)g >= RA_QUANT_GEMM_COUNT)
        return ra_error_set(RA_EINVAL, "quantized matmul: no prefill path %d", (int)g);
    if (g == RA_QUANT_GEMM_BF16 && !qm->bf16)
        return ra_error_set(RA_EUNSUPPORTED, "quantized matmul: prefill in bf16 needs a bf16 unit, and there is "
                            "none here (bf16 GEMM: none or --compute-dtype f32)");
    qm->gemm = g;
    return RA_OK;
}

void ra_quant_matmul_allow_bf16(struct ra_quant_matmul *qm, int allow) { qm->bf16_allowed = allow != 0; }

int ra_quant_matmul_set_isa(struct ra_quant_matmul *qm, enum ra_quant_isa isa)
{
    if (!ra_quant_isa_supported(isa))
        return ra_error_set(RA_EUNSUPPORTED, "quantized matmul: this CPU, build or RA_CPU_ISA cannot run the %s "
                            "kernels", ra_quant_isa_name(isa));
    qm->k = ra_quant_kernels_for(isa);
    return RA_OK;
}

int ra_quant_matmul_create(struct ra_quant_matmul **out, int n_threads, struct ra_gemm_bf16 *bf16)
{
    const struct ra_quant_kernels *k;
    int rc = ra_quant_kernels_active(&k);
    if (rc != RA_OK)
        return rc;
    struct ra_quant_matmul *qm = calloc(1, sizeof *qm);
    if (!qm)
        return ra_error_set(RA_ENOMEM, "quantized matmul: out of memory");
    qm->k = k;
    qm->bf16 = bf16;
    qm->n_threads = n_threads > 0 ? n_threads : 1;
    qm->bf16_allowed = 1;
    qm->scratch = calloc((size_t)qm->n_threads, sizeof *qm->scratch);
    const char *env = getenv("RA_QUANT_GEMM");
    enum ra_quant_gemm g = RA_QUANT_GEMM_AUTO;
    if (!qm->scratch)
        rc = ra_error_set(RA_ENOMEM, "quantized matmul: out of memory");
    else if (env && *env && (rc = ra_quant_gemm_parse(env, &g)) == RA_OK)
        rc = ra_quant_matmul_set_gemm(qm, g);
    if (rc != RA_OK) {
        ra_quant_matmul_free(qm);
        return rc;
    }
    *out = qm;
    return RA_OK;
}

void ra_quant_matmul_free(struct ra_quant_matmul *qm)
{
    if (!qm)
        return;
    for (int i = 0; qm->scratch && i < qm->n_threads; i++)
        free(qm->scratch[i]);
    free(qm->scratch);
    free(qm->xq);
    free(qm->bpanel);
    free(qm);
}

/* *buf grown to hold `bytes`, 64-byte aligned (an activation block or a
 * panel row then never straddles more cache lines than it must). */
static int grow(void **buf, size_t *have, size_t bytes, const char *what)
{
    if (bytes <= *have)
        return RA_OK;
    free(*buf);
    *buf = NULL;
    *have = 0;
    if (posix_memalign(buf, 64, bytes) != 0) {
        *buf = NULL;
        return ra_error_set(RA_ENOMEM, "quantized matmul: cannot allocate %zu bytes of %s", bytes, what);
    }
    *have = bytes;
    return RA_OK;
}

/* Every thread's scratch buffer holds at least `bytes` (of `what`, for the
 * error). */
static int ensure_scratch(struct ra_quant_matmul *qm, size_t bytes, const char *what)
{
    if (bytes <= qm->scratch_bytes)
        return RA_OK;
    for (int i = 0; i < qm->n_threads; i++) {
        size_t have = 0;
        int rc = grow(&qm->scratch[i], &have, bytes, what);
        if (rc != RA_OK) {
            qm->scratch_bytes = 0;
            return rc;
        }
    }
    qm->scratch_bytes = bytes;
    return RA_OK;
}

/* ------------------------------------------------------------------ int8 */

/* The n tokens of x quantized into qm->xq, act_bytes apart (in parallel
 * when there are enough of them to pay for a fork). */
static int quantize_x(struct ra_quant_matmul *qm, const float *x, int ldx, enum ra_dtype wt, int64_t k, int n,
                      int nt)
{
    const size_t act_bytes = ra_quant_act_row_bytes(wt, k);
    int rc = grow(&qm->xq, &qm->xq_bytes, act_bytes * (size_t)n, "quantized activations");
    if (rc != RA_OK)
        return rc;
    const struct ra_quant_kernels *kt = qm->k;
    char *xq = qm->xq;
#pragma omp parallel for schedule(static) if (nt > 1 && (int64_t)n * k >= 65536) num_threads(nt)
    for (int t = 0; t < n; t++)
        kt->quantize_act(xq + (size_t)t * act_bytes, x + (size_t)t * ldx, k, wt);
    return RA_OK;
}

/* Rows [r0, r0 + nr) of every token: the GEMV over groups of up to 4 tokens,
 * which share each load of the block's weights. */
static void gemv_rows(const struct ra_quant_matmul *qm, float *y, int ldy, const struct ra_tensor *w, int n,
                      int64_t r0, int64_t nr)
{
    const enum ra_dtype wt = w->dtype;
    const int64_t k = w->cols;
    const size_t act_bytes = ra_quant_act_row_bytes(wt, k), row_bytes = ra_dtype_row_bytes(wt, k);
    const char *wr = (const char *)w->data + (size_t)r0 * row_bytes;
    for (int t = 0; t < n; t += RA_QMM_GEMV_MAX_N) {
        const int g = n - t < RA_QMM_GEMV_MAX_N ? n - t : RA_QMM_GEMV_MAX_N;
        qm->k->gemv(y + (size_t)t * ldy + r0, ldy, (const char *)qm->xq + (size_t)t * act_bytes, g, wr, wt, nr, k);
    }
}

/* Decode and the int8 prefill: quantize x, then blocks of rows on up to
 * nt threads, dynamically. A block is the smaller of what fits
 * RA_QMM_L2_BLOCK_BYTES (prefill: every token group reuses it from L2) and
 * an even share of the work items (decode: RA_QMM_CHUNKS_PER_THREAD each). */
static int matmul_int8(struct ra_quant_matmul *qm, float *y, int ldy, const float *x, int ldx,
                       const struct ra_tensor *w, int n, int n_threads)
{
    const int64_t rows = w->rows, k = w->cols;
    const size_t row_bytes = ra_dtype_row_bytes(w->dtype, k);
    const int nt = (size_t)rows * row_bytes < RA_QMM_PARALLEL_BYTES || rows < 32 ? 1 : n_threads;
    int rc = quantize_x(qm, x, ldx, w->dtype, k, n, nt);
    if (rc != RA_OK)
        return rc;
    if (nt == 1 && n <= RA_QMM_GEMV_MAX_N) {
        gemv_rows(qm, y, ldy, w, n, 0, rows);
        return RA_OK;
    }
    int64_t chunk = (rows + (int64_t)nt * RA_QMM_CHUNKS_PER_THREAD - 1) / ((int64_t)nt * RA_QMM_CHUNKS_PER_THREAD);
    if (n > RA_QMM_GEMV_MAX_N) {
        const int64_t fit = (int64_t)(RA_QMM_L2_BLOCK_BYTES / row_bytes);
        chunk = chunk < fit ? chunk : fit;
    }
    chunk = (chunk + 15) / 16 * 16;
    const int64_t nchunks = (rows + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t r0 = c * chunk;
        gemv_rows(qm, y, ldy, w, n, r0, rows - r0 < chunk ? rows - r0 : chunk);
    }
    return RA_OK;
}

/* ------------------------------------------------------------------ int8 panels */

/* Whether qm's gemm takes panels of wt (AVX2's needs u < 128: not Q8_0). */
static int panel_ok(const struct ra_quant_matmul *qm, enum ra_dtype wt)
{
    return !qm->k->gemm_u7 || ra_qpanel_max_u(wt) < 128;
}


/* The int8 GEMM on panels: x quantized once (struct ra_qact, in parallel),
 * then blocks of RA_QMM_PANELS panels handed out dynamically, each packed by
 * its thread and multiplied by every token. */
static int matmul_panel(struct ra_quant_matmul *qm, float *y, int ldy, const float *x, int ldx,
                        const struct ra_tensor *w, int n, int nt)
{
    const enum ra_dtype wt = w->dtype;
    const int64_t rows = w->rows, k = w->cols;
    const int group = ra_qpanel_group(wt);
    const size_t pbytes = ra_qpanel_bytes(group, k), row_bytes = ra_dtype_row_bytes(wt, k);
    int rc = grow(&qm->xq, &qm->xq_bytes, ra_qact_bytes(k, group, n), "quantized activations");
    if (rc == RA_OK)
        rc = ensure_scratch(qm, pbytes * RA_QMM_PANELS, "packed weights");
    if (rc != RA_OK)
        return rc;
    struct ra_qact a;
    ra_qact_bind(&a, qm->xq, k, group, n);
    const struct ra_quant_kernels *kt = qm->k;
#pragma omp parallel for schedule(static) if (nt > 1 && (int64_t)n * k >= 65536) num_threads(nt)
    for (int t = 0; t < n; t++)
        kt->quantize_qact(&a, t, x + (size_t)t * ldx);
    const int64_t block = RA_QP_ROWS * RA_QMM_PANELS, nblocks = (rows + block - 1) / block;
    void **bufs = qm->scratch;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t b = 0; b < nblocks; b++) {
        const int64_t r0 = b * block, nr = rows - r0 < block ? rows - r0 : block;
        const int np = (int)((nr + RA_QP_ROWS - 1) / RA_QP_ROWS);
        char *buf = bufs[thread_id()];
        for (int p = 0; p < np; p++) {
            const int64_t pr = RA_QP_ROWS * (int64_t)p;
            ra_qpanel_pack(buf + (size_t)p * pbytes, (const char *)w->data + (size_t)(r0 + pr) * row_bytes, wt, k,
                           (int)(nr - pr < RA_QP_ROWS ? nr - pr : RA_QP_ROWS));
        }
        kt->gemm(y + r0, ldy, &a, n, buf, np, (int)nr);
    }
    return RA_OK;
}

/* ------------------------------------------------------------------ f32 */


/* Dequantized panels of rows, one per thread at a time, each multiplied by
 * every token with cblas_sgemm (OpenBLAS single-threaded: the backend sets
 * it so). */
static int matmul_f32(struct ra_quant_matmul *qm, float *y, int ldy, const float *x, int ldx,
                      const struct ra_tensor *w, int n, int nt)
{
    const int64_t rows = w->rows, k = w->cols;
    int64_t prow = (int64_t)(RA_QMM_F32_PANEL_BYTES / (sizeof(float) * (size_t)k)) / 16 * 16;
    prow = prow < 16 ? 16 : prow;
    const int64_t share = ((rows + nt - 1) / nt + 15) / 16 * 16; /* no thread idle on a small matrix */
    prow = prow < share ? prow : share;
    int rc = ensure_scratch(qm, sizeof(float) * (size_t)prow * (size_t)k, "dequantized weights");
    if (rc != RA_OK)
        return rc;
    const size_t row_bytes = ra_dtype_row_bytes(w->dtype, k);
    const int64_t npanels = (rows + prow - 1) / prow;
    const struct ra_quant_kernels *kt = qm->k;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t p = 0; p < npanels; p++) {
        const int64_t r0 = p * prow, nr = rows - r0 < prow ? rows - r0 : prow;
        float *buf = qm->scratch[thread_id()];
        kt->dequantize(buf, (const char *)w->data + (size_t)r0 * row_bytes, w->dtype, nr * k);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, (int)nr, (int)k, 1.0f, x, ldx, buf, (int)k, 0.0f,
                    y + r0, ldy);
    }
    return RA_OK;
}

/* ------------------------------------------------------------------ bf16 */

/* Panels of rows dequantized by every thread and rounded to bf16, each then
 * multiplied on the bf16 unit (which threads itself). RA_EUNSUPPORTED when
 * the unit takes no such shape (the caller goes to the f32 path). */
static int matmul_bf16(struct ra_quant_matmul *qm, float *y, int ldy, const float *x, int ldx,
                       const struct ra_tensor *w, int n, int nt)
{
    const int64_t rows = w->rows, k = w->cols;
    int64_t prow = (int64_t)(RA_QMM_BF16_PANEL_BYTES / (sizeof(uint16_t) * (size_t)k)) / 64 * 64;
    prow = prow < 64 ? 64 : prow;
    if (rows <= prow + prow / 2) /* one panel rather than a small last one */
        prow = rows;
    size_t have = qm->bpanel_count * sizeof(uint16_t);
    int rc = grow((void **)&qm->bpanel, &have, (size_t)prow * (size_t)k * sizeof(uint16_t), "bf16 weights");
    qm->bpanel_count = have / sizeof(uint16_t);
    if (rc == RA_OK)
        rc = ensure_scratch(qm, sizeof(float) * (size_t)k, "dequantized weights"); /* a row in fp32 */
    if (rc != RA_OK)
        return rc;
    const size_t row_bytes = ra_dtype_row_bytes(w->dtype, k);
    const struct ra_quant_kernels *kt = qm->k;
    uint16_t *bp = qm->bpanel;
    for (int64_t r0 = 0; r0 < rows; r0 += prow) {
        const int64_t nr = rows - r0 < prow ? rows - r0 : prow;
        void **rowbuf = qm->scratch;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t r = 0; r < nr; r++) {
            float *row = rowbuf[thread_id()];
            kt->dequantize(row, (const char *)w->data + (size_t)(r0 + r) * row_bytes, w->dtype, k);
            ra_narrow_bf16(bp + r * k, row, (size_t)k);
        }
        rc = ra_gemm_bf16_run(qm->bf16, y + r0, ldy, x, ldx, bp, (int)nr, (int)k, n);
        if (rc != RA_OK)
            return rc;
    }
    return RA_OK;
}

/* ------------------------------------------------------------------ the op */

/* The prefill path for n > RA_QMM_GEMV_MAX_N tokens when none is forced.
 *
 * The rule follows jobs/bench-quant on a Zen 4 core (AVX512-VNNI, AVX512-BF16,
 * oneDNN as the bf16 unit), n = 512, bench-small's, SmolLM2-135M's and
 * TinyLlama-1.1B's shapes (GFLOP/s, maxima of 7 interleaved runs):
 *   - On AVX512-VNNI the panel GEMM beats the bf16 unit on dequantized
 *     panels for every type and shape, 1.2-1.6x on 1 thread (q4_0 2048x768:
 *     266 against 184; q4_k 2048x5632: 263 / 154; q6_k, groups of 16, the
 *     least: 219 / 190), and the GEMV over token groups (~90) and f32 (~95)
 *     by 2.5-3x. AVX-VNNI runs the same tile on ymm: taken on the same
 *     grounds, unmeasured here.
 *   - On the AVX2 kernels (vpmaddubsw) the panel GEMM beats f32 and the GEMV
 *     on the types it takes (q4_0 2048x768: 137 / 91 / 76; q4_k 768x2048:
 *     89 / 54 / 79; q6_k 2048x768: 108 / 91 / 103) but not the bf16 unit
 *     (a CPU with one has AVX512-VNNI too); Q8_0, whose panels it does not
 *     take, dequantizes (f32 ahead of the GEMV: 32 / 19 on q4_0 before).
 *   - Without SIMD every prefill dequantizes (to bf16 where there is a unit):
 *     the portable int8 code is 5-10x behind f32.
 *   - Packing a panel costs about what 16-32 tokens' products do: up to
 *     RA_QMM_INT8_MAX_N tokens the GEMV, which reads the weights as stored,
 *     stays ahead (n = 8: 113-132 against 54-62; n = 16: 63-120 / 44-90). */
static enum ra_quant_gemm choose_path(const struct ra_quant_matmul *qm, enum ra_dtype wt, int n)
{
    const int bf16 = qm->bf16 && qm->bf16_allowed;
    const enum ra_quant_isa isa = qm->k->isa;
    if (qm->gemm != RA_QUANT_GEMM_AUTO)
        return qm->gemm == RA_QUANT_GEMM_BF16 && !bf16 ? RA_QUANT_GEMM_F32 : qm->gemm;
    if (isa == RA_QUANT_ISA_PORTABLE)
        return bf16 ? RA_QUANT_GEMM_BF16 : RA_QUANT_GEMM_F32;
    if (n <= RA_QMM_INT8_MAX_N)
        return RA_QUANT_GEMM_GEMV;
    if (isa != RA_QUANT_ISA_AVX2)
        return RA_QUANT_GEMM_INT8;
    if (bf16)
        return RA_QUANT_GEMM_BF16;
    return panel_ok(qm, wt) ? RA_QUANT_GEMM_INT8 : RA_QUANT_GEMM_F32;
}

enum ra_quant_gemm ra_quant_matmul_prefill_path(const struct ra_quant_matmul *qm, enum ra_dtype wtype)
{
    return choose_path(qm, wtype, RA_QMM_INT8_MAX_N + 1);
}

int ra_quant_matmul(struct ra_quant_matmul *qm, float *y, int ldy, const float *x, int ldx,
                    const struct ra_tensor *w, int n, int n_threads)
{
    const int64_t blk = ra_dtype_block(w->dtype);
    if (!ra_dtype_is_quant(w->dtype))
        return ra_error_set(RA_EINVAL, "quantized matmul: %s weights are not block-quantized",
                            ra_dtype_name(w->dtype));
    if (w->cols <= 0 || w->cols % blk != 0 || w->rows <= 0 || n < 0 || (n > 1 && (w->cols > ldx || w->rows > ldy)))
        return ra_error_set(RA_EINVAL, "quantized matmul: a %lldx%lld %s weight (rows of whole %lld-element "
                            "blocks) against %d tokens with strides %d and %d", (long long)w->rows,
                            (long long)w->cols, ra_dtype_name(w->dtype), (long long)blk, n, ldx, ldy);
    if (w->cols > INT32_MAX / 2 || w->rows > INT32_MAX)
        return ra_error_set(RA_EINVAL, "quantized matmul: a %lldx%lld weight is too large", (long long)w->rows,
                            (long long)w->cols);
    if (n == 0)
        return RA_OK;
    const int nt = n_threads < 1 ? 1 : n_threads > qm->n_threads ? qm->n_threads : n_threads;
    if (n <= RA_QMM_GEMV_MAX_N)
        return matmul_int8(qm, y, ldy, x, ldx, w, n, nt);
    enum ra_quant_gemm path = choose_path(qm, w->dtype, n);
    if (path == RA_QUANT_GEMM_BF16) {
        int rc = matmul_bf16(qm, y, ldy, x, ldx, w, n, nt);
        if (rc != RA_EUNSUPPORTED)
            return rc;
        ra_error_clear();
        path = RA_QUANT_GEMM_F32; /* the unit takes no such shape */
    }
    if (path == RA_QUANT_GEMM_INT8 && panel_ok(qm, w->dtype))
        return matmul_panel(qm, y, ldy, x, ldx, w, n, nt);
    if (path == RA_QUANT_GEMM_INT8 || path == RA_QUANT_GEMM_GEMV)
        return matmul_int8(qm, y, ldy, x, ldx, w, n, nt);
    return matmul_f32(qm, y, ldy, x, ldx, w, n, nt);
}

static void path_words(const struct ra_quant_matmul *qm, enum ra_quant_gemm path, char *buf, size_t size)
{
    if (path == RA_QUANT_GEMM_BF16)
        snprintf(buf, size, "dequantized to bf16 (%s)", ra_gemm_bf16_describe(qm->bf16));
    else if (path == RA_QUANT_GEMM_F32)
        snprintf(buf, size, "dequantized to f32 (OpenBLAS sgemm)");
    else if (path == RA_QUANT_GEMM_GEMV)
        snprintf(buf, size, "int8 %s GEMV", ra_quant_isa_name(qm->k->isa));
    else
        snprintf(buf, size, "int8 %s panels", ra_quant_isa_name(qm->k->isa));
}

/* The five types' prefill paths, each path once with its types listed
 * after it where they differ: "int8 avx2 panels (q4_0, ...), ...". */
static void prefill_words(const struct ra_quant_matmul *qm, char *buf, size_t size)
{
    static const enum ra_dtype types[] = { RA_DTYPE_Q8_0, RA_DTYPE_Q4_0, RA_DTYPE_Q4_1, RA_DTYPE_Q4_K, RA_DTYPE_Q6_K };
    enum { NT = sizeof types / sizeof *types };
    enum ra_quant_gemm path[NT];
    int same = 1;
    for (int i = 0; i < NT; i++) {
        path[i] = choose_path(qm, types[i], RA_QMM_INT8_MAX_N + 1);
        same &= path[i] == path[0];
    }
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < NT && len < size; i++) {
        int first = 1;
        for (int j = 0; j < i; j++)
            first &= path[j] != path[i];
        if (!first)
            continue;
        char words[160];
        path_words(qm, path[i], words, sizeof words);
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", words);
        if (same)
            break;
        for (int j = i; j < NT && len < size; j++)
            if (path[j] == path[i])
                len += (size_t)snprintf(buf + len, size - len, "%s%s", j == i ? " (" : ", ", ra_dtype_name(types[j]));
        if (len < size)
            len += (size_t)snprintf(buf + len, size - len, ")");
    }
}

void ra_quant_matmul_describe(const struct ra_quant_matmul *qm, char *buf, size_t size)
{
    const char *isa = ra_quant_isa_name(qm->k->isa);
    char prefill[320], small[64] = "";
    prefill_words(qm, prefill, sizeof prefill);
    if (qm->gemm == RA_QUANT_GEMM_AUTO && qm->k->isa != RA_QUANT_ISA_PORTABLE)
        snprintf(small, sizeof small, ", int8 %s GEMV up to %d tokens", isa, RA_QMM_INT8_MAX_N);
    snprintf(buf, size, "prefill: %s%s; decode: int8 %s", prefill, small, isa);
}
