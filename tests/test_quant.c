/* The quantized-weight kernels (src/quant/quant.h) of every instruction set
 * this CPU runs, each format (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) against the
 * scalar references:
 * - quantize_act gives ra_quant_act_ref's bytes exactly (zero blocks, huge
 *   and tiny values, exact ties of the rounding included);
 * - gemv against a double-precision product of the dequantized weights
 *   (ra_quant_dequantize) with the dequantized activations (d * q): the two
 *   differ only in the float summation, so within 1e-5 of sum |w| |x|; and
 *   against the fp32 activations within the int8 quantization's own bound:
 *   every x is at most half a step (d / 2 of its block) from d * q, so
 *   |y - w . x| <= sum_j |w_j| d_j / 2, plus the tolerance above;
 * - a token's gemv outputs the same bits whatever the other tokens of the
 *   call (a chain's ranks group a prompt's tokens differently);
 * - dequantize equal bit for bit to ra_quant_dequantize.
 * Shapes: k from one block to 4096, rows not a multiple of any row blocking,
 * 1, 2, 3, 4 and 7 tokens, output rows ldy > rows apart (the gap untouched),
 * weights at an address that is only 2-byte aligned. */
#include "quant/quant.h"
#include "quant_blocks.h"
#include "status.h"
#include "test.h"

#define GEMV_TOL 1e-5

/* K activations: each block of 32 a random scale over 6 decades, some
 * outliers, every seventh block zero. */
static void rnd_acts(float *x, int64_t k)
{
    if (qb_extreme) { /* every quant +-127, one sign per 32 */
        for (int64_t j = 0; j < k; j++)
            x[j] = j / RA_QK % 3 ? 1e3f : -1e3f;
        return;
    }
    for (int64_t b = 0; b < k / RA_QK; b++) {
        const double scale = (b % 7 == 3) ? 0 : exp(log(1e-3) + rnd_unit() * log(1e6));
        for (int j = 0; j < RA_QK; j++) {
            double v = (rnd_unit() + rnd_unit() + rnd_unit() - 1.5) * scale;
            if (rnd() % 61 == 0)
                v *= 20;
            x[b * RA_QK + j] = (float)v;
        }
    }
}

/* The activation blocks' type for weights of type T. */
static int k_format(enum ra_dtype t) { return t == RA_DTYPE_Q4_K || t == RA_DTYPE_Q6_K; }

/* xd[0..k) = the dequantized activations d * q of one token's blocks XQ. */
static void act_dequantize(enum ra_dtype t, const void *xq, double *xd, double *step, int64_t k)
{
    if (k_format(t)) {
        const struct ra_block_q8k *b = xq;
        for (int64_t i = 0; i < k; i++) {
            xd[i] = (double)b[i / RA_QK_K].d * b[i / RA_QK_K].qs[i % RA_QK_K];
            step[i] = b[i / RA_QK_K].d;
        }
    } else {
        const struct ra_block_q8x *b = xq;
        for (int64_t i = 0; i < k; i++) {
            xd[i] = (double)b[i / RA_QK].d * b[i / RA_QK].qs[i % RA_QK];
            step[i] = b[i / RA_QK].d;
        }
    }
}

static const enum ra_dtype types[] = { RA_DTYPE_Q8_0, RA_DTYPE_Q4_0, RA_DTYPE_Q4_1, RA_DTYPE_Q4_K, RA_DTYPE_Q6_K };

/* ------------------------------------------------------------ quantize_act */

