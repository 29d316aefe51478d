/* runahead-tune: searches KV-Runahead partitions and stores them in an HDF5 lookup table.
 *
 *   mpirun -np P runahead-tune --model M --contexts 2048,4096,8192 --out table.h5
 *   mpirun -np 2 runahead-tune --model M --calibrate --out table.h5
 *   runahead-tune --model M --objective model --ranks 16 --contexts 8192,16384 --out table.h5
 *
 * With the measured objective every rank runs the same deterministic search and
 * every trial is a real prompt pass on all ranks (the median of --repeats); the
 * last rank's TTFT is broadcast so all ranks see the same values and make the
 * same next move. The split found is then measured afresh (--repeats new
 * runs) and that median is stored as KVR-S, like the KVR-E and TSP medians
 * beside it: the search's own value is the lowest of many noisy medians.
 * Later context lengths start from the split interpolated from
 * the earlier ones. Each finished context length is merged into the table at
 * once, so an interrupted sweep keeps what it found. */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "config.h"
#include "args.h"
#include "autosplit.h"
#include "backend_cuda.h"
#include "calibrate.h"
#include "costmodel.h"
#include "partition.h"
#include "prefill.h"
#include "reuse/run.h"
#include "reuse_chain.h"
#include "program.h"
#include "ra_mpi.h"
#include "ra_core.h"
#include "search.h"
#include "spec.h"
#include "vocab.h"
#include "watchdog.h"

#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CONTEXTS 64

struct options {
    const char *model, *out, *hw_tag, *evaluate;
    const char *backend;           /* --backend: cpu, cuda, NULL for the default (ra_backend_open) */
    int device;                    /* --device; -1: the rank's index on its node */
    enum ra_dtype device_dtype;    /* --device-dtype */
    enum ra_compute compute;       /* --compute-dtype (CPU) */
    enum ra_dtype kv_dtype;        /* --kv-dtype */
    struct ra_table_writer writer; /* how merges into --out wait for other writers */
    int contexts[MAX_CONTEXTS], n_contexts;
    int repeats, min_stride, points, ranks, threads, calibrate, baselines, no_check_weights;
    int model_objective;
    int watchdog; /* seconds a rank may wait in a prompt pass; 0 = off */
    unsigned seed;
    /* A reuse run (--request with --reuse): its request, mode and options, and the store. */
    const char *request, *store;
    int reuse_given;
    enum ra_reuse_mode reuse;
    struct ra_reuse_config cfg;
    enum ra_reuse_send send;
    enum ra_blend_scope scope;
};

struct tune {
    const struct options *o;
    struct ra_model m;
    struct ra_backend *be;
    int local_rank; /* the rank's index on its node: its default CUDA device */
    struct ra_context ctx; /* the passes over m on be */
    struct ra_kvcache kv;
    int32_t *tokens;
    char model_id[128], hw_tag[128];
    struct ra_table_key key; /* what the searches run on: written with every entry */
    struct ra_cost_profile profile;
    int have_profile;
    double t_start;
    int context; /* the context being searched, for progress lines */
    /* --request --reuse: every trial is ra_reuse_chain_prefill of the request. */
    struct ra_vocab vocab;
    int have_vocab;
    struct ra_request req;
    struct ra_store *st;
    struct ra_cost_span *spans;
    struct ra_cost_reuse ru; /* the cost model's view of it */
    char table_tag[256];     /* the hardware tag of the entries: hw_tag, or its reuse tag */
    float *logits;
};

static int rank, world;

static void usage(FILE *f)
{
    fprintf(f,
"Usage: mpirun -np P runahead-tune --model PATH --contexts N,N,... --out FILE.h5 [options]\n"
"       mpirun -np P runahead-tune --model PATH --calibrate --out FILE.h5\n"
"       runahead-tune --model PATH --objective model --ranks P --contexts ... --out FILE.h5\n"
"\n"
"Searches the KV-Runahead partition with the lowest TTFT for each context length\n"
"(the paper's hierarchical grid search) and merges the results into an HDF5 table\n"
"that `runahead --partition table:FILE.h5` interpolates.\n"
"\n"
"  -m, --model PATH        the model (as for runahead)\n"
"      --no-check-weights  skip the scan for NaN/Inf weights at load (files known to be good)\n"
"  -c, --contexts LIST     context lengths to search, e.g. 2048,4096,8192\n"
"  -o, --out FILE.h5       the table to create or merge into\n"
"      --hw-tag TAG        hardware tag of the entries (default: CPU model and cores)\n"
"      --objective KIND    measure (default: real TTFT on these ranks) or model (the\n"
"                          calibrated cost model; any --ranks, up to 64)\n"
"      --ranks P           ranks to search for with --objective model (default: world size)\n"
"      --calibrate         measure GEMM/attention rates and point-to-point and all-gather\n"
"                          bandwidth/latency (OSU-style: warm-up, many iterations per\n"
"                          size, median and min), store them as the cost model's profile;\n"
"                          a profile taken on a busy machine is flagged (calibration_busy)\n"
"  -r, --repeats N         runs per trial, median taken (default 3)\n"
"      --min-stride N      smallest grid stride in tokens (default 16)\n"
"      --points N          grid values per axis (default 5)\n"
"      --no-baselines      skip measuring KVR-E and TSP beside each searched split\n"
"                          (the searched split itself is always re-measured with --repeats\n"
"                          fresh runs: their median is the KVR-S TTFT stored)\n"
"      --lock-timeout S    how long a merge into --out waits for another writer's lock\n"
"                          on FILE.h5.lock (default: RA_TABLE_LOCK_TIMEOUT, else 120 s)\n"
"      --evaluate SPEC     measure this partition (any --partition spec of runahead: even,\n"
"                          ratios:..., bounds:..., auto[:FILE.h5], table:FILE.h5) at each\n"
"                          context instead of searching, beside the cost model's prediction;\n"
"                          writes no entries\n"
"  -T, --threads N         CPU threads per rank (default: the node's cores / its ranks)\n"
"      --backend B         cpu or cuda (default: $RA_BACKEND, else cuda when built with\n"
"                          CUDA and a GPU is visible, else cpu)\n"
"      --device N          CUDA device of every rank (default: its index on the node)\n"
"      --device-dtype D    weights on the GPU: bf16 (default), f16 or f32\n"
"      --compute-dtype D   CPU linear layers: auto (default), f32 or bf16, as runahead's\n"
"      --kv-dtype T        KV cache rows: f32 (default) or bf16. A table is used only by\n"
"                          runs with its backend, compute and KV dtypes (its key)\n"
"  -s, --seed S            seed of the synthetic prompt ids (default 1)\n"
"      --request FILE      search the split of a reuse run of this request (runahead's --request)\n"
"                          instead of a plain prompt: its length is the one context; with\n"
"      --reuse MODE        prefix, full or blend (as runahead's; default blend), and\n"
"      --blend-ratio R, --blend-scope global|local, --reuse-send full|delta as runahead's;\n"
"      --store DIR         the chunk store (required with --request; chunks it lacks are added\n"
"                          first, not timed). The entries go to hardware tag\n"
"                          TAG+reuse-MODE-rR-SCOPE-SEND, where a reuse run's table:FILE looks\n"
"      --watchdog SECONDS  abort the job when a rank has waited SECONDS for another in a\n"
"                          prompt pass (a stopped or hung rank); set it above the time\n"
"                          of one pass. Default: off\n"
"  -h, --help, -V, --version\n"
"\n"
"Progress goes to stderr: trials done and planned, best TTFT so far, elapsed time.\n"
"--out is checked before any work (a place that cannot be written fails at once). Each\n"
"finished context length is merged into it under its lock, so concurrent runs and\n"
"runahead-table merge into one table lose nothing; an entry for a context the table has\n"
"is a conflict, reported, and the newer search wins (see runahead-table --help).\n");
}



