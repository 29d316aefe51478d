/* The chunk store (src/reuse/store.h) on random models.
 *
 * Identities: a model and a copy of it agree, another seed or RoPE base does
 * not; a vocabulary differs with one score or one piece changed.
 * A chunk added (isolated computation, then put) and got back holds exactly
 * the rows of an independent recomputation on a fresh cache, f32 and bf16,
 * and the scalar oracle's rows within rounding. A chunk of another identity
 * (leading prefix, token, KV dtype) is a miss; a store of another model (or
 * RoPE base) is refused naming store.json; a valid file of another model or of
 * another chunk put under the key (a hash collision) is caught by the header's
 * identity and token check. Corrupted files (a flipped byte in a layer, a
 * truncated file, a header whose sizes lie, not a chunk at all) are errors
 * naming the file (and the layer), found by ra_store_verify too. The index
 * keeps the LRU order of gets once synced, evicts past the capacity, and
 * everything survives closing and reopening. A full disk (the file size limit)
 * while writing leaves no file and the index unchanged; a missing, plain,
 * broken or read-only store directory is one error line naming it; 4 processes
 * putting chunks at once lose none. */
#include "half.h"
#include "random_model.h"
#include "ra_core.h"
#include "ref_forward.h"
#include "reuse/store.h"
#include "reuse/craft.h"
#include "reuse/store_impl.h"
#include "test.h"
#include "tok512.h"
#include "vocab.h"

#include <errno.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define NP 3  /* the leading prefix's tokens */
#define NT 21 /* a chunk's tokens */

static const int32_t prefix[NP] = { 1, 17, 5 };
static char root[64] = "/tmp/ra_test_store.XXXXXX";
static struct ra_backend *be;

static char *path_in(const char *name)
{
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", root, name);
    return p;
}

static void chunk_tokens(int32_t *t, int which, int vocab)
{
    test_rand_seed(1000 + (uint64_t)which);
    for (int i = 0; i < NT; i++)
        t[i] = test_rand_int(2, vocab - 1);
}

static int open_store(struct ra_store **st, const char *dir, const struct ra_model *m, enum ra_dtype dt,
                      uint64_t capacity, unsigned flags)
{
    struct ra_store_identity id = { .kv_dtype = dt };
    int rc = ra_store_model_identity(m, id.model);
    if (rc == RA_OK)
        rc = ra_store_vocab_identity(NULL, id.tokenizer);
    return rc == RA_OK ? ra_store_open(st, dir, m, &id, capacity, flags) : rc;
}

/* The path the store gives the key of TOKENS behind the prefix. */
static char *key_path(const struct ra_store *st, const int32_t *tokens)
{
    uint8_t key[RA_STORE_HASH_BYTES];
    char hex[2 * RA_STORE_HASH_BYTES + 1];
    if (ra_store_key(&st->id, st->rope, prefix, NP, tokens, NT, key) != RA_OK)
        return NULL;
    ra_store_hex(key, hex);
    return ra_store_chunk_path(st, hex);
}

static int copy_file(const char *from, const char *to)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && cp '%s' '%s'", to, from, to);
    return system(cmd);
}

