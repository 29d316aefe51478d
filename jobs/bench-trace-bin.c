/* bench-trace: chunk reuse on a serving trace. A stream of requests draws
 * chunks from a shared pool with skewed popularity and in new orders, through
 * a chunk store smaller than the pool; each reuse mode serves the stream from
 * its own store, and full prefill of the same request is the reference.
 *
 * The pool: the chunks of the request files given (src/reuse/request.h; their
 * system prompts must render the same leading prefix; their questions are the
 * questions' pool), or, without files, --pool random-id chunks of
 * --chunk-tokens ids and random-id questions (for models without a
 * tokenizer). Each chunk gets a popularity rank from a permutation drawn from
 * --seed.
 *
 * The stream: --warmup requests, then --requests measured ones. A request
 * takes m chunks (uniform in --chunks A-B), drawn without replacement by a
 * Zipf law of exponent --zipf over the popularity ranks, shuffled (a new
 * random order), behind the prefix, then one of the questions. Every
 * mode sees the same stream.
 *
 * The stores: one per entry MODE[/POLICY] of --modes (POLICY: store.h's
 * eviction policy, lru when not named), each of capacity --store-frac times
 * the bytes the whole pool would take in a store, empty at the start (a cold
 * start; --warmup fills it). Every run writes its misses back after the first
 * token (store_write), as a serving system does, so the stores fill and evict
 * over the stream; that write is timed apart, not in TTFT.
 *
 * Per measured request: `none` (full prefill) first, on every --ref-every-th
 * request, then each mode; each mode's TTFT, chunk hits, recomputed rows (of
 * the prompt's rows times the layers), and, where `none` ran, its speed-up
 * (TTFT none / TTFT mode, same request), KL(p_none || p_mode) of the next
 * token, top-1 agreement and the share of the first --steps greedy tokens
 * decoded from the mode's cache that equal none's before the first that
 * differs. Prints one row per mode and policy (hit rate, recomputed, TTFT
 * p50/p90/p99, speed-up, quality) and the speed-up and hit rate in --windows
 * windows of the stream (first, ..., last), so a decay over the stream shows;
 * --json writes every figure.
 *
 * One rank runs ra_reuse_prefill. More ranks run ra_reuse_chain_prefill
 * (mpi/reuse_chain.h: --method kvr or tsp, even slices of each request,
 * --blend-scope, --reuse-send, the stores shared by the ranks), `none` on the
 * chain too; after the first token the other ranks write their hits to the
 * stores' indexes (the eviction order) and the last rank writes the misses
 * back (prefix: from its cache, which holds every row); the last rank
 * decodes, measures and prints. A mode the chain or the build does not run
 * (an invalid-argument error on the first request) is dropped with a line
 * saying why. */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#include "args.h"
#include "bench_util.h"
#include "ra_core.h"
#include "ra_mpi.h"
#include "reuse_chain.h"
#include "reuse/craft.h"
#include "reuse/request.h"
#include "reuse/reuse.h"
#include "reuse/run.h"
#include "reuse/store.h"
#include "reuse/store_impl.h"
#include "sampler.h"
#include "vocab.h"

#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char bench_name[] = "bench-trace";

#define MAX_VARIANTS 8
#define MAX_STEPS 64
#define MAX_WINDOWS 10

static const char *policy_name(enum ra_store_policy p) { return p == RA_STORE_EVICT_CRAFT ? "craft" : "lru"; }

struct options {
    const char *model, *json;
    const char *const *files;
    int n_files;
    int pool, chunk_min, chunk_max, question_tokens; /* the random pool */
    int requests, warmup, m_min, m_max, ref_every, steps, windows, threads;
    double zipf, store_frac, ratio, store_gbps;
    enum ra_reuse_mode modes[MAX_VARIANTS];
    enum ra_store_policy policies[MAX_VARIANTS]; /* of each mode's store */
    int n_modes;
    enum ra_method method; /* more than one rank */
    enum ra_blend_scope scope;
    enum ra_reuse_send send;
    unsigned long long seed;
};

static int rank, world;

/* ------------------------------------------------------------- options */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench-trace --model PATH [options] [REQUEST.json ...]\n"
            "Chunk reuse on a serving trace: requests drawing chunks from a pool by a Zipf law, in new\n"
            "orders, through a store smaller than the pool; each mode against full prefill.\n"
            "  --model PATH         the model (a GGUF with its tokenizer, or a runahead-synth directory)\n"
            "  REQUEST.json ...     the pool: these requests' chunks and questions (one system prompt)\n"
            "  --pool K             without files: K random-id chunks (default 64)\n"
            "  --chunk-tokens A-B   without files: a chunk's ids, uniform in [A, B] (default 100-200)\n"
            "  --question-tokens N  without files: ids of a question (default 16)\n"
            "  --requests N         measured requests (default 100)\n"
            "  --warmup W           requests served before measuring (default 0: a cold start)\n"
            "  --chunks A-B         chunks per request, uniform in [A, B] (default 4-8)\n"
            "  --zipf S             the popularity law's exponent (default 1.1)\n"
            "  --store-frac F       each store's capacity over the pool's bytes (default 0.3)\n"
            "  --modes LIST         MODE[/POLICY],...: a mode (prefix, full, blend, craft) and its store's\n"
            "                       eviction policy (lru, craft; default lru), each its own store\n"
            "                       (default prefix,blend,craft,craft/craft)\n"
            "  --blend-ratio R      blend's and craft's ratio (default 0.15)\n"
            "  --ref-every N        none on every N-th measured request (default 1)\n"
            "  --steps N            greedy tokens compared (default 8)\n"
            "  --windows N          windows of the stream for the speed-up's course (default 3)\n"
            "  --threads T          CPU threads (default 1)\n"
            "  --store-gbps G       emulated store bandwidth, 0 = the page cache (default 0)\n"
            "  --method M           on more ranks: kvr or tsp (default kvr)\n"
            "  --blend-scope S      on more ranks: global or local (default global)\n"
            "  --reuse-send S       on more ranks: full or delta (default full)\n"
            "  --json FILE          every figure, per request too\n"
            "  --seed S             the pool's ranks and the stream (default 1)\n");
}

static int parse_range(const char *s, const char *flag, int lo, int hi, int *a, int *b)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    char *dash = strchr(buf, '-');
    if (dash)
        *dash = 0;
    if (ra_arg_int(buf, flag, lo, hi, a) != RA_OK || ra_arg_int(dash ? dash + 1 : buf, flag, lo, hi, b) != RA_OK ||
        *b < *a)
        return ra_arg_usage_error(bench_name, "%s: '%s' is not A-B with %d <= A <= B <= %d", flag, s, lo, hi);
    return -1;
}

