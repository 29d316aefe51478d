/* bench-decode-speed: single-process decode (one token per step) on the CPU backend
 * (--backend cuda: on a GPU), against the memory bandwidth bound.
 *
 * A decode step reads every weight once (the linear layers, the classifier,
 * one embedding row) and, for attention, the K and V rows of every earlier
 * position: it is memory bound. For each thread count, context length and
 * lane (f32: the f32 model, fp32 compute; bf16: the bf16 copy of the model
 * read in place, or the f32 model in bf16 compute with a plain bf16 copy),
 * it decodes --steps tokens greedily after a context of C positions and
 * prints decode tokens/s, the bytes a step reads, the read-only bandwidth
 * (src/membw.h: ra_membw_read, one array summed) measured in the same run
 * with the same threads, the bound that bandwidth puts on tokens/s, the
 * share of it reached, and for reference the STREAM-like triad. The bound
 * is the read's: a step reads weights and K/V rows and writes a few
 * activations, and the triad (one stream written for two read, its
 * write-allocate traffic uncounted) is lower than what such a step can use.
 * Every figure is the median [min-max] of --repeat samples; within a round
 * the bandwidths and the lanes run one after another (read, triad, f32,
 * bf16, read, triad, f32, ...), so ratios compare samples taken moments
 * apart.
 *
 * The context's K/V rows are filled with synthetic values instead of a
 * prefill (a step's cost does not depend on what they hold): contexts of
 * 8192 take no minutes of prefill first.
 *
 * Lanes: a lane is one way of running the same decode steps (struct
 * lane_kind: how it is set up, one step, the extra bytes it moves). Another
 * lane (e.g. a KV offload mode) is one more entry of lane_kinds[] with its own
 * step function; the tables print one row per lane. */
#include "args.h"
#include "bench_util.h"
#include "gemm_bf16.h"
#include "half.h"
#include "hugepage.h"
#include "membw.h"
#include "ra_core.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 16

const char bench_name[] = "bench-decode-speed";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench-decode-speed [--model DIR] [--bf16-model DIR] [--contexts N,N,...] [--threads T,T,...]\n"
            "                          [--lanes f32,bf16] [--steps N] [--repeat N] [--membw-mib N]\n"
            "                          [--backend cpu|cuda] [--membw-only]\n"
            "\n"
            "Single-process decode on the CPU backend: tokens/s per step after a context of N\n"
            "positions, the bytes a step reads (weights + K/V rows), the read-only bandwidth (one\n"
            "array summed) measured in the same run, the share of the bound it puts on tokens/s\n"
            "(read GB/s / bytes per step) reached, and a STREAM-like triad for reference (a step\n"
            "reads, so the read is its bound; the triad is lower); medians [min-max] of --repeat\n"
            "samples, lanes and bandwidths interleaved.\n"
            "\n"
            "  --model DIR       model directory or llama2.c checkpoint\n"
            "                    (default ${RA_BENCH_DIR:-$HOME/.cache/runahead}/bench-small)\n"
            "  --bf16-model DIR  the bf16 lane's model, read in place (default: DIR-bf16 if present;\n"
            "                    else the bf16 lane is the f32 model with a bf16 copy, bf16 compute)\n"
            "  --contexts LIST   context lengths (default 512,2048,8192; those beyond the model's\n"
            "                    context are skipped)\n"
            "  --threads LIST    thread counts (default 1,2)\n"
            "  --lanes LIST      f32, bf16, bf16kv (bf16 with a bf16 KV cache) (default all)\n"
            "  --steps N         decode steps per sample (default 16)\n"
            "  --repeat N        samples per figure (default 5)\n"
            "  --membw-mib N     MiB per bandwidth array (default 256): the read sums one, the triad\n"
            "                    streams three\n"
            "  --backend B       cpu (default) or cuda: on cuda the lanes are the weights' dtype on the\n"
            "                    device (f32, bf16), and no host bandwidth or bound is measured\n"
            "  --membw-only      only the read bandwidth: one line 'read_gbs THREADS GB/s' per thread\n"
            "                    count, the median of --repeat samples (no model is loaded)\n"
            "  --help\n"
            "\n"
            "RA_CPU_ISA forces the kernels; RA_GEMV=0 sends decode steps through the GEMM path;\n"
            "RA_MMAP=0 reads the weights into huge pages instead of mapping them (runahead --no-mmap).\n");
}

