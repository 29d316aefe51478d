/* Partition tables: writing, the writers' lock, and merging under it.
 *
 * Every write rewrites the whole file into a temporary file beside it and renames it over,
 * holding TABLE.lock from the read to the rename (table.h). */
#include "config.h"
#include "table_impl.h"
#include "outfile.h"
#include "status.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ writing */

/* A fixed-length string dataset [n] from the char[cap] field at `off` of each entry's
 * provenance, as long as its longest value and NUL-padded, as h5py writes numpy byte strings
 * (h5py reads them as bytes, h5dump prints them). Not variable-length: those live in the
 * global heap, which has no checksum and which HDF5 1.10 reads unchecked. */
static int ds_write_strings(hid_t grp, const char *name, const struct ra_table_group *g, size_t off, size_t cap)
{
    hsize_t n = (hsize_t)g->n;
    size_t size = 1;
    for (int i = 0; i < g->n; i++) {
        size_t len = strnlen((const char *)&g->prov[i] + off, cap - 1);
        size = len > size ? len : size;
    }
    char *buf = calloc(g->n ? (size_t)g->n : 1, size);
    hid_t t = H5Tcopy(H5T_C_S1);
    int rc = -1;
    if (buf && t >= 0 && H5Tset_size(t, size) >= 0 && H5Tset_strpad(t, H5T_STR_NULLPAD) >= 0) {
        for (int i = 0; i < g->n; i++)
            strncpy(buf + (size_t)i * size, (const char *)&g->prov[i] + off, size);
        rc = ra_tb_ds_write(grp, name, t, t, 1, &n, buf);
    }
    ra_tb_h5_close(t);
    free(buf);
    return rc;
}

/* An integer dataset [n] from the int field at `off` of each entry's provenance. */
static int ds_write_ints(hid_t grp, const char *name, const struct ra_table_group *g, size_t off)
{
    hsize_t n = (hsize_t)g->n;
    int *v = malloc(sizeof(int) * (g->n ? (size_t)g->n : 1)), rc = -1;
    if (v) {
        for (int i = 0; i < g->n; i++)
            memcpy(&v[i], (const char *)&g->prov[i] + off, sizeof(int));
        rc = ra_tb_ds_write(grp, name, H5T_STD_I32LE, H5T_NATIVE_INT, 1, &n, v);
    }
    free(v);
    return rc;
}

static int prov_write(hid_t grp, const struct ra_table_group *g)
{
    const struct ra_table_prov *z = NULL;
    int bad = ds_write_strings(grp, ra_tb_ds_names[DS_OBJECTIVE], g, offsetof(struct ra_table_prov, objective),
                               sizeof z->objective);
    bad = bad || ds_write_ints(grp, ra_tb_ds_names[DS_MIN_STRIDE], g, offsetof(struct ra_table_prov, min_stride));
    bad = bad || ds_write_ints(grp, ra_tb_ds_names[DS_REPEATS], g, offsetof(struct ra_table_prov, repeats));
    bad = bad || ds_write_strings(grp, ra_tb_ds_names[DS_DATE], g, offsetof(struct ra_table_prov, date), sizeof z->date);
    bad = bad || ds_write_strings(grp, ra_tb_ds_names[DS_HOST], g, offsetof(struct ra_table_prov, host), sizeof z->host);
    bad = bad || ds_write_strings(grp, ra_tb_ds_names[DS_VERSION], g, offsetof(struct ra_table_prov, version),
                                  sizeof z->version);
    return bad ? -1 : 0;
}

/* A fixed-length NUL-padded string attribute, as the provenance strings. */
static int attr_write_str(hid_t obj, const char *name, const char *s)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    int rc = -1;
    if (t >= 0 && H5Tset_size(t, strlen(s) ? strlen(s) : 1) >= 0 && H5Tset_strpad(t, H5T_STR_NULLPAD) >= 0)
        rc = ra_tb_attr_write(obj, name, t, t, s);
    ra_tb_h5_close(t);
    return rc;
}

