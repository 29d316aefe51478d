/* Writing GGUF files (version 3, little-endian; the layout gguf.h describes),
 * as llama.cpp and gguf-py read them.
 *
 * Everything before the data is collected first: metadata (every value type
 * the reader knows, arrays of them, arrays of strings, and a copy of any entry
 * of a parsed file, nested arrays included), then the tensor infos, whose
 * offsets follow from their shapes and types. ra_gguf_writer_begin writes
 * that header to a stream, and the tensors' bytes follow one by one, in the
 * order they were declared, each padded to the alignment: a large model
 * passes through one tensor at a time.
 *
 *   struct ra_gguf_writer w;
 *   ra_gguf_writer_init(&w, 0);
 *   ra_gguf_writer_str(&w, "general.architecture", "llama"); ...
 *   ra_gguf_writer_tensor(&w, "token_embd.weight", 2, dims, RA_GGML_Q8_0); ...
 *   ra_gguf_writer_begin(&w, f);
 *   ra_gguf_writer_data(&w, bytes, n); ...   (one call per tensor, in order)
 *   ra_gguf_writer_end(&w);
 *   ra_gguf_writer_free(&w);
 *
 * Errors (RA_EINVAL, RA_ENOMEM, RA_EIO) name the key or tensor; a duplicate
 * key or tensor name, a row that is not whole blocks of its type, a tensor's
 * bytes of the wrong size or out of order are refused. Writing to a
 * temporary file and renaming it (outfile.h) is the caller's. */
#ifndef RA_GGUF_WRITE_H
#define RA_GGUF_WRITE_H

#include <stdint.h>
#include <stdio.h>

#include "gguf.h"

struct ra_gguf_buf {
    unsigned char *p;
    size_t len, cap;
};

struct ra_gguf_wtensor {
    uint64_t bytes; /* its data's size */
    size_t name;    /* its name in names[] */
};

struct ra_gguf_writer {
    uint32_t alignment;
    struct ra_gguf_buf kvs, infos; /* serialised metadata and tensor infos */
    uint64_t n_kvs, n_tensors;
    char **names;                  /* keys then tensor names, for the duplicate check */
    size_t n_names, cap_names;
    struct ra_gguf_wtensor *sizes; /* the tensors, in order */
    uint64_t data_size;            /* the data section so far (offset of the next tensor) */
    FILE *f;                       /* set by ra_gguf_writer_begin */
    uint64_t next;                 /* the next tensor ra_gguf_writer_data expects */
};

/* ALIGNMENT 0: the default 32; any other power of two is written as general.alignment. */
int ra_gguf_writer_init(struct ra_gguf_writer *w, uint32_t alignment);
void ra_gguf_writer_free(struct ra_gguf_writer *w);

/* A scalar of TYPE (not str or arr) at V: a value of that type's C size (bool: one byte, 0 or 1). */
int ra_gguf_writer_scalar(struct ra_gguf_writer *w, const char *key, enum ra_gguf_type type, const void *v);
int ra_gguf_writer_u32(struct ra_gguf_writer *w, const char *key, uint32_t v);
int ra_gguf_writer_i32(struct ra_gguf_writer *w, const char *key, int32_t v);
int ra_gguf_writer_f32(struct ra_gguf_writer *w, const char *key, float v);
int ra_gguf_writer_bool(struct ra_gguf_writer *w, const char *key, int v);
int ra_gguf_writer_str(struct ra_gguf_writer *w, const char *key, const char *s);
/* N elements of a scalar type ELEM at ELEMS (C layout of that type). */
int ra_gguf_writer_arr(struct ra_gguf_writer *w, const char *key, enum ra_gguf_type elem, const void *elems,
                       uint64_t n);
/* N strings; LENS may be NULL (NUL-terminated strings) or give each one's bytes. */
int ra_gguf_writer_arr_str(struct ra_gguf_writer *w, const char *key, const char *const *s, const size_t *lens,
                           uint64_t n);
/* Entry KV of the parsed file G, under its own key, whatever its type. */
int ra_gguf_writer_copy(struct ra_gguf_writer *w, const struct ra_gguf *g, const struct ra_gguf_kv *kv);

/* Declares the next tensor: N_DIMS (1..4) dims, dims[0] the row, of ggml type TYPE. */
int ra_gguf_writer_tensor(struct ra_gguf_writer *w, const char *name, int n_dims, const int64_t *dims,
                          uint32_t type);

/* Writes the header, metadata and tensor infos to F, padded to the alignment. */
int ra_gguf_writer_begin(struct ra_gguf_writer *w, FILE *f);
/* The next declared tensor's BYTES bytes (exactly its size), then padding. */
int ra_gguf_writer_data(struct ra_gguf_writer *w, const void *data, uint64_t bytes);
/* Checks that every declared tensor was written. */
int ra_gguf_writer_end(struct ra_gguf_writer *w);

#endif
