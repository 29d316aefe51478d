/* GGUF writing: see gguf_write.h. Integers go out little-endian byte by
 * byte, so the file is the same on any host. */
#include "gguf_write.h"
#include "status.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_VERSION 3

static const unsigned scalar_size[RA_GGUF_N_TYPES] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

/* ------------------------------------------------------------------ buffers */

static int buf_put(struct ra_gguf_buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q)
            return ra_error_set(RA_ENOMEM, "GGUF writer: out of memory (%zu bytes of metadata)", cap);
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return RA_OK;
}

static int buf_le(struct ra_gguf_buf *b, uint64_t v, unsigned bytes)
{
    unsigned char le[8];
    for (unsigned i = 0; i < bytes; i++)
        le[i] = (unsigned char)(v >> (8 * i));
    return buf_put(b, le, bytes);
}

static int buf_str(struct ra_gguf_buf *b, const char *s, size_t len)
{
    int rc = buf_le(b, len, 8);
    return rc != RA_OK ? rc : buf_put(b, s, len);
}

/* A scalar of TYPE from its host representation at V. */
static int buf_scalar(struct ra_gguf_buf *b, enum ra_gguf_type type, const void *v)
{
    uint64_t u = 0;
    switch (scalar_size[type]) {
    case 1: { uint8_t x; memcpy(&x, v, 1); u = x; break; }
    case 2: { uint16_t x; memcpy(&x, v, 2); u = x; break; }
    case 4: { uint32_t x; memcpy(&x, v, 4); u = x; break; }
    default: memcpy(&u, v, 8); break;
    }
    if (type == RA_GGUF_BOOL && u > 1)
        return ra_error_set(RA_EINVAL, "GGUF writer: a bool must be 0 or 1, not %llu", (unsigned long long)u);
    return buf_le(b, u, scalar_size[type]);
}

/* ------------------------------------------------------------------ names */

static int claim_name(struct ra_gguf_writer *w, const char *name, const char *what)
{
    if (!name || !*name)
        return ra_error_set(RA_EINVAL, "GGUF writer: a %s with no name", what);
    for (size_t i = 0; i < w->n_names; i++)
        if (!strcmp(w->names[i], name))
            return ra_error_set(RA_EINVAL, "GGUF writer: %s %s is given twice", what, ra_esc(name));
    if (w->n_names == w->cap_names) {
        size_t cap = w->cap_names ? 2 * w->cap_names : 64;
        char **p = realloc(w->names, cap * sizeof *p);
        if (!p)
            return ra_error_set(RA_ENOMEM, "GGUF writer: out of memory");
        w->names = p;
        w->cap_names = cap;
    }
    if (!(w->names[w->n_names] = strdup(name)))
        return ra_error_set(RA_ENOMEM, "GGUF writer: out of memory");
    w->n_names++;
    return RA_OK;
}

/* The key and type of a new entry. */
static int kv_head(struct ra_gguf_writer *w, const char *key, enum ra_gguf_type type)
{
    int rc;
    if (w->f)
        return ra_error_set(RA_EINVAL, "GGUF writer: key %s comes after the header was written", ra_esc(key));
    if ((rc = claim_name(w, key, "key")) != RA_OK || (rc = buf_str(&w->kvs, key, strlen(key))) != RA_OK)
        return rc;
    w->n_kvs++;
    return buf_le(&w->kvs, (uint64_t)type, 4);
}

/* ------------------------------------------------------------------ metadata */

int ra_gguf_writer_init(struct ra_gguf_writer *w, uint32_t alignment)
{
    memset(w, 0, sizeof *w);
    w->alignment = alignment ? alignment : RA_GGUF_DEFAULT_ALIGNMENT;
    if ((w->alignment & (w->alignment - 1)) || w->alignment > RA_GGUF_MAX_ALIGNMENT)
        return ra_error_set(RA_EINVAL, "GGUF writer: alignment %u is not a power of two up to %u", alignment,
                            RA_GGUF_MAX_ALIGNMENT);
    return w->alignment == RA_GGUF_DEFAULT_ALIGNMENT ? RA_OK
                                                      : ra_gguf_writer_u32(w, "general.alignment", w->alignment);
}

