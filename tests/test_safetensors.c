/* safetensors parsing and writing, and loading Hugging Face model directories:
 * round trips, every lie the parser must catch, sharded and unsharded models,
 * q/k kept in place in HF's rotate-half order, and the refusal of non-finite
 * weights. */
#include "finite.h"
#include "half.h"
#include "model.h"
#include "safetensors.h"
#include "status.h"
#include "test.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tmp;

static const char *tmp_path(const char *name)
{
    static char buf[8][4096];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", tmp, name);
    return p;
}

static uint64_t rng = 88172645463325252ull;

static float rand_float(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* N values of dtype T, random, in a malloc'd buffer. */
static void *rand_tensor(enum ra_dtype t, size_t n)
{
    void *p = malloc(n * ra_dtype_size(t) + 1);
    for (size_t i = 0; i < n; i++) {
        float f = rand_float();
        if (t == RA_DTYPE_F32)
            ((float *)p)[i] = f;
        else
            ((uint16_t *)p)[i] = t == RA_DTYPE_F16 ? ra_f32_to_f16(f) : ra_f32_to_bf16(f);
    }
    return p;
}

/* Checks that the last error message names every one of the given strings. */
static int message_has(const char *a, const char *b)
{
    const char *msg = ra_error_message();
    int ok = strstr(msg, a) && (!b || strstr(msg, b));
    if (!ok)
        fprintf(stderr, "  message \"%s\" should name \"%s\"%s%s\n", msg, a, b ? " and " : "", b ? b : "");
    return ok;
}

/* ------------------------------------------------------------------ round trip */

static void test_round_trip(enum ra_dtype t)
{
    struct ra_st_write_entry e[4] = {
        { .name = "a.weight", .dtype = t, .n_dims = 2, .shape = { 5, 7 } },
        { .name = "norm", .dtype = t, .n_dims = 1, .shape = { 9 } },
        { .name = "cube", .dtype = t, .n_dims = 3, .shape = { 2, 3, 4 } },
        { .name = "empty", .dtype = t, .n_dims = 2, .shape = { 0, 3 } },
    };
    size_t counts[4] = { 35, 9, 24, 0 };
    struct ra_safetensors st;
    const char *path = tmp_path("round.safetensors");

    for (int i = 0; i < 4; i++)
        e[i].data = rand_tensor(t, counts[i]);
    CHECK_OK(ra_safetensors_write(path, e, 4));
    CHECK_OK(ra_safetensors_open(&st, path));
    CHECK(st.n_entries == 4);
    CHECK((st.data - st.file->data) % 8 == 0); /* header padded as the HF library does */
    CHECK(ra_safetensors_meta(&st, "format") && strcmp(ra_safetensors_meta(&st, "format"), "pt") == 0);
    CHECK(ra_safetensors_find(&st, "missing") == NULL);
    for (int i = 0; i < 4; i++) {
        const struct ra_st_entry *x = ra_safetensors_find(&st, e[i].name);
        CHECK(x != NULL);
        if (!x)
            continue;
        CHECK(x->dtype == t && x->n_dims == e[i].n_dims);
        for (int d = 0; d < e[i].n_dims; d++)
            CHECK(x->shape[d] == e[i].shape[d]);
        CHECK(ra_st_entry_bytes(x) == counts[i] * ra_dtype_size(t));
        CHECK(memcmp(x->data, e[i].data, counts[i] * ra_dtype_size(t)) == 0);
        CHECK((uintptr_t)x->data % ra_dtype_size(t) == 0);
    }
    ra_safetensors_close(&st);
    for (int i = 0; i < 4; i++)
        free((void *)e[i].data);
    CHECK(access(path, F_OK) == 0);
}

/* ------------------------------------------------------------------ lies */

/* Writes a file with header length LEN_FIELD (or the real one if 0), header
 * text HEADER (unpadded) and DATA_BYTES bytes of data. */
static const char *write_raw(const char *name, uint64_t len_field, const char *header, size_t data_bytes)
{
    const char *path = tmp_path(name);
    FILE *fp = fopen(path, "wb");
    uint64_t n = len_field ? len_field : strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(n >> (8 * i));
    fwrite(le, 1, 8, fp);
    fwrite(header, 1, strlen(header), fp);
    for (size_t i = 0; i < data_bytes; i++)
        fputc((int)i & 0xff, fp);
    fclose(fp);
    return path;
}

static void expect_reject(const char *path, int status, const char *tensor)
{
    struct ra_safetensors st;
    ra_error_clear();
    int rc = ra_safetensors_open(&st, path);
    if (rc != status)
        fprintf(stderr, "  %s: expected status %d, got %d (%s)\n", path, status, rc, ra_error_message());
    CHECK(rc == status);
    CHECK(message_has(path, tensor));
    CHECK(st.entries == NULL && st.own.data == NULL); /* nothing left to free */
}

static void test_lies(void)
{
    /* a valid file, then cut short: the last tensor runs past the end */
    float data[12] = { 0 };
    struct ra_st_write_entry e[2] = {
        { .name = "first", .dtype = RA_DTYPE_F32, .n_dims = 1, .shape = { 4 }, .data = data },
        { .name = "second", .dtype = RA_DTYPE_F32, .n_dims = 2, .shape = { 2, 4 }, .data = data + 4 },
    };
    const char *path = tmp_path("truncated.safetensors");
    struct ra_safetensors st;
    CHECK_OK(ra_safetensors_write(path, e, 2));
    CHECK_OK(ra_safetensors_open(&st, path));
    size_t full = st.file ? st.file->size : 0;
    ra_safetensors_close(&st);
    CHECK(full > 0 && truncate(path, (off_t)full - 5) == 0);
    expect_reject(path, RA_EFORMAT, "second");

    expect_reject(write_raw("short.safetensors", 0, "", 0), RA_EFORMAT, NULL);
    CHECK(truncate(tmp_path("short.safetensors"), 5) == 0);
    expect_reject(tmp_path("short.safetensors"), RA_EFORMAT, NULL);
    expect_reject(write_raw("hlen.safetensors", 1000, "{}", 16), RA_EFORMAT, NULL);
    expect_reject(write_raw("hlen_huge.safetensors", UINT64_MAX - 3, "{}", 16), RA_EFORMAT, NULL);
    /* a header length within a (sparse) file but over the 100 MB limit */
    const char *big = write_raw("hlen_big.safetensors", 200u << 20, "{}", 16);
    CHECK(truncate(big, (off_t)(8 + (200u << 20))) == 0);
    expect_reject(big, RA_EFORMAT, "limit");
    unlink(big);
    expect_reject(write_raw("badjson.safetensors", 0, "{\"x\": {\"dtype\": ", 16), RA_EFORMAT, NULL);
    expect_reject(write_raw("array.safetensors", 0, "[1, 2]", 16), RA_EFORMAT, NULL);
    expect_reject(write_raw("past.safetensors", 0,
                            "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}", 16),
                  RA_EFORMAT, "w");
    expect_reject(write_raw("overlap.safetensors", 0,
                            "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
                            " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 16),
                  RA_EFORMAT, "overlap");
    expect_reject(write_raw("size.safetensors", 0,
                            "{\"w\": {\"dtype\": \"F16\", \"shape\": [3, 3], \"data_offsets\": [0, 16]}}", 16),
                  RA_EFORMAT, "w");
    expect_reject(write_raw("overflow.safetensors", 0,
                            "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 16], "
                            "\"data_offsets\": [0, 0]}}", 16), RA_EFORMAT, "w");
    expect_reject(write_raw("i8.safetensors", 0,
                            "{\"w\": {\"dtype\": \"I8\", \"shape\": [16], \"data_offsets\": [0, 16]}}", 16),
                  RA_EUNSUPPORTED, "w");
    CHECK(message_has("I8", NULL));
    expect_reject(write_raw("f64.safetensors", 0,
                            "{\"w\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 16),
                  RA_EUNSUPPORTED, "F64");
    expect_reject(write_raw("nodtype.safetensors", 0, "{\"w\": {\"shape\": [4], \"data_offsets\": [0, 16]}}", 16),
                  RA_EFORMAT, "w");
    CHECK(message_has("dtype", NULL));
    expect_reject(write_raw("negshape.safetensors", 0,
                            "{\"w\": {\"dtype\": \"F32\", \"shape\": [-4], \"data_offsets\": [0, 16]}}", 16),
                  RA_EFORMAT, "w");
    expect_reject(write_raw("offsets.safetensors", 0,
                            "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [16, 0]}}", 16),
                  RA_EFORMAT, "w");
    expect_reject(write_raw("meta.safetensors", 0, "{\"__metadata__\": {\"format\": 1}}", 0), RA_EFORMAT, NULL);
    expect_reject(write_raw("dup.safetensors", 0,
                            "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                            " \"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 16),
                  RA_EFORMAT, NULL);

    /* The tensors must cover the data region exactly, as the reference
     * library requires: a gap, bytes after the last tensor, or an empty
     * tensor outside the sequence is a lie about the layout. */
    expect_reject(write_raw("gap.safetensors", 0,
                            "{\"a\": {\"dtype\": \"BF16\", \"shape\": [], \"data_offsets\": [0, 2]},"
                            " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 16),
                  RA_EFORMAT, "b");
    CHECK(message_has("gap", "[2, 8)"));
    expect_reject(write_raw("lead.safetensors", 0,
                            "{\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 16),
                  RA_EFORMAT, "b");
    expect_reject(write_raw("slack.safetensors", 0,
                            "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 12]}}", 16),
                  RA_EFORMAT, "16 bytes");
    CHECK(message_has("cover 12", "a"));
    expect_reject(write_raw("nothing.safetensors", 0, "{}", 16), RA_EFORMAT, "cover 0");
    expect_reject(write_raw("empty-out.safetensors", 0,
                            "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
                            " \"e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [20, 20]}}", 16),
                  RA_EFORMAT, NULL);
    /* The file: the header length one byte short, so the header's
     * last padding space becomes the first data byte and every tensor would
     * read its bytes shifted by one. */
    const char *padded = "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}  ";
    char hlen[64];
    snprintf(hlen, sizeof hlen, "header length (%zu)", strlen(padded) - 1);
    expect_reject(write_raw("hlen-short.safetensors", strlen(padded) - 1, padded, 16), RA_EFORMAT, "17 bytes");
    CHECK(message_has(hlen, "cover 16"));

    /* exact cover: a scalar, an empty tensor in sequence, no padding after */
    const char *ok = write_raw("exact.safetensors", 0,
                               "{\"a\": {\"dtype\": \"BF16\", \"shape\": [], \"data_offsets\": [0, 2]},"
                               " \"e\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [2, 2]},"
                               " \"b\": {\"dtype\": \"F16\", \"shape\": [7], \"data_offsets\": [2, 16]}}", 16);
    CHECK_OK(ra_safetensors_open(&st, ok));
    CHECK(st.n_entries == 3 && ra_safetensors_find(&st, "a") && ra_safetensors_find(&st, "a")->n_dims == 0);
    ra_safetensors_close(&st);
}

/* The streaming writer refuses more or fewer bytes than it announced and
 * leaves nothing behind when aborted. */
static void test_writer_limits(void)
{
    struct ra_st_write_entry e = { .name = "w", .dtype = RA_DTYPE_F32, .n_dims = 1, .shape = { 4 } };
    struct ra_safetensors_writer *w;
    const char *path = tmp_path("partial.safetensors");
    float x[5] = { 0 };

    unlink(path);
    CHECK_OK(ra_safetensors_writer_open(&w, path, &e, 1, NULL));
    CHECK(ra_safetensors_writer_write(w, x, sizeof x) == RA_EINVAL);
    CHECK_OK(ra_safetensors_writer_write(w, x, 8));
    CHECK(ra_safetensors_writer_close(w) == RA_EINVAL);
    CHECK(access(path, F_OK) != 0);
    struct ra_st_write_entry dup[2] = { e, e };
    CHECK(ra_safetensors_writer_open(&w, path, dup, 2, NULL) == RA_EINVAL && w == NULL);
}

/* ------------------------------------------------------------------ HF model directories */

struct tiny_hf {
    int dim, hidden, layers, heads, kv_heads, vocab, ctx;
    enum ra_dtype dtype;
    int n;
    struct ra_st_write_entry e[64];
    char names[64][96];
};

static void add(struct tiny_hf *t, const char *name, int64_t rows, int64_t cols)
{
    struct ra_st_write_entry *e = &t->e[t->n];
    snprintf(t->names[t->n], sizeof t->names[0], "%s", name);
    e->name = t->names[t->n];
    e->dtype = t->dtype;
    e->n_dims = rows ? 2 : 1;
    e->shape[0] = rows ? rows : cols;
    e->shape[1] = cols;
    e->data = rand_tensor(t->dtype, (size_t)(rows ? rows : 1) * (size_t)cols);
    t->n++;
}

static void make_tiny(struct tiny_hf *t, enum ra_dtype dtype, int tied)
{
    char name[96];
    static const char *const suffix[] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                          "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj" };
    memset(t, 0, sizeof *t);
    *t = (struct tiny_hf){ .dim = 16, .hidden = 24, .layers = 2, .heads = 4, .kv_heads = 2, .vocab = 32, .ctx = 64,
                           .dtype = dtype };
    int hd = t->dim / t->heads, kv = t->kv_heads * hd;
    int64_t rows[7] = { t->dim, kv, kv, t->dim, t->hidden, t->hidden, t->dim };
    int64_t cols[7] = { t->dim, t->dim, t->dim, t->dim, t->dim, t->dim, t->hidden };
    add(t, "model.embed_tokens.weight", t->vocab, t->dim);
    for (int l = 0; l < t->layers; l++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        add(t, name, 0, t->dim);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        add(t, name, 0, t->dim);
        for (int k = 0; k < 7; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, suffix[k]);
            add(t, name, rows[k], cols[k]);
        }
    }
    add(t, "model.norm.weight", 0, t->dim);
    if (!tied)
        add(t, "lm_head.weight", t->vocab, t->dim);
}

static void free_tiny(struct tiny_hf *t)
{
    for (int i = 0; i < t->n; i++)
        free((void *)t->e[i].data);
}

static const struct ra_st_write_entry *tiny_find(const struct tiny_hf *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->e[i].name, name) == 0)
            return &t->e[i];
    return NULL;
}

static void drop(struct tiny_hf *t, const char *name)
{
    for (int i = 0; i < t->n; i++) {
        if (strcmp(t->e[i].name, name) != 0)
            continue;
        free((void *)t->e[i].data);
        for (int k = i; k + 1 < t->n; k++) {
            t->e[k] = t->e[k + 1];
            memcpy(t->names[k], t->names[k + 1], sizeof t->names[k]);
            t->e[k].name = t->names[k];
        }
        t->n--;
        return;
    }
}

static json_t *tiny_config(const struct tiny_hf *t)
{
    return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:n, s:s}",
                     "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_size", t->dim,
                     "intermediate_size", t->hidden, "num_hidden_layers", t->layers, "num_attention_heads", t->heads,
                     "num_key_value_heads", t->kv_heads, "vocab_size", t->vocab, "max_position_embeddings", t->ctx,
                     "rope_theta", 500000.0, "rms_norm_eps", 1e-6, "tie_word_embeddings", 0, "rope_scaling",
                     "hidden_act", "silu");
}