/* MODE[/POLICY],... */
static int parse_modes(const char *s, struct options *o)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_modes = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        char *slash = strchr(t, '/');
        enum ra_store_policy p = RA_STORE_EVICT_LRU;
        enum ra_reuse_mode m;
        if (slash)
            *slash = 0;
        if (o->n_modes == MAX_VARIANTS || ra_reuse_mode_parse(t, "--modes", &m) != RA_OK || m == RA_REUSE_NONE ||
            (slash && ra_store_policy_parse(slash + 1, "--modes", &p) != RA_OK))
            return ra_arg_usage_error(bench_name, "--modes: '%s' is not a list of at most %d of MODE[/POLICY] (modes: "
                                      "prefix, full, blend, craft; policies: lru, craft)", s, MAX_VARIANTS);
        o->modes[o->n_modes] = m, o->policies[o->n_modes++] = p;
    }
    return o->n_modes ? -1 : ra_arg_usage_error(bench_name, "--modes: an empty list");
}

/* prefix, blend, craft (LRU stores), craft with craft's eviction policy. */
static void default_modes(struct options *o)
{
    static const enum ra_reuse_mode m[] = { RA_REUSE_PREFIX, RA_REUSE_BLEND, RA_REUSE_CRAFT, RA_REUSE_CRAFT };
    static const enum ra_store_policy p[] = { RA_STORE_EVICT_LRU, RA_STORE_EVICT_LRU, RA_STORE_EVICT_LRU,
                                              RA_STORE_EVICT_CRAFT };
    o->n_modes = (int)(sizeof m / sizeof m[0]);
    memcpy(o->modes, m, sizeof m);
    memcpy(o->policies, p, sizeof p);
}

static int parse_one(int c, struct options *o)
{
    int rc = RA_OK;
    switch (c) {
    case 'm': o->model = optarg; break;
    case 'P': rc = ra_arg_int(optarg, "--pool", 1, 1 << 20, &o->pool); break;
    case 'C': return parse_range(optarg, "--chunk-tokens", 1, 1 << 16, &o->chunk_min, &o->chunk_max);
    case 'q': rc = ra_arg_int(optarg, "--question-tokens", 1, 4096, &o->question_tokens); break;
    case 'r': rc = ra_arg_int(optarg, "--requests", 1, 1 << 20, &o->requests); break;
    case 'w': rc = ra_arg_int(optarg, "--warmup", 0, 1 << 20, &o->warmup); break;
    case 'c': return parse_range(optarg, "--chunks", 1, 64, &o->m_min, &o->m_max);
    case 'z': rc = ra_arg_double(optarg, "--zipf", &o->zipf); break;
    case 'f': rc = ra_arg_double(optarg, "--store-frac", &o->store_frac); break;
    case 'M': return parse_modes(optarg, o);
    case 'b': rc = ra_reuse_ratio_parse(optarg, &o->ratio); break;
    case 'e': rc = ra_arg_int(optarg, "--ref-every", 1, 1 << 20, &o->ref_every); break;
    case 's': rc = ra_arg_int(optarg, "--steps", 1, MAX_STEPS, &o->steps); break;
    case 'W': rc = ra_arg_int(optarg, "--windows", 1, MAX_WINDOWS, &o->windows); break;
    case 't': rc = ra_arg_int(optarg, "--threads", 1, 1024, &o->threads); break;
    case 'g': rc = ra_arg_double(optarg, "--store-gbps", &o->store_gbps); break;
    case 'j': o->json = optarg; break;
    case 'x': rc = ra_method_parse(optarg, &o->method); break;
    case 'o': rc = ra_blend_scope_parse(optarg, &o->scope); break;
    case 'd': rc = ra_reuse_send_parse(optarg, &o->send); break;
    case 'S': o->seed = strtoull(optarg, NULL, 0); break;
    default: return -2;
    }
    return rc == RA_OK ? -1 : ra_arg_usage_error(bench_name, "%s", ra_error_message());
}

static int check_options(struct options *o)
{
    if (!o->model)
        return ra_arg_usage_error(bench_name, "--model is required");
    if (!(o->zipf >= 0) || o->zipf > 10)
        return ra_arg_usage_error(bench_name, "--zipf: %g is not in [0, 10]", o->zipf);
    if (!(o->store_frac > 0) || o->store_frac > 100)
        return ra_arg_usage_error(bench_name, "--store-frac: %g is not in (0, 100]", o->store_frac);
    if (!(o->store_gbps >= 0))
        return ra_arg_usage_error(bench_name, "--store-gbps: %g is negative", o->store_gbps);
    if (o->method != RA_METHOD_KVR && o->method != RA_METHOD_TSP)
        return ra_arg_usage_error(bench_name, "--method: %s is not kvr or tsp", ra_method_name(o->method));
    if (o->windows > o->requests)
        return ra_arg_usage_error(bench_name, "--windows %d: more windows than the %d requests", o->windows,
                                  o->requests);
    return -1;
}

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option opts[] = {
        { "model", required_argument, 0, 'm' },       { "pool", required_argument, 0, 'P' },
        { "chunk-tokens", required_argument, 0, 'C' }, { "question-tokens", required_argument, 0, 'q' },
        { "requests", required_argument, 0, 'r' },    { "warmup", required_argument, 0, 'w' },
        { "chunks", required_argument, 0, 'c' },      { "zipf", required_argument, 0, 'z' },
        { "store-frac", required_argument, 0, 'f' },  { "modes", required_argument, 0, 'M' },
        { "blend-ratio", required_argument, 0, 'b' },
        { "ref-every", required_argument, 0, 'e' },   { "steps", required_argument, 0, 's' },
        { "windows", required_argument, 0, 'W' },     { "threads", required_argument, 0, 't' },
        { "store-gbps", required_argument, 0, 'g' },  { "json", required_argument, 0, 'j' },
        { "seed", required_argument, 0, 'S' },        { "help", no_argument, 0, 'h' },
        { "method", required_argument, 0, 'x' },      { "blend-scope", required_argument, 0, 'o' },
        { "reuse-send", required_argument, 0, 'd' },
        { 0, 0, 0, 0 },
    };
    *o = (struct options){ .pool = 64, .chunk_min = 100, .chunk_max = 200, .question_tokens = 16, .requests = 100,
                           .m_min = 4, .m_max = 8, .ref_every = 1, .steps = 8, .windows = 3, .threads = 1,
                           .zipf = 1.1, .store_frac = 0.3, .ratio = 0.15, .method = RA_METHOD_KVR, .seed = 1 };
    default_modes(o);
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        const int rc = parse_one(c, o);
        if (rc == -2) {
            usage(stderr);
            return 2;
        }
        if (rc >= 0)
            return rc;
    }
    o->files = (const char *const *)argv + optind;
    o->n_files = argc - optind;
    return check_options(o);
}

/* Every rank parses; the first alone prints (usage, errors): the others' stdout and stderr
 * point at /dev/null meanwhile. */
