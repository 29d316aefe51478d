/* KV exchange between ranks: the hooks that plug MPI into ra_forward_span.
 *
 * KV-Runahead (chain.c): rank r receives rows [0, b_r) of each layer from the
 * ranks before it and passes rows on to the ranks after it, point to point.
 * TSP (tsp.c): every rank all-gathers every rank's rows of each layer. Both
 * count the bytes MPI moved and time every layer, for reports and traces. */
#ifndef RA_EXCHANGE_H
#define RA_EXCHANGE_H

#include <mpi.h>

#include "forward.h"

enum ra_method { RA_METHOD_SINGLE = 0, RA_METHOD_KVR, RA_METHOD_TSP };
enum ra_route { RA_ROUTE_CHAIN = 0, RA_ROUTE_RELAY, RA_ROUTE_DIRECT };

const char *ra_method_name(enum ra_method m);
const char *ra_route_name(enum ra_route r);
int ra_method_parse(const char *s, enum ra_method *m);
int ra_route_parse(const char *s, enum ra_route *r);

/* Seconds since the pass began, per layer. */
struct ra_layer_times {
    double begin, wait_begin, wait_end, send, end;
};

struct ra_rank_stats {
    double t_total, t_wait, t_drain;   /* t_compute = t_total - t_wait - t_drain */
    /* K and V payload as MPI saw it: received bytes from the statuses of completed
     * receives; sent bytes (MPI reports none) from what was handed to MPI. */
    long long bytes_sent, bytes_recv;
    int msgs_sent, msgs_recv;
    struct ra_layer_times *layers;     /* [n_layers] */
};

#define RA_MAX_RANKS 1024

struct ra_netem; /* netem.h: an emulated link, or NULL */

struct ra_exchange {
    MPI_Comm comm;
    int rank, size;
    enum ra_method method;
    enum ra_route route;
    int bounds[RA_MAX_RANKS + 1]; /* rank r owns positions [bounds[r], bounds[r+1]) */
    int n_layers;
    MPI_Datatype row;       /* one KV row: ra_kvcache_row_bytes bytes */
    size_t row_bytes;       /* MPI_Type_size of row */
    MPI_Request *recv;      /* this layer's receives */
    MPI_Status *recv_status;/* their statuses, where the received bytes are counted */
    int n_recv;
    MPI_Request *send;      /* every send of the pass, completed by ra_exchange_finish */
    int n_send, max_send;
    double t0;
    struct ra_rank_stats stats;
    struct ra_kv_exchange hooks;
    struct ra_netem *netem; /* NULL unless --link-gbps: then every message also waits for the emulated link */
};

int ra_exchange_init(struct ra_exchange *x, MPI_Comm comm, enum ra_method method, enum ra_route route,
                     const int *bounds, int n_layers, size_t row_bytes);
void ra_exchange_free(struct ra_exchange *x);
/* Starts a pass: clears the stats and takes t0. */
void ra_exchange_begin(struct ra_exchange *x);
/* Ends a pass: completes every send (timed as t_drain), so the KV cache may change again. */
int ra_exchange_finish(struct ra_exchange *x);
/* The hooks for ra_forward_span (NULL for a single rank). */
const struct ra_kv_exchange *ra_exchange_hooks(struct ra_exchange *x);

/* Internal to mpi/: set up the method's hooks. */
void ra_chain_hooks(struct ra_exchange *x);
void ra_tsp_hooks(struct ra_exchange *x);
int ra_exchange_post_send(struct ra_exchange *x, const void *buf, int rows, int dest, int tag);
int ra_exchange_post_recv(struct ra_exchange *x, void *buf, int rows, int source, int tag);
/* Counts n completed receives from their statuses. */
int ra_exchange_count_recvs(struct ra_exchange *x, const MPI_Status *st, int n);

#endif
