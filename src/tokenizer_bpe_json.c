/* A Hugging Face tokenizer.json read into a byte-level BPE (tokenizer_bpe.h):
 * what the file says is checked and bounded here, then handed to
 * ra_bpe_init (merges "a b") or ra_bpe_init_pairs (merges [a, b]) with the
 * file's path as the source of every message. The strings stay in the parsed
 * JSON, which lives until the tables have copied them. */
#include "mapped_file.h"
#include "status.h"
#include "tokenizer_bpe.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct json_load {
    const char *path;
    json_t *root, *model, *vocab;
    const char **tokens;          /* [n_tokens], borrowed from root */
    int n_tokens;
    const char **merges;          /* "a b" strings, or pairs: [2 * n_merges] */
    int n_merges, pairs;
    int32_t *special_ids;
    unsigned char *special_flags;
    int n_special;
    struct ra_bpe_options o;
};

/* The whole file in memory (json_loadfd reads a byte per system call: 3.5 M
 * of them for SmolLM2's tokenizer.json), then parsed. */
static int read_json(const char *path, json_t **out)
{
    json_error_t err;
    size_t size, got = 0;
    char *text = NULL;
    int fd, rc = ra_file_open_regular(path, &fd, &size);
    *out = NULL;
    if (rc != RA_OK)
        return rc;
    if (size > RA_BPE_MAX_JSON_BYTES) {
        rc = ra_error_set(RA_ERANGE, "%s: %zu bytes, more than a tokenizer.json may have (%zu)", path, size,
                          RA_BPE_MAX_JSON_BYTES);
        goto cleanup;
    }
    if (!(text = malloc(size ? size : 1))) {
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory for %zu bytes", path, size);
        goto cleanup;
    }
    while (got < size) {
        ssize_t n = read(fd, text + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = ra_error_set(RA_EIO, "%s: read failed: %s", path, strerror(errno));
            goto cleanup;
        }
        if (n == 0) /* the file shrank since fstat: parse what there is */
            break;
        got += (size_t)n;
    }
    if (!(*out = json_loadb(text, got, JSON_REJECT_DUPLICATES, &err))) {
        /* jansson's text quotes the file ("invalid token near '...'") */
        rc = ra_error_set(RA_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", path, ra_esc(err.text),
                          err.line, err.column);
        goto cleanup;
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        rc = ra_error_set(RA_EFORMAT, "%s: not a JSON object", path);
    }
cleanup:
    free(text);
    close(fd);
    return rc;
}

/* An optional boolean OBJ[key]: absent or null gives def. */
static int opt_bool(struct json_load *L, json_t *obj, const char *where, const char *key, int def, int *out)
{
    json_t *v = json_object_get(obj, key);
    *out = def;
    if (!v || json_is_null(v))
        return RA_OK;
    if (!json_is_boolean(v))
        return ra_error_set(RA_EFORMAT, "%s: %s.%s is not true or false", L->path, where, key);
    *out = json_is_true(v);
    return RA_OK;
}

/* An id: an integer in [0, RA_BPE_MAX_TOKENS). */
static int get_id(struct json_load *L, json_t *v, const char *what, int32_t *id)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= RA_BPE_MAX_TOKENS)
        return ra_error_set(RA_EFORMAT, "%s: %s is not an id from 0 to %d", L->path, what, RA_BPE_MAX_TOKENS - 1);
    *id = (int32_t)json_integer_value(v);
    return RA_OK;
}

/* ------------------------------------------------------------------ model */

