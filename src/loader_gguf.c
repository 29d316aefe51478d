/* Llama-family models from GGUF files (gguf.h), as llama.cpp writes them.
 *
 * The configuration comes from the metadata under the architecture's prefix
 * ("llama." for general.architecture llama and mistral, the same graph):
 * embedding_length, feed_forward_length, block_count, attention.head_count
 * and head_count_kv, context_length, rope.freq_base, attention.
 * layer_norm_rms_epsilon; the vocabulary is token_embd's row count. Tensor
 * names are llama.cpp's (token_embd, blk.N.attn_q, ..., output_norm, output;
 * no output means a classifier tied to the embedding).
 *
 * RoPE: llama.cpp's converter permutes the q and k rows of Hugging Face
 * weights back to Meta's layout, so a llama GGUF rotates adjacent pairs
 * (RA_ROPE_INTERLEAVED), as llama2.c does.
 *
 * Every weight stays in the mapping in the file's type: F32, F16, BF16 and
 * the block formats Q8_0, Q4_0, Q4_1, Q4_K and Q6_K (src/quant/quant.h), the
 * backends computing on those directly. A matrix's rows must be whole blocks.
 * Copies are made only where the file's alignment leaves a tensor misaligned
 * for its type, for a quantized vector (norm weights are f32 everywhere) and
 * for ra_load_options.dequantize_weights, which converts every block format
 * to f32 once at load (what runahead did before it computed on them; kept to
 * compare the two). */
#include "gguf.h"
#include "model.h"
#include "quant/quant.h"
#include "status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gguf_load {
    struct ra_model *m;
    struct ra_gguf g;
    const char *path;
    int dequantize; /* block formats to f32 at load (ra_load_options.dequantize_weights) */
    char arch[32];  /* the metadata prefix: "llama" */
};

/* ------------------------------------------------------------------ metadata */

/* "llama.KEY" as an int in [1, INT32_MAX]; DEF where the key is absent and DEF > 0. */
static int meta_int(struct gguf_load *L, const char *key, int def, int *out)
{
    char full[128];
    int64_t v;
    snprintf(full, sizeof full, "%s.%s", L->arch, key);
    if (def > 0 && !ra_gguf_find_kv(&L->g, full)) {
        *out = def;
        return RA_OK;
    }
    int rc = ra_gguf_get_i64(&L->g, full, &v);
    if (rc != RA_OK)
        return rc;
    if (v < 1 || v > INT32_MAX)
        return ra_error_set(RA_EFORMAT, "%s: key %s: %lld is not a positive int", L->path, full, (long long)v);
    *out = (int)v;
    return RA_OK;
}

static int meta_float(struct gguf_load *L, const char *key, float def, float *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", L->arch, key);
    if (!ra_gguf_find_kv(&L->g, full)) {
        *out = def;
        return RA_OK;
    }
    return ra_gguf_get_f32(&L->g, full, out);
}

/* general.architecture: llama, or mistral (the same graph under llama's keys). */
static int read_architecture(struct gguf_load *L)
{
    const char *arch;
    int rc = ra_gguf_get_str(&L->g, "general.architecture", &arch, NULL);
    if (rc != RA_OK)
        return rc;
    if (strcmp(arch, "llama") != 0 && strcmp(arch, "mistral") != 0)
        return ra_error_set(RA_EUNSUPPORTED, "%s: general.architecture is '%s': runahead runs llama and mistral",
                            L->path, ra_esc(arch));
    /* llama.cpp writes mistral files under the llama prefix unless they say otherwise */
    snprintf(L->arch, sizeof L->arch, "%s", arch);
    char probe[64];
    snprintf(probe, sizeof probe, "%s.block_count", arch);
    if (!ra_gguf_find_kv(&L->g, probe))
        snprintf(L->arch, sizeof L->arch, "llama");
    return RA_OK;
}

/* Llama 3's per-pair factors as llama.cpp's converter stores them: the f32
 * tensor rope_freqs.weight, head_dim/2 frequency divisors. They multiply a
 * linear factor already set (llama.cpp applies both). */
static int read_rope_freqs(struct gguf_load *L, const struct ra_gguf_tensor *t)
{
    struct ra_config *c = &L->m->config;
    const int half = c->head_dim / 2;
    if (t->type != 0 || t->n_elements != half)
        return ra_error_set(RA_EFORMAT, "%s: tensor rope_freqs.weight must be %d f32 values (head_dim/2), not %lld "
                            "of ggml type %u", L->path, half, (long long)t->n_elements, (unsigned)t->type);
    if (half > RA_ROPE_MAX_PAIRS)
        return ra_error_set(RA_EUNSUPPORTED, "%s: RoPE scaling needs head_dim <= %d, not %d", L->path,
                            2 * RA_ROPE_MAX_PAIRS, c->head_dim);
    for (int j = 0; j < half; j++) {
        float f;
        memcpy(&f, (const char *)t->data + (size_t)j * sizeof f, sizeof f); /* maybe misaligned */
        if (!isfinite(f) || f <= 0)
            return ra_error_set(RA_EFORMAT, "%s: rope_freqs.weight[%d] is %g (it must be finite and positive)",
                                L->path, j, f);
        c->rope_factors[j] = c->rope_scaled ? c->rope_factors[j] * f : f;
    }
    c->rope_scaled = RA_ROPE_FACTORS; /* llama3's parameters are not in the file */
    return RA_OK;
}

