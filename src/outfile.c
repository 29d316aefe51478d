/* Output files: target checks, mkstemp temporaries, commit by rename, clean-up on signals.
 * See outfile.h for the rules and why. */
#include "outfile.h"
#include "hugepage.h"
#include "status.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ clean-up list */

/* The temporary files that a signal handler or exit must remove. A handler may only touch
 * static memory and call async-signal-safe functions (unlink, sigaction, raise), so the names
 * live in fixed buffers and each slot is claimed by a flag of type sig_atomic_t. */
#define SLOTS 32

static char pending[SLOTS][RA_OUTFILE_PATH_MAX];
static volatile sig_atomic_t pending_used[SLOTS];

static const int caught[] = { SIGINT, SIGTERM, SIGHUP };
#define N_CAUGHT (int)(sizeof caught / sizeof caught[0])
static struct sigaction previous[N_CAUGHT];
static int installed;

void ra_outfile_cleanup_all(void)
{
    for (int i = 0; i < SLOTS; i++)
        if (pending_used[i])
            unlink(pending[i]);
}

/* Removes the temporary files, then lets the signal do what it would have done without us:
 * the previous action is restored and the signal, blocked while this handler runs, is
 * delivered again when it returns (by default: the process dies of it, exit status 128+sig). */
static void on_signal(int sig)
{
    ra_outfile_cleanup_all();
    for (int i = 0; i < N_CAUGHT; i++)
        if (caught[i] == sig)
            sigaction(sig, &previous[i], NULL);
    raise(sig);
}

/* Once per process: the handlers, and the exit hook for programs that exit() early. A signal
 * that is ignored stays ignored (nohup, or SIGINT in a shell's background job). */
static void install_handlers(void)
{
    if (installed)
        return;
    installed = 1;
    atexit(ra_outfile_cleanup_all);
    for (int i = 0; i < N_CAUGHT; i++) {
        struct sigaction sa;
        if (sigaction(caught[i], NULL, &previous[i]) != 0 || previous[i].sa_handler == SIG_IGN)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigfillset(&sa.sa_mask); /* no other caught signal in between: one clean-up, one re-raise */
        sigaction(caught[i], &sa, NULL);
    }
}

static int slot_claim(void)
{
    install_handlers();
    for (int i = 0; i < SLOTS; i++)
        if (!pending_used[i])
            return i;
    return -1;
}

static void slot_release(struct ra_outfile *of)
{
    if (of->slot >= 0)
        pending_used[of->slot] = 0;
    of->slot = -1;
}

/* ------------------------------------------------------------------ checks */

static const char *kind_of(mode_t m)
{
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

/* The target is absent (or its directory is: the creation beside it will say so) or a regular
 * file; lstat, so a link is seen as a link. */
static int check_target(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return RA_OK;
        return ra_error_set(RA_EIO, "%s: cannot check it: %s", path, strerror(errno));
    }
    if (S_ISREG(st.st_mode))
        return RA_OK;
    if (S_ISLNK(st.st_mode))
        return ra_error_set(RA_EINVAL, "%s: is a symbolic link: not replacing it (give the path it points to)", path);
    if (S_ISDIR(st.st_mode))
        return ra_error_set(RA_EINVAL, "%s: is a directory: not replacing it (give a file name)", path);
    return ra_error_set(RA_EINVAL, "%s: is %s, not a regular file: not replacing it", path, kind_of(st.st_mode));
}

