/* Chunk reuse along the chain equals chunk reuse on one rank.
 *
 * Run under mpirun with P ranks (1 to 4): test_reuse_chain [--kv-dtype
 * bf16] (every cache and the store bf16: the same, within bf16's rounding,
 * TOL_KV_BF16). Every rank
 * builds the same random model and request (a prefix, 5 chunks, a
 * question); rank 0 fills a chunk store in a temporary directory (chunks
 * behind the prefix for full and blend, behind their exact context for
 * prefix) and a second store without one chunk. For partitions even, aligned
 * with the chunks' boundaries and cutting chunks in two, every KV-Runahead
 * route and TSP, the last rank compares its logits and whole KV cache with
 * ra_reuse_prefill run by itself on one rank:
 *   blend global at ratios 0, 0.15, 1   == the single-rank blend, and at 0
 *                                          == full, at 1 == none;
 *   blend local                         == the single-rank blend with the
 *                                          partition as quota_bounds;
 *   full, prefix, none                  == their single-rank runs;
 *   craft at ratios 0, 0.15, 1          == the single-rank craft (every rank
 *                                          computes the whole request's plan);
 * the report's hits, misses and recomputed rows per layer equal the single
 * rank's; all of it with full sends and with delta sends (only the
 * recomputed rows travel in pass B, each rank rebuilding the rest from the
 * store). Every rank checks its bytes three ways: measured by the PMPI
 * layer (mpi_count.c), as the chain reports them, and by formula: pass A
 * as a plain pass (test_chain's) over layers 0..check, pass B over every
 * layer, full, or (delta) the travelling rows and their positions. A rank whose store lacks a chunk that it
 * shares with the next rank makes it a miss everywhere (the next rank must
 * not load its half): the run equals the single-rank run over the second
 * store, and returns. What the chain does not run is refused on every rank. */
#include "half.h"
#include "mpi_count.h"
#include "partition.h"
#include "prefill.h"
#include "ra_core.h"
#include "random_model.h"
#include "reuse/store.h"
#include "reuse_chain.h"
#include "test.h"

#include <mpi.h>
#include <unistd.h>

#define TOL 1e-4
/* bf16 rows (--kv-dtype bf16): a slice's GEMMs see other row counts than one
 * rank's, so an element can round to the neighbouring bf16 value, as in
 * test_chain (whose bounds these are); a wrong or stale row moves both by 1e-1
 * or more. Blend at 0.15 is left out there: a deviation that moved by a bf16
 * ulp may swap two rows of the selection. */
#define TOL_KV_BF16 2e-2
#define TOL_LOGITS_BF16 1e-2
#define N_CHUNKS 5

static int rank, world;
static enum ra_dtype kv_dtype = RA_DTYPE_F32;
/* The chunk the second store lacks: on more than one rank, one the chunks-cut partition cuts in two. */
static int gap_chunk;

struct req_data {
    struct ra_request req;
    int32_t ids[128];
    int start[N_CHUNKS], len[N_CHUNKS];
};

static void make_request(struct req_data *d, int vocab)
{
    static const int lens[N_CHUNKS] = { 9, 12, 7, 10, 8 };
    const int np = 4, nq = 6;
    int n = np;
    test_rand_seed(99); /* the same ids on every rank */
    for (int c = 0; c < N_CHUNKS; c++) {
        d->start[c] = n;
        d->len[c] = lens[c];
        n += lens[c];
    }
    n += nq;
    for (int i = 0; i < n; i++)
        d->ids[i] = test_rand_int(1, vocab - 1);
    d->req = (struct ra_request){ .ids = d->ids, .n = n, .n_prefix = np, .n_chunks = N_CHUNKS,
                                  .chunk_start = d->start, .chunk_len = d->len, .suffix_start = n - nq };
}

/* ------------------------------------------------------------ stores */

static char root[64] = "/tmp/ra_test_reuse_chain.XXXXXX";

