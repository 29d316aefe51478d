/* bench-prefill: single-process prompt processing (prefill) on the CPU backend.
 *
 * For each thread count and prompt length it runs one span [0, N) through
 * ra_forward_span (logits of the last token only), best of --repeat runs, and
 * prints prompt tokens per second, the achieved GFLOP/s of the linear layers
 * and of attention (FLOPs from ra_forward_flops, time from the forward pass's
 * own per-op stats), and the linear rate as a fraction of plain OpenBLAS
 * cblas_sgemm on the same shapes (M = tokens; q/k/v/o, gate/up, down of every
 * layer, in the model's order), measured in the same run, one sample before
 * each model run, with openblas_set_num_threads(threads). Each rate is the
 * best of its --repeat samples: on a shared machine the quiet moments are the
 * ones worth comparing.
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
#include "runahead.h"

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
#define SCALE_N 8192 /* the attention scaling check runs [0, 4096) then [4096, 8192) */

/* llama.cpp prompt tokens/s on bench-small (notes/performance-targets.md). */
static const struct { int threads, tokens; double tps; } llama_cpp[] = {
    { 1, 512, 253 }, { 1, 2048, 181 }, { 1, 4096, 138 },
    { 2, 512, 400 }, { 2, 2048, 309 }, { 2, 4096, 265 },
};

static double llama_ref(int threads, int tokens)
{
    for (size_t i = 0; i < sizeof llama_cpp / sizeof llama_cpp[0]; i++)
        if (llama_cpp[i].threads == threads && llama_cpp[i].tokens == tokens)
            return llama_cpp[i].tps;
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench-prefill [--model DIR] [--tokens N,N,...] [--threads T,T,...] [--repeat N]\n"
            "                     [--no-scaling]\n"
            "\n"
            "Single-process prefill of a synthetic model on the CPU backend: prompt tokens/s,\n"
            "GFLOP/s of the linear layers and of attention, the linear rate against plain\n"
            "OpenBLAS sgemm on the same shapes, and the causal attention scaling check.\n"
            "\n"
            "  --model DIR      model directory (config.json + model.safetensors) or checkpoint\n"
            "                   (default ${RA_BENCH_DIR:-$HOME/.cache/runahead}/bench-small)\n"
            "  --tokens LIST    prompt lengths (default 512,2048,8192)\n"
            "  --threads LIST   thread counts (default 1,2)\n"
            "  --repeat N       best of N runs of everything timed (default 2)\n"
            "  --no-scaling     skip the attention scaling check (spans of 4096 and 8192 tokens)\n"
            "  --help\n");
}

/* A comma-separated list of positive integers, or exit 2 with one line. */
static int parse_list(const char *s, int *out, int max, const char *flag)
{
    int n = 0;
    if (ra_arg_int_list(s, flag, 1, 1000000, out, max, &n) != RA_OK)
        exit(ra_arg_usage_error("bench-prefill", "%s", ra_error_message()));
    return n;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench-prefill: %s: %s\n", what, ra_error_message());
    exit(rc == RA_ENOMEM ? 3 : 1);
}

static void cpu_name(char *buf, size_t len)
{
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t')
                    c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, len, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

static int cpu_has(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return 0;
    char line[8192];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        for (char *t = strtok(strchr(line, ':') + 1, " \t\n"); t; t = strtok(NULL, " \t\n"))
            if (strcmp(t, flag) == 0)
                found = 1;
        break;
    }
    fclose(f);
    return found;
}

/* One timed prefill: spans [b[i], b[i+1]) in order, logits for the last only.
 * stats[i] and wall[i] receive each span's accounting and wall time; returns
 * the total wall time. */
