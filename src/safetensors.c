#include "safetensors.h"
#include "outfile.h"
#include "status.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define META_KEY "__metadata__"

static const struct {
    const char *name;
    enum ra_dtype dtype;
} st_dtypes[] = {
    { "F32", RA_DTYPE_F32 },
    { "F16", RA_DTYPE_F16 },
    { "BF16", RA_DTYPE_BF16 },
};

const char *ra_safetensors_dtype_name(enum ra_dtype t)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == t)
            return st_dtypes[i].name;
    return "?";
}

static uint64_t read_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void write_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Product of the dims times the element size, or -1 on overflow. The limit
 * keeps every later size computation (int64 rows*cols) safe too. */
static int64_t shape_bytes(const int64_t *shape, int n_dims, enum ra_dtype dtype)
{
    uint64_t n = ra_dtype_size(dtype);
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n))
            return -1;
    }
    return n > (uint64_t)INT64_MAX ? -1 : (int64_t)n;
}

/* ------------------------------------------------------------------ parsing */

static const char *st_path(const struct ra_safetensors *st)
{
    return st->file->path ? st->file->path : "(safetensors)";
}

static int parse_dtype(const char *file, const char *name, json_t *v, enum ra_dtype *out)
{
    if (!v)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: header entry has no dtype", file, ra_esc(name));
    if (!json_is_string(v))
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: dtype is not a string", file, ra_esc(name));
    const char *s = json_string_value(v);
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++) {
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *out = st_dtypes[i].dtype;
            return RA_OK;
        }
    }
    return ra_error_set(RA_EUNSUPPORTED, "%s: tensor %s: dtype %s is not supported (only F32, F16, BF16)",
                        file, ra_esc(name), ra_esc(s));
}

/* A JSON array of N non-negative integers (N = -1: any count up to MAX). */
static int parse_uints(const char *file, const char *name, const char *field, json_t *v,
                       int want, int max, int64_t *out, int *count)
{
    if (!v)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: header entry has no %s", file, ra_esc(name), field);
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || (want >= 0 && n != (size_t)want) || n > (size_t)max)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: %s is not an array of %s%d integers",
                            file, ra_esc(name), field, want >= 0 ? "" : "at most ", want >= 0 ? want : max);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return ra_error_set(RA_EFORMAT, "%s: tensor %s: %s[%zu] is not a non-negative integer",
                                file, ra_esc(name), field, i);
        out[i] = (int64_t)json_integer_value(x);
    }
    *count = (int)n;
    return RA_OK;
}

static int parse_entry(struct ra_safetensors *st, const char *name, json_t *v, struct ra_st_entry *e)
{
    const char *file = st_path(st);
    int64_t off[2];
    int n_off, rc;

    if (!json_is_object(v))
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: header entry is not an object", file, ra_esc(name));
    if ((rc = parse_dtype(file, name, json_object_get(v, "dtype"), &e->dtype)) != RA_OK)
        return rc;
    rc = parse_uints(file, name, "shape", json_object_get(v, "shape"), -1, RA_ST_MAX_DIMS, e->shape, &e->n_dims);
    if (rc != RA_OK)
        return rc;
    rc = parse_uints(file, name, "data_offsets", json_object_get(v, "data_offsets"), 2, 2, off, &n_off);
    if (rc != RA_OK)
        return rc;
    e->begin = (uint64_t)off[0];
    e->end = (uint64_t)off[1];
    if (e->begin > e->end)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: data_offsets [%llu, %llu] end before they begin", file,
                            ra_esc(name), (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > st->data_size)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: data_offsets [%llu, %llu] are outside the data region "
                            "of %llu bytes (truncated file?)", file, ra_esc(name), (unsigned long long)e->begin,
                            (unsigned long long)e->end, (unsigned long long)st->data_size);
    int64_t want = shape_bytes(e->shape, e->n_dims, e->dtype);
    if (want < 0)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: shape is too large (its size overflows)", file, ra_esc(name));
    if ((uint64_t)want != e->end - e->begin)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: shape and dtype %s need %lld bytes, data_offsets "
                            "give %llu", file, ra_esc(name), ra_safetensors_dtype_name(e->dtype), (long long)want,
                            (unsigned long long)(e->end - e->begin));
    e->name = strdup(name);
    if (!e->name)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", file);
    e->data = st->data + e->begin;
    return RA_OK;
}

