/* bench-chain: KV-Runahead against TSP against a single process, TTFT.
 *
 * Run through the jobs/bench-chain wrapper, which makes two launches of this
 * binary inside one invocation:
 *
 *   mpirun -np 1 --bind-to none bench-chain-bin --single --single-out F ...
 *       the single-process baselines: one rank, 1 and 2 threads, the prompt
 *       as one span [0, C) through ra_prefill_run (no exchange), per context;
 *       writes the medians to F.
 *   mpirun -np 2 --bind-to core bench-chain-bin --single-in F ...
 *       per context, in rounds (every configuration once per round, so slow
 *       drifts of the clock hit all of them alike): TSP (even) and KVR-E
 *       (even, route chain); then KVR-S's search: ra_search_partition
 *       (partition/search.h, the search runahead-tune runs) over the rank-0
 *       boundary, each partition it asks for measured --repeat times (route
 *       chain). The split it finds is then measured afresh, in rounds (KVR-S:
 *       the search's best median, the lowest of several noisy medians, is
 *       biased low). Then the no-communication bound of that
 *       split: each rank computes its slice alone, the ranks taking turns (the
 *       others asleep), with the rows before the slice computed beforehand, the
 *       bound of a run being the slower rank; KVR-S below it is flagged.
 *       Prints the table, with the F figures beside its own.
 *
 * Every figure is the median of --repeat runs, printed with its range
 * (min..max); contexts run longest first, so the KV cache and the activations
 * are allocated once. Progress goes to stderr, the table to
 * stdout, and --report-dir DIR appends one JSON line per measured run to
 * DIR/bench-chain.jsonl.
 *
 * The machine is shared: before each run every rank sleeps 0.4 s while rank 0
 * reads /proc/stat, and the run waits while other processes keep the cores
 * busy (--quiet-wait); after it, each rank's CPU time over wall time says
 * whether another process took its core, and a disturbed run is re-run
 * (--min-cpu, --retries). The table counts what was re-run and kept. */
#include "config.h"
#include "args.h"
#include "bench_util.h"
#include "partition.h"
#include "prefill.h"
#include "ra_mpi.h"
#include "ra_core.h"
#include "search.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_LIST 32

/* What the cost model expects on bench-small, 2 ranks: the best rank-0 share and TSP / KVR-S
 * (the search on the FLOP model; test_costmodel checks the same figures). */
static const struct { int context; double split, tsp_over_kvr; } expected[] = {
    { 2048, 0.545, 1.09 }, { 4096, 0.575, 1.15 }, { 8192, 0.612, 1.24 }, { 16384, 0.646, 1.32 },
};

struct options {
    const char *model, *report_dir, *single_out, *single_in, *backend;
    int contexts[MAX_LIST], n_contexts;
    int points, min_stride; /* KVR-S's search: grid values per level, smallest stride in tokens */
    int single_threads[MAX_LIST], n_single_threads;
    int repeat, threads, single, retries;
    double min_cpu, quiet_wait;
    unsigned long long seed;
    enum ra_dtype kv_dtype;
};

const char bench_name[] = "bench-chain";
static int rank, world;
static double t_start;    /* for elapsed times in the progress lines */
static char run_id[64];   /* groups the JSON lines of one invocation */

/* Rank 0's count of runs: kept, re-run because disturbed, kept although disturbed. */
static int n_kept, n_rerun, n_kept_disturbed;
static double worst_cpu = 1;

