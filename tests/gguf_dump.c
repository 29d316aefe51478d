/* What runahead reads of a GGUF file, as JSON on stdout, for tests/gguf_oracle.py
 * to compare with gguf-py's reader and gguf.quants.dequantize:
 *   tests/gguf_dump FILE     {"version", "alignment", "data_offset",
 *                             "kv": {key: {"type", "elem" (arrays), "value"}},
 *                             "tensors": {name: {"type", "type_name", "dims", "n_elements",
 *                                                "offset", "bytes", "values" (null if not convertible)}}}
 *   tests/gguf_dump --types  {number: [name, block, bytes]} for every ggml type known here
 * Integers past 2^63 - 1 are written as strings; floats exactly (%.17g).
 * A file the parser refuses: its one error line on stderr, exit 1. */
#include "gguf.h"
#include "status.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *value_json(const struct ra_gguf *g, const struct ra_gguf_value *v)
{
    int64_t i;
    uint64_t u;
    double f;
    int b;
    const char *s;
    size_t len;

    if (v->type == RA_GGUF_ARR) {
        json_t *a = json_array();
        struct ra_gguf_value e;
        for (uint64_t k = 0; k < v->n; k++) {
            if (ra_gguf_value_elem(g, v, k, &e) != RA_OK || json_array_append_new(a, value_json(g, &e)) != 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    if (ra_gguf_value_str(g, v, &s, &len) == RA_OK)
        return json_stringn(s, len); /* NULL (an error) for text that is not UTF-8 */
    if (ra_gguf_value_bool(g, v, &b) == RA_OK)
        return json_boolean(b);
    if (ra_gguf_value_f64(g, v, &f) == RA_OK)
        return json_real(f);
    if (ra_gguf_value_i64(g, v, &i) == RA_OK)
        return json_integer(i);
    if (ra_gguf_value_u64(g, v, &u) == RA_OK) {
        char text[24];
        snprintf(text, sizeof text, "%llu", (unsigned long long)u);
        return json_string(text);
    }
    return NULL;
}

static json_t *kv_json(const struct ra_gguf *g, const struct ra_gguf_kv *kv)
{
    json_t *value = value_json(g, &kv->value);
    if (!value)
        return NULL;
    json_t *o = json_pack("{s:s, s:o}", "type", ra_gguf_type_name(kv->value.type), "value", value);
    if (kv->value.type == RA_GGUF_ARR)
        json_object_set_new(o, "elem", json_string(ra_gguf_type_name(kv->value.elem_type)));
    return o;
}

static json_t *tensor_json(const struct ra_gguf_tensor *t)
{
    json_t *dims = json_array(), *values = json_null();
    float *x = malloc(sizeof *x * (size_t)(t->n_elements ? t->n_elements : 1));

    for (int d = 0; d < t->n_dims; d++)
        json_array_append_new(dims, json_integer(t->dims[d]));
    if (x && ra_gguf_dequantize(t->type, t->data, x, t->n_elements) == RA_OK) {
        values = json_array();
        for (int64_t i = 0; i < t->n_elements; i++)
            json_array_append_new(values, json_real(x[i]));
    }
    free(x);
    return json_pack("{s:i, s:s, s:o, s:I, s:I, s:I, s:o}", "type", (int)t->type, "type_name",
                     ra_ggml_type_name(t->type), "dims", dims, "n_elements", (json_int_t)t->n_elements,
                     "offset", (json_int_t)t->offset, "bytes", (json_int_t)t->bytes, "values", values);
}

static int dump(const char *path)
{
    struct ra_gguf g;
    if (ra_gguf_open(&g, path) != RA_OK) {
        fprintf(stderr, "%s\n", ra_error_message());
        return 1;
    }
    json_t *kvs = json_object(), *tensors = json_object();
    int rc = 0;
    for (int64_t i = 0; i < g.n_kvs && rc == 0; i++) {
        json_t *kv = kv_json(&g, &g.kvs[i]);
        if (!kv || json_object_set_new(kvs, g.kvs[i].key, kv) != 0) {
            fprintf(stderr, "%s: key %s: cannot be written as JSON\n", path, ra_esc(g.kvs[i].key));
            rc = 1;
        }
    }
    for (int64_t i = 0; i < g.n_tensors; i++)
        json_object_set_new(tensors, g.tensors[i].name, tensor_json(&g.tensors[i]));
    json_t *root = json_pack("{s:i, s:i, s:I, s:o, s:o}", "version", (int)g.version, "alignment", (int)g.alignment,
                             "data_offset", (json_int_t)g.data_offset, "kv", kvs, "tensors", tensors);
    if (rc == 0 && (!root || json_dumpf(root, stdout, JSON_COMPACT) != 0 || putchar('\n') == EOF)) {
        fprintf(stderr, "%s: cannot write the JSON\n", path);
        rc = 1;
    }
    json_decref(root);
    ra_gguf_close(&g);
    return rc;
}

static int dump_types(void)
{
    json_t *root = json_object();
    for (uint32_t t = 0; t < 256; t++) {
        int64_t block, bytes;
        char key[16];
        if (ra_ggml_type_layout(t, &block, &bytes) != RA_OK)
            continue;
        snprintf(key, sizeof key, "%u", t);
        json_object_set_new(root, key, json_pack("[s, I, I]", ra_ggml_type_name(t), (json_int_t)block,
                                                 (json_int_t)bytes));
    }
    int rc = json_dumpf(root, stdout, JSON_COMPACT) != 0 || putchar('\n') == EOF;
    json_decref(root);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE.gguf | --types\n", argv[0]);
        return 2;
    }
    return strcmp(argv[1], "--types") == 0 ? dump_types() : dump(argv[1]);
}
