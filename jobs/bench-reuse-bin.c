/* bench-reuse: time to first token of a request made of chunks in each reuse
 * mode (src/reuse/reuse.h), single process on the CPU backend.
 *
 * The request: --chunks chunks of --chunk-tokens tokens and a question,
 * generated deterministically from --seed: for a model with a tokenizer
 * (SmolLM2), sentences of words encoded and cut at --chunk-tokens ids, the
 * question a sentence of text, rendered with the model's chat template; for
 * one without (a runahead-synth model), random ids. It is written to a
 * request file (ids for the chunks, so every mode reads the same ids) and
 * loaded as runahead --request loads one.
 *
 * The store (--store, a fresh directory by default) is filled first with
 * every chunk computed in isolation behind the request's prefix, not timed:
 * chunk 0 is then also the exact prefix of `prefix`, the others its misses
 * (chunks in a new order). Then for each thread count and store bandwidth
 * (--store-gbps: 0 reads from the page cache at its own speed, others are
 * emulated as the loader paces its reads) the modes run interleaved (none,
 * prefix, full, blend, none, ...) --repeat times; each row prints the median
 * TTFT [min-max], its speed-up over `none` (TTFT of none / TTFT of the mode)
 * from the same rounds, and the rows the mode recomputed in its last layer. */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "args.h"
#include "bench_request.h"
#include "bench_util.h"
#include "ra_core.h"
#include "reuse/request.h"
#include "reuse/reuse.h"
#include "reuse/run.h"
#include "reuse/store.h"
#include "vocab.h"

#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char bench_name[] = "bench-reuse";

#define MAX_LIST 8
#define N_MODES 4

struct options {
    const char *model, *store;
    int chunks, chunk_tokens, question_tokens, repeat;
    int threads[MAX_LIST], n_threads;
    double gbps[MAX_LIST];
    int n_gbps;
    double ratio;
    unsigned long long seed;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench-reuse --model PATH [--chunks N] [--chunk-tokens N] [--question-tokens N]\n"
            "                   [--threads T,T,...] [--store-gbps G,G,...] [--blend-ratio R] [--repeat N]\n"
            "                   [--store DIR] [--seed S]\n"
            "TTFT of --reuse none, prefix, full and blend on one request of chunks (generated from\n"
            "--seed: text for a model with a tokenizer, ids otherwise), the store filled first (not\n"
            "timed), the modes interleaved; medians [min-max] of --repeat rounds, speed-up over none.\n"
            "  --model PATH        the model (a GGUF with its tokenizer, or a runahead-synth directory)\n"
            "  --chunks N          chunks of the request (default 6)\n"
            "  --chunk-tokens N    tokens of each chunk (default 512)\n"
            "  --question-tokens N ids of the question of an ids request (default 32; text: one sentence)\n"
            "  --threads LIST      thread counts (default 1,2)\n"
            "  --store-gbps LIST   store bandwidths in GB/s, 0 = the page cache (default 0,2)\n"
            "  --blend-ratio R     blend's ratio, or auto (default 0.15)\n"
            "  --repeat N          rounds (default 5)\n"
            "  --store DIR         the chunk store (default: a new directory under $TMPDIR, removed after)\n"
            "  --seed S            the request's seed (default 1)\n");
}