static double row_value(const void *p, size_t i, enum ra_dtype dt)
{
    return dt == RA_DTYPE_F32 ? ((const float *)p)[i] : ra_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* ------------------------------------------------------------ identities of models and vocabularies */

/* tok512.h's tokenizer written to PATH; VARIANT 1 changes one score, 2 one piece. */
static int write_tokenizer(const char *path, int variant)
{
    char buf[TOK512_BYTES];
    const size_t n = tok512_bytes(buf, variant);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f)
        ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

static int vocab_id(const char *path, uint8_t out[RA_STORE_HASH_BYTES])
{
    struct ra_vocab v;
    int rc = ra_vocab_load(&v, path);
    if (rc != RA_OK)
        return rc;
    rc = ra_store_vocab_identity(&v, out);
    ra_vocab_free(&v);
    return rc;
}

/* Same model (a second copy from the same seed) or vocabulary: the same
 * identity; another seed, RoPE base, score or piece: another one. */
static void identity_hashes(const struct ra_config *c, const struct ra_model *a, const struct ra_model *b,
                            const struct ra_model *a_rope)
{
    uint8_t ia[32], ia2[32], ib[32], ir[32], zero[32] = { 0 }, v[4][32];
    struct ra_model again;
    test_rand_seed(1);
    test_random_model(&again, c, RA_DTYPE_F32, 2.0f);
    CHECK_OK(ra_store_model_identity(a, ia));
    CHECK_OK(ra_store_model_identity(&again, ia2));
    CHECK_OK(ra_store_model_identity(b, ib));
    CHECK_OK(ra_store_model_identity(a_rope, ir));
    ra_model_free(&again);
    CHECK(memcmp(ia, ia2, 32) == 0 && memcmp(ia, ib, 32) != 0 && memcmp(ia, ir, 32) != 0);
    CHECK_OK(ra_store_vocab_identity(NULL, v[0]));
    CHECK(memcmp(v[0], zero, 32) == 0);
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "tok%d.bin", i);
        CHECK(write_tokenizer(path_in(name), i) == 0);
        CHECK_OK(vocab_id(path_in(name), v[i + 1]));
    }
    CHECK_OK(vocab_id(path_in("tok0.bin"), v[0]));
    CHECK(memcmp(v[0], v[1], 32) == 0 && memcmp(v[1], zero, 32) != 0);
    CHECK(memcmp(v[1], v[2], 32) != 0 && memcmp(v[1], v[3], 32) != 0 && memcmp(v[2], v[3], 32) != 0);
    printf("identities: a model and its copy agree, another seed or RoPE base differs; so do vocabularies\n");
}

/* ------------------------------------------------------------ put, get, recompute */

/* The chunk's rows against CACHE (rows [NP, NP+NT)), bit for bit; against the oracle within TOL. */
static void check_rows(struct ra_chunk *c, const struct ra_kvcache *cache, const struct ref_kv *ref, double tol,
                       const char *what)
{
    const size_t row = ra_kvcache_row_bytes(cache), half = row * NT;
    double worst = 0;
    int same = 1;
    CHECK(ra_chunk_layer_bytes(c) == 2 * half);
    for (int l = 0; l < cache->n_layers; l++) {
        const void *k, *v;
        int rc = ra_chunk_layer(c, l, &k, &v);
        CHECK_OK(rc);
        if (rc != RA_OK)
            return;
        same &= memcmp(k, ra_kvcache_k(cache, l, NP), half) == 0 && memcmp(v, ra_kvcache_v(cache, l, NP), half) == 0;
        for (int t = 0; t < NT; t++)
            for (int j = 0; j < cache->kv_dim; j++) {
                const size_t i = (size_t)t * cache->kv_dim + j;
                const double rk = ref_kv_k(ref, l, NP + t)[j], rv = ref_kv_v(ref, l, NP + t)[j];
                const double dk = fabs(row_value(k, i, cache->dtype) - rk) / (1 + fabs(rk));
                const double dv = fabs(row_value(v, i, cache->dtype) - rv) / (1 + fabs(rv));
                worst = fmax(worst, fmax(dk, dv));
            }
    }
    printf("%s: stored rows %s the recomputation; oracle deviation %.2e (tolerance %.0e)\n", what,
           same ? "equal" : "DIFFER FROM", worst, tol);
    CHECK(same);
    CHECK(worst <= tol);
}

