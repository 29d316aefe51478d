/* GGUF parsing (src/gguf.h) on files built here byte by byte: every metadata
 * value type, nested arrays, versions 2 and 3, the alignment, the typed
 * getters, ggml's block formats against values worked out by hand, and every
 * lie the parser must refuse with one line naming the file and the cause. */
#include "gguf.h"
#include "half.h"
#include "status.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEM_PATH "mem.gguf"

/* ------------------------------------------------------------------ a GGUF writer */

struct buf {
    unsigned char *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_le(struct buf *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        unsigned char c = (unsigned char)(v >> (8 * i));
        put(b, &c, 1);
    }
}

static void put_str(struct buf *b, const char *s, size_t len)
{
    put_le(b, len, 8);
    put(b, s, len);
}

static void put_f32(struct buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_le(b, u, 4);
}

static void header(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kvs)
{
    b->n = 0;
    put(b, "GGUF", 4);
    put_le(b, version, 4);
    put_le(b, n_tensors, 8);
    put_le(b, n_kvs, 8);
}

/* A key and its value type (the caller writes the value). */
static void key(struct buf *b, const char *k, enum ra_gguf_type t)
{
    put_str(b, k, strlen(k));
    put_le(b, (uint64_t)t, 4);
}

static void kv_u32(struct buf *b, const char *k, uint32_t v)
{
    key(b, k, RA_GGUF_U32);
    put_le(b, v, 4);
}

static void tensor_info(struct buf *b, const char *name, int n_dims, const int64_t *dims, uint32_t type,
                        uint64_t offset)
{
    put_str(b, name, strlen(name));
    put_le(b, (uint64_t)n_dims, 4);
    for (int d = 0; d < n_dims; d++)
        put_le(b, (uint64_t)dims[d], 8);
    put_le(b, type, 4);
    put_le(b, offset, 8);
}

static void pad(struct buf *b, size_t align)
{
    while (b->n % align)
        put_le(b, 0, 1);
}

/* A file with one tensor NAME of the given shape and type at OFFSET, DATA_BYTES bytes of data after the header. */
static void one_tensor(struct buf *b, int n_dims, const int64_t *dims, uint32_t type, uint64_t offset,
                       size_t data_bytes)
{
    header(b, 3, 1, 0);
    tensor_info(b, "w", n_dims, dims, type, offset);
    pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++)
        put_le(b, i & 0xff, 1);
}

/* ------------------------------------------------------------------ parsing from memory */

static struct ra_mapped_file mem_file;

/* Parses B from a buffer of exactly its size (so ASan sees any read past it). */
static int parse(struct ra_gguf *g, const struct buf *b)
{
    free((void *)mem_file.data);
    unsigned char *copy = malloc(b->n ? b->n : 1);
    memcpy(copy, b->p, b->n);
    mem_file = (struct ra_mapped_file){ copy, b->n, (char *)MEM_PATH };
    return ra_gguf_parse(g, &mem_file);
}

static int message_has(const char *a, const char *b)
{
    const char *msg = ra_error_message();
    int ok = strstr(msg, a) && (!b || strstr(msg, b)) && !strchr(msg, '\n');
    if (!ok)
        fprintf(stderr, "  message \"%s\" should name \"%s\"%s%s\n", msg, a, b ? " and " : "", b ? b : "");
    return ok;
}

/* B must be refused with STATUS and a one-line message naming the file, A and B. */
static void expect_refused(const struct buf *b, int status, const char *a, const char *also)
{
    struct ra_gguf g;
    ra_error_clear();
    int rc = parse(&g, b);
    if (rc != status)
        fprintf(stderr, "  expected status %d, got %d (%s)\n", status, rc, ra_error_message());
    CHECK(rc == status);
    CHECK(message_has(MEM_PATH, a));
    if (also)
        CHECK(message_has(also, NULL));
    CHECK(g.tensors == NULL && g.kvs == NULL && g.strings == NULL && g.elems == NULL); /* nothing left to free */
}

/* ------------------------------------------------------------------ metadata */

