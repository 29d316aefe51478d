/* Hugging Face Llama directories: config.json + model.safetensors, or shards
 * listed by model.safetensors.index.json.
 *
 * Weights are used in place inside the mappings (zero copy) in their stored
 * dtype, q_proj and k_proj included: HF stores their rows permuted so that
 * rotate_half() pairs dimension i with i + head_dim/2, and the model says so
 * (RA_ROPE_HALF) instead of un-permuting them, which would cost every rank a
 * private copy (4 GB for Llama-2-7B in f32). */
#include "model.h"
#include "safetensors.h"
#include "status.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

struct hf_load {
    struct ra_model *m;
    const char *dir;
    char where[PATH_MAX];      /* the weights file or index, for "missing" errors */
    json_t *index;             /* the parsed index (NULL: one file) */
    json_t *weight_map;        /* borrowed from index */
    const char *shard_names[RA_MAX_SHARDS];
    struct ra_safetensors st[RA_MAX_SHARDS];
    int n_shards;
    int tie;                   /* tie_word_embeddings */
};

static int join_path(char *out, size_t size, const char *dir, const char *name)
{
    if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size)
        return ra_error_set(RA_EINVAL, "%s/%s: path too long", dir, name);
    return RA_OK;
}

static int read_json(const char *path, json_t **out)
{
    json_error_t err;
    int fd, rc = ra_file_open_regular(path, &fd, NULL);
    *out = NULL;
    if (rc != RA_OK)
        return rc;
    *out = json_loadfd(fd, JSON_REJECT_DUPLICATES, &err);
    close(fd);
    if (!*out) /* jansson's text quotes the file ("invalid token near '...'") */
        return ra_error_set(RA_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)",
                            path, ra_esc(err.text), err.line, err.column);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return ra_error_set(RA_EFORMAT, "%s: not a JSON object", path);
    }
    return RA_OK;
}

/* ------------------------------------------------------------------ config.json */

/* An integer field; absent or null gives DEF, unless DEF < 0 (required). */
static int cfg_int(const char *path, json_t *root, const char *key, int def, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < 0)
            return ra_error_set(RA_EFORMAT, "%s: %s is missing", path, key);
        *out = def;
        return RA_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > INT_MAX)
        return ra_error_set(RA_EFORMAT, "%s: %s is not a positive integer", path, key);
    *out = (int)json_integer_value(v);
    return RA_OK;
}

static int cfg_real(const char *path, json_t *root, const char *key, double def, float *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = (float)def;
        return RA_OK;
    }
    if (!json_is_number(v))
        return ra_error_set(RA_EFORMAT, "%s: %s is not a number", path, key);
    *out = (float)json_number_value(v);
    return RA_OK;
}

static int cfg_bool(const char *path, json_t *root, const char *key, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = 0;
        return RA_OK;
    }
    if (!json_is_boolean(v))
        return ra_error_set(RA_EFORMAT, "%s: %s is not true or false", path, key);
    *out = json_is_true(v);
    return RA_OK;
}

static int has_string(json_t *arr, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
            return 1;
    return 0;
}

/* A number of the rope_scaling object; def < 0: required. */
static int scaling_number(const char *path, json_t *s, const char *key, double def, double *out)
{
    json_t *v = json_object_get(s, key);
    if (!v || json_is_null(v)) {
        if (def < 0)
            return ra_error_set(RA_EFORMAT, "%s: rope_scaling has no %s", path, key);
        *out = def;
        return RA_OK;
    }
    if (!json_is_number(v))
        return ra_error_set(RA_EFORMAT, "%s: rope_scaling's %s is not a number", path, key);
    *out = json_number_value(v);
    return RA_OK;
}

/* RoPE scaling: "rope_scaling" (or transformers 5's "rope_parameters"), its
 * kind under "rope_type" (older files: "type"). Linear and Llama 3's are
 * computed; any other kind (yarn, dynamic, longrope...) would change the
 * angles in ways the runtime does not compute, so it is refused by name. */
