/* Delta sends: only the rows of a travel set move (exchange.h,
 * ra_exchange_set_travel); every other row is in the receiver's cache already.
 *
 * At the pass's start the travelling positions move, as the rows will (tag
 * LIST_TAG, on the exchange's communicator, int32): chain rank r-1 sends
 * those of [0, b_r) to rank r in one list; relay forwards each rank's list
 * hop by hop; direct sends each rank's list to every later rank; TSP
 * all-gathers the lists (after an uncounted all-gather of their lengths, a
 * control value like the start barrier). So every rank knows what it will
 * receive, whatever the others selected, and holds the positions of the
 * pieces it holds rows of (KVR rank r: pieces 0..r; TSP: all), piece s
 * being rank s's travelling positions, in position order.
 *
 * Per layer those rows move packed: a staging buffer per layer, K and V,
 * with the pieces one after the other, in the memory the transport moves
 * rows from (the KV cache's). A rank packs its own piece from the cache
 * (get_rows), sends the pieces as its route does and scatters what it
 * received into the cache (set_rows) before kv_ready returns. KVR's staging
 * buffers stay untouched until the pass's sends complete: one per layer; TSP
 * reuses one. */
#include "exchange.h"
#include "netem.h"
#include "ra_mpi.h"
#include "watchdog.h"

#include <stdlib.h>
#include <string.h>

/* Piece s's list: a tag above every KV tag (ra_chain_max_tag), so that no
 * early row can match a list's receive. */
static int list_tag(const struct ra_exchange *x, int piece)
{
    return (int)ra_chain_max_tag(x->n_layers, x->size) + 1 + piece;
}

struct ra_delta {
    uint8_t *mine;        /* [b_{r+1} - b_r]: this rank's travel flags */
    int32_t *pos;         /* [b_size]: the known pieces' positions, piece after piece */
    int32_t *idx;         /* [b_size]: positions as buffer rows, where the cache's first row is not 0 */
    int *cnt, *off;       /* [size], [size + 1]: each piece's rows and offset in pos and the staging */
    int n_pieces;         /* pieces known this pass: r + 1 (KVR) or size (TSP) */
    void *stage;          /* [n_stages][2][off[n_pieces]] rows */
    size_t stage_bytes, layer_rows;
    int n_stages;         /* layers with a staging of their own: every one (KVR) or one for all (TSP) */
    struct ra_backend *be;
    enum ra_mem mem;
    long long list_sent, list_recv; /* bytes of positions this pass */
    int list_msgs_sent, list_msgs_recv;
};

void ra_delta_free(struct ra_delta *d)
{
    if (!d)
        return;
    if (d->stage)
        d->be->ops->release_mem(d->be, d->stage, d->mem);
    free(d->mine);
    free(d->pos);
    free(d->idx);
    free(d->cnt);
    free(d->off);
    free(d);
}

int ra_exchange_set_travel(struct ra_exchange *x, const uint8_t *travel)
{
    const int n = x->bounds[x->rank + 1] - x->bounds[x->rank], total = x->bounds[x->size];
    struct ra_delta *d = x->delta;
    int rc = RA_OK, *ub = NULL, found = 0;
    if (!travel) {
        ra_delta_free(d);
        x->delta = NULL;
        return RA_OK;
    }
    MPI_CHECK(MPI_Comm_get_attr(x->comm, MPI_TAG_UB, &ub, &found));
    if (x->method == RA_METHOD_KVR && (rc = ra_chain_check_tags(x->n_layers + 1, x->size, x->rank,
                                                                found && ub ? *ub : 32767)) != RA_OK)
        goto out; /* the lists' tags: one layer's worth above the rows' */
    if (!d) {
        d = calloc(1, sizeof *d);
        if (!d || !(d->mine = malloc((size_t)n + 1)) || !(d->pos = malloc(sizeof(int32_t) * ((size_t)total + 1))) ||
            !(d->idx = malloc(sizeof(int32_t) * ((size_t)total + 1))) ||
            !(d->cnt = calloc((size_t)x->size, sizeof(int))) || !(d->off = calloc((size_t)x->size + 1, sizeof(int)))) {
            ra_delta_free(d);
            rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory", x->rank);
            goto out;
        }
        x->delta = d;
    }
    memcpy(d->mine, travel, (size_t)n);
out:
    return rc;
}

