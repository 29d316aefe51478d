/* Read-only memory-mapped files: weights are mapped, never copied, so that
 * ranks on one node share the page cache. */
#ifndef RA_MAPPED_FILE_H
#define RA_MAPPED_FILE_H

#include <stddef.h>

struct ra_mapped_file {
    const unsigned char *data;
    size_t size;
    char *path; /* owned copy, for error messages */
};

int ra_mapped_file_open(struct ra_mapped_file *f, const char *path);
void ra_mapped_file_close(struct ra_mapped_file *f);

#endif
