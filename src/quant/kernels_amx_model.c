/* The amx table's code on a plain-C model of the tiles (kernels_amx_model.h),
 * built with the AVX512-VNNI kernels' flags. */
#include "kernels_amx_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Palette 1. */
#define MODEL_TILES 8
#define MODEL_ROWS 16
#define MODEL_COLSB 64

struct model_tile {
    int rows, colsb; /* both 0: not valid (unconfigured) */
    uint8_t data[MODEL_ROWS][MODEL_COLSB];
};

struct model {
    int configured;
    struct model_tile t[MODEL_TILES];
    struct ra_amx_model_stats st;
};

static _Thread_local struct model amx_model;

static _Noreturn void fault(const char *insn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "AMX model: %s faults on the hardware: ", insn);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void ra_amx_model_stats(struct ra_amx_model_stats *out)
{
    *out = amx_model.st;
    out->configured = amx_model.configured;
}

static void clear_tiles(void)
{
    for (int i = 0; i < MODEL_TILES; i++)
        memset(amx_model.t[i].data, 0, sizeof amx_model.t[i].data);
}

static int nonzero(const uint8_t *p, int from, int to)
{
    for (int i = from; i < to; i++)
        if (p[i])
            return 1;
    return 0;
}

/* LDTILECFG: bytes 0 palette, 1 start_row, 2-15 zero, 16 + 2i colsb of
 * tile i (a 16-bit word), 48 + i rows of tile i; the bytes past palette 1's
 * 8 tiles zero; per tile rows and colsb both zero (not valid) or both not;
 * loading zeroes every tile. Palette 0 is the initial state (as tilerelease). */
void ra_amx_model_loadconfig(const void *cfg)
{
    const uint8_t *b = cfg;
    amx_model.st.loadconfig++;
    if (b[0] == 0) {
        ra_amx_model_release();
        amx_model.st.release--; /* counted as a load */
        return;
    }
    if (b[0] > 1)
        fault("ldtilecfg", "palette %d (this CPU's largest is 1)", b[0]);
    if (b[1] != 0)
        fault("ldtilecfg", "start_row %d (only a restarted instruction leaves it non-zero)", b[1]);
    if (nonzero(b, 2, 16))
        fault("ldtilecfg", "reserved bytes 2-15 not zero");
    if (nonzero(b, 16 + 2 * MODEL_TILES, 48) || nonzero(b, 48 + MODEL_TILES, 64))
        fault("ldtilecfg", "colsb or rows set for a tile past palette 1's %d", MODEL_TILES);
    struct model_tile cfgd[MODEL_TILES];
    for (int i = 0; i < MODEL_TILES; i++) {
        const int colsb = b[16 + 2 * i] | b[17 + 2 * i] << 8, rows = b[48 + i];
        if (colsb > MODEL_COLSB)
            fault("ldtilecfg", "tile %d: colsb %d > %d", i, colsb, MODEL_COLSB);
        if (rows > MODEL_ROWS)
            fault("ldtilecfg", "tile %d: rows %d > %d", i, rows, MODEL_ROWS);
        if ((rows == 0) != (colsb == 0))
            fault("ldtilecfg", "tile %d: rows %d and colsb %d (both zero or neither)", i, rows, colsb);
        cfgd[i].rows = rows;
        cfgd[i].colsb = colsb;
    }
    for (int i = 0; i < MODEL_TILES; i++) {
        amx_model.t[i].rows = cfgd[i].rows;
        amx_model.t[i].colsb = cfgd[i].colsb;
    }
    clear_tiles();
    amx_model.configured = 1;
}

/* Tile t, valid under the loaded configuration, for instruction insn. */
static struct model_tile *valid_tile(const char *insn, int t)
{
    if (!amx_model.configured)
        fault(insn, "no tile configuration loaded (ldtilecfg)");
    if (t < 0 || t >= MODEL_TILES)
        fault(insn, "tile %d does not exist in palette 1", t);
    if (amx_model.t[t].rows == 0)
        fault(insn, "tile %d is not configured (rows and colsb 0)", t);
    return &amx_model.t[t];
}

