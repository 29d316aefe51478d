/* Lock files with fcntl locks, a timeout and the holder's name; see filelock.h for why fcntl. */
#include "filelock.h"
#include "status.h"
#include "timing.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NOTE_AFTER_S 2.0 /* short waits are normal between writers: say nothing about them */

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void host_name(char *buf, size_t len)
{
    if (gethostname(buf, len) != 0 || !buf[0])
        snprintf(buf, len, "unknown-host");
    buf[len - 1] = '\0';
}

static int lock_try(int fd)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    int rc;
    while ((rc = fcntl(fd, F_SETLK, &fl)) != 0 && errno == EINTR)
        ;
    return rc;
}

/* The pid of a local process holding the lock (F_GETLK), or 0 (none, or on another node). */
static long lock_owner(int fd)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    if (fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type == F_UNLCK)
        return 0;
    return fl.l_pid > 0 ? (long)fl.l_pid : 0;
}

/* Who holds the lock, in words: the holder's own line, unless it is missing or stale (a holder
 * on this host that died without clearing it, and the kernel names another pid). */
static void describe_holder(int fd, char *buf, size_t len)
{
    char line[256], me[128], host[128];
    long owner = lock_owner(fd), pid = 0;
    ssize_t n = pread(fd, line, sizeof line - 1, 0);
    line[n > 0 ? n : 0] = '\0';
    line[strcspn(line, "\n")] = '\0';
    host_name(me, sizeof me);
    int parsed = sscanf(line, "%127[^:]:%ld", host, &pid) == 2;
    int stale = parsed && owner > 0 && pid != owner && !strcmp(host, me);
    if (parsed && !stale)
        snprintf(buf, len, "%s", line);
    else if (owner > 0)
        snprintf(buf, len, "process %ld (no holder line in the lock file)", owner);
    else
        snprintf(buf, len, "another process (no holder line in the lock file)");
}

/* "host:pid since 2026-01-02T10:00:00Z": what waiters print. Failing to write it costs only
 * the name in their messages, so errors are ignored. */
static void write_holder(int fd)
{
    char host[128], date[32], line[256];
    time_t t = time(NULL);
    struct tm tm;
    host_name(host, sizeof host);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    int n = snprintf(line, sizeof line, "%s:%ld since %s\n", host, (long)getpid(), date);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)n, 0) == n)
        fsync(fd);
}

static int open_lock_file(struct ra_filelock *l, const char *lock_path)
{
    struct stat st;
    snprintf(l->path, sizeof l->path, "%s", lock_path);
    l->fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (l->fd < 0 && errno == ELOOP)
        return ra_error_set(RA_EIO, "%s: the lock file is a symbolic link: not using it", lock_path);
    if (l->fd < 0)
        return ra_error_set(RA_EIO, "%s: cannot open the lock file: %s", lock_path, strerror(errno));
    if (fstat(l->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(l->fd);
        l->fd = -1;
        return ra_error_set(RA_EIO, "%s: the lock file is not a regular file", lock_path);
    }
    return RA_OK;
}

/* Polls with a growing pause (20 ms to 0.5 s): F_SETLKW cannot time out, and a blocked
 * fcntl interrupted by an alarm would need a signal handler in a library. */
static int wait_for_lock(struct ra_filelock *l, double timeout_s, const char *prog, FILE *notes)
{
    char holder[300];
    const double start = ra_wall_s();
    double pause = 0.02;
    int noted = 0;
    for (;;) {
        if (lock_try(l->fd) == 0)
            return RA_OK;
        if (errno != EACCES && errno != EAGAIN)
            return ra_error_set(RA_EIO, "%s: cannot lock it: %s (the filesystem must support fcntl locks; "
                                "Lustre: mount with -o flock)", l->path, strerror(errno));
        double waited = ra_wall_s() - start;
        if (waited >= timeout_s) {
            describe_holder(l->fd, holder, sizeof holder);
            return ra_error_set(RA_EIO, "%s: timed out after %g s waiting for the lock held by %s", l->path,
                                timeout_s, holder);
        }
        if (!noted && waited >= NOTE_AFTER_S && notes) {
            describe_holder(l->fd, holder, sizeof holder);
            fprintf(notes, "%s%swaiting for %s held by %s (up to %g s)\n", prog ? prog : "", prog ? ": " : "",
                    l->path, holder, timeout_s);
            fflush(notes);
            noted = 1;
        }
        double left = timeout_s - waited;
        sleep_s(pause < left ? pause : left);
        pause = pause * 1.5 < 0.5 ? pause * 1.5 : 0.5;
    }
}

int ra_filelock_acquire(struct ra_filelock *l, const char *lock_path, double timeout_s, const char *prog,
                        FILE *notes)
{
    l->fd = -1;
    if (!(timeout_s >= 0))
        return ra_error_set(RA_EINVAL, "%s: lock timeout %g s: want >= 0", lock_path, timeout_s);
    int rc = open_lock_file(l, lock_path);
    if (rc == RA_OK)
        rc = wait_for_lock(l, timeout_s, prog, notes);
    if (rc != RA_OK) {
        if (l->fd >= 0)
            close(l->fd);
        l->fd = -1;
        return rc;
    }
    write_holder(l->fd);
    return RA_OK;
}

void ra_filelock_release(struct ra_filelock *l)
{
    if (l->fd < 0)
        return;
    /* Clear the line first: once unlocked, it would name a process that no longer holds it. If
     * that fails the line goes stale, which waiters detect against the kernel's lock owner. */
    if (ftruncate(l->fd, 0) != 0)
        errno = 0;
    close(l->fd);
    l->fd = -1;
}
