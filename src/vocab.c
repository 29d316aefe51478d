/* The programs' text tokenizer: SentencePiece or byte-level BPE behind one
 * interface, loaded from tokenizer.bin, a GGUF file or a tokenizer.json (see
 * vocab.h for the rules). */
#include "vocab.h"

#include "prompt.h"
#include "status.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The special tokens llama.cpp ends generation at when a vocabulary has them
 * (llama-vocab.cpp, the EOG list), whatever their type. */
static const char *const eog_texts[] = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<|endoftext|>", "<|end_of_text|>", "<end_of_turn>",
    "<EOT>", "_<EOT>", "<end_of_utterance>", "<|return|>", "<|call|>",
};

/* ------------------------------------------------------------- end of generation */

static void add_eog(struct ra_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens || ra_vocab_is_eog(v, id) || v->n_eog == RA_VOCAB_MAX_EOG)
        return;
    v->eog[v->n_eog++] = id;
}

/* The id of the token whose stored text is TEXT, or -1 (SPM: a linear search). */
static int32_t find_token(const struct ra_vocab *v, const char *text)
{
    if (v->kind == RA_VOCAB_BPE)
        return ra_bpe_token_id(&v->bpe, text);
    for (int i = 0; i < v->spm.vocab_size; i++)
        if (!strcmp(v->spm.pieces[i], text))
            return i;
    return -1;
}

/* EOS, then the named end tokens the vocabulary has. */
static void find_eog(struct ra_vocab *v)
{
    add_eog(v, v->eos_id);
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++)
        add_eog(v, find_token(v, eog_texts[i]));
}

int ra_vocab_is_eog(const struct ra_vocab *v, int32_t id)
{
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return 1;
    return 0;
}

/* ------------------------------------------------------------- GGUF metadata */

/* An optional token id KEY into *out (absent: *out unchanged); outside the
 * vocabulary of N tokens is an error. */
static int gguf_opt_id(const struct ra_gguf *g, const char *path, const char *key, int n, int32_t *out)
{
    int64_t v;
    int rc;
    if (!ra_gguf_find_kv(g, key))
        return RA_OK;
    if ((rc = ra_gguf_get_i64(g, key, &v)) != RA_OK)
        return rc;
    if (v < 0 || v >= n)
        return ra_error_set(RA_EFORMAT, "%s: %s %lld is outside the %d tokens", path, key, (long long)v, n);
    *out = (int32_t)v;
    return RA_OK;
}

/* An optional bool KEY into *out (absent: unchanged). */
static int gguf_opt_bool(const struct ra_gguf *g, const char *key, int *out)
{
    return ra_gguf_find_kv(g, key) ? ra_gguf_get_bool(g, key, out) : RA_OK;
}

/* The string array KEY: *out points into G's strings (valid while G is open). */
static int gguf_strings(const struct ra_gguf *g, const char *path, const char *key, const char ***out, int *n)
{
    enum ra_gguf_type type;
    uint64_t count;
    int rc = ra_gguf_get_arr(g, key, &type, &count);
    *out = NULL;
    if (rc != RA_OK)
        return rc;
    if (type != RA_GGUF_STR)
        return ra_error_set(RA_EFORMAT, "%s: %s is an array of %s, not of str", path, key, ra_gguf_type_name(type));
    if (count == 0 || count > RA_BPE_MAX_MERGES)
        return ra_error_set(RA_EFORMAT, "%s: %s has %llu entries (1..%d)", path, key, (unsigned long long)count,
                            RA_BPE_MAX_MERGES);
    if (!(*out = malloc(sizeof **out * (size_t)count)))
        return ra_error_set(RA_ENOMEM, "%s: out of memory for %s", path, key);
    for (uint64_t i = 0; i < count && rc == RA_OK; i++) {
        size_t len;
        if ((rc = ra_gguf_get_arr_str(g, key, i, &(*out)[i], &len)) == RA_OK && strlen((*out)[i]) != len)
            rc = ra_error_set(RA_EFORMAT, "%s: %s entry %llu holds a NUL byte", path, key, (unsigned long long)i);
    }
    if (rc != RA_OK) {
        free(*out);
        *out = NULL;
    }
    *n = (int)count;
    return rc;
}