/* quantize_act of X (k floats) against the reference, for WTYPE's blocks. */
static int act_matches(const struct ra_quant_kernels *qk, enum ra_dtype wtype, const float *x, int64_t k)
{
    const size_t bytes = ra_quant_act_row_bytes(wtype, k);
    unsigned char *want = malloc(bytes), *got = malloc(bytes);
    int ok = 0;
    if (!want || !got)
        goto out;
    memset(want, 0xa5, bytes);
    memset(got, 0x5a, bytes); /* padding differs unless written: compare field by field */
    ra_quant_act_ref(wtype, x, want, k);
    qk->quantize_act(got, x, k, wtype);
    ok = 1;
    if (k_format(wtype)) {
        for (int64_t b = 0; b < k / RA_QK_K; b++) {
            const struct ra_block_q8k *w = (const struct ra_block_q8k *)want + b, *g = (const struct ra_block_q8k *)got + b;
            ok &= memcmp(&w->d, &g->d, sizeof w->d) == 0 && memcmp(w->qs, g->qs, sizeof w->qs) == 0 &&
                  memcmp(w->bsums, g->bsums, sizeof w->bsums) == 0;
        }
    } else {
        for (int64_t b = 0; b < k / RA_QK; b++) {
            const struct ra_block_q8x *w = (const struct ra_block_q8x *)want + b, *g = (const struct ra_block_q8x *)got + b;
            ok &= memcmp(&w->d, &g->d, sizeof w->d) == 0 && memcmp(&w->s, &g->s, sizeof w->s) == 0 &&
                  memcmp(w->qs, g->qs, sizeof w->qs) == 0;
        }
    }
out:
    free(want);
    free(got);
    return ok;
}

/* Blocks whose scaled values hit the rounding's edges: max |x| = 127 * 2^e
 * makes 127 / max|x| a power of two, so x = (i + 1/2) * 2^e are exact ties
 * (roundf takes them away from zero, round-to-even would not), and x = the
 * float just below or above a tie. */
static void edge_acts(float *x, int64_t k)
{
    for (int64_t b = 0; b < k / RA_QK; b++) {
        float *v = x + b * RA_QK;
        const float p = ldexpf(1.0f, (int)(b % 9) - 4);
        v[0] = (b & 1 ? -127.0f : 127.0f) * p;
        for (int j = 1; j < RA_QK; j++) {
            const float tie = ((float)(rnd() % 127) + 0.5f) * p;
            const float e = j % 3 == 0 ? tie : j % 3 == 1 ? nextafterf(tie, 0) : nextafterf(tie, INFINITY);
            v[j] = rnd() & 1 ? -e : e;
        }
    }
}

static void test_quantize_act(const struct ra_quant_kernels *qk, const char *isa)
{
    static const int64_t ks[] = { 256, 512, 1024, 4096 };
    float *x = malloc(4096 * sizeof *x);
    if (!x) {
        CHECK(!"out of memory");
        return;
    }
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        const int64_t k = ks[i];
        for (int variant = 0; variant < 5; variant++) {
            switch (variant) {
            case 0: rnd_acts(x, k); break;  /* realistic, every seventh block zero */
            case 1: edge_acts(x, k); break; /* ties and their neighbours */
            case 2:                         /* huge: near FLT_MAX */
                for (int64_t j = 0; j < k; j++)
                    x[j] = (float)((rnd_unit() - 0.5) * 6e38);
                break;
            case 3: /* tiny: 127 / max|x| still finite */
                for (int64_t j = 0; j < k; j++)
                    x[j] = (float)((rnd_unit() - 0.5) * 4e-36);
                break;
            default: /* all zero but one element per block, negative zeros elsewhere */
                for (int64_t j = 0; j < k; j++)
                    x[j] = j % RA_QK == 5 ? (float)(rnd_unit() - 0.5) : -0.0f;
                break;
            }
            /* k of 32..224 for the 32-element formats: a tail under any vector width */
            const int64_t k32 = variant == 0 ? k : k - RA_QK * (int64_t)(1 + i % 7);
            if (!act_matches(qk, RA_DTYPE_Q8_0, x, k32)) {
                fprintf(stderr, "%s: quantize_act (q8x) differs from the reference: k %lld, variant %d\n", isa,
                        (long long)k32, variant);
                test_failures++;
            }
            if (!act_matches(qk, RA_DTYPE_Q4_K, x, k)) {
                fprintf(stderr, "%s: quantize_act (q8k) differs from the reference: k %lld, variant %d\n", isa,
                        (long long)k, variant);
                test_failures++;
            }
        }
    }
    for (int64_t k = RA_QK; k <= 8 * RA_QK; k += RA_QK) { /* every short length */
        rnd_acts(x, k);
        if (!act_matches(qk, RA_DTYPE_Q4_0, x, k)) {
            fprintf(stderr, "%s: quantize_act (q8x) differs from the reference: k %lld\n", isa, (long long)k);
            test_failures++;
        }
    }
    free(x);
}

