/* Partition tables: groups in memory, reading and validating.
 *
 * One checker serves read and validate: it reports problems one line each through a
 * `struct problems`; validate prints them all, read turns the first into its error. So a
 * group that reads is exactly a group that validates. */
#include "config.h"
#include "table_impl.h"
#include "status.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_VALUES (1 << 24) /* n * (p + 1): a corrupt shape must not allocate gigabytes */

/* ------------------------------------------------------------------ run keys */

static int key_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n >= sizeof((struct ra_table_key *)0)->backend)
        return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789") == n;
}

int ra_table_key_set(struct ra_table_key *k, const char *backend, const char *compute, const char *kv)
{
    const char *what[3] = { "backend", "compute dtype", "KV dtype" }, *v[3] = { backend, compute, kv };
    for (int i = 0; i < 3; i++)
        if (!v[i] || !key_name_ok(v[i]))
            return ra_error_set(RA_EINVAL, "table: %s '%s' must be 1..15 characters of [a-z0-9]", what[i],
                                v[i] ? ra_esc(v[i]) : "");
    snprintf(k->backend, sizeof k->backend, "%s", backend);
    snprintf(k->compute, sizeof k->compute, "%s", compute);
    snprintf(k->kv, sizeof k->kv, "%s", kv);
    return RA_OK;
}

void ra_table_key_format(const struct ra_table_key *k, char *buf, size_t len)
{
    snprintf(buf, len, "backend %s, compute %s, KV %s", k->backend, k->compute, k->kv);
}

int ra_table_key_equal(const struct ra_table_key *a, const struct ra_table_key *b)
{
    return !strcmp(a->backend, b->backend) && !strcmp(a->compute, b->compute) && !strcmp(a->kv, b->kv);
}

/* Schema 3: the key is the group's attributes backend, compute_dtype, kv_dtype. */
static void load_key(hid_t grp, const char *where, struct ra_table_key *k, struct problems *pr)
{
    const char *names[3] = { "backend", "compute_dtype", "kv_dtype" };
    char *fields[3] = { k->backend, k->compute, k->kv };
    for (int i = 0; i < 3; i++) {
        if (ra_tb_attr_read_str(grp, where, names[i], fields[i], sizeof k->backend, pr) != 0)
            continue;
        if (!key_name_ok(fields[i]))
            ra_tb_problem(pr, "%s: attribute %s is '%s', want 1..15 characters of [a-z0-9]", where, names[i],
                          fields[i]);
    }
}

/* ------------------------------------------------------------------ groups in memory */

int ra_tb_check_name(const char *what, const char *s)
{
    if (!s || !*s || strlen(s) >= 128 || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, ".."))
        return ra_error_set(RA_EINVAL, "table: %s '%s' must be 1..127 characters without '/'", what, s ? s : "");
    return RA_OK;
}

static void utc_now(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
}

/* A new entry's provenance: a measured search of this build on this host, finished now. */
static void prov_default(struct ra_table_prov *pv)
{
    memset(pv, 0, sizeof *pv);
    snprintf(pv->objective, sizeof pv->objective, "measure");
    pv->min_stride = pv->repeats = 1;
    utc_now(pv->date, sizeof pv->date);
    if (gethostname(pv->host, sizeof pv->host) != 0)
        pv->host[0] = '\0';
    pv->host[sizeof pv->host - 1] = '\0';
    snprintf(pv->version, sizeof pv->version, "%s", PACKAGE_VERSION);
}

