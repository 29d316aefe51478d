/* The NCCL transport: KV rows between GPUs, one GPU per rank. NCCL is the
 * CUDA module's (kernels/cuda_module.h: struct ra_cuda_nccl), so this file
 * builds without CUDA and, where the module is not there, says so.
 *
 * The communicator comes from the MPI world: rank 0 makes the unique id and
 * MPI_Bcast hands it to the others. Every operation is queued on the
 * backend's communication stream (stream_native(RA_STREAM_COMM)) and the host
 * never waits for it, except at the end of a pass (wait_sends). Events order
 * it against compute:
 *   - a group that sends waits for the compute queued so far (the K,V rows of
 *     the layer were written there);
 *   - completing receives makes the compute stream wait for the communication
 *     queued so far, so a layer's receive, posted at its start, runs while the
 *     GPU computes the layer's QKV, and attention waits for it on the GPU.
 * Each chain group is one ncclGroupStart/ncclGroupEnd. NCCL matches sends and
 * receives between two ranks by order, not by tag; every route posts them in
 * the same order on both sides. TSP uses ncclAllGather in place when the
 * slices are equal (an even split of a divisible prompt), else one
 * ncclBroadcast per rank in a group (an all-gather of unequal blocks). */
#include "config.h"
#include "transport.h"
#include "ra_mpi.h"

#include "backend_cuda.h"
#include "cuda_module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NCCL's ops, set by ra_transport_nccl_init before anything else here runs. */
static const struct ra_cuda_nccl *nccl;

/* Prefixes the module's line ("ncclSend: unhandled cuda error (...)") with where and which rank. */
static int nccl_error(int rc, const char *file, int line)
{
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return ra_error_set(rc, "%s:%d: rank %d: %s", file, line, rank, ra_error_message());
}

/* In a function with `int rc` and an `out:` cleanup label. */
#define NCCL_CHECK(call)                                                         \
    do {                                                                         \
        if ((rc = (call)) != RA_OK) {                                            \
            rc = nccl_error(rc, __FILE__, __LINE__);                             \
            goto out;                                                            \
        }                                                                        \
    } while (0)

struct nccl_transport {
    struct ra_transport base;
    void *comm;              /* ncclComm_t */
    void *stream;            /* the backend's RA_STREAM_COMM (a cudaStream_t) */
    struct ra_event *ev;
    int in_group, fenced;    /* inside a group; its sends already wait for compute */
    int *recv_rows;          /* [max_recv] rows of each receive, counted when it completes */
    int reported;            /* receives [0, reported) of the set were reported done */
};

static struct nccl_transport *nccl_of(struct ra_transport *t) { return (struct nccl_transport *)t; }

/* An operation that failed on a peer or in the network shows up here, not at its call. */
static int check_async(struct nccl_transport *n)
{
    int rc = RA_OK;
    NCCL_CHECK(nccl->async_error(n->comm));
out:
    return rc;
}

/* The pass's receives must not overwrite rows the last pass's compute may still read. */
static int nccl_begin(struct ra_transport *t)
{
    struct nccl_transport *n = nccl_of(t);
    n->reported = 0;
    n->fenced = n->in_group = 0;
    return ra_backend_fence(t->be, n->ev, RA_STREAM_COMPUTE, RA_STREAM_COMM);
}

static int nccl_group_begin(struct ra_transport *t)
{
    struct nccl_transport *n = nccl_of(t);
    int rc = RA_OK;
    NCCL_CHECK(nccl->group_start());
    n->in_group = 1;
    n->fenced = 0;
out:
    return rc;
}

static int nccl_group_end(struct ra_transport *t)
{
    struct nccl_transport *n = nccl_of(t);
    int rc = RA_OK;
    n->in_group = 0;
    NCCL_CHECK(nccl->group_end());
out:
    return rc;
}

static int nccl_post_send(struct ra_transport *t, const void *buf, int rows, int dest, int tag)
{
    struct nccl_transport *n = nccl_of(t);
    const size_t bytes = (size_t)rows * t->row_bytes;
    int rc = RA_OK;
    if (t->n_send == t->max_send)
        return ra_error_set(RA_ECOMM, "rank %d: too many pending sends", t->rank);
    /* Queued before the group's kernels, which NCCL launches at ncclGroupEnd. */
    if ((!n->in_group || !n->fenced) &&
        (rc = ra_backend_fence(t->be, n->ev, RA_STREAM_COMPUTE, RA_STREAM_COMM)) != RA_OK)
        return rc;
    n->fenced = 1;
    NCCL_CHECK(nccl->send(buf, bytes, dest, n->comm, n->stream));
    t->n_send++;
    t->counts.bytes_sent += (long long)bytes;
    t->counts.msgs_sent++;
out:
    return rc;
}