/* TILELOADD: rows x colsb bytes, row r at base + r * stride; the rest of the tile zero. */
void ra_amx_model_loadd(int t, const void *base, long stride)
{
    struct model_tile *x = valid_tile("tileloadd", t);
    amx_model.st.loadd++;
    memset(x->data, 0, sizeof x->data);
    for (int r = 0; r < x->rows; r++)
        memcpy(x->data[r], (const char *)base + (ptrdiff_t)r * stride, (size_t)x->colsb);
}

/* TILESTORED: rows x colsb bytes, row r to base + r * stride. */
void ra_amx_model_stored(int t, void *base, long stride)
{
    const struct model_tile *x = valid_tile("tilestored", t);
    amx_model.st.stored++;
    for (int r = 0; r < x->rows; r++)
        memcpy((char *)base + (ptrdiff_t)r * stride, x->data[r], (size_t)x->colsb);
}

void ra_amx_model_zero(int t)
{
    struct model_tile *x = valid_tile("tilezero", t);
    amx_model.st.zero++;
    memset(x->data, 0, sizeof x->data);
}

/* TDPBSUD c, a, b: M = c.rows = a.rows, K = a.colsb / 4 = b.rows, N =
 * c.colsb / 4 = b.colsb / 4; c[m][n] += sum_{k < K, i < 4} a[m][4k + i]
 * (signed) * b[k][4n + i] (unsigned), wrapping in 32 bits; the bytes of c
 * past its configured rows and colsb zero. */
void ra_amx_model_dpbsud(int ci, int ai, int bi)
{
    struct model_tile *c = valid_tile("tdpbsud", ci);
    const struct model_tile *a = valid_tile("tdpbsud", ai), *b = valid_tile("tdpbsud", bi);
    amx_model.st.dpbsud++;
    if (ci == ai || ci == bi || ai == bi)
        fault("tdpbsud", "tiles %d, %d, %d not distinct", ci, ai, bi);
    if (c->colsb % 4 || a->colsb % 4 || b->colsb % 4)
        fault("tdpbsud", "colsb %d, %d, %d not all multiples of 4", c->colsb, a->colsb, b->colsb);
    if (c->rows != a->rows)
        fault("tdpbsud", "M: tile %d has %d rows, tile %d %d", ci, c->rows, ai, a->rows);
    if (a->colsb != 4 * b->rows)
        fault("tdpbsud", "K: tile %d has colsb %d, tile %d %d rows (4 bytes per row wanted)", ai, a->colsb, bi,
              b->rows);
    if (c->colsb != b->colsb)
        fault("tdpbsud", "N: tile %d has colsb %d, tile %d %d", ci, c->colsb, bi, b->colsb);
    const int M = c->rows, K = a->colsb / 4, N = c->colsb / 4;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            uint32_t acc;
            memcpy(&acc, &c->data[i][4 * n], 4);
            for (int k = 0; k < K; k++)
                for (int j = 0; j < 4; j++)
                    acc += (uint32_t)((int32_t)(int8_t)a->data[i][4 * k + j] * (int32_t)b->data[k][4 * n + j]);
            memcpy(&c->data[i][4 * n], &acc, 4);
        }
    for (int i = 0; i < MODEL_ROWS; i++)
        memset(c->data[i] + (i < M ? c->colsb : 0), 0, (size_t)(MODEL_COLSB - (i < M ? c->colsb : 0)));
}

/* TILERELEASE: the initial state, no tile configured. */
void ra_amx_model_release(void)
{
    amx_model.st.release++;
    amx_model.configured = 0;
    for (int i = 0; i < MODEL_TILES; i++)
        amx_model.t[i].rows = amx_model.t[i].colsb = 0;
    clear_tiles();
}

#define AMX_LOADCONFIG(cfg) ra_amx_model_loadconfig(cfg)
#define AMX_LOADD(t, base, stride) ra_amx_model_loadd(t, base, (long)(stride))
#define AMX_STORED(t, base, stride) ra_amx_model_stored(t, base, (long)(stride))
#define AMX_ZERO(t) ra_amx_model_zero(t)
#define AMX_DPBSUD(c, a, b) ra_amx_model_dpbsud(c, a, b)
#define AMX_RELEASE() ra_amx_model_release()

#define RA_QK_AMX_MODEL 1
#include "kernels_impl.h"
