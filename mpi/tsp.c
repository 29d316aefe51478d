/* The tensor/sequence-parallel baseline (TSP): an even split, and after each
 * layer's local K,V rows are written, an all-gather of every rank's rows into
 * every rank's cache; then the same causal attention as KV-Runahead. With
 * delta sends (delta.c) the all-gather moves every rank's travelling rows,
 * packed, and each rank scatters the others' into its cache. */
#include "exchange.h"
#include "netem.h"
#include "watchdog.h"

static int tsp_layer_begin(void *self, const struct ra_hook_args *a)
{
    struct ra_exchange *x = self;
    const int l = a->layer;
    x->stats.layers[l].begin = MPI_Wtime() - x->t0;
    return RA_OK;
}

/* Delta sends: every rank's travelling rows, packed, all-gathered and scattered. */
static int tsp_delta(struct ra_exchange *x, struct ra_kvcache *kv, int l, double t_enter)
{
    int rc, counts[RA_MAX_RANKS], displs[RA_MAX_RANKS];
    const int r = x->rank, p = x->size;
    for (int s = 0; s < p; s++) {
        counts[s] = ra_delta_rows(x, s);
        displs[s] = ra_delta_offset(x, s);
    }
    if ((rc = ra_delta_pack(x, kv, l)) != RA_OK)
        return rc;
    if (ra_delta_offset(x, p) == 0) /* nothing travels */
        return RA_OK;
    if ((rc = ra_transport_allgather(x->tr, ra_delta_piece(x, l, 0, 0), counts, displs)) != RA_OK ||
        (rc = ra_transport_allgather(x->tr, ra_delta_piece(x, l, 1, 0), counts, displs)) != RA_OK)
        return rc;
    if (x->netem && (rc = ra_netem_allgather(x, t_enter, counts)) != RA_OK)
        return rc;
    if ((rc = ra_delta_scatter(x, kv, l, 0, r)) != RA_OK)
        return rc;
    return ra_delta_scatter(x, kv, l, r + 1, p);
}

static int tsp_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct ra_exchange *x = self;
    const int l = a->layer;
    struct ra_kvcache *kv = a->kv;
    struct ra_layer_times *t = &x->stats.layers[l];
    int rc = RA_OK, counts[RA_MAX_RANKS], displs[RA_MAX_RANKS];
    if (x->delta) {
        if (l == 0 && (rc = ra_delta_stage(x, kv)) != RA_OK)
            return rc;
        t->wait_begin = t->send = MPI_Wtime() - x->t0;
        ra_watchdog_wait(RA_WATCH_ALLGATHER, l, -1);
        if ((rc = tsp_delta(x, kv, l, t->wait_begin)) == RA_OK) {
            t->wait_end = MPI_Wtime() - x->t0;
            x->stats.t_wait += t->wait_end - t->wait_begin;
        }
        ra_watchdog_done();
        return rc;
    }
    for (int r = 0; r < x->size; r++) {
        displs[r] = x->bounds[r];
        counts[r] = x->bounds[r + 1] - x->bounds[r];
    }
    if (ra_kvcache_first(kv, l) != 0) /* the displacements are positions from 0 */
        return ra_error_set(RA_EINVAL, "tsp: layer %d's KV rows do not start at position 0", l);
    t->wait_begin = t->send = MPI_Wtime() - x->t0;
    ra_watchdog_wait(RA_WATCH_ALLGATHER, l, -1);
    /* The transport counts what the all-gathers move (they return no status). */
    if ((rc = ra_transport_allgather(x->tr, (void *)kv->k[l], counts, displs)) != RA_OK ||
        (rc = ra_transport_allgather(x->tr, (void *)kv->v[l], counts, displs)) != RA_OK)
        goto out;
    if (x->netem && (rc = ra_netem_allgather(x, t->wait_begin, counts)) != RA_OK)
        goto out;
    t->wait_end = MPI_Wtime() - x->t0;
    x->stats.t_wait += t->wait_end - t->wait_begin;
out:
    ra_watchdog_done();
    return rc;
}

static int tsp_layer_end(void *self, const struct ra_hook_args *a)
{
    struct ra_exchange *x = self;
    const int l = a->layer;
    x->stats.layers[l].end = MPI_Wtime() - x->t0;
    return RA_OK;
}

void ra_tsp_hooks(struct ra_exchange *x)
{
    x->hooks = (struct ra_hook){
        .self = x,
        .layer_begin = tsp_layer_begin,
        .kv_ready = tsp_kv_ready,
        .layer_end = tsp_layer_end,
    };
}