/* The BPE options HF has that byte-level vocabularies leave off: refused when on. */
static int model_options(struct json_load *L)
{
    json_t *type = json_object_get(L->model, "type"), *v;
    int on, rc;
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0))
        return ra_error_set(RA_EUNSUPPORTED, "%s: model.type is '%s': only BPE models are read", L->path,
                            json_is_string(type) ? ra_esc(json_string_value(type)) : "(not a string)");
    if ((rc = opt_bool(L, L->model, "model", "byte_fallback", 0, &on)) != RA_OK)
        return rc;
    if (on)
        return ra_error_set(RA_EUNSUPPORTED, "%s: model.byte_fallback is true: a SentencePiece-style BPE, not "
                            "byte-level", L->path);
    static const char *const affixes[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (int i = 0; i < 2; i++) {
        v = json_object_get(L->model, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return ra_error_set(RA_EUNSUPPORTED, "%s: model.%s is set: not supported", L->path, affixes[i]);
    }
    v = json_object_get(L->model, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
        return ra_error_set(RA_EUNSUPPORTED, "%s: model.dropout is set: not supported", L->path);
    if ((rc = opt_bool(L, L->model, "model", "fuse_unk", 0, &L->o.fuse_unk)) != RA_OK ||
        (rc = opt_bool(L, L->model, "model", "ignore_merges", 0, &L->o.ignore_merges)) != RA_OK)
        return rc;
    return RA_OK;
}

/* The largest id of model.vocab and added_tokens, checked: n_tokens is one more. */
static int count_tokens(struct json_load *L, json_t *added)
{
    const char *key;
    json_t *v;
    int32_t id, max = -1;
    int rc;
    if (!json_is_object(L->vocab) || json_object_size(L->vocab) == 0)
        return ra_error_set(RA_EFORMAT, "%s: model.vocab is missing or empty", L->path);
    if (json_object_size(L->vocab) > RA_BPE_MAX_TOKENS)
        return ra_error_set(RA_ERANGE, "%s: model.vocab has %zu tokens (at most %d)", L->path,
                            json_object_size(L->vocab), RA_BPE_MAX_TOKENS);
    json_object_foreach(L->vocab, key, v) {
        if ((rc = get_id(L, v, "a model.vocab value", &id)) != RA_OK)
            return rc;
        max = id > max ? id : max;
    }
    if (added && !json_is_null(added) && !json_is_array(added))
        return ra_error_set(RA_EFORMAT, "%s: added_tokens is not an array", L->path);
    if (json_array_size(added) > RA_BPE_MAX_TOKENS)
        return ra_error_set(RA_ERANGE, "%s: %zu added tokens (at most %d)", L->path, json_array_size(added),
                            RA_BPE_MAX_TOKENS);
    for (size_t i = 0; i < json_array_size(added); i++) {
        if ((rc = get_id(L, json_object_get(json_array_get(added, i), "id"), "an added token's id", &id)) != RA_OK)
            return rc;
        max = id > max ? id : max;
    }
    L->n_tokens = max + 1;
    return RA_OK;
}

static int fill_vocab(struct json_load *L)
{
    const char *key;
    json_t *v;
    json_object_foreach(L->vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (L->tokens[id])
            return ra_error_set(RA_EFORMAT, "%s: model.vocab gives id %d to both '%s' and '%s'", L->path, (int)id,
                                ra_esc(L->tokens[id]), ra_esc(key));
        L->tokens[id] = key;
    }
    return RA_OK;
}

/* One entry of added_tokens: a special token (lstrip, rstrip; "special": false
 * makes it an added token matched after the special ones). */
static int added_token(struct json_load *L, json_t *t, int i)
{
    json_t *content = json_object_get(t, "content");
    int32_t id = (int32_t)json_integer_value(json_object_get(t, "id"));
    int special, lstrip, rstrip, single_word, rc;
    if (!json_is_string(content) || json_string_length(content) == 0)
        return ra_error_set(RA_EFORMAT, "%s: added_tokens[%d].content is not a non-empty string", L->path, i);
    const char *text = json_string_value(content);
    char where[40];
    snprintf(where, sizeof where, "added_tokens[%d]", i);
    if ((rc = opt_bool(L, t, where, "special", 0, &special)) != RA_OK ||
        (rc = opt_bool(L, t, where, "lstrip", 0, &lstrip)) != RA_OK ||
        (rc = opt_bool(L, t, where, "rstrip", 0, &rstrip)) != RA_OK ||
        (rc = opt_bool(L, t, where, "single_word", 0, &single_word)) != RA_OK)
        return rc;
    if (single_word)
        return ra_error_set(RA_EUNSUPPORTED, "%s: added token '%s' is single_word: not supported", L->path,
                            ra_esc(text));
    if (L->tokens[id] && strcmp(L->tokens[id], text) != 0)
        return ra_error_set(RA_EFORMAT, "%s: added token '%s' has id %d, which model.vocab gives to '%s'", L->path,
                            ra_esc(text), (int)id, ra_esc(L->tokens[id]));
    L->tokens[id] = text;
    L->special_ids[L->n_special] = id;
    L->special_flags[L->n_special++] = (unsigned char)((lstrip ? RA_BPE_LSTRIP : 0) | (rstrip ? RA_BPE_RSTRIP : 0) |
                                                       (special ? 0 : RA_BPE_ADDED));
    return RA_OK;
}

static int read_tokens(struct json_load *L)
{
    json_t *added = json_object_get(L->root, "added_tokens");
    int rc;
    L->vocab = json_object_get(L->model, "vocab");
    if ((rc = count_tokens(L, added)) != RA_OK)
        return rc;
    size_t n_added = json_array_size(added);
    L->tokens = calloc((size_t)L->n_tokens, sizeof *L->tokens);
    L->special_ids = malloc(sizeof *L->special_ids * (n_added ? n_added : 1));
    L->special_flags = malloc(n_added ? n_added : 1);
    if (!L->tokens || !L->special_ids || !L->special_flags)
        return ra_error_set(RA_ENOMEM, "%s: out of memory for %d tokens", L->path, L->n_tokens);
    if ((rc = fill_vocab(L)) != RA_OK)
        return rc;
    for (size_t i = 0; i < n_added; i++)
        if ((rc = added_token(L, json_array_get(added, i), (int)i)) != RA_OK)
            return rc;
    return RA_OK;
}

/* model.merges: all "a b" strings, or all [a, b] pairs of strings. */
static int read_merges(struct json_load *L)
{
    json_t *merges = json_object_get(L->model, "merges");
    if (!merges || json_is_null(merges))
        return ra_error_set(RA_EFORMAT, "%s: model.merges is missing: a BPE tokenizer needs its merges", L->path);
    if (!json_is_array(merges) || json_array_size(merges) == 0)
        return ra_error_set(RA_EFORMAT, "%s: model.merges is %s: a BPE tokenizer needs its merges", L->path,
                            json_is_array(merges) ? "empty" : "not an array");
    if (json_array_size(merges) > RA_BPE_MAX_MERGES)
        return ra_error_set(RA_ERANGE, "%s: %zu merges (at most %d)", L->path, json_array_size(merges),
                            RA_BPE_MAX_MERGES);
    L->n_merges = (int)json_array_size(merges);
    L->pairs = json_is_array(json_array_get(merges, 0));
    if (!L->pairs && !json_is_string(json_array_get(merges, 0)))
        return ra_error_set(RA_EFORMAT, "%s: model.merges[0] is neither a string \"a b\" nor a pair of strings",
                            L->path);
    if (!(L->merges = malloc(sizeof *L->merges * (size_t)L->n_merges * (L->pairs ? 2 : 1))))
        return ra_error_set(RA_ENOMEM, "%s: out of memory for %d merges", L->path, L->n_merges);
    for (int r = 0; r < L->n_merges; r++) {
        json_t *m = json_array_get(merges, (size_t)r);
        if (L->pairs && json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
            json_is_string(json_array_get(m, 1))) {
            L->merges[2 * r] = json_string_value(json_array_get(m, 0));
            L->merges[2 * r + 1] = json_string_value(json_array_get(m, 1));
        } else if (!L->pairs && json_is_string(m)) {
            L->merges[r] = json_string_value(m);
        } else {
            return ra_error_set(RA_EFORMAT, "%s: model.merges[%d] is not %s, as merges[0] is", L->path, r,
                                L->pairs ? "a pair of strings" : "a string \"a b\"");
        }
    }
    return RA_OK;
}

static int read_unk(struct json_load *L)
{
    json_t *unk = json_object_get(L->model, "unk_token");
    if (!unk || json_is_null(unk))
        return RA_OK;
    json_t *id = json_is_string(unk) ? json_object_get(L->vocab, json_string_value(unk)) : NULL;
    if (!id)
        return ra_error_set(RA_EFORMAT, "%s: model.unk_token '%s' is not in model.vocab", L->path,
                            json_is_string(unk) ? ra_esc(json_string_value(unk)) : "(not a string)");
    L->o.unk_id = (int32_t)json_integer_value(id);
    return RA_OK;
}

/* ------------------------------------------------------------------ pre-tokenizer */

/* The regexes a pre_tokenizer splits by, in order, and what it is in words. */
struct pre_parse {
    const char *re[4];
    int n, ok, byte_level;
    char desc[600];
    size_t d;
};

static void describe(struct pre_parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void describe(struct pre_parse *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->desc + p->d, sizeof p->desc - p->d, fmt, ap);
    va_end(ap);
    if (n > 0)
        p->d = p->d + (size_t)n < sizeof p->desc ? p->d + (size_t)n : sizeof p->desc - 1;
}

static void add_regex(struct pre_parse *p, const char *re)
{
    if (p->n < 4)
        p->re[p->n++] = re;
    else
        p->ok = 0;
}

static const char *bool_text(json_t *v)
{
    return !v || json_is_null(v) ? "absent" : json_is_true(v) ? "true" : json_is_false(v) ? "false" : "?";
}

/* One pre-tokenizer of the sequence; the ByteLevel one must be the last. */
static void pre_item(struct pre_parse *p, json_t *item, int last)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!type) {
        describe(p, "(no type)");
        p->ok = 0;
    } else if (strcmp(type, "ByteLevel") == 0) {
        json_t *prefix = json_object_get(item, "add_prefix_space"), *use = json_object_get(item, "use_regex");
        describe(p, "ByteLevel(add_prefix_space=%s, use_regex=%s)", bool_text(prefix), bool_text(use));
        p->ok &= last && json_is_false(prefix);
        p->byte_level = 1;
        if (!use || json_is_null(use) || json_is_true(use)) /* HF's default: true */
            add_regex(p, ra_bpe_pre_regex("gpt-2", 0));
    } else if (strcmp(type, "Digits") == 0) {
        json_t *single = json_object_get(item, "individual_digits");
        describe(p, "Digits(individual_digits=%s)", bool_text(single));
        p->ok &= json_is_true(single); /* runs of digits (false) are no known pre-tokenizer's */
        add_regex(p, ra_bpe_pre_regex("smollm", 0));
    } else if (strcmp(type, "Split") == 0) {
        const char *re = json_string_value(json_object_get(json_object_get(item, "pattern"), "Regex"));
        const char *behavior = json_string_value(json_object_get(item, "behavior"));
        json_t *invert = json_object_get(item, "invert");
        describe(p, "Split(%s \"%s\", %s, invert=%s)", re ? "Regex" : "pattern", re ? ra_esc(re) : "(not a regex)",
                 behavior ? ra_esc(behavior) : "(no behavior)", bool_text(invert));
        p->ok &= re && behavior && strcmp(behavior, "Isolated") == 0 && !json_is_true(invert);
        add_regex(p, re);
    } else {
        describe(p, "%s", ra_esc(type));
        p->ok = 0;
    }
}