/* ------------------------------------------------------------ gemv, dequantize */

struct shape {
    int64_t k, rows;
};

/* One type, one shape, every token count: gemv and dequantize of QK against the references. */
static void check_shape(const struct ra_quant_kernels *qk, const char *isa, enum ra_dtype t, struct shape s,
                        double *worst_tight, double *worst_q)
{
    enum { NMAX = 7, LDY_PAD = 5 };
    static const int ns[] = { 1, 2, 3, 4, 7 };
    const int64_t k = s.k, rows = s.rows, ldy = rows + LDY_PAD;
    const size_t wbytes = ra_dtype_row_bytes(t, k) * (size_t)rows, xbytes = ra_quant_act_row_bytes(t, k);
    unsigned char *wbuf = malloc(wbytes + 64), *xq = malloc(xbytes * NMAX);
    float *x = malloc(sizeof(float) * (size_t)(k * NMAX)), *wf = malloc(sizeof(float) * (size_t)(k * rows));
    float *wk = malloc(sizeof(float) * (size_t)(k * rows)), *y = malloc(sizeof(float) * (size_t)(ldy * NMAX));
    float *y1 = malloc(sizeof(float) * (size_t)(rows * NMAX));
    double *xd = malloc(sizeof(double) * (size_t)(k * NMAX)), *step = malloc(sizeof(double) * (size_t)(k * NMAX));
    if (!wbuf || !xq || !x || !wf || !wk || !y || !y1 || !xd || !step) {
        CHECK(!"out of memory");
        goto out;
    }
    void *w = wbuf + 2; /* block formats need only 2-byte alignment */
    rnd_weights(t, w, k * rows);
    CHECK_OK(ra_quant_dequantize(t, w, wf, k * rows));

    memset(wk, 0xff, sizeof(float) * (size_t)(k * rows));
    qk->dequantize(wk, w, t, k * rows);
    if (memcmp(wk, wf, sizeof(float) * (size_t)(k * rows)) != 0) {
        fprintf(stderr, "%s: dequantize %s (k %lld, rows %lld) differs from ra_quant_dequantize\n", isa,
                ra_dtype_name(t), (long long)k, (long long)rows);
        test_failures++;
    }

    for (int i = 0; i < NMAX; i++) {
        rnd_acts(x + (size_t)i * k, k);
        ra_quant_act_ref(t, x + (size_t)i * k, xq + xbytes * i, k);
        act_dequantize(t, xq + xbytes * i, xd + (size_t)i * k, step + (size_t)i * k, k);
    }
    /* each token alone: what a call of any n must give it, bit for bit */
    for (int i = 0; i < NMAX; i++)
        qk->gemv(y1 + i * rows, (int)rows, xq + xbytes * i, 1, w, t, rows, k);
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        const int n = ns[ni];
        for (int64_t i = 0; i < ldy * NMAX; i++)
            y[i] = -12345.0f;
        qk->gemv(y, (int)ldy, xq, n, w, t, rows, k);
        int bad = 0;
        for (int tok = 0; tok < n && !bad; tok++)
            if (memcmp(y + tok * ldy, y1 + tok * rows, sizeof(float) * (size_t)rows) != 0) {
                fprintf(stderr, "%s: gemv %s k %lld rows %lld: token %d's outputs in a call of %d tokens differ "
                        "from its own call's\n", isa, ra_dtype_name(t), (long long)k, (long long)rows, tok, n);
                bad = 1;
            }
        for (int tok = 0; tok < NMAX && !bad; tok++)
            for (int64_t r = 0; r < ldy && !bad; r++) {
                const float got = y[tok * ldy + r];
                if (tok >= n || r >= rows) {
                    if (got != -12345.0f) {
                        fprintf(stderr, "%s: gemv %s wrote outside y[t < %d][r < %lld] (t %d, r %lld)\n", isa,
                                ra_dtype_name(t), n, (long long)rows, tok, (long long)r);
                        bad = 1;
                    }
                    continue;
                }
                const float *wr = wf + r * k, *xf = x + (size_t)tok * k;
                const double *xr = xd + (size_t)tok * k, *sr = step + (size_t)tok * k;
                double dot_q = 0, dot_f = 0, mag = 0, qbound = 0;
                for (int64_t j = 0; j < k; j++) {
                    dot_q += (double)wr[j] * xr[j];
                    dot_f += (double)wr[j] * xf[j];
                    mag += fabs((double)wr[j] * xr[j]);
                    qbound += fabs((double)wr[j]) * 0.5 * sr[j];
                }
                const double e_tight = fabs(got - dot_q), e_q = fabs(got - dot_f);
                const double tol = GEMV_TOL * mag + 1e-30;
                if (!(e_tight <= tol) || !(e_q <= qbound * (1 + 1e-6) + tol)) {
                    fprintf(stderr,
                            "%s: gemv %s k %lld rows %lld n %d: y[%d][%lld] = %.9g, dequantized product %.9g "
                            "(|diff| %.3g, allowed %.3g), fp32 product %.9g (|diff| %.3g, allowed %.3g)\n",
                            isa, ra_dtype_name(t), (long long)k, (long long)rows, n, tok, (long long)r, got, dot_q,
                            e_tight, tol, dot_f, e_q, qbound + tol);
                    bad = 1;
                }
                if (mag > 0 && e_tight / mag > *worst_tight)
                    *worst_tight = e_tight / mag;
                if (qbound > 0 && e_q / qbound > *worst_q)
                    *worst_q = e_q / qbound;
            }
        test_failures += bad;
    }
