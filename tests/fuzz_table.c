/* Fuzz harness: the partition-table reader (partition/table_read.c, over table_h5.c).
 *
 * The input is not the HDF5 file itself but a recipe for one: this harness
 * writes the file with the HDF5 library (the 1.8 format, or the earliest one
 * by a flag) and then runs every reader on it. So the fuzzer varies what a
 * well-formed HDF5 file can hold (which groups and datasets exist, their
 * names, classes, shapes and values, the attributes) but never HDF5's own
 * encoding: HDF5 1.10 itself crashes on some corrupt files, which no reader
 * of ours can prevent (tests/README.md: "Fuzzing and sanitizers").
 *
 * Recipe, byte by byte (a short input reads as zeros):
 *   flags        bits 0-1 schema_version (absent, 1, a fuzzed int, a double),
 *                bit 2 the earliest format, bits 3-7 the ra_table_list buffer size
 *   groups       count % 5, then per group:
 *     kind       bits 0-1 model id, 2-3 hardware tag (0-1 the readers' own, 2 fuzzed text,
 *                3 one of ours with a '/'), bits 4-6 the leaf: p<1..8>, p<fuzzed>, profile,
 *                fuzzed text, a soft link, a stray dataset
 *     p<P>       entries % 6, each: P slice lengths (1 + byte) and three TTFT bytes;
 *                then per dataset and attribute a mode byte (mostly as made; else missing,
 *                another class, another shape, or fuzzed values)
 *     profile    count % 6 attributes: a fuzzed name and a scalar double, an int, an
 *                array or a string
 * Invariants, besides ASan and UBSan: every reader returns (no abort, no
 * leak); a group that reads interpolates to valid boundaries for any
 * context >= P; a file that validates reads every group it lists, and
 * merging a group into it gives a file that still validates.
 * Seeds: tests/corpus/table/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "status.h"
#include "table.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "example-model"
#define HW "fuzz"
#define MAX_P 8
#define MAX_N 5

/* ------------------------------------------------------------------ reading the recipe */

struct recipe {
    const uint8_t *p;
    size_t n;
};

static unsigned take(struct recipe *r)
{
    if (!r->n)
        return 0;
    r->n--;
    return *r->p++;
}

static int32_t take_i32(struct recipe *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)take(r) << (8 * i);
    return (int32_t)v;
}

static double take_f64(struct recipe *r)
{
    uint64_t bits = 0;
    double v;
    for (int i = 0; i < 8; i++)
        bits |= (uint64_t)take(r) << (8 * i);
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Up to max - 1 fuzzed characters (a NUL ends them early). */
static void take_text(struct recipe *r, char *buf, size_t max)
{
    size_t len = take(r) % max, i = 0;
    for (; i < len; i++)
        if (!(buf[i] = (char)take(r)))
            break;
    buf[i] = '\0';
}

/* ------------------------------------------------------------------ writing HDF5 objects */

/* Writes a dataset or attribute of `rank` dims; failures are fine (a fuzzed
 * name HDF5 refuses just leaves the object out). */
static void put_dataset(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, const void *v)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t d = H5Dcreate2(loc, name, type, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (d >= 0)
        H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(d);
    H5Pclose(lcpl);
    H5Sclose(sp);
}

static void put_attr(hid_t loc, const char *name, hid_t type, int rank, const hsize_t *dims, const void *v)
{
    hid_t sp = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0)
        H5Awrite(a, type, v);
    H5Aclose(a);
    H5Sclose(sp);
}

/* A fixed-length (vlen = 0) or variable-length string attribute. */
static void put_str_attr(hid_t loc, const char *name, const char *s, int vlen)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, vlen ? H5T_VARIABLE : strlen(s) + 1);
    put_attr(loc, name, t, 0, NULL, vlen ? (const void *)&s : (const void *)s);
    H5Tclose(t);
}

/* ------------------------------------------------------------------ one p<P> group */

