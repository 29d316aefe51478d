/* The MPI transports: host MPI on host rows, CUDA-aware MPI on device rows,
 * and host MPI on device rows staged through pinned host buffers.
 *
 * On host rows this is exactly the exchange as it was before transports: one
 * MPI_Isend / MPI_Irecv per message straight on the KV cache, nothing copied,
 * nothing allocated per message.
 *
 * Device rows are written by the backend's compute stream, which MPI knows
 * nothing of. CUDA-aware MPI therefore waits (event_sync) for the compute
 * queued so far before handing rows to MPI; a completed receive is in device
 * memory already. Staging copies rows out on the copy stream after the
 * compute that wrote them (stream_wait), waits for the copy, and sends the
 * pinned copy; a completed receive is copied in on the copy stream, and the
 * compute stream waits for that copy (the host does not). The pinned buffers
 * come from a pool that grows during the first pass and is reused by every
 * later one. */
#include "transport.h"
#include "ra_mpi.h"

#include <stdlib.h>
#include <string.h>

/* Pinned memory is slow to allocate: take it in large chunks. */
#define POOL_CHUNK (32u << 20)
#define POOL_ALIGN 256

struct chunk {
    char *base;
    size_t size, used;
    struct chunk *next;
};

struct stage {
    void *dev;   /* the KV cache rows */
    void *host;  /* their pinned copy */
    size_t bytes;
};

struct mpi_transport {
    struct ra_transport base;
    MPI_Datatype row;         /* one KV row: row_bytes bytes */
    MPI_Request *recv, *send; /* [max_recv], [max_send] */
    MPI_Status *status;       /* [max_recv] */
    int device;               /* rows live in device memory */
    int staged;               /* ... and travel through pinned host buffers */
    struct ra_event *ev;
    struct stage *recv_stage; /* [max_recv] */
    struct chunk *pool, *cur;
};

static struct mpi_transport *mpi_of(struct ra_transport *t) { return (struct mpi_transport *)t; }

/* ------------------------------------------------------------------ the pinned pool (staging) */

