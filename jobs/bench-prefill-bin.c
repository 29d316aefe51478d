/* bench-prefill: single-process prompt processing (prefill) on the CPU backend
 * (--backend cuda: on a GPU, the lanes being the weights' dtype there).
 *
 * For each thread count, prompt length and compute dtype (f32; bf16: the
 * linear layers as bf16 x bf16 -> fp32 GEMMs on the CPU's bf16 unit, f32
 * weights converted once at attach) it runs one span [0, N) through
 * ra_forward_span (logits of the last token only) --repeat times and prints
 * prompt tokens per second and the achieved GFLOP/s of the linear layers and
 * of attention (FLOPs from ra_forward_flops, time from the forward pass's own
 * per-op stats), each as the median [min-max] of the runs.
 *
 * The GEMM peak of each unit is measured in the same run on the same shapes
 * (M = tokens; q/k/v/o, gate/up, down of every layer, in the model's order):
 * OpenBLAS cblas_sgemm, and the bf16 unit the backend uses (oneDNN's matmul:
 * AMX-BF16 or AVX512-BF16; cblas_sbgemm where OpenBLAS has it), one sample
 * right before each model run of its dtype, and the runs of the two dtypes
 * interleaved (A, B, A, B), so that every ratio compares samples taken
 * moments apart. An untimed bf16 run per prompt length first builds the
 * unit's plans (JIT-compiled per shape). "of peak" is the linear layers' median rate over the
 * median peak of the unit they ran on. No figure from another machine or
 * run is printed.
 *
 * It then checks that attention scales with the causal lower triangle:
 * attention time at 8192 against 4096 tokens (4x expected), and the time of
 * span [4096, 8192) after [0, 4096) against span [0, 4096) (3x for a kernel
 * that skips the masked upper triangle, 2x for one that computes every key of
 * the cache for every query).
 *
 * The model is loaded through ra_model_load from a directory written by
 * runahead-synth (the jobs/bench-prefill wrapper creates it). */
#include "args.h"
#include "bench_util.h"
#include "gemm_bf16.h"
#include "half.h"
#include "ra_core.h"

#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* Declared by OpenBLAS's cblas.h; repeated for builds against other headers. */
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);

#define MAX_LIST 16

const char bench_name[] = "bench-prefill";
#define SCALE_N 8192 /* the attention scaling check runs [0, 4096) then [4096, 8192) */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench-prefill [--model DIR] [--tokens N,N,...] [--threads T,T,...] [--dtypes f32,bf16]\n"
            "                     [--repeat N] [--no-scaling] [--backend cpu|cuda]\n"
            "\n"
            "Single-process prefill of a synthetic model on the CPU backend, per compute dtype:\n"
            "prompt tokens/s, GFLOP/s of the linear layers and of attention, and the GEMM peak\n"
            "of each unit (OpenBLAS sgemm; the bf16 unit: oneDNN on AMX-BF16/AVX512-BF16) on\n"
            "the same shapes, measured in the same run; medians [min-max] of --repeat runs;\n"
            "then the causal attention scaling check.\n"
            "\n"
            "  --model DIR      model directory (config.json + model.safetensors) or checkpoint\n"
            "                   (default ${RA_BENCH_DIR:-$HOME/.cache/runahead}/bench-small)\n"
            "  --tokens LIST    prompt lengths (default 512,2048,8192)\n"
            "  --threads LIST   thread counts (default 1,2)\n"
            "  --dtypes LIST    lanes, interleaved run by run (default f32,bf16,bf16m): f32 compute;\n"
            "                   bf16 compute of the f32 model (a bf16 copy made at attach, prepacked);\n"
            "                   bf16m, a bf16 copy of the model (--bf16-model) read in place. The bf16\n"
            "                   lanes need a bf16 unit, else they are skipped\n"
            "  --bf16-model DIR the bf16m model (default: the model's directory + \"-bf16\", if present;\n"
            "                   the jobs/bench-prefill wrapper writes it)\n"
            "  --repeat N       runs of everything timed; medians and spreads of them (default 3)\n"
            "  --no-scaling     skip the attention scaling check (spans of 4096 and 8192 tokens)\n"
            "  --backend B      cpu (default) or cuda: on cuda the lanes are the weights' dtype on the\n"
            "                   device (f32, bf16), no GEMM peak is measured, and the per-op shares are\n"
            "                   host-side times of asynchronous work\n"
            "  --help\n"
            "\n"
            "RA_CPU_ISA and RA_GEMM (auto|onednn|sbgemm|f32) force the kernels and the bf16 unit.\n");
}

