/* The chunk store (store.h): opening a directory, looking chunks up, putting
 * and computing them. The file format is store_file.c's, the index
 * store_index.c's, the check store_verify.c's. */
#include "reuse/store_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <jansson.h>

#include "forward.h"
#include "reuse/craft.h"
#include "outfile.h"
#include "status.h"

#define STORE_FORMAT "runahead-chunk-store"
#define STORE_VERSION 1
#define DEFAULT_CAPACITY ((uint64_t)16 << 30)

int ra_store_default_dir(char *buf, size_t len)
{
    const char *env = getenv("RA_STORE"), *home = getenv("HOME");
    int n;
    if (env && *env)
        n = snprintf(buf, len, "%s", env);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.cache/runahead/chunks", home);
    else
        return ra_error_set(RA_EINVAL, "no chunk store: give --store DIR, or set RA_STORE or HOME");
    if (n < 0 || (size_t)n >= len)
        return ra_error_set(RA_ERANGE, "the chunk store's path is too long");
    return RA_OK;
}

char *ra_store_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

char *ra_store_chunk_path(const struct ra_store *st, const char *key)
{
    size_t n = strlen(st->dir) + 2 * RA_STORE_HASH_BYTES + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/chunks/%.2s/%s.rachunk", st->dir, key, key);
    return p;
}

/* mkdir -p PATH (0777 less the umask). */
static int make_dirs(const char *path)
{
    char *p = strdup(path);
    int rc = RA_OK;
    if (!p)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            rc = ra_error_set(RA_EIO, "%s: cannot create the directory: %s", p, strerror(errno));
            break;
        }
        *s = c;
        if (c == '\0')
            break;
    }
    free(p);
    return rc;
}

/* ------------------------------------------------------------ store.json */

static int json_write(const struct ra_store *st)
{
    char model[2 * RA_STORE_HASH_BYTES + 1];
    ra_store_hex(st->id.model, model);
    json_t *root = json_pack("{s:s, s:i, s:s, s:i, s:i, s:I}", "format", STORE_FORMAT, "version", STORE_VERSION,
                             "model", model, "n_layers", st->n_layers, "kv_dim", st->kv_dim, "capacity",
                             (json_int_t)st->capacity);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    struct ra_outfile of = RA_OUTFILE_INIT;
    FILE *f;
    int rc = text ? ra_outfile_open(&of, st->json_path, &f) : ra_error_set(RA_ENOMEM, "%s: out of memory", st->json_path);
    if (rc == RA_OK) {
        fprintf(f, "%s\n", text);
        rc = ferror(f) ? ra_error_set(RA_EIO, "%s: cannot write: %s", st->json_path, strerror(errno))
                       : ra_outfile_commit(&of);
    }
    ra_outfile_abort(&of);
    free(text);
    json_decref(root);
    return rc;
}

static int read_text(const char *path, char **text, size_t *len)
{
    int fd, rc;
    size_t size;
    if ((rc = ra_file_open_regular(path, &fd, &size)) != RA_OK)
        return rc;
    *text = malloc(size + 1);
    *len = 0;
    rc = *text ? RA_OK : ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    while (rc == RA_OK && *len < size) {
        ssize_t got = read(fd, *text + *len, size - *len);
        if (got <= 0)
            rc = ra_error_set(RA_EIO, "%s: read failed: %s", path, got < 0 ? strerror(errno) : "unexpected end of file");
        else
            *len += (size_t)got;
    }
    close(fd);
    if (rc != RA_OK) {
        free(*text);
        *text = NULL;
    }
    return rc;
}

/* Checks DIR/store.json against the store's model; sets the capacity from it
 * when the caller gave none. *rewrite: the caller's capacity differs. */
static int json_check(struct ra_store *st, uint64_t capacity, int *rewrite)
{
    char *text = NULL, want[2 * RA_STORE_HASH_BYTES + 1];
    size_t len;
    json_error_t err;
    int rc = read_text(st->json_path, &text, &len);
    if (rc != RA_OK)
        return rc;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    free(text);
    const char *format = json_string_value(json_object_get(root, "format"));
    const char *model = json_string_value(json_object_get(root, "model"));
    json_t *cap = json_object_get(root, "capacity");
    ra_store_hex(st->id.model, want);
    if (!root)
        rc = ra_error_set(RA_EFORMAT, "%s: not JSON: %s (line %d)", st->json_path, err.text, err.line);
    else if (!format || strcmp(format, STORE_FORMAT) != 0 || !model || !json_is_integer(cap) ||
             json_integer_value(cap) <= 0)
        rc = ra_error_set(RA_EFORMAT, "%s: not a chunk store's description (format, model, capacity)", st->json_path);
    else if (strcmp(model, want) != 0)
        rc = ra_error_set(RA_EINVAL, "%s: a store of another model (%.16s...), not of this one (%.16s...)",
                          st->json_path, ra_esc(model), want);
    else {
        st->capacity = capacity ? capacity : (uint64_t)json_integer_value(cap);
        *rewrite = capacity && capacity != (uint64_t)json_integer_value(cap);
    }
    json_decref(root);
    return rc;
}

