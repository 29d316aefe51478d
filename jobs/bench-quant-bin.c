/* bench-quant: the matmul on block-quantized weights (src/quant/quant.h's
 * ra_quant_matmul) beside the CPU backend's bf16 and f32 weights, per
 * weight type, shape and thread count.
 *
 * GEMV (decode steps, n = 1 and 4 tokens): weight GB/s (the matrix's bytes
 * in its own type over the time of one product) beside the read bandwidth
 * (src/membw.h: ra_membw_read, one array summed) measured in the same run
 * with the same threads; their ratio is the share of the memory bound
 * reached. The products cycle through copies of the matrix that together
 * exceed --cold-mib, so each reads its weights from memory, not a cache;
 * the copies lie in 2 MiB pages as the read bandwidth's array does (one core
 * streams 4 KiB pages up to a third slower: src/hugepage.h), so the ratio
 * compares like with like.
 *
 * Prefill (n = --prefill-n tokens, 512 by default): GFLOP/s (2 n rows k per
 * product) on each path of ra_quant_matmul: int8 (activations quantized, the
 * int8 GEMM on packed panels), gemv (activations quantized, the int8 GEMV
 * over token groups), f32 (dequantized panels, sgemm), bf16 (dequantized to
 * bf16 for the bf16 unit, where there is one); bf16 and f32 weights run the
 * backend's own matmul (the bf16 unit, sgemm). "best" names the fastest path
 * and its ratio to bf16 weights of the same shape. The paths' samples are
 * taken in turn (one of each, --repeat times), so that a slower stretch of a
 * shared machine falls on all of them.
 *
 * Shapes are rows x k (the weight [rows][k]): those of SmolLM2-135M (576x576
 * q/o, 1536x576 gate/up, 576x1536 down, 49152x576 classifier), of
 * runahead-synth's bench-small (768x768, 2048x768, 768x2048, 32000x768) and
 * of TinyLlama-1.1B (2048x2048 q/o, 5632x2048 gate/up, 2048x5632 down); Q4_K
 * and Q6_K need k in whole 256-element super-blocks (SmolLM2's 576 is not:
 * llama.cpp stores those tensors in another type), so they skip such shapes.
 * The weights are random blocks (a product's time does not depend on the
 * values). Every figure is the median [min-max] of --repeat samples, each at
 * least --min-ms long; prefill's the median, or with --max the largest. */
#include "backend.h"
#include "bench_util.h"
#include "gemm_bf16.h"
#include "half.h"
#include "hugepage.h"
#include "membw.h"
#include "quant/quant.h"
#include "ra_core.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 16

const char bench_name[] = "bench-quant";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench-quant [--types LIST] [--shapes LIST] [--threads LIST] [--prefill-n N]\n"
            "                   [--repeat N] [--min-ms N] [--membw-mib N] [--cold-mib N] [--no-prefill] [--max]\n"
            "\n"
            "The matmul on block-quantized weights beside bf16 and f32 weights: GEMV weight GB/s at\n"
            "n = 1 and 4 tokens against the read bandwidth measured in the same run (ratio), and\n"
            "prefill GFLOP/s at n = --prefill-n per path (int8 panels, int8 gemv, f32, bf16), the paths\n"
            "sampled in turn; medians [min-max].\n"
            "\n"
            "  --types LIST    q8_0,q4_0,q4_1,q4_k,q6_k,bf16,f32 (default all)\n"
            "  --shapes LIST   smollm2, bench-small, tinyllama or ROWSxK items (default smollm2,bench-small)\n"
            "  --threads LIST  thread counts (default 1,2)\n"
            "  --prefill-n N   tokens of a prefill product (default 512; at least 5)\n"
            "  --repeat N      samples per figure (default 5)\n"
            "  --min-ms N      shortest sample, milliseconds (default 50)\n"
            "  --membw-mib N   MiB of the read bandwidth's array (default 256)\n"
            "  --cold-mib N    GEMV copies of a matrix cover at least this (default 128; beyond the\n"
            "                  last-level cache, so each product reads memory)\n"
            "  --no-prefill    GEMV rows only\n"
            "  --max           prefill figures are the largest of the samples, not the median\n"
            "  --help\n"
            "\n"
            "RA_QUANT_ISA forces the quant kernels, RA_CPU_ISA the CPU ones, RA_GEMM the bf16 unit.\n");
}

