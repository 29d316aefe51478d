/* Partition lookup tables in HDF5: reading, checking, locked atomic merging (interpolation,
 * which needs no HDF5, is interp.c).
 *
 * One checker serves read and validate: it reports problems one line each through a
 * `struct problems`; validate prints them all, read turns the first into its error. So a
 * group that reads is exactly a group that validates.
 *
 * HDF5's own error printing is silenced (it would print a stack per failed call); the innermost
 * HDF5 message is appended to ours where it says more than "failed". Every file is opened with
 * H5F_CLOSE_STRONG, so closing it closes whatever an error path left open. */
#include "config.h"
#include "table.h"
#include "outfile.h"
#include "mapped_file.h"
#include "status.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_VALUES (1 << 24) /* n * (p + 1): a corrupt shape must not allocate gigabytes */

/* A table group's datasets: the first DS_V1_COUNT in every schema, the provenance per entry
 * since schema 2 (schema 1 had it as group attributes). */
static const char *const ds_names[] = { "context_lengths", "boundaries", "ratios", "ttft_kvr_s", "ttft_even_s",
                                        "ttft_tsp_s", "objective", "min_stride", "repeats", "date", "host",
                                        "runahead_version" };
enum { DS_CONTEXT, DS_BOUNDS, DS_RATIOS, DS_KVR, DS_EVEN, DS_TSP, DS_V1_COUNT,
       DS_OBJECTIVE = DS_V1_COUNT, DS_MIN_STRIDE, DS_REPEATS, DS_DATE, DS_HOST, DS_VERSION, DS_COUNT };
#define ALL_DATA ((1u << DS_V1_COUNT) - 1) /* every numeric dataset loaded */

/* ------------------------------------------------------------------ problems */

struct problems {
    const char *path;
    FILE *out;      /* NULL: count and keep the first only */
    int n;
    char first[1024];
};

static void problem_line(struct problems *pr, const char *line)
{
    if (pr->out)
        fprintf(pr->out, "%s\n", line);
    if (pr->n++ == 0)
        snprintf(pr->first, sizeof pr->first, "%s", line);
}

/* One problem "PATH: <what>". */
__attribute__((format(printf, 2, 3))) static void problem(struct problems *pr, const char *fmt, ...)
{
    char msg[900], shown[900], line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Group, dataset and attribute names and values come from the file: one problem, one line. */
    snprintf(line, sizeof line, "%s: %s", pr->path, ra_escape(msg, shown, sizeof shown));
    problem_line(pr, line);
}

/* ------------------------------------------------------------------ HDF5 helpers */

static void h5_quiet(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static herr_t innermost_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    if (n == 0 && e->desc && *e->desc)
        snprintf(data, 200, " (HDF5: %s)", e->desc);
    return 0;
}

/* " (HDF5: <its most specific message>)" for the call that just failed, or "" when the stack
 * is empty (any later HDF5 call clears it). */
static const char *h5_cause(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cb, buf);
    return buf;
}

static void h5_close(hid_t id)
{
    if (id < 0)
        return;
    switch (H5Iget_type(id)) {
    case H5I_FILE: H5Fclose(id); break;
    case H5I_GROUP: H5Gclose(id); break;
    case H5I_DATASET: H5Dclose(id); break;
    case H5I_DATATYPE: H5Tclose(id); break;
    case H5I_DATASPACE: H5Sclose(id); break;
    case H5I_ATTR: H5Aclose(id); break;
    case H5I_GENPROP_LST: H5Pclose(id); break;
    default: break;
    }
}

static hid_t strong_fapl(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0)
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    return fapl;
}

/* For files we write: the HDF5 1.8 format (read by any HDF5 since 1.8, h5py and h5dump
 * included) rather than the earliest, because it checksums all metadata: a corrupted
 * superblock, object header, link or attribute is then reported ("incorrect metadata
 * checksum") instead of being parsed, which is where HDF5 1.10 crashes on damaged files. */
static hid_t write_fapl(void)
{
    hid_t fapl = strong_fapl();
    if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0)
        h5_close(fapl), fapl = -1;
    return fapl;
}

/* Opens an existing table file read-only; errors name the file and the cause. */
static int file_open(const char *path, hid_t *fid)
{
    char cause[200];
    int fd, rc;
    *fid = -1;
    /* HDF5 opens by name and would block on a FIFO: refuse anything but a regular file first. */
    if ((rc = ra_file_open_regular(path, &fd, NULL)) != RA_OK)
        return rc;
    close(fd);
    if (H5Fis_hdf5(path) <= 0)
        return ra_error_set(RA_EFORMAT, "%s: not an HDF5 file (no HDF5 signature)", path);
    hid_t fapl = strong_fapl();
    *fid = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (*fid < 0)
        ra_error_set(RA_EFORMAT, "%s: cannot open as HDF5, truncated or corrupt%s", path, h5_cause(cause));
    h5_close(fapl);
    return *fid < 0 ? RA_EFORMAT : RA_OK;
}

/* 1 if `name` (relative to loc) exists and is a hard link to an object of `type`,
 * 0 if absent, -1 if it is something else. */
static int h5_exists(hid_t loc, const char *name, H5I_type_t type)
{
    H5L_info_t li;
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
        return 0;
    if (H5Lget_info(loc, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD)
        return -1;
    hid_t o = H5Oopen(loc, name, H5P_DEFAULT);
    int ok = o >= 0 && H5Iget_type(o) == type;
    h5_close(o);
    return ok ? 1 : -1;
}

static const char *class_name(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_STRING: return "string";
    default: return "other";
    }
}

/* Opens attribute `name` of obj if it is a single value of class `cls`; else reports. */
static hid_t attr_open(hid_t obj, const char *where, const char *name, H5T_class_t cls, struct problems *pr)
{
    if (H5Aexists(obj, name) <= 0) {
        problem(pr, "%s: attribute %s is missing", where, name);
        return -1;
    }
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), sp = -1, t = -1;
    if (a < 0) {
        problem(pr, "%s: attribute %s cannot be opened", where, name);
        return -1;
    }
    sp = H5Aget_space(a);
    t = H5Aget_type(a);
    H5T_class_t got = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    hssize_t npoints = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    if (got != cls)
        problem(pr, "%s: attribute %s is of class %s, want %s", where, name, class_name(got), class_name(cls));
    else if (npoints != 1)
        problem(pr, "%s: attribute %s holds %lld values, want one", where, name, (long long)npoints);
    h5_close(sp);
    h5_close(t);
    if (got != cls || npoints != 1) {
        h5_close(a);
        return -1;
    }
    return a;
}

