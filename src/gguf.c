/* GGUF parsing and ggml's tensor types: see gguf.h.
 *
 * Where a value lives (struct ra_gguf_value.at): numbers and bools, and
 * arrays of them, are read from the mapping at file offset `at` (an array's
 * first element); a string is at g->strings + at; the elements of an array
 * of strings or arrays are g->elems[at .. at + n). Values are offsets, not
 * pointers, because both buffers grow while the file is parsed. */
#include "gguf.h"
#include "half.h"
#include "status.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC "GGUF"

static const struct {
    const char *name;
    unsigned size; /* bytes of a scalar; 0 for str and arr */
} value_types[RA_GGUF_N_TYPES] = {
    { "u8", 1 }, { "i8", 1 }, { "u16", 2 }, { "i16", 2 }, { "u32", 4 }, { "i32", 4 }, { "f32", 4 },
    { "bool", 1 }, { "str", 0 }, { "arr", 0 }, { "u64", 8 }, { "i64", 8 }, { "f64", 8 },
};

/* ggml's types (ggml.c's type_traits, checked against gguf-py's GGML_QUANT_SIZES
 * by tests/gguf_oracle.py); the gaps are numbers ggml has retired or not given. */
static const struct {
    const char *name;
    int64_t block, bytes;
} ggml_types[] = {
    [0] = { "F32", 1, 4 },        [1] = { "F16", 1, 2 },        [2] = { "Q4_0", 32, 18 },
    [3] = { "Q4_1", 32, 20 },     [6] = { "Q5_0", 32, 22 },     [7] = { "Q5_1", 32, 24 },
    [8] = { "Q8_0", 32, 34 },     [9] = { "Q8_1", 32, 40 },     [10] = { "Q2_K", 256, 84 },
    [11] = { "Q3_K", 256, 110 },  [12] = { "Q4_K", 256, 144 },  [13] = { "Q5_K", 256, 176 },
    [14] = { "Q6_K", 256, 210 },  [15] = { "Q8_K", 256, 292 },  [16] = { "IQ2_XXS", 256, 66 },
    [17] = { "IQ2_XS", 256, 74 }, [18] = { "IQ3_XXS", 256, 98 }, [19] = { "IQ1_S", 256, 50 },
    [20] = { "IQ4_NL", 32, 18 },  [21] = { "IQ3_S", 256, 110 }, [22] = { "IQ2_S", 256, 82 },
    [23] = { "IQ4_XS", 256, 136 }, [24] = { "I8", 1, 1 },       [25] = { "I16", 1, 2 },
    [26] = { "I32", 1, 4 },       [27] = { "I64", 1, 8 },       [28] = { "F64", 1, 8 },
    [29] = { "IQ1_M", 256, 56 },  [30] = { "BF16", 1, 2 },      [34] = { "TQ1_0", 256, 54 },
    [35] = { "TQ2_0", 256, 66 },  [39] = { "MXFP4", 32, 17 },
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

const char *ra_gguf_type_name(enum ra_gguf_type t)
{
    return (unsigned)t < RA_GGUF_N_TYPES ? value_types[t].name : "?";
}

const char *ra_ggml_type_name(uint32_t t)
{
    return t < N_GGML_TYPES ? ggml_types[t].name : NULL;
}

int ra_ggml_type_layout(uint32_t t, int64_t *block, int64_t *block_bytes)
{
    if (!ra_ggml_type_name(t))
        return ra_error_set(RA_EUNSUPPORTED, "unknown ggml tensor type %" PRIu32, t);
    *block = ggml_types[t].block;
    *block_bytes = ggml_types[t].bytes;
    return RA_OK;
}

static uint64_t read_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ------------------------------------------------------------------ the cursor */

struct parser {
    struct ra_gguf *g;
    const char *file;       /* for messages */
    const unsigned char *base;
    uint64_t pos, size;
    char where[RA_ESC_SIZE + 64]; /* what is being read, for messages: "key general.name" */
};

static uint64_t left(const struct parser *p)
{
    return p->size - p->pos;
}

/* Records "FILE: WHERE: cause" and returns STATUS. */
static int fail(const struct parser *p, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(const struct parser *p, int status, const char *fmt, ...)
{
    char cause[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cause, sizeof cause, fmt, ap);
    va_end(ap);
    return ra_error_set(status, "%s: %s: %s", p->file, p->where, cause);
}

/* Takes N bytes at the cursor (WHAT, for the message): *at gets their offset. */
static int take(struct parser *p, uint64_t n, const char *what, uint64_t *at)
{
    if (n > left(p))
        return fail(p, RA_EFORMAT, "truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64 ", %" PRIu64
                    " are left", what, n, p->pos, left(p));
    *at = p->pos;
    p->pos += n;
    return RA_OK;
}

static int read_uint(struct parser *p, int bytes, const char *what, uint64_t *v)
{
    uint64_t at = 0;
    int rc = take(p, (uint64_t)bytes, what, &at);
    if (rc == RA_OK)
        *v = read_le(p->base + at, bytes);
    return rc;
}

static int read_u32(struct parser *p, const char *what, uint32_t *v)
{
    uint64_t x = 0;
    int rc = read_uint(p, 4, what, &x);
    *v = (uint32_t)x;
    return rc;
}

/* A string: *at and *len locate its bytes in the file. */
static int read_string(struct parser *p, const char *what, uint64_t *at, uint64_t *len)
{
    int rc = read_uint(p, 8, what, len);
    if (rc != RA_OK)
        return rc;
    if (*len > left(p))
        return fail(p, RA_EFORMAT, "%s is %" PRIu64 " bytes long, past the end of the file (%" PRIu64
                    " bytes left)", what, *len, left(p));
    *at = p->pos;
    p->pos += *len;
    return RA_OK;
}

/* A key or tensor name as a C string: not empty, no NUL byte inside. */
static int read_name(struct parser *p, const char *what, char **out)
{
    uint64_t at, len;
    int rc = read_string(p, what, &at, &len);
    if (rc != RA_OK)
        return rc;
    if (len == 0)
        return fail(p, RA_EFORMAT, "%s is empty", what);
    if (memchr(p->base + at, 0, len))
        return fail(p, RA_EFORMAT, "%s holds a NUL byte", what);
    /* (not strndup: the name's bytes may end the file, with no NUL after them) */
    if (!(*out = malloc(len + 1)))
        return fail(p, RA_ENOMEM, "out of memory");
    memcpy(*out, p->base + at, len);
    (*out)[len] = '\0';
    return RA_OK;
}

/* ------------------------------------------------------------------ metadata values */

/* Copies LEN bytes at AT into g->strings, NUL-terminated: *off gets their offset. */
static int store_string(struct parser *p, uint64_t at, uint64_t len, uint64_t *off)
{
    struct ra_gguf *g = p->g;
    if (g->strings_len + len + 1 > g->strings_cap) {
        uint64_t cap = 2 * g->strings_cap > g->strings_len + len + 1 ? 2 * g->strings_cap : g->strings_len + len + 1;
        char *s = realloc(g->strings, cap);
        if (!s)
            return fail(p, RA_ENOMEM, "out of memory");
        g->strings = s;
        g->strings_cap = cap;
    }
    memcpy(g->strings + g->strings_len, p->base + at, len);
    g->strings[g->strings_len + len] = '\0';
    *off = g->strings_len;
    g->strings_len += len + 1;
    return RA_OK;
}

/* Reserves N zeroed elements in g->elems: *first gets the index of the first. */
static int reserve_elems(struct parser *p, uint64_t n, uint64_t *first)
{
    struct ra_gguf *g = p->g;
    *first = g->n_elems;
    if (n == 0)
        return RA_OK;
    if (g->n_elems + n > g->cap_elems) {
        uint64_t cap = 2 * g->cap_elems > g->n_elems + n ? 2 * g->cap_elems : g->n_elems + n;
        struct ra_gguf_value *e = realloc(g->elems, cap * sizeof *e);
        if (!e)
            return fail(p, RA_ENOMEM, "out of memory");
        g->elems = e;
        g->cap_elems = cap;
    }
    memset(g->elems + g->n_elems, 0, n * sizeof *g->elems);
    g->n_elems += n;
    return RA_OK;
}

static int check_bools(struct parser *p, uint64_t at, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p->base[at + i] > 1)
            return fail(p, RA_EFORMAT, "bool value %u at offset %" PRIu64 " is neither 0 nor 1", p->base[at + i],
                        at + i);
    return RA_OK;
}

static int parse_value(struct parser *p, enum ra_gguf_type type, int depth, struct ra_gguf_value *v);

/* An array (after its value type): element type, count, elements. */
static int parse_array(struct parser *p, int depth, struct ra_gguf_value *v)
{
    uint32_t t;
    uint64_t first;
    int rc;

    if (depth >= RA_GGUF_MAX_DEPTH)
        return fail(p, RA_EFORMAT, "arrays nested more than %d deep", RA_GGUF_MAX_DEPTH);
    if ((rc = read_u32(p, "an array's element type", &t)) != RA_OK ||
        (rc = read_uint(p, 8, "an array's length", &v->n)) != RA_OK)
        return rc;
    if (t >= RA_GGUF_N_TYPES)
        return fail(p, RA_EFORMAT, "unknown array element type %" PRIu32, t);
    v->elem_type = (enum ra_gguf_type)t;
    /* Each element takes at least this many bytes: bound the count before anything is allocated. */
    uint64_t min = t == RA_GGUF_STR ? 8 : t == RA_GGUF_ARR ? 12 : value_types[t].size;
    if (v->n > left(p) / min)
        return fail(p, RA_EFORMAT, "an array of %" PRIu64 " %s elements does not fit in the %" PRIu64
                    " bytes left", v->n, value_types[t].name, left(p));
    if (min == value_types[t].size) {
        rc = take(p, v->n * min, "an array's elements", &v->at);
        return rc == RA_OK && t == RA_GGUF_BOOL ? check_bools(p, v->at, v->n) : rc;
    }
    if ((rc = reserve_elems(p, v->n, &first)) != RA_OK)
        return rc;
    v->at = first;
    for (uint64_t i = 0; i < v->n; i++) {
        struct ra_gguf_value e;
        if ((rc = parse_value(p, v->elem_type, depth + 1, &e)) != RA_OK)
            return rc;
        p->g->elems[first + i] = e; /* after the call: it may have moved g->elems */
    }
    return RA_OK;
}

static int parse_value(struct parser *p, enum ra_gguf_type type, int depth, struct ra_gguf_value *v)
{
    uint64_t at;
    int rc;

    memset(v, 0, sizeof *v);
    v->type = type;
    if (type == RA_GGUF_ARR)
        return parse_array(p, depth, v);
    if (type == RA_GGUF_STR) {
        if ((rc = read_string(p, "a string", &at, &v->n)) != RA_OK)
            return rc;
        return store_string(p, at, v->n, &v->at);
    }
    rc = take(p, value_types[type].size, "the value", &v->at);
    return rc == RA_OK && type == RA_GGUF_BOOL ? check_bools(p, v->at, 1) : rc;
}

static int parse_kv(struct parser *p, int64_t i, struct ra_gguf_kv *kv)
{
    uint32_t type;
    int rc;

    snprintf(p->where, sizeof p->where, "metadata entry %" PRId64, i);
    if ((rc = read_name(p, "the key", &kv->key)) != RA_OK)
        return rc;
    snprintf(p->where, sizeof p->where, "key %s", ra_esc(kv->key));
    if ((rc = read_u32(p, "the value type", &type)) != RA_OK)
        return rc;
    if (type >= RA_GGUF_N_TYPES)
        return fail(p, RA_EFORMAT, "unknown value type %" PRIu32, type);
    return parse_value(p, (enum ra_gguf_type)type, 0, &kv->value);
}

/* ------------------------------------------------------------------ tensor infos */

static int parse_tensor_info(struct parser *p, int64_t i, struct ra_gguf_tensor *t)
{
    uint32_t n_dims;
    uint64_t dim;
    int rc;

    snprintf(p->where, sizeof p->where, "tensor %" PRId64, i);
    if ((rc = read_name(p, "the name", &t->name)) != RA_OK)
        return rc;
    snprintf(p->where, sizeof p->where, "tensor %s", ra_esc(t->name));
    if ((rc = read_u32(p, "the number of dimensions", &n_dims)) != RA_OK)
        return rc;
    if (n_dims > RA_GGUF_MAX_DIMS)
        return fail(p, RA_EFORMAT, "%" PRIu32 " dimensions, more than %d", n_dims, RA_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < RA_GGUF_MAX_DIMS; d++)
        t->dims[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        if ((rc = read_uint(p, 8, "a dimension", &dim)) != RA_OK)
            return rc;
        if (dim > (uint64_t)INT64_MAX)
            return fail(p, RA_EFORMAT, "dimension %d is %" PRIu64 ", more than 2^63 - 1", d, dim);
        t->dims[d] = (int64_t)dim;
    }
    if ((rc = read_u32(p, "the tensor type", &t->type)) != RA_OK)
        return rc;
    if (!ra_ggml_type_name(t->type))
        return fail(p, RA_EUNSUPPORTED, "unknown ggml tensor type %" PRIu32, t->type);
    return read_uint(p, 8, "the offset", &t->offset);
}

/* Elements and bytes of T from its type and shape, checked; then its place in the data section. */
static int check_tensor(struct parser *p, struct ra_gguf_tensor *t)
{
    const struct ra_gguf *g = p->g;
    int64_t block = ggml_types[t->type].block, bytes = ggml_types[t->type].bytes, n = 1;

    snprintf(p->where, sizeof p->where, "tensor %s", ra_esc(t->name));
    for (int d = 0; d < t->n_dims; d++)
        if (__builtin_mul_overflow(n, t->dims[d], &n))
            return fail(p, RA_EFORMAT, "its shape has more than 2^63 - 1 elements");
    if (t->dims[0] % block != 0)
        return fail(p, RA_EFORMAT, "rows of %" PRId64 " elements are not whole blocks of %" PRId64 " (type %s)",
                    t->dims[0], block, ggml_types[t->type].name);
    t->n_elements = n;
    if (n / block > INT64_MAX / bytes)
        return fail(p, RA_EFORMAT, "its size in bytes overflows");
    t->bytes = (uint64_t)(n / block * bytes);
    if (t->offset % g->alignment != 0)
        return fail(p, RA_EFORMAT, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu32, t->offset,
                    g->alignment);
    if (t->offset > g->data_size || t->bytes > g->data_size - t->offset)
        return fail(p, RA_EFORMAT, "its %" PRIu64 " bytes at offset %" PRIu64 " run past the end of the data "
                    "section (%" PRIu64 " bytes; truncated file?)", t->bytes, t->offset, g->data_size);
    t->data = g->data + t->offset;
    return RA_OK;
}

static int cmp_offsets(const void *a, const void *b)
{
    const struct ra_gguf_tensor *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(((const struct ra_gguf_tensor *)a)->name, ((const struct ra_gguf_tensor *)b)->name);
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(((const struct ra_gguf_kv *)a)->key, ((const struct ra_gguf_kv *)b)->key);
}

/* No two tensors share a byte (empty ones hold none); then sorted by name, no name twice. */
static int check_layout(struct parser *p)
{
    struct ra_gguf *g = p->g;
    const struct ra_gguf_tensor *prev = NULL;

    qsort(g->tensors, (size_t)g->n_tensors, sizeof *g->tensors, cmp_offsets);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const struct ra_gguf_tensor *t = &g->tensors[i];
        if (t->bytes == 0)
            continue;
        if (prev && t->offset < prev->offset + prev->bytes)
            return ra_error_set(RA_EFORMAT, "%s: tensor %s: bytes [%" PRIu64 ", %" PRIu64 ") overlap tensor %s [%"
                                PRIu64 ", %" PRIu64 ")", p->file, ra_esc(t->name), t->offset, t->offset + t->bytes,
                                ra_esc(prev->name), prev->offset, prev->offset + prev->bytes);
        prev = t;
    }
    qsort(g->tensors, (size_t)g->n_tensors, sizeof *g->tensors, cmp_names);
    for (int64_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i - 1].name, g->tensors[i].name) == 0)
            return ra_error_set(RA_EFORMAT, "%s: tensor name %s appears twice", p->file, ra_esc(g->tensors[i].name));
    return RA_OK;
}