/* RoPE scaling: <arch>.rope.scaling.type none or linear (with
 * rope.scaling.factor), and the tensor rope_freqs.weight (Llama 3.1's
 * "llama3" scaling, which llama.cpp's converter writes with no type). Any
 * other type (yarn...) changes the angles in ways not computed: refused. */
static int read_rope_scaling(struct gguf_load *L)
{
    struct ra_config *c = &L->m->config;
    const struct ra_gguf_tensor *freqs = ra_gguf_find(&L->g, "rope_freqs.weight");
    char key[96];
    const char *type = "none";
    int rc;
    snprintf(key, sizeof key, "%s.rope.scaling.type", L->arch);
    if (ra_gguf_find_kv(&L->g, key) && (rc = ra_gguf_get_str(&L->g, key, &type, NULL)) != RA_OK)
        return rc;
    if (!strcmp(type, "linear")) {
        float f = 0;
        snprintf(key, sizeof key, "%s.rope.scaling.factor", L->arch);
        if (!ra_gguf_find_kv(&L->g, key))
            return ra_error_set(RA_EFORMAT, "%s: rope.scaling.type is linear but %s is missing", L->path, key);
        if ((rc = ra_gguf_get_f32(&L->g, key, &f)) != RA_OK || (rc = ra_rope_set_linear(c, f, L->path)) != RA_OK)
            return rc;
    } else if (strcmp(type, "none") != 0)
        return ra_error_set(RA_EUNSUPPORTED, "%s: %s is '%s': only none and linear RoPE scaling are supported",
                            L->path, key, ra_esc(type));
    return freqs ? read_rope_freqs(L, freqs) : RA_OK;
}

static int read_config(struct gguf_load *L)
{
    struct ra_config *c = &L->m->config;
    const struct ra_gguf_tensor *embd = ra_gguf_find(&L->g, "token_embd.weight");
    int rc;
    if ((rc = read_architecture(L)) != RA_OK ||
        (rc = meta_int(L, "embedding_length", 0, &c->dim)) != RA_OK ||
        (rc = meta_int(L, "feed_forward_length", 0, &c->hidden_dim)) != RA_OK ||
        (rc = meta_int(L, "block_count", 0, &c->n_layers)) != RA_OK ||
        (rc = meta_int(L, "attention.head_count", 0, &c->n_heads)) != RA_OK ||
        (rc = meta_int(L, "attention.head_count_kv", c->n_heads, &c->n_kv_heads)) != RA_OK ||
        (rc = meta_int(L, "context_length", 0, &c->seq_len)) != RA_OK ||
        (rc = meta_float(L, "rope.freq_base", 10000.0f, &c->rope_theta)) != RA_OK ||
        (rc = meta_float(L, "attention.layer_norm_rms_epsilon", 1e-5f, &c->norm_eps)) != RA_OK)
        return rc;
    if (!embd || embd->n_dims != 2 || embd->dims[1] > INT32_MAX)
        return ra_error_set(RA_EFORMAT, "%s: tensor token_embd.weight is missing or not a matrix", L->path);
    c->vocab_size = (int)embd->dims[1];
    c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    int key_length = c->head_dim;
    if ((rc = meta_int(L, "attention.key_length", c->head_dim > 0 ? c->head_dim : 1, &key_length)) != RA_OK)
        return rc;
    if (key_length != c->head_dim)
        return ra_error_set(RA_EUNSUPPORTED, "%s: heads of %d dimensions in a width of %d with %d heads: runahead "
                            "needs head_dim = width / heads", L->path, key_length, c->dim, c->n_heads);
    c->rope_style = RA_ROPE_INTERLEAVED;
    if ((rc = ra_config_validate(c, L->path)) != RA_OK || (rc = read_rope_scaling(L)) != RA_OK)
        return rc;
    return ra_config_validate(c, L->path);
}

/* ------------------------------------------------------------------ tensors */

/* Where a tensor's bytes end up: F32, F16 and BF16 in place (copied where the
 * file leaves them misaligned for their type); the block formats in place as
 * RA_DTYPE_Q*, or converted to f32 once where the load asks for that
 * (ra_load_options.dequantize_weights) or where the tensor is a vector (norm
 * weights are f32 in every backend). */