#define RAW ((MAX_N + 1) * (MAX_P + 2))

/* Entries packed as the datasets hold them: bounds[i * (p + 1) + k], ratios[i * p + k]. */
struct table {
    int p, n;
    int ctx[MAX_N], bounds[MAX_N * (MAX_P + 1)];
    double ratios[MAX_N * MAX_P], ttft[3][MAX_N];
};

/* Plausible entries: slices of 1..256 tokens, ratios that agree, TTFTs or NaN. */
static void make_entries(struct recipe *r, struct table *t)
{
    for (int i = 0; i < t->n; i++) {
        int *b = t->bounds + i * (t->p + 1);
        b[0] = 0;
        for (int k = 1; k <= t->p; k++)
            b[k] = b[k - 1] + 1 + (int)take(r);
        t->ctx[i] = b[t->p];
        for (int k = 0; k < t->p; k++)
            t->ratios[i * t->p + k] = (double)(b[k + 1] - b[k]) / t->ctx[i];
        for (int k = 0; k < 3; k++) {
            unsigned v = take(r);
            t->ttft[k][i] = v == 255 ? NAN : v / 16.0;
        }
    }
}

/* COUNT fuzzed values of the given class. */
static const void *fuzzed_values(struct recipe *r, int is_int, hsize_t count)
{
    static union {
        int32_t i[RAW];
        double d[RAW];
    } raw;
    for (hsize_t k = 0; k < count && k < RAW; k++) {
        if (is_int)
            raw.i[k] = take_i32(r);
        else
            raw.d[k] = take_f64(r);
    }
    return &raw;
}

/* Dataset NAME [rows] or [rows][cols]: as made (mode 0-3), missing (4), of the other
 * class (5), of another shape or rank (6), or with fuzzed values (7). */
static void put_table_dataset(struct recipe *r, hid_t g, const char *name, int is_int, int rank, hsize_t rows,
                              hsize_t cols, const void *made)
{
    hsize_t dims[2] = { rows, cols };
    unsigned mode = take(r) % 8;
    if (mode == 4)
        return;
    if (mode == 5)
        is_int = !is_int;
    if (mode == 6 && take(r) % 2)
        dims[take(r) % rank]++;
    else if (mode == 6 && rank == 1)
        rank = 2, dims[1] = 1;
    else if (mode == 6)
        rank = 1, dims[0] = rows * cols;
    const void *v = mode < 4 ? made : fuzzed_values(r, is_int, dims[0] * (rank == 2 ? dims[1] : 1));
    put_dataset(g, name, is_int ? H5T_NATIVE_INT : H5T_NATIVE_DOUBLE, rank, dims, v);
}

/* A string attribute as made (mode 0-2), missing (3), an int (4), or fuzzed text (5). */
static void put_text_attr(struct recipe *r, hid_t g, const char *name, const char *made)
{
    unsigned mode = take(r) % 6;
    char buf[48];
    int32_t i;
    if (mode == 3)
        return;
    if (mode == 4) {
        i = take_i32(r);
        put_attr(g, name, H5T_NATIVE_INT, 0, NULL, &i);
        return;
    }
    if (mode == 5)
        take_text(r, buf, sizeof buf);
    put_str_attr(g, name, mode == 5 ? buf : made, take(r) % 2);
}

/* An int attribute as made (mode 0-2), missing (3), a double (4), or fuzzed ints (5). */
static void put_int_attr(struct recipe *r, hid_t g, const char *name, int made)
{
    unsigned mode = take(r) % 6;
    int32_t v[2] = { made, 0 };
    hsize_t n = 1;
    if (mode == 3)
        return;
    if (mode == 4) {
        double d = take_f64(r);
        put_attr(g, name, H5T_NATIVE_DOUBLE, 0, NULL, &d);
        return;
    }
    if (mode == 5) {
        n = 1 + take(r) % 2;
        v[0] = take_i32(r), v[1] = take_i32(r);
    }
    put_attr(g, name, H5T_NATIVE_INT, mode == 5 ? 1 : 0, &n, v);
}

