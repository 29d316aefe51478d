/* bf16 GEMMs for the linear layers: see gemm_bf16.h. */
#include "gemm_bf16.h"
#include "cpu_isa.h"
#include "half.h"
#include "status.h"
#include "timing.h"

#include "config.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef RA_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef RA_HAVE_X86_KERNELS
#include <cpuid.h>
#endif

#ifdef RA_HAVE_BF16_CONVERSIONS
void ra_narrow_bf16_avx512(uint16_t *dst, const float *src, size_t n); /* gemm_bf16_avx512.c */
#endif

#define MAX_PLANS 32

enum unit { UNIT_NONE = 0, UNIT_ONEDNN, UNIT_SBGEMM };

struct plan {
    int n, rows, k, ldy;
    int packed; /* weights in oneDNN's blocked layout wmd */
    enum unit unit;
    char impl[64];
#ifdef RA_HAVE_ONEDNN
    dnnl_memory_desc_t wmd;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst;
#endif
};

struct ra_bf16_packed {
    int rows, k;
    void *data;
#ifdef RA_HAVE_ONEDNN
    dnnl_memory_desc_t md;
#endif
};

struct ra_gemm_bf16 {
    int n_threads;
    int onednn, sbgemm; /* units this context may use */
    struct plan plans[MAX_PLANS];
    int n_plans, next_evict;
    const struct plan *last;
    uint16_t *xb; /* x rounded to bf16, [n][k] */
    size_t xb_elems;
};

/* ---------------------------------------------------------------- CPU features */

#ifdef RA_HAVE_X86_KERNELS
static int xcr0_has(unsigned bits)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) /* OSXSAVE */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & bits) == bits;
}
#endif

/* Read once: the conversion asks per row. */
int ra_cpu_has_avx512_bf16(void)
{
    static int known = -1;
    if (known < 0) {
        known = 0;
#ifdef RA_HAVE_X86_KERNELS
        unsigned a, b, c, d;
        if (ra_cpu_isa_supported(RA_CPU_ISA_AVX512) && __get_cpuid_count(7, 1, &a, &b, &c, &d))
            known = a >> 5 & 1;
#endif
    }
    return known;
}

int ra_cpu_has_amx_bf16(void)
{
#ifdef RA_HAVE_X86_KERNELS
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    /* AMX-BF16 and AMX-TILE, and the OS saving tile state (XCR0 bits 17, 18). */
    return (d >> 22 & 1) && (d >> 24 & 1) && xcr0_has(3u << 17);
#else
    return 0;
#endif
}

/* ---------------------------------------------------------------- unit choice */

/* Why there is no bf16 unit, or NULL if there may be one; *want: RA_GEMM. */
static const char *no_unit_reason(enum unit *forced)
{
    const char *env = getenv("RA_GEMM");
    *forced = UNIT_NONE;
    if (env && *env && strcmp(env, "auto") != 0) {
        if (strcmp(env, "f32") == 0)
            return "RA_GEMM=f32";
        if (strcmp(env, "onednn") == 0)
            *forced = UNIT_ONEDNN;
        else if (strcmp(env, "sbgemm") == 0)
            *forced = UNIT_SBGEMM;
        else
            return "RA_GEMM is not one of auto, onednn, sbgemm, f32";
    }
    enum ra_cpu_isa isa;
    if (ra_cpu_isa_active(&isa) != RA_OK || isa < RA_CPU_ISA_AVX512)
        return "the CPU kernels in use are below avx512 (RA_CPU_ISA)";
    if (!ra_cpu_has_avx512_bf16() && !ra_cpu_has_amx_bf16())
        return "this CPU has neither AVX512-BF16 nor AMX-BF16";
    return NULL;
}

static int have_onednn(void)
{
#ifdef RA_HAVE_ONEDNN
    return 1;
#else
    return 0;
#endif
}

static int have_sbgemm(void)
{
#ifdef HAVE_CBLAS_SBGEMM
    return 1;
#else
    return 0;
#endif
}

