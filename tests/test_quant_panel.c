/* Panels for the int8 prefill GEMM (src/quant/panel.h) and every kernel
 * table's gemm and quantize_qact, each weight type (Q8_0, Q4_0, Q4_1, Q4_K,
 * Q6_K):
 * - ra_qpanel_pack: scale * u + offset equal to ra_quant_dequantize (0 and
 *   -0 alike), u within the type's range, the rows past the last zero;
 * - ra_qact_quantize_ref: ra_quant_act_ref's q and d, s = d * sum(q) per
 *   group; each table's quantize_qact the same bytes;
 * - each table's gemm (and ra_qpanel_gemm_ref) against a double-precision
 *   product of the dequantized weights with the dequantized activations
 *   (d * q): they differ only in the float order, so within 1e-5 of
 *   sum |w| |x|; a token's outputs bit for bit those of the token alone or
 *   in another subset; nothing written past ncols or between rows of y.
 * Shapes: k from one block to 4096, rows leaving a short last panel, token
 * counts that are not multiples of any tile; random and extreme values
 * (every u 0 or its maximum, every q +-127). A table whose gemm_u7 is set
 * (AVX2) skips Q8_0's gemm, which it does not take. Tables: every
 * instruction set in enum ra_quant_isa this CPU runs, and the AMX code on
 * its model of the tiles (quant/kernels_amx_model.h) where AVX512-VNNI runs. */
#include "config.h"
#include "quant/quant.h"
#include "quant_blocks.h"
#include "status.h"
#include "test.h"
#ifdef RA_HAVE_AVX512VNNI_KERNELS
#include "quant/kernels_amx_model.h"
#endif

#define GEMM_TOL 1e-5
#define NMAX 13

/* K activations: per 32 a random scale over 6 decades, every seventh block
 * zero; or (EXTREME) every quant +-127. */
static void rnd_acts(float *x, int64_t k, int extreme)
{
    for (int64_t b = 0; b < k / RA_QK; b++) {
        const double scale = (b % 7 == 3) ? 0 : exp(log(1e-3) + rnd_unit() * log(1e6));
        for (int j = 0; j < RA_QK; j++)
            x[RA_QK * b + j] = extreme ? (b % 3 ? 1e3f : -1e3f) : (float)((rnd_unit() * 2 - 1) * scale);
    }
}

static const enum ra_dtype types[] = { RA_DTYPE_Q8_0, RA_DTYPE_Q4_0, RA_DTYPE_Q4_1, RA_DTYPE_Q4_K, RA_DTYPE_Q6_K };

/* One problem: w (rows x k of type t) packed, n tokens of x quantized. */
struct problem {
    enum ra_dtype t;
    int64_t k;
    int rows, n, np, group;
    void *w;           /* the blocks */
    float *wf;         /* [rows][k] dequantized */
    float *x;          /* [n][k] */
    void *panels;      /* np panels */
    void *abuf;        /* ra_qact_bytes */
    struct ra_qact a;  /* ra_qact_quantize_ref's */
};

static void *alloc64(size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 64) == 0 ? p : NULL;
}

static void problem_free(struct problem *pr)
{
    free(pr->w);
    free(pr->wf);
    free(pr->x);
    free(pr->panels);
    free(pr->abuf);
}

