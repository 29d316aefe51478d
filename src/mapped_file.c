#include "mapped_file.h"
#include "hugepage.h"
#include "status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a file";
}

int ra_file_open_regular(const char *path, int *fd, size_t *size)
{
    struct stat st;
    int rc = RA_OK, flags;
    /* O_NONBLOCK: open() on a FIFO would wait for a writer, before fstat could say what it is. */
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (*fd < 0)
        return ra_error_set(RA_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(*fd, &st) != 0) {
        rc = ra_error_set(RA_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ra_error_set(RA_EIO, "%s: is %s, not a regular file", path, file_kind(st.st_mode));
        goto out;
    }
    /* Reads of a regular file never return EAGAIN, but stdio callers should see a plain descriptor. */
    if ((flags = fcntl(*fd, F_GETFL)) < 0 || fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        rc = ra_error_set(RA_EIO, "%s: fcntl failed: %s", path, strerror(errno));
        goto out;
    }
    if (size)
        *size = (size_t)st.st_size;
out:
    if (rc != RA_OK) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

int ra_mapped_file_copy = -1;

/* Files below this size are always mapped (tokenizers, configs). */
#define MAPPED_COPY_MIN RA_HUGE_PAGE

/* The file read into anonymous memory in transparent huge pages, then made
 * read-only: a decode step streams every weight, and a mapping has 4 KiB
 * pages wherever the page cache holds the file in small folios (hugepage.h),
 * which stop the prefetchers at every page and cost a TLB walk each. The
 * mapping is over-allocated by one huge page and its start rounded up, so
 * that the whole file lies in aligned 2 MiB pages. */
static int copy_to_huge_pages(int fd, const char *path, size_t size, void **out)
{
    const size_t len = size + RA_HUGE_PAGE;
    unsigned char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return ra_error_set(RA_ENOMEM, "%s: cannot allocate %zu bytes to read it into: %s", path, size,
                            strerror(errno));
    unsigned char *p = raw + (RA_HUGE_PAGE - (uintptr_t)raw % RA_HUGE_PAGE) % RA_HUGE_PAGE;
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    const size_t tail = len - (size_t)(p - raw) - size;
    if (tail)
        munmap(p + size, tail);
    ra_huge_advise(p, size);
    for (size_t done = 0; done < size;) {
        const ssize_t got = pread(fd, p + done, size - done > ((size_t)1 << 30) ? (size_t)1 << 30 : size - done,
                                  (off_t)done);
        if (got <= 0) {
            munmap(p, size);
            return ra_error_set(RA_EIO, "%s: read failed at byte %zu of %zu: %s", path, done, size,
                                got < 0 ? strerror(errno) : "unexpected end of file");
        }
        done += (size_t)got;
    }
    if (mprotect(p, size, PROT_READ) != 0) {
        munmap(p, size);
        return ra_error_set(RA_EIO, "%s: mprotect failed: %s", path, strerror(errno));
    }
    *out = p;
    return RA_OK;
}

int ra_mapped_file_open(struct ra_mapped_file *f, const char *path)
{
    size_t size = 0;
    int fd = -1, rc;

    memset(f, 0, sizeof *f);
    if (ra_mapped_file_copy < 0) {
        const char *e = getenv("RA_MMAP");
        ra_mapped_file_copy = e && strcmp(e, "0") == 0;
    }
    if ((rc = ra_file_open_regular(path, &fd, &size)) != RA_OK)
        goto out;
    if (size == 0) {
        rc = ra_error_set(RA_EFORMAT, "%s: file is empty", path);
        goto out;
    }
    void *p = NULL;
    if (ra_mapped_file_copy && size >= MAPPED_COPY_MIN) {
        if ((rc = copy_to_huge_pages(fd, path, size, &p)) != RA_OK)
            goto out;
    } else {
        p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            rc = ra_error_set(RA_EIO, "%s: mmap failed: %s", path, strerror(errno));
            goto out;
        }
        ra_huge_advise(p, size); /* 2 MiB pages where the page cache has 2 MiB folios, see hugepage.h */
    }
    f->data = p;
    f->size = size;
    f->path = strdup(path);
    if (!f->path) {
        ra_mapped_file_close(f);
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    }
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

void ra_mapped_file_close(struct ra_mapped_file *f)
{
    if (f->data)
        munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}