static int key_write(hid_t grp, const struct ra_table_key *k)
{
    int bad = attr_write_str(grp, "backend", k->backend);
    bad = bad || attr_write_str(grp, "compute_dtype", k->compute);
    bad = bad || attr_write_str(grp, "kv_dtype", k->kv);
    return bad ? -1 : 0;
}

static int group_write(hid_t fid, const char *path, const struct ra_table_group *g)
{
    char leaf[16];
    snprintf(leaf, sizeof leaf, "p%d", g->p);
    hid_t grp = ra_tb_group_create(fid, g->model_id, g->hw_tag, leaf);
    hsize_t n = (hsize_t)g->n, d2[2] = { n, (hsize_t)g->p + 1 }, r2[2] = { n, (hsize_t)g->p };
    int bad = grp < 0;
    bad = bad || ra_tb_ds_write(grp, "context_lengths", H5T_STD_I32LE, H5T_NATIVE_INT, 1, &n, g->context_lengths);
    bad = bad || ra_tb_ds_write(grp, "boundaries", H5T_STD_I32LE, H5T_NATIVE_INT, 2, d2, g->boundaries);
    bad = bad || ra_tb_ds_write(grp, "ratios", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, r2, g->ratios);
    bad = bad || ra_tb_ds_write(grp, "ttft_kvr_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, g->ttft_kvr_s);
    bad = bad || ra_tb_ds_write(grp, "ttft_even_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, g->ttft_even_s);
    bad = bad || ra_tb_ds_write(grp, "ttft_tsp_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, g->ttft_tsp_s);
    bad = bad || prov_write(grp, g);
    bad = bad || key_write(grp, &g->key);
    int rc = bad ? ra_tb_h5_fail(path, "the table group") : RA_OK;
    ra_tb_h5_close(grp);
    return rc;
}

static herr_t copy_cb(hid_t src, const char *name, const H5L_info_t *info, void *dst)
{
    (void)info;
    return H5Ocopy(src, name, *(hid_t *)dst, name, H5P_DEFAULT, H5P_DEFAULT);
}

/* An older file's table groups, copied as they were into the new file, rewritten in the
 * current layout: schema 1's per-group provenance becomes each entry's, and schema 1 and 2
 * groups get the key they were tuned for (RA_TABLE_KEY_LEGACY). */
static int upgrade_groups(hid_t old, hid_t fid, const char *path, const char *tmp, int version)
{
    struct walk w;
    char *m, *hw, *leaf, where[1200];
    int rc = ra_tb_walk_file(old, path, &w);
    for (int i = 0; rc == RA_OK && i < w.n; i++) {
        if (w.v[i].depth != 3 || strlen(w.v[i].name) + 2 > sizeof where)
            continue;
        snprintf(where, sizeof where, "/%s", w.v[i].name);
        ra_tb_split3(w.v[i].name, &m, &hw, &leaf);
        int p = ra_tb_parse_pname(leaf);
        if (!p)
            continue;
        struct ra_table_group g;
        struct problems pr = { .path = path };
        hid_t grp = H5Gopen2(old, where, H5P_DEFAULT);
        ra_tb_load_group(grp, where, m, hw, p, version, &g, &pr);
        ra_tb_h5_close(grp);
        if (pr.n)
            rc = ra_error_set(RA_EFORMAT, "%s", pr.first);
        else if (H5Ldelete(fid, where, H5P_DEFAULT) < 0)
            rc = ra_tb_h5_fail(tmp, "the file (upgrading an older group)");
        else
            rc = group_write(fid, tmp, &g);
        ra_table_group_free(&g);
    }
    ra_tb_walk_free(&w);
    return rc;
}

/* The new file as the temporary file of `of`: created by name with O_EXCL (H5F_ACC_EXCL), so
 * a link put at its name is never followed, and stamped with the current schema. */
static int tmp_create(struct ra_outfile *of, hid_t fapl, hid_t *fid)
{
    char cause[200];
    int version = RA_TABLE_SCHEMA_VERSION;
    *fid = -1;
    int rc = ra_outfile_detach(of);
    if (rc != RA_OK)
        return rc;
    *fid = H5Fcreate(of->tmp, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    if (*fid < 0)
        return ra_error_set(RA_EIO, "%s: cannot create the temporary file %s beside it%s", of->path, of->tmp,
                            ra_tb_h5_cause(cause));
    if (ra_tb_attr_write(*fid, "schema_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version) < 0)
        return ra_tb_h5_fail(of->tmp, "schema_version");
    return RA_OK;
}

/* Copies every object of the (validated) old file to a new one except /m/hw/leaf, which
 * `writer` then adds; the new file replaces the old by rename. Callers hold the table's lock. */
int ra_tb_file_rewrite(const char *path, const char *model_id, const char *hw_tag, const char *leaf,
                        ra_tb_writer_fn writer, const void *ctx)
{
    struct ra_outfile of = RA_OUTFILE_INIT;
    char gp[400];
    int exists = access(path, F_OK) == 0, old_version = 0;
    hid_t old = -1, fid = -1, fapl = ra_tb_write_fapl();
    ra_tb_group_path(gp, sizeof gp, model_id, hw_tag, leaf);
    int rc = ra_outfile_begin(&of, path);
    if (rc == RA_OK)
        rc = tmp_create(&of, fapl, &fid);
    if (rc == RA_OK && exists)
        rc = ra_tb_file_open_checked(path, &old, &old_version);
    if (rc != RA_OK)
        goto cleanup;
    if (exists && H5Literate(old, H5_INDEX_NAME, H5_ITER_INC, NULL, copy_cb, &fid) < 0) {
        rc = ra_tb_h5_fail(of.tmp, "a copy of the other groups");
        goto cleanup;
    }
    if (exists && old_version < RA_TABLE_SCHEMA_VERSION &&
        (rc = upgrade_groups(old, fid, path, of.tmp, old_version)) != RA_OK)
        goto cleanup;
    /* The copy's old group goes; HDF5 reuses its space for the new one within this session. */
    if (ra_tb_h5_exists(fid, gp, H5I_GROUP) == 1 && H5Ldelete(fid, gp, H5P_DEFAULT) < 0) {
        rc = ra_tb_h5_fail(of.tmp, "the file (deleting the old group)");
        goto cleanup;
    }
    if ((rc = writer(fid, of.tmp, ctx)) != RA_OK)
        goto cleanup;
    herr_t e = H5Fclose(fid);
    fid = -1;
    rc = e < 0 ? ra_tb_h5_fail(of.tmp, "the file (closing it)") : ra_outfile_commit(&of);
cleanup:
    ra_tb_h5_close(old);
    ra_tb_h5_close(fid);
    ra_tb_h5_close(fapl);
    ra_outfile_abort(&of); /* after the close: nothing left open on it; a no-op once committed */
    return rc;
}

/* Writing into a file that does not validate would carry its problems on; refuse instead. */
int ra_tb_check_existing(const char *path)
{
    int n = 0;
    if (access(path, F_OK) != 0 || ra_table_validate(path, NULL, &n) == RA_OK)
        return RA_OK;
    char first[1024];
    snprintf(first, sizeof first, "%s", ra_error_message());
    return ra_error_set(RA_EFORMAT, "%s (%d problem%s; not changing the file: see runahead-table validate)",
                        first, n, n == 1 ? "" : "s");
}

int ra_table_check_target(const char *path)
{
    ra_tb_h5_quiet();
    int rc = ra_outfile_check(path);
    return rc == RA_OK ? ra_tb_check_existing(path) : rc;
}

/* ------------------------------------------------------------------ locking */

int ra_table_writer_init(struct ra_table_writer *w, const char *prog, FILE *notes)
{
    const char *env = getenv("RA_TABLE_LOCK_TIMEOUT");
    char *end;
    *w = (struct ra_table_writer){ RA_TABLE_LOCK_TIMEOUT_S, prog, notes };
    if (!env || !*env)
        return RA_OK;
    errno = 0;
    double t = strtod(env, &end);
    if (*end || errno || !(t >= 0) || !isfinite(t))
        return ra_error_set(RA_EINVAL, "RA_TABLE_LOCK_TIMEOUT='%s': want a number of seconds >= 0", env);
    w->lock_timeout_s = t;
    return RA_OK;
}

int ra_table_lock(const char *path, const struct ra_table_writer *w, struct ra_filelock *l)
{
    char lock_path[RA_OUTFILE_PATH_MAX + 8];
    l->fd = -1;
    if (strlen(path) + 6 > sizeof lock_path)
        return ra_error_set(RA_ERANGE, "%.200s...: path too long", path);
    snprintf(lock_path, sizeof lock_path, "%s.lock", path);
    return ra_filelock_acquire(l, lock_path, w->lock_timeout_s, w->prog, w->notes);
}

/* A locked read-modify-write of the table at `path`: checks the target first (so a FIFO is
 * never opened and a bad place fails before any wait), then holds the lock through `fn`. */
int ra_tb_locked(const char *path, const struct ra_table_writer *w, int (*fn)(const char *, const void *, void *),
                  const void *in, void *out)
{
    struct ra_table_writer dflt;
    struct ra_filelock lock = RA_FILELOCK_INIT;
    int rc = RA_OK;
    if (!w && (rc = ra_table_writer_init(&dflt, NULL, NULL)) == RA_OK)
        w = &dflt;
    if (rc == RA_OK)
        rc = ra_outfile_check(path);
    if (rc == RA_OK)
        rc = ra_table_lock(path, w, &lock);
    if (rc == RA_OK)
        rc = fn(path, in, out);
    ra_filelock_release(&lock);
    return rc;
}

/* ------------------------------------------------------------------ merging */

struct entry_key {
    int context, src, idx; /* src 0: old group, 1: new */
};

static int key_cmp(const void *a, const void *b)
{
    const struct entry_key *x = a, *y = b;
    if (x->context != y->context)
        return x->context < y->context ? -1 : 1;
    return y->src - x->src; /* the new entry first */
}

static void entry_copy(struct ra_table_group *dst, int i, const struct ra_table_group *src, int j)
{
    int p = dst->p;
    dst->context_lengths[i] = src->context_lengths[j];
    memcpy(dst->boundaries + (size_t)i * (p + 1), src->boundaries + (size_t)j * (p + 1), sizeof(int) * (size_t)(p + 1));
    memcpy(dst->ratios + (size_t)i * p, src->ratios + (size_t)j * p, sizeof(double) * (size_t)p);
    dst->ttft_kvr_s[i] = src->ttft_kvr_s[j];
    dst->ttft_even_s[i] = src->ttft_even_s[j];
    dst->ttft_tsp_s[i] = src->ttft_tsp_s[j];
    dst->prov[i] = src->prov[j];
}

static int same_time(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

static int prov_same(const struct ra_table_prov *a, const struct ra_table_prov *b)
{
    return !strcmp(a->objective, b->objective) && a->min_stride == b->min_stride && a->repeats == b->repeats &&
           !strcmp(a->date, b->date) && !strcmp(a->host, b->host) && !strcmp(a->version, b->version);
}

static int entry_same(const struct ra_table_group *a, int i, const struct ra_table_group *b, int j)
{
    int p = a->p;
    return !memcmp(a->boundaries + (size_t)i * (p + 1), b->boundaries + (size_t)j * (p + 1),
                   sizeof(int) * (size_t)(p + 1)) &&
           !memcmp(a->ratios + (size_t)i * p, b->ratios + (size_t)j * p, sizeof(double) * (size_t)p) &&
           same_time(a->ttft_kvr_s[i], b->ttft_kvr_s[j]) && same_time(a->ttft_even_s[i], b->ttft_even_s[j]) &&
           same_time(a->ttft_tsp_s[i], b->ttft_tsp_s[j]) && prov_same(&a->prov[i], &b->prov[j]);
}

/* The conflict rule: the newer search wins (ISO dates in UTC compare as strings), so merges in
 * any order, concurrent ones included, give the same table and a re-run replaces what it
 * re-measured; TTFTs of two searches are not compared first, as another run's load or another
 * cost-model calibration moves them more than a better split does. At the same date the lower
 * KVR-S TTFT; then the entry already in the table. Returns 1 when the given entry wins. */
static int given_wins(const struct ra_table_group *old, int i, const struct ra_table_group *g, int j,
                      const char **why)
{
    int c = strcmp(g->prov[j].date, old->prov[i].date);
    double a = g->ttft_kvr_s[j], b = old->ttft_kvr_s[i];
    if (c != 0) {
        *why = "the newer search wins";
        return c > 0;
    }
    if (!isnan(a) && (isnan(b) || a < b)) {
        *why = "same date: the lower KVR-S TTFT wins";
        return 1;
    }
    *why = !isnan(b) && (isnan(a) || b < a) ? "same date: the lower KVR-S TTFT wins"
                                            : "a tie: the entry already in the table stays";
    return 0;
}

static void describe_entry(const struct ra_table_group *g, int i, char *buf, size_t len)
{
    const struct ra_table_prov *pv = &g->prov[i];
    char t[32];
    if (isnan(g->ttft_kvr_s[i]))
        snprintf(t, sizeof t, "-");
    else
        snprintf(t, sizeof t, "%.4g s", g->ttft_kvr_s[i]);
    snprintf(buf, len, "searched %s on %s (objective %s, min_stride %d, repeats %d, runahead %s, KVR-S %s)",
             pv->date[0] ? pv->date : "at an unknown date", pv->host[0] ? pv->host : "an unknown host",
             pv->objective, pv->min_stride, pv->repeats, pv->version[0] ? pv->version : "?", t);
}

struct merge_job {
    const char *path;
    const struct ra_table_writer *w;
    struct ra_table_merge_stats st;
};

/* Two entries for one context: *keep gets the one that stays; a real conflict is counted and
 * reported (one line) with both entries and the rule that decided. */
static void resolve(struct merge_job *job, const struct ra_table_group *old, const struct ra_table_group *g,
                    const struct entry_key *given, const struct entry_key *there, struct entry_key *keep)
{
    const char *why;
    char kept[400], dropped[400];
    if (entry_same(old, there->idx, g, given->idx)) {
        job->st.same++;
        *keep = *there;
        return;
    }
    int wins = given_wins(old, there->idx, g, given->idx, &why);
    *keep = wins ? *given : *there;
    if (wins)
        job->st.replaced++;
    else
        job->st.kept++;
    if (!job->w->notes)
        return;
    describe_entry(wins ? g : old, keep->idx, kept, sizeof kept);
    describe_entry(wins ? old : g, wins ? there->idx : given->idx, dropped, sizeof dropped);
    fprintf(job->w->notes, "%s%s%s: /%s/%s/p%d context %d: conflict: kept the entry %s, dropped the one %s: %s\n",
            job->w->prog ? job->w->prog : "", job->w->prog ? ": " : "", job->path, g->model_id, g->hw_tag, g->p,
            given->context, kept, dropped, why);
    fflush(job->w->notes);
}

/* out = old's entries and g's, sorted by context length, one per context (resolve). */
static int entries_merge(struct merge_job *job, const struct ra_table_group *old, const struct ra_table_group *g,
                         struct ra_table_group *out)
{
    int n_old = old ? old->n : 0, total = n_old + g->n, k = 0, n = 0, rc;
    struct entry_key *keys = malloc(sizeof *keys * (size_t)(total ? total : 1));
    if (!keys)
        return ra_error_set(RA_ENOMEM, "%s: out of memory merging %d entries", job->path, total);
    for (int i = 0; i < n_old; i++)
        keys[k++] = (struct entry_key){ old->context_lengths[i], 0, i };
    for (int i = 0; i < g->n; i++)
        keys[k++] = (struct entry_key){ g->context_lengths[i], 1, i };
    qsort(keys, (size_t)total, sizeof *keys, key_cmp);
    for (int i = 0; i < total; i++) {
        int dup = i > 0 && keys[i].context == keys[i - 1].context;
        if (dup && keys[i].src == 1) { /* two given entries (the old group is valid: unique) */
            int c = keys[i].context;
            free(keys);
            return ra_error_set(RA_EINVAL, "%s: the entries to write have context length %d twice", job->path, c);
        }
        if (dup) { /* keys[i - 1] is the given entry, already at n - 1 */
            struct entry_key given = keys[i - 1];
            resolve(job, old, g, &given, &keys[i], &keys[n - 1]);
            job->st.added--;
        } else {
            keys[n++] = keys[i];
            job->st.added += keys[i].src;
        }
    }
    rc = ra_table_group_init(out, g->model_id, g->hw_tag, g->p, n);
    if (rc == RA_OK)
        out->key = g->key;
    for (int i = 0; rc == RA_OK && i < n; i++)
        entry_copy(out, i, keys[i].src ? g : old, keys[i].idx);
    free(keys);
    return rc;
}

static int write_group_cb(hid_t fid, const char *tmp, const void *ctx)
{
    return group_write(fid, tmp, ctx);
}

/* The merge itself, under the lock: read, merge, check, rewrite. */
static int merge_locked(const char *path, const void *in, void *out)
{
    const struct ra_table_group *g = in;
    struct merge_job *job = out;
    struct ra_table_group old = { 0 }, merged = { 0 };
    char where[300], leaf[16];
    struct problems pr = { .path = path };
    int have_old = 0, rc = ra_tb_check_existing(path);
    snprintf(leaf, sizeof leaf, "p%d", g->p);
    ra_tb_group_path(where, sizeof where, g->model_id, g->hw_tag, leaf);
    if (rc == RA_OK && access(path, F_OK) == 0) {
        rc = ra_table_read(path, g->model_id, g->hw_tag, g->p, &old);
        have_old = rc == RA_OK;
        if (rc == RA_EINVAL) /* the group is new */
            rc = RA_OK;
    }
    if (rc == RA_OK && have_old && !ra_table_key_equal(&old.key, &g->key)) {
        char have[80], want[80];
        ra_table_key_format(&old.key, have, sizeof have);
        ra_table_key_format(&g->key, want, sizeof want);
        rc = ra_error_set(RA_EINVAL, "%s: %s holds a table tuned for %s, not %s: not merging (write to another "
                          "file or hardware tag)", path, where, have, want);
    }
    if (rc == RA_OK)
        rc = entries_merge(job, have_old ? &old : NULL, g, &merged);
    if (rc == RA_OK) {
        ra_tb_check_rows(g, ALL_DATA, 1, where, &pr); /* refused even where the entry in the table stays */
        if (!pr.n)
            ra_tb_check_entries(&merged, ALL_DATA, 1, where, &pr);
        if (pr.n)
            rc = ra_error_set(RA_EINVAL, "not writing an invalid entry: %s", pr.first);
    }
    if (rc == RA_OK)
        rc = ra_tb_file_rewrite(path, g->model_id, g->hw_tag, leaf, write_group_cb, &merged);
    ra_table_group_free(&old);
    ra_table_group_free(&merged);
    return rc;
}

int ra_table_merge_with(const char *path, const struct ra_table_group *g, const struct ra_table_writer *w,
                        struct ra_table_merge_stats *stats)
{
    struct ra_table_writer none = { RA_TABLE_LOCK_TIMEOUT_S, NULL, NULL };
    struct merge_job job = { path, w ? w : &none, { 0 } };
    ra_tb_h5_quiet();
    int rc = ra_tb_check_name("model id", g->model_id);
    if (rc == RA_OK)
        rc = ra_tb_check_name("hardware tag", g->hw_tag);
    if (rc == RA_OK && (g->p < 1 || g->p > RA_TABLE_MAX_RANKS || g->n < 1))
        rc = ra_error_set(RA_EINVAL, "%s: nothing to merge (%d entries for %d ranks)", path, g->n, g->p);
    if (rc == RA_OK)
        rc = ra_tb_locked(path, w, merge_locked, g, &job);
    if (stats)
        *stats = job.st;
    return rc;
}

int ra_table_merge(const char *path, const struct ra_table_group *g)
{
    return ra_table_merge_with(path, g, NULL, NULL);
}
