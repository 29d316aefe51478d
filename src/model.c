#include "model.h"
#include "finite.h"
#include "forward.h"
#include "status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *ra_rope_style_name(enum ra_rope_style s)
{
    switch (s) {
    case RA_ROPE_INTERLEAVED: return "interleaved";
    case RA_ROPE_HALF: return "half";
    }
    return "?";
}

int ra_config_validate(const struct ra_config *c, const char *what)
{
#define REQUIRE(cond, ...) \
    do { if (!(cond)) return ra_error_set(RA_EFORMAT, __VA_ARGS__); } while (0)
    /* Limits keep every size product far from overflowing int64. */
    REQUIRE(c->dim > 0 && c->dim <= 65536, "%s: model dim %d is out of range (1..65536)", what, c->dim);
    REQUIRE(c->hidden_dim > 0 && c->hidden_dim <= 262144, "%s: FFN width %d is out of range", what, c->hidden_dim);
    REQUIRE(c->n_layers > 0 && c->n_layers <= 1024, "%s: layer count %d is out of range", what, c->n_layers);
    REQUIRE(c->n_heads > 0 && c->n_heads <= c->dim, "%s: head count %d is out of range", what, c->n_heads);
    REQUIRE(c->dim % c->n_heads == 0, "%s: dim %d is not a multiple of the head count %d", what, c->dim, c->n_heads);
    REQUIRE(c->n_kv_heads > 0 && c->n_kv_heads <= c->n_heads && c->n_heads % c->n_kv_heads == 0,
            "%s: %d KV heads do not divide %d heads", what, c->n_kv_heads, c->n_heads);
    REQUIRE(c->head_dim == c->dim / c->n_heads && c->head_dim % 2 == 0,
            "%s: head dimension %d must be dim/heads and even", what, c->head_dim);
    REQUIRE(c->vocab_size > 0 && c->vocab_size <= (1 << 24), "%s: vocabulary size %d is out of range", what, c->vocab_size);
    REQUIRE(c->seq_len > 0 && c->seq_len <= (1 << 24), "%s: context length %d is out of range", what, c->seq_len);
    REQUIRE(isfinite(c->rope_theta) && c->rope_theta > 0, "%s: rope_theta %g is invalid", what, c->rope_theta);
    REQUIRE(c->rope_style == RA_ROPE_INTERLEAVED || c->rope_style == RA_ROPE_HALF, "%s: RoPE style %d is unknown",
            what, (int)c->rope_style);
    REQUIRE(isfinite(c->norm_eps) && c->norm_eps > 0 && c->norm_eps < 1, "%s: norm epsilon %g is invalid", what, c->norm_eps);
    REQUIRE(!c->rope_scaled || c->head_dim / 2 <= RA_ROPE_MAX_PAIRS,
            "%s: RoPE scaling needs head_dim <= %d, not %d", what, 2 * RA_ROPE_MAX_PAIRS, c->head_dim);
    for (int j = 0; c->rope_scaled && j < c->head_dim / 2; j++)
        REQUIRE(isfinite(c->rope_factors[j]) && c->rope_factors[j] > 0, "%s: RoPE scaling factor %d is %g (it must be "
                "finite and positive)", what, j, c->rope_factors[j]);
#undef REQUIRE
    return RA_OK;
}

static int rope_pairs(const struct ra_config *c, const char *what)
{
    if (c->head_dim <= 0 || c->head_dim % 2 || c->head_dim / 2 > RA_ROPE_MAX_PAIRS)
        return ra_error_set(RA_EUNSUPPORTED, "%s: RoPE scaling needs an even head_dim <= %d, not %d", what,
                            2 * RA_ROPE_MAX_PAIRS, c->head_dim);
    return RA_OK;
}

int ra_rope_set_linear(struct ra_config *c, double f, const char *what)
{
    int rc = rope_pairs(c, what);
    if (rc != RA_OK)
        return rc;
    if (!isfinite(f) || f <= 0 || !isfinite((float)f))
        return ra_error_set(RA_EFORMAT, "%s: RoPE scaling factor %g must be finite and positive", what, f);
    for (int j = 0; j < c->head_dim / 2; j++)
        c->rope_factors[j] = (float)f;
    c->rope_scaled = RA_ROPE_LINEAR;
    c->rope_scaling_params[0] = (float)f;
    return RA_OK;
}

int ra_rope_set_llama3(struct ra_config *c, double f, double low, double high, double original_ctx, const char *what)
{
    int rc = rope_pairs(c, what);
    if (rc != RA_OK)
        return rc;
    if (!isfinite(f) || f <= 0 || !isfinite(low) || low <= 0 || !isfinite(high) || high <= low ||
        !isfinite(original_ctx) || original_ctx <= 0)
        return ra_error_set(RA_EFORMAT, "%s: llama3 RoPE scaling needs finite factor > 0, 0 < low_freq_factor < "
                            "high_freq_factor, original_max_position_embeddings > 0 (got %g, %g, %g, %g)",
                            what, f, low, high, original_ctx);
    const double low_wavelen = original_ctx / low, high_wavelen = original_ctx / high;
    for (int j = 0; j < c->head_dim / 2; j++) {
        /* transformers' float32 inv_freq, then its three bands as a divisor */
        const float inv = 1.0f / powf(c->rope_theta, (float)(2 * j) / (float)c->head_dim);
        const double wavelen = 2 * M_PI / inv;
        double factor = 1;
        if (wavelen > low_wavelen)
            factor = f;
        else if (wavelen >= high_wavelen) {
            const double smooth = (original_ctx / wavelen - low) / (high - low);
            factor = 1 / ((1 - smooth) / f + smooth);
        }
        c->rope_factors[j] = (float)factor;
    }
    c->rope_scaled = RA_ROPE_LLAMA3;
    c->rope_scaling_params[0] = (float)f;
    c->rope_scaling_params[1] = (float)low;
    c->rope_scaling_params[2] = (float)high;
    c->rope_scaling_params[3] = (float)original_ctx;
    return RA_OK;
}

