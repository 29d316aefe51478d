/* NCCL for the module's table (cuda_module.h): thin calls that record NCCL's
 * own words on failure. The transport itself, with MPI for the unique id,
 * lives in mpi/transport_nccl.c. */
#include "module.h"
#include "status.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

/* "ncclSend: unhandled cuda error (its last message)" */
static int nccl_fail(ncclResult_t r, const char *call)
{
    const char *last = ncclGetLastError(NULL);
    return ra_error_set(RA_ECOMM, "%s: %s%s%s%s", call, ncclGetErrorString(r), last && *last ? " (" : "",
                        last && *last ? last : "", last && *last ? ")" : "");
}

#define NCCL_RETURN(call, name) \
    do {                                      \
        ncclResult_t r_ = (call);             \
        return r_ == ncclSuccess ? RA_OK : nccl_fail(r_, name); \
    } while (0)

static int get_unique_id(void *id) { NCCL_RETURN(ncclGetUniqueId((ncclUniqueId *)id), "ncclGetUniqueId"); }

static int comm_init(void **comm, int nranks, const void *id, int rank)
{
    ncclComm_t c = NULL;
    ncclResult_t r = ncclCommInitRank(&c, nranks, *(const ncclUniqueId *)id, rank);
    *comm = c;
    return r == ncclSuccess ? RA_OK : nccl_fail(r, "ncclCommInitRank");
}

static void comm_destroy(void *comm)
{
    if (comm)
        ncclCommDestroy((ncclComm_t)comm);
}

static int async_error(void *comm)
{
    ncclResult_t state = ncclSuccess, r = ncclCommGetAsyncError((ncclComm_t)comm, &state);
    if (r != ncclSuccess)
        return nccl_fail(r, "ncclCommGetAsyncError");
    return state == ncclSuccess ? RA_OK : nccl_fail(state, "an NCCL operation");
}

static int group_start(void) { NCCL_RETURN(ncclGroupStart(), "ncclGroupStart"); }

static int group_end(void) { NCCL_RETURN(ncclGroupEnd(), "ncclGroupEnd"); }

static int post_send(const void *buf, size_t bytes, int peer, void *comm, void *stream)
{
    NCCL_RETURN(ncclSend(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, (cudaStream_t)stream), "ncclSend");
}

static int post_recv(void *buf, size_t bytes, int peer, void *comm, void *stream)
{
    NCCL_RETURN(ncclRecv(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, (cudaStream_t)stream), "ncclRecv");
}

static int allgather(const void *sendbuf, void *recvbuf, size_t bytes_each, void *comm, void *stream)
{
    NCCL_RETURN(ncclAllGather(sendbuf, recvbuf, bytes_each, ncclUint8, (ncclComm_t)comm, (cudaStream_t)stream),
                "ncclAllGather");
}

static int broadcast(const void *sendbuf, void *recvbuf, size_t bytes, int root, void *comm, void *stream)
{
    NCCL_RETURN(ncclBroadcast(sendbuf, recvbuf, bytes, ncclUint8, root, (ncclComm_t)comm, (cudaStream_t)stream),
                "ncclBroadcast");
}

static int device_bus_id(char *buf, int size)
{
    int dev = -1;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetPCIBusId(buf, size, dev);
    return err == cudaSuccess ? RA_OK
                              : ra_error_set(RA_EBACKEND, "cudaDeviceGetPCIBusId: %s", cudaGetErrorString(err));
}

const struct ra_cuda_nccl ra_cuda_nccl_ops = {
    .id_bytes = sizeof(ncclUniqueId),
    .get_unique_id = get_unique_id,
    .comm_init = comm_init,
    .comm_destroy = comm_destroy,
    .async_error = async_error,
    .group_start = group_start,
    .group_end = group_end,
    .send = post_send,
    .recv = post_recv,
    .allgather = allgather,
    .broadcast = broadcast,
    .device_bus_id = device_bus_id,
};
