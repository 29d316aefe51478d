/* The AMX-INT8 prefill GEMM (src/quant/kernels_amx.h), on the plain-C model of
 * the tiles (kernels_amx_model.h) and, where the CPU and Linux allow them, on
 * the tiles themselves:
 * - the model's instructions on hand-made tiles: tdpbsud's signed x unsigned
 *   products added to what the tile held (extremes -128 x 255 included, by
 *   literal values), tileloadd and tilestored honouring rows, colsb and the
 *   stride, nothing stored past colsb; every fault the hardware raises that
 *   the GEMM could commit (no configuration, a bad configuration, a tile
 *   unconfigured, M, K or N not matching, a tile twice) aborts the model in
 *   a child process with one line naming the instruction;
 * - the GEMM exact against integer arithmetic: panels and activations whose
 *   scales and d are 1 or 2, offsets small integers and u, q small enough
 *   that every partial sum is an integer below 2^24, so any float order
 *   gives the same exact value; token counts around the 16-token tiles and
 *   32-token blocks, one to four panels with short last ones (ncols), groups
 *   of 32 and 16 (Q6_K), k up to 1024; nothing written past ncols or in y's
 *   gap; on the model, the tiles released after every call and each 16 x 16
 *   product computed exactly once per group.
 * The block formats' panels against a double-precision product run through
 * tests/test_quant_panel.c, which includes these tables. */
#include "config.h"
#include "quant/quant.h"
#include "quant_blocks.h"
#include "status.h"
#include "test.h"

#ifdef RA_HAVE_AVX512VNNI_KERNELS
#include "quant/kernels_amx_model.h"

#include <signal.h>
#include <sys/wait.h>


/* ------------------------------------------------------------------ the model's instructions */

/* palette 1 configuration: rows[i], colsb[i] of tiles 0-7. */
static void make_cfg(uint8_t cfg[64], const int *rows, const int *colsb)
{
    memset(cfg, 0, 64);
    cfg[0] = 1;
    for (int i = 0; i < 8; i++) {
        cfg[16 + 2 * i] = (uint8_t)(colsb[i] & 0xff);
        cfg[17 + 2 * i] = (uint8_t)(colsb[i] >> 8);
        cfg[48 + i] = (uint8_t)rows[i];
    }
}

/* Tiles 0 (A: 2 x 8 bytes, K = 2), 1 (B: 2 x 12, N = 3), 2 (C: 2 x 12). */
static void cfg_abc(void)
{
    _Alignas(64) uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 2, 2, 2 }, (const int[8]){ 8, 12, 12 });
    ra_amx_model_loadconfig(cfg);
}