static int parse_options_once(int argc, char **argv, struct options *o)
{
    if (rank == 0)
        return parse_options(argc, argv, o);
    const int null = open("/dev/null", O_WRONLY), out = dup(1), err = dup(2);
    if (null >= 0 && out >= 0 && err >= 0)
        dup2(null, 1), dup2(null, 2);
    const int rc = parse_options(argc, argv, o);
    fflush(stdout), fflush(stderr);
    if (null >= 0 && out >= 0 && err >= 0)
        dup2(out, 1), dup2(err, 2);
    for (int fd = 0; fd < 3; fd++)
        if ((int[]){ null, out, err }[fd] >= 0)
            close((int[]){ null, out, err }[fd]);
    return rc;
}

/* ------------------------------------------------------------- the pool */

static unsigned long long rng_next(unsigned long long *s) /* splitmix64 */
{
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double rng_unit(unsigned long long *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

static int rng_int(unsigned long long *s, int lo, int hi) /* uniform in [lo, hi] */
{
    return lo + (int)(rng_next(s) % (unsigned long long)(hi - lo + 1));
}

struct ids {
    int32_t *v;
    int n;
};

struct pool {
    struct ids prefix;
    struct ids *chunk, *question;
    int n_chunks, n_questions;
    int *by_rank;     /* [n_chunks]: the chunk at popularity rank r */
    uint64_t bytes;   /* the whole pool in a store */
    int min_len, max_len;
};

static int ids_copy(struct ids *d, const int32_t *v, int n)
{
    d->n = n;
    d->v = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!d->v)
        return ra_error_set(RA_ENOMEM, "out of memory");
    memcpy(d->v, v, sizeof(int32_t) * (size_t)n);
    return RA_OK;
}

static int ids_random(struct ids *d, int n, int vocab, unsigned long long *seed)
{
    int32_t *v = malloc(sizeof(int32_t) * (size_t)n);
    if (!v)
        return ra_error_set(RA_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        v[i] = 1 + (int32_t)(rng_next(seed) % (unsigned)(vocab - 1));
    d->v = v, d->n = n;
    return RA_OK;
}

static int pool_alloc(struct pool *p, int chunks, int questions)
{
    p->chunk = calloc((size_t)chunks, sizeof *p->chunk);
    p->question = calloc((size_t)questions, sizeof *p->question);
    p->by_rank = calloc((size_t)chunks, sizeof *p->by_rank);
    return p->chunk && p->question && p->by_rank ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
}

/* Without files: random ids, a BOS-like first id as the prefix. */
static int pool_random(struct pool *p, const struct options *o, int vocab, unsigned long long *seed)
{
    int rc = pool_alloc(p, o->pool, o->pool);
    const int32_t bos = 1;
    if (rc == RA_OK)
        rc = ids_copy(&p->prefix, &bos, 1);
    for (int c = 0; c < o->pool && rc == RA_OK; c++, p->n_chunks++)
        rc = ids_random(&p->chunk[c], rng_int(seed, o->chunk_min, o->chunk_max), vocab, seed);
    for (int q = 0; q < o->pool && rc == RA_OK; q++, p->n_questions++)
        rc = ids_random(&p->question[q], o->question_tokens, vocab, seed);
    return rc;
}

/* Room for N chunks (and their ranks). */
static int pool_grow(struct pool *p, int n)
{
    struct ids *c = realloc(p->chunk, sizeof *c * (size_t)n);
    if (c)
        p->chunk = c;
    int *r = realloc(p->by_rank, sizeof *r * (size_t)n);
    if (r)
        p->by_rank = r;
    return c && r ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
}

static int same_ids(const struct ids *a, const int32_t *v, int n)
{
    return a->n == n && memcmp(a->v, v, sizeof(int32_t) * (size_t)n) == 0;
}

/* A request file's chunks (those not in the pool yet) and question. */
static int pool_add_file(struct pool *p, const char *path, const struct ra_vocab *v)
{
    struct ra_request r = { 0 };
    int rc = ra_request_load(&r, path, v, v ? v->chat_template : NULL);
    if (rc == RA_OK && p->n_questions == 0)
        rc = ids_copy(&p->prefix, r.ids, r.n_prefix);
    else if (rc == RA_OK && !same_ids(&p->prefix, r.ids, r.n_prefix))
        rc = ra_error_set(RA_EINVAL, "%s: its system prompt renders another prefix than the first file's (the pool "
                          "shares one)", path);
    if (rc == RA_OK && (rc = pool_grow(p, p->n_chunks + r.n_chunks)) != RA_OK)
        r.n_chunks = 0;
    for (int c = 0; c < r.n_chunks && rc == RA_OK; c++) {
        const int32_t *ids = r.ids + r.chunk_start[c];
        int dup = 0;
        for (int k = 0; k < p->n_chunks && !dup; k++)
            dup = same_ids(&p->chunk[k], ids, r.chunk_len[c]);
        if (!dup && (rc = ids_copy(&p->chunk[p->n_chunks], ids, r.chunk_len[c])) == RA_OK)
            p->n_chunks++;
    }
    if (rc == RA_OK && (rc = ids_copy(&p->question[p->n_questions], r.ids + r.suffix_start,
                                      r.n - r.suffix_start)) == RA_OK)
        p->n_questions++;
    ra_request_free(&r);
    return rc;
}

static int pool_files(struct pool *p, const struct options *o, const struct ra_vocab *v)
{
    int rc = pool_alloc(p, 1, o->n_files);
    for (int f = 0; f < o->n_files && rc == RA_OK; f++)
        rc = pool_add_file(p, o->files[f], v);
    return rc;
}

/* Popularity ranks (a random permutation), lengths and the pool's bytes in a store. */
static void pool_finish(struct pool *p, const struct ra_config *c, unsigned long long *seed)
{
    p->min_len = 1 << 30;
    for (int k = 0; k < p->n_chunks; k++) {
        struct ra_chunk_header h = { .kv_dtype = RA_DTYPE_F32, .n_layers = (uint32_t)c->n_layers,
                                     .kv_dim = (uint32_t)ra_config_kv_dim(c), .n_prefix = (uint32_t)p->prefix.n,
                                     .n_tokens = (uint32_t)p->chunk[k].n };
        ra_chunk_geometry(&h);
        p->bytes += h.file_bytes;
        p->min_len = p->chunk[k].n < p->min_len ? p->chunk[k].n : p->min_len;
        p->max_len = p->chunk[k].n > p->max_len ? p->chunk[k].n : p->max_len;
        p->by_rank[k] = k;
    }
    for (int k = p->n_chunks - 1; k > 0; k--) { /* Fisher-Yates */
        const int j = rng_int(seed, 0, k), t = p->by_rank[k];
        p->by_rank[k] = p->by_rank[j], p->by_rank[j] = t;
    }
}

static void pool_free(struct pool *p)
{
    for (int k = 0; p->chunk && k < p->n_chunks; k++)
        free(p->chunk[k].v);
    for (int q = 0; p->question && q < p->n_questions; q++)
        free(p->question[q].v);
    free(p->chunk), free(p->question), free(p->by_rank), free(p->prefix.v);
}

/* ------------------------------------------------------------- the stream */

struct draw {
    int m, question;
    int chunk[64]; /* pool indices, in the request's order */
};

/* m distinct chunks by the Zipf law over the ranks, without replacement, in a random order. */
static void draw_request(const struct pool *p, const struct options *o, const double *w, unsigned long long *seed,
                         struct draw *d)
{
    const int K = p->n_chunks;
    int m = rng_int(seed, o->m_min, o->m_max);
    d->m = m < K ? m : K;
    uint8_t taken[K];
    memset(taken, 0, (size_t)K);
    for (int i = 0; i < d->m; i++) {
        double total = 0;
        for (int r = 0; r < K; r++)
            total += taken[r] ? 0 : w[r];
        double u = rng_unit(seed) * total;
        int r = 0;
        while (r < K - 1 && (taken[r] || u >= w[r]))
            u -= taken[r] ? 0 : w[r], r++;
        while (taken[r]) /* rounding at the end of the scan */
            r--;
        taken[r] = 1;
        d->chunk[i] = p->by_rank[r];
    }
    for (int i = d->m - 1; i > 0; i--) { /* a random order: the draw's puts popular chunks first */
        const int j = rng_int(seed, 0, i), t = d->chunk[i];
        d->chunk[i] = d->chunk[j], d->chunk[j] = t;
    }
    d->question = rng_int(seed, 0, p->n_questions - 1);
}

static int make_stream(const struct pool *p, const struct options *o, unsigned long long *seed, struct draw **out)
{
    const int n = o->warmup + o->requests;
    double *w = malloc(sizeof(double) * (size_t)p->n_chunks);
    struct draw *d = malloc(sizeof *d * (size_t)n);
    if (!w || !d) {
        free(w), free(d);
        return ra_error_set(RA_ENOMEM, "out of memory");
    }
    for (int r = 0; r < p->n_chunks; r++)
        w[r] = pow(r + 1.0, -o->zipf);
    for (int i = 0; i < n; i++)
        draw_request(p, o, w, seed, &d[i]);
    free(w);
    *out = d;
    return RA_OK;
}

/* The request of draw D: prefix, its chunks, its question. */
static int build_request(const struct pool *p, const struct draw *d, struct ra_request *r)
{
    int n = p->prefix.n + p->question[d->question].n;
    for (int i = 0; i < d->m; i++)
        n += p->chunk[d->chunk[i]].n;
    memset(r, 0, sizeof *r);
    r->ids = malloc(sizeof(int32_t) * (size_t)n);
    r->chunk_start = malloc(sizeof(int) * (size_t)d->m);
    r->chunk_len = malloc(sizeof(int) * (size_t)d->m);
    r->chunk_name = calloc((size_t)d->m, sizeof(char *));
    if (!r->ids || !r->chunk_start || !r->chunk_len || !r->chunk_name)
        return ra_error_set(RA_ENOMEM, "out of memory");
    r->n_chunks = d->m;
    r->n_prefix = p->prefix.n;
    memcpy(r->ids, p->prefix.v, sizeof(int32_t) * (size_t)p->prefix.n);
    int at = p->prefix.n;
    for (int i = 0; i < d->m; i++) {
        const struct ids *c = &p->chunk[d->chunk[i]];
        char name[64];
        snprintf(name, sizeof name, "the pool's chunk %d", d->chunk[i]);
        if (!(r->chunk_name[i] = strdup(name)))
            return ra_error_set(RA_ENOMEM, "out of memory");
        memcpy(r->ids + at, c->v, sizeof(int32_t) * (size_t)c->n);
        r->chunk_start[i] = at, r->chunk_len[i] = c->n;
        at += c->n;
    }
    r->suffix_start = at;
    memcpy(r->ids + at, p->question[d->question].v, sizeof(int32_t) * (size_t)p->question[d->question].n);
    r->n = n;
    return RA_OK;
}

static int stream_max_rows(const struct pool *p, const struct draw *d, int n)
{
    int most = 0;
    for (int i = 0; i < n; i++) {
        int rows = p->prefix.n + p->question[d[i].question].n;
        for (int c = 0; c < d[i].m; c++)
            rows += p->chunk[d[i].chunk[c]].n;
        most = rows > most ? rows : most;
    }
    return most;
}

/* ------------------------------------------------------------- the runs */

/* One request's figures in one variant; NAN where not measured. */
struct sample {
    double ttft, speedup, kl, top1, greedy, recomputed, t_store_write;
    int hits, chunks, rows;
};

struct variant {
    enum ra_reuse_mode mode;
    enum ra_store_policy policy;
    struct ra_store *st;
    struct ra_store *probe; /* on the chain's last rank: the same store read-only, to find misses */
    char dir[4200];
    struct sample *s; /* [requests] */
    char dropped[256]; /* why the mode does not run here, or "" */
};

struct bench {
    const struct options *o;
    struct ra_model model;
    struct ra_vocab vocab;
    int has_vocab;
    struct pool pool;
    struct draw *stream;
    struct variant v[MAX_VARIANTS];
    int n_variants;
    struct sample *ref; /* [requests]: none's TTFT, its rows */
    struct ra_backend *be;
    struct ra_context ctx;
    struct ra_kvcache kv;
    float *logits, *ref_logits, *scratch;
    int32_t ref_tokens[MAX_STEPS];
    int bounds[RA_MAX_RANKS + 1]; /* more ranks: the request's slices */
    int last;                     /* the rank that measures and prints */
    char tmp[4096];
};

/* --steps greedy tokens from the cache (N rows prefilled, LOGITS its last row's). */
static int decode(struct bench *b, int n, const float *logits, int32_t *out)
{
    const int V = b->model.config.vocab_size;
    int rc = RA_OK;
    memcpy(b->scratch, logits, sizeof(float) * (size_t)V);
    for (int i = 0; i < b->o->steps && rc == RA_OK; i++) {
        out[i] = ra_argmax(b->scratch, V);
        if (i + 1 < b->o->steps)
            rc = ra_forward_span(&b->ctx, &out[i], n + i, 1, &b->kv, b->scratch);
    }
    return rc;
}

/* Rows computed over the prompt's N rows times the layers. */
static double recomputed_share(const struct ra_reuse_report *rep, int n)
{
    double sum = 0;
    for (int l = 0; rep->recomputed && l < rep->n_layers; l++)
        sum += rep->recomputed[l];
    return rep->recomputed && rep->n_layers > 0 ? sum / ((double)rep->n_layers * n) : NAN;
}

/* On the chain's last rank, after the first token: the misses of V's run
 * stored as ra_reuse_prefill's store_write stores them (prefix: every chunk
 * from the first not loaded on, from the cache behind its exact context;
 * craft: every chunk as a variant behind its real context; the others: each
 * chunk the store lacks, computed in isolation behind the prefix). */
static int chain_write_back(struct bench *b, struct variant *v, const struct ra_request *req,
                            struct ra_reuse_report *rep)
{
    const double t = ra_wall_s();
    int rc = RA_OK;
    if (v->mode == RA_REUSE_CRAFT) { /* every chunk as a variant behind its real context */
        rc = ra_craft_store_request(v->st, &b->ctx, req);
        rep->t_store_write = ra_wall_s() - t;
        return rc;
    }
    for (int c = 0; c < req->n_chunks && rc == RA_OK; c++) {
        const int start = req->chunk_start[c], len = req->chunk_len[c];
        if (v->mode == RA_REUSE_PREFIX) {
            if (c >= rep->hits)
                rc = ra_store_put(v->st, req->ids, start, req->ids + start, len, &b->kv);
            continue;
        }
        struct ra_chunk *ch = NULL;
        rc = ra_store_get(v->probe, req->ids, req->n_prefix, req->ids + start, len, &ch);
        if (rc == RA_OK && ch)
            ra_chunk_close(ch);
        else if (rc == RA_OK)
            rc = ra_store_add(v->st, &b->ctx, req->ids, req->n_prefix, req->ids + start, len);
    }
    rep->t_store_write = ra_wall_s() - t;
    return rc;
}

/* REQ prefilled in MODE (V NULL: none) on one rank or on the chain; misses written back after. */
static int prefill(struct bench *b, struct variant *v, const struct ra_request *req, float *logits,
                   struct ra_reuse_report *rep)
{
    const enum ra_reuse_mode mode = v ? v->mode : RA_REUSE_NONE;
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    cfg.ratio = b->o->ratio, cfg.store_gbps = b->o->store_gbps, cfg.store_write = world == 1;
    if (world == 1)
        return ra_reuse_prefill(&b->ctx, v ? v->st : NULL, req, mode, &cfg, &b->kv, logits, rep);
    for (int r = 0; r <= world; r++)
        b->bounds[r] = (int)((long)req->n * r / world);
    const struct ra_reuse_chain ch = { .method = b->o->method, .route = RA_ROUTE_CHAIN, .bounds = b->bounds,
                                       .send = b->o->send, .scope = b->o->scope };
    struct ra_reuse_chain_stats stats = { 0 };
    int rc = ra_reuse_chain_prefill(&b->ctx, MPI_COMM_WORLD, v ? v->st : NULL, req, mode, &cfg, &ch, &b->kv, logits,
                                    rep, &stats);
    if (stats.pass_failed) /* peers may be blocked on this rank's rows: nothing else ends them */
        ra_mpi_abort(bench_name, rank);
    if (rc != RA_OK || !v)
        return rc;
    /* the other ranks' hits into the index before the last rank's puts evict by it */
    rc = rank == b->last ? RA_OK : ra_store_sync(v->st);
    if ((rc = ra_mpi_agree(rc, MPI_COMM_WORLD, NULL)) == RA_OK && rank == b->last)
        rc = chain_write_back(b, v, req, rep);
    return rc;
}

static int run_ref(struct bench *b, const struct ra_request *req, struct sample *s)
{
    struct ra_reuse_report rep = { 0 };
    int rc = prefill(b, NULL, req, b->ref_logits, &rep);
    if (rc == RA_OK && rank == b->last)
        rc = decode(b, req->n, b->ref_logits, b->ref_tokens);
    *s = (struct sample){ .ttft = rep.ttft, .speedup = 1, .kl = 0, .top1 = 1, .greedy = 1, .recomputed = 1,
                          .hits = 0, .chunks = req->n_chunks, .rows = req->n };
    ra_reuse_report_free(&rep);
    return rc;
}

/* One mode's run of REQ; REF: none's sample of it, or NULL (warm-up, or none not run). */
static int run_variant(struct bench *b, struct variant *v, const struct ra_request *req, const struct sample *ref,
                       struct sample *s)
{
    struct ra_reuse_report rep = { 0 };
    int rc = prefill(b, v, req, b->logits, &rep);
    if (rc != RA_OK || !s || rank != b->last) {
        ra_reuse_report_free(&rep);
        return rc;
    }
    *s = (struct sample){ .ttft = rep.ttft, .speedup = NAN, .kl = NAN, .top1 = NAN, .greedy = NAN,
                          .recomputed = recomputed_share(&rep, req->n), .t_store_write = rep.t_store_write,
                          .hits = rep.hits, .chunks = req->n_chunks, .rows = req->n };
    ra_reuse_report_free(&rep);
    if (!ref || isnan(ref->ttft))
        return RA_OK;
    const int V = b->model.config.vocab_size;
    int32_t tokens[MAX_STEPS];
    s->speedup = ref->ttft / s->ttft;
    s->kl = bench_kl_logits(b->ref_logits, b->logits, V);
    s->top1 = ra_argmax(b->ref_logits, V) == ra_argmax(b->logits, V);
    if ((rc = decode(b, req->n, b->logits, tokens)) != RA_OK)
        return rc;
    int same = 0;
    while (same < b->o->steps && tokens[same] == b->ref_tokens[same])
        same++;
    s->greedy = (double)same / b->o->steps;
    return RA_OK;
}

static void progress(const struct bench *b, int i)
{
    const int n = b->o->warmup + b->o->requests;
    if (rank == b->last && (i + 1 == n || (i + 1) % 10 == 0)) {
        fprintf(stderr, "%s: %d/%d requests (%d warm-up)\n", bench_name, i + 1, n, b->o->warmup);
        fflush(stderr);
    }
}

/* The ranks' statuses agreed: the first failing rank's (which says why, once). */
static int agree(int rc, int *failed)
{
    int who = -1;
    const int all = world > 1 ? ra_mpi_agree(rc, MPI_COMM_WORLD, &who) : rc;
    if (all != RA_OK && *failed < 0)
        *failed = world > 1 ? who : 0;
    return all;
}

/* V's run of REQ. On the stream's first request an invalid argument (a mode
 * the chain or the build does not run) drops the variant, the reason kept. */
static int try_variant(struct bench *b, struct variant *v, const struct ra_request *req, const struct sample *ref,
                       struct sample *s, int first)
{
    if (v->dropped[0])
        return RA_OK;
    const int rc = run_variant(b, v, req, ref, s); /* the chain's errors are every rank's */
    if (first && rc == RA_EINVAL) {
        snprintf(v->dropped, sizeof v->dropped, "%s", ra_error_message());
        ra_error_clear();
        return RA_OK;
    }
    return rc;
}

/* The stream, request by request: none (where due), then every variant. */
static int run_stream(struct bench *b, int *failed)
{
    const struct options *o = b->o;
    int rc = RA_OK;
    for (int i = 0; i < o->warmup + o->requests && rc == RA_OK; i++) {
        struct ra_request req;
        const int j = i - o->warmup; /* the measured request's index, or < 0 */
        rc = build_request(&b->pool, &b->stream[i], &req);
        struct sample *ref = j >= 0 ? &b->ref[j] : NULL;
        if (ref)
            ref->ttft = NAN;
        if (rc == RA_OK && ref && j % o->ref_every == 0)
            rc = run_ref(b, &req, ref);
        for (int k = 0; k < b->n_variants && rc == RA_OK; k++)
            rc = try_variant(b, &b->v[k], &req, ref, j >= 0 ? &b->v[k].s[j] : NULL, i == 0);
        ra_request_free(&req);
        rc = agree(rc, failed);
        progress(b, i);
    }
    return rc;
}

/* ------------------------------------------------------------- figures */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The Q-quantile (nearest rank) of the finite values of field OFF of samples [a, z). */
static double quantile(const struct sample *s, int a, int z, size_t off, double q)
{
    double *v = malloc(sizeof(double) * (size_t)(z - a + 1));
    int n = 0;
    for (int i = a; v && i < z; i++) {
        const double x = *(const double *)((const char *)&s[i] + off);
        if (isfinite(x))
            v[n++] = x;
    }
    double r = NAN;
    if (n > 0) {
        qsort(v, (size_t)n, sizeof *v, cmp_double);
        int k = (int)ceil(q * n) - 1;
        r = v[k < 0 ? 0 : k];
    }
    free(v);
    return r;
}

static double mean(const struct sample *s, int a, int z, size_t off)
{
    double sum = 0;
    int n = 0;
    for (int i = a; i < z; i++) {
        const double x = *(const double *)((const char *)&s[i] + off);
        if (isfinite(x))
            sum += x, n++;
    }
    return n ? sum / n : NAN;
}

static double hit_rate(const struct sample *s, int a, int z)
{
    long hits = 0, chunks = 0;
    for (int i = a; i < z; i++)
        hits += s[i].hits, chunks += s[i].chunks;
    return chunks ? (double)hits / chunks : NAN;
}

/* The speed-up of summed TTFTs over the requests where none ran. */
static double speedup_sum(const struct sample *ref, const struct sample *s, int a, int z)
{
    double tn = 0, tm = 0;
    for (int i = a; i < z; i++)
        if (isfinite(s[i].speedup))
            tn += ref[i].ttft, tm += s[i].ttft;
    return tm > 0 ? tn / tm : NAN;
}

static void variant_name(const struct bench *b, const struct variant *v, char *buf, size_t len)
{
    if (v->mode == RA_REUSE_BLEND || v->mode == RA_REUSE_CRAFT) {
        if (b->o->ratio < 0)
            snprintf(buf, len, "%s:auto", ra_reuse_mode_name(v->mode));
        else
            snprintf(buf, len, "%s:%g", ra_reuse_mode_name(v->mode), b->o->ratio);
    } else {
        snprintf(buf, len, "%s", ra_reuse_mode_name(v->mode));
    }
}

#define F(field) offsetof(struct sample, field)

static void print_row(const struct bench *b, const char *name, const char *policy, const struct sample *s)
{
    const int n = b->o->requests;
    char hit[16] = "-";
    if (s != b->ref)
        snprintf(hit, sizeof hit, "%.1f", 100 * hit_rate(s, 0, n));
    printf("%-12s %-7s %6s %8.1f %9.1f %9.1f %9.1f %9.1f %8.2f %8.2f %9.4f %6.3f %8.3f\n", name, policy, hit,
           100 * mean(s, 0, n, F(recomputed)), 1e3 * quantile(s, 0, n, F(ttft), 0.5),
           1e3 * quantile(s, 0, n, F(ttft), 0.9), 1e3 * quantile(s, 0, n, F(ttft), 0.99),
           1e3 * mean(s, 0, n, F(t_store_write)), quantile(s, 0, n, F(speedup), 0.5), speedup_sum(b->ref, s, 0, n), mean(s, 0, n, F(kl)),
           mean(s, 0, n, F(top1)), mean(s, 0, n, F(greedy)));
}

static void window_bounds(const struct options *o, int w, int *a, int *z)
{
    *a = (int)((long)o->requests * w / o->windows);
    *z = (int)((long)o->requests * (w + 1) / o->windows);
}

static void print_windows(const struct bench *b)
{
    const struct options *o = b->o;
    printf("\n# over the stream: per window of measured requests, the speed-up (summed TTFT none / summed TTFT "
           "mode) and the chunk hit rate\n");
    printf("%-12s %-7s", "mode", "policy");
    for (int w = 0; w < o->windows; w++) {
        int a, z;
        char head[32];
        window_bounds(o, w, &a, &z);
        snprintf(head, sizeof head, "%d-%d", a + 1, z);
        printf(" %16s", head);
    }
    printf("\n");
    for (int k = 0; k < b->n_variants; k++) {
        char name[32];
        variant_name(b, &b->v[k], name, sizeof name);
        if (b->v[k].dropped[0])
            continue;
        printf("%-12s %-7s", name, policy_name(b->v[k].policy));
        for (int w = 0; w < o->windows; w++) {
            int a, z;
            char cell[32];
            window_bounds(o, w, &a, &z);
            snprintf(cell, sizeof cell, "%.2fx (%.0f%%)", speedup_sum(b->ref, b->v[k].s, a, z),
                     100 * hit_rate(b->v[k].s, a, z));
            printf(" %16s", cell);
        }
        printf("\n");
    }
}

static void print_table(const struct bench *b)
{
    print_row(b, "none", "-", b->ref);
    for (int k = 0; k < b->n_variants; k++) {
        char name[32];
        variant_name(b, &b->v[k], name, sizeof name);
        if (!b->v[k].dropped[0])
            print_row(b, name, policy_name(b->v[k].policy), b->v[k].s);
    }
    for (int k = 0; k < b->n_variants; k++) {
        char name[32];
        variant_name(b, &b->v[k], name, sizeof name);
        if (b->v[k].dropped[0])
            printf("# %s %s: not run: %s\n", name, policy_name(b->v[k].policy), b->v[k].dropped);
    }
    print_windows(b);
    fflush(stdout);
}

static void print_header(const struct bench *b)
{
    const struct options *o = b->o;
    const struct ra_config *c = &b->model.config;
    const struct pool *p = &b->pool;
    char cpu[256], flags[128];
    bench_cpu_name(cpu, sizeof cpu);
    bench_cpu_flags(flags, sizeof flags);
    char where[160] = "1 rank";
    if (world > 1)
        snprintf(where, sizeof where, "%d ranks (%s, even slices of each request, %s selection, %s sends)", world,
                 ra_method_name(o->method), ra_blend_scope_name(o->scope), ra_reuse_send_name(o->send));
    printf("# runahead bench-trace: chunk reuse on a serving trace, %s, CPU backend, %d thread%s a rank\n", where,
           o->threads, o->threads > 1 ? "s" : "");
    printf("# machine : %s, %ld cores online, %s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), flags);
    printf("# model   : %s (dim %d, %d layers, %d heads (%d kv)), f32 KV\n", o->model, c->dim, c->n_layers,
           c->n_heads, c->n_kv_heads);
    printf("# pool    : %d chunks of %d-%d tokens (%s), %d questions, prefix %d tokens; %.2f MB in a store\n",
           p->n_chunks, p->min_len, p->max_len, o->n_files ? "text from the request files" : "random ids",
           p->n_questions, p->prefix.n, p->bytes / 1e6);
    printf("# stream  : %d requests after %d warm-up, %d-%d chunks each by Zipf s=%g over the pool, in a random "
           "order; seed %llu\n", o->requests, o->warmup, o->m_min, o->m_max, o->zipf, o->seed);
    printf("# stores  : one per mode and eviction policy, %.2f MB each (%g of the pool), empty at the start; misses "
           "written back after the first token; %s\n", o->store_frac * p->bytes / 1e6, o->store_frac,
           o->store_gbps > 0 ? "paced as a store of --store-gbps" : "read from the page cache");
    char every[32] = "every request";
    if (o->ref_every > 1)
        snprintf(every, sizeof every, "one request in %d", o->ref_every);
    printf("# figures : none (full prefill) first, on %s; speed-up = TTFT none / TTFT mode (p50 of the requests; "
           "sum: of summed TTFTs); write: the mean time writing misses back after the first token; KL, top1 and greedy%d (the share of the first %d greedy tokens equal to none's "
           "before the first that differs) against none\n",
           every, o->steps, o->steps);
    printf("%-12s %-7s %6s %8s %9s %9s %9s %9s %8s %8s %9s %6s %8s\n", "mode", "policy", "hit%", "recomp%",
           "TTFT p50", "p90", "p99 ms", "write ms", "x p50", "x sum", "KL nats", "top1", "greedy");
}

/* ------------------------------------------------------------- JSON */

static json_t *num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *samples_json(const struct sample *s, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:i,s:i,s:i}", "ttft", num(s[i].ttft),
                                           "speedup", num(s[i].speedup), "kl", num(s[i].kl), "top1", num(s[i].top1),
                                           "greedy", num(s[i].greedy), "recomputed", num(s[i].recomputed),
                                           "t_store_write", num(s[i].t_store_write), "hits", s[i].hits, "chunks",
                                           s[i].chunks, "rows", s[i].rows));
    return a;
}

