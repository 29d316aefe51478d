/* The transport API (mpi/transport.h) on 2-4 ranks: point-to-point chains of
 * KV rows, relayed pieces completed out of order, and all-gathers of uneven
 * blocks, each checked row by row against known contents and byte by byte
 * against a PMPI count of what MPI moved (tests/mpi_count.c).
 *
 * Every host-MPI flavour runs on the CPU backend: host rows as they are; and
 * rows declared device memory, moved by CUDA-aware MPI (its calls only) and
 * by pinned-host staging, whose copies and events the CPU backend runs as
 * memcpy and no-ops, so the staging bookkeeping (pool, which stage goes where)
 * is checked here without a GPU. Transports that cannot work on host rows
 * must fail with one error naming the rank.
 *
 *   mpirun -np P test_transport */
#include "config.h"
#include "backend.h"
#include "kvcache.h"
#include "mpi_count.h"
#include "status.h"
#include "test.h"
#include "transport.h"

#define KV_DIM 5  /* floats per row: rows of 20 bytes */
#define LAYERS 2

static int rank, world;
static int bounds[65];

/* Row `pos` of K (kind 0) or V (kind 1) of layer l, as every rank knows it. */
static float value(int l, int kind, int pos, int j)
{
    return (float)(l * 100000 + kind * 50000 + pos * 10 + j);
}

static void fill(struct ra_kvcache *kv, int l, int from, int to, int known)
{
    for (int kind = 0; kind < 2; kind++)
        for (int pos = from; pos < to; pos++) {
            float *row = kind ? ra_kvcache_v(kv, l, pos) : ra_kvcache_k(kv, l, pos);
            for (int j = 0; j < KV_DIM; j++)
                row[j] = known ? value(l, kind, pos, j) : -1.0f;
        }
}

/* Rows [0, to) of every layer hold value(): a failure names the test (label, what) and the layer. */
static void check_rows(struct ra_kvcache *kv, int to, const char *label, const char *what)
{
    for (int l = 0; l < LAYERS; l++) {
        int bad = 0;
        for (int kind = 0; kind < 2; kind++)
            for (int pos = 0; pos < to; pos++) {
                const float *row = kind ? ra_kvcache_v(kv, l, pos) : ra_kvcache_k(kv, l, pos);
                for (int j = 0; j < KV_DIM; j++)
                    bad += row[j] != value(l, kind, pos, j);
            }
        if (bad)
            fprintf(stderr, "%s, rank %d: %s: %d values of layer %d wrong\n", label, rank, what, bad, l);
        CHECK(bad == 0);
    }
}

static void *rows_of(struct ra_kvcache *kv, int l, int kind, int pos)
{
    return kind ? (void *)ra_kvcache_v(kv, l, pos) : (void *)ra_kvcache_k(kv, l, pos);
}

/* The runtime's counts, MPI's (PMPI) and the expected ones must agree. */
static void check_counts(const char *label, const struct ra_transport *t, long long rows_sent, long long rows_recv,
                         long long msgs_sent, long long msgs_recv)
{
    struct test_mpi_count kv;
    test_mpi_count_read(&kv, NULL);
    const long long rb = (long long)t->row_bytes;
    const struct ra_transport_counts *c = &t->counts;
    if (kv.bytes_sent != c->bytes_sent || kv.bytes_recv != c->bytes_recv || c->bytes_sent != rows_sent * rb ||
        c->bytes_recv != rows_recv * rb || kv.msgs_sent != c->msgs_sent || kv.msgs_recv != c->msgs_recv ||
        c->msgs_sent != msgs_sent || c->msgs_recv != msgs_recv || kv.partial)
        fprintf(stderr, "%s, rank %d: MPI moved %lld B in %lld msgs out, %lld B in %lld in; the transport counts "
                "%lld in %d out, %lld in %d in; expected %lld in %lld out, %lld in %lld in\n", label, rank,
                kv.bytes_sent, kv.msgs_sent, kv.bytes_recv, kv.msgs_recv, c->bytes_sent, c->msgs_sent,
                c->bytes_recv, c->msgs_recv, rows_sent * rb, msgs_sent, rows_recv * rb, msgs_recv);
    CHECK(kv.bytes_sent == c->bytes_sent && kv.bytes_recv == c->bytes_recv && kv.partial == 0);
    CHECK(kv.msgs_sent == c->msgs_sent && kv.msgs_recv == c->msgs_recv);
    CHECK(c->bytes_sent == rows_sent * rb && c->bytes_recv == rows_recv * rb);
    CHECK(c->msgs_sent == msgs_sent && c->msgs_recv == msgs_recv);
}