static void round_trip(const struct ra_model *m, struct ra_context *ctx, enum ra_dtype dt)
{
    const struct ra_config *c = &m->config;
    char dir[600];
    int32_t t[NT];
    struct ra_store *st = NULL;
    struct ra_chunk *ch = NULL;
    struct ra_kvcache kv;
    struct ref_kv ref;
    snprintf(dir, sizeof dir, "%s/%s", root, ra_dtype_name(dt));
    chunk_tokens(t, 0, c->vocab_size);
    CHECK_OK(open_store(&st, dir, m, dt, 0, RA_STORE_CREATE));
    if (!st)
        return;
    CHECK_OK(ra_store_get(st, prefix, NP, t, NT, &ch));
    CHECK(ch == NULL); /* empty store: a miss */
    CHECK_OK(ra_store_add(st, ctx, prefix, NP, t, NT));
    CHECK_OK(ra_store_get(st, prefix, NP, t, NT, &ch));
    CHECK(ch != NULL);
    if (!ch) {
        ra_store_close(st);
        return;
    }
    CHECK(ra_chunk_tokens(ch) == NT && ra_chunk_n_prefix(ch) == NP);

    /* Independent recomputation: a fresh cache, the prefix then the chunk. */
    int32_t all[NP + NT];
    memcpy(all, prefix, sizeof prefix);
    memcpy(all + NP, t, sizeof t);
    CHECK_OK(ra_kvcache_init_dtype(&kv, be, c->n_layers, ra_config_kv_dim(c), NP + NT, dt));
    CHECK_OK(ra_forward_span(ctx, prefix, 0, NP, &kv, NULL));
    CHECK_OK(ra_forward_span(ctx, t, NP, NT, &kv, NULL));
    CHECK(ref_kv_init(&ref, c->n_layers, ra_config_kv_dim(c), NP + NT) == 0);
    ref.round_bf16 = dt == RA_DTYPE_BF16;
    CHECK(ref_forward(m, all, 0, NP + NT, &ref, NULL) == 0);
    check_rows(ch, &kv, &ref, dt == RA_DTYPE_F32 ? 1e-4 : 1.6e-2, ra_dtype_name(dt));
    ra_chunk_close(ch);

    /* Put again: the chunk is kept, the index holds it once. */
    struct ra_store_entry *e = NULL;
    int n = 0;
    CHECK_OK(ra_store_put(st, prefix, NP, t, NT, &kv));
    CHECK_OK(ra_store_list(st, &e, &n));
    CHECK(n == 1 && e && e[0].n_tokens == NT && e[0].n_prefix == NP);
    free(e);
    ref_kv_free(&ref);
    ra_kvcache_free(&kv);
    ra_store_close(st);
}

/* ------------------------------------------------------------ identities */

static int expect_miss(struct ra_store *st, const int32_t *pre, int npre, const int32_t *t, const char *what)
{
    struct ra_chunk *ch = NULL;
    int rc = ra_store_get(st, pre, npre, t, NT, &ch);
    printf("lookup with %s: %s\n", what, rc != RA_OK ? ra_error_message() : ch ? "HIT" : "a miss");
    CHECK(rc == RA_OK && ch == NULL);
    ra_chunk_close(ch);
    return ch == NULL;
}

static void identities(const struct ra_model *a, struct ra_context *ca, const struct ra_model *b,
                       struct ra_context *cb, const struct ra_model *a_rope)
{
    const int V = a->config.vocab_size;
    int32_t t[NT], t2[NT], other[NT], pre2[NP] = { 1, 17, 6 };
    struct ra_store *st = NULL, *sb = NULL, *s16 = NULL, *sx = NULL;
    chunk_tokens(t, 0, V);
    chunk_tokens(t2, 1, V);
    memcpy(other, t, sizeof t);
    other[NT / 2] = other[NT / 2] == 2 ? 3 : 2;
    CHECK_OK(open_store(&st, path_in("id_a"), a, RA_DTYPE_F32, 0, RA_STORE_CREATE));
    CHECK_OK(open_store(&sb, path_in("id_b"), b, RA_DTYPE_F32, 0, RA_STORE_CREATE));
    if (!st || !sb)
        goto out;
    CHECK_OK(ra_store_add(st, ca, prefix, NP, t, NT));
    CHECK_OK(ra_store_add(st, ca, prefix, NP, t2, NT));
    CHECK_OK(ra_store_add(sb, cb, prefix, NP, t, NT));
    expect_miss(st, pre2, NP, t, "another leading prefix");
    expect_miss(st, prefix, NP - 1, t, "a shorter leading prefix");
    expect_miss(st, prefix, NP, other, "one token changed");
    CHECK_OK(open_store(&s16, path_in("id_a"), a, RA_DTYPE_BF16, 0, 0));
    if (s16)
        expect_miss(s16, prefix, NP, t, "a bf16 KV cache");