static const char *model_dir(const char *name)
{
    const char *dir = tmp_path(name);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(cmd) == 0);
    return dir;
}

static void write_config(const char *dir, json_t *cfg)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(json_dump_file(cfg, path, JSON_INDENT(2)) == 0);
    json_decref(cfg);
}

static void write_single(const char *dir, const struct tiny_hf *t, json_t *cfg)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(ra_safetensors_write(path, t->e, t->n));
    write_config(dir, cfg);
}

/* Two shards split at entry SPLIT, and the index mapping names to them. */
static void write_sharded(const char *dir, const struct tiny_hf *t, int split, json_t *cfg)
{
    static const char *const shard[2] = { "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors" };
    char path[4200];
    json_t *map = json_object();
    for (int s = 0; s < 2; s++) {
        int lo = s ? split : 0, hi = s ? t->n : split;
        snprintf(path, sizeof path, "%s/%s", dir, shard[s]);
        CHECK_OK(ra_safetensors_write(path, t->e + lo, hi - lo));
        for (int i = lo; i < hi; i++)
            json_object_set_new(map, t->e[i].name, json_string(shard[s]));
    }
    json_t *index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK(json_dump_file(index, path, JSON_INDENT(2)) == 0);
    json_decref(index);
    write_config(dir, cfg);
}