static int attr_read_num(hid_t obj, const char *where, const char *name, hid_t memtype,
                         H5T_class_t cls, void *v, struct problems *pr)
{
    hid_t a = attr_open(obj, where, name, cls, pr);
    if (a < 0)
        return -1;
    herr_t e = H5Aread(a, memtype, v);
    h5_close(a);
    if (e < 0)
        problem(pr, "%s: attribute %s cannot be read", where, name);
    return e < 0 ? -1 : 0;
}

/* Reads a fixed- or variable-length string (h5py writes either) into buf[len]. */
static int attr_read_str(hid_t obj, const char *where, const char *name, char *buf, size_t len, struct problems *pr)
{
    hid_t a = attr_open(obj, where, name, H5T_STRING, pr), ft = -1, mt = -1;
    char *s = NULL;
    int vlen = 0, read = 0;
    if (a < 0)
        return -1;
    ft = H5Aget_type(a);
    vlen = H5Tis_variable_str(ft) > 0;
    size_t size = H5Tget_size(ft);
    if (vlen) {
        mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5Tget_cset(ft));
        read = H5Aread(a, mt, &s) >= 0 && s;
    } else if (size > 0 && size <= 4096 && (s = calloc(1, size + 1))) {
        read = H5Aread(a, ft, s) >= 0; /* the raw bytes: no cset or padding conversion */
    }
    int ok = read && strlen(s) < len;
    if (!read)
        problem(pr, "%s: attribute %s cannot be read as a string", where, name);
    else if (!ok)
        problem(pr, "%s: attribute %s is longer than %zu characters", where, name, len - 1);
    else
        strcpy(buf, s);
    if (vlen && s)
        H5free_memory(s);
    else if (!vlen)
        free(s);
    h5_close(mt);
    h5_close(ft);
    h5_close(a);
    return ok ? 0 : -1;
}

/* Opens dataset `name` if it has class `cls`, `rank` dimensions and the wanted sizes
 * (want[i] == 0: any); dims gets its shape. Otherwise reports why and returns -1. */
static hid_t ds_open(hid_t grp, const char *where, const char *name, H5T_class_t cls, int rank,
                     const hsize_t *want, hsize_t *dims, struct problems *pr)
{
    int ex = h5_exists(grp, name, H5I_DATASET);
    if (ex <= 0) {
        problem(pr, "%s/%s: %s", where, name, ex == 0 ? "dataset is missing" : "is not a dataset");
        return -1;
    }
    hid_t d = H5Dopen2(grp, name, H5P_DEFAULT), sp = -1, t = -1;
    int ok = 0;
    if (d < 0) {
        problem(pr, "%s/%s: dataset cannot be opened", where, name);
        return -1;
    }
    sp = H5Dget_space(d);
    t = H5Dget_type(d);
    H5T_class_t got = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    if (got != cls) {
        problem(pr, "%s/%s: values are of class %s, want %s", where, name, class_name(got), class_name(cls));
    } else if (nd != rank) {
        problem(pr, "%s/%s: has %d dimensions, want %d", where, name, nd, rank);
    } else {
        H5Sget_simple_extent_dims(sp, dims, NULL);
        ok = 1;
        for (int i = 0; i < rank; i++)
            ok &= want[i] == 0 || dims[i] == want[i];
        if (!ok && rank == 1)
            problem(pr, "%s/%s: shape [%llu], want [%llu]", where, name, (unsigned long long)dims[0],
                    (unsigned long long)want[0]);
        else if (!ok)
            problem(pr, "%s/%s: shape [%llu][%llu], want [%llu][%llu]", where, name, (unsigned long long)dims[0],
                    (unsigned long long)dims[1], (unsigned long long)want[0], (unsigned long long)want[1]);
    }
    h5_close(sp);
    h5_close(t);
    if (!ok)
        h5_close(d);
    return ok ? d : -1;
}

static int ds_read(hid_t d, hid_t memtype, void *buf, const char *where, const char *name, struct problems *pr)
{
    char cause[200];
    herr_t e = H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    if (e < 0)
        problem(pr, "%s/%s: values cannot be read%s", where, name, h5_cause(cause));
    h5_close(d);
    return e < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ groups in memory */

static int check_name(const char *what, const char *s)
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
    int rc = check_name("model id", model_id);
    if (rc == RA_OK)
        rc = check_name("hardware tag", hw_tag);
    if (rc != RA_OK)
        return rc;
    if (p < 1 || p > RA_TABLE_MAX_RANKS || n < 0 || n > RA_TABLE_MAX_ENTRIES || (int64_t)n * (p + 1) > MAX_VALUES)
        return ra_error_set(RA_ERANGE, "table: %d entries for %d ranks are outside the limits (1..%d ranks, %d values)",
                            n, p, RA_TABLE_MAX_RANKS, MAX_VALUES);
    snprintf(g->model_id, sizeof g->model_id, "%s", model_id);
    snprintf(g->hw_tag, sizeof g->hw_tag, "%s", hw_tag);
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
        problem(pr, "%s/boundaries: entry %d (context %d) is %s, not strictly increasing from 0 to %d",
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
            problem(pr, "%s/ratios: entry %d (context %d): ratio %d is %g, outside (0,1]", where, i, c, r, v[r]);
            return;
        }
        sum += v[r];
    }
    if (fabs(sum - 1) > 1e-6) {
        problem(pr, "%s/ratios: entry %d (context %d): ratios sum to %.9g, not 1", where, i, c, sum);
        return;
    }
    double acc = 0;
    for (int r = 1; r < g->p && bounds_ok; r++) {
        acc += v[r - 1];
        if (fabs(acc * c - b[r]) > 1.0) {
            problem(pr, "%s/ratios: entry %d (context %d): ratios put boundary %d at %.1f, boundaries say %d",
                    where, i, c, r, acc * c, b[r]);
            return;
        }
    }
}