/* ------------------------------------------------------------------ the file */

static const char *gguf_path(const struct ra_gguf *g)
{
    return g->file && g->file->path ? g->file->path : "(gguf)";
}

/* Magic, version and the two counts. */
static int parse_header(struct parser *p, uint64_t *n_tensors, uint64_t *n_kvs)
{
    struct ra_gguf *g = p->g;
    int rc;

    snprintf(p->where, sizeof p->where, "header");
    if (p->size < 4 || memcmp(p->base, GGUF_MAGIC, 4) != 0)
        return ra_error_set(RA_EFORMAT, "%s: not a GGUF file (it does not start with \"GGUF\")", p->file);
    p->pos = 4;
    if ((rc = read_u32(p, "the version", &g->version)) != RA_OK)
        return rc;
    /* A big-endian file's version 3 reads 0x03000000 here, as ggml and gguf-py tell them apart. */
    if ((g->version & 0xffffu) == 0 && g->version != 0)
        return ra_error_set(RA_EUNSUPPORTED, "%s: a big-endian GGUF file (version %" PRIu32 " read byte-swapped); "
                            "only little-endian files are supported", p->file, __builtin_bswap32(g->version));
    if (g->version != 2 && g->version != 3)
        return ra_error_set(RA_EUNSUPPORTED, "%s: GGUF version %" PRIu32 " is not supported (only versions 2 and 3%s)",
                            p->file, g->version, g->version == 1 ? "; version 1 has 32-bit counts" : "");
    if ((rc = read_uint(p, 8, "the tensor count", n_tensors)) != RA_OK ||
        (rc = read_uint(p, 8, "the metadata count", n_kvs)) != RA_OK)
        return rc;
    /* A metadata entry takes at least 14 bytes (key length, 1-byte key, type, 1-byte value). */
    if (*n_kvs > left(p) / 14)
        return fail(p, RA_EFORMAT, "%" PRIu64 " metadata entries do not fit in the %" PRIu64 " bytes left", *n_kvs,
                    left(p));
    return RA_OK;
}

