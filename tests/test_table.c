/* Partition lookup tables: write/merge/read round trips, per-entry provenance and the merge
 * conflict rule, reading and upgrading schema-1 and schema-2 tables, the run key, cost-model profiles, and malformed files
 * crafted with the HDF5 API (interpolation: test_interp). */
#include "status.h"
#include "table.h"
#include "test.h"

#include <hdf5.h>
#include <math.h>
#include <sys/stat.h>

static char dir[4096];

static const char *file(const char *name)
{
    static char path[4][4200];
    static int slot;
    char *p = path[slot++ & 3];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    return p;
}

static int same_ints(const int *a, const int *b, int n)
{
    return memcmp(a, b, sizeof(int) * (size_t)n) == 0;
}

static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* A p-rank group of n entries whose entry i has ratios[i] and the bounds they round to. */
static void make_group(struct ra_table_group *g, const char *m, const char *hw, int p, int n, const int *contexts,
                       const double *ratios)
{
    CHECK_OK(ra_table_group_init(g, m, hw, p, n));
    for (int i = 0; i < n; i++) {
        g->context_lengths[i] = contexts[i];
        memcpy(g->ratios + i * p, ratios + i * p, sizeof(double) * (size_t)p);
        CHECK_OK(ra_table_ratios_to_bounds(ratios + i * p, p, contexts[i], g->boundaries + i * (p + 1)));
        g->ttft_kvr_s[i] = 0.1 * (i + 1);
        g->ttft_even_s[i] = 0.2 * (i + 1);
        g->ttft_tsp_s[i] = i == 0 ? NAN : 0.3 * (i + 1);
    }
}

static int same_prov(const struct ra_table_prov *a, const struct ra_table_prov *b)
{
    return !strcmp(a->objective, b->objective) && a->min_stride == b->min_stride && a->repeats == b->repeats &&
           !strcmp(a->date, b->date) && !strcmp(a->host, b->host) && !strcmp(a->version, b->version);
}

static int same_group(const struct ra_table_group *a, const struct ra_table_group *b)
{
    int ok = a->p == b->p && a->n == b->n && !strcmp(a->model_id, b->model_id) && !strcmp(a->hw_tag, b->hw_tag);
    ok = ok && same_ints(a->context_lengths, b->context_lengths, a->n) &&
         same_ints(a->boundaries, b->boundaries, a->n * (a->p + 1));
    for (int i = 0; ok && i < a->n * a->p; i++)
        ok = a->ratios[i] == b->ratios[i];
    for (int i = 0; ok && i < a->n; i++)
        ok = same_double(a->ttft_kvr_s[i], b->ttft_kvr_s[i]) && same_double(a->ttft_even_s[i], b->ttft_even_s[i]) &&
             same_double(a->ttft_tsp_s[i], b->ttft_tsp_s[i]) && same_prov(&a->prov[i], &b->prov[i]);
    return ok;
}

/* The example of the brief: (0.55, 0.45) at 2048 tokens, (0.65, 0.35) at 8192. */
static void make_p2(struct ra_table_group *g, const char *m, const char *hw)
{
    make_group(g, m, hw, 2, 2, (const int[]){ 2048, 8192 }, (const double[]){ 0.55, 0.45, 0.65, 0.35 });
    CHECK_OK(ra_table_group_set_search(g, "measure", 16, 3));
}

static int read_back(const char *path, const struct ra_table_group *want)
{
    struct ra_table_group g;
    int rc = ra_table_read(path, want->model_id, want->hw_tag, want->p, &g);
    if (rc != RA_OK) {
        fprintf(stderr, "read %s/%s/p%d: %s\n", want->model_id, want->hw_tag, want->p, ra_error_message());
        return 0;
    }
    int ok = same_group(&g, want);
    ra_table_group_free(&g);
    return ok;
}