static int place_tensor(struct gguf_load *L, const struct ra_gguf_tensor *e, const char *name, struct ra_tensor *t)
{
    enum ra_dtype dt;
    int rc = ra_quant_from_ggml(e->type, &dt);
    if (rc != RA_OK)
        return ra_error_set(rc, "%s: tensor %s: %s", L->path, name, ra_error_message());
    const int64_t n = t->rows * t->cols;
    if (ra_dtype_is_quant(dt) && t->cols % ra_dtype_block(dt) != 0)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: rows of %lld elements are not whole %s blocks of %lld",
                            L->path, name, (long long)t->cols, ra_dtype_name(dt), (long long)ra_dtype_block(dt));
    const int widen = ra_dtype_is_quant(dt) && (L->dequantize || t->rows == 1);
    t->dtype = widen ? RA_DTYPE_F32 : dt;
    if (!widen && (uintptr_t)e->data % (ra_dtype_is_quant(dt) ? 2 : ra_dtype_size(dt)) == 0)
        return ra_model_add_source(L->m, L->path, name, t);
    const size_t bytes = widen ? (size_t)n * sizeof(float) : (size_t)t->rows * ra_dtype_row_bytes(dt, t->cols);
    void *conv = ra_model_own(L->m, bytes);
    if (!conv)
        return ra_error_set(RA_ENOMEM, "%s: tensor %s: out of memory", L->path, name);
    if (!widen)
        memcpy(conv, e->data, bytes);
    else if ((rc = ra_quant_dequantize(dt, e->data, conv, n)) != RA_OK)
        return ra_error_set(rc, "%s: tensor %s: %s", L->path, name, ra_error_message());
    t->data = conv;
    return ra_model_add_source(L->m, L->path, name, t);
}

/* T from NAME, [ROWS][COLS] (ROWS == 1: a vector of COLS). */
static int get_tensor(struct gguf_load *L, const char *name, int64_t rows, int64_t cols, struct ra_tensor *t)
{
    const struct ra_gguf_tensor *e = ra_gguf_find(&L->g, name);
    const int want_dims = rows == 1 ? 1 : 2;
    memset(t, 0, sizeof *t);
    if (!e)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s is missing", L->path, name);
    if (e->n_dims != want_dims)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: has %d dimensions, expected %d", L->path, name, e->n_dims,
                            want_dims);
    t->rows = want_dims == 1 ? 1 : e->dims[1];
    t->cols = e->dims[0];
    t->data = e->data; /* for ra_tensor_check's "is missing" */
    int rc = ra_tensor_check(t, rows, cols, L->path, name);
    return rc != RA_OK ? rc : place_tensor(L, e, name, t);
}

static int get_layer_tensor(struct gguf_load *L, int layer, const char *what, int64_t rows, int64_t cols,
                            struct ra_tensor *t)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", layer, what);
    return get_tensor(L, name, rows, cols, t);
}

static int load_layer(struct gguf_load *L, int i)
{
    const struct ra_config *c = &L->m->config;
    struct ra_layer_weights *w = &L->m->weights.layers[i];
    const int64_t d = c->dim, q = (int64_t)c->n_heads * c->head_dim, kv = ra_config_kv_dim(c), h = c->hidden_dim;
    int rc;
    if ((rc = get_layer_tensor(L, i, "attn_norm", 1, d, &w->attn_norm)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "attn_q", q, d, &w->wq)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "attn_k", kv, d, &w->wk)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "attn_v", kv, d, &w->wv)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "attn_output", d, q, &w->wo)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "ffn_norm", 1, d, &w->ffn_norm)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "ffn_gate", h, d, &w->w_gate)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "ffn_down", d, h, &w->w_down)) != RA_OK)
        return rc;
    return get_layer_tensor(L, i, "ffn_up", h, d, &w->w_up);
}

static int load_weights(struct gguf_load *L)
{
    struct ra_model *m = L->m;
    const struct ra_config *c = &m->config;
    int rc;
    m->weights.layers = calloc((size_t)c->n_layers, sizeof *m->weights.layers);
    if (!m->weights.layers)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", L->path);
    if ((rc = get_tensor(L, "token_embd.weight", c->vocab_size, c->dim, &m->weights.embed)) != RA_OK)
        return rc;
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = load_layer(L, i)) != RA_OK)
            return rc;
    if ((rc = get_tensor(L, "output_norm.weight", 1, c->dim, &m->weights.final_norm)) != RA_OK)
        return rc;
    m->weights.tied = !ra_gguf_find(&L->g, "output.weight"); /* llama.cpp omits a tied classifier */
    if (m->weights.tied) {
        m->weights.output = m->weights.embed;
        return RA_OK;
    }
    return get_tensor(L, "output.weight", c->vocab_size, c->dim, &m->weights.output);
}

int ra_model_load_gguf(struct ra_model *m, const char *path, const struct ra_load_options *opt)
{
    struct gguf_load L;
    int rc;
    memset(&L, 0, sizeof L);
    L.m = m;
    L.dequantize = opt && opt->dequantize_weights;
    m->format = RA_FORMAT_GGUF;
    if ((rc = ra_mapped_file_open(&m->files[0], path)) != RA_OK)
        return rc;
    m->n_files = 1;
    L.path = m->files[0].path;
    if ((rc = ra_gguf_parse(&L.g, &m->files[0])) == RA_OK && (rc = read_config(&L)) == RA_OK)
        rc = load_weights(&L);
    ra_gguf_close(&L.g); /* the index goes; the mapping stays in m->files for the weights */
    return rc;
}