static int parse_meta(struct ra_safetensors *st, json_t *v)
{
    const char *file = st_path(st), *key;
    json_t *val;

    if (!json_is_object(v))
        return ra_error_set(RA_EFORMAT, "%s: %s is not an object", file, META_KEY);
    st->meta = calloc(2 * json_object_size(v) + 1, sizeof *st->meta);
    if (!st->meta)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", file);
    json_object_foreach(v, key, val) {
        if (!json_is_string(val))
            return ra_error_set(RA_EFORMAT, "%s: %s value of %s is not a string", file, META_KEY, ra_esc(key));
        st->meta[2 * st->n_meta] = strdup(key);
        st->meta[2 * st->n_meta + 1] = strdup(json_string_value(val));
        st->n_meta++;
        if (!st->meta[2 * st->n_meta - 2] || !st->meta[2 * st->n_meta - 1])
            return ra_error_set(RA_ENOMEM, "%s: out of memory", file);
    }
    return RA_OK;
}

static int cmp_offsets(const void *a, const void *b)
{
    const struct ra_st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(((const struct ra_st_entry *)a)->name, ((const struct ra_st_entry *)b)->name);
}

/* The tensors must cover the data region exactly, in offset order: no
 * overlaps, no gaps, nothing after the last one, as the reference safetensors
 * library requires. Two views of the same bytes would be a lie about the file,
 * and slack is how a wrong header length shows: with the length one byte
 * short, the header's last padding byte becomes the first data byte, every
 * tensor reads its bytes shifted by one, and only the slack at the end tells. */
static int check_coverage(struct ra_safetensors *st)
{
    const struct ra_st_entry *prev = NULL;
    uint64_t pos = 0;
    qsort(st->entries, (size_t)st->n_entries, sizeof *st->entries, cmp_offsets);
    for (int i = 0; i < st->n_entries; i++) {
        const struct ra_st_entry *e = &st->entries[i];
        if (e->begin < pos)
            return ra_error_set(RA_EFORMAT, "%s: tensor %s: data_offsets [%llu, %llu] overlap tensor %s [%llu, %llu]",
                                st_path(st), ra_esc(e->name), (unsigned long long)e->begin, (unsigned long long)e->end,
                                ra_esc(prev->name), (unsigned long long)prev->begin, (unsigned long long)prev->end);
        if (e->begin > pos)
            return ra_error_set(RA_EFORMAT, "%s: tensor %s: data_offsets [%llu, %llu] leave a gap: bytes [%llu, %llu) "
                                "of the data region belong to no tensor", st_path(st), ra_esc(e->name),
                                (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)pos,
                                (unsigned long long)e->begin);
        pos = e->end;
        prev = e;
    }
    if (pos != st->data_size)
        return ra_error_set(RA_EFORMAT, "%s: the data region has %llu bytes but the tensors cover %llu%s%s: a wrong "
                            "header length (%llu) or data_offsets", st_path(st), (unsigned long long)st->data_size,
                            (unsigned long long)pos, prev ? ", up to the end of tensor " : "", prev ? ra_esc(prev->name) : "",
                            (unsigned long long)(st->data - st->file->data - 8));
    return RA_OK;
}

static int parse_header(struct ra_safetensors *st, const char *file, const unsigned char *text, size_t len)
{
    json_error_t err;
    const char *key;
    json_t *val, *root = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES, &err);
    int rc = RA_OK;

    if (!root)
        return ra_error_set(RA_EFORMAT, "%s: header is not valid JSON: %s (line %d, column %d)",
                            file, ra_esc(err.text), err.line, err.column);
    if (!json_is_object(root)) {
        rc = ra_error_set(RA_EFORMAT, "%s: header is not a JSON object", file);
        goto out;
    }
    st->entries = calloc(json_object_size(root) + 1, sizeof *st->entries);
    if (!st->entries) {
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", file);
        goto out;
    }
    json_object_foreach(root, key, val) {
        if (strcmp(key, META_KEY) == 0)
            rc = parse_meta(st, val);
        else if ((rc = parse_entry(st, key, val, &st->entries[st->n_entries])) == RA_OK)
            st->n_entries++;
        if (rc != RA_OK)
            goto out;
    }
out:
    json_decref(root);
    return rc;
}