struct opts {
    enum ra_dtype types[MAX_LIST];
    int n_types;
    int64_t shapes[64][2];
    int n_shapes;
    int threads[MAX_LIST], n_threads;
    int prefill_n, repeat, min_ms, membw_mib, cold_mib, prefill, max;
};

static const int64_t smollm2[][2] = { { 576, 576 }, { 1536, 576 }, { 576, 1536 }, { 49152, 576 } };
static const int64_t bench_small[][2] = { { 768, 768 }, { 2048, 768 }, { 768, 2048 }, { 32000, 768 } };
static const int64_t tinyllama[][2] = { { 2048, 2048 }, { 5632, 2048 }, { 2048, 5632 } };

static void bad(const char *msg, const char *arg)
{
    fprintf(stderr, "%s: %s '%s'\n", bench_name, msg, arg);
    exit(2);
}

static void add_shapes(struct opts *o, const int64_t (*s)[2], int n)
{
    for (int i = 0; i < n && o->n_shapes < 64; i++, o->n_shapes++) {
        o->shapes[o->n_shapes][0] = s[i][0];
        o->shapes[o->n_shapes][1] = s[i][1];
    }
}

static void parse_shapes(struct opts *o, const char *arg)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", arg);
    o->n_shapes = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long long r, k;
        char tail;
        if (!strcmp(t, "smollm2"))
            add_shapes(o, smollm2, 4);
        else if (!strcmp(t, "bench-small"))
            add_shapes(o, bench_small, 4);
        else if (!strcmp(t, "tinyllama"))
            add_shapes(o, tinyllama, 3);
        else if (sscanf(t, "%lldx%lld%c", &r, &k, &tail) == 2 && r > 0 && k > 0 && k % 32 == 0 && r <= 1 << 20 &&
                 k <= 1 << 16 && o->n_shapes < 64)
            add_shapes(o, (const int64_t[][2]){ { r, k } }, 1);
        else
            bad("--shapes: not smollm2, bench-small, tinyllama or ROWSxK (k a multiple of 32):", t);
    }
    if (!o->n_shapes)
        bad("--shapes: no shape in", arg);
}

static void parse_types(struct opts *o, const char *arg)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    o->n_types = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int d = 0; d < RA_DTYPE_COUNT; d++)
            if (d != RA_DTYPE_F16 && !strcmp(t, ra_dtype_name((enum ra_dtype)d)))
                found = d;
        if (found < 0 || o->n_types == MAX_LIST)
            bad("--types: not one of q8_0, q4_0, q4_1, q4_k, q6_k, bf16, f32:", t);
        o->types[o->n_types++] = (enum ra_dtype)found;
    }
    if (!o->n_types)
        bad("--types: no type in", arg);
}