int ra_table_group_init(struct ra_table_group *g, const char *model_id, const char *hw_tag, int p, int n)
{
    memset(g, 0, sizeof *g);
    int rc = ra_tb_check_name("model id", model_id);
    if (rc == RA_OK)
        rc = ra_tb_check_name("hardware tag", hw_tag);
    if (rc != RA_OK)
        return rc;
    if (p < 1 || p > RA_TABLE_MAX_RANKS || n < 0 || n > RA_TABLE_MAX_ENTRIES || (int64_t)n * (p + 1) > MAX_VALUES)
        return ra_error_set(RA_ERANGE, "table: %d entries for %d ranks are outside the limits (1..%d ranks, %d values)",
                            n, p, RA_TABLE_MAX_RANKS, MAX_VALUES);
    snprintf(g->model_id, sizeof g->model_id, "%s", model_id);
    snprintf(g->hw_tag, sizeof g->hw_tag, "%s", hw_tag);
    g->key = (struct ra_table_key)RA_TABLE_KEY_LEGACY;
    g->p = p;
    g->n = n;
    size_t m = n ? (size_t)n : 1; /* never malloc(0): NULL would look like a failure */
    g->context_lengths = calloc(m, sizeof(int));
    g->boundaries = calloc(m * (size_t)(p + 1), sizeof(int));
    g->ratios = calloc(m * (size_t)p, sizeof(double));
    g->ttft_kvr_s = malloc(m * sizeof(double));
    g->ttft_even_s = malloc(m * sizeof(double));
    g->ttft_tsp_s = malloc(m * sizeof(double));
    g->prov = malloc(m * sizeof *g->prov);
    if (!g->context_lengths || !g->boundaries || !g->ratios || !g->ttft_kvr_s || !g->ttft_even_s || !g->ttft_tsp_s ||
        !g->prov) {
        ra_table_group_free(g);
        return ra_error_set(RA_ENOMEM, "table: out of memory for %d entries of %d ranks", n, p);
    }
    struct ra_table_prov pv;
    prov_default(&pv);
    for (int i = 0; i < n; i++) {
        g->ttft_kvr_s[i] = g->ttft_even_s[i] = g->ttft_tsp_s[i] = NAN;
        g->prov[i] = pv;
    }
    return RA_OK;
}

void ra_table_group_free(struct ra_table_group *g)
{
    free(g->context_lengths);
    free(g->boundaries);
    free(g->ratios);
    free(g->ttft_kvr_s);
    free(g->ttft_even_s);
    free(g->ttft_tsp_s);
    free(g->prov);
    g->context_lengths = g->boundaries = NULL;
    g->ratios = g->ttft_kvr_s = g->ttft_even_s = g->ttft_tsp_s = NULL;
    g->prov = NULL;
    g->n = 0;
}

int ra_table_group_set_search(struct ra_table_group *g, const char *objective, int min_stride, int repeats)
{
    if (strcmp(objective, "measure") && strcmp(objective, "model"))
        return ra_error_set(RA_EINVAL, "table: objective '%s' is not measure or model", objective);
    if (min_stride < 1 || repeats < 1)
        return ra_error_set(RA_EINVAL, "table: min_stride %d and repeats %d must be >= 1", min_stride, repeats);
    for (int i = 0; i < g->n; i++) {
        snprintf(g->prov[i].objective, sizeof g->prov[i].objective, "%s", objective);
        g->prov[i].min_stride = min_stride;
        g->prov[i].repeats = repeats;
    }
    return RA_OK;
}

int ra_table_entry_set(struct ra_table_group *g, int i, const int *bounds,
                       double ttft_kvr_s, double ttft_even_s, double ttft_tsp_s)
{
    int p = g->p, c = bounds[p];
    if (i < 0 || i >= g->n)
        return ra_error_set(RA_EINVAL, "table %s/%s/p%d: entry %d of %d", g->model_id, g->hw_tag, p, i, g->n);
    for (int r = 0; r < p; r++)
        if (bounds[0] != 0 || bounds[r + 1] <= bounds[r])
            return ra_error_set(RA_EINVAL, "table %s/%s/p%d: entry %d: boundaries must rise strictly from 0",
                                g->model_id, g->hw_tag, p, i);
    g->context_lengths[i] = c;
    memcpy(g->boundaries + (size_t)i * (p + 1), bounds, sizeof(int) * (size_t)(p + 1));
    for (int r = 0; r < p; r++)
        g->ratios[(size_t)i * p + r] = (double)(bounds[r + 1] - bounds[r]) / c;
    g->ttft_kvr_s[i] = ttft_kvr_s;
    g->ttft_even_s[i] = ttft_even_s;
    g->ttft_tsp_s[i] = ttft_tsp_s;
    utc_now(g->prov[i].date, sizeof g->prov[i].date);
    return RA_OK;
}

/* ------------------------------------------------------------------ checking a group */

static void list_ints(const int *v, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 1 < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ",%d" : "%d", v[i]);
}

