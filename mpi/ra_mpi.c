#include "ra_mpi.h"
#include "outfile.h"
#include "status.h"
#include "sysinfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Each CPU of this rank's affinity mask counts for 1/k where k ranks of the
 * node may run on it: ranks bound to CPUs of their own (srun --cpus-per-task,
 * mpirun --bind-to core) use all of theirs, ranks that share a mask (unbound,
 * or bound to one socket together) split it. */
int ra_mpi_threads_per_rank(void)
{
    struct ra_cpu_mask mine, *all = NULL;
    MPI_Comm node;
    int local = 1;
    double share = 0;
    ra_cpu_mask_get(&mine);
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        all = malloc((size_t)local * sizeof *all);
        if (all && MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, node) != MPI_SUCCESS) {
            free(all);
            all = NULL;
        }
        MPI_Comm_free(&node);
    }
    if (!all) /* no neighbours' masks: assume they share this one */
        share = (double)ra_cpu_mask_count(&mine) / local;
    for (int c = 0; all && c < RA_MAX_CPUS; c++) {
        if (!ra_cpu_mask_has(&mine, c))
            continue;
        int k = 0;
        for (int r = 0; r < local; r++)
            k += ra_cpu_mask_has(&all[r], c);
        share += 1.0 / (k > 0 ? k : 1);
    }
    free(all);
    const int n = (int)(share + 0.5);
    return n > 0 ? n : 1;
}

void ra_mpi_print_error(const char *prog, int rank)
{
    const char *msg = ra_error_message();
    char own[32];
    snprintf(own, sizeof own, "rank %d: ", rank);
    fprintf(stderr, "%s: %s%s\n", prog, strncmp(msg, own, strlen(own)) ? own : "", msg);
}

void ra_mpi_abort(const char *prog, int rank)
{
    ra_mpi_print_error(prog, rank);
    ra_outfile_cleanup_all();
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* MPI_Abort does not return; if an MPI ever did, the job must still end */
}
