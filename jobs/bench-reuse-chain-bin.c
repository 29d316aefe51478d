/* bench-reuse-chain: time to first token of chunk reuse along the chain
 * (mpi/reuse_chain.h) against reuse on one rank and full prefill on the
 * same ranks, with the cost model's prediction beside each figure.
 *
 *   mpirun -np 2 bench-reuse-chain-bin --model PATH [--chunks 8,15,31] [--profile FILE.h5]
 *
 * For each request size (--chunks chunks of --chunk-tokens tokens and a
 * question, generated from --seed as jobs/bench-reuse does), rank 0 writes
 * the request and fills a fresh store with every chunk (not timed); then
 * --repeat rounds run, interleaved in this order:
 *   blend-kvr  blend (--blend-ratio) on every rank, KV-Runahead's chain
 *   blend-1    blend on rank 0 alone (the other ranks wait): the single-rank reuse run
 *   none-kvr   full prefill on every rank, KV-Runahead (mpi/prefill.h)
 *   blend-tsp  blend on every rank, TSP
 *   none-tsp   full prefill on every rank, TSP (even split)
 * Each row: the median TTFT [min-max] of the rounds, the cost model's
 * prediction (costmodel.h, from --profile's calibrated figures) and its error;
 * then per size the ratios of the medians of per-round ratios (measured and
 * predicted): blend-1 / blend-kvr, none-kvr / blend-kvr, and the same for TSP.
 * The model takes the ranks to share one node: where the loader threads
 * find no spare core, their reads and checks slow the passes.
 * Reuse runs use --partition auto for reuse (ra_partition_auto_reuse) unless
 * --partition even; full prefill the plain auto split (KVR) and even (TSP).
 * A size longer than the model's context is skipped with a line saying so. */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "args.h"
#include "autosplit.h"
#include "bench_request.h"
#include "bench_util.h"
#include "costmodel.h"
#include "partition.h"
#include "prefill.h"
#include "ra_core.h"
#include "ra_mpi.h"
#include "reuse/reuse.h"
#include "reuse/run.h"
#include "reuse_chain.h"
#include "table.h"

#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char bench_name[] = "bench-reuse-chain";

#define MAX_LIST 8
enum { RUN_BLEND_KVR, RUN_BLEND_1, RUN_NONE_KVR, RUN_BLEND_TSP, RUN_NONE_TSP, N_RUNS };
static const char *const run_names[N_RUNS] = { "blend-kvr", "blend-1", "none-kvr", "blend-tsp", "none-tsp" };

struct options {
    const char *model, *profile, *hw_tag;
    int chunks[MAX_LIST], n_sizes;
    int chunk_tokens, question_tokens, repeat, threads, even;
    double ratio;
    enum ra_reuse_send send;
    enum ra_blend_scope scope;
    unsigned long long seed;
};

static int rank, world;
static int failed_rank = -1; /* the first rank that failed: the one that prints */

/* Every rank's status becomes the first failing rank's. */
static int agree(int rc)
{
    return ra_mpi_agree(rc, MPI_COMM_WORLD, &failed_rank);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np P bench-reuse-chain-bin --model PATH [--chunks N,N,...] [--chunk-tokens N]\n"
            "                   [--question-tokens N] [--threads T] [--blend-ratio R] [--reuse-send full|delta]\n"
            "                   [--blend-scope global|local] [--partition auto|even] [--repeat N]\n"
            "                   [--profile FILE.h5] [--hw-tag TAG] [--seed S]\n"
            "TTFT of blend on P ranks (KV-Runahead and TSP) against blend on one rank and full prefill\n"
            "on P ranks, interleaved, medians [min-max] of --repeat rounds, with the cost model's\n"
            "prediction and its error, and the ratios of the runs (measured and predicted).\n"
            "  --model PATH        the model (a GGUF with its tokenizer, or a runahead-synth directory)\n"
            "  --chunks LIST       request sizes in chunks (default 8,15,31: about 4k, 8k and 16k tokens)\n"
            "  --chunk-tokens N    tokens of each chunk (default 512)\n"
            "  --question-tokens N ids of the question of an ids request (default 32; text: one sentence)\n"
            "  --threads T         CPU threads per rank (default 1)\n"
            "  --blend-ratio R     blend's ratio (default 0.15)\n"
            "  --reuse-send S      full (default) or delta\n"
            "  --blend-scope S     global (default) or local\n"
            "  --partition K       auto (default: the reuse cost model's split) or even\n"
            "  --repeat N          rounds (default 5)\n"
            "  --profile FILE.h5   the cost model's profile (runahead-tune --calibrate); without, no predictions\n"
            "  --hw-tag TAG        the profile's hardware tag (default: this machine's)\n"
            "  --seed S            the request's seed (default 1)\n");
}

