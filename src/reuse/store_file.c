/* The chunk store's identities, keys and chunk file format (store_impl.h). */
#include "reuse/store_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "status.h"
#include "vocab.h"

/* ------------------------------------------------------------ hashing */

/* An incremental SHA-256 (OpenSSL's EVP API). */
struct hasher {
    EVP_MD_CTX *ctx;
    int ok;
};

static int hasher_init(struct hasher *h)
{
    h->ctx = EVP_MD_CTX_new();
    h->ok = h->ctx && EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) == 1;
    if (!h->ok) {
        EVP_MD_CTX_free(h->ctx);
        h->ctx = NULL;
        return ra_error_set(RA_ENOMEM, "SHA-256: cannot initialise OpenSSL's digest");
    }
    return RA_OK;
}

static void hash_bytes(struct hasher *h, const void *p, size_t n)
{
    if (h->ok && n > 0)
        h->ok = EVP_DigestUpdate(h->ctx, p, n) == 1;
}

static void hash_u64(struct hasher *h, uint64_t x)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(x >> (8 * i));
    hash_bytes(h, b, 8);
}

static void hash_f32(struct hasher *h, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    hash_u64(h, u);
}

static void hash_ids(struct hasher *h, const int32_t *ids, int n)
{
    hash_u64(h, (uint64_t)n);
    for (int i = 0; i < n; i++)
        hash_u64(h, (uint32_t)ids[i]);
}

static int hasher_final(struct hasher *h, uint8_t out[RA_STORE_HASH_BYTES])
{
    unsigned len = 0;
    int ok = h->ok && EVP_DigestFinal_ex(h->ctx, out, &len) == 1 && len == RA_STORE_HASH_BYTES;
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
    return ok ? RA_OK : ra_error_set(RA_EIO, "SHA-256: OpenSSL's digest failed");
}

int ra_sha256(const void *bytes, size_t n, uint8_t out[RA_STORE_HASH_BYTES])
{
    struct hasher h;
    int rc = hasher_init(&h);
    if (rc != RA_OK)
        return rc;
    hash_bytes(&h, bytes, n);
    return hasher_final(&h, out);
}

void ra_store_hex(const uint8_t *h, char out[2 * RA_STORE_HASH_BYTES + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < RA_STORE_HASH_BYTES; i++) {
        out[2 * i] = digits[h[i] >> 4];
        out[2 * i + 1] = digits[h[i] & 15];
    }
    out[2 * RA_STORE_HASH_BYTES] = '\0';
}

/* ------------------------------------------------------------ identities */

static void hash_rope(struct hasher *h, const struct ra_config *c)
{
    hash_u64(h, (uint64_t)c->rope_style);
    hash_f32(h, c->rope_theta);
    hash_u64(h, (uint64_t)c->rope_scaled);
    if (c->rope_scaled) {
        for (int i = 0; i < 4; i++)
            hash_f32(h, c->rope_scaling_params[i]);
        for (int j = 0; j < c->head_dim / 2 && j < RA_ROPE_MAX_PAIRS; j++)
            hash_f32(h, c->rope_factors[j]);
    }
}

int ra_store_rope_identity(const struct ra_config *c, uint8_t out[RA_STORE_HASH_BYTES])
{
    struct hasher h;
    int rc = hasher_init(&h);
    if (rc != RA_OK)
        return rc;
    hash_bytes(&h, "ra-rope-1", 9);
    hash_rope(&h, c);
    return hasher_final(&h, out);
}

#define SAMPLE_BYTES ((size_t)64 << 10)

/* A tensor's dtype, shape and its first, middle and last 64 KiB. */
static void hash_tensor(struct hasher *h, const struct ra_tensor *t)
{
    const size_t bytes = ra_tensor_bytes(t); /* a block format's blocks as stored */
    const uint8_t *p = t->data;
    hash_u64(h, (uint64_t)t->dtype);
    hash_u64(h, (uint64_t)t->rows);
    hash_u64(h, (uint64_t)t->cols);
    if (!p)
        return;
    if (bytes <= 3 * SAMPLE_BYTES) {
        hash_bytes(h, p, bytes);
        return;
    }
    hash_bytes(h, p, SAMPLE_BYTES);
    hash_bytes(h, p + (bytes / 2 - SAMPLE_BYTES / 2), SAMPLE_BYTES);
    hash_bytes(h, p + (bytes - SAMPLE_BYTES), SAMPLE_BYTES);
}