/* tokenizer.ggml.token_type (N entries), or NULL where the file has none. */
static int gguf_types(const struct ra_gguf *g, const char *path, int n, int **types)
{
    enum ra_gguf_type type;
    uint64_t count;
    int rc;
    *types = NULL;
    if (!ra_gguf_find_kv(g, "tokenizer.ggml.token_type"))
        return RA_OK;
    if ((rc = ra_gguf_get_arr(g, "tokenizer.ggml.token_type", &type, &count)) != RA_OK)
        return rc;
    if (count != (uint64_t)n)
        return ra_error_set(RA_EFORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %d tokens", path,
                            (unsigned long long)count, n);
    if (!(*types = malloc(sizeof **types * (size_t)n)))
        return ra_error_set(RA_ENOMEM, "%s: out of memory for the token types", path);
    for (int i = 0; i < n && rc == RA_OK; i++) {
        int64_t t = 0;
        rc = ra_gguf_get_arr_i64(g, "tokenizer.ggml.token_type", (uint64_t)i, &t);
        (*types)[i] = (int)(t < 0 || t > 255 ? 0 : t);
    }
    if (rc != RA_OK) {
        free(*types);
        *types = NULL;
    }
    return rc;
}

/* The ids whose type is in MASK (bit per RA_TOKEN_*), malloc'ed. */
static int ids_of_types(const int *types, int n, unsigned mask, int32_t **ids, int *n_ids, const char *path)
{
    *n_ids = 0;
    *ids = NULL;
    if (!types)
        return RA_OK;
    if (!(*ids = malloc(sizeof **ids * (size_t)n)))
        return ra_error_set(RA_ENOMEM, "%s: out of memory for the special tokens", path);
    for (int i = 0; i < n; i++)
        if (types[i] < 32 && (mask >> types[i] & 1u))
            (*ids)[(*n_ids)++] = i;
    return RA_OK;
}

#define TYPE_BIT(t) (1u << (t))

/* tokenizer.ggml.model "llama": SentencePiece from the arrays. */
static int gguf_spm(struct ra_vocab *v, const struct ra_gguf *g, const char *path, const char **tokens, int n,
                    const int *types)
{
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t unk = 0;
    int rc = scores ? RA_OK : ra_error_set(RA_ENOMEM, "%s: out of memory for the scores", path);
    int space_prefix = 1;
    for (int i = 0; types && i < n; i++) /* llama.cpp: <unk> is the UNKNOWN token, else id 0 */
        if (types[i] == RA_TOKEN_UNKNOWN) {
            unk = i;
            break;
        }
    if (rc == RA_OK && ra_gguf_find_kv(g, "tokenizer.ggml.scores"))
        for (int i = 0; i < n && rc == RA_OK; i++)
            rc = ra_gguf_get_arr_f32(g, "tokenizer.ggml.scores", (uint64_t)i, &scores[i]);
    v->bos_id = n > 1 ? 1 : -1, v->eos_id = n > 2 ? 2 : -1, v->add_bos = 1; /* llama.cpp's defaults */
    if (rc == RA_OK) /* before the merge index, which leaves BOS and EOS out */
        rc = gguf_opt_id(g, path, "tokenizer.ggml.bos_token_id", n, &v->bos_id);
    if (rc == RA_OK)
        rc = gguf_opt_id(g, path, "tokenizer.ggml.eos_token_id", n, &v->eos_id);
    if (rc == RA_OK)
        rc = gguf_opt_id(g, path, "tokenizer.ggml.unknown_token_id", n, &unk);
    if (rc == RA_OK)
        rc = gguf_opt_bool(g, "tokenizer.ggml.add_space_prefix", &space_prefix);
    if (rc == RA_OK)
        rc = ra_tokenizer_init(&v->spm, path, tokens, scores, types, n, unk, v->bos_id, v->eos_id);
    if (rc == RA_OK) {
        v->kind = RA_VOCAB_SPM;
        v->spm.no_dummy_prefix = !space_prefix;
        rc = ids_of_types(types, n, TYPE_BIT(RA_TOKEN_CONTROL) | TYPE_BIT(RA_TOKEN_USER_DEFINED) |
                          TYPE_BIT(RA_TOKEN_UNKNOWN), &v->special, &v->n_special, path);
    }
    free(scores);
    return rc;
}

