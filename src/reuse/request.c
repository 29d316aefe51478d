/* A request made of chunks (request.h): the JSON file parsed with jansson,
 * each part encoded on its own, the chat template's text around them cut out
 * of one rendering with sentinel contents. */
#include "reuse/request.h"

#include "chat.h"
#include "prompt.h"
#include "status.h"
#include "vocab.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stand-ins for the system and user contents in the rendering: no
 * whitespace at their ends (templates strip contents), no template text. */
#define SYS_SENTINEL "\x01ra-request-system\x01"
#define USER_SENTINEL "\x01ra-request-user\x01"

/* One part of a request (system, a chunk, the question): its text or its ids. */
struct part {
    char *text; /* malloc'ed, or NULL when the part is ids */
    size_t len;
    int32_t *ids;
    int n;
};

static void part_free(struct part *p)
{
    free(p->text);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

/* A growing id list. */
struct idbuf {
    int32_t *ids;
    int n, cap;
};

static int idbuf_put(struct idbuf *b, const int32_t *ids, int n)
{
    if (n > INT_MAX / 2 - b->n)
        return ra_error_set(RA_ERANGE, "a request of more than %d tokens", INT_MAX / 2);
    if (b->n + n > b->cap) {
        int cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        int32_t *p = realloc(b->ids, sizeof *p * (size_t)cap);
        if (!p)
            return ra_error_set(RA_ENOMEM, "out of memory for %d request tokens", cap);
        b->ids = p, b->cap = cap;
    }
    if (n > 0)
        memcpy(b->ids + b->n, ids, sizeof *ids * (size_t)n);
    b->n += n;
    return RA_OK;
}

/* Appends TEXT[len] encoded with FLAGS. */
static int idbuf_encode(struct idbuf *b, const struct ra_vocab *v, const char *text, size_t len, unsigned flags)
{
    int32_t *ids = NULL;
    int n = 0;
    if (len == 0 && !(flags & RA_VOCAB_ADD_SPECIAL))
        return RA_OK;
    int rc = ra_vocab_encode(v, text, len, flags, &ids, &n);
    if (rc == RA_OK)
        rc = idbuf_put(b, ids, n);
    free(ids);
    return rc;
}

/* ------------------------------------------------------------- parsing */

/* {"ids": [...]}: non-negative integers, below the vocabulary's size when
 * there is one, at least one. */
static int parse_ids(const char *path, const char *what, json_t *arr, const struct ra_vocab *v, struct part *p)
{
    size_t i, n = json_array_size(arr);
    json_t *e;
    if (!json_is_array(arr) || n == 0)
        return ra_error_set(RA_EFORMAT, "%s: %s: \"ids\" is not a non-empty array of token ids", path, what);
    if (n > (size_t)INT_MAX / 2)
        return ra_error_set(RA_ERANGE, "%s: %s: %zu ids", path, what, n);
    if (!(p->ids = malloc(sizeof *p->ids * n)))
        return ra_error_set(RA_ENOMEM, "%s: %s: out of memory", path, what);
    json_array_foreach(arr, i, e) {
        json_int_t id = json_integer_value(e);
        const json_int_t limit = v ? v->n_tokens : INT32_MAX;
        if (!json_is_integer(e) || id < 0 || id >= limit) {
            char lim[48] = "";
            if (v)
                snprintf(lim, sizeof lim, " (the vocabulary has %d)", v->n_tokens);
            return ra_error_set(v && json_is_integer(e) ? RA_ERANGE : RA_EFORMAT,
                                "%s: %s: id %zu is not a token id%s", path, what, i, lim);
        }
        p->ids[i] = (int32_t)id;
    }
    p->n = (int)n;
    return RA_OK;
}

/* The directory part of PATH ("" for a bare name), into DIR. */
static int dir_of(const char *path, char **dir)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) + 1 : 0;
    if (!(*dir = malloc(n + 1)))
        return ra_error_set(RA_ENOMEM, "out of memory");
    memcpy(*dir, path, n);
    (*dir)[n] = '\0';
    return RA_OK;
}

/* {"file": NAME}: NAME relative to the request's directory. */
static int read_chunk_file(const char *path, const char *what, const char *name, struct part *p)
{
    char *dir = NULL, *full = NULL;
    int rc = dir_of(path, &dir);
    if (rc != RA_OK)
        return rc;
    if (!*name)
        rc = ra_error_set(RA_EFORMAT, "%s: %s: \"file\" is empty", path, what);
    else if (!(full = malloc(strlen(dir) + strlen(name) + 1)))
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    else {
        strcpy(full, name[0] == '/' ? "" : dir);
        strcat(full, name);
        if ((rc = ra_read_file(full, &p->text, &p->len)) != RA_OK)
            rc = ra_error_set(rc, "%s: %s: %s", path, what, ra_error_message());
    }
    free(full);
    free(dir);
    return rc;
}