/* One timed prefill: spans [b[i], b[i+1]) in order, logits for the last only.
 * stats[i] and wall[i] receive each span's accounting and wall time; returns
 * the total wall time. */
static double prefill(struct ra_context *ctx, struct ra_kvcache *kv, const int32_t *tokens, const int *b, int spans,
                      struct ra_forward_stats *stats, double *wall, float *logits)
{
    double total = 0;
    for (int i = 0; i < spans; i++) {
        memset(&stats[i], 0, sizeof stats[i]);
        ctx->stats = &stats[i];
        double t0 = ra_wall_s();
        int rc = ra_forward_span(ctx, tokens + b[i], b[i], b[i + 1] - b[i], kv, i == spans - 1 ? logits : NULL);
        double t = ra_wall_s() - t0;
        wall[i] = t;
        total += t;
        ctx->stats = NULL;
        if (rc != RA_OK)
            bench_die("forward pass", rc);
    }
    return total;
}

/* ----------------------------------------------------------- GEMM peaks */

/* Operands for the peak samples: activations a [n][k] f32, weights w (f32)
 * and wb (the same rounded to bf16) [out][k], output c. */
struct gemm_bufs {
    float *a, *w, *c;
    uint16_t *wb;
    struct ra_bf16_packed *packed[7]; /* per layer shape, or NULL: plain wb */
};

struct shape {
    int k, out;
};

/* The forward pass's linear shapes of one layer, in its order. */
static int layer_shapes(const struct ra_config *cfg, struct shape *s)
{
    const int d = cfg->dim, kv = ra_config_kv_dim(cfg), h = cfg->hidden_dim;
    const struct shape all[] = { { d, d }, { d, kv }, { d, kv }, { d, d }, { d, h }, { d, h }, { h, d } };
    memcpy(s, all, sizeof all);
    return 7;
}

/* Plain OpenBLAS cblas_sgemm on every layer's shapes with M = n, as one
 * timed sample (seconds), openblas threads = T. */
static double sgemm_forward_time(const struct ra_config *cfg, int n, int threads, struct gemm_bufs *g)
{
    struct shape sh[7];
    const int ns = layer_shapes(cfg, sh);
    openblas_set_num_threads(threads);
    double t0 = ra_wall_s();
    for (int l = 0; l < cfg->n_layers; l++)
        for (int i = 0; i < ns; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, sh[i].out, sh[i].k, 1.0f, g->a, sh[i].k, g->w,
                        sh[i].k, 0.0f, g->c, sh[i].out);
    double t = ra_wall_s() - t0;
    openblas_set_num_threads(1); /* what the CPU backend expects */
    return t;
}

/* The bf16 unit (gemm_bf16.h, the backend's own path: activations rounded
 * to bf16, then the unit's GEMM) on the same shapes; a negative time if it
 * declines a shape. */
static double bf16_forward_time(const struct ra_config *cfg, int n, struct ra_gemm_bf16 *u, struct gemm_bufs *g,
                                int plain)
{
    struct shape sh[7];
    const int ns = layer_shapes(cfg, sh);
    double t0 = ra_wall_s();
    for (int l = 0; l < cfg->n_layers; l++)
        for (int i = 0; i < ns; i++)
            if ((g->packed[i] && !plain ? ra_gemm_bf16_run_packed(u, g->c, sh[i].out, g->a, sh[i].k, g->packed[i], n)
                              : ra_gemm_bf16_run(u, g->c, sh[i].out, g->a, sh[i].k, g->wb, sh[i].out, sh[i].k, n)) !=
                RA_OK)
                return -1;
    return ra_wall_s() - t0;
}

/* The weights of each shape in the layout the backend gives its bf16 copies
 * of f32 weights (oneDNN's blocked one unless RA_GEMM_PREPACK=0), so that
 * the peak is taken on what the layers run. */
static void pack_shapes(const struct ra_config *cfg, struct ra_gemm_bf16 *u, struct gemm_bufs *g)
{
    struct shape sh[7];
    const int ns = layer_shapes(cfg, sh);
    const char *env = getenv("RA_GEMM_PREPACK");
    for (int i = 0; i < ns; i++) {
        g->packed[i] = NULL;
        if (!env || strcmp(env, "0") != 0)
            ra_gemm_bf16_pack(u, g->wb, sh[i].out, sh[i].k, &g->packed[i]);
    }
}