static int parse_rope_scaling(const char *path, json_t *root, struct ra_config *c)
{
    json_t *s = json_object_get(root, "rope_scaling");
    if (!s || json_is_null(s))
        s = json_object_get(root, "rope_parameters");
    if (!s || json_is_null(s))
        return RA_OK;
    if (!json_is_object(s))
        return ra_error_set(RA_EFORMAT, "%s: rope_scaling is not an object", path);
    json_t *t = json_object_get(s, "rope_type");
    if (!t || json_is_null(t))
        t = json_object_get(s, "type");
    if (!t || !json_is_string(t))
        return ra_error_set(RA_EFORMAT, "%s: rope_scaling has no rope_type string", path);
    const char *type = json_string_value(t);
    double f = 0, low = 0, high = 0, orig = 0;
    int rc;
    if (!strcmp(type, "default"))
        return RA_OK;
    if (!strcmp(type, "linear"))
        return (rc = scaling_number(path, s, "factor", -1, &f)) != RA_OK ? rc : ra_rope_set_linear(c, f, path);
    if (!strcmp(type, "llama3")) {
        if ((rc = scaling_number(path, s, "factor", -1, &f)) != RA_OK ||
            (rc = scaling_number(path, s, "low_freq_factor", -1, &low)) != RA_OK ||
            (rc = scaling_number(path, s, "high_freq_factor", -1, &high)) != RA_OK ||
            (rc = scaling_number(path, s, "original_max_position_embeddings", c->seq_len, &orig)) != RA_OK)
            return rc;
        return ra_rope_set_llama3(c, f, low, high, orig, path);
    }
    return ra_error_set(RA_EUNSUPPORTED, "%s: RoPE scaling type %s is not supported (only linear and llama3)", path,
                        ra_esc(type));
}

/* Only plain Llama is computed correctly by the runtime: anything that
 * changes the math (another architecture, unsupported RoPE scaling, biases, another
 * activation) is refused rather than silently computed wrong. */
static int check_architecture(const char *path, json_t *root)
{
    json_t *type = json_object_get(root, "model_type"), *arch = json_object_get(root, "architectures");
    json_t *act = json_object_get(root, "hidden_act");
    int bias = 0, mlp_bias = 0, rc;

    if (!type && !arch)
        return ra_error_set(RA_EUNSUPPORTED, "%s: no model_type or architectures: cannot tell it is a Llama model", path);
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "llama") != 0))
        return ra_error_set(RA_EUNSUPPORTED, "%s: model_type %s is not supported (only llama)", path,
                            json_is_string(type) ? ra_esc(json_string_value(type)) : "(not a string)");
    if (arch && (!json_is_array(arch) || !has_string(arch, "LlamaForCausalLM")))
        return ra_error_set(RA_EUNSUPPORTED, "%s: architectures does not list LlamaForCausalLM (the only one supported)", path);
    if (act && !json_is_null(act) && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return ra_error_set(RA_EUNSUPPORTED, "%s: hidden_act %s is not supported (only silu)", path,
                            json_is_string(act) ? ra_esc(json_string_value(act)) : "(not a string)");
    if ((rc = cfg_bool(path, root, "attention_bias", &bias)) != RA_OK ||
        (rc = cfg_bool(path, root, "mlp_bias", &mlp_bias)) != RA_OK)
        return rc;
    if (bias || mlp_bias)
        return ra_error_set(RA_EUNSUPPORTED, "%s: %s is true: projection biases are not supported", path,
                            bias ? "attention_bias" : "mlp_bias");
    return RA_OK;
}

static int parse_config(struct hf_load *L, const char *path, json_t *root)
{
    struct ra_config *c = &L->m->config;
    int head_dim = 0, rc;

    if ((rc = check_architecture(path, root)) != RA_OK)
        return rc;
    if ((rc = cfg_int(path, root, "hidden_size", -1, &c->dim)) != RA_OK ||
        (rc = cfg_int(path, root, "intermediate_size", -1, &c->hidden_dim)) != RA_OK ||
        (rc = cfg_int(path, root, "num_hidden_layers", -1, &c->n_layers)) != RA_OK ||
        (rc = cfg_int(path, root, "num_attention_heads", -1, &c->n_heads)) != RA_OK ||
        (rc = cfg_int(path, root, "num_key_value_heads", c->n_heads, &c->n_kv_heads)) != RA_OK ||
        (rc = cfg_int(path, root, "vocab_size", -1, &c->vocab_size)) != RA_OK ||
        (rc = cfg_int(path, root, "max_position_embeddings", -1, &c->seq_len)) != RA_OK ||
        (rc = cfg_int(path, root, "head_dim", 0, &head_dim)) != RA_OK ||
        (rc = cfg_real(path, root, "rope_theta", 10000.0, &c->rope_theta)) != RA_OK ||
        (rc = cfg_real(path, root, "rms_norm_eps", 1e-5, &c->norm_eps)) != RA_OK ||
        (rc = cfg_bool(path, root, "tie_word_embeddings", &L->tie)) != RA_OK)
        return rc;
    c->head_dim = c->dim / c->n_heads;
    c->rope_style = RA_ROPE_HALF; /* q_proj/k_proj rows as transformers' rotate_half expects them */
    if (head_dim && head_dim * c->n_heads != c->dim)
        return ra_error_set(RA_EUNSUPPORTED, "%s: head_dim %d is not hidden_size/num_attention_heads = %d/%d",
                            path, head_dim, c->dim, c->n_heads);
    if (!json_object_get(root, "rope_theta") && json_is_object(json_object_get(root, "rope_parameters")) &&
        (rc = cfg_real(path, json_object_get(root, "rope_parameters"), "rope_theta", 10000.0, &c->rope_theta)) != RA_OK)
        return rc; /* transformers 5 keeps the base there */
    if ((rc = ra_config_validate(c, path)) != RA_OK || (rc = parse_rope_scaling(path, root, c)) != RA_OK)
        return rc;
    return ra_config_validate(c, path);
}