static int usage_error(const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "%s: %s\n", bench_name, msg);
    return 2;
}

/* -1: go on; otherwise the exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option opts[] = {
        { "model", required_argument, 0, 'm' },        { "chunks", required_argument, 0, 'c' },
        { "chunk-tokens", required_argument, 0, 'n' }, { "question-tokens", required_argument, 0, 'q' },
        { "threads", required_argument, 0, 't' },      { "blend-ratio", required_argument, 0, 'b' },
        { "reuse-send", required_argument, 0, 'd' },   { "blend-scope", required_argument, 0, 'g' },
        { "partition", required_argument, 0, 'p' },    { "repeat", required_argument, 0, 'r' },
        { "profile", required_argument, 0, 'P' },      { "hw-tag", required_argument, 0, 'H' },
        { "seed", required_argument, 0, 'S' },         { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    *o = (struct options){ .chunks = { 8, 15, 31 }, .n_sizes = 3, .chunk_tokens = 512, .question_tokens = 32,
                           .repeat = 5, .threads = 1, .ratio = 0.15, .seed = 1 };
    int c, rc = RA_OK;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'c': rc = ra_arg_int_list(optarg, "--chunks", 1, 64, o->chunks, MAX_LIST, &o->n_sizes); break;
        case 'n': rc = ra_arg_int(optarg, "--chunk-tokens", 1, 1 << 20, &o->chunk_tokens); break;
        case 'q': rc = ra_arg_int(optarg, "--question-tokens", 1, 4096, &o->question_tokens); break;
        case 't': rc = ra_arg_int(optarg, "--threads", 1, 1024, &o->threads); break;
        case 'b':
            rc = ra_arg_double(optarg, "--blend-ratio", &o->ratio);
            if (rc == RA_OK && !(o->ratio >= 0 && o->ratio <= 1))
                rc = ra_error_set(RA_EINVAL, "--blend-ratio %s: want a fraction in [0, 1]", optarg);
            break;
        case 'd': rc = ra_reuse_send_parse(optarg, &o->send); break;
        case 'g': rc = ra_blend_scope_parse(optarg, &o->scope); break;
        case 'p':
            if (!strcmp(optarg, "even")) o->even = 1;
            else if (strcmp(optarg, "auto") != 0)
                rc = ra_error_set(RA_EINVAL, "--partition: '%s' is not auto or even", optarg);
            break;
        case 'r': rc = ra_arg_int(optarg, "--repeat", 1, BENCH_MAX_REPEAT, &o->repeat); break;
        case 'P': o->profile = optarg; break;
        case 'H': o->hw_tag = optarg; break;
        case 'S': o->seed = strtoull(optarg, NULL, 0); break;
        case 'h': if (rank == 0) usage(stdout); return 0;
        default: return usage_error("unknown option or missing value (see --help)");
        }
        if (rc != RA_OK)
            return usage_error(ra_error_message());
    }
    if (optind < argc)
        return usage_error("unexpected argument (see --help)");
    if (!o->model)
        return usage_error("--model is required");
    if (world < 2)
        return usage_error("needs at least 2 ranks (mpirun -np 2)");
    return -1;
}

/* ------------------------------------------------------------------ one size */

