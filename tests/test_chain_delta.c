/* Delta sends (ra_exchange_set_travel) equal single-process prompt processing.
 *
 * Run under mpirun with P ranks (1 to 4): test_chain_delta. On a random GQA
 * model, every rank first prefills the prompt alone: the reference cache and
 * logits. Then, for every method (kvr with each route, tsp), partition (even,
 * random), KV dtype (f32, bf16) and travel set (every row, none, some, some
 * with one rank's slice holding none), each rank runs a reuse pass as a store
 * would feed it: a hook at layer_begin copies the reference's rows that do not
 * travel into its cache (poisoned with NaN first), and the rank computes only
 * the travelling rows of its slice (the last rank also the prompt's last row,
 * for the logits); the exchange delivers the other ranks' travelling rows.
 * Every rank's cache then equals the reference (test_chain's tolerances),
 * the last rank's logits too, and the bytes MPI moved on the exchange's
 * communicator (the PMPI counter of mpi_count.c) equal the runtime's counts
 * and ra_exchange_traffic's formula exactly, rank by rank; a travel set of
 * every row moves the rows a full send does. A few passes run over an
 * emulated link, whose arrival stamps stay out of the KV bytes; one exchange
 * runs several delta passes and then a full one, as a reuse run does. */
#include "cpu_isa.h"
#include "half.h"
#include "mpi_count.h"
#include "netem.h"
#include "partition.h"
#include "prefill.h"
#include "ra_core.h"
#include "random_model.h"
#include "test.h"

#include <mpi.h>

/* test_chain's tolerances and their reasons (a slice's GEMMs see other row counts). */
#define TOL 1e-4
#define TOL_KV_BF16 2e-2
#define TOL_LOGITS_BF16 1e-3
#define TOL_LOGITS_BF16_DP 1e-2
#define N_PROMPT 60 /* divisible by 1, 2, 3 and 4: even splits */
#define N_PATTERNS 4

static int rank, world;

static int bf16_products(void)
{
    enum ra_cpu_isa isa;
    return ra_cpu_isa_active(&isa) == RA_OK && isa == RA_CPU_ISA_AVX512BF16;
}

/* The store's stand-in: at each layer's start, the reference's rows [0, upto)
 * that this rank neither computes nor receives. */
struct install {
    const struct ra_kvcache *ref;
    const uint8_t *have; /* [n]: 1 where the row is computed here or travels */
    int upto;
};

static int install_layer_begin(void *self, const struct ra_hook_args *a)
{
    const struct install *in = self;
    const size_t rb = ra_kvcache_row_bytes(a->kv);
    for (int p = 0; p < in->upto; p++)
        if (!in->have[p]) {
            memcpy(ra_kvcache_k(a->kv, a->layer, p), ra_kvcache_k(in->ref, a->layer, p), rb);
            memcpy(ra_kvcache_v(a->kv, a->layer, p), ra_kvcache_v(in->ref, a->layer, p), rb);
        }
    return RA_OK;
}

/* The travel set over the whole prompt, the same on every rank. */
static const char *make_travel(int pattern, const int *b, uint8_t *travel)
{
    const int none_rank = (world - 1) / 2;
    for (int p = 0; p < N_PROMPT; p++) {
        switch (pattern) {
        case 0: travel[p] = 1; break;
        case 1: travel[p] = 0; break;
        case 2: travel[p] = test_rand_int(0, 9) < 3; break;
        default: travel[p] = test_rand_int(0, 1) && !(p >= b[none_rank] && p < b[none_rank + 1]); break;
        }
    }
    static const char *names[] = { "every row", "no row", "30% of rows", "half the rows, one rank none" };
    return names[pattern];
}