static void check_ttfts(const double *t, const char *name, int n, const char *where, struct problems *pr)
{
    for (int i = 0; i < n; i++)
        if (!isnan(t[i]) && !(t[i] > 0 && isfinite(t[i]))) {
            problem(pr, "%s/%s: entry %d is %g, want a positive time or NaN", where, name, i, t[i]);
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
        problem(pr, "%s: attribute objective is '%s', want 'measure' or 'model'", where, pv->objective);
    if (pv->min_stride < 1)
        problem(pr, "%s: attribute min_stride is %d, want >= 1", where, pv->min_stride);
    if (pv->repeats < 1)
        problem(pr, "%s: attribute repeats is %d, want >= 1", where, pv->repeats);
}

/* Schema 2: one value per entry; the first bad entry of each dataset is reported. */
static void check_prov_entries(const struct ra_table_group *g, const char *where, struct problems *pr)
{
    int bad_o = 0, bad_s = 0, bad_r = 0;
    for (int i = 0; i < g->n; i++) {
        const struct ra_table_prov *pv = &g->prov[i];
        int c = g->context_lengths[i];
        if (!bad_o && (bad_o = !objective_ok(pv->objective)))
            problem(pr, "%s/objective: entry %d (context %d) is '%s', want 'measure' or 'model'", where, i, c,
                    pv->objective);
        if (!bad_s && (bad_s = pv->min_stride < 1))
            problem(pr, "%s/min_stride: entry %d (context %d) is %d, want >= 1", where, i, c, pv->min_stride);
        if (!bad_r && (bad_r = pv->repeats < 1))
            problem(pr, "%s/repeats: entry %d (context %d) is %d, want >= 1", where, i, c, pv->repeats);
    }
}

/* Checks each entry's values in the datasets that loaded (bit DS_x of `have`), and with
 * prov_per_entry its provenance (schema 1's attributes are checked as they load). */
static void check_rows(const struct ra_table_group *g, unsigned have, int prov_per_entry, const char *where,
                       struct problems *pr)
{
    int has_c = have >> DS_CONTEXT & 1;
    for (int i = 0; has_c && i < g->n; i++) {
        int before = pr->n;
        if (g->context_lengths[i] < g->p)
            problem(pr, "%s/context_lengths: entry %d is %d, fewer tokens than the %d ranks", where, i,
                    g->context_lengths[i], g->p);
        if (have >> DS_BOUNDS & 1)
            check_bounds_row(g, i, where, pr);
        if (have >> DS_RATIOS & 1)
            check_ratios_row(g, i, (have >> DS_BOUNDS & 1) && pr->n == before, where, pr);
    }
    const double *t[3] = { g->ttft_kvr_s, g->ttft_even_s, g->ttft_tsp_s };
    for (int k = 0; k < 3; k++)
        if (have >> (DS_KVR + k) & 1)
            check_ttfts(t[k], ds_names[DS_KVR + k], g->n, where, pr);
    if (prov_per_entry && has_c)
        check_prov_entries(g, where, pr);
}

/* check_rows, and the group as a whole: entries present, context lengths ascending, unique. */
static void check_entries(const struct ra_table_group *g, unsigned have, int prov_per_entry, const char *where,
                          struct problems *pr)
{
    int has_c = have >> DS_CONTEXT & 1;
    if (has_c && g->n < 1)
        problem(pr, "%s/context_lengths: the table has no entries", where);
    for (int i = 1; has_c && i < g->n; i++) {
        int c = g->context_lengths[i];
        if (c >= g->p && c <= g->context_lengths[i - 1])
            problem(pr, "%s/context_lengths: entry %d (%d) is not greater than entry %d (%d): want ascending, unique",
                    where, i, c, i - 1, g->context_lengths[i - 1]);
    }
    check_rows(g, have, prov_per_entry, where, pr);
}

/* Checks dataset k's kind and shape and, when there is an N to size it (have_n), reads it
 * into buf. Returns the DS_ bit for a dataset whose values are now in buf, else 0. */
static unsigned load_dataset(hid_t grp, const char *where, int k, H5T_class_t cls, hid_t memtype, int rank,
                             const hsize_t *want, int have_n, void *buf, struct problems *pr)
{
    hsize_t dims[2];
    hid_t d = ds_open(grp, where, ds_names[k], cls, rank, want, dims, pr);
    if (d < 0)
        return 0;
    if (!have_n) {
        h5_close(d);
        return 0;
    }
    return ds_read(d, memtype, buf, where, ds_names[k], pr) == 0 ? 1u << k : 0;
}

/* Schema 1: the group's attributes, given to every entry (its host is unknown). */
static void load_prov_attrs(hid_t grp, const char *where, struct ra_table_group *g, struct problems *pr)
{
    struct ra_table_prov pv;
    prov_default(&pv);
    pv.host[0] = '\0';
    attr_read_str(grp, where, "objective", pv.objective, sizeof pv.objective, pr);
    attr_read_num(grp, where, "min_stride", H5T_NATIVE_INT, H5T_INTEGER, &pv.min_stride, pr);
    attr_read_num(grp, where, "repeats", H5T_NATIVE_INT, H5T_INTEGER, &pv.repeats, pr);
    attr_read_str(grp, where, "date", pv.date, sizeof pv.date, pr);
    attr_read_str(grp, where, "runahead_version", pv.version, sizeof pv.version, pr);
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
    hid_t d = ds_open(grp, where, ds_names[k], H5T_STRING, 1, want, dims, pr), t = -1;
    char *buf = NULL, cause[200];
    if (d < 0 || !have_n)
        goto cleanup;
    t = H5Dget_type(d);
    size_t size = t < 0 ? 0 : H5Tget_size(t);
    if (t < 0 || H5Tis_variable_str(t) != 0 || size < 1 || size > 4096) {
        problem(pr, "%s/%s: want fixed-length strings of 1..4096 bytes", where, ds_names[k]);
        goto cleanup;
    }
    if (!(buf = calloc(g->n ? (size_t)g->n : 1, size))) {
        problem(pr, "%s/%s: out of memory", where, ds_names[k]);
        goto cleanup;
    }
    if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) { /* the raw bytes, as attr_read_str */
        problem(pr, "%s/%s: values cannot be read%s", where, ds_names[k], h5_cause(cause));
        goto cleanup;
    }
    for (int i = 0; i < g->n; i++) {
        const char *s = buf + (size_t)i * size;
        size_t len = strnlen(s, size);
        if (len >= cap) {
            problem(pr, "%s/%s: entry %d is longer than %zu characters", where, ds_names[k], i, cap - 1);
            break;
        }
        char *field = (char *)&g->prov[i] + off;
        memcpy(field, s, len);
        field[len] = '\0';
    }
cleanup:
    free(buf);
    h5_close(t);
    h5_close(d);
}

