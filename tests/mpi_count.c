/* A PMPI layer that counts the bytes MPI moved (see mpi_count.h).
 *
 * Every call that can carry KV rows is wrapped and forwarded to its PMPI_
 * twin: point-to-point sends and receives, their completions, and
 * MPI_Allgatherv. Received bytes come from the status of each completed
 * receive (MPI_Get_count in MPI_BYTE: what arrived, not what was posted), so
 * every Wait and Test is wrapped too, and each remembers the requests it was
 * handed, since completion turns them into MPI_REQUEST_NULL. MPI reports no
 * count for a send, so sent bytes are count x type size at the call; summed
 * over ranks they must equal the received bytes, which checks them. A
 * collective has no status either: MPI_Allgatherv counts the blocks it was
 * told to move (every other rank's block in, ours out to every other rank);
 * that those rows really arrived is what the tests' KV comparison shows.
 *
 * The other collectives (barrier, reductions, gathers, broadcasts) carry
 * control values and timing, never KV rows, and are left unwrapped and
 * uncounted. Traffic on other communicators than the one named in
 * test_mpi_count_start is counted apart. */
#include "mpi_count.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Receives posted and not yet seen completing: enough for every receive a pass posts at once. */
#define MAX_PENDING 4096

static MPI_Comm kv_comm = MPI_COMM_NULL;
static struct test_mpi_count counts[2]; /* [0] on kv_comm, [1] elsewhere */

static struct {
    MPI_Request req;
    struct test_mpi_count *c;
} pending[MAX_PENDING];
static int n_pending;

void test_mpi_count_start(MPI_Comm kv)
{
    kv_comm = kv;
    memset(counts, 0, sizeof counts);
}

void test_mpi_count_read(struct test_mpi_count *kv, struct test_mpi_count *other)
{
    if (kv)
        *kv = counts[0];
    if (other)
        *other = counts[1];
}

static struct test_mpi_count *bucket(MPI_Comm comm)
{
    return &counts[comm == kv_comm ? 0 : 1];
}

static void die(const char *what)
{
    fprintf(stderr, "mpi_count: %s\n", what);
    PMPI_Abort(MPI_COMM_WORLD, 1);
}

static void count_send(MPI_Comm comm, int count, MPI_Datatype type)
{
    int size = 0;
    if (PMPI_Type_size(type, &size) != MPI_SUCCESS)
        die("MPI_Type_size failed");
    bucket(comm)->bytes_sent += (long long)count * size;
    bucket(comm)->msgs_sent++;
}

static void count_status(struct test_mpi_count *c, const MPI_Status *st)
{
    int bytes = MPI_UNDEFINED;
    if (PMPI_Get_count(st, MPI_BYTE, &bytes) != MPI_SUCCESS || bytes == MPI_UNDEFINED) {
        c->partial++;
        return;
    }
    c->bytes_recv += bytes;
    c->msgs_recv++;
}

/* `req` (its handle before the call that completed it) is done: if it was a receive, count it. */
static void completed(MPI_Request req, const MPI_Status *st)
{
    for (int i = 0; i < n_pending; i++)
        if (pending[i].req == req) {
            count_status(pending[i].c, st);
            pending[i] = pending[--n_pending];
            return;
        }
}

/* What a multi-request call needs: the handles as they were, and (unless
 * `one`, a call with a single status) statuses even where the caller ignores
 * them. Freed by release(). */
struct snapshot {
    MPI_Request *before;
    MPI_Status *st;
    int own_st;
};

static void snap(struct snapshot *s, int n, const MPI_Request *reqs, MPI_Status *given, int one)
{
    const size_t k = n > 0 ? (size_t)n : 1;
    s->before = malloc(k * sizeof *s->before);
    s->own_st = !one && given == MPI_STATUSES_IGNORE;
    s->st = s->own_st ? malloc(k * sizeof *s->st) : given;
    if (!s->before || (s->own_st && !s->st))
        die("out of memory");
    if (n > 0)
        memcpy(s->before, reqs, (size_t)n * sizeof *reqs);
}

static void release(struct snapshot *s)
{
    free(s->before);
    if (s->own_st)
        free(s->st);
}

/* ------------------------------------------------------------------ point to point */

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    int rc = PMPI_Send(buf, count, type, dest, tag, comm);
    if (rc == MPI_SUCCESS)
        count_send(comm, count, type);
    return rc;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request *req)
{
    int rc = PMPI_Isend(buf, count, type, dest, tag, comm, req);
    if (rc == MPI_SUCCESS)
        count_send(comm, count, type);
    return rc;
}