/* Rewrites a safetensors file with one more space in its header, so the data
 * region starts at an odd address: what a careless writer could produce. */
static void misalign(const char *path)
{
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    if (!fp)
        return;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    unsigned char *buf = malloc((size_t)size);
    rewind(fp);
    CHECK(fread(buf, 1, (size_t)size, fp) == (size_t)size);
    fclose(fp);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | buf[i];
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((n + 1) >> (8 * i));
    fp = fopen(path, "wb");
    fwrite(le, 1, 8, fp);
    fwrite(buf + 8, 1, (size_t)n, fp);
    fputc(' ', fp);
    fwrite(buf + 8 + n, 1, (size_t)size - 8 - (size_t)n, fp);
    fclose(fp);
    free(buf);
}

static int same_tensor(const struct ra_tensor *a, const struct ra_tensor *b)
{
    return a->dtype == b->dtype && a->rows == b->rows && a->cols == b->cols &&
           memcmp(a->data, b->data, (size_t)(a->rows * a->cols) * ra_dtype_size(a->dtype)) == 0;
}

static int same_weights(const struct ra_model *a, const struct ra_model *b)
{
    int ok = same_tensor(&a->weights.embed, &b->weights.embed) && same_tensor(&a->weights.output, &b->weights.output) &&
             same_tensor(&a->weights.final_norm, &b->weights.final_norm);
    for (int l = 0; l < a->config.n_layers && ok; l++) {
        const struct ra_layer_weights *x = &a->weights.layers[l], *y = &b->weights.layers[l];
        ok = same_tensor(&x->attn_norm, &y->attn_norm) && same_tensor(&x->wq, &y->wq) && same_tensor(&x->wk, &y->wk) &&
             same_tensor(&x->wv, &y->wv) && same_tensor(&x->wo, &y->wo) && same_tensor(&x->ffn_norm, &y->ffn_norm) &&
             same_tensor(&x->w_gate, &y->w_gate) && same_tensor(&x->w_down, &y->w_down) &&
             same_tensor(&x->w_up, &y->w_up);
    }
    return ok;
}