/* An integer dataset [n] into the int field at `off` of each entry's provenance. */
static void load_ints(hid_t grp, const char *where, int k, int have_n, struct ra_table_group *g, size_t off,
                      struct problems *pr)
{
    hsize_t want[1] = { have_n ? (hsize_t)g->n : 0 };
    int *v = malloc(sizeof(int) * (g->n ? (size_t)g->n : 1));
    if (!v) {
        problem(pr, "%s/%s: out of memory", where, ds_names[k]);
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
static void load_group(hid_t grp, const char *where, const char *model_id, const char *hw_tag, int p, int version,
                       struct ra_table_group *g, struct problems *pr)
{
    hsize_t dims[2], any[1] = { 0 };
    hid_t d = ds_open(grp, where, ds_names[DS_CONTEXT], H5T_INTEGER, 1, any, dims, pr);
    if (d >= 0 && dims[0] > RA_TABLE_MAX_ENTRIES) {
        problem(pr, "%s/context_lengths: %llu entries, more than %d", where, (unsigned long long)dims[0],
                RA_TABLE_MAX_ENTRIES);
        h5_close(d), d = -1;
    }
    int n = d >= 0 ? (int)dims[0] : 0;
    if (ra_table_group_init(g, model_id, hw_tag, p, n) != RA_OK) {
        problem(pr, "%s: %s", where, ra_error_message());
        h5_close(d);
        return;
    }
    unsigned have = 0;
    if (d >= 0 && ds_read(d, H5T_NATIVE_INT, g->context_lengths, where, ds_names[DS_CONTEXT], pr) == 0)
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
    check_entries(g, have, version != 1, where, pr);
}

/* The file's schema version (1 or 2), or 0 after reporting why it is neither. */
static int check_schema(hid_t fid, struct problems *pr)
{
    int v = 0;
    if (H5Aexists(fid, "schema_version") <= 0) {
        problem(pr, "/: attribute schema_version is missing (not a runahead partition table?)");
        return 0;
    }
    if (attr_read_num(fid, "/", "schema_version", H5T_NATIVE_INT, H5T_INTEGER, &v, pr) != 0)
        return 0;
    if (v < 1 || v > RA_TABLE_SCHEMA_VERSION) {
        problem(pr, "/: schema_version is %d; this runahead reads versions 1 to %d", v, RA_TABLE_SCHEMA_VERSION);
        return 0;
    }
    return v;
}

/* ------------------------------------------------------------------ walking a file */

/* One object of the file, found by H5Lvisit (which cannot be nested with our reads). */
struct node {
    char *name;  /* relative to the root: "m", "m/hw", "m/hw/p2", "m/hw/p2/ratios" */
    int depth;   /* 1 + number of '/' */
    int hard;    /* a hard link (soft or external links are not part of the layout) */
};

struct walk {
    struct node *v;
    int n, cap, oom;
};

static herr_t walk_cb(hid_t root, const char *name, const H5L_info_t *info, void *data)
{
    struct walk *w = data;
    (void)root;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        struct node *v = cap <= 1 << 22 ? realloc(w->v, sizeof *v * (size_t)cap) : NULL; /* 4M objects */
        if (!v) {
            w->oom = 1;
            return -1;
        }
        w->v = v, w->cap = cap;
    }
    struct node *nd = &w->v[w->n];
    if (!(nd->name = strdup(name))) {
        w->oom = 1;
        return -1;
    }
    nd->depth = 1;
    for (const char *s = name; *s; s++)
        nd->depth += *s == '/';
    nd->hard = info->type == H5L_TYPE_HARD;
    w->n++;
    return 0;
}

static void walk_free(struct walk *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->v[i].name);
    free(w->v);
    memset(w, 0, sizeof *w);
}

static int walk_file(hid_t fid, const char *path, struct walk *w)
{
    char cause[200];
    memset(w, 0, sizeof *w);
    if (H5Lvisit(fid, H5_INDEX_NAME, H5_ITER_INC, walk_cb, w) < 0) {
        int oom = w->oom;
        walk_free(w);
        if (oom)
            return ra_error_set(RA_ENOMEM, "%s: out of memory listing its groups", path);
        return ra_error_set(RA_EFORMAT, "%s: cannot list its groups, corrupt%s", path, h5_cause(cause));
    }
    return RA_OK;
}

/* "p<P>" with P in 1..RA_TABLE_MAX_RANKS written canonically; returns P or 0. */
static int parse_pname(const char *s)
{
    if (s[0] != 'p' || s[1] < '1' || s[1] > '9' || strlen(s) > 5)
        return 0;
    int p = 0;
    for (const char *c = s + 1; *c; c++) {
        if (*c < '0' || *c > '9')
            return 0;
        p = p * 10 + (*c - '0');
    }
    return p <= RA_TABLE_MAX_RANKS ? p : 0;
}

/* Splits "m/hw/leaf" (a depth-3 node) into its parts, in place. */
static void split3(char *name, char **m, char **hw, char **leaf)
{
    *m = name;
    *hw = strchr(name, '/');
    *(*hw)++ = '\0';
    *leaf = strchr(*hw, '/');
    *(*leaf)++ = '\0';
}