void ra_gguf_writer_free(struct ra_gguf_writer *w)
{
    for (size_t i = 0; i < w->n_names; i++)
        free(w->names[i]);
    free(w->names);
    free(w->kvs.p);
    free(w->infos.p);
    free(w->sizes);
    memset(w, 0, sizeof *w);
}

int ra_gguf_writer_scalar(struct ra_gguf_writer *w, const char *key, enum ra_gguf_type type, const void *v)
{
    if ((unsigned)type >= RA_GGUF_N_TYPES || !scalar_size[type])
        return ra_error_set(RA_EINVAL, "GGUF writer: key %s: type %d is not a scalar", ra_esc(key), (int)type);
    int rc = kv_head(w, key, type);
    return rc != RA_OK ? rc : buf_scalar(&w->kvs, type, v);
}

int ra_gguf_writer_u32(struct ra_gguf_writer *w, const char *key, uint32_t v)
{
    return ra_gguf_writer_scalar(w, key, RA_GGUF_U32, &v);
}

int ra_gguf_writer_i32(struct ra_gguf_writer *w, const char *key, int32_t v)
{
    return ra_gguf_writer_scalar(w, key, RA_GGUF_I32, &v);
}

int ra_gguf_writer_f32(struct ra_gguf_writer *w, const char *key, float v)
{
    return ra_gguf_writer_scalar(w, key, RA_GGUF_F32, &v);
}

int ra_gguf_writer_bool(struct ra_gguf_writer *w, const char *key, int v)
{
    const uint8_t b = v != 0;
    return ra_gguf_writer_scalar(w, key, RA_GGUF_BOOL, &b);
}

int ra_gguf_writer_str(struct ra_gguf_writer *w, const char *key, const char *s)
{
    int rc = kv_head(w, key, RA_GGUF_STR);
    return rc != RA_OK ? rc : buf_str(&w->kvs, s, strlen(s));
}

int ra_gguf_writer_arr(struct ra_gguf_writer *w, const char *key, enum ra_gguf_type elem, const void *elems,
                       uint64_t n)
{
    if ((unsigned)elem >= RA_GGUF_N_TYPES || !scalar_size[elem])
        return ra_error_set(RA_EINVAL, "GGUF writer: key %s: use ra_gguf_writer_arr_str for strings", ra_esc(key));
    int rc;
    if ((rc = kv_head(w, key, RA_GGUF_ARR)) != RA_OK || (rc = buf_le(&w->kvs, (uint64_t)elem, 4)) != RA_OK ||
        (rc = buf_le(&w->kvs, n, 8)) != RA_OK)
        return rc;
    for (uint64_t i = 0; i < n; i++)
        if ((rc = buf_scalar(&w->kvs, elem, (const unsigned char *)elems + i * scalar_size[elem])) != RA_OK)
            return rc;
    return RA_OK;
}

int ra_gguf_writer_arr_str(struct ra_gguf_writer *w, const char *key, const char *const *s, const size_t *lens,
                           uint64_t n)
{
    int rc;
    if ((rc = kv_head(w, key, RA_GGUF_ARR)) != RA_OK || (rc = buf_le(&w->kvs, RA_GGUF_STR, 4)) != RA_OK ||
        (rc = buf_le(&w->kvs, n, 8)) != RA_OK)
        return rc;
    for (uint64_t i = 0; i < n; i++)
        if ((rc = buf_str(&w->kvs, s[i], lens ? lens[i] : strlen(s[i]))) != RA_OK)
            return rc;
    return RA_OK;
}