/* Every value type once, arrays of several, nested arrays; VERSION 2 or 3. */
static void metadata_file(struct buf *b, uint32_t version)
{
    header(b, version, 0, 21);
    key(b, "u8", RA_GGUF_U8), put_le(b, 200, 1);
    key(b, "i8", RA_GGUF_I8), put_le(b, (uint8_t)-5, 1);
    key(b, "u16", RA_GGUF_U16), put_le(b, 60000, 2);
    key(b, "i16", RA_GGUF_I16), put_le(b, (uint16_t)-300, 2);
    kv_u32(b, "u32", 4000000000u);
    key(b, "i32", RA_GGUF_I32), put_le(b, (uint32_t)-7, 4);
    key(b, "f32", RA_GGUF_F32), put_f32(b, 1.5f);
    key(b, "yes", RA_GGUF_BOOL), put_le(b, 1, 1);
    key(b, "no", RA_GGUF_BOOL), put_le(b, 0, 1);
    key(b, "str", RA_GGUF_STR), put_str(b, "h\xc3\xa9llo\0x", 8); /* UTF-8, and a NUL inside */
    key(b, "u64", RA_GGUF_U64), put_le(b, (1ull << 63) + 5, 8);
    key(b, "i64", RA_GGUF_I64), put_le(b, (uint64_t)-(1ll << 40), 8);
    key(b, "f64", RA_GGUF_F64), put_le(b, 0x3fb999999999999aull, 8); /* 0.1 */
    key(b, "arr.i32", RA_GGUF_ARR), put_le(b, RA_GGUF_I32, 4), put_le(b, 3, 8);
    put_le(b, 1, 4), put_le(b, (uint32_t)-2, 4), put_le(b, 3, 4);
    key(b, "arr.f32", RA_GGUF_ARR), put_le(b, RA_GGUF_F32, 4), put_le(b, 2, 8), put_f32(b, -0.25f), put_f32(b, 8);
    key(b, "arr.str", RA_GGUF_ARR), put_le(b, RA_GGUF_STR, 4), put_le(b, 3, 8);
    put_str(b, "a", 1), put_str(b, "", 0), put_str(b, "<0x0A>", 6);
    key(b, "arr.bool", RA_GGUF_ARR), put_le(b, RA_GGUF_BOOL, 4), put_le(b, 2, 8), put_le(b, 0x0100, 2);
    key(b, "arr.empty", RA_GGUF_ARR), put_le(b, RA_GGUF_U64, 4), put_le(b, 0, 8);
    /* [[1, 2], [], [3]] as i16, and [["x"], ["y", "z"]] */
    key(b, "arr.nested", RA_GGUF_ARR), put_le(b, RA_GGUF_ARR, 4), put_le(b, 3, 8);
    put_le(b, RA_GGUF_I16, 4), put_le(b, 2, 8), put_le(b, 1, 2), put_le(b, 2, 2);
    put_le(b, RA_GGUF_I16, 4), put_le(b, 0, 8);
    put_le(b, RA_GGUF_I16, 4), put_le(b, 1, 8), put_le(b, 3, 2);
    key(b, "arr.nested_str", RA_GGUF_ARR), put_le(b, RA_GGUF_ARR, 4), put_le(b, 2, 8);
    put_le(b, RA_GGUF_STR, 4), put_le(b, 1, 8), put_str(b, "x", 1);
    put_le(b, RA_GGUF_STR, 4), put_le(b, 2, 8), put_str(b, "y", 1), put_str(b, "z", 1);
    kv_u32(b, "general.alignment", 32);
}

static void check_getters(const struct ra_gguf *g)
{
    uint32_t u;
    int64_t i;
    float f;
    int yes = -1;
    const char *s;
    size_t len;

    CHECK_OK(ra_gguf_get_u32(g, "u8", &u)); CHECK(u == 200);
    CHECK_OK(ra_gguf_get_u32(g, "u16", &u)); CHECK(u == 60000);
    CHECK_OK(ra_gguf_get_u32(g, "u32", &u)); CHECK(u == 4000000000u);
    CHECK_OK(ra_gguf_get_i64(g, "i8", &i)); CHECK(i == -5);
    CHECK_OK(ra_gguf_get_i64(g, "i16", &i)); CHECK(i == -300);
    CHECK_OK(ra_gguf_get_i64(g, "i32", &i)); CHECK(i == -7);
    CHECK_OK(ra_gguf_get_i64(g, "i64", &i)); CHECK(i == -(1ll << 40));
    CHECK_OK(ra_gguf_get_i64(g, "u32", &i)); CHECK(i == 4000000000ll);
    CHECK_OK(ra_gguf_get_f32(g, "f32", &f)); CHECK(f == 1.5f);
    CHECK_OK(ra_gguf_get_f32(g, "f64", &f)); CHECK(f == 0.1f);
    CHECK_OK(ra_gguf_get_bool(g, "yes", &yes)); CHECK(yes == 1);
    CHECK_OK(ra_gguf_get_bool(g, "no", &yes)); CHECK(yes == 0);
    CHECK_OK(ra_gguf_get_str(g, "str", &s, &len));
    CHECK(len == 8 && memcmp(s, "h\xc3\xa9llo\0x", 9) == 0); /* NUL-terminated after its 8 bytes */

    /* refusals: missing, another type, out of range */
    CHECK(ra_gguf_get_u32(g, "nope", &u) == RA_EFORMAT && message_has(MEM_PATH, "key nope is missing"));
    CHECK(ra_gguf_get_u32(g, "str", &u) == RA_EFORMAT && message_has("key str is str, not u32", NULL));
    CHECK(ra_gguf_get_u32(g, "i32", &u) == RA_EFORMAT && message_has("value -7 does not fit u32", NULL));
    CHECK(ra_gguf_get_i64(g, "u64", &i) == RA_EFORMAT && message_has("value 9223372036854775813 does not fit i64", NULL));
    CHECK(ra_gguf_get_i64(g, "f32", &i) == RA_EFORMAT && message_has("key f32 is f32, not i64", NULL));
    CHECK(ra_gguf_get_f32(g, "u8", &f) == RA_EFORMAT && message_has("key u8 is u8, not f32", NULL));
    CHECK(ra_gguf_get_bool(g, "u8", &yes) == RA_EFORMAT && message_has("key u8 is u8, not bool", NULL));
    CHECK(ra_gguf_get_str(g, "arr.str", &s, &len) == RA_EFORMAT && message_has("is an array of str, not str", NULL));
}