static void usage(FILE *f)
{
    fprintf(f,
"usage: bench-chain [--contexts LIST] [--repeat N] [--points N] [--min-stride N] [--model DIR]\n"
"                   [--report-dir DIR]\n"
"\n"
"KV-Runahead against the TSP all-gather baseline and a single process: TTFT of\n"
"bench-small on 2 ranks (one thread each) for TSP, KVR-E (even split) and KVR-S\n"
"(the split runahead-tune's search finds, each trial the median of --repeat\n"
"runs, then re-measured with fresh runs), the single\n"
"process with 1 and 2 threads, and the no-communication bound (each KVR-S slice\n"
"computed alone, its prefix rows present; the slower rank). Prints the medians,\n"
"their ranges and the ratios, beside the TSP/KVR-S that the cost model\n"
"expects.\n"
"\n"
"  --contexts LIST    prompt lengths (default 2048,4096,8192)\n"
"  --repeat N         median of N runs of everything (default 3)\n"
"  --points N         KVR-S's search: grid values per level (default 5, as runahead-tune)\n"
"  --min-stride N     KVR-S's search: its smallest stride in tokens (default 16)\n"
"  --model DIR        model (default ${RA_BENCH_DIR:-$HOME/.cache/runahead}/bench-small,\n"
"                     written by runahead-synth if missing)\n"
"  --report-dir DIR   append one JSON line per measured run to DIR/bench-chain.jsonl\n"
"  --min-cpu F        a run is disturbed when a rank got less than F of its cores'\n"
"                     time (CPU time / wall time / threads; default 0.9): another\n"
"                     process ran on them\n"
"  --retries N        re-run a disturbed run up to N times (default 2); the table\n"
"                     counts the disturbed runs it had to keep\n"
"  --backend B        cpu (default) or cuda (each rank on the GPU of its index on the\n"
"                     node; no disturbed-run check, host CPU time says nothing of it)\n"
"  --quiet-wait S     before each run, sample the machine for 0.4 s with every rank\n"
"                     asleep, and while other processes keep more than 10%% of the\n"
"                     cores busy wait for them, at most S seconds per run\n"
"                     (default 600; 0: do not wait)\n"
"  --help\n"
"\n"
"The wrapper jobs/bench-chain launches this binary twice; options for the binary\n"
"only (jobs/bench-chain-bin):\n"
"  --single           one rank: the single-process baselines only\n"
"  --single-threads LIST  thread counts of --single (default 1,2)\n"
"  --single-out FILE  --single: write the medians to FILE\n"
"  --single-in FILE   2 ranks: read FILE and print its figures in the table\n"
"  --threads N        threads per rank of the 2-rank runs (default 1)\n"
"  --seed S           seed of the random prompt ids (default 42)\n"
"  --kv-dtype T       KV cache rows: f32 (default) or bf16\n");
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench-chain: rank %d: ", rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* Returns 0 to go on, 1 after --help; bad options end the program. */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { O_CONTEXTS = 256, O_REPEAT, O_POINTS, O_MIN_STRIDE, O_MODEL, O_REPORT_DIR, O_SINGLE, O_SINGLE_THREADS,
           O_SINGLE_OUT, O_SINGLE_IN, O_THREADS, O_SEED, O_RETRIES, O_MIN_CPU, O_QUIET_WAIT, O_KV_DTYPE, O_BACKEND,
           O_HELP };
    static const struct option longopts[] = {
        { "contexts", required_argument, NULL, O_CONTEXTS },
        { "repeat", required_argument, NULL, O_REPEAT },
        { "points", required_argument, NULL, O_POINTS }, { "min-stride", required_argument, NULL, O_MIN_STRIDE },
        { "model", required_argument, NULL, O_MODEL },
        { "report-dir", required_argument, NULL, O_REPORT_DIR },
        { "single", no_argument, NULL, O_SINGLE },
        { "single-threads", required_argument, NULL, O_SINGLE_THREADS },
        { "single-out", required_argument, NULL, O_SINGLE_OUT },
        { "single-in", required_argument, NULL, O_SINGLE_IN },
        { "threads", required_argument, NULL, O_THREADS },
        { "seed", required_argument, NULL, O_SEED },
        { "retries", required_argument, NULL, O_RETRIES },
        { "min-cpu", required_argument, NULL, O_MIN_CPU },
        { "quiet-wait", required_argument, NULL, O_QUIET_WAIT },
        { "kv-dtype", required_argument, NULL, O_KV_DTYPE },
        { "backend", required_argument, NULL, O_BACKEND },
        { "help", no_argument, NULL, O_HELP },
        { NULL, 0, NULL, 0 },
    };
    memset(o, 0, sizeof *o);
    o->n_contexts = bench_parse_list("2048,4096,8192", o->contexts, MAX_LIST, "--contexts");
    o->points = 5;
    o->backend = "cpu";
    o->min_stride = 16;
    o->n_single_threads = bench_parse_list("1,2", o->single_threads, MAX_LIST, "--single-threads");
    o->repeat = 3;
    o->retries = 2;
    o->min_cpu = 0.9;
    o->quiet_wait = 600;
    o->threads = 1;
    o->seed = 42;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case O_CONTEXTS:
            o->n_contexts = bench_parse_list(optarg, o->contexts, MAX_LIST, "--contexts");
            break;
        case O_POINTS:
        case O_MIN_STRIDE:
            if (ra_arg_int(optarg, c == O_POINTS ? "--points" : "--min-stride", c == O_POINTS ? 3 : 1,
                           c == O_POINTS ? RA_SEARCH_MAX_POINTS_PER_AXIS : 1 << 20,
                           c == O_POINTS ? &o->points : &o->min_stride) != RA_OK)
                fail("%s", ra_error_message());
            break;
        case O_SINGLE_THREADS:
            o->n_single_threads = bench_parse_list(optarg, o->single_threads, MAX_LIST, "--single-threads");
            break;
        case O_REPEAT:
        case O_THREADS:
            if (ra_arg_int(optarg, c == O_REPEAT ? "--repeat" : "--threads", 1, 1000,
                           c == O_REPEAT ? &o->repeat : &o->threads) != RA_OK)
                fail("%s", ra_error_message());
            break;
        case O_SEED: {
            char *end;
            o->seed = strtoull(optarg, &end, 10);
            if (!*optarg || *end)
                fail("--seed '%s': need a non-negative integer", optarg);
            break;
        }
        case O_RETRIES: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > 100)
                fail("--retries '%s': need an integer in 0..100", optarg);
            o->retries = (int)v;
            break;
        }
        case O_MIN_CPU: {
            char *end;
            o->min_cpu = strtod(optarg, &end);
            if (!*optarg || *end || !(o->min_cpu >= 0 && o->min_cpu <= 1))
                fail("--min-cpu '%s': need a fraction in [0,1]", optarg);
            break;
        }
        case O_QUIET_WAIT: {
            char *end;
            o->quiet_wait = strtod(optarg, &end);
            if (!*optarg || *end || !(o->quiet_wait >= 0))
                fail("--quiet-wait '%s': need seconds >= 0", optarg);
            break;
        }
        case O_BACKEND:
            o->backend = optarg;
            if (!*optarg || ra_backend_name_check(optarg, "--backend") != RA_OK)
                fail("--backend: '%s' is not cpu or cuda", optarg);
            break;
        case O_KV_DTYPE:
            if (ra_kv_dtype_parse(optarg, "--kv-dtype", &o->kv_dtype) != RA_OK)
                fail("%s", ra_error_message());
            break;
        case O_MODEL: o->model = optarg; break;
        case O_REPORT_DIR: o->report_dir = optarg; break;
        case O_SINGLE: o->single = 1; break;
        case O_SINGLE_OUT: o->single_out = optarg; break;
        case O_SINGLE_IN: o->single_in = optarg; break;
        case 'h':
        case O_HELP:
            if (rank == 0)
                usage(stdout);
            return 1;
        default:
            fail("unknown option or missing value: '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        fail("unexpected argument '%s' (see --help)", argv[optind]);
    if (!o->model)
        fail("no model: give --model DIR (the jobs/bench-chain wrapper does)");
    if (o->single && world != 1)
        fail("--single runs on one rank, but %d were started", world);
    if (!o->single && world != 2)
        fail("the KVR/TSP comparison runs on 2 ranks (mpirun -np 2), not %d; --single for one rank", world);
    return 0;
}