/* Value V of G (its type already written), recursively for arrays. */
static int copy_value(struct ra_gguf_writer *w, const struct ra_gguf *g, const struct ra_gguf_value *v, int depth)
{
    int rc;
    if (v->type == RA_GGUF_STR) {
        const char *s;
        size_t len;
        return (rc = ra_gguf_value_str(g, v, &s, &len)) != RA_OK ? rc : buf_str(&w->kvs, s, len);
    }
    if (v->type != RA_GGUF_ARR) /* scalars sit in the file little-endian already */
        return buf_put(&w->kvs, g->file->data + v->at, scalar_size[v->type]);
    if (depth >= RA_GGUF_MAX_DEPTH)
        return ra_error_set(RA_EINVAL, "GGUF writer: arrays nested deeper than %d", RA_GGUF_MAX_DEPTH);
    if ((rc = buf_le(&w->kvs, (uint64_t)v->elem_type, 4)) != RA_OK || (rc = buf_le(&w->kvs, v->n, 8)) != RA_OK)
        return rc;
    if (v->elem_type != RA_GGUF_STR && v->elem_type != RA_GGUF_ARR)
        return buf_put(&w->kvs, g->file->data + v->at, (size_t)v->n * scalar_size[v->elem_type]);
    for (uint64_t i = 0; i < v->n; i++) {
        struct ra_gguf_value e;
        if ((rc = ra_gguf_value_elem(g, v, i, &e)) != RA_OK || (rc = copy_value(w, g, &e, depth + 1)) != RA_OK)
            return rc;
    }
    return RA_OK;
}

int ra_gguf_writer_copy(struct ra_gguf_writer *w, const struct ra_gguf *g, const struct ra_gguf_kv *kv)
{
    if (!strcmp(kv->key, "general.alignment")) /* the writer's own alignment rules the file */
        return RA_OK;
    int rc = kv_head(w, kv->key, kv->value.type);
    if (rc != RA_OK)
        return rc;
    if ((rc = copy_value(w, g, &kv->value, 0)) != RA_OK)
        return ra_error_set(rc, "GGUF writer: key %s: %s", ra_esc(kv->key), ra_error_message());
    return RA_OK;
}

/* ------------------------------------------------------------------ tensors */

static uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

int ra_gguf_writer_tensor(struct ra_gguf_writer *w, const char *name, int n_dims, const int64_t *dims,
                          uint32_t type)
{
    int64_t block, block_bytes;
    int rc;
    if (w->f)
        return ra_error_set(RA_EINVAL, "GGUF writer: tensor %s comes after the header was written", ra_esc(name));
    if (n_dims < 1 || n_dims > RA_GGUF_MAX_DIMS)
        return ra_error_set(RA_EINVAL, "GGUF writer: tensor %s: %d dimensions (1 to %d)", ra_esc(name), n_dims,
                            RA_GGUF_MAX_DIMS);
    if ((rc = ra_ggml_type_layout(type, &block, &block_bytes)) != RA_OK)
        return rc;
    uint64_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        if (dims[i] < 1 || (uint64_t)dims[i] > (UINT64_MAX >> 8) / n)
            return ra_error_set(RA_EINVAL, "GGUF writer: tensor %s: dimension %d is %lld", ra_esc(name), i,
                                (long long)dims[i]);
        n *= (uint64_t)dims[i];
    }
    if (dims[0] % block)
        return ra_error_set(RA_EINVAL, "GGUF writer: tensor %s: rows of %lld are not whole blocks of %lld (%s)",
                            ra_esc(name), (long long)dims[0], (long long)block, ra_ggml_type_name(type));
    const uint64_t bytes = n / (uint64_t)block * (uint64_t)block_bytes;
    struct ra_gguf_wtensor *sizes = realloc(w->sizes, (w->n_tensors + 1) * sizeof *sizes);
    if (!sizes)
        return ra_error_set(RA_ENOMEM, "GGUF writer: out of memory");
    w->sizes = sizes;
    if ((rc = claim_name(w, name, "tensor")) != RA_OK || (rc = buf_str(&w->infos, name, strlen(name))) != RA_OK ||
        (rc = buf_le(&w->infos, (uint64_t)n_dims, 4)) != RA_OK)
        return rc;
    for (int i = 0; i < n_dims; i++)
        if ((rc = buf_le(&w->infos, (uint64_t)dims[i], 8)) != RA_OK)
            return rc;
    if ((rc = buf_le(&w->infos, type, 4)) != RA_OK || (rc = buf_le(&w->infos, w->data_size, 8)) != RA_OK)
        return rc;
    w->sizes[w->n_tensors++] = (struct ra_gguf_wtensor){ bytes, w->n_names - 1 };
    w->data_size = pad_to(w->data_size + bytes, w->alignment);
    return RA_OK;
}