int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    int rc = PMPI_Recv(buf, count, type, source, tag, comm, st);
    if (rc == MPI_SUCCESS)
        count_status(bucket(comm), st);
    return rc;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request *req)
{
    int rc = PMPI_Irecv(buf, count, type, source, tag, comm, req);
    if (rc == MPI_SUCCESS) {
        if (n_pending == MAX_PENDING)
            die("too many receives pending");
        pending[n_pending].req = *req;
        pending[n_pending].c = bucket(comm);
        n_pending++;
    }
    return rc;
}

int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status)
{
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    int rc = PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                           recvtag, comm, st);
    if (rc == MPI_SUCCESS) {
        count_send(comm, sendcount, sendtype);
        count_status(bucket(comm), st);
    }
    return rc;
}

/* ------------------------------------------------------------------ completions */

int MPI_Wait(MPI_Request *req, MPI_Status *status)
{
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    const MPI_Request before = *req;
    int rc = PMPI_Wait(req, st);
    if (rc == MPI_SUCCESS)
        completed(before, st);
    return rc;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    const MPI_Request before = *req;
    int rc = PMPI_Test(req, flag, st);
    if (rc == MPI_SUCCESS && *flag)
        completed(before, st);
    return rc;
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[])
{
    struct snapshot s;
    if (!n_pending) /* no receive to see completing */
        return PMPI_Waitall(n, reqs, statuses);
    snap(&s, n, reqs, statuses, 0);
    int rc = PMPI_Waitall(n, reqs, s.st);
    for (int i = 0; i < n && rc == MPI_SUCCESS; i++)
        completed(s.before[i], &s.st[i]);
    release(&s);
    return rc;
}

int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status statuses[])
{
    struct snapshot s;
    if (!n_pending)
        return PMPI_Testall(n, reqs, flag, statuses);
    snap(&s, n, reqs, statuses, 0);
    int rc = PMPI_Testall(n, reqs, flag, s.st);
    /* All or nothing: with flag false no request has completed. */
    for (int i = 0; i < n && rc == MPI_SUCCESS && *flag; i++)
        completed(s.before[i], &s.st[i]);
    release(&s);
    return rc;
}

int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status)
{
    struct snapshot s;
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    if (!n_pending)
        return PMPI_Waitany(n, reqs, index, status);
    snap(&s, n, reqs, NULL, 1);
    int rc = PMPI_Waitany(n, reqs, index, st);
    if (rc == MPI_SUCCESS && *index != MPI_UNDEFINED)
        completed(s.before[*index], st);
    release(&s);
    return rc;
}

int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status)
{
    struct snapshot s;
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    if (!n_pending)
        return PMPI_Testany(n, reqs, index, flag, status);
    snap(&s, n, reqs, NULL, 1);
    int rc = PMPI_Testany(n, reqs, index, flag, st);
    if (rc == MPI_SUCCESS && *flag && *index != MPI_UNDEFINED)
        completed(s.before[*index], st);
    release(&s);
    return rc;
}

int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[])
{
    struct snapshot s;
    if (!n_pending)
        return PMPI_Waitsome(n, reqs, outcount, indices, statuses);
    snap(&s, n, reqs, statuses, 0);
    int rc = PMPI_Waitsome(n, reqs, outcount, indices, s.st);
    for (int k = 0; rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED && k < *outcount; k++)
        completed(s.before[indices[k]], &s.st[k]);
    release(&s);
    return rc;
}

int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[])
{
    struct snapshot s;
    if (!n_pending)
        return PMPI_Testsome(n, reqs, outcount, indices, statuses);
    snap(&s, n, reqs, statuses, 0);
    int rc = PMPI_Testsome(n, reqs, outcount, indices, s.st);
    for (int k = 0; rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED && k < *outcount; k++)
        completed(s.before[indices[k]], &s.st[k]);
    release(&s);
    return rc;
}

/* ------------------------------------------------------------------ the all-gather */

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)
{
    int rc = PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    int me, p, size;
    if (rc != MPI_SUCCESS)
        return rc;
    if (PMPI_Comm_rank(comm, &me) != MPI_SUCCESS || PMPI_Comm_size(comm, &p) != MPI_SUCCESS ||
        PMPI_Type_size(recvtype, &size) != MPI_SUCCESS)
        die("cannot size an all-gather");
    struct test_mpi_count *c = bucket(comm);
    for (int r = 0; r < p; r++)
        if (r != me)
            c->bytes_recv += (long long)recvcounts[r] * size;
    /* In place, our block is already in recvbuf and is what the others get. */
    long long mine = (long long)recvcounts[me] * size;
    if (sendbuf != MPI_IN_PLACE) {
        int send_size;
        if (PMPI_Type_size(sendtype, &send_size) != MPI_SUCCESS)
            die("cannot size an all-gather");
        mine = (long long)sendcount * send_size;
    }
    c->bytes_sent += mine * (p - 1);
    c->msgs_sent += p - 1;
    c->msgs_recv += p - 1;
    return rc;
}