/* Bytes and messages three ways: PMPI, the runtime, the formula. */
static void check_bytes(const char *label, const struct ra_exchange *x, const struct ra_config *c, enum ra_method m,
                        enum ra_route route, const int *b, const uint8_t *travel, enum ra_dtype dt)
{
    struct test_mpi_count kv;
    int n_travel[RA_MAX_RANKS];
    struct ra_traffic want, full;
    test_mpi_count_read(&kv, NULL);
    for (int s = 0; s < world; s++) {
        n_travel[s] = 0;
        for (int p = b[s]; p < b[s + 1]; p++)
            n_travel[s] += travel[p];
    }
    const size_t rb = ra_kv_row_bytes(ra_config_kv_dim(c), dt);
    ra_exchange_traffic(m, route, b, world, rank, c->n_layers, rb, n_travel, &want);
    const struct ra_rank_stats *s = &x->stats;
    if (kv.bytes_sent != want.bytes_sent || kv.bytes_recv != want.bytes_recv || kv.bytes_sent != s->bytes_sent ||
        kv.bytes_recv != s->bytes_recv || kv.msgs_sent != s->msgs_sent || kv.msgs_recv != s->msgs_recv || kv.partial)
        fprintf(stderr, "%s, rank %d: MPI moved %lld bytes in %lld msgs out, %lld in %lld in (%lld unsized); the "
                "runtime reports %lld in %d, %lld in %d; the formula %lld, %lld\n", label, rank, kv.bytes_sent,
                kv.msgs_sent, kv.bytes_recv, kv.msgs_recv, kv.partial, s->bytes_sent, s->msgs_sent, s->bytes_recv,
                s->msgs_recv, want.bytes_sent, want.bytes_recv);
    CHECK(kv.bytes_sent == want.bytes_sent && kv.bytes_recv == want.bytes_recv);
    CHECK(kv.bytes_sent == s->bytes_sent && kv.bytes_recv == s->bytes_recv);
    CHECK(kv.msgs_sent == s->msgs_sent && kv.msgs_recv == s->msgs_recv && kv.partial == 0);
    /* The formula's own terms: the lists carry each travelling row's position once, 4 bytes. */
    CHECK(want.list_sent == want.rows_sent && want.list_recv == want.rows_recv);
    CHECK(want.bytes_sent == want.rows_sent * 2LL * c->n_layers * (long long)rb + 4 * want.list_sent);
    ra_exchange_traffic(m, route, b, world, rank, c->n_layers, rb, NULL, &full);
    CHECK(full.list_sent == 0 && full.list_recv == 0);
    int every = 1;
    for (int p = 0; p < b[world]; p++)
        every &= travel[p];
    if (every) /* every row travels: the rows of a full send */
        CHECK(want.rows_sent == full.rows_sent && want.rows_recv == full.rows_recv);
    /* Summed over ranks, every byte sent was received. */
    long long mine[2] = { kv.bytes_sent, kv.bytes_recv }, sum[2];
    MPI_Allreduce(mine, sum, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum[0] == sum[1]);
}

struct setup {
    struct ra_context *cx;
    const int32_t *tokens;
    const struct ra_kvcache *ref;
    const float *ref_logits;
    enum ra_dtype dt;
};

/* A fresh cache of `upto` rows, NaN everywhere: a row neither installed, computed nor delivered shows. */
static void poisoned_cache(const struct setup *su, struct ra_kvcache *kv, int upto)
{
    const struct ra_config *c = &su->cx->model->config;
    CHECK_OK(ra_kvcache_init_dtype(kv, su->cx->backend, c->n_layers, ra_config_kv_dim(c), upto, su->dt));
    for (int l = 0; l < c->n_layers; l++) {
        memset(kv->k[l], 0xff, (size_t)upto * ra_kvcache_row_bytes(kv));
        memset(kv->v[l], 0xff, (size_t)upto * ra_kvcache_row_bytes(kv));
    }
}

/* This rank's cache rows [0, upto) against the reference, and on the last rank the logits. */
static void check_result(const struct setup *su, const char *label, const struct ra_kvcache *kv, int upto,
                         const float *logits)
{
    const int bf16 = su->dt == RA_DTYPE_BF16;
    const double tk = bf16 ? TOL_KV_BF16 : TOL, tl = bf16 ? (bf16_products() ? TOL_LOGITS_BF16_DP : TOL_LOGITS_BF16) : TOL;
    double dk = 0;
    for (int l = 0; l < kv->n_layers; l++) {
        const size_t elems = (size_t)upto * (size_t)kv->kv_dim;
        dk = fmax(dk, test_max_rel_diff_rows(kv->k[l], ra_kvcache_k(su->ref, l, 0), elems, su->dt == RA_DTYPE_BF16));
        dk = fmax(dk, test_max_rel_diff_rows(kv->v[l], ra_kvcache_v(su->ref, l, 0), elems, su->dt == RA_DTYPE_BF16));
    }
    const double dl =
        rank == world - 1 ? test_max_rel_diff(logits, su->ref_logits, (size_t)su->cx->model->config.vocab_size) : 0;
    if (dk > tk || dl > tl || dk != dk || dl != dl)
        fprintf(stderr, "%s, rank %d: KV differs by %.3g, logits by %.3g\n", label, rank, dk, dl);
    CHECK(dk <= tk && dl <= tl);
}