/* This rank's travelling positions at pos + off[rank]. */
static int own_piece(struct ra_exchange *x)
{
    struct ra_delta *d = x->delta;
    const int r = x->rank, start = x->bounds[r], n = x->bounds[r + 1] - start;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (d->mine[i])
            d->pos[d->off[r] + k++] = start + i;
    d->cnt[r] = k;
    d->off[r + 1] = d->off[r] + k;
    return k;
}

static int send_list(struct ra_exchange *x, const int32_t *pos, int n, int dest, int tag)
{
    struct ra_delta *d = x->delta;
    int rc = RA_OK;
    MPI_CHECK(MPI_Send(pos, n, MPI_INT32_T, dest, list_tag(x, tag), x->comm));
    d->list_sent += (long long)n * (long long)sizeof(int32_t);
    d->list_msgs_sent++;
    if (x->netem)
        rc = ra_netem_charge(x, dest, (double)n * sizeof(int32_t));
out:
    return rc;
}

/* A list of at most `most` positions into pos; *n: how many came. */
static int recv_list(struct ra_exchange *x, int32_t *pos, int most, int source, int tag, int *n)
{
    struct ra_delta *d = x->delta;
    MPI_Status st;
    int rc = RA_OK;
    ra_watchdog_wait(RA_WATCH_KV_ROWS, -1, source);
    MPI_CHECK(MPI_Recv(pos, most, MPI_INT32_T, source, list_tag(x, tag), x->comm, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT32_T, n));
    d->list_recv += (long long)*n * (long long)sizeof(int32_t);
    d->list_msgs_recv++;
out:
    ra_watchdog_done();
    return rc;
}

/* Chain: one list of [0, b_r) from r-1, split into its pieces by the bounds. */
static int lists_chain(struct ra_exchange *x)
{
    struct ra_delta *d = x->delta;
    const int r = x->rank;
    int rc = RA_OK, n = 0;
    if (r > 0 && (rc = recv_list(x, d->pos, x->bounds[r], r - 1, 0, &n)) != RA_OK)
        return rc;
    for (int s = 0, i = 0; s < r; s++) {
        d->off[s] = i;
        while (i < n && d->pos[i] < x->bounds[s + 1])
            i++;
        d->cnt[s] = i - d->off[s];
    }
    d->off[r] = n;
    own_piece(x);
    if (r < x->size - 1)
        rc = send_list(x, d->pos, d->off[r + 1], r + 1, 0);
    return rc;
}

/* Relay and direct: piece by piece, each forwarded (relay) as it arrives. */
static int lists_pieces(struct ra_exchange *x)
{
    struct ra_delta *d = x->delta;
    const int r = x->rank, p = x->size, relay = x->route == RA_ROUTE_RELAY;
    int rc = RA_OK;
    for (int s = 0; s < r && rc == RA_OK; s++) {
        d->off[s] = s ? d->off[s - 1] + d->cnt[s - 1] : 0;
        rc = recv_list(x, d->pos + d->off[s], x->bounds[s + 1] - x->bounds[s], relay ? r - 1 : s, s, &d->cnt[s]);
        if (rc == RA_OK && relay && r < p - 1)
            rc = send_list(x, d->pos + d->off[s], d->cnt[s], r + 1, s);
    }
    if (rc != RA_OK)
        return rc;
    d->off[r] = r ? d->off[r - 1] + d->cnt[r - 1] : 0;
    const int k = own_piece(x);
    for (int dest = r + 1; dest < (relay ? r + 2 : p) && dest < p && rc == RA_OK; dest++)
        rc = send_list(x, d->pos + d->off[r], k, dest, r);
    return rc;
}

