/* An exclusive advisory lock on a lock file, with a timeout, that says who holds it.
 *
 * The lock is an fcntl (POSIX record) lock on the whole lock file, not flock(2): fcntl locks go
 * through the NFS lock manager (NLM, or NFSv4's own locks) and are coherent across the clients of
 * Lustre (mounted -o flock), GPFS and BeeGFS, while flock(2) locks only the local client on NFS
 * before Linux 2.6.12, on Lustre with -o localflock, and on some other cluster filesystems, where
 * two nodes would both "hold" it. The price is POSIX semantics: the lock belongs to the process,
 * and any close() of the lock file by that process drops it; so only this code opens lock files
 * and a process never takes the same lock twice.
 *
 * Do not wrap a locking program in flock(1) on the same lock file: on a local filesystem the two
 * kinds of lock ignore each other (no exclusion from the wrapper at all), and on NFS, where Linux
 * emulates flock with fcntl locks, the wrapper's lock would block its own child until it times out.
 *
 * The holder writes "host:pid since <UTC date>" into the lock file, so a waiting process can say
 * whom it waits for. The lock file stays when released (removing it would let a second process
 * lock a file that a third has just replaced). */
#ifndef RA_FILELOCK_H
#define RA_FILELOCK_H

#include <stdio.h>

struct ra_filelock {
    int fd; /* open on the lock file while held, else -1 */
    char path[4200];
};

#define RA_FILELOCK_INIT { .fd = -1 }

/* Takes the lock on `lock_path` (created if absent), waiting at most timeout_s seconds (0: one
 * try). After 2 s of waiting it writes one line "<prog>: waiting for LOCK held by HOLDER" to
 * `notes` (when not NULL). A timeout is RA_EIO "LOCK: timed out after T s waiting for the lock
 * held by HOLDER"; a filesystem without fcntl locks is RA_EIO with the system's text. */
int ra_filelock_acquire(struct ra_filelock *l, const char *lock_path, double timeout_s, const char *prog,
                        FILE *notes);

/* Releases the lock (no-op when not held). */
void ra_filelock_release(struct ra_filelock *l);

#endif
