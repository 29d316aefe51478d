/* Output files written safely: checked before the work, written to a temporary file beside the
 * target, and renamed over it only when complete, so a reader never sees half a file.
 *
 * The target must be absent or a regular file. A directory, a FIFO, a device or a socket is
 * refused, never replaced (renaming over /dev/null or a FIFO would destroy it). A symbolic link
 * is refused too, even one to a regular file: following it writes wherever the link points
 * (what a planted link wants), and replacing it silently turns a link into a copy. Give the
 * path the link points to instead.
 *
 * The temporary file is TARGET.XXXXXX made by mkstemp (an unpredictable name created with
 * O_EXCL, so no link planted at a guessable name is followed), with the mode fopen would give
 * (0666 less the umask). It is removed on every failure path, at exit, and, through handlers for
 * SIGINT, SIGTERM and SIGHUP, when one of those kills the process.
 *
 *   struct ra_outfile of = RA_OUTFILE_INIT;
 *   FILE *f;
 *   if ((rc = ra_outfile_open(&of, path, &f)) != RA_OK) return rc;   (early: fails in a second)
 *   ... long work, then write to f ...
 *   rc = ferror(f) ? ... : ra_outfile_commit(&of);                    (fsync, rename)
 *   ra_outfile_abort(&of);                                             (always: a no-op after commit)
 */
#ifndef RA_OUTFILE_H
#define RA_OUTFILE_H

#include <stdio.h>

#define RA_OUTFILE_PATH_MAX 4096

struct ra_outfile {
    char path[RA_OUTFILE_PATH_MAX]; /* the target */
    char tmp[RA_OUTFILE_PATH_MAX];  /* the temporary file beside it; "" when there is none */
    int fd;                         /* open on tmp, or -1 */
    FILE *fp;                       /* ra_outfile_open's stream on fd, or NULL */
    char *buf;                      /* its buffer (RA_HUGE_PAGE bytes), or NULL for stdio's own */
    int slot;                       /* its entry in the clean-up list, or -1 */
};

#define RA_OUTFILE_INIT { .fd = -1, .slot = -1 }

/* Whether `path` could be written: the target is absent or a regular file (not a link), and a
 * file can be created beside it (tried, then removed). Errors name the file and the cause, with
 * the system's text: "r.json: cannot create a file in out: No such file or directory". */
int ra_outfile_check(const char *path);

/* Checks `path` and creates its temporary file (of->tmp, open as of->fd). of is initialised
 * here; after any return, ra_outfile_abort(of) is safe. */
int ra_outfile_begin(struct ra_outfile *of, const char *path);

/* ra_outfile_begin, then a stream on the temporary file in *fp (owned by of: do not fclose).
 * The stream writes in 2 MiB pieces at 2 MiB offsets: Linux's page cache then holds the file
 * in 2 MiB folios, and a later mmap of it (the weights) gets 2 MiB pages, which one core
 * streams faster than 4 KiB ones (src/README.md: Weights in 2 MiB pages). */
int ra_outfile_open(struct ra_outfile *of, const char *path, FILE **fp);

/* For libraries that create files by name (HDF5): closes and removes the empty temporary file
 * but keeps its name, still cleaned up on failure or signal, for the caller to create with
 * O_EXCL (H5F_ACC_EXCL), which refuses to follow a link put there meanwhile. */
int ra_outfile_detach(struct ra_outfile *of);

/* Flushes and fsyncs the temporary file, checks the target again (it may have changed during a
 * long run), and renames the temporary file over it. On failure the temporary file is removed. */
int ra_outfile_commit(struct ra_outfile *of);

/* Closes and removes the temporary file, if any. Safe to call more than once. */
void ra_outfile_abort(struct ra_outfile *of);

/* Removes every temporary file still pending, for a program about to end without returning
 * (MPI_Abort). Async-signal-safe. */
void ra_outfile_cleanup_all(void);

#endif
