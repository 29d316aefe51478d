/* --watchdog SECONDS: ends a job in which a rank stopped making progress
 * (SIGSTOP, a hung network, a dead node that MPI does not notice), instead of
 * leaving every other rank blocked in MPI for ever.
 *
 * The exchange marks each blocking wait of a prompt pass (the start barrier, a
 * layer's KV rows, TSP's all-gather, the last sends, the TTFT broadcast) with
 * ra_watchdog_wait() and its end with ra_watchdog_done(). A thread per process
 * wakes every second; when one wait has lasted SECONDS it prints
 *   runahead: rank 1: watchdog: no progress for 30 s while waiting for layer 3 KV rows from rank 0; aborting
 * and calls MPI_Abort, which makes the launcher kill every rank, the stopped
 * one included. The rank that stopped cannot report itself; the ranks waiting
 * on it do, and they name whom they wait for.
 *
 * Only waits are timed, not computing, so SECONDS must exceed the longest a
 * rank legitimately waits for another within a pass: a layer of a peer's
 * compute for its KV rows, and at the start barrier the skew between the
 * ranks' pass ends, at most one prompt pass. Set it above a pass's time. An
 * emulated link's sleep (netem) counts as progress. Decoding on the last rank,
 * model loading and the collectives outside the prompt passes are not watched:
 * those waits last as long as the work they wait for.
 *
 * MPI thread safety: MPI_Abort is called from the watchdog thread while the
 * main thread is blocked inside MPI, which MPI allows only at
 * MPI_THREAD_MULTIPLE. So a program asked for a watchdog initializes MPI with
 * ra_mpi_init_threads(..., 1), and ra_watchdog_start refuses if the library
 * did not provide that level. Without --watchdog MPI stays at
 * MPI_THREAD_FUNNELED and no thread is started. The thread calls nothing else
 * in MPI. */
#ifndef RA_WATCHDOG_H
#define RA_WATCHDOG_H

enum ra_watch_state {
    RA_WATCH_IDLE = 0,  /* computing, or outside a prompt pass: not timed */
    RA_WATCH_START,     /* the barrier that starts a pass */
    RA_WATCH_KV_ROWS,   /* a layer's KV rows from peer (-1: from every rank before this one) */
    RA_WATCH_ALLGATHER, /* TSP: the all-gather of a layer's KV rows */
    RA_WATCH_DRAIN,     /* the pass's sends, until the later ranks have taken them */
    RA_WATCH_RESULT,    /* the pass's TTFT, broadcast by peer (the last rank) */
};

/* 1 if argv asks for --watchdog (or getopt's unambiguous abbreviation of it),
 * so that main can initialize MPI at MPI_THREAD_MULTIPLE before parsing. */
int ra_watchdog_requested(int argc, char **argv);

/* Starts the thread: `prog` names the program in the message, `rank` is the
 * rank in MPI_COMM_WORLD. seconds <= 0 does nothing. */
int ra_watchdog_start(double seconds, const char *prog, int rank);
/* Stops and joins the thread (nothing if none runs). */
void ra_watchdog_stop(void);

/* This rank now blocks in `state`, for `layer` (-1: none) and `peer`. */
void ra_watchdog_wait(enum ra_watch_state state, int layer, int peer);
/* Still in the same wait, but something moved (a piece arrived, an emulated
 * link's sleep): the clock starts again. */
void ra_watchdog_pet(void);
/* The wait is over. */
void ra_watchdog_done(void);

#endif
