/* GGUF files (llama.cpp's format, versions 2 and 3, little-endian): a
 * validating parser over a memory mapping, typed metadata getters, and the
 * conversion of ggml's tensor types (F32, F16, BF16 and the block formats
 * Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) to float.
 *
 * Layout (every integer little-endian):
 *   "GGUF", u32 version, u64 tensor count, u64 metadata count,
 *   metadata:     { string key, u32 value type, value } per entry,
 *   tensor infos: { string name, u32 n_dims, u64 dims[n_dims], u32 ggml type,
 *                   u64 offset } per tensor,
 *   padding to general.alignment (a u32, default 32), then the data section;
 *   tensor offsets count from its start.
 * A string is a u64 byte count and the bytes (no NUL); an array is a u32
 * element type, a u64 count and the elements, which may be arrays themselves.
 * dims[0] is the fastest-varying dimension (ggml's ne[0], a row), so a
 * PyTorch [rows, cols] weight has dims { cols, rows }.
 *
 * The parser checks every claim of the file before it allocates or points at
 * anything: each count and length against the bytes left (a file that claims
 * 2^63 entries or a 2^64-byte string is one error line, never an allocation),
 * each tensor's byte size against its type and shape (rows of whole blocks, no
 * overflow), every tensor inside the data section, aligned and sharing no
 * byte with another, keys and tensor names unique. Version 1 (32-bit counts)
 * and big-endian files are refused by name. Tensor data stays in the mapping;
 * metadata is copied, strings NUL-terminated. */
#ifndef RA_GGUF_H
#define RA_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "mapped_file.h"

#define RA_GGUF_MAX_DIMS 4                  /* as ggml */
#define RA_GGUF_MAX_DEPTH 16                /* arrays nested deeper are refused */
#define RA_GGUF_MAX_ALIGNMENT (1u << 24)    /* a larger general.alignment is refused */
#define RA_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types; the numbers are the file's. */
enum ra_gguf_type {
    RA_GGUF_U8 = 0, RA_GGUF_I8, RA_GGUF_U16, RA_GGUF_I16, RA_GGUF_U32, RA_GGUF_I32, RA_GGUF_F32,
    RA_GGUF_BOOL, RA_GGUF_STR, RA_GGUF_ARR, RA_GGUF_U64, RA_GGUF_I64, RA_GGUF_F64,
    RA_GGUF_N_TYPES
};

/* ggml tensor types this code converts; the numbers are the file's. The
 * parser knows the layout (block size and bytes) of ggml's other types too,
 * so a file holding them parses; ra_gguf_dequantize refuses them. */
enum ra_ggml_type {
    RA_GGML_F32 = 0, RA_GGML_F16 = 1, RA_GGML_Q4_0 = 2, RA_GGML_Q4_1 = 3, RA_GGML_Q8_0 = 8,
    RA_GGML_Q4_K = 12, RA_GGML_Q6_K = 14, RA_GGML_BF16 = 30,
};

/* A metadata value: read it with the ra_gguf_value_* functions. */
struct ra_gguf_value {
    enum ra_gguf_type type;
    enum ra_gguf_type elem_type; /* RA_GGUF_ARR: the elements' type */
    uint64_t n;                  /* RA_GGUF_STR: bytes; RA_GGUF_ARR: elements */
    uint64_t at;                 /* where the value is: see the top of gguf.c */
};

struct ra_gguf_kv {
    char *key;
    struct ra_gguf_value value;
};

struct ra_gguf_tensor {
    char *name;
    uint32_t type;                    /* ggml type number */
    int n_dims;
    int64_t dims[RA_GGUF_MAX_DIMS];   /* dims[0] is the row; those past n_dims are 1 */
    int64_t n_elements;
    uint64_t offset, bytes;           /* in the data section */
    const void *data;                 /* inside the mapping, at a multiple of the file's alignment
                                         (with general.alignment 1 or 2, maybe not a float's) */
};

struct ra_gguf {
    const struct ra_mapped_file *file; /* the mapping parsed (owned or borrowed) */
    struct ra_mapped_file own;         /* set when ra_gguf_open mapped it */
    uint32_t version, alignment;
    const unsigned char *data;         /* the data section */
    uint64_t data_offset, data_size;
    struct ra_gguf_tensor *tensors;    /* sorted by name */
    int64_t n_tensors;
    struct ra_gguf_kv *kvs;            /* sorted by key */
    int64_t n_kvs;
    struct ra_gguf_value *elems;       /* the elements of arrays of strings or arrays */
    uint64_t n_elems, cap_elems;
    char *strings;                     /* string values, each NUL-terminated */
    uint64_t strings_len, strings_cap;
};