    /* Another model, another RoPE base: the store refuses them, naming store.json. */
    int rc = open_store(&sx, path_in("id_a"), b, RA_DTYPE_F32, 0, 0);
    printf("another model's store: %s\n", ra_error_message());
    CHECK(rc != RA_OK && strstr(ra_error_message(), "store.json") && strstr(ra_error_message(), "another model"));
    rc = open_store(&sx, path_in("id_a"), a_rope, RA_DTYPE_F32, 0, 0);
    CHECK(rc != RA_OK && strstr(ra_error_message(), "store.json"));

    /* A valid file of model B, then one of chunk t2, under the key of chunk t. */
    char *key = key_path(st, t), *theirs = key_path(sb, t), *t2_path = key_path(st, t2);
    CHECK(key && theirs && t2_path);
    if (key && theirs && t2_path) {
        CHECK(copy_file(theirs, key) == 0);
        expect_miss(st, prefix, NP, t, "model B's file under the key");
        CHECK(copy_file(t2_path, key) == 0);
        expect_miss(st, prefix, NP, t, "an injected collision (chunk t2's file under t's key)");
    }
    free(key);
    free(theirs);
    free(t2_path);
out:
    ra_store_close(s16);
    ra_store_close(st);
    ra_store_close(sb);
}

/* ------------------------------------------------------------ corruption */