/* store.json: checked when present, created (under the lock) when absent and asked for. */
static int open_json(struct ra_store *st, uint64_t capacity)
{
    struct stat sb;
    struct ra_filelock l;
    int rewrite = 0, rc;
    const int writable = !(st->flags & RA_STORE_READONLY);
    if (stat(st->json_path, &sb) != 0 && errno == ENOENT && !(st->flags & RA_STORE_CREATE))
        return ra_error_set(RA_EINVAL, "%s: not a chunk store (no store.json)", st->dir);
    if (!writable)
        return json_check(st, capacity, &rewrite);
    if ((rc = ra_store_lock(st, &l)) != RA_OK)
        return rc;
    if (stat(st->json_path, &sb) != 0 && errno == ENOENT) {
        st->capacity = capacity ? capacity : DEFAULT_CAPACITY;
        rc = json_write(st);
    } else if ((rc = json_check(st, capacity, &rewrite)) == RA_OK && rewrite) {
        rc = json_write(st);
    }
    ra_filelock_release(&l);
    return rc;
}

/* ------------------------------------------------------------ open, close */

static int open_paths(struct ra_store *st, const char *dir)
{
    if (!(st->dir = strdup(dir)) || !(st->lock_path = ra_store_join(dir, "lock")) ||
        !(st->index_path = ra_store_join(dir, "index")) || !(st->json_path = ra_store_join(dir, "store.json")))
        return ra_error_set(RA_ENOMEM, "%s: out of memory", dir);
    return RA_OK;
}

/* A file size limit (ulimit -f) kills a writer with SIGXFSZ by default, its
 * temporary file left behind; ignored, the write fails with EFBIG, which
 * put reports as a full disk. A handler set by the program is kept. */