/* The pack checked against ra_quant_dequantize on the way. */
static int problem_make(struct problem *pr, enum ra_dtype t, int64_t k, int rows, int n, int extreme)
{
    memset(pr, 0, sizeof *pr);
    pr->t = t;
    pr->k = k;
    pr->rows = rows;
    pr->n = n;
    pr->np = (rows + RA_QP_ROWS - 1) / RA_QP_ROWS;
    pr->group = ra_qpanel_group(t);
    const size_t row_bytes = ra_dtype_row_bytes(t, k), pbytes = ra_qpanel_bytes(pr->group, k);
    pr->w = malloc(row_bytes * (size_t)rows);
    pr->wf = malloc(sizeof(float) * (size_t)(rows * k));
    pr->x = malloc(sizeof(float) * (size_t)(n * k));
    pr->panels = alloc64(pbytes * (size_t)pr->np);
    pr->abuf = alloc64(ra_qact_bytes(k, pr->group, n));
    if (!pr->w || !pr->wf || !pr->x || !pr->panels || !pr->abuf)
        return -1;
    qb_extreme = extreme;
    rnd_weights(t, pr->w, rows * k);
    for (int r = 0; r < rows; r++)
        CHECK_OK(ra_quant_dequantize(t, (const char *)pr->w + (size_t)r * row_bytes, pr->wf + (size_t)r * k, k));
    for (int t0 = 0; t0 < n; t0++)
        rnd_acts(pr->x + (size_t)t0 * k, k, extreme);
    int bad = 0;
    for (int p = 0; p < pr->np; p++) {
        void *panel = (char *)pr->panels + (size_t)p * pbytes;
        const int nr = rows - RA_QP_ROWS * p < RA_QP_ROWS ? rows - RA_QP_ROWS * p : RA_QP_ROWS;
        ra_qpanel_pack(panel, (const char *)pr->w + (size_t)p * RA_QP_ROWS * row_bytes, t, k, nr);
        const uint8_t *u = ra_qpanel_u(panel);
        const float *sc = ra_qpanel_scale(panel, k), *of = ra_qpanel_offset(panel, k, pr->group);
        for (int r = 0; r < RA_QP_ROWS && !bad; r++)
            for (int64_t c = 0; c < k && !bad; c++) {
                const int64_t g = c / pr->group;
                const unsigned uv = u[64 * (c / 4) + 4 * r + c % 4];
                volatile float prod = sc[RA_QP_ROWS * g + r] * (float)uv; /* no fused multiply-add */
                const float v = prod + of[RA_QP_ROWS * g + r];
                const float want = r < nr ? pr->wf[(size_t)(RA_QP_ROWS * p + r) * k + c] : 0.0f;
                const int zero_ok = r < nr || (uv == 0 && sc[RA_QP_ROWS * g + r] == 0 && of[RA_QP_ROWS * g + r] == 0);
                if (v != want || !zero_ok || uv > (unsigned)ra_qpanel_max_u(t)) {
                    fprintf(stderr, "ra_qpanel_pack %s k %lld: row %d col %lld: %g (u %u) != %g\n",
                            ra_dtype_name(t), (long long)k, RA_QP_ROWS * p + r, (long long)c, v, uv, want);
                    bad = 1;
                }
            }
    }
    CHECK(!bad);
    ra_qact_bind(&pr->a, pr->abuf, k, pr->group, n);
    for (int t0 = 0; t0 < n; t0++)
        ra_qact_quantize_ref(&pr->a, t0, pr->x + (size_t)t0 * k);
    return 0;
}

/* ra_qact_quantize_ref against ra_quant_act_ref's blocks. */
static void check_qact_ref(const struct problem *pr)
{
    const int64_t k = pr->k, nb = k / RA_QK;
    struct ra_block_q8x *blk = malloc(sizeof *blk * (size_t)nb);
    if (!blk) {
        CHECK(blk);
        return;
    }
    int bad = 0;
    for (int t = 0; t < pr->n && !bad; t++) {
        ra_quant_act_ref(RA_DTYPE_Q8_0, pr->x + (size_t)t * k, blk, k);
        const int8_t *q = pr->a.q + (size_t)t * k;
        const float *d = pr->a.d + (size_t)t * nb, *s = pr->a.s + (size_t)t * (k / pr->group);
        for (int64_t b = 0; b < nb; b++)
            bad |= memcmp(q + RA_QK * b, blk[b].qs, RA_QK) != 0 || d[b] != blk[b].d;
        for (int64_t g = 0; g < k / pr->group; g++) {
            int sum = 0;
            for (int c = 0; c < pr->group; c++)
                sum += q[pr->group * g + c];
            bad |= s[g] != d[pr->group * g / RA_QK] * (float)sum;
        }
    }
    if (bad)
        fprintf(stderr, "ra_qact_quantize_ref (group %d, k %lld) differs from ra_quant_act_ref\n", pr->group,
                (long long)k);
    CHECK(!bad);
    free(blk);
}

