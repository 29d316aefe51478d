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

/* The chain's tags against the communicator's MPI_TAG_UB (the standard promises at
 * least 32767; where the attribute is missing, that is the bound). */
static int check_tag_ub(const struct ra_exchange *x)
{
    int rc = RA_OK, *ub = NULL, found = 0;
    MPI_CHECK(MPI_Comm_get_attr(x->comm, MPI_TAG_UB, &ub, &found));
    rc = ra_chain_check_tags(x->n_layers, x->size, x->rank, found && ub ? *ub : 32767);
out:
    return rc;
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
    x->row_bytes = row_bytes; /* bytes, whatever the cache dtype: ra_kvcache_row_bytes */
    MPI_CHECK(MPI_Comm_rank(comm, &x->rank));
    MPI_CHECK(MPI_Comm_size(comm, &x->size));
    if (x->size > RA_MAX_RANKS) {
        rc = ra_error_set(RA_EINVAL, "%d ranks exceed the limit of %d", x->size, RA_MAX_RANKS);
        goto out;
    }
    memcpy(x->bounds, bounds, sizeof(int) * (size_t)(x->size + 1));
    if (method == RA_METHOD_KVR && (rc = check_tag_ub(x)) != RA_OK)
        goto out;
    if (row_bytes == 0 || row_bytes > INT_MAX) {
        rc = ra_error_set(RA_EINVAL, "rank %d: a KV row of %zu bytes", x->rank, row_bytes);
        goto out;
    }
    /* Per layer at most: K and V from/to every other rank (direct), or two pieces each (relay). */
    x->max_send = 2 * x->size * n_layers;
    x->stats.layers = calloc((size_t)n_layers, sizeof *x->stats.layers);
    if (!x->stats.layers) {
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
    ra_transport_free(x->tr);
    free(x->stats.layers);
    ra_netem_free(x->netem);
    ra_delta_free(x->delta);
    memset(x, 0, sizeof *x);
}

int ra_exchange_attach_transport(struct ra_exchange *x, enum ra_transport_kind kind, const struct ra_kvcache *kv)
{
    int rc;
    ra_transport_free(x->tr);
    x->tr = NULL;
    if (!ra_exchange_hooks(x) && kind == RA_TRANSPORT_AUTO) /* no rows move; one asked for by name is still checked */
        return RA_OK;
    rc = ra_transport_init(&x->tr, kind, x->comm, kv->backend, kv->mem, ra_kvcache_row_bytes(kv), 2 * x->size,
                           x->max_send);
    if (rc == RA_OK)
        x->row_bytes = x->tr->row_bytes;
    return rc;
}

const char *ra_exchange_transport_name(const struct ra_exchange *x)
{
    return x->tr ? x->tr->name : "none";
}

int ra_exchange_begin(struct ra_exchange *x)
{
    int rc = RA_OK;
    struct ra_layer_times *layers = x->stats.layers;
    memset(layers, 0, sizeof *layers * (size_t)x->n_layers);
    memset(&x->stats, 0, sizeof x->stats);
    x->stats.layers = layers;
    x->n_send = x->n_recv = 0;
    if (x->tr)
        rc = ra_transport_begin(x->tr);
    x->t0 = MPI_Wtime();
    if (x->netem)
        ra_netem_begin(x);
    /* Delta sends: the travelling positions, ahead of every row. */
    if (rc == RA_OK && x->delta && ra_exchange_hooks(x))
        rc = ra_delta_begin(x);
    return rc;
}

int ra_exchange_finish(struct ra_exchange *x)
{
    int rc = RA_OK;
    const double t = MPI_Wtime();
    ra_watchdog_wait(RA_WATCH_DRAIN, -1, -1);
    if (x->tr && (rc = ra_transport_wait_sends(x->tr)) != RA_OK)
        goto out;
    if (x->netem && (rc = ra_netem_finish(x)) != RA_OK)
        goto out;
    /* Kept apart from t_wait: nothing waits for these rows here, they only have to leave. */
    x->stats.t_drain += MPI_Wtime() - t;
    x->n_send = 0;
    if (x->tr) {
        x->stats.bytes_sent = x->tr->counts.bytes_sent;
        x->stats.bytes_recv = x->tr->counts.bytes_recv;
        x->stats.msgs_sent = x->tr->counts.msgs_sent;
        x->stats.msgs_recv = x->tr->counts.msgs_recv;
    }
    if (x->delta && ra_exchange_hooks(x))
        ra_delta_count(x);
out:
    ra_watchdog_done();
    x->stats.t_total = MPI_Wtime() - x->t0;
    return rc;
}

const struct ra_hook *ra_exchange_hooks(struct ra_exchange *x)
{
    return x->size > 1 && x->method != RA_METHOD_SINGLE ? &x->hooks : NULL;
}

int ra_exchange_post_send(struct ra_exchange *x, const void *buf, int rows, int dest, int tag)
{
    int rc = ra_transport_post_send(x->tr, buf, rows, dest, tag);
    if (rc == RA_OK && x->netem)
        rc = ra_netem_post_send(x, rows, dest, tag);
    x->n_send += rc == RA_OK;
    return rc;
}

int ra_exchange_post_recv(struct ra_exchange *x, void *buf, int rows, int source, int tag)
{
    int rc = ra_transport_post_recv(x->tr, buf, rows, source, tag);
    if (rc == RA_OK && x->netem)
        rc = ra_netem_post_recv(x, source, tag);
    x->n_recv += rc == RA_OK;
    return rc;
}