int ra_table_list(const char *path, char *buf, size_t len)
{
    hid_t fid;
    struct walk w;
    size_t used = 0;
    h5_quiet();
    buf[0] = '\0';
    int rc = file_open(path, &fid);
    if (rc == RA_OK)
        rc = walk_file(fid, path, &w);
    h5_close(fid);
    if (rc != RA_OK)
        return rc;
    for (int i = 0; i < w.n; i++) {
        if (w.v[i].depth != 3)
            continue;
        const char *sep = used ? ", " : "", *name = ra_esc(w.v[i].name); /* names from the file */
        if (used + strlen(sep) + strlen(name) + 4 >= len) {
            snprintf(buf + used, len - used, "%s...", used + 4 < len ? sep : "");
            break;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%s", sep, name);
    }
    if (!used && !buf[0])
        snprintf(buf, len, "no tables");
    walk_free(&w);
    return RA_OK;
}

/* ------------------------------------------------------------------ reading */

static void group_path(char *buf, size_t len, const char *model_id, const char *hw_tag, const char *leaf)
{
    snprintf(buf, len, "/%s/%s/%s", model_id, hw_tag, leaf);
}

/* Opens /m/hw/leaf, checking each level so a missing one gives a clear message. */
static int group_open(hid_t fid, const char *path, const char *model_id, const char *hw_tag, const char *leaf,
                      const char *what, hid_t *grp)
{
    char gp[400], list[400];
    const char *parts[3] = { model_id, hw_tag, leaf };
    size_t used = 0;
    gp[0] = '\0';
    *grp = -1;
    for (int k = 0; k < 3; k++) {
        used += (size_t)snprintf(gp + used, sizeof gp - used, "/%s", parts[k]);
        int ex = h5_exists(fid, gp, H5I_GROUP);
        if (ex < 0)
            return ra_error_set(RA_EFORMAT, "%s: %s is not a group", path, gp);
        if (ex == 0) {
            if (ra_table_list(path, list, sizeof list) != RA_OK)
                snprintf(list, sizeof list, "unreadable groups");
            return ra_error_set(RA_EINVAL, "%s: no %s for model %s, hardware %s (group /%s/%s/%s); the file has: %s",
                                path, what, model_id, hw_tag, model_id, hw_tag, leaf, list);
        }
    }
    *grp = H5Gopen2(fid, gp, H5P_DEFAULT);
    return *grp < 0 ? ra_error_set(RA_EFORMAT, "%s: %s cannot be opened", path, gp) : RA_OK;
}

/* Opens the file and checks its schema version; *version (may be NULL) gets it. */
static int file_open_checked(const char *path, hid_t *fid, int *version)
{
    struct problems pr = { .path = path };
    int rc = file_open(path, fid);
    if (rc != RA_OK)
        return rc;
    int v = check_schema(*fid, &pr);
    if (version)
        *version = v;
    if (pr.n) {
        h5_close(*fid), *fid = -1;
        return ra_error_set(RA_EFORMAT, "%s", pr.first);
    }
    return RA_OK;
}

int ra_table_read(const char *path, const char *model_id, const char *hw_tag, int p, struct ra_table_group *g)
{
    hid_t fid = -1, grp = -1;
    char leaf[16], where[300];
    struct problems pr = { .path = path };
    int version = 0;
    h5_quiet();
    memset(g, 0, sizeof *g);
    int rc = check_name("model id", model_id);
    if (rc == RA_OK)
        rc = check_name("hardware tag", hw_tag);
    if (rc == RA_OK && (p < 1 || p > RA_TABLE_MAX_RANKS))
        rc = ra_error_set(RA_EINVAL, "%s: %d ranks: want 1..%d", path, p, RA_TABLE_MAX_RANKS);
    if (rc != RA_OK)
        return rc;
    snprintf(leaf, sizeof leaf, "p%d", p);
    rc = file_open_checked(path, &fid, &version);
    if (rc == RA_OK)
        rc = group_open(fid, path, model_id, hw_tag, leaf, "partition table", &grp);
    if (rc != RA_OK)
        goto cleanup;
    group_path(where, sizeof where, model_id, hw_tag, leaf);
    load_group(grp, where, model_id, hw_tag, p, version, g, &pr);
    if (pr.n) {
        ra_table_group_free(g);
        rc = ra_error_set(RA_EFORMAT, "%s", pr.first);
    }
cleanup:
    h5_close(grp);
    h5_close(fid);
    return rc;
}

/* ------------------------------------------------------------------ validating */

static void check_profile(hid_t fid, const char *name, struct problems *pr);

/* Checks one node of the walk by where it sits in the layout of schema `version`. */
static void check_node(hid_t fid, const struct node *nd, int version, struct problems *pr)
{
    char buf[1200], where[1200], *m, *hw, *leaf;
    if (!nd->hard) {
        problem(pr, "/%s: is a soft or external link, not part of the table layout", nd->name);
        return;
    }
    if (strlen(nd->name) + 2 > sizeof buf) {
        problem(pr, "/%.200s...: name longer than %zu characters", nd->name, sizeof buf - 2);
        return;
    }
    if (nd->depth <= 2) {
        if (h5_exists(fid, nd->name, H5I_GROUP) != 1)
            problem(pr, "/%s: is not a group (want /<model-id>/<hardware-tag>/p<P>)", nd->name);
        return;
    }
    snprintf(buf, sizeof buf, "%s", nd->name);
    snprintf(where, sizeof where, "/%s", nd->name);
    split3(buf, &m, &hw, &leaf);
    if (nd->depth > 3) {
        /* Only a table's own datasets (load_group reported missing or malformed ones). */
        char *rest = strchr(leaf, '/');
        *rest++ = '\0';
        int known = 0;
        for (int k = 0; k < (version == 1 ? DS_V1_COUNT : DS_COUNT); k++)
            known |= !strcmp(rest, ds_names[k]);
        if (!(known && nd->depth == 4 && parse_pname(leaf)))
            problem(pr, "%s: unexpected object (a table group holds only the datasets of schema %d)", where,
                    version == 1 ? 1 : RA_TABLE_SCHEMA_VERSION);
        return;
    }
    int p = parse_pname(leaf);
    if (p && h5_exists(fid, nd->name, H5I_GROUP) == 1) {
        struct ra_table_group g;
        hid_t grp = H5Gopen2(fid, nd->name, H5P_DEFAULT);
        load_group(grp, where, m, hw, p, version, &g, pr);
        ra_table_group_free(&g);
        h5_close(grp);
    } else if (!strcmp(leaf, "profile")) {
        check_profile(fid, nd->name, pr);
    } else {
        problem(pr, "%s: is not a group p<P> (1 <= P <= %d) or profile", where, RA_TABLE_MAX_RANKS);
    }
}

struct profile_names {
    char (*names)[64];
    int n, max, bad;
};

static herr_t profile_name_cb(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    struct profile_names *pn = data;
    (void)loc, (void)info;
    if (strlen(name) >= 64) {
        pn->bad = 1;
        return 0;
    }
    if (pn->n < pn->max)
        strcpy(pn->names[pn->n], name);
    pn->n++;
    return 0;
}

/* Every attribute of a profile group is a scalar double; it holds no objects. */
static void check_profile(hid_t fid, const char *name, struct problems *pr)
{
    char where[300];
    char(*names)[64] = calloc(RA_TABLE_MAX_PROFILE, 64);
    struct profile_names pn = { names, 0, RA_TABLE_MAX_PROFILE, 0 };
    hsize_t idx = 0;
    double v;
    snprintf(where, sizeof where, "/%s", name);
    hid_t grp = h5_exists(fid, name, H5I_GROUP) == 1 ? H5Gopen2(fid, name, H5P_DEFAULT) : -1;
    if (grp < 0 || !names) {
        problem(pr, "%s: %s", where, names ? "is not a group" : "out of memory");
        goto cleanup;
    }
    if (H5Aiterate2(grp, H5_INDEX_NAME, H5_ITER_INC, &idx, profile_name_cb, &pn) < 0)
        problem(pr, "%s: attributes cannot be listed", where);
    if (pn.bad)
        problem(pr, "%s: an attribute name is longer than 63 characters", where);
    if (pn.n > pn.max)
        problem(pr, "%s: %d attributes, more than %d", where, pn.n, pn.max);
    for (int i = 0; i < pn.n && i < pn.max; i++)
        attr_read_num(grp, where, names[i], H5T_NATIVE_DOUBLE, H5T_FLOAT, &v, pr);
cleanup:
    h5_close(grp);
    free(names);
}

int ra_table_validate(const char *path, FILE *out, int *n_problems)
{
    struct problems pr = { .path = path, .out = out };
    struct walk w = { 0 };
    hid_t fid = -1;
    int version = 0;
    h5_quiet();
    int rc = file_open(path, &fid);
    if (rc == RA_OK) {
        version = check_schema(fid, &pr); /* 0 when unknown: the groups are checked as the current schema */
        rc = walk_file(fid, path, &w);
    }
    if (rc != RA_OK) {
        problem_line(&pr, ra_error_message()); /* already names the file */
        goto cleanup;
    }
    for (int i = 0; i < w.n; i++)
        check_node(fid, &w.v[i], version, &pr);
    rc = pr.n ? RA_EFORMAT : RA_OK;
    if (pr.n)
        ra_error_set(rc, "%s", pr.first);
cleanup:
    walk_free(&w);
    h5_close(fid);
    if (n_problems)
        *n_problems = pr.n;
    return rc;
}

/* ------------------------------------------------------------------ writing */

static int h5_fail(const char *path, const char *what)
{
    char cause[200];
    return ra_error_set(RA_EIO, "%s: cannot write %s%s", path, what, h5_cause(cause));
}

static int attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, mtype, v);
    h5_close(a);
    h5_close(sp);
    return e < 0 ? -1 : 0;
}