/* splitmix64: the prompt is the same for every method and every launch. */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int32_t *random_prompt(int n, int vocab, unsigned long long seed)
{
    int32_t *t = malloc(sizeof *t * (size_t)n);
    uint64_t s = seed;
    if (!t)
        fail("out of memory for %d prompt ids", n);
    t[0] = 1; /* BOS */
    for (int i = 1; i < n; i++)
        t[i] = 3 + (int32_t)(splitmix64(&s) % (uint64_t)(vocab - 3));
    return t;
}

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...)
{
    if (rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench-chain [%7.1f s] ", ra_wall_s() - t_start);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ------------------------------------------------------------------ the JSON lines */

static FILE *report;

static void report_open(const struct options *o)
{
    if (!o->report_dir || rank != 0)
        return;
    char path[4096];
    if (mkdir(o->report_dir, 0777) != 0 && errno != EEXIST)
        fail("--report-dir %s: %s", o->report_dir, strerror(errno));
    snprintf(path, sizeof path, "%s/bench-chain.jsonl", o->report_dir);
    if (!(report = fopen(path, "a")))
        fail("%s: %s", path, strerror(errno));
}

/* One measured run. per_rank: [ranks][4] = total, wait for K,V rows, drain of the last sends,
 * wait in layer 0 (NULL for single; the bound's runs fill the total only). */
static void report_run(const struct options *o, const struct ra_config *c, const char *label, const char *method,
                       const char *route, const char *spec, const int *bounds, int ranks, int threads, int context,
                       int rep, double ttft, const double *per_rank, double cpu, int attempt, int kept)
{
    if (!report)
        return;
    json_t *bl = json_array(), *line;
    for (int r = 0; r <= ranks; r++)
        json_array_append_new(bl, json_integer(bounds[r]));
    line = json_pack("{s:s, s:s, s:s, s:s, s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:s, s:s, s:o, s:s, s:o}", "bench",
                     "bench-chain", "run_id", run_id, "runahead_version", PACKAGE_VERSION, "model", o->model,
                     "model_shape", "dim", c->dim, "hidden_dim", c->hidden_dim, "layers", c->n_layers, "heads",
                     c->n_heads, "kv_heads", c->n_kv_heads, "vocab", c->vocab_size, "label", label, "method", method,
                     "route", route ? json_string(route) : json_null(), "partition", spec, "bounds", bl);
    json_t *more = json_pack("{s:s, s:i, s:i, s:i, s:I, s:i, s:i, s:f, s:f, s:b, s:b}", "backend", o->backend,
                             "ranks", ranks, "threads_per_rank", threads, "context_length", context, "seed",
                             (json_int_t)o->seed, "repeat_index", rep, "attempt", attempt, "ttft_s", ttft,
                             "min_cpu_share", cpu, "disturbed", cpu < o->min_cpu, "kept", kept);
    json_object_update(line, more);
    json_decref(more);
    if (per_rank) {
        json_t *pr = json_array();
        for (int r = 0; r < ranks; r++)
            json_array_append_new(pr, json_pack("{s:i, s:f, s:f, s:f, s:f}", "rank", r, "total_s", per_rank[4 * r],
                                                "wait_s", per_rank[4 * r + 1], "drain_s", per_rank[4 * r + 2],
                                                "wait_layer0_s", per_rank[4 * r + 3]));
        json_object_set_new(line, "per_rank", pr);
    }
    if (!line || json_dumpf(line, report, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0 || fputc('\n', report) == EOF ||
        fflush(report) != 0)
        fail("the report line of %s: cannot write it", label);
    json_decref(line);
}

static double waited_quiet; /* seconds spent waiting for other processes (rank 0) */

/* Every rank sleeps (no MPI call spins meanwhile) while rank 0 samples how busy the
 * cores are; while more than 10% busy, other processes run: wait for them, up to
 * --quiet-wait seconds. Collective. */
static void wait_quiet(const struct options *o)
{
    if (o->quiet_wait <= 0)
        return;
    const double t0 = ra_wall_s();
    double last_note = t0;
    for (;;) {
        double busy = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0 && ra_cpu_busy_share(0.4, &busy) != RA_OK) /* no /proc/stat: take the cores as idle */
            busy = 0;
        else if (rank != 0)
            nanosleep(&(struct timespec){ 0, 400000000 }, NULL);
        MPI_Bcast(&busy, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        const double now = ra_wall_s();
        if (busy <= 0.10 || now - t0 > o->quiet_wait)
            break;
        if (now - last_note > 15 || last_note == t0) {
            progress("  waiting for other processes: the cores are %.0f%% busy (%.0f s so far)", 100 * busy, now - t0);
            last_note = now;
        }
    }
    waited_quiet += ra_wall_s() - t0;
}

/* After a run: 1 to keep it, 0 to re-run it (rank 0 counts; every rank gets the same cpu). */
static int keep_run(const struct options *o, double cpu, int attempt)
{
    const int disturbed = cpu < o->min_cpu;
    if (disturbed && attempt < o->retries) {
        n_rerun++;
        progress("  disturbed: a rank got %.0f%% of its cores' time, re-running", 100 * cpu);
        return 0;
    }
    n_kept++;
    if (disturbed) {
        n_kept_disturbed++;
        progress("  disturbed: a rank got %.0f%% of its cores' time, kept after %d re-runs", 100 * cpu, attempt);
    }
    worst_cpu = cpu < worst_cpu ? cpu : worst_cpu;
    return 1;
}

/* ------------------------------------------------------------------ shared set-up */

struct bench {
    struct ra_model model;
    struct ra_backend *be;
    struct ra_context ctx;
    struct ra_kvcache kv;
    int32_t *prompt;
    float *logits;
    int max_context;
    int host; /* the CPU backend: CPU time over wall time says whether another process took a core */
};

static void bench_init(struct bench *b, const struct options *o, int threads, int with_kv)
{
    int rc = ra_model_load(&b->model, o->model);
    if (rc != RA_OK)
        fail("%s", ra_error_message());
    const struct ra_config *c = &b->model.config;
    b->max_context = 0;
    for (int i = 0; i < o->n_contexts; i++)
        b->max_context = o->contexts[i] > b->max_context ? o->contexts[i] : b->max_context;
    if (b->max_context > c->seq_len)
        fail("context %d exceeds the model's %d tokens", b->max_context, c->seq_len);
    struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
    p.threads = threads;
    p.kv_dtype = o->kv_dtype;
    p.rank = rank;
    p.local_rank = ra_mpi_local_rank(); /* collective: every rank opens its backend */
    if ((rc = ra_backend_open(&b->be, o->backend, &p)) != RA_OK || (rc = ra_context_init(&b->ctx, &b->model, b->be)) != RA_OK)
        fail("%s", ra_error_message());
    b->host = strcmp(b->be->ops->name, "cpu") == 0;
    if (with_kv &&
        (rc = ra_kvcache_init_dtype(&b->kv, b->be, c->n_layers, ra_config_kv_dim(c), b->max_context,
                                    o->kv_dtype)) != RA_OK)
        fail("%s", ra_error_message());
    b->prompt = random_prompt(b->max_context, c->vocab_size, o->seed);
    if (!(b->logits = malloc(sizeof(float) * (size_t)c->vocab_size)))
        fail("out of memory");
}

static void bench_free(struct bench *b)
{
    if (b->kv.k)
        ra_kvcache_free(&b->kv);
    ra_context_free(&b->ctx);
    ra_model_free(&b->model);
    ra_backend_free(b->be);
    free(b->prompt);
    free(b->logits);
}

/* Contexts longest first: buffers sized once, the cold round dropped by the median. */
static void order_contexts(const struct options *o, int *order)
{
    for (int i = 0; i < o->n_contexts; i++)
        order[i] = o->contexts[i];
    for (int i = 1; i < o->n_contexts; i++)
        for (int j = i; j > 0 && order[j] > order[j - 1]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

/* ------------------------------------------------------------------ single process (--single) */

static int run_single(const struct options *o)
{
    const int nt = o->n_single_threads;
    struct bench b[MAX_LIST];
    memset(b, 0, sizeof b);
    /* One model struct per thread count (the mapping is shared), so each keeps its
     * own activations; one KV cache for all of them. */
    for (int t = 0; t < nt; t++)
        bench_init(&b[t], o, o->single_threads[t], t == 0);
    FILE *out = NULL;
    if (o->single_out && !(out = fopen(o->single_out, "w")))
        fail("%s: %s", o->single_out, strerror(errno));
    if (out)
        fprintf(out, "# bench-chain single-process medians: threads context median_s min_s max_s runs\n");
    const struct ra_config *c = &b[0].model.config;
    int order[MAX_LIST];
    order_contexts(o, order);
    double *ttft = calloc((size_t)nt * (size_t)o->repeat, sizeof *ttft);
    if (!ttft)
        fail("out of memory");
    for (int ci = 0; ci < o->n_contexts; ci++) {
        const int C = order[ci];
        int bounds[2] = { 0, C };
        for (int rep = 0; rep < o->repeat; rep++)
            for (int t = 0; t < nt; t++)
                for (int attempt = 0;; attempt++) {
                    struct ra_exchange x = { 0 };
                    double *v = &ttft[t * o->repeat + rep];
                    wait_quiet(o);
#ifdef _OPENMP
                    /* The CPU backend's GEMMs use be->n_threads, but its other kernels
                     * (attention, norms, RoPE, SwiGLU) follow the process-wide OpenMP
                     * setting, which the last ra_backend_open set: set it per run. */
                    omp_set_num_threads(o->single_threads[t]);
#endif
                    const double w0 = ra_wall_s(), c0 = ra_process_cpu_s();
                    int rc = ra_exchange_init(&x, MPI_COMM_WORLD, RA_METHOD_SINGLE, RA_ROUTE_CHAIN, bounds,
                                              c->n_layers, ra_kvcache_row_bytes(&b[0].kv));
                    if (rc == RA_OK)
                        rc = ra_prefill_run(&b[t].ctx, &x, &b[0].kv, b[t].prompt, b[t].logits, v);
                    if (rc != RA_OK)
                        fail("single, %d threads, %d tokens: %s", o->single_threads[t], C, ra_error_message());
                    const double cpu =
                        b[t].host ? (ra_process_cpu_s() - c0) / ((ra_wall_s() - w0) * o->single_threads[t]) : 1;
                    ra_exchange_free(&x);
                    progress("context %d, round %d/%d: single-%dt  TTFT %.3f s  cpu %.0f%%", C, rep + 1, o->repeat,
                             o->single_threads[t], *v, 100 * cpu);
                    char label[32];
                    snprintf(label, sizeof label, "single-%dt", o->single_threads[t]);
                    const int keep = keep_run(o, cpu, attempt);
                    report_run(o, c, label, "single", NULL, "even", bounds, 1, o->single_threads[t], C, rep, *v, NULL,
                               cpu, attempt, keep);
                    if (keep)
                        break;
                }
        for (int t = 0; t < nt; t++) {
            const double *v = &ttft[t * o->repeat];
            const double lo = ra_min(v, o->repeat), hi = ra_max(v, o->repeat);
            if (out)
                fprintf(out, "%d %d %.6f %.6f %.6f %d\n", o->single_threads[t], C, ra_median(v, o->repeat), lo, hi,
                        o->repeat);
            else
                printf("single %d threads, %d tokens: TTFT median %.4f s (min %.4f, max %.4f)\n",
                       o->single_threads[t], C, ra_median(v, o->repeat), lo, hi);
        }
        if (out)
            fflush(out);
    }
    if (out)
        fprintf(out, "runs %d %d %d %.4f %.1f\n", n_kept, n_rerun, n_kept_disturbed, worst_cpu, waited_quiet);
    if (out && fclose(out) != 0)
        fail("%s: %s", o->single_out, strerror(errno));
    free(ttft);
    for (int t = 0; t < nt; t++)
        bench_free(&b[t]);
    return 0;
}

/* ------------------------------------------------------------------ 2 ranks */

#define PR 4 /* figures per rank and run: total, wait for K,V rows, drain of the last sends, wait in layer 0 */
#define MAX_SPLITS 64                /* partitions KVR-S's search may measure per context */
#define MAX_CFG (2 + MAX_SPLITS + 2) /* TSP, KVR-E, the search's splits, KVR-S re-measured, the bound */

/* One configuration of the comparison and its runs. */
struct config {
    char label[32], spec[64];
    enum ra_method method;
    double share;                  /* rank-0 share (KVR splits), 0 otherwise */
    int bounds[3];
    double ttft[1024];             /* per repeat */
    double per_rank[1024][2 * PR]; /* per repeat: [rank][PR] */
    double med;
};

/* One prompt pass with the exchange; rank 0 gets the TTFT and every rank's stats. */
static double measure_chain(struct bench *b, struct config *cfg, double *per_rank, double *cpu)
{
    const struct ra_config *c = &b->model.config;
    struct ra_exchange x = { 0 };
    double ttft = 0;
    int rc = ra_exchange_init(&x, MPI_COMM_WORLD, cfg->method, RA_ROUTE_CHAIN, cfg->bounds, c->n_layers,
                              ra_kvcache_row_bytes(&b->kv));
    const double w0 = ra_wall_s(), c0 = ra_process_cpu_s();
    if (rc == RA_OK)
        rc = ra_prefill_run(&b->ctx, &x, &b->kv, b->prompt, b->logits, &ttft);
    if (rc != RA_OK)
        fail("%s: %s", cfg->label, ra_error_message());
    const double share = b->host ? (ra_process_cpu_s() - c0) / ((ra_wall_s() - w0) * b->be->n_threads) : 1;
    const struct ra_layer_times *l0 = &x.stats.layers[0];
    /* Waits for K,V rows apart from the drain of the last sends (rank 0's only wait). */
    double mine[PR + 2] = { rank == world - 1 ? ttft : 0, x.stats.t_total, x.stats.t_wait, x.stats.t_drain,
                            l0->wait_end - l0->wait_begin, share };
    double all[(PR + 2) * 2];
    MPI_Gather(mine, PR + 2, MPI_DOUBLE, all, PR + 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    ra_exchange_free(&x);
    if (rank == 0) {
        ttft = all[(PR + 2) * (world - 1)];
        *cpu = 1;
        for (int r = 0; r < world; r++) {
            memcpy(per_rank + PR * r, all + (PR + 2) * r + 1, sizeof(double) * PR);
            *cpu = all[(PR + 2) * r + PR + 1] < *cpu ? all[(PR + 2) * r + PR + 1] : *cpu;
        }
    }
    MPI_Bcast(cpu, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return ttft;
}

/* A barrier that sleeps instead of spinning: Open MPI's MPI_Barrier polls, and a
 * rank polling beside the one being timed would take a core of this 2-core machine. */
static void idle_barrier(void)
{
    MPI_Request rq;
    int done = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    while (!done) {
        MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        if (!done) {
            struct timespec nap = { 0, 200000 };
            nanosleep(&nap, NULL);
        }
    }
}

/* The rows before each rank's slice, computed (untimed) into its cache with
 * no exchange: the values KVR would have received, so the bound's attention
 * reads real keys, as KVR's does. */
static void bound_prepare(struct bench *b, const int *bounds)
{
    const int start = bounds[rank];
    if (start > 0 && ra_forward_span(&b->ctx, b->prompt, 0, start, &b->kv, NULL) != RA_OK)
        fail("bound: the rows before the slice: %s", ra_error_message());
}

/* The no-communication bound of one run: each rank's slice [b_r, b_{r+1}) alone
 * (the ranks take turns; the others sleep), its prefix rows already in the
 * cache, the last rank's classifier included, as in KVR-S's TTFT. No chain can
 * beat the slowest of these: a rank does at least this work after the pass
 * starts. Rank 0 gets the maximum over ranks and each rank's time. */
static double measure_bound(struct bench *b, const int *bounds, double *per_rank, double *cpu)
{
    const int start = bounds[rank], n = bounds[rank + 1] - start, last = rank == world - 1;
    double mine[2] = { 0, 1 }, all[2 * 2], worst = 0;
    for (int turn = 0; turn < world; turn++) {
        idle_barrier();
        if (turn != rank)
            continue;
        const double t0 = MPI_Wtime(), c0 = ra_process_cpu_s();
        int rc = ra_forward_span(&b->ctx, b->prompt + start, start, n, &b->kv, last ? b->logits : NULL);
        mine[0] = MPI_Wtime() - t0;
        mine[1] = b->host ? (ra_process_cpu_s() - c0) / (mine[0] * b->be->n_threads) : 1;
        if (rc != RA_OK)
            fail("bound: %s", ra_error_message());
    }
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        *cpu = 1;
        memset(per_rank, 0, sizeof(double) * PR * (size_t)world);
        for (int r = 0; r < world; r++) {
            per_rank[PR * r] = all[2 * r];
            worst = all[2 * r] > worst ? all[2 * r] : worst;
            *cpu = all[2 * r + 1] < *cpu ? all[2 * r + 1] : *cpu;
        }
    }
    MPI_Bcast(cpu, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return worst;
}

/* A figure: the median of the runs and their range. */
struct fig {
    double med, lo, hi;
};

static struct fig fig_of(const double *v, int n)
{
    struct fig f = { NAN, NAN, NAN };
    if (n < 1)
        return f;
    f.med = ra_median(v, n);
    f.lo = ra_min(v, n);
    f.hi = ra_max(v, n);
    return f;
}

struct single_fig {
    int threads, context;
    struct fig f;
};

/* The single phase's counts of runs (kept, re-run, kept disturbed, worst cpu share). */
static int single_runs[3] = { -1, 0, 0 };
static double single_worst_cpu = 1, single_waited;

static int read_single(const char *path, struct single_fig *f, int max)
{
    FILE *in = fopen(path, "r");
    char line[256];
    int n = 0;
    if (!in) {
        if (rank == 0)
            fprintf(stderr, "bench-chain: %s: %s (single-process columns left empty)\n", path, strerror(errno));
        return 0;
    }
    while (n < max && fgets(line, sizeof line, in))
        if (!strncmp(line, "runs ", 5))
            sscanf(line + 5, "%d %d %d %lf %lf", &single_runs[0], &single_runs[1], &single_runs[2], &single_worst_cpu,
                   &single_waited);
        else if (line[0] != '#' &&
                 sscanf(line, "%d %d %lf %lf %lf", &f[n].threads, &f[n].context, &f[n].f.med, &f[n].f.lo, &f[n].f.hi) == 5)
            n++;
    fclose(in);
    return n;
}

static struct fig single_of(const struct single_fig *f, int n, int threads, int context)
{
    for (int i = 0; i < n; i++)
        if (f[i].threads == threads && f[i].context == context)
            return f[i].f;
    return (struct fig){ NAN, NAN, NAN };
}

static double expected_ratio(int context)
{
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        if (expected[i].context == context)
            return expected[i].tsp_over_kvr;
    return NAN;
}

/* Results of one context, kept for the table. */
struct context_result {
    int context;
    struct fig single1, single2, tsp, kvr_e, kvr_s, bound;
    double share;                             /* KVR-S's rank-0 share */
    int bounds[3];
    double total[2], wait[2], drain[2], fill; /* KVR-S's median run (re-measured): per rank; rank 1's layer-0 wait */
    struct fig bound_rank[2];                 /* each rank's slice alone */
    int n_split;                              /* the search's partitions, ascending by share */
    double split_share[MAX_SPLITS];
    struct fig split[MAX_SPLITS];
};

static void fmt_time(char *buf, size_t len, double v)
{
    if (isnan(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.3f", v);
}

static void fmt_ratio(char *buf, size_t len, double a, double b)
{
    if (isnan(a) || isnan(b) || b <= 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.2fx", a / b);
}

/* "lo..hi" of a figure, or "-". */
static void fmt_range(char *buf, size_t len, struct fig f)
{
    if (isnan(f.med))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.3f..%.3f", f.lo, f.hi);
}

static void print_header(const struct options *o, const struct bench *b)
{
    const struct ra_config *c = &b->model.config;
    char host[256] = "unknown", date[64], cpu[256] = "unknown CPU";
    gethostname(host, sizeof host);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
                char *s = strchr(line, ':') + 1;
                s += strspn(s, " \t");
                s[strcspn(s, "\n")] = 0;
                snprintf(cpu, sizeof cpu, "%s", s);
                break;
            }
        fclose(f);
    }
    printf("# runahead bench-chain: KV-Runahead vs TSP vs single process, TTFT, %s backend\n", b->be->ops->name);
    printf("# model:    %s\n", o->model);
    printf("#           dim %d, hidden %d, %d layers, %d heads (%d kv), vocab %d, %s weights\n", c->dim,
           c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size,
           ra_dtype_name(b->model.weights.layers[0].wq.dtype));
    printf("# ranks:    %d x %d thread%s (mpirun --bind-to core); single: 1 rank, 1 and 2 threads\n", world,
           o->threads, o->threads == 1 ? "" : "s");
    printf("# repeats:  median of %d (ranges min..max below), prompt: random ids (seed %llu), KVR route chain\n",
           o->repeat, o->seed);
    printf("# machine:  %s, %ld cores, %s\n", host, sysconf(_SC_NPROCESSORS_ONLN), cpu);
    printf("# date:     %s, runahead %s\n", date, PACKAGE_VERSION);
    printf("# runs:     a run is disturbed when a rank gets < %.0f%% of its cores (CPU/wall time): re-run up to %d times\n",
           100 * o->min_cpu, o->retries);
    if (single_runs[0] >= 0)
        printf("#           single: %d kept, %d re-run, %d kept disturbed, worst kept cpu %.0f%%, waited %.0f s for quiet\n",
               single_runs[0], single_runs[1], single_runs[2], 100 * single_worst_cpu, single_waited);
    printf("#           2 ranks: %d kept, %d re-run, %d kept disturbed, worst kept cpu %.0f%%, waited %.0f s for quiet\n",
           n_kept, n_rerun, n_kept_disturbed, 100 * worst_cpu, waited_quiet);
}

static void print_table(const struct options *o, const struct bench *b, const struct context_result *res, int n)
{
    char a[9][48];
    print_header(o, b);
    printf("#\n# TTFT [s], medians. KVR-S: the split of the search below, re-measured with %d fresh\n"
           "# runs; bound: each rank's KVR-S slice computed alone (prefix rows present, the ranks taking\n"
           "# turns), the slower rank, median of %d runs\n", o->repeat, o->repeat);
    printf("# %7s %10s %10s %9s %9s %9s %7s %9s\n", "context", "single-1t", "single-2t", "TSP", "KVR-E", "KVR-S",
           "(split)", "bound");
    for (int i = 0; i < n; i++) {
        const struct context_result *r = &res[i];
        fmt_time(a[0], 48, r->single1.med);
        fmt_time(a[1], 48, r->single2.med);
        fmt_time(a[2], 48, r->tsp.med);
        fmt_time(a[3], 48, r->kvr_e.med);
        fmt_time(a[4], 48, r->kvr_s.med);
        fmt_time(a[5], 48, r->bound.med);
        printf("  %7d %10s %10s %9s %9s %9s %7.3f %9s\n", r->context, a[0], a[1], a[2], a[3], a[4], r->share, a[5]);
    }
    printf("#\n# the spread of the same figures: min..max of the runs [s]\n");
    printf("# %7s %14s %14s %14s %14s %14s %14s\n", "context", "single-1t", "single-2t", "TSP", "KVR-E", "KVR-S",
           "bound");
    for (int i = 0; i < n; i++) {
        const struct context_result *r = &res[i];
        fmt_range(a[0], 48, r->single1);
        fmt_range(a[1], 48, r->single2);
        fmt_range(a[2], 48, r->tsp);
        fmt_range(a[3], 48, r->kvr_e);
        fmt_range(a[4], 48, r->kvr_s);
        fmt_range(a[5], 48, r->bound);
        printf("  %7d %14s %14s %14s %14s %14s %14s\n", r->context, a[0], a[1], a[2], a[3], a[4], a[5]);
    }
    printf("#\n# speed-ups of KVR-S (x > 1: KVR-S is faster), and its distance to the bound (>= 1 unless\n"
           "# the bound failed to bound: flagged !)\n");
    printf("# %7s %10s %9s %12s %16s %16s %12s\n", "context", "TSP/KVR-S", "expected", "KVR-E/KVR-S",
           "single-2t/KVR-S", "single-1t/KVR-S", "KVR-S/bound");
    int below = 0;
    for (int i = 0; i < n; i++) {
        const struct context_result *r = &res[i];
        const double e = expected_ratio(r->context);
        fmt_ratio(a[0], 48, r->tsp.med, r->kvr_s.med);
        if (isnan(e))
            snprintf(a[1], 48, "-");
        else
            snprintf(a[1], 48, "%.2fx", e);
        fmt_ratio(a[2], 48, r->kvr_e.med, r->kvr_s.med);
        fmt_ratio(a[3], 48, r->single2.med, r->kvr_s.med);
        fmt_ratio(a[4], 48, r->single1.med, r->kvr_s.med);
        fmt_ratio(a[5], 48, r->kvr_s.med, r->bound.med);
        const int bad = r->kvr_s.med < r->bound.med;
        below += bad;
        printf("  %7d %10s %9s %12s %16s %16s %11s%s\n", r->context, a[0], a[1], a[2], a[3], a[4], a[5],
               bad ? "!" : " ");
    }
    if (below)
        printf("# ! KVR-S below its no-communication bound at %d context%s: the machine was not the same for\n"
               "#   both (other load, clock changes); these figures do not compare\n", below, below == 1 ? "" : "s");
    printf("#\n# KVR-S, where the time goes [s] (its median re-measured run): each rank's compute in the chain\n"
           "# (total - waits - drain), its slice alone (bound runs, median); rank 0 waits for nothing but\n"
           "# the drain of its last sends; rank 1 waits for K,V rows (fill = its wait in layer 0)\n");
    printf("# %7s %15s %10s %9s %9s %10s %9s %9s %9s\n", "context", "bounds", "r0 compute", "r0 alone", "r0 drain",
           "r1 compute", "r1 alone", "r1 wait", "r1 fill");
    for (int i = 0; i < n; i++) {
        const struct context_result *r = &res[i];
        char bnd[32];
        snprintf(bnd, sizeof bnd, "%d,%d,%d", r->bounds[0], r->bounds[1], r->bounds[2]);
        printf("  %7d %15s %10.3f %9.3f %9.3f %10.3f %9.3f %9.3f %9.3f\n", r->context, bnd,
               r->total[0] - r->wait[0] - r->drain[0], r->bound_rank[0].med, r->drain[0],
               r->total[1] - r->wait[1] - r->drain[1], r->bound_rank[1].med, r->wait[1], r->fill);
    }
    printf("#\n# the search (partition/search.h, %d points per level down to a stride of %d): KVR TTFT [s] of\n"
           "# every rank-0 share it measured, median [min..max] (* = KVR-S)\n# %7s %7s %9s %16s\n", o->points,
           o->min_stride, "context", "share", "median", "range");
    for (int i = 0; i < n; i++)
        for (int s = 0; s < res[i].n_split; s++) {
            const struct fig *f = &res[i].split[s];
            printf("  %7d %7.3f %9.3f %7.3f..%-7.3f %s\n", res[i].context, res[i].split_share[s], f->med, f->lo,
                   f->hi, res[i].split_share[s] == res[i].share ? "*" : "");
        }
    fflush(stdout);
}

/* Every configuration of cfg[0..n) once per round, o->repeat rounds. */
static void measure_rounds(const struct options *o, struct bench *b, struct config *cfg, int n, int C)
{
    const struct ra_config *c = &b->model.config;
    for (int rep = 0; rep < o->repeat; rep++)
        for (int k = 0; k < n; k++)
            for (int attempt = 0;; attempt++) {
                struct config *g = &cfg[k];
                double cpu;
                wait_quiet(o);
                g->ttft[rep] = measure_chain(b, g, g->per_rank[rep], &cpu);
                progress("context %d, round %d/%d: %-9s [%d,%d,%d]  TTFT %.3f s  r0 drain %.3f  r1 wait %.3f  cpu %.0f%%",
                         C, rep + 1, o->repeat, g->label, g->bounds[0], g->bounds[1], g->bounds[2], g->ttft[rep],
                         g->per_rank[rep][2], g->per_rank[rep][PR + 1], 100 * cpu);
                const int keep = keep_run(o, cpu, attempt);
                if (rank == 0)
                    report_run(o, c, g->label, ra_method_name(g->method), g->method == RA_METHOD_KVR ? "chain" : NULL,
                               g->spec, g->bounds, world, o->threads, C, rep, g->ttft[rep], g->per_rank[rep], cpu,
                               attempt, keep);
                if (keep)
                    break;
            }
    for (int k = 0; k < n; k++)
        cfg[k].med = ra_median(cfg[k].ttft, o->repeat);
}

/* The KVR configuration of a 2-rank partition. */
static void split_config(struct config *g, const int *bounds)
{
    memset(g, 0, sizeof *g);
    memcpy(g->bounds, bounds, sizeof g->bounds);
    g->share = (double)bounds[1] / bounds[2];
    g->method = RA_METHOD_KVR;
    snprintf(g->label, sizeof g->label, "KVR %.3f", g->share);
    snprintf(g->spec, sizeof g->spec, "bounds:%d,%d,%d", bounds[0], bounds[1], bounds[2]);
}

static int cmp_share(const void *a, const void *b)
{
    const double x = ((const struct config *)a)->share, y = ((const struct config *)b)->share;
    return (x > y) - (x < y);
}

/* What KVR-S's objective needs: every partition it measures goes to sp[n]. */
struct search_run {
    const struct options *o;
    struct bench *b;
    struct config *sp;
    int n, C;
};

/* The search's objective: the median of --repeat runs of the partition, as
 * runahead-tune measures it; rank 0's median goes to every rank, so that all
 * take the search's same next step. */
static int measure_split(void *ctx, const int *bounds, int p, double *value)
{
    struct search_run *s = ctx;
    (void)p;
    if (s->n == MAX_SPLITS)
        fail("KVR-S's search asked for more than %d partitions (raise --min-stride)", MAX_SPLITS);
    struct config *g = &s->sp[s->n++];
    split_config(g, bounds);
    measure_rounds(s->o, s->b, g, 1, s->C);
    MPI_Bcast(&g->med, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    *value = g->med;
    return RA_OK;
}

static void search_progress(void *ctx, int done, int planned, double best, const int *b)
{
    const struct search_run *s = ctx;
    progress("context %d: KVR-S's search, trial %d/%d: best %.3f s at [%d,%d,%d]", s->C, done, planned, best, b[0],
             b[1], b[2]);
}

/* KVR-S's split: runahead-tune's search (ra_search_partition) with every
 * trial measured. sp[0..n) gets every partition it measured, by share, n in
 * *n_split; returns the index of the one it chose. */
static int search_split(const struct options *o, struct bench *b, struct config *sp, int C, int *n_split)
{
    struct search_run s = { o, b, sp, 0, C };
    const struct ra_search_opts so = { .points_per_axis = o->points, .min_stride = o->min_stride,
                                       .progress = search_progress, .progress_ctx = &s };
    int best[3], trials = 0;
    double value = 0;
    if (ra_search_partition(C, world, measure_split, &s, &so, best, &value, &trials) != RA_OK)
        fail("KVR-S's search at %d tokens: %s", C, ra_error_message());
    qsort(sp, (size_t)s.n, sizeof *sp, cmp_share);
    *n_split = s.n;
    for (int k = 0; k < s.n; k++)
        if (sp[k].bounds[1] == best[1])
            return k;
    fail("KVR-S's search chose [%d,%d,%d], which it did not measure", best[0], best[1], best[2]);
}

/* Median, min, max of one figure of every run of cfg: per_rank[rep][idx]. */
static struct fig per_rank_fig(const struct config *cfg, int repeat, int idx)
{
    double v[1024];
    for (int rep = 0; rep < repeat; rep++)
        v[rep] = cfg->per_rank[rep][idx];
    return fig_of(v, repeat);
}

static void measure_bound_runs(const struct options *o, struct bench *b, struct config *bd, int C)
{
    const struct ra_config *c = &b->model.config;
    bound_prepare(b, bd->bounds);
    for (int rep = 0; rep < o->repeat; rep++)
        for (int attempt = 0;; attempt++) {
            double cpu;
            wait_quiet(o);
            bd->ttft[rep] = measure_bound(b, bd->bounds, bd->per_rank[rep], &cpu);
            progress("context %d, round %d/%d: %-9s [%d,%d,%d]  max %.3f s  (r0 %.3f, r1 %.3f alone)  cpu %.0f%%", C,
                     rep + 1, o->repeat, bd->label, bd->bounds[0], bd->bounds[1], bd->bounds[2], bd->ttft[rep],
                     bd->per_rank[rep][0], bd->per_rank[rep][PR], 100 * cpu);
            const int keep = keep_run(o, cpu, attempt);
            if (rank == 0)
                report_run(o, c, "bound", "none", NULL, bd->spec, bd->bounds, world, o->threads, C, rep, bd->ttft[rep],
                           bd->per_rank[rep], cpu, attempt, keep);
            if (keep)
                break;
        }
}

static int run_chain(const struct options *o)
{
    struct bench b = { 0 };
    bench_init(&b, o, o->threads, 1);
    struct single_fig singles[4 * MAX_LIST];
    int n_singles = 0;
    if (o->single_in && rank == 0)
        n_singles = read_single(o->single_in, singles, 4 * MAX_LIST);

    /* cfg: TSP, KVR-E, then the search's splits (up to MAX_SPLITS); kvrs and bd apart. */
    struct config *cfg = calloc(MAX_CFG, sizeof *cfg), *sp = cfg + 2, *kvrs = cfg + 2 + MAX_SPLITS, *bd = kvrs + 1;
    struct context_result res[MAX_LIST];
    int order[MAX_LIST];
    if (!cfg)
        fail("out of memory");
    order_contexts(o, order);
    for (int ci = 0; ci < o->n_contexts; ci++) {
        const int C = order[ci];
        struct context_result *r = &res[ci];
        memset(r, 0, sizeof *r);
        r->context = C;
        for (int k = 0; k < 2; k++) {
            struct config *g = &cfg[k];
            memset(g, 0, sizeof *g);
            snprintf(g->label, sizeof g->label, k == 0 ? "TSP" : "KVR-E");
            snprintf(g->spec, sizeof g->spec, "even");
            g->method = k == 0 ? RA_METHOD_TSP : RA_METHOD_KVR;
            if (ra_partition_parse(g->spec, C, world, g->bounds) != RA_OK)
                fail("%s", ra_error_message());
        }
        /* The baselines in rounds, then KVR-S's search. */
        measure_rounds(o, &b, cfg, 2, C);
        int n_split = 0;
        const int best = search_split(o, &b, sp, C, &n_split);
        /* KVR-S: the chosen split measured afresh. The search's best median is the
         * lowest of several noisy medians and so biased low (the winner's curse);
         * the fresh runs are measured like TSP and KVR-E. */
        memcpy(kvrs, &sp[best], sizeof *kvrs);
        snprintf(kvrs->label, sizeof kvrs->label, "KVR-S");
        measure_rounds(o, &b, kvrs, 1, C);
        memset(bd, 0, sizeof *bd);
        snprintf(bd->label, sizeof bd->label, "bound");
        memcpy(bd->spec, kvrs->spec, sizeof bd->spec);
        memcpy(bd->bounds, kvrs->bounds, sizeof bd->bounds);
        measure_bound_runs(o, &b, bd, C);
        if (rank == 0) {
            const int mi = ra_median_index(kvrs->ttft, o->repeat);
            r->tsp = fig_of(cfg[0].ttft, o->repeat);
            r->kvr_e = fig_of(cfg[1].ttft, o->repeat);
            r->kvr_s = fig_of(kvrs->ttft, o->repeat);
            r->bound = fig_of(bd->ttft, o->repeat);
            r->share = kvrs->share;
            memcpy(r->bounds, kvrs->bounds, sizeof r->bounds);
            for (int k = 0; k < 2; k++) {
                r->total[k] = kvrs->per_rank[mi][PR * k];
                r->wait[k] = kvrs->per_rank[mi][PR * k + 1];
                r->drain[k] = kvrs->per_rank[mi][PR * k + 2];
                r->bound_rank[k] = per_rank_fig(bd, o->repeat, PR * k);
            }
            r->fill = kvrs->per_rank[mi][PR + 3];
            r->n_split = n_split;
            for (int s = 0; s < n_split; s++) {
                r->split_share[s] = sp[s].share;
                r->split[s] = fig_of(sp[s].ttft, o->repeat);
            }
            r->single1 = single_of(singles, n_singles, 1, C);
            r->single2 = single_of(singles, n_singles, 2, C);
            progress("context %d: TSP %.3f  KVR-E %.3f  KVR-S %.3f (share %.3f; %.3f in the search)  bound %.3f  "
                     "TSP/KVR-S %.2fx%s", C, r->tsp.med, r->kvr_e.med, r->kvr_s.med, r->share, sp[best].med,
                     r->bound.med, r->tsp.med / r->kvr_s.med,
                     r->kvr_s.med < r->bound.med ? "  (KVR-S BELOW ITS BOUND: disturbed runs?)" : "");
        }
    }
    if (rank == 0) {
        /* The table in ascending context order. */
        struct context_result sorted[MAX_LIST];
        for (int i = 0; i < o->n_contexts; i++)
            sorted[o->n_contexts - 1 - i] = res[i];
        print_table(o, &b, sorted, o->n_contexts);
    }
    free(cfg);
    bench_free(&b);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    if (ra_mpi_init(&argc, &argv, &rank, &world) != RA_OK) {
        fprintf(stderr, "bench-chain: %s\n", ra_error_message());
        return 1;
    }
    const char *t0 = getenv("BENCH_CHAIN_T0");
    t_start = t0 && *t0 ? strtod(t0, NULL) : ra_wall_s();
    const char *id = getenv("BENCH_CHAIN_RUN_ID");
    snprintf(run_id, sizeof run_id, "%s", id && *id ? id : "");
    if (!*run_id) {
        time_t now = time(NULL);
        strftime(run_id, sizeof run_id, "%Y%m%dT%H%M%SZ", gmtime(&now));
    }
    if (parse_options(argc, argv, &o) == 0) {
        if (o.repeat > 1024)
            fail("--repeat %d: at most 1024", o.repeat);
        report_open(&o);
        if (o.single)
            run_single(&o);
        else
            run_chain(&o);
        if (report)
            fclose(report);
    }
    MPI_Finalize();
    return 0;
}