static int patch(const char *path, long off, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    int ok = f && fseek(f, off, SEEK_SET) == 0 && fwrite(bytes, 1, n, f) == n;
    if (f)
        ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

static void expect_error(struct ra_store *st, const int32_t *t, const char *path, const char *cause, const char *what)
{
    struct ra_chunk *ch = NULL;
    int rc = ra_store_get(st, prefix, NP, t, NT, &ch);
    printf("%s: %s\n", what, rc != RA_OK ? ra_error_message() : "NO ERROR");
    CHECK(rc == RA_EFORMAT && ch == NULL && strstr(ra_error_message(), path) && strstr(ra_error_message(), cause));
    ra_chunk_close(ch);
}

static void corruption(const struct ra_model *m, struct ra_context *ctx)
{
    const int V = m->config.vocab_size;
    int32_t t[4][NT];
    struct ra_store *st = NULL;
    struct ra_chunk *ch = NULL;
    CHECK_OK(open_store(&st, path_in("bad"), m, RA_DTYPE_F32, 0, RA_STORE_CREATE));
    if (!st)
        return;
    char *p[4];
    for (int i = 0; i < 4; i++) {
        chunk_tokens(t[i], 10 + i, V);
        CHECK_OK(ra_store_add(st, ctx, prefix, NP, t[i], NT));
        p[i] = key_path(st, t[i]);
    }
    int bad = -1;
    CHECK_OK(ra_store_verify(st, &bad));
    CHECK(bad == 0);

    /* A flipped byte in layer 1: the header is fine, layer 0 reads, layer 1 names the file and the layer. */
    CHECK_OK(ra_store_get(st, prefix, NP, t[0], NT, &ch));
    if (ch) {
        const long off = (long)ch->layout.h.data_offset + (long)ch->layout.h.layer_stride + 5;
        unsigned char byte = 0;
        FILE *f = fopen(p[0], "rb");
        CHECK(f && fseek(f, off, SEEK_SET) == 0 && fread(&byte, 1, 1, f) == 1);
        if (f)
            fclose(f);
        byte ^= 0x40;
        ra_chunk_close(ch);
        ch = NULL;
        CHECK(patch(p[0], off, &byte, 1) == 0);
    }
    CHECK_OK(ra_store_get(st, prefix, NP, t[0], NT, &ch));
    if (ch) {
        const void *k, *v;
        CHECK_OK(ra_chunk_layer(ch, 0, &k, &v));
        int rc = ra_chunk_layer(ch, 1, &k, &v);
        printf("flipped byte in layer 1: %s\n", ra_error_message());
        CHECK(rc == RA_EFORMAT && strstr(ra_error_message(), p[0]) && strstr(ra_error_message(), "layer 1"));
        ra_chunk_close(ch);
    }

    /* Truncated; sizes in the header that lie; not a chunk file at all. */
    CHECK(truncate(p[1], 5000) == 0);
    expect_error(st, t[1], p[1], "truncated", "truncated file");
    const uint32_t lie = NT + 1;
    CHECK(patch(p[2], 28, &lie, 4) == 0); /* n_tokens */
    expect_error(st, t[2], p[2], "disagree", "a header whose counts lie");
    CHECK(patch(p[3], 0, "GARBAGE!", 8) == 0);
    expect_error(st, t[3], p[3], "not a chunk file", "no magic");

    CHECK(copy_file(p[3], path_in("bad/chunks/00/0000.tmp")) == 0); /* a stray file */
    CHECK(copy_file(p[3], path_in("bad/chunks/00/0000000000000000000000000000000000000000000000000000000000000000.rachunk")) == 0);
    CHECK_OK(ra_store_verify(st, &bad));
    printf("verify: %d faults\n", bad);
    CHECK(bad == 6);

    /* Put again: the damaged chunks are replaced, verify finds only the two strays. */
    for (int i = 0; i < 4; i++)
        CHECK_OK(ra_store_add(st, ctx, prefix, NP, t[i], NT));
    CHECK(copy_file(p[3], path_in("bad/chunks/00/0000000000000000000000000000000000000000000000000000000000000000.rachunk.Ab12Cd")) == 0);
    CHECK_OK(ra_store_verify(st, &bad));
    CHECK(bad == 2); /* a chunk being written is named, not a fault */
    for (int i = 0; i < 4; i++)
        free(p[i]);
    ra_store_close(st);
}

/* ------------------------------------------------------------ LRU, eviction, reopening */

static void hex_key(const struct ra_store *st, const int32_t *t, char hex[2 * RA_STORE_HASH_BYTES + 1])
{
    uint8_t key[RA_STORE_HASH_BYTES];
    CHECK_OK(ra_store_key(&st->id, st->rope, prefix, NP, t, NT, key));
    ra_store_hex(key, hex);
}

/* The index, least recently used first, is chunks ORDER[n] of T. */
static void check_order(struct ra_store *st, int32_t t[][NT], const int *order, int n, const char *what)
{
    struct ra_store_entry *e = NULL;
    int got = 0, same;
    CHECK_OK(ra_store_list(st, &e, &got));
    same = got == n;
    for (int i = 0; i < n && same; i++) {
        char hex[2 * RA_STORE_HASH_BYTES + 1];
        hex_key(st, t[order[i]], hex);
        same = strcmp(e[i].key, hex) == 0;
    }
    printf("%s: %d chunks, %s\n", what, got, same ? "in the expected LRU order" : "NOT IN THE EXPECTED ORDER");
    CHECK(same);
    free(e);
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void get_one(struct ra_store *st, const int32_t *t)
{
    struct ra_chunk *ch = NULL;
    CHECK_OK(ra_store_get(st, prefix, NP, t, NT, &ch));
    CHECK(ch != NULL);
    ra_chunk_close(ch);
}

static void lru(const struct ra_model *m, struct ra_context *ctx)
{
    int32_t t[5][NT];
    struct ra_store *st = NULL;
    struct ra_store_entry *e = NULL;
    int n = 0, evicted = -1;
    const char *dir = path_in("lru");
    for (int i = 0; i < 5; i++)
        chunk_tokens(t[i], 20 + i, m->config.vocab_size);
    CHECK_OK(open_store(&st, dir, m, RA_DTYPE_F32, 0, RA_STORE_CREATE));
    if (!st)
        return;
    for (int i = 0; i < 4; i++)
        CHECK_OK(ra_store_add(st, ctx, prefix, NP, t[i], NT));
    check_order(st, t, (const int[]){ 0, 1, 2, 3 }, 4, "4 chunks put");
    get_one(st, t[2]);
    get_one(st, t[0]);
    get_one(st, t[2]);
    check_order(st, t, (const int[]){ 0, 1, 2, 3 }, 4, "3 gets before the sync");
    CHECK_OK(ra_store_sync(st));
    check_order(st, t, (const int[]){ 1, 3, 0, 2 }, 4, "gets of 2, 0, 2, synced");
    struct ra_store *reader = NULL; /* a reader's uses count too, a read-only one's do not */
    CHECK_OK(open_store(&reader, dir, m, RA_DTYPE_F32, 0, RA_STORE_USES));
    if (reader) {
        get_one(reader, t[1]);
        ra_store_close(reader);
    }
    check_order(st, t, (const int[]){ 3, 0, 2, 1 }, 4, "a reader's get of 1, closed");
    CHECK_OK(open_store(&reader, dir, m, RA_DTYPE_F32, 0, RA_STORE_READONLY));
    if (reader) {
        get_one(reader, t[3]);
        ra_store_close(reader);
    }
    check_order(st, t, (const int[]){ 3, 0, 2, 1 }, 4, "a read-only reader's get of 3, closed");
    CHECK_OK(ra_store_list(st, &e, &n));
    CHECK(n == 4 && e[1].uses == 1 && e[2].uses == 2 && e[3].uses == 1 && e[0].uses == 0);
    const uint64_t bytes = n ? e[0].bytes : 0;
    free(e);
    ra_store_close(st);

    /* Reopened with room for 3: a fifth chunk evicts the two least recently used (3, 0). */
    CHECK_OK(open_store(&st, dir, m, RA_DTYPE_F32, 3 * bytes, 0));
    if (!st)
        return;
    char *p[5];
    for (int i = 0; i < 5; i++)
        p[i] = key_path(st, t[i]);
    CHECK_OK(ra_store_add(st, ctx, prefix, NP, t[4], NT));
    check_order(st, t, (const int[]){ 2, 1, 4 }, 3, "a fifth chunk at a capacity of 3");
    CHECK(!exists(p[3]) && !exists(p[0]) && exists(p[1]) && exists(p[2]) && exists(p[4]));
    CHECK_OK(ra_store_evict(st, bytes, &evicted));
    printf("evicted down to one chunk's bytes: %d evicted\n", evicted);
    CHECK(evicted == 2 && !exists(p[1]) && !exists(p[2]) && exists(p[4]));
    ra_store_close(st);

    /* Reopened as it is: the capacity, the index and the chunk's rows are kept. */
    CHECK_OK(open_store(&st, dir, m, RA_DTYPE_F32, 0, 0));
    if (!st)
        goto out;
    CHECK(st->capacity == 3 * bytes);
    check_order(st, t, (const int[]){ 4 }, 1, "reopened");
    struct ra_chunk *ch = NULL;
    CHECK_OK(ra_store_get(st, prefix, NP, t[4], NT, &ch));
    CHECK(ch != NULL);
    for (int l = 0; ch && l < m->config.n_layers; l++) {
        const void *k, *v;
        CHECK_OK(ra_chunk_layer(ch, l, &k, &v));
    }
    ra_chunk_close(ch);
    expect_miss(st, prefix, NP, t[0], "an evicted chunk");
    int bad = -1;
    CHECK_OK(ra_store_verify(st, &bad));
    CHECK(bad == 0);
    ra_store_close(st);
out:
    for (int i = 0; i < 5; i++)
        free(p[i]);
}

/* ------------------------------------------------------------ bad input */

static void expect_open_error(const char *dir, const struct ra_model *m, unsigned flags, const char *names,
                              const char *cause, const char *what)
{
    struct ra_store *st = NULL;
    int rc = open_store(&st, dir, m, RA_DTYPE_F32, 0, flags);
    printf("%s: %s\n", what, rc != RA_OK ? ra_error_message() : "OPENED");
    CHECK(rc != RA_OK && st == NULL && strstr(ra_error_message(), names) && strstr(ra_error_message(), cause));
    ra_store_close(st);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = calloc(1, 1 << 16);
    if (f && buf && fread(buf, 1, (1 << 16) - 1, f) == 0 && ferror(f))
        buf[0] = '\0';
    if (f)
        fclose(f);
    return buf;
}

/* Files under DIR/chunks that are not a chunk (a temporary file left behind). */
static int stray_files(const char *dir)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s/chunks' -type f ! -name '*.rachunk' ! -name '*.racraft')\"", dir);
    return system(cmd) != 0;
}

/* The file size limit stands in for a full disk: the write fails with EFBIG
 * (the store ignores SIGXFSZ, else the test dies of it). */
static void full_disk(const struct ra_model *m, struct ra_context *ctx)
{
    const char *dir = path_in("full");
    int32_t t[2][NT];
    struct ra_store *st = NULL;
    struct rlimit old, lim;
    chunk_tokens(t[0], 30, m->config.vocab_size);
    chunk_tokens(t[1], 31, m->config.vocab_size);
    CHECK_OK(open_store(&st, dir, m, RA_DTYPE_F32, 0, RA_STORE_CREATE));
    if (!st)
        return;
    CHECK_OK(ra_store_add(st, ctx, prefix, NP, t[0], NT));
    char *before = slurp(st->index_path), *path = key_path(st, t[1]);
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = 8192; /* a chunk is 28 KiB */
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    int rc = ra_store_add(st, ctx, prefix, NP, t[1], NT);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    printf("a full disk: %s\n", rc != RA_OK ? ra_error_message() : "WRITTEN");
    CHECK(rc == RA_EIO && path && strstr(ra_error_message(), path) && strstr(ra_error_message(), "too large"));
    char *after = slurp(st->index_path);
    CHECK(before && after && strcmp(before, after) == 0);
    char *rec = path ? ra_craft_record_path(path) : NULL; /* the chunk's craft record goes with it */
    CHECK(!exists(path) && rec && !exists(rec) && !stray_files(dir));
    free(rec);
    free(before);
    free(after);
    free(path);
    ra_store_close(st);
}

static void bad_input(const struct ra_model *m, struct ra_context *ctx)
{
    struct ra_store *st = NULL;
    expect_open_error(path_in("absent"), m, 0, path_in("absent"), "No such file", "no such directory");
    CHECK(mkdir(path_in("plain"), 0700) == 0);
    expect_open_error(path_in("plain"), m, 0, path_in("plain"), "not a chunk store", "a directory without store.json");
    FILE *f = fopen(path_in("plain/store.json"), "w");
    CHECK(f && fputs("{\"format\": \"runahead-chunk-store\", \"model\": ", f) >= 0 && fclose(f) == 0);
    expect_open_error(path_in("plain"), m, 0, "plain/store.json", "not JSON", "a broken store.json");
    CHECK(fclose(fopen(path_in("afile"), "w")) == 0);
    expect_open_error(path_in("afile"), m, RA_STORE_CREATE, path_in("afile"), "not a directory", "a file");

    /* Not writable: refused unless opened read-only (root writes anywhere: not checked then). */
    CHECK_OK(open_store(&st, path_in("ro"), m, RA_DTYPE_F32, 0, RA_STORE_CREATE));
    ra_store_close(st);
    st = NULL;
    CHECK(chmod(path_in("ro"), 0555) == 0);
    if (geteuid() != 0)
        expect_open_error(path_in("ro"), m, 0, path_in("ro"), "not writable", "a store that is not writable");
    CHECK_OK(open_store(&st, path_in("ro"), m, RA_DTYPE_F32, 0, RA_STORE_READONLY));
    if (st) {
        int32_t t[NT];
        chunk_tokens(t, 0, m->config.vocab_size);
        expect_miss(st, prefix, NP, t, "a read-only store");
        CHECK(ra_store_add(st, ctx, prefix, NP, t, NT) == RA_EINVAL);
        struct ra_store_entry *e = NULL;
        int n = -1, bad = -1;
        CHECK_OK(ra_store_list(st, &e, &n));
        CHECK_OK(ra_store_verify(st, &bad));
        CHECK(n == 0 && bad == 0);
        free(e);
    }
    ra_store_close(st);
    /* A reader that records its uses where it can: read-only here. */
    st = NULL;
    CHECK_OK(open_store(&st, path_in("ro"), m, RA_DTYPE_F32, 0, RA_STORE_USES));
    CHECK(st && (geteuid() == 0 || (st->flags & RA_STORE_READONLY)));
    ra_store_close(st);
    CHECK(chmod(path_in("ro"), 0755) == 0);
    full_disk(m, ctx);
}

/* ------------------------------------------------------------ concurrent writers */

#define WRITERS 4
#define EACH 3

/* WRITERS processes, each with its own store handle, put EACH chunks at once: the index loses none. */
static void concurrent(const struct ra_model *m, struct ra_context *ctx)
{
    const char *dir = path_in("shared");
    const struct ra_config *c = &m->config;
    struct ra_kvcache kv;
    struct ra_store *st = NULL;
    int32_t t[WRITERS * EACH][NT];
    pid_t pid[WRITERS];
    for (int i = 0; i < WRITERS * EACH; i++)
        chunk_tokens(t[i], 40 + i, c->vocab_size);
    CHECK_OK(open_store(&st, dir, m, RA_DTYPE_F32, 0, RA_STORE_CREATE));
    CHECK_OK(ra_kvcache_init(&kv, be, c->n_layers, ra_config_kv_dim(c), NP + NT));
    CHECK_OK(ra_forward_span(ctx, prefix, 0, NP, &kv, NULL));
    CHECK_OK(ra_forward_span(ctx, t[0], NP, NT, &kv, NULL));
    fflush(NULL);
    for (int w = 0; w < WRITERS; w++) {
        if ((pid[w] = fork()) == 0) {
            struct ra_store *mine = NULL;
            int ok = open_store(&mine, dir, m, RA_DTYPE_F32, 0, 0) == RA_OK;
            for (int i = 0; ok && i < EACH; i++)
                ok = ra_store_put(mine, prefix, NP, t[w * EACH + i], NT, &kv) == RA_OK;
            if (!ok)
                fprintf(stderr, "writer %d: %s\n", w, ra_error_message());
            ra_store_close(mine);
            _exit(ok ? 0 : 1);
        }
        CHECK(pid[w] > 0);
    }
    for (int w = 0; w < WRITERS; w++) {
        int status = -1;
        CHECK(pid[w] > 0 && waitpid(pid[w], &status, 0) == pid[w] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    struct ra_store_entry *e = NULL;
    int n = 0, bad = -1;
    CHECK_OK(ra_store_list(st, &e, &n));
    CHECK_OK(ra_store_verify(st, &bad));
    printf("%d writers of %d chunks each at once: %d in the index, %d faults\n", WRITERS, EACH, n, bad);
    CHECK(n == WRITERS * EACH && bad == 0 && ra_store_capacity(st) == (uint64_t)16 << 30);
    free(e);
    ra_kvcache_free(&kv);
    ra_store_close(st);
}

/* ------------------------------------------------------------ main */

int main(void)
{
    const struct ra_config c = { .dim = 64, .hidden_dim = 160, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                                 .vocab_size = 211, .seq_len = 128, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    struct ra_model a, b, a_rope;
    struct ra_context ca, cb;
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_rand_seed(1);
    test_random_model(&a, &c, RA_DTYPE_F32, 2.0f);
    test_rand_seed(2);
    test_random_model(&b, &c, RA_DTYPE_F32, 2.0f);
    struct ra_config cr = c;
    cr.rope_theta = 500000.0f;
    test_rand_seed(1);
    test_random_model(&a_rope, &cr, RA_DTYPE_F32, 2.0f);
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 2, .compute = RA_COMPUTE_F32 }));
    CHECK_OK(ra_context_init(&ca, &a, be));
    CHECK_OK(ra_context_init(&cb, &b, be));
    if (!test_failures) {
        identity_hashes(&c, &a, &b, &a_rope);
        round_trip(&a, &ca, RA_DTYPE_F32);
        round_trip(&a, &ca, RA_DTYPE_BF16);
        identities(&a, &ca, &b, &cb, &a_rope);
        corruption(&a, &ca);
        lru(&a, &ca);
        bad_input(&a, &ca);
        concurrent(&a, &ca);
    }
    ra_context_free(&ca);
    ra_context_free(&cb);
    ra_backend_free(be);
    ra_model_free(&a);
    ra_model_free(&b);
    ra_model_free(&a_rope);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (!test_failures && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
    return test_result("test_store");
}
