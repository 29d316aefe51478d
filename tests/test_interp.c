/* Table interpolation (partition/interp.c) against hand-computed splits: groups are built in
 * memory, no HDF5 file is involved. */
#include "interp.h"
#include "status.h"
#include "table.h"
#include "test.h"

#define MAX_N 4
#define MAX_P 4

/* A group of n entries for p ranks with the given ratios and the bounds they round to,
 * in caller-owned storage (ra_table_group_init lives with the HDF5 code). */
struct group_store {
    struct ra_table_group g;
    int contexts[MAX_N], bounds[MAX_N * (MAX_P + 1)];
    double ratios[MAX_N * MAX_P];
};

static struct ra_table_group *make_group(struct group_store *s, int p, int n, const int *contexts,
                                         const double *ratios)
{
    memset(s, 0, sizeof *s);
    snprintf(s->g.model_id, sizeof s->g.model_id, "m");
    snprintf(s->g.hw_tag, sizeof s->g.hw_tag, "hw");
    s->g.p = p;
    s->g.n = n;
    s->g.context_lengths = s->contexts;
    s->g.boundaries = s->bounds;
    s->g.ratios = s->ratios;
    for (int i = 0; i < n; i++) {
        s->contexts[i] = contexts[i];
        memcpy(s->ratios + i * p, ratios + i * p, sizeof(double) * (size_t)p);
        CHECK_OK(ra_table_ratios_to_bounds(ratios + i * p, p, contexts[i], s->bounds + i * (p + 1)));
    }
    return &s->g;
}

static int same_ints(const int *a, const int *b, int n)
{
    return memcmp(a, b, sizeof(int) * (size_t)n) == 0;
}

static void check_interp(const struct ra_table_group *g, int context, const int *want, int want_ex)
{
    int b[MAX_P + 1], ex = -1;
    int rc = ra_table_interpolate(g, context, b, &ex);
    CHECK_OK(rc);
    if (rc == RA_OK && (!same_ints(b, want, g->p + 1) || ex != want_ex)) {
        fprintf(stderr, "context %d: got", context);
        for (int r = 0; r <= g->p; r++)
            fprintf(stderr, " %d", b[r]);
        fprintf(stderr, " extrapolated %d\n", ex);
        test_failures++;
    }
}

static void test_two_ranks(void)
{
    struct group_store s;
    double v[2];
    int ex, b[3];
    const struct ra_table_group *g =
        make_group(&s, 2, 2, (const int[]){ 2048, 8192 }, (const double[]){ 0.55, 0.45, 0.65, 0.35 });
    /* 4096: 0.55 + 0.10 * 2048/6144 = 0.583333...; 0.583333 * 4096 = 2389.33 */
    CHECK_OK(ra_table_ratios_at(g, 4096, v, &ex));
    CHECK(fabs(v[0] - (0.55 + 0.1 / 3)) < 1e-12 && fabs(v[0] + v[1] - 1) < 1e-12 && ex == 0);
    check_interp(g, 4096, (const int[]){ 0, 2389, 4096 }, 0);
    check_interp(g, 5120, (const int[]){ 0, 3072, 5120 }, 0);    /* halfway: 0.60 */
    check_interp(g, 2048, (const int[]){ 0, 1126, 2048 }, 0);    /* an entry: 1126.4 stored */
    check_interp(g, 8192, (const int[]){ 0, 5325, 8192 }, 0);    /* 5324.8 */
    check_interp(g, 1024, (const int[]){ 0, 563, 1024 }, 1);     /* nearest: 0.55 * 1024 = 563.2 */
    check_interp(g, 16384, (const int[]){ 0, 10650, 16384 }, 1); /* 0.65 * 16384 = 10649.6 */
    check_interp(g, 2, (const int[]){ 0, 1, 2 }, 1);             /* 1.1 */
    CHECK(ra_table_interpolate(g, 1, b, &ex) == RA_EINVAL && strstr(ra_error_message(), "fewer than the 2 ranks"));
    CHECK(ra_table_interpolate(g, 0, b, NULL) == RA_EINVAL);
    /* A stored entry's boundaries win over its ratios (they may differ by rounding). */
    s.bounds[1] = 1127;
    check_interp(g, 2048, (const int[]){ 0, 1127, 2048 }, 0);
}

static void test_four_ranks(void)
{
    struct group_store s;
    /* (0.4,0.3,0.2,0.1) at 1000 and even at 3000; 2000 is halfway: (0.325,0.275,0.225,0.175) */
    const struct ra_table_group *g = make_group(&s, 4, 2, (const int[]){ 1000, 3000 },
                                                (const double[]){ 0.4, 0.3, 0.2, 0.1, 0.25, 0.25, 0.25, 0.25 });
    check_interp(g, 1000, (const int[]){ 0, 400, 700, 900, 1000 }, 0);
    check_interp(g, 2000, (const int[]){ 0, 650, 1200, 1650, 2000 }, 0);
    check_interp(g, 1500, (const int[]){ 0, 544, 975, 1294, 1500 }, 0); /* t = 1/4: 543.75, 975, 1293.75 */
    check_interp(g, 4, (const int[]){ 0, 1, 2, 3, 4 }, 1);              /* 1.6, 2.8, 3.6 round to 2, 3, 4: pushed down */
    check_interp(g, 5, (const int[]){ 0, 2, 3, 4, 5 }, 1);              /* 2, 3.5, 4.5 round to 2, 4, 5: pushed down */
}

static void test_rounding(void)
{
    int b[5];
    /* Rounding that would empty slices is nudged to one token each. */
    CHECK_OK(ra_table_ratios_to_bounds((const double[]){ 0.97, 0.01, 0.01, 0.01 }, 4, 4, b));
    CHECK(same_ints(b, (const int[]){ 0, 1, 2, 3, 4 }, 5));
    CHECK_OK(ra_table_ratios_to_bounds((const double[]){ 0.1, 0.1, 0.1, 0.7 }, 4, 5, b));
    CHECK(same_ints(b, (const int[]){ 0, 1, 2, 3, 5 }, 5)); /* 0.5, 1.0, 1.5 -> 1, 1, 2 -> 1, 2, 3 */
    CHECK_OK(ra_table_ratios_to_bounds((const double[]){ 0.001, 0.001, 0.998 }, 3, 3, b));
    CHECK(same_ints(b, (const int[]){ 0, 1, 2, 3 }, 4));
    CHECK_OK(ra_table_ratios_to_bounds((const double[]){ 1.0 }, 1, 7, b));
    CHECK(same_ints(b, (const int[]){ 0, 7 }, 2));
    CHECK(ra_table_ratios_to_bounds((const double[]){ 0.5, 0.5 }, 2, 1, b) == RA_EINVAL);
}

static void test_edges(void)
{
    struct group_store s;
    int ex, b[3];
    /* A one-entry table: its ratios everywhere, flagged away from its context. */
    const struct ra_table_group *g = make_group(&s, 2, 1, (const int[]){ 100 }, (const double[]){ 0.6, 0.4 });
    check_interp(g, 100, (const int[]){ 0, 60, 100 }, 0);
    check_interp(g, 50, (const int[]){ 0, 30, 50 }, 1);
    g = make_group(&s, 2, 0, NULL, NULL);
    CHECK(ra_table_interpolate(g, 10, b, &ex) == RA_EINVAL && strstr(ra_error_message(), "no entries"));
}

int main(void)
{
    test_two_ranks();
    test_four_ranks();
    test_rounding();
    test_edges();
    return test_result("test_interp");
}
