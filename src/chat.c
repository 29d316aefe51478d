/* Chat templates by family (see chat.h): recognition by substrings and the
 * rendering each family's Jinja template gives. */
#include "chat.h"

#include "prompt.h"
#include "status.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- messages */

int ra_chat_add(struct ra_chat *c, const char *role, const char *content)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        struct ra_chat_message *m = realloc(c->messages, sizeof *m * (size_t)cap);
        if (!m)
            return ra_error_set(RA_ENOMEM, "out of memory for %d chat messages", cap);
        c->messages = m, c->cap = cap;
    }
    char *r = strdup(role), *t = strdup(content);
    if (!r || !t) {
        free(r);
        free(t);
        return ra_error_set(RA_ENOMEM, "out of memory for a chat message");
    }
    c->messages[c->n++] = (struct ra_chat_message){ r, t };
    return RA_OK;
}

int ra_chat_load_json(struct ra_chat *c, const char *path)
{
    json_error_t err;
    char *text = NULL;
    size_t i, len = 0;
    int rc = ra_read_file(path, &text, &len); /* a regular file only: a FIFO is refused, not read */
    if (rc != RA_OK)
        return rc;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err), *m;
    free(text);
    if (!root)
        return ra_error_set(RA_EFORMAT, "%s: line %d: %s", path, err.line, err.text);
    if (!json_is_array(root) || json_array_size(root) == 0)
        rc = ra_error_set(RA_EFORMAT, "%s: not a non-empty JSON array of {\"role\", \"content\"} messages", path);
    json_array_foreach(root, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (rc != RA_OK)
            break;
        if (!json_is_object(m) || !role || !content || !*role)
            rc = ra_error_set(RA_EFORMAT, "%s: message %zu is not an object with a non-empty string \"role\" and "
                              "a string \"content\"", path, i);
        else
            rc = ra_chat_add(c, role, content);
    }
    json_decref(root);
    return rc;
}

void ra_chat_free(struct ra_chat *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->messages[i].role);
        free(c->messages[i].content);
    }
    free(c->messages);
    memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------- recognition */

enum ra_chat_format ra_chat_detect(const char *tmpl)
{
    if (strstr(tmpl, "<|im_start|>"))
        return RA_CHAT_CHATML;
    if (strstr(tmpl, "[INST]") && strstr(tmpl, "<<SYS>>"))
        return RA_CHAT_LLAMA2;
    if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|end_header_id|>") &&
        !strstr(tmpl, "Cutting Knowledge"))
        return RA_CHAT_LLAMA3;
    return RA_CHAT_UNKNOWN;
}

/* ------------------------------------------------------------- output */

struct buf {
    char *s;
    size_t n, cap;
    int failed;
};