static void check_arrays(const struct ra_gguf *g)
{
    enum ra_gguf_type t;
    uint64_t n;
    int64_t i;
    float f;
    const char *s;
    size_t len;

    CHECK_OK(ra_gguf_get_arr(g, "arr.i32", &t, &n)); CHECK(t == RA_GGUF_I32 && n == 3);
    CHECK_OK(ra_gguf_get_arr_i64(g, "arr.i32", 1, &i)); CHECK(i == -2);
    CHECK_OK(ra_gguf_get_arr_f32(g, "arr.f32", 0, &f)); CHECK(f == -0.25f);
    CHECK_OK(ra_gguf_get_arr_f32(g, "arr.f32", 1, &f)); CHECK(f == 8.0f);
    CHECK_OK(ra_gguf_get_arr(g, "arr.str", &t, &n)); CHECK(t == RA_GGUF_STR && n == 3);
    CHECK_OK(ra_gguf_get_arr_str(g, "arr.str", 0, &s, &len)); CHECK(len == 1 && strcmp(s, "a") == 0);
    CHECK_OK(ra_gguf_get_arr_str(g, "arr.str", 1, &s, &len)); CHECK(len == 0 && *s == '\0');
    CHECK_OK(ra_gguf_get_arr_str(g, "arr.str", 2, &s, &len)); CHECK(len == 6 && strcmp(s, "<0x0A>") == 0);
    CHECK_OK(ra_gguf_get_arr(g, "arr.empty", &t, &n)); CHECK(t == RA_GGUF_U64 && n == 0);
    CHECK(ra_gguf_get_arr_str(g, "arr.str", 3, &s, &len) == RA_EFORMAT &&
          message_has("element 3 is past the end of the array (3 elements)", NULL));
    CHECK(ra_gguf_get_arr_i64(g, "arr.f32", 0, &i) == RA_EFORMAT &&
          message_has("key arr.f32 is an array of f32, not an array of integers", NULL));
    CHECK(ra_gguf_get_arr_str(g, "arr.i32", 0, &s, &len) == RA_EFORMAT && message_has("not an array of str", NULL));
    CHECK(ra_gguf_get_arr(g, "u8", &t, &n) == RA_EFORMAT && message_has("key u8 is u8, not an array", NULL));

    /* booleans and nested arrays, through the value walk */
    const struct ra_gguf_kv *kv = ra_gguf_find_kv(g, "arr.bool");
    struct ra_gguf_value e, inner;
    int yes = -1;
    CHECK(kv && ra_gguf_value_elem(g, &kv->value, 1, &e) == RA_OK && ra_gguf_value_bool(g, &e, &yes) == RA_OK);
    CHECK(yes == 1);
    kv = ra_gguf_find_kv(g, "arr.nested");
    static const int lens[3] = { 2, 0, 1 }, vals[3][2] = { { 1, 2 }, { 0, 0 }, { 3, 0 } };
    for (uint64_t k = 0; kv && k < 3; k++) {
        CHECK_OK(ra_gguf_value_elem(g, &kv->value, k, &inner));
        CHECK(inner.type == RA_GGUF_ARR && inner.elem_type == RA_GGUF_I16 && inner.n == (uint64_t)lens[k]);
        for (uint64_t j = 0; j < inner.n; j++) {
            CHECK(ra_gguf_value_elem(g, &inner, j, &e) == RA_OK && ra_gguf_value_i64(g, &e, &i) == RA_OK);
            CHECK(i == vals[k][j]);
        }
        CHECK(ra_gguf_value_elem(g, &inner, inner.n, &e) == RA_EINVAL);
    }
    kv = ra_gguf_find_kv(g, "arr.nested_str");
    CHECK(kv && ra_gguf_value_elem(g, &kv->value, 1, &inner) == RA_OK && inner.n == 2);
    CHECK(kv && ra_gguf_value_elem(g, &inner, 1, &e) == RA_OK && ra_gguf_value_str(g, &e, &s, &len) == RA_OK);
    CHECK(kv && len == 1 && strcmp(s, "z") == 0);
}

