/* Hugging Face safetensors files: a validating parser over a memory mapping,
 * and a streaming writer.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the data region; offsets are relative to its start. The parser checks
 * every claim of the header against the file before anything points into it,
 * so a truncated or lying file is an error, never a wild read; as the
 * reference library does, it also requires the tensors to cover the data
 * region exactly (no gaps, overlaps or trailing bytes), which is what catches
 * a header length that is off by a few bytes. */
#ifndef RA_SAFETENSORS_H
#define RA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "mapped_file.h"
#include "model.h"

#define RA_ST_MAX_DIMS 8
#define RA_ST_MAX_HEADER (100u * 1024 * 1024) /* larger headers are rejected */

struct ra_st_entry {
    char *name;
    enum ra_dtype dtype;
    int n_dims;                      /* 0 for a scalar */
    int64_t shape[RA_ST_MAX_DIMS];
    uint64_t begin, end;             /* byte offsets in the data region */
    const void *data;                /* begin, inside the mapping */
};

struct ra_safetensors {
    const struct ra_mapped_file *file; /* the mapping parsed (owned or borrowed) */
    struct ra_mapped_file own;         /* set when ra_safetensors_open mapped it */
    const unsigned char *data;         /* the data region */
    uint64_t data_size;
    struct ra_st_entry *entries;       /* sorted by name */
    int n_entries;
    char **meta;                       /* __metadata__: key, value, key, value... */
    int n_meta;
};

/* Maps PATH and parses it; close with ra_safetensors_close. */
int ra_safetensors_open(struct ra_safetensors *st, const char *path);

/* Parses a mapping that the caller keeps open (and closes) itself: the
 * entries' data pointers stay valid as long as the mapping, even after
 * ra_safetensors_close. */
int ra_safetensors_parse(struct ra_safetensors *st, const struct ra_mapped_file *f);

/* Frees the index; unmaps the file only if ra_safetensors_open mapped it. */
void ra_safetensors_close(struct ra_safetensors *st);

/* The entry called NAME, or NULL. */
const struct ra_st_entry *ra_safetensors_find(const struct ra_safetensors *st, const char *name);

/* A __metadata__ value, or NULL. */
const char *ra_safetensors_meta(const struct ra_safetensors *st, const char *key);

/* Bytes of an entry (end - begin). */
static inline uint64_t ra_st_entry_bytes(const struct ra_st_entry *e) { return e->end - e->begin; }

/* The safetensors name of a dtype ("F32", "F16", "BF16"). */
const char *ra_safetensors_dtype_name(enum ra_dtype t);

/* ------------------------------------------------------------------ writing */

struct ra_st_write_entry {
    const char *name;
    enum ra_dtype dtype;
    int n_dims;
    int64_t shape[RA_ST_MAX_DIMS];
    const void *data; /* used by ra_safetensors_write only */
};

/* A streaming writer: the header (with offsets computed from the entries) is
 * written first, then the caller appends each tensor's bytes, in entry order,
 * in pieces of any size. The file is written under a temporary name beside
 * PATH and renamed to PATH by ra_safetensors_writer_close only once every byte
 * has arrived, so a failed or interrupted write never leaves a half file
 * under PATH. The header is padded with spaces so that the data region starts
 * at a multiple of 8 bytes, as the Hugging Face library does. */
struct ra_safetensors_writer;

/* META: NULL or a NULL-terminated list of key, value strings for
 * __metadata__. Entries and META are copied into the header at once. */
int ra_safetensors_writer_open(struct ra_safetensors_writer **w, const char *path,
                               const struct ra_st_write_entry *entries, int n,
                               const char *const *meta);
int ra_safetensors_writer_write(struct ra_safetensors_writer *w, const void *bytes, size_t n);
/* Checks that every byte was written, flushes, renames; frees W either way. */
int ra_safetensors_writer_close(struct ra_safetensors_writer *w);
/* Removes the temporary file and frees W (NULL is fine). */
void ra_safetensors_writer_abort(struct ra_safetensors_writer *w);

/* Writes N in-memory tensors (entries[i].data) with metadata {"format": "pt"}. */
int ra_safetensors_write(const char *path, const struct ra_st_write_entry *entries, int n);

#endif