struct size_run {
    const struct options *o;
    struct ra_context *ctx;
    struct ra_store *st;
    struct ra_request req;
    struct ra_kvcache kv;
    float *logits;
    struct ra_cost_profile pf;
    int have_pf;
    struct ra_cost_span *loaded;
    struct ra_cost_reuse ru;
    int b_kvr[RA_MAX_RANKS + 1], b_tsp[RA_MAX_RANKS + 1], b_plain[RA_MAX_RANKS + 1], b_even[RA_MAX_RANKS + 1];
    double predicted[N_RUNS];
};

/* The cost model's view of the request: every chunk loaded (the store holds them all). */
static int describe(struct size_run *s, const struct ra_reuse_config *cfg)
{
    if (!(s->loaded = malloc(sizeof *s->loaded * (size_t)(s->req.n_chunks + 1))))
        return ra_error_set(RA_ENOMEM, "out of memory");
    return ra_cost_reuse_of_request(&s->req, RA_REUSE_BLEND, cfg, s->o->scope == RA_BLEND_SCOPE_GLOBAL,
                                    s->o->send == RA_REUSE_SEND_DELTA, s->kv.dtype, s->loaded, &s->ru);
}

/* Every run's bounds, and the predictions where there is a profile. */
static int plan_bounds(struct size_run *s)
{
    const struct ra_config *c = &s->ctx->model->config;
    const struct ra_cost_profile *pf = s->have_pf ? &s->pf : NULL;
    const int n = s->req.n;
    int rc = ra_partition_parse("even", n, world, s->b_even);
    if (rc == RA_OK)
        rc = ra_partition_auto(c, pf, n, world, s->b_plain, NULL, 0);
    if (rc == RA_OK && s->o->even) {
        memcpy(s->b_kvr, s->b_even, sizeof s->b_kvr);
        memcpy(s->b_tsp, s->b_even, sizeof s->b_tsp);
    } else if (rc == RA_OK && (rc = ra_partition_auto_reuse(c, pf, RA_COST_KVR, &s->ru, n, world, s->b_kvr, NULL, 0)) ==
                                  RA_OK) {
        rc = ra_partition_auto_reuse(c, pf, RA_COST_TSP, &s->ru, n, world, s->b_tsp, NULL, 0);
    }
    for (int k = 0; k < N_RUNS; k++)
        s->predicted[k] = NAN;
    if (rc != RA_OK || !pf)
        return rc;
    /* The ranks share this node: a loader thread without a core of its own slows its rank's pass. */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    struct ra_cost_reuse ru1 = s->ru;
    s->ru.shared_core = (long)(s->o->threads + 1) * world > cores;
    ru1.shared_core = s->o->threads + 1 > cores;
    const int one[2] = { 0, n };
    if ((rc = ra_cost_reuse_replay(c, pf, RA_COST_KVR, &s->ru, s->b_kvr, world, &s->predicted[RUN_BLEND_KVR], NULL,
                                   NULL)) == RA_OK &&
        (rc = ra_cost_reuse_replay(c, pf, RA_COST_KVR, &ru1, one, 1, &s->predicted[RUN_BLEND_1], NULL, NULL)) ==
            RA_OK &&
        (rc = ra_cost_predict(c, pf, RA_COST_KVR, s->b_plain, world, &s->predicted[RUN_NONE_KVR], NULL)) == RA_OK &&
        (rc = ra_cost_reuse_replay(c, pf, RA_COST_TSP, &s->ru, s->b_tsp, world, &s->predicted[RUN_BLEND_TSP], NULL,
                                   NULL)) == RA_OK)
        rc = ra_cost_predict(c, pf, RA_COST_TSP, s->b_even, world, &s->predicted[RUN_NONE_TSP], NULL);
    return rc;
}