/* pre_tokenizer: one of the known byte-level pre-tokenizers, by its regexes. */
static int read_pre(struct json_load *L)
{
    json_t *pre = json_object_get(L->root, "pre_tokenizer"), *list = pre;
    struct pre_parse p = { .ok = 1 };
    const char *type = json_string_value(json_object_get(pre, "type"));
    int seq = type && strcmp(type, "Sequence") == 0;
    if (!json_is_object(pre))
        return ra_error_set(RA_EUNSUPPORTED, "%s: pre_tokenizer is %s: not a byte-level BPE", L->path,
                            pre && !json_is_null(pre) ? "not an object" : "missing");
    if (seq) {
        list = json_object_get(pre, "pretokenizers");
        describe(&p, "Sequence[");
    }
    size_t n = seq ? json_array_size(list) : 1;
    for (size_t i = 0; i < n; i++) {
        if (i)
            describe(&p, ", ");
        pre_item(&p, seq ? json_array_get(list, i) : pre, i + 1 == n);
    }
    if (seq)
        describe(&p, "]");
    L->o.pre = p.ok && p.byte_level ? ra_bpe_pre_find(p.re, p.n) : NULL;
    if (!L->o.pre)
        return ra_error_set(RA_EUNSUPPORTED, "%s: pre_tokenizer %s is not a known byte-level pre-tokenizer (gpt-2: "
                            "ByteLevel; smollm: Digits + ByteLevel; llama-bpe, qwen2: Split with their regex + "
                            "ByteLevel)", L->path, p.desc);
    return RA_OK;
}