static int positive(const char *arg, const char *flag, int max)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (*end || v < 1 || v > max) {
        fprintf(stderr, "%s: %s: '%s' is not an integer from 1 to %d\n", bench_name, flag, arg, max);
        exit(2);
    }
    return (int)v;
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){ .prefill_n = 512, .repeat = 5, .min_ms = 50, .membw_mib = 256, .cold_mib = 128,
                        .prefill = 1 };
    parse_types(o, "q8_0,q4_0,q4_1,q4_k,q6_k,bf16,f32");
    parse_shapes(o, "smollm2,bench-small");
    o->n_threads = bench_parse_list("1,2", o->threads, MAX_LIST, "--threads");
    static const struct option opts[] = {
        { "types", required_argument, NULL, 'y' },   { "shapes", required_argument, NULL, 's' },
        { "threads", required_argument, NULL, 't' }, { "prefill-n", required_argument, NULL, 'n' },
        { "repeat", required_argument, NULL, 'r' },  { "min-ms", required_argument, NULL, 'M' },
        { "membw-mib", required_argument, NULL, 'b' }, { "cold-mib", required_argument, NULL, 'c' },
        { "no-prefill", no_argument, NULL, 'P' },    { "help", no_argument, NULL, 'h' },
        { "max", no_argument, NULL, 'X' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'y': parse_types(o, optarg); break;
        case 's': parse_shapes(o, optarg); break;
        case 't': o->n_threads = bench_parse_list(optarg, o->threads, MAX_LIST, "--threads"); break;
        case 'n':
            o->prefill_n = positive(optarg, "--prefill-n", 8192);
            if (o->prefill_n <= RA_QMM_GEMV_MAX_N)
                bad("--prefill-n: a prefill has more than 4 tokens, not", optarg);
            break;
        case 'r': o->repeat = positive(optarg, "--repeat", BENCH_MAX_REPEAT); break;
        case 'M': o->min_ms = positive(optarg, "--min-ms", 60000); break;
        case 'b': o->membw_mib = positive(optarg, "--membw-mib", 65536); break;
        case 'c': o->cold_mib = positive(optarg, "--cold-mib", 65536); break;
        case 'P': o->prefill = 0; break;
        case 'X': o->max = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc)
        bad("unexpected argument", argv[optind]);
}

/* ----------------------------------------------------------- operands */

static uint32_t rng = 2463534242u;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

/* Random bytes with each block's scales set to small finite halves (bf16
 * and f32: small finite values), so that no product overflows. */
static void fill(enum ra_dtype t, uint8_t *w, size_t bytes)
{
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
        const uint32_t v = next();
        memcpy(w + i, &v, 4);
    }
    if (t == RA_DTYPE_F32) {
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            const float f = (float)(int32_t)next() * 1e-11f;
            memcpy(w + i, &f, 4);
        }
        return;
    }
    const uint16_t h = ra_f32_to_f16(0.01f), b = ra_f32_to_bf16(0.01f);
    if (t == RA_DTYPE_BF16) {
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            const uint16_t v = (uint16_t)(b ^ (next() & 0x807f));
            memcpy(w + i, &v, 2);
        }
        return;
    }
    const size_t bb = ra_dtype_block_bytes(t);
    for (size_t off = 0; off + bb <= bytes; off += bb) {
        if (t == RA_DTYPE_Q6_K)
            memcpy(w + off + bb - 2, &h, 2);
        else
            memcpy(w + off, &h, 2);
        if (t == RA_DTYPE_Q4_1 || t == RA_DTYPE_Q4_K)
            memcpy(w + off + 2, &h, 2);
    }
}

static size_t matrix_bytes(enum ra_dtype t, int64_t rows, int64_t k)
{
    return ra_dtype_is_quant(t) ? ra_dtype_row_bytes(t, k) * (size_t)rows : ra_dtype_size(t) * (size_t)(rows * k);
}

/* ----------------------------------------------------------- timing */

/* What one product runs on: a quantized matmul with its path, or a backend. */
struct runner {
    struct ra_quant_matmul *qm;
    struct ra_backend *be;
    int threads;
};

static int product(const struct runner *r, float *y, const float *x, const struct ra_tensor *w, int n)
{
    if (ra_dtype_is_quant(w->dtype))
        return ra_quant_matmul(r->qm, y, (int)w->rows, x, (int)w->cols, w, n, r->threads);
    return r->be->ops->matmul(r->be, y, (int)w->rows, x, (int)w->cols, w, n);
}

/* Samples of seconds per product, cycling through `copies` matrices
 * `stride` bytes apart, each sample at least min_ms. */