static void test_metadata(uint32_t version)
{
    struct buf b = { 0 };
    struct ra_gguf g;
    metadata_file(&b, version);
    CHECK_OK(parse(&g, &b));
    CHECK(g.version == version && g.n_kvs == 21 && g.n_tensors == 0 && g.alignment == 32);
    for (int64_t i = 1; i < g.n_kvs; i++)
        CHECK(strcmp(g.kvs[i - 1].key, g.kvs[i].key) < 0);
    check_getters(&g);
    check_arrays(&g);
    ra_gguf_close(&g);

    /* cut anywhere: refused, one line naming the file, nothing allocated left */
    size_t full = b.n;
    for (b.n = 0; b.n < full; b.n++)
        expect_refused(&b, RA_EFORMAT, NULL, NULL);
    b.n = 30;
    expect_refused(&b, RA_EFORMAT, "header: 21 metadata entries do not fit in the 6 bytes left", NULL);
    header(&b, version, 0, 1), key(&b, "k", RA_GGUF_U32), put_le(&b, 7, 2);
    expect_refused(&b, RA_EFORMAT, "key k: truncated: the value needs 4 bytes at offset 37, 2 are left", NULL);
    free(b.p);
}

/* ------------------------------------------------------------------ tensors and block formats */

/* Block contents worked out by hand: Q8_0 d = 2, q = j - 16; Q4_0 d = 0.5, low
 * nibble j, high nibble 15 - j; Q4_1 the same nibbles with d = 0.25, m = -1. */
static void put_blocks(struct buf *b, uint32_t type)
{
    if (type == RA_GGML_Q8_0) {
        put_le(b, 0x4000, 2);
        for (int j = 0; j < 32; j++)
            put_le(b, (uint8_t)(j - 16), 1);
        return;
    }
    put_le(b, type == RA_GGML_Q4_0 ? 0x3800 : 0x3400, 2);
    if (type == RA_GGML_Q4_1)
        put_le(b, 0xbc00, 2);
    for (int j = 0; j < 16; j++)
        put_le(b, (uint64_t)(j | (15 - j) << 4), 1);
}

static float expected(uint32_t type, int j)
{
    int q = j < 16 ? j : 15 - (j - 16);
    switch (type) {
    case RA_GGML_Q8_0: return (float)(j - 16) * 2.0f;
    case RA_GGML_Q4_0: return (float)(q - 8) * 0.5f;
    case RA_GGML_Q4_1: return (float)q * 0.25f - 1.0f;
    default: return (float)j / 4 - 3; /* F32, F16, BF16: exact in each */
    }
}

static void put_plain(struct buf *b, uint32_t type, int n)
{
    for (int j = 0; j < n; j++) {
        float f = expected(type, j);
        if (type == RA_GGML_F32)
            put_f32(b, f);
        else
            put_le(b, type == RA_GGML_F16 ? ra_f32_to_f16(f) : ra_f32_to_bf16(f), 2);
    }
}