static json_t *summary_json(const struct bench *b, const struct sample *s)
{
    const int n = b->o->requests;
    json_t *win = json_array();
    for (int w = 0; w < b->o->windows; w++) {
        int a, z;
        window_bounds(b->o, w, &a, &z);
        json_array_append_new(win, json_pack("{s:i,s:i,s:o,s:o}", "first", a, "end", z, "speedup",
                                             num(speedup_sum(b->ref, s, a, z)), "hit_rate", num(hit_rate(s, a, z))));
    }
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "hit_rate", num(hit_rate(s, 0, n)),
                     "recomputed", num(mean(s, 0, n, F(recomputed))), "ttft_p50", num(quantile(s, 0, n, F(ttft), 0.5)),
                     "ttft_p90", num(quantile(s, 0, n, F(ttft), 0.9)), "ttft_p99",
                     num(quantile(s, 0, n, F(ttft), 0.99)),
                     "speedup_p50", num(quantile(s, 0, n, F(speedup), 0.5)), "speedup_sum",
                     num(speedup_sum(b->ref, s, 0, n)), "kl", num(mean(s, 0, n, F(kl))), "top1",
                     num(mean(s, 0, n, F(top1))), "greedy", num(mean(s, 0, n, F(greedy))), "windows", win,
                     "requests", samples_json(s, n));
}