static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static int lock_timeout(const char *arg, double *t)
{
    int rc = ra_arg_double(arg, "--lock-timeout", t);
    if (rc == RA_OK && !(*t >= 0))
        rc = ra_error_set(RA_EINVAL, "--lock-timeout %g: want seconds >= 0", *t);
    return rc;
}

/* --request and its reuse options fit together and with the rest. */
static int reuse_options_check(const struct options *o)
{
    if (!o->request) {
        if (o->reuse_given || o->store)
            return ra_error_set(RA_EINVAL, "--reuse, --blend-ratio, --blend-scope, --reuse-send and --store need --request");
        return RA_OK;
    }
    if (!o->store)
        return ra_error_set(RA_EINVAL, "--request needs --store DIR (the chunk store the runs read)");
    if (o->reuse == RA_REUSE_NONE || o->reuse == RA_REUSE_CRAFT)
        return ra_error_set(RA_EINVAL, "--reuse %s: runahead-tune searches prefix, full or blend runs",
                            ra_reuse_mode_name(o->reuse));
    if (o->n_contexts > 0)
        return ra_error_set(RA_EINVAL, "--contexts does not go with --request: the request's length is the context");
    if (!o->model_objective && world < 2)
        return ra_error_set(RA_EINVAL, "measuring a partition needs at least 2 ranks (mpirun -np P), "
                            "or --objective model --ranks P");
    if (o->evaluate)
        return ra_error_set(RA_EINVAL, "--evaluate does not go with --request in this version");
    return RA_OK;
}

