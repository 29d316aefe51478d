#include "finite.h"
#include "sysinfo.h"

#include <stdlib.h>
#include <string.h>

/* Elements one thread scans at a time: large enough that scheduling costs
 * vanish, small enough to share out a tensor among threads. */
#define BLOCK 65536

/* The exponent field of each dtype: all ones means Inf or NaN. */
#define F32_EXP 0x7f800000u
#define BF16_EXP 0x7f80u
#define F16_EXP 0x7c00u

/* Whether any of u[0..n) is non-finite: a branch-free OR over the block, which
 * the compiler vectorises (an early exit would stop it doing so). */
static int any_bad32(const uint32_t *u, int64_t n)
{
    uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; i++)
        bad |= (u[i] & F32_EXP) == F32_EXP;
    return bad != 0;
}

static int any_bad16(const uint16_t *h, int64_t n, uint16_t exp)
{
    uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; i++)
        bad |= (h[i] & exp) == exp;
    return bad != 0;
}

/* A block format's f16 scales: the byte offsets of d (and m or dmin) in each
 * block, as ggml lays them out (quant/quant.h). */
static int scale_offsets(enum ra_dtype t, size_t off[2], const char *names[2])
{
    switch (t) {
    case RA_DTYPE_Q4_1: off[1] = 2, names[1] = "m"; break;
    case RA_DTYPE_Q4_K: off[1] = 2, names[1] = "dmin"; break;
    default: off[1] = 0, names[1] = "d"; break;
    }
    off[0] = t == RA_DTYPE_Q6_K ? 208 : 0, names[0] = "d";
    if (t == RA_DTYPE_Q6_K)
        off[1] = 208;
    return 2;
}

static uint16_t scale_at(const void *data, enum ra_dtype t, int64_t block, size_t off)
{
    uint16_t h;
    memcpy(&h, (const unsigned char *)data + (size_t)block * ra_dtype_block_bytes(t) + off, sizeof h);
    return h;
}

/* Block I's first non-finite scale (0 or 1 in scale_offsets' order), or -1. */
static int bad_scale(const void *data, enum ra_dtype t, int64_t i)
{
    size_t off[2];
    const char *names[2];
    for (int j = 0; j < scale_offsets(t, off, names); j++)
        if ((scale_at(data, t, i, off[j]) & F16_EXP) == F16_EXP)
            return j;
    return -1;
}

static int blocks_bad(const void *data, enum ra_dtype t, int64_t lo, int64_t n)
{
    size_t off[2];
    const char *names[2];
    scale_offsets(t, off, names);
    uint32_t bad = 0;
    for (int64_t i = lo; i < lo + n; i++)
        bad |= (uint32_t)((scale_at(data, t, i, off[0]) & F16_EXP) == F16_EXP) |
               (uint32_t)((scale_at(data, t, i, off[1]) & F16_EXP) == F16_EXP);
    return bad != 0;
}

static int block_bad(const void *data, enum ra_dtype t, int64_t lo, int64_t n)
{
    if (ra_dtype_is_quant(t))
        return blocks_bad(data, t, lo, n);
    if (t == RA_DTYPE_F32)
        return any_bad32((const uint32_t *)data + lo, n);
    return any_bad16((const uint16_t *)data + lo, n, t == RA_DTYPE_BF16 ? BF16_EXP : F16_EXP);
}

static int is_bad(const void *data, enum ra_dtype t, int64_t i)
{
    if (ra_dtype_is_quant(t))
        return bad_scale(data, t, i) >= 0;
    if (t == RA_DTYPE_F32)
        return (((const uint32_t *)data)[i] & F32_EXP) == F32_EXP;
    const uint16_t exp = t == RA_DTYPE_BF16 ? BF16_EXP : F16_EXP;
    return (((const uint16_t *)data)[i] & exp) == exp;
}

/* The span holding global block B: the last whose first block is <= B. */
static int span_of(const int64_t *first_block, int n, int64_t b)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (first_block[mid] <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* What a span's index counts: elements, or a block format's blocks. */
static int64_t units(const struct ra_finite_span *s)
{
    return ra_dtype_is_quant(s->dtype) ? s->count / ra_dtype_block(s->dtype) : s->count;
}

/* Blocks are numbered across all spans, so one parallel region scans them
 * all: a region per tensor would end in a barrier per tensor, and on a busy
 * node each barrier can wait a scheduler slice for a preempted thread (111
 * regions took 10x longer than one on this project's shared 2-core VM).
 * Dynamic chunks keep a preempted thread from holding up the rest. */
int ra_first_nonfinite_span(const struct ra_finite_span *spans, int n, int n_threads, int64_t *element)
{
    int64_t *first_block = malloc((size_t)(n > 0 ? n : 1) * sizeof *first_block), blocks = 0;
    if (!first_block) { /* no memory for the index: scan span by span on one thread */
        for (int i = 0; i < n; i++)
            if ((*element = ra_first_nonfinite(spans[i].data, spans[i].dtype, spans[i].count, 1)) >= 0)
                return i;
        return -1;
    }
    for (int i = 0; i < n; i++) {
        first_block[i] = blocks;
        blocks += (units(&spans[i]) + BLOCK - 1) / BLOCK;
    }
    int64_t first = blocks;
    if (n_threads <= 0)
        n_threads = ra_cpus_allowed();
#pragma omp parallel for schedule(dynamic, 4) reduction(min : first) num_threads(n_threads) if (blocks > 1)
    for (int64_t b = 0; b < blocks; b++) {
        const struct ra_finite_span *s = &spans[span_of(first_block, n, b)];
        const int64_t lo = (b - first_block[s - spans]) * BLOCK, len = units(s) - lo < BLOCK ? units(s) - lo : BLOCK;
        if (b < first && block_bad(s->data, s->dtype, lo, len))
            first = b;
    }
    int found = -1;
    if (first < blocks) {
        found = span_of(first_block, n, first);
        const struct ra_finite_span *s = &spans[found];
        *element = (first - first_block[found]) * BLOCK;
        while (!is_bad(s->data, s->dtype, *element))
            ++*element;
    }
    free(first_block);
    return found;
}

int64_t ra_first_nonfinite(const void *data, enum ra_dtype t, int64_t n, int n_threads)
{
    const struct ra_finite_span s = { data, t, n };
    int64_t element = -1;
    return ra_first_nonfinite_span(&s, 1, n_threads, &element) < 0 ? -1 : element;
}

const char *ra_nonfinite_scale(const void *data, enum ra_dtype t, int64_t i)
{
    size_t off[2];
    const char *names[2];
    scale_offsets(t, off, names);
    const int j = bad_scale(data, t, i);
    return j < 0 ? "?" : names[j];
}

const char *ra_nonfinite_name(const void *data, enum ra_dtype t, int64_t i)
{
    uint32_t mant, sign;
    if (ra_dtype_is_quant(t)) {
        size_t off[2];
        const char *names[2];
        scale_offsets(t, off, names);
        const int j = bad_scale(data, t, i);
        const uint16_t h = scale_at(data, t, i, off[j < 0 ? 0 : j]);
        mant = h & 0x03ffu, sign = h >> 15;
    } else if (t == RA_DTYPE_F32) {
        const uint32_t u = ((const uint32_t *)data)[i];
        mant = u & 0x007fffffu, sign = u >> 31;
    } else {
        const uint16_t h = ((const uint16_t *)data)[i];
        mant = h & (t == RA_DTYPE_BF16 ? 0x007fu : 0x03ffu), sign = h >> 15;
    }
    return mant ? "NaN" : sign ? "-Inf" : "+Inf";
}