static void check_tiny_model(const struct ra_model *m, const struct tiny_hf *t)
{
    const struct ra_config *c = &m->config;
    CHECK(m->format == RA_FORMAT_HF);
    CHECK(c->dim == t->dim && c->hidden_dim == t->hidden && c->n_layers == t->layers && c->n_heads == t->heads &&
          c->n_kv_heads == t->kv_heads && c->vocab_size == t->vocab && c->seq_len == t->ctx && c->head_dim == 4);
    CHECK(c->rope_theta == 500000.0f && c->norm_eps == 1e-6f);
    CHECK(m->weights.embed.dtype == t->dtype && m->weights.final_norm.rows == 1);
    /* untouched tensors stay in the mapping, byte for byte */
    CHECK(memcmp(m->weights.layers[1].wv.data, tiny_find(t, "model.layers.1.self_attn.v_proj.weight")->data,
                 (size_t)(8 * 16) * ra_dtype_size(t->dtype)) == 0);
    CHECK(m->weights.layers[1].wv.data != tiny_find(t, "model.layers.1.self_attn.v_proj.weight")->data);
    /* q/k too: the kernels rotate HF's halves, so nothing is un-permuted or copied */
    CHECK(c->rope_style == RA_ROPE_HALF);
    CHECK(memcmp(m->weights.layers[1].wq.data, tiny_find(t, "model.layers.1.self_attn.q_proj.weight")->data,
                 (size_t)(16 * 16) * ra_dtype_size(t->dtype)) == 0);
    CHECK(memcmp(m->weights.layers[0].wk.data, tiny_find(t, "model.layers.0.self_attn.k_proj.weight")->data,
                 (size_t)(8 * 16) * ra_dtype_size(t->dtype)) == 0);
    CHECK(m->n_owned == 0);
    for (int f = 0; f < m->n_files; f++) /* some mapping holds every weight: no private copy */
        if ((const char *)m->weights.layers[1].wq.data >= (const char *)m->files[f].data &&
            (const char *)m->weights.layers[1].wq.data < (const char *)m->files[f].data + m->files[f].size)
            return;
    CHECK(!"wq is not inside a mapping");
}

