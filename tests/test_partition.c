/* Partition specs: even, ratios and bounds, and every way they can be wrong; the grammar's parse
 * step (spec.h) on every kind, and its resolve step where it needs no file (the table: and auto:
 * files: tune_cli, chain_cli and the fuzz_partition corpus). */
#include "partition.h"
#include "spec.h"
#include "status.h"
#include "test.h"

#include <stdlib.h>

static int same(const int *b, const int *want, int p)
{
    return memcmp(b, want, sizeof(int) * (size_t)(p + 1)) == 0;
}

static void test_grammar(void)
{
    static struct ra_partition_spec s;
    static const struct {
        const char *text;
        enum ra_partition_kind kind;
        const char *file;
    } good[] = {
        { "auto", RA_PARTITION_AUTO, NULL },           { "auto:p.h5", RA_PARTITION_AUTO, "p.h5" },
        { "even", RA_PARTITION_EVEN, NULL },           { "ratios:0.5,0.5", RA_PARTITION_RATIOS, NULL },
        { "bounds:0,5,10", RA_PARTITION_BOUNDS, NULL }, { "table:dir/t.h5", RA_PARTITION_TABLE, "dir/t.h5" },
        { "table:a:b.h5", RA_PARTITION_TABLE, "a:b.h5" }, /* only the first ':' separates */
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK_OK(ra_partition_spec_parse(good[i].text, &s));
        CHECK(s.kind == good[i].kind && !strcmp(s.text, good[i].text));
        CHECK(good[i].file ? s.file && !strcmp(s.file, good[i].file) : !s.file);
    }
    static const struct {
        const char *text, *msg;
    } bad[] = {
        { "", "is not 'even', 'ratios:...', 'bounds:...', 'auto', 'auto:FILE' or 'table:FILE'" },
        { "Auto", "is not 'even'" },
        { "even:", "is not 'even'" },
        { "table", "is not 'even'" },
        { "table:", "the FILE after ':' is missing" },
        { "auto:", "the FILE after ':' is missing" },
        { "ratios:", "the list after ':' is missing" },
        { "ratios:0.5,x", "'x' is not a number" },
        { "bounds:0,inf", "'inf' is not a finite number" },
        { "bounds:0,5,", "a number is missing after the last comma" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = ra_partition_spec_parse(bad[i].text, &s);
        if (rc != RA_EINVAL || !strstr(ra_error_message(), bad[i].msg))
            fprintf(stderr, "grammar '%s': rc %d, message '%s'\n", bad[i].text, rc, ra_error_message());
        CHECK(rc == RA_EINVAL && strstr(ra_error_message(), bad[i].msg));
    }
    char *longest = malloc(RA_PARTITION_SPEC_MAX + 1);
    memset(longest, 'x', RA_PARTITION_SPEC_MAX);
    memcpy(longest, "table:", 6);
    longest[RA_PARTITION_SPEC_MAX] = '\0';
    CHECK(ra_partition_spec_parse(longest, &s) == RA_EINVAL && strstr(ra_error_message(), "characters"));
    longest[RA_PARTITION_SPEC_MAX - 1] = '\0';
    CHECK_OK(ra_partition_spec_parse(longest, &s));
    free(longest);

    /* Resolved, the explicit specs give what ra_partition_parse gives; the count is checked now. */
    const struct ra_config c = { .dim = 64, .hidden_dim = 172, .n_layers = 5, .n_heads = 8, .n_kv_heads = 4,
                                 .vocab_size = 512, .seq_len = 4096, .head_dim = 8, .rope_theta = 10000.0f,
                                 .norm_eps = 1e-5f };
    const struct ra_partition_run run = { &c, 100, 4, "hw", NULL };
    int b[5], want[5], ext = 1;
    char source[256];
    CHECK_OK(ra_partition_spec_parse("ratios:0.4,0.3,0.2,0.1", &s));
    CHECK_OK(ra_partition_resolve(&s, &run, b, source, sizeof source, &ext));
    CHECK_OK(ra_partition_parse("ratios:0.4,0.3,0.2,0.1", 100, 4, want));
    CHECK(same(b, want, 4) && same(b, (int[]){ 0, 40, 70, 90, 100 }, 4) && !ext &&
          !strcmp(source, "ratios:0.4,0.3,0.2,0.1"));
    CHECK_OK(ra_partition_spec_parse("bounds:0,10,100", &s));
    CHECK(ra_partition_resolve(&s, &run, b, source, sizeof source, NULL) == RA_EINVAL &&
          strstr(ra_error_message(), "need 5 boundaries for 4 ranks"));

    /* auto without a profile: equal work, later ranks (longer prefixes) get fewer tokens; an
     * RA_PROFILE that cannot be read is named in the source, and the split stays the FLOP one. */
    unsetenv("RA_PROFILE");
    CHECK_OK(ra_partition_spec_parse("auto", &s));
    CHECK_OK(ra_partition_resolve(&s, &run, b, source, sizeof source, NULL));
    CHECK(b[0] == 0 && b[4] == 100 && b[1] - b[0] > b[4] - b[3] && !strncmp(source, "equal-work from FLOPs", 21));
    memcpy(want, b, sizeof want);
    setenv("RA_PROFILE", "/nonexistent/p.h5", 1);
    CHECK_OK(ra_partition_resolve(&s, &run, b, source, sizeof source, NULL));
    CHECK(same(b, want, 4) && strstr(source, "RA_PROFILE=/nonexistent/p.h5 has no usable profile"));
    unsetenv("RA_PROFILE");
    /* auto:FILE names its file: its absence is an error, not a fallback. */
    CHECK_OK(ra_partition_spec_parse("auto:/nonexistent/p.h5", &s));
    CHECK(ra_partition_resolve(&s, &run, b, source, sizeof source, NULL) != RA_OK &&
          strstr(ra_error_message(), "/nonexistent/p.h5: cannot open"));
    CHECK_OK(ra_partition_spec_parse("table:/nonexistent/t.h5", &s));
    CHECK(ra_partition_resolve(&s, &run, b, source, sizeof source, NULL) != RA_OK &&
          strstr(ra_error_message(), "/nonexistent/t.h5: cannot open"));
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
    test_grammar();
    return test_result("test_partition");
}