/* TSP: the lengths, then the lists, all-gathered. */
static int lists_tsp(struct ra_exchange *x)
{
    struct ra_delta *d = x->delta;
    const int r = x->rank, p = x->size;
    int rc = RA_OK, k = 0, most = 0;
    const int n = x->bounds[r + 1] - x->bounds[r];
    for (int i = 0; i < n; i++)
        k += d->mine[i] != 0;
    MPI_CHECK(MPI_Allgather(&k, 1, MPI_INT, d->cnt, 1, MPI_INT, x->comm));
    d->off[0] = 0;
    for (int s = 0; s < p; s++) {
        d->off[s + 1] = d->off[s] + d->cnt[s];
        most = d->cnt[s] > most ? d->cnt[s] : most;
    }
    own_piece(x);
    const double t = MPI_Wtime() - x->t0;
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, d->pos, d->cnt, d->off, MPI_INT32_T, x->comm));
    d->list_sent += (long long)k * (p - 1) * (long long)sizeof(int32_t);
    d->list_recv += (long long)(d->off[p] - k) * (long long)sizeof(int32_t);
    d->list_msgs_sent += p - 1;
    d->list_msgs_recv += p - 1;
    if (x->netem)
        rc = ra_netem_allgather_bytes(x, t, (double)most * sizeof(int32_t));
out:
    return rc;
}

int ra_delta_begin(struct ra_exchange *x)
{
    struct ra_delta *d = x->delta;
    d->list_sent = d->list_recv = 0;
    d->list_msgs_sent = d->list_msgs_recv = 0;
    if (x->method == RA_METHOD_TSP) {
        d->n_pieces = x->size;
        return lists_tsp(x);
    }
    d->n_pieces = x->rank + 1;
    return x->route == RA_ROUTE_CHAIN ? lists_chain(x) : lists_pieces(x);
}

void ra_delta_count(struct ra_exchange *x)
{
    const struct ra_delta *d = x->delta;
    x->stats.bytes_sent += d->list_sent;
    x->stats.bytes_recv += d->list_recv;
    x->stats.msgs_sent += d->list_msgs_sent;
    x->stats.msgs_recv += d->list_msgs_recv;
}

int ra_delta_stage(struct ra_exchange *x, const struct ra_kvcache *kv)
{
    struct ra_delta *d = x->delta;
    const size_t rows = (size_t)d->off[d->n_pieces], rb = ra_kvcache_row_bytes(kv);
    /* TSP's all-gather is ordered after the compute that read the last layer's
     * staging (every transport waits for or fences the compute stream first):
     * one layer's staging serves every layer. KVR's sends stay pending over the pass. */
    d->n_stages = x->method == RA_METHOD_TSP ? 1 : x->n_layers;
    const size_t bytes = rows * rb * 2 * (size_t)d->n_stages;
    d->layer_rows = rows;
    if (d->stage && d->stage_bytes >= bytes && d->be == kv->backend && d->mem == kv->mem)
        return RA_OK;
    if (d->stage)
        d->be->ops->release_mem(d->be, d->stage, d->mem);
    d->stage = NULL;
    d->stage_bytes = 0;
    d->be = kv->backend;
    d->mem = kv->mem;
    if (bytes && !(d->stage = d->be->ops->alloc_mem(d->be, bytes, d->mem)))
        return ra_error_set(RA_ENOMEM, "rank %d: cannot allocate %zu bytes of %s memory to stage delta sends",
                            x->rank, bytes, ra_mem_name(d->mem));
    d->stage_bytes = bytes;
    return RA_OK;
}

int ra_delta_rows(const struct ra_exchange *x, int piece) { return x->delta->cnt[piece]; }
int ra_delta_offset(const struct ra_exchange *x, int piece) { return x->delta->off[piece]; }

void *ra_delta_piece(const struct ra_exchange *x, int layer, int kind, int piece)
{
    const struct ra_delta *d = x->delta;
    const size_t row = ((size_t)(layer % d->n_stages) * 2 + (size_t)kind) * d->layer_rows + (size_t)d->off[piece];
    return (char *)d->stage + row * x->row_bytes;
}

