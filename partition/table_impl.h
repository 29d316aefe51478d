/* Partition tables: what the HDF5 table files (table_h5.c, table_read.c, table_write.c,
 * table_profile.c) share and nothing else includes; the interface is table.h.
 *
 * Problems: every check reports one line per problem through a `struct problems`; validate
 * prints them all, read turns the first into its error. So a group that reads is exactly a
 * group that validates. */
#ifndef RA_TABLE_IMPL_H
#define RA_TABLE_IMPL_H

#include <hdf5.h>
#include <stdio.h>

#include "table.h"

/* A table group's datasets (names in ra_tb_ds_names): the first DS_V1_COUNT in every schema,
 * the provenance per entry since schema 2 (schema 1 had it as group attributes). */
extern const char *const ra_tb_ds_names[];
enum { DS_CONTEXT, DS_BOUNDS, DS_RATIOS, DS_KVR, DS_EVEN, DS_TSP, DS_V1_COUNT,
       DS_OBJECTIVE = DS_V1_COUNT, DS_MIN_STRIDE, DS_REPEATS, DS_DATE, DS_HOST, DS_VERSION, DS_COUNT };
#define ALL_DATA ((1u << DS_V1_COUNT) - 1) /* every numeric dataset loaded */

struct problems {
    const char *path;
    FILE *out;      /* NULL: count and keep the first only */
    int n;
    char first[1024];
};

void ra_tb_problem_line(struct problems *pr, const char *line);
/* One problem "PATH: <what>", escaped to one line (names and values come from the file). */
__attribute__((format(printf, 2, 3))) void ra_tb_problem(struct problems *pr, const char *fmt, ...);

/* ------------------------------------------------------------------ HDF5 (table_h5.c) */

void ra_tb_h5_quiet(void);            /* HDF5 prints no error stacks */
const char *ra_tb_h5_cause(char *buf); /* " (HDF5: <innermost message>)" or "", buf[200] */
void ra_tb_h5_close(hid_t id);        /* any kind of id; < 0 ignored */
hid_t ra_tb_write_fapl(void);         /* file access for files we write (HDF5 1.8 format) */
int ra_tb_file_open(const char *path, hid_t *fid); /* read-only, regular files only */
/* ra_tb_file_open and the schema check; *version (may be NULL) gets it. */
int ra_tb_file_open_checked(const char *path, hid_t *fid, int *version);
/* The file's schema version (1..RA_TABLE_SCHEMA_VERSION), or 0 after reporting why not. */
int ra_tb_check_schema(hid_t fid, struct problems *pr);
/* 1 if `name` is a hard link to an object of `type`, 0 if absent, -1 if something else. */
int ra_tb_h5_exists(hid_t loc, const char *name, H5I_type_t type);

int ra_tb_attr_read_num(hid_t obj, const char *where, const char *name, hid_t memtype, H5T_class_t cls, void *v,
                        struct problems *pr);
int ra_tb_attr_read_str(hid_t obj, const char *where, const char *name, char *buf, size_t len,
                        struct problems *pr);
/* Opens dataset `name` if it has class `cls`, `rank` dimensions and the wanted sizes
 * (want[i] == 0: any); dims gets its shape. Otherwise reports why and returns -1. */
hid_t ra_tb_ds_open(hid_t grp, const char *where, const char *name, H5T_class_t cls, int rank, const hsize_t *want,
                    hsize_t *dims, struct problems *pr);
int ra_tb_ds_read(hid_t d, hid_t memtype, void *buf, const char *where, const char *name, struct problems *pr);

int ra_tb_h5_fail(const char *path, const char *what); /* RA_EIO "PATH: cannot write WHAT" */
int ra_tb_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v);
int ra_tb_ds_write(hid_t grp, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                   const void *data);

/* "/m/hw/leaf" */
void ra_tb_group_path(char *buf, size_t len, const char *model_id, const char *hw_tag, const char *leaf);
/* Opens /m/hw/leaf, checking each level so a missing one gives a clear message (RA_EINVAL,
 * naming `what` and the groups the file has). */
int ra_tb_group_open(hid_t fid, const char *path, const char *model_id, const char *hw_tag, const char *leaf,
                     const char *what, hid_t *grp);
/* Creates /m/hw/leaf (and its parents) in a file being written. */
hid_t ra_tb_group_create(hid_t fid, const char *model_id, const char *hw_tag, const char *leaf);

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

int ra_tb_walk_file(hid_t fid, const char *path, struct walk *w);
void ra_tb_walk_free(struct walk *w);
int ra_tb_parse_pname(const char *s); /* "p<P>" written canonically: P, else 0 */
void ra_tb_split3(char *name, char **m, char **hw, char **leaf); /* "m/hw/leaf", in place */

/* ------------------------------------------------------------------ groups (table_read.c) */

int ra_tb_check_name(const char *what, const char *s); /* a model id or hardware tag */
/* Checks each entry's values in the datasets that loaded (bit DS_x of `have`), and with
 * prov_per_entry its provenance. */
void ra_tb_check_rows(const struct ra_table_group *g, unsigned have, int prov_per_entry, const char *where,
                      struct problems *pr);
/* ra_tb_check_rows, and the group as a whole: entries present, context lengths ascending, unique. */
void ra_tb_check_entries(const struct ra_table_group *g, unsigned have, int prov_per_entry, const char *where,
                         struct problems *pr);
/* Loads the open group `grp` (named `where`) of a schema-`version` file for p ranks into g,
 * reporting every problem; g is initialised here and always needs ra_table_group_free(). */
void ra_tb_load_group(hid_t grp, const char *where, const char *model_id, const char *hw_tag, int p, int version,
                      struct ra_table_group *g, struct problems *pr);

/* ------------------------------------------------------------------ writing (table_write.c) */

typedef int (*ra_tb_writer_fn)(hid_t fid, const char *tmp, const void *ctx);
/* Copies every object of the (validated) old file to a new one except /m/hw/leaf, which
 * `writer` then adds; the new file replaces the old by rename. Callers hold the table's lock. */
int ra_tb_file_rewrite(const char *path, const char *model_id, const char *hw_tag, const char *leaf,
                       ra_tb_writer_fn writer, const void *ctx);
/* RA_OK if `path` is absent or validates: writing into a bad file would carry its problems on. */
int ra_tb_check_existing(const char *path);
/* A locked read-modify-write of the table at `path`: fn(path, in, out) under TABLE.lock. */
int ra_tb_locked(const char *path, const struct ra_table_writer *w, int (*fn)(const char *, const void *, void *),
                 const void *in, void *out);

/* ------------------------------------------------------------------ profiles (table_profile.c) */

struct profile_names {
    char (*names)[64];
    int n, max, bad;
};

herr_t ra_tb_profile_name_cb(hid_t loc, const char *name, const H5A_info_t *info, void *data);
/* Every attribute of a profile group is a scalar double; it holds no objects. */
void ra_tb_check_profile(hid_t fid, const char *name, struct problems *pr);

#endif