/* normalizer: none, or NFC (accepted, not applied: see tokenizer_bpe.h). */
static int read_normalizer(struct json_load *L)
{
    json_t *norm = json_object_get(L->root, "normalizer");
    const char *type = json_string_value(json_object_get(norm, "type"));
    if (!norm || json_is_null(norm) || (type && strcmp(type, "NFC") == 0))
        return RA_OK;
    if (type && strcmp(type, "Sequence") == 0 && json_array_size(json_object_get(norm, "normalizers")) == 0)
        return RA_OK;
    return ra_error_set(RA_EUNSUPPORTED, "%s: normalizer %s is not supported (none or NFC)", L->path,
                        type ? ra_esc(type) : "(no type)");
}

/* ------------------------------------------------------------------ post-processor */

/* The id of a TemplateProcessing item {"SpecialToken": {"id": NAME}}: special_tokens[NAME].ids[0]. */
static int template_token(struct json_load *L, json_t *pp, json_t *item, int32_t *id)
{
    const char *name = json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
    json_t *ids = name ? json_object_get(json_object_get(json_object_get(pp, "special_tokens"), name), "ids") : NULL;
    if (!name)
        return ra_error_set(RA_EUNSUPPORTED, "%s: post_processor TemplateProcessing: \"single\" holds an item that "
                            "is neither $A nor a special token", L->path);
    if (json_array_size(ids) != 1)
        return ra_error_set(RA_EFORMAT, "%s: post_processor TemplateProcessing: special_tokens['%s'].ids is not "
                            "one id", L->path, ra_esc(name));
    return get_id(L, json_array_get(ids, 0), "a post_processor special token's id", id);
}