static void test_tensors(uint32_t version, uint32_t alignment)
{
    static const uint32_t types[6] = { RA_GGML_F32, RA_GGML_F16, RA_GGML_BF16, RA_GGML_Q8_0, RA_GGML_Q4_0,
                                       RA_GGML_Q4_1 };
    static const char *names[6] = { "t.f32", "t.f16", "t.bf16", "t.q8_0", "t.q4_0", "t.q4_1" };
    struct buf b = { 0 };
    struct ra_gguf g;
    uint64_t offset = 0, offsets[6];
    int64_t dims[2] = { 32, 2 };

    header(&b, version, 6, alignment ? 1 : 0);
    if (alignment)
        kv_u32(&b, "general.alignment", alignment);
    uint32_t align = alignment ? alignment : 32;
    for (int k = 0; k < 6; k++) { /* in reverse order in the data section */
        int64_t block, bytes;
        CHECK_OK(ra_ggml_type_layout(types[5 - k], &block, &bytes));
        offsets[5 - k] = offset;
        offset += (uint64_t)((64 / block * bytes + align - 1) / align * align);
    }
    for (int k = 0; k < 6; k++)
        tensor_info(&b, names[k], 2, dims, types[k], offsets[k]);
    pad(&b, align);
    for (int k = 5; k >= 0; k--) {
        if (types[k] == RA_GGML_Q8_0 || types[k] == RA_GGML_Q4_0 || types[k] == RA_GGML_Q4_1)
            put_blocks(&b, types[k]), put_blocks(&b, types[k]);
        else
            put_plain(&b, types[k], 64);
        pad(&b, align);
    }
    CHECK_OK(parse(&g, &b));
    CHECK(g.alignment == align && g.data_offset % align == 0 && g.n_tensors == 6);
    for (int k = 0; k < 6; k++) {
        const struct ra_gguf_tensor *t = ra_gguf_find(&g, names[k]);
        float out[64];
        CHECK(t && t->type == types[k] && t->n_dims == 2 && t->dims[0] == 32 && t->dims[1] == 2 && t->dims[2] == 1);
        if (!t)
            continue;
        CHECK(t->n_elements == 64 && t->offset == offsets[k] && t->data == g.data + offsets[k]);
        CHECK_OK(ra_gguf_dequantize(t->type, t->data, out, 64));
        int plain = types[k] == RA_GGML_F32 || types[k] == RA_GGML_F16 || types[k] == RA_GGML_BF16;
        for (int j = 0; j < 64; j++)
            if (out[j] != expected(types[k], plain ? j : j % 32)) {
                fprintf(stderr, "  %s[%d] = %g\n", names[k], j, out[j]);
                CHECK(0);
                break;
            }
    }
    CHECK(ra_gguf_find(&g, "t.missing") == NULL);
    ra_gguf_close(&g);

    /* cut anywhere */
    size_t full = b.n;
    for (b.n = 0; b.n < full; b.n++) {
        struct ra_gguf cut;
        CHECK(parse(&cut, &b) != RA_OK && message_has(MEM_PATH, NULL));
    }
    free(b.p);
}

static void test_dequantize_errors(void)
{
    unsigned char block[210] = { 0 };
    float out[256];
    CHECK(ra_gguf_dequantize(RA_GGML_Q4_0, block, out, 16) == RA_EINVAL && message_has("not whole blocks of 32", NULL));
    CHECK(ra_gguf_dequantize(13, block, out, 256) == RA_EUNSUPPORTED && message_has("Q5_K (13)", NULL));
    CHECK(ra_gguf_dequantize(99, block, out, 1) == RA_EUNSUPPORTED && message_has("unknown ggml tensor type 99", NULL));
    CHECK(ra_gguf_dequantize(RA_GGML_F16, block, out, 0) == RA_OK);
    CHECK(ra_ggml_type_name(4) == NULL && strcmp(ra_ggml_type_name(RA_GGML_Q4_1), "Q4_1") == 0);
}

/* Q4_K with d = 1, dmin = 1, scales 2 and mins 3 for sub-blocks 0-3, scales
 * 5 (0x5 nibble, top bits 0) and mins 3 for 4-7, every quant byte 0x21: each
 * pair of sub-blocks is low nibbles (1) then high (2). Q6_K with d = 0.5,
 * scales 1..16, low nibbles 1 and high bits 2: q = 0x21 - 32 = 1. */
static void test_k_quants(void)
{
    unsigned char q4k[144] = { 0x00, 0x3c, 0x00, 0x3c, 2, 2, 2, 2, 3, 3, 3, 3, 0x35, 0x35, 0x35, 0x35 };
    unsigned char q6k[210] = { 0 };
    float out[256];
    memset(q4k + 16, 0x21, 128);
    CHECK_OK(ra_gguf_dequantize(RA_GGML_Q4_K, q4k, out, 256));
    for (int j = 0; j < 256; j++) {
        int sub = j / 32, q = sub % 2 ? 2 : 1, sc = sub < 4 ? 2 : 5;
        if (out[j] != (float)(sc * q - 3)) {
            fprintf(stderr, "  Q4_K[%d] = %g, not %d\n", j, out[j], sc * q - 3);
            CHECK(0);
            break;
        }
    }
    memset(q6k, 0x11, 128);      /* both nibbles 1 */
    memset(q6k + 128, 0xaa, 64); /* every 2-bit field 2 */
    for (int k = 0; k < 16; k++)
        q6k[192 + k] = (unsigned char)(k + 1);
    q6k[208] = 0x00, q6k[209] = 0x38;
    CHECK_OK(ra_gguf_dequantize(RA_GGML_Q6_K, q6k, out, 256));
    for (int j = 0; j < 256; j++) /* scale index: 16 elements per scale, in order */
        if (out[j] != 0.5f * (float)(j / 16 + 1)) {
            fprintf(stderr, "  Q6_K[%d] = %g, not %g\n", j, out[j], 0.5 * (j / 16 + 1));
            CHECK(0);
            break;
        }
}