static void test_hf_dirs(enum ra_dtype dtype)
{
    struct tiny_hf t;
    struct ra_model a, b;
    make_tiny(&t, dtype, 0);
    const char *one = model_dir("hf-single"), *two = model_dir("hf-sharded");
    write_single(one, &t, tiny_config(&t));
    write_sharded(two, &t, 7, tiny_config(&t));
    CHECK_OK(ra_model_load(&a, one));
    CHECK_OK(ra_model_load(&b, two));
    if (a.weights.layers && b.weights.layers) {
        check_tiny_model(&a, &t);
        CHECK(!a.weights.tied && !b.weights.tied);
        CHECK(a.n_files == 1 && b.n_files == 2);
        CHECK(same_weights(&a, &b));
        CHECK(memcmp(&a.config, &b.config, sizeof a.config) == 0);
    }
    ra_model_free(&b);

    /* unaligned data is copied, not handed out misaligned, and still equal */
    const char *odd = model_dir("hf-unaligned");
    char path[4200];
    write_single(odd, &t, tiny_config(&t));
    snprintf(path, sizeof path, "%s/model.safetensors", odd);
    misalign(path);
    CHECK_OK(ra_model_load(&b, odd));
    if (a.weights.layers && b.weights.layers) {
        CHECK(same_weights(&a, &b));
        CHECK((uintptr_t)b.weights.layers[0].wv.data % ra_dtype_size(dtype) == 0);
        CHECK((uintptr_t)b.weights.embed.data % ra_dtype_size(dtype) == 0);
        const unsigned char *v = b.weights.layers[0].wv.data; /* a copy, outside the mapping */
        CHECK(v < b.files[0].data || v >= b.files[0].data + b.files[0].size);
    }
    ra_model_free(&a);
    ra_model_free(&b);
    free_tiny(&t);
}