static int nccl_post_recv(struct ra_transport *t, void *buf, int rows, int source, int tag)
{
    struct nccl_transport *n = nccl_of(t);
    int rc = RA_OK;
    if (t->n_recv == t->max_recv)
        return ra_error_set(RA_ECOMM, "rank %d: too many pending receives", t->rank);
    if (n->reported > t->n_recv) /* a new set */
        n->reported = t->n_recv;
    NCCL_CHECK(nccl->recv(buf, (size_t)rows * t->row_bytes, source, n->comm, n->stream));
    n->recv_rows[t->n_recv++] = rows;
out:
    return rc;
}

/* Every pending receive is complete as far as compute is concerned: compute
 * waits for the communication stream. NCCL has no statuses: the rows are those posted. */
static int nccl_wait(struct ra_transport *t, enum ra_wait how, int *n_done, int *idx)
{
    struct nccl_transport *n = nccl_of(t);
    int rc;
    if (n->reported > t->n_recv)
        n->reported = t->n_recv;
    if (n->reported == t->n_recv) {
        *n_done = how == RA_WAIT_ALL ? 0 : -1;
        return RA_OK;
    }
    if ((rc = ra_backend_fence(t->be, n->ev, RA_STREAM_COMM, RA_STREAM_COMPUTE)) != RA_OK)
        return rc;
    *n_done = t->n_recv - n->reported;
    for (int k = 0, i = n->reported; i < t->n_recv; i++, k++) {
        if (idx && how != RA_WAIT_ALL)
            idx[k] = i;
        t->counts.bytes_recv += (long long)n->recv_rows[i] * (long long)t->row_bytes;
        t->counts.msgs_recv++;
    }
    n->reported = t->n_recv;
    return RA_OK;
}

static int nccl_progress(struct ra_transport *t) { return check_async(nccl_of(t)); }

static int nccl_wait_sends(struct ra_transport *t)
{
    struct nccl_transport *n = nccl_of(t);
    int rc = ra_backend_drain(t->be, n->ev, RA_STREAM_COMM);
    return rc == RA_OK ? check_async(n) : rc;
}

static int nccl_allgather(struct ra_transport *t, void *buf, const int *counts, const int *displs)
{
    struct nccl_transport *n = nccl_of(t);
    char *b = buf;
    const size_t rb = t->row_bytes;
    int rc, equal = 1;
    for (int r = 0; r < t->size; r++)
        equal &= counts[r] == counts[0] && displs[r] == r * counts[0];
    if ((rc = ra_backend_fence(t->be, n->ev, RA_STREAM_COMPUTE, RA_STREAM_COMM)) != RA_OK)
        return rc;
    if (equal) { /* in place: our block already sits at rank * count */
        NCCL_CHECK(nccl->allgather(b + (size_t)displs[t->rank] * rb, b, (size_t)counts[0] * rb, n->comm, n->stream));
    } else {
        NCCL_CHECK(nccl->group_start());
        for (int r = 0; r < t->size; r++) {
            char *block = b + (size_t)displs[r] * rb;
            NCCL_CHECK(nccl->broadcast(block, block, (size_t)counts[r] * rb, r, n->comm, n->stream));
        }
        NCCL_CHECK(nccl->group_end());
    }
    if ((rc = ra_backend_fence(t->be, n->ev, RA_STREAM_COMM, RA_STREAM_COMPUTE)) != RA_OK)
        goto out;
    /* Counted as the MPI all-gather counts: the blocks it was told to move. */
    for (int r = 0; r < t->size; r++)
        if (r != t->rank)
            t->counts.bytes_recv += (long long)counts[r] * (long long)rb;
    t->counts.bytes_sent += (long long)counts[t->rank] * (t->size - 1) * (long long)rb;
    t->counts.msgs_sent += t->size - 1;
    t->counts.msgs_recv += t->size - 1;
out:
    return rc;
}

static void nccl_destroy(struct ra_transport *t)
{
    struct nccl_transport *n = nccl_of(t);
    if (n->comm)
        nccl->comm_destroy(n->comm);
    if (n->ev)
        t->be->ops->event_destroy(t->be, n->ev);
    free(n->recv_rows);
    free(n);
}

static const struct ra_transport_ops nccl_ops = {
    .destroy = nccl_destroy,
    .begin = nccl_begin,
    .group_begin = nccl_group_begin,
    .group_end = nccl_group_end,
    .post_send = nccl_post_send,
    .post_recv = nccl_post_recv,
    .wait = nccl_wait,
    .progress = nccl_progress,
    .wait_sends = nccl_wait_sends,
    .allgather = nccl_allgather,
};

/* NCCL needs one GPU per rank. Collective: every rank learns every rank's GPU
 * (node name and PCI bus id) and reaches the same verdict. */
#define GPU_KEY 320