/* ------------------------------------------------------------------ lies */

static void test_header_lies(void)
{
    struct buf b = { 0 };
    header(&b, 3, 0, 0);
    b.p[0] = 'g';
    expect_refused(&b, RA_EFORMAT, "not a GGUF file", NULL);
    header(&b, 1, 0, 0);
    expect_refused(&b, RA_EUNSUPPORTED, "GGUF version 1 is not supported (only versions 2 and 3", NULL);
    header(&b, 4, 0, 0);
    expect_refused(&b, RA_EUNSUPPORTED, "GGUF version 4 is not supported", NULL);
    header(&b, 0x03000000, 0, 0); /* what a big-endian writer puts there */
    expect_refused(&b, RA_EUNSUPPORTED, "a big-endian GGUF file (version 3 read byte-swapped)", NULL);
    header(&b, 3, 0, 1ull << 63);
    expect_refused(&b, RA_EFORMAT, "9223372036854775808 metadata entries do not fit in the 0 bytes left", NULL);
    header(&b, 2, UINT64_MAX, 0);
    expect_refused(&b, RA_EFORMAT, "18446744073709551615 tensor infos do not fit", NULL);
    header(&b, 3, 0, 0);
    struct ra_gguf g;
    CHECK_OK(parse(&g, &b)); /* an empty file is a file */
    CHECK(g.n_tensors == 0 && g.n_kvs == 0 && g.data_size == 0);
    ra_gguf_close(&g);
    free(b.p);
}

static void test_metadata_lies(void)
{
    struct buf b = { 0 };
    header(&b, 3, 0, 1), key(&b, "s", RA_GGUF_STR), put_le(&b, UINT64_MAX, 8);
    expect_refused(&b, RA_EFORMAT, "key s: a string is 18446744073709551615 bytes long, past the end", NULL);
    header(&b, 3, 0, 1), key(&b, "a", RA_GGUF_ARR), put_le(&b, RA_GGUF_U32, 4), put_le(&b, 1ull << 62, 8);
    expect_refused(&b, RA_EFORMAT, "key a: an array of 4611686018427387904 u32 elements does not fit", NULL);
    header(&b, 3, 0, 1), key(&b, "a", RA_GGUF_ARR), put_le(&b, RA_GGUF_STR, 4), put_le(&b, UINT64_MAX, 8);
    put_str(&b, "x", 1);
    expect_refused(&b, RA_EFORMAT, "str elements does not fit", NULL);
    header(&b, 3, 0, 1), key(&b, "a", RA_GGUF_ARR), put_le(&b, RA_GGUF_ARR, 4), put_le(&b, 1ull << 40, 8);
    expect_refused(&b, RA_EFORMAT, "arr elements does not fit", NULL);
    header(&b, 3, 0, 1), key(&b, "t", 13), put_le(&b, 0, 8);
    expect_refused(&b, RA_EFORMAT, "key t: unknown value type 13", NULL);
    header(&b, 3, 0, 1), key(&b, "a", RA_GGUF_ARR), put_le(&b, 77, 4), put_le(&b, 0, 8);
    expect_refused(&b, RA_EFORMAT, "key a: unknown array element type 77", NULL);
    header(&b, 3, 0, 1), key(&b, "b", RA_GGUF_BOOL), put_le(&b, 2, 1);
    expect_refused(&b, RA_EFORMAT, "key b: bool value 2 at offset 37 is neither 0 nor 1", NULL);
    header(&b, 3, 0, 1), put_str(&b, "", 0), put_le(&b, RA_GGUF_U8, 4), put_le(&b, 0, 2);
    expect_refused(&b, RA_EFORMAT, "metadata entry 0: the key is empty", NULL);
    header(&b, 3, 0, 1), put_str(&b, "a\0b", 3), put_le(&b, RA_GGUF_U8, 4), put_le(&b, 0, 1);
    expect_refused(&b, RA_EFORMAT, "metadata entry 0: the key holds a NUL byte", NULL);
    header(&b, 3, 0, 2), kv_u32(&b, "k", 1), kv_u32(&b, "k", 2);
    expect_refused(&b, RA_EFORMAT, "key k appears twice", NULL);
    header(&b, 3, 0, 1), key(&b, "deep", RA_GGUF_ARR);
    for (int d = 0; d < 20; d++)
        put_le(&b, RA_GGUF_ARR, 4), put_le(&b, 1, 8);
    expect_refused(&b, RA_EFORMAT, "key deep: arrays nested more than 16 deep", NULL);
    /* a name from the file is escaped in the message: no line break, no terminal escape */
    header(&b, 3, 0, 1), key(&b, "evil\n\x1b[2J", RA_GGUF_STR), put_le(&b, 99, 8);
    expect_refused(&b, RA_EFORMAT, "key evil\\n\\x1b[2J: a string is 99 bytes long", NULL);
    free(b.p);
}