/* ----------------------------------------------------------- bytes per step */

/* A matrix's bytes as a step reads them: bf16 compute reads a bf16 copy of
 * f32 and f16 weights; block-quantized weights are read as their blocks. */
static double tensor_bytes(const struct ra_tensor *t, int bf16_compute)
{
    if (bf16_compute && !ra_dtype_is_quant(t->dtype))
        return 2.0 * (double)t->rows * (double)t->cols;
    return (double)ra_tensor_bytes(t);
}

/* Weight bytes one step reads, as the backend reads them: bf16 compute
 * reads bf16 (2 bytes per weight) of unquantized files. Norm vectors and
 * the embedding row are counted; they are a rounding error. */
static double weight_bytes(const struct ra_model *m, int bf16_compute)
{
    const struct ra_config *c = &m->config;
    double b = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const struct ra_layer_weights *w = &m->weights.layers[l];
        const struct ra_tensor *mm[] = { &w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down };
        for (int i = 0; i < 7; i++)
            b += tensor_bytes(mm[i], bf16_compute);
        b += 2.0 * c->dim * 4;
    }
    const struct ra_tensor *o = &m->weights.output;
    b += tensor_bytes(o, bf16_compute);
    b += (double)ra_dtype_row_bytes(m->weights.embed.dtype, c->dim) + c->dim * 4.0;
    return b;
}

/* K and V rows attention reads over steps at positions [pos, pos+steps). */
static double kv_bytes(const struct ra_config *c, int pos, int steps, enum ra_dtype kv_dtype)
{
    const double rows = (double)steps * pos + (double)steps * (steps + 1) / 2;
    return 2.0 * c->n_layers * (double)ra_kv_row_bytes(ra_config_kv_dim(c), kv_dtype) * rows / steps;
}

/* ----------------------------------------------------------- lanes */

struct lane;
struct lane_kind {
    const char *name;
    enum ra_dtype kv_dtype; /* of the lane's KV cache */
    /* One decode step: token at position pos, logits out. */
    int (*step)(struct lane *ln, int32_t token, int pos, float *logits);
};

struct lane {
    const struct lane_kind *kind;
    int on, bf16_compute, cpu;
    struct ra_model *m;
    struct ra_backend *be;
    struct ra_context ctx;
    struct ra_kvcache kv;
    double weight_bytes;
    char how[256];
};

static int step_plain(struct lane *ln, int32_t token, int pos, float *logits)
{
    return ra_forward_span(&ln->ctx, &token, pos, 1, &ln->kv, logits);
}

/* bf16kv: the bf16 lane with a bf16 KV cache too, so that every byte a step
 * reads is halved (at long contexts the f32 rows dominate the bf16 lane's). */
enum { LANE_F32, LANE_BF16, LANE_BF16KV, N_LANES };

/* How much of a model's weight files the kernel holds in 2 MiB pages: mapped
 * files get them only where the page cache has 2 MiB folios (hugepage.h), and
 * a step streams 4 KiB pages slower. */
static void print_huge_share(const struct ra_model *m, const char *name)
{
    double huge = 0, total = 0;
    for (int i = 0; i < m->n_files; i++) {
        const double share = ra_huge_share(m->files[i].data, m->files[i].size);
        if (share < 0) {
            printf(" %s unknown", name);
            return;
        }
        huge += share * (double)m->files[i].size;
        total += (double)m->files[i].size;
    }
    printf(" %s %.0f%%", name, total > 0 ? 100 * huge / total : 0.0);
}
static const struct lane_kind lane_kinds[N_LANES] = {
    { "f32", RA_DTYPE_F32, step_plain },
    { "bf16", RA_DTYPE_F32, step_plain },
    { "bf16kv", RA_DTYPE_BF16, step_plain },
};

/* Synthetic K/V rows for positions [0, ctx): small values, as a context's,
 * written on the host and uploaded (a copy on the CPU backend). */