static int parse_gbps(const char *s, struct options *o)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_gbps = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (o->n_gbps == MAX_LIST || ra_arg_double(t, "--store-gbps", &o->gbps[o->n_gbps]) != RA_OK ||
            !(o->gbps[o->n_gbps] >= 0))
            return ra_arg_usage_error(bench_name, "--store-gbps: '%s' is not a list of at most %d bandwidths >= 0",
                                      s, MAX_LIST);
        o->n_gbps++;
    }
    return o->n_gbps > 0 ? -1 : ra_arg_usage_error(bench_name, "--store-gbps: an empty list");
}

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option opts[] = {
        { "model", required_argument, 0, 'm' },        { "chunks", required_argument, 0, 'c' },
        { "chunk-tokens", required_argument, 0, 'n' }, { "question-tokens", required_argument, 0, 'q' },
        { "threads", required_argument, 0, 't' },      { "store-gbps", required_argument, 0, 'g' },
        { "blend-ratio", required_argument, 0, 'b' },  { "repeat", required_argument, 0, 'r' },
        { "store", required_argument, 0, 's' },        { "seed", required_argument, 0, 'S' },
        { "help", no_argument, 0, 'h' },               { 0, 0, 0, 0 },
    };
    *o = (struct options){ .chunks = 6, .chunk_tokens = 512, .question_tokens = 32, .repeat = 5,
                           .threads = { 1, 2 }, .n_threads = 2, .gbps = { 0, 2 }, .n_gbps = 2, .ratio = 0.15,
                           .seed = 1 };
    int c, rc = RA_OK;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'c': rc = ra_arg_int(optarg, "--chunks", 1, 64, &o->chunks); break;
        case 'n': rc = ra_arg_int(optarg, "--chunk-tokens", 1, 1 << 20, &o->chunk_tokens); break;
        case 'q': rc = ra_arg_int(optarg, "--question-tokens", 1, 4096, &o->question_tokens); break;
        case 't': o->n_threads = bench_parse_list(optarg, o->threads, MAX_LIST, "--threads"); break;
        case 'g':
            if (parse_gbps(optarg, o) >= 0)
                return 2;
            break;
        case 'b': rc = ra_reuse_ratio_parse(optarg, &o->ratio); break;
        case 'r': rc = ra_arg_int(optarg, "--repeat", 1, BENCH_MAX_REPEAT, &o->repeat); break;
        case 's': o->store = optarg; break;
        case 'S': o->seed = strtoull(optarg, NULL, 0); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (rc != RA_OK)
            return ra_arg_usage_error(bench_name, "%s", ra_error_message());
    }
    if (optind < argc)
        return ra_arg_usage_error(bench_name, "unexpected argument '%s'", argv[optind]);
    if (!o->model)
        return ra_arg_usage_error(bench_name, "--model is required");
    return -1;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static const enum ra_reuse_mode modes[N_MODES] = { RA_REUSE_NONE, RA_REUSE_PREFIX, RA_REUSE_FULL, RA_REUSE_BLEND };