static void unpack_shapes(struct gemm_bufs *g)
{
    for (int i = 0; i < 7; i++) {
        ra_bf16_packed_free(g->packed[i]);
        g->packed[i] = NULL;
    }
}

/* ----------------------------------------------------------- one dtype */

/* f32: fp32 compute; bf16: the f32 weights' bf16 copy (prepacked); bf16m:
 * a bf16 model file, its weights read in place from the mapping. */
enum { DT_F32, DT_BF16, DT_BF16M, N_DT };
static const char *const dt_names[N_DT] = { "f32", "bf16", "bf16m" };

/* What one (threads, tokens, dtype) cell collects, one value per run. */
struct cell {
    struct bench_samples tps, lin, att, peak, lin_pct, att_pct, other_pct;
};

struct lane {
    int on;
    int cpu; /* on the CPU backend: the GEMM peaks are measured beside it */
    struct ra_model m;
    struct ra_backend *be;
    struct ra_context ctx;
    struct ra_kvcache kv;
    char unit[160]; /* what runs its linear layers */
};

static void lane_sample(struct lane *ln, int dt, const int32_t *tokens, int n, float *logits, int threads,
                        struct ra_gemm_bf16 *u, struct gemm_bufs *g, struct cell *c)
{
    const int b[2] = { 0, n };
    struct ra_forward_stats st;
    double wall;
    const double tp = !ln->cpu ? -1 /* no host GEMM to compare a device with */
                      : dt == DT_F32 ? sgemm_forward_time(&ln->m.config, n, threads, g)
                                     : bf16_forward_time(&ln->m.config, n, u, g, dt == DT_BF16M);
    prefill(&ln->ctx, &ln->kv, tokens, b, 1, &st, &wall, logits);
    const int r = c->tps.n;
    const double acc = st.t_linear + st.t_attention + st.t_other;
    c->tps.v[r] = n / wall;
    c->lin.v[r] = st.flop_linear / st.t_linear * 1e-9;
    c->att.v[r] = st.flop_attention / st.t_attention * 1e-9;
    c->peak.v[r] = tp > 0 ? st.flop_linear / tp * 1e-9 : NAN; /* the same FLOPs */
    c->lin_pct.v[r] = 100 * st.t_linear / acc;
    c->att_pct.v[r] = 100 * st.t_attention / acc;
    c->other_pct.v[r] = 100 * st.t_other / acc;
    c->tps.n = c->lin.n = c->att.n = c->peak.n = c->lin_pct.n = c->att_pct.n = c->other_pct.n = r + 1;
}

/* Median [min-max] of `repeat` passes over spans b[0..spans]: wall and
 * attention time per span (the first span is a prefill from 0). */
static void median_spans(struct ra_context *ctx, struct ra_kvcache *kv, const int32_t *tokens, const int *b, int spans,
                         int repeat, struct bench_samples *wall, struct bench_samples *attn, float *logits)
{
    struct ra_forward_stats st[4] = { { 0 } };
    double w[4];
    for (int i = 0; i < spans; i++)
        wall[i].n = attn[i].n = 0;
    for (int r = 0; r < repeat; r++) {
        prefill(ctx, kv, tokens, b, spans, st, w, logits);
        for (int i = 0; i < spans; i++) {
            bench_add(&wall[i], w[i]);
            bench_add(&attn[i], st[i].t_attention);
        }
    }
}

/* ----------------------------------------------------------- the run */

struct options {
    int tokens[MAX_LIST], n_tokens;
    int threads[MAX_LIST], n_threads;
    int want_dt[N_DT];
    const char *model_dir, *bf16_model, *backend;
    int repeat, scaling;
    char model_default[4096], bf16_default[4200];
};