static int ds_write(hid_t grp, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                    const void *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = sp < 0 ? -1 : H5Dcreate2(grp, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = d < 0 ? -1 : H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    h5_close(d);
    h5_close(sp);
    return e < 0 ? -1 : 0;
}

/* Creates /m/hw/leaf (and its parents) in a file being written. */
static hid_t group_create(hid_t fid, const char *model_id, const char *hw_tag, const char *leaf)
{
    char gp[400];
    group_path(gp, sizeof gp, model_id, hw_tag, leaf);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t grp = -1;
    if (lcpl >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0)
        grp = H5Gcreate2(fid, gp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    h5_close(lcpl);
    return grp;
}

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
        rc = ds_write(grp, name, t, t, 1, &n, buf);
    }
    h5_close(t);
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
        rc = ds_write(grp, name, H5T_STD_I32LE, H5T_NATIVE_INT, 1, &n, v);
    }
    free(v);
    return rc;
}

static int prov_write(hid_t grp, const struct ra_table_group *g)
{
    const struct ra_table_prov *z = NULL;
    int bad = ds_write_strings(grp, ds_names[DS_OBJECTIVE], g, offsetof(struct ra_table_prov, objective),
                               sizeof z->objective);
    bad = bad || ds_write_ints(grp, ds_names[DS_MIN_STRIDE], g, offsetof(struct ra_table_prov, min_stride));
    bad = bad || ds_write_ints(grp, ds_names[DS_REPEATS], g, offsetof(struct ra_table_prov, repeats));
    bad = bad || ds_write_strings(grp, ds_names[DS_DATE], g, offsetof(struct ra_table_prov, date), sizeof z->date);
    bad = bad || ds_write_strings(grp, ds_names[DS_HOST], g, offsetof(struct ra_table_prov, host), sizeof z->host);
    bad = bad || ds_write_strings(grp, ds_names[DS_VERSION], g, offsetof(struct ra_table_prov, version),
                                  sizeof z->version);
    return bad ? -1 : 0;
}