/* Group PATH as a table of `name_p` ranks holding min(name_p, MAX_P) ranks' data:
 * a name that disagrees with the shapes is one more thing to read. */
static void put_table_group(struct recipe *r, hid_t fid, const char *path, int name_p)
{
    static struct table t;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(fid, path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    t.p = name_p < 1 ? 1 : name_p > MAX_P ? MAX_P : name_p;
    t.n = (int)(take(r) % (MAX_N + 1));
    make_entries(r, &t);
    hsize_t n = (hsize_t)t.n, p = (hsize_t)t.p;
    put_table_dataset(r, g, "context_lengths", 1, 1, n, 0, t.ctx);
    put_table_dataset(r, g, "boundaries", 1, 2, n, p + 1, t.bounds);
    put_table_dataset(r, g, "ratios", 0, 2, n, p, t.ratios);
    put_table_dataset(r, g, "ttft_kvr_s", 0, 1, n, 0, t.ttft[0]);
    put_table_dataset(r, g, "ttft_even_s", 0, 1, n, 0, t.ttft[1]);
    put_table_dataset(r, g, "ttft_tsp_s", 0, 1, n, 0, t.ttft[2]);
    put_text_attr(r, g, "objective", "measure");
    put_int_attr(r, g, "min_stride", 1);
    put_int_attr(r, g, "repeats", 1);
    put_text_attr(r, g, "date", "2024-01-01T00:00:00Z");
    put_text_attr(r, g, "runahead_version", "0.1.0");
    if (g >= 0)
        H5Gclose(g);
}

/* ------------------------------------------------------------------ profiles and other leaves */

/* One attribute: a scalar double (the only valid kind), an int, two doubles, or a string. */
static void put_profile_attr(struct recipe *r, hid_t g, const char *name)
{
    double d[2] = { take_f64(r), 0 };
    int32_t i;
    memcpy(&i, d, sizeof i); /* the same bytes as an int: a cast of a fuzzed double overflows */
    hsize_t two = 2;
    switch (take(r) % 4) {
    case 0: put_attr(g, name, H5T_NATIVE_DOUBLE, 0, NULL, d); break;
    case 1: put_attr(g, name, H5T_NATIVE_INT, 0, NULL, &i); break;
    case 2: put_attr(g, name, H5T_NATIVE_DOUBLE, 1, &two, d); break;
    default: put_str_attr(g, name, "fast", 0); break;
    }
}

/* count % 7 attributes with fuzzed names (up to 80 characters), or, for 6, one more than a
 * profile may hold. */
static void put_profile(struct recipe *r, hid_t fid, const char *path)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(fid, path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    unsigned count = take(r) % 7;
    char name[81];
    double one = 1;
    for (unsigned k = 0; k < count && count < 6; k++) {
        take_text(r, name, sizeof name);
        put_profile_attr(r, g, name);
    }
    for (int k = 0; count == 6 && k <= RA_TABLE_MAX_PROFILE; k++) {
        snprintf(name, sizeof name, "rate_%03d", k);
        put_attr(g, name, H5T_NATIVE_DOUBLE, 0, NULL, &one);
    }
    if (g >= 0)
        H5Gclose(g);
}

/* A soft link (to a fuzzed path or a real group) or a lone dataset where a group belongs. */
static void put_stray(struct recipe *r, hid_t fid, const char *path, int soft)
{
    char target[40];
    int32_t v = 1;
    hsize_t one = 1;
    if (!soft) {
        put_dataset(fid, path, H5T_NATIVE_INT, 1, &one, &v);
        return;
    }
    take_text(r, target, sizeof target);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Lcreate_soft(take(r) % 2 ? target : "/" MODEL, fid, path, lcpl, H5P_DEFAULT);
    H5Pclose(lcpl);
}

/* ------------------------------------------------------------------ the file */

/* A model id or hardware tag: the readers' own (0-1), fuzzed text (2), or with a '/' (3). */
static void take_name(struct recipe *r, unsigned kind, const char *ours, char *buf, size_t len)
{
    if (kind == 2)
        take_text(r, buf, len < 41 ? len : 41);
    else
        snprintf(buf, len, kind == 3 ? "%s/x" : "%s", ours);
}

static void put_group(struct recipe *r, hid_t fid)
{
    unsigned kind = take(r), leaf = kind >> 4 & 7;
    char m[48], hw[48], path[200], name[48];
    take_name(r, kind & 3, MODEL, m, sizeof m);
    take_name(r, kind >> 2 & 3, HW, hw, sizeof hw);
    int p = leaf < 3 ? 1 + (int)(take(r) % MAX_P) : (int8_t)take(r);
    if (leaf == 5)
        take_text(r, name, sizeof name);
    else
        snprintf(name, sizeof name, leaf == 4 ? "profile" : "p%d", p);
    snprintf(path, sizeof path, "/%s/%s/%s", m, hw, name);
    if (leaf == 4)
        put_profile(r, fid, path);
    else if (leaf >= 6)
        put_stray(r, fid, path, leaf == 6);
    else
        put_table_group(r, fid, path, p);
}

static void put_schema(struct recipe *r, hid_t fid, unsigned kind)
{
    int32_t v = kind == 2 ? take_i32(r) : RA_TABLE_SCHEMA_VERSION;
    double d = RA_TABLE_SCHEMA_VERSION;
    if (kind == 1 || kind == 2)
        put_attr(fid, "schema_version", H5T_NATIVE_INT, 0, NULL, &v);
    else if (kind == 3)
        put_attr(fid, "schema_version", H5T_NATIVE_DOUBLE, 0, NULL, &d);
}

/* Writes the recipe's file at PATH; returns the flags byte. */
static unsigned write_file(struct recipe *r, const char *path)
{
    unsigned flags = take(r);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    H5Pset_libver_bounds(fapl, flags & 4 ? H5F_LIBVER_EARLIEST : H5F_LIBVER_V18, H5F_LIBVER_V18);
    hid_t fid = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (fid < 0)
        fuzz_fail("cannot create %s", path);
    put_schema(r, fid, flags & 3);
    unsigned groups = take(r) % 5;
    for (unsigned i = 0; i < groups; i++)
        put_group(r, fid);
    if (H5Fclose(fid) < 0)
        fuzz_fail("cannot write %s", path);
    return flags;
}

/* ------------------------------------------------------------------ the readers */

static void check_bounds(const int *b, int p, int c)
{
    if (b[0] != 0 || b[p] != c)
        fuzz_fail("boundaries run from %d to %d, not from 0 to the context %d", b[0], b[p], c);
    for (int k = 0; k < p; k++)
        if (b[k + 1] <= b[k])
            fuzz_fail("context %d: rank %d gets the empty slice [%d, %d)", c, k, b[k], b[k + 1]);
}

/* A group that reads gives valid boundaries for every context >= P. */
static void check_interpolation(const struct ra_table_group *g)
{
    const int contexts[] = { g->p, g->p + 1, 100, 2048, 3000, 4096, 8192, 100000, 1 << 24 };
    int *b = malloc(sizeof *b * (size_t)(g->p + 1)), ex;
    for (size_t i = 0; i < sizeof contexts / sizeof contexts[0]; i++) {
        if (contexts[i] < g->p)
            continue;
        if (ra_table_interpolate(g, contexts[i], b, &ex) != RA_OK)
            fuzz_fail("interpolating a group that read failed at context %d", contexts[i]);
        check_bounds(b, g->p, contexts[i]);
    }
    free(b);
}

/* Set when the recipe holds a newline byte: a name in the file may then hold
 * one, and error messages quote names as they are. */
static int recipe_has_newline;

static int read_group(const char *path, const char *m, const char *hw, int p)
{
    struct ra_table_group g;
    int rc = ra_table_read(path, m, hw, p, &g);
    if (rc != RA_OK) {
        if (strchr(ra_error_message(), '\n') && !recipe_has_newline)
            fuzz_fail("the error message is more than one line");
        return rc;
    }
    check_interpolation(&g);
    fuzz_note("  read /%s/%s/p%d: %d entries", m, hw, p, g.n);
    ra_table_group_free(&g);
    return RA_OK;
}

static void read_profile(const char *path, const char *m, const char *hw, int max)
{
    char(*names)[64] = malloc(64 * (size_t)(max ? max : 1));
    double *v = malloc(sizeof *v * (size_t)(max ? max : 1));
    int n;
    if (ra_table_profile_read(path, m, hw, names, v, max, &n) == RA_OK && (n < 0 || n > max))
        fuzz_fail("a profile read gave %d values for at most %d", n, max);
    free(v);
    free(names);
}

static int each_cb(const char *m, const char *hw, const char *leaf, void *path)
{
    int p = leaf[0] == 'p' ? atoi(leaf + 1) : 0;
    if (!strcmp(leaf, "profile")) {
        read_profile(path, m, hw, RA_TABLE_MAX_PROFILE);
        return RA_OK;
    }
    return read_group(path, m, hw, p);
}

/* Merging a group into (a copy of) a file that validates keeps it valid. */
static void check_merge(const char *path)
{
    FILE *f = fopen(path, "rb");
    static unsigned char buf[1 << 20];
    size_t size = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    const char *copy = fuzz_write(NULL, "merge.h5", buf, size);
    struct ra_table_group g;
    if (ra_table_group_init(&g, MODEL, HW, 2, 1) != RA_OK ||
        ra_table_entry_set(&g, 0, (const int[]){ 0, 3000, 5000 }, 1, 2, 3) != RA_OK)
        fuzz_fail("cannot make the group to merge");
    if (ra_table_merge(copy, &g) != RA_OK || ra_table_validate(copy, NULL, NULL) != RA_OK)
        fuzz_fail("merging into a file that validates failed or left it invalid");
    ra_table_group_free(&g);
}

static void run_readers(const char *path, size_t list_len)
{
    char *list = malloc(list_len);
    int n_problems = 0, valid = ra_table_validate(path, NULL, &n_problems) == RA_OK;
    fuzz_note("  %s", valid ? "valid" : ra_error_message());
    fuzz_note("  %d problems", n_problems);
    if (ra_table_list(path, list, list_len) == RA_OK && !memchr(list, '\0', list_len))
        fuzz_fail("the group list is not a string");
    free(list);
    /* ra_table_each reads every group there is; these two read one the seeds
     * have and one no recipe makes (P > MAX_P only comes from a raw byte). */
    read_group(path, MODEL, HW, 2);
    read_group(path, MODEL, HW, MAX_P + 1);
    read_profile(path, MODEL, HW, 4);
    read_profile(path, MODEL, HW, RA_TABLE_MAX_PROFILE);
    int each = ra_table_each(path, each_cb, (void *)path);
    if (valid && each != RA_OK)
        fuzz_fail("a file that validates did not read every group it lists");
    if (valid)
        check_merge(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[4200];
    struct recipe r = { data, size };
    if (!path[0]) {
        snprintf(path, sizeof path, "%s/table.h5", fuzz_dir());
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* objects HDF5 refuses are left out, quietly */
        /* Keep freed HDF5 structures for reuse: each file open callocs a ~1 MB
         * metadata cache, which under ASan's allocator is fresh pages every
         * time (a third of the run time); HDF5 is not what is fuzzed. */
        H5set_free_list_limits(-1, -1, -1, -1, -1, -1);
    }
    recipe_has_newline = memchr(data, '\n', size) != NULL;
    unsigned flags = write_file(&r, path);
    run_readers(path, 1 + (flags >> 3) * 4);
    return 0;
}