static void expect_load_error(const char *dir, int status, const char *a, const char *b);

static void test_tied(void)
{
    struct tiny_hf t;
    struct ra_model m;
    make_tiny(&t, RA_DTYPE_F32, 1);
    const char *dir = model_dir("hf-tied");
    json_t *cfg = tiny_config(&t);
    json_object_set_new(cfg, "tie_word_embeddings", json_true());
    write_single(dir, &t, cfg);
    CHECK_OK(ra_model_load(&m, dir));
    CHECK(m.weights.tied && m.weights.output.data == m.weights.embed.data);
    ra_model_free(&m);

    /* untied (false or absent, the Llama default) without lm_head: an error,
     * not a silent tie */
    dir = model_dir("hf-untied-nohead");
    write_single(dir, &t, tiny_config(&t));
    expect_load_error(dir, RA_EFORMAT, "lm_head.weight is missing", "tie_word_embeddings");
    cfg = tiny_config(&t);
    json_object_del(cfg, "tie_word_embeddings");
    dir = model_dir("hf-nohead-default");
    write_single(dir, &t, cfg);
    expect_load_error(dir, RA_EFORMAT, "lm_head.weight is missing", "tie_word_embeddings");
    free_tiny(&t);
}

/* Loads DIR, which must fail with STATUS and a message naming A (and B). */
static void expect_load_error(const char *dir, int status, const char *a, const char *b)
{
    struct ra_model m;
    ra_error_clear();
    int rc = ra_model_load(&m, dir);
    if (rc != status)
        fprintf(stderr, "  %s: expected status %d, got %d (%s)\n", dir, status, rc, ra_error_message());
    CHECK(rc == status);
    CHECK(message_has(a, b));
    CHECK(m.weights.layers == NULL && m.n_files == 0);
}

static void bad_config(const char *name, const struct tiny_hf *t, const char *key, json_t *value, int status,
                       const char *a, const char *b)
{
    json_t *cfg = tiny_config(t);
    if (value)
        json_object_set_new(cfg, key, value);
    else
        json_object_del(cfg, key);
    const char *dir = model_dir(name);
    write_single(dir, t, cfg);
    expect_load_error(dir, status, a, b);
}