static int load_config(struct hf_load *L)
{
    char path[PATH_MAX];
    json_t *root = NULL;
    int rc = join_path(path, sizeof path, L->dir, "config.json");
    if (rc == RA_OK && (rc = read_json(path, &root)) == RA_OK)
        rc = parse_config(L, path, root);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------------ shards */

static int add_shard(struct hf_load *L, const char *name)
{
    for (int i = 0; i < L->n_shards; i++)
        if (strcmp(L->shard_names[i], name) == 0)
            return RA_OK;
    /* The index names files beside it; a path could reach anywhere. */
    if (!*name || strchr(name, '/'))
        return ra_error_set(RA_EFORMAT, "%s: shard name \"%s\" is not a file name in the model directory",
                            L->where, ra_esc(name));
    if (L->n_shards == RA_MAX_SHARDS)
        return ra_error_set(RA_EUNSUPPORTED, "%s: more than %d shards", L->where, RA_MAX_SHARDS);
    L->shard_names[L->n_shards++] = name;
    return RA_OK;
}

static int read_index(struct hf_load *L)
{
    const char *name;
    json_t *v;
    int rc = read_json(L->where, &L->index);
    if (rc != RA_OK)
        return rc;
    L->weight_map = json_object_get(L->index, "weight_map");
    if (!json_is_object(L->weight_map) || json_object_size(L->weight_map) == 0)
        return ra_error_set(RA_EFORMAT, "%s: weight_map is missing or not a non-empty object", L->where);
    json_object_foreach(L->weight_map, name, v) {
        if (!json_is_string(v))
            return ra_error_set(RA_EFORMAT, "%s: tensor %s: weight_map value is not a file name", L->where,
                                ra_esc(name));
        if ((rc = add_shard(L, json_string_value(v))) != RA_OK)
            return rc;
    }
    return RA_OK;
}

/* As transformers does: a single model.safetensors wins over an index. */
static int open_shards(struct hf_load *L)
{
    struct ra_model *m = L->m;
    char path[PATH_MAX];
    int rc;

    if ((rc = join_path(L->where, sizeof L->where, L->dir, SINGLE_NAME)) != RA_OK)
        return rc;
    if (access(L->where, F_OK) == 0) {
        L->shard_names[L->n_shards++] = SINGLE_NAME;
    } else {
        if ((rc = join_path(L->where, sizeof L->where, L->dir, INDEX_NAME)) != RA_OK)
            return rc;
        if (access(L->where, F_OK) != 0)
            return ra_error_set(RA_EIO, "%s: no %s or %s in the model directory", L->dir, SINGLE_NAME, INDEX_NAME);
        if ((rc = read_index(L)) != RA_OK)
            return rc;
    }
    for (int i = 0; i < L->n_shards; i++) {
        if ((rc = join_path(path, sizeof path, L->dir, L->shard_names[i])) != RA_OK ||
            (rc = ra_mapped_file_open(&m->files[i], path)) != RA_OK)
            return rc;
        m->n_files = i + 1;
        if ((rc = ra_safetensors_parse(&L->st[i], &m->files[i])) != RA_OK)
            return rc;
    }
    return RA_OK;
}

/* The entry for NAME, or NULL if the weights do not have it; an index that
 * points to a shard without the tensor is a lie and an error. */
static int find_entry(struct hf_load *L, const char *name, const struct ra_st_entry **e, const char **file)
{
    int shard = 0;
    *e = NULL;
    *file = L->where;
    if (L->weight_map) {
        const char *s = json_string_value(json_object_get(L->weight_map, name));
        if (!s)
            return RA_OK;
        while (strcmp(L->shard_names[shard], s) != 0)
            shard++;
    }
    *file = L->m->files[shard].path;
    *e = ra_safetensors_find(&L->st[shard], name);
    if (!*e && L->weight_map)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: %s lists it in this shard, but it is not there",
                            *file, name, INDEX_NAME);
    return RA_OK;
}

/* ------------------------------------------------------------------ tensors */