/* tokenizer.ggml.model "gpt2": byte-level BPE. */
static int gguf_bpe(struct ra_vocab *v, const struct ra_gguf *g, const char *path, const char **tokens, int n,
                    const int *types)
{
    struct ra_bpe_options o = RA_BPE_OPTIONS_INIT;
    const char **merges = NULL, *pre = NULL;
    int32_t *special = NULL;
    int n_merges = 0, n_special = 0, rc = RA_OK;
    if (!ra_gguf_find_kv(g, "tokenizer.ggml.merges"))
        return ra_error_set(RA_EFORMAT, "%s: a gpt2 (byte-level BPE) vocabulary without tokenizer.ggml.merges",
                            path);
    if (ra_gguf_find_kv(g, "tokenizer.ggml.pre"))
        rc = ra_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL);
    if (rc == RA_OK)
        rc = gguf_strings(g, path, "tokenizer.ggml.merges", &merges, &n_merges);
    if (rc == RA_OK)
        rc = ids_of_types(types, n, TYPE_BIT(RA_TOKEN_CONTROL) | TYPE_BIT(RA_TOKEN_USER_DEFINED), &special,
                          &n_special, path);
    /* A byte without a token is dropped, as HF does: unknown_token_id is not used. */
    o.source = path, o.pre = pre, o.special_ids = special, o.n_special = n_special;
    if (rc == RA_OK)
        rc = ra_bpe_init(&v->bpe, tokens, n, merges, n_merges, &o);
    if (rc == RA_OK)
        v->kind = RA_VOCAB_BPE;
    free(merges);
    free(special);
    return rc;
}

/* BOS/EOS ids and flags, the end-of-generation tokens and the chat template
 * of a GGUF vocabulary already built. */
static int gguf_common(struct ra_vocab *v, const struct ra_gguf *g, const char *path)
{
    int32_t eot = -1, eom = -1;
    const char *tmpl = NULL;
    int rc = gguf_opt_id(g, path, "tokenizer.ggml.bos_token_id", v->n_tokens, &v->bos_id);
    if (rc == RA_OK)
        rc = gguf_opt_id(g, path, "tokenizer.ggml.eos_token_id", v->n_tokens, &v->eos_id);
    if (rc == RA_OK)
        rc = gguf_opt_id(g, path, "tokenizer.ggml.eot_token_id", v->n_tokens, &eot);
    if (rc == RA_OK)
        rc = gguf_opt_id(g, path, "tokenizer.ggml.eom_token_id", v->n_tokens, &eom);
    if (rc == RA_OK)
        rc = gguf_opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos);
    if (rc == RA_OK)
        rc = gguf_opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos);
    if (rc == RA_OK && ra_gguf_find_kv(g, "tokenizer.chat_template") &&
        (rc = ra_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL)) == RA_OK &&
        !(v->chat_template = strdup(tmpl)))
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory for the chat template", path);
    if (rc == RA_OK && ((v->add_bos && v->bos_id < 0) || (v->add_eos && v->eos_id < 0)))
        rc = ra_error_set(RA_EFORMAT, "%s: add_bos_token/add_eos_token without a BOS/EOS token id", path);
    if (rc != RA_OK)
        return rc;
    if (v->kind == RA_VOCAB_SPM) /* its decoder prints nothing for them */
        v->spm.bos_id = v->bos_id, v->spm.eos_id = v->eos_id;
    find_eog(v);
    add_eog(v, eot);
    add_eog(v, eom);
    return RA_OK;
}

int ra_vocab_from_gguf(struct ra_vocab *v, const struct ra_gguf *g, const char *path)
{
    const char *model = NULL, **tokens = NULL;
    int *types = NULL, n = 0, rc;
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = -1;
    if (!ra_gguf_find_kv(g, "tokenizer.ggml.model"))
        return ra_error_set(RA_EFORMAT, "%s: no vocabulary (tokenizer.ggml.model is missing)", path);
    if ((rc = ra_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL)) != RA_OK)
        return rc;
    if (strcmp(model, "llama") && strcmp(model, "gpt2"))
        return ra_error_set(RA_EUNSUPPORTED, "%s: tokenizer.ggml.model '%s' is not llama (SentencePiece) or gpt2 "
                            "(byte-level BPE)", path, ra_esc(model));
    if ((rc = gguf_strings(g, path, "tokenizer.ggml.tokens", &tokens, &n)) == RA_OK && n > RA_BPE_MAX_TOKENS)
        rc = ra_error_set(RA_EFORMAT, "%s: %d tokens, more than %d", path, n, RA_BPE_MAX_TOKENS);
    if (rc == RA_OK)
        rc = gguf_types(g, path, n, &types);
    if (rc == RA_OK)
        rc = !strcmp(model, "llama") ? gguf_spm(v, g, path, tokens, n, types) : gguf_bpe(v, g, path, tokens, n, types);
    v->n_tokens = n;
    if (rc == RA_OK && !(v->path = strdup(path)))
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    if (rc == RA_OK)
        rc = gguf_common(v, g, path);
    free(tokens);
    free(types);
    if (rc != RA_OK)
        ra_vocab_free(v);
    return rc;
}