static void test_hf_errors(void)
{
    struct tiny_hf t, small;
    make_tiny(&t, RA_DTYPE_F32, 0);

    bad_config("hf-kv3", &t, "num_key_value_heads", json_integer(3), RA_EFORMAT, "config.json", "KV heads");
    bad_config("hf-nolayers", &t, "num_hidden_layers", NULL, RA_EFORMAT, "config.json", "num_hidden_layers");
    bad_config("hf-strlayers", &t, "num_hidden_layers", json_string("2"), RA_EFORMAT, "config.json", "num_hidden_layers");
    bad_config("hf-mistral", &t, "model_type", json_string("mistral"), RA_EUNSUPPORTED, "config.json", "mistral");
    /* linear and llama3 are built (tests/rope_scaling.sh); yarn is not */
    bad_config("hf-scaling", &t, "rope_scaling", json_pack("{s:s, s:f}", "type", "yarn", "factor", 2.0),
               RA_EUNSUPPORTED, "config.json", "yarn");
    bad_config("hf-headdim", &t, "head_dim", json_integer(8), RA_EUNSUPPORTED, "config.json", "head_dim");
    bad_config("hf-gelu", &t, "hidden_act", json_string("gelu"), RA_EUNSUPPORTED, "config.json", "gelu");
    /* the config says FFN 20, the tensors are 24 wide */
    bad_config("hf-ffn", &t, "intermediate_size", json_integer(20), RA_EFORMAT, "model.safetensors",
               "model.layers.0.mlp.gate_proj.weight");
    CHECK(message_has("[24, 16]", "[20, 16]"));

    const char *dir = model_dir("hf-badjson");
    write_single(dir, &t, tiny_config(&t));
    FILE *fp = fopen(tmp_path("hf-badjson/config.json"), "w");
    fputs("{\"hidden_size\": 16,", fp);
    fclose(fp);
    expect_load_error(dir, RA_EFORMAT, "config.json", "JSON");

    expect_load_error(model_dir("hf-empty"), RA_EIO, "config.json", NULL);
    dir = model_dir("hf-noweights");
    write_config(dir, tiny_config(&t));
    expect_load_error(dir, RA_EIO, "model.safetensors", NULL);

    /* a missing tensor is named */
    make_tiny(&small, RA_DTYPE_F32, 0);
    drop(&small, "model.norm.weight");
    dir = model_dir("hf-missing");
    write_single(dir, &small, tiny_config(&small));
    expect_load_error(dir, RA_EFORMAT, "model.norm.weight", "missing");
    free_tiny(&small);

    /* an index that sends a tensor to a shard that does not hold it */
    dir = model_dir("hf-badindex");
    write_sharded(dir, &t, 7, tiny_config(&t));
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_t *index = json_load_file(path, 0, NULL);
    json_object_set_new(json_object_get(index, "weight_map"), "model.norm.weight",
                        json_string("model-00001-of-00002.safetensors"));
    CHECK(json_dump_file(index, path, 0) == 0);
    json_decref(index);
    expect_load_error(dir, RA_EFORMAT, "model-00001-of-00002.safetensors", "model.norm.weight");

    /* a shard name that leaves the directory */
    dir = model_dir("hf-escape");
    write_sharded(dir, &t, 7, tiny_config(&t));
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    index = json_load_file(path, 0, NULL);
    json_object_set_new(json_object_get(index, "weight_map"), "model.norm.weight", json_string("../x.safetensors"));
    CHECK(json_dump_file(index, path, 0) == 0);
    json_decref(index);
    expect_load_error(dir, RA_EFORMAT, "../x.safetensors", NULL);

    /* a truncated weight file is caught before anything reads it */
    dir = model_dir("hf-truncated");
    write_single(dir, &t, tiny_config(&t));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(truncate(path, 4000) == 0);
    expect_load_error(dir, RA_EFORMAT, path, NULL);
    free_tiny(&t);
}

/* ------------------------------------------------------------------ non-finite weights */

/* The first bad element is found wherever it sits: in any block, behind
 * later bad blocks, in the last partial block; in every dtype, by its bits. */
static void test_first_nonfinite(void)
{
    const int64_t n = 3 * 65536 + 1000;
    uint32_t *f = calloc((size_t)n, sizeof *f);
    uint16_t *h = calloc((size_t)n, sizeof *h);
    const int64_t at[] = { 0, 17, 65535, 65536, 2 * 65536 + 3, n - 1 };
    CHECK(ra_first_nonfinite(f, RA_DTYPE_F32, n, 2) == -1);
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        f[at[i]] = 0x7fc00000u; /* NaN */
        f[n - 1] = 0xff800000u; /* -Inf after it, in the last block */
        CHECK(ra_first_nonfinite(f, RA_DTYPE_F32, n, 2) == at[i]);
        CHECK(ra_first_nonfinite(f, RA_DTYPE_F32, n, 1) == at[i]);
        CHECK(strcmp(ra_nonfinite_name(f, RA_DTYPE_F32, at[i]), at[i] == n - 1 ? "-Inf" : "NaN") == 0);
        memset(f, 0, (size_t)n * sizeof *f);
    }
    f[5] = 0x7f7fffffu; /* FLT_MAX and the largest subnormal are finite */
    f[6] = 0x007fffffu;
    CHECK(ra_first_nonfinite(f, RA_DTYPE_F32, n, 2) == -1);
    /* bf16 and f16 by their own exponent fields, with no widening */
    h[70000] = 0x7f80; /* bf16 +Inf; as f16 a finite 0x7f80 would be NaN: exponents differ */
    CHECK(ra_first_nonfinite(h, RA_DTYPE_BF16, n, 2) == 70000);
    CHECK(strcmp(ra_nonfinite_name(h, RA_DTYPE_BF16, 70000), "+Inf") == 0);
    h[70000] = 0x7c00; /* f16 +Inf, a finite bf16 */
    CHECK(ra_first_nonfinite(h, RA_DTYPE_F16, n, 2) == 70000);
    CHECK(ra_first_nonfinite(h, RA_DTYPE_BF16, n, 2) == -1);
    h[3] = 0xfe01; /* f16 NaN (sign set) */
    CHECK(ra_first_nonfinite(h, RA_DTYPE_F16, n, 2) == 3);
    CHECK(strcmp(ra_nonfinite_name(h, RA_DTYPE_F16, 3), "NaN") == 0);
    CHECK(ra_first_nonfinite(h, RA_DTYPE_F16, 0, 2) == -1);
    free(f);
    free(h);
}