static void time_products(const struct runner *r, float *y, const float *x, struct ra_tensor w, int copies,
                          size_t stride, int n, const struct opts *o, struct bench_samples *s)
{
    const char *base = w.data;
    int rc = product(r, y, x, &w, n); /* warm: plans, scratch */
    if (rc != RA_OK)
        bench_die("product", rc);
    double t0 = ra_wall_s();
    rc = product(r, y, x, &w, n);
    const double one = ra_wall_s() - t0;
    const int iters = one <= 0 ? 1000 : one * 1e3 >= o->min_ms ? 1 : (int)(o->min_ms / (one * 1e3)) + 1;
    *s = (struct bench_samples){ 0 };
    for (int rep = 0; rep < o->repeat && rc == RA_OK; rep++) {
        t0 = ra_wall_s();
        for (int i = 0; i < iters && rc == RA_OK; i++) {
            w.data = base + (size_t)(i % copies) * stride;
            rc = product(r, y, x, &w, n);
        }
        bench_add(s, (ra_wall_s() - t0) / iters);
    }
    if (rc != RA_OK)
        bench_die("product", rc);
}

/* value / each sample, as a new sample set (rates from times). */
static void rates(const struct bench_samples *t, double value, struct bench_samples *out)
{
    *out = (struct bench_samples){ 0 };
    for (int i = 0; i < t->n; i++)
        bench_add(out, value / t->v[i]);
}

/* ----------------------------------------------------------- the cases */

/* The prefill paths, in the columns' order. */
#define NPATHS 4
static const enum ra_quant_gemm paths[NPATHS] = { RA_QUANT_GEMM_INT8, RA_QUANT_GEMM_GEMV, RA_QUANT_GEMM_F32,
                                                  RA_QUANT_GEMM_BF16 };

struct prefill_row {
    double gflops[NPATHS]; /* per path; 0: not run */
};

static void gemv_case(const struct runner *r, enum ra_dtype t, int64_t rows, int64_t k, double read_gbs,
                      const struct opts *o)
{
    const size_t bytes = matrix_bytes(t, rows, k), stride = (bytes + 4095) / 4096 * 4096;
    int copies = (int)(((size_t)o->cold_mib << 20) / stride) + 1;
    uint8_t *w = ra_huge_alloc(stride * (size_t)copies);
    float *x = malloc(sizeof(float) * (size_t)(4 * k)), *y = malloc(sizeof(float) * (size_t)(4 * rows));
    if (!w || !x || !y)
        bench_die("gemv operands", RA_ENOMEM);
    fill(t, w, stride * (size_t)copies);
    for (int64_t i = 0; i < 4 * k; i++)
        x[i] = (float)((int)(next() % 2001) - 1000) * 1e-3f;
    const struct ra_tensor wt = { .dtype = t, .rows = rows, .cols = k, .data = w };
    char shape[32], s1[64], s4[64];
    snprintf(shape, sizeof shape, "%lldx%lld", (long long)rows, (long long)k);
    struct bench_samples ts, g1, g4;
    time_products(r, y, x, wt, copies, stride, 1, o, &ts);
    rates(&ts, (double)bytes / 1e9, &g1);
    time_products(r, y, x, wt, copies, stride, 4, o, &ts);
    rates(&ts, (double)bytes / 1e9, &g4);
    printf("gemv %-2d %-5s %-10s %s %.2fx %s %.2fx\n", r->threads, ra_dtype_name(t), shape,
           bench_spread(s1, sizeof s1, &g1, "%.1f"), bench_median(&g1) / read_gbs,
           bench_spread(s4, sizeof s4, &g4, "%.1f"), bench_median(&g4) / read_gbs);
    fflush(stdout);
    free(w);
    free(x);
    free(y);
}

