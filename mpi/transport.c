/* Choosing a transport: see transport.h. */
#include "config.h"
#include "transport.h"
#include "ra_mpi.h"

#include "backend_cuda.h"

#include <string.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support */
#endif

static const char *kind_names[] = { "auto", "mpi", "mpi-cuda", "nccl" };

const char *ra_transport_kind_name(enum ra_transport_kind k) { return kind_names[k]; }

int ra_transport_parse(const char *s, enum ra_transport_kind *k)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, kind_names[i])) {
            *k = (enum ra_transport_kind)i;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "--transport: '%s' is not auto, mpi, mpi-cuda or nccl", s);
}

int ra_transport_mpi_cuda_supported(void)
{
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    /* Built with CUDA support is not enough: the library loaded now must say so. */
    return MPIX_Query_cuda_support() == 1;
#else
    return 0;
#endif
}

int ra_transport_init(struct ra_transport **out, enum ra_transport_kind kind, MPI_Comm comm, struct ra_backend *be,
                      enum ra_mem mem, size_t row_bytes, int max_recv, int max_send)
{
    int rank, rc = RA_OK;
    *out = NULL;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    const int device = mem == RA_MEM_DEVICE;
    switch (kind) {
    case RA_TRANSPORT_AUTO:
        if (!device)
            return ra_transport_mpi_init(out, comm, be, mem, row_bytes, max_recv, max_send, 0);
        /* Every rank reaches the same verdict (the check inside is collective). */
        rc = ra_transport_nccl_init(out, comm, be, row_bytes, max_recv, max_send, 1);
        if (rc != RA_EUNSUPPORTED)
            return rc;
        return ra_transport_mpi_init(out, comm, be, mem, row_bytes, max_recv, max_send,
                                     ra_transport_mpi_cuda_supported());
    case RA_TRANSPORT_MPI:
        return ra_transport_mpi_init(out, comm, be, mem, row_bytes, max_recv, max_send, 0);
    case RA_TRANSPORT_MPI_CUDA:
        if (!device)
            return ra_error_set(RA_EINVAL, "rank %d: --transport mpi-cuda moves device memory, but the %s backend "
                                "keeps the KV cache in host memory: use --transport mpi (or auto)", rank, be->ops->name);
        if (!ra_transport_mpi_cuda_supported())
            return ra_error_set(RA_EUNSUPPORTED, "rank %d: --transport mpi-cuda: this MPI library does not move "
                                "device memory (MPIX_Query_cuda_support); use --transport auto, mpi or nccl", rank);
        return ra_transport_mpi_init(out, comm, be, mem, row_bytes, max_recv, max_send, 1);
    case RA_TRANSPORT_NCCL:
        if (!ra_cuda_built())
            return ra_error_set(RA_EUNSUPPORTED, "rank %d: --transport nccl: this runahead was built without CUDA "
                                "and NCCL (configure --with-cuda)", rank);
        if (!device)
            return ra_error_set(RA_EINVAL, "rank %d: --transport nccl moves device memory, but the %s backend keeps "
                                "the KV cache in host memory: use --transport mpi (or auto)", rank, be->ops->name);
        return ra_transport_nccl_init(out, comm, be, row_bytes, max_recv, max_send, 0);
    }
    return ra_error_set(RA_EINVAL, "rank %d: unknown transport %d", rank, (int)kind);
out:
    return rc;
}

void ra_transport_free(struct ra_transport *t)
{
    if (t)
        t->ops->destroy(t);
}
