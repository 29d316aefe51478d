/* bench-attn-rows: attention at a position list on the CPU backend, the shape of
 * CacheBlend's second pass (a fraction of a prompt's rows, scattered, each
 * attending over the whole cache up to its position).
 *
 * Kernel lanes, on random Q, K and V of --tokens rows, interleaved run by run:
 *   span    every row, [0, N) over the cache (the prefill block kernel);
 *   list    a sorted random --ratio of the rows, one call with the list;
 *   by-4    the same list in calls of 4 rows (the decode path, what a list of
 *           a decode step's rows takes).
 * Each lane prints its median time [min-max] over --repeat runs, its GFLOP/s
 * (4 * head_dim * heads multiply-adds per visible key, causal) and that rate
 * over the span's: a list at the span kernel's speed per FLOP is near 1.
 *
 * With --model DIR (a runahead-synth model, e.g. bench-small) it also runs the
 * forward pass: ra_forward_span over [0, N) (the full prefill, after an untimed
 * one that fills the cache) and ra_forward_rows over the list, and prints each
 * pass's time by op class (linear, attention, other: the forward pass's stats),
 * so that a cost of the list's pass that does not shrink with its rows shows. */
#include "args.h"
#include "bench_util.h"
#include "half.h"
#include "ra_core.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char bench_name[] = "bench-attn-rows";

#define MAX_LIST 8
#define BY 4 /* rows per call of the by-4 lane */

struct options {
    int tokens, heads, kv_heads, head_dim, repeat;
    int threads[MAX_LIST], n_threads;
    double ratio;
    unsigned long long seed;
    enum ra_dtype kv_dtype;
    const char *model;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench-attn-rows [--tokens N] [--ratio R] [--heads H] [--kv-heads K] [--head-dim D]\n"
            "                       [--kv-dtype f32|bf16] [--threads T,T,...] [--repeat N] [--seed S]\n"
            "                       [--model DIR]\n"
            "Attention at a sorted random list of R*N of N rows against the span kernel over all N\n"
            "rows and the decode path (the list in calls of 4 rows), per FLOP; medians [min-max].\n"
            "  --tokens N     cache rows (default 4096)\n"
            "  --ratio R      fraction of the rows in the list, in (0, 1] (default 0.15)\n"
            "  --heads H --kv-heads K --head-dim D   the attention's shape (default 9, 3, 64:\n"
            "                 SmolLM2-135M's)\n"
            "  --kv-dtype T   the cache's rows: f32 (default) or bf16\n"
            "  --threads LIST thread counts (default 1,2)\n"
            "  --repeat N     runs of each lane (default 5)\n"
            "  --seed S       the data's and the list's seed (default 1)\n"
            "  --model DIR    also the forward pass over the span and over the list, with N <= the model's\n"
            "                 context: its time by op class\n"
            "RA_CPU_ISA forces the kernels' instruction set.\n");
}

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option opts[] = {
        { "tokens", required_argument, 0, 'n' }, { "ratio", required_argument, 0, 'r' },
        { "heads", required_argument, 0, 'H' },  { "kv-heads", required_argument, 0, 'K' },
        { "head-dim", required_argument, 0, 'D' }, { "kv-dtype", required_argument, 0, 'k' },
        { "threads", required_argument, 0, 't' }, { "repeat", required_argument, 0, 'R' },
        { "seed", required_argument, 0, 's' },    { "model", required_argument, 0, 'm' },
        { "help", no_argument, 0, 'h' },          { 0, 0, 0, 0 },
    };
    *o = (struct options){ .tokens = 4096, .heads = 9, .kv_heads = 3, .head_dim = 64, .repeat = 5,
                           .threads = { 1, 2 }, .n_threads = 2, .ratio = 0.15, .seed = 1, .kv_dtype = RA_DTYPE_F32 };
    int c, rc = RA_OK;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': rc = ra_arg_int(optarg, "--tokens", 1, 1 << 20, &o->tokens); break;
        case 'r': rc = ra_arg_double(optarg, "--ratio", &o->ratio); break;
        case 'H': rc = ra_arg_int(optarg, "--heads", 1, 512, &o->heads); break;
        case 'K': rc = ra_arg_int(optarg, "--kv-heads", 1, 512, &o->kv_heads); break;
        case 'D': rc = ra_arg_int(optarg, "--head-dim", 2, 256, &o->head_dim); break;
        case 'R': rc = ra_arg_int(optarg, "--repeat", 1, BENCH_MAX_REPEAT, &o->repeat); break;
        case 't': o->n_threads = bench_parse_list(optarg, o->threads, MAX_LIST, "--threads"); break;
        case 's': o->seed = strtoull(optarg, NULL, 0); break;
        case 'm': o->model = optarg; break;
        case 'k':
            if (!strcmp(optarg, "f32") || !strcmp(optarg, "bf16"))
                o->kv_dtype = !strcmp(optarg, "f32") ? RA_DTYPE_F32 : RA_DTYPE_BF16;
            else
                return ra_arg_usage_error(bench_name, "--kv-dtype: '%s' is not f32 or bf16", optarg);
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (rc != RA_OK)
            return ra_arg_usage_error(bench_name, "%s", ra_error_message());
    }
    if (optind < argc)
        return ra_arg_usage_error(bench_name, "unexpected argument '%s'", argv[optind]);
    if (!(o->ratio > 0 && o->ratio <= 1))
        return ra_arg_usage_error(bench_name, "--ratio: %g is not in (0, 1]", o->ratio);
    if (o->heads % o->kv_heads != 0)
        return ra_arg_usage_error(bench_name, "--heads %d is not a multiple of --kv-heads %d", o->heads, o->kv_heads);
    return -1;
}