/* general.alignment: a u32 power of two up to RA_GGUF_MAX_ALIGNMENT, default 32. */
static int parse_alignment(struct parser *p)
{
    struct ra_gguf *g = p->g;
    const struct ra_gguf_kv *kv = ra_gguf_find_kv(g, "general.alignment");

    g->alignment = RA_GGUF_DEFAULT_ALIGNMENT;
    if (!kv)
        return RA_OK;
    if (kv->value.type != RA_GGUF_U32)
        return ra_error_set(RA_EFORMAT, "%s: general.alignment is %s, not u32", p->file,
                            ra_gguf_type_name(kv->value.type));
    g->alignment = (uint32_t)read_le(p->base + kv->value.at, 4);
    if (g->alignment == 0 || (g->alignment & (g->alignment - 1)) != 0 || g->alignment > RA_GGUF_MAX_ALIGNMENT)
        return ra_error_set(RA_EFORMAT, "%s: general.alignment %" PRIu32 ": must be a power of two from 1 to %u", p->file,
                            g->alignment, RA_GGUF_MAX_ALIGNMENT);
    return RA_OK;
}

static int parse_kvs(struct parser *p, uint64_t n)
{
    struct ra_gguf *g = p->g;
    int rc;

    if (!(g->kvs = calloc(n + 1, sizeof *g->kvs)))
        return ra_error_set(RA_ENOMEM, "%s: out of memory", p->file);
    for (; (uint64_t)g->n_kvs < n; g->n_kvs++)
        if ((rc = parse_kv(p, g->n_kvs, &g->kvs[g->n_kvs])) != RA_OK) {
            g->n_kvs++; /* its key, if read, is freed with the others */
            return rc;
        }
    qsort(g->kvs, (size_t)n, sizeof *g->kvs, cmp_keys);
    for (uint64_t i = 1; i < n; i++)
        if (strcmp(g->kvs[i - 1].key, g->kvs[i].key) == 0)
            return ra_error_set(RA_EFORMAT, "%s: key %s appears twice", p->file, ra_esc(g->kvs[i].key));
    return parse_alignment(p);
}