/* ------------------------------------------------------------- tokenizer.json */

/* The file NAME in the directory of PATH, into BUF. */
static void sibling(const char *path, const char *name, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    snprintf(buf, size, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path, name);
}

/* A tokenizer_config.json token: "text" or {"content": "text"}. */
static const char *config_token(json_t *root, const char *key)
{
    json_t *t = json_object_get(root, key);
    if (json_is_object(t))
        t = json_object_get(t, "content");
    return json_string_value(t);
}

/* chat_template: a string, or a list of {name, template} (the "default" one). */
static const char *config_template(json_t *root)
{
    json_t *t = json_object_get(root, "chat_template"), *e;
    size_t i;
    if (json_is_string(t))
        return json_string_value(t);
    json_array_foreach(t, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && !strcmp(name, "default"))
            return json_string_value(json_object_get(e, "template"));
    }
    return NULL;
}

/* What tokenizer_config.json beside the tokenizer.json adds: add_bos_token,
 * add_eos_token, the BOS/EOS tokens where tokenizer.json does not name them
 * (the post-processor names only those it adds), chat_template. No such
 * file: nothing. */
static int json_config(struct ra_vocab *v, const char *json_path)
{
    char path[4096], *text = NULL;
    size_t len = 0;
    json_error_t err;
    int rc = RA_OK;
    sibling(json_path, "tokenizer_config.json", path, sizeof path);
    if (access(path, R_OK) != 0)
        return RA_OK;
    if ((rc = ra_read_file(path, &text, &len)) != RA_OK) /* a regular file only */
        return rc;
    json_t *root = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &err), *b; /* model_max_length: 1e30 */
    free(text);
    if (!json_is_object(root)) {
        json_decref(root);
        return ra_error_set(RA_EFORMAT, "%s: line %d: %s", path, err.line, root ? "not a JSON object" : err.text);
    }
    const char *bos = config_token(root, "bos_token"), *eos = config_token(root, "eos_token");
    const char *tmpl = config_template(root);
    if (v->bos_id < 0 && bos)
        v->bos_id = ra_bpe_token_id(&v->bpe, bos);
    if (v->eos_id < 0 && eos)
        v->eos_id = ra_bpe_token_id(&v->bpe, eos);
    if (json_is_boolean(b = json_object_get(root, "add_bos_token")))
        v->add_bos = json_is_true(b);
    if (json_is_boolean(b = json_object_get(root, "add_eos_token")))
        v->add_eos = json_is_true(b);
    if ((v->add_bos && v->bos_id < 0) || (v->add_eos && v->eos_id < 0))
        rc = ra_error_set(RA_EFORMAT, "%s: add_bos_token/add_eos_token, but no such token is known", path);
    if (rc == RA_OK && tmpl && !(v->chat_template = strdup(tmpl)))
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    json_decref(root);
    return rc;
}

/* transformers 5 saves the template apart, as chat_template.jinja beside them. */
static int json_template_file(struct ra_vocab *v, const char *json_path)
{
    char path[4096];
    sibling(json_path, "chat_template.jinja", path, sizeof path);
    if (v->chat_template || access(path, R_OK) != 0)
        return RA_OK;
    return ra_read_file(path, &v->chat_template, NULL);
}

static int load_json(struct ra_vocab *v, const char *path)
{
    int rc = ra_bpe_load_json(&v->bpe, path);
    if (rc != RA_OK)
        return rc;
    v->kind = RA_VOCAB_BPE;
    v->n_tokens = v->bpe.n_tokens;
    v->bos_id = v->bpe.bos_id, v->eos_id = v->bpe.eos_id;
    v->add_bos = v->bpe.add_bos, v->add_eos = v->bpe.add_eos;
    if ((rc = json_config(v, path)) == RA_OK && (rc = json_template_file(v, path)) == RA_OK)
        find_eog(v);
    return rc;
}

/* ------------------------------------------------------------- loading */

/* 1 if PATH is a regular file that starts with GGUF's magic. Anything else
 * (a FIFO would block here) is left to the loaders, which name the fault. */
static int is_gguf(const char *path)
{
    char magic[4] = { 0 };
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    return got == 4 && !memcmp(magic, "GGUF", 4);
}