static void store_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", root, name);
}

static int open_store(struct ra_store **st, const struct ra_model *m, const char *name, unsigned flags)
{
    struct ra_store_identity id = { .kv_dtype = kv_dtype };
    char dir[128];
    store_path(dir, sizeof dir, name);
    int rc = ra_store_model_identity(m, id.model);
    if (rc == RA_OK)
        rc = ra_store_vocab_identity(NULL, id.tokenizer);
    return rc == RA_OK ? ra_store_open(st, dir, m, &id, 0, flags) : rc;
}

/* Rank 0: store "all" with every chunk, "gap" without gap_chunk, both behind
 * the prefix (full, blend) and behind their exact context (prefix). */
static void fill_stores(struct ra_context *ctx, const struct ra_request *req)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_kvcache kv;
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    CHECK_OK(ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), req->n, kv_dtype));
    CHECK_OK(ra_forward_span(ctx, req->ids, 0, req->n, &kv, logits));
    const char *names[2] = { "all", "gap" };
    for (int s = 0; s < 2; s++) {
        struct ra_store *st = NULL;
        CHECK_OK(open_store(&st, ctx->model, names[s], RA_STORE_CREATE));
        for (int k = 0; st && k < req->n_chunks; k++) {
            if (s == 1 && k == gap_chunk)
                continue;
            const int b = req->chunk_start[k], n = req->chunk_len[k];
            CHECK_OK(ra_store_add(st, ctx, req->ids, req->n_prefix, req->ids + b, n));
            CHECK_OK(ra_store_put(st, req->ids, b, req->ids + b, n, &kv));
        }
        if (st)
            ra_store_close(st);
    }
    ra_kvcache_free(&kv);
    free(logits);
}

/* ------------------------------------------------------------ results */

struct result {
    float *logits;
    float *kv;       /* [n_layers][2][n][kv_dim] */
    struct ra_reuse_report rep;
};

static void take(struct result *r, const struct ra_kvcache *kv, int n, int V, const float *logits)
{
    const size_t layer = (size_t)n * kv->kv_dim, bytes = (size_t)n * ra_kvcache_row_bytes(kv);
    uint8_t *raw = malloc(bytes);
    r->kv = malloc(sizeof(float) * 2 * layer * (size_t)kv->n_layers);
    r->logits = malloc(sizeof(float) * (size_t)V);
    memcpy(r->logits, logits, sizeof(float) * (size_t)V);
    for (int l = 0; l < kv->n_layers; l++)
        for (int kind = 0; kind < 2; kind++) { /* widened to fp32 */
            float *to = r->kv + (2 * l + kind) * layer;
            CHECK_OK(kv->backend->ops->download(kv->backend, raw, kind ? kv->v[l] : kv->k[l], bytes));
            for (size_t i = 0; i < layer; i++)
                to[i] = kv->dtype == RA_DTYPE_BF16 ? ra_bf16_to_f32(((const uint16_t *)raw)[i]) : ((const float *)raw)[i];
        }
    free(raw);
}

static void drop(struct result *r)
{
    free(r->logits);
    free(r->kv);
    ra_reuse_report_free(&r->rep);
    memset(r, 0, sizeof *r);
}

/* The single-rank engine (the last rank only). */
static void reference(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req,
                      enum ra_reuse_mode mode, double ratio, const int *quota, struct result *r)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    struct ra_kvcache kv;
    float *logits = calloc((size_t)c->vocab_size, sizeof(float));
    memset(r, 0, sizeof *r);
    cfg.ratio = ratio;
    cfg.quota_bounds = quota;
    cfg.n_quota = quota ? world : 0;
    CHECK_OK(ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), req->n, kv_dtype));
    CHECK_OK(ra_reuse_prefill(ctx, st, req, mode, &cfg, &kv, logits, &r->rep));
    take(r, &kv, req->n, c->vocab_size, logits);
    ra_kvcache_free(&kv);
    free(logits);
}