static int parse_tensors(struct parser *p, uint64_t n)
{
    struct ra_gguf *g = p->g;
    int rc;

    /* A tensor info takes at least 25 bytes (name length, a 1-byte name, n_dims, type, offset). */
    snprintf(p->where, sizeof p->where, "header");
    if (n > left(p) / 25)
        return fail(p, RA_EFORMAT, "%" PRIu64 " tensor infos do not fit in the %" PRIu64 " bytes left", n, left(p));
    if (!(g->tensors = calloc(n + 1, sizeof *g->tensors)))
        return ra_error_set(RA_ENOMEM, "%s: out of memory", p->file);
    for (; (uint64_t)g->n_tensors < n; g->n_tensors++)
        if ((rc = parse_tensor_info(p, g->n_tensors, &g->tensors[g->n_tensors])) != RA_OK) {
            g->n_tensors++;
            return rc;
        }
    /* The data section starts at the next multiple of the alignment (with no tensors, ggml reads no further). */
    g->data_offset = p->pos + (g->alignment - p->pos % g->alignment) % g->alignment;
    if (g->data_offset > p->size && n > 0)
        return ra_error_set(RA_EFORMAT, "%s: truncated: the data section would start at offset %" PRIu64 ", past the "
                            "end of the file (%" PRIu64 " bytes)", p->file, g->data_offset, p->size);
    if (g->data_offset > p->size)
        g->data_offset = p->size;
    g->data = p->base + g->data_offset;
    g->data_size = p->size - g->data_offset;
    for (uint64_t i = 0; i < n; i++)
        if ((rc = check_tensor(p, &g->tensors[i])) != RA_OK)
            return rc;
    return check_layout(p);
}