static int is_sequence_a(json_t *item)
{
    const char *id = json_string_value(json_object_get(json_object_get(item, "Sequence"), "id"));
    return id && strcmp(id, "A") == 0;
}

/* TemplateProcessing's "single": [BOS] $A [EOS], each special token optional. */
static int read_template(struct json_load *L, json_t *pp)
{
    json_t *single = json_object_get(pp, "single");
    size_t n = json_array_size(single), a = 0;
    int rc;
    while (a < n && !is_sequence_a(json_array_get(single, a)))
        a++;
    if (a == n || a > 1 || n - a > 2)
        return ra_error_set(RA_EUNSUPPORTED, "%s: post_processor TemplateProcessing: \"single\" is not [BOS] $A "
                            "[EOS]", L->path);
    if (a == 1) {
        if ((rc = template_token(L, pp, json_array_get(single, 0), &L->o.bos_id)) != RA_OK)
            return rc;
        L->o.add_bos = 1;
    }
    if (n - a == 2) {
        if ((rc = template_token(L, pp, json_array_get(single, a + 1), &L->o.eos_id)) != RA_OK)
            return rc;
        L->o.add_eos = 1;
    }
    return RA_OK;
}

/* post_processor: none, ByteLevel (offsets only), TemplateProcessing, or a Sequence of them. */
static int read_post(struct json_load *L, json_t *pp, int depth)
{
    const char *type = json_string_value(json_object_get(pp, "type"));
    int rc;
    if (!pp || json_is_null(pp) || (type && strcmp(type, "ByteLevel") == 0))
        return RA_OK;
    if (type && strcmp(type, "TemplateProcessing") == 0)
        return read_template(L, pp);
    if (type && strcmp(type, "Sequence") == 0 && depth < 4) {
        json_t *list = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(list); i++)
            if ((rc = read_post(L, json_array_get(list, i), depth + 1)) != RA_OK)
                return rc;
        return RA_OK;
    }
    return ra_error_set(RA_EUNSUPPORTED, "%s: post_processor %s is not supported (ByteLevel, TemplateProcessing "
                        "or a Sequence of them)", L->path, type ? ra_esc(type) : "(no type)");
}

/* ------------------------------------------------------------------ the whole file */

int ra_bpe_load_json(struct ra_bpe *b, const char *path)
{
    struct json_load L = { .path = path, .o = RA_BPE_OPTIONS_INIT };
    int rc;
    memset(b, 0, sizeof *b);
    if ((rc = read_json(path, &L.root)) != RA_OK)
        goto cleanup;
    L.model = json_object_get(L.root, "model");
    if (!json_is_object(L.model)) {
        rc = ra_error_set(RA_EFORMAT, "%s: no \"model\" object: not a tokenizer.json", path);
        goto cleanup;
    }
    if ((rc = model_options(&L)) != RA_OK || (rc = read_tokens(&L)) != RA_OK || (rc = read_merges(&L)) != RA_OK ||
        (rc = read_unk(&L)) != RA_OK || (rc = read_pre(&L)) != RA_OK || (rc = read_normalizer(&L)) != RA_OK ||
        (rc = read_post(&L, json_object_get(L.root, "post_processor"), 0)) != RA_OK)
        goto cleanup;
    L.o.source = path;
    L.o.special_ids = L.special_ids;
    L.o.special_flags = L.special_flags;
    L.o.n_special = L.n_special;
    rc = L.pairs ? ra_bpe_init_pairs(b, L.tokens, L.n_tokens, L.merges, L.n_merges, &L.o)
                 : ra_bpe_init(b, L.tokens, L.n_tokens, L.merges, L.n_merges, &L.o);
cleanup:
    free(L.tokens);
    free(L.merges);
    free(L.special_ids);
    free(L.special_flags);
    json_decref(L.root);
    return rc;
}