/* Chain: rank r receives rows [0, b_r) of each layer from r-1 and sends [0, b_{r+1}) to r+1. */
static void chain(const char *label, struct ra_transport *t, struct ra_kvcache *kv)
{
    const int r = rank, p = world, last = r == p - 1;
    int done = -2;
    for (int l = 0; l < LAYERS; l++)
        fill(kv, l, 0, bounds[p], 0);
    test_mpi_count_start(t->comm);
    CHECK_OK(ra_transport_begin(t));
    for (int l = 0; l < LAYERS; l++) {
        ra_transport_recvs_reset(t);
        CHECK_OK(ra_transport_group_begin(t));
        for (int kind = 0; kind < 2 && r > 0; kind++)
            CHECK_OK(ra_transport_post_recv(t, rows_of(kv, l, kind, 0), bounds[r], r - 1, l * 2 + kind));
        CHECK_OK(ra_transport_group_end(t));
        fill(kv, l, bounds[r], bounds[r + 1], 1); /* this rank's own rows, meanwhile */
        CHECK_OK(ra_transport_wait(t, RA_WAIT_ALL, &done, NULL));
        CHECK(done == (r > 0 ? 2 : 0));
        CHECK_OK(ra_transport_wait(t, RA_TEST_SOME, &done, (int[2]){ 0 })); /* nothing left pending */
        CHECK(done == -1);
        CHECK_OK(ra_transport_group_begin(t));
        for (int kind = 0; kind < 2 && !last; kind++)
            CHECK_OK(ra_transport_post_send(t, rows_of(kv, l, kind, 0), bounds[r + 1], r + 1, l * 2 + kind));
        CHECK_OK(ra_transport_group_end(t));
        CHECK_OK(ra_transport_progress(t));
    }
    CHECK_OK(ra_transport_wait_sends(t));
    check_rows(kv, bounds[r + 1], label, "chain");
    check_counts("chain", t, last ? 0 : 2LL * LAYERS * bounds[r + 1], 2LL * LAYERS * bounds[r],
                 last ? 0 : 2 * LAYERS, r > 0 ? 2 * LAYERS : 0);
}

/* Relay: each rank's slice travels hop by hop as its own message, forwarded as
 * soon as it is seen complete (RA_TEST_SOME, then RA_WAIT_SOME). */
static void relay(const char *label, struct ra_transport *t, struct ra_kvcache *kv)
{
    const int r = rank, p = world, last = r == p - 1;
    int idx[2 * 64], seen[2 * 64], done = 0;
    for (int l = 0; l < LAYERS; l++)
        fill(kv, l, 0, bounds[p], 0);
    test_mpi_count_start(t->comm);
    CHECK_OK(ra_transport_begin(t));
    for (int l = 0; l < LAYERS; l++) {
        int n_seen = 0;
        memset(seen, 0, sizeof seen);
        ra_transport_recvs_reset(t);
        CHECK_OK(ra_transport_group_begin(t));
        for (int s = 0; s < r; s++)
            for (int kind = 0; kind < 2; kind++)
                CHECK_OK(ra_transport_post_recv(t, rows_of(kv, l, kind, bounds[s]), bounds[s + 1] - bounds[s], r - 1,
                                                (l * p + s) * 2 + kind));
        CHECK_OK(ra_transport_group_end(t));
        CHECK(t->n_recv == 2 * r);
        fill(kv, l, bounds[r], bounds[r + 1], 1);
        for (int how = RA_TEST_SOME;; how = RA_WAIT_SOME) {
            CHECK_OK(ra_transport_wait(t, (enum ra_wait)how, &done, idx));
            if (done < 0 || test_failures)
                break;
            CHECK_OK(ra_transport_group_begin(t));
            for (int i = 0; i < done; i++) {
                CHECK(idx[i] >= 0 && idx[i] < 2 * r && !seen[idx[i]]);
                if (idx[i] < 0 || idx[i] >= 2 * r)
                    continue;
                seen[idx[i]] = 1;
                n_seen++;
                const int s = idx[i] / 2, kind = idx[i] % 2;
                if (!last)
                    CHECK_OK(ra_transport_post_send(t, rows_of(kv, l, kind, bounds[s]), bounds[s + 1] - bounds[s],
                                                    r + 1, (l * p + s) * 2 + kind));
            }
            CHECK_OK(ra_transport_group_end(t));
        }
        CHECK(n_seen == 2 * r);
        CHECK_OK(ra_transport_group_begin(t));
        for (int kind = 0; kind < 2 && !last; kind++)
            CHECK_OK(ra_transport_post_send(t, rows_of(kv, l, kind, bounds[r]), bounds[r + 1] - bounds[r], r + 1,
                                            (l * p + r) * 2 + kind));
        CHECK_OK(ra_transport_group_end(t));
    }
    CHECK_OK(ra_transport_wait_sends(t));
    check_rows(kv, bounds[r + 1], label, "relay");
    check_counts("relay", t, last ? 0 : 2LL * LAYERS * bounds[r + 1], 2LL * LAYERS * bounds[r],
                 last ? 0 : 2LL * LAYERS * (r + 1), 2LL * LAYERS * r);
}

