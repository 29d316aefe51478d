/* KV-Runahead: the KV cache flows point to point along the ranks.
 *
 * Per layer, rank r posts the receive of rows [0, b_r) straight into its KV
 * cache before the QKV projection, waits for them only when attention needs
 * them, and then passes rows on without waiting for the send. Routes:
 *   chain   rows [0, b_{r+1}) to rank r+1 in one message per K and V (the paper)
 *   relay   each rank's own rows travel hop by hop, forwarded the moment they arrive
 *   direct  each rank sends its own rows to every later rank
 * All three move the same bytes; they differ in message count and latency.
 * The rows are the slice's, [b_r, b_{r+1}), whichever of them the pass
 * computes (a reuse pass computes some and installs the rest). With delta
 * sends (delta.c) only the travelling rows move, packed, in the same pattern
 * of messages (none where a piece has no travelling row), and are scattered
 * into the cache when they have arrived. */
#include "exchange.h"
#include "netem.h"
#include "watchdog.h"

/* A message carries K or V (kind) of one layer, for the rows of one rank's
 * slice (piece; chain uses piece 0 for the whole prefix). */
static int tag_of(const struct ra_exchange *x, int layer, int piece, int kind)
{
    return (layer * x->size + piece) * 2 + kind;
}

long long ra_chain_max_tag(int n_layers, int size)
{
    return 2LL * n_layers * size - 1; /* tag_of(last layer, last piece, V) */
}

int ra_chain_check_tags(int n_layers, int size, int rank, long long tag_ub)
{
    const long long max = ra_chain_max_tag(n_layers, size);
    if (max > tag_ub)
        return ra_error_set(RA_EINVAL,
                            "rank %d: %d layers on %d ranks need MPI tags up to %lld, above this MPI's MPI_TAG_UB (%lld)",
                            rank, n_layers, size, max, tag_ub);
    return RA_OK;
}

/* Rows are bytes to a transport, whatever their element type. */
static void *rows_of(struct ra_kvcache *kv, int layer, int kind, int pos)
{
    return kind ? (void *)ra_kvcache_v(kv, layer, pos) : (void *)ra_kvcache_k(kv, layer, pos);
}

/* Where piece s (rank s's slice) of layer l travels from and to: the KV
 * cache, or with delta sends the staging, holding its travelling rows only. */
static void *piece_of(struct ra_exchange *x, struct ra_kvcache *kv, int l, int kind, int s)
{
    return x->delta ? ra_delta_piece(x, l, kind, s) : rows_of(kv, l, kind, x->bounds[s]);
}

static int piece_rows(const struct ra_exchange *x, int s)
{
    return x->delta ? ra_delta_rows(x, s) : x->bounds[s + 1] - x->bounds[s];
}

static int post_piece_recvs(struct ra_exchange *x, struct ra_kvcache *kv, int l)
{
    const int r = x->rank;
    int rc = ra_transport_group_begin(x->tr);
    for (int s = 0; s < r && rc == RA_OK; s++)
        for (int kind = 0; kind < 2 && rc == RA_OK; kind++) {
            const int src = x->route == RA_ROUTE_DIRECT ? s : r - 1;
            if (!piece_rows(x, s))
                continue; /* delta: nothing of it travels, and both ends know */
            x->recv_piece[x->n_recv] = 2 * s + kind;
            rc = ra_exchange_post_recv(x, piece_of(x, kv, l, kind, s), piece_rows(x, s), src, tag_of(x, l, s, kind));
        }
    return rc == RA_OK ? ra_transport_group_end(x->tr) : rc;
}

/* Relay: passes every completed receive of this layer on to the next rank. */
static int relay_forward(struct ra_exchange *x, struct ra_kvcache *kv, int l, int wait)
{
    int rc = RA_OK, done = 0, idx[2 * RA_MAX_RANKS];
    const int last = x->rank == x->size - 1;
    for (;;) {
        if ((rc = ra_transport_wait(x->tr, wait ? RA_WAIT_SOME : RA_TEST_SOME, &done, idx)) != RA_OK || done <= 0)
            break;
        ra_watchdog_pet(); /* a piece arrived: the chain moves */
        if (!last && (rc = ra_transport_group_begin(x->tr)) != RA_OK)
            break;
        for (int i = 0; i < done && !last && rc == RA_OK; i++) {
            const int s = x->recv_piece[idx[i]] / 2, kind = x->recv_piece[idx[i]] % 2;
            if (x->netem && (rc = ra_netem_forwarding(x, idx[i])) != RA_OK)
                break;
            rc = ra_exchange_post_send(x, piece_of(x, kv, l, kind, s), piece_rows(x, s), x->rank + 1,
                                       tag_of(x, l, s, kind));
        }
        if (!last && rc == RA_OK)
            rc = ra_transport_group_end(x->tr);
        if (rc != RA_OK || !wait)
            break;
    }
    return rc;
}

