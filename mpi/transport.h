/* Transports: how KV rows move between ranks.
 *
 * The chain (chain.c) and TSP (tsp.c) never call MPI or NCCL on cache
 * pointers; they post sends and receives of whole KV rows, wait for them and
 * all-gather through a struct ra_transport. Rows are opaque bytes
 * (ra_kvcache_row_bytes), whatever their element type. Implementations:
 *
 *   mpi         host MPI on host KV rows (the CPU backend; today's behaviour)
 *   mpi-staged  host MPI on device KV rows, copied through pinned host buffers
 *               (copy_async + events); the fallback for device memory
 *   mpi-cuda    CUDA-aware MPI straight on device pointers, when the library
 *               says so at run time (MPIX_Query_cuda_support)
 *   nccl        NCCL on the backend's communication stream, ordered against
 *               compute by events (transport_nccl.c; NCCL is the CUDA module's)
 *
 * Requests live in the transport: receives in a set that the caller opens per
 * layer (ra_transport_recvs_reset) and completes with ra_transport_wait; sends
 * accumulate over a pass until ra_transport_wait_sends. Indices are the order
 * of posting, as MPI_Waitsome's. What "complete" means is the transport's: for
 * host MPI the rows are in place; for NCCL and the staged copies they will be
 * in place for any compute queued afterwards (the compute stream waits on an
 * event, the host does not).
 *
 * Bytes are counted as MPI's statuses tell them where there are statuses
 * (completed host-MPI receives), else from what was posted. */
#ifndef RA_TRANSPORT_H
#define RA_TRANSPORT_H

#include <mpi.h>
#include <stddef.h>

#include "backend.h"

enum ra_transport_kind { RA_TRANSPORT_AUTO = 0, RA_TRANSPORT_MPI, RA_TRANSPORT_MPI_CUDA, RA_TRANSPORT_NCCL };

/* "auto", "mpi", "mpi-cuda", "nccl" (the --transport values). */
const char *ra_transport_kind_name(enum ra_transport_kind k);
int ra_transport_parse(const char *s, enum ra_transport_kind *k);

enum ra_wait {
    RA_WAIT_ALL = 0, /* every pending receive */
    RA_WAIT_SOME,    /* at least one (MPI_Waitsome) */
    RA_TEST_SOME,    /* those already complete, maybe none (MPI_Testsome) */
};

struct ra_transport_counts {
    long long bytes_sent, bytes_recv;
    int msgs_sent, msgs_recv;
};

struct ra_transport;

struct ra_transport_ops {
    void (*destroy)(struct ra_transport *t);
    int (*begin)(struct ra_transport *t); /* a pass starts: no request is pending */
    int (*group_begin)(struct ra_transport *t);
    int (*group_end)(struct ra_transport *t);
    int (*post_send)(struct ra_transport *t, const void *rows_buf, int rows, int dest, int tag);
    int (*post_recv)(struct ra_transport *t, void *rows_buf, int rows, int source, int tag);
    int (*wait)(struct ra_transport *t, enum ra_wait how, int *n_done, int *idx);
    int (*progress)(struct ra_transport *t);
    int (*wait_sends)(struct ra_transport *t);
    int (*allgather)(struct ra_transport *t, void *buf, const int *counts, const int *displs);
};

struct ra_transport {
    const struct ra_transport_ops *ops;
    const char *name;            /* what it is, for reports: "mpi", "mpi-staged", "mpi-cuda", "nccl" */
    MPI_Comm comm;               /* the exchange's communicator, not a copy: PMPI counters see the KV on it */
    int rank, size;
    struct ra_backend *be;
    enum ra_mem mem;             /* where the KV rows live */
    size_t row_bytes;
    int n_recv, max_recv;        /* receives in the current set */
    int n_send, max_send;        /* sends of this pass */
    struct ra_transport_counts counts; /* of this pass */
};

/* Sets up a transport of `kind` for KV rows of `row_bytes` bytes in `mem` of
 * backend `be`, with room for max_recv receives per set and max_send sends per
 * pass. Collective over comm. AUTO picks mpi for host rows, and for device rows
 * nccl (built, one GPU per rank), else mpi-cuda (supported), else mpi-staged.
 * A kind that cannot work here is one error naming the rank: nccl not built or
 * ranks sharing a GPU, mpi-cuda without CUDA support in MPI, either on host rows. */
int ra_transport_init(struct ra_transport **out, enum ra_transport_kind kind, MPI_Comm comm, struct ra_backend *be,
                      enum ra_mem mem, size_t row_bytes, int max_recv, int max_send);
void ra_transport_free(struct ra_transport *t);

/* Does this MPI library move device memory (MPIX_Query_cuda_support at run time)? */
int ra_transport_mpi_cuda_supported(void);

/* Starts a pass: the send list and counters are cleared. */
static inline int ra_transport_begin(struct ra_transport *t)
{
    t->n_send = t->n_recv = 0;
    t->counts = (struct ra_transport_counts){ 0 };
    return t->ops->begin(t);
}
/* Opens a new receive set; the previous one must have completed. */
static inline void ra_transport_recvs_reset(struct ra_transport *t) { t->n_recv = 0; }
/* Posts between begin and end go out together (one NCCL group); no-ops for MPI. */
static inline int ra_transport_group_begin(struct ra_transport *t) { return t->ops->group_begin(t); }
static inline int ra_transport_group_end(struct ra_transport *t) { return t->ops->group_end(t); }
/* `rows` KV rows from/into rows_buf (a KV cache address); index = t->n_send / t->n_recv before the call. */
static inline int ra_transport_post_send(struct ra_transport *t, const void *rows_buf, int rows, int dest, int tag)
{
    return t->ops->post_send(t, rows_buf, rows, dest, tag);
}
static inline int ra_transport_post_recv(struct ra_transport *t, void *rows_buf, int rows, int source, int tag)
{
    return t->ops->post_recv(t, rows_buf, rows, source, tag);
}
/* Completes receives of the current set: n_done of them, their indices in idx
 * (room for max_recv) unless RA_WAIT_ALL; n_done = -1 when none was pending. */
static inline int ra_transport_wait(struct ra_transport *t, enum ra_wait how, int *n_done, int *idx)
{
    return t->ops->wait(t, how, n_done, idx);
}
/* Lets pending sends move (MPI's progress engine) without waiting. */
static inline int ra_transport_progress(struct ra_transport *t) { return t->ops->progress(t); }
/* Completes every send of the pass: the KV cache may change afterwards. */
static inline int ra_transport_wait_sends(struct ra_transport *t) { return t->ops->wait_sends(t); }
/* In place: rank r's rows [displs[r], displs[r] + counts[r]) of buf go to every rank. */
static inline int ra_transport_allgather(struct ra_transport *t, void *buf, const int *counts, const int *displs)
{
    return t->ops->allgather(t, buf, counts, displs);
}

/* Internal to the transports. */
int ra_transport_mpi_init(struct ra_transport **out, MPI_Comm comm, struct ra_backend *be, enum ra_mem mem,
                          size_t row_bytes, int max_recv, int max_send, int cuda_aware);
/* quiet: say nothing and return RA_EUNSUPPORTED where NCCL cannot work (for auto). */
int ra_transport_nccl_init(struct ra_transport **out, MPI_Comm comm, struct ra_backend *be, size_t row_bytes,
                           int max_recv, int max_send, int quiet);

#endif