static void test_round_trip(void)
{
    const char *path = file("t.h5");
    struct ra_table_group a, b, c, d, add, repl, got;
    unlink(path);
    make_p2(&a, "mA", "hw1");
    make_group(&b, "mA", "hw1", 4, 1, (const int[]){ 3000 }, (const double[]){ 0.35, 0.25, 0.21, 0.19 });
    make_p2(&c, "mB", "hw2");
    make_p2(&d, "mA", "hw2");
    CHECK_OK(ra_table_group_set_search(&d, "model", 16, 3));
    CHECK_OK(ra_table_merge(path, &a));
    CHECK_OK(ra_table_merge(path, &b));
    CHECK_OK(ra_table_merge(path, &c));
    CHECK_OK(ra_table_merge(path, &d));
    CHECK(read_back(path, &a) && read_back(path, &b) && read_back(path, &c) && read_back(path, &d));
    CHECK(b.boundaries[1] == 1050 && b.boundaries[2] == 1800 && b.boundaries[3] == 2430);

    /* New context lengths join the old ones, in order. */
    make_group(&add, "mA", "hw1", 2, 2, (const int[]){ 16384, 4096 }, (const double[]){ 0.7, 0.3, 0.6, 0.4 });
    CHECK_OK(ra_table_merge(path, &add));
    CHECK_OK(ra_table_read(path, "mA", "hw1", 2, &got));
    CHECK(got.n == 4 && same_ints(got.context_lengths, (const int[]){ 2048, 4096, 8192, 16384 }, 4));
    CHECK(got.n == 4 && got.ratios[2] == 0.6 && got.ratios[4] == 0.65 && got.ratios[6] == 0.7);
    CHECK(got.n == 4 && got.boundaries[4] == 2458 && isnan(got.ttft_tsp_s[0]) && got.ttft_kvr_s[2] == 0.2);
    ra_table_group_free(&got);

    /* A newer search of an existing context length replaces it; every other entry keeps its
     * own provenance. */
    make_group(&repl, "mA", "hw1", 2, 1, (const int[]){ 4096 }, (const double[]){ 0.5, 0.5 });
    CHECK_OK(ra_table_group_set_search(&repl, "model", 16, 7));
    snprintf(repl.prov[0].date, sizeof repl.prov[0].date, "2099-01-01T00:00:00Z");
    CHECK_OK(ra_table_merge(path, &repl));
    CHECK_OK(ra_table_read(path, "mA", "hw1", 2, &got));
    CHECK(got.n == 4 && got.context_lengths[1] == 4096 && got.ratios[2] == 0.5 && got.boundaries[4] == 2048);
    CHECK(got.n == 4 && got.ratios[0] == 0.55 && got.context_lengths[3] == 16384);
    CHECK(got.n == 4 && same_prov(&got.prov[1], &repl.prov[0]) && !strcmp(got.prov[1].objective, "model") &&
          got.prov[1].repeats == 7);
    CHECK(got.n == 4 && same_prov(&got.prov[0], &a.prov[0]) && got.prov[0].repeats == 3 &&
          same_prov(&got.prov[2], &a.prov[1]) && same_prov(&got.prov[3], &add.prov[0]) && got.prov[3].repeats == 1);
    ra_table_group_free(&got);
    CHECK(read_back(path, &b) && read_back(path, &c) && read_back(path, &d));

    char list[512];
    CHECK_OK(ra_table_list(path, list, sizeof list));
    CHECK(!strcmp(list, "mA/hw1/p2, mA/hw1/p4, mA/hw2/p2, mB/hw2/p2"));
    CHECK(ra_table_list(path, list, 20) == RA_OK && !strcmp(list, "mA/hw1/p2, ..."));

    int rc = ra_table_read(path, "mA", "hw1", 3, &got);
    CHECK(rc == RA_EINVAL && strstr(ra_error_message(), "/mA/hw1/p3") &&
          strstr(ra_error_message(), "the file has: mA/hw1/p2, mA/hw1/p4"));
    rc = ra_table_read(path, "mC", "hw1", 2, &got);
    CHECK(rc == RA_EINVAL && strstr(ra_error_message(), "model mC"));
    rc = ra_table_read(file("absent.h5"), "mA", "hw1", 2, &got);
    CHECK(rc == RA_EIO && strstr(ra_error_message(), "absent.h5: cannot open"));

    int n = -1;
    CHECK_OK(ra_table_validate(path, stderr, &n));
    CHECK(n == 0);
    ra_table_group_free(&a), ra_table_group_free(&b), ra_table_group_free(&c), ra_table_group_free(&d);
    ra_table_group_free(&add), ra_table_group_free(&repl);

    /* Invalid input is refused and leaves the file alone. */
    make_p2(&a, "mA", "hw1");
    a.boundaries[1] = 3000;
    rc = ra_table_merge(path, &a);
    CHECK(rc == RA_EINVAL && strstr(ra_error_message(), "not strictly increasing"));
    a.boundaries[1] = 1126;
    a.context_lengths[1] = 2048;
    rc = ra_table_merge(path, &a);
    CHECK(rc == RA_EINVAL && strstr(ra_error_message(), "context length 2048 twice"));
    ra_table_group_free(&a);
    CHECK(ra_table_group_init(&a, "m/x", "hw", 2, 1) == RA_EINVAL);
    CHECK(ra_table_group_init(&a, "m", "", 2, 1) == RA_EINVAL);
    CHECK_OK(ra_table_validate(path, NULL, &n));
}