int ra_tensor_check(const struct ra_tensor *t, int64_t rows, int64_t cols, const char *file, const char *name)
{
    if (!t->data)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s is missing", file, name);
    if (t->rows != rows || t->cols != cols)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s has shape [%lld, %lld], the config says [%lld, %lld]",
                            file, name, (long long)t->rows, (long long)t->cols, (long long)rows, (long long)cols);
    return RA_OK;
}

void *ra_model_own(struct ra_model *m, size_t bytes)
{
    void **list = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *list);
    if (!list)
        return NULL;
    m->owned = list;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0)
        return NULL;
    memset(p, 0, bytes);
    m->owned[m->n_owned++] = p;
    return p;
}

int ra_model_add_source(struct ra_model *m, const char *file, const char *name, const struct ra_tensor *t)
{
    struct ra_weight_source *list = realloc(m->sources, (size_t)(m->n_sources + 1) * sizeof *list);
    if (!list)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", file);
    m->sources = list;
    char *copy = strdup(name);
    if (!copy)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", file);
    list[m->n_sources++] = (struct ra_weight_source){ copy, file, t->data, t->dtype, t->rows * t->cols };
    return RA_OK;
}

int ra_model_check_weights(const struct ra_model *m, int n_threads)
{
    struct ra_finite_span *spans = malloc((size_t)(m->n_sources > 0 ? m->n_sources : 1) * sizeof *spans);
    int64_t bad = -1;
    if (!spans)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", m->path ? m->path : "model");
    for (int i = 0; i < m->n_sources; i++)
        spans[i] = (struct ra_finite_span){ m->sources[i].data, m->sources[i].dtype, m->sources[i].count };
    const int i = ra_first_nonfinite_span(spans, m->n_sources, n_threads, &bad);
    free(spans);
    if (i < 0)
        return RA_OK;
    const struct ra_weight_source *s = &m->sources[i];
    if (ra_dtype_is_quant(s->dtype))
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: %s block %lld's scale %s is %s", s->file, s->name,
                            ra_dtype_name(s->dtype), (long long)bad, ra_nonfinite_scale(s->data, s->dtype, bad),
                            ra_nonfinite_name(s->data, s->dtype, bad));
    return ra_error_set(RA_EFORMAT, "%s: tensor %s: element %lld is %s", s->file, s->name, (long long)bad,
                        ra_nonfinite_name(s->data, s->dtype, bad));
}

/* Does the regular file PATH start with GGUF's magic? (Others go to the llama2.c loader, which says why.) */
static int is_gguf(const char *path)
{
    char magic[4] = { 0 };
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    const size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return got == sizeof magic && memcmp(magic, "GGUF", 4) == 0;
}

int ra_model_load(struct ra_model *m, const char *path)
{
    return ra_model_load_opts(m, path, NULL);
}

int ra_model_load_opts(struct ra_model *m, const char *path, const struct ra_load_options *opt)
{
    static const struct ra_load_options defaults = { 0 };
    struct stat st;
    memset(m, 0, sizeof *m);
    if (!path || !*path)
        return ra_error_set(RA_EINVAL, "no model given (use --model PATH)");
    if (stat(path, &st) != 0)
        return ra_error_set(RA_EIO, "%s: no such model file or directory", path);
    if (!opt)
        opt = &defaults;
    int rc = S_ISDIR(st.st_mode) ? ra_model_load_hf(m, path)
             : S_ISREG(st.st_mode) && is_gguf(path) ? ra_model_load_gguf(m, path, opt)
                                  : ra_model_load_llama2c(m, path);
    if (rc == RA_OK && !opt->no_check_weights)
        rc = ra_model_check_weights(m, opt->n_threads);
    if (rc != RA_OK) {
        ra_model_free(m);
        return rc;
    }
    m->path = strdup(path);
    if (!m->path) {
        ra_model_free(m);
        return ra_error_set(RA_ENOMEM, "out of memory");
    }
    return RA_OK;
}

void ra_model_free(struct ra_model *m)
{
    for (int i = 0; i < m->n_files; i++)
        ra_mapped_file_close(&m->files[i]);
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    for (int i = 0; i < m->n_sources; i++)
        free(m->sources[i].name);
    free(m->sources);
    free(m->weights.layers);
    free(m->path);
    memset(m, 0, sizeof *m);
}

int64_t ra_model_n_params(const struct ra_model *m)
{
    const struct ra_config *c = &m->config;
    int64_t kv = ra_config_kv_dim(c), d = c->dim, h = c->hidden_dim;
    int64_t per_layer = 2 * d + 2 * d * d + 2 * d * kv + 3 * d * h;
    return (int64_t)c->vocab_size * d * (m->weights.tied ? 1 : 2) + c->n_layers * per_layer + d;
}

size_t ra_model_weight_bytes(const struct ra_model *m)
{
    const struct ra_weights *w = &m->weights;
    size_t b = ra_tensor_bytes(&w->embed) + ra_tensor_bytes(&w->final_norm);
    for (int l = 0; w->layers && l < m->config.n_layers; l++) {
        const struct ra_layer_weights *lw = &w->layers[l];
        const struct ra_tensor *t[] = { &lw->attn_norm, &lw->wq, &lw->wk, &lw->wv, &lw->wo,
                                        &lw->ffn_norm, &lw->w_gate, &lw->w_down, &lw->w_up };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            b += ra_tensor_bytes(t[i]);
    }
    return b + (w->tied ? 0 : ra_tensor_bytes(&w->output));
}