/* A part: a string, {"ids": [...]} or (chunks only) {"file": NAME}; nothing else. */
static int parse_part(const char *path, const char *what, json_t *j, int allow_file, const struct ra_vocab *v,
                      struct part *p)
{
    memset(p, 0, sizeof *p);
    if (json_is_string(j)) {
        p->len = json_string_length(j);
        if (!(p->text = malloc(p->len + 1)))
            return ra_error_set(RA_ENOMEM, "out of memory");
        memcpy(p->text, json_string_value(j), p->len + 1);
        if (memchr(p->text, '\0', p->len))
            return ra_error_set(RA_EFORMAT, "%s: %s: the text holds a NUL character", path, what);
    } else if (json_is_object(j) && json_object_size(j) == 1 && json_object_get(j, "ids")) {
        return parse_ids(path, what, json_object_get(j, "ids"), v, p);
    } else if (allow_file && json_is_object(j) && json_object_size(j) == 1 &&
               json_is_string(json_object_get(j, "file"))) {
        int rc = read_chunk_file(path, what, json_string_value(json_object_get(j, "file")), p);
        if (rc != RA_OK)
            return rc;
        if (memchr(p->text, '\0', p->len))
            return ra_error_set(RA_EFORMAT, "%s: %s: the file holds a NUL byte", path, what);
    } else {
        return ra_error_set(RA_EFORMAT, "%s: %s is not a text%s or {\"ids\": [...]}", path, what,
                            allow_file ? ", {\"file\": NAME}" : "");
    }
    if (!v)
        return ra_error_set(RA_EINVAL, "%s: %s is text, but the model has no tokenizer: give {\"ids\": [...]}", path,
                            what);
    return RA_OK;
}

/* The request's parts, as the file gives them. */
struct parts {
    struct part system, question, *chunks;
    int has_system, n_chunks;
    char **names;
};

static void parts_free(struct parts *ps)
{
    part_free(&ps->system);
    part_free(&ps->question);
    for (int c = 0; c < ps->n_chunks; c++)
        part_free(&ps->chunks[c]);
    free(ps->chunks);
    memset(ps, 0, sizeof *ps);
}

/* "PATH: chunk C" or "PATH: chunk C (NAME)", malloc'ed. */
static char *chunk_name(const char *path, size_t c, json_t *j)
{
    const char *file = json_is_object(j) ? json_string_value(json_object_get(j, "file")) : NULL;
    const char *f = file ? ra_esc(file) : "";
    size_t n = strlen(path) + strlen(f) + 48;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, file ? "%s: chunk %zu (%s)" : "%s: chunk %zu", path, c, f);
    return s;
}

static int parse_chunks(const char *path, json_t *arr, const struct ra_vocab *v, struct parts *ps, char **names)
{
    size_t c;
    json_t *j;
    json_array_foreach(arr, c, j) {
        char what[48];
        snprintf(what, sizeof what, "chunk %zu", c);
        if (!(names[c] = chunk_name(path, c, j)))
            return ra_error_set(RA_ENOMEM, "out of memory");
        int rc = parse_part(path, what, j, 1, v, &ps->chunks[c]);
        ps->n_chunks = (int)c + 1;
        if (rc != RA_OK)
            return rc;
    }
    return RA_OK;
}

/* The whole object: "system" (optional), "chunks" (an array, may be empty
 * or absent), "question"; any other key is a mistake worth naming. */
static int parse_request(const char *path, json_t *root, const struct ra_vocab *v, struct parts *ps, char ***names)
{
    const char *key;
    json_t *val, *chunks = json_object_get(root, "chunks");
    int rc;
    if (!json_is_object(root))
        return ra_error_set(RA_EFORMAT, "%s: not a JSON object {\"system\", \"chunks\", \"question\"}", path);
    json_object_foreach(root, key, val)
        if (strcmp(key, "system") && strcmp(key, "chunks") && strcmp(key, "question"))
            return ra_error_set(RA_EFORMAT, "%s: unknown key '%s' (a request has \"system\", \"chunks\" and "
                                "\"question\")", path, key);
    if (!json_object_get(root, "question"))
        return ra_error_set(RA_EFORMAT, "%s: no \"question\"", path);
    if (chunks && !json_is_array(chunks))
        return ra_error_set(RA_EFORMAT, "%s: \"chunks\" is not an array", path);
    size_t n = json_array_size(chunks);
    if (n > 1000000)
        return ra_error_set(RA_ERANGE, "%s: %zu chunks (at most 1000000)", path, n);
    if (!(ps->chunks = calloc(n + 1, sizeof *ps->chunks)) || !(*names = calloc(n + 1, sizeof **names)))
        return ra_error_set(RA_ENOMEM, "out of memory");
    if ((ps->has_system = json_object_get(root, "system") != NULL) &&
        (rc = parse_part(path, "\"system\"", json_object_get(root, "system"), 0, v, &ps->system)) != RA_OK)
        return rc;
    if ((rc = parse_chunks(path, chunks, v, ps, *names)) != RA_OK)
        return rc;
    return parse_part(path, "\"question\"", json_object_get(root, "question"), 0, v, &ps->question);
}

