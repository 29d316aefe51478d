/* The llama2.c tokenizer: malformed files are refused with a message naming
 * the file; a small synthetic vocabulary exercises merges and byte fallback;
 * with the Llama 2 fixture, encodings match SentencePiece (the .jsonl cases
 * and ids taken from the sentencepiece library) and decode inverts encode. */
#include "status.h"
#include "test.h"
#include "tokenizer.h"

#include <jansson.h>
#include <stdint.h>
#include <time.h>

/* ------------------------------------------------------------- writing tokenizer files */

struct tokfile {
    unsigned char data[16384];
    size_t n;
};

static void put_bytes(struct tokfile *f, const void *p, size_t n)
{
    if (f->n + n > sizeof f->data) {
        fprintf(stderr, "test tokenizer file too large\n");
        exit(1);
    }
    memcpy(f->data + f->n, p, n);
    f->n += n;
}

static void put_i32(struct tokfile *f, int32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)((uint32_t)v >> 24)};
    put_bytes(f, b, 4);
}

static void put_token(struct tokfile *f, float score, const char *piece)
{
    int32_t bits;
    memcpy(&bits, &score, sizeof bits);
    put_i32(f, bits);
    put_i32(f, (int32_t)strlen(piece));
    put_bytes(f, piece, strlen(piece));
}

/* The llama2.c layout in miniature: <unk>, <s>, </s>, 256 byte tokens, then
 * a few pieces whose scores make "ab" merge before " a". */
static void small_vocab(struct tokfile *f)
{
    char piece[8];
    f->n = 0;
    put_i32(f, 6);
    put_token(f, 0, "<unk>");
    put_token(f, 0, "\n<s>\n");
    put_token(f, 0, "\n</s>\n");
    for (int b = 0; b < 256; b++) {
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        put_token(f, 0, piece);
    }
    put_token(f, -10, " ");   /* 259 */
    put_token(f, -10, "a");   /* 260 */
    put_token(f, -10, "b");   /* 261 */
    put_token(f, -1, "ab");   /* 262 */
    put_token(f, -2, " a");   /* 263 */
    put_token(f, -3, " ab");  /* 264 */
    put_token(f, -4, "<s>");  /* 265: a normal piece that spells a control token */
    put_token(f, -5, "<s");   /* 266: so that "<s>" can be merged */
}

