#include "exchange.h"
#include "netem.h"
#include "ra_mpi.h"
#include "watchdog.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char *method_names[] = { "single", "kvr", "tsp" };
static const char *route_names[] = { "chain", "relay", "direct" };

const char *ra_method_name(enum ra_method m) { return method_names[m]; }
const char *ra_route_name(enum ra_route r) { return route_names[r]; }

int ra_method_parse(const char *s, enum ra_method *m)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, method_names[i])) {
            *m = (enum ra_method)i;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "--method: '%s' is not single, kvr or tsp", s);
}

int ra_route_parse(const char *s, enum ra_route *r)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, route_names[i])) {
            *r = (enum ra_route)i;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "--route: '%s' is not chain, relay or direct", s);
}

int ra_exchange_init(struct ra_exchange *x, MPI_Comm comm, enum ra_method method, enum ra_route route,
                     const int *bounds, int n_layers, size_t row_bytes)
{
    int rc = RA_OK;
    memset(x, 0, sizeof *x);
    x->comm = comm;
    x->method = method;
    x->route = route;
    x->n_layers = n_layers;
    x->row = MPI_DATATYPE_NULL;
    MPI_CHECK(MPI_Comm_rank(comm, &x->rank));
    MPI_CHECK(MPI_Comm_size(comm, &x->size));
    if (x->size > RA_MAX_RANKS) {
        rc = ra_error_set(RA_EINVAL, "%d ranks exceed the limit of %d", x->size, RA_MAX_RANKS);
        goto out;
    }
    memcpy(x->bounds, bounds, sizeof(int) * (size_t)(x->size + 1));
    if (row_bytes == 0 || row_bytes > INT_MAX) {
        rc = ra_error_set(RA_EINVAL, "rank %d: a KV row of %zu bytes", x->rank, row_bytes);
        goto out;
    }
    /* Bytes, whatever the cache's dtype (ra_kvcache_row_bytes): fp32 and bf16 rows alike. */
    MPI_CHECK(MPI_Type_contiguous((int)row_bytes, MPI_BYTE, &x->row));
    MPI_CHECK(MPI_Type_commit(&x->row));
    int row_size;
    MPI_CHECK(MPI_Type_size(x->row, &row_size));
    x->row_bytes = (size_t)row_size;
    /* Per layer at most: K and V from/to every other rank (direct), or two pieces each (relay). */
    const int per_layer = 2 * x->size;
    x->recv = calloc((size_t)per_layer, sizeof *x->recv);
    x->recv_status = calloc((size_t)per_layer, sizeof *x->recv_status);
    x->max_send = per_layer * n_layers;
    x->send = calloc((size_t)x->max_send, sizeof *x->send);
    x->stats.layers = calloc((size_t)n_layers, sizeof *x->stats.layers);
    if (!x->recv || !x->recv_status || !x->send || !x->stats.layers) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory", x->rank);
        goto out;
    }
    if (method == RA_METHOD_KVR)
        ra_chain_hooks(x);
    else if (method == RA_METHOD_TSP)
        ra_tsp_hooks(x);
out:
    if (rc != RA_OK)
        ra_exchange_free(x);
    return rc;
}

void ra_exchange_free(struct ra_exchange *x)
{
    if (x->row != MPI_DATATYPE_NULL)
        MPI_Type_free(&x->row);
    free(x->recv);
    free(x->recv_status);
    free(x->send);
    free(x->stats.layers);
    ra_netem_free(x->netem);
    memset(x, 0, sizeof *x);
    x->row = MPI_DATATYPE_NULL;
}

void ra_exchange_begin(struct ra_exchange *x)
{
    struct ra_layer_times *layers = x->stats.layers;
    memset(layers, 0, sizeof *layers * (size_t)x->n_layers);
    memset(&x->stats, 0, sizeof x->stats);
    x->stats.layers = layers;
    x->n_send = x->n_recv = 0;
    x->t0 = MPI_Wtime();
    if (x->netem)
        ra_netem_begin(x);
}

int ra_exchange_finish(struct ra_exchange *x)
{
    int rc = RA_OK;
    const double t = MPI_Wtime();
    ra_watchdog_wait(RA_WATCH_DRAIN, -1, -1);
    MPI_CHECK(MPI_Waitall(x->n_send, x->send, MPI_STATUSES_IGNORE));
    if (x->netem && (rc = ra_netem_finish(x)) != RA_OK)
        goto out;
    /* Kept apart from t_wait: nothing waits for these rows here, they only have to leave. */
    x->stats.t_drain += MPI_Wtime() - t;
    x->n_send = 0;
out:
    ra_watchdog_done();
    x->stats.t_total = MPI_Wtime() - x->t0;
    return rc;
}

const struct ra_kv_exchange *ra_exchange_hooks(struct ra_exchange *x)
{
    return x->size > 1 && x->method != RA_METHOD_SINGLE ? &x->hooks : NULL;
}

int ra_exchange_post_send(struct ra_exchange *x, const void *buf, int rows, int dest, int tag)
{
    int rc = RA_OK;
    if (x->n_send == x->max_send)
        return ra_error_set(RA_ECOMM, "rank %d: too many pending sends", x->rank);
    MPI_CHECK(MPI_Isend(buf, rows, x->row, dest, tag, x->comm, &x->send[x->n_send]));
    if (x->netem && (rc = ra_netem_post_send(x, rows, dest, tag)) != RA_OK)
        goto out;
    x->n_send++;
    /* MPI reports no count for a send, so count what was handed to MPI_Isend:
     * rows of x->row, MPI_Type_size(x->row) bytes each. Receivers count from statuses. */
    x->stats.bytes_sent += (long long)rows * (long long)x->row_bytes;
    x->stats.msgs_sent++;
out:
    return rc;
}

int ra_exchange_post_recv(struct ra_exchange *x, void *buf, int rows, int source, int tag)
{
    int rc = RA_OK;
    MPI_CHECK(MPI_Irecv(buf, rows, x->row, source, tag, x->comm, &x->recv[x->n_recv]));
    if (x->netem && (rc = ra_netem_post_recv(x, source, tag)) != RA_OK)
        goto out;
    x->n_recv++; /* counted when it completes (ra_exchange_count_recvs), from what arrived */
out:
    return rc;
}

int ra_exchange_count_recvs(struct ra_exchange *x, const MPI_Status *st, int n)
{
    int rc = RA_OK;
    for (int i = 0; i < n; i++) {
        int rows;
        MPI_CHECK(MPI_Get_count(&st[i], x->row, &rows));
        if (rows == MPI_UNDEFINED) {
            rc = ra_error_set(RA_ECOMM, "rank %d: a message from rank %d (tag %d) is not whole KV rows", x->rank,
                              st[i].MPI_SOURCE, st[i].MPI_TAG);
            goto out;
        }
        x->stats.bytes_recv += (long long)rows * (long long)x->row_bytes;
        x->stats.msgs_recv++;
    }
out:
    return rc;
}