/* Parses g->file into the (zeroed) rest of G. */
static int parse_mapping(struct ra_gguf *g)
{
    struct parser p = { .g = g, .file = gguf_path(g), .base = g->file->data, .size = g->file->size };
    uint64_t n_tensors = 0, n_kvs = 0;
    int rc;

    if ((rc = parse_header(&p, &n_tensors, &n_kvs)) != RA_OK || (rc = parse_kvs(&p, n_kvs)) != RA_OK)
        return rc;
    return parse_tensors(&p, n_tensors);
}

int ra_gguf_parse(struct ra_gguf *g, const struct ra_mapped_file *f)
{
    memset(g, 0, sizeof *g);
    g->file = f;
    int rc = parse_mapping(g);
    if (rc != RA_OK)
        ra_gguf_close(g);
    return rc;
}

int ra_gguf_open(struct ra_gguf *g, const char *path)
{
    memset(g, 0, sizeof *g);
    int rc = ra_mapped_file_open(&g->own, path);
    if (rc != RA_OK)
        return rc;
    g->file = &g->own;
    if ((rc = parse_mapping(g)) != RA_OK)
        ra_gguf_close(g);
    return rc;
}

void ra_gguf_close(struct ra_gguf *g)
{
    for (int64_t i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->tensors);
    for (int64_t i = 0; i < g->n_kvs; i++)
        free(g->kvs[i].key);
    free(g->kvs);
    free(g->elems);
    free(g->strings);
    if (g->own.data)
        ra_mapped_file_close(&g->own);
    memset(g, 0, sizeof *g);
}

const struct ra_gguf_tensor *ra_gguf_find(const struct ra_gguf *g, const char *name)
{
    struct ra_gguf_tensor key = { .name = (char *)name };
    if (!g->tensors || !name)
        return NULL;
    return bsearch(&key, g->tensors, (size_t)g->n_tensors, sizeof key, cmp_names);
}

const struct ra_gguf_kv *ra_gguf_find_kv(const struct ra_gguf *g, const char *key)
{
    struct ra_gguf_kv k = { .key = (char *)key };
    if (!g->kvs || !key)
        return NULL;
    return bsearch(&k, g->kvs, (size_t)g->n_kvs, sizeof k, cmp_keys);
}

/* ------------------------------------------------------------------ reading values */

static int wrong_kind(const struct ra_gguf_value *v, const char *want)
{
    return ra_error_set(RA_EINVAL, "a %s value is not %s", ra_gguf_type_name(v->type), want);
}

int ra_gguf_value_elem(const struct ra_gguf *g, const struct ra_gguf_value *arr, uint64_t i,
                       struct ra_gguf_value *out)
{
    if (arr->type != RA_GGUF_ARR)
        return wrong_kind(arr, "an array");
    if (i >= arr->n)
        return ra_error_set(RA_EINVAL, "element %" PRIu64 " of an array of %" PRIu64, i, arr->n);
    if (arr->elem_type == RA_GGUF_STR || arr->elem_type == RA_GGUF_ARR) {
        *out = g->elems[arr->at + i];
    } else {
        *out = (struct ra_gguf_value){ .type = arr->elem_type, .at = arr->at + i * value_types[arr->elem_type].size };
    }
    return RA_OK;
}