/* RA_OK, a negative status, or 1 to exit 0 (help, version). */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_HW = 256, OPT_OBJECTIVE, OPT_RANKS, OPT_CALIBRATE, OPT_MIN_STRIDE, OPT_POINTS, OPT_NO_BASE, OPT_EVAL,
           OPT_NO_CHECK, OPT_LOCK_TIMEOUT,
           OPT_WATCHDOG, OPT_BACKEND, OPT_DEVICE, OPT_DEVICE_DTYPE, OPT_COMPUTE_DTYPE, OPT_KV_DTYPE,
           OPT_REQUEST, OPT_REUSE, OPT_BLEND_RATIO, OPT_BLEND_SCOPE, OPT_REUSE_SEND, OPT_STORE };
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'm' },     { "contexts", required_argument, NULL, 'c' },
        { "out", required_argument, NULL, 'o' },       { "hw-tag", required_argument, NULL, OPT_HW },
        { "objective", required_argument, NULL, OPT_OBJECTIVE },
        { "ranks", required_argument, NULL, OPT_RANKS }, { "calibrate", no_argument, NULL, OPT_CALIBRATE },
        { "repeats", required_argument, NULL, 'r' },   { "min-stride", required_argument, NULL, OPT_MIN_STRIDE },
        { "points", required_argument, NULL, OPT_POINTS }, { "no-baselines", no_argument, NULL, OPT_NO_BASE },
        { "evaluate", required_argument, NULL, OPT_EVAL }, { "no-check-weights", no_argument, NULL, OPT_NO_CHECK },
        { "lock-timeout", required_argument, NULL, OPT_LOCK_TIMEOUT },
        { "watchdog", required_argument, NULL, OPT_WATCHDOG },
        { "backend", required_argument, NULL, OPT_BACKEND }, { "device", required_argument, NULL, OPT_DEVICE },
        { "device-dtype", required_argument, NULL, OPT_DEVICE_DTYPE },
        { "compute-dtype", required_argument, NULL, OPT_COMPUTE_DTYPE },
        { "kv-dtype", required_argument, NULL, OPT_KV_DTYPE },
        { "request", required_argument, NULL, OPT_REQUEST }, { "reuse", required_argument, NULL, OPT_REUSE },
        { "blend-ratio", required_argument, NULL, OPT_BLEND_RATIO },
        { "blend-scope", required_argument, NULL, OPT_BLEND_SCOPE },
        { "reuse-send", required_argument, NULL, OPT_REUSE_SEND }, { "store", required_argument, NULL, OPT_STORE },
        { "threads", required_argument, NULL, 'T' },   { "seed", required_argument, NULL, 's' },
        { "help", no_argument, NULL, 'h' },            { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int c, rc = RA_OK, seed = 1;
    *o = (struct options){ .repeats = 3, .min_stride = 16, .points = 5, .ranks = world, .baselines = 1,
                           .device = -1, .device_dtype = RA_DTYPE_BF16, .reuse = RA_REUSE_BLEND,
                           .cfg = RA_REUSE_CONFIG_INIT };
    if ((rc = ra_table_writer_init(&o->writer, "runahead-tune", stderr)) != RA_OK)
        return rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:c:o:r:T:s:hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'c': rc = ra_arg_int_list(optarg, "--contexts", 1, 1 << 24, o->contexts, MAX_CONTEXTS, &o->n_contexts); break;
        case 'o': o->out = optarg; break;
        case OPT_HW: o->hw_tag = optarg; break;
        case OPT_OBJECTIVE:
            if (!strcmp(optarg, "model")) o->model_objective = 1;
            else if (strcmp(optarg, "measure") != 0)
                rc = ra_error_set(RA_EINVAL, "--objective: '%s' is not measure or model", optarg);
            break;
        case OPT_RANKS: rc = ra_arg_int(optarg, "--ranks", 1, 64, &o->ranks); break;
        case OPT_CALIBRATE: o->calibrate = 1; break;
        case 'r': rc = ra_arg_int(optarg, "--repeats", 1, 1000, &o->repeats); break;
        case OPT_MIN_STRIDE: rc = ra_arg_int(optarg, "--min-stride", 1, 1 << 20, &o->min_stride); break;
        case OPT_POINTS: rc = ra_arg_int(optarg, "--points", 3, 33, &o->points); break;
        case OPT_NO_BASE: o->baselines = 0; break;
        case OPT_EVAL: o->evaluate = optarg; break;
        case OPT_NO_CHECK: o->no_check_weights = 1; break;
        case OPT_LOCK_TIMEOUT: rc = lock_timeout(optarg, &o->writer.lock_timeout_s); break;
        case OPT_WATCHDOG: rc = ra_arg_int(optarg, "--watchdog", 0, 7 * 24 * 3600, &o->watchdog); break;
        case 'T': rc = ra_arg_int(optarg, "--threads", 1, 1024, &o->threads); break;
        case OPT_BACKEND: o->backend = optarg; rc = ra_backend_name_check(optarg, "--backend"); break;
        case OPT_DEVICE: rc = ra_arg_int(optarg, "--device", 0, 1023, &o->device); break;
        case OPT_DEVICE_DTYPE: rc = ra_device_dtype_parse(optarg, &o->device_dtype); break;
        case OPT_COMPUTE_DTYPE: rc = ra_compute_parse(optarg, &o->compute); break;
        case OPT_KV_DTYPE: rc = ra_kv_dtype_parse(optarg, "--kv-dtype", &o->kv_dtype); break;
        case 's': rc = ra_arg_int(optarg, "--seed", 0, 1 << 30, &seed); break;
        case OPT_REQUEST: o->request = optarg; break;
        case OPT_REUSE: rc = ra_reuse_mode_parse(optarg, "--reuse", &o->reuse), o->reuse_given = 1; break;
        case OPT_BLEND_RATIO: rc = ra_reuse_ratio_parse(optarg, &o->cfg.ratio), o->reuse_given = 1; break;
        case OPT_BLEND_SCOPE: rc = ra_blend_scope_parse(optarg, &o->scope), o->reuse_given = 1; break;
        case OPT_REUSE_SEND: rc = ra_reuse_send_parse(optarg, &o->send), o->reuse_given = 1; break;
        case OPT_STORE: o->store = optarg; break;
        case 'h': if (rank == 0) usage(stdout); return 1;
        case 'V': if (rank == 0) ra_print_version("runahead-tune"); return 1;
        case ':': return ra_error_set(RA_EINVAL, "%s needs a value (see --help)", argv[optind - 1]);
        default: return ra_error_set(RA_EINVAL, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        if (rc != RA_OK)
            return rc;
    }
    o->seed = (unsigned)seed;
    if (optind < argc)
        return ra_error_set(RA_EINVAL, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!o->model || !o->out)
        return ra_error_set(RA_EINVAL, "--model and --out are required (see --help)");
    if ((rc = reuse_options_check(o)) != RA_OK)
        return rc;
    if (!o->calibrate && o->n_contexts == 0 && !o->request)
        return ra_error_set(RA_EINVAL, "--contexts is required unless --calibrate");
    if (!o->model_objective && o->ranks != world)
        return ra_error_set(RA_EINVAL, "--ranks %d differs from the %d ranks started: measuring needs mpirun -np %d "
                            "(or use --objective model)", o->ranks, world, o->ranks);
    if (o->evaluate && o->model_objective)
        return ra_error_set(RA_EINVAL, "--evaluate measures: it does not go with --objective model");
    if (!o->model_objective && world < 2 && o->n_contexts > 0)
        return ra_error_set(RA_EINVAL, "measuring a partition needs at least 2 ranks (mpirun -np P), "
                            "or --objective model --ranks P");
    qsort(o->contexts, (size_t)o->n_contexts, sizeof(int), cmp_int);
    return RA_OK;
}

/* Every rank's status becomes the first failing rank's; only that rank prints. */
static int failed_rank = -1;

static int agree(int rc)
{
    return ra_mpi_agree(rc, MPI_COMM_WORLD, &failed_rank);
}

static double elapsed(const struct tune *t)
{
    return MPI_Wtime() - t->t_start;
}

static void show_progress(void *ctx, int done, int planned, double best, const int *b)
{
    const struct tune *t = ctx;
    if (rank != 0)
        return;
    char bounds[256];
    ra_partition_format(b, t->o->model_objective ? t->o->ranks : world, bounds, sizeof bounds);
    fprintf(stderr, "runahead-tune: C=%d trial %d/%d best %.4f s at [%s] (%.0f s)\n", t->context, done,
            planned, best, bounds, elapsed(t));
}

static int cmp_double(const void *a, const void *b)
{
    return (*(const double *)a > *(const double *)b) - (*(const double *)a < *(const double *)b);
}

/* The reuse run of --request at BOUNDS with METHOD, REPEATS times: the median
 * (the lower middle, as ra_prefill_spread's), min and max of the last rank's
 * TTFTs, on every rank. Collective; every rank returns on an error. */
static int reuse_spread(struct tune *t, enum ra_method method, const int *bounds, int repeats, double spread[3])
{
    const struct ra_reuse_chain ch = { .method = method, .route = RA_ROUTE_CHAIN, .bounds = bounds,
                                       .send = t->o->send, .scope = t->o->scope };
    double *v = malloc(sizeof(double) * (size_t)repeats);
    int rc = v ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    for (int k = 0; k < repeats && (rc = agree(rc)) == RA_OK; k++) {
        struct ra_reuse_report rep = { 0 };
        struct ra_reuse_chain_stats stats = { 0 };
        rc = ra_reuse_chain_prefill(&t->ctx, MPI_COMM_WORLD, t->st, &t->req, t->o->reuse, &t->o->cfg, &ch, &t->kv,
                                    t->logits, &rep, &stats);
        if (stats.pass_failed) /* the other ranks may be blocked on this one's KV rows */
            ra_mpi_abort("runahead-tune", rank);
        v[k] = rep.ttft;
        ra_reuse_report_free(&rep);
        if (rc == RA_OK)
            MPI_Bcast(&v[k], 1, MPI_DOUBLE, world - 1, MPI_COMM_WORLD);
    }
    if (rc == RA_OK) {
        qsort(v, (size_t)repeats, sizeof(double), cmp_double);
        spread[0] = v[(repeats - 1) / 2];
        spread[1] = v[0];
        spread[2] = v[repeats - 1];
    }
    free(v);
    return rc;
}