/* Parses st->file into the (zeroed) rest of ST. */
static int parse_mapping(struct ra_safetensors *st)
{
    const struct ra_mapped_file *f = st->file;
    const char *file = st_path(st);
    int rc;

    if (f->size < 8)
        return ra_error_set(RA_EFORMAT, "%s: %zu bytes is too short for a safetensors header", file, f->size);
    uint64_t n = read_le64(f->data);
    if (n > f->size - 8)
        return ra_error_set(RA_EFORMAT, "%s: header length %llu runs past the end of the file (%zu bytes): "
                            "truncated or not a safetensors file", file, (unsigned long long)n, f->size);
    if (n > RA_ST_MAX_HEADER)
        return ra_error_set(RA_EFORMAT, "%s: header length %llu exceeds the limit of %u bytes", file,
                            (unsigned long long)n, RA_ST_MAX_HEADER);
    st->data = f->data + 8 + n;
    st->data_size = f->size - 8 - n;
    if ((rc = parse_header(st, file, f->data + 8, (size_t)n)) != RA_OK)
        return rc;
    if ((rc = check_coverage(st)) != RA_OK)
        return rc;
    qsort(st->entries, (size_t)st->n_entries, sizeof *st->entries, cmp_names);
    return RA_OK;
}

int ra_safetensors_parse(struct ra_safetensors *st, const struct ra_mapped_file *f)
{
    memset(st, 0, sizeof *st);
    st->file = f;
    int rc = parse_mapping(st);
    if (rc != RA_OK)
        ra_safetensors_close(st);
    return rc;
}

int ra_safetensors_open(struct ra_safetensors *st, const char *path)
{
    memset(st, 0, sizeof *st);
    int rc = ra_mapped_file_open(&st->own, path);
    if (rc != RA_OK)
        return rc;
    st->file = &st->own;
    if ((rc = parse_mapping(st)) != RA_OK)
        ra_safetensors_close(st);
    return rc;
}

void ra_safetensors_close(struct ra_safetensors *st)
{
    for (int i = 0; i < st->n_entries; i++)
        free(st->entries[i].name);
    free(st->entries);
    for (int i = 0; i < 2 * st->n_meta; i++)
        free(st->meta[i]);
    free(st->meta);
    if (st->own.data)
        ra_mapped_file_close(&st->own);
    memset(st, 0, sizeof *st);
}

const struct ra_st_entry *ra_safetensors_find(const struct ra_safetensors *st, const char *name)
{
    struct ra_st_entry key = { .name = (char *)name };
    if (!st->entries || !name)
        return NULL;
    return bsearch(&key, st->entries, (size_t)st->n_entries, sizeof key, cmp_names);
}

const char *ra_safetensors_meta(const struct ra_safetensors *st, const char *key)
{
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[2 * i], key) == 0)
            return st->meta[2 * i + 1];
    return NULL;
}

/* ------------------------------------------------------------------ writing */

struct ra_safetensors_writer {
    struct ra_outfile out; /* the temporary file, renamed over the target on close */
    FILE *fp;              /* its stream, owned by out */
    const char *path;      /* out.path */
    uint64_t total, written;
};

static int build_entry(json_t *root, const struct ra_st_write_entry *e, uint64_t *offset, const char *path)
{
    const char *name = e->name ? e->name : "(null)";
    if (!e->name || !*e->name || strcmp(e->name, META_KEY) == 0 || json_object_get(root, e->name))
        return ra_error_set(RA_EINVAL, "%s: tensor %s: missing, reserved or repeated name", path, name);
    if (e->n_dims < 0 || e->n_dims > RA_ST_MAX_DIMS)
        return ra_error_set(RA_EINVAL, "%s: tensor %s: %d dimensions", path, name, e->n_dims);
    if (e->dtype != RA_DTYPE_F32 && e->dtype != RA_DTYPE_F16 && e->dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EINVAL, "%s: tensor %s: unknown dtype %d", path, name, (int)e->dtype);
    int64_t bytes = shape_bytes(e->shape, e->n_dims, e->dtype);
    if (bytes < 0)
        return ra_error_set(RA_EINVAL, "%s: tensor %s: shape is negative or too large", path, name);
    json_t *shape = json_array(), *obj = json_object();
    for (int d = 0; d < e->n_dims; d++)
        json_array_append_new(shape, json_integer(e->shape[d]));
    json_object_set_new(obj, "dtype", json_string(ra_safetensors_dtype_name(e->dtype)));
    json_object_set_new(obj, "shape", shape);
    json_object_set_new(obj, "data_offsets", json_pack("[II]", (json_int_t)*offset, (json_int_t)(*offset + (uint64_t)bytes)));
    if (json_object_set_new(root, e->name, obj) != 0)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    *offset += (uint64_t)bytes;
    return RA_OK;
}