void ra_gemm_bf16_units(char *buf, size_t size)
{
    enum unit forced;
    const char *why = no_unit_reason(&forced);
    const int o = have_onednn() && (!forced || forced == UNIT_ONEDNN);
    const int s = have_sbgemm() && (!forced || forced == UNIT_SBGEMM);
    if (!why && !o && !s)
        why = forced ? "RA_GEMM names a library this build lacks" : "built without oneDNN and cblas_sbgemm";
    if (why)
        snprintf(buf, size, "none (%s)", why);
    else
        snprintf(buf, size, "%s%s%s%s", o ? "oneDNN" : "", o && s ? ", " : "", s ? "cblas_sbgemm" : "",
                 ra_cpu_has_amx_bf16() ? " (CPU: AMX-BF16, AVX512-BF16)" : " (CPU: AVX512-BF16)");
}

/* ---------------------------------------------------------------- oneDNN */

#ifdef RA_HAVE_ONEDNN
static dnnl_engine_t engine;
static dnnl_stream_t stream;

/* One engine and stream per process. oneDNN 2.6 treats AMX as "initial
 * support", off unless asked for: ask, before any primitive exists, unless
 * the user limited it (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA). oneDNN itself
 * asks Linux for the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM). */
static int onednn_init(void)
{
    if (engine)
        return RA_OK;
    const char *e1 = getenv("ONEDNN_MAX_CPU_ISA"), *e2 = getenv("DNNL_MAX_CPU_ISA");
    if ((!e1 || !*e1) && (!e2 || !*e2) && ra_cpu_has_amx_bf16())
        dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_amx); /* fails harmlessly if too late */
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        return ra_error_set(RA_EUNSUPPORTED, "oneDNN: cannot create a CPU engine");
    if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(engine);
        engine = NULL;
        return ra_error_set(RA_EUNSUPPORTED, "oneDNN: cannot create a stream");
    }
    return RA_OK;
}

static void set_threads(int n)
{
#ifdef _OPENMP
    omp_set_num_threads(n); /* oneDNN's OpenMP runtime uses the caller's max threads */
#else
    (void)n;
#endif
}

static void onednn_plan_free(struct plan *p)
{
    if (p->prim)
        dnnl_primitive_destroy(p->prim);
    if (p->src)
        dnnl_memory_destroy(p->src);
    if (p->wei)
        dnnl_memory_destroy(p->wei);
    if (p->dst)
        dnnl_memory_destroy(p->dst);
    p->prim = NULL;
    p->src = p->wei = p->dst = NULL;
}

/* A matmul src [n][k] bf16 (dense) x wei (k x rows, element (i, j) at j*k + i:
 * the weights as stored) -> dst [n][rows] f32 with row stride ldy. RA_OK, or
 * RA_EUNSUPPORTED when oneDNN offers only its reference code for it. */
static int onednn_plan(struct ra_gemm_bf16 *g, struct plan *p)
{
    if (onednn_init() != RA_OK)
        return RA_EUNSUPPORTED;
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = "";
    int rc = RA_EUNSUPPORTED;
    set_threads(g->n_threads);
    if (p->packed)
        b = p->wmd;
    if (dnnl_memory_desc_init_by_strides(&a, 2, (dnnl_dims_t){ p->n, p->k }, dnnl_bf16, (dnnl_dims_t){ p->k, 1 }) ||
        (!p->packed && dnnl_memory_desc_init_by_strides(&b, 2, (dnnl_dims_t){ p->k, p->rows }, dnnl_bf16,
                                                        (dnnl_dims_t){ 1, p->k })) ||
        dnnl_memory_desc_init_by_strides(&c, 2, (dnnl_dims_t){ p->n, p->rows }, dnnl_f32,
                                         (dnnl_dims_t){ p->ldy, 1 }) ||
        dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) || dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL))
        goto out;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (!impl || strstr(impl, "ref")) /* reference loops: slower than the fp32 path */
        goto out;
    snprintf(p->impl, sizeof p->impl, "oneDNN %s%s", impl, p->packed ? ", prepacked" : "");
    if (dnnl_primitive_create(&p->prim, pd) || dnnl_memory_create(&p->src, &a, engine, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&p->wei, &b, engine, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&p->dst, &c, engine, DNNL_MEMORY_NONE)) {
        onednn_plan_free(p);
        goto out;
    }
    rc = RA_OK;
out:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return rc;
}

static int onednn_run(struct ra_gemm_bf16 *g, const struct plan *p, float *y, const uint16_t *xb, const uint16_t *w)
{
    set_threads(g->n_threads);
    dnnl_memory_set_data_handle(p->src, (void *)xb);
    dnnl_memory_set_data_handle(p->wei, (void *)w);
    dnnl_memory_set_data_handle(p->dst, y);
    dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, p->src }, { DNNL_ARG_WEIGHTS, p->wei }, { DNNL_ARG_DST, p->dst } };
    if (dnnl_primitive_execute(p->prim, stream, 3, args) != dnnl_success || dnnl_stream_wait(stream) != dnnl_success)
        return ra_error_set(RA_EUNSUPPORTED, "oneDNN: a bf16 matmul %dx%dx%d failed", p->n, p->rows, p->k);
    return RA_OK;
}
#endif

/* ---------------------------------------------------------------- sbgemm */

/* OpenBLAS stays single-threaded in the backend (backend_cpu.c says why):
 * each OpenMP thread multiplies its own block of output columns. */
static void sbgemm_run(struct ra_gemm_bf16 *g, const struct plan *p, float *y, const uint16_t *xb, const uint16_t *w)
{
#ifdef HAVE_CBLAS_SBGEMM
    const int nt = g->n_threads, per = ((p->rows + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#ifdef _OPENMP
        const int r0 = omp_get_thread_num() * per;
#else
        const int r0 = 0;
#endif
        const int r1 = r0 + per < p->rows ? r0 + per : p->rows;
        if (r0 < r1)
            cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->n, r1 - r0, p->k, 1.0f, (const bfloat16 *)xb,
                         p->k, (const bfloat16 *)(w + (size_t)r0 * p->k), p->k, 0.0f, y + r0, p->ldy);
    }
#else
    (void)g, (void)p, (void)y, (void)xb, (void)w;
#endif
}

/* ---------------------------------------------------------------- plans */

static int plan_run(struct ra_gemm_bf16 *g, const struct plan *p, float *y, const uint16_t *xb, const uint16_t *w)
{
#ifdef RA_HAVE_ONEDNN
    if (p->unit == UNIT_ONEDNN)
        return onednn_run(g, p, y, xb, w);
#endif
    sbgemm_run(g, p, y, xb, w);
    return RA_OK;
}

static void plan_free(struct plan *p)
{
#ifdef RA_HAVE_ONEDNN
    onednn_plan_free(p);
#endif
    p->unit = UNIT_NONE;
}

/* The plan for this shape: found, or made. With two units available, the
 * first call of a shape runs both on the caller's operands and keeps the
 * faster (y is overwritten either way). */
