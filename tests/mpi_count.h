/* A PMPI layer for the tests (tests/mpi_count.c, linked into test_chain only):
 * it wraps the MPI calls that can carry KV rows and counts the bytes MPI moved,
 * so a test can hold the runtime's own counts against a measurement that does
 * not come from the runtime's bookkeeping. */
#ifndef RA_TEST_MPI_COUNT_H
#define RA_TEST_MPI_COUNT_H

#include <mpi.h>

struct test_mpi_count {
    long long bytes_sent, bytes_recv;
    long long msgs_sent, msgs_recv;
    long long partial; /* completed receives whose size MPI could not tell: always a failure */
};

/* Zeroes the counts; from now on traffic on `kv` counts as KV, on any other
 * communicator (the emulated link's companions, say) as other. */
void test_mpi_count_start(MPI_Comm kv);
/* This rank's counts since test_mpi_count_start. Either pointer may be NULL. */
void test_mpi_count_read(struct test_mpi_count *kv, struct test_mpi_count *other);

#endif
