/* The chunk store's index: DIR/index, one line per chunk
 *   KEY BYTES LAST_USE USES N_TOKENS N_PREFIX [BASE IMPACT]
 * (BASE: the hex key of the chunk behind its leading prefix alone, or "-";
 * IMPACT: its cache-context impact, or -1; lines of six fields, an older
 * store's, read as "-" and -1)
 * rewritten whole (temporary file, then rename) under the fcntl lock DIR/lock;
 * the uses of a process are recorded in memory and merged in by
 * ra_store_sync. Least recently used first is the order of last_use. */
#include "reuse/store_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "outfile.h"
#include "reuse/craft.h"
#include "status.h"

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

int ra_store_lock(struct ra_store *st, struct ra_filelock *l)
{
    *l = (struct ra_filelock)RA_FILELOCK_INIT;
    return ra_filelock_acquire(l, st->lock_path, RA_STORE_LOCK_TIMEOUT, "runahead", stderr);
}

static int is_hex_key(const char *s)
{
    if (strlen(s) != 2 * RA_STORE_HASH_BYTES)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static int parse_line(const char *line, struct ra_store_entry *e)
{
    char key[80], base[80];
    unsigned long long bytes, uses;
    int end = 0;
    if (sscanf(line, "%79s %llu %lf %llu %d %d %n", key, &bytes, &e->last_use, &uses, &e->n_tokens, &e->n_prefix,
               &end) != 6 ||
        !is_hex_key(key) || e->n_tokens < 1 || e->n_prefix < 0 || !(e->last_use >= 0))
        return 0;
    e->base[0] = '\0';
    e->impact = -1;
    if (line[end] != '\0') {
        const char *rest = line + end;
        end = 0;
        if (sscanf(rest, "%79s %lf %n", base, &e->impact, &end) != 2 || rest[end] != '\0' ||
            !(strcmp(base, "-") == 0 || is_hex_key(base)) || !(e->impact <= 1) || isnan(e->impact))
            return 0;
        if (strcmp(base, "-") != 0)
            memcpy(e->base, base, sizeof e->base);
    }
    memcpy(e->key, key, sizeof e->key);
    e->bytes = bytes;
    e->uses = uses;
    return 1;
}

static int push_entry(struct ra_store_entry **e, int *n, int *cap, const struct ra_store_entry *x)
{
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 64;
        struct ra_store_entry *p = realloc(*e, sizeof *p * (size_t)nc);
        if (!p)
            return ra_error_set(RA_ENOMEM, "chunk index: out of memory");
        *e = p;
        *cap = nc;
    }
    (*e)[(*n)++] = *x;
    return RA_OK;
}

int ra_store_index_read(const struct ra_store *st, struct ra_store_entry **e, int *n)
{
    int cap = 0, rc = RA_OK, lineno = 0;
    char line[512];
    FILE *f = fopen(st->index_path, "r");
    *e = NULL;
    *n = 0;
    if (!f)
        return errno == ENOENT ? RA_OK : ra_error_set(RA_EIO, "%s: cannot open: %s", st->index_path, strerror(errno));
    while (rc == RA_OK && fgets(line, sizeof line, f)) {
        struct ra_store_entry x;
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        if (!parse_line(line, &x))
            rc = ra_error_set(RA_EFORMAT, "%s: line %d: not KEY BYTES LAST_USE USES N_TOKENS N_PREFIX [BASE IMPACT]",
                              st->index_path, lineno);
        else
            rc = push_entry(e, n, &cap, &x);
    }
    if (rc == RA_OK && ferror(f))
        rc = ra_error_set(RA_EIO, "%s: read failed: %s", st->index_path, strerror(errno));
    fclose(f);
    if (rc != RA_OK) {
        free(*e);
        *e = NULL;
        *n = 0;
    }
    return rc;
}