static int plan_get(struct ra_gemm_bf16 *g, int n, int rows, int k, int ldy, float *y, const uint16_t *xb,
                    const uint16_t *w, const struct ra_bf16_packed *pw, const struct plan **out)
{
    for (int i = 0; i < g->n_plans; i++) {
        const struct plan *p = &g->plans[i];
        int same_layout = p->packed == (pw != NULL);
#ifdef RA_HAVE_ONEDNN
        if (same_layout && pw)
            same_layout = dnnl_memory_desc_equal(&p->wmd, &pw->md);
#endif
        if (p->n == n && p->rows == rows && p->k == k && p->ldy == ldy && same_layout) {
            *out = p->unit ? p : NULL;
            return p->unit ? RA_OK : RA_EUNSUPPORTED;
        }
    }
    struct plan *p;
    if (g->n_plans < MAX_PLANS) {
        p = &g->plans[g->n_plans++];
    } else {
        p = &g->plans[g->next_evict];
        g->next_evict = (g->next_evict + 1) % MAX_PLANS;
        plan_free(p);
    }
    memset(p, 0, sizeof *p);
    *p = (struct plan){ .n = n, .rows = rows, .k = k, .ldy = ldy, .packed = pw != NULL, .unit = UNIT_NONE };
    int have_dnnl = 0;
#ifdef RA_HAVE_ONEDNN
    if (pw)
        p->wmd = pw->md;
    have_dnnl = g->onednn && onednn_plan(g, p) == RA_OK;
#endif
    if (pw) { /* only oneDNN reads its own layout */
        p->unit = have_dnnl ? UNIT_ONEDNN : UNIT_NONE;
    } else if (have_dnnl && g->sbgemm) {
        p->unit = UNIT_ONEDNN;
        double t0 = ra_wall_s();
        if (plan_run(g, p, y, xb, w) != RA_OK)
            have_dnnl = 0;
        double t_dnnl = ra_wall_s() - t0;
        p->unit = UNIT_SBGEMM;
        t0 = ra_wall_s();
        plan_run(g, p, y, xb, w);
        if (have_dnnl && t_dnnl <= ra_wall_s() - t0)
            p->unit = UNIT_ONEDNN;
    } else if (have_dnnl) {
        p->unit = UNIT_ONEDNN;
    } else if (g->sbgemm) {
        p->unit = UNIT_SBGEMM;
    }
    if (p->unit == UNIT_SBGEMM)
        snprintf(p->impl, sizeof p->impl, "OpenBLAS cblas_sbgemm");
    *out = p->unit ? p : NULL;
    return p->unit ? RA_OK : RA_EUNSUPPORTED;
}

int ra_gemm_bf16_create(struct ra_gemm_bf16 **out, int n_threads)
{
    enum unit forced;
    *out = NULL;
    if (no_unit_reason(&forced))
        return RA_OK;
    const int o = have_onednn() && (!forced || forced == UNIT_ONEDNN);
    const int s = have_sbgemm() && (!forced || forced == UNIT_SBGEMM);
    if (!o && !s)
        return RA_OK;
    struct ra_gemm_bf16 *g = calloc(1, sizeof *g);
    if (!g)
        return ra_error_set(RA_ENOMEM, "bf16 GEMM: out of memory");
    g->n_threads = n_threads > 0 ? n_threads : 1;
    g->onednn = o;
    g->sbgemm = s;
    *out = g;
    return RA_OK;
}

void ra_gemm_bf16_free(struct ra_gemm_bf16 *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_plans; i++)
        plan_free(&g->plans[i]);
    free(g->xb);
    free(g);
}

const char *ra_gemm_bf16_describe(const struct ra_gemm_bf16 *g)
{
    if (!g)
        return "none";
    if (g->last)
        return g->last->impl;
    return g->onednn ? "oneDNN" : "OpenBLAS cblas_sbgemm";
}

