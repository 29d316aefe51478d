/* MPI helpers shared by everything in mpi/. */
#ifndef RA_MPI_H
#define RA_MPI_H

#include <mpi.h>

#include "status.h"

/* Records "file:line: rank R: call: MPI's error string" and returns RA_ECOMM.
 * Requires MPI_ERRORS_RETURN on the communicator (ra_mpi_init sets it). */
int ra_mpi_error(int mpi_rc, const char *call, const char *file, int line);

/* In a function with `int rc` and an `out:` cleanup label. */
#define MPI_CHECK(call)                                                          \
    do {                                                                         \
        int mpi_rc_ = (call);                                                    \
        if (mpi_rc_ != MPI_SUCCESS) {                                            \
            rc = ra_mpi_error(mpi_rc_, #call, __FILE__, __LINE__);               \
            goto out;                                                            \
        }                                                                        \
    } while (0)

/* MPI_Init_thread at MPI_THREAD_FUNNELED: only the main thread calls MPI. */
int ra_mpi_init(int *argc, char ***argv, int *rank, int *size);
/* The same, at MPI_THREAD_MULTIPLE when `multiple` is set: for --watchdog,
 * whose thread may call MPI_Abort (watchdog.h). */
int ra_mpi_init_threads(int *argc, char ***argv, int *rank, int *size, int multiple);

/* Every rank passes its own status; all get the first failing rank's status
 * (or RA_OK) so that all ranks leave together instead of hanging. */
/* CPU threads a rank should use: the CPUs of its affinity mask, each shared
 * among the ranks of the node whose masks hold it (collective on the world). */
int ra_mpi_threads_per_rank(void);
/* This rank's index among the ranks of its node (MPI_COMM_TYPE_SHARED), under
 * mpirun and srun alike: which GPU it takes. Collective. */
int ra_mpi_local_rank(void);

int ra_mpi_agree(int status, MPI_Comm comm, int *failed_rank);

/* The last error as one line on stderr, "PROG: rank R: the error" (the rank
 * named once, whether or not the message already names it). */
void ra_mpi_print_error(const char *prog, int rank);

/* Ends the job from this rank after a failure inside a pass, where its peers
 * may be blocked on its KV rows and nothing else would end them: the error
 * line (ra_mpi_print_error), the output files' temporaries
 * removed (MPI_Abort runs no exit handlers), then MPI_Abort. */
void ra_mpi_abort(const char *prog, int rank) __attribute__((noreturn));

#endif