static void hash_config(struct hasher *h, const struct ra_config *c)
{
    const int f[] = { c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, c->head_dim };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        hash_u64(h, (uint64_t)(uint32_t)f[i]);
    hash_f32(h, c->norm_eps);
    hash_rope(h, c);
}

int ra_store_model_identity(const struct ra_model *m, uint8_t out[RA_STORE_HASH_BYTES])
{
    const struct ra_weights *w = &m->weights;
    struct hasher h;
    int rc = hasher_init(&h);
    if (rc != RA_OK)
        return rc;
    hash_bytes(&h, "ra-model-1", 10);
    hash_config(&h, &m->config);
    hash_tensor(&h, &w->embed);
    for (int l = 0; l < m->config.n_layers; l++) {
        const struct ra_layer_weights *L = &w->layers[l];
        const struct ra_tensor *t[] = { &L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo,
                                        &L->ffn_norm, &L->w_gate, &L->w_down, &L->w_up };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            hash_tensor(&h, t[i]);
    }
    hash_tensor(&h, &w->final_norm);
    hash_u64(&h, (uint64_t)w->tied);
    if (!w->tied)
        hash_tensor(&h, &w->output);
    return hasher_final(&h, out);
}

int ra_store_vocab_identity(const struct ra_vocab *v, uint8_t out[RA_STORE_HASH_BYTES])
{
    if (!v) {
        memset(out, 0, RA_STORE_HASH_BYTES);
        return RA_OK;
    }
    struct hasher h;
    int rc = hasher_init(&h);
    if (rc != RA_OK)
        return rc;
    hash_bytes(&h, "ra-vocab-1", 10);
    const int64_t meta[] = { v->kind, v->n_tokens, v->bos_id, v->eos_id, v->add_bos, v->add_eos };
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++)
        hash_u64(&h, (uint64_t)meta[i]);
    if (v->kind == RA_VOCAB_SPM) {
        const struct ra_tokenizer *t = &v->spm;
        for (int i = 0; i < t->vocab_size; i++) {
            hash_u64(&h, (uint64_t)t->piece_lens[i]);
            hash_bytes(&h, t->pieces[i], (size_t)t->piece_lens[i]);
            hash_f32(&h, t->scores[i]);
        }
    } else {
        if (v->bpe.pre)
            hash_bytes(&h, v->bpe.pre, strlen(v->bpe.pre) + 1);
        for (int32_t i = 0; i < v->n_tokens; i++) {
            char buf[512];
            if (ra_vocab_token_text(v, i, buf, sizeof buf) != RA_OK)
                buf[0] = '\0'; /* an unused id, or a text that does not fit: its absence is hashed */
            hash_bytes(&h, buf, strlen(buf) + 1);
        }
        ra_error_clear();
    }
    return hasher_final(&h, out);
}

int ra_store_key(const struct ra_store_identity *id, const uint8_t rope[RA_STORE_HASH_BYTES], const int32_t *prefix,
                 int n_prefix, const int32_t *tokens, int n, uint8_t out[RA_STORE_HASH_BYTES])
{
    struct hasher h;
    int rc = hasher_init(&h);
    if (rc != RA_OK)
        return rc;
    hash_bytes(&h, "ra-chunk-1", 10);
    hash_bytes(&h, id->model, RA_STORE_HASH_BYTES);
    hash_bytes(&h, id->tokenizer, RA_STORE_HASH_BYTES);
    hash_u64(&h, (uint64_t)id->kv_dtype);
    hash_bytes(&h, rope, RA_STORE_HASH_BYTES);
    hash_ids(&h, prefix, n_prefix);
    hash_ids(&h, tokens, n);
    return hasher_final(&h, out);
}