static unsigned long long rng_next(unsigned long long *s) /* splitmix64 */
{
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A sorted random subset of [0, n) of m rows (selection sampling: each row in turn kept with
 * probability needed/left). */
static void sample_rows(int32_t *pos, int m, int n, unsigned long long *seed)
{
    for (int i = 0, k = 0; i < n && k < m; i++)
        if (rng_next(seed) % (unsigned long long)(n - i) < (unsigned long long)(m - k))
            pos[k++] = i;
}

/* Causal attention FLOPs of rows at pos (NULL: rows 0..n-1): 4 * head_dim * heads per visible key. */
static double attn_flops(const int32_t *pos, int n, int heads, int head_dim)
{
    double keys = 0;
    for (int i = 0; i < n; i++)
        keys += (pos ? pos[i] : i) + 1.0;
    return 4.0 * head_dim * heads * keys;
}

struct kernel_bufs {
    float *q, *qs, *out; /* every row's queries, the list's, the output */
    void *k, *v;
};

enum { L_SPAN, L_LIST, L_BY4, N_LANES };
static const char *const lane_name[N_LANES] = { "span", "list", "by-4" };

static double run_lane(struct ra_backend *be, int lane, const struct kernel_bufs *b, const int32_t *pos, int m,
                       int n, const struct ra_attention_shape *s)
{
    const struct ra_rows cache = { n, 0, NULL };
    const size_t qd = (size_t)s->q_stride;
    int rc = RA_OK;
    const double t0 = ra_wall_s();
    if (lane == L_SPAN)
        rc = be->ops->attention(be, b->out, b->q, &(struct ra_rows){ n, 0, NULL }, b->k, b->v, &cache, s);
    else if (lane == L_LIST)
        rc = be->ops->attention(be, b->out, b->qs, &(struct ra_rows){ m, 0, pos }, b->k, b->v, &cache, s);
    else
        for (int i = 0; i < m && rc == RA_OK; i += BY)
            rc = be->ops->attention(be, b->out + i * qd, b->qs + i * qd,
                                    &(struct ra_rows){ m - i < BY ? m - i : BY, 0, pos + i }, b->k, b->v, &cache, s);
    if (rc == RA_OK)
        rc = be->ops->synchronize(be);
    if (rc != RA_OK)
        bench_die("attention", rc);
    return ra_wall_s() - t0;
}

static void kernel_bench(const struct options *o, const int32_t *pos, int m)
{
    const int n = o->tokens, qd = o->heads * o->head_dim, kvd = o->kv_heads * o->head_dim;
    const struct ra_attention_shape s = { o->heads, o->kv_heads, o->head_dim, qd, kvd, o->kv_dtype };
    unsigned long long seed = o->seed;
    struct kernel_bufs b;
    const size_t es = ra_dtype_size(o->kv_dtype), nq = (size_t)n * qd, nkv = (size_t)n * kvd;
    b.q = malloc(nq * sizeof(float));
    b.qs = malloc((size_t)m * qd * sizeof(float));
    b.out = malloc(nq * sizeof(float));
    b.k = malloc(nkv * es);
    b.v = malloc(nkv * es);
    if (!b.q || !b.qs || !b.out || !b.k || !b.v) {
        fprintf(stderr, "%s: out of memory for %d rows\n", bench_name, n);
        exit(3);
    }
    for (size_t i = 0; i < nq; i++)
        b.q[i] = (float)((double)(rng_next(&seed) >> 11) / 9007199254740992.0 * 2 - 1);
    for (size_t i = 0; i < nkv; i++)
        for (int kv = 0; kv < 2; kv++) {
            const float x = (float)((double)(rng_next(&seed) >> 11) / 9007199254740992.0 * 2 - 1);
            void *dst = kv ? b.v : b.k;
            if (o->kv_dtype == RA_DTYPE_BF16)
                ((uint16_t *)dst)[i] = ra_f32_to_bf16(x);
            else
                ((float *)dst)[i] = x;
        }
    for (int i = 0; i < m; i++)
        memcpy(b.qs + (size_t)i * qd, b.q + (size_t)pos[i] * qd, sizeof(float) * qd);
    const double flops[N_LANES] = { attn_flops(NULL, n, o->heads, o->head_dim),
                                    attn_flops(pos, m, o->heads, o->head_dim),
                                    attn_flops(pos, m, o->heads, o->head_dim) };
    printf("# kernel: %d heads (%d kv) x %d, %s KV; span: %d rows; list and by-4: %d rows (%.1f%%)\n", o->heads,
           o->kv_heads, o->head_dim, ra_dtype_name(o->kv_dtype), n, m, 100.0 * m / n);
    printf("%-8s %-6s %8s %28s %10s %10s\n", "threads", "lane", "rows", "ms median [min-max]", "GFLOP/s",
           "vs span");
    for (int ti = 0; ti < o->n_threads; ti++) {
        struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
        p.threads = o->threads[ti];
        struct ra_backend *be = NULL;
        int rc = ra_backend_open(&be, "cpu", &p);
        if (rc != RA_OK)
            bench_die("backend", rc);
        struct bench_samples t[N_LANES];
        memset(t, 0, sizeof t);
        for (int lane = 0; lane < N_LANES; lane++) /* untimed: page the buffers in, size the scratch */
            run_lane(be, lane, &b, pos, m, n, &s);
        for (int r = 0; r < o->repeat; r++)
            for (int lane = 0; lane < N_LANES; lane++)
                bench_add(&t[lane], run_lane(be, lane, &b, pos, m, n, &s) * 1e3);
        const double span_rate = flops[L_SPAN] / bench_median(&t[L_SPAN]);
        for (int lane = 0; lane < N_LANES; lane++) {
            char sp[64];
            const double rate = flops[lane] / bench_median(&t[lane]);
            printf("%-8d %-6s %8d %28s %10.1f %10.2f\n", o->threads[ti], lane_name[lane], lane == L_SPAN ? n : m,
                   bench_spread(sp, sizeof sp, &t[lane], "%.2f"), rate * 1e-6, rate / span_rate);
        }
        ra_backend_free(be);
    }
    free(b.q);
    free(b.qs);
    free(b.out);
    free(b.k);
    free(b.v);
}

/* One forward pass: the span [0, n) or the list; stats into st, returns the wall time. */
static double forward_once(struct ra_context *ctx, struct ra_kvcache *kv, const int32_t *tokens, const int32_t *pos,
                           const int32_t *list_tokens, int m, int n, struct ra_forward_stats *st)
{
    memset(st, 0, sizeof *st);
    ctx->stats = st;
    const double t0 = ra_wall_s();
    int rc = pos ? ra_forward_rows(ctx, list_tokens, &(struct ra_rows){ m, 0, pos }, kv, NULL)
                 : ra_forward_span(ctx, tokens, 0, n, kv, NULL);
    if (rc == RA_OK)
        rc = ctx->backend->ops->synchronize(ctx->backend);
    ctx->stats = NULL;
    if (rc != RA_OK)
        bench_die(pos ? "ra_forward_rows" : "ra_forward_span", rc);
    return ra_wall_s() - t0;
}

/* --model's model, refused (exit 2) when --tokens exceed its context. */
static void model_open(struct ra_model *model, const struct options *o)
{
    const int rc = ra_model_load(model, o->model);
    if (rc != RA_OK)
        bench_die(o->model, rc);
    if (o->tokens > model->config.seq_len) {
        fprintf(stderr, "%s: --tokens %d exceeds %s's context of %d\n", bench_name, o->tokens, o->model,
                model->config.seq_len);
        exit(2);
    }
}

static void forward_bench(const struct options *o, const struct ra_model *model, const int32_t *pos, int m)
{
    const struct ra_config *c = &model->config;
    const int n = o->tokens;
    int rc;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n), *lt = malloc(sizeof(int32_t) * (size_t)m);
    unsigned long long seed = o->seed + 1;
    for (int i = 0; i < n; i++)
        tokens[i] = (int32_t)(rng_next(&seed) % (unsigned long long)c->vocab_size);
    for (int i = 0; i < m; i++)
        lt[i] = tokens[pos[i]];
    printf("# forward: %s (dim %d, %d layers, %d heads (%d kv)), %s KV; span [0, %d), list of %d rows\n", o->model,
           c->dim, c->n_layers, c->n_heads, c->n_kv_heads, ra_dtype_name(o->kv_dtype), n, m);
    printf("%-8s %-6s %8s %28s %10s %10s %10s %12s\n", "threads", "pass", "rows", "ms median [min-max]",
           "linear ms", "attn ms", "other ms", "other us/row");
    for (int ti = 0; ti < o->n_threads; ti++) {
        struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
        p.threads = o->threads[ti];
        p.kv_dtype = o->kv_dtype;
        struct ra_backend *be = NULL;
        struct ra_context ctx = { 0 };
        struct ra_kvcache kv;
        if ((rc = ra_backend_open(&be, "cpu", &p)) != RA_OK)
            bench_die("backend", rc);
        if ((rc = ra_context_init(&ctx, model, be)) != RA_OK)
            bench_die("context", rc);
        if ((rc = ra_kvcache_init_dtype(&kv, be, c->n_layers, ra_config_kv_dim(c), n, o->kv_dtype)) != RA_OK)
            bench_die("KV cache", rc);
        struct ra_forward_stats st;
        forward_once(&ctx, &kv, tokens, NULL, lt, m, n, &st); /* untimed: fills the cache */
        forward_once(&ctx, &kv, tokens, pos, lt, m, n, &st);
        struct bench_samples wall[2], lin[2], att[2], oth[2];
        memset(wall, 0, sizeof wall);
        memset(lin, 0, sizeof lin);
        memset(att, 0, sizeof att);
        memset(oth, 0, sizeof oth);
        for (int r = 0; r < o->repeat; r++)
            for (int k = 0; k < 2; k++) {
                bench_add(&wall[k], forward_once(&ctx, &kv, tokens, k ? pos : NULL, lt, m, n, &st) * 1e3);
                bench_add(&lin[k], st.t_linear * 1e3);
                bench_add(&att[k], st.t_attention * 1e3);
                bench_add(&oth[k], st.t_other * 1e3);
            }
        for (int k = 0; k < 2; k++) {
            char sp[64];
            const int rows = k ? m : n;
            printf("%-8d %-6s %8d %28s %10.2f %10.2f %10.2f %12.2f\n", o->threads[ti], k ? "list" : "span", rows,
                   bench_spread(sp, sizeof sp, &wall[k], "%.1f"), bench_median(&lin[k]), bench_median(&att[k]),
                   bench_median(&oth[k]), bench_median(&oth[k]) * 1e3 / rows);
        }
        ra_kvcache_free(&kv);
        ra_context_free(&ctx);
        ra_backend_free(be);
    }
    free(tokens);
    free(lt);
}

int main(int argc, char **argv)
{
    struct options o;
    const int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    int m = (int)(o.ratio * o.tokens + 0.5);
    m = m < 1 ? 1 : m;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)m);
    if (!pos)
        return 3;
    unsigned long long seed = o.seed;
    sample_rows(pos, m, o.tokens, &seed);
    char cpu[256], flags[128], kernels[256];
    bench_cpu_name(cpu, sizeof cpu);
    bench_cpu_flags(flags, sizeof flags);
    ra_cpu_isa_describe(kernels, sizeof kernels);
    printf("# runahead bench-attn-rows: attention at a position list, CPU backend\n");
    printf("# machine : %s, %ld cores online, %s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), flags);
    printf("# kernels : %s (RA_CPU_ISA forces one)\n", kernels);
    printf("# runs    : medians [min-max] of %d, lanes interleaved run by run, seed %llu\n", o.repeat, o.seed);
    struct ra_model model;
    if (o.model)
        model_open(&model, &o);
    kernel_bench(&o, pos, m);
    if (o.model) {
        forward_bench(&o, &model, pos, m);
        ra_model_free(&model);
    }
    free(pos);
    return 0;
}
