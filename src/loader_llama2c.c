/* llama2.c checkpoints: the legacy 7-int header (v0) and the versioned header
 * (magic "ak42", version 1, 256 bytes). All weights are fp32 and used in place
 * from the mapping; q/k are in Meta's layout, which rotates interleaved pairs
 * (RA_ROPE_INTERLEAVED). */
#include "model.h"
#include "status.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLAMA2C_MAGIC 0x616b3432u
#define LLAMA2C_V1_HEADER 256

/* Hands out consecutive fp32 tensors from the mapping, failing cleanly at EOF. */
struct cursor {
    const struct ra_mapped_file *f;
    size_t pos;
};

/* Moves past BYTES more bytes of the file, if it has them. */
static int advance(struct cursor *c, size_t bytes, const char *name, int layer)
{
    if (bytes > c->f->size || c->pos > c->f->size - bytes) {
        if (layer >= 0)
            return ra_error_set(RA_EFORMAT, "%s: truncated: layer %d tensor %s needs bytes %zu..%zu, the file has %zu",
                                c->f->path, layer, name, c->pos, c->pos + bytes, c->f->size);
        return ra_error_set(RA_EFORMAT, "%s: truncated: tensor %s needs bytes %zu..%zu, the file has %zu",
                            c->f->path, name, c->pos, c->pos + bytes, c->f->size);
    }
    c->pos += bytes;
    return RA_OK;
}

/* The next tensor, recorded as a weight source under its short llama2.c name
 * and layer ("layers.3.wq"), for the non-finite check's messages. */
static int take(struct ra_model *m, struct cursor *c, struct ra_tensor *t, int64_t rows, int64_t cols,
                const char *name, int layer)
{
    const size_t at = c->pos;
    char full[64];
    int rc = advance(c, (size_t)rows * (size_t)cols * sizeof(float), name, layer);
    if (rc != RA_OK)
        return rc;
    *t = (struct ra_tensor){ RA_DTYPE_F32, rows, cols, c->f->data + at, NULL };
    if (layer >= 0)
        snprintf(full, sizeof full, "layers.%d.%s", layer, name);
    else
        snprintf(full, sizeof full, "%s", name);
    return ra_model_add_source(m, c->f->path, full, t);
}

/* One tensor per layer, all layers in a row: the file groups weights by kind. */
static int take_layers(struct cursor *c, struct ra_model *m, size_t field, int64_t rows, int64_t cols, const char *name)
{
    for (int l = 0; l < m->config.n_layers; l++) {
        struct ra_tensor *t = (struct ra_tensor *)((char *)&m->weights.layers[l] + field);
        int rc = take(m, c, t, rows, cols, name, l);
        if (rc != RA_OK)
            return rc;
    }
    return RA_OK;
}

#define LAYER_FIELD(f) offsetof(struct ra_layer_weights, f)

static int read_header(struct ra_model *m, const struct ra_mapped_file *f, int *version, int *shared, size_t *offset)
{
    int32_t h[9];
    struct ra_config *c = &m->config;
    if (f->size < 7 * sizeof(int32_t))
        return ra_error_set(RA_EFORMAT, "%s: too short (%zu bytes) for a llama2.c header", f->path, f->size);
    memcpy(h, f->data, 7 * sizeof(int32_t));
    if ((uint32_t)h[0] == LLAMA2C_MAGIC) {
        if (f->size < LLAMA2C_V1_HEADER)
            return ra_error_set(RA_EFORMAT, "%s: truncated llama2.c v1 header (%zu of 256 bytes)", f->path, f->size);
        memcpy(h, f->data, sizeof h);
        *version = h[1];
        if (*version == 2)
            return ra_error_set(RA_EUNSUPPORTED, "%s: llama2.c version 2 (int8 Q8_0) checkpoints are not supported; export with --version 1", f->path);
        if (*version != 1)
            return ra_error_set(RA_EFORMAT, "%s: unknown llama2.c checkpoint version %d", f->path, *version);
        memmove(h, h + 2, 7 * sizeof(int32_t));
        *shared = f->data[36] != 0;
        *offset = LLAMA2C_V1_HEADER;
    } else {
        *version = 0;
        *shared = h[5] > 0; /* legacy: a negative vocabulary size flags a separate classifier */
        if (h[5] == INT32_MIN) /* its negation does not fit in an int */
            return ra_error_set(RA_EFORMAT, "%s: vocabulary size %d is out of range", f->path, h[5]);
        h[5] = h[5] < 0 ? -h[5] : h[5];
        *offset = 7 * sizeof(int32_t);
    }
    c->dim = h[0];
    c->hidden_dim = h[1];
    c->n_layers = h[2];
    c->n_heads = h[3];
    c->n_kv_heads = h[4];
    c->vocab_size = h[5];
    c->seq_len = h[6];
    c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    c->rope_theta = 10000.0f; /* llama2.c has no field for it */
    c->rope_style = RA_ROPE_INTERLEAVED;
    c->norm_eps = 1e-5f;
    return ra_config_validate(c, f->path);
}

int ra_model_load_llama2c(struct ra_model *m, const char *path)
{
    struct ra_mapped_file *f = &m->files[0];
    struct ra_weights *w = &m->weights;
    int version = 0, shared = 0, rc;
    size_t offset = 0;

    m->format = RA_FORMAT_LLAMA2C;
    if ((rc = ra_mapped_file_open(f, path)) != RA_OK)
        return rc;
    m->n_files = 1;
    if ((rc = read_header(m, f, &version, &shared, &offset)) != RA_OK)
        return rc;

    const struct ra_config *c = &m->config;
    int64_t d = c->dim, h = c->hidden_dim, kv = ra_config_kv_dim(c), v = c->vocab_size;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    w->tied = shared;
    struct cursor cur = { f, offset };

    if (version == 0) {
        if ((rc = take(m, &cur, &w->embed, v, d, "tok_embeddings", -1)) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(attn_norm), 1, d, "attention_norm")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(wq), d, d, "wq")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(wk), kv, d, "wk")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(wv), kv, d, "wv")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(wo), d, d, "wo")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(ffn_norm), 1, d, "ffn_norm")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(w_gate), h, d, "w1")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(w_down), d, h, "w2")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(w_up), h, d, "w3")) ||
            (rc = take(m, &cur, &w->final_norm, 1, d, "norm", -1)))
            return rc;
        /* precomputed RoPE tables, recomputed at run time instead (and so not checked) */
        if ((rc = advance(&cur, (size_t)c->seq_len * (size_t)c->head_dim * sizeof(float), "freq_cis", -1)))
            return rc;
    } else {
        if ((rc = take_layers(&cur, m, LAYER_FIELD(attn_norm), 1, d, "attention_norm")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(ffn_norm), 1, d, "ffn_norm")) ||
            (rc = take(m, &cur, &w->final_norm, 1, d, "norm", -1)) ||
            (rc = take(m, &cur, &w->embed, v, d, "tok_embeddings", -1)) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(wq), d, d, "wq")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(wk), kv, d, "wk")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(wv), kv, d, "wv")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(wo), d, d, "wo")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(w_gate), h, d, "w1")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(w_down), d, h, "w2")) ||
            (rc = take_layers(&cur, m, LAYER_FIELD(w_up), h, d, "w3")))
            return rc;
    }
    if (shared)
        w->output = w->embed;
    else if ((rc = take(m, &cur, &w->output, v, d, "output", -1)))
        return rc;
    if (cur.pos != f->size)
        return ra_error_set(RA_EFORMAT, "%s: %zu bytes after the last tensor: the header does not describe this file",
                            path, f->size - cur.pos);
    return RA_OK;
}