static int objective_measure(void *ctx, const int *bounds, int p, double *value)
{
    struct tune *t = ctx;
    if (t->o->request) {
        double spread[3];
        int rc = reuse_spread(t, RA_METHOD_KVR, bounds, t->o->repeats, spread);
        *value = spread[0];
        return rc;
    }
    int rc = ra_prefill_median(&t->ctx, MPI_COMM_WORLD, RA_METHOD_KVR, RA_ROUTE_CHAIN, bounds, &t->kv, t->tokens,
                               t->o->repeats, value);
    if (rc != RA_OK) /* the other ranks may be blocked on this one's KV rows */
        ra_mpi_abort("runahead-tune", rank);
    return rc;
}

/* The cost model's TTFT of the run at BOUNDS: the reuse model for --request. */
static int predict(const struct tune *t, enum ra_cost_method m, const int *bounds, int p, double *ttft)
{
    if (t->o->request)
        return ra_cost_reuse_replay(&t->m.config, &t->profile, m, &t->ru, bounds, p, ttft, NULL, NULL);
    return ra_cost_predict(&t->m.config, &t->profile, m, bounds, p, ttft, NULL);
}

/* TTFT of KVR-E and TSP beside the searched split: measured (median, min,
 * max of fresh runs), or predicted (all three the prediction). */
static int baselines(struct tune *t, int p, int context, double even[3], double tsp[3])
{
    int bounds[RA_MAX_RANKS + 1], rc;
    for (int k = 0; k < 3; k++)
        even[k] = tsp[k] = NAN;
    if ((rc = ra_partition_parse("even", context, p, bounds)) != RA_OK)
        return rc;
    if (t->o->model_objective) {
        if ((rc = predict(t, RA_COST_KVR, bounds, p, even)) == RA_OK)
            rc = predict(t, RA_COST_TSP, bounds, p, tsp);
        even[1] = even[2] = even[0];
        tsp[1] = tsp[2] = tsp[0];
        return rc;
    }
    if (!t->o->baselines)
        return RA_OK;
    if (t->o->request) {
        if ((rc = reuse_spread(t, RA_METHOD_KVR, bounds, t->o->repeats, even)) == RA_OK)
            rc = reuse_spread(t, RA_METHOD_TSP, bounds, t->o->repeats, tsp);
        return rc;
    }
    rc = ra_prefill_spread(&t->ctx, MPI_COMM_WORLD, RA_METHOD_KVR, RA_ROUTE_CHAIN, bounds, &t->kv, t->tokens,
                           t->o->repeats, even);
    if (rc == RA_OK)
        rc = ra_prefill_spread(&t->ctx, MPI_COMM_WORLD, RA_METHOD_TSP, RA_ROUTE_CHAIN, bounds, &t->kv, t->tokens,
                               t->o->repeats, tsp);
    return rc;
}

/* The searched split's TTFT, measured afresh: the search's value at its best
 * point is the lowest of many noisy medians, biased low (the winner's curse),
 * while the baselines are single medians. So the stored KVR-S figure is the
 * median of new runs at the chosen split, like theirs. */
static int remeasure(struct tune *t, const int *best, double kvr[3])
{
    if (t->o->request)
        return reuse_spread(t, RA_METHOD_KVR, best, t->o->repeats, kvr);
    return ra_prefill_spread(&t->ctx, MPI_COMM_WORLD, RA_METHOD_KVR, RA_ROUTE_CHAIN, best, &t->kv, t->tokens,
                             t->o->repeats, kvr);
}

/* The cost model's prediction beside a measurement, so its error is visible at every point. */
static void print_prediction(struct tune *t, const char *what, enum ra_cost_method method, const int *bounds,
                             int p, double measured)
{
    double predicted;
    if (rank != 0 || !t->have_profile || isnan(measured) || predict(t, method, bounds, p, &predicted) != RA_OK)
        return;
    fprintf(stderr, "runahead-tune: C=%d %-5s measured %.4f s, cost model %.4f s (%+.1f%%)\n", t->context, what,
            measured, predicted, 100.0 * (predicted - measured) / measured);
}

static int tune_context(struct tune *t, struct ra_table_group *g, int i)
{
    const int C = t->o->contexts[i], p = g->p;
    int seed[RA_MAX_RANKS + 1], best[RA_MAX_RANKS + 1], trials = 0, rc = RA_OK;
    double ttft = 0, searched = 0, kvr[3], even[3], tsp[3];
    struct ra_search_opts so = { .points_per_axis = t->o->points, .min_stride = t->o->min_stride,
                                 .progress = show_progress, .progress_ctx = t };
    t->context = C;
    if (i > 0) { /* start from what the shorter contexts found, in a narrower window */
        const int n = g->n;
        g->n = i;
        rc = ra_table_interpolate(g, C, seed, NULL);
        g->n = n;
        if (rc != RA_OK)
            return rc;
        so.seed = seed;
        so.initial_span = 0.5;
    }
    struct ra_cost_objective model = { &t->m.config, &t->profile, RA_COST_KVR };
    struct ra_cost_reuse_objective reuse_model = { &t->m.config, &t->profile, RA_COST_KVR, &t->ru };
    if (t->o->model_objective && t->o->request)
        rc = ra_search_partition(C, p, ra_cost_reuse_objective_eval, &reuse_model, &so, best, &ttft, &trials);
    else if (t->o->model_objective)
        rc = ra_search_partition(C, p, ra_cost_objective_eval, &model, &so, best, &ttft, &trials);
    else
        rc = ra_search_partition(C, p, objective_measure, t, &so, best, &ttft, &trials);
    searched = ttft;
    kvr[0] = kvr[1] = kvr[2] = ttft;
    if (rc == RA_OK && !t->o->model_objective)
        rc = remeasure(t, best, kvr);
    ttft = kvr[0];
    if (rc == RA_OK)
        rc = baselines(t, p, C, even, tsp);
    if (rc != RA_OK)
        return rc;
    if ((rc = ra_table_entry_set(g, i, best, ttft, even[0], tsp[0])) != RA_OK)
        return rc;
    if (rank == 0) {
        char b[256];
        ra_partition_format(best, p, b, sizeof b);
        if (t->o->model_objective)
            fprintf(stderr, "runahead-tune: C=%d done: [%s] in %d trials; predicted KVR-S %.4f s, KVR-E %.4f s, "
                    "TSP %.4f s (%.0f s)\n", C, b, trials, ttft, even[0], tsp[0], elapsed(t));
        else
            fprintf(stderr, "runahead-tune: C=%d done: [%s] in %d trials (search's value %.4f s); medians of %d "
                    "fresh runs [min..max]: KVR-S %.4f s [%.4f..%.4f], KVR-E %.4f s [%.4f..%.4f], TSP %.4f s "
                    "[%.4f..%.4f] (%.0f s)\n", C, b, trials, searched, t->o->repeats, kvr[0], kvr[1], kvr[2],
                    even[0], even[1], even[2], tsp[0], tsp[1], tsp[2], elapsed(t));
        printf("%-8d %-40s %10.4f %10.4f %10.4f %8.3f %8.3f %7d\n", C, b, ttft, even[0], tsp[0], even[0] / ttft,
               tsp[0] / ttft, trials);
        fflush(stdout);
    }
    if (!t->o->model_objective) {
        int ev[RA_MAX_RANKS + 1];
        ra_partition_parse("even", C, p, ev);
        print_prediction(t, "KVR-S", RA_COST_KVR, best, p, ttft);
        print_prediction(t, "KVR-E", RA_COST_KVR, ev, p, even[0]);
        print_prediction(t, "TSP", RA_COST_TSP, ev, p, tsp[0]);
    }
    return RA_OK;
}