static int same_report(const struct ra_reuse_report *a, const struct ra_reuse_report *b)
{
    if (a->hits != b->hits || a->misses != b->misses || a->n_layers != b->n_layers || !a->recomputed ||
        !b->recomputed || a->loaded_rows != b->loaded_rows)
        return 0;
    for (int l = 0; l < a->n_layers; l++)
        if (a->recomputed[l] != b->recomputed[l])
            return 0;
    return 1;
}

/* ------------------------------------------------------------ bytes */

/* Rows of one layer rank r sends and receives in a plain pass (test_chain's formula). */
static void expected_rows(enum ra_method method, enum ra_route route, const int *b, int p, int r,
                          long long *sent, long long *recv)
{
    const long long n = b[r + 1] - b[r];
    if (method == RA_METHOD_TSP) {
        *sent = n * (p - 1);
        *recv = b[p] - n;
    } else {
        *recv = b[r];
        *sent = r == p - 1 ? 0 : route == RA_ROUTE_DIRECT ? n * (p - 1 - r) : b[r + 1];
    }
}

/* Delta sends: rows of one layer rank r sends and receives when only rank
 * s's TRAVEL[s] rows travel (every rank's before r+1 reach it, its own go on
 * as the route sends them); each travelling row's position moves once (4
 * bytes), as the rows would in one layer. */
static void expected_delta_rows(enum ra_method method, enum ra_route route, const int *travel, int p, int r,
                                long long *sent, long long *recv)
{
    long long before = 0, total = 0;
    for (int s = 0; s < p; s++) {
        before += s < r ? travel[s] : 0;
        total += travel[s];
    }
    if (method == RA_METHOD_TSP) {
        *sent = (long long)travel[r] * (p - 1);
        *recv = total - travel[r];
    } else {
        *recv = before;
        *sent = r == p - 1 ? 0 : route == RA_ROUTE_DIRECT ? (long long)travel[r] * (p - 1 - r) : before + travel[r];
    }
}

/* PMPI's count == the chain's == the formula: a plain pass over LAYERS_A
 * layers (blend's pass A) and pass B over every layer, its rows full or,
 * with delta sends, every rank's recomputed rows and their positions. */
static void check_bytes(const char *label, const struct ra_reuse_chain_stats *s, const struct ra_config *c,
                        const struct ra_reuse_chain *ch, int layers_a)
{
    struct test_mpi_count kv;
    test_mpi_count_read(&kv, NULL);
    long long rows_sent, rows_recv;
    const long long row = 2LL * ra_config_kv_dim(c) * (kv_dtype == RA_DTYPE_BF16 ? 2 : 4); /* K and V */
    expected_rows(ch->method, ch->route, ch->bounds, world, rank, &rows_sent, &rows_recv);
    long long want_sent = rows_sent * row * layers_a, want_recv = rows_recv * row * layers_a;
    if (ch->send == RA_REUSE_SEND_FULL) {
        want_sent += rows_sent * row * c->n_layers;
        want_recv += rows_recv * row * c->n_layers;
    } else {
        int travel[RA_MAX_RANKS];
        MPI_Allgather(&s->rows_pass_b, 1, MPI_INT, travel, 1, MPI_INT, MPI_COMM_WORLD);
        expected_delta_rows(ch->method, ch->route, travel, world, rank, &rows_sent, &rows_recv);
        want_sent += rows_sent * (row * c->n_layers + 4);
        want_recv += rows_recv * (row * c->n_layers + 4);
    }
    if (kv.bytes_sent != s->bytes_sent || kv.bytes_recv != s->bytes_recv || kv.bytes_sent != want_sent ||
        kv.bytes_recv != want_recv || kv.partial)
        fprintf(stderr, "%s, rank %d: MPI moved %lld bytes out, %lld in (%lld unsized); the chain reports %lld, "
                "%lld; the formula says %lld, %lld\n", label, rank, kv.bytes_sent, kv.bytes_recv, kv.partial,
                s->bytes_sent, s->bytes_recv, want_sent, want_recv);
    CHECK(kv.bytes_sent == s->bytes_sent && kv.bytes_recv == s->bytes_recv && kv.partial == 0);
    CHECK(kv.bytes_sent == want_sent && kv.bytes_recv == want_recv);
    CHECK(kv.msgs_sent == s->msgs_sent && kv.msgs_recv == s->msgs_recv);
}