/* Every request's chunks (pool indices, in order) and question, the warm-up's first. */
static json_t *stream_json(const struct bench *b)
{
    json_t *a = json_array();
    for (int i = 0; i < b->o->warmup + b->o->requests; i++) {
        json_t *c = json_array();
        for (int k = 0; k < b->stream[i].m; k++)
            json_array_append_new(c, json_integer(b->stream[i].chunk[k]));
        json_array_append_new(a, json_pack("{s:o,s:i,s:b}", "chunks", c, "question", b->stream[i].question,
                                           "warmup", i < b->o->warmup));
    }
    return a;
}

static int write_json(const struct bench *b)
{
    const struct options *o = b->o;
    json_t *vs = json_array();
    for (int k = 0; k < b->n_variants; k++) {
        char name[32];
        variant_name(b, &b->v[k], name, sizeof name);
        json_t *e = b->v[k].dropped[0] ? json_pack("{s:s}", "dropped", b->v[k].dropped) : summary_json(b, b->v[k].s);
        json_object_set_new(e, "mode", json_string(name));
        json_object_set_new(e, "policy", json_string(policy_name(b->v[k].policy)));
        json_array_append_new(vs, e);
    }
    json_t *ref = summary_json(b, b->ref);
    json_object_set_new(ref, "mode", json_string("none"));
    json_array_insert_new(vs, 0, ref);
    json_t *root = json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:i,s:i,s:i,s:f,s:I,s:o}", "model",
                             o->model, "ranks", world, "threads", o->threads, "pool_chunks", b->pool.n_chunks,
                             "requests", o->requests, "warmup", o->warmup, "chunks_min", o->m_min, "chunks_max",
                             o->m_max, "zipf", o->zipf, "store_frac", o->store_frac, "ratio", o->ratio, "ref_every",
                             o->ref_every, "steps", o->steps, "windows", o->windows, "store_gbps", o->store_gbps,
                             "seed", (json_int_t)o->seed, "variants", vs);
    json_object_set_new(root, "stream", stream_json(b));
    const int rc = root && json_dump_file(root, o->json, JSON_INDENT(1)) == 0
                       ? RA_OK
                       : ra_error_set(RA_EIO, "cannot write %s", o->json);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------- setup */