/* The rows of one (threads, bandwidth): the modes interleaved, o->repeat rounds. */
static void run_rows(const struct options *o, struct ra_context *ctx, struct ra_store *st,
                     const struct ra_request *req, struct ra_kvcache *kv, float *logits, int threads, double gbps)
{
    struct bench_samples ttft[N_MODES], speedup[N_MODES];
    int recomputed[N_MODES] = { 0 };
    memset(ttft, 0, sizeof ttft);
    memset(speedup, 0, sizeof speedup);
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    cfg.ratio = o->ratio;
    cfg.store_gbps = gbps;
    for (int r = 0; r < o->repeat; r++) {
        double t[N_MODES];
        for (int m = 0; m < N_MODES; m++) {
            struct ra_reuse_report rep = { 0 };
            const int rc = ra_reuse_prefill(ctx, st, req, modes[m], &cfg, kv, logits, &rep);
            if (rc != RA_OK)
                bench_die(ra_reuse_mode_name(modes[m]), rc);
            t[m] = rep.ttft;
            recomputed[m] = rep.recomputed && rep.n_layers > 0 ? rep.recomputed[rep.n_layers - 1] : 0;
            ra_reuse_report_free(&rep);
            bench_add(&ttft[m], t[m] * 1e3);
        }
        for (int m = 0; m < N_MODES; m++)
            bench_add(&speedup[m], t[0] / t[m]);
    }
    char store[32];
    if (gbps > 0)
        snprintf(store, sizeof store, "%gGB/s", gbps);
    else
        snprintf(store, sizeof store, "cache");
    for (int m = 0; m < N_MODES; m++) {
        char sp[64], name[32];
        if (modes[m] == RA_REUSE_BLEND && o->ratio < 0)
            snprintf(name, sizeof name, "blend:auto");
        else if (modes[m] == RA_REUSE_BLEND)
            snprintf(name, sizeof name, "blend:%g", o->ratio);
        else
            snprintf(name, sizeof name, "%s", ra_reuse_mode_name(modes[m]));
        printf("%-8d %-11s %-11s %28s %10.2f %12d\n", threads, store, name, bench_spread(sp, sizeof sp, &ttft[m], "%.1f"),
               bench_median(&speedup[m]), recomputed[m]);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    struct ra_model model;
    if ((rc = ra_model_load(&model, o.model)) != RA_OK)
        bench_die(o.model, rc);
    struct ra_vocab vocab, *v = NULL;
    char vpath[4096];
    if (ra_vocab_find(o.model, vpath, sizeof vpath)) {
        if ((rc = ra_vocab_load(&vocab, vpath)) != RA_OK)
            bench_die(vpath, rc);
        v = &vocab;
    }
    char tmp[4096], path[4200], store_dir[4200];
    const char *tdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmp, sizeof tmp, "%s/bench-reuse-XXXXXX", tdir);
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "%s: cannot create a directory under %s\n", bench_name, tdir);
        return 1;
    }
    snprintf(path, sizeof path, "%s/request.json", tmp);
    if (o.store)
        snprintf(store_dir, sizeof store_dir, "%s", o.store);
    else
        snprintf(store_dir, sizeof store_dir, "%s/store", tmp);
    bench_write_request(path, o.chunks, o.chunk_tokens, o.question_tokens, o.seed, v, model.config.vocab_size);
    struct ra_request req = { 0 };
    struct ra_store *st = NULL;
    float *logits = NULL;
    int status = 0;
    if ((rc = ra_request_load(&req, path, v, v ? v->chat_template : NULL)) != RA_OK)
        bench_die("the request", rc);
    if (req.n > model.config.seq_len) {
        fprintf(stderr, "%s: the request's %d tokens exceed %s's context of %d\n", bench_name, req.n, o.model,
                model.config.seq_len);
        status = 2;
        goto done;
    }
    struct ra_store_identity id = { .kv_dtype = RA_DTYPE_F32 };
    if ((rc = ra_store_model_identity(&model, id.model)) != RA_OK ||
        (rc = ra_store_vocab_identity(v, id.tokenizer)) != RA_OK ||
        (rc = ra_store_open(&st, store_dir, &model, &id, 0, RA_STORE_CREATE)) != RA_OK)
        bench_die(store_dir, rc);

    char cpu[256], flags[128];
    bench_cpu_name(cpu, sizeof cpu);
    bench_cpu_flags(flags, sizeof flags);
    const struct ra_config *c = &model.config;
    printf("# runahead bench-reuse: TTFT of chunk-cache reuse, single process, CPU backend\n");
    printf("# machine : %s, %ld cores online, %s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), flags);
    printf("# model   : %s (dim %d, %d layers, %d heads (%d kv)), f32 KV\n", o.model, c->dim, c->n_layers,
           c->n_heads, c->n_kv_heads);
    printf("# request : %d tokens: prefix %d, %d chunks of %d (%s), question and tail %d; seed %llu\n", req.n,
           req.n_prefix, req.n_chunks, o.chunk_tokens, v ? "text" : "ids", req.n - req.suffix_start, o.seed);
    printf("# store   : %s, every chunk stored behind the prefix before timing; cache: read from the page "
           "cache, NGB/s: paced as a store of N GB/s\n", store_dir);
    printf("# runs    : medians [min-max] of %d rounds, modes interleaved; speed-up = TTFT none / TTFT mode, "
           "per round\n", o.repeat);
    printf("%-8s %-11s %-11s %28s %10s %12s\n", "threads", "store", "mode", "TTFT ms median [min-max]", "speed-up",
           "rows (last)");
    fflush(stdout);
    logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    status = logits ? 0 : 3;
    for (int ti = 0; ti < o.n_threads && logits; ti++) {
        struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
        p.threads = o.threads[ti];
        struct ra_backend *be = NULL;
        struct ra_context ctx = { 0 };
        struct ra_kvcache kv;
        if ((rc = ra_backend_open(&be, "cpu", &p)) != RA_OK)
            bench_die("backend", rc);
        if ((rc = ra_context_init(&ctx, &model, be)) != RA_OK)
            bench_die("context", rc);
        if ((rc = ra_kvcache_init(&kv, be, c->n_layers, ra_config_kv_dim(c), req.n)) != RA_OK)
            bench_die("KV cache", rc);
        if (ti == 0)
            bench_fill_store(st, &ctx, &req);
        for (int g = 0; g < o.n_gbps; g++)
            run_rows(&o, &ctx, st, &req, &kv, logits, o.threads[ti], o.gbps[g]);
        ra_kvcache_free(&kv);
        ra_context_free(&ctx);
        ra_backend_free(be);
    }
    ra_store_close(st);
done:
    ra_request_free(&req);
    if (nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) /* the request, and the store when it was ours */
        fprintf(stderr, "%s: could not remove %s\n", bench_name, tmp);
    free(logits);
    if (v)
        ra_vocab_free(v);
    ra_model_free(&model);
    return status;
}