/* qk's quantize_qact gives ra_qact_quantize_ref's bytes. */
static void check_quantize_qact(const struct ra_quant_kernels *qk, const char *isa, const struct problem *pr)
{
    const size_t bytes = ra_qact_bytes(pr->k, pr->group, pr->n);
    void *buf = alloc64(bytes);
    if (!buf) {
        CHECK(buf);
        return;
    }
    memset(buf, 0x5a, bytes);
    struct ra_qact a;
    ra_qact_bind(&a, buf, pr->k, pr->group, pr->n);
    for (int t = 0; t < pr->n; t++)
        qk->quantize_qact(&a, t, pr->x + (size_t)t * pr->k);
    const int64_t k = pr->k;
    const int same = memcmp(a.q, pr->a.q, (size_t)(pr->n * k)) == 0 &&
                     memcmp(a.d, pr->a.d, sizeof(float) * (size_t)(pr->n * (k / RA_QK))) == 0 &&
                     memcmp(a.s, pr->a.s, sizeof(float) * (size_t)(pr->n * (k / pr->group))) == 0;
    if (!same)
        fprintf(stderr, "%s: quantize_qact (group %d, k %lld) differs from ra_qact_quantize_ref\n", isa, pr->group,
                (long long)k);
    CHECK(same);
    free(buf);
}

/* a's tokens t0..t0+n as a view. */
static struct ra_qact qact_view(const struct ra_qact *a, int t0)
{
    struct ra_qact v = *a;
    v.q += (size_t)t0 * (size_t)a->k;
    v.d += (size_t)t0 * (size_t)(a->k / RA_QK);
    v.s += (size_t)t0 * (size_t)(a->k / a->group);
    return v;
}

#define SENTINEL (-12345.0f)

typedef void gemm_fn(float *y, int ldy, const struct ra_qact *a, int n_tok, const void *panels, int np, int ncols);

/* gemm against the double product; returns the worst error / bound. */
static double check_gemm(gemm_fn *gemm, const char *isa, const struct problem *pr)
{
    const int64_t k = pr->k;
    const int ldy = pr->rows + 3, n = pr->n;
    float *y = malloc(sizeof(float) * (size_t)(ldy * n)), *y1 = malloc(sizeof(float) * (size_t)ldy);
    double worst = 0;
    if (!y || !y1) {
        CHECK(y && y1);
        goto out;
    }
    for (int i = 0; i < ldy * n; i++)
        y[i] = SENTINEL;
    gemm(y, ldy, &pr->a, n, pr->panels, pr->np, pr->rows);
    int bad = 0;
    for (int t = 0; t < n && !bad; t++) {
        const int8_t *q = pr->a.q + (size_t)t * k;
        const float *d = pr->a.d + (size_t)t * (k / RA_QK);
        for (int r = 0; r < ldy && !bad; r++) {
            const float got = y[(size_t)t * ldy + r];
            if (r >= pr->rows) {
                if (got != SENTINEL) {
                    fprintf(stderr, "%s: gemm %s wrote past ncols %d (token %d, column %d)\n", isa,
                            ra_dtype_name(pr->t), pr->rows, t, r);
                    bad = 1;
                }
                continue;
            }
            double dot = 0, mag = 0;
            for (int64_t c = 0; c < k; c++) {
                const double wv = pr->wf[(size_t)r * k + c], xv = (double)d[c / RA_QK] * q[c];
                dot += wv * xv;
                mag += fabs(wv * xv);
            }
            const double err = fabs(got - dot), bound = GEMM_TOL * mag + 1e-30;
            worst = err / bound > worst ? err / bound : worst;
            if (!(err <= bound)) {
                fprintf(stderr, "%s: gemm %s k %lld rows %d n %d: y[%d][%d] = %.9g, double %.9g (bound %.3g)\n", isa,
                        ra_dtype_name(pr->t), (long long)k, pr->rows, n, t, r, got, dot, bound);
                bad = 1;
            }
        }
    }
    /* Each token alone, and tokens 1.. as a call of their own: the same bits. */
    for (int t = 0; t < n && !bad; t++) {
        const struct ra_qact v = qact_view(&pr->a, t);
        gemm(y1, ldy, &v, 1, pr->panels, pr->np, pr->rows);
        if (memcmp(y1, y + (size_t)t * ldy, sizeof(float) * (size_t)pr->rows) != 0) {
            fprintf(stderr, "%s: gemm %s: token %d of %d alone differs from its row in the call\n", isa,
                    ra_dtype_name(pr->t), t, n);
            bad = 1;
        }
    }
    if (n > 1 && !bad) {
        float *y2 = malloc(sizeof(float) * (size_t)(ldy * (n - 1)));
        const struct ra_qact v = qact_view(&pr->a, 1);
        CHECK(y2);
        if (y2) {
            gemm(y2, ldy, &v, n - 1, pr->panels, pr->np, pr->rows);
            for (int t = 1; t < n && !bad; t++)
                if (memcmp(y2 + (size_t)(t - 1) * ldy, y + (size_t)t * ldy, sizeof(float) * (size_t)pr->rows) != 0) {
                    fprintf(stderr, "%s: gemm %s: token %d differs in a call from token 1\n", isa,
                            ra_dtype_name(pr->t), t);
                    bad = 1;
                }
        }
        free(y2);
    }
    CHECK(!bad);
out:
    free(y);
    free(y1);
    return worst;
}