static void test_entry_set(void)
{
    struct ra_table_group g;
    CHECK_OK(ra_table_group_init(&g, "m", "hw", 3, 1));
    CHECK_OK(ra_table_entry_set(&g, 0, (const int[]){ 0, 10, 30, 40 }, 1.0, 2.0, NAN));
    CHECK(g.context_lengths[0] == 40 && g.ratios[0] == 0.25 && g.ratios[1] == 0.5 && g.ratios[2] == 0.25);
    CHECK(ra_table_entry_set(&g, 0, (const int[]){ 0, 10, 10, 40 }, 1, 1, 1) == RA_EINVAL);
    CHECK(ra_table_entry_set(&g, 1, (const int[]){ 0, 10, 20, 40 }, 1, 1, 1) == RA_EINVAL);
    const struct ra_table_prov *pv = &g.prov[0];
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    CHECK(!strcmp(pv->objective, "measure") && pv->min_stride == 1 && pv->repeats == 1 && strlen(pv->date) == 20 &&
          pv->version[0] && !strcmp(pv->host, host));
    CHECK(ra_table_group_set_search(&g, "random", 1, 1) == RA_EINVAL);
    CHECK(ra_table_group_set_search(&g, "model", 0, 1) == RA_EINVAL);
    CHECK_OK(ra_table_group_set_search(&g, "model", 8, 2));
    CHECK(!strcmp(pv->objective, "model") && pv->min_stride == 8 && pv->repeats == 2);
    ra_table_group_free(&g);
}

static void test_profile(void)
{
    const char *path = file("t.h5");
    const char *names[] = { "p2p_latency_s", "gemm_flops", "attn_flops" };
    const double values[] = { 2e-6, 5e10, 3e10 };
    char got[8][64];
    double v[8];
    int n = 0;
    CHECK_OK(ra_table_profile_write(path, "mA", "hw1", names, values, 3, NULL));
    CHECK_OK(ra_table_profile_read(path, "mA", "hw1", got, v, 8, &n));
    CHECK(n == 3 && !strcmp(got[0], "attn_flops") && v[0] == 3e10 && !strcmp(got[1], "gemm_flops") &&
          v[1] == 5e10 && !strcmp(got[2], "p2p_latency_s") && v[2] == 2e-6);
    CHECK(ra_table_profile_read(path, "mA", "hw1", got, v, 2, &n) == RA_ERANGE);
    /* Rewriting replaces the profile and keeps the tables. */
    CHECK_OK(ra_table_profile_write(path, "mA", "hw1", names + 1, values + 1, 1, NULL));
    CHECK_OK(ra_table_profile_read(path, "mA", "hw1", got, v, 8, &n));
    CHECK(n == 1 && !strcmp(got[0], "gemm_flops") && v[0] == 5e10);
    int rc = ra_table_profile_read(path, "mB", "hw1", got, v, 8, &n);
    CHECK(rc == RA_EINVAL && strstr(ra_error_message(), "no cost-model profile for model mB"));
    const char *dup[] = { "a", "a" };
    CHECK(ra_table_profile_write(path, "mA", "hw1", dup, values, 2, NULL) == RA_EINVAL);
    struct ra_table_group g;
    CHECK_OK(ra_table_read(path, "mA", "hw1", 4, &g));
    ra_table_group_free(&g);
    CHECK_OK(ra_table_validate(path, NULL, &n));
    char list[512];
    CHECK(ra_table_list(path, list, sizeof list) == RA_OK && strstr(list, "mA/hw1/profile"));
}

/* ------------------------------------------------------------------ malformed files */

/* A valid two-table file (mA/hw1/p2 with 2048 and 8192, mB/hw1/p2) at `name`. */
static const char *good_file(const char *name)
{
    const char *path = file(name);
    struct ra_table_group g;
    unlink(path);
    make_p2(&g, "mA", "hw1");
    CHECK_OK(ra_table_merge(path, &g));
    snprintf(g.model_id, sizeof g.model_id, "mB");
    CHECK_OK(ra_table_merge(path, &g));
    ra_table_group_free(&g);
    return path;
}

static hid_t open_rw(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0);
    return f;
}

static void write_ds(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims, const void *data)
{
    H5Ldelete(f, name, H5P_DEFAULT); /* may be absent */
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(f, name, type == H5T_NATIVE_INT ? H5T_STD_I32LE : H5T_IEEE_F64LE, sp, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d >= 0 && H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(d);
    H5Sclose(sp);
}

static void write_attr_int(hid_t obj, const char *name, int v)
{
    H5Adelete(obj, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(a >= 0 && H5Awrite(a, H5T_NATIVE_INT, &v) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
}

/* A fixed-length string, as h5py writes numpy byte strings. */
static void write_attr_fixed_str(hid_t f, const char *obj, const char *name, const char *s)
{
    hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
    H5Adelete(o, name);
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, strlen(s));
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(a >= 0 && H5Awrite(a, t, s) >= 0);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t), H5Oclose(o);
}

/* A string dataset of n values: fixed-length `size` bytes NUL-padded, or variable-length. */
static void write_str_ds(hid_t f, const char *name, const char *const *v, int n, size_t size, int vlen)
{
    hsize_t dims[1] = { (hsize_t)n };
    char buf[8][64] = { { 0 } };
    H5Ldelete(f, name, H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate_simple(1, dims, NULL);
    H5Tset_size(t, vlen ? H5T_VARIABLE : size);
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    hid_t d = H5Dcreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (int i = 0; !vlen && i < n; i++)
        memcpy(buf[0] + i * size, v[i], strlen(v[i]) < size ? strlen(v[i]) : size);
    CHECK(d >= 0 && H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, vlen ? (const void *)v : (const void *)buf) >= 0);
    H5Dclose(d), H5Sclose(sp), H5Tclose(t);
}

/* A variable-length string, as h5py writes Python str. */
static void write_attr_vlen_str(hid_t f, const char *obj, const char *name, const char *s)
{
    hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
    H5Adelete(o, name);
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(a >= 0 && H5Awrite(a, t, &s) >= 0);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t), H5Oclose(o);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f)
        fputs(text, f), fclose(f);
}

