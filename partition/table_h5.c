/* Partition tables: the HDF5 helpers the other table files share: problems, opening files,
 * attributes and datasets, group paths, walking a file, the schema version.
 *
 * HDF5's own error printing is silenced (it would print a stack per failed call); the innermost
 * HDF5 message is appended to ours where it says more than "failed". Every file is opened with
 * H5F_CLOSE_STRONG, so closing it closes whatever an error path left open. */
#include "config.h"
#include "table_impl.h"
#include "mapped_file.h"
#include "status.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const ra_tb_ds_names[] = { "context_lengths", "boundaries", "ratios", "ttft_kvr_s", "ttft_even_s",
                                        "ttft_tsp_s", "objective", "min_stride", "repeats", "date", "host",
                                        "runahead_version" };

void ra_tb_problem_line(struct problems *pr, const char *line)
{
    if (pr->out)
        fprintf(pr->out, "%s\n", line);
    if (pr->n++ == 0)
        snprintf(pr->first, sizeof pr->first, "%s", line);
}

/* One problem "PATH: <what>". */
__attribute__((format(printf, 2, 3))) void ra_tb_problem(struct problems *pr, const char *fmt, ...)
{
    char msg[900], shown[900], line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Group, dataset and attribute names and values come from the file: one problem, one line. */
    snprintf(line, sizeof line, "%s: %s", pr->path, ra_escape(msg, shown, sizeof shown));
    ra_tb_problem_line(pr, line);
}

/* ------------------------------------------------------------------ HDF5 helpers */

void ra_tb_h5_quiet(void)
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
const char *ra_tb_h5_cause(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cb, buf);
    return buf;
}

void ra_tb_h5_close(hid_t id)
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
hid_t ra_tb_write_fapl(void)
{
    hid_t fapl = strong_fapl();
    if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0)
        ra_tb_h5_close(fapl), fapl = -1;
    return fapl;
}

/* Opens an existing table file read-only; errors name the file and the cause. */
int ra_tb_file_open(const char *path, hid_t *fid)
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
        ra_error_set(RA_EFORMAT, "%s: cannot open as HDF5, truncated or corrupt%s", path, ra_tb_h5_cause(cause));
    ra_tb_h5_close(fapl);
    return *fid < 0 ? RA_EFORMAT : RA_OK;
}

/* 1 if `name` (relative to loc) exists and is a hard link to an object of `type`,
 * 0 if absent, -1 if it is something else. */
int ra_tb_h5_exists(hid_t loc, const char *name, H5I_type_t type)
{
    H5L_info_t li;
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
        return 0;
    if (H5Lget_info(loc, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD)
        return -1;
    hid_t o = H5Oopen(loc, name, H5P_DEFAULT);
    int ok = o >= 0 && H5Iget_type(o) == type;
    ra_tb_h5_close(o);
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
        ra_tb_problem(pr, "%s: attribute %s is missing", where, name);
        return -1;
    }
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), sp = -1, t = -1;
    if (a < 0) {
        ra_tb_problem(pr, "%s: attribute %s cannot be opened", where, name);
        return -1;
    }
    sp = H5Aget_space(a);
    t = H5Aget_type(a);
    H5T_class_t got = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    hssize_t npoints = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    if (got != cls)
        ra_tb_problem(pr, "%s: attribute %s is of class %s, want %s", where, name, class_name(got), class_name(cls));
    else if (npoints != 1)
        ra_tb_problem(pr, "%s: attribute %s holds %lld values, want one", where, name, (long long)npoints);
    ra_tb_h5_close(sp);
    ra_tb_h5_close(t);
    if (got != cls || npoints != 1) {
        ra_tb_h5_close(a);
        return -1;
    }
    return a;
}

int ra_tb_attr_read_num(hid_t obj, const char *where, const char *name, hid_t memtype,
                         H5T_class_t cls, void *v, struct problems *pr)
{
    hid_t a = attr_open(obj, where, name, cls, pr);
    if (a < 0)
        return -1;
    herr_t e = H5Aread(a, memtype, v);
    ra_tb_h5_close(a);
    if (e < 0)
        ra_tb_problem(pr, "%s: attribute %s cannot be read", where, name);
    return e < 0 ? -1 : 0;
}