/* The partition --evaluate names, at one context length. */
static int evaluated_bounds(struct tune *t, int context, int *bounds, int *extrapolated)
{
    struct ra_partition_spec spec;
    const struct ra_partition_run run = { &t->m.config, context, world, t->hw_tag, &t->key };
    char source[512];
    int rc = ra_partition_spec_parse(t->o->evaluate, &spec);
    return rc == RA_OK ? ra_partition_resolve(&spec, &run, bounds, source, sizeof source, extrapolated) : rc;
}

static int evaluate_all(struct tune *t)
{
    int rc = RA_OK;
    if (rank == 0)
        printf("%-8s %-40s %10s %21s %10s %8s\n", "context", "bounds", "measured_s", "min..max", "model_s", "error");
    for (int i = 0; i < t->o->n_contexts && rc == RA_OK; i++) {
        int bounds[RA_MAX_RANKS + 1], extrapolated;
        double measured[3] = { 0, 0, 0 }, predicted = NAN;
        t->context = t->o->contexts[i];
        if ((rc = agree(evaluated_bounds(t, t->context, bounds, &extrapolated))) != RA_OK)
            break;
        rc = ra_prefill_spread(&t->ctx, MPI_COMM_WORLD, RA_METHOD_KVR, RA_ROUTE_CHAIN, bounds, &t->kv, t->tokens,
                               t->o->repeats, measured);
        if (rc == RA_OK && rank == 0) {
            char b[256];
            ra_partition_format(bounds, world, b, sizeof b);
            if (t->have_profile)
                ra_cost_predict(&t->m.config, &t->profile, RA_COST_KVR, bounds, world, &predicted, NULL);
            printf("%-8d %-40s %10.4f %10.4f..%-9.4f %10.4f %+7.1f%%%s\n", t->context, b, measured[0], measured[1],
                   measured[2], predicted, 100.0 * (predicted - measured[0]) / measured[0],
                   extrapolated ? "  (extrapolated)" : "");
            fflush(stdout);
        }
    }
    return rc;
}

static int tune_all(struct tune *t)
{
    struct ra_table_group g;
    const int p = t->o->model_objective ? t->o->ranks : world;
    const char *objective = t->o->model_objective ? "model" : "measure";
    int rc = ra_table_group_init(&g, t->model_id, t->table_tag, p, t->o->n_contexts);
    if (rc == RA_OK)
        g.key = t->key;
    if (rc == RA_OK)
        rc = ra_table_group_set_search(&g, objective, t->o->min_stride, t->o->model_objective ? 1 : t->o->repeats);
    if (rc != RA_OK) {
        ra_table_group_free(&g);
        return rc;
    }
    if (rank == 0) {
        const struct ra_search_opts so = { .points_per_axis = t->o->points, .min_stride = t->o->min_stride };
        fprintf(stderr, "runahead-tune: model %s, hardware %s, %d ranks, objective %s, search %s\n", t->model_id,
                t->table_tag, p, objective, ra_search_method_name(p, &so));
        printf("%-8s %-40s %10s %10s %10s %8s %8s %7s\n", "context", "KVR-S bounds", "KVR-S_s", "KVR-E_s", "TSP_s",
               "E/S", "TSP/S", "trials");
    }
    for (int i = 0; i < t->o->n_contexts && rc == RA_OK; i++) {
        rc = tune_context(t, &g, i);
        if (rc == RA_OK && rank == 0) { /* merge what is found so far: an interrupted sweep keeps it */
            const int n = g.n;
            g.n = i + 1; /* the earlier entries again: identical to the table's, so no conflict */
            rc = ra_table_merge_with(t->o->out, &g, &t->o->writer, NULL);
            g.n = n;
        }
        rc = agree(rc);
    }
    if (rc == RA_OK && rank == 0)
        fprintf(stderr, "runahead-tune: wrote %d entries to %s group /%s/%s/p%d\n", g.n, t->o->out, t->model_id,
                t->table_tag, p);
    ra_table_group_free(&g);
    return rc;
}