static void ignore_file_size_signal(void)
{
    struct sigaction sa;
    if (sigaction(SIGXFSZ, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
        signal(SIGXFSZ, SIG_IGN);
}

/* The directory exists (or is created) and, unless read-only, takes new files. */
static int open_dir(struct ra_store *st)
{
    struct stat sb;
    int rc;
    if (stat(st->dir, &sb) != 0) {
        if (errno != ENOENT || !(st->flags & RA_STORE_CREATE))
            return ra_error_set(RA_EIO, "%s: cannot open the chunk store: %s", st->dir, strerror(errno));
        if ((rc = make_dirs(st->dir)) != RA_OK)
            return rc;
    } else if (!S_ISDIR(sb.st_mode)) {
        return ra_error_set(RA_EINVAL, "%s: not a directory", st->dir);
    }
    if ((st->flags & RA_STORE_USES) && access(st->dir, W_OK | X_OK) != 0)
        st->flags |= RA_STORE_READONLY;
    if (st->flags & RA_STORE_READONLY)
        return RA_OK;
    ignore_file_size_signal();
    if (access(st->dir, W_OK | X_OK) != 0)
        return ra_error_set(RA_EIO, "%s: the chunk store is not writable: %s", st->dir, strerror(errno));
    char *chunks = ra_store_join(st->dir, "chunks");
    rc = chunks ? make_dirs(chunks) : ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
    free(chunks);
    return rc;
}

int ra_store_open(struct ra_store **out, const char *dir, const struct ra_model *m, const struct ra_store_identity *id,
                  uint64_t capacity, unsigned flags)
{
    struct ra_store *st = calloc(1, sizeof *st);
    int rc;
    *out = NULL;
    if (!st)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", dir);
    st->id = *id;
    st->flags = flags;
    st->n_layers = m->config.n_layers;
    st->kv_dim = ra_config_kv_dim(&m->config);
    if (id->kv_dtype != RA_DTYPE_F32 && id->kv_dtype != RA_DTYPE_BF16)
        rc = ra_error_set(RA_EINVAL, "%s: KV dtype %s: the store keeps f32 or bf16 rows", dir,
                          ra_dtype_name(id->kv_dtype));
    else if ((rc = open_paths(st, dir)) == RA_OK && (rc = ra_store_rope_identity(&m->config, st->rope)) == RA_OK &&
             (rc = open_dir(st)) == RA_OK)
        rc = open_json(st, capacity);
    if (rc != RA_OK) {
        ra_store_close(st);
        return rc;
    }
    *out = st;
    return RA_OK;
}

void ra_store_close(struct ra_store *st)
{
    if (!st)
        return;
    if (st->n_uses && ra_store_sync(st) != RA_OK)
        fprintf(stderr, "runahead: %s\n", ra_error_message());
    free(st->uses);
    free(st->dir);
    free(st->lock_path);
    free(st->index_path);
    free(st->json_path);
    free(st);
}

const char *ra_store_dir(const struct ra_store *st) { return st->dir; }
void ra_store_set_policy(struct ra_store *st, enum ra_store_policy policy) { st->policy = policy; }

int ra_store_policy_parse(const char *s, const char *opt, enum ra_store_policy *policy)
{
    if (s && strcmp(s, "lru") == 0)
        *policy = RA_STORE_EVICT_LRU;
    else if (s && strcmp(s, "craft") == 0)
        *policy = RA_STORE_EVICT_CRAFT;
    else
        return ra_error_set(RA_EINVAL, "%s: '%s' is not lru or craft", opt ? opt : "--policy", s ? ra_esc(s) : "");
    return RA_OK;
}
uint64_t ra_store_capacity(const struct ra_store *st) { return st->capacity; }

/* ------------------------------------------------------------ get */

static int chunk_key(const struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                     uint8_t key[RA_STORE_HASH_BYTES], char hex[2 * RA_STORE_HASH_BYTES + 1])
{
    if (n < 1 || n > RA_CHUNK_MAX_TOKENS || n_prefix < 0 || n_prefix > RA_CHUNK_MAX_TOKENS ||
        (n_prefix && !prefix) || !tokens)
        return ra_error_set(RA_EINVAL, "%s: a chunk of %d tokens behind %d: out of bounds", st->dir, n, n_prefix);
    int rc = ra_store_key(&st->id, st->rope, prefix, n_prefix, tokens, n, key);
    if (rc == RA_OK)
        ra_store_hex(key, hex);
    return rc;
}

int ra_store_get(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                 struct ra_chunk **out)
{
    uint8_t key[RA_STORE_HASH_BYTES];
    char hex[2 * RA_STORE_HASH_BYTES + 1], why[128];
    struct ra_chunk *c = NULL;
    *out = NULL;
    int rc = chunk_key(st, prefix, n_prefix, tokens, n, key, hex);
    if (rc != RA_OK)
        return rc;
    char *path = ra_store_chunk_path(st, hex);
    if (!path)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
    if ((rc = ra_chunk_open(path, &c)) == RA_OK && c) {
        if (!ra_chunk_matches(c, st, prefix, n_prefix, tokens, n, why, sizeof why)) {
            fprintf(stderr, "runahead: warning: %s: a chunk of %s under this key (a hash collision or a misplaced "
                            "file): a miss\n", path, why);
            ra_chunk_close(c);
        } else if ((rc = ra_store_record_use(st, hex)) != RA_OK) {
            ra_chunk_close(c);
        } else {
            *out = c;
        }
    }
    free(path);
    return rc;
}

/* ------------------------------------------------------------ put */

/* The whole file in memory: header, ids, the layers read from KV, their checksums. */
static int chunk_encode(const struct ra_store *st, const uint8_t key[RA_STORE_HASH_BYTES], const int32_t *prefix,
                        int n_prefix, const int32_t *tokens, int n, const struct ra_kvcache *kv, uint8_t **out,
                        struct ra_chunk_header *h)
{
    memset(h, 0, sizeof *h);
    h->version = RA_CHUNK_VERSION;
    h->kv_dtype = (uint32_t)st->id.kv_dtype;
    h->n_layers = (uint32_t)st->n_layers;
    h->kv_dim = (uint32_t)st->kv_dim;
    h->n_prefix = (uint32_t)n_prefix;
    h->n_tokens = (uint32_t)n;
    memcpy(h->key, key, RA_STORE_HASH_BYTES);
    memcpy(h->model, st->id.model, RA_STORE_HASH_BYTES);
    memcpy(h->tokenizer, st->id.tokenizer, RA_STORE_HASH_BYTES);
    memcpy(h->rope, st->rope, RA_STORE_HASH_BYTES);
    ra_chunk_geometry(h);
    uint8_t *buf = calloc(1, h->file_bytes);
    if (!buf)
        return ra_error_set(RA_ENOMEM, "%s: out of memory for a chunk of %llu bytes", st->dir,
                            (unsigned long long)h->file_bytes);
    ra_chunk_encode_header(h, prefix, tokens, buf);
    uint8_t *sha = buf + RA_CHUNK_HEADER_BYTES + 4 * ((size_t)n_prefix + (size_t)n);
    const size_t half = h->layer_bytes / 2;
    int rc = RA_OK;
    for (int l = 0; l < st->n_layers && rc == RA_OK; l++) {
        uint8_t *p = buf + h->data_offset + (size_t)l * h->layer_stride;
        rc = kv->backend->ops->download(kv->backend, p, ra_kvcache_k(kv, l, n_prefix), half);
        if (rc == RA_OK)
            rc = kv->backend->ops->download(kv->backend, p + half, ra_kvcache_v(kv, l, n_prefix), half);
        if (rc == RA_OK)
            rc = ra_sha256(p, h->layer_bytes, sha + (size_t)l * RA_STORE_HASH_BYTES);
    }
    if (rc != RA_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    return RA_OK;
}

/* Writes BUF to PATH through a temporary file and rename: a reader sees the
 * whole chunk or none; on any failure (a full disk) the temporary file goes. */
int ra_store_write_file(const char *path, const uint8_t *buf, size_t bytes)
{
    struct ra_outfile of = RA_OUTFILE_INIT;
    FILE *f;
    char *dir = strdup(path);
    int rc = dir ? RA_OK : ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    if (rc == RA_OK) {
        *strrchr(dir, '/') = '\0';
        rc = make_dirs(dir);
        free(dir);
    }
    if (rc != RA_OK || (rc = ra_outfile_open(&of, path, &f)) != RA_OK)
        return rc;
    if (fwrite(buf, 1, bytes, f) != bytes || fflush(f) != 0)
        rc = ra_error_set(RA_EIO, "%s: cannot write the chunk: %s", path, strerror(errno));
    else
        rc = ra_outfile_commit(&of);
    ra_outfile_abort(&of);
    return rc;
}

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* Whether a valid chunk of this identity, every layer's checksum right, is
 * already at PATH (a damaged one is replaced). */
static int already_there(const struct ra_store *st, const char *path, const int32_t *prefix, int n_prefix,
                         const int32_t *tokens, int n)
{
    struct ra_chunk *c = NULL;
    char why[128];
    int there = ra_chunk_open(path, &c) == RA_OK && c && ra_chunk_matches(c, st, prefix, n_prefix, tokens, n, why, sizeof why);
    for (int l = 0; there && l < st->n_layers; l++) {
        const void *k, *v;
        there = ra_chunk_layer(c, l, &k, &v) == RA_OK;
    }
    ra_chunk_close(c);
    ra_error_clear();
    return there;
}

int ra_store_put(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                 const struct ra_kvcache *kv)
{
    return ra_store_put_meta(st, prefix, n_prefix, tokens, n, kv, "", -1);
}

int ra_store_put_meta(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                      const struct ra_kvcache *kv, const char *base, double impact)
{
    uint8_t key[RA_STORE_HASH_BYTES], *buf = NULL;
    struct ra_chunk_header h;
    struct ra_store_entry e;
    if (st->flags & RA_STORE_READONLY)
        return ra_error_set(RA_EINVAL, "%s: opened read-only: cannot add chunks", st->dir);
    int rc = chunk_key(st, prefix, n_prefix, tokens, n, key, e.key);
    if (rc != RA_OK)
        return rc;
    if (kv->dtype != st->id.kv_dtype || kv->n_layers != st->n_layers || kv->kv_dim != st->kv_dim ||
        kv->capacity < n_prefix + n)
        return ra_error_set(RA_EINVAL, "%s: a %s cache of %d layers x %d x %d rows for %s chunks of %d layers x %d",
                            st->dir, ra_dtype_name(kv->dtype), kv->n_layers, kv->kv_dim, kv->capacity,
                            ra_dtype_name(st->id.kv_dtype), st->n_layers, st->kv_dim);
    char *path = ra_store_chunk_path(st, e.key);
    if (!path)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
    if (!already_there(st, path, prefix, n_prefix, tokens, n) &&
        (rc = chunk_encode(st, key, prefix, n_prefix, tokens, n, kv, &buf, &h)) == RA_OK)
        rc = ra_store_write_file(path, buf, h.file_bytes);
    if (rc == RA_OK) {
        e.bytes = buf ? h.file_bytes : 0;
        e.last_use = now_s();
        e.uses = 0;
        e.n_tokens = n;
        e.n_prefix = n_prefix;
        snprintf(e.base, sizeof e.base, "%s", base ? base : "");
        e.impact = impact;
        if (!buf) { /* kept: its size for the index, in case the index lacks it */
            struct stat sb;
            e.bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        }
        rc = ra_store_index_add(st, &e);
    }
    free(buf);
    free(path);
    return rc;
}

/* ------------------------------------------------------------ add */

int ra_store_chunk_key(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                       uint8_t out[RA_STORE_HASH_BYTES])
{
    char hex[2 * RA_STORE_HASH_BYTES + 1];
    return chunk_key(st, prefix, n_prefix, tokens, n, out, hex);
}

/* After a failed put: the record goes unless its chunk file is there. */
static void remove_orphan_record(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n)
{
    uint8_t key[RA_STORE_HASH_BYTES];
    char hex[2 * RA_STORE_HASH_BYTES + 1];
    struct stat sb;
    if (chunk_key(st, prefix, n_prefix, tokens, n, key, hex) != RA_OK)
        return;
    char *path = ra_store_chunk_path(st, hex), *rec = path ? ra_craft_record_path(path) : NULL;
    if (rec && stat(path, &sb) != 0)
        unlink(rec);
    free(path);
    free(rec);
}

int ra_store_put_record(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                        const struct ra_kvcache *kv, const struct ra_craft_record *rec)
{
    char base[2 * RA_STORE_HASH_BYTES + 1];
    if (st->flags & RA_STORE_READONLY)
        return ra_error_set(RA_EINVAL, "%s: opened read-only: cannot add chunks", st->dir);
    ra_store_hex(rec->base, base);
    int rc = ra_craft_record_put(st, prefix, n_prefix, tokens, n, rec);
    if (rc == RA_OK && (rc = ra_store_put_meta(st, prefix, n_prefix, tokens, n, kv, base, ra_craft_cci(rec))) != RA_OK)
        remove_orphan_record(st, prefix, n_prefix, tokens, n);
    return rc;
}

/* The chunk's rows [n_prefix, n_prefix + n) computed with the recorder on. */
static int add_recorded(struct ra_store *st, struct ra_context *ctx, const int32_t *prefix, int n_prefix,
                        const int32_t *tokens, int n, struct ra_kvcache *kv)
{
    struct ra_craft_recorder *r = NULL;
    struct ra_craft_record rec;
    int rc = ra_craft_recorder_new(&r, ctx, &n_prefix, &n, 1);
    if (rc != RA_OK)
        return rc;
    if ((rc = ra_context_hook_add(ctx, ra_craft_recorder_hook(r))) == RA_OK) {
        rc = ra_forward_span(ctx, tokens, n_prefix, n, kv, NULL);
        ra_context_hook_remove(ctx, ra_craft_recorder_hook(r));
    }
    if (rc == RA_OK && (rc = ra_craft_recorder_take(r, 0, &rec)) == RA_OK) {
        rec.n_lead = n_prefix;
        rec.n_context = 0;
        rec.n_ctx_keys = 0;
        rc = ra_store_chunk_key(st, prefix, n_prefix, tokens, n, rec.base);
        if (rc == RA_OK)
            rc = ra_store_put_record(st, prefix, n_prefix, tokens, n, kv, &rec);
        ra_craft_record_free(&rec);
    }
    ra_craft_recorder_free(r);
    return rc;
}

int ra_store_add(struct ra_store *st, struct ra_context *ctx, const int32_t *prefix, int n_prefix,
                 const int32_t *tokens, int n)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_kvcache kv;
    if (n < 1 || n_prefix < 0 || n_prefix + n > c->seq_len)
        return ra_error_set(RA_ERANGE, "%s: a chunk of %d tokens behind %d does not fit the context of %d", st->dir,
                            n, n_prefix, c->seq_len);
    int rc = ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), n_prefix + n,
                                   st->id.kv_dtype);
    if (rc != RA_OK)
        return rc;
    if (n_prefix > 0)
        rc = ra_forward_span(ctx, prefix, 0, n_prefix, &kv, NULL);
    if (rc == RA_OK)
        rc = add_recorded(st, ctx, prefix, n_prefix, tokens, n, &kv);
    ra_kvcache_free(&kv);
    return rc;
}