static int open_stores(struct bench *b)
{
    const struct options *o = b->o;
    struct ra_store_identity id = { .kv_dtype = RA_DTYPE_F32 };
    int rc = ra_store_model_identity(&b->model, id.model);
    if (rc == RA_OK)
        rc = ra_store_vocab_identity(b->has_vocab ? &b->vocab : NULL, id.tokenizer);
    uint64_t cap = (uint64_t)(o->store_frac * (double)b->pool.bytes);
    cap = cap > 0 ? cap : 1;
    for (int m = 0; m < o->n_modes && rc == RA_OK; m++) {
        struct variant *v = &b->v[b->n_variants];
        v->mode = o->modes[m], v->policy = o->policies[m];
        snprintf(v->dir, sizeof v->dir, "%s/store-%d", b->tmp, b->n_variants);
        if (!(v->s = calloc((size_t)o->requests, sizeof *v->s)))
            return ra_error_set(RA_ENOMEM, "out of memory");
        rc = ra_store_open(&v->st, v->dir, &b->model, &id, cap, RA_STORE_CREATE);
        if (rc == RA_OK)
            ra_store_set_policy(v->st, v->policy);
        if (rc == RA_OK && world > 1 && rank == b->last)
            rc = ra_store_open(&v->probe, v->dir, &b->model, &id, 0, RA_STORE_READONLY);
        b->n_variants += rc == RA_OK;
    }
    return rc;
}