static int load_gguf(struct ra_vocab *v, const char *path)
{
    struct ra_gguf g;
    int rc = ra_gguf_open(&g, path);
    if (rc != RA_OK)
        return rc;
    rc = ra_vocab_from_gguf(v, &g, path);
    ra_gguf_close(&g);
    return rc;
}

int ra_vocab_load(struct ra_vocab *v, const char *path)
{
    size_t n = strlen(path);
    int rc;
    memset(v, 0, sizeof *v);
    if (is_gguf(path))
        return load_gguf(v, path);
    if (n >= 5 && !strcmp(path + n - 5, ".json")) {
        v->bos_id = v->eos_id = -1;
        rc = load_json(v, path);
    } else if ((rc = ra_tokenizer_load(&v->spm, path, 0)) == RA_OK) {
        v->kind = RA_VOCAB_SPM;
        v->n_tokens = v->spm.vocab_size;
        v->bos_id = v->spm.bos_id, v->eos_id = v->spm.eos_id, v->add_bos = 1;
        add_eog(v, v->eos_id); /* no types: none of its pieces is known to be special */
    }
    if (rc == RA_OK && !(v->path = strdup(path)))
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    if (rc != RA_OK)
        ra_vocab_free(v);
    return rc;
}

void ra_vocab_free(struct ra_vocab *v)
{
    if (!v)
        return;
    if (v->kind == RA_VOCAB_BPE)
        ra_bpe_free(&v->bpe);
    else
        ra_tokenizer_free(&v->spm);
    free(v->special);
    free(v->chat_template);
    free(v->path);
    memset(v, 0, sizeof *v);
}

/* MODEL itself if it is a GGUF with a vocabulary, or one that does not parse
 * (loading it then says why). */
static int find_in_gguf(const char *model, char *path, size_t len)
{
    struct ra_gguf g;
    int found = 1;
    if (!is_gguf(model))
        return 0;
    if (ra_gguf_open(&g, model) == RA_OK) {
        found = ra_gguf_find_kv(&g, "tokenizer.ggml.model") != NULL;
        ra_gguf_close(&g);
    }
    if (found)
        snprintf(path, len, "%s", model);
    return found;
}

int ra_vocab_find(const char *model, char *path, size_t len)
{
    static const char *const names[] = { "tokenizer.bin", "tokenizer.json" };
    const char *slash = strrchr(model, '/');
    const int dir_len = slash ? (int)(slash - model) : 1;
    const char *dir = slash ? model : ".";
    if (find_in_gguf(model, path, len))
        return 1;
    for (int where = 0; where < 2; where++) /* inside MODEL (a directory), then beside it */
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            if (where == 0)
                snprintf(path, len, "%s/%s", model, names[i]);
            else
                snprintf(path, len, "%.*s/%s", dir_len, dir, names[i]);
            if (access(path, R_OK) == 0)
                return 1;
        }
    return 0;
}

/* ------------------------------------------------------------- encoding */

struct ids {
    int32_t *v;
    int n, cap;
};

static int ids_push(struct ids *a, const int32_t *src, int n)
{
    if (n == 0) /* src may be NULL: an empty encoding */
        return RA_OK;
    if (a->n + n > a->cap) {
        int cap = a->cap ? a->cap : 64;
        while (cap < a->n + n)
            cap *= 2;
        int32_t *p = realloc(a->v, sizeof *p * (size_t)cap);
        if (!p)
            return ra_error_set(RA_ENOMEM, "out of memory for %d token ids", a->n + n);
        a->v = p, a->cap = cap;
    }
    memcpy(a->v + a->n, src, sizeof *src * (size_t)n);
    a->n += n;
    return RA_OK;
}

/* SentencePiece on LEN bytes of TEXT (one stretch between special tokens). */
static int spm_piece(const struct ra_vocab *v, const char *text, size_t len, struct ids *out)
{
    char *copy = malloc(len + 1);
    int32_t *ids = NULL;
    int n = 0, rc;
    if (!copy)
        return ra_error_set(RA_ENOMEM, "out of memory for a text of %zu bytes", len);
    memcpy(copy, text, len);
    copy[len] = '\0';
    if ((rc = ra_tokenizer_encode(&v->spm, copy, 0, &ids, &n)) == RA_OK)
        rc = ids_push(out, ids, n);
    free(ids);
    free(copy);
    return rc;
}