/* Reads a fixed- or variable-length string (h5py writes either) into buf[len]. */
int ra_tb_attr_read_str(hid_t obj, const char *where, const char *name, char *buf, size_t len, struct problems *pr)
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
        ra_tb_problem(pr, "%s: attribute %s cannot be read as a string", where, name);
    else if (!ok)
        ra_tb_problem(pr, "%s: attribute %s is longer than %zu characters", where, name, len - 1);
    else
        strcpy(buf, s);
    if (vlen && s)
        H5free_memory(s);
    else if (!vlen)
        free(s);
    ra_tb_h5_close(mt);
    ra_tb_h5_close(ft);
    ra_tb_h5_close(a);
    return ok ? 0 : -1;
}

/* Opens dataset `name` if it has class `cls`, `rank` dimensions and the wanted sizes
 * (want[i] == 0: any); dims gets its shape. Otherwise reports why and returns -1. */
hid_t ra_tb_ds_open(hid_t grp, const char *where, const char *name, H5T_class_t cls, int rank,
                     const hsize_t *want, hsize_t *dims, struct problems *pr)
{
    int ex = ra_tb_h5_exists(grp, name, H5I_DATASET);
    if (ex <= 0) {
        ra_tb_problem(pr, "%s/%s: %s", where, name, ex == 0 ? "dataset is missing" : "is not a dataset");
        return -1;
    }
    hid_t d = H5Dopen2(grp, name, H5P_DEFAULT), sp = -1, t = -1;
    int ok = 0;
    if (d < 0) {
        ra_tb_problem(pr, "%s/%s: dataset cannot be opened", where, name);
        return -1;
    }
    sp = H5Dget_space(d);
    t = H5Dget_type(d);
    H5T_class_t got = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    if (got != cls) {
        ra_tb_problem(pr, "%s/%s: values are of class %s, want %s", where, name, class_name(got), class_name(cls));
    } else if (nd != rank) {
        ra_tb_problem(pr, "%s/%s: has %d dimensions, want %d", where, name, nd, rank);
    } else {
        H5Sget_simple_extent_dims(sp, dims, NULL);
        ok = 1;
        for (int i = 0; i < rank; i++)
            ok &= want[i] == 0 || dims[i] == want[i];
        if (!ok && rank == 1)
            ra_tb_problem(pr, "%s/%s: shape [%llu], want [%llu]", where, name, (unsigned long long)dims[0],
                    (unsigned long long)want[0]);
        else if (!ok)
            ra_tb_problem(pr, "%s/%s: shape [%llu][%llu], want [%llu][%llu]", where, name, (unsigned long long)dims[0],
                    (unsigned long long)dims[1], (unsigned long long)want[0], (unsigned long long)want[1]);
    }
    ra_tb_h5_close(sp);
    ra_tb_h5_close(t);
    if (!ok)
        ra_tb_h5_close(d);
    return ok ? d : -1;
}

int ra_tb_ds_read(hid_t d, hid_t memtype, void *buf, const char *where, const char *name, struct problems *pr)
{
    char cause[200];
    herr_t e = H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    if (e < 0)
        ra_tb_problem(pr, "%s/%s: values cannot be read%s", where, name, ra_tb_h5_cause(cause));
    ra_tb_h5_close(d);
    return e < 0 ? -1 : 0;
}

/* The file's schema version (1 or 2), or 0 after reporting why it is neither. */
int ra_tb_check_schema(hid_t fid, struct problems *pr)
{
    int v = 0;
    if (H5Aexists(fid, "schema_version") <= 0) {
        ra_tb_problem(pr, "/: attribute schema_version is missing (not a runahead partition table?)");
        return 0;
    }
    if (ra_tb_attr_read_num(fid, "/", "schema_version", H5T_NATIVE_INT, H5T_INTEGER, &v, pr) != 0)
        return 0;
    if (v < 1 || v > RA_TABLE_SCHEMA_VERSION) {
        ra_tb_problem(pr, "/: schema_version is %d; this runahead reads versions 1 to %d", v, RA_TABLE_SCHEMA_VERSION);
        return 0;
    }
    return v;
}