void ra_narrow_bf16(uint16_t *dst, const float *src, size_t n)
{
#ifdef RA_HAVE_BF16_CONVERSIONS
    if (ra_cpu_has_avx512_bf16()) {
        ra_narrow_bf16_avx512(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = ra_f32_to_bf16(src[i]);
}

/* Rounds x to bf16 into g->xb: RA_OK or RA_ENOMEM. */
static int convert_x(struct ra_gemm_bf16 *g, const float *x, int ldx, int k, int n)
{
    const size_t need = (size_t)n * (size_t)k;
    if (need > g->xb_elems) {
        free(g->xb);
        g->xb_elems = 0;
        if (posix_memalign((void **)&g->xb, 64, need * sizeof(uint16_t)) != 0) {
            g->xb = NULL;
            return ra_error_set(RA_ENOMEM, "bf16 GEMM: cannot allocate %zu bytes for the activations", need * 2);
        }
        g->xb_elems = need;
    }
    uint16_t *xb = g->xb;
    const int nt = g->n_threads;
#pragma omp parallel for schedule(static) num_threads(nt) if (n > 16 && nt > 1)
    for (int i = 0; i < n; i++)
        ra_narrow_bf16(xb + (size_t)i * k, x + (size_t)i * ldx, (size_t)k);
    return RA_OK;
}

int ra_gemm_bf16_run(struct ra_gemm_bf16 *g, float *y, int ldy, const float *x, int ldx, const uint16_t *w,
                     int rows, int k, int n)
{
    int rc = convert_x(g, x, ldx, k, n);
    const struct plan *p = NULL;
    if (rc == RA_OK)
        rc = plan_get(g, n, rows, k, ldy, y, g->xb, w, NULL, &p);
    if (rc != RA_OK)
        return rc;
    g->last = p;
    return plan_run(g, p, y, g->xb, w);
}

int ra_gemm_bf16_run_packed(struct ra_gemm_bf16 *g, float *y, int ldy, const float *x, int ldx,
                            const struct ra_bf16_packed *w, int n)
{
    int rc = convert_x(g, x, ldx, w->k, n);
    const struct plan *p = NULL;
    if (rc == RA_OK)
        rc = plan_get(g, n, w->rows, w->k, ldy, y, g->xb, w->data, w, &p);
    if (rc != RA_OK)
        return rc;
    g->last = p;
    return plan_run(g, p, y, g->xb, w->data);
}

/* The layout oneDNN's matmul wants for these weights, asked of a primitive
 * for 256 tokens (prefill's blocking); plans for other token counts are then
 * made for that layout and fall back to the fp32 path if oneDNN refuses. */
int ra_gemm_bf16_pack(struct ra_gemm_bf16 *g, const uint16_t *plain, int rows, int k, struct ra_bf16_packed **out)
{
    *out = NULL;
#ifdef RA_HAVE_ONEDNN
    if (!g->onednn || onednn_init() != RA_OK)
        return RA_EUNSUPPORTED;
    dnnl_memory_desc_t a, b, c, bp;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t src = NULL, dst = NULL;
    struct ra_bf16_packed *pw = NULL;
    const char *impl = "";
    int rc = RA_EUNSUPPORTED;
    set_threads(g->n_threads);
    if (dnnl_memory_desc_init_by_strides(&a, 2, (dnnl_dims_t){ 256, k }, dnnl_bf16, (dnnl_dims_t){ k, 1 }) ||
        dnnl_memory_desc_init_by_tag(&b, 2, (dnnl_dims_t){ k, rows }, dnnl_bf16, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_strides(&c, 2, (dnnl_dims_t){ 256, rows }, dnnl_f32, (dnnl_dims_t){ rows, 1 }) ||
        dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) || dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL))
        goto out;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (!impl || strstr(impl, "ref"))
        goto out;
    bp = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (dnnl_memory_desc_init_by_strides(&b, 2, (dnnl_dims_t){ k, rows }, dnnl_bf16, (dnnl_dims_t){ 1, k }))
        goto out;
    if (!(pw = calloc(1, sizeof *pw)) ||
        posix_memalign(&pw->data, 64, dnnl_memory_desc_get_size(&bp)) != 0) {
        rc = ra_error_set(RA_ENOMEM, "bf16 GEMM: cannot allocate %zu bytes of prepacked weights",
                          dnnl_memory_desc_get_size(&bp));
        if (pw)
            pw->data = NULL;
        goto out;
    }
    if (dnnl_memory_create(&src, &b, engine, (void *)plain) || dnnl_memory_create(&dst, &bp, engine, pw->data) ||
        dnnl_reorder_primitive_desc_create(&rpd, &b, engine, &bp, engine, NULL) ||
        dnnl_primitive_create(&reorder, rpd))
        goto out;
    dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, src }, { DNNL_ARG_TO, dst } };
    if (dnnl_primitive_execute(reorder, stream, 2, args) || dnnl_stream_wait(stream))
        goto out;
    pw->rows = rows;
    pw->k = k;
    pw->md = bp;
    *out = pw;
    pw = NULL;
    rc = RA_OK;
out:
    if (pw)
        free(pw->data);
    free(pw);
    if (reorder)
        dnnl_primitive_destroy(reorder);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    if (src)
        dnnl_memory_destroy(src);
    if (dst)
        dnnl_memory_destroy(dst);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return rc;
#else
    (void)g, (void)plain, (void)rows, (void)k;
    return RA_EUNSUPPORTED;
#endif
}

void ra_bf16_packed_free(struct ra_bf16_packed *w)
{
    if (w)
        free(w->data);
    free(w);
}