static void dir_of(const char *path, char *dir, size_t len)
{
    char copy[RA_OUTFILE_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    snprintf(dir, len, "%s", dirname(copy));
}

/* What fopen(path, "w") would give: 0666 less the umask. umask can only be read by setting it;
 * it is put back at once (no other thread of ours creates files meanwhile). */
static mode_t file_mode(void)
{
    mode_t mask = umask(0);
    umask(mask);
    return 0666 & ~mask;
}

/* ------------------------------------------------------------------ the temporary file */

int ra_outfile_begin(struct ra_outfile *of, const char *path)
{
    char dir[RA_OUTFILE_PATH_MAX];
    memset(of, 0, sizeof *of);
    of->fd = of->slot = -1;
    if (!path || !*path)
        return ra_error_set(RA_EINVAL, "no output file name given");
    if (strlen(path) + 8 > sizeof of->path)
        return ra_error_set(RA_ERANGE, "%.200s...: output path longer than %zu characters", path, sizeof of->path - 8);
    int rc = check_target(path);
    if (rc != RA_OK)
        return rc;
    int slot = slot_claim();
    if (slot < 0)
        return ra_error_set(RA_ERANGE, "%s: more than %d output files open at once", path, SLOTS);
    snprintf(of->path, sizeof of->path, "%s", path);
    /* mkstemp fills in the name in the slot itself, and the slot is claimed the moment it
     * returns: a signal can only come between the two in a window of a few instructions. */
    snprintf(pending[slot], sizeof pending[slot], "%s.XXXXXX", path);
    int fd = mkstemp(pending[slot]);
    if (fd < 0) {
        int e = errno;
        dir_of(path, dir, sizeof dir);
        return ra_error_set(RA_EIO, "%s: cannot create a file in %s: %s", path, dir, strerror(e));
    }
    pending_used[slot] = 1;
    of->slot = slot;
    of->fd = fd;
    snprintf(of->tmp, sizeof of->tmp, "%s", pending[slot]);
    fcntl(fd, F_SETFD, FD_CLOEXEC); /* launchers and MPI helpers forked later need not hold it */
    if (fchmod(fd, file_mode()) != 0) {
        rc = ra_error_set(RA_EIO, "%s: cannot set the mode of %s: %s", path, of->tmp, strerror(errno));
        ra_outfile_abort(of);
    }
    return rc;
}

int ra_outfile_check(const char *path)
{
    struct ra_outfile of;
    int rc = ra_outfile_begin(&of, path);
    ra_outfile_abort(&of);
    return rc;
}

int ra_outfile_open(struct ra_outfile *of, const char *path, FILE **fp)
{
    *fp = NULL;
    int rc = ra_outfile_begin(of, path);
    if (rc != RA_OK)
        return rc;
    if (!(of->fp = fdopen(of->fd, "w"))) {
        rc = ra_error_set(RA_EIO, "%s: cannot open a stream on %s: %s", path, of->tmp, strerror(errno));
        ra_outfile_abort(of);
        return rc;
    }
    of->buf = malloc(RA_HUGE_PAGE);
    if (of->buf && setvbuf(of->fp, of->buf, _IOFBF, RA_HUGE_PAGE) != 0) {
        free(of->buf); /* stdio's own buffer then; only the page size of a later mapping differs */
        of->buf = NULL;
    }
    *fp = of->fp;
    return RA_OK;
}

int ra_outfile_detach(struct ra_outfile *of)
{
    if (of->fd >= 0)
        close(of->fd);
    of->fd = -1;
    if (unlink(of->tmp) != 0 && errno != ENOENT) {
        int rc = ra_error_set(RA_EIO, "%s: cannot remove %s: %s", of->path, of->tmp, strerror(errno));
        ra_outfile_abort(of);
        return rc;
    }
    return RA_OK;
}

/* fsync of the written data, so the rename never publishes a file whose blocks are not on
 * disk yet. Filesystems that cannot sync (EINVAL) have nothing to lose by it. */
static int sync_fd(int fd)
{
    return fsync(fd) == 0 || errno == EINVAL ? 0 : -1;
}

/* Closes the temporary file with its data on disk; 0, or -1 with errno set. */
static int finish_tmp(struct ra_outfile *of)
{
    int fd = of->fp ? fileno(of->fp) : of->fd >= 0 ? of->fd : open(of->tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int ok = fd >= 0 && (!of->fp || (fflush(of->fp) == 0 && !ferror(of->fp))) && sync_fd(fd) == 0;
    int e = errno;
    if (of->fp) {
        if (fclose(of->fp) != 0 && ok)
            ok = 0, e = errno;
    } else if (fd >= 0) {
        close(fd);
    }
    free(of->buf);
    of->buf = NULL;
    of->fp = NULL;
    of->fd = -1;
    errno = e;
    return ok ? 0 : -1;
}

int ra_outfile_commit(struct ra_outfile *of)
{
    char dir[RA_OUTFILE_PATH_MAX];
    int rc = RA_OK;
    if (!of->tmp[0])
        return ra_error_set(RA_EINVAL, "%s: nothing to commit", of->path);
    if (finish_tmp(of) != 0)
        rc = ra_error_set(RA_EIO, "%s: cannot write %s: %s", of->path, of->tmp, strerror(errno));
    if (rc == RA_OK)
        rc = check_target(of->path); /* a long run: it may have become a link or a FIFO meanwhile */
    if (rc == RA_OK && rename(of->tmp, of->path) != 0)
        rc = ra_error_set(RA_EIO, "%s: cannot replace it with %s: %s", of->path, of->tmp, strerror(errno));
    if (rc != RA_OK) {
        ra_outfile_abort(of);
        return rc;
    }
    slot_release(of);
    of->tmp[0] = '\0';
    dir_of(of->path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* the rename itself; failing here loses nothing already written */
        fsync(dfd);
        close(dfd);
    }
    return RA_OK;
}

void ra_outfile_abort(struct ra_outfile *of)
{
    if (of->fp)
        fclose(of->fp);
    else if (of->fd >= 0)
        close(of->fd);
    free(of->buf);
    of->buf = NULL;
    of->fp = NULL;
    of->fd = -1;
    if (of->tmp[0])
        unlink(of->tmp);
    of->tmp[0] = '\0';
    slot_release(of);
}