/* ------------------------------------------------------------------ walking a file */

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

void ra_tb_walk_free(struct walk *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->v[i].name);
    free(w->v);
    memset(w, 0, sizeof *w);
}

int ra_tb_walk_file(hid_t fid, const char *path, struct walk *w)
{
    char cause[200];
    memset(w, 0, sizeof *w);
    if (H5Lvisit(fid, H5_INDEX_NAME, H5_ITER_INC, walk_cb, w) < 0) {
        int oom = w->oom;
        ra_tb_walk_free(w);
        if (oom)
            return ra_error_set(RA_ENOMEM, "%s: out of memory listing its groups", path);
        return ra_error_set(RA_EFORMAT, "%s: cannot list its groups, corrupt%s", path, ra_tb_h5_cause(cause));
    }
    return RA_OK;
}

/* "p<P>" with P in 1..RA_TABLE_MAX_RANKS written canonically; returns P or 0. */
int ra_tb_parse_pname(const char *s)
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
void ra_tb_split3(char *name, char **m, char **hw, char **leaf)
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
    ra_tb_h5_quiet();
    buf[0] = '\0';
    int rc = ra_tb_file_open(path, &fid);
    if (rc == RA_OK)
        rc = ra_tb_walk_file(fid, path, &w);
    ra_tb_h5_close(fid);
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
    ra_tb_walk_free(&w);
    return RA_OK;
}

/* ------------------------------------------------------------------ group paths */

void ra_tb_group_path(char *buf, size_t len, const char *model_id, const char *hw_tag, const char *leaf)
{
    snprintf(buf, len, "/%s/%s/%s", model_id, hw_tag, leaf);
}

/* Opens /m/hw/leaf, checking each level so a missing one gives a clear message. */
int ra_tb_group_open(hid_t fid, const char *path, const char *model_id, const char *hw_tag, const char *leaf,
                      const char *what, hid_t *grp)
{
    char gp[400], list[400];
    const char *parts[3] = { model_id, hw_tag, leaf };
    size_t used = 0;
    gp[0] = '\0';
    *grp = -1;
    for (int k = 0; k < 3; k++) {
        used += (size_t)snprintf(gp + used, sizeof gp - used, "/%s", parts[k]);
        int ex = ra_tb_h5_exists(fid, gp, H5I_GROUP);
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
int ra_tb_file_open_checked(const char *path, hid_t *fid, int *version)
{
    struct problems pr = { .path = path };
    int rc = ra_tb_file_open(path, fid);
    if (rc != RA_OK)
        return rc;
    int v = ra_tb_check_schema(*fid, &pr);
    if (version)
        *version = v;
    if (pr.n) {
        ra_tb_h5_close(*fid), *fid = -1;
        return ra_error_set(RA_EFORMAT, "%s", pr.first);
    }
    return RA_OK;
}
/* ------------------------------------------------------------------ writing */

int ra_tb_h5_fail(const char *path, const char *what)
{
    char cause[200];
    return ra_error_set(RA_EIO, "%s: cannot write %s%s", path, what, ra_tb_h5_cause(cause));
}

int ra_tb_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, mtype, v);
    ra_tb_h5_close(a);
    ra_tb_h5_close(sp);
    return e < 0 ? -1 : 0;
}

int ra_tb_ds_write(hid_t grp, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                    const void *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = sp < 0 ? -1 : H5Dcreate2(grp, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = d < 0 ? -1 : H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    ra_tb_h5_close(d);
    ra_tb_h5_close(sp);
    return e < 0 ? -1 : 0;
}

/* Creates /m/hw/leaf (and its parents) in a file being written. */
hid_t ra_tb_group_create(hid_t fid, const char *model_id, const char *hw_tag, const char *leaf)
{
    char gp[400];
    ra_tb_group_path(gp, sizeof gp, model_id, hw_tag, leaf);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t grp = -1;
    if (lcpl >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0)
        grp = H5Gcreate2(fid, gp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    ra_tb_h5_close(lcpl);
    return grp;
}
