/* The prefill GEMM (quant.h's gemm: panel.h's formula) on AMX-INT8 tiles.
 *
 * Not an ordinary header: kernels_impl.h includes it in the two AMX builds,
 * kernels_amx.c (the tiles themselves, AMX_CFLAGS) and kernels_amx_model.c
 * (a plain-C model of them, AVX512VNNI_CFLAGS, for tests), each of which
 * first defines the tile operations this code is written with (tile numbers
 * are literals: the intrinsics name their registers in the instruction):
 *   AMX_LOADCONFIG(cfg)        ldtilecfg: 64 bytes, struct amx_cfg
 *   AMX_LOADD(t, base, stride) tileloadd: rows x colsb bytes, rows stride apart
 *   AMX_STORED(t, base, stride) tilestored
 *   AMX_ZERO(t)                tilezero
 *   AMX_DPBSUD(c, a, b)        tdpbsud: c[m][n] += sum over k, i < 4 of
 *                              a[m][4k + i] (s8) * b[k][4n + i] (u8), in int32
 *   AMX_RELEASE()              tilerelease
 * What is verified where: this code against the model on every x86 build
 * with AVX512-VNNI (tests/test_quant_amx.c, which also runs it on the tiles
 * wherever the CPU and Linux allow them: the Sapphire Rapids machines of
 * CI); the model itself against hand-computed products and the faults that
 * Intel's SDM lists, in the same test.
 *
 * A block is up to 32 tokens by up to 2 panels (32 output rows). Per group
 * of `group` columns (32, or 16 for Q6_K):
 *   tiles 0, 1: the int8 activations of tokens 0-15 and 16-31 (rows: the
 *               block's tokens, colsb: group), rows k bytes apart in ra_qact;
 *   tiles 2, 3: the group's bytes of the two panels, group / 4 rows of 64
 *               bytes (panel.h's VNNI order is a B tile's), 64 bytes apart;
 *   tiles 4-7:  the four 16 x 16 int32 products, 4 = 0 x 2, 5 = 0 x 3,
 *               6 = 1 x 2, 7 = 1 x 3, zeroed, multiplied, stored;
 * then each stored product is added to float accumulators with AVX-512 as
 * scale[g][n] * d[t][g'] * dot + offset[g][n] * s[t][g]. A last block of
 * fewer tokens is configured with fewer rows (tiles 1, 6, 7 unconfigured
 * when it has 16 or fewer); a lone last panel leaves tiles 3, 5, 7 unused;
 * the zero rows of a short last panel are computed and not stored. The
 * configuration is loaded at entry (and for the last block), the tiles
 * released at exit: the caller's thread holds no tile state between calls. */

#define AMX_A0 0
#define AMX_A1 1
#define AMX_B0 2
#define AMX_B1 3
#define AMX_C00 4
#define AMX_C01 5
#define AMX_C10 6
#define AMX_C11 7

/* ldtilecfg's operand, palette 1 (8 tiles of up to 16 rows of 64 bytes). */
struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
_Static_assert(sizeof(struct amx_cfg) == 64, "ldtilecfg reads 64 bytes");

/* The tiles of a block of m0 (1..16) + m1 (0..16) tokens on activations of group bytes. */
static void amx_config(struct amx_cfg *c, int group, int m0, int m1)
{
    memset(c, 0, sizeof *c);
    c->palette = 1;
    c->rows[AMX_A0] = (uint8_t)m0;
    c->colsb[AMX_A0] = (uint16_t)group;
    c->rows[AMX_B0] = c->rows[AMX_B1] = (uint8_t)(group / 4);
    c->colsb[AMX_B0] = c->colsb[AMX_B1] = 64;
    c->rows[AMX_C00] = c->rows[AMX_C01] = (uint8_t)m0;
    c->colsb[AMX_C00] = c->colsb[AMX_C01] = 64;
    if (m1 > 0) {
        c->rows[AMX_A1] = (uint8_t)m1;
        c->colsb[AMX_A1] = (uint16_t)group;
        c->rows[AMX_C10] = c->rows[AMX_C11] = (uint8_t)m1;
        c->colsb[AMX_C10] = c->colsb[AMX_C11] = 64;
    }
}

/* One block's view of the activations and panels. */
struct amx_block {
    const struct ra_qact *a;
    int t0, m0, m1;           /* first token, tokens in tiles 0 and 1 */
    const uint8_t *u[2];      /* the panels' bytes (u[1] NULL: a lone panel) */
    const float *scale[2], *offset[2];
};

/* acc[32 t + n] += scale[n] * d[t] * c[t][n] + offset[n] * s[t] for the m
 * rows of one stored product (d, s: rows dstride, sstride apart). */
static void amx_accumulate(float *acc, const int32_t (*c)[16], int m, const float *scale, const float *offset,
                           const float *d, int64_t dstride, const float *s, int64_t sstride)
{
    const __m512 sc = _mm512_loadu_ps(scale), of = _mm512_loadu_ps(offset);
    for (int t = 0; t < m; t++) {
        __m512 v = _mm512_load_ps(acc + 32 * t);
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c[t]));
        v = _mm512_fmadd_ps(dot, _mm512_mul_ps(sc, _mm512_set1_ps(d[t * dstride])), v);
        v = _mm512_fmadd_ps(of, _mm512_set1_ps(s[t * sstride]), v);
        _mm512_store_ps(acc + 32 * t, v);
    }
}