static void check_bounds_row(const struct ra_table_group *g, int i, const char *where, struct problems *pr)
{
    const int *b = g->boundaries + (size_t)i * (g->p + 1);
    int c = g->context_lengths[i], ok = b[0] == 0 && b[g->p] == c;
    for (int r = 0; r < g->p; r++)
        ok &= b[r + 1] > b[r];
    if (!ok) {
        char list[200];
        list_ints(b, g->p + 1, list, sizeof list);
        ra_tb_problem(pr, "%s/boundaries: entry %d (context %d) is %s, not strictly increasing from 0 to %d",
                where, i, c, list, c);
    }
}

static void check_ratios_row(const struct ra_table_group *g, int i, int bounds_ok, const char *where,
                             struct problems *pr)
{
    const double *v = g->ratios + (size_t)i * g->p;
    const int *b = g->boundaries + (size_t)i * (g->p + 1);
    int c = g->context_lengths[i];
    double sum = 0;
    for (int r = 0; r < g->p; r++) {
        if (!(v[r] > 0 && v[r] <= 1)) {
            ra_tb_problem(pr, "%s/ratios: entry %d (context %d): ratio %d is %g, outside (0,1]", where, i, c, r, v[r]);
            return;
        }
        sum += v[r];
    }
    if (fabs(sum - 1) > 1e-6) {
        ra_tb_problem(pr, "%s/ratios: entry %d (context %d): ratios sum to %.9g, not 1", where, i, c, sum);
        return;
    }
    double acc = 0;
    for (int r = 1; r < g->p && bounds_ok; r++) {
        acc += v[r - 1];
        if (fabs(acc * c - b[r]) > 1.0) {
            ra_tb_problem(pr, "%s/ratios: entry %d (context %d): ratios put boundary %d at %.1f, boundaries say %d",
                    where, i, c, r, acc * c, b[r]);
            return;
        }
    }
}

static void check_ttfts(const double *t, const char *name, int n, const char *where, struct problems *pr)
{
    for (int i = 0; i < n; i++)
        if (!isnan(t[i]) && !(t[i] > 0 && isfinite(t[i]))) {
            ra_tb_problem(pr, "%s/%s: entry %d is %g, want a positive time or NaN", where, name, i, t[i]);
            return;
        }
}

static int objective_ok(const char *s)
{
    return !strcmp(s, "measure") || !strcmp(s, "model");
}

/* Schema 1: the provenance is the group's attributes. */
static void check_prov_attrs(const struct ra_table_prov *pv, const char *where, struct problems *pr)
{
    if (!objective_ok(pv->objective))
        ra_tb_problem(pr, "%s: attribute objective is '%s', want 'measure' or 'model'", where, pv->objective);
    if (pv->min_stride < 1)
        ra_tb_problem(pr, "%s: attribute min_stride is %d, want >= 1", where, pv->min_stride);
    if (pv->repeats < 1)
        ra_tb_problem(pr, "%s: attribute repeats is %d, want >= 1", where, pv->repeats);
}

/* Schema 2: one value per entry; the first bad entry of each dataset is reported. */
static void check_prov_entries(const struct ra_table_group *g, const char *where, struct problems *pr)
{
    int bad_o = 0, bad_s = 0, bad_r = 0;
    for (int i = 0; i < g->n; i++) {
        const struct ra_table_prov *pv = &g->prov[i];
        int c = g->context_lengths[i];
        if (!bad_o && (bad_o = !objective_ok(pv->objective)))
            ra_tb_problem(pr, "%s/objective: entry %d (context %d) is '%s', want 'measure' or 'model'", where, i, c,
                    pv->objective);
        if (!bad_s && (bad_s = pv->min_stride < 1))
            ra_tb_problem(pr, "%s/min_stride: entry %d (context %d) is %d, want >= 1", where, i, c, pv->min_stride);
        if (!bad_r && (bad_r = pv->repeats < 1))
            ra_tb_problem(pr, "%s/repeats: entry %d (context %d) is %d, want >= 1", where, i, c, pv->repeats);
    }
}

/* Checks each entry's values in the datasets that loaded (bit DS_x of `have`), and with
 * prov_per_entry its provenance (schema 1's attributes are checked as they load). */