/* ------------------------------------------------------------ cases */

struct setup {
    struct ra_context *ctx;
    const struct ra_request *req;
    struct ra_store *st;        /* this rank's store */
};

/* One chain run; the last rank's result in OUT. */
static int chain_run(const struct setup *su, enum ra_reuse_mode mode, const struct ra_reuse_config *cfg,
                     const struct ra_reuse_chain *ch, struct result *out, struct ra_reuse_chain_stats *s)
{
    const struct ra_config *c = &su->ctx->model->config;
    const int n = su->req->n, rows = ch->method == RA_METHOD_KVR ? ch->bounds[rank + 1] : n;
    struct ra_kvcache kv;
    float *logits = calloc((size_t)c->vocab_size, sizeof(float));
    memset(out, 0, sizeof *out);
    CHECK_OK(ra_kvcache_init_dtype(&kv, su->ctx->backend, c->n_layers, ra_config_kv_dim(c), rows, kv_dtype));
    test_mpi_count_start(MPI_COMM_WORLD);
    int rc = ra_reuse_chain_prefill(su->ctx, MPI_COMM_WORLD, su->st, su->req, mode, cfg, ch, &kv, logits, &out->rep, s);
    if (rc == RA_OK && rank == world - 1)
        take(out, &kv, n, c->vocab_size, logits);
    ra_kvcache_free(&kv);
    free(logits);
    return rc;
}

/* The last rank: the chain's result against a single-rank one. */
static void compare(const char *label, const struct result *got, const struct result *want, int n, int V,
                    const struct ra_config *c, int with_report)
{
    if (rank != world - 1)
        return;
    const double dl = test_max_rel_diff(got->logits, want->logits, (size_t)V);
    const double dk = test_max_rel_diff(got->kv, want->kv, 2 * (size_t)n * ra_config_kv_dim(c) * c->n_layers);
    const int rep = !with_report || same_report(&got->rep, &want->rep);
    const int bf16 = kv_dtype == RA_DTYPE_BF16;
    const double tl = bf16 ? TOL_LOGITS_BF16 : TOL, tk = bf16 ? TOL_KV_BF16 : TOL;
    if (dl > tl || dk > tk || !rep)
        fprintf(stderr, "%s: logits differ by %.3g, KV by %.3g, report %s (hits %d/%d, loaded %d/%d)\n", label, dl,
                dk, rep ? "same" : "DIFFERS", got->rep.hits, want->rep.hits, got->rep.loaded_rows,
                want->rep.loaded_rows);
    CHECK(dl <= tl && dk <= tk && rep);
}

struct refs {
    struct result none, full, prefix, blend[3], local[3], craft[3];
};

static const double ratios[3] = { 0, 0.15, 1 };