/* Maps PATH and parses it; close with ra_gguf_close. */
int ra_gguf_open(struct ra_gguf *g, const char *path);

/* Parses a mapping that the caller keeps open (and closes) itself: tensor
 * data pointers stay valid as long as the mapping, even after ra_gguf_close. */
int ra_gguf_parse(struct ra_gguf *g, const struct ra_mapped_file *f);

/* Frees the index and metadata; unmaps the file only if ra_gguf_open mapped it. */
void ra_gguf_close(struct ra_gguf *g);

/* The tensor called NAME, or NULL. */
const struct ra_gguf_tensor *ra_gguf_find(const struct ra_gguf *g, const char *name);

/* The metadata entry KEY, or NULL. */
const struct ra_gguf_kv *ra_gguf_find_kv(const struct ra_gguf *g, const char *key);

/* ------------------------------------------------------------------ typed getters
 * Each returns RA_OK, or records "FILE: key KEY is missing", "FILE: key KEY is
 * str, not u32", "FILE: key KEY: value 70000 does not fit u16"... and returns
 * RA_EFORMAT. Integer getters take any integer type whose value fits; the
 * f32 getter takes f32, and f64 rounded to nearest; bool and str take their own type only. */
int ra_gguf_get_u32(const struct ra_gguf *g, const char *key, uint32_t *out);
int ra_gguf_get_i64(const struct ra_gguf *g, const char *key, int64_t *out);
int ra_gguf_get_f32(const struct ra_gguf *g, const char *key, float *out);
int ra_gguf_get_bool(const struct ra_gguf *g, const char *key, int *out);
/* *s is NUL-terminated; *len (if LEN is not NULL) counts its bytes, which may include NULs. */
int ra_gguf_get_str(const struct ra_gguf *g, const char *key, const char **s, size_t *len);

/* Arrays: the element type and count of array KEY, then element I of an
 * array of strings, of integers, or of f32/f64 (I past the end: an error). */
int ra_gguf_get_arr(const struct ra_gguf *g, const char *key, enum ra_gguf_type *elem_type, uint64_t *n);
int ra_gguf_get_arr_str(const struct ra_gguf *g, const char *key, uint64_t i, const char **s, size_t *len);
int ra_gguf_get_arr_i64(const struct ra_gguf *g, const char *key, uint64_t i, int64_t *out);
int ra_gguf_get_arr_f32(const struct ra_gguf *g, const char *key, uint64_t i, float *out);

/* ------------------------------------------------------------------ values
 * For walking every value, nested arrays included. Each returns RA_EINVAL
 * (with a message that names no file) when V is of another kind. */
int ra_gguf_value_elem(const struct ra_gguf *g, const struct ra_gguf_value *arr, uint64_t i,
                       struct ra_gguf_value *out);
int ra_gguf_value_u64(const struct ra_gguf *g, const struct ra_gguf_value *v, uint64_t *out); /* integers >= 0 */
int ra_gguf_value_i64(const struct ra_gguf *g, const struct ra_gguf_value *v, int64_t *out);  /* integers <= INT64_MAX */
int ra_gguf_value_f64(const struct ra_gguf *g, const struct ra_gguf_value *v, double *out);   /* f32, f64 */
int ra_gguf_value_bool(const struct ra_gguf *g, const struct ra_gguf_value *v, int *out);
int ra_gguf_value_str(const struct ra_gguf *g, const struct ra_gguf_value *v, const char **s, size_t *len);

/* "u8", "i8", ..., "str", "arr" (ggml's names), or "?". */
const char *ra_gguf_type_name(enum ra_gguf_type t);

/* ------------------------------------------------------------------ tensor types */

/* ggml's name of tensor type T ("Q4_1"), or NULL for a type this code does not know. */
const char *ra_ggml_type_name(uint32_t t);

/* Elements per block and bytes per block of type T (1 and 4 for F32); RA_EUNSUPPORTED if unknown. */
int ra_ggml_type_layout(uint32_t t, int64_t *block, int64_t *block_bytes);

/* Converts the first N elements of a tensor of type T at SRC (any alignment)
 * to float, as ggml's dequantize_row_* do: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q4_K, Q6_K.
 * N must be a whole number of blocks (RA_EINVAL); other types give
 * RA_EUNSUPPORTED naming the type. */
int ra_gguf_dequantize(uint32_t t, const void *src, float *dst, int64_t n);

#endif
