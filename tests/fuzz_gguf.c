/* Fuzz harness: GGUF files (src/gguf.c). The input is the whole file, parsed
 * from a buffer of exactly its size. It must be refused with one error line
 * naming it, or give: tensors sorted and found by name, each with the bytes
 * its type and shape need, aligned, inside the data section (every byte is
 * read), no two sharing a byte, the first blocks of each convertible one
 * converted; metadata sorted and found by key, every value (nested arrays
 * too) readable as its own type and only that, and the typed getters either
 * answering or naming the file.
 * Seeds: tests/corpus/gguf/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "gguf.h"
#include "status.h"

#include <string.h>

#define GGUF_PATH "fuzz.gguf"
#define CONVERT_MAX 512 /* elements converted per tensor */

static void check_tensor(const struct ra_gguf *g, const struct ra_gguf_tensor *t)
{
    int64_t block, bytes, n = 1;
    if (ra_ggml_type_layout(t->type, &block, &bytes) != RA_OK || t->n_dims < 0 || t->n_dims > RA_GGUF_MAX_DIMS)
        fuzz_fail("tensor %s: type %u or %d dimensions accepted", t->name, t->type, t->n_dims);
    for (int d = 0; d < RA_GGUF_MAX_DIMS; d++)
        n *= t->dims[d];
    if (n != t->n_elements || t->dims[0] % block != 0 || t->bytes != (uint64_t)(n / block * bytes) ||
        t->offset % g->alignment != 0 || t->offset > g->data_size || t->bytes > g->data_size - t->offset ||
        t->data != g->data + t->offset)
        fuzz_fail("tensor %s: shape, type, offset and data pointer disagree", t->name);
    if (ra_gguf_find(g, t->name) != t)
        fuzz_fail("tensor %s is not found by its name", t->name);
    const volatile unsigned char *p = t->data;
    unsigned sum = 0;
    for (uint64_t i = 0; i < t->bytes; i++)
        sum += p[i];
    (void)sum;

    static float out[CONVERT_MAX];
    int64_t k = (n < CONVERT_MAX ? n : CONVERT_MAX) / block * block;
    int rc = ra_gguf_dequantize(t->type, t->data, out, k);
    if (rc != RA_OK && rc != RA_EUNSUPPORTED)
        fuzz_fail("tensor %s: converting %lld elements failed", t->name, (long long)k);
}

static void check_overlaps(const struct ra_gguf *g)
{
    for (int64_t i = 0; i < g->n_tensors; i++)
        for (int64_t j = i + 1; j < g->n_tensors; j++) {
            const struct ra_gguf_tensor *a = &g->tensors[i], *b = &g->tensors[j];
            if (a->bytes && b->bytes && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes)
                fuzz_fail("tensors %s and %s share bytes", a->name, b->name);
        }
}

/* V must read as its own type and as no other kind. */
static void check_value(const struct ra_gguf *g, const struct ra_gguf_value *v, int depth)
{
    uint64_t u;
    int64_t i;
    double f;
    int b;
    const char *s;
    size_t len;
    struct ra_gguf_value e;

    if (depth > RA_GGUF_MAX_DEPTH)
        fuzz_fail("arrays nested deeper than %d accepted", RA_GGUF_MAX_DEPTH);
    int is_str = ra_gguf_value_str(g, v, &s, &len) == RA_OK, is_bool = ra_gguf_value_bool(g, v, &b) == RA_OK;
    int is_float = ra_gguf_value_f64(g, v, &f) == RA_OK;
    int is_int = ra_gguf_value_u64(g, v, &u) == RA_OK || ra_gguf_value_i64(g, v, &i) == RA_OK;
    int is_arr = v->type == RA_GGUF_ARR;
    if (is_str + is_bool + is_float + is_int + is_arr != 1)
        fuzz_fail("a %s value reads as %d kinds", ra_gguf_type_name(v->type), is_str + is_bool + is_float + is_int);
    if (is_str && (len != v->n || s[len] != '\0' || s < g->strings || s + len >= g->strings + g->strings_len))
        fuzz_fail("a string of %llu bytes is not where it should be", (unsigned long long)v->n);
    if (is_bool && b != 0 && b != 1)
        fuzz_fail("a bool reads %d", b);
    for (uint64_t k = 0; is_arr && k < v->n; k++) {
        if (ra_gguf_value_elem(g, v, k, &e) != RA_OK || e.type != v->elem_type)
            fuzz_fail("element %llu of an array of %llu is not there", (unsigned long long)k,
                      (unsigned long long)v->n);
        check_value(g, &e, depth + 1);
    }
}