static int pool_take(struct mpi_transport *m, size_t bytes, void **p)
{
    struct ra_backend *be = m->base.be;
    bytes = (bytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
    struct chunk **tail = &m->pool;
    for (struct chunk *c = m->cur; c; c = c->next)
        if (c->size - c->used >= bytes) {
            *p = c->base + c->used;
            c->used += bytes;
            m->cur = c;
            return RA_OK;
        }
    while (*tail)
        tail = &(*tail)->next;
    struct chunk *c = calloc(1, sizeof *c);
    const size_t size = bytes > POOL_CHUNK ? bytes : POOL_CHUNK;
    if (!c || !(c->base = be->ops->alloc_mem(be, size, RA_MEM_HOST_PINNED))) {
        free(c);
        return ra_error_set(RA_ENOMEM, "rank %d: cannot allocate %zu bytes of pinned host memory for staging KV rows",
                            m->base.rank, size);
    }
    c->size = size;
    c->used = bytes;
    *tail = c;
    m->cur = c;
    *p = c->base;
    return RA_OK;
}

static void pool_rewind(struct mpi_transport *m)
{
    for (struct chunk *c = m->pool; c; c = c->next)
        c->used = 0;
    m->cur = m->pool;
}

static void pool_free(struct mpi_transport *m)
{
    struct ra_backend *be = m->base.be;
    for (struct chunk *c = m->pool, *next; c; c = next) {
        next = c->next;
        be->ops->release_mem(be, c->base, RA_MEM_HOST_PINNED);
        free(c);
    }
    m->pool = m->cur = NULL;
}

/* ------------------------------------------------------------------ ordering against compute */

/* Later work on `waiter` waits for what is queued on `s` now (through the transport's event). */
static int fence(struct mpi_transport *m, enum ra_stream s, enum ra_stream waiter)
{
    return ra_backend_fence(m->base.be, m->ev, s, waiter);
}

/* The host waits for what is queued on `s` now. */
static int drain(struct mpi_transport *m, enum ra_stream s) { return ra_backend_drain(m->base.be, m->ev, s); }

/* What MPI may read for device rows at `buf`: the rows themselves once compute
 * has written them (CUDA-aware), or a pinned copy of them (staged). */
static int device_source(struct mpi_transport *m, const void *buf, size_t bytes, const void **src)
{
    struct ra_backend *be = m->base.be;
    void *host;
    int rc;
    if (!m->staged) {
        *src = buf;
        return drain(m, RA_STREAM_COMPUTE);
    }
    if ((rc = fence(m, RA_STREAM_COMPUTE, RA_STREAM_COPY)) != RA_OK || (rc = pool_take(m, bytes, &host)) != RA_OK)
        return rc;
    if ((rc = be->ops->copy_async(be, host, buf, bytes, RA_STREAM_COPY)) != RA_OK ||
        (rc = drain(m, RA_STREAM_COPY)) != RA_OK)
        return rc;
    *src = host;
    return RA_OK;
}

/* ------------------------------------------------------------------ the ops */

/* A new pass writes received rows into the cache, which the last pass's
 * compute may still be reading on the device: MPI (CUDA-aware) writes once the
 * host has seen that compute end; staged copies are queued after it. */
static int mpi_begin(struct ra_transport *t)
{
    struct mpi_transport *m = mpi_of(t);
    pool_rewind(m);
    if (!m->device)
        return RA_OK;
    return m->staged ? fence(m, RA_STREAM_COMPUTE, RA_STREAM_COPY) : drain(m, RA_STREAM_COMPUTE);
}

static int mpi_group(struct ra_transport *t) { return RA_OK; }

static int mpi_post_send(struct ra_transport *t, const void *buf, int rows, int dest, int tag)
{
    struct mpi_transport *m = mpi_of(t);
    const void *src = buf;
    int rc = RA_OK;
    if (t->n_send == t->max_send)
        return ra_error_set(RA_ECOMM, "rank %d: too many pending sends", t->rank);
    if (m->device && (rc = device_source(m, buf, (size_t)rows * t->row_bytes, &src)) != RA_OK)
        return rc;
    MPI_CHECK(MPI_Isend(src, rows, m->row, dest, tag, t->comm, &m->send[t->n_send]));
    t->n_send++;
    /* MPI reports no count for a send, so count what was handed to MPI_Isend:
     * rows of m->row, MPI_Type_size(m->row) bytes each. Receivers count from statuses. */
    t->counts.bytes_sent += (long long)rows * (long long)t->row_bytes;
    t->counts.msgs_sent++;
out:
    return rc;
}

static int mpi_post_recv(struct ra_transport *t, void *buf, int rows, int source, int tag)
{
    struct mpi_transport *m = mpi_of(t);
    void *dst = buf;
    int rc = RA_OK;
    if (t->n_recv == t->max_recv)
        return ra_error_set(RA_ECOMM, "rank %d: too many pending receives", t->rank);
    if (m->staged) {
        struct stage *s = &m->recv_stage[t->n_recv];
        s->dev = buf;
        s->bytes = (size_t)rows * t->row_bytes;
        if ((rc = pool_take(m, s->bytes, &s->host)) != RA_OK)
            return rc;
        dst = s->host;
    }
    MPI_CHECK(MPI_Irecv(dst, rows, m->row, source, tag, t->comm, &m->recv[t->n_recv]));
    t->n_recv++; /* counted when it completes, from what arrived */
out:
    return rc;
}

static int count_recvs(struct mpi_transport *m, int n)
{
    struct ra_transport *t = &m->base;
    int rc = RA_OK;
    for (int i = 0; i < n; i++) {
        int rows;
        MPI_CHECK(MPI_Get_count(&m->status[i], m->row, &rows));
        if (rows == MPI_UNDEFINED) {
            rc = ra_error_set(RA_ECOMM, "rank %d: a message from rank %d (tag %d) is not whole KV rows", t->rank,
                              m->status[i].MPI_SOURCE, m->status[i].MPI_TAG);
            goto out;
        }
        t->counts.bytes_recv += (long long)rows * (long long)t->row_bytes;
        t->counts.msgs_recv++;
    }
out:
    return rc;
}

/* Staged: copy the completed receives in (all of the set, or those in idx), and
 * make compute wait for the copies. */
static int stage_in(struct mpi_transport *m, int n, const int *idx)
{
    struct ra_backend *be = m->base.be;
    int rc = RA_OK;
    for (int k = 0; k < n && rc == RA_OK; k++) {
        const struct stage *s = &m->recv_stage[idx ? idx[k] : k];
        rc = be->ops->copy_async(be, s->dev, s->host, s->bytes, RA_STREAM_COPY);
    }
    return rc == RA_OK ? fence(m, RA_STREAM_COPY, RA_STREAM_COMPUTE) : rc;
}

static int mpi_wait(struct ra_transport *t, enum ra_wait how, int *n_done, int *idx)
{
    struct mpi_transport *m = mpi_of(t);
    int rc = RA_OK, done = t->n_recv;
    if (how == RA_WAIT_ALL)
        MPI_CHECK(MPI_Waitall(t->n_recv, m->recv, m->status));
    else if (how == RA_WAIT_SOME)
        MPI_CHECK(MPI_Waitsome(t->n_recv, m->recv, &done, idx, m->status));
    else
        MPI_CHECK(MPI_Testsome(t->n_recv, m->recv, &done, idx, m->status));
    *n_done = done == MPI_UNDEFINED ? -1 : done;
    if (done == MPI_UNDEFINED || done == 0)
        goto out;
    if ((rc = count_recvs(m, done)) != RA_OK)
        goto out;
    if (m->staged)
        rc = stage_in(m, done, how == RA_WAIT_ALL ? NULL : idx);
out:
    return rc;
}

static int mpi_progress(struct ra_transport *t)
{
    struct mpi_transport *m = mpi_of(t);
    int flag, rc = RA_OK;
    if (t->n_send)
        MPI_CHECK(MPI_Testall(t->n_send, m->send, &flag, MPI_STATUSES_IGNORE));
out:
    return rc;
}

static int mpi_wait_sends(struct ra_transport *t)
{
    struct mpi_transport *m = mpi_of(t);
    int rc = RA_OK;
    MPI_CHECK(MPI_Waitall(t->n_send, m->send, MPI_STATUSES_IGNORE));
    /* The copies in of this pass read pinned buffers the next pass reuses. */
    if (m->staged)
        rc = drain(m, RA_STREAM_COPY);
out:
    return rc;
}

/* Staged all-gather: our block out to a pinned image of the whole buffer, the
 * all-gather there, every other block back in. */
static int staged_allgather(struct mpi_transport *m, char *buf, const int *counts, const int *displs)
{
    struct ra_transport *t = &m->base;
    struct ra_backend *be = t->be;
    const size_t rb = t->row_bytes;
    size_t rows = 0;
    char *host;
    int rc;
    for (int r = 0; r < t->size; r++)
        if ((size_t)displs[r] + (size_t)counts[r] > rows)
            rows = (size_t)displs[r] + (size_t)counts[r];
    if ((rc = fence(m, RA_STREAM_COMPUTE, RA_STREAM_COPY)) != RA_OK || (rc = pool_take(m, rows * rb, (void **)&host)) != RA_OK)
        return rc;
    const size_t mine = (size_t)displs[t->rank] * rb;
    if ((rc = be->ops->copy_async(be, host + mine, buf + mine, (size_t)counts[t->rank] * rb, RA_STREAM_COPY)) != RA_OK ||
        (rc = drain(m, RA_STREAM_COPY)) != RA_OK)
        return rc;
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, counts, displs, m->row, t->comm));
    for (int r = 0; r < t->size && rc == RA_OK; r++)
        if (r != t->rank)
            rc = be->ops->copy_async(be, buf + (size_t)displs[r] * rb, host + (size_t)displs[r] * rb,
                                     (size_t)counts[r] * rb, RA_STREAM_COPY);
    if (rc == RA_OK)
        rc = fence(m, RA_STREAM_COPY, RA_STREAM_COMPUTE);