/* Positions [i, i+n) of pos as rows of the layer's buffers. */
static const int32_t *buffer_rows(struct ra_delta *d, const struct ra_kvcache *kv, int layer, int i, int n)
{
    const int first = ra_kvcache_first(kv, layer);
    if (!first)
        return d->pos + i;
    for (int j = 0; j < n; j++)
        d->idx[i + j] = d->pos[i + j] - first;
    return d->idx + i;
}

int ra_delta_pack(struct ra_exchange *x, struct ra_kvcache *kv, int layer)
{
    struct ra_delta *d = x->delta;
    struct ra_backend *be = kv->backend;
    const int r = x->rank, n = d->cnt[r];
    int rc = RA_OK;
    if (!n)
        return RA_OK;
    const int32_t *rows = buffer_rows(d, kv, layer, d->off[r], n);
    if ((rc = be->ops->get_rows(be, ra_delta_piece(x, layer, 0, r), kv->k[layer], kv->dtype, (size_t)kv->kv_dim,
                                rows, n)) == RA_OK)
        rc = be->ops->get_rows(be, ra_delta_piece(x, layer, 1, r), kv->v[layer], kv->dtype, (size_t)kv->kv_dim, rows,
                               n);
    return rc;
}

int ra_delta_scatter(struct ra_exchange *x, struct ra_kvcache *kv, int layer, int from, int to)
{
    struct ra_delta *d = x->delta;
    struct ra_backend *be = kv->backend;
    const int n = d->off[to] - d->off[from];
    int rc = RA_OK;
    if (n <= 0)
        return RA_OK;
    const int32_t *rows = buffer_rows(d, kv, layer, d->off[from], n);
    if ((rc = be->ops->set_rows(be, kv->k[layer], kv->dtype, ra_delta_piece(x, layer, 0, from), kv->dtype,
                                (size_t)kv->kv_dim, rows, n)) == RA_OK)
        rc = be->ops->set_rows(be, kv->v[layer], kv->dtype, ra_delta_piece(x, layer, 1, from), kv->dtype,
                               (size_t)kv->kv_dim, rows, n);
    return rc;
}

void ra_exchange_traffic(enum ra_method method, enum ra_route route, const int *b, int p, int r, int n_layers,
                         size_t row_bytes, const int *n_travel, struct ra_traffic *t)
{
    long long upto_r = 0, own;
    memset(t, 0, sizeof *t);
    if (method == RA_METHOD_SINGLE || p <= 1)
        return;
    /* Rows of slice s that move: all of it, or its travelling ones. */
#define MOVES(s) (n_travel ? (long long)n_travel[s] : (long long)(b[(s) + 1] - b[s]))
    for (int s = 0; s < r; s++)
        upto_r += MOVES(s);
    own = MOVES(r);
    if (method == RA_METHOD_TSP) {
        long long all = 0;
        for (int s = 0; s < p; s++)
            all += MOVES(s);
        t->rows_sent = own * (p - 1);
        t->rows_recv = all - own;
    } else {
        t->rows_recv = upto_r;
        if (r == p - 1)
            t->rows_sent = 0;
        else if (route == RA_ROUTE_DIRECT)
            t->rows_sent = own * (p - 1 - r); /* its own rows to every later rank */
        else
            t->rows_sent = upto_r + own;      /* [0, b_{r+1}): as one prefix (chain) or slice by slice (relay) */
    }
#undef MOVES
    if (n_travel) { /* each travelling row's position goes where the row goes, once a pass */
        t->list_sent = t->rows_sent;
        t->list_recv = t->rows_recv;
    }
    const long long per_row = 2LL * n_layers * (long long)row_bytes, per_pos = (long long)sizeof(int32_t);
    t->bytes_sent = t->rows_sent * per_row + t->list_sent * per_pos;
    t->bytes_recv = t->rows_recv * per_row + t->list_recv * per_pos;
}