/* Fills T from NAME: ROWS == 1 means a vector (a 1-D tensor of COLS). */
static int get_tensor(struct hf_load *L, const char *name, int64_t rows, int64_t cols, struct ra_tensor *t)
{
    const struct ra_st_entry *e;
    const char *file;
    int want_dims = rows == 1 ? 1 : 2;
    int rc = find_entry(L, name, &e, &file);

    memset(t, 0, sizeof *t);
    if (rc != RA_OK)
        return rc;
    if (!e)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s is missing", file, name);
    if (e->n_dims != want_dims)
        return ra_error_set(RA_EFORMAT, "%s: tensor %s: has %d dimensions, expected %d", file, name, e->n_dims, want_dims);
    t->dtype = e->dtype;
    t->rows = want_dims == 1 ? 1 : e->shape[0];
    t->cols = e->shape[want_dims - 1];
    t->data = e->data;
    if ((rc = ra_tensor_check(t, rows, cols, file, name)) != RA_OK)
        return rc;
    /* Files from other writers may leave a tensor unaligned for its dtype:
     * copy it rather than hand the backend a misaligned pointer. */
    size_t esize = ra_dtype_size(t->dtype), bytes = (size_t)(rows * cols) * esize;
    if ((uintptr_t)t->data % esize != 0) {
        void *copy = ra_model_own(L->m, bytes);
        if (!copy)
            return ra_error_set(RA_ENOMEM, "%s: tensor %s: out of memory", file, name);
        memcpy(copy, t->data, bytes);
        t->data = copy;
    }
    return ra_model_add_source(L->m, file, name, t);
}

static int get_layer_tensor(struct hf_load *L, int layer, const char *suffix, int64_t rows, int64_t cols,
                            struct ra_tensor *t)
{
    char name[256];
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer, suffix);
    return get_tensor(L, name, rows, cols, t);
}

static int load_layer(struct hf_load *L, int i)
{
    const struct ra_config *c = &L->m->config;
    struct ra_layer_weights *w = &L->m->weights.layers[i];
    int64_t d = c->dim, q = (int64_t)c->n_heads * c->head_dim, kv = ra_config_kv_dim(c), h = c->hidden_dim;
    int rc;

    if ((rc = get_layer_tensor(L, i, "input_layernorm", 1, d, &w->attn_norm)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "self_attn.q_proj", q, d, &w->wq)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "self_attn.k_proj", kv, d, &w->wk)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "self_attn.v_proj", kv, d, &w->wv)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "self_attn.o_proj", d, q, &w->wo)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "post_attention_layernorm", 1, d, &w->ffn_norm)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "mlp.gate_proj", h, d, &w->w_gate)) != RA_OK ||
        (rc = get_layer_tensor(L, i, "mlp.down_proj", d, h, &w->w_down)) != RA_OK)
        return rc;
    return get_layer_tensor(L, i, "mlp.up_proj", h, d, &w->w_up);
}

static int load_weights(struct hf_load *L)
{
    struct ra_model *m = L->m;
    const struct ra_config *c = &m->config;
    const struct ra_st_entry *head;
    const char *file;
    int rc;

    m->weights.layers = calloc((size_t)c->n_layers, sizeof *m->weights.layers);
    if (!m->weights.layers)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", L->dir);
    if ((rc = get_tensor(L, "model.embed_tokens.weight", c->vocab_size, c->dim, &m->weights.embed)) != RA_OK)
        return rc;
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = load_layer(L, i)) != RA_OK)
            return rc;
    if ((rc = get_tensor(L, "model.norm.weight", 1, c->dim, &m->weights.final_norm)) != RA_OK)
        return rc;
    if ((rc = find_entry(L, "lm_head.weight", &head, &file)) != RA_OK)
        return rc;
    /* transformers ties lm_head to the embedding when asked, whatever the
     * file holds. Untied with no lm_head, transformers would use a random
     * classifier: guessing the embedding instead would be a silent wrong answer. */
    if (!L->tie && !head)
        return ra_error_set(RA_EFORMAT, "%s: tensor lm_head.weight is missing and tie_word_embeddings is not true "
                            "in %s/config.json", file, L->dir);
    m->weights.tied = L->tie;
    if (m->weights.tied) {
        m->weights.output = m->weights.embed;
        return RA_OK;
    }
    return get_tensor(L, "lm_head.weight", c->vocab_size, c->dim, &m->weights.output);
}

int ra_model_load_hf(struct ra_model *m, const char *dir)
{
    struct hf_load L;
    int rc;

    memset(&L, 0, sizeof L);
    L.m = m;
    L.dir = dir;
    m->format = RA_FORMAT_HF;
    if ((rc = load_config(&L)) == RA_OK && (rc = open_shards(&L)) == RA_OK)
        rc = load_weights(&L);
    /* The indexes go; the mappings stay in m->files for the weights. */
    for (int i = 0; i < L.n_shards; i++)
        ra_safetensors_close(&L.st[i]);
    json_decref(L.index);
    return rc;
}
