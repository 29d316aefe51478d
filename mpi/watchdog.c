/* The --watchdog thread: see watchdog.h for what it watches and why it may
 * call MPI_Abort. */
#define _GNU_SOURCE /* pthread_setname_np: the thread shows as ra-watchdog in ps -L and /proc */
#include "watchdog.h"
#include "ra_mpi.h"
#include "timing.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    int on;                 /* a thread runs; written by the main thread only, before and after it */
    pthread_t thread;
    pthread_mutex_t lock;   /* guards everything below */
    pthread_cond_t wake;    /* ra_watchdog_stop wakes the thread at once */
    int stopping;
    double seconds, period; /* the limit, and how often the thread looks */
    const char *prog;
    int rank;
    enum ra_watch_state state;
    int layer, peer;
    double since;           /* CLOCK_MONOTONIC seconds when the wait began or last moved */
} wd = { .lock = PTHREAD_MUTEX_INITIALIZER };

int ra_watchdog_requested(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        const size_t n = strcspn(argv[i], "=");
        if (n >= 3 && n <= strlen("--watchdog") && !strncmp(argv[i], "--watchdog", n))
            return 1;
    }
    return 0;
}

/* "waiting for layer 3 KV rows from rank 0", for the message. */
static void describe(char *buf, size_t len)
{
    switch (wd.state) {
    case RA_WATCH_START:
        snprintf(buf, len, "waiting for every rank at the barrier that starts a prompt pass");
        break;
    case RA_WATCH_KV_ROWS:
        if (wd.peer >= 0)
            snprintf(buf, len, "waiting for layer %d KV rows from rank %d", wd.layer, wd.peer);
        else
            snprintf(buf, len, "waiting for layer %d KV rows from ranks 0..%d", wd.layer, wd.rank - 1);
        break;
    case RA_WATCH_ALLGATHER:
        snprintf(buf, len, "waiting for every rank in the all-gather of layer %d KV rows", wd.layer);
        break;
    case RA_WATCH_DRAIN:
        snprintf(buf, len, "waiting for the later ranks to take this rank's last KV rows");
        break;
    case RA_WATCH_RESULT:
        snprintf(buf, len, "waiting for the pass's TTFT from rank %d", wd.peer);
        break;
    default:
        snprintf(buf, len, "idle");
    }
}

/* Called with the lock held; does not return. */
static void fire(void)
{
    char what[160];
    describe(what, sizeof what);
    fprintf(stderr, "%s: rank %d: watchdog: no progress for %g s while %s; aborting\n", wd.prog, wd.rank,
            wd.seconds, what);
    fflush(stderr);
    /* Legal from this thread: MPI runs at MPI_THREAD_MULTIPLE (ra_watchdog_start checked). */
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* MPI_Abort does not return; if an MPI ever did, the job must still end */
}

static void *watch(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wd.lock);
    double last = ra_wall_s();
    while (!wd.stopping) {
        const double until = ra_wall_s() + wd.period;
        struct timespec ts = { (time_t)until, (long)((until - floor(until)) * 1e9) };
        pthread_cond_timedwait(&wd.wake, &wd.lock, &ts);
        const double t = ra_wall_s();
        /* A gap far beyond the period means this whole process was stopped (SIGSTOP, a
         * suspended job): its own pause is no peer's fault, so its waits start again. */
        if (t - last > 3 * wd.period + 1)
            wd.since = t;
        last = t;
        if (!wd.stopping && wd.state != RA_WATCH_IDLE && t - wd.since >= wd.seconds)
            fire();
    }
    pthread_mutex_unlock(&wd.lock);
    return NULL;
}

int ra_watchdog_start(double seconds, const char *prog, int rank)
{
    pthread_condattr_t ca;
    int provided = 0, rc = RA_OK;
    if (seconds <= 0 || wd.on)
        return RA_OK;
    MPI_CHECK(MPI_Query_thread(&provided));
    if (provided != MPI_THREAD_MULTIPLE) {
        rc = ra_error_set(RA_EUNSUPPORTED, "rank %d: --watchdog needs MPI_THREAD_MULTIPLE (its thread calls "
                          "MPI_Abort), but this MPI library provides only level %d", rank, provided);
        goto out;
    }
    wd.seconds = seconds;
    wd.period = fmin(1.0, seconds / 4);
    wd.prog = prog;
    wd.rank = rank;
    wd.state = RA_WATCH_IDLE;
    wd.stopping = 0;
    /* CLOCK_MONOTONIC: setting the wall clock must neither fire nor blind the watchdog. */
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&wd.wake, &ca) != 0) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: --watchdog: cannot set up its condition variable", rank);
        goto out;
    }
    pthread_condattr_destroy(&ca);
    if (pthread_create(&wd.thread, NULL, watch, NULL) != 0) {
        pthread_cond_destroy(&wd.wake);
        rc = ra_error_set(RA_ENOMEM, "rank %d: --watchdog: cannot start its thread", rank);
        goto out;
    }
    pthread_setname_np(wd.thread, "ra-watchdog");
    wd.on = 1;
out:
    return rc;
}

void ra_watchdog_stop(void)
{
    if (!wd.on)
        return;
    pthread_mutex_lock(&wd.lock);
    wd.stopping = 1;
    pthread_cond_signal(&wd.wake);
    pthread_mutex_unlock(&wd.lock);
    pthread_join(wd.thread, NULL);
    pthread_cond_destroy(&wd.wake);
    wd.on = 0;
}

void ra_watchdog_wait(enum ra_watch_state state, int layer, int peer)
{
    if (!wd.on)
        return;
    pthread_mutex_lock(&wd.lock);
    wd.state = state;
    wd.layer = layer;
    wd.peer = peer;
    wd.since = ra_wall_s();
    pthread_mutex_unlock(&wd.lock);
}

void ra_watchdog_pet(void)
{
    if (!wd.on)
        return;
    pthread_mutex_lock(&wd.lock);
    wd.since = ra_wall_s();
    pthread_mutex_unlock(&wd.lock);
}

void ra_watchdog_done(void)
{
    ra_watchdog_wait(RA_WATCH_IDLE, -1, -1);
}