static int check_one_gpu_per_rank(MPI_Comm comm, int rank, int size, int quiet)
{
    char mine[GPU_KEY] = { 0 }, host[MPI_MAX_PROCESSOR_NAME] = { 0 }, bus[32] = { 0 }, *all = NULL;
    int len = 0, rc = RA_OK;
    if (nccl->device_bus_id(bus, (int)sizeof bus) == RA_OK && MPI_Get_processor_name(host, &len) == MPI_SUCCESS)
        snprintf(mine, sizeof mine, "%s %s", host, bus);
    if (!(all = calloc((size_t)size, GPU_KEY)))
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
    MPI_CHECK(MPI_Allgather(mine, GPU_KEY, MPI_CHAR, all, GPU_KEY, MPI_CHAR, comm));
    for (int a = 0; a < size; a++) {
        const char *ka = all + (size_t)a * GPU_KEY;
        if (!*ka) {
            rc = quiet ? RA_EUNSUPPORTED
                       : ra_error_set(RA_EBACKEND, "rank %d: --transport nccl: rank %d cannot tell its GPU "
                                      "(cudaGetDevice/cudaDeviceGetPCIBusId failed)", rank, a);
            goto out;
        }
        for (int b = a + 1; b < size; b++)
            if (!strcmp(ka, all + (size_t)b * GPU_KEY)) {
                rc = quiet ? RA_EUNSUPPORTED
                           : ra_error_set(RA_EUNSUPPORTED, "rank %d: --transport nccl needs one GPU per rank, but ranks "
                                          "%d and %d share GPU %s: use --transport mpi or mpi-cuda", rank, a, b, ka);
                goto out;
            }
    }
out:
    free(all);
    return rc;
}

/* Every rank leaves with a failure if any rank failed, the others saying so. */
static int agree(int rc, MPI_Comm comm, int rank)
{
    const int all = ra_mpi_agree(rc, comm, NULL);
    if (all != RA_OK && rc == RA_OK)
        return ra_error_set(all, "rank %d: setting up NCCL failed on another rank", rank);
    return rc;
}

static int nccl_new(struct nccl_transport **out, MPI_Comm comm, int rank, int size, struct ra_backend *be,
                    void *stream, size_t row_bytes, int max_recv, int max_send)
{
    struct nccl_transport *n = calloc(1, sizeof *n);
    if (!n || !(n->recv_rows = calloc((size_t)max_recv, sizeof *n->recv_rows))) {
        free(n);
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
    }
    struct ra_transport *t = &n->base;
    t->ops = &nccl_ops;
    t->name = "nccl";
    t->comm = comm;
    t->rank = rank;
    t->size = size;
    t->be = be;
    t->mem = RA_MEM_DEVICE;
    t->row_bytes = row_bytes;
    t->max_recv = max_recv;
    t->max_send = max_send;
    n->stream = stream;
    *out = n;
    return be->ops->event_create(be, &n->ev);
}

/* NCCL's unique id is 128 bytes (NCCL_UNIQUE_ID_BYTES); the module says so too. */
#define NCCL_ID_BYTES 128

int ra_transport_nccl_init(struct ra_transport **out, MPI_Comm comm, struct ra_backend *be, size_t row_bytes,
                           int max_recv, int max_send, int quiet)
{
    struct nccl_transport *n = NULL;
    struct {
        int status;
        char id[NCCL_ID_BYTES];
    } hello = { RA_OK };
    int rank = -1, size = 0, rc = RA_OK;
    *out = NULL;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    /* The same backend on every rank: all see a stream, or none does. */
    void *stream = be->ops->stream_native(be, RA_STREAM_COMM);
    if (!stream)
        return quiet ? RA_EUNSUPPORTED
                     : ra_error_set(RA_EUNSUPPORTED, "rank %d: --transport nccl: the %s backend has no device stream",
                                    rank, be->ops->name);
    /* A device stream means the CUDA module is loaded, on every rank. */
    if (!(nccl = ra_cuda_nccl()) || nccl->id_bytes != NCCL_ID_BYTES)
        return quiet ? RA_EUNSUPPORTED : ra_error_set(RA_EUNSUPPORTED, "rank %d: --transport nccl: %s", rank,
                            nccl ? "the CUDA module's NCCL id is not 128 bytes" : ra_error_message());
    if ((rc = check_one_gpu_per_rank(comm, rank, size, quiet)) != RA_OK)
        return rc;
    if (rank == 0 && (hello.status = nccl->get_unique_id(hello.id)) != RA_OK)
        hello.status = nccl_error(hello.status, __FILE__, __LINE__);
    /* Rank 0's verdict travels with the id, so nobody waits for a communicator that will not come. */
    MPI_CHECK(MPI_Bcast(&hello, (int)sizeof hello, MPI_BYTE, 0, comm));
    if (hello.status != RA_OK)
        return rank == 0 ? hello.status
                         : ra_error_set(RA_ECOMM, "rank %d: rank 0 could not create the NCCL unique id", rank);
    rc = nccl_new(&n, comm, rank, size, be, stream, row_bytes, max_recv, max_send);
    /* ncclCommInitRank blocks until every rank has called it: all enter or none. */
    if ((rc = agree(rc, comm, rank)) != RA_OK)
        goto fail;
    NCCL_CHECK(nccl->comm_init(&n->comm, size, hello.id, rank));
out:
    if ((rc = agree(rc, comm, rank)) != RA_OK)
        goto fail;
    *out = &n->base;
    return RA_OK;
fail:
    if (n)
        nccl_destroy(&n->base);
    return rc;
}
