#include "ra_mpi.h"

#include <stdio.h>

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
    int provided, rc = RA_OK;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
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