void ra_tb_check_rows(const struct ra_table_group *g, unsigned have, int prov_per_entry, const char *where,
                       struct problems *pr)
{
    int has_c = have >> DS_CONTEXT & 1;
    for (int i = 0; has_c && i < g->n; i++) {
        int before = pr->n;
        if (g->context_lengths[i] < g->p)
            ra_tb_problem(pr, "%s/context_lengths: entry %d is %d, fewer tokens than the %d ranks", where, i,
                    g->context_lengths[i], g->p);
        if (have >> DS_BOUNDS & 1)
            check_bounds_row(g, i, where, pr);
        if (have >> DS_RATIOS & 1)
            check_ratios_row(g, i, (have >> DS_BOUNDS & 1) && pr->n == before, where, pr);
    }
    const double *t[3] = { g->ttft_kvr_s, g->ttft_even_s, g->ttft_tsp_s };
    for (int k = 0; k < 3; k++)
        if (have >> (DS_KVR + k) & 1)
            check_ttfts(t[k], ra_tb_ds_names[DS_KVR + k], g->n, where, pr);
    if (prov_per_entry && has_c)
        check_prov_entries(g, where, pr);
}

/* check_rows, and the group as a whole: entries present, context lengths ascending, unique. */
void ra_tb_check_entries(const struct ra_table_group *g, unsigned have, int prov_per_entry, const char *where,
                          struct problems *pr)
{
    int has_c = have >> DS_CONTEXT & 1;
    if (has_c && g->n < 1)
        ra_tb_problem(pr, "%s/context_lengths: the table has no entries", where);
    for (int i = 1; has_c && i < g->n; i++) {
        int c = g->context_lengths[i];
        if (c >= g->p && c <= g->context_lengths[i - 1])
            ra_tb_problem(pr, "%s/context_lengths: entry %d (%d) is not greater than entry %d (%d): want ascending, unique",
                    where, i, c, i - 1, g->context_lengths[i - 1]);
    }
    ra_tb_check_rows(g, have, prov_per_entry, where, pr);
}

/* Checks dataset k's kind and shape and, when there is an N to size it (have_n), reads it
 * into buf. Returns the DS_ bit for a dataset whose values are now in buf, else 0. */
static unsigned load_dataset(hid_t grp, const char *where, int k, H5T_class_t cls, hid_t memtype, int rank,
                             const hsize_t *want, int have_n, void *buf, struct problems *pr)
{
    hsize_t dims[2];
    hid_t d = ra_tb_ds_open(grp, where, ra_tb_ds_names[k], cls, rank, want, dims, pr);
    if (d < 0)
        return 0;
    if (!have_n) {
        ra_tb_h5_close(d);
        return 0;
    }
    return ra_tb_ds_read(d, memtype, buf, where, ra_tb_ds_names[k], pr) == 0 ? 1u << k : 0;
}

/* Schema 1: the group's attributes, given to every entry (its host is unknown). */
static void load_prov_attrs(hid_t grp, const char *where, struct ra_table_group *g, struct problems *pr)
{
    struct ra_table_prov pv;
    prov_default(&pv);
    pv.host[0] = '\0';
    ra_tb_attr_read_str(grp, where, "objective", pv.objective, sizeof pv.objective, pr);
    ra_tb_attr_read_num(grp, where, "min_stride", H5T_NATIVE_INT, H5T_INTEGER, &pv.min_stride, pr);
    ra_tb_attr_read_num(grp, where, "repeats", H5T_NATIVE_INT, H5T_INTEGER, &pv.repeats, pr);
    ra_tb_attr_read_str(grp, where, "date", pv.date, sizeof pv.date, pr);
    ra_tb_attr_read_str(grp, where, "runahead_version", pv.version, sizeof pv.version, pr);
    check_prov_attrs(&pv, where, pr);
    for (int i = 0; i < g->n; i++)
        g->prov[i] = pv;
}

/* A fixed-length string dataset [n] into the char[cap] field at `off` of each entry's
 * provenance. Variable-length strings are refused: they live in HDF5's global heap, which has
 * no checksum (see ds_write_strings). */