static int group_write(hid_t fid, const char *path, const struct ra_table_group *g)
{
    char leaf[16];
    snprintf(leaf, sizeof leaf, "p%d", g->p);
    hid_t grp = group_create(fid, g->model_id, g->hw_tag, leaf);
    hsize_t n = (hsize_t)g->n, d2[2] = { n, (hsize_t)g->p + 1 }, r2[2] = { n, (hsize_t)g->p };
    int bad = grp < 0;
    bad = bad || ds_write(grp, "context_lengths", H5T_STD_I32LE, H5T_NATIVE_INT, 1, &n, g->context_lengths);
    bad = bad || ds_write(grp, "boundaries", H5T_STD_I32LE, H5T_NATIVE_INT, 2, d2, g->boundaries);
    bad = bad || ds_write(grp, "ratios", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, r2, g->ratios);
    bad = bad || ds_write(grp, "ttft_kvr_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, g->ttft_kvr_s);
    bad = bad || ds_write(grp, "ttft_even_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, g->ttft_even_s);
    bad = bad || ds_write(grp, "ttft_tsp_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, g->ttft_tsp_s);
    bad = bad || prov_write(grp, g);
    int rc = bad ? h5_fail(path, "the table group") : RA_OK;
    h5_close(grp);
    return rc;
}

static herr_t copy_cb(hid_t src, const char *name, const H5L_info_t *info, void *dst)
{
    (void)info;
    return H5Ocopy(src, name, *(hid_t *)dst, name, H5P_DEFAULT, H5P_DEFAULT);
}

/* A schema-1 file's table groups, copied as they were into the new file, rewritten in the
 * current layout: its per-group provenance becomes each entry's. */
static int upgrade_groups(hid_t old, hid_t fid, const char *path, const char *tmp)
{
    struct walk w;
    char *m, *hw, *leaf, where[1200];
    int rc = walk_file(old, path, &w);
    for (int i = 0; rc == RA_OK && i < w.n; i++) {
        if (w.v[i].depth != 3 || strlen(w.v[i].name) + 2 > sizeof where)
            continue;
        snprintf(where, sizeof where, "/%s", w.v[i].name);
        split3(w.v[i].name, &m, &hw, &leaf);
        int p = parse_pname(leaf);
        if (!p)
            continue;
        struct ra_table_group g;
        struct problems pr = { .path = path };
        hid_t grp = H5Gopen2(old, where, H5P_DEFAULT);
        load_group(grp, where, m, hw, p, 1, &g, &pr);
        h5_close(grp);
        if (pr.n)
            rc = ra_error_set(RA_EFORMAT, "%s", pr.first);
        else if (H5Ldelete(fid, where, H5P_DEFAULT) < 0)
            rc = h5_fail(tmp, "the file (upgrading a schema-1 group)");
        else
            rc = group_write(fid, tmp, &g);
        ra_table_group_free(&g);
    }
    walk_free(&w);
    return rc;
}

typedef int (*writer_fn)(hid_t fid, const char *tmp, const void *ctx);

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
                            h5_cause(cause));
    if (attr_write(*fid, "schema_version", H5T_STD_I32LE, H5T_NATIVE_INT, &version) < 0)
        return h5_fail(of->tmp, "schema_version");
    return RA_OK;
}

/* Copies every object of the (validated) old file to a new one except /m/hw/leaf, which
 * `writer` then adds; the new file replaces the old by rename. Callers hold the table's lock. */
static int file_rewrite(const char *path, const char *model_id, const char *hw_tag, const char *leaf,
                        writer_fn writer, const void *ctx)
{
    struct ra_outfile of = RA_OUTFILE_INIT;
    char gp[400];
    int exists = access(path, F_OK) == 0, old_version = 0;
    hid_t old = -1, fid = -1, fapl = write_fapl();
    group_path(gp, sizeof gp, model_id, hw_tag, leaf);
    int rc = ra_outfile_begin(&of, path);
    if (rc == RA_OK)
        rc = tmp_create(&of, fapl, &fid);
    if (rc == RA_OK && exists)
        rc = file_open_checked(path, &old, &old_version);
    if (rc != RA_OK)
        goto cleanup;
    if (exists && H5Literate(old, H5_INDEX_NAME, H5_ITER_INC, NULL, copy_cb, &fid) < 0) {
        rc = h5_fail(of.tmp, "a copy of the other groups");
        goto cleanup;
    }
    if (exists && old_version == 1 && (rc = upgrade_groups(old, fid, path, of.tmp)) != RA_OK)
        goto cleanup;
    /* The copy's old group goes; HDF5 reuses its space for the new one within this session. */
    if (h5_exists(fid, gp, H5I_GROUP) == 1 && H5Ldelete(fid, gp, H5P_DEFAULT) < 0) {
        rc = h5_fail(of.tmp, "the file (deleting the old group)");
        goto cleanup;
    }
    if ((rc = writer(fid, of.tmp, ctx)) != RA_OK)
        goto cleanup;
    herr_t e = H5Fclose(fid);
    fid = -1;
    rc = e < 0 ? h5_fail(of.tmp, "the file (closing it)") : ra_outfile_commit(&of);
cleanup:
    h5_close(old);
    h5_close(fid);
    h5_close(fapl);
    ra_outfile_abort(&of); /* after the close: nothing left open on it; a no-op once committed */
    return rc;
}

/* Writing into a file that does not validate would carry its problems on; refuse instead. */
static int check_existing(const char *path)
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
    h5_quiet();
    int rc = ra_outfile_check(path);
    return rc == RA_OK ? check_existing(path) : rc;
}