static void fill_kv(struct ra_backend *be, struct ra_kvcache *kv, int ctx)
{
    const size_t n = (size_t)ctx * kv->kv_dim, bytes = n * ra_dtype_size(kv->dtype);
    void *k = malloc(bytes), *v = malloc(bytes);
    if (!k || !v)
        bench_die("K/V rows", ra_error_set(RA_ENOMEM, "out of memory for %zu bytes", 2 * bytes));
    for (int l = 0; l < kv->n_layers; l++) {
        for (size_t i = 0; i < n; i++) {
            const float x = (float)((i * 2654435761u + (unsigned)l) % 1000) * 1e-3f - 0.5f;
            if (kv->dtype == RA_DTYPE_F32) {
                ((float *)k)[i] = x;
                ((float *)v)[i] = -x;
            } else {
                ((uint16_t *)k)[i] = ra_f32_to_bf16(x);
                ((uint16_t *)v)[i] = ra_f32_to_bf16(-x);
            }
        }
        int rc = be->ops->upload(be, kv->k[l], k, bytes);
        if (rc != RA_OK || (rc = be->ops->upload(be, kv->v[l], v, bytes)) != RA_OK)
            bench_die("K/V rows", rc);
    }
    free(k);
    free(v);
}

/* What one (threads, context, lane) cell collects, one value per sample. */
struct cell {
    struct bench_samples tps, share, lin, att, other;
};

/* steps greedy tokens after position ctx; per-op shares from the stats. */
static void lane_sample(struct lane *ln, int ctx, int steps, float *logits, double bound_gbs, struct cell *c)
{
    struct ra_forward_stats st;
    memset(&st, 0, sizeof st);
    ln->ctx.stats = &st;
    int32_t tok = 1;
    const double t0 = ra_wall_s();
    for (int s = 0; s < steps; s++) {
        int rc = ln->kind->step(ln, tok, ctx + s, logits);
        if (rc != RA_OK)
            bench_die("decode step", rc);
        tok = ra_argmax(logits, ln->m->config.vocab_size);
    }
    const double t = ra_wall_s() - t0;
    ln->ctx.stats = NULL;
    const double tps = steps / t;
    const double bytes = ln->weight_bytes + kv_bytes(&ln->m->config, ctx, steps, ln->kind->kv_dtype);
    bench_add(&c->tps, tps);
    if (bound_gbs > 0) /* a device has no host-memory bound */
        bench_add(&c->share, 100 * tps * bytes / (bound_gbs * 1e9));
    const double acc = st.t_linear + st.t_attention + st.t_other;
    bench_add(&c->lin, 100 * st.t_linear / acc);
    bench_add(&c->att, 100 * st.t_attention / acc);
    bench_add(&c->other, 100 * st.t_other / acc);
}

static void free_models(struct ra_model *models)
{
    for (int li = 0; li < N_LANES; li++)
        if (models[li].config.dim)
            ra_model_free(&models[li]);
}

/* ----------------------------------------------------------- the run */

struct options {
    int contexts[MAX_LIST], n_ctx;
    int threads[MAX_LIST], n_threads;
    int want[N_LANES];
    int steps, repeat, membw_mib;
    int membw_only; /* --membw-only: the read bandwidth per thread count, nothing else */
    const char *model_dir, *bf16_model, *backend;
    char model_default[4096], bf16_default[4200];
};