int ra_store_index_write(const struct ra_store *st, const struct ra_store_entry *e, int n)
{
    struct ra_outfile of = RA_OUTFILE_INIT;
    FILE *f;
    int rc = ra_outfile_open(&of, st->index_path, &f);
    if (rc != RA_OK)
        return rc;
    fprintf(f, "# runahead chunk index: key bytes last_use uses n_tokens n_prefix base impact\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s %llu %.6f %llu %d %d %s %.6f\n", e[i].key, (unsigned long long)e[i].bytes, e[i].last_use,
                (unsigned long long)e[i].uses, e[i].n_tokens, e[i].n_prefix, e[i].base[0] ? e[i].base : "-",
                e[i].impact < 0 ? -1.0 : e[i].impact);
    if (ferror(f))
        rc = ra_error_set(RA_EIO, "%s: cannot write: %s", st->index_path, strerror(errno));
    else
        rc = ra_outfile_commit(&of);
    ra_outfile_abort(&of);
    return rc;
}

static int by_last_use(const void *a, const void *b)
{
    const struct ra_store_entry *x = a, *y = b;
    if (x->last_use != y->last_use)
        return x->last_use < y->last_use ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* The craft policy's value of keeping a chunk (store.h): the rows a hit
 * saves per byte, weighed by its uses. */
static double value(const struct ra_store_entry *e)
{
    const double impact = e->impact < 0 ? 0 : e->impact;
    return ((double)e->uses + 1) * e->n_tokens * (1 - impact / 2) / (double)(e->bytes ? e->bytes : 1);
}

static int by_value(const void *a, const void *b)
{
    const struct ra_store_entry *x = a, *y = b;
    const double vx = value(x), vy = value(y);
    if (vx != vy)
        return vx < vy ? -1 : 1;
    return by_last_use(a, b);
}

/* Unlinks chunk KEY's file and its craft record. */
static int remove_chunk(struct ra_store *st, const char *key)
{
    int rc = RA_OK;
    char *path = ra_store_chunk_path(st, key), *rec = path ? ra_craft_record_path(path) : NULL;
    if (!path || !rec)
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
    else if (unlink(path) != 0 && errno != ENOENT)
        rc = ra_error_set(RA_EIO, "%s: cannot remove: %s", path, strerror(errno));
    else if (unlink(rec) != 0 && errno != ENOENT)
        rc = ra_error_set(RA_EIO, "%s: cannot remove: %s", rec, strerror(errno));
    free(path);
    free(rec);
    return rc;
}

/* Removes entries (never KEEP), the policy's victims first, and their files
 * until the total is at most TARGET. Entries are in the policy's order on return. */
static int evict_locked(struct ra_store *st, struct ra_store_entry *e, int *n, uint64_t target, const char *keep,
                        int *evicted)
{
    uint64_t total = 0;
    int kept = 0, rc = RA_OK;
    if (*n > 1) /* an empty index has no array */
        qsort(e, (size_t)*n, sizeof *e, st->policy == RA_STORE_EVICT_CRAFT ? by_value : by_last_use);
    for (int i = 0; i < *n; i++)
        total += e[i].bytes;
    for (int i = 0; i < *n; i++) {
        if (total <= target || (keep && strcmp(e[i].key, keep) == 0)) {
            e[kept++] = e[i];
            continue;
        }
        if ((rc = remove_chunk(st, e[i].key)) != RA_OK) {
            e[kept++] = e[i];
            continue;
        }
        total -= e[i].bytes;
        if (evicted)
            (*evicted)++;
    }
    *n = kept;
    return rc;
}

int ra_store_index_add(struct ra_store *st, const struct ra_store_entry *entry)
{
    struct ra_filelock l;
    struct ra_store_entry *e = NULL;
    int n = 0, rc, found = 0;
    if ((rc = ra_store_lock(st, &l)) != RA_OK)
        return rc;
    if ((rc = ra_store_index_read(st, &e, &n)) != RA_OK)
        goto out;
    int updated = 0;
    for (int i = 0; i < n && !found; i++)
        if ((found = strcmp(e[i].key, entry->key) == 0) && entry->impact >= 0 && e[i].impact != entry->impact) {
            memcpy(e[i].base, entry->base, sizeof e[i].base); /* a record added to a kept chunk */
            e[i].impact = entry->impact;
            updated = 1;
        }
    if (!found) {
        int cap = n;
        if ((rc = push_entry(&e, &n, &cap, entry)) != RA_OK)
            goto out;
    }
    const int merged = st->n_uses > 0;
    ra_store_merge_uses(st, e, n);
    int before = n;
    int rc_evict = evict_locked(st, e, &n, st->capacity, entry->key, NULL);
    if (!found || n != before || merged || updated)
        rc = ra_store_index_write(st, e, n);
    if (rc == RA_OK && merged)
        st->n_uses = 0;
    if (rc == RA_OK)
        rc = rc_evict;
out:
    free(e);
    ra_filelock_release(&l);
    return rc;
}

int ra_store_record_use(struct ra_store *st, const char *key)
{
    if (st->flags & RA_STORE_READONLY)
        return RA_OK;
    for (int i = 0; i < st->n_uses; i++)
        if (strcmp(st->uses[i].key, key) == 0) {
            st->uses[i].last_use = now_s();
            st->uses[i].count++;
            return RA_OK;
        }
    if (st->n_uses == st->cap_uses) {
        int nc = st->cap_uses ? 2 * st->cap_uses : 32;
        struct ra_store_use *p = realloc(st->uses, sizeof *p * (size_t)nc);
        if (!p)
            return ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
        st->uses = p;
        st->cap_uses = nc;
    }
    struct ra_store_use *u = &st->uses[st->n_uses++];
    memcpy(u->key, key, sizeof u->key);
    u->last_use = now_s();
    u->count = 1;
    return RA_OK;
}

void ra_store_merge_uses(struct ra_store *st, struct ra_store_entry *e, int n)
{
    for (int u = 0; u < st->n_uses; u++)
        for (int i = 0; i < n; i++)
            if (strcmp(e[i].key, st->uses[u].key) == 0) {
                if (st->uses[u].last_use > e[i].last_use)
                    e[i].last_use = st->uses[u].last_use;
                e[i].uses += st->uses[u].count;
            }
}

int ra_store_sync(struct ra_store *st)
{
    struct ra_filelock l;
    struct ra_store_entry *e = NULL;
    int n = 0, rc;
    if (st->n_uses == 0 || (st->flags & RA_STORE_READONLY))
        return RA_OK;
    if ((rc = ra_store_lock(st, &l)) != RA_OK)
        return rc;
    if ((rc = ra_store_index_read(st, &e, &n)) == RA_OK) {
        ra_store_merge_uses(st, e, n);
        rc = ra_store_index_write(st, e, n);
    }
    if (rc == RA_OK)
        st->n_uses = 0;
    free(e);
    ra_filelock_release(&l);
    return rc;
}

/* Without the lock: the index is replaced whole by a rename, so a reader sees
 * one version of it (and a read-only store needs no lock file). */
int ra_store_list(struct ra_store *st, struct ra_store_entry **entries, int *n)
{
    int rc = ra_store_index_read(st, entries, n);
    if (rc == RA_OK && *n > 1) /* an empty index has no array (qsort takes none) */
        qsort(*entries, (size_t)*n, sizeof **entries, by_last_use);
    return rc;
}

int ra_store_evict(struct ra_store *st, uint64_t target_bytes, int *evicted)
{
    struct ra_filelock l;
    struct ra_store_entry *e = NULL;
    int n = 0, rc, count = 0;
    if (evicted)
        *evicted = 0;
    if (st->flags & RA_STORE_READONLY)
        return ra_error_set(RA_EINVAL, "%s: opened read-only: cannot evict", st->dir);
    if ((rc = ra_store_sync(st)) != RA_OK || (rc = ra_store_lock(st, &l)) != RA_OK)
        return rc;
    if ((rc = ra_store_index_read(st, &e, &n)) == RA_OK) {
        int rc2 = evict_locked(st, e, &n, target_bytes, NULL, &count);
        rc = ra_store_index_write(st, e, n);
        if (rc2 != RA_OK)
            rc = rc2;
    }
    if (evicted)
        *evicted = count;
    free(e);
    ra_filelock_release(&l);
    return rc;
}
