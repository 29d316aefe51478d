#include "mapped_file.h"
#include "status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int ra_mapped_file_open(struct ra_mapped_file *f, const char *path)
{
    struct stat st;
    int fd = -1, rc = RA_OK;

    memset(f, 0, sizeof *f);
    fd = open(path, O_RDONLY);
    if (fd < 0) {
        rc = ra_error_set(RA_EIO, "%s: cannot open: %s", path, strerror(errno));
        goto out;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = ra_error_set(RA_EIO, "%s: not a regular file", path);
        goto out;
    }
    if (st.st_size == 0) {
        rc = ra_error_set(RA_EFORMAT, "%s: file is empty", path);
        goto out;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        rc = ra_error_set(RA_EIO, "%s: mmap failed: %s", path, strerror(errno));
        goto out;
    }
    f->data = p;
    f->size = (size_t)st.st_size;
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