out:
    return rc;
}

static int mpi_allgather(struct ra_transport *t, void *buf, const int *counts, const int *displs)
{
    struct mpi_transport *m = mpi_of(t);
    int rc = RA_OK;
    if (m->staged)
        rc = staged_allgather(m, buf, counts, displs);
    else {
        if (m->device && (rc = drain(m, RA_STREAM_COMPUTE)) != RA_OK)
            goto out;
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, m->row, t->comm));
    }
    if (rc != RA_OK)
        goto out;
    /* A collective returns no status, so count from the counts MPI was given:
     * every other rank's block arrived here, and ours went to every other rank.
     * Which ranks forward what inside MPI is its algorithm's business. */
    for (int r = 0; r < t->size; r++)
        if (r != t->rank)
            t->counts.bytes_recv += (long long)counts[r] * (long long)t->row_bytes;
    t->counts.bytes_sent += (long long)counts[t->rank] * (t->size - 1) * (long long)t->row_bytes;
    t->counts.msgs_sent += t->size - 1;
    t->counts.msgs_recv += t->size - 1;
out:
    return rc;
}

static void mpi_destroy(struct ra_transport *t)
{
    struct mpi_transport *m = mpi_of(t);
    if (m->row != MPI_DATATYPE_NULL)
        MPI_Type_free(&m->row);
    pool_free(m);
    if (m->ev)
        t->be->ops->event_destroy(t->be, m->ev);
    free(m->recv);
    free(m->send);
    free(m->status);
    free(m->recv_stage);
    free(m);
}

