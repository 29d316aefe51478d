#include "ra_mpi.h"

#include <stdio.h>
#include <unistd.h>

int ra_mpi_error(int mpi_rc, const char *call, const char *file, int line)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0, rank = -1;
    MPI_Error_string(mpi_rc, msg, &len);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return ra_error_set(RA_ECOMM, "%s:%d: rank %d: %s failed: %s", file, line, rank, call, msg);
}

int ra_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    return ra_mpi_init_threads(argc, argv, rank, size, 0);
}

int ra_mpi_init_threads(int *argc, char ***argv, int *rank, int *size, int multiple)
{
    int provided, rc = RA_OK;
    /* Only on request: MPI_THREAD_MULTIPLE makes the library lock around every call. */
    MPI_CHECK(MPI_Init_thread(argc, argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, size));
out:
    return rc;
}

double ra_mpi_wtime(void)
{
    return MPI_Wtime();
}

int ra_mpi_agree(int status, MPI_Comm comm, int *failed_rank)
{
    int rank, in[2], out[2];
    MPI_Comm_rank(comm, &rank);
    /* MINLOC over (status, rank): the most negative status wins, lowest rank on ties. */
    in[0] = status;
    in[1] = rank;
    if (MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MINLOC, comm) != MPI_SUCCESS)
        return RA_ECOMM;
    if (failed_rank)
        *failed_rank = out[0] != RA_OK ? out[1] : -1;
    return out[0];
}

int ra_mpi_local_rank(void)
{
    MPI_Comm node;
    int local = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
    }
    return local;
}

int ra_mpi_threads_per_rank(void)
{
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cores > 0 ? cores : 1) / local;
    return n > 0 ? n : 1;
}