static void copy_truncated(const char *from, const char *to, long keep)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    CHECK(in && out);
    for (long i = 0; in && out && i < keep; i++) {
        int c = fgetc(in);
        if (c == EOF)
            break;
        fputc(c, out);
    }
    if (in)
        fclose(in);
    if (out)
        fclose(out);
}

/* read (of mA/hw1/p2) and validate must both fail with `msg`; validate finds n problems. */
static void expect_bad(const char *path, const char *msg, int n_want)
{
    struct ra_table_group g;
    int rc = ra_table_read(path, "mA", "hw1", 2, &g);
    if (rc == RA_OK || !strstr(ra_error_message(), msg) || !strstr(ra_error_message(), path)) {
        fprintf(stderr, "%s: read: rc %d, message '%s', want '%s'\n", path, rc, ra_error_message(), msg);
        test_failures++;
    }
    if (rc == RA_OK)
        ra_table_group_free(&g);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    int n = -1;
    rc = ra_table_validate(path, out, &n);
    fclose(out);
    int lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    if (rc == RA_OK || !strstr(text, msg) || n != n_want || lines != n) {
        fprintf(stderr, "%s: validate: rc %d, %d problems (want %d), %d lines:\n%s", path, rc, n, n_want, lines, text);
        test_failures++;
    }
    free(text);
}