static void test_alignment_lies(void)
{
    static const uint32_t bad[4] = { 0, 3, 48, 1u << 30 };
    struct buf b = { 0 };
    for (int i = 0; i < 4; i++) {
        header(&b, 3, 0, 1), kv_u32(&b, "general.alignment", bad[i]);
        expect_refused(&b, RA_EFORMAT, "general.alignment", "must be a power of two from 1 to 16777216");
    }
    header(&b, 3, 0, 1), key(&b, "general.alignment", RA_GGUF_U64), put_le(&b, 32, 8);
    expect_refused(&b, RA_EFORMAT, "general.alignment is u64, not u32", NULL);
    /* alignment 1: no padding at all */
    int64_t dims[1] = { 3 };
    header(&b, 3, 1, 1), kv_u32(&b, "general.alignment", 1);
    tensor_info(&b, "odd", 1, dims, RA_GGML_F16, 0);
    put_le(&b, 0x3c00, 2), put_le(&b, 0x4000, 2), put_le(&b, 0xc200, 2);
    struct ra_gguf g;
    float out[3];
    CHECK_OK(parse(&g, &b));
    CHECK(g.alignment == 1 && g.n_tensors == 1 && g.data_size == 6);
    CHECK(g.n_tensors == 1 && ra_gguf_dequantize(g.tensors[0].type, g.tensors[0].data, out, 3) == RA_OK);
    CHECK(out[0] == 1.0f && out[1] == 2.0f && out[2] == -3.0f); /* from an odd address */
    ra_gguf_close(&g);
    free(b.p);
}