static void load_strings(hid_t grp, const char *where, int k, int have_n, struct ra_table_group *g, size_t off,
                         size_t cap, struct problems *pr)
{
    hsize_t dims[1], want[1] = { have_n ? (hsize_t)g->n : 0 };
    hid_t d = ra_tb_ds_open(grp, where, ra_tb_ds_names[k], H5T_STRING, 1, want, dims, pr), t = -1;
    char *buf = NULL, cause[200];
    if (d < 0 || !have_n)
        goto cleanup;
    t = H5Dget_type(d);
    size_t size = t < 0 ? 0 : H5Tget_size(t);
    if (t < 0 || H5Tis_variable_str(t) != 0 || size < 1 || size > 4096) {
        ra_tb_problem(pr, "%s/%s: want fixed-length strings of 1..4096 bytes", where, ra_tb_ds_names[k]);
        goto cleanup;
    }
    if (!(buf = calloc(g->n ? (size_t)g->n : 1, size))) {
        ra_tb_problem(pr, "%s/%s: out of memory", where, ra_tb_ds_names[k]);
        goto cleanup;
    }
    if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) { /* the raw bytes, as attr_read_str */
        ra_tb_problem(pr, "%s/%s: values cannot be read%s", where, ra_tb_ds_names[k], ra_tb_h5_cause(cause));
        goto cleanup;
    }
    for (int i = 0; i < g->n; i++) {
        const char *s = buf + (size_t)i * size;
        size_t len = strnlen(s, size);
        if (len >= cap) {
            ra_tb_problem(pr, "%s/%s: entry %d is longer than %zu characters", where, ra_tb_ds_names[k], i, cap - 1);
            break;
        }
        char *field = (char *)&g->prov[i] + off;
        memcpy(field, s, len);
        field[len] = '\0';
    }
cleanup:
    free(buf);
    ra_tb_h5_close(t);
    ra_tb_h5_close(d);
}

/* An integer dataset [n] into the int field at `off` of each entry's provenance. */
static void load_ints(hid_t grp, const char *where, int k, int have_n, struct ra_table_group *g, size_t off,
                      struct problems *pr)
{
    hsize_t want[1] = { have_n ? (hsize_t)g->n : 0 };
    int *v = malloc(sizeof(int) * (g->n ? (size_t)g->n : 1));
    if (!v) {
        ra_tb_problem(pr, "%s/%s: out of memory", where, ra_tb_ds_names[k]);
        return;
    }
    if (load_dataset(grp, where, k, H5T_INTEGER, H5T_NATIVE_INT, 1, want, have_n, v, pr))
        for (int i = 0; i < g->n; i++)
            memcpy((char *)&g->prov[i] + off, &v[i], sizeof(int));
    free(v);
}

/* Schema 2: one provenance dataset per field. */
static void load_prov_datasets(hid_t grp, const char *where, struct ra_table_group *g, int have_n, struct problems *pr)
{
    const struct ra_table_prov *z = NULL;
    load_strings(grp, where, DS_OBJECTIVE, have_n, g, offsetof(struct ra_table_prov, objective),
                 sizeof z->objective, pr);
    load_ints(grp, where, DS_MIN_STRIDE, have_n, g, offsetof(struct ra_table_prov, min_stride), pr);
    load_ints(grp, where, DS_REPEATS, have_n, g, offsetof(struct ra_table_prov, repeats), pr);
    load_strings(grp, where, DS_DATE, have_n, g, offsetof(struct ra_table_prov, date), sizeof z->date, pr);
    load_strings(grp, where, DS_HOST, have_n, g, offsetof(struct ra_table_prov, host), sizeof z->host, pr);
    load_strings(grp, where, DS_VERSION, have_n, g, offsetof(struct ra_table_prov, version), sizeof z->version, pr);
}

/* Loads the open group `grp` (named `where`) of a schema-`version` file for p ranks into g,
 * reporting every problem; g is initialised here and always needs ra_table_group_free(). */