static void test_malformed(void)
{
    const char *path;
    hid_t f;
    hsize_t d2[2] = { 2, 2 }, d1[1] = { 2 };

    path = good_file("missing.h5");
    f = open_rw(path);
    H5Ldelete(f, "/mA/hw1/p2/ttft_tsp_s", H5P_DEFAULT);
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/ttft_tsp_s: dataset is missing", 1);

    path = good_file("shape.h5");
    f = open_rw(path);
    write_ds(f, "/mA/hw1/p2/boundaries", H5T_NATIVE_INT, 2, d2, (const int[]){ 0, 2048, 0, 8192 });
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/boundaries: shape [2][2], want [2][3]", 1);

    path = good_file("rank.h5");
    f = open_rw(path);
    write_ds(f, "/mA/hw1/p2/ratios", H5T_NATIVE_DOUBLE, 1, d1, (const double[]){ 0.5, 0.5 });
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/ratios: has 1 dimensions, want 2", 1);

    path = good_file("class.h5");
    f = open_rw(path);
    write_ds(f, "/mA/hw1/p2/ratios", H5T_NATIVE_INT, 2, d2, (const int[]){ 1, 0, 1, 0 });
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/ratios: values are of class integer, want float", 1);

    path = good_file("monotonic.h5");
    f = open_rw(path);
    hsize_t b2[2] = { 2, 3 };
    write_ds(f, "/mA/hw1/p2/boundaries", H5T_NATIVE_INT, 2, b2, (const int[]){ 0, 1126, 2048, 0, 9000, 8192 });
    H5Fclose(f);
    expect_bad(path, "boundaries: entry 1 (context 8192) is 0,9000,8192, not strictly increasing", 1);

    path = good_file("sum.h5");
    f = open_rw(path);
    write_ds(f, "/mA/hw1/p2/ratios", H5T_NATIVE_DOUBLE, 2, d2, (const double[]){ 0.5, 0.4, 0.65, 0.35 });
    H5Fclose(f);
    expect_bad(path, "ratios: entry 0 (context 2048): ratios sum to 0.9, not 1", 1);

    path = good_file("consistent.h5");
    f = open_rw(path);
    write_ds(f, "/mA/hw1/p2/ratios", H5T_NATIVE_DOUBLE, 2, d2, (const double[]){ 0.5, 0.5, 0.65, 0.35 });
    H5Fclose(f);
    expect_bad(path, "ratios put boundary 1 at 1024.0, boundaries say 1126", 1);

    path = good_file("order.h5");
    f = open_rw(path);
    write_ds(f, "/mA/hw1/p2/context_lengths", H5T_NATIVE_INT, 1, d1, (const int[]){ 8192, 2048 });
    H5Fclose(f);
    expect_bad(path, "context_lengths: entry 1 (2048) is not greater than entry 0 (8192)", 3); /* + both bounds rows */

    path = good_file("objective.h5");
    f = open_rw(path);
    write_str_ds(f, "/mA/hw1/p2/objective", (const char *[]){ "random", "measure" }, 2, 16, 0);
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/objective: entry 0 (context 2048) is 'random', want 'measure' or 'model'", 1);

    path = good_file("stride.h5");
    f = open_rw(path);
    write_ds(f, "/mA/hw1/p2/min_stride", H5T_NATIVE_INT, 1, d1, (const int[]){ 16, 0 });
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/min_stride: entry 1 (context 8192) is 0, want >= 1", 1);

    path = good_file("nohost.h5");
    f = open_rw(path);
    H5Ldelete(f, "/mA/hw1/p2/host", H5P_DEFAULT);
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/host: dataset is missing", 1);

    path = good_file("longstr.h5");
    f = open_rw(path);
    write_str_ds(f, "/mA/hw1/p2/date", (const char *[]){ "2026-01-02T00:00:00Z", "2026-01-02T00:00:00Z and more text" },
                 2, 40, 0);
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/date: entry 1 is longer than 31 characters", 1);

    path = good_file("vlenstr.h5");
    f = open_rw(path);
    write_str_ds(f, "/mA/hw1/p2/runahead_version", (const char *[]){ "0.1", "0.1" }, 2, 0, 1);
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/runahead_version: want fixed-length strings", 1);

    path = good_file("schema99.h5");
    f = open_rw(path);
    write_attr_int(f, "schema_version", 99);
    H5Fclose(f);
    expect_bad(path, "schema_version is 99; this runahead reads versions 1 to 3", 1);

    path = good_file("noschema.h5");
    f = open_rw(path);
    H5Adelete(f, "schema_version");
    H5Fclose(f);
    expect_bad(path, "attribute schema_version is missing", 1);

    path = file("text.h5");
    write_text(path, "context,ratio\n2048,0.55\n");
    expect_bad(path, "not an HDF5 file", 1);

    path = good_file("good.h5");
    const char *cut = file("truncated.h5");
    copy_truncated(path, cut, 1200);
    expect_bad(cut, "truncated or corrupt", 1);

    /* Several problems in several groups: every one reported, each once. */
    path = good_file("many.h5");
    f = open_rw(path);
    H5Ldelete(f, "/mA/hw1/p2/ttft_kvr_s", H5P_DEFAULT);
    write_ds(f, "/mB/hw1/p2/ratios", H5T_NATIVE_DOUBLE, 2, d2, (const double[]){ 0.55, 0.45, 0.65, 0.30 });
    hid_t g = H5Gcreate2(f, "/mB/hw1/p0", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2/ttft_kvr_s: dataset is missing", 3);

    /* Merging into a malformed file is refused and changes nothing. */
    struct ra_table_group t;
    struct stat st0, st1;
    make_p2(&t, "mC", "hw1");
    stat(path, &st0);
    int rc = ra_table_merge(path, &t);
    stat(path, &st1);
    CHECK(rc == RA_EFORMAT && strstr(ra_error_message(), "3 problems; not changing the file"));
    CHECK(st0.st_ino == st1.st_ino && st0.st_size == st1.st_size);
    rc = ra_table_merge(file("text.h5"), &t);
    CHECK(rc == RA_EFORMAT && strstr(ra_error_message(), "not an HDF5 file"));
    ra_table_group_free(&t);

}

/* ------------------------------------------------------------------ schema 1 */

static const char *const prov_ds[] = { "objective", "min_stride", "repeats", "date", "host", "runahead_version" };

/* A schema-1 file: good_file's groups with their provenance as group attributes (fixed-length
 * strings as h5py writes numpy byte strings, and one variable-length as it writes str). */
static const char *v1_file(const char *name, const char *objective)
{
    const char *path = good_file(name);
    hid_t f = open_rw(path);
    const char *groups[] = { "/mA/hw1/p2", "/mB/hw1/p2" };
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 6; i++) {
            char ds[64];
            snprintf(ds, sizeof ds, "%s/%s", groups[k], prov_ds[i]);
            H5Ldelete(f, ds, H5P_DEFAULT);
        }
        hid_t g = H5Oopen(f, groups[k], H5P_DEFAULT);
        write_attr_int(g, "min_stride", 16);
        write_attr_int(g, "repeats", 3);
        H5Oclose(g);
        write_attr_fixed_str(f, groups[k], "objective", objective);
        write_attr_vlen_str(f, groups[k], "date", "2026-01-02");
        write_attr_fixed_str(f, groups[k], "runahead_version", "0.0.9");
    }
    write_attr_int(f, "schema_version", 1);
    H5Fclose(f);
    return path;
}