/* An integer scalar as a sign and a magnitude-preserving pair: *neg set when it is below 0. */
static int value_int(const struct ra_gguf *g, const struct ra_gguf_value *v, int *neg, uint64_t *u)
{
    static const signed char is_signed[RA_GGUF_N_TYPES] = {
        [RA_GGUF_U8] = 0, [RA_GGUF_I8] = 1, [RA_GGUF_U16] = 0, [RA_GGUF_I16] = 1, [RA_GGUF_U32] = 0,
        [RA_GGUF_I32] = 1, [RA_GGUF_U64] = 0, [RA_GGUF_I64] = 1,
        [RA_GGUF_F32] = -1, [RA_GGUF_BOOL] = -1, [RA_GGUF_STR] = -1, [RA_GGUF_ARR] = -1, [RA_GGUF_F64] = -1,
    };
    if ((unsigned)v->type >= RA_GGUF_N_TYPES || is_signed[v->type] < 0)
        return wrong_kind(v, "an integer");
    int bits = 8 * (int)value_types[v->type].size;
    *u = read_le(g->file->data + v->at, bits / 8);
    *neg = is_signed[v->type] && (*u >> (bits - 1)) & 1;
    if (*neg && bits < 64)
        *u |= ~0ull << bits; /* sign-extend: *u is then the two's complement of the value */
    return RA_OK;
}

int ra_gguf_value_u64(const struct ra_gguf *g, const struct ra_gguf_value *v, uint64_t *out)
{
    int neg, rc = value_int(g, v, &neg, out);
    if (rc == RA_OK && neg)
        return ra_error_set(RA_EINVAL, "value %" PRId64 " is negative", (int64_t)*out);
    return rc;
}

int ra_gguf_value_i64(const struct ra_gguf *g, const struct ra_gguf_value *v, int64_t *out)
{
    uint64_t u;
    int neg, rc = value_int(g, v, &neg, &u);
    if (rc != RA_OK)
        return rc;
    if (!neg && u > (uint64_t)INT64_MAX)
        return ra_error_set(RA_EINVAL, "value %" PRIu64 " is more than 2^63 - 1", u);
    memcpy(out, &u, sizeof u); /* two's complement, without the implementation-defined conversion */
    return RA_OK;
}

int ra_gguf_value_f64(const struct ra_gguf *g, const struct ra_gguf_value *v, double *out)
{
    if (v->type == RA_GGUF_F32) {
        uint32_t b = (uint32_t)read_le(g->file->data + v->at, 4);
        float f;
        memcpy(&f, &b, 4);
        *out = f;
    } else if (v->type == RA_GGUF_F64) {
        uint64_t b = read_le(g->file->data + v->at, 8);
        memcpy(out, &b, 8);
    } else {
        return wrong_kind(v, "a float");
    }
    return RA_OK;
}

int ra_gguf_value_bool(const struct ra_gguf *g, const struct ra_gguf_value *v, int *out)
{
    if (v->type != RA_GGUF_BOOL)
        return wrong_kind(v, "a bool");
    *out = g->file->data[v->at];
    return RA_OK;
}

int ra_gguf_value_str(const struct ra_gguf *g, const struct ra_gguf_value *v, const char **s, size_t *len)
{
    if (v->type != RA_GGUF_STR)
        return wrong_kind(v, "a string");
    *s = g->strings + v->at;
    if (len)
        *len = (size_t)v->n;
    return RA_OK;
}

/* ------------------------------------------------------------------ typed getters */

/* The value of KEY, or an error naming the file and key. */
static int find_value(const struct ra_gguf *g, const char *key, const struct ra_gguf_value **v)
{
    const struct ra_gguf_kv *kv = ra_gguf_find_kv(g, key);
    if (!kv)
        return ra_error_set(RA_EFORMAT, "%s: key %s is missing", gguf_path(g), ra_esc(key));
    *v = &kv->value;
    return RA_OK;
}

/* "FILE: key KEY is str, not WANT" (an array: "an array of str"). */
static int key_type_error(const struct ra_gguf *g, const char *key, const struct ra_gguf_value *v, const char *want)
{
    return ra_error_set(RA_EFORMAT, "%s: key %s is %s%s, not %s", gguf_path(g), ra_esc(key),
                        v->type == RA_GGUF_ARR ? "an array of " : "",
                        ra_gguf_type_name(v->type == RA_GGUF_ARR ? v->elem_type : v->type), want);
}

static int is_int(enum ra_gguf_type t)
{
    return t <= RA_GGUF_I32 || t == RA_GGUF_U64 || t == RA_GGUF_I64;
}

/* The integer V of KEY, within [lo, hi]. */
static int get_int(const struct ra_gguf *g, const char *key, const struct ra_gguf_value *v, int64_t lo,
                   uint64_t hi, const char *want, int64_t *out)
{
    uint64_t u;
    int64_t s;
    int neg;
    if (!is_int(v->type))
        return key_type_error(g, key, v, want);
    value_int(g, v, &neg, &u);
    memcpy(&s, &u, sizeof s); /* two's complement, without the implementation-defined conversion */
    if (neg && s < lo)
        return ra_error_set(RA_EFORMAT, "%s: key %s: value %" PRId64 " does not fit %s", gguf_path(g), ra_esc(key),
                            s, want);
    if (!neg && u > hi)
        return ra_error_set(RA_EFORMAT, "%s: key %s: value %" PRIu64 " does not fit %s", gguf_path(g), ra_esc(key),
                            u, want);
    *out = s;
    return RA_OK;
}

int ra_gguf_get_u32(const struct ra_gguf *g, const char *key, uint32_t *out)
{
    const struct ra_gguf_value *v = NULL;
    int64_t x;
    int rc = find_value(g, key, &v);
    if (rc == RA_OK && (rc = get_int(g, key, v, 0, UINT32_MAX, "u32", &x)) == RA_OK)
        *out = (uint32_t)x;
    return rc;
}