/* GFLOP/s of each path (row->gflops), printed as one row. */
static void prefill_case(struct runner *r, enum ra_dtype t, int64_t rows, int64_t k, int have_bf16,
                         const struct opts *o, struct prefill_row *row)
{
    const int n = o->prefill_n;
    const size_t bytes = matrix_bytes(t, rows, k);
    uint8_t *w = malloc(bytes);
    float *x = malloc(sizeof(float) * (size_t)n * (size_t)k), *y = malloc(sizeof(float) * (size_t)n * (size_t)rows);
    if (!w || !x || !y)
        bench_die("prefill operands", RA_ENOMEM);
    fill(t, w, bytes);
    for (int64_t i = 0; i < (int64_t)n * k; i++)
        x[i] = (float)((int)(next() % 2001) - 1000) * 1e-3f;
    const struct ra_tensor wt = { .dtype = t, .rows = rows, .cols = k, .data = w };
    const double gflop = 2.0 * n * (double)rows * (double)k / 1e9;
    *row = (struct prefill_row){ { 0 } };
    struct bench_samples ts, g[NPATHS];
    memset(g, 0, sizeof g);
    struct opts one = *o;
    one.repeat = 1;
    for (int rep = 0; rep < o->repeat; rep++)
        for (int p = 0; p < NPATHS; p++) {
            const enum ra_quant_gemm path = paths[p];
            if (ra_dtype_is_quant(t)) {
                if (path == RA_QUANT_GEMM_BF16 && !have_bf16)
                    continue;
                int rc = ra_quant_matmul_set_gemm(r->qm, path);
                if (rc != RA_OK)
                    bench_die("prefill path", rc);
            } else if (path != (t == RA_DTYPE_F32 || !have_bf16 ? RA_QUANT_GEMM_F32 : RA_QUANT_GEMM_BF16)) {
                continue; /* the backend's own path only */
            }
            time_products(r, y, x, wt, 1, bytes, n, &one, &ts);
            bench_add(&g[p], gflop / ts.v[0]);
        }
    for (int p = 0; p < NPATHS; p++) {
        double best = 0;
        for (int i = 0; i < g[p].n; i++)
            best = g[p].v[i] > best ? g[p].v[i] : best;
        row->gflops[p] = g[p].n == 0 ? 0 : o->max ? best : bench_median(&g[p]);
    }
    if (ra_dtype_is_quant(t))
        ra_quant_matmul_set_gemm(r->qm, RA_QUANT_GEMM_AUTO);
    free(w);
    free(x);
    free(y);
}

static void print_prefill(int threads, enum ra_dtype t, int64_t rows, int64_t k, const struct prefill_row *row,
                          double bf16_best)
{
    char shape[32], cell[NPATHS][16];
    int best = -1;
    snprintf(shape, sizeof shape, "%lldx%lld", (long long)rows, (long long)k);
    for (int p = 0; p < NPATHS; p++) {
        if (row->gflops[p] > 0)
            snprintf(cell[p], sizeof cell[p], "%.1f", row->gflops[p]);
        else
            snprintf(cell[p], sizeof cell[p], "-");
        if (row->gflops[p] > 0 && (best < 0 || row->gflops[p] > row->gflops[best]))
            best = p;
    }
    if (best < 0)
        return;
    printf("prefill %-2d %-5s %-10s %7s %7s %7s %7s %-4s %.2fx\n", threads, ra_dtype_name(t), shape, cell[0],
           cell[1], cell[2], cell[3], ra_quant_gemm_name(paths[best]), bf16_best > 0 ? row->gflops[best] / bf16_best : 0.0);
    fflush(stdout);
}

static int shape_fits(enum ra_dtype t, int64_t k) { return k % ra_dtype_block(t) == 0; }