/* One run; every rank gets its TTFT in seconds. */
static int run_once(struct size_run *s, int k, const struct ra_reuse_config *cfg, double *ttft)
{
    struct ra_reuse_report rep = { 0 };
    struct ra_reuse_chain_stats stats = { 0 };
    struct ra_reuse_chain ch = { .method = RA_METHOD_KVR, .route = RA_ROUTE_CHAIN, .bounds = s->b_kvr,
                                 .send = s->o->send, .scope = s->o->scope };
    int rc = RA_OK;
    *ttft = 0;
    switch (k) {
    case RUN_BLEND_TSP:
        ch.method = RA_METHOD_TSP;
        ch.bounds = s->b_tsp;
        /* fall through */
    case RUN_BLEND_KVR:
        rc = ra_reuse_chain_prefill(s->ctx, MPI_COMM_WORLD, s->st, &s->req, RA_REUSE_BLEND, cfg, &ch, &s->kv,
                                    s->logits, &rep, &stats);
        if (stats.pass_failed) /* peers may be blocked on this rank's rows: nothing else ends them */
            ra_mpi_abort(bench_name, rank);
        *ttft = rep.ttft;
        MPI_Bcast(ttft, 1, MPI_DOUBLE, world - 1, MPI_COMM_WORLD);
        break;
    case RUN_BLEND_1:
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            rc = ra_reuse_prefill(s->ctx, s->st, &s->req, RA_REUSE_BLEND, cfg, &s->kv, s->logits, &rep);
        *ttft = rep.ttft;
        MPI_Bcast(ttft, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        rc = agree(rc);
        break;
    case RUN_NONE_KVR:
        rc = ra_prefill_median(s->ctx, MPI_COMM_WORLD, RA_METHOD_KVR, RA_ROUTE_CHAIN, s->b_plain, &s->kv, s->req.ids,
                               1, ttft);
        break;
    case RUN_NONE_TSP:
        rc = ra_prefill_median(s->ctx, MPI_COMM_WORLD, RA_METHOD_TSP, RA_ROUTE_CHAIN, s->b_even, &s->kv, s->req.ids,
                               1, ttft);
        break;
    }
    ra_reuse_report_free(&rep);
    return rc;
}

static void print_ratio(int tokens, const char *name, const struct bench_samples *m, double predicted)
{
    char sp[64];
    char err[32] = "-";
    if (!isnan(predicted))
        snprintf(err, sizeof err, "%+.1f%%", 100.0 * (predicted - bench_median(m)) / bench_median(m));
    printf("ratio %-7d %-22s %24s %10.2f %9s\n", tokens, name, bench_spread(sp, sizeof sp, m, "%.2f"), predicted, err);
}

static int measure(struct size_run *s)
{
    struct bench_samples ttft[N_RUNS], ratio[4];
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    cfg.ratio = s->o->ratio;
    memset(ttft, 0, sizeof ttft);
    memset(ratio, 0, sizeof ratio);
    int rc = describe(s, &cfg);
    if ((rc = agree(rc == RA_OK ? plan_bounds(s) : rc)) != RA_OK)
        return rc;
    for (int r = 0; r < s->o->repeat && rc == RA_OK; r++) {
        double t[N_RUNS];
        for (int k = 0; k < N_RUNS && rc == RA_OK; k++)
            if ((rc = agree(run_once(s, k, &cfg, &t[k]))) == RA_OK)
                bench_add(&ttft[k], t[k] * 1e3);
        if (rc != RA_OK)
            break;
        bench_add(&ratio[0], t[RUN_BLEND_1] / t[RUN_BLEND_KVR]);
        bench_add(&ratio[1], t[RUN_NONE_KVR] / t[RUN_BLEND_KVR]);
        bench_add(&ratio[2], t[RUN_BLEND_1] / t[RUN_BLEND_TSP]);
        bench_add(&ratio[3], t[RUN_NONE_TSP] / t[RUN_BLEND_TSP]);
    }
    if (rc != RA_OK || rank != 0)
        return rc;
    const int *bounds[N_RUNS] = { s->b_kvr, NULL, s->b_plain, s->b_tsp, s->b_even };
    for (int k = 0; k < N_RUNS; k++) {
        char sp[64], b[128] = "0,";
        const double med = bench_median(&ttft[k]), pred = s->predicted[k] * 1e3;
        if (bounds[k])
            ra_partition_format(bounds[k], world, b, sizeof b);
        else
            snprintf(b, sizeof b, "0,%d", s->req.n);
        char err[32] = "-";
        if (!isnan(pred))
            snprintf(err, sizeof err, "%+.1f%%", 100.0 * (pred - med) / med);
        printf("%-7d %-10s %-5d %-20s %26s %10.1f %9s\n", s->req.n, run_names[k], bounds[k] ? world : 1, b,
               bench_spread(sp, sizeof sp, &ttft[k], "%.1f"), pred, err);
    }
    const double *p = s->predicted;
    print_ratio(s->req.n, "blend-1/blend-kvr", &ratio[0], p[RUN_BLEND_1] / p[RUN_BLEND_KVR]);
    print_ratio(s->req.n, "none-kvr/blend-kvr", &ratio[1], p[RUN_NONE_KVR] / p[RUN_BLEND_KVR]);
    print_ratio(s->req.n, "blend-1/blend-tsp", &ratio[2], p[RUN_BLEND_1] / p[RUN_BLEND_TSP]);
    print_ratio(s->req.n, "none-tsp/blend-tsp", &ratio[3], p[RUN_NONE_TSP] / p[RUN_BLEND_TSP]);
    fflush(stdout);
    return RA_OK;
}

/* ------------------------------------------------------------------ setup */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Rank 0 writes the request and fills a fresh store; then every rank loads
 * the request and opens the store. 1: the request exceeds the context. */
static int prepare(struct size_run *s, struct ra_model *m, const struct ra_vocab *v, const char *dir, int chunks)
{
    char path[4200], store_dir[4200];
    const struct ra_config *c = &m->config;
    struct ra_store_identity id = { .kv_dtype = RA_DTYPE_F32 };
    int rc = RA_OK;
    snprintf(path, sizeof path, "%s/request-%d.json", dir, chunks);
    snprintf(store_dir, sizeof store_dir, "%s/store-%d", dir, chunks);
    if (rank == 0)
        bench_write_request(path, chunks, s->o->chunk_tokens, s->o->question_tokens, s->o->seed, v, c->vocab_size);
    MPI_Barrier(MPI_COMM_WORLD);
    if ((rc = ra_request_load(&s->req, path, v, v ? v->chat_template : NULL)) != RA_OK)
        return rc;
    if (s->req.n > c->seq_len)
        return 1;
    if ((rc = ra_store_model_identity(m, id.model)) != RA_OK || (rc = ra_store_vocab_identity(v, id.tokenizer)) != RA_OK)
        return rc;
    if (rank == 0 && (rc = ra_store_open(&s->st, store_dir, m, &id, 0, RA_STORE_CREATE)) == RA_OK)
        bench_fill_store(s->st, s->ctx, &s->req);
    if ((rc = agree(rc)) != RA_OK)
        return rc;
    if (rank != 0)
        rc = ra_store_open(&s->st, store_dir, m, &id, 0, 0);
    if (rc == RA_OK)
        rc = ra_kvcache_init(&s->kv, s->ctx->backend, c->n_layers, ra_config_kv_dim(c), s->req.n);
    if (rc == RA_OK && !(s->logits = malloc(sizeof(float) * (size_t)c->vocab_size)))
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    return rc;
}

static void size_free(struct size_run *s)
{
    if (s->st)
        ra_store_close(s->st);
    ra_request_free(&s->req);
    ra_kvcache_free(&s->kv);
    free(s->logits);
    free(s->loaded);
}

static void header(const struct options *o, const struct ra_model *m, const struct size_run *proto)
{
    char cpu[256], flags[128];
    const struct ra_config *c = &m->config;
    bench_cpu_name(cpu, sizeof cpu);
    bench_cpu_flags(flags, sizeof flags);
    printf("# runahead bench-reuse-chain: TTFT of chunk reuse on %d ranks against one rank and full prefill\n", world);
    printf("# machine : %s, %ld cores online, %s; %d ranks x %d threads, CPU backend\n", cpu,
           sysconf(_SC_NPROCESSORS_ONLN), flags, world, o->threads);
    printf("# model   : %s (dim %d, %d layers, %d heads (%d kv), context %d), f32 KV\n", o->model, c->dim,
           c->n_layers, c->n_heads, c->n_kv_heads, c->seq_len);
    printf("# reuse   : blend %g, check layer 1, scope %s, sends %s, partition %s; store in the page cache, "
           "every chunk stored before timing\n", o->ratio, ra_blend_scope_name(o->scope), ra_reuse_send_name(o->send),
           o->even ? "even" : "auto (reuse cost model)");
    printf("# cost    : %s\n", proto->have_pf ? o->profile : "no --profile: no predictions (nan)");
    printf("# runs    : medians [min-max] of %d rounds, runs interleaved; ratio rows: medians of per-round ratios, "
           "beside the cost model's\n", o->repeat);
    printf("%-7s %-10s %-5s %-20s %26s %10s %9s\n", "tokens", "run", "ranks", "bounds", "TTFT ms median [min-max]",
           "model ms", "error");
    fflush(stdout);
}

static int load_profile(const struct options *o, const struct ra_model *m, struct size_run *proto)
{
    char model_id[128], hw[128];
    if (!o->profile)
        return RA_OK;
    ra_table_model_id(&m->config, model_id, sizeof model_id);
    if (o->hw_tag)
        snprintf(hw, sizeof hw, "%s", o->hw_tag);
    else
        ra_table_default_hw_tag(hw, sizeof hw);
    int rc = ra_cost_profile_load(o->profile, model_id, hw, &proto->pf, NULL);
    proto->have_pf = rc == RA_OK;
    return rc;
}

static int run(const struct options *o)
{
    struct ra_model model = { 0 };
    struct ra_vocab vocab, *v = NULL;
    struct ra_backend *be = NULL;
    struct ra_context ctx = { 0 };
    struct size_run proto = { .o = o, .ctx = &ctx };
    char vpath[4096], dir[4096] = "";
    struct ra_backend_params bp = RA_BACKEND_PARAMS_INIT;
    bp.threads = o->threads;
    int rc = ra_model_load(&model, o->model);
    if (rc == RA_OK && ra_vocab_find(o->model, vpath, sizeof vpath) && (rc = ra_vocab_load(&vocab, vpath)) == RA_OK)
        v = &vocab;
    if (rc == RA_OK && (rc = ra_backend_open(&be, "cpu", &bp)) == RA_OK)
        rc = ra_context_init(&ctx, &model, be);
    if (rc == RA_OK)
        rc = load_profile(o, &model, &proto);
    if (rank == 0 && rc == RA_OK) { /* one directory for every size, shared by the ranks */
        const char *t = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(dir, sizeof dir, "%s/bench-reuse-chain-XXXXXX", t);
        if (!mkdtemp(dir))
            rc = ra_error_set(RA_EIO, "cannot create a directory under %s", t);
    }
    if ((rc = agree(rc)) != RA_OK)
        goto out;
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0)
        header(o, &model, &proto);
    for (int i = 0; i < o->n_sizes && rc == RA_OK; i++) {
        struct size_run s = proto;
        rc = prepare(&s, &model, v, dir, o->chunks[i]);
        if (rc == 1 && rank == 0)
            printf("# %d chunks: %d tokens exceed the model's context of %d: skipped\n", o->chunks[i], s.req.n,
                   model.config.seq_len);
        if (rc == 1)
            rc = RA_OK;
        else if ((rc = agree(rc)) == RA_OK)
            rc = measure(&s);
        size_free(&s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && dir[0] && nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "%s: could not remove %s\n", bench_name, dir);
out:
    ra_context_free(&ctx);
    ra_backend_free(be);
    if (v)
        ra_vocab_free(v);
    ra_model_free(&model);
    return rc;
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = ra_mpi_init_threads(&argc, &argv, &rank, &world, 0), status = 0;
    if (rc != RA_OK)
        return 1;
    if ((status = parse_options(argc, argv, &o)) < 0) {
        status = 0;
        if ((rc = run(&o)) != RA_OK) {
            const char *msg = ra_error_message();
            if ((failed_rank == rank || failed_rank < 0) && !strncmp(msg, "rank ", 5))
                fprintf(stderr, "%s: %s\n", bench_name, msg); /* it names the rank */
            else if (failed_rank == rank || failed_rank < 0)
                fprintf(stderr, "%s: rank %d: %s\n", bench_name, rank, msg);
            status = 1;
        }
    }
    MPI_Finalize();
    return status;
}