/* The header JSON, in entry order (jansson keeps insertion order), padded
 * with spaces to a multiple of 8 bytes; *len gets its padded length. */
static int build_header(const char *path, const struct ra_st_write_entry *entries, int n,
                        const char *const *meta, char **text, size_t *len, uint64_t *total)
{
    json_t *root = json_object(), *m = json_object();
    int rc = RA_OK;

    *text = NULL;
    *total = 0;
    for (int i = 0; meta && meta[i] && meta[i + 1]; i += 2)
        json_object_set_new(m, meta[i], json_string(meta[i + 1]));
    if (json_object_size(m) > 0)
        json_object_set(root, META_KEY, m);
    for (int i = 0; i < n && rc == RA_OK; i++)
        rc = build_entry(root, &entries[i], total, path);
    if (rc != RA_OK)
        goto out;
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    size_t l = s ? strlen(s) : 0, padded = (l + 7) / 8 * 8;
    *text = s ? realloc(s, padded + 1) : NULL;
    if (!*text) {
        free(s);
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    memset(*text + l, ' ', padded - l);
    (*text)[padded] = '\0';
    *len = padded;
out:
    json_decref(m);
    json_decref(root);
    return rc;
}

int ra_safetensors_writer_open(struct ra_safetensors_writer **wp, const char *path,
                               const struct ra_st_write_entry *entries, int n, const char *const *meta)
{
    struct ra_safetensors_writer *w = malloc(sizeof *w);
    unsigned char lenbuf[8];
    char *header = NULL;
    size_t hlen = 0;
    int rc;

    *wp = NULL;
    if (!w)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    *w = (struct ra_safetensors_writer){ .out = RA_OUTFILE_INIT, .path = path };
    if ((rc = build_header(path, entries, n, meta, &header, &hlen, &w->total)) != RA_OK)
        goto fail;
    if ((rc = ra_outfile_open(&w->out, path, &w->fp)) != RA_OK)
        goto fail;
    w->path = w->out.path;
    write_le64(lenbuf, hlen);
    if (fwrite(lenbuf, 1, 8, w->fp) != 8 || fwrite(header, 1, hlen, w->fp) != hlen) {
        rc = ra_error_set(RA_EIO, "%s: write failed: %s", path, strerror(errno));
        goto fail;
    }
    free(header);
    *wp = w;
    return RA_OK;
fail:
    free(header);
    ra_safetensors_writer_abort(w);
    return rc;
}

int ra_safetensors_writer_write(struct ra_safetensors_writer *w, const void *bytes, size_t n)
{
    if (n > w->total - w->written)
        return ra_error_set(RA_EINVAL, "%s: %zu more bytes than the header announced", w->path,
                            (size_t)(n - (w->total - w->written)));
    if (n && fwrite(bytes, 1, n, w->fp) != n)
        return ra_error_set(RA_EIO, "%s: write failed: %s", w->path, strerror(errno));
    w->written += n;
    return RA_OK;
}

int ra_safetensors_writer_close(struct ra_safetensors_writer *w)
{
    int rc = RA_OK;
    if (w->written != w->total) {
        rc = ra_error_set(RA_EINVAL, "%s: only %llu of %llu data bytes were written", w->path,
                          (unsigned long long)w->written, (unsigned long long)w->total);
        goto out;
    }
    rc = ra_outfile_commit(&w->out);
out:
    ra_safetensors_writer_abort(w);
    return rc;
}

void ra_safetensors_writer_abort(struct ra_safetensors_writer *w)
{
    if (!w)
        return;
    ra_outfile_abort(&w->out);
    free(w);
}

int ra_safetensors_write(const char *path, const struct ra_st_write_entry *entries, int n)
{
    static const char *const meta[] = { "format", "pt", NULL };
    struct ra_safetensors_writer *w;
    int rc = ra_safetensors_writer_open(&w, path, entries, n, meta);
    for (int i = 0; i < n && rc == RA_OK; i++) {
        int64_t bytes = shape_bytes(entries[i].shape, entries[i].n_dims, entries[i].dtype);
        if (bytes > 0 && !entries[i].data)
            rc = ra_error_set(RA_EINVAL, "%s: tensor %s: no data", path, entries[i].name);
        else
            rc = ra_safetensors_writer_write(w, entries[i].data, (size_t)bytes);
        if (rc != RA_OK)
            ra_safetensors_writer_abort(w);
    }
    return rc == RA_OK ? ra_safetensors_writer_close(w) : rc;
}