int ra_table_schema_version(const char *path, int *version)
{
    hid_t fid = -1;
    h5_quiet();
    int rc = file_open_checked(path, &fid, version);
    h5_close(fid);
    return rc;
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
static int locked(const char *path, const struct ra_table_writer *w, int (*fn)(const char *, const void *, void *),
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
    int have_old = 0, rc = check_existing(path);
    snprintf(leaf, sizeof leaf, "p%d", g->p);
    group_path(where, sizeof where, g->model_id, g->hw_tag, leaf);
    if (rc == RA_OK && access(path, F_OK) == 0) {
        rc = ra_table_read(path, g->model_id, g->hw_tag, g->p, &old);
        have_old = rc == RA_OK;
        if (rc == RA_EINVAL) /* the group is new */
            rc = RA_OK;
    }
    if (rc == RA_OK)
        rc = entries_merge(job, have_old ? &old : NULL, g, &merged);
    if (rc == RA_OK) {
        check_rows(g, ALL_DATA, 1, where, &pr); /* refused even where the entry in the table stays */
        if (!pr.n)
            check_entries(&merged, ALL_DATA, 1, where, &pr);
        if (pr.n)
            rc = ra_error_set(RA_EINVAL, "not writing an invalid entry: %s", pr.first);
    }
    if (rc == RA_OK)
        rc = file_rewrite(path, g->model_id, g->hw_tag, leaf, write_group_cb, &merged);
    ra_table_group_free(&old);
    ra_table_group_free(&merged);
    return rc;
}

int ra_table_merge_with(const char *path, const struct ra_table_group *g, const struct ra_table_writer *w,
                        struct ra_table_merge_stats *stats)
{
    struct ra_table_writer none = { RA_TABLE_LOCK_TIMEOUT_S, NULL, NULL };
    struct merge_job job = { path, w ? w : &none, { 0 } };
    h5_quiet();
    int rc = check_name("model id", g->model_id);
    if (rc == RA_OK)
        rc = check_name("hardware tag", g->hw_tag);
    if (rc == RA_OK && (g->p < 1 || g->p > RA_TABLE_MAX_RANKS || g->n < 1))
        rc = ra_error_set(RA_EINVAL, "%s: nothing to merge (%d entries for %d ranks)", path, g->n, g->p);
    if (rc == RA_OK)
        rc = locked(path, w, merge_locked, g, &job);
    if (stats)
        *stats = job.st;
    return rc;
}

int ra_table_merge(const char *path, const struct ra_table_group *g)
{
    return ra_table_merge_with(path, g, NULL, NULL);
}

/* ------------------------------------------------------------------ cost-model profiles */

struct profile {
    const char *model_id, *hw_tag;
    const char *const *names;
    const double *values;
    int n;
};

static int write_profile_cb(hid_t fid, const char *tmp, const void *ctx)
{
    const struct profile *pf = ctx;
    hid_t grp = group_create(fid, pf->model_id, pf->hw_tag, "profile");
    int bad = grp < 0;
    for (int i = 0; i < pf->n && !bad; i++)
        bad = attr_write(grp, pf->names[i], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &pf->values[i]) < 0;
    h5_close(grp);
    return bad ? h5_fail(tmp, "the profile") : RA_OK;
}

static int profile_locked(const char *path, const void *in, void *out)
{
    const struct profile *pf = in;
    (void)out;
    int rc = check_existing(path);
    return rc == RA_OK ? file_rewrite(path, pf->model_id, pf->hw_tag, "profile", write_profile_cb, pf) : rc;
}

int ra_table_profile_write(const char *path, const char *model_id, const char *hw_tag,
                           const char *const *names, const double *values, int n, const struct ra_table_writer *w)
{
    struct profile pf = { model_id, hw_tag, names, values, n };
    h5_quiet();
    int rc = check_name("model id", model_id);
    if (rc == RA_OK)
        rc = check_name("hardware tag", hw_tag);
    if (rc == RA_OK && (n < 0 || n > RA_TABLE_MAX_PROFILE))
        rc = ra_error_set(RA_ERANGE, "%s: %d profile values, want 0..%d", path, n, RA_TABLE_MAX_PROFILE);
    for (int i = 0; rc == RA_OK && i < n; i++) {
        if (!names[i] || !*names[i] || strlen(names[i]) >= 64 || strchr(names[i], '/'))
            rc = ra_error_set(RA_EINVAL, "%s: profile name %d ('%s') must be 1..63 characters without '/'", path, i,
                              names[i] ? names[i] : "");
        for (int j = 0; rc == RA_OK && j < i; j++)
            if (!strcmp(names[i], names[j]))
                rc = ra_error_set(RA_EINVAL, "%s: profile name '%s' given twice", path, names[i]);
    }
    if (rc == RA_OK)
        rc = locked(path, w, profile_locked, &pf, NULL);
    return rc;
}

int ra_table_profile_read(const char *path, const char *model_id, const char *hw_tag,
                          char (*names)[64], double *values, int max, int *n)
{
    hid_t fid = -1, grp = -1;
    char where[300];
    struct problems pr = { .path = path };
    struct profile_names pn = { names, 0, max, 0 };
    hsize_t idx = 0;
    h5_quiet();
    *n = 0;
    int rc = check_name("model id", model_id);
    if (rc == RA_OK)
        rc = check_name("hardware tag", hw_tag);
    if (rc == RA_OK)
        rc = file_open_checked(path, &fid, NULL);
    if (rc == RA_OK)
        rc = group_open(fid, path, model_id, hw_tag, "profile", "cost-model profile", &grp);
    if (rc != RA_OK)
        goto cleanup;
    group_path(where, sizeof where, model_id, hw_tag, "profile");
    if (H5Aiterate2(grp, H5_INDEX_NAME, H5_ITER_INC, &idx, profile_name_cb, &pn) < 0 || pn.bad) {
        rc = ra_error_set(RA_EFORMAT, "%s: %s: attributes cannot be listed or have names over 63 characters", path, where);
        goto cleanup;
    }
    if (pn.n > max) {
        rc = ra_error_set(RA_ERANGE, "%s: %s has %d values, more than the %d asked for", path, where, pn.n, max);
        goto cleanup;
    }
    for (int i = 0; i < pn.n; i++)
        attr_read_num(grp, where, names[i], H5T_NATIVE_DOUBLE, H5T_FLOAT, &values[i], &pr);
    if (pr.n)
        rc = ra_error_set(RA_EFORMAT, "%s", pr.first);
    else
        *n = pn.n;
cleanup:
    h5_close(grp);
    h5_close(fid);
    return rc;
}

/* ------------------------------------------------------------------ enumerating */

int ra_table_each(const char *path, ra_table_each_fn fn, void *ctx)
{
    hid_t fid = -1;
    struct walk w = { 0 };
    char *m, *hw, *leaf;
    h5_quiet();
    int rc = file_open_checked(path, &fid, NULL);
    if (rc == RA_OK)
        rc = walk_file(fid, path, &w);
    h5_close(fid);
    for (int i = 0; rc == RA_OK && i < w.n; i++) {
        if (w.v[i].depth != 3)
            continue;
        split3(w.v[i].name, &m, &hw, &leaf);
        rc = fn(m, hw, leaf, ctx);
    }
    walk_free(&w);
    return rc;
}

/* ------------------------------------------------------------------ identities */

static uint32_t fnv1a(uint32_t h, uint32_t v)
{
    for (int k = 0; k < 4; k++) /* little-endian bytes: the same id on every machine */
        h = (h ^ ((v >> (8 * k)) & 0xff)) * 16777619u;
    return h;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

void ra_table_model_id(const struct ra_config *c, char *buf, size_t len)
{
    const uint32_t fields[] = {
        (uint32_t)c->dim, (uint32_t)c->hidden_dim, (uint32_t)c->n_layers, (uint32_t)c->n_heads,
        (uint32_t)c->n_kv_heads, (uint32_t)c->vocab_size, (uint32_t)c->seq_len, (uint32_t)c->head_dim,
        float_bits(c->rope_theta), float_bits(c->norm_eps),
    };
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        h = fnv1a(h, fields[i]);
    /* scaled RoPE: its factors too (an unscaled model keeps the id it had) */
    for (int j = 0; c->rope_scaled && j < c->head_dim / 2 && j < RA_ROPE_MAX_PAIRS; j++)
        h = fnv1a(h, float_bits(c->rope_factors[j]));
    snprintf(buf, len, "llama-d%d-l%d-h%d-kv%d-f%d-v%d-%08x", c->dim, c->n_layers, c->n_heads, c->n_kv_heads,
             c->hidden_dim, c->vocab_size, (unsigned)h);
}

/* Copies s into buf with every run of characters outside [A-Za-z0-9.+-] turned into one '_'. */
static size_t sanitize(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    for (; *s && o + 1 < len; s++) {
        int ok = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                 *s == '.' || *s == '+' || *s == '-';
        if (ok)
            buf[o++] = *s;
        else if (o && buf[o - 1] != '_')
            buf[o++] = '_';
    }
    while (o && buf[o - 1] == '_')
        o--;
    buf[o] = '\0';
    return o;
}

void ra_table_default_hw_tag(char *buf, size_t len)
{
    char line[512], model[256] = "unknown-cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && colon) {
            if (sanitize(colon + 1, model, sizeof model) == 0)
                snprintf(model, sizeof model, "unknown-cpu");
            break;
        }
    }
    if (f)
        fclose(f);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(buf, len, "%s-%ldc", model, cores > 0 ? cores : 1);
}