static double prefill(struct ra_model *m, struct ra_kvcache *kv, const int32_t *tokens, const int *b, int spans,
                      struct ra_forward_stats *stats, double *wall, float *logits)
{
    double total = 0;
    for (int i = 0; i < spans; i++) {
        memset(&stats[i], 0, sizeof stats[i]);
        m->stats = &stats[i];
        double t0 = now();
        int rc = ra_forward_span(m, tokens + b[i], b[i], b[i + 1] - b[i], kv, NULL, i == spans - 1 ? logits : NULL);
        double t = now() - t0;
        wall[i] = t;
        total += t;
        m->stats = NULL;
        if (rc != RA_OK)
            die("forward pass", rc);
    }
    return total;
}

/* Plain OpenBLAS on the forward pass's linear shapes with M = n rows: every
 * layer's q, k, v, o, gate, up, down in that order, for all layers, as one
 * timed sample (seconds returned); the sample's length and order match the
 * model's linear work, so both meet the machine in the same state. */
struct gemm_bufs {
    float *a, *w, *c;
};

static double sgemm_forward_time(const struct ra_config *cfg, int n, int threads, struct gemm_bufs *g)
{
    const int d = cfg->dim, kv = ra_config_kv_dim(cfg), h = cfg->hidden_dim;
    const struct { int k, out; } shapes[] = { { d, d }, { d, kv }, { d, kv }, { d, d }, { d, h }, { d, h }, { h, d } };
    openblas_set_num_threads(threads);
    double t0 = now();
    for (int l = 0; l < cfg->n_layers; l++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const int k = shapes[i].k, out = shapes[i].out;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, k, 1.0f, g->a, k, g->w, k, 0.0f, g->c, out);
        }
    double t = now() - t0;
    openblas_set_num_threads(1); /* what the CPU backend expects */
    return t;
}

/* Best of `repeat` prefills of one span by wall time: returns that time and
 * fills *best with that run's accounting, except that t_linear and
 * t_attention are each the least of any run (each rate is then a best of
 * `repeat`). Each run is preceded by a sample of the sgemm reference
 * (sgemm_forward_time), whose best goes to *sgemm_best. */
static double best_prefill(struct ra_model *m, struct ra_kvcache *kv, const int32_t *tokens, int n, int repeat,
                           struct ra_forward_stats *best, float *logits, int threads, struct gemm_bufs *g,
                           double *sgemm_best)
{
    const int b[2] = { 0, n };
    struct ra_forward_stats st;
    double wall, best_t = INFINITY, lin = INFINITY, att = INFINITY;
    *sgemm_best = INFINITY;
    for (int r = 0; r < repeat; r++) {
        *sgemm_best = fmin(*sgemm_best, sgemm_forward_time(&m->config, n, threads, g));
        double t = prefill(m, kv, tokens, b, 1, &st, &wall, logits);
        lin = fmin(lin, st.t_linear);
        att = fmin(att, st.t_attention);
        if (t < best_t) {
            best_t = t;
            *best = st;
        }
    }
    best->t_linear = lin;
    best->t_attention = att;
    return best_t;
}

/* Best of `repeat` prefills, span by span: the least wall and attention time
 * each span took in any run (they are measured apart, so each has its own best). */
static void best_spans(struct ra_model *m, struct ra_kvcache *kv, const int32_t *tokens, const int *b, int spans,
                       int repeat, double *wall_best, double *attn_best, float *logits)
{
    struct ra_forward_stats st[4] = { { 0 } };
    double wall[4];
    for (int i = 0; i < spans; i++)
        wall_best[i] = attn_best[i] = INFINITY;
    for (int r = 0; r < repeat; r++) {
        prefill(m, kv, tokens, b, spans, st, wall, logits);
        for (int i = 0; i < spans; i++) {
            wall_best[i] = fmin(wall_best[i], wall[i]);
            attn_best[i] = fmin(attn_best[i], st[i].t_attention);
        }
    }
}

struct row {
    int threads, tokens;
    double wall, tps, lin_rate, att_rate, sgemm_rate, lin_share, att_share, other_share;
};

