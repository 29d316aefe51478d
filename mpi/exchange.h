/* KV exchange between ranks: the hook that plugs MPI into a context's forward passes.
 *
 * KV-Runahead (chain.c): rank r receives rows [0, b_r) of each layer from the
 * ranks before it and passes rows on to the ranks after it, point to point.
 * TSP (tsp.c): every rank all-gathers every rank's rows of each layer. Both
 * move rows through a transport (transport.h: host MPI, CUDA-aware MPI, host
 * staging or NCCL), count the bytes it moved and time every layer, for reports
 * and traces. */
#ifndef RA_EXCHANGE_H
#define RA_EXCHANGE_H

#include <mpi.h>

#include "forward.h"
#include "status.h"
#include "transport.h"

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
    /* K and V payload as the transport saw it: received bytes from the statuses of
     * completed MPI receives; sent bytes (MPI reports none) from what was handed to it. */
    long long bytes_sent, bytes_recv;
    int msgs_sent, msgs_recv;
    struct ra_layer_times *layers;     /* [n_layers] */
};

#define RA_MAX_RANKS 1024

struct ra_netem; /* netem.h: an emulated link, or NULL */
struct ra_delta; /* delta.c: the travel set of delta sends, or NULL */

struct ra_exchange {
    MPI_Comm comm;
    int rank, size;
    enum ra_method method;
    enum ra_route route;
    int bounds[RA_MAX_RANKS + 1]; /* rank r owns positions [bounds[r], bounds[r+1]) */
    int n_layers;
    size_t row_bytes;       /* one KV row: ra_kvcache_row_bytes of the cache */
    struct ra_transport *tr;/* NULL until ra_exchange_attach_transport (or the first pass) */
    int n_recv;             /* this layer's receives, in posting order (the transport's indices) */
    int recv_piece[2 * RA_MAX_RANKS]; /* relay: receive i carries piece recv_piece[i] / 2, K (even) or V */
    int n_send, max_send;   /* every send of the pass, completed by ra_exchange_finish */
    double t0;
    struct ra_rank_stats stats;
    struct ra_hook hooks;   /* the method's entry of the context's hook list */
    struct ra_netem *netem; /* NULL unless --link-gbps: then every message also waits for the emulated link */
    struct ra_delta *delta; /* NULL unless ra_exchange_set_travel gave a travel set */
};

/* A zeroed struct ra_exchange may be freed. */
int ra_exchange_init(struct ra_exchange *x, MPI_Comm comm, enum ra_method method, enum ra_route route,
                     const int *bounds, int n_layers, size_t row_bytes);
void ra_exchange_free(struct ra_exchange *x);
/* Collective: moves the rows of `kv` (where they live, their size in bytes)
 * through a transport of `kind` (transport.h). A pass without one attaches
 * RA_TRANSPORT_AUTO for its KV cache. Nothing is attached where no rows move
 * (one rank, method single). */
int ra_exchange_attach_transport(struct ra_exchange *x, enum ra_transport_kind kind, const struct ra_kvcache *kv);
/* What moved the rows, for reports: "mpi", "mpi-staged", "mpi-cuda", "nccl", or "none". */
const char *ra_exchange_transport_name(const struct ra_exchange *x);
/* Starts a pass: clears the stats, readies the transport and takes t0. */
int ra_exchange_begin(struct ra_exchange *x);
/* Ends a pass: completes every send (timed as t_drain), so the KV cache may change again. */
int ra_exchange_finish(struct ra_exchange *x);
/* Delta sends (chunk reuse): which of this rank's rows [b_r, b_{r+1}) travel
 * in the passes that follow (travel[i] for row b_r + i, copied; NULL: every
 * row, the default). A row that does not travel must be in every receiver's
 * cache by the layer's kv_ready already (a reuse run installs it from the
 * store at layer_begin). The travelling positions move once per pass, ahead
 * of the rows; then each layer's K and V rows move packed and are scattered
 * into the receiver's cache. Counted in the stats like the rows. Every rank
 * of a pass sets a travel set, or none does (the lists are expected or not). */
int ra_exchange_set_travel(struct ra_exchange *x, const uint8_t *travel);

/* What one pass moves to and from rank r, by formula: rows of one layer's K
 * (V alike), and with delta sends the positions in the lists. Full sends
 * (n_travel NULL) follow the paper's traffic model: KVR rank r receives the
 * prefix [0, b_r) whatever the route and sends [0, b_{r+1}) (chain, relay) or
 * its own rows to every later rank (direct); TSP every rank receives every
 * other slice and sends its own to all (Eqs. 4-7). Delta sends
 * (n_travel[s]: travelling rows of rank s's slice) move the same, counted in
 * travelling rows only, and each of those rows' positions once (4 bytes). */
struct ra_traffic {
    long long rows_sent, rows_recv;   /* per layer, K or V */
    long long list_sent, list_recv;   /* positions (int32), per pass */
    long long bytes_sent, bytes_recv; /* every layer's K and V rows and the lists */
};
void ra_exchange_traffic(enum ra_method method, enum ra_route route, const int *bounds, int size, int rank,
                         int n_layers, size_t row_bytes, const int *n_travel, struct ra_traffic *t);
/* The hook a pass adds to its context (NULL for a single rank: nothing moves). */
const struct ra_hook *ra_exchange_hooks(struct ra_exchange *x);

/* Internal to mpi/: set up the method's hooks. */
void ra_chain_hooks(struct ra_exchange *x);
/* The largest tag a chain pass uses (K and V of every layer and rank's slice), and the
 * set-up check of it against the MPI library's MPI_TAG_UB: one line naming the rank when
 * the run would need more (a larger tag fails the send, or wraps into another message's). */
long long ra_chain_max_tag(int n_layers, int size);
int ra_chain_check_tags(int n_layers, int size, int rank, long long tag_ub);
void ra_tsp_hooks(struct ra_exchange *x);
/* `rows` KV rows at `buf` (a KV cache address) through the transport, and the emulated link. */
int ra_exchange_post_send(struct ra_exchange *x, const void *buf, int rows, int dest, int tag);
int ra_exchange_post_recv(struct ra_exchange *x, void *buf, int rows, int source, int tag);
/* Delta sends (delta.c). The position lists, at the pass's start (after the netem's begin). */
int ra_delta_begin(struct ra_exchange *x);
/* Adds the lists' bytes and messages to x->stats (after the transport's). */
void ra_delta_count(struct ra_exchange *x);
void ra_delta_free(struct ra_delta *d);
/* The layer's staging of the pieces this rank holds (pieces 0..r for KVR, all for TSP),
 * packed in position order: K (kind 0) or V, grown to fit at a pass's first layer. */
int ra_delta_stage(struct ra_exchange *x, const struct ra_kvcache *kv);
void *ra_delta_piece(const struct ra_exchange *x, int layer, int kind, int piece);
/* Travelling rows of piece s, and of pieces [0, s) (the offset of s in the staging). */
int ra_delta_rows(const struct ra_exchange *x, int piece);
int ra_delta_offset(const struct ra_exchange *x, int piece);
/* This rank's travelling rows of layer `layer` from the cache into its piece of the staging. */
int ra_delta_pack(struct ra_exchange *x, struct ra_kvcache *kv, int layer);
/* Pieces [from, to) of the staging into the cache at their positions. */
int ra_delta_scatter(struct ra_exchange *x, struct ra_kvcache *kv, int layer, int from, int to);

#endif