int ra_gguf_get_i64(const struct ra_gguf *g, const char *key, int64_t *out)
{
    const struct ra_gguf_value *v = NULL;
    int rc = find_value(g, key, &v);
    return rc == RA_OK ? get_int(g, key, v, INT64_MIN, INT64_MAX, "i64", out) : rc;
}

/* An f32 or f64 value as float. */
static int get_float(const struct ra_gguf *g, const char *key, const struct ra_gguf_value *v, float *out)
{
    double d;
    if (ra_gguf_value_f64(g, v, &d) != RA_OK)
        return key_type_error(g, key, v, "f32");
    *out = (float)d;
    return RA_OK;
}

int ra_gguf_get_f32(const struct ra_gguf *g, const char *key, float *out)
{
    const struct ra_gguf_value *v = NULL;
    int rc = find_value(g, key, &v);
    return rc == RA_OK ? get_float(g, key, v, out) : rc;
}

int ra_gguf_get_bool(const struct ra_gguf *g, const char *key, int *out)
{
    const struct ra_gguf_value *v = NULL;
    int rc = find_value(g, key, &v);
    if (rc == RA_OK && ra_gguf_value_bool(g, v, out) != RA_OK)
        rc = key_type_error(g, key, v, "bool");
    return rc;
}

int ra_gguf_get_str(const struct ra_gguf *g, const char *key, const char **s, size_t *len)
{
    const struct ra_gguf_value *v = NULL;
    int rc = find_value(g, key, &v);
    if (rc == RA_OK && ra_gguf_value_str(g, v, s, len) != RA_OK)
        rc = key_type_error(g, key, v, "str");
    return rc;
}

int ra_gguf_get_arr(const struct ra_gguf *g, const char *key, enum ra_gguf_type *elem_type, uint64_t *n)
{
    const struct ra_gguf_value *v = NULL;
    int rc = find_value(g, key, &v);
    if (rc == RA_OK && v->type != RA_GGUF_ARR)
        rc = key_type_error(g, key, v, "an array");
    if (rc == RA_OK) {
        *elem_type = v->elem_type;
        *n = v->n;
    }
    return rc;
}

/* Element I of array KEY, whose elements must be WANT (RA_GGUF_U8: any integer, RA_GGUF_F32: f32 or f64). */
static int get_elem(const struct ra_gguf *g, const char *key, uint64_t i, enum ra_gguf_type want,
                    struct ra_gguf_value *out)
{
    const struct ra_gguf_value *v = NULL;
    static const char *const what[RA_GGUF_N_TYPES] = {
        [RA_GGUF_U8] = "an array of integers", [RA_GGUF_F32] = "an array of f32", [RA_GGUF_STR] = "an array of str",
    };
    int rc = find_value(g, key, &v);
    if (rc != RA_OK)
        return rc;
    int ok = v->type == RA_GGUF_ARR &&
             (want == RA_GGUF_U8 ? is_int(v->elem_type)
              : want == RA_GGUF_F32 ? v->elem_type == RA_GGUF_F32 || v->elem_type == RA_GGUF_F64
              : v->elem_type == want);
    if (!ok)
        return key_type_error(g, key, v, what[want]);
    if (i >= v->n)
        return ra_error_set(RA_EFORMAT, "%s: key %s: element %" PRIu64 " is past the end of the array (%" PRIu64
                            " elements)", gguf_path(g), ra_esc(key), i, v->n);
    return ra_gguf_value_elem(g, v, i, out);
}

int ra_gguf_get_arr_str(const struct ra_gguf *g, const char *key, uint64_t i, const char **s, size_t *len)
{
    struct ra_gguf_value e;
    int rc = get_elem(g, key, i, RA_GGUF_STR, &e);
    return rc == RA_OK ? ra_gguf_value_str(g, &e, s, len) : rc;
}

int ra_gguf_get_arr_i64(const struct ra_gguf *g, const char *key, uint64_t i, int64_t *out)
{
    struct ra_gguf_value e;
    int rc = get_elem(g, key, i, RA_GGUF_U8, &e);
    return rc == RA_OK ? get_int(g, key, &e, INT64_MIN, INT64_MAX, "i64", out) : rc;
}

int ra_gguf_get_arr_f32(const struct ra_gguf *g, const char *key, uint64_t i, float *out)
{
    struct ra_gguf_value e;
    int rc = get_elem(g, key, i, RA_GGUF_F32, &e);
    return rc == RA_OK ? get_float(g, key, &e, out) : rc;
}

/* ------------------------------------------------------------------ ggml's block formats
 * As ggml-quants.c's dequantize_row_*, block by block. The product of a
 * quant (at most 8 bits) and an f16 scale (11 significant bits) is exact in
 * float, so a compiler that fuses Q4_1's q * d + m into one FMA gets the same
 * float as the reference's two roundings (so for the K-quants' products). */

static float f16_at(const unsigned char *p)
{
    return ra_f16_to_f32((uint16_t)read_le(p, 2));
}