static void test_schema1(void)
{
    struct ra_table_group t, add;
    int n = -1, version = 0;

    /* Read and validated; every entry gets the group's provenance, host unknown. */
    const char *path = v1_file("v1.h5", "model");
    CHECK_OK(ra_table_validate(path, stderr, &n));
    CHECK_OK(ra_table_schema_version(path, &version));
    CHECK(n == 0 && version == 1);
    CHECK_OK(ra_table_read(path, "mA", "hw1", 2, &t));
    for (int i = 0; i < t.n; i++)
        CHECK(!strcmp(t.prov[i].objective, "model") && t.prov[i].min_stride == 16 && t.prov[i].repeats == 3 &&
              !strcmp(t.prov[i].date, "2026-01-02") && !strcmp(t.prov[i].version, "0.0.9") && !t.prov[i].host[0]);
    ra_table_group_free(&t);

    /* Its malformed attributes are reported as before. */
    path = v1_file("v1-objective.h5", "random");
    expect_bad(path, "/mA/hw1/p2: attribute objective is 'random', want 'measure' or 'model'", 2); /* mA and mB */

    /* A schema-2 dataset in a schema-1 group is not part of its layout (validate checks that). */
    path = v1_file("v1-mixed.h5", "model");
    hid_t f = open_rw(path);
    write_ds(f, "/mA/hw1/p2/repeats", H5T_NATIVE_INT, 1, (const hsize_t[]){ 2 }, (const int[]){ 1, 1 });
    H5Fclose(f);
    CHECK(ra_table_validate(path, NULL, &n) == RA_EFORMAT && n == 1 &&
          strstr(ra_error_message(), "/mA/hw1/p2/repeats: unexpected object"));

    /* A merge rewrites the whole file as schema 2, every group keeping its provenance. */
    path = v1_file("v1-merge.h5", "model");
    make_group(&add, "mA", "hw1", 2, 1, (const int[]){ 4096 }, (const double[]){ 0.6, 0.4 });
    CHECK_OK(ra_table_merge(path, &add));
    CHECK_OK(ra_table_validate(path, stderr, &n));
    CHECK_OK(ra_table_schema_version(path, &version));
    CHECK(n == 0 && version == RA_TABLE_SCHEMA_VERSION);
    CHECK_OK(ra_table_read(path, "mA", "hw1", 2, &t));
    CHECK(t.n == 3 && !strcmp(t.prov[0].date, "2026-01-02") && !strcmp(t.prov[1].date, add.prov[0].date) &&
          !strcmp(t.prov[2].objective, "model") && !t.prov[2].host[0] && t.prov[1].host[0]);
    ra_table_group_free(&t);
    CHECK_OK(ra_table_read(path, "mB", "hw1", 2, &t));
    CHECK(t.n == 2 && !strcmp(t.prov[1].date, "2026-01-02") && t.prov[1].repeats == 3);
    ra_table_group_free(&t);
    ra_table_group_free(&add);
}

/* ------------------------------------------------------------------ schema 2 and the run key */

static const char *const key_attrs[] = { "backend", "compute_dtype", "kv_dtype" };

/* A schema-2 file, as runahead wrote them before the run key: good_file without the key
 * attributes, stamped 2 (written here with HDF5 itself, not by the code under test). */
static const char *v2_file(const char *name)
{
    const char *path = good_file(name);
    hid_t f = open_rw(path);
    const char *groups[] = { "/mA/hw1/p2", "/mB/hw1/p2" };
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++)
            CHECK(H5Adelete_by_name(f, groups[k], key_attrs[i], H5P_DEFAULT) >= 0);
    write_attr_int(f, "schema_version", 2);
    H5Fclose(f);
    return path;
}

/* The key attributes as HDF5 itself reads them from the file ("" when absent). */
static void file_key(const char *path, const char *group, char out[3][16])
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    for (int i = 0; i < 3; i++) {
        out[i][0] = '\0';
        if (f < 0 || H5Aexists_by_name(f, group, key_attrs[i], H5P_DEFAULT) <= 0)
            continue;
        hid_t a = H5Aopen_by_name(f, group, key_attrs[i], H5P_DEFAULT, H5P_DEFAULT), ty = H5Aget_type(a);
        size_t size = H5Tget_size(ty);
        if (size < 16)
            H5Aread(a, ty, out[i]), out[i][size] = '\0';
        H5Tclose(ty);
        H5Aclose(a);
    }
    if (f >= 0)
        H5Fclose(f);
}