/* --dtypes LIST into o->want_dt; 0, or the exit status of a bad name. */
static int parse_dtypes(const char *list, struct options *o)
{
    char *copy = strdup(list), *save = NULL;
    int rc = 0;
    o->want_dt[DT_F32] = o->want_dt[DT_BF16] = o->want_dt[DT_BF16M] = 0;
    for (char *t = strtok_r(copy, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
        int dt = 0;
        while (dt < N_DT && strcmp(t, dt_names[dt]) != 0)
            dt++;
        if (dt < N_DT)
            o->want_dt[dt] = 1;
        else
            rc = ra_arg_usage_error(bench_name, "--dtypes: '%s' is not f32, bf16 or bf16m", t);
    }
    free(copy);
    return rc;
}

/* -1 to go on; else the exit status (0 after --help). */
static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option opts[] = {
        { "model", required_argument, 0, 'm' },   { "tokens", required_argument, 0, 'n' },
        { "threads", required_argument, 0, 't' }, { "repeat", required_argument, 0, 'r' },
        { "dtypes", required_argument, 0, 'd' },  { "no-scaling", no_argument, 0, 's' },
        { "bf16-model", required_argument, 0, 'b' }, { "backend", required_argument, 0, 'B' },
        { "help", no_argument, 0, 'h' },          { 0, 0, 0, 0 },
    };
    *o = (struct options){ .tokens = { 512, 2048, 8192 }, .n_tokens = 3, .threads = { 1, 2 }, .n_threads = 2,
                           .want_dt = { 1, 1, 1 }, .repeat = 3, .scaling = 1, .backend = "cpu" };
    int c, rc = -1;
    while (rc < 0 && (c = getopt_long(argc, argv, "m:n:t:r:d:b:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model_dir = optarg; break;
        case 'n': o->n_tokens = bench_parse_list(optarg, o->tokens, MAX_LIST, "--tokens"); break;
        case 't': o->n_threads = bench_parse_list(optarg, o->threads, MAX_LIST, "--threads"); break;
        case 'r':
            if (ra_arg_int(optarg, "--repeat", 1, BENCH_MAX_REPEAT, &o->repeat) != RA_OK)
                rc = ra_arg_usage_error(bench_name, "%s", ra_error_message());
            break;
        case 'd': rc = parse_dtypes(optarg, o) ? 2 : -1; break;
        case 'b': o->bf16_model = optarg; break;
        case 's': o->scaling = 0; break;
        case 'B':
            o->backend = optarg;
            if (!*optarg || ra_backend_name_check(optarg, "--backend") != RA_OK)
                rc = ra_arg_usage_error(bench_name, "--backend: '%s' is not cpu or cuda", optarg);
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (rc < 0 && optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", bench_name, argv[optind]);
        usage(stderr);
        rc = 2;
    }
    if (!o->model_dir) {
        bench_default_model(o->model_default, sizeof o->model_default);
        o->model_dir = o->model_default;
    }
    return rc;
}

/* One model per dtype (the same file, mapped twice: the page cache holds it
 * once), so that all stay attached and their runs interleave. 0, or the exit
 * status. */
static int load_lanes(struct options *o, struct lane *lanes)
{
    int rc;
    if (!o->bf16_model) { /* beside the f32 model: DIR-bf16, if it is there */
        if (bench_bf16_beside(o->model_dir, o->bf16_default, sizeof o->bf16_default))
            o->bf16_model = o->bf16_default;
        else
            o->want_dt[DT_BF16M] = 0;
    }
    for (int dt = 0; dt < N_DT; dt++)
        if (o->want_dt[dt] && (rc = ra_model_load(&lanes[dt].m, dt == DT_BF16M ? o->bf16_model : o->model_dir)) != RA_OK)
            bench_die("loading the model", rc);
    if (o->want_dt[DT_BF16M] && o->want_dt[DT_F32] &&
        memcmp(&lanes[DT_BF16M].m.config, &lanes[DT_F32].m.config, sizeof lanes[DT_F32].m.config) != 0) {
        fprintf(stderr, "%s: %s does not have the shape of %s\n", bench_name, o->bf16_model, o->model_dir);
        return 2;
    }
    return 0;
}

/* The longest prompt the run needs; 0 (after one line) when the model's context is shorter. */
static int longest_prompt(const struct options *o, const struct ra_config *cfg)
{
    int max_n = o->scaling ? SCALE_N : 0;
    for (int i = 0; i < o->n_tokens; i++)
        max_n = o->tokens[i] > max_n ? o->tokens[i] : max_n;
    if (max_n > cfg->seq_len) {
        fprintf(stderr, "%s: %d tokens exceed the model's context of %d%s\n", bench_name, max_n, cfg->seq_len,
                o->scaling ? " (the scaling check needs 8192; --no-scaling skips it)" : "");
        return 0;
    }
    return max_n;
}

static void print_header(const struct options *o, const struct lane *lanes, int dt0, const char *units)
{
    const struct ra_config *cfg = &lanes[dt0].m.config;
    char cpu[256], kernels[256];
    struct utsname un;
    bench_cpu_name(cpu, sizeof cpu);
    uname(&un);
    double lin1, att1;
    ra_forward_flops(cfg, 0, 1, &lin1, &att1);
    ra_cpu_isa_describe(kernels, sizeof kernels);
    printf("# runahead bench-prefill: single-process prompt processing, %s backend\n", o->backend);
    printf("# machine : %s, %ld cores online, %s %s%s%s%s%s%s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), un.sysname,
           un.machine, bench_cpu_has("avx2") ? ", AVX2" : "", bench_cpu_has("fma") ? "+FMA" : "",
           bench_cpu_has("avx512f") ? ", AVX-512" : "", bench_cpu_has("avx512_bf16") ? ", AVX512-BF16" : "",
           bench_cpu_has("amx_bf16") ? ", AMX-BF16" : "");
    printf("# kernels : %s, chosen at run time (RA_CPU_ISA forces one)\n", kernels);
    printf("# bf16    : %s (RA_GEMM forces one)\n", units);
    printf("# OpenBLAS: %s\n", openblas_get_config());
    printf("# model   : %s\n", o->model_dir);
    printf("#           dim %d, %d layers, %d heads, %d KV heads, FFN %d, vocab %d, context %d, %s weights, %.1fM params\n",
           cfg->dim, cfg->n_layers, cfg->n_heads, cfg->n_kv_heads, cfg->hidden_dim, cfg->vocab_size, cfg->seq_len,
           ra_dtype_name(lanes[dt0].m.weights.layers[0].wq.dtype), (double)ra_model_n_params(&lanes[dt0].m) * 1e-6);
    printf("#           linear %.1f MFLOP/token; causal attention %.3f MFLOP per token pair\n", lin1 * 1e-6,
           att1 * 1e-6);
    printf("# timing  : median [min-max] of %d runs; the dtypes' runs interleaved (f32, bf16, f32, ...)\n", o->repeat);
    printf("#           FLOPs from ra_forward_flops (no lm-head), times from the forward pass's stats\n");
    printf("#           peak = the unit's GEMM on the same shapes (M = tokens; every layer's q k v o gate up down\n");
    printf("#           in order), one sample right before each model run: f32 -> OpenBLAS sgemm (threads = T),\n");
    printf("#           bf16 -> the backend's bf16 unit (activations rounded to bf16 included; weights in the\n");
    printf("#           layout of the backend's bf16 copies: oneDNN's blocked one unless RA_GEMM_PREPACK=0)\n");
    printf("#           of peak = median linear GF/s / median peak GF/s of the unit the layers ran on\n");
    printf("#           bf16 compute converts the f32 weights once at attach (a bf16 copy, half their bytes;\n");
    printf("#           a bf16 model file would be read in place, in the plain layout)\n");
    if (strcmp(o->backend, "cpu") != 0)
        printf("#           on %s: no peak; lin%%/attn%%/other%% are host-side times of asynchronous work\n",
               o->backend);
    printf("#\n");
    printf("%-3s %-5s %6s  %-26s %-26s %-26s %-7s %-26s %5s %5s %5s\n", "T", "dtype", "tokens", "tok/s", "linear GF/s",
           "peak GF/s (unit)", "of peak", "attention GF/s", "lin%", "attn%", "other%");
    fflush(stdout);
}

/* The prompt ids, the logits and the peak samples' operands. */
struct inputs {
    int32_t *tokens;
    float *logits;
    struct gemm_bufs g;
};

static void inputs_make(struct inputs *in, const struct ra_config *cfg, int max_n)
{
    const int kd = cfg->dim > cfg->hidden_dim ? cfg->dim : cfg->hidden_dim;
    const int od = kd > ra_config_kv_dim(cfg) ? kd : ra_config_kv_dim(cfg);
    in->tokens = malloc((size_t)max_n * sizeof *in->tokens);
    in->logits = malloc((size_t)cfg->vocab_size * sizeof *in->logits);
    in->g = (struct gemm_bufs){ malloc((size_t)max_n * kd * sizeof(float)), malloc((size_t)od * kd * sizeof(float)),
                                malloc((size_t)max_n * od * sizeof(float)), malloc((size_t)od * kd * sizeof(uint16_t)),
                                { NULL } };
    if (!in->tokens || !in->logits || !in->g.a || !in->g.w || !in->g.c || !in->g.wb)
        bench_die("buffers", ra_error_set(RA_ENOMEM, "out of memory"));
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < max_n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        in->tokens[i] = (int32_t)((rng >> 33) % (uint64_t)cfg->vocab_size);
    }
    for (size_t i = 0; i < (size_t)max_n * kd; i++)
        in->g.a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < (size_t)od * kd; i++) {
        in->g.w[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
        in->g.wb[i] = ra_f32_to_bf16(in->g.w[i]);
    }
}

static void inputs_free(struct inputs *in)
{
    free(in->tokens);
    free(in->logits);
    free(in->g.a);
    free(in->g.w);
    free(in->g.c);
    free(in->g.wb);
}

/* Lane dt on th threads: its backend (on the CPU, dt's compute dtype; on a
 * device, dt's weight dtype there), the model attached, its KV cache, then a
 * warm-up that faults in the weights, sizes the workspace and builds plans. */
static void lane_open(struct lane *ln, int dt, int th, const struct options *o, int max_n, struct ra_gemm_bf16 *u,
                      struct inputs *in)
{
    const struct ra_config *cfg = &ln->m.config;
    struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
    p.threads = th;
    p.compute = dt == DT_F32 ? RA_COMPUTE_F32 : dt == DT_BF16 ? RA_COMPUTE_BF16 : RA_COMPUTE_AUTO;
    p.device_dtype = dt == DT_F32 ? RA_DTYPE_F32 : RA_DTYPE_BF16;
    int rc = ra_backend_open(&ln->be, o->backend, &p);
    if (rc != RA_OK)
        bench_die("backend", rc);
    ln->cpu = strcmp(ln->be->ops->name, "cpu") == 0;
    if ((rc = ra_context_init(&ln->ctx, &ln->m, ln->be)) != RA_OK)
        bench_die("context", rc);
    if ((rc = ra_kvcache_init(&ln->kv, ln->be, cfg->n_layers, ra_config_kv_dim(cfg), max_n)) != RA_OK)
        bench_die("KV cache", rc);
    int b[2] = { 0, max_n < 256 ? max_n : 256 };
    struct ra_forward_stats st = { 0 };
    double w;
    prefill(&ln->ctx, &ln->kv, in->tokens, b, 1, &st, &w, in->logits);
    if (!ln->cpu)
        snprintf(ln->unit, sizeof ln->unit, "%s, %s weights on the device", ln->be->ops->name,
                 ra_dtype_name(p.device_dtype));
    else if (dt == DT_F32)
        snprintf(ln->unit, sizeof ln->unit, "sgemm");
    else
        ra_backend_cpu_describe_linear(ln->be, ln->unit, sizeof ln->unit);
    if (ln->cpu && dt == DT_F32)
        sgemm_forward_time(cfg, b[1], th, &in->g);
    else if (ln->cpu)
        bf16_forward_time(cfg, b[1], u, &in->g, dt == DT_BF16M);
}

static void lane_close(struct lane *ln)
{
    ra_kvcache_free(&ln->kv);
    ra_context_free(&ln->ctx);
    ra_backend_free(ln->be);
    ln->be = NULL;
}

/* Which lanes run at th threads: the bf16 ones only with a bf16 unit (on the
 * CPU) or bf16 weights on the device; each skip said once. */
static void lanes_choose(struct lane *lanes, const struct options *o, int th, const struct ra_gemm_bf16 *u,
                         const char *units)
{
    const int cpu = strcmp(o->backend, "cpu") == 0;
    for (int dt = 0; dt < N_DT; dt++) {
        struct lane *ln = &lanes[dt];
        ln->on = o->want_dt[dt] && (dt == DT_F32 || !cpu || u);
        if (o->want_dt[dt] && !ln->on && dt != DT_BF16M)
            printf("# T=%d: no bf16 unit (%s): bf16 skipped\n", th, units);
    }
}

static void print_row(int th, int dt, int n, const struct cell *cl)
{
    char f1[128], f2[128], f3[128], f4[128];
    printf("%-3d %-5s %6d  %-26s %-26s %-26s %6.0f%% %-26s %5.1f %5.1f %5.1f\n", th, dt_names[dt], n,
           bench_spread(f1, sizeof f1, &cl->tps, "%.1f"), bench_spread(f2, sizeof f2, &cl->lin, "%.1f"),
           bench_spread(f3, sizeof f3, &cl->peak, "%.1f"), 100 * bench_median(&cl->lin) / bench_median(&cl->peak),
           bench_spread(f4, sizeof f4, &cl->att, "%.1f"), bench_median(&cl->lin_pct), bench_median(&cl->att_pct),
           bench_median(&cl->other_pct));
}

/* The scaling check's samples at one thread count. */
struct scaling {
    int threads;
    struct bench_samples t8k_attn, first_attn, second_attn, tps4k;
};

/* On the first dtype: [0, 4096) then [4096, 8192); and 8192 whole. */
static void scaling_sample(struct lane *ln, int repeat, float *logits, const int32_t *tokens, struct scaling *sc)
{
    int b[3] = { 0, SCALE_N / 2, SCALE_N };
    struct bench_samples w[2], a[2];
    median_spans(&ln->ctx, &ln->kv, tokens, b, 2, repeat, w, a, logits);
    sc->first_attn = a[0];
    sc->second_attn = a[1];
    sc->tps4k.n = w[0].n;
    for (int i = 0; i < w[0].n; i++)
        sc->tps4k.v[i] = (SCALE_N / 2) / w[0].v[i];
    int bw[2] = { 0, SCALE_N };
    median_spans(&ln->ctx, &ln->kv, tokens, bw, 1, repeat, w, a, logits);
    sc->t8k_attn = a[0];
}

/* Everything at one thread count: the lanes opened, every prompt length's
 * runs interleaved across the lanes and its rows printed, the scaling check. */
static void run_threads(const struct options *o, struct lane *lanes, int dt0, int ti, int max_n, const char *units,
                        struct inputs *in, struct cell (*cells)[N_DT], struct scaling *sc)
{
    const int th = o->threads[ti];
    struct ra_gemm_bf16 *u = NULL;
    int rc;
    if (!strcmp(o->backend, "cpu") && (rc = ra_gemm_bf16_create(&u, th)) != RA_OK)
        bench_die("bf16 unit", rc);
    if (u)
        pack_shapes(&lanes[dt0].m.config, u, &in->g);
    lanes_choose(lanes, o, th, u, units);
    for (int dt = 0; dt < N_DT; dt++)
        if (lanes[dt].on)
            lane_open(&lanes[dt], dt, th, o, max_n, u, in);
    for (int ni = 0; ni < o->n_tokens; ni++) {
        const int n = o->tokens[ni];
        /* The bf16 unit JIT-compiles a plan per shape (a few ms each) on
         * its first call: make them outside the timed runs. */
        for (int dt = DT_BF16; dt < N_DT; dt++)
            if (lanes[dt].on) {
                struct cell scratch;
                memset(&scratch, 0, sizeof scratch);
                lane_sample(&lanes[dt], dt, in->tokens, n, in->logits, th, u, &in->g, &scratch);
            }
        for (int r = 0; r < o->repeat; r++)
            for (int dt = 0; dt < N_DT; dt++)
                if (lanes[dt].on)
                    lane_sample(&lanes[dt], dt, in->tokens, n, in->logits, th, u, &in->g, &cells[ni][dt]);
        for (int dt = 0; dt < N_DT; dt++)
            if (lanes[dt].on)
                print_row(th, dt, n, &cells[ni][dt]);
        fflush(stdout);
    }
    sc->threads = th;
    if (o->scaling)
        scaling_sample(&lanes[dt0], o->repeat, in->logits, in->tokens, sc);
    for (int dt = 0; dt < N_DT; dt++)
        if (lanes[dt].on)
            lane_close(&lanes[dt]);
    unpack_shapes(&in->g);
    ra_gemm_bf16_free(u);
}

static void print_ratios(const struct options *o, const struct lane *lanes, struct cell (*cells)[MAX_LIST][N_DT])
{
    printf("#\n# ratios of medians, all from this run (bf16: %s; bf16m: %s)\n",
           lanes[DT_BF16].unit[0] ? lanes[DT_BF16].unit : "-", lanes[DT_BF16M].unit[0] ? lanes[DT_BF16M].unit : "-");
    printf("%-3s %6s %10s %10s %10s %12s %12s %12s %12s\n", "T", "tokens", "bf16/f32", "bf16m/f32", "bf16/f32",
           "f32 linear", "bf16 linear", "bf16m linear", "bf16 peak");
    printf("%-3s %6s %10s %10s %10s %12s %12s %12s %12s\n", "", "", "tok/s", "tok/s", "linear", "/ its peak",
           "/ its peak", "/ its peak", "/ sgemm peak");
    for (int ti = 0; ti < o->n_threads; ti++)
        for (int ni = 0; ni < o->n_tokens; ni++) {
            const struct cell *cl = cells[ti][ni];
            char r[8][16];
            for (int i = 0; i < 8; i++)
                snprintf(r[i], sizeof r[i], "-");
            const int hf = cl[DT_F32].tps.n > 0;
            for (int dt = DT_BF16; dt < N_DT && hf; dt++)
                if (cl[dt].tps.n > 0)
                    snprintf(r[dt - 1], 16, "%.2fx", bench_median(&cl[dt].tps) / bench_median(&cl[DT_F32].tps));
            if (hf && cl[DT_BF16].tps.n > 0) {
                snprintf(r[2], 16, "%.2fx", bench_median(&cl[DT_BF16].lin) / bench_median(&cl[DT_F32].lin));
                snprintf(r[6], 16, "%.2fx", bench_median(&cl[DT_BF16].peak) / bench_median(&cl[DT_F32].peak));
            }
            for (int dt = 0; dt < N_DT; dt++)
                if (cl[dt].tps.n > 0)
                    snprintf(r[3 + dt], 16, "%.0f%%", 100 * bench_median(&cl[dt].lin) / bench_median(&cl[dt].peak));
            printf("%-3d %6d %10s %10s %10s %12s %12s %12s %12s\n", o->threads[ti], o->tokens[ni], r[0], r[1], r[2],
                   r[3], r[4], r[5], r[6]);
        }
}

static void print_scaling(const struct options *o, int dt0, const struct scaling *sc)
{
    const double h = SCALE_N / 2;
    const double pairs4k = h * (h + 1) / 2, pairs8k = (2 * h) * (2 * h + 1) / 2;
    const double second = h * h + pairs4k;
    char f1[128];
    printf("#\n# causal attention scaling (%s, attention time only, medians of %d)\n", dt_names[dt0], o->repeat);
    printf("%-3s %-34s %9s %9s %9s %9s\n", "T", "comparison", "time(s)", "vs(s)", "measured", "expected");
    for (int ti = 0; ti < o->n_threads; ti++) {
        const double t8 = bench_median(&sc[ti].t8k_attn), t1 = bench_median(&sc[ti].first_attn),
                     t2 = bench_median(&sc[ti].second_attn);
        printf("%-3d %-34s %9.3f %9.3f %9.2f %9.2f\n", sc[ti].threads, "prefill 8192 vs prefill 4096", t8, t1,
               t8 / t1, pairs8k / pairs4k);
        printf("%-3d %-34s %9.3f %9.3f %9.2f %9.2f  (full square: %.2f)\n", sc[ti].threads,
               "span [4096,8192) vs [0,4096)", t2, t1, t2 / t1, second / pairs4k, (h * 2 * h) / (h * h));
    }
    printf("#\n# prefill of 4096 tokens (%s, the first span above; no logits)\n", dt_names[dt0]);
    printf("%-3s %6s  %-26s\n", "T", "tokens", "tok/s");
    for (int ti = 0; ti < o->n_threads; ti++)
        printf("%-3d %6d  %-26s\n", sc[ti].threads, 4096, bench_spread(f1, sizeof f1, &sc[ti].tps4k, "%.1f"));
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    struct lane lanes[N_DT];
    memset(lanes, 0, sizeof lanes);
    if ((rc = load_lanes(&o, lanes)) != 0)
        return rc;
    const int dt0 = o.want_dt[DT_F32] ? DT_F32 : DT_BF16;
    const int max_n = longest_prompt(&o, &lanes[dt0].m.config);
    if (max_n == 0)
        return 2;
    struct ra_backend *probe; /* a device that is not there: one line before the header */
    if ((rc = ra_backend_open(&probe, o.backend, NULL)) != RA_OK)
        bench_die("backend", rc);
    ra_backend_free(probe);
    char units[256];
    ra_gemm_bf16_units(units, sizeof units);
    print_header(&o, lanes, dt0, units);

    struct inputs in;
    inputs_make(&in, &lanes[dt0].m.config, max_n);
    static struct cell cells[MAX_LIST][MAX_LIST][N_DT];
    struct scaling sc[MAX_LIST];
    memset(sc, 0, sizeof sc);
    for (int ti = 0; ti < o.n_threads; ti++)
        run_threads(&o, lanes, dt0, ti, max_n, units, &in, cells[ti], &sc[ti]);
    print_ratios(&o, lanes, cells);
    if (o.scaling)
        print_scaling(&o, dt0, sc);
    printf("#\n# targets: linear >= 85%% of the same-run peak of the unit used;\n"
           "# bf16 tok/s >= 3x f32 tok/s; ahead of llama.cpp's best CPU configuration measured beside it\n");

    inputs_free(&in);
    for (int dt = 0; dt < N_DT; dt++)
        if (o.want_dt[dt])
            ra_model_free(&lanes[dt].m);
    return 0;
}