/* Q8_0: f16 d, then 32 int8 q; x = q * d. */
static void dequantize_q8_0(const unsigned char *b, float *y, int64_t blocks)
{
    for (int64_t i = 0; i < blocks; i++, b += 34, y += 32) {
        const float d = f16_at(b);
        for (int j = 0; j < 32; j++)
            y[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* Q4_0: f16 d, then 16 bytes: element j in the low nibble of byte j, element
 * j + 16 in its high nibble; x = (q - 8) * d. */
static void dequantize_q4_0(const unsigned char *b, float *y, int64_t blocks)
{
    for (int64_t i = 0; i < blocks; i++, b += 18, y += 32) {
        const float d = f16_at(b);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[2 + j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: f16 d, f16 m, then nibbles as Q4_0; x = q * d + m. */
static void dequantize_q4_1(const unsigned char *b, float *y, int64_t blocks)
{
    for (int64_t i = 0; i < blocks; i++, b += 20, y += 32) {
        const float d = f16_at(b), m = f16_at(b + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[4 + j] & 0x0f) * d + m;
            y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
    }
}

/* Sub-block J's 6-bit scale and min from a K-quant's 12 scale bytes Q
 * (ggml's get_scale_min_k4): sub-blocks 0-3 in the low 6 bits of bytes 0-3
 * and 4-7, 4-7 in the nibbles of bytes 8-11 with their top 2 bits in the
 * spare bits of bytes 0-7. */
static void scale_min_k4(int j, const unsigned char *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* Q4_K: super-blocks of 256: f16 d, f16 dmin, 12 scale bytes, 128 bytes of
 * nibbles; each 32 bytes hold sub-block 2k (low nibbles) and 2k + 1 (high);
 * x = d * sc * q - dmin * m, every product exact. */
static void dequantize_q4_k(const unsigned char *b, float *y, int64_t blocks)
{
    for (int64_t i = 0; i < blocks; i++, b += 144) {
        const float d = f16_at(b), dmin = f16_at(b + 2);
        const unsigned char *q = b + 16;
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            int sc1, m1, sc2, m2;
            scale_min_k4(j, b + 4, &sc1, &m1);
            scale_min_k4(j + 1, b + 4, &sc2, &m2);
            const float d1 = d * (float)sc1, min1 = dmin * (float)m1, d2 = d * (float)sc2, min2 = dmin * (float)m2;
            for (int l = 0; l < 32; l++) {
                y[l] = d1 * (float)(q[l] & 0x0f) - min1;
                y[l + 32] = d2 * (float)(q[l] >> 4) - min2;
            }
        }
    }
}

/* Q6_K: super-blocks of 256: 128 bytes of low nibbles (ql), 64 of high 2-bit
 * pairs (qh), 16 int8 scales, f16 d; per half of 128 elements, element l of
 * each quarter takes its low bits from ql and its high bits from qh[l];
 * x = d * scale * (q - 32). */
static void dequantize_q6_k(const unsigned char *b, float *y, int64_t blocks)
{
    for (int64_t i = 0; i < blocks; i++, b += 210) {
        const float d = f16_at(b + 208);
        const unsigned char *ql = b, *qh = b + 128;
        const signed char *sc = (const signed char *)(b + 192);
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                y[l] = d * sc[is] * (float)(((ql[l] & 0x0f) | (qh[l] & 3) << 4) - 32);
                y[l + 32] = d * sc[is + 2] * (float)(((ql[l + 32] & 0x0f) | (qh[l] >> 2 & 3) << 4) - 32);
                y[l + 64] = d * sc[is + 4] * (float)(((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32);
                y[l + 96] = d * sc[is + 6] * (float)(((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32);
            }
    }
}

int ra_gguf_dequantize(uint32_t t, const void *src, float *dst, int64_t n)
{
    const unsigned char *b = src;
    int64_t block = 1, bytes = 1;
    int rc = ra_ggml_type_layout(t, &block, &bytes);
    if (rc != RA_OK)
        return rc;
    if (n < 0 || n % block != 0)
        return ra_error_set(RA_EINVAL, "%" PRId64 " elements of %s are not whole blocks of %" PRId64, n,
                            ggml_types[t].name, block);
    if (n == 0)
        return RA_OK;
    switch (t) {
    case RA_GGML_F32:
        memcpy(dst, src, (size_t)n * sizeof *dst); /* the file is little-endian, as every host here */
        break;
    case RA_GGML_F16:
    case RA_GGML_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)read_le(b + 2 * i, 2);
            dst[i] = t == RA_GGML_F16 ? ra_f16_to_f32(h) : ra_bf16_to_f32(h);
        }
        break;
    case RA_GGML_Q8_0: dequantize_q8_0(b, dst, n / block); break;
    case RA_GGML_Q4_0: dequantize_q4_0(b, dst, n / block); break;
    case RA_GGML_Q4_1: dequantize_q4_1(b, dst, n / block); break;
    case RA_GGML_Q4_K: dequantize_q4_k(b, dst, n / block); break;
    case RA_GGML_Q6_K: dequantize_q6_k(b, dst, n / block); break;
    default:
        return ra_error_set(RA_EUNSUPPORTED, "ggml tensor type %s (%" PRIu32 ") cannot be converted (only F32, F16, "
                            "BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)", ggml_types[t].name, t);
    }
    return RA_OK;
}