/* All-gather of uneven blocks, in place in every rank's cache. */
static void allgather(const char *label, struct ra_transport *t, struct ra_kvcache *kv)
{
    const int r = rank, p = world, mine = bounds[r + 1] - bounds[r];
    int counts[64], displs[64];
    for (int s = 0; s < p; s++) {
        displs[s] = bounds[s];
        counts[s] = bounds[s + 1] - bounds[s];
    }
    for (int l = 0; l < LAYERS; l++) {
        fill(kv, l, 0, bounds[p], 0);
        fill(kv, l, bounds[r], bounds[r + 1], 1);
    }
    test_mpi_count_start(t->comm);
    CHECK_OK(ra_transport_begin(t));
    for (int l = 0; l < LAYERS; l++) {
        CHECK_OK(ra_transport_allgather(t, (void *)kv->k[l], counts, displs));
        CHECK_OK(ra_transport_allgather(t, (void *)kv->v[l], counts, displs));
    }
    CHECK_OK(ra_transport_wait_sends(t));
    check_rows(kv, bounds[p], label, "all-gather");
    check_counts("all-gather", t, 2LL * LAYERS * mine * (p - 1), 2LL * LAYERS * (bounds[p] - mine),
                 2LL * LAYERS * (p - 1), 2LL * LAYERS * (p - 1));
}

/* Receives that complete out of posting order: rank 0 sends the second of rank
 * 1's two receives, and the first only after rank 1 has seen the second alone. */