/* Compute rates from prompt spans run on every rank at once, as in a real run. */
static int measure_compute(struct tune *t, struct ra_cost_profile *pf)
{
    struct ra_forward_stats st = { 0 };
    const int lengths[] = { 256, 512, 1024, 2048 };
    int rc = RA_OK;
    t->ctx.stats = &st;
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0] && rc == RA_OK; i++) {
        if (lengths[i] > t->kv.capacity)
            break;
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        rc = ra_forward_span(&t->ctx, t->tokens, 0, lengths[i], &t->kv, NULL);
    }
    double mine[4] = { st.flop_linear / st.t_linear, st.flop_attention / st.t_attention,
                       st.t_other / ((double)st.tokens * t->m.config.n_layers), 0 }, sum[4];
    MPI_CHECK(MPI_Allreduce(mine, sum, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    pf->gemm_flops = sum[0] / world;
    pf->attn_flops = sum[1] / world;
    pf->other_s_per_token_layer = sum[2] / world;
out:
    t->ctx.stats = NULL;
    return rc;
}

/* Seconds of the best of three runs of one position-list pass over every
 * fourth row of a cache that rows [0, n) fill. */
static int time_list_pass(struct tune *t, const struct ra_rows *rows, double *best)
{
    int rc = RA_OK;
    *best = INFINITY;
    for (int k = 0; k < 3 && rc == RA_OK; k++) {
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        const double t0 = MPI_Wtime();
        rc = ra_forward_rows(&t->ctx, t->tokens, rows, &t->kv, NULL);
        *best = fmin(*best, MPI_Wtime() - t0);
    }
out:
    return rc;
}

/* Seconds per row and layer of installing loaded rows (reuse/blend.c's
 * install: K and V uploaded into the cache, K re-positioned): the best of three. */
static int time_install(struct tune *t, int n, double *per_row)
{
    struct ra_backend *be = t->be;
    const struct ra_config *c = &t->m.config;
    const struct ra_rope rope = ra_config_rope(c);
    const size_t bytes = (size_t)n * ra_kvcache_row_bytes(&t->kv);
    void *host = calloc(1, bytes);
    double best = INFINITY;
    int rc = host ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    for (int k = 0; k < 3 && rc == RA_OK; k++) {
        const double t0 = MPI_Wtime();
        for (int l = 0; l < c->n_layers && rc == RA_OK; l++) {
            void *kd = ra_kvcache_k(&t->kv, l, 0), *vd = ra_kvcache_v(&t->kv, l, 0);
            if ((rc = be->ops->upload(be, kd, host, bytes)) == RA_OK &&
                (rc = be->ops->upload(be, vd, host, bytes)) == RA_OK)
                rc = be->ops->rope_shift(be, kd, t->kv.dtype, ra_config_kv_dim(c), n, c->n_kv_heads, c->head_dim,
                                         7, &rope);
        }
        best = fmin(best, MPI_Wtime() - t0);
    }
    *per_row = best / ((double)n * c->n_layers);
    free(host);
    return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Bytes per second a loader reads and verifies stored rows (ra_chunk_layer:
 * the mapping's pages and each layer's SHA-256), from a chunk of N tokens
 * added to a temporary store: the page cache, as a warm store. The best of three. */
static int time_load(struct tune *t, int n, double *bw)
{
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char dir[4096];
    struct ra_store *st = NULL;
    struct ra_store_identity id = { .kv_dtype = t->kv.dtype };
    double best = INFINITY, bytes = 0;
    int rc = RA_OK;
    snprintf(dir, sizeof dir, "%s/runahead-tune-XXXXXX", tmp);
    if (!mkdtemp(dir))
        return ra_error_set(RA_EIO, "rank %d: cannot create a directory under %s", rank, tmp);
    if ((rc = ra_store_model_identity(&t->m, id.model)) == RA_OK && (rc = ra_store_vocab_identity(NULL, id.tokenizer)) ==
                                                                          RA_OK &&
        (rc = ra_store_open(&st, dir, &t->m, &id, 0, RA_STORE_CREATE)) == RA_OK)
        rc = ra_store_add(st, &t->ctx, t->tokens, 1, t->tokens + 1, n);
    for (int k = 0; k < 3 && rc == RA_OK; k++) {
        struct ra_chunk *c = NULL;
        const double t0 = MPI_Wtime();
        if ((rc = ra_store_get(st, t->tokens, 1, t->tokens + 1, n, &c)) == RA_OK && !c)
            rc = ra_error_set(RA_EIO, "rank %d: the chunk just added to %s is not found", rank, dir);
        for (int l = 0; l < t->m.config.n_layers && rc == RA_OK; l++) {
            const void *kr, *vr;
            rc = ra_chunk_layer(c, l, &kr, &vr);
        }
        best = fmin(best, MPI_Wtime() - t0);
        if (c) {
            bytes = (double)ra_chunk_layer_bytes(c) * t->m.config.n_layers;
            ra_chunk_close(c);
        }
    }
    if (st)
        ra_store_close(st);
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && rc == RA_OK)
        rc = ra_error_set(RA_EIO, "rank %d: could not remove %s", rank, dir);
    *bw = rc == RA_OK && best > 0 ? bytes / best : 0;
    return rc;
}

/* The reuse model's figures (costmodel.h): a pass over a position list
 * against the model's time for its rows (row_list_factor), installs, and the
 * loader's rate. */
static int measure_reuse(struct tune *t, struct ra_cost_profile *pf)
{
    const struct ra_config *c = &t->m.config;
    const int n = t->kv.capacity < 2048 ? t->kv.capacity : 2048, k = n / 4;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)(k > 0 ? k : 1));
    double t_list = 0, t_install = 0, load_bw = 0, lin1, att1, keys = 0;
    int rc = pos ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    for (int i = 0; i < k && rc == RA_OK; i++) {
        pos[i] = 4 * i + 3;
        keys += pos[i] + 1;
    }
    const struct ra_rows rows = { .n = k, .start = k ? pos[0] : 0, .pos = pos };
    if (rc == RA_OK && k > 0)
        rc = ra_forward_span(&t->ctx, t->tokens, 0, n, &t->kv, NULL);
    if (rc == RA_OK && k > 0)
        rc = time_list_pass(t, &rows, &t_list);
    if (rc == RA_OK && k > 0)
        rc = time_install(t, n, &t_install);
    if (rc == RA_OK && k > 0)
        rc = time_load(t, n - 1, &load_bw);
    free(pos);
    if (rc != RA_OK || k == 0)
        return rc;
    ra_forward_flops(c, 0, 1, &lin1, &att1);
    const double model = lin1 * k / pf->gemm_flops + att1 * keys / pf->attn_flops +
                         pf->other_s_per_token_layer * k * c->n_layers;
    double mine[3] = { t_list / model, t_install, load_bw }, sum[3];
    MPI_CHECK(MPI_Allreduce(mine, sum, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    pf->row_list_factor = sum[0] / world;
    pf->install_s_per_row_layer = sum[1] / world;
    pf->load_bandwidth = sum[2] / world;
out:
    return rc;
}

/* The calibration's provenance stored beside the cost model's figures (which are medians):
 * the minima, and whether the machine was quiet. ra_cost_profile_unpack ignores these names. */
#define N_CALIB_EXTRA 8
static const char *const calib_names[N_CALIB_EXTRA] = {
    "p2p_latency_min", "p2p_bandwidth_peak", "allgather_latency_min", "allgather_bandwidth_peak",
    "calibration_busy", "calibration_cpu_share", "calibration_others_busy", "calibration_latency_spread",
};

static int profile_store(const struct options *o, const char *model_id, const char *hw_tag,
                         const struct ra_cost_profile *pf, const struct ra_calibration *cal)
{
    const char *names[RA_COST_PROFILE_N + N_CALIB_EXTRA];
    double values[RA_COST_PROFILE_N + N_CALIB_EXTRA];
    const double extra[N_CALIB_EXTRA] = {
        cal->p2p.latency_min_s, cal->p2p.bandwidth_peak, cal->allgather.latency_min_s,
        cal->allgather.bandwidth_peak, cal->busy, cal->cpu_share, cal->others_busy, cal->latency_spread,
    };
    ra_cost_profile_pack(pf, values);
    for (int i = 0; i < RA_COST_PROFILE_N; i++)
        names[i] = ra_cost_profile_names()[i];
    for (int i = 0; i < N_CALIB_EXTRA; i++) {
        names[RA_COST_PROFILE_N + i] = calib_names[i];
        values[RA_COST_PROFILE_N + i] = extra[i];
    }
    return ra_table_profile_write(o->out, model_id, hw_tag, names, values, RA_COST_PROFILE_N + N_CALIB_EXTRA,
                                  &o->writer);
}

static int profile_load(const char *path, const char *model_id, const char *hw_tag, struct ra_cost_profile *pf)
{
    int busy = 0, rc = ra_cost_profile_load(path, model_id, hw_tag, pf, &busy);
    if (busy && rank == 0)
        fprintf(stderr, "runahead-tune: WARNING: the profile in %s was calibrated on a busy machine "
                "(calibration_busy = 1): its figures describe that load; calibrate again on a quiet one\n", path);
    return rc;
}

static int calibrate(struct tune *t)
{
    struct ra_cost_profile pf = { 0 };
    struct ra_calibration cal;
    int rc = measure_compute(t, &pf);
    if (rc == RA_OK)
        rc = measure_reuse(t, &pf);
    if (rc == RA_OK)
        rc = ra_calibrate_links(MPI_COMM_WORLD, 0, &cal);
    if (rc != RA_OK)
        return rc;
    pf.p2p_latency = cal.p2p.latency_s;
    pf.p2p_bandwidth = cal.p2p.bandwidth;
    pf.allgather_latency = cal.allgather.latency_s;
    pf.allgather_bandwidth = cal.allgather.bandwidth;
    if (world < 2 && rank == 0)
        fprintf(stderr, "runahead-tune: one rank: no point-to-point or all-gather figures (run with mpirun -np 2+)\n");
    if (rank == 0) {
        ra_calibration_print(stderr, "runahead-tune", &cal);
        fprintf(stderr, "runahead-tune: calibrated with %d ranks x %d threads: GEMM %.1f GFLOP/s, attention %.1f GFLOP/s, "
                "other %.2f us/token/layer, position lists x%.2f, installs %.3f us/row/layer, loads %.2f GB/s, "
                "p2p %.2f GB/s + %.2f us, all-gather %.2f GB/s + %.2f us (medians)%s\n",
                world, t->be->n_threads, pf.gemm_flops / 1e9, pf.attn_flops / 1e9, pf.other_s_per_token_layer * 1e6,
                pf.row_list_factor, pf.install_s_per_row_layer * 1e6, pf.load_bandwidth / 1e9,
                pf.p2p_bandwidth / 1e9, pf.p2p_latency * 1e6, pf.allgather_bandwidth / 1e9, pf.allgather_latency * 1e6,
                cal.busy ? " [BUSY MACHINE]" : "");
        rc = profile_store(t->o, t->model_id, t->hw_tag, &pf, &cal);
    }
    if ((rc = agree(rc)) == RA_OK) {
        t->profile = pf;
        t->have_profile = 1;
    }
    return rc;
}

/* The backend of --backend, --device, --device-dtype and --threads (ra_backend_open). */
static int open_backend(struct tune *t, int threads)
{
    const struct options *o = t->o;
    const struct ra_program_backend b = { o->backend, o->device, o->device_dtype, o->compute, o->kv_dtype };
    return ra_program_open_backend(&b, rank, t->local_rank, threads, &t->be);
}

static int setup(struct tune *t)
{
    const struct options *o = t->o;
    const struct ra_load_options load = { .no_check_weights = o->no_check_weights,
                                          .n_threads = o->threads ? o->threads : ra_mpi_threads_per_rank() };
    int rc = ra_model_load_opts(&t->m, o->model, &load);
    if (rc != RA_OK)
        return rc;
    const struct ra_config *c = &t->m.config;
    const int longest = o->n_contexts ? o->contexts[o->n_contexts - 1] : (c->seq_len < 2048 ? c->seq_len : 2048);
    if (longest > c->seq_len)
        return ra_error_set(RA_ERANGE, "context length %d exceeds the model's context of %d tokens", longest, c->seq_len);
    /* The calibration's spans reach 2048 tokens (or the model's context), whatever the contexts searched. */
    const int calib = c->seq_len < 2048 ? c->seq_len : 2048, rows = o->calibrate && calib > longest ? calib : longest;
    if (o->n_contexts && o->contexts[0] < (o->model_objective ? o->ranks : world))
        return ra_error_set(RA_EINVAL, "context length %d is shorter than the %d ranks", o->contexts[0],
                            o->model_objective ? o->ranks : world);
    ra_table_model_id(c, t->model_id, sizeof t->model_id);
    if (o->hw_tag)
        snprintf(t->hw_tag, sizeof t->hw_tag, "%s", o->hw_tag);
    else
        ra_table_default_hw_tag(t->hw_tag, sizeof t->hw_tag);
    if (o->request)
        ra_partition_reuse_tag(t->hw_tag, o->reuse, o->cfg.ratio, o->scope == RA_BLEND_SCOPE_GLOBAL,
                               o->send == RA_REUSE_SEND_DELTA, t->table_tag, sizeof t->table_tag);
    else
        snprintf(t->table_tag, sizeof t->table_tag, "%s", t->hw_tag);
    if ((rc = open_backend(t, load.n_threads)) != RA_OK ||
        (rc = ra_context_init(&t->ctx, &t->m, t->be)) != RA_OK ||
        (rc = ra_kvcache_init_dtype(&t->kv, t->be, c->n_layers, ra_config_kv_dim(c), rows, t->o->kv_dtype)) !=
            RA_OK)
        return rc;
    if ((rc = ra_partition_run_key(&t->key, t->be, t->ctx.weights.layers[0].wq.dtype, o->device_dtype,
                                   t->kv.dtype)) != RA_OK)
        return rc;
    if (!(t->tokens = malloc(sizeof(int32_t) * (size_t)rows)))
        return ra_error_set(RA_ENOMEM, "out of memory");
    uint64_t x = 0x9e3779b97f4a7c15ull ^ o->seed; /* the same synthetic prompt on every rank */
    for (int i = 0; i < rows; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        t->tokens[i] = (int32_t)(3 + x % (uint64_t)(c->vocab_size - 3));
    }
    return RA_OK;
}

/* --request: its vocabulary (the model's, when it has one) and the request;
 * its length becomes the one context searched. */
static int load_request(struct tune *t, struct options *o)
{
    char path[4096];
    int rc = RA_OK;
    if (ra_vocab_find(o->model, path, sizeof path)) {
        if ((rc = ra_vocab_load(&t->vocab, path)) != RA_OK)
            return rc;
        t->have_vocab = 1;
    }
    const struct ra_vocab *v = t->have_vocab ? &t->vocab : NULL;
    if ((rc = ra_request_load(&t->req, o->request, v, v ? v->chat_template : NULL)) != RA_OK)
        return rc;
    o->contexts[0] = t->req.n;
    o->n_contexts = 1;
    return RA_OK;
}

/* The chunks of the request the store lacks, computed and added (rank 0, not timed). */
static int fill_store(struct tune *t, const struct ra_store_identity *id)
{
    struct ra_store *st = NULL;
    const struct ra_request *q = &t->req;
    int rc = ra_store_open(&st, t->o->store, &t->m, id, 0, RA_STORE_CREATE), added = 0;
    for (int c = 0; c < q->n_chunks && rc == RA_OK; c++) {
        struct ra_chunk *ch = NULL;
        const int32_t *tok = q->ids + q->chunk_start[c];
        rc = ra_store_get(st, q->ids, q->n_prefix, tok, q->chunk_len[c], &ch);
        if (rc == RA_OK && ch)
            ra_chunk_close(ch);
        else if (rc == RA_OK && (rc = ra_store_add(st, &t->ctx, q->ids, q->n_prefix, tok, q->chunk_len[c])) == RA_OK)
            added++;
    }
    if (st && rc == RA_OK)
        rc = ra_store_sync(st);
    if (st)
        ra_store_close(st);
    if (rc == RA_OK && added)
        fprintf(stderr, "runahead-tune: added %d of the request's %d chunks to %s (not timed)\n", added, q->n_chunks,
                t->o->store);
    return rc;
}

/* --request: the store filled and opened on every rank, the cost model's
 * view of the run, the logits. Collective. */
static int reuse_setup(struct tune *t)
{
    const struct options *o = t->o;
    struct ra_store_identity id = { .kv_dtype = t->kv.dtype };
    int rc = ra_store_model_identity(&t->m, id.model);
    if (rc == RA_OK)
        rc = ra_store_vocab_identity(t->have_vocab ? &t->vocab : NULL, id.tokenizer);
    if (rc == RA_OK && rank == 0)
        rc = fill_store(t, &id);
    if ((rc = agree(rc)) != RA_OK)
        return rc;
    rc = ra_store_open(&t->st, o->store, &t->m, &id, 0, RA_STORE_READONLY);
    if (rc == RA_OK && (!(t->spans = malloc(sizeof *t->spans * (size_t)(t->req.n_chunks + 1))) ||
                        !(t->logits = malloc(sizeof(float) * (size_t)t->m.config.vocab_size))))
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    if (rc == RA_OK)
        rc = ra_cost_reuse_of_request(&t->req, o->reuse, &o->cfg, o->scope == RA_BLEND_SCOPE_GLOBAL,
                                      o->send == RA_REUSE_SEND_DELTA, t->kv.dtype, t->spans, &t->ru);
    return agree(rc);
}

static int load_profile(struct tune *t)
{
    int rc = profile_load(t->o->out, t->model_id, t->hw_tag, &t->profile);
    t->have_profile = rc == RA_OK;
    if (rc != RA_OK && t->o->model_objective)
        return ra_error_set(rc, "%s: no cost-model profile for %s on %s: run runahead-tune --calibrate first (%s)",
                            t->o->out, t->model_id, t->hw_tag, ra_error_message());
    return RA_OK;
}

static int run(int argc, char **argv)
{
    struct options o;
    struct tune t = { .o = &o };
    int rc = parse_options(argc, argv, &o);
    if (rc != RA_OK) {
        failed_rank = 0;
        return rc > 0 ? RA_OK : rc;
    }
    t.t_start = MPI_Wtime();
    /* --out before any work (--evaluate alone writes nothing): a typo fails in a second, not
     * after the search. Rank 0 is the one that writes. */
    if ((!o.evaluate || o.calibrate) && (rc = agree(rank == 0 ? ra_table_check_target(o.out) : RA_OK)) != RA_OK)
        goto out;
    t.local_rank = ra_mpi_local_rank(); /* collective: before anything a rank may fail */
    if (o.request && (rc = agree(load_request(&t, &o))) != RA_OK)
        goto out;
    if ((rc = agree(setup(&t))) != RA_OK)
        goto out;
    if (o.request && (rc = reuse_setup(&t)) != RA_OK)
        goto out;
    if ((rc = agree(ra_watchdog_start(o.watchdog, "runahead-tune", rank))) != RA_OK)
        goto out;
    if (o.calibrate && (rc = calibrate(&t)) != RA_OK)
        goto out;
    if (!t.have_profile && (rc = agree(load_profile(&t))) != RA_OK)
        goto out;
    if (o.n_contexts > 0)
        rc = o.evaluate ? evaluate_all(&t) : tune_all(&t);
out:
    ra_watchdog_stop();
    if (t.st)
        ra_store_close(t.st);
    ra_request_free(&t.req);
    if (t.have_vocab)
        ra_vocab_free(&t.vocab);
    free(t.spans);
    free(t.logits);
    free(t.tokens);
    ra_kvcache_free(&t.kv);
    ra_context_free(&t.ctx);
    ra_model_free(&t.m);
    ra_backend_free(t.be);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = ra_mpi_init_threads(&argc, &argv, &rank, &world, ra_watchdog_requested(argc, argv));
    if (rc == RA_OK)
        rc = run(argc, argv);
    if (rc != RA_OK && (failed_rank == rank || failed_rank < 0))
        fprintf(stderr, "runahead-tune: rank %d: %s\n", rank, ra_error_message());
    MPI_Finalize();
    return rc == RA_OK ? 0 : 1;
}