out:
    free(wbuf);
    free(xq);
    free(x);
    free(wf);
    free(wk);
    free(y);
    free(y1);
    free(xd);
    free(step);
}

static void test_gemv(const struct ra_quant_kernels *qk, const char *isa)
{
    static const struct shape shapes[] = {
        { 32, 1 },   { 32, 7 },   { 64, 13 },  { 96, 5 },   { 160, 3 }, { 256, 1 },
        { 256, 37 }, { 512, 9 },  { 768, 6 },  { 1024, 3 }, { 4096, 5 }, { 4096, 11 },
        { 16480, 3 }, /* 515 blocks: more than one sweep of the 4-bit kernels' prepared pairs, an odd last block */
    };
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        double worst_tight = 0, worst_q = 0;
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            if (shapes[si].k % ra_dtype_block(types[ti]) == 0)
                check_shape(qk, isa, types[ti], shapes[si], &worst_tight, &worst_q);
        qb_extreme = 1; /* the integer sums at their largest */
        check_shape(qk, isa, types[ti], (struct shape){ 4096, 5 }, &worst_tight, &worst_q);
        check_shape(qk, isa, types[ti], (struct shape){ 256, 37 }, &worst_tight, &worst_q);
        qb_extreme = 0;
        printf("%s %s: gemv within %.2g of sum|w||x| of the dequantized product, %.2f of the int8 bound "
               "of the fp32 one\n",
               isa, ra_dtype_name(types[ti]), worst_tight, worst_q);
    }
}

int main(void)
{
    int ran = 0;
    for (int isa = 0; isa < RA_QUANT_ISA_COUNT; isa++) {
        const char *name = ra_quant_isa_name((enum ra_quant_isa)isa);
        const struct ra_quant_kernels *qk = qb_table((enum ra_quant_isa)isa);
        if (!qk)
            continue;
        CHECK(qk->isa == (enum ra_quant_isa)isa);
        test_quantize_act(qk, name);
        test_gemv(qk, name);
        ran++;
    }
    CHECK(ran >= 1); /* portable at least */
    return test_result("test_quant");
}