static void out_of_order(const char *label, struct ra_transport *t, struct ra_kvcache *kv)
{
    const int half = bounds[1] / 2 > 0 ? bounds[1] / 2 : 1, n = bounds[1];
    int idx[2] = { -1, -1 }, done = -2;
    fill(kv, 0, 0, bounds[world], rank == 0);
    test_mpi_count_start(t->comm);
    CHECK_OK(ra_transport_begin(t));
    ra_transport_recvs_reset(t);
    if (rank == 0) {
        CHECK_OK(ra_transport_post_send(t, rows_of(kv, 0, 0, half), n - half, 1, 1));
        MPI_Barrier(MPI_COMM_WORLD);
        CHECK_OK(ra_transport_post_send(t, rows_of(kv, 0, 0, 0), half, 1, 0));
    } else if (rank == 1) {
        CHECK_OK(ra_transport_post_recv(t, rows_of(kv, 0, 0, 0), half, 0, 0));
        CHECK_OK(ra_transport_post_recv(t, rows_of(kv, 0, 0, half), n - half, 0, 1));
        CHECK_OK(ra_transport_wait(t, RA_WAIT_SOME, &done, idx));
        CHECK(done == 1 && idx[0] == 1);
        MPI_Barrier(MPI_COMM_WORLD);
        CHECK_OK(ra_transport_wait(t, RA_WAIT_SOME, &done, idx));
        CHECK(done == 1 && idx[0] == 0);
        CHECK_OK(ra_transport_wait(t, RA_WAIT_SOME, &done, idx));
        CHECK(done == -1);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    CHECK_OK(ra_transport_wait_sends(t));
    if (rank == 1) {
        int bad = 0;
        for (int pos = 0; pos < n; pos++)
            for (int j = 0; j < KV_DIM; j++)
                bad += ((const float *)ra_kvcache_k(kv, 0, pos))[j] != value(0, 0, pos, j);
        if (bad)
            fprintf(stderr, "%s, rank %d: out of order: %d values wrong\n", label, rank, bad);
        CHECK(bad == 0);
    }
    check_counts("out of order", t, rank == 0 ? n : 0, rank == 1 ? n : 0, rank == 0 ? 2 : 0, rank == 1 ? 2 : 0);
}

static void run_flavour(const char *want_name, struct ra_transport *t, struct ra_kvcache *kv)
{
    if (strcmp(t->name, want_name) != 0)
        fprintf(stderr, "rank %d: transport '%s', want '%s'\n", rank, t->name, want_name);
    CHECK(strcmp(t->name, want_name) == 0);
    CHECK(t->row_bytes == ra_kvcache_row_bytes(kv));
    /* Twice: the second pass reuses what the first set up (staging's pinned pool). */
    for (int pass = 0; pass < 2; pass++) {
        chain(want_name, t, kv);
        relay(want_name, t, kv);
        allgather(want_name, t, kv);
        out_of_order(want_name, t, kv);
    }
    ra_transport_free(t);
}

/* A transport that cannot work here is one error naming this rank. */
static void check_refused(struct ra_backend *be, enum ra_transport_kind kind, const char *must_say)
{
    struct ra_transport *t = (struct ra_transport *)1;
    char want[32];
    const int rc = ra_transport_init(&t, kind, MPI_COMM_WORLD, be, RA_MEM_HOST, KV_DIM * sizeof(float), 2 * world,
                                     2 * world * LAYERS);
    snprintf(want, sizeof want, "rank %d: ", rank);
    const char *msg = ra_error_message();
    if (rc == RA_OK || !strstr(msg, want) || !strstr(msg, must_say))
        fprintf(stderr, "rank %d: --transport %s on host rows: status %d, message '%s'\n", rank,
                ra_transport_kind_name(kind), rc, msg);
    CHECK(rc != RA_OK && t == NULL);
    CHECK(strstr(msg, want) != NULL && strstr(msg, must_say) != NULL && !strchr(msg, '\n'));
    if (rc == RA_OK)
        ra_transport_free(t);
}

int main(int argc, char **argv)
{
    struct ra_backend *be = NULL;
    struct ra_kvcache kv = { 0 };
    struct ra_transport *t = NULL;
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world < 2 || world > 64) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np P test_transport (2 <= P <= 64)\n");
        MPI_Finalize();
        return 2;
    }
    /* Uneven slices: rank r owns 3 + 2r rows. */
    for (int r = 0; r < world; r++)
        bounds[r + 1] = bounds[r] + 3 + 2 * r;
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }));
    CHECK_OK(ra_kvcache_init(&kv, be, LAYERS, KV_DIM, bounds[world]));
    CHECK(kv.mem == RA_MEM_HOST && be->ops->mem_kind(be) == RA_MEM_HOST);
    const size_t rb = ra_kvcache_row_bytes(&kv);
    const int max_recv = 2 * world, max_send = 2 * world * LAYERS;

    /* The names round-trip; anything else is refused. */
    for (int k = RA_TRANSPORT_AUTO; k <= RA_TRANSPORT_NCCL; k++) {
        enum ra_transport_kind got = RA_TRANSPORT_AUTO;
        CHECK_OK(ra_transport_parse(ra_transport_kind_name((enum ra_transport_kind)k), &got));
        CHECK(got == (enum ra_transport_kind)k);
    }
    enum ra_transport_kind bogus;
    CHECK(ra_transport_parse("infiniband", &bogus) == RA_EINVAL && strstr(ra_error_message(), "infiniband"));

    if (!test_failures) {
        /* Host rows: auto and mpi are today's host MPI. */
        CHECK_OK(ra_transport_init(&t, RA_TRANSPORT_AUTO, MPI_COMM_WORLD, be, kv.mem, rb, max_recv, max_send));
        if (t)
            run_flavour("mpi", t, &kv);
        t = NULL;
        CHECK_OK(ra_transport_init(&t, RA_TRANSPORT_MPI, MPI_COMM_WORLD, be, kv.mem, rb, max_recv, max_send));
        if (t)
            run_flavour("mpi", t, &kv);
        /* Rows said to be device memory: staged through pinned buffers, and CUDA-aware MPI's calls. */
        t = NULL;
        CHECK_OK(ra_transport_init(&t, RA_TRANSPORT_MPI, MPI_COMM_WORLD, be, RA_MEM_DEVICE, rb, max_recv, max_send));
        if (t)
            run_flavour("mpi-staged", t, &kv);
        t = NULL;
        CHECK_OK(ra_transport_mpi_init(&t, MPI_COMM_WORLD, be, RA_MEM_DEVICE, rb, max_recv, max_send, 1));
        if (t)
            run_flavour("mpi-cuda", t, &kv);
        /* Auto on device rows with a backend that has no device stream: never NCCL. */
        t = NULL;
        CHECK_OK(ra_transport_init(&t, RA_TRANSPORT_AUTO, MPI_COMM_WORLD, be, RA_MEM_DEVICE, rb, max_recv, max_send));
        if (t)
            run_flavour(ra_transport_mpi_cuda_supported() ? "mpi-cuda" : "mpi-staged", t, &kv);
    }

    check_refused(be, RA_TRANSPORT_MPI_CUDA, "host memory");
#ifdef HAVE_CUDA
    check_refused(be, RA_TRANSPORT_NCCL, "host memory");
#else
    check_refused(be, RA_TRANSPORT_NCCL, "without CUDA");
#endif

    ra_kvcache_free(&kv);
    ra_backend_free(be);
    int mine = test_failures, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    test_failures = all;
    int rc = rank == 0 ? test_result("test_transport") : (all ? 1 : 0);
    MPI_Finalize();
    return rc;
}