static void test_model_semantics(void)
{
    /* tileloadd / tilestored: 3 rows of 12 bytes, source rows 20 apart, stored 16 apart. */
    _Alignas(64) uint8_t cfg[64], src[3 * 20], dst[5 * 16];
    make_cfg(cfg, (const int[8]){ 3 }, (const int[8]){ 12 });
    for (int i = 0; i < (int)sizeof src; i++)
        src[i] = (uint8_t)(7 * i + 1);
    memset(dst, 0xee, sizeof dst);
    ra_amx_model_loadconfig(cfg);
    ra_amx_model_loadd(0, src, 20);
    ra_amx_model_stored(0, dst, 16);
    int bad = 0;
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 16; c++)
            bad |= dst[16 * r + c] != (r < 3 && c < 12 ? src[20 * r + c] : 0xee);
    CHECK(!bad);
    ra_amx_model_zero(0);
    ra_amx_model_stored(0, dst, 16);
    CHECK(dst[0] == 0 && dst[11] == 0 && dst[12] == 0xee && dst[2 * 16 + 11] == 0);

    /* tdpbsud: C (2 x 3 int32) += A (2 x 8 s8) . B (2 rows of 3 x 4 u8). */
    _Alignas(64) int8_t a[2][8] = { { -128, -128, -128, -128, -128, -128, -128, -128 },
                                    { 1, -2, 3, -4, 127, -1, 0, 5 } };
    _Alignas(64) uint8_t b[2][12];
    _Alignas(64) int32_t c0[2][3] = { { 1000, -7, 0 }, { 5, 6, -2147483647 } }, c[2][3];
    for (int i = 0; i < 12; i++) {
        b[0][i] = 255;
        b[1][i] = (uint8_t)(i * 23 + 128);
    }
    b[1][0] = b[1][1] = b[1][2] = b[1][3] = 255; /* column 0 all 255: row 0 of C[.][0] known by hand */
    cfg_abc();
    ra_amx_model_loadd(0, a, 8);
    ra_amx_model_loadd(1, b, 12);
    ra_amx_model_loadd(2, c0, 12);
    ra_amx_model_dpbsud(2, 0, 1);
    ra_amx_model_stored(2, c, 12);
    CHECK(c[0][0] == 1000 - 8 * 128 * 255); /* signed A, unsigned B */
    for (int m = 0; m < 2; m++)
        for (int n = 0; n < 3; n++) {
            int64_t want = c0[m][n];
            for (int k = 0; k < 2; k++)
                for (int i = 0; i < 4; i++)
                    want += (int64_t)a[m][4 * k + i] * b[k][4 * n + i];
            want = (int32_t)(uint32_t)want; /* tdpbsud wraps */
            if (c[m][n] != want)
                fprintf(stderr, "tdpbsud model: C[%d][%d] = %d, want %lld\n", m, n, c[m][n], (long long)want);
            CHECK(c[m][n] == want);
        }
    ra_amx_model_release();
    struct ra_amx_model_stats st;
    ra_amx_model_stats(&st);
    CHECK(!st.configured);
}

/* Each body commits one fault: the child must abort, its line naming insn. */
static void f_dp_unconfigured(void) { ra_amx_model_dpbsud(2, 0, 1); }
static void f_palette(void)
{
    uint8_t cfg[64] = { 2 };
    ra_amx_model_loadconfig(cfg);
}
static void f_rows17(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 17 }, (const int[8]){ 64 });
    ra_amx_model_loadconfig(cfg);
}
static void f_colsb65(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 16 }, (const int[8]){ 65 });
    ra_amx_model_loadconfig(cfg);
}
static void f_rows_only(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 0, 4 }, (const int[8]){ 0, 0 });
    ra_amx_model_loadconfig(cfg);
}
static void f_reserved(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 1 }, (const int[8]){ 4 });
    cfg[5] = 1;
    ra_amx_model_loadconfig(cfg);
}
static void f_tile8(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 1 }, (const int[8]){ 4 });
    cfg[48 + 8] = 1;
    ra_amx_model_loadconfig(cfg);
}
static void f_load_unconfigured_tile(void)
{
    static uint8_t mem[1024];
    cfg_abc();
    ra_amx_model_loadd(3, mem, 64);
}
static void f_after_release(void)
{
    cfg_abc();
    ra_amx_model_release();
    ra_amx_model_zero(0);
}
/* K: A's 8 bytes per row against B's 3 rows. */
static void f_k(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 2, 3, 2 }, (const int[8]){ 8, 12, 12 });
    ra_amx_model_loadconfig(cfg);
    ra_amx_model_dpbsud(2, 0, 1);
}
static void f_m(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 3, 2, 2 }, (const int[8]){ 8, 12, 12 });
    ra_amx_model_loadconfig(cfg);
    ra_amx_model_dpbsud(2, 0, 1);
}
static void f_n(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 2, 2, 2 }, (const int[8]){ 8, 12, 16 });
    ra_amx_model_loadconfig(cfg);
    ra_amx_model_dpbsud(2, 0, 1);
}
static void f_colsb_odd(void)
{
    uint8_t cfg[64];
    make_cfg(cfg, (const int[8]){ 2, 2, 2 }, (const int[8]){ 8, 10, 10 });
    ra_amx_model_loadconfig(cfg);
    ra_amx_model_dpbsud(2, 0, 1);
}
static void f_same_tile(void)
{
    cfg_abc();
    ra_amx_model_dpbsud(2, 0, 0);
}