static void run_cases(const struct setup *su, const struct refs *ref, const struct ra_reuse_chain *ch,
                      const char *part)
{
    const struct ra_config *c = &su->ctx->model->config;
    const int n = su->req->n, V = c->vocab_size;
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    const int layers_a = cfg.check[cfg.n_check - 1] + 1;
    struct ra_reuse_chain_stats s;
    struct result got;
    char label[256];
    const char *where = ch->method == RA_METHOD_TSP ? "tsp" : ra_route_name(ch->route);
    for (int scope = 0; scope < 2; scope++)
        for (int i = 0; i < 3; i++) {
            if (kv_dtype == RA_DTYPE_BF16 && i == 1)
                continue;
            struct ra_reuse_chain chs = *ch;
            chs.scope = (enum ra_blend_scope)scope;
            cfg.ratio = ratios[i];
            snprintf(label, sizeof label, "p=%d %s %s %s: blend %s %.2f", world, where, ra_reuse_send_name(ch->send),
                     part, ra_blend_scope_name(chs.scope), ratios[i]);
            CHECK_OK(chain_run(su, RA_REUSE_BLEND, &cfg, &chs, &got, &s));
            check_bytes(label, &s, c, &chs, layers_a);
            compare(label, &got, scope ? &ref->local[i] : &ref->blend[i], n, V, c, 1);
            if (i != 1) /* 0 is full, 1 is none, whatever the scope */
                compare(label, &got, i == 0 ? &ref->full : &ref->none, n, V, c, 0);
            drop(&got);
        }
    const enum ra_reuse_mode modes[3] = { RA_REUSE_FULL, RA_REUSE_PREFIX, RA_REUSE_NONE };
    const struct result *want[3] = { &ref->full, &ref->prefix, &ref->none };
    for (int k = 0; k < 3; k++) {
        snprintf(label, sizeof label, "p=%d %s %s %s: %s", world, where, ra_reuse_send_name(ch->send), part,
                 ra_reuse_mode_name(modes[k]));
        CHECK_OK(chain_run(su, modes[k], &cfg, ch, &got, &s));
        check_bytes(label, &s, c, ch, 0);
        compare(label, &got, want[k], n, V, c, 1);
        drop(&got);
    }
    for (int i = 0; i < 3; i++) {
        cfg.ratio = ratios[i];
        snprintf(label, sizeof label, "p=%d %s %s %s: craft %.2f", world, where, ra_reuse_send_name(ch->send), part,
                 ratios[i]);
        CHECK_OK(chain_run(su, RA_REUSE_CRAFT, &cfg, ch, &got, &s));
        check_bytes(label, &s, c, ch, 0);
        compare(label, &got, &ref->craft[i], n, V, c, 1);
        drop(&got);
    }
    if (rank == 0)
        printf("p=%d %s %s sends, %s: blend global and local at 0, 0.15, 1, full, prefix, none, craft at 0, 0.15, 1\n",
               world, where, ra_reuse_send_name(ch->send), part);
}

/* Partitions: even; on chunk boundaries; through the middle of chunks. */
static void make_partitions(const struct ra_request *req, int bounds[3][RA_MAX_RANKS + 1])
{
    CHECK_OK(ra_partition_parse("even", req->n, world, bounds[0]));
    for (int p = 1; p < 3; p++) {
        bounds[p][0] = 0;
        bounds[p][world] = req->n;
        for (int r = 1; r < world; r++) {
            const int k = r * N_CHUNKS / world;
            bounds[p][r] = req->chunk_start[k] + (p == 2 ? req->chunk_len[k] / 2 : 0);
        }
    }
}

static void refs_local(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req, const int *bounds,
                       struct refs *ref)
{
    for (int i = 0; i < 3 && rank == world - 1; i++) {
        drop(&ref->local[i]);
        reference(ctx, st, req, RA_REUSE_BLEND, ratios[i], bounds, &ref->local[i]);
    }
}

/* The rank owning gap_chunk's first row lacks it (with the chunks-cut
 * partition, the next rank holds its second half): a miss everywhere. */