/* ------------------------------------------------------------- rendering */

/* The template's text around the contents: PRE before the system content
 * (or the user's, without a system message), MID between them, POST after
 * the user content. Each malloc'ed; all "" without a template. */
struct frame {
    char *pre, *mid, *post;
};

static void frame_free(struct frame *f)
{
    free(f->pre);
    free(f->mid);
    free(f->post);
    memset(f, 0, sizeof *f);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Where the sentinel S is in TEXT, found exactly once after FROM. */
static const char *find_once(const char *text, const char *from, const char *s)
{
    const char *p = strstr(from, s);
    if (!p || strstr(p + 1, s) || strstr(text, s) != p)
        return NULL;
    return p;
}

static int cut_frame(const char *tmpl, const char *text, int has_system, struct frame *f)
{
    const char *u = find_once(text, text, USER_SENTINEL);
    const char *s = has_system ? find_once(text, text, SYS_SENTINEL) : u;
    if (!u || !s || s > u)
        return ra_error_set(RA_EFORMAT, "chat template '%.40s...': the rendering does not hold the contents in "
                            "order, so a request cannot be cut into parts", ra_esc(tmpl));
    const char *mid = has_system ? s + strlen(SYS_SENTINEL) : u;
    const char *post = u + strlen(USER_SENTINEL);
    f->pre = dup_n(text, (size_t)(s - text));
    f->mid = dup_n(mid, (size_t)(u - mid));
    f->post = dup_n(post, strlen(post));
    if (!f->pre || !f->mid || !f->post)
        return ra_error_set(RA_ENOMEM, "out of memory");
    return RA_OK;
}

/* Renders [system (if any), user] with sentinel contents and cuts it. */
static int render_frame(const struct ra_vocab *v, const char *tmpl, int has_system, struct frame *f)
{
    struct ra_chat chat = { 0 };
    char bos[256] = "", eos[256] = "", *text = NULL;
    int rc = RA_OK;
    memset(f, 0, sizeof *f);
    if (!tmpl || !*tmpl) {
        f->pre = strdup(""), f->mid = strdup(""), f->post = strdup("");
        return f->pre && f->mid && f->post ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    }
    if (has_system)
        rc = ra_chat_add(&chat, "system", SYS_SENTINEL);
    if (rc == RA_OK)
        rc = ra_chat_add(&chat, "user", USER_SENTINEL);
    if (rc == RA_OK && v && v->bos_id >= 0)
        rc = ra_vocab_token_text(v, v->bos_id, bos, sizeof bos);
    if (rc == RA_OK && v && v->eos_id >= 0)
        rc = ra_vocab_token_text(v, v->eos_id, eos, sizeof eos);
    if (rc == RA_OK)
        rc = ra_chat_render(tmpl, v ? v->path : "chat template", &chat, bos, eos, &text);
    if (rc == RA_OK)
        rc = cut_frame(tmpl, text, has_system, f);
    free(text);
    ra_chat_free(&chat);
    return rc;
}

/* Appends part P: its ids, or its text encoded alone (no BOS, special
 * tokens not parsed: a document's text is data, not markup). */
static int put_part(struct idbuf *b, const struct ra_vocab *v, const struct part *p)
{
    return p->text ? idbuf_encode(b, v, p->text, p->len, 0) : idbuf_put(b, p->ids, p->n);
}

/* The template's own text: its special tokens parsed, nothing added. */
static int put_frame(struct idbuf *b, const struct ra_vocab *v, const char *text)
{
    if (!*text)
        return RA_OK;
    if (!v)
        return ra_error_set(RA_EINVAL, "a chat template needs a vocabulary");
    return idbuf_encode(b, v, text, strlen(text), RA_VOCAB_PARSE_SPECIAL);
}

/* The leading prefix: without a template BOS (where the vocabulary adds
 * it) and the system part; with one, the template's text around the system
 * part up to the user content. */
static int put_prefix(struct idbuf *b, const struct ra_vocab *v, const char *tmpl, const struct frame *f,
                      const struct part *system)
{
    int rc = RA_OK;
    if ((!tmpl || !*tmpl) && v && v->add_bos && v->bos_id >= 0)
        rc = idbuf_put(b, &v->bos_id, 1);
    if (rc == RA_OK)
        rc = put_frame(b, v, f->pre);
    if (rc == RA_OK && system)
        rc = put_part(b, v, system);
    if (rc == RA_OK)
        rc = put_frame(b, v, f->mid);
    return rc;
}

static int build(struct ra_request *r, const char *path, const struct ra_vocab *v, const char *tmpl,
                 const struct parts *ps)
{
    struct frame f = { 0 };
    struct idbuf b = { 0 };
    int rc = render_frame(v, tmpl, ps->has_system, &f);
    if (rc == RA_OK)
        rc = put_prefix(&b, v, tmpl, &f, ps->has_system ? &ps->system : NULL);
    r->n_prefix = b.n;
    for (int c = 0; rc == RA_OK && c < ps->n_chunks; c++) {
        r->chunk_start[c] = b.n;
        if ((rc = put_part(&b, v, &ps->chunks[c])) == RA_OK && (r->chunk_len[c] = b.n - r->chunk_start[c]) == 0)
            rc = ra_error_set(RA_EFORMAT, "%s: the chunk is empty (no tokens)", r->chunk_name[c]);
    }
    r->suffix_start = b.n;
    if (rc == RA_OK && (rc = put_part(&b, v, &ps->question)) == RA_OK && b.n == r->suffix_start)
        rc = ra_error_set(RA_EFORMAT, "%s: the question is empty (no tokens)", path);
    if (rc == RA_OK)
        rc = put_frame(&b, v, f.post);
    r->ids = b.ids;
    r->n = b.n;
    frame_free(&f);
    return rc;
}

int ra_request_load(struct ra_request *r, const char *path, const struct ra_vocab *v, const char *tmpl)
{
    struct parts ps = { 0 };
    json_error_t err;
    char *text = NULL;
    size_t len = 0;
    memset(r, 0, sizeof *r);
    int rc = ra_read_file(path, &text, &len);
    if (rc != RA_OK)
        return rc;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    free(text);
    if (!root)
        return ra_error_set(RA_EFORMAT, "%s: line %d: %s", path, err.line, err.text);
    rc = parse_request(path, root, v, &ps, &r->chunk_name);
    json_decref(root);
    r->n_chunks = ps.n_chunks;
    if (rc == RA_OK && (!(r->chunk_start = calloc((size_t)ps.n_chunks + 1, sizeof *r->chunk_start)) ||
                        !(r->chunk_len = calloc((size_t)ps.n_chunks + 1, sizeof *r->chunk_len))))
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    if (rc == RA_OK)
        rc = build(r, path, v, tmpl, &ps);
    parts_free(&ps);
    if (rc != RA_OK)
        ra_request_free(r);
    return rc;
}

void ra_request_free(struct ra_request *r)
{
    if (r->chunk_name)
        for (int c = 0; c < r->n_chunks; c++)
            free(r->chunk_name[c]);
    free(r->chunk_name);
    free(r->ids);
    free(r->chunk_start);
    free(r->chunk_len);
    memset(r, 0, sizeof *r);
}

int ra_request_prefix(const struct ra_vocab *v, const char *tmpl, const char *system, int32_t **ids, int *n)
{
    struct frame f = { 0 };
    struct idbuf b = { 0 };
    struct part sys = { .text = (char *)system, .len = system ? strlen(system) : 0 };
    *ids = NULL, *n = 0;
    if (system && !v)
        return ra_error_set(RA_EINVAL, "a system text needs a vocabulary");
    int rc = render_frame(v, tmpl, system != NULL, &f);
    if (rc == RA_OK)
        rc = put_prefix(&b, v, tmpl, &f, system ? &sys : NULL);
    frame_free(&f);
    if (rc != RA_OK) {
        free(b.ids);
        return rc;
    }
    *ids = b.ids, *n = b.n;
    return RA_OK;
}

int ra_request_encode_chunk(const struct ra_vocab *v, const char *text, int32_t **ids, int *n)
{
    *ids = NULL, *n = 0;
    if (!v)
        return ra_error_set(RA_EINVAL, "a chunk's text needs a vocabulary");
    int rc = ra_vocab_encode(v, text, strlen(text), 0, ids, n);
    if (rc == RA_OK && *n == 0) {
        free(*ids);
        *ids = NULL;
        rc = ra_error_set(RA_EFORMAT, "the chunk is empty (no tokens)");
    }
    return rc;
}