static void test_tensor_lies(void)
{
    static const unsigned char zeros[128];
    struct buf b = { 0 };
    int64_t d4[1] = { 4 }, d32[1] = { 32 }, d16[1] = { 16 }, d5[5] = { 1, 1, 1, 1, 1 };
    int64_t huge[2] = { 1ll << 62, 1ll << 62 }, big[1] = { 1ll << 62 }, empty[2] = { 0, 7 };

    one_tensor(&b, 1, d4, RA_GGML_F32, 0, 12);
    expect_refused(&b, RA_EFORMAT, "tensor w: its 16 bytes at offset 0 run past the end of the data section (12 bytes",
                   "truncated");
    one_tensor(&b, 1, d4, RA_GGML_F32, 64, 64);
    expect_refused(&b, RA_EFORMAT, "tensor w: its 16 bytes at offset 64 run past the end", NULL);
    one_tensor(&b, 1, d4, RA_GGML_F32, UINT64_MAX - 31, 64);
    expect_refused(&b, RA_EFORMAT, "tensor w:", "run past the end");
    one_tensor(&b, 1, d4, RA_GGML_F32, 4, 64);
    expect_refused(&b, RA_EFORMAT, "tensor w: offset 4 is not a multiple of the alignment 32", NULL);
    one_tensor(&b, 1, d4, 99, 0, 16);
    expect_refused(&b, RA_EUNSUPPORTED, "tensor w: unknown ggml tensor type 99", NULL);
    one_tensor(&b, 1, d4, 4, 0, 16); /* Q4_2, retired from ggml */
    expect_refused(&b, RA_EUNSUPPORTED, "unknown ggml tensor type 4", NULL);
    one_tensor(&b, 1, d16, RA_GGML_Q4_0, 0, 64);
    expect_refused(&b, RA_EFORMAT, "tensor w: rows of 16 elements are not whole blocks of 32 (type Q4_0)", NULL);
    one_tensor(&b, 0, d4, RA_GGML_Q8_0, 0, 64);
    expect_refused(&b, RA_EFORMAT, "rows of 1 elements are not whole blocks of 32", NULL);
    one_tensor(&b, 5, d5, RA_GGML_F32, 0, 16);
    expect_refused(&b, RA_EFORMAT, "tensor w: 5 dimensions, more than 4", NULL);
    one_tensor(&b, 2, huge, RA_GGML_F32, 0, 16);
    expect_refused(&b, RA_EFORMAT, "tensor w: its shape has more than 2^63 - 1 elements", NULL);
    one_tensor(&b, 1, big, RA_GGML_F32, 0, 16);
    expect_refused(&b, RA_EFORMAT, "tensor w: its size in bytes overflows", NULL);
    int64_t negative[1] = { -1 };
    one_tensor(&b, 1, negative, RA_GGML_F32, 0, 16);
    expect_refused(&b, RA_EFORMAT, "tensor w: dimension 0 is 18446744073709551615, more than 2^63 - 1", NULL);

    /* two tensors: overlapping, the same name, a NUL in a name */
    header(&b, 3, 2, 0), tensor_info(&b, "a", 1, d32, RA_GGML_F32, 0), tensor_info(&b, "b", 1, d4, RA_GGML_F32, 96);
    pad(&b, 32), put(&b, zeros, 128);
    expect_refused(&b, RA_EFORMAT, "tensor b: bytes [96, 112) overlap tensor a [0, 128)", NULL);
    header(&b, 3, 2, 0), tensor_info(&b, "a", 1, d4, RA_GGML_F32, 0), tensor_info(&b, "a", 1, d4, RA_GGML_F32, 32);
    pad(&b, 32), put(&b, zeros, 64);
    expect_refused(&b, RA_EFORMAT, "tensor name a appears twice", NULL);
    header(&b, 3, 1, 0), put_str(&b, "a\0", 2), put(&b, zeros, 16);
    expect_refused(&b, RA_EFORMAT, "tensor 0: the name holds a NUL byte", NULL);
    /* the padding before the data section cut off */
    header(&b, 3, 1, 0), tensor_info(&b, "a", 1, d4, RA_GGML_F32, 0);
    expect_refused(&b, RA_EFORMAT, "truncated: the data section would start at offset 64, past the end of the file (57",
                   NULL);

    /* empty tensors hold no byte: anywhere aligned inside the section, even where another lies */
    struct ra_gguf g;
    header(&b, 2, 2, 0), tensor_info(&b, "e", 2, empty, RA_GGML_Q4_1, 0), tensor_info(&b, "f", 1, d4, RA_GGML_F32, 0);
    pad(&b, 32), put(&b, zeros, 16);
    CHECK_OK(parse(&g, &b));
    CHECK(g.n_tensors == 2 && g.tensors[0].n_elements == 0 && g.tensors[0].bytes == 0 && g.tensors[1].bytes == 16);
    ra_gguf_close(&g);
    free(b.p);
}

static void test_open(const char *dir)
{
    struct buf b = { 0 };
    struct ra_gguf g;
    char path[4200];
    metadata_file(&b, 3);
    snprintf(path, sizeof path, "%s/meta.gguf", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b.p, 1, b.n, f) == b.n && fclose(f) == 0);
    CHECK_OK(ra_gguf_open(&g, path));
    CHECK(g.n_kvs == 21 && g.file == &g.own);
    ra_gguf_close(&g);
    /* a lie names the real path */
    f = fopen(path, "wb");
    CHECK(f && fwrite(b.p, 1, 40, f) == 40 && fclose(f) == 0);
    CHECK(ra_gguf_open(&g, path) == RA_EFORMAT && message_has(path, "do not fit"));
    CHECK(g.own.data == NULL);
    snprintf(path, sizeof path, "%s/absent.gguf", dir);
    CHECK(ra_gguf_open(&g, path) == RA_EIO && message_has(path, NULL));
    free(b.p);
}

int main(void)
{
    const char *dir = test_tmpdir("gguf");
    if (!dir) {
        fprintf(stderr, "cannot create the scratch directory\n");
        return 1;
    }
    test_metadata(2);
    test_metadata(3);
    test_tensors(3, 0);
    test_tensors(2, 0);
    test_tensors(3, 64);
    test_tensors(3, 1);
    test_dequantize_errors();
    test_k_quants();
    test_header_lies();
    test_metadata_lies();
    test_alignment_lies();
    test_tensor_lies();
    test_open(dir);
    free((void *)mem_file.data);
    return test_result("test_gguf");
}
