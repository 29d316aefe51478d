/* Status codes, error messages and their escaping, prompt id parsing and the sampler. */
#include "runahead.h"
#include "test.h"

static void test_status(void)
{
    CHECK(strcmp(ra_strerror(RA_OK), "success") == 0);
    CHECK(strcmp(ra_strerror(RA_EFORMAT), "malformed file") == 0);
    CHECK(strcmp(ra_strerror(12345), "unknown error") == 0);
    CHECK(ra_error_set(RA_ERANGE, "value %d too large", 7) == RA_ERANGE);
    CHECK(strcmp(ra_error_message(), "value 7 too large") == 0);
    ra_error_clear();
    CHECK(strcmp(ra_error_message(), "no error recorded") == 0);
}

/* ra_escape/ra_esc: text from files as one line of text, cut with "...". */
static void test_escape(void)
{
    char buf[16], big[64];
    CHECK(strcmp(ra_escape("plain ascii", big, sizeof big), "plain ascii") == 0);
    CHECK(strcmp(ra_escape("\x1b[31m\n\t\r\\", big, sizeof big), "\\x1b[31m\\n\\t\\r\\\\") == 0);
    CHECK(strcmp(ra_escape("caf\xc3\xa9 \xe2\x82\xac", big, sizeof big), "caf\xc3\xa9 \xe2\x82\xac") == 0); /* UTF-8 stays */
    CHECK(strcmp(ra_escape("\xff\xc3(\xc0\xaf", big, sizeof big), "\\xff\\xc3(\\xc0\\xaf") == 0); /* invalid, overlong */
    CHECK(strcmp(ra_escape("\xed\xa0\x80", big, sizeof big), "\\xed\\xa0\\x80") == 0); /* a surrogate */
    CHECK(strcmp(ra_escape("\xc2\x9b\xe2\x80\xae\xe2\x80\xa8", big, sizeof big), "\\u009b\\u202e\\u2028") == 0);
    CHECK(strcmp(ra_escape(NULL, big, sizeof big), "(null)") == 0);
    /* Cut: at most size-1 bytes, "..." at the end, never half an escape. */
    CHECK(strcmp(ra_escape("0123456789abcdef", buf, sizeof buf), "0123456789ab...") == 0);
    CHECK(strcmp(ra_escape("0123456789abcde", buf, sizeof buf), "0123456789abcde") == 0);
    CHECK(strcmp(ra_escape("0123456789\x01\x01", buf, sizeof buf), "0123456789...") == 0);
    CHECK(strcmp(ra_escape("abc", buf, 4), "abc") == 0);
    CHECK(strcmp(ra_escape("abcd", buf, 4), "...") == 0);
    /* The ring: several in one call, each its own buffer. */
    char line[64];
    snprintf(line, sizeof line, "%s|%s", ra_esc("a\nb"), ra_esc("c\x1b"));
    CHECK(strcmp(line, "a\\nb|c\\x1b") == 0);
    char longer[600];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    const char *cut = ra_esc(longer);
    CHECK(strlen(cut) == RA_ESC_SIZE - 1 && strcmp(cut + RA_ESC_SIZE - 4, "...") == 0);
    /* The safety net: a message stays one line whatever its arguments hold; backslashes are kept. */
    ra_error_set(RA_EFORMAT, "name %s and %s", "a\nb\x1b", ra_esc("c\\d"));
    CHECK(strcmp(ra_error_message(), "name a\\nb\\x1b and c\\\\d") == 0);
    ra_error_set(RA_EFORMAT, "again: %s", ra_error_message()); /* an argument may be the message itself */
    CHECK(strcmp(ra_error_message(), "again: name a\\nb\\x1b and c\\\\d") == 0);
}

static void test_parse_ids(void)
{
    int32_t *ids = NULL;
    int n = 0;
    CHECK_OK(ra_prompt_parse_ids(" 1 22,333\n4444 ", "t", &ids, &n));
    CHECK(n == 4 && ids[0] == 1 && ids[1] == 22 && ids[2] == 333 && ids[3] == 4444);
    free(ids);
    const char *bad[] = { "", "  ", "1 x 3", "1 -2", "1 99999999999", "1.5", "1 2a" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ids = NULL;
        CHECK(ra_prompt_parse_ids(bad[i], "--prompt-ids", &ids, &n) == RA_EINVAL);
        CHECK(ids == NULL && strstr(ra_error_message(), "--prompt-ids") != NULL);
    }
    /* A long list grows the buffer. */
    char big[6000] = "";
    for (int i = 0; i < 1000; i++)
        strcat(big, "7 ");
    CHECK_OK(ra_prompt_parse_ids(big, "t", &ids, &n));
    CHECK(n == 1000 && ids[999] == 7);
    free(ids);
}

static void test_sampler(void)
{
    float logits[5] = { 0.1f, 2.0f, -1.0f, 1.9f, 0.0f }, work[5];
    struct ra_sampler s;
    CHECK(ra_argmax(logits, 5) == 1);
    CHECK_OK(ra_sampler_init(&s, 5, 0.0f, 0.9f, 42));
    memcpy(work, logits, sizeof work);
    CHECK(ra_sampler_sample(&s, work) == 1);
    ra_sampler_free(&s);

    /* Same seed, same draws; temperature sampling reaches more than one token;
     * top-p 0.5 only ever picks from the two most likely. */
    int counts[5] = { 0 }, first[64];
    for (int pass = 0; pass < 2; pass++) {
        CHECK_OK(ra_sampler_init(&s, 5, 1.0f, 1.0f, 7));
        for (int i = 0; i < 64; i++) {
            memcpy(work, logits, sizeof work);
            int t = ra_sampler_sample(&s, work);
            if (pass == 0) {
                first[i] = t;
                counts[t]++;
            } else {
                CHECK(first[i] == t);
            }
        }
        ra_sampler_free(&s);
    }
    CHECK(counts[1] > 0 && counts[3] > 0 && counts[1] + counts[3] < 64);
    CHECK_OK(ra_sampler_init(&s, 5, 1.0f, 0.5f, 9));
    for (int i = 0; i < 200; i++) {
        memcpy(work, logits, sizeof work);
        int t = ra_sampler_sample(&s, work);
        CHECK(t == 1 || t == 3);
    }
    ra_sampler_free(&s);
    CHECK(ra_sampler_init(&s, 5, -1.0f, 0.9f, 1) == RA_EINVAL);
    CHECK(ra_sampler_init(&s, 5, 1.0f, 0.0f, 1) == RA_EINVAL);
}

int main(void)
{
    test_status();
    test_escape();
    test_parse_ids();
    test_sampler();
    return test_result("test_util");
}