/* A getter's status RC: RA_OK, or RA_EFORMAT with a message naming the file. */
static int getter(const struct ra_gguf_kv *kv, const char *name, int rc)
{
    if (rc != RA_OK && (rc != RA_EFORMAT || !strstr(ra_error_message(), GGUF_PATH)))
        fuzz_fail("key %s: %s returned %d", kv->key, name, rc);
    return rc;
}

/* Every getter answers or names the file; the str and arr getters answer for their own type only. */
static void check_getters(const struct ra_gguf *g, const struct ra_gguf_kv *kv)
{
    uint32_t u;
    int64_t i;
    float f;
    int b;
    const char *s;
    size_t len;
    enum ra_gguf_type t;
    uint64_t n;

    getter(kv, "get_u32", ra_gguf_get_u32(g, kv->key, &u));
    getter(kv, "get_i64", ra_gguf_get_i64(g, kv->key, &i));
    getter(kv, "get_f32", ra_gguf_get_f32(g, kv->key, &f));
    getter(kv, "get_bool", ra_gguf_get_bool(g, kv->key, &b));
    getter(kv, "get_arr_str", ra_gguf_get_arr_str(g, kv->key, 0, &s, &len));
    getter(kv, "get_arr_i64", ra_gguf_get_arr_i64(g, kv->key, 0, &i));
    getter(kv, "get_arr_f32", ra_gguf_get_arr_f32(g, kv->key, 0, &f));
    int str = getter(kv, "get_str", ra_gguf_get_str(g, kv->key, &s, &len)) == RA_OK;
    int arr = getter(kv, "get_arr", ra_gguf_get_arr(g, kv->key, &t, &n)) == RA_OK;
    if (str != (kv->value.type == RA_GGUF_STR) || arr != (kv->value.type == RA_GGUF_ARR))
        fuzz_fail("key %s: the str or arr getter disagrees with type %s", kv->key, ra_gguf_type_name(kv->value.type));
    if (ra_gguf_find_kv(g, kv->key) != kv)
        fuzz_fail("key %s is not found by its name", kv->key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ra_mapped_file f = { data, size, (char *)GGUF_PATH };
    struct ra_gguf g;

    if (ra_gguf_parse(&g, &f) != RA_OK) {
        fuzz_check_error(GGUF_PATH, data, size);
        return 0;
    }
    if ((g.version != 2 && g.version != 3) || !g.alignment || (g.alignment & (g.alignment - 1)) ||
        g.data_offset + g.data_size != size || (g.n_tensors && g.data_offset % g.alignment))
        fuzz_fail("version %u, alignment %u, data section [%llu, +%llu) accepted", g.version, g.alignment,
                  (unsigned long long)g.data_offset, (unsigned long long)g.data_size);
    for (int64_t i = 0; i < g.n_tensors; i++) {
        if (i > 0 && strcmp(g.tensors[i - 1].name, g.tensors[i].name) >= 0)
            fuzz_fail("tensors are not sorted by name (%s, %s)", g.tensors[i - 1].name, g.tensors[i].name);
        check_tensor(&g, &g.tensors[i]);
    }
    check_overlaps(&g);
    for (int64_t i = 0; i < g.n_kvs; i++) {
        if (i > 0 && strcmp(g.kvs[i - 1].key, g.kvs[i].key) >= 0)
            fuzz_fail("keys are not sorted (%s, %s)", g.kvs[i - 1].key, g.kvs[i].key);
        check_value(&g, &g.kvs[i].value, 0);
        check_getters(&g, &g.kvs[i]);
    }
    fuzz_note("  accepted: version %u, %lld tensors, %lld metadata, alignment %u, %llu data bytes", g.version,
              (long long)g.n_tensors, (long long)g.n_kvs, g.alignment, (unsigned long long)g.data_size);
    ra_gguf_close(&g);
    return 0;
}