/* Sets element I of the tiny model's tensor NAME to the bits of a non-finite value. */
static void poison(struct tiny_hf *t, const char *name, int64_t i, enum ra_dtype dt)
{
    void *data = (void *)tiny_find(t, name)->data;
    if (dt == RA_DTYPE_F32)
        ((float *)data)[i] = NAN;
    else
        ((uint16_t *)data)[i] = dt == RA_DTYPE_BF16 ? 0xff80 /* -Inf */ : 0x7e00 /* NaN */;
}

/* One NaN or Inf in any weight is refused at load, naming file, tensor and
 * element (the case: one NaN in model.norm.weight, which otherwise
 * makes greedy decoding emit id 0 forever); opting out loads it. */
static void test_nonfinite_weights(void)
{
    static const struct { enum ra_dtype dt; const char *tensor; int64_t at; const char *what; } cases[] = {
        { RA_DTYPE_F32, "model.norm.weight", 13, "element 13 is NaN" },
        { RA_DTYPE_BF16, "model.layers.1.self_attn.q_proj.weight", 100, "element 100 is -Inf" },
        { RA_DTYPE_F16, "lm_head.weight", 32 * 16 - 1, "element 511 is NaN" },
        { RA_DTYPE_F32, "model.embed_tokens.weight", 0, "element 0 is NaN" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct tiny_hf t;
        struct ra_model m;
        make_tiny(&t, cases[c].dt, 0);
        poison(&t, cases[c].tensor, cases[c].at, cases[c].dt);
        const char *dir = model_dir("hf-nonfinite");
        write_single(dir, &t, tiny_config(&t));
        char want[160];
        snprintf(want, sizeof want, "model.safetensors: tensor %s: %s", cases[c].tensor, cases[c].what);
        expect_load_error(dir, RA_EFORMAT, want, NULL);
        const struct ra_load_options trust = { .no_check_weights = 1 };
        CHECK_OK(ra_model_load_opts(&m, dir, &trust));
        CHECK(ra_model_check_weights(&m, 1) == RA_EFORMAT && message_has(want, NULL));
        ra_model_free(&m);
        free_tiny(&t);
    }
    /* the element reported is the file's, in a sharded q/k as anywhere */
    struct tiny_hf t;
    make_tiny(&t, RA_DTYPE_F32, 0);
    poison(&t, "model.layers.0.self_attn.k_proj.weight", 16 * 2 + 5, RA_DTYPE_F32);
    const char *dir = model_dir("hf-nonfinite");
    write_sharded(dir, &t, 9, tiny_config(&t));
    expect_load_error(dir, RA_EFORMAT, "model-00001-of-00002.safetensors: tensor "
                      "model.layers.0.self_attn.k_proj.weight: element 37 is NaN", NULL);
    free_tiny(&t);
}

int main(void)
{
    tmp = test_tmpdir("safetensors");
    if (!tmp) {
        fprintf(stderr, "cannot create the scratch directory\n");
        return 1;
    }
    test_round_trip(RA_DTYPE_F32);
    test_round_trip(RA_DTYPE_F16);
    test_round_trip(RA_DTYPE_BF16);
    test_lies();
    test_writer_limits();
    test_hf_dirs(RA_DTYPE_F32);
    test_hf_dirs(RA_DTYPE_BF16);
    test_tied();
    test_hf_errors();
    test_first_nonfinite();
    test_nonfinite_weights();
    return test_result("test_safetensors");
}
