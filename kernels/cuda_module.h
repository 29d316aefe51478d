/* What the core and the CUDA module (librunahead-cuda.so) hand each other.
 *
 * The programs never link CUDA: the core's loader (cuda_loader.c) dlopens the
 * module when a CUDA backend or the NCCL transport is asked for, and calls its
 * one exported function, ra_cuda_module_open, with what the core lends it
 * (where errors go). Everything else crosses as this table, so a login node
 * without a driver or CUDA libraries runs the same programs on the CPU, and a
 * missing library is one error line naming it. No CUDA type appears here:
 * streams and communicators are void pointers. */
#ifndef RA_CUDA_MODULE_H
#define RA_CUDA_MODULE_H

#include <stddef.h>

#include "backend.h"
#include "model.h"

/* Bumped whenever the structs below or struct ra_backend_ops change: a module of another version is refused. */
#define RA_CUDA_MODULE_ABI 3
#define RA_CUDA_MODULE_FILE "librunahead-cuda.so"
#define RA_CUDA_MODULE_ENTRY "ra_cuda_module_open"

struct ra_cuda_host {
    int abi;
    /* Records one error line (ra_error_set of the core) and returns status. */
    int (*error_set)(int status, const char *fmt, ...);
    /* ra_quant_dequantize of the core: a block-quantized weight's values, for its upload. */
    int (*dequantize)(enum ra_dtype t, const void *src, float *dst, int64_t n);
};

/* NCCL, for mpi/transport_nccl.c: every call returns RA_OK or RA_ECOMM with
 * NCCL's own words recorded; comm and stream are ncclComm_t and cudaStream_t. */
struct ra_cuda_nccl {
    size_t id_bytes; /* of ncclUniqueId */
    int (*get_unique_id)(void *id);
    int (*comm_init)(void **comm, int nranks, const void *id, int rank);
    void (*comm_destroy)(void *comm);
    int (*async_error)(void *comm); /* an operation that failed on a peer or in the network */
    int (*group_start)(void);
    int (*group_end)(void);
    int (*send)(const void *buf, size_t bytes, int peer, void *comm, void *stream);
    int (*recv)(void *buf, size_t bytes, int peer, void *comm, void *stream);
    int (*allgather)(const void *send, void *recv, size_t bytes_each, void *comm, void *stream);
    int (*broadcast)(const void *send, void *recv, size_t bytes, int root, void *comm, void *stream);
    /* The current GPU's PCI bus id ("0000:3b:00.0"): which ranks share a GPU. */
    int (*device_bus_id)(char *buf, int size);
};

struct ra_cuda_module {
    int abi;
    /* "CUDA runtime 13.0, driver 13.0, cuBLAS 13.1.0, NCCL 2.28.9" */
    void (*versions)(char *buf, size_t size);
    int (*device_count)(void); /* 0 without a driver or a device */
    int (*backend_init)(struct ra_backend **out, int device);
    int (*backend_set_dtype)(struct ra_backend *be, enum ra_dtype dtype);
    const struct ra_cuda_nccl *nccl;
};

/* The module's one exported function; NULL when HOST's ABI is not the module's. */
const struct ra_cuda_module *ra_cuda_module_open(const struct ra_cuda_host *host);
typedef const struct ra_cuda_module *(*ra_cuda_module_open_fn)(const struct ra_cuda_host *host);

#endif