static void expect_fault(const char *what, void (*body)(void), const char *insn)
{
    int fd[2];
    if (pipe(fd) != 0) {
        CHECK(!"pipe");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        body();
        _exit(0);
    }
    close(fd[1]);
    char buf[1024];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof buf - 1 && (got = read(fd[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)got;
    buf[len] = '\0';
    close(fd[0]);
    int status = 0;
    const int waited = pid > 0 && waitpid(pid, &status, 0) == pid;
    char want[64];
    snprintf(want, sizeof want, "AMX model: %s faults", insn);
    const int ok = waited && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(buf, want);
    if (!ok)
        fprintf(stderr, "model fault '%s': status %#x, output '%s' (want '%s...', SIGABRT)\n", what, status, buf, want);
    CHECK(ok);
}

static void test_model_faults(void)
{
    expect_fault("tdpbsud with no configuration", f_dp_unconfigured, "tdpbsud");
    expect_fault("palette 2", f_palette, "ldtilecfg");
    expect_fault("17 rows", f_rows17, "ldtilecfg");
    expect_fault("colsb 65", f_colsb65, "ldtilecfg");
    expect_fault("rows without colsb", f_rows_only, "ldtilecfg");
    expect_fault("a reserved byte", f_reserved, "ldtilecfg");
    expect_fault("a ninth tile", f_tile8, "ldtilecfg");
    expect_fault("an unconfigured tile", f_load_unconfigured_tile, "tileloadd");
    expect_fault("tilezero after tilerelease", f_after_release, "tilezero");
    expect_fault("K mismatch", f_k, "tdpbsud");
    expect_fault("M mismatch", f_m, "tdpbsud");
    expect_fault("N mismatch", f_n, "tdpbsud");
    expect_fault("colsb not a multiple of 4", f_colsb_odd, "tdpbsud");
    expect_fault("one tile twice", f_same_tile, "tdpbsud");
}

/* ------------------------------------------------------------------ the GEMM, exact */

struct exact {
    int64_t k;
    int group, np, n;
    void *panels;
    struct ra_qact a;
    void *abuf;
    int64_t *want; /* [n][16 np] */
};

/* Random panels and activations whose products are exact in float (above). */
static int exact_make(struct exact *e, int64_t k, int group, int np, int n)
{
    memset(e, 0, sizeof *e);
    e->k = k;
    e->group = group;
    e->np = np;
    e->n = n;
    const int umax = k <= 64 ? 255 : k <= 256 ? 127 : 31, qmax = k <= 64 ? 128 : k <= 256 ? 64 : 32;
    const size_t pbytes = ra_qpanel_bytes(group, k), abytes = ra_qact_bytes(k, group, n);
    e->panels = aligned_alloc(64, pbytes * (size_t)np);
    e->abuf = aligned_alloc(64, (abytes + 63) / 64 * 64);
    e->want = malloc(sizeof(int64_t) * (size_t)n * 16 * (size_t)np);
    if (!e->panels || !e->abuf || !e->want)
        return -1;
    const int64_t ng = k / group;
    ra_qact_bind(&e->a, e->abuf, k, group, n);
    for (int t = 0; t < n; t++) {
        int8_t *q = e->a.q + (size_t)t * (size_t)k;
        float *d = e->a.d + (size_t)t * (size_t)(k / RA_QK), *s = e->a.s + (size_t)t * (size_t)ng;
        for (int64_t c = 0; c < k; c++)
            q[c] = (int8_t)((int)(rnd() % (unsigned)(2 * qmax)) - qmax);
        for (int64_t b = 0; b < k / RA_QK; b++)
            d[b] = (float)(1 + rnd() % 2);
        for (int64_t g = 0; g < ng; g++) {
            int sum = 0;
            for (int c = 0; c < group; c++)
                sum += q[group * g + c];
            s[g] = d[group * g / RA_QK] * (float)sum;
        }
    }
    for (int p = 0; p < np; p++) {
        void *panel = (char *)e->panels + (size_t)p * pbytes;
        uint8_t *u = ra_qpanel_u(panel);
        float *sc = ra_qpanel_scale(panel, k), *of = ra_qpanel_offset(panel, k, group);
        for (int64_t i = 0; i < 16 * k; i++)
            u[i] = (uint8_t)(rnd() % (unsigned)(umax + 1));
        for (int64_t i = 0; i < 16 * ng; i++) {
            sc[i] = (float)(1 + rnd() % 2);
            of[i] = (float)((int)(rnd() % 7) - 3);
        }
        for (int t = 0; t < n; t++)
            for (int r = 0; r < 16; r++) {
                const int8_t *q = e->a.q + (size_t)t * (size_t)k;
                const float *d = e->a.d + (size_t)t * (size_t)(k / RA_QK), *s = e->a.s + (size_t)t * (size_t)ng;
                int64_t y = 0;
                for (int64_t g = 0; g < ng; g++) {
                    int64_t dot = 0;
                    for (int64_t c = group * g; c < group * (g + 1); c++)
                        dot += (int64_t)u[64 * (c / 4) + 4 * r + c % 4] * q[c];
                    y += (int64_t)sc[16 * g + r] * (int64_t)d[group * g / RA_QK] * dot +
                         (int64_t)of[16 * g + r] * (int64_t)s[g];
                }
                e->want[(size_t)t * 16 * (size_t)np + 16 * (size_t)p + (size_t)r] = y;
            }
    }
    return 0;
}

static void exact_free(struct exact *e)
{
    free(e->panels);
    free(e->abuf);
    free(e->want);
}

/* The tdpbsud a call makes: per 32-token block and pair of the panels the
 * ncols columns reach, one per 16 tokens per panel, per group. */
static long expected_dpbsud(int n, int np, int ncols, int64_t ng)
{
    const int used = (ncols + 15) / 16 < np ? (ncols + 15) / 16 : np;
    long count = 0;
    for (int t0 = 0; t0 < n; t0 += 32) {
        const int halves = n - t0 > 16 ? 2 : 1;
        count += (long)halves * used * ng;
    }
    return count;
}

#define SENTINEL (-12345.0f)

/* gemm on e for ncols columns: exact, nothing written elsewhere. */
static int exact_check(const struct ra_quant_kernels *qk, const char *name, const struct exact *e, int ncols,
                       int model)
{
    const int ldy = 16 * e->np + 5;
    float *y = malloc(sizeof(float) * (size_t)ldy * (size_t)e->n);
    if (!y) {
        CHECK(y);
        return 1;
    }
    for (size_t i = 0; i < (size_t)ldy * (size_t)e->n; i++)
        y[i] = SENTINEL;
    struct ra_amx_model_stats before, after;
    ra_amx_model_stats(&before);
    qk->gemm(y, ldy, &e->a, e->n, e->panels, e->np, ncols);
    ra_amx_model_stats(&after);
    int bad = 0;
    for (int t = 0; t < e->n && !bad; t++)
        for (int j = 0; j < ldy && !bad; j++) {
            const float got = y[(size_t)t * ldy + j];
            const float want = j < ncols ? (float)e->want[(size_t)t * 16 * (size_t)e->np + (size_t)j] : SENTINEL;
            if (got != want) {
                fprintf(stderr, "%s: k %lld group %d, %d tokens, %d panels, ncols %d: y[%d][%d] = %.9g, want %.9g\n",
                        name, (long long)e->k, e->group, e->n, e->np, ncols, t, j, got, want);
                bad = 1;
            }
        }
    if (model) {
        const long dp = after.dpbsud - before.dpbsud, want_dp = expected_dpbsud(e->n, e->np, ncols, e->k / e->group);
        if (after.configured || after.release != before.release + 1 || dp != want_dp ||
            after.loadconfig - before.loadconfig < 1 || after.loadconfig - before.loadconfig > 2) {
            fprintf(stderr, "%s: k %lld group %d, %d tokens, %d panels, ncols %d: configured %d after the call, "
                    "%ld tilerelease, %ld ldtilecfg, %ld tdpbsud (want 1, 1-2, %ld)\n", name, (long long)e->k,
                    e->group, e->n, e->np, ncols, after.configured, after.release - before.release,
                    after.loadconfig - before.loadconfig, dp, want_dp);
            bad = 1;
        }
    }
    free(y);
    CHECK(!bad);
    return bad;
}

static void test_gemm_exact(const struct ra_quant_kernels *qk, const char *name, int model)
{
    static const struct {
        int64_t k;
        int group;
    } kg[] = { { 32, 32 }, { 64, 16 }, { 256, 32 }, { 256, 16 }, { 1024, 32 }, { 1024, 16 } };
    static const int ns[] = { 1, 2, 15, 16, 17, 31, 32, 33, 47, 64, 65 };
    int calls = 0, bad = 0;
    for (size_t i = 0; i < sizeof kg / sizeof *kg && !bad; i++)
        for (size_t j = 0; j < sizeof ns / sizeof *ns && !bad; j++)
            for (int np = 1; np <= 4 && !bad; np++) {
                if (kg[i].k == 1024 && ns[j] % 16 != 1 && ns[j] != 64)
                    continue; /* the large k at a few token counts: time */
                struct exact e;
                if (exact_make(&e, kg[i].k, kg[i].group, np, ns[j]) != 0) {
                    CHECK(!"out of memory");
                    exact_free(&e);
                    return;
                }
                const int cols[] = { 16 * np, 16 * np - 5, 16 * (np - 1) + 1 };
                for (int c = 0; c < 3 && !bad; c++, calls++)
                    bad |= exact_check(qk, name, &e, cols[c], model);
                exact_free(&e);
            }
    printf("%s: gemm exact in %d calls (tokens 1-65, 1-4 panels, short last panels, groups 32 and 16)\n", name,
           calls);
}
#endif

int main(void)
{
#ifdef RA_HAVE_AVX512VNNI_KERNELS
    if (!ra_quant_isa_supported(RA_QUANT_ISA_AVX512VNNI)) {
        /* Not a skip: hardware a machine lacks (the model is built with the AVX512-VNNI kernels' flags). */
        printf("the AMX model: not run (this CPU lacks AVX512-VNNI)\n");
    } else {
        CHECK(ra_quant_kernels_amx_model.isa == RA_QUANT_ISA_AMX);
        CHECK(ra_quant_kernels_amx_model.gemm != ra_qpanel_gemm_ref);
        test_model_semantics();
        test_model_faults();
        test_gemm_exact(&ra_quant_kernels_amx_model, "amx model", 1);
    }
#else
    printf("the AMX model: not in this build (no AVX512-VNNI kernels)\n");
#endif
    const struct ra_quant_kernels *amx = ra_quant_kernels_for(RA_QUANT_ISA_AMX);
    if (amx && ra_quant_isa_supported(RA_QUANT_ISA_AMX)) {
        CHECK(amx->isa == RA_QUANT_ISA_AMX && amx->gemm != ra_qpanel_gemm_ref);
#ifdef RA_HAVE_AVX512VNNI_KERNELS
        test_gemm_exact(amx, "amx tiles", 0);
#endif
    } else {
        char line[256];
        ra_quant_isa_describe(line, sizeof line);
        printf("amx tiles: not run (%s; quant kernels: %s)\n", amx ? "this CPU or Linux does not allow them"
                                                                   : "not in this build", line);
    }
    return test_result("test_quant_amx");
}