static void put_n(struct buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void put(struct buf *b, const char *s)
{
    put_n(b, s, strlen(s));
}

/* Python's str.strip() for the ASCII whitespace it knows (see chat.h). */
static int is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static void put_stripped(struct buf *b, const char *s)
{
    size_t n = strlen(s);
    while (n > 0 && is_space((unsigned char)*s))
        s++, n--;
    while (n > 0 && is_space((unsigned char)s[n - 1]))
        n--;
    put_n(b, s, n);
}

/* ------------------------------------------------------------- ChatML */

/* The default system message a ChatML template writes out as one string
 * literal: '<|im_start|>system' and a newline (itself or "\n"), then text
 * with no quote, brace or backslash other than "\n", then '<|im_end|>'.
 * Into D (malloc'ed), or NULL when the template has none. */
static int chatml_default_system(const char *tmpl, char **d)
{
    static const char head[] = "<|im_start|>system";
    *d = NULL;
    for (const char *p = strstr(tmpl, head); p; p = strstr(p + 1, head)) {
        const char *t = p + strlen(head), *end;
        if (*t == '\n')
            t++;
        else if (t[0] == '\\' && t[1] == 'n')
            t += 2;
        else
            continue;
        if (!(end = strstr(t, "<|im_end|>")) || end == t || strcspn(t, "'\"{}") < (size_t)(end - t))
            continue;
        char *out = malloc((size_t)(end - t) + 1), *o = out;
        if (!out)
            return ra_error_set(RA_ENOMEM, "out of memory");
        for (; t < end; t++) {
            if (*t == '\\' && t + 1 < end && t[1] == 'n')
                *o++ = '\n', t++;
            else if (*t == '\\')
                break;
            else
                *o++ = *t;
        }
        if (t < end) { /* another escape: not a plain literal */
            free(out);
            continue;
        }
        *o = '\0';
        *d = out;
        return RA_OK;
    }
    return RA_OK;
}

static void chatml_message(struct buf *b, const char *role, const char *content)
{
    put(b, "<|im_start|>");
    put(b, role);
    put(b, "\n");
    put(b, content);
    put(b, "<|im_end|>\n");
}

static int render_chatml(const char *tmpl, const struct ra_chat *c, struct buf *b)
{
    char *def = NULL;
    int rc = chatml_default_system(tmpl, &def);
    if (rc != RA_OK)
        return rc;
    if (def && strcmp(c->messages[0].role, "system"))
        chatml_message(b, "system", def);
    for (int i = 0; i < c->n; i++)
        chatml_message(b, c->messages[i].role, c->messages[i].content);
    put(b, "<|im_start|>assistant\n");
    free(def);
    return RA_OK;
}

/* ------------------------------------------------------------- Llama 2 and 3 */

static int render_llama2(const char *source, const struct ra_chat *c, const char *bos, const char *eos,
                         struct buf *b)
{
    const int has_system = !strcmp(c->messages[0].role, "system");
    const struct ra_chat_message *m = c->messages + has_system;
    for (int i = 0; i < c->n - has_system; i++) {
        const int user = !strcmp(m[i].role, "user");
        if (user != (i % 2 == 0))
            return ra_error_set(RA_EINVAL, "%s: chat template: Conversation roles must alternate "
                                "user/assistant/user/assistant/... (message %d is '%s')", source, i + has_system,
                                ra_esc(m[i].role));
        struct buf content = { 0 };
        if (i == 0 && has_system) {
            put(&content, "<<SYS>>\n");
            put(&content, c->messages[0].content);
            put(&content, "\n<</SYS>>\n\n");
        }
        put(&content, m[i].content);
        if (content.failed) {
            free(content.s);
            return ra_error_set(RA_ENOMEM, "out of memory");
        }
        if (user) {
            put(b, bos);
            put(b, "[INST] ");
            put_stripped(b, content.s);
            put(b, " [/INST]");
        } else if (!strcmp(m[i].role, "assistant")) {
            put(b, " ");
            put_stripped(b, content.s);
            put(b, " ");
            put(b, eos);
        }
        free(content.s);
    }
    return RA_OK;
}

static void render_llama3(const struct ra_chat *c, const char *bos, struct buf *b)
{
    put(b, bos);
    for (int i = 0; i < c->n; i++) {
        put(b, "<|start_header_id|>");
        put(b, c->messages[i].role);
        put(b, "<|end_header_id|>\n\n");
        put_stripped(b, c->messages[i].content);
        put(b, "<|eot_id|>");
    }
    put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

int ra_chat_render(const char *tmpl, const char *source, const struct ra_chat *c, const char *bos, const char *eos,
                   char **out)
{
    struct buf b = { 0 };
    int rc = RA_OK;
    *out = NULL;
    if (c->n == 0)
        return ra_error_set(RA_EINVAL, "%s: a chat needs at least one message", source);
    switch (ra_chat_detect(tmpl)) {
    case RA_CHAT_CHATML: rc = render_chatml(tmpl, c, &b); break;
    case RA_CHAT_LLAMA2: rc = render_llama2(source, c, bos, eos, &b); break;
    case RA_CHAT_LLAMA3: render_llama3(c, bos, &b); break;
    default:
        return ra_error_set(RA_EUNSUPPORTED, "%s: unknown chat template '%.60s%s' (runahead renders ChatML, Llama 2 "
                            "and Llama 3); --prompt with the template's text written out still works", source,
                            ra_esc(tmpl), strlen(tmpl) > 60 ? "..." : "");
    }
    if (rc == RA_OK && (b.failed || !b.s))
        rc = b.failed ? ra_error_set(RA_ENOMEM, "out of memory for a chat prompt") : RA_OK;
    if (rc == RA_OK && !b.s) /* Llama 2 with nothing to write (no user or assistant message) */
        b.s = strdup("");
    if (rc != RA_OK || !b.s) {
        free(b.s);
        return rc != RA_OK ? rc : ra_error_set(RA_ENOMEM, "out of memory");
    }
    *out = b.s;
    return RA_OK;
}