struct rows_pass {
    struct ra_context *cx;
    const int32_t *tokens;
    struct ra_rows rows;
    struct ra_kvcache *kv;
    float *logits;
};

static int forward_rows(void *arg)
{
    struct rows_pass *rp = arg;
    return ra_forward_rows(rp->cx, rp->tokens, &rp->rows, rp->kv, rp->logits);
}

/* One delta pass on X: travel set PATTERN, the rest installed from the reference. */
static void delta_pass(const struct setup *su, struct ra_exchange *x, const char *part, int pattern, int link)
{
    const struct ra_config *c = &su->cx->model->config;
    const int *b = x->bounds;
    const int n = N_PROMPT, last = rank == world - 1, upto = x->method == RA_METHOD_TSP ? n : b[rank + 1];
    uint8_t travel[N_PROMPT], have[N_PROMPT];
    int32_t pos[N_PROMPT], sub[N_PROMPT];
    const char *pname = make_travel(pattern, b, travel);
    char label[256];
    snprintf(label, sizeof label, "%s KV, p=%d, %s, %s, %s%s", ra_dtype_name(su->dt), world,
             x->method == RA_METHOD_TSP ? "tsp" : ra_route_name(x->route), part, pname, link ? ", emulated link" : "");
    int k = 0;
    for (int p = 0; p < n; p++) {
        have[p] = travel[p] || (last && p == n - 1);
        if (have[p] && p >= b[rank] && p < b[rank + 1]) {
            pos[k] = p;
            sub[k++] = su->tokens[p];
        }
    }
    struct ra_kvcache kv;
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    poisoned_cache(su, &kv, upto);
    CHECK_OK(ra_exchange_set_travel(x, travel + b[rank]));
    struct install in = { su->ref, have, upto };
    const struct ra_hook store = { .self = &in, .layer_begin = install_layer_begin };
    struct rows_pass rp = { su->cx, sub, { k, b[rank], pos }, &kv, last ? logits : NULL };
    CHECK_OK(ra_prefill_start(x, &kv));
    test_mpi_count_start(x->comm);
    CHECK_OK(ra_context_hook_add(su->cx, &store));
    CHECK_OK(ra_prefill_pass(su->cx, x, forward_rows, &rp));
    ra_context_hook_remove(su->cx, &store);
    check_bytes(label, x, c, x->method, x->route, b, travel, su->dt);
    check_result(su, label, &kv, upto, logits);
    ra_kvcache_free(&kv);
    free(logits);
}

static void run_case(const struct setup *su, enum ra_method m, enum ra_route route, const int *b, const char *part,
                     int pattern, const struct ra_netem_config *link)
{
    const struct ra_config *c = &su->cx->model->config;
    struct ra_exchange x;
    CHECK_OK(ra_exchange_init(&x, MPI_COMM_WORLD, m, route, b, c->n_layers, ra_kv_row_bytes(ra_config_kv_dim(c), su->dt)));
    if (link)
        CHECK_OK(ra_netem_attach(&x, link));
    delta_pass(su, &x, part, pattern, link != NULL);
    ra_exchange_free(&x);
}

/* One exchange for several passes, as a reuse run uses it: delta passes whose
 * travel sets grow and shrink (the staging grows with them), then a full pass
 * (no travel set) moving every row as before, by the full formula. */
static void run_sequence(const struct setup *su, enum ra_method m, enum ra_route route, const int *b, const char *part)
{
    const struct ra_config *c = &su->cx->model->config;
    const int upto = m == RA_METHOD_TSP ? N_PROMPT : b[rank + 1];
    const int patterns[] = { 1, 2, 0, 3 };
    struct ra_exchange x;
    struct ra_kvcache kv;
    struct ra_traffic want;
    struct test_mpi_count got;
    double ttft;
    char label[256];
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    CHECK_OK(ra_exchange_init(&x, MPI_COMM_WORLD, m, route, b, c->n_layers, ra_kv_row_bytes(ra_config_kv_dim(c), su->dt)));
    for (int i = 0; i < 4; i++)
        delta_pass(su, &x, part, patterns[i], 0);
    snprintf(label, sizeof label, "%s KV, p=%d, %s, %s, full pass after delta passes", ra_dtype_name(su->dt), world,
             m == RA_METHOD_TSP ? "tsp" : ra_route_name(route), part);
    poisoned_cache(su, &kv, upto);
    CHECK_OK(ra_exchange_set_travel(&x, NULL));
    test_mpi_count_start(x.comm);
    CHECK_OK(ra_prefill_run(su->cx, &x, &kv, su->tokens, logits, &ttft));
    test_mpi_count_read(&got, NULL);
    ra_exchange_traffic(m, route, b, world, rank, c->n_layers, ra_kvcache_row_bytes(&kv), NULL, &want);
    if (got.bytes_sent != want.bytes_sent || got.bytes_recv != want.bytes_recv)
        fprintf(stderr, "%s, rank %d: MPI moved %lld bytes out, %lld in; the formula says %lld, %lld\n", label, rank,
                got.bytes_sent, got.bytes_recv, want.bytes_sent, want.bytes_recv);
    CHECK(got.bytes_sent == want.bytes_sent && got.bytes_recv == want.bytes_recv);
    CHECK(got.bytes_sent == x.stats.bytes_sent && got.bytes_recv == x.stats.bytes_recv);
    check_result(su, label, &kv, upto, logits);
    ra_kvcache_free(&kv);
    ra_exchange_free(&x);
    free(logits);
}