static void test_schema2_key(void)
{
    struct ra_table_group t, add, old;
    const struct ra_table_key legacy = RA_TABLE_KEY_LEGACY;
    struct ra_table_key cuda;
    char fk[3][16];
    int n = -1, version = 0;

    /* A schema-2 table reads and validates as cpu/f32/f32, the only thing runahead-tune tuned then. */
    const char *path = v2_file("v2.h5");
    CHECK_OK(ra_table_validate(path, stderr, &n));
    CHECK_OK(ra_table_schema_version(path, &version));
    CHECK(n == 0 && version == 2);
    CHECK_OK(ra_table_read(path, "mA", "hw1", 2, &old));
    CHECK(!strcmp(old.key.backend, "cpu") && !strcmp(old.key.compute, "f32") && !strcmp(old.key.kv, "f32"));
    CHECK_OK(ra_table_read_for(path, "mA", "hw1", 2, &legacy, &t));
    ra_table_group_free(&t);

    /* A run on another backend or dtype is refused in one line naming the file, both keys. */
    CHECK_OK(ra_table_key_set(&cuda, "cuda", "bf16", "f32"));
    CHECK(ra_table_read_for(path, "mA", "hw1", 2, &cuda, &t) == RA_EINVAL && !t.context_lengths);
    CHECK(strstr(ra_error_message(), path) && !strchr(ra_error_message(), '\n') &&
          strstr(ra_error_message(), "/mA/hw1/p2 was tuned for backend cpu, compute f32, KV f32; this run is backend "
                                     "cuda, compute bf16, KV f32: not using it"));
    struct ra_table_key kv = legacy;
    snprintf(kv.kv, sizeof kv.kv, "bf16");
    CHECK(ra_table_read_for(path, "mA", "hw1", 2, &kv, &t) == RA_EINVAL && strstr(ra_error_message(), "KV bf16"));
    CHECK(ra_table_key_set(&kv, "cuda", "BF16", "f32") == RA_EINVAL && strstr(ra_error_message(), "compute dtype"));

    /* A merge upgrades the whole file to schema 3: every group keeps its entries and gets the
     * legacy key in the file, the untouched group mB included. */
    make_group(&add, "mA", "hw1", 2, 1, (const int[]){ 4096 }, (const double[]){ 0.6, 0.4 });
    CHECK_OK(ra_table_merge(path, &add));
    CHECK_OK(ra_table_validate(path, stderr, &n));
    CHECK_OK(ra_table_schema_version(path, &version));
    CHECK(n == 0 && version == 3);
    file_key(path, "/mB/hw1/p2", fk);
    CHECK(!strcmp(fk[0], "cpu") && !strcmp(fk[1], "f32") && !strcmp(fk[2], "f32"));
    CHECK_OK(ra_table_read(path, "mA", "hw1", 2, &t));
    CHECK(t.n == 3 && t.context_lengths[1] == 4096 && same_prov(&t.prov[0], &old.prov[0]) &&
          same_prov(&t.prov[2], &old.prov[1]));
    ra_table_group_free(&t);
    ra_table_group_free(&old);

    /* Entries for another key are not merged into a group of this one; the file is unchanged. */
    add.key = cuda;
    CHECK(ra_table_merge(path, &add) == RA_EINVAL &&
          strstr(ra_error_message(), "holds a table tuned for backend cpu, compute f32, KV f32, not backend cuda"));
    CHECK_OK(ra_table_read(path, "mA", "hw1", 2, &t));
    CHECK(t.n == 3 && !strcmp(t.key.backend, "cpu"));
    ra_table_group_free(&t);

    /* Into a new group it goes with its key, read back as written, and found only by its key. */
    snprintf(add.model_id, sizeof add.model_id, "mC");
    CHECK_OK(ra_table_merge(path, &add));
    file_key(path, "/mC/hw1/p2", fk);
    CHECK(!strcmp(fk[0], "cuda") && !strcmp(fk[1], "bf16") && !strcmp(fk[2], "f32"));
    CHECK_OK(ra_table_read_for(path, "mC", "hw1", 2, &cuda, &t));
    CHECK(t.n == 1 && ra_table_key_equal(&t.key, &cuda));
    ra_table_group_free(&t);
    CHECK(ra_table_read_for(path, "mC", "hw1", 2, &legacy, &t) == RA_EINVAL);
    ra_table_group_free(&add);

    /* A schema-3 group without its key, or with a malformed one, does not validate. */
    path = good_file("v3-nokey.h5");
    hid_t f = open_rw(path);
    CHECK(H5Adelete_by_name(f, "/mA/hw1/p2", "kv_dtype", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2: attribute kv_dtype is missing", 1);
    path = good_file("v3-badkey.h5");
    f = open_rw(path);
    CHECK(H5Adelete_by_name(f, "/mA/hw1/p2", "backend", H5P_DEFAULT) >= 0);
    write_attr_fixed_str(f, "/mA/hw1/p2", "backend", "CPU/x");
    H5Fclose(f);
    expect_bad(path, "/mA/hw1/p2: attribute backend is 'CPU/x', want 1..15 characters of [a-z0-9]", 1);
}

/* ------------------------------------------------------------------ conflicts */

/* Merges a one-entry group at 2048 with this date and KVR-S TTFT into path; returns its stats
 * and the notes it printed (in notes[len]). */
static struct ra_table_merge_stats merge_one(const char *path, const char *date, double kvr, double ratio,
                                             char *notes, size_t len)
{
    struct ra_table_group g;
    struct ra_table_merge_stats st = { -1, -1, -1, -1 };
    struct ra_table_writer w;
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    CHECK_OK(ra_table_writer_init(&w, "test", out));
    make_group(&g, "mA", "hw1", 2, 1, (const int[]){ 2048 }, (const double[]){ ratio, 1 - ratio });
    snprintf(g.prov[0].date, sizeof g.prov[0].date, "%s", date);
    g.ttft_kvr_s[0] = kvr;
    CHECK_OK(ra_table_merge_with(path, &g, &w, &st));
    fclose(out);
    snprintf(notes, len, "%s", text ? text : "");
    free(text);
    ra_table_group_free(&g);
    return st;
}

/* The ratio of the entry at 2048 in path. */
static double ratio_at_2048(const char *path)
{
    struct ra_table_group g;
    double r = -1;
    if (ra_table_read(path, "mA", "hw1", 2, &g) == RA_OK) {
        r = g.ratios[0];
        ra_table_group_free(&g);
    }
    return r;
}

static void test_conflicts(void)
{
    const char *path = file("conflict.h5");
    char notes[2048];
    struct ra_table_merge_stats st;
    unlink(path);
    st = merge_one(path, "2026-03-01T10:00:00Z", 0.5, 0.5, notes, sizeof notes);
    CHECK(st.added == 1 && st.replaced == 0 && st.kept == 0 && !notes[0]);
    /* The same entry again: no conflict. */
    st = merge_one(path, "2026-03-01T10:00:00Z", 0.5, 0.5, notes, sizeof notes);
    CHECK(st.same == 1 && st.added == 0 && st.replaced + st.kept == 0 && !notes[0]);
    /* An older search, even a faster one, stays out. */
    st = merge_one(path, "2026-02-01T10:00:00Z", 0.1, 0.625, notes, sizeof notes);
    CHECK(st.kept == 1 && ratio_at_2048(path) == 0.5);
    CHECK(strstr(notes, "test: ") == notes && strstr(notes, "conflict.h5: /mA/hw1/p2 context 2048: conflict: kept the "
          "entry searched 2026-03-01T10:00:00Z") && strstr(notes, "dropped the one searched 2026-02-01T10:00:00Z") &&
          strstr(notes, "the newer search wins\n"));
    /* A newer one, even a slower one, replaces it. */
    st = merge_one(path, "2026-04-01T10:00:00Z", 0.9, 0.5625, notes, sizeof notes);
    CHECK(st.replaced == 1 && ratio_at_2048(path) == 0.5625 && strstr(notes, "kept the entry searched 2026-04-01"));
    /* The same date: the lower KVR-S TTFT. */
    st = merge_one(path, "2026-04-01T10:00:00Z", 0.8, 0.625, notes, sizeof notes);
    CHECK(st.replaced == 1 && ratio_at_2048(path) == 0.625 && strstr(notes, "same date: the lower KVR-S TTFT wins"));
    st = merge_one(path, "2026-04-01T10:00:00Z", 0.85, 0.5, notes, sizeof notes);
    CHECK(st.kept == 1 && ratio_at_2048(path) == 0.625 && strstr(notes, "same date: the lower KVR-S TTFT wins"));
    /* A full tie: the entry already there. */
    st = merge_one(path, "2026-04-01T10:00:00Z", 0.8, 0.5, notes, sizeof notes);
    CHECK(st.kept == 1 && ratio_at_2048(path) == 0.625 && strstr(notes, "a tie: the entry already in the table stays"));
    int n;
    CHECK_OK(ra_table_validate(path, NULL, &n));
}

static void test_ids(void)
{
    struct ra_config c = { .dim = 768, .hidden_dim = 2048, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
                           .vocab_size = 32000, .seq_len = 16384, .head_dim = 64, .rope_theta = 10000.0f,
                           .norm_eps = 1e-5f };
    char a[128], b[128], hw[256];
    ra_table_model_id(&c, a, sizeof a);
    CHECK(!strncmp(a, "llama-d768-l12-h12-kv12-f2048-v32000-", 37) && strlen(a) == 45);
    ra_table_model_id(&c, b, sizeof b);
    CHECK(!strcmp(a, b));
    c.rope_theta = 500000.0f;
    ra_table_model_id(&c, b, sizeof b);
    CHECK(strcmp(a, b) != 0 && !strncmp(a, b, 37));
    char lin2[128], lin4[128];
    CHECK_OK(ra_rope_set_linear(&c, 2.0, "id"));
    ra_table_model_id(&c, lin2, sizeof lin2);
    CHECK_OK(ra_rope_set_linear(&c, 4.0, "id"));
    ra_table_model_id(&c, lin4, sizeof lin4);
    CHECK(strcmp(lin2, b) != 0 && strcmp(lin2, lin4) != 0); /* RoPE scaling changes the id */
    printf("model id: %s\n", a);
    ra_table_default_hw_tag(hw, sizeof hw);
    printf("hardware tag: %s\n", hw);
    CHECK(hw[0] && !strpbrk(hw, " /()") && hw[strlen(hw) - 1] == 'c');
}

int main(void)
{
    const char *d = test_tmpdir("test_table");
    if (!d)
        return 1;
    snprintf(dir, sizeof dir, "%s", d);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the crafted edits delete what may be absent */
    test_round_trip();
    test_entry_set();
    test_profile();
    test_malformed();
    test_schema1();
    test_schema2_key();
    test_conflicts();
    test_ids();
    return test_result("test_table");
}