/* ------------------------------------------------------------ the file format */

static uint64_t align_up(uint64_t x) { return (x + RA_CHUNK_ALIGN - 1) / RA_CHUNK_ALIGN * RA_CHUNK_ALIGN; }

void ra_chunk_geometry(struct ra_chunk_header *h)
{
    const uint64_t row = (uint64_t)h->kv_dim * ra_dtype_size((enum ra_dtype)h->kv_dtype);
    const uint64_t head = RA_CHUNK_HEADER_BYTES + 4 * ((uint64_t)h->n_prefix + h->n_tokens) +
                          (uint64_t)RA_STORE_HASH_BYTES * h->n_layers;
    h->layer_bytes = 2 * row * h->n_tokens;
    h->layer_stride = align_up(h->layer_bytes);
    h->data_offset = align_up(head);
    h->file_bytes = h->data_offset + h->layer_stride * h->n_layers;
}

static void put_u32(uint8_t *p, uint32_t x)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(x >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t x)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(x >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

/* Offsets of the fixed part. */
enum {
    OFF_MAGIC = 0, OFF_VERSION = 8, OFF_DTYPE = 12, OFF_LAYERS = 16, OFF_KVDIM = 20, OFF_NPREFIX = 24,
    OFF_NTOKENS = 28, OFF_KEY = 32, OFF_MODEL = 64, OFF_TOKENIZER = 96, OFF_ROPE = 128, OFF_DATA = 160,
    OFF_STRIDE = 168, OFF_LBYTES = 176, OFF_FBYTES = 184
};

int ra_chunk_encode_header(const struct ra_chunk_header *h, const int32_t *prefix, const int32_t *tokens,
                           uint8_t *out)
{
    memcpy(out + OFF_MAGIC, RA_CHUNK_MAGIC, 8);
    put_u32(out + OFF_VERSION, h->version);
    put_u32(out + OFF_DTYPE, h->kv_dtype);
    put_u32(out + OFF_LAYERS, h->n_layers);
    put_u32(out + OFF_KVDIM, h->kv_dim);
    put_u32(out + OFF_NPREFIX, h->n_prefix);
    put_u32(out + OFF_NTOKENS, h->n_tokens);
    memcpy(out + OFF_KEY, h->key, RA_STORE_HASH_BYTES);
    memcpy(out + OFF_MODEL, h->model, RA_STORE_HASH_BYTES);
    memcpy(out + OFF_TOKENIZER, h->tokenizer, RA_STORE_HASH_BYTES);
    memcpy(out + OFF_ROPE, h->rope, RA_STORE_HASH_BYTES);
    put_u64(out + OFF_DATA, h->data_offset);
    put_u64(out + OFF_STRIDE, h->layer_stride);
    put_u64(out + OFF_LBYTES, h->layer_bytes);
    put_u64(out + OFF_FBYTES, h->file_bytes);
    uint8_t *p = out + RA_CHUNK_HEADER_BYTES;
    for (uint32_t i = 0; i < h->n_prefix; i++, p += 4)
        put_u32(p, (uint32_t)prefix[i]);
    for (uint32_t i = 0; i < h->n_tokens; i++, p += 4)
        put_u32(p, (uint32_t)tokens[i]);
    return RA_OK;
}

static void read_fixed(const uint8_t *d, struct ra_chunk_header *h)
{
    h->version = get_u32(d + OFF_VERSION);
    h->kv_dtype = get_u32(d + OFF_DTYPE);
    h->n_layers = get_u32(d + OFF_LAYERS);
    h->kv_dim = get_u32(d + OFF_KVDIM);
    h->n_prefix = get_u32(d + OFF_NPREFIX);
    h->n_tokens = get_u32(d + OFF_NTOKENS);
    memcpy(h->key, d + OFF_KEY, RA_STORE_HASH_BYTES);
    memcpy(h->model, d + OFF_MODEL, RA_STORE_HASH_BYTES);
    memcpy(h->tokenizer, d + OFF_TOKENIZER, RA_STORE_HASH_BYTES);
    memcpy(h->rope, d + OFF_ROPE, RA_STORE_HASH_BYTES);
    h->data_offset = get_u64(d + OFF_DATA);
    h->layer_stride = get_u64(d + OFF_STRIDE);
    h->layer_bytes = get_u64(d + OFF_LBYTES);
    h->file_bytes = get_u64(d + OFF_FBYTES);
}

/* The counts within bounds, so that the geometry computed from them cannot overflow. */
static int check_counts(const struct ra_chunk_header *h, const char *path)
{
    if (h->version != RA_CHUNK_VERSION)
        return ra_error_set(RA_EFORMAT, "%s: chunk file version %u, this program reads version %d", path,
                            h->version, RA_CHUNK_VERSION);
    if (h->kv_dtype != RA_DTYPE_F32 && h->kv_dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EFORMAT, "%s: KV dtype %u is neither f32 nor bf16", path, h->kv_dtype);
    if (h->n_layers < 1 || h->n_layers > RA_CHUNK_MAX_LAYERS || h->kv_dim < 1 || h->kv_dim > RA_CHUNK_MAX_KV_DIM)
        return ra_error_set(RA_EFORMAT, "%s: %u layers of %u KV elements: out of bounds", path, h->n_layers,
                            h->kv_dim);
    if (h->n_tokens < 1 || h->n_tokens > RA_CHUNK_MAX_TOKENS || h->n_prefix > RA_CHUNK_MAX_TOKENS)
        return ra_error_set(RA_EFORMAT, "%s: %u tokens behind a prefix of %u: out of bounds", path, h->n_tokens,
                            h->n_prefix);
    return RA_OK;
}

/* The sizes the header states against those its counts give and the file's size. */
static int check_sizes(const struct ra_chunk_header *h, size_t size, const char *path)
{
    struct ra_chunk_header g = *h;
    ra_chunk_geometry(&g);
    if (h->data_offset != g.data_offset || h->layer_stride != g.layer_stride || h->layer_bytes != g.layer_bytes ||
        h->file_bytes != g.file_bytes)
        return ra_error_set(RA_EFORMAT,
                            "%s: the header's sizes (data at %llu, layers of %llu bytes every %llu, %llu in all) "
                            "disagree with its counts",
                            path, (unsigned long long)h->data_offset, (unsigned long long)h->layer_bytes,
                            (unsigned long long)h->layer_stride, (unsigned long long)h->file_bytes);
    if (h->file_bytes != size)
        return ra_error_set(RA_EFORMAT, "%s: truncated or overlong: %zu bytes, the header says %llu", path, size,
                            (unsigned long long)h->file_bytes);
    return RA_OK;
}

int ra_chunk_parse(const uint8_t *data, size_t size, const char *path, struct ra_chunk_layout *out)
{
    int rc;
    memset(out, 0, sizeof *out);
    if (size < RA_CHUNK_HEADER_BYTES || memcmp(data, RA_CHUNK_MAGIC, 8) != 0)
        return ra_error_set(RA_EFORMAT, "%s: not a chunk file (%s)", path,
                            size < RA_CHUNK_HEADER_BYTES ? "shorter than a header" : "no RACHUNK magic");
    read_fixed(data, &out->h);
    if ((rc = check_counts(&out->h, path)) != RA_OK || (rc = check_sizes(&out->h, size, path)) != RA_OK)
        return rc;
    out->prefix = (const int32_t *)(const void *)(data + RA_CHUNK_HEADER_BYTES);
    out->tokens = out->prefix + out->h.n_prefix;
    out->layer_sha = (const uint8_t *)(out->tokens + out->h.n_tokens);
    return RA_OK;
}

/* ------------------------------------------------------------ chunks */

int ra_chunk_open(const char *path, struct ra_chunk **out)
{
    struct ra_chunk *c = calloc(1, sizeof *c);
    struct stat sb;
    int rc;
    *out = NULL;
    if (!c)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    if ((rc = ra_mapped_file_open(&c->file, path)) != RA_OK) {
        if (stat(path, &sb) != 0 && errno == ENOENT) {
            ra_error_clear();
            rc = RA_OK; /* absent (or evicted meanwhile): a miss */
        }
        goto fail;
    }
    if ((rc = ra_chunk_parse(c->file.data, c->file.size, path, &c->layout)) != RA_OK)
        goto fail;
    if (!(c->verified = calloc(c->layout.h.n_layers, 1))) {
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    *out = c;
    return RA_OK;
fail:
    ra_chunk_close(c);
    return rc;
}

static int ids_equal(const int32_t *file_ids, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t x;
        memcpy(&x, file_ids + i, 4);
        if (x != ids[i])
            return 0;
    }
    return 1;
}

int ra_chunk_matches(const struct ra_chunk *c, const struct ra_store *st, const int32_t *prefix, int n_prefix,
                     const int32_t *tokens, int n, char *why, size_t len)
{
    const struct ra_chunk_header *h = &c->layout.h;
    const char *what = NULL;
    if (memcmp(h->model, st->id.model, RA_STORE_HASH_BYTES) != 0)
        what = "another model";
    else if (memcmp(h->tokenizer, st->id.tokenizer, RA_STORE_HASH_BYTES) != 0)
        what = "another tokenizer";
    else if (h->kv_dtype != (uint32_t)st->id.kv_dtype)
        what = "another KV dtype";
    else if (memcmp(h->rope, st->rope, RA_STORE_HASH_BYTES) != 0)
        what = "another RoPE convention, base or scaling";
    else if (h->n_layers != (uint32_t)st->n_layers || h->kv_dim != (uint32_t)st->kv_dim)
        what = "another shape";
    else if (h->n_prefix != (uint32_t)n_prefix || !ids_equal(c->layout.prefix, prefix, n_prefix))
        what = "another leading prefix";
    else if (h->n_tokens != (uint32_t)n || !ids_equal(c->layout.tokens, tokens, n))
        what = "other tokens";
    if (what)
        snprintf(why, len, "%s", what);
    return what == NULL;
}

int ra_chunk_tokens(const struct ra_chunk *c) { return (int)c->layout.h.n_tokens; }
int ra_chunk_n_prefix(const struct ra_chunk *c) { return (int)c->layout.h.n_prefix; }
const char *ra_chunk_path(const struct ra_chunk *c) { return c->file.path; }
const uint8_t *ra_chunk_key(const struct ra_chunk *c) { return c->layout.h.key; }
size_t ra_chunk_layer_bytes(const struct ra_chunk *c) { return (size_t)c->layout.h.layer_bytes; }

int ra_chunk_layer(struct ra_chunk *c, int layer, const void **k, const void **v)
{
    const struct ra_chunk_header *h = &c->layout.h;
    if (layer < 0 || (uint32_t)layer >= h->n_layers)
        return ra_error_set(RA_EINVAL, "%s: layer %d of %u", c->file.path, layer, h->n_layers);
    const uint8_t *p = c->file.data + h->data_offset + (size_t)layer * h->layer_stride;
    if (!c->verified[layer]) {
        uint8_t sum[RA_STORE_HASH_BYTES];
        int rc = ra_sha256(p, h->layer_bytes, sum);
        if (rc != RA_OK)
            return rc;
        if (memcmp(sum, c->layout.layer_sha + (size_t)layer * RA_STORE_HASH_BYTES, RA_STORE_HASH_BYTES) != 0)
            return ra_error_set(RA_EFORMAT, "%s: layer %d: checksum mismatch (the file is corrupted)", c->file.path,
                                layer);
        c->verified[layer] = 1;
    }
    *k = p;
    *v = p + h->layer_bytes / 2;
    return RA_OK;
}

void ra_chunk_close(struct ra_chunk *c)
{
    if (!c)
        return;
    ra_mapped_file_close(&c->file);
    free(c->verified);
    free(c);
}