static const char *write_file(const char *dir, const char *name, const void *data, size_t n)
{
    static char path[8][4096];
    static int slot;
    char *p = path[slot++ & 7];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    FILE *fp = fopen(p, "wb");
    if (!fp || (n && fwrite(data, 1, n, fp) != n) || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
    return p;
}

/* Loading `path` must fail with a negative status and a message naming it. */
static void expect_load_error(const char *path, int vocab_size, const char *what)
{
    struct ra_tokenizer t;
    ra_error_clear();
    int rc = ra_tokenizer_load(&t, path, vocab_size);
    if (rc >= 0 || !strstr(ra_error_message(), path) || !strstr(ra_error_message(), what)) {
        fprintf(stderr, "load %s (vocab %d): rc %d, message '%s', wanted '%s'\n", path, vocab_size,
                rc, ra_error_message(), what);
        test_failures++;
    }
    if (rc == 0)
        ra_tokenizer_free(&t);
}

static void test_malformed(const char *dir)
{
    struct tokfile f;
    small_vocab(&f);
    size_t first = 4 + 8 + 5; /* the header and the <unk> record */

    expect_load_error(write_file(dir, "empty.bin", "", 0), 0, "empty");
    expect_load_error(write_file(dir, "short.bin", f.data, 3), 0, "too short");
    expect_load_error(write_file(dir, "cut-header.bin", f.data, first + 5), 0, "truncated");
    expect_load_error(write_file(dir, "cut-piece.bin", f.data, first + 10), 0, "past the end");
    expect_load_error(write_file(dir, "only-unk.bin", f.data, first), 0, "fewer than");
    expect_load_error(write_file(dir, "count.bin", f.data, f.n), 300, "vocab_size is 300");
    expect_load_error(write_file(dir, "count2.bin", f.data, f.n), 100, "follow the 100 tokens");
    expect_load_error("/nonexistent/tokenizer.bin", 0, "cannot open");
    expect_load_error(dir, 0, "not a regular file");

    struct tokfile g = f;
    memcpy(g.data + 8, "\xff\xff\xff\xff", 4); /* the first length is -1 */
    expect_load_error(write_file(dir, "negative.bin", g.data, g.n), 0, "negative length");
    g = f;
    memcpy(g.data + 8, "\0\0\0\x40", 4); /* the first length is 2^30 */
    expect_load_error(write_file(dir, "huge.bin", g.data, g.n), 0, "max_token_length");
    g = f;
    g.data[g.n - 2 - 4] = 5; /* the last piece, "<s", claims 5 bytes */
    expect_load_error(write_file(dir, "pasteof.bin", g.data, g.n), 0, "past the end");
    g = f;
    memcpy(g.data + 4, "\0\0\xc0\x7f", 4); /* the first score is NaN */
    expect_load_error(write_file(dir, "nan.bin", g.data, g.n), 0, "non-finite score");
    g = f;
    memcpy(g.data, "\0\0\0\0", 4);
    expect_load_error(write_file(dir, "maxlen0.bin", g.data, g.n), 0, "max_token_length 0");
    memcpy(g.data, "\xff\xff\xff\xff", 4);
    expect_load_error(write_file(dir, "maxlen-1.bin", g.data, g.n), 0, "max_token_length -1");
    memcpy(g.data, "\x02\0\0\0", 4); /* shorter than "<unk>" */
    expect_load_error(write_file(dir, "maxlen2.bin", g.data, g.n), 0, "> max_token_length 2");
}

/* ------------------------------------------------------------- encode/decode helpers */

static int ids_equal(const int32_t *a, int na, const int32_t *b, int nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static void print_ids(const char *label, const int32_t *ids, int n)
{
    fprintf(stderr, "  %s:", label);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n");
}

static void expect_encoding(const struct ra_tokenizer *t, const char *text, const int32_t *want,
                            int n_want)
{
    int32_t *ids = NULL;
    int n = 0;
    CHECK_OK(ra_tokenizer_encode(t, text, 1, &ids, &n));
    if (!ids_equal(ids, n, want, n_want)) {
        fprintf(stderr, "encoding of \"%s\" differs\n", text);
        print_ids("got ", ids, n);
        print_ids("want", want, n_want);
        test_failures++;
    }
    free(ids);
}

#define EXPECT_ENCODING(t, text, ...)                                      \
    do {                                                                   \
        const int32_t want_[] = {__VA_ARGS__};                             \
        expect_encoding(t, text, want_, (int)(sizeof want_ / sizeof *want_)); \
    } while (0)

/* decode(encode(text)) == text, with and without BOS. */
static void expect_round_trip(const struct ra_tokenizer *t, const char *text)
{
    for (int bos = 0; bos <= 1; bos++) {
        int32_t *ids = NULL;
        char *back = NULL;
        int n = 0;
        CHECK_OK(ra_tokenizer_encode(t, text, bos, &ids, &n));
        CHECK_OK(ra_tokenizer_decode(t, ids, n, &back));
        if (!back || strcmp(back, text) != 0) {
            fprintf(stderr, "round trip of \"%s\" (bos %d) gave \"%s\"\n", text, bos,
                    back ? back : "(null)");
            test_failures++;
        }
        free(ids);
        free(back);
    }
}

static void test_small_vocab(const char *dir)
{
    struct tokfile f;
    struct ra_tokenizer t;
    small_vocab(&f);
    const char *path = write_file(dir, "small.bin", f.data, f.n);

    CHECK_OK(ra_tokenizer_load(&t, path, 0));
    CHECK(t.vocab_size == 267);
    CHECK(t.max_token_length == 6);
    CHECK(t.byte_tokens[0] == 3 && t.byte_tokens[255] == 258);
    EXPECT_ENCODING(&t, "", 1);
    EXPECT_ENCODING(&t, "ab", 1, 264);                  /* "ab" first, then " ab" */
    EXPECT_ENCODING(&t, "ba", 1, 259, 261, 260);        /* no piece " b" or "ba" */
    EXPECT_ENCODING(&t, "c", 1, 259, 3 + 'c');          /* byte fallback */
    EXPECT_ENCODING(&t, "<s>", 1, 259, 265);            /* the normal piece, never BOS */
    EXPECT_ENCODING(&t, "\xff", 1, 259, 3 + 0xff);      /* invalid UTF-8 -> its byte */
    int32_t *ids = NULL;
    int n = -1;
    CHECK_OK(ra_tokenizer_encode(&t, "", 0, &ids, &n));
    CHECK(n == 0 && ids != NULL);
    free(ids);
    expect_round_trip(&t, "ab ba c \xff\xfe\x80 x");
    ra_tokenizer_free(&t);
    CHECK(t.pieces == NULL && t.sorted == NULL);

    CHECK_OK(ra_tokenizer_load(&t, path, 267));
    ra_tokenizer_free(&t);
}

/* ------------------------------------------------------------- the Llama 2 fixture */

/* Every case of the .jsonl: text -> ids (BOS first) as SentencePiece gives them. */
static void test_cases(const struct ra_tokenizer *t, const char *path)
{
    FILE *fp = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int cases = 0;

    CHECK(fp != NULL);
    if (!fp)
        return;
    while (getline(&line, &cap, fp) > 0) {
        json_error_t err;
        json_t *c = json_loads(line, 0, &err);
        json_t *text = c ? json_object_get(c, "text") : NULL, *ids = c ? json_object_get(c, "ids") : NULL;
        if (!json_is_string(text) || !json_is_array(ids)) {
            fprintf(stderr, "%s: bad case line: %s\n", path, line);
            test_failures++;
            json_decref(c);
            continue;
        }
        int n = (int)json_array_size(ids);
        int32_t *want = calloc((size_t)n + 1, sizeof *want);
        for (int i = 0; i < n; i++)
            want[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
        expect_encoding(t, json_string_value(text), want, n);
        expect_round_trip(t, json_string_value(text));
        free(want);
        json_decref(c);
        cases++;
    }
    CHECK(cases == 3);
    free(line);
    fclose(fp);
}

/* Reference ids from sentencepiece 0.2 (sp.encode(s, add_bos=True)) on
 * llama2-tokenizer.model, not from this code. */
static void test_sentencepiece_ids(const struct ra_tokenizer *t)
{
    EXPECT_ENCODING(t, "\xe4\xb8\xad\xe6\x96\x87", 1, 29871, 30275, 30333);       /* CJK */
    EXPECT_ENCODING(t, "\xf0\x9f\x98\x80", 1, 29871, 243, 162, 155, 131);         /* emoji: bytes */
    EXPECT_ENCODING(t, "Hello  world", 1, 15043, 29871, 3186);
    EXPECT_ENCODING(t, "line1\nline2", 1, 1196, 29896, 13, 1220, 29906);
    EXPECT_ENCODING(t, " leading", 1, 29871, 8236);
    EXPECT_ENCODING(t, "na\xc3\xafve caf\xc3\xa9", 1, 1055, 30085, 345, 274, 28059);
    EXPECT_ENCODING(t, "\tx", 1, 29871, 12, 29916);
    EXPECT_ENCODING(t, " ", 1, 259);
    EXPECT_ENCODING(t, "  ", 1, 1678);
    EXPECT_ENCODING(t, "    x", 1, 268, 921);
    EXPECT_ENCODING(t, "Hello\tworld\n\n  end   ", 1, 15043, 12, 11526, 13, 13, 29871, 1095, 1678);
    EXPECT_ENCODING(t, "<s>", 1, 529, 29879, 29958);
    EXPECT_ENCODING(t, "<0x41>", 1, 529, 29900, 29916, 29946, 29896, 29958);
    EXPECT_ENCODING(t, "\xe2\x96\x81", 1, 259); /* U+2581 is SentencePiece's space */
    EXPECT_ENCODING(t, "e\xcc\x81", 1, 321, 30103);
    EXPECT_ENCODING(t, "1234567890", 1, 29871, 29896, 29906, 29941, 29946, 29945, 29953, 29955,
                    29947, 29929, 29900);
    EXPECT_ENCODING(t, "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf\xe4\xb8\x96\xe7\x95\x8c",
                    1, 29871, 30589, 30389, 30353, 30644, 30449, 30793, 30967);
}

static void test_round_trips(const struct ra_tokenizer *t)
{
    static const char *texts[] = {
        "", " ", "   ", "a", " a", "a ", "  two leading, two trailing  ",
        "tabs\tand\nnewlines\r\n\n", "na\xc3\xafve caf\xc3\xa9 \xc3\x9f\xc3\xbf",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", "\xe4\xb8\xad\xe6\x96\x87 \xe6\x97\xa5\xe6\x9c\xac",
        "\xf0\x9f\x98\x80\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa9", "\xf4\x8f\xbf\xbf \xef\xbf\xbd",
        "<s></s><unk><0x41>", "\xff\xfe invalid \xc0\xaf \xed\xa0\x80 \xe4\xb8", "\x01\x02\x7f",
        "Simply put, the theory of relativity states that ",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        expect_round_trip(t, texts[i]);
}

static void test_pieces(const struct ra_tokenizer *t)
{
    char buf[2];
    CHECK(strcmp(ra_tokenizer_piece(t, 1, 306, buf), "I") == 0);   /* after BOS: no space */
    CHECK(strcmp(ra_tokenizer_piece(t, 306, 306, buf), " I") == 0);
    CHECK(strcmp(ra_tokenizer_piece(t, 306, 13, buf), "\n") == 0);  /* <0x0A> */
    CHECK(strcmp(ra_tokenizer_piece(t, 306, 1, buf), "") == 0);
    CHECK(strcmp(ra_tokenizer_piece(t, 306, 2, buf), "") == 0);
    CHECK(strcmp(ra_tokenizer_piece(t, 306, 32000, buf), "") == 0);

    const int32_t ids[] = {1, 306, 2, 306, 13, 29871};
    char *text = NULL;
    CHECK_OK(ra_tokenizer_decode(t, ids, 6, &text));
    CHECK(text && strcmp(text, "I I\n ") == 0);
    free(text);
    const int32_t bad[] = {1, 32000};
    text = NULL;
    CHECK(ra_tokenizer_decode(t, bad, 2, &text) == RA_ERANGE && text == NULL);
    CHECK(strstr(ra_error_message(), "32000") != NULL);
}

/* A long prompt: the merge queue keeps this well under a second. */
static void test_long_text(const struct ra_tokenizer *t)
{
    static const char unit[] = "The quick brown fox jumps over the lazy dog; \xe4\xb8\xad\xe6\x96\x87 "
                               "\xf0\x9f\x98\x80 1234.  ";
    size_t reps = 2000, ulen = strlen(unit);
    char *text = malloc(reps * ulen + 1);
    for (size_t i = 0; i < reps; i++)
        memcpy(text + i * ulen, unit, ulen);
    text[reps * ulen] = '\0';

    int32_t *ids = NULL;
    int n = 0;
    clock_t c0 = clock();
    CHECK_OK(ra_tokenizer_encode(t, text, 1, &ids, &n));
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    printf("encoded %zu bytes into %d tokens in %.3f s\n", reps * ulen, n, secs);
    CHECK(n > 10000);
    expect_round_trip(t, text);
    free(ids);
    free(text);
}

int main(void)
{
    const char *dir = test_tmpdir("test_tokenizer");
    CHECK(dir != NULL);
    if (!dir)
        return test_result("test_tokenizer");
    test_malformed(dir);
    test_small_vocab(dir);

    const char *bin = test_fixture("llama2-tokenizer.bin");
    const char *cases = test_fixture("llama2-tokenizer.cases.jsonl");
    if (!bin || !cases)
        return test_failures ? test_result("test_tokenizer") : TEST_SKIP;

    struct ra_tokenizer t;
    int rc = ra_tokenizer_load(&t, bin, 0);
    CHECK_OK(rc);
    if (rc)
        return test_result("test_tokenizer");
    CHECK(t.vocab_size == 32000);
    CHECK(t.bos_id == 1 && t.eos_id == 2);
    CHECK(t.byte_tokens['\n'] == 13);
    test_cases(&t, cases);
    test_sentencepiece_ids(&t);
    test_round_trips(&t);
    test_pieces(&t);
    test_long_text(&t);
    ra_tokenizer_free(&t);

    struct ra_tokenizer t2;
    CHECK_OK(ra_tokenizer_load(&t2, bin, 32000));
    ra_tokenizer_free(&t2);
    expect_load_error(bin, 31999, "follow the 31999 tokens");
    expect_load_error(bin, 32001, "vocab_size is 32001");
    return test_result("test_tokenizer");
}
