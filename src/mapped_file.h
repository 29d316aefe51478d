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

/* 1: files of 2 MiB and more are read into anonymous memory in transparent
 * huge pages instead of mapped (--no-mmap): faster to stream (decode) where
 * the page cache holds the file in small folios (hugepage.h), but
 * private to the process, where a mapping shares the page cache with every
 * rank on the node. -1 (default): RA_MMAP=0 in the environment means 1. */
extern int ra_mapped_file_copy;

/* Maps PATH (opened with ra_file_open_regular): a non-empty regular file. */
int ra_mapped_file_open(struct ra_mapped_file *f, const char *path);
void ra_mapped_file_close(struct ra_mapped_file *f);

/* Opens PATH read-only to read it as data (weights, tokenizer, config and index
 * JSON, prompts, tables): every program opens its input files through this.
 * Anything but a regular file is refused with one error line before it can
 * block or never end: a FIFO (a plain open would wait for a writer, so it is
 * opened O_NONBLOCK, cleared again once fstat says it is a regular file), a
 * directory, a device such as /dev/zero (endless) or a terminal, a socket.
 * On success *fd is open (close-on-exec) and, if size is not NULL, *size is
 * the file's size. Errors: "PATH: cannot open: CAUSE" or "PATH: is a FIFO,
 * not a regular file". */
int ra_file_open_regular(const char *path, int *fd, size_t *size);

#endif