/* --lanes LIST into o->want; 0, or the exit status of a bad name. */
static int parse_lanes(const char *list, struct options *o)
{
    char *copy = strdup(list), *save = NULL;
    int rc = 0;
    memset(o->want, 0, sizeof o->want);
    for (char *t = strtok_r(copy, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
        int li = 0;
        while (li < N_LANES && strcmp(t, lane_kinds[li].name) != 0)
            li++;
        if (li < N_LANES)
            o->want[li] = 1;
        else
            rc = ra_arg_usage_error(bench_name, "--lanes: '%s' is not f32, bf16 or bf16kv", t);
    }
    free(copy);
    return rc;
}

/* -1 to go on; else the exit status (0 after --help). */
static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option opts[] = {
        { "model", required_argument, 0, 'm' },   { "bf16-model", required_argument, 0, 'b' },
        { "contexts", required_argument, 0, 'c' }, { "threads", required_argument, 0, 't' },
        { "lanes", required_argument, 0, 'l' },   { "steps", required_argument, 0, 's' },
        { "repeat", required_argument, 0, 'r' },  { "membw-mib", required_argument, 0, 'T' },
        { "backend", required_argument, 0, 'B' }, { "membw-only", no_argument, 0, 'M' },
        { "help", no_argument, 0, 'h' },          { 0, 0, 0, 0 },
    };
    *o = (struct options){ .contexts = { 512, 2048, 8192 }, .n_ctx = 3, .threads = { 1, 2 }, .n_threads = 2,
                           .want = { 1, 1, 1 }, .steps = 16, .repeat = 5, .membw_mib = 256, .backend = "cpu" };
    int c, rc = -1;
    while (rc < 0 && (c = getopt_long(argc, argv, "m:b:c:t:l:s:r:T:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model_dir = optarg; break;
        case 'b': o->bf16_model = optarg; break;
        case 'c': o->n_ctx = bench_parse_list(optarg, o->contexts, MAX_LIST, "--contexts"); break;
        case 't': o->n_threads = bench_parse_list(optarg, o->threads, MAX_LIST, "--threads"); break;
        case 'l': rc = parse_lanes(optarg, o) ? 2 : -1; break;
        case 's':
            if (ra_arg_int(optarg, "--steps", 1, 100000, &o->steps) != RA_OK)
                rc = ra_arg_usage_error(bench_name, "%s", ra_error_message());
            break;
        case 'r':
            if (ra_arg_int(optarg, "--repeat", 1, BENCH_MAX_REPEAT, &o->repeat) != RA_OK)
                rc = ra_arg_usage_error(bench_name, "%s", ra_error_message());
            break;
        case 'T':
            if (ra_arg_int(optarg, "--membw-mib", 1, 65536, &o->membw_mib) != RA_OK)
                rc = ra_arg_usage_error(bench_name, "%s", ra_error_message());
            break;
        case 'B':
            o->backend = optarg;
            if (!*optarg || ra_backend_name_check(optarg, "--backend") != RA_OK)
                rc = ra_arg_usage_error(bench_name, "--backend: '%s' is not cpu or cuda", optarg);
            break;
        case 'M': o->membw_only = 1; break;
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
    if (!o->bf16_model && bench_bf16_beside(o->model_dir, o->bf16_default, sizeof o->bf16_default))
        o->bf16_model = o->bf16_default;
    return rc;
}

/* Each lane its own model (the same file mapped twice when there is no bf16
 * file: the page cache holds it once), so all stay attached. 0, or the exit
 * status. */
static int load_models(const struct options *o, struct ra_model *models)
{
    int rc;
    if ((rc = ra_model_load(&models[LANE_F32], o->model_dir)) != RA_OK)
        bench_die("loading the model", rc);
    const struct ra_config *cfg = &models[LANE_F32].config;
    for (int li = LANE_BF16; li < N_LANES; li++) {
        if (!o->want[li])
            continue;
        if ((rc = ra_model_load(&models[li], o->bf16_model ? o->bf16_model : o->model_dir)) != RA_OK)
            bench_die("loading the bf16 model", rc);
        if (memcmp(&models[li].config, cfg, sizeof *cfg) != 0) {
            fprintf(stderr, "%s: %s does not have the shape of %s\n", bench_name, o->bf16_model, o->model_dir);
            return 2;
        }
    }
    return 0;
}

/* The contexts that fit the model's with the steps after them, in o->contexts; their count, or 0
 * (after one line) when none does. */
static int fitting_contexts(struct options *o, const struct ra_config *cfg)
{
    int nc = 0;
    for (int i = 0; i < o->n_ctx; i++) {
        if (o->contexts[i] + o->steps > cfg->seq_len)
            printf("# context %d + %d steps exceeds the model's %d: skipped\n", o->contexts[i], o->steps,
                   cfg->seq_len);
        else
            o->contexts[nc++] = o->contexts[i];
    }
    if (nc == 0 && cfg->seq_len > o->steps) {
        o->contexts[nc++] = cfg->seq_len - o->steps;
        printf("# using context %d instead\n", o->contexts[0]);
    }
    if (nc == 0)
        fprintf(stderr, "%s: the model's context of %d holds no %d steps\n", bench_name, cfg->seq_len, o->steps);
    return o->n_ctx = nc;
}

static void print_header(const struct options *o, const struct ra_model *models)
{
    const struct ra_config *cfg = &models[LANE_F32].config;
    char kernels[256], units[256];
    ra_cpu_isa_describe(kernels, sizeof kernels);
    ra_gemm_bf16_units(units, sizeof units);
    const char *wait = getenv("OMP_WAIT_POLICY");
    printf("# runahead bench-decode-speed: single-process decode, %s backend\n", o->backend);
    printf("# kernels : %s (RA_CPU_ISA forces one); bf16 units: %s\n", kernels, units);
    printf("# model   : %s: dim %d, %d layers, %d heads, %d KV heads, FFN %d, vocab %d, %s weights, %s\n",
           o->model_dir, cfg->dim, cfg->n_layers, cfg->n_heads, cfg->n_kv_heads, cfg->hidden_dim, cfg->vocab_size,
           ra_dtype_name(models[LANE_F32].weights.layers[0].wq.dtype),
           ra_mapped_file_copy == 1 ? "read into huge pages (RA_MMAP=0)" : "mapped");
    printf("# timing  : %d greedy steps per sample, median [min-max] of %d samples; per round: read, triad,\n"
           "#           then each lane at each context, interleaved; K/V of the context synthetic (no prefill)\n",
           o->steps, o->repeat);
    printf("# read    : sum of 1 array of %d MiB in huge pages, the run's thread count, best of 3 per sample (the bound)\n",
           o->membw_mib);
    printf("# triad   : a = b + s*c, 3 arrays of %d MiB, the same; for reference (writes a stream, so lower)\n",
           o->membw_mib);
    printf("# bound   : tok/s <= read GB/s / bytes per step (weights as read + K/V rows of the context);\n"
           "#           of bound = tok/s x bytes / read bandwidth of the same round. OMP_WAIT_POLICY=%s\n",
           wait ? wait : "(unset)");
    if (strcmp(o->backend, "cpu") != 0)
        printf("# on %s : no read, triad or bound (host memory); lin%%/attn%%/oth%% are host-side times\n",
               o->backend);
    printf("# the machine may be shared: only interleaved comparisons with large differences mean much\n#\n");
    printf("%-3s %-6s %6s  %-22s %9s  %-22s %-16s %10s  %5s %5s %5s\n", "T", "lane", "ctx", "tok/s", "MB/step",
           "read GB/s", "of bound %", "triad GB/s", "lin%", "attn%", "oth%");
    fflush(stdout);
}

/* Lane li on th threads: its backend (on the CPU: f32 compute for f32, else
 * bf16 where a unit runs it; on a device: the lane's weight dtype there), the
 * model attached, its KV cache with a synthetic context, one line on what it
 * runs (at the first thread count), a warm-up. */
static void lane_open(struct lane *ln, int li, struct ra_model *m, const struct options *o, int th, int first,
                      int max_ctx, float *logits)
{
    const struct ra_config *cfg = &m->config;
    ln->m = m;
    struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
    p.threads = th;
    p.compute = li == LANE_F32 ? RA_COMPUTE_F32 : o->bf16_model ? RA_COMPUTE_AUTO : RA_COMPUTE_BF16;
    p.device_dtype = li == LANE_F32 ? RA_DTYPE_F32 : RA_DTYPE_BF16;
    p.kv_dtype = ln->kind->kv_dtype;
    int rc = ra_backend_open(&ln->be, o->backend, &p);
    if (rc != RA_OK)
        bench_die("backend", rc);
    ln->cpu = strcmp(ln->be->ops->name, "cpu") == 0;
    if ((rc = ra_context_init(&ln->ctx, ln->m, ln->be)) != RA_OK)
        bench_die("context", rc);
    if ((rc = ra_kvcache_init_dtype(&ln->kv, ln->be, cfg->n_layers, ra_config_kv_dim(cfg), max_ctx + o->steps,
                                    ln->kind->kv_dtype)) != RA_OK)
        bench_die("KV cache", rc);
    fill_kv(ln->be, &ln->kv, max_ctx);
    char unit[128];
    if (ln->cpu)
        ra_backend_cpu_describe_linear(ln->be, unit, sizeof unit);
    else
        snprintf(unit, sizeof unit, "%s, %s weights on the device", ln->be->ops->name, ra_dtype_name(p.device_dtype));
    ln->bf16_compute = li != LANE_F32 && (!ln->cpu || strncmp(unit, "none", 4) != 0);
    ln->weight_bytes = weight_bytes(ln->m, ln->bf16_compute);
    snprintf(ln->how, sizeof ln->how, "%s weights, %s compute (bf16 unit: %s), %s KV",
             ra_dtype_name(ln->m->weights.layers[0].wq.dtype), ln->bf16_compute ? "bf16" : "f32", unit,
             ra_dtype_name(ln->kind->kv_dtype));
    if (first)
        printf("# lane %-4s: %s; %.1f MB of weights per step\n", ln->kind->name, ln->how, ln->weight_bytes * 1e-6);
    struct cell scratch; /* the warm-up faults in the weights and the cache rows */
    memset(&scratch, 0, sizeof scratch);
    lane_sample(ln, o->contexts[0], 2, logits, 1, &scratch);
}

static void lane_close(struct lane *ln)
{
    ra_kvcache_free(&ln->kv);
    ra_context_free(&ln->ctx);
    ra_backend_free(ln->be);
    ln->be = NULL;
}

/* One thread count's bandwidths (on the CPU backend) and lanes' samples. */
struct round_figs {
    struct bench_samples readbw, triad;
};

static void print_row(const struct options *o, int th, const struct lane *ln, int ctx, const struct cell *cl,
                      const struct round_figs *bw)
{
    char f1[128], f2[128], f3[128];
    const double mb = (ln->weight_bytes + kv_bytes(&ln->m->config, ctx, o->steps, ln->kind->kv_dtype)) * 1e-6;
    if (bw->readbw.n)
        printf("%-3d %-6s %6d  %-22s %9.1f  %-22s %-16s %10.1f  %5.1f %5.1f %5.1f\n", th, ln->kind->name, ctx,
               bench_spread(f1, sizeof f1, &cl->tps, "%.1f"), mb, bench_spread(f2, sizeof f2, &bw->readbw, "%.1f"),
               bench_spread(f3, sizeof f3, &cl->share, "%.0f"), bench_median(&bw->triad), bench_median(&cl->lin),
               bench_median(&cl->att), bench_median(&cl->other));
    else
        printf("%-3d %-6s %6d  %-22s %9.1f  %-22s %-16s %10s  %5.1f %5.1f %5.1f\n", th, ln->kind->name, ctx,
               bench_spread(f1, sizeof f1, &cl->tps, "%.1f"), mb, "-", "-", "-", bench_median(&cl->lin),
               bench_median(&cl->att), bench_median(&cl->other));
}

/* Everything at one thread count: the lanes opened, --repeat rounds (read,
 * triad, then every lane at every context), the rows printed. */
static void run_threads(const struct options *o, struct ra_model *models, int ti, int max_ctx, float *logits,
                        struct cell (*cells)[N_LANES], struct round_figs *bw)
{
    const int th = o->threads[ti];
    struct lane lanes[N_LANES];
    memset(lanes, 0, sizeof lanes);
    for (int li = 0; li < N_LANES; li++) {
        lanes[li].kind = &lane_kinds[li];
        lanes[li].on = o->want[li];
        if (lanes[li].on)
            lane_open(&lanes[li], li, &models[li], o, th, ti == 0, max_ctx, logits);
    }
    const int host = strcmp(o->backend, "cpu") == 0;
    for (int r = 0; r < o->repeat; r++) {
        struct ra_membw rd = { 0 }, tr;
        int rc;
        if (host && (rc = ra_membw_read((size_t)o->membw_mib << 20, th, 3, &rd)) != RA_OK)
            bench_die("read bandwidth", rc);
        if (host && (rc = ra_membw_triad((size_t)o->membw_mib << 20, th, 3, &tr)) != RA_OK)
            bench_die("triad", rc);
        if (host) {
            bench_add(&bw->readbw, rd.best_gbs);
            bench_add(&bw->triad, tr.best_gbs);
        }
        for (int ci = 0; ci < o->n_ctx; ci++)
            for (int li = 0; li < N_LANES; li++)
                if (lanes[li].on)
                    lane_sample(&lanes[li], o->contexts[ci], o->steps, logits, rd.best_gbs, &cells[ci][li]);
    }
    for (int ci = 0; ci < o->n_ctx; ci++)
        for (int li = 0; li < N_LANES; li++)
            if (lanes[li].on)
                print_row(o, th, &lanes[li], o->contexts[ci], &cells[ci][li], bw);
    fflush(stdout);
    for (int li = 0; li < N_LANES; li++)
        if (lanes[li].on)
            lane_close(&lanes[li]);
}

static void print_ratios(const struct options *o, struct cell (*cells)[MAX_LIST][N_LANES],
                         const struct round_figs *bw)
{
    printf("#\n# ratios of medians, this run\n%-3s %6s %12s %12s", "T", "ctx", "bf16/f32", "bf16kv/f32");
    for (int ti = 1; ti < o->n_threads; ti++)
        printf(" %9s T=%-2d", "f32", o->threads[ti]);
    printf("\n%-3s %6s %12s %12s", "", "", "tok/s", "tok/s");
    for (int ti = 1; ti < o->n_threads; ti++)
        printf(" %9s T=%-2d", "vs", o->threads[0]);
    printf("\n");
    for (int ti = 0; ti < o->n_threads; ti++)
        for (int ci = 0; ci < o->n_ctx; ci++) {
            const struct cell *cl = cells[ti][ci];
            char r[2][32] = { "-", "-" };
            for (int k = 0; k < 2; k++)
                if (cl[LANE_F32].tps.n && cl[LANE_BF16 + k].tps.n)
                    snprintf(r[k], sizeof r[k], "%.2fx",
                             bench_median(&cl[LANE_BF16 + k].tps) / bench_median(&cl[LANE_F32].tps));
            printf("%-3d %6d %12s %12s", o->threads[ti], o->contexts[ci], r[0], r[1]);
            if (ti > 0 && cl[LANE_F32].tps.n)
                printf(" %14.2fx", bench_median(&cl[LANE_F32].tps) / bench_median(&cells[0][ci][LANE_F32].tps));
            printf("\n");
        }
    if (bw[0].readbw.n) {
        printf("#\n# read / triad bandwidth, medians:");
        for (int ti = 0; ti < o->n_threads; ti++)
            printf(" T=%d %.2fx", o->threads[ti], bench_median(&bw[ti].readbw) / bench_median(&bw[ti].triad));
    }
}

/* --membw-only: "read_gbs THREADS GBS" per thread count, the median of
 * --repeat best-of-3 samples (what jobs/compare-llama-cpp divides by a token's bytes). */
static int membw_only(const struct options *o)
{
    for (int ti = 0; ti < o->n_threads; ti++) {
        double v[BENCH_MAX_REPEAT];
        for (int r = 0; r < o->repeat; r++) {
            struct ra_membw rd;
            int rc = ra_membw_read((size_t)o->membw_mib << 20, o->threads[ti], 3, &rd);
            if (rc != RA_OK)
                bench_die("read bandwidth", rc);
            v[r] = rd.best_gbs;
        }
        for (int i = 1; i < o->repeat; i++) /* insertion sort: a handful of samples */
            for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
                double t = v[j];
                v[j] = v[j - 1];
                v[j - 1] = t;
            }
        printf("read_gbs %d %.2f\n", o->threads[ti], v[o->repeat / 2]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (o.membw_only)
        return membw_only(&o);
    /* Without a bf16 file the bf16 lane makes a bf16 copy of the f32 weights:
     * plain, not oneDNN's blocked layout, which only its GEMM reads. */
    if (!o.bf16_model)
        setenv("RA_GEMM_PREPACK", "0", 1);
    struct ra_model models[N_LANES];
    memset(models, 0, sizeof models);
    if ((rc = load_models(&o, models)) != 0 || fitting_contexts(&o, &models[LANE_F32].config) == 0) {
        free_models(models);
        return 2;
    }
    int max_ctx = 0;
    for (int i = 0; i < o.n_ctx; i++)
        max_ctx = o.contexts[i] > max_ctx ? o.contexts[i] : max_ctx;
    struct ra_backend *probe; /* a device that is not there: one line before the header */
    if ((rc = ra_backend_open(&probe, o.backend, NULL)) != RA_OK)
        bench_die("backend", rc);
    ra_backend_free(probe);
    print_header(&o, models);

    float *logits = malloc((size_t)models[LANE_F32].config.vocab_size * sizeof *logits);
    if (!logits)
        bench_die("logits", RA_ENOMEM);
    static struct cell cells[MAX_LIST][MAX_LIST][N_LANES];
    struct round_figs bw[MAX_LIST];
    memset(bw, 0, sizeof bw);
    for (int ti = 0; ti < o.n_threads; ti++)
        run_threads(&o, models, ti, max_ctx, logits, cells[ti], &bw[ti]);
    print_ratios(&o, cells, bw);
    printf("\n# pages   : weights in 2 MiB pages after the run (smaps):");
    for (int li = 0; li < N_LANES; li++)
        if (o.want[li] && (li == LANE_F32 || li == LANE_BF16 || !o.want[LANE_BF16]))
            print_huge_share(&models[li], li == LANE_F32 ? "f32" : "bf16");
    printf("\n# targets: >= 80%% of the (read) bound on 1 and 2 threads; bf16 >= 1.8x f32 tok/s\n");
    free(logits);
    free_models(models);
    return 0;
}