static void random_bounds(int *b)
{
    b[0] = 0;
    for (int r = 1; r < world; r++) {
        const int lo = b[r - 1] + 1, hi = N_PROMPT - (world - r);
        b[r] = test_rand_int(lo, hi);
    }
    b[world] = N_PROMPT;
}

static void check_dtype(const struct ra_model *model, struct ra_backend *be, enum ra_dtype dt)
{
    const struct ra_config *c = &model->config;
    struct ra_context cx;
    struct ra_kvcache ref;
    int32_t tokens[N_PROMPT];
    float *ref_logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    int bounds[2][RA_MAX_RANKS + 1];
    const char *parts[2] = { "even", "random" };
    test_rand_seed(1234); /* the same prompt, split and travel sets on every rank */
    for (int i = 0; i < N_PROMPT; i++)
        tokens[i] = test_rand_int(1, c->vocab_size - 1);
    CHECK_OK(ra_context_init(&cx, model, be));
    CHECK_OK(ra_kvcache_init_dtype(&ref, be, c->n_layers, ra_config_kv_dim(c), N_PROMPT, dt));
    CHECK_OK(ra_forward_span(&cx, tokens, 0, N_PROMPT, &ref, ref_logits));
    CHECK_OK(ra_partition_parse("even", N_PROMPT, world, bounds[0]));
    random_bounds(bounds[1]);
    const struct setup su = { &cx, tokens, &ref, ref_logits, dt };
    for (int pi = 0; pi < 2; pi++)
        for (int pattern = 0; pattern < N_PATTERNS; pattern++) {
            for (int route = RA_ROUTE_CHAIN; route <= RA_ROUTE_DIRECT; route++)
                run_case(&su, RA_METHOD_KVR, (enum ra_route)route, bounds[pi], parts[pi], pattern, NULL);
            run_case(&su, RA_METHOD_TSP, RA_ROUTE_CHAIN, bounds[pi], parts[pi], pattern, NULL);
        }
    /* A link fast enough to cost nothing: the lists charged to it, its stamps on their own communicator. */
    const struct ra_netem_config link = { .link_gbps = 1000, .noise_slot_ms = 5 };
    for (int route = RA_ROUTE_CHAIN; route <= RA_ROUTE_DIRECT; route++)
        run_case(&su, RA_METHOD_KVR, (enum ra_route)route, bounds[1], parts[1], 3, &link);
    run_case(&su, RA_METHOD_TSP, RA_ROUTE_CHAIN, bounds[1], parts[1], 3, &link);
    for (int route = RA_ROUTE_CHAIN; route <= RA_ROUTE_DIRECT; route++)
        run_sequence(&su, RA_METHOD_KVR, (enum ra_route)route, bounds[1], parts[1]);
    run_sequence(&su, RA_METHOD_TSP, RA_ROUTE_CHAIN, bounds[1], parts[1]);
    ra_kvcache_free(&ref);
    ra_context_free(&cx);
    free(ref_logits);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    struct ra_model m;
    struct ra_backend *be;
    const struct ra_config gqa = { .dim = 64, .hidden_dim = 160, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                                   .vocab_size = 211, .seq_len = 128, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    test_random_model(&m, &gqa, RA_DTYPE_F32, 1.0f);
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    check_dtype(&m, be, RA_DTYPE_F32);
    check_dtype(&m, be, RA_DTYPE_BF16);
    ra_backend_free(be);
    ra_model_free(&m);
    int mine = test_failures, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    test_failures = all;
    const int rc = rank == world - 1 ? test_result("test_chain_delta") : (all ? 1 : 0);
    MPI_Finalize();
    return rc;
}
