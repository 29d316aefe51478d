/* Partition specs: even, ratios and bounds, and every way they can be wrong. */
#include "partition.h"
#include "status.h"
#include "test.h"

static int same(const int *b, const int *want, int p)
{
    return memcmp(b, want, sizeof(int) * (size_t)(p + 1)) == 0;
}

int main(void)
{
    int b[8];
    char buf[128];

    CHECK_OK(ra_partition_parse("even", 10, 3, b));
    CHECK(same(b, (int[]){ 0, 3, 6, 10 }, 3));
    CHECK_OK(ra_partition_parse("even", 3000, 4, b));
    CHECK(same(b, (int[]){ 0, 750, 1500, 2250, 3000 }, 4));
    CHECK_OK(ra_partition_parse("even", 4, 4, b)); /* 1-token slices */
    CHECK(same(b, (int[]){ 0, 1, 2, 3, 4 }, 4));
    CHECK_OK(ra_partition_parse("even", 7, 1, b));
    CHECK(same(b, (int[]){ 0, 7 }, 1));

    /* The example: 0.35,0.25,0.21,0.19 of 3000 tokens. */
    CHECK_OK(ra_partition_parse("ratios:0.35,0.25,0.21,0.19", 3000, 4, b));
    CHECK(same(b, (int[]){ 0, 1050, 1800, 2430, 3000 }, 4));
    CHECK_OK(ra_partition_parse("ratios:0.5,0.5", 5, 2, b)); /* 2.5 rounds away from zero */
    CHECK(same(b, (int[]){ 0, 3, 5 }, 2));
    CHECK_OK(ra_partition_parse("ratios:0.3333333,0.3333333,0.3333334", 9, 3, b));
    CHECK(same(b, (int[]){ 0, 3, 6, 9 }, 3));
    CHECK_OK(ra_partition_parse("bounds:0,900,1700,2400,3000", 3000, 4, b));
    CHECK(same(b, (int[]){ 0, 900, 1700, 2400, 3000 }, 4));
    ra_partition_format(b, 4, buf, sizeof buf);
    CHECK(strcmp(buf, "0,900,1700,2400,3000") == 0);

    const struct { const char *spec; int n, p; const char *msg; } bad[] = {
        { "even", 3, 4, "fewer than the 4 ranks" },
        { "ratios:0.5,0.4", 100, 2, "sum to 0.9" },
        { "ratios:0.5,0.5000011", 100, 2, "sum to" },
        { "ratios:0.5,0.5", 100, 3, "need 3 comma-separated ratios" },
        { "ratios:1.2,-0.2", 100, 2, "must be positive" },
        { "ratios:0.5,x", 100, 2, "'x' is not a number" },
        { "ratios:nan", 100, 1, "'nan' is not a finite number" },
        { "ratios:0.5,nan", 100, 2, "'nan' is not a finite number" },
        { "ratios:inf,0.5", 100, 2, "'inf' is not a finite number" },
        { "ratios:0.5,1e999", 100, 2, "'1e999' is not a finite number" },
        { "ratios:0.5,0.5,", 100, 2, "missing after the last comma" },
        { "ratios:0.5,0.25,0.25", 100, 2, "need 2 comma-separated ratios, one per rank (got 3)" },
        { "bounds:0,nan,100", 100, 2, "'nan' is not a finite number" },
        { "bounds:0,50,100,200", 100, 2, "got 4" },
        { "ratios:0.999,0.0005,0.0005", 100, 3, "empty slice" },
        { "bounds:0,50,100", 100, 3, "need 4 boundaries" },
        { "bounds:0,50,50,100", 100, 3, "rank 1 gets an empty slice" },
        { "bounds:0,60,50,100", 100, 3, "empty slice" },
        { "bounds:1,50,100", 100, 2, "must run from 0" },
        { "bounds:0,50,99", 100, 2, "must run from 0 to the prompt length 100" },
        { "bounds:0,50.5,100", 100, 2, "not a position" },
        { "bounds:0,500,100", 100, 2, "not a position" },
        { "bounds:", 100, 2, "need 3 boundaries" },
        { "random", 100, 2, "is not 'even'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = ra_partition_parse(bad[i].spec, bad[i].n, bad[i].p, b);
        if (rc != RA_EINVAL || !strstr(ra_error_message(), bad[i].msg))
            fprintf(stderr, "spec '%s': rc %d, message '%s'\n", bad[i].spec, rc, ra_error_message());
        CHECK(rc == RA_EINVAL && strstr(ra_error_message(), bad[i].msg));
    }
    return test_result("test_partition");
}