/* Every rank opens the stores the first rank created (one directory on this node). */
static int open_stores_all(struct bench *b, int *failed)
{
    int rc = rank == 0 ? open_stores(b) : RA_OK;
    if ((rc = agree(rc, failed)) == RA_OK && rank > 0)
        rc = open_stores(b);
    return agree(rc, failed);
}

static int open_model(struct bench *b)
{
    int rc = ra_model_load(&b->model, b->o->model);
    char vpath[4096];
    if (rc == RA_OK && ra_vocab_find(b->o->model, vpath, sizeof vpath)) {
        if ((rc = ra_vocab_load(&b->vocab, vpath)) == RA_OK)
            b->has_vocab = 1;
    }
    return rc;
}

static int make_pool(struct bench *b)
{
    const struct options *o = b->o;
    unsigned long long seed = o->seed;
    const int vocab = b->model.config.vocab_size;
    if (!o->n_files && vocab < 2)
        return ra_error_set(RA_EINVAL, "%s: a vocabulary of %d ids", o->model, vocab);
    int rc = o->n_files ? pool_files(&b->pool, o, b->has_vocab ? &b->vocab : NULL)
                        : pool_random(&b->pool, o, vocab, &seed);
    if (rc != RA_OK)
        return rc;
    if (b->pool.n_chunks < 1)
        return ra_error_set(RA_EINVAL, "the pool has no chunk");
    pool_finish(&b->pool, &b->model.config, &seed);
    if ((rc = make_stream(&b->pool, o, &seed, &b->stream)) != RA_OK)
        return rc;
    const int rows = stream_max_rows(&b->pool, b->stream, o->warmup + o->requests);
    if (rows + o->steps > b->model.config.seq_len)
        return ra_error_set(RA_ERANGE, "a request of %d tokens and %d decoded exceeds %s's context of %d "
                            "(fewer --chunks or shorter chunks)", rows, o->steps, o->model,
                            b->model.config.seq_len);
    return RA_OK;
}