static void header(const struct opts *o, int have_bf16, struct ra_gemm_bf16 *g, const double *read_gbs)
{
    char cpu[256], flags[256], quant[256];
    bench_cpu_name(cpu, sizeof cpu);
    bench_cpu_flags(flags, sizeof flags);
    ra_quant_isa_describe(quant, sizeof quant);
    printf("# bench-quant: the matmul on block-quantized weights, beside bf16 and f32 weights\n");
    printf("# CPU: %s (%s)\n", cpu, flags);
    printf("# quant kernels: %s\n", quant);
    printf("# bf16 unit: %s\n", have_bf16 ? ra_gemm_bf16_describe(g) : "none (the bf16 path is not run)");
    printf("# read bandwidth (one array of %d MiB summed), GB/s:", o->membw_mib);
    for (int i = 0; i < o->n_threads; i++)
        printf(" T=%d %.1f", o->threads[i], read_gbs[i]);
    printf("\n# gemv: T type shape(rows x k) n=1 GB/s [min-max] ratio-to-read n=4 GB/s [min-max] ratio-to-read\n");
    printf("#   (weight bytes in the stored type per product; copies over %d MiB in 2 MiB pages, so each reads "
           "memory)\n",
           o->cold_mib);
    if (o->prefill)
        printf("# prefill n=%d: T type shape GFLOP/s int8 gemv f32 bf16 (%s of %d, in turn), best path, best / "
               "bf16 weights' best\n", o->prefill_n, o->max ? "maxima" : "medians", o->repeat);
    fflush(stdout);
}

/* Every case of one thread count. */
static void run_threads(const struct opts *o, int threads, double read_gbs)
{
    struct ra_gemm_bf16 *g = NULL;
    struct ra_backend *be = NULL;
    struct ra_backend_params bp = RA_BACKEND_PARAMS_INIT;
    bp.threads = threads;
    int rc = ra_gemm_bf16_create(&g, threads);
    if (rc == RA_OK)
        rc = ra_backend_open(&be, "cpu", &bp);
    struct runner r = { .be = be, .threads = threads };
    if (rc == RA_OK)
        rc = ra_quant_matmul_create(&r.qm, threads, g);
    if (rc != RA_OK)
        bench_die("setup", rc);
    for (int s = 0; s < o->n_shapes; s++)
        for (int i = 0; i < o->n_types; i++)
            if (shape_fits(o->types[i], o->shapes[s][1]))
                gemv_case(&r, o->types[i], o->shapes[s][0], o->shapes[s][1], read_gbs, o);
    for (int s = 0; o->prefill && s < o->n_shapes; s++) {
        struct prefill_row rows[MAX_LIST], bf16row;
        const int64_t nr = o->shapes[s][0], k = o->shapes[s][1];
        prefill_case(&r, RA_DTYPE_BF16, nr, k, g != NULL, o, &bf16row);
        double bf16_best = 0;
        for (int p = 0; p < NPATHS; p++)
            bf16_best = bf16row.gflops[p] > bf16_best ? bf16row.gflops[p] : bf16_best;
        for (int i = 0; i < o->n_types; i++) {
            const enum ra_dtype t = o->types[i];
            if (!shape_fits(t, k))
                continue;
            if (t == RA_DTYPE_BF16)
                rows[i] = bf16row;
            else
                prefill_case(&r, t, nr, k, g != NULL, o, &rows[i]);
            print_prefill(threads, t, nr, k, &rows[i], bf16_best);
        }
    }
    char line[256];
    ra_quant_matmul_describe(r.qm, line, sizeof line);
    printf("# T=%d quantized weights by default: %s\n", threads, line);
    ra_quant_matmul_free(r.qm);
    ra_backend_free(be);
    ra_gemm_bf16_free(g);
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    double read_gbs[MAX_LIST];
    for (int i = 0; i < o.n_threads; i++) {
        struct ra_membw m;
        int rc = ra_membw_read((size_t)o.membw_mib << 20, o.threads[i], 3, &m);
        if (rc != RA_OK)
            bench_die("read bandwidth", rc);
        read_gbs[i] = m.median_gbs;
    }
    struct ra_gemm_bf16 *g = NULL;
    int rc = ra_gemm_bf16_create(&g, 1);
    if (rc != RA_OK)
        bench_die("bf16 unit", rc);
    header(&o, g != NULL, g, read_gbs);
    ra_gemm_bf16_free(g);
    for (int i = 0; i < o.n_threads; i++)
        run_threads(&o, o.threads[i], read_gbs[i]);
    return 0;
}