void ra_tb_load_group(hid_t grp, const char *where, const char *model_id, const char *hw_tag, int p, int version,
                       struct ra_table_group *g, struct problems *pr)
{
    hsize_t dims[2], any[1] = { 0 };
    hid_t d = ra_tb_ds_open(grp, where, ra_tb_ds_names[DS_CONTEXT], H5T_INTEGER, 1, any, dims, pr);
    if (d >= 0 && dims[0] > RA_TABLE_MAX_ENTRIES) {
        ra_tb_problem(pr, "%s/context_lengths: %llu entries, more than %d", where, (unsigned long long)dims[0],
                RA_TABLE_MAX_ENTRIES);
        ra_tb_h5_close(d), d = -1;
    }
    int n = d >= 0 ? (int)dims[0] : 0;
    if (ra_table_group_init(g, model_id, hw_tag, p, n) != RA_OK) {
        ra_tb_problem(pr, "%s: %s", where, ra_error_message());
        ra_tb_h5_close(d);
        return;
    }
    unsigned have = 0;
    if (d >= 0 && ra_tb_ds_read(d, H5T_NATIVE_INT, g->context_lengths, where, ra_tb_ds_names[DS_CONTEXT], pr) == 0)
        have = 1u << DS_CONTEXT;
    /* Without context_lengths there is no N to check the others against: check their kind only. */
    hsize_t n_want = have ? (hsize_t)n : 0, bw[2] = { n_want, (hsize_t)p + 1 }, rw[2] = { n_want, (hsize_t)p };
    have |= load_dataset(grp, where, DS_BOUNDS, H5T_INTEGER, H5T_NATIVE_INT, 2, bw, have, g->boundaries, pr);
    have |= load_dataset(grp, where, DS_RATIOS, H5T_FLOAT, H5T_NATIVE_DOUBLE, 2, rw, have & 1, g->ratios, pr);
    double *t[3] = { g->ttft_kvr_s, g->ttft_even_s, g->ttft_tsp_s };
    for (int k = 0; k < 3; k++)
        have |= load_dataset(grp, where, DS_KVR + k, H5T_FLOAT, H5T_NATIVE_DOUBLE, 1, &n_want, have & 1, t[k], pr);
    if (version == 1)
        load_prov_attrs(grp, where, g, pr);
    else
        load_prov_datasets(grp, where, g, have & 1, pr);
    if (version >= 3)
        load_key(grp, where, &g->key, pr);
    ra_tb_check_entries(g, have, version != 1, where, pr);
}

/* ------------------------------------------------------------------ reading */

int ra_table_read(const char *path, const char *model_id, const char *hw_tag, int p, struct ra_table_group *g)
{
    hid_t fid = -1, grp = -1;
    char leaf[16], where[300];
    struct problems pr = { .path = path };
    int version = 0;
    ra_tb_h5_quiet();
    memset(g, 0, sizeof *g);
    int rc = ra_tb_check_name("model id", model_id);
    if (rc == RA_OK)
        rc = ra_tb_check_name("hardware tag", hw_tag);
    if (rc == RA_OK && (p < 1 || p > RA_TABLE_MAX_RANKS))
        rc = ra_error_set(RA_EINVAL, "%s: %d ranks: want 1..%d", path, p, RA_TABLE_MAX_RANKS);
    if (rc != RA_OK)
        return rc;
    snprintf(leaf, sizeof leaf, "p%d", p);
    rc = ra_tb_file_open_checked(path, &fid, &version);
    if (rc == RA_OK)
        rc = ra_tb_group_open(fid, path, model_id, hw_tag, leaf, "partition table", &grp);
    if (rc != RA_OK)
        goto cleanup;
    ra_tb_group_path(where, sizeof where, model_id, hw_tag, leaf);
    ra_tb_load_group(grp, where, model_id, hw_tag, p, version, g, &pr);
    if (pr.n) {
        ra_table_group_free(g);
        rc = ra_error_set(RA_EFORMAT, "%s", pr.first);
    }
cleanup:
    ra_tb_h5_close(grp);
    ra_tb_h5_close(fid);
    return rc;
}

int ra_table_read_for(const char *path, const char *model_id, const char *hw_tag, int p,
                      const struct ra_table_key *run, struct ra_table_group *g)
{
    char have[80], want[80];
    int rc = ra_table_read(path, model_id, hw_tag, p, g);
    if (rc != RA_OK || ra_table_key_equal(&g->key, run))
        return rc;
    ra_table_key_format(&g->key, have, sizeof have);
    ra_table_key_format(run, want, sizeof want);
    ra_table_group_free(g);
    return ra_error_set(RA_EINVAL, "%s: /%s/%s/p%d was tuned for %s; this run is %s: not using it (tune a table "
                        "for this run)", path, model_id, hw_tag, p, have, want);
}

/* ------------------------------------------------------------------ validating */