static int chain_layer_begin(void *self, const struct ra_hook_args *a)
{
    struct ra_exchange *x = self;
    const int l = a->layer;
    struct ra_kvcache *kv = a->kv;
    int start = x->bounds[x->rank]; /* the slice's, whatever rows the pass computes */
    int rc = RA_OK;
    x->stats.layers[l].begin = MPI_Wtime() - x->t0;
    x->n_recv = 0;
    ra_transport_recvs_reset(x->tr);
    if (x->delta && l == 0 && (rc = ra_delta_stage(x, kv)) != RA_OK)
        return rc;
    if (x->rank == 0)
        return RA_OK;
    if (x->delta && x->route == RA_ROUTE_CHAIN) /* [0, b_r)'s travelling rows, if any, as one message */
        start = ra_delta_offset(x, x->rank);
    if (x->route != RA_ROUTE_CHAIN) {
        rc = post_piece_recvs(x, kv, l);
        /* What has already arrived moves on now, overlapping this layer's QKV. */
        if (rc == RA_OK && x->route == RA_ROUTE_RELAY)
            rc = relay_forward(x, kv, l, 0);
        return rc;
    }
    if (!start)
        return RA_OK;
    rc = ra_transport_group_begin(x->tr);
    for (int kind = 0; kind < 2 && rc == RA_OK; kind++)
        rc = ra_exchange_post_recv(x, piece_of(x, kv, l, kind, 0), start, x->rank - 1, tag_of(x, l, 0, kind));
    return rc == RA_OK ? ra_transport_group_end(x->tr) : rc;
}

/* Delta: this rank's travelling rows packed behind what it received, then
 * sent as the route sends (chain: every piece up to its own as one message;
 * relay: its own piece to the next rank; direct: to every later rank). */
static int delta_send(struct ra_exchange *x, struct ra_kvcache *kv, int l)
{
    const int r = x->rank, p = x->size;
    const int chain = x->route == RA_ROUTE_CHAIN;
    const int rows = chain ? ra_delta_offset(x, r + 1) : ra_delta_rows(x, r);
    int rc = ra_delta_pack(x, kv, l);
    if (rc != RA_OK || !rows)
        return rc;
    if ((rc = ra_transport_group_begin(x->tr)) != RA_OK)
        return rc;
    for (int kind = 0; kind < 2 && rc == RA_OK; kind++) {
        void *buf = ra_delta_piece(x, l, kind, chain ? 0 : r);
        const int tag = tag_of(x, l, chain ? 0 : r, kind);
        for (int dest = r + 1; dest < (x->route == RA_ROUTE_DIRECT ? p : r + 2) && rc == RA_OK; dest++)
            rc = ra_exchange_post_send(x, buf, rows, dest, tag);
    }
    return rc == RA_OK ? ra_transport_group_end(x->tr) : rc;
}

static int chain_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct ra_exchange *x = self;
    const int l = a->layer;
    struct ra_kvcache *kv = a->kv;
    const int start = x->bounds[x->rank], n = x->bounds[x->rank + 1] - start; /* the slice (a reuse pass
                                                                                  * computes some of its rows) */
    struct ra_layer_times *t = &x->stats.layers[l];
    const int r = x->rank, p = x->size;
    int rc = RA_OK, done;

    t->wait_begin = MPI_Wtime() - x->t0;
    if (r > 0)
        ra_watchdog_wait(RA_WATCH_KV_ROWS, l, x->route == RA_ROUTE_DIRECT ? -1 : r - 1);
    if (x->route == RA_ROUTE_RELAY)
        rc = relay_forward(x, kv, l, 1);
    else
        rc = ra_transport_wait(x->tr, RA_WAIT_ALL, &done, NULL);
    if (rc == RA_OK && x->netem)
        rc = ra_netem_wait_recvs(x);
    ra_watchdog_done();
    t->wait_end = MPI_Wtime() - x->t0;
    x->stats.t_wait += t->wait_end - t->wait_begin;
    if (rc == RA_OK && x->delta)
        rc = ra_delta_scatter(x, kv, l, 0, r); /* the received rows into the cache */
    if (rc != RA_OK || r == p - 1)
        goto out;
    if (x->delta) {
        rc = delta_send(x, kv, l);
        t->send = MPI_Wtime() - x->t0;
        goto out;
    }

    rc = ra_transport_group_begin(x->tr);
    for (int kind = 0; kind < 2 && rc == RA_OK; kind++) {
        if (x->route == RA_ROUTE_CHAIN) {
            rc = ra_exchange_post_send(x, rows_of(kv, l, kind, 0), start + n, r + 1, tag_of(x, l, 0, kind));
        } else if (x->route == RA_ROUTE_RELAY) {
            rc = ra_exchange_post_send(x, rows_of(kv, l, kind, start), n, r + 1, tag_of(x, l, r, kind));
        } else {
            for (int dest = r + 1; dest < p && rc == RA_OK; dest++)
                rc = ra_exchange_post_send(x, rows_of(kv, l, kind, start), n, dest, tag_of(x, l, r, kind));
        }
    }
    if (rc == RA_OK)
        rc = ra_transport_group_end(x->tr);
    t->send = MPI_Wtime() - x->t0;
out:
    ra_watchdog_done();
    return rc;
}

static int chain_layer_end(void *self, const struct ra_hook_args *a)
{
    struct ra_exchange *x = self;
    const int l = a->layer;
    int rc = RA_OK;
    /* Give the MPI progress engine a turn so sends move while the next layer computes. */
    if (x->n_send)
        rc = ra_transport_progress(x->tr);
    x->stats.layers[l].end = MPI_Wtime() - x->t0;
    return rc;
}

void ra_chain_hooks(struct ra_exchange *x)
{
    x->hooks = (struct ra_hook){
        .self = x,
        .layer_begin = chain_layer_begin,
        .kv_ready = chain_kv_ready,
        .layer_end = chain_layer_end,
    };
}