/* Group g of block b: the tile products into c, then into acc ([32][32]:
 * token, then 16 rows of each panel). */
static void amx_group(float *acc, int32_t (*c)[16][16], const struct amx_block *b, int64_t g)
{
    const struct ra_qact *a = b->a;
    const int64_t k = a->k, group = a->group, ng = k / group, nd = k / RA_QK;
    const int8_t *q = a->q + (size_t)b->t0 * (size_t)k + (size_t)(g * group);
    const int two = b->u[1] != NULL;
    AMX_LOADD(AMX_A0, q, k);
    AMX_LOADD(AMX_B0, b->u[0] + 16 * group * g, 64);
    AMX_ZERO(AMX_C00);
    AMX_DPBSUD(AMX_C00, AMX_A0, AMX_B0);
    AMX_STORED(AMX_C00, c[0], 64);
    if (two) {
        AMX_LOADD(AMX_B1, b->u[1] + 16 * group * g, 64);
        AMX_ZERO(AMX_C01);
        AMX_DPBSUD(AMX_C01, AMX_A0, AMX_B1);
        AMX_STORED(AMX_C01, c[1], 64);
    }
    if (b->m1 > 0) {
        AMX_LOADD(AMX_A1, q + 16 * k, k);
        AMX_ZERO(AMX_C10);
        AMX_DPBSUD(AMX_C10, AMX_A1, AMX_B0);
        AMX_STORED(AMX_C10, c[2], 64);
        if (two) {
            AMX_ZERO(AMX_C11);
            AMX_DPBSUD(AMX_C11, AMX_A1, AMX_B1);
            AMX_STORED(AMX_C11, c[3], 64);
        }
    }
    const float *d = a->d + (size_t)b->t0 * (size_t)nd + (size_t)(g * group / RA_QK);
    const float *s = a->s + (size_t)b->t0 * (size_t)ng + (size_t)g;
    for (int h = 0; h <= two; h++) {
        const float *sc = b->scale[h] + RA_QP_ROWS * g, *of = b->offset[h] + RA_QP_ROWS * g;
        amx_accumulate(acc + 16 * h, (const int32_t(*)[16])c[h], b->m0, sc, of, d, nd, s, ng);
        if (b->m1 > 0)
            amx_accumulate(acc + 32 * 16 + 16 * h, (const int32_t(*)[16])c[2 + h], b->m1, sc, of, d + 16 * nd, nd,
                           s + 16 * ng, ng);
    }
}

/* One block: its accumulators zeroed, every group, the first ncols (of
 * its 16 or 32) columns stored to y's rows t0.. */
static void amx_run_block(float *y, int ldy, const struct amx_block *b, int ncols)
{
    _Alignas(64) float acc[32 * 32];
    _Alignas(64) int32_t c[4][16][16];
    const int m = b->m0 + b->m1;
    for (int j = 0; j < 32 * m; j += 16)
        _mm512_store_ps(acc + j, _mm512_setzero_ps());
    for (int64_t g = 0; g < b->a->k / b->a->group; g++)
        amx_group(acc, c, b, g);
    for (int h = 0; h < 2 && ncols > 16 * h; h++) {
        const int cols = ncols - 16 * h >= 16 ? 16 : ncols - 16 * h;
        const __mmask16 mask = (__mmask16)((1u << cols) - 1);
        for (int t = 0; t < m; t++) {
            float *dst = y + (size_t)(b->t0 + t) * (size_t)ldy + 16 * h;
            _mm512_mask_storeu_ps(dst, mask, _mm512_load_ps(acc + 32 * t + 16 * h));
        }
    }
}

static void amx_gemm(float *y, int ldy, const struct ra_qact *a, int n_tok, const void *panels, int np, int ncols)
{
    if (n_tok <= 0 || np <= 0 || ncols <= 0)
        return;
    const int64_t k = a->k;
    const int group = a->group;
    const size_t pbytes = ra_qpanel_bytes(group, k);
    _Alignas(64) struct amx_cfg cfg;
    int cfg_m0 = 0, cfg_m1 = 0;
    for (int t0 = 0; t0 < n_tok; t0 += 32) {
        struct amx_block b = { .a = a, .t0 = t0 };
        b.m0 = n_tok - t0 < 16 ? n_tok - t0 : 16;
        b.m1 = n_tok - t0 - b.m0 < 16 ? n_tok - t0 - b.m0 : 16;
        if (b.m0 != cfg_m0 || b.m1 != cfg_m1) {
            amx_config(&cfg, group, b.m0, b.m1);
            AMX_LOADCONFIG(&cfg);
            cfg_m0 = b.m0;
            cfg_m1 = b.m1;
        }
        for (int p = 0; p < np && RA_QP_ROWS * p < ncols; p += 2) {
            for (int h = 0; h < 2; h++) {
                void *panel = (char *)(uintptr_t)panels + (size_t)(p + h) * pbytes;
                const int here = p + h < np && RA_QP_ROWS * (p + h) < ncols;
                b.u[h] = here ? ra_qpanel_u(panel) : NULL;
                b.scale[h] = here ? ra_qpanel_scale(panel, k) : NULL;
                b.offset[h] = here ? ra_qpanel_offset(panel, k, group) : NULL;
            }
            amx_run_block(y + RA_QP_ROWS * p, ldy, &b, ncols - RA_QP_ROWS * p < 32 ? ncols - RA_QP_ROWS * p : 32);
        }
    }
    AMX_RELEASE();
}