/* ------------------------------------------------------------------ output */

static int put(struct ra_gguf_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return ra_error_set(RA_EIO, "GGUF writer: write failed: %s", strerror(errno));
    return RA_OK;
}

static int put_zeros(struct ra_gguf_writer *w, uint64_t n)
{
    static const unsigned char zeros[256];
    for (int rc; n > 0; n -= n < sizeof zeros ? n : sizeof zeros)
        if ((rc = put(w, zeros, n < sizeof zeros ? (size_t)n : sizeof zeros)) != RA_OK)
            return rc;
    return RA_OK;
}

int ra_gguf_writer_begin(struct ra_gguf_writer *w, FILE *f)
{
    struct ra_gguf_buf head = { 0 };
    int rc;
    if (w->f)
        return ra_error_set(RA_EINVAL, "GGUF writer: the header is written once");
    if ((rc = buf_put(&head, "GGUF", 4)) != RA_OK || (rc = buf_le(&head, GGUF_VERSION, 4)) != RA_OK ||
        (rc = buf_le(&head, w->n_tensors, 8)) != RA_OK || (rc = buf_le(&head, w->n_kvs, 8)) != RA_OK)
        goto out;
    w->f = f;
    const uint64_t len = head.len + w->kvs.len + w->infos.len;
    if ((rc = put(w, head.p, head.len)) != RA_OK || (rc = put(w, w->kvs.p, w->kvs.len)) != RA_OK ||
        (rc = put(w, w->infos.p, w->infos.len)) != RA_OK)
        goto out;
    rc = put_zeros(w, pad_to(len, w->alignment) - len);
out:
    free(head.p);
    return rc;
}

int ra_gguf_writer_data(struct ra_gguf_writer *w, const void *data, uint64_t bytes)
{
    if (!w->f || w->next >= w->n_tensors)
        return ra_error_set(RA_EINVAL, "GGUF writer: tensor data with no tensor declared for it");
    const char *name = w->names[w->sizes[w->next].name];
    if (bytes != w->sizes[w->next].bytes)
        return ra_error_set(RA_EINVAL, "GGUF writer: tensor %s: %llu bytes given, its shape and type make %llu",
                            ra_esc(name), (unsigned long long)bytes, (unsigned long long)w->sizes[w->next].bytes);
    int rc = put(w, data, (size_t)bytes);
    if (rc == RA_OK)
        rc = put_zeros(w, pad_to(bytes, w->alignment) - bytes);
    if (rc != RA_OK)
        return ra_error_set(rc, "GGUF writer: tensor %s: %s", ra_esc(name), ra_error_message());
    w->next++;
    return RA_OK;
}

int ra_gguf_writer_end(struct ra_gguf_writer *w)
{
    if (!w->f || w->next != w->n_tensors)
        return ra_error_set(RA_EINVAL, "GGUF writer: %llu of %llu tensors written", (unsigned long long)w->next,
                            (unsigned long long)w->n_tensors);
    return RA_OK;
}