static void check_gap(struct setup *su, struct ra_store *all, struct ra_store *gap, const int *bounds)
{
    const struct ra_config *c = &su->ctx->model->config;
    const int start = su->req->chunk_start[gap_chunk];
    int owner = 0;
    while (bounds[owner + 1] <= start)
        owner++;
    su->st = rank == owner ? gap : all;
    const enum ra_reuse_mode modes[3] = { RA_REUSE_BLEND, RA_REUSE_FULL, RA_REUSE_PREFIX };
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    if (kv_dtype == RA_DTYPE_BF16)
        cfg.ratio = 0; /* no selection to swap rows of (TOL_KV_BF16) */
    for (int m = 0; m < 4; m++)
        for (int k = 0; k < 3; k++) {
            const struct ra_reuse_chain ch = { .method = m % 2 ? RA_METHOD_TSP : RA_METHOD_KVR, .bounds = bounds,
                                               .send = m < 2 ? RA_REUSE_SEND_FULL : RA_REUSE_SEND_DELTA };
            struct result want = { 0 }, got;
            struct ra_reuse_chain_stats s;
            char label[128];
            snprintf(label, sizeof label, "p=%d %s %s: rank %d lacks chunk %d, %s", world, m % 2 ? "tsp" : "kvr",
                     ra_reuse_send_name(ch.send), owner, gap_chunk, ra_reuse_mode_name(modes[k]));
            if (rank == world - 1)
                reference(su->ctx, gap, su->req, modes[k], cfg.ratio, NULL, &want);
            CHECK_OK(chain_run(su, modes[k], &cfg, &ch, &got, &s));
            compare(label, &got, &want, su->req->n, c->vocab_size, c, 1);
            if (rank == world - 1)
                CHECK(got.rep.misses == (modes[k] == RA_REUSE_PREFIX ? N_CHUNKS - gap_chunk : 1));
            drop(&got);
            drop(&want);
        }
    su->st = all;
    if (rank == 0)
        printf("p=%d: rank %d's store lacks chunk %d: recomputed everywhere, equal to one rank without it\n", world,
               owner, gap_chunk);
}

/* What the chain refuses: on every rank the first failing rank's line (every
 * rank fails here: rank 0's), nothing hangs. */