static const struct ra_transport_ops mpi_ops = {
    .destroy = mpi_destroy,
    .begin = mpi_begin,
    .group_begin = mpi_group,
    .group_end = mpi_group,
    .post_send = mpi_post_send,
    .post_recv = mpi_post_recv,
    .wait = mpi_wait,
    .progress = mpi_progress,
    .wait_sends = mpi_wait_sends,
    .allgather = mpi_allgather,
};

int ra_transport_mpi_init(struct ra_transport **out, MPI_Comm comm, struct ra_backend *be, enum ra_mem mem,
                          size_t row_bytes, int max_recv, int max_send, int cuda_aware)
{
    struct mpi_transport *m = calloc(1, sizeof *m);
    int rc = RA_OK, rank = -1;
    *out = NULL;
    MPI_Comm_rank(comm, &rank);
    if (!m)
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
    struct ra_transport *t = &m->base;
    m->row = MPI_DATATYPE_NULL;
    t->ops = &mpi_ops;
    t->comm = comm;
    t->rank = rank;
    t->be = be;
    t->mem = mem;
    t->row_bytes = row_bytes;
    t->max_recv = max_recv;
    t->max_send = max_send;
    m->device = mem == RA_MEM_DEVICE;
    m->staged = m->device && !cuda_aware;
    t->name = !m->device ? "mpi" : m->staged ? "mpi-staged" : "mpi-cuda";
    MPI_CHECK(MPI_Comm_size(comm, &t->size));
    if (row_bytes == 0 || row_bytes > (size_t)1 << 30) {
        rc = ra_error_set(RA_EINVAL, "rank %d: a KV row of %zu bytes cannot be one MPI datatype", rank, row_bytes);
        goto out;
    }
    MPI_CHECK(MPI_Type_contiguous((int)row_bytes, MPI_BYTE, &m->row));
    MPI_CHECK(MPI_Type_commit(&m->row));
    m->recv = calloc((size_t)max_recv, sizeof *m->recv);
    m->status = calloc((size_t)max_recv, sizeof *m->status);
    m->send = calloc((size_t)max_send, sizeof *m->send);
    m->recv_stage = m->staged ? calloc((size_t)max_recv, sizeof *m->recv_stage) : NULL;
    if (!m->recv || !m->status || !m->send || (m->staged && !m->recv_stage)) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
        goto out;
    }
    if (m->device && (rc = be->ops->event_create(be, &m->ev)) != RA_OK)
        goto out;
    *out = t;
    m = NULL;
out:
    if (m)
        mpi_destroy(&m->base);
    return rc;
}