static int open_compute(struct bench *b)
{
    const struct ra_config *c = &b->model.config;
    struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
    p.threads = b->o->threads;
    const int rows = stream_max_rows(&b->pool, b->stream, b->o->warmup + b->o->requests) + b->o->steps;
    int rc = ra_backend_open(&b->be, "cpu", &p);
    if (rc == RA_OK)
        rc = ra_context_init(&b->ctx, &b->model, b->be);
    if (rc == RA_OK)
        rc = ra_kvcache_init(&b->kv, b->be, c->n_layers, ra_config_kv_dim(c), rows);
    b->logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    b->ref_logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    b->scratch = malloc(sizeof(float) * (size_t)c->vocab_size);
    b->ref = calloc((size_t)b->o->requests, sizeof *b->ref);
    if (rc == RA_OK && (!b->logits || !b->ref_logits || !b->scratch || !b->ref))
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void bench_free(struct bench *b)
{
    for (int k = 0; k < b->n_variants; k++) {
        ra_store_close(b->v[k].st);
        if (b->v[k].probe)
            ra_store_close(b->v[k].probe);
    }
    for (int k = 0; k < MAX_VARIANTS; k++)
        free(b->v[k].s);
    if (world > 1)
        MPI_Barrier(MPI_COMM_WORLD); /* every rank's stores closed */
    if (rank == 0 && b->tmp[0] && nftw(b->tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "%s: could not remove %s\n", bench_name, b->tmp);
    if (b->be) {
        ra_kvcache_free(&b->kv);
        ra_context_free(&b->ctx);
        ra_backend_free(b->be);
    }
    free(b->logits), free(b->ref_logits), free(b->scratch), free(b->ref), free(b->stream);
    pool_free(&b->pool);
    if (b->has_vocab)
        ra_vocab_free(&b->vocab);
    ra_model_free(&b->model);
}

/* The stores' directory: the first rank's, under $TMPDIR, every rank told. */
static int make_tmp(struct bench *b, int *failed)
{
    const char *tdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int rc = RA_OK;
    snprintf(b->tmp, sizeof b->tmp, "%s/bench-trace-XXXXXX", tdir);
    if (rank == 0 && !mkdtemp(b->tmp))
        rc = ra_error_set(RA_EIO, "cannot create a directory under %s", tdir);
    if ((rc = agree(rc, failed)) != RA_OK) {
        b->tmp[0] = 0;
        return rc;
    }
    if (world > 1 && MPI_Bcast(b->tmp, sizeof b->tmp, MPI_CHAR, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return ra_error_set(RA_ECOMM, "rank %d: MPI_Bcast of the stores' directory failed", rank);
    return RA_OK;
}

static int run(const struct options *o)
{
    static struct bench b; /* large: the variants' directories */
    int failed = -1;       /* the rank whose error line is printed */
    b.o = o;
    b.last = world - 1;
    int rc = agree(open_model(&b), &failed);
    if (rc == RA_OK)
        rc = agree(make_pool(&b), &failed);
    if (rc == RA_OK)
        rc = make_tmp(&b, &failed);
    if (rc == RA_OK)
        rc = open_stores_all(&b, &failed);
    if (rc == RA_OK)
        rc = agree(open_compute(&b), &failed);
    if (rc == RA_OK && rank == b.last)
        print_header(&b);
    if (rc == RA_OK)
        rc = run_stream(&b, &failed);
    if (rc == RA_OK && rank == b.last)
        print_table(&b);
    if (rc == RA_OK && o->json)
        rc = agree(rank == b.last ? write_json(&b) : RA_OK, &failed);
    if (rc != RA_OK && rank == failed)
        fprintf(stderr, "%s: %s\n", bench_name, ra_error_message());
    bench_free(&b);
    return rc == RA_OK ? 0 : rc == RA_ENOMEM ? 3 : rc == RA_ERANGE || rc == RA_EINVAL ? 2 : 1;
}

int main(int argc, char **argv)
{
    if (ra_mpi_init(&argc, &argv, &rank, &world) != RA_OK) {
        fprintf(stderr, "%s: %s\n", bench_name, ra_error_message());
        return 1;
    }
    struct options o;
    int status = parse_options_once(argc, argv, &o);
    if (status < 0 && world > RA_MAX_RANKS) {
        if (rank == 0)
            fprintf(stderr, "%s: %d ranks: at most %d\n", bench_name, world, RA_MAX_RANKS);
        status = 2;
    }
    if (status < 0)
        status = run(&o);
    MPI_Finalize();
    return status;
}