static void check_refusals(const struct setup *su, const int *bounds)
{
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    const double sched[2] = { 0.3, 0.1 };
    struct ra_reuse_chain ch = { .method = RA_METHOD_KVR, .bounds = bounds };
    struct result got;
    char want[32];
    snprintf(want, sizeof want, "rank %d: ", 0);
    for (int k = 1; k < 4; k++) {
        struct ra_reuse_config c = cfg;
        struct ra_reuse_chain h = ch;
        const char *what = k == 1 ? "auto" : k == 2 ? "schedule" : "store-write";
        if (k == 1)
            c.ratio = -1;
        else if (k == 2)
            c.schedule = sched, c.n_schedule = 2;
        else
            c.store_write = 1;
        int rc = chain_run(su, RA_REUSE_BLEND, &c, &h, &got, NULL);
        CHECK(rc != RA_OK && strstr(ra_error_message(), want) && strstr(ra_error_message(), what));
        drop(&got);
    }
    const char *bad[2] = { "half", "" };
    enum ra_reuse_send send;
    enum ra_blend_scope scope;
    for (int i = 0; i < 2; i++) {
        CHECK(ra_reuse_send_parse(bad[i], &send) == RA_EINVAL && strstr(ra_error_message(), "--reuse-send"));
        CHECK(ra_blend_scope_parse(bad[i], &scope) == RA_EINVAL && strstr(ra_error_message(), "--blend-scope"));
    }
    CHECK(ra_reuse_send_parse("delta", &send) == RA_OK && send == RA_REUSE_SEND_DELTA);
    CHECK(ra_blend_scope_parse("local", &scope) == RA_OK && scope == RA_BLEND_SCOPE_LOCAL);
    if (rank == 0)
        printf("refused on every rank: auto ratio, schedule, store-write\n");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc > 1 && (argc != 3 || strcmp(argv[1], "--kv-dtype") ||
                     ra_kv_dtype_parse(argv[2], "--kv-dtype", &kv_dtype) != RA_OK)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np P test_reuse_chain [--kv-dtype f32|bf16]\n");
        MPI_Finalize();
        return 2;
    }
    if (rank == 0 && !mkdtemp(root))
        perror("mkdtemp");
    MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
    gap_chunk = world > 1 ? N_CHUNKS / world : 2; /* make_partitions' first cut */
    struct ra_model m;
    struct ra_config mc = { .dim = 64, .hidden_dim = 160, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2,
                            .vocab_size = 211, .seq_len = 256, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    test_rand_seed(23);
    test_random_model(&m, &mc, RA_DTYPE_F32, 2.0f);
    struct ra_backend *be;
    struct ra_context ctx;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    CHECK_OK(ra_context_init(&ctx, &m, be));
    struct req_data rd;
    make_request(&rd, mc.vocab_size);
    if (rank == 0)
        fill_stores(&ctx, &rd.req);
    MPI_Barrier(MPI_COMM_WORLD);
    struct ra_store *all = NULL, *gap = NULL;
    CHECK_OK(open_store(&all, &m, "all", RA_STORE_READONLY));
    CHECK_OK(open_store(&gap, &m, "gap", RA_STORE_READONLY));
    struct setup su = { &ctx, &rd.req, all };
    struct refs ref = { 0 };
    if (rank == world - 1) {
        reference(&ctx, all, &rd.req, RA_REUSE_NONE, 1, NULL, &ref.none);
        reference(&ctx, all, &rd.req, RA_REUSE_FULL, 0, NULL, &ref.full);
        reference(&ctx, all, &rd.req, RA_REUSE_PREFIX, 0, NULL, &ref.prefix);
        for (int i = 0; i < 3; i++) {
            reference(&ctx, all, &rd.req, RA_REUSE_BLEND, ratios[i], NULL, &ref.blend[i]);
            reference(&ctx, all, &rd.req, RA_REUSE_CRAFT, ratios[i], NULL, &ref.craft[i]);
        }
        CHECK(ref.full.rep.hits == N_CHUNKS && ref.prefix.rep.hits == N_CHUNKS);
    }
    int bounds[3][RA_MAX_RANKS + 1];
    const char *names[3] = { "even", "aligned", "chunks cut" };
    make_partitions(&rd.req, bounds);
    for (int p = 0; p < (world > 1 ? 3 : 1); p++) {
        refs_local(&ctx, all, &rd.req, bounds[p], &ref);
        for (int send = 0; send < 2; send++) {
            for (int route = RA_ROUTE_CHAIN; route <= RA_ROUTE_DIRECT; route++) {
                const struct ra_reuse_chain ch = { .method = RA_METHOD_KVR, .route = (enum ra_route)route,
                                                   .bounds = bounds[p], .send = (enum ra_reuse_send)send };
                run_cases(&su, &ref, &ch, names[p]);
            }
            if (p == 0) {
                const struct ra_reuse_chain ch = { .method = RA_METHOD_TSP, .bounds = bounds[p],
                                                   .send = (enum ra_reuse_send)send };
                run_cases(&su, &ref, &ch, names[p]);
            }
        }
    }
    check_gap(&su, all, gap, bounds[world > 1 ? 2 : 0]);
    check_refusals(&su, bounds[0]);

    drop(&ref.none), drop(&ref.full), drop(&ref.prefix);
    for (int i = 0; i < 3; i++)
        drop(&ref.blend[i]), drop(&ref.local[i]), drop(&ref.craft[i]);
    ra_store_close(all);
    ra_store_close(gap);
    ra_context_free(&ctx);
    ra_backend_free(be);
    ra_model_free(&m);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (system(cmd) != 0)
            fprintf(stderr, "test_reuse_chain: could not remove %s\n", root);
    }
    int mine = test_failures, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    test_failures = sum;
    int rc = rank == world - 1 ? test_result("test_reuse_chain") : (sum ? 1 : 0);
    MPI_Finalize();
    return rc;
}