struct shape {
    int64_t k;
    int rows, n;
};

/* k, rows, tokens: one block; short last panels; tokens past any tile. */
static const struct shape shapes[] = {
    { 256, 16, 1 }, { 256, 5, 4 }, { 512, 37, 7 }, { 768, 48, 13 }, { 256, 70, 9 }, { 4096, 21, 5 },
    { 256, 35, 37 }, /* past two 16-token AMX tiles */
};
/* The 32-element formats also at their shortest. */
static const struct shape shapes32[] = { { 32, 3, 2 }, { 96, 17, 6 }, { 64, 33, 17 } };

/* A table's name in messages ("amx model" for the tiles' model). */
static const char *table_name(const struct ra_quant_kernels *qk)
{
#ifdef RA_HAVE_AVX512VNNI_KERNELS
    if (qk == &ra_quant_kernels_amx_model)
        return "amx model";
#endif
    return ra_quant_isa_name(qk->isa);
}

/* Every check for one type and shape; qks: the tables to run. */
static void check_problem(const struct ra_quant_kernels *const *qks, int nq, enum ra_dtype t, struct shape s,
                          int extreme, double *worst)
{
    struct problem pr;
    if (problem_make(&pr, t, s.k, s.rows, s.n, extreme) != 0) {
        CHECK(!"out of memory");
        problem_free(&pr);
        return;
    }
    check_qact_ref(&pr);
    double w = check_gemm(ra_qpanel_gemm_ref, "reference", &pr);
    worst[0] = w > worst[0] ? w : worst[0];
    for (int i = 0; i < nq; i++) {
        const char *isa = table_name(qks[i]);
        check_quantize_qact(qks[i], isa, &pr);
        if (qks[i]->gemm_u7 && ra_qpanel_max_u(t) > 127)
            continue;
        w = check_gemm(qks[i]->gemm, isa, &pr);
        worst[1 + i] = w > worst[1 + i] ? w : worst[1 + i];
    }
    problem_free(&pr);
}

int main(void)
{
    const struct ra_quant_kernels *qks[RA_QUANT_ISA_COUNT + 1];
    int nq = 0;
    for (int isa = 0; isa < RA_QUANT_ISA_COUNT; isa++) {
        const struct ra_quant_kernels *qk = qb_table((enum ra_quant_isa)isa);
        if (!qk)
            continue;
        CHECK(qk->isa == (enum ra_quant_isa)isa);
        CHECK(qk->gemm && qk->quantize_qact);
        qks[nq++] = qk;
    }
#ifdef RA_HAVE_AVX512VNNI_KERNELS
    if (ra_quant_isa_supported(RA_QUANT_ISA_AVX512VNNI))
        qks[nq++] = &ra_quant_kernels_amx_model;
#endif
    CHECK(nq >= 1);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const enum ra_dtype t = types[ti];
        double worst[2 + RA_QUANT_ISA_COUNT] = { 0 };
        for (int extreme = 0; extreme < 2; extreme++) {
            for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
                check_problem(qks, nq, t, shapes[si], extreme, worst);
            for (size_t si = 0; ra_dtype_block(t) == RA_QK && si < sizeof shapes32 / sizeof *shapes32; si++)
                check_problem(qks, nq, t, shapes32[si], extreme, worst);
        }
        printf("reference %s: gemm worst error %.3f of the bound\n", ra_dtype_name(t), worst[0]);
        for (int i = 0; i < nq; i++) {
            if (qks[i]->gemm_u7 && ra_qpanel_max_u(t) > 127)
                printf("%s %s: gemm not run (u up to %d: not this table's)\n", table_name(qks[i]),
                       ra_dtype_name(t), ra_qpanel_max_u(t));
            else
                printf("%s %s: gemm worst error %.3f of the bound\n", table_name(qks[i]),
                       ra_dtype_name(t), worst[1 + i]);
        }
    }
    return test_result("test_quant_panel");
}