int main(int argc, char **argv)
{
    int tokens_list[MAX_LIST] = { 512, 2048, 8192 }, n_tokens = 3;
    int threads_list[MAX_LIST] = { 1, 2 }, n_threads = 2;
    int repeat = 2, scaling = 1;
    char model_default[4096];
    const char *model_dir = NULL;

    static const struct option opts[] = {
        { "model", required_argument, 0, 'm' },   { "tokens", required_argument, 0, 'n' },
        { "threads", required_argument, 0, 't' }, { "repeat", required_argument, 0, 'r' },
        { "no-scaling", no_argument, 0, 's' },    { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "m:n:t:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 'n': n_tokens = parse_list(optarg, tokens_list, MAX_LIST, "--tokens"); break;
        case 't': n_threads = parse_list(optarg, threads_list, MAX_LIST, "--threads"); break;
        case 'r': {
            int v[1];
            parse_list(optarg, v, 1, "--repeat");
            repeat = v[0];
            break;
        }
        case 's': scaling = 0; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench-prefill: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!model_dir) {
        const char *base = getenv("RA_BENCH_DIR");
        if (base && *base)
            snprintf(model_default, sizeof model_default, "%s/bench-small", base);
        else
            snprintf(model_default, sizeof model_default, "%s/.cache/runahead/bench-small",
                     getenv("HOME") ? getenv("HOME") : ".");
        model_dir = model_default;
    }

    struct ra_model m;
    int rc = ra_model_load(&m, model_dir);
    if (rc != RA_OK)
        die("loading the model", rc);
    const struct ra_config *cfg = &m.config;

    int max_n = scaling ? SCALE_N : 0;
    for (int i = 0; i < n_tokens; i++)
        max_n = tokens_list[i] > max_n ? tokens_list[i] : max_n;
    if (max_n > cfg->seq_len) {
        fprintf(stderr, "bench-prefill: %d tokens exceed the model's context of %d%s\n", max_n, cfg->seq_len,
                scaling ? " (the scaling check needs 8192; --no-scaling skips it)" : "");
        return 2;
    }

    /* ----------------------------------------------------------- header */
    char cpu[256];
    struct utsname un;
    cpu_name(cpu, sizeof cpu);
    uname(&un);
    double lin1, att1;
    ra_forward_flops(cfg, 0, 1, &lin1, &att1);
    printf("# runahead bench-prefill: single-process prompt processing, CPU backend\n");
    printf("# machine : %s, %ld cores online, %s %s%s%s%s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), un.sysname,
           un.machine, cpu_has("avx2") ? ", AVX2" : "", cpu_has("fma") ? "+FMA" : "",
           cpu_has("avx512f") ? ", AVX-512" : "");
    char kernels[256];
    ra_cpu_isa_describe(kernels, sizeof kernels);
    printf("# kernels : %s, chosen at run time (RA_CPU_ISA forces one)\n", kernels);
    printf("# OpenBLAS: %s\n", openblas_get_config());
    printf("# model   : %s\n", model_dir);
    printf("#           dim %d, %d layers, %d heads, %d KV heads, FFN %d, vocab %d, context %d, %s weights, %.1fM params\n",
           cfg->dim, cfg->n_layers, cfg->n_heads, cfg->n_kv_heads, cfg->hidden_dim, cfg->vocab_size, cfg->seq_len,
           ra_dtype_name(m.weights.layers[0].wq.dtype), (double)ra_model_n_params(&m) * 1e-6);
    printf("#           linear %.1f MFLOP/token; causal attention %.3f MFLOP per token pair\n", lin1 * 1e-6,
           att1 * 1e-6);
    printf("# timing  : best of %d; FLOPs from ra_forward_flops (no lm-head), times from the forward pass's stats\n",
           repeat);
    printf("#           sgemm = plain OpenBLAS cblas_sgemm on the same shapes (M = tokens; all layers' q k v o gate up\n");
    printf("#           down in order, one sample per model run, best of as many), openblas threads = T\n");
    printf("#           llama.cpp = notes/performance-targets.md (measured on another machine: compare as a guide)\n");
    printf("#\n");
    fflush(stdout);

    /* ----------------------------------------------------------- buffers */
    int32_t *tokens = malloc((size_t)max_n * sizeof *tokens);
    float *logits = malloc((size_t)cfg->vocab_size * sizeof *logits);
    const int kd = cfg->dim > cfg->hidden_dim ? cfg->dim : cfg->hidden_dim;
    const int od = kd > ra_config_kv_dim(cfg) ? kd : ra_config_kv_dim(cfg);
    struct gemm_bufs g = {
        malloc((size_t)max_n * kd * sizeof(float)),
        malloc((size_t)od * kd * sizeof(float)),
        malloc((size_t)max_n * od * sizeof(float)),
    };
    if (!tokens || !logits || !g.a || !g.w || !g.c) {
        fprintf(stderr, "bench-prefill: out of memory\n");
        return 3;
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < max_n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int32_t)((rng >> 33) % (uint64_t)cfg->vocab_size);
    }
    for (size_t i = 0; i < (size_t)max_n * kd; i++)
        g.a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < (size_t)od * kd; i++)
        g.w[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;

    struct row rows[MAX_LIST * MAX_LIST];
    int n_rows = 0;
    struct {
        int threads;
        double t8k_attn, first_attn, second_attn, tps4k;
    } sc[MAX_LIST];

    printf("%-3s %6s %9s %9s %9s %7s  %8s %8s %6s  %8s  %5s %5s %5s\n", "T", "tokens", "time(s)", "tok/s",
           "llama.cpp", "x", "linear", "sgemm", "lin/", "attn", "lin", "attn", "other");
    printf("%-3s %6s %9s %9s %9s %7s  %8s %8s %6s  %8s  %5s %5s %5s\n", "", "", "", "", "tok/s", "llama", "GF/s",
           "GF/s", "sgemm", "GF/s", "%", "%", "%");
    fflush(stdout);

    for (int ti = 0; ti < n_threads; ti++) {
        const int th = threads_list[ti];
        struct ra_backend *be;
        struct ra_kvcache kv;
        if ((rc = ra_backend_cpu_init(&be, th)) != RA_OK)
            die("backend", rc);
        if ((rc = ra_model_attach(&m, be)) != RA_OK)
            die("attach", rc);
        if ((rc = ra_kvcache_init(&kv, be, cfg->n_layers, ra_config_kv_dim(cfg), max_n)) != RA_OK)
            die("KV cache", rc);

        /* Warm-up: faults in the mapped weights, sizes the workspace, starts
         * OpenBLAS's threads. */
        {
            int b[2] = { 0, max_n < 256 ? max_n : 256 };
            struct ra_forward_stats st = { 0 };
            double w;
            prefill(&m, &kv, tokens, b, 1, &st, &w, logits);
            sgemm_forward_time(cfg, b[1], th, &g);
        }
        double attn8k = 0;
        int have8k = 0;
        for (int ni = 0; ni < n_tokens; ni++) {
            const int n = tokens_list[ni];
            struct ra_forward_stats st = { 0 };
            double sgemm_t;
            double wall = best_prefill(&m, &kv, tokens, n, repeat, &st, logits, th, &g, &sgemm_t);
            double sg = st.flop_linear / sgemm_t * 1e-9; /* the same FLOPs */
            struct row *r = &rows[n_rows++];
            double acc = st.t_linear + st.t_attention + st.t_other;
            *r = (struct row){ th, n, wall, n / wall, st.flop_linear / st.t_linear * 1e-9,
                               st.flop_attention / st.t_attention * 1e-9, sg, st.t_linear / acc * 100,
                               st.t_attention / acc * 100, st.t_other / acc * 100 };
            if (n == SCALE_N) {
                attn8k = st.t_attention;
                have8k = 1;
            }
            double ref = llama_ref(th, n);
            char refs[16] = "-", xs[16] = "-";
            if (ref > 0) {
                snprintf(refs, sizeof refs, "%.0f", ref);
                snprintf(xs, sizeof xs, "%.2f", r->tps / ref);
            }
            printf("%-3d %6d %9.3f %9.1f %9s %7s  %8.1f %8.1f %5.0f%%  %8.1f  %5.1f %5.1f %5.1f\n", th, n, wall,
                   r->tps, refs, xs, r->lin_rate, r->sgemm_rate, 100 * r->lin_rate / r->sgemm_rate, r->att_rate,
                   r->lin_share, r->att_share, r->other_share);
            fflush(stdout);
        }
        sc[ti].threads = th;
        if (scaling) {
            /* [0, 4096) then [4096, 8192); and the whole 8192 if not measured above. */
            int b[3] = { 0, SCALE_N / 2, SCALE_N };
            double w[2], a[2];
            best_spans(&m, &kv, tokens, b, 2, repeat, w, a, logits);
            sc[ti].first_attn = a[0];
            sc[ti].second_attn = a[1];
            sc[ti].tps4k = (SCALE_N / 2) / w[0]; /* the first span is a 4096-token prefill */
            if (!have8k) {
                int bw[2] = { 0, SCALE_N };
                best_spans(&m, &kv, tokens, bw, 1, repeat, w, a, logits);
                attn8k = a[0];
            }
            sc[ti].t8k_attn = attn8k;
        }
        ra_kvcache_free(&kv);
        ra_model_detach(&m);
        ra_backend_free(be);
    }

    if (scaling) {
        const double h = SCALE_N / 2;
        const double pairs4k = h * (h + 1) / 2, pairs8k = (2 * h) * (2 * h + 1) / 2;
        const double second = h * h + pairs4k;
        printf("#\n# causal attention scaling (attention time only, best of %d)\n", repeat);
        printf("%-3s %-34s %9s %9s %9s %9s\n", "T", "comparison", "time(s)", "vs(s)", "measured", "expected");
        for (int ti = 0; ti < n_threads; ti++) {
            printf("%-3d %-34s %9.3f %9.3f %9.2f %9.2f\n", sc[ti].threads, "prefill 8192 vs prefill 4096",
                   sc[ti].t8k_attn, sc[ti].first_attn, sc[ti].t8k_attn / sc[ti].first_attn, pairs8k / pairs4k);
            printf("%-3d %-34s %9.3f %9.3f %9.2f %9.2f  (full square: %.2f)\n", sc[ti].threads,
                   "span [4096,8192) vs [0,4096)", sc[ti].second_attn, sc[ti].first_attn,
                   sc[ti].second_attn / sc[ti].first_attn, second / pairs4k, (h * 2 * h) / (h * h));
        }
        printf("#\n# prefill of 4096 tokens (the first span above, best of %d; no logits)\n", repeat);
        printf("%-3s %6s %9s %9s %7s\n", "T", "tokens", "tok/s", "llama.cpp", "x");
        for (int ti = 0; ti < n_threads; ti++) {
            double ref = llama_ref(sc[ti].threads, 4096);
            char refs[16] = "-", xs[16] = "-";
            if (ref > 0) {
                snprintf(refs, sizeof refs, "%.0f", ref);
                snprintf(xs, sizeof xs, "%.2f", sc[ti].tps4k / ref);
            }
            printf("%-3d %6d %9.1f %9s %7s\n", sc[ti].threads, 4096, sc[ti].tps4k, refs, xs);
        }
    }
    printf("#\n# targets: linear >= 85%% of sgemm; tok/s >= 1.5x llama.cpp at 512, >= 2x at 4096\n");

    free(tokens);
    free(logits);
    free(g.a);
    free(g.w);
    free(g.c);
    ra_model_free(&m);
    return 0;
}