/* Checks one node of the walk by where it sits in the layout of schema `version`. */
static void check_node(hid_t fid, const struct node *nd, int version, struct problems *pr)
{
    char buf[1200], where[1200], *m, *hw, *leaf;
    if (!nd->hard) {
        ra_tb_problem(pr, "/%s: is a soft or external link, not part of the table layout", nd->name);
        return;
    }
    if (strlen(nd->name) + 2 > sizeof buf) {
        ra_tb_problem(pr, "/%.200s...: name longer than %zu characters", nd->name, sizeof buf - 2);
        return;
    }
    if (nd->depth <= 2) {
        if (ra_tb_h5_exists(fid, nd->name, H5I_GROUP) != 1)
            ra_tb_problem(pr, "/%s: is not a group (want /<model-id>/<hardware-tag>/p<P>)", nd->name);
        return;
    }
    snprintf(buf, sizeof buf, "%s", nd->name);
    snprintf(where, sizeof where, "/%s", nd->name);
    ra_tb_split3(buf, &m, &hw, &leaf);
    if (nd->depth > 3) {
        /* Only a table's own datasets (load_group reported missing or malformed ones). */
        char *rest = strchr(leaf, '/');
        *rest++ = '\0';
        int known = 0;
        for (int k = 0; k < (version == 1 ? DS_V1_COUNT : DS_COUNT); k++)
            known |= !strcmp(rest, ra_tb_ds_names[k]);
        if (!(known && nd->depth == 4 && ra_tb_parse_pname(leaf)))
            ra_tb_problem(pr, "%s: unexpected object (a table group holds only the datasets of schema %d)", where,
                    version == 1 ? 1 : RA_TABLE_SCHEMA_VERSION);
        return;
    }
    int p = ra_tb_parse_pname(leaf);
    if (p && ra_tb_h5_exists(fid, nd->name, H5I_GROUP) == 1) {
        struct ra_table_group g;
        hid_t grp = H5Gopen2(fid, nd->name, H5P_DEFAULT);
        ra_tb_load_group(grp, where, m, hw, p, version, &g, pr);
        ra_table_group_free(&g);
        ra_tb_h5_close(grp);
    } else if (!strcmp(leaf, "profile")) {
        ra_tb_check_profile(fid, nd->name, pr);
    } else {
        ra_tb_problem(pr, "%s: is not a group p<P> (1 <= P <= %d) or profile", where, RA_TABLE_MAX_RANKS);
    }
}

int ra_table_validate(const char *path, FILE *out, int *n_problems)
{
    struct problems pr = { .path = path, .out = out };
    struct walk w = { 0 };
    hid_t fid = -1;
    int version = 0;
    ra_tb_h5_quiet();
    int rc = ra_tb_file_open(path, &fid);
    if (rc == RA_OK) {
        version = ra_tb_check_schema(fid, &pr); /* 0 when unknown: the groups are checked as the current schema */
        rc = ra_tb_walk_file(fid, path, &w);
    }
    if (rc != RA_OK) {
        ra_tb_problem_line(&pr, ra_error_message()); /* already names the file */
        goto cleanup;
    }
    for (int i = 0; i < w.n; i++)
        check_node(fid, &w.v[i], version, &pr);
    rc = pr.n ? RA_EFORMAT : RA_OK;
    if (pr.n)
        ra_error_set(rc, "%s", pr.first);
cleanup:
    ra_tb_walk_free(&w);
    ra_tb_h5_close(fid);
    if (n_problems)
        *n_problems = pr.n;
    return rc;
}

int ra_table_schema_version(const char *path, int *version)
{
    hid_t fid = -1;
    ra_tb_h5_quiet();
    int rc = ra_tb_file_open_checked(path, &fid, version);
    ra_tb_h5_close(fid);
    return rc;
}

/* ------------------------------------------------------------------ enumerating */

int ra_table_each(const char *path, ra_table_each_fn fn, void *ctx)
{
    hid_t fid = -1;
    struct walk w = { 0 };
    char *m, *hw, *leaf;
    ra_tb_h5_quiet();
    int rc = ra_tb_file_open_checked(path, &fid, NULL);
    if (rc == RA_OK)
        rc = ra_tb_walk_file(fid, path, &w);
    ra_tb_h5_close(fid);
    for (int i = 0; rc == RA_OK && i < w.n; i++) {
        if (w.v[i].depth != 3)
            continue;
        ra_tb_split3(w.v[i].name, &m, &hw, &leaf);
        rc = fn(m, hw, leaf, ctx);
    }
    ra_tb_walk_free(&w);
    return rc;
}