/* The longest special token at TEXT (LEFT bytes remain), or -1. */
static int32_t spm_special_at(const struct ra_vocab *v, const char *text, size_t left)
{
    int32_t best = -1;
    int best_len = 0;
    for (int i = 0; i < v->n_special; i++) {
        int id = v->special[i], len = v->spm.piece_lens[id];
        if (len > best_len && (size_t)len <= left && !memcmp(v->spm.pieces[id], text, (size_t)len))
            best = id, best_len = len;
    }
    return best;
}

/* SentencePiece with the special tokens in the text as their ids: each
 * stretch between them is encoded alone, with its own dummy prefix (as
 * llama.cpp does after a special token). */
static int spm_encode(const struct ra_vocab *v, const char *text, size_t len, int parse_special, struct ids *out)
{
    size_t start = 0;
    int rc = RA_OK;
    for (size_t i = 0; parse_special && i < len && rc == RA_OK; i++) {
        int32_t id = spm_special_at(v, text + i, len - i);
        if (id < 0)
            continue;
        if (i > start)
            rc = spm_piece(v, text + start, i - start, out);
        if (rc == RA_OK)
            rc = ids_push(out, &id, 1);
        i += (size_t)v->spm.piece_lens[id] - 1;
        start = i + 1;
    }
    if (rc == RA_OK && len > start)
        rc = spm_piece(v, text + start, len - start, out);
    return rc;
}

static int bpe_encode(const struct ra_vocab *v, const char *text, size_t len, int parse_special, struct ids *out)
{
    int32_t *ids = NULL;
    int n = 0;
    int rc = ra_bpe_encode(&v->bpe, text, len, parse_special ? 0 : RA_BPE_TEXT_ONLY, &ids, &n);
    if (rc == RA_OK)
        rc = ids_push(out, ids, n);
    free(ids);
    return rc;
}

int ra_vocab_encode(const struct ra_vocab *v, const char *text, size_t len, unsigned flags, int32_t **ids,
                    int *n_ids)
{
    struct ids out = { 0 };
    const int add = flags & RA_VOCAB_ADD_SPECIAL, parse = (flags & RA_VOCAB_PARSE_SPECIAL) != 0;
    int rc = RA_OK;
    *ids = NULL;
    *n_ids = 0;
    if (add && v->add_bos)
        rc = ids_push(&out, &v->bos_id, 1);
    if (rc == RA_OK)
        rc = v->kind == RA_VOCAB_BPE ? bpe_encode(v, text, len, parse, &out) : spm_encode(v, text, len, parse, &out);
    if (rc == RA_OK && add && v->add_eos)
        rc = ids_push(&out, &v->eos_id, 1);
    if (rc == RA_OK && out.n == 0) /* malloc'ed even when empty */
        rc = (out.v = malloc(sizeof *out.v)) ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    if (rc != RA_OK) {
        free(out.v);
        return rc;
    }
    *ids = out.v;
    *n_ids = out.n;
    return RA_OK;
}

/* ------------------------------------------------------------- decoding */

int ra_vocab_decode(const struct ra_vocab *v, const int32_t *ids, int n, char **text, size_t *len)
{
    if (v->kind == RA_VOCAB_BPE)
        return ra_bpe_decode(&v->bpe, ids, n, text, len);
    int rc = ra_tokenizer_decode(&v->spm, ids, n, text);
    if (rc == RA_OK && len)
        *len = strlen(*text);
    return rc;
}

const char *ra_vocab_token_bytes(const struct ra_vocab *v, int32_t prev, int32_t id, char buf[2], size_t *len)
{
    const char *p;
    if (v->kind == RA_VOCAB_BPE) {
        p = ra_bpe_token_bytes(&v->bpe, id, len);
        if (!p)
            p = "", *len = 0;
        return p;
    }
    p = ra_tokenizer_piece(&v->spm, prev, id, buf);
    *len = p == buf ? 1 : strlen(p); /* a byte token may be the byte 0 */
    return p;
}

int ra_vocab_token_text(const struct ra_vocab *v, int32_t id, char *buf, size_t size)
{
    size_t len = 0;
    const char *p = NULL;
    if (id >= 0 && id < v->n_tokens)
        p = v->kind == RA_VOCAB_SPM ? v->spm.pieces[id] : ra_bpe_token_bytes(&v->bpe, id, &len);
    if (p && v->kind == RA_VOCAB_SPM)
        len = (size_t)v->spm.piece_lens[id];
    if (!p || len >= size || memchr(p, '\0', len))
        return ra_error_set(RA_EINVAL, "%s: token %d has no text of under %zu bytes", v->path, (int)id, size);
    memcpy(buf, p, len);
    buf[len] = '\0';
    return RA_OK;
}
