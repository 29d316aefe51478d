/* The byte-level BPE tokenizer (src/tokenizer_bpe.h) on hand-made vocabularies:
 * merge order (lowest rank first, leftmost of equal ranks), the byte alphabet,
 * each pre-tokenizer's pieces, ignore_merges, special tokens (longest first,
 * lstrip/rstrip, added tokens after special ones, RA_BPE_TEXT_ONLY), unknown
 * bytes (unk, fuse_unk, dropped), BOS/EOS, decoding; tokenizer.json in both
 * merge forms with its templates; and every refusal, each with its message
 * (naming the file for tokenizer.json). The oracle against HF tokenizers on a
 * real vocabulary is tests/tokenizer_bpe.sh. */
#include "status.h"
#include "test.h"
#include "tokenizer_bpe.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/stat.h>

/* ------------------------------------------------------------- vocabularies */

/* GPT-2's bytes_to_unicode(), written independently of the library's. */
static void byte_symbol(unsigned c, char out[3])
{
    unsigned n = 0, cp = c;
    for (unsigned b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        if (b == c)
            cp = printable ? b : 0x100 + n;
        n += !printable;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

/* PLAIN in the byte alphabet ("a b" -> "aĠb"), malloc'ed. */
static char *byte_level(const char *plain)
{
    char *out = malloc(2 * strlen(plain) + 1), sym[3];
    out[0] = 0;
    for (const unsigned char *p = (const unsigned char *)plain; *p; p++) {
        byte_symbol(*p, sym);
        strcat(out, sym);
    }
    return out;
}

struct vocab {
    char *tok[600];
    int n;
    char *merge[64];
    int n_merges;
};

/* Ids 0..255: each byte's symbol (id = the byte), unless skip_byte (>= 0) names one to leave out. */
static void vocab_bytes(struct vocab *v, int skip_byte)
{
    char sym[3];
    memset(v, 0, sizeof *v);
    for (int c = 0; c < 256; c++) {
        byte_symbol((unsigned)c, sym);
        v->tok[v->n++] = c == skip_byte ? strdup("<unused>") : strdup(sym);
    }
}

/* A token given as plain text; returns its id. */
static int add_token(struct vocab *v, const char *plain)
{
    v->tok[v->n] = byte_level(plain);
    return v->n++;
}

/* A token stored as it is (special tokens). */
static int add_raw(struct vocab *v, const char *stored)
{
    v->tok[v->n] = strdup(stored);
    return v->n++;
}

/* A merge of two plain-text tokens, and the token it makes. */
static void add_merge(struct vocab *v, const char *left, const char *right)
{
    char *l = byte_level(left), *r = byte_level(right);
    char both[256];
    snprintf(both, sizeof both, "%s%s", left, right);
    v->merge[v->n_merges] = malloc(strlen(l) + strlen(r) + 2);
    sprintf(v->merge[v->n_merges++], "%s %s", l, r);
    add_token(v, both);
    free(l);
    free(r);
}

static void vocab_free(struct vocab *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->tok[i]);
    for (int i = 0; i < v->n_merges; i++)
        free(v->merge[i]);
}

static int init(struct ra_bpe *b, struct vocab *v, const struct ra_bpe_options *o)
{
    return ra_bpe_init(b, (const char *const *)v->tok, v->n, (const char *const *)v->merge, v->n_merges, o);
}

/* The encoding of TEXT as its tokens' bytes joined by '|' ("he|ll|o"). */
static const char *pieces(const struct ra_bpe *b, const char *text, unsigned flags)
{
    static char out[4096];
    int32_t *ids;
    int n;
    out[0] = 0;
    if (ra_bpe_encode(b, text, strlen(text), flags, &ids, &n) != RA_OK) {
        snprintf(out, sizeof out, "(error: %s)", ra_error_message());
        return out;
    }
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *bytes = ra_bpe_token_bytes(b, ids[i], &len);
        if (i)
            strcat(out, "|");
        strncat(out, bytes ? bytes : "(null)", bytes ? len : 6);
    }
    free(ids);
    return out;
}

#define CHECK_PIECES(b, text, flags, want)                                                                 \
    do {                                                                                                   \
        const char *got_ = pieces(b, text, flags);                                                         \
        if (strcmp(got_, want) != 0) {                                                                     \
            fprintf(stderr, "%s:%d: encode(\"%s\") = \"%s\", want \"%s\"\n", __FILE__, __LINE__, text, got_, \
                    want);                                                                                 \
            test_failures++;                                                                               \
        }                                                                                                  \
    } while (0)

/* decode(encode(text)) gives text back, for LEN bytes of any kind. */
static int round_trip(const struct ra_bpe *b, const char *text, size_t len)
{
    int32_t *ids;
    char *back;
    size_t back_len;
    int n, ok;
    if (ra_bpe_encode(b, text, len, 0, &ids, &n) != RA_OK)
        return 0;
    ok = ra_bpe_decode(b, ids, n, &back, &back_len) == RA_OK && back_len == len && memcmp(back, text, len) == 0;
    free(ids);
    free(back);
    return ok;
}

/* ------------------------------------------------------------- encoding */

static void test_merge_order(void)
{
    struct vocab v;
    struct ra_bpe b;
    struct ra_bpe_options o = RA_BPE_OPTIONS_INIT;
    o.pre = "gpt-2";

    /* "b c" has the lower rank: "abc" becomes a|bc, then abc through "a bc". */
    vocab_bytes(&v, -1);
    add_merge(&v, "b", "c");
    add_merge(&v, "a", "b");
    add_merge(&v, "a", "bc");
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "abc", 0, "abc");
    CHECK_PIECES(&b, "abd", 0, "ab|d");
    CHECK_PIECES(&b, "bca", 0, "bc|a");
    ra_bpe_free(&b);
    vocab_free(&v);

    /* The other order: "a b" first, and no "ab c": a|b|c stays ab|c. */
    vocab_bytes(&v, -1);
    add_merge(&v, "a", "b");
    add_merge(&v, "b", "c");
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "abc", 0, "ab|c");
    ra_bpe_free(&b);
    vocab_free(&v);

    /* Equal ranks: the leftmost pair first; a merge's result merges on. */
    vocab_bytes(&v, -1);
    add_merge(&v, "a", "a");
    add_merge(&v, "aa", "aa");
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "aaa", 0, "aa|a");
    CHECK_PIECES(&b, "aaaa", 0, "aaaa");
    CHECK_PIECES(&b, "aaaaa", 0, "aaaa|a");
    CHECK_PIECES(&b, "aaaaaaa", 0, "aaaa|aa|a");
    ra_bpe_free(&b);
    vocab_free(&v);
}

static void test_byte_alphabet(void)
{
    struct vocab v;
    struct ra_bpe b;
    int32_t *ids;
    int n;
    vocab_bytes(&v, -1);
    add_merge(&v, " ", "w");
    int nl_nl = (add_merge(&v, "\n", "\n"), v.n - 1);
    CHECK_OK(init(&b, &v, NULL));
    CHECK(strcmp(b.pre, "gpt-2") == 0);
    /* Space, newline, a byte of é and 0xad stand for U+0120, U+010A, themselves, U+0143. */
    CHECK(ra_bpe_token_id(&b, "\xc4\xa0") == ' ');
    CHECK(ra_bpe_token_id(&b, "\xc4\x8a") == '\n');
    CHECK(ra_bpe_token_id(&b, "\xc3\x83") == 0xc3);
    CHECK(ra_bpe_token_id(&b, "\xc5\x83") == 0xad);
    CHECK(ra_bpe_token_id(&b, "\xc4\xa0w") == 256);
    CHECK_OK(ra_bpe_encode(&b, "\xc3\xa9 w\n\n", 6, 0, &ids, &n));
    CHECK(n == 4 && ids[0] == 0xc3 && ids[1] == 0xa9 && ids[2] == 256 && ids[3] == nl_nl);
    free(ids);
    /* Any bytes come back: NUL, invalid UTF-8, a lone continuation byte, all 256. */
    char all[256];
    for (int c = 0; c < 256; c++)
        all[c] = (char)c;
    CHECK(round_trip(&b, all, 256));
    CHECK(round_trip(&b, "a\0b\xff\xfe\x80 \xe2\x82", 10));
    CHECK(round_trip(&b, "", 0));
    size_t len;
    CHECK(ra_bpe_token_bytes(&b, 256, &len) && len == 2 && memcmp(ra_bpe_token_bytes(&b, 256, NULL), " w", 2) == 0);
    CHECK(ra_bpe_token_bytes(&b, -1, &len) == NULL && ra_bpe_token_bytes(&b, v.n, &len) == NULL);
    ra_bpe_free(&b);
    vocab_free(&v);
}

/* A vocabulary of whole pieces and ignore_merges: the ids show how the pre-tokenizer cut the text. */
static void check_pre(const char *pre, const char *text, const char *want)
{
    static const char *const words[] = { "Hello", " world", "'s", "'S", " 123", "123", "12", " 12", "  ", " ",
                                         "\n\n", " !!\n\n", "?!!!\n", " x", "x", "\t",
                                         "\xe1\xa0\x8e\xe1\xa0\x8e", "\xc2\x85" };
    struct vocab v;
    struct ra_bpe b;
    struct ra_bpe_options o = RA_BPE_OPTIONS_INIT;
    o.pre = pre;
    o.ignore_merges = 1;
    vocab_bytes(&v, -1);
    add_merge(&v, "q", "q"); /* a tokenizer needs a merge */
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        add_token(&v, words[i]);
    CHECK_OK(init(&b, &v, &o));
    const char *got = pieces(&b, text, 0);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "pre-tokenizer %s: \"%s\" gives \"%s\", want \"%s\"\n", pre, text, got, want);
        test_failures++;
    }
    ra_bpe_free(&b);
    vocab_free(&v);
}

static void test_pre_tokenizers(void)
{
    /* GPT-2: contractions in lower case only, a space joins the next word or number. */
    check_pre("gpt-2", "Hello world's 123", "Hello| world|'s| 123");
    check_pre("gpt2", "Hello's'S", "Hello|'s|'|S");
    /* \s+(?!\S) leaves the last space to the word; \s+ takes what is left. */
    check_pre("gpt-2", "x   x", "x|  | x");
    check_pre("gpt-2", "x\t\tx", "x|\t|\t|x");
    /* smollm: every digit its own piece first, then GPT-2's rules. */
    check_pre("smollm", "Hello world 123", "Hello| world| |1|2|3");
    check_pre("smollm", "x12x", "x|1|2|x");
    /* llama-bpe: case-insensitive contractions, digits in threes, punctuation takes its newlines. */
    check_pre("llama-bpe", "Hello's'S 12345", "Hello|'s|'S| |123|4|5");
    check_pre("llama3", "x !!\n\n", "x| !!\n\n");
    check_pre("llama-v3", "?!!!\nx\n\n", "?!!!\n|x|\n\n");
    check_pre("gpt-2", "?!!!\nx", "?|!|!|!|\n|x"); /* GPT-2 leaves the newline alone */
    /* qwen2: as llama-bpe with single digits. */
    check_pre("qwen2", "Hello 123", "Hello| |1|2|3");
    /* U+180E is not white space to Oniguruma (HF), so it is no \s here either. */
    check_pre("gpt-2", "x\xe1\xa0\x8e\xe1\xa0\x8ex", "x|\xe1\xa0\x8e\xe1\xa0\x8e|x");
    check_pre("gpt-2", "x\xc2\x85\xc2\x85x", "x|\xc2\x85|\xc2\x85|x");
    /* Invalid UTF-8 ends up in a piece of its own and still encodes. */
    check_pre("gpt-2", "Hello\xff world", "Hello|\xff| world");

    CHECK(strcmp(ra_bpe_pre_regex("llama3", 0), ra_bpe_pre_regex("llama-bpe", 0)) == 0);
    CHECK(ra_bpe_pre_regex("smollm", 2) == NULL && ra_bpe_pre_regex("nope", 0) == NULL);
    const char *smollm[2] = { ra_bpe_pre_regex("smollm", 0), ra_bpe_pre_regex("smollm", 1) };
    CHECK(strcmp(ra_bpe_pre_find(smollm, 2), "smollm") == 0);
    CHECK(strcmp(ra_bpe_pre_find(smollm + 1, 1), "gpt-2") == 0);
    CHECK(ra_bpe_pre_find(smollm, 1) == NULL);
}

static void test_ignore_merges(void)
{
    struct vocab v;
    struct ra_bpe b;
    struct ra_bpe_options o = RA_BPE_OPTIONS_INIT;
    vocab_bytes(&v, -1);
    add_merge(&v, "a", "b");
    add_token(&v, "abc"); /* no merge reaches it */
    o.pre = "llama-bpe";  /* ignore_merges by default, as llama.cpp */
    CHECK_OK(init(&b, &v, &o));
    CHECK(b.ignore_merges == 1);
    CHECK_PIECES(&b, "abc", 0, "abc");
    CHECK_PIECES(&b, "abcab", 0, "ab|c|ab");
    ra_bpe_free(&b);
    o.ignore_merges = 0;
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "abc", 0, "ab|c");
    ra_bpe_free(&b);
    o.pre = "smollm";
    o.ignore_merges = -1;
    CHECK_OK(init(&b, &v, &o));
    CHECK(b.ignore_merges == 0);
    ra_bpe_free(&b);
    vocab_free(&v);
}

static void test_special_tokens(void)
{
    struct vocab v;
    struct ra_bpe b;
    struct ra_bpe_options o = RA_BPE_OPTIONS_INIT;
    vocab_bytes(&v, -1);
    add_merge(&v, "a", "b");
    int32_t sp[5];
    unsigned char flags[5] = { 0, 0, RA_BPE_LSTRIP | RA_BPE_RSTRIP, RA_BPE_ADDED, 0 };
    sp[0] = add_raw(&v, "<|x|>");
    sp[1] = add_raw(&v, "<|xy|>");
    sp[2] = add_raw(&v, "<mask>");
    sp[3] = add_raw(&v, "<|x|>y"); /* an added token overlapping a special one: the special wins */
    sp[4] = add_raw(&v, "<s>");
    o.special_ids = sp;
    o.special_flags = flags;
    o.n_special = 5;
    o.bos_id = sp[4];
    o.eos_id = sp[0];
    o.add_bos = 1;
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "ab<|x|>ab", 0, "ab|<|x|>|ab");
    CHECK_PIECES(&b, "<|xy|><|x|><|x|", 0, "<|xy|>|<|x|>|<|||x||");
    CHECK_PIECES(&b, "<|x|>y", 0, "<|x|>|y");
    CHECK_PIECES(&b, "a  <mask>  b", 0, "a|<mask>|b");
    CHECK_PIECES(&b, "ab<|x|>", RA_BPE_TEXT_ONLY, "ab|<|||x|||>");
    CHECK_PIECES(&b, "ab", RA_BPE_ADD_SPECIAL, "<s>|ab");
    CHECK(ra_bpe_is_special(&b, sp[1]) && !ra_bpe_is_special(&b, 256) && !ra_bpe_is_special(&b, -3));
    ra_bpe_free(&b);
    /* With only the added token left (TEXT_ONLY skips the special ones), it matches. */
    flags[0] = RA_BPE_ADDED;
    o.add_bos = 0;
    o.add_eos = 1;
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "<|x|>y", 0, "<|x|>y");
    CHECK_PIECES(&b, "ab", RA_BPE_ADD_SPECIAL, "ab|<|x|>");
    CHECK_PIECES(&b, "ab<|xy|>", RA_BPE_TEXT_ONLY, "ab|<|||x|y|||>");
    /* decode writes a special token's text as it is */
    CHECK(round_trip(&b, "ab<|xy|> <s>\xff", strlen("ab<|xy|> <s>\xff")));
    ra_bpe_free(&b);
    vocab_free(&v);
}

static void test_unknown_bytes(void)
{
    struct vocab v;
    struct ra_bpe b;
    struct ra_bpe_options o = RA_BPE_OPTIONS_INIT;
    vocab_bytes(&v, 0x01); /* no symbol for byte 0x01 (id 1 is "<unused>") */
    add_merge(&v, "a", "b");
    int unk = add_raw(&v, "<unk>");
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "a\x01\x01" "b", 0, "a|b"); /* no unknown token: dropped, as HF does */
    ra_bpe_free(&b);
    o.unk_id = unk;
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "a\x01\x01" "b", 0, "a|<unk>|<unk>|b");
    ra_bpe_free(&b);
    o.fuse_unk = 1;
    CHECK_OK(init(&b, &v, &o));
    CHECK_PIECES(&b, "a\x01\x01" "b\x01", 0, "a|<unk>|b|<unk>");
    ra_bpe_free(&b);
    vocab_free(&v);
}

static void test_decode(void)
{
    struct vocab v;
    struct ra_bpe b;
    char *text;
    size_t len;
    vocab_bytes(&v, -1);
    add_merge(&v, "a", "b");
    v.tok[v.n++] = NULL;           /* an unused id */
    add_raw(&v, "\xe2\x82\xac!");  /* a token outside the alphabet decodes as its own text */
    CHECK_OK(init(&b, &v, NULL));
    int32_t ids[3] = { 256, 258, 'a' };
    CHECK_OK(ra_bpe_decode(&b, ids, 3, &text, &len));
    CHECK(len == 7 && strcmp(text, "ab\xe2\x82\xac!a") == 0);
    free(text);
    int32_t bad[2] = { 'a', 257 };
    CHECK(ra_bpe_decode(&b, bad, 2, &text, &len) == RA_EINVAL && text == NULL);
    CHECK(strstr(ra_error_message(), "id 257 (at 1) is not a token"));
    bad[1] = 9999;
    CHECK(ra_bpe_decode(&b, bad, 2, &text, &len) == RA_EINVAL);
    CHECK(ra_bpe_token_id(&b, "ab") == 256 && ra_bpe_token_id(&b, "zz") == -1 && ra_bpe_token_id(&b, "") == -1);
    ra_bpe_free(&b);
    ra_bpe_free(&b); /* twice is harmless */
    vocab_free(&v);
}

/* ------------------------------------------------------------- refusals of ra_bpe_init */

#define CHECK_REFUSED(expr, status, text)                                                                   \
    do {                                                                                                    \
        int rc_ = (expr);                                                                                   \
        if (rc_ != (status) || !strstr(ra_error_message(), text) || strchr(ra_error_message(), '\n')) {     \
            fprintf(stderr, "%s:%d: %s gave %d \"%s\", want %d with \"%s\"\n", __FILE__, __LINE__, #expr, rc_, \
                    ra_error_message(), status, text);                                                      \
            test_failures++;                                                                                \
        }                                                                                                   \
    } while (0)

static void test_init_refusals(void)
{
    struct vocab v;
    struct ra_bpe b;
    struct ra_bpe_options o = RA_BPE_OPTIONS_INIT;
    const char *const *tok, *const *mrg;
    vocab_bytes(&v, -1);
    add_merge(&v, "a", "b");
    tok = (const char *const *)v.tok, mrg = (const char *const *)v.merge;
    o.source = "vocab.gguf";

    CHECK_REFUSED(ra_bpe_init(&b, tok, 0, mrg, 1, &o), RA_ERANGE, "vocab.gguf: 0 tokens (1 to 2097152)");
    CHECK_REFUSED(ra_bpe_init(&b, tok, RA_BPE_MAX_TOKENS + 1, mrg, 1, &o), RA_ERANGE, "2097153 tokens");
    CHECK_REFUSED(ra_bpe_init(&b, tok, v.n, mrg, 0, &o), RA_EFORMAT,
                  "vocab.gguf: no merges: a BPE tokenizer needs its merges");
    CHECK_REFUSED(ra_bpe_init(&b, tok, v.n, mrg, RA_BPE_MAX_MERGES + 1, &o), RA_ERANGE, "4194305 merges");
    CHECK_REFUSED(ra_bpe_init(&b, tok, v.n, mrg, 1, NULL), RA_OK, "");
    ra_bpe_free(&b);

    const char *m1[1] = { "ab" }, *m2[1] = { "a q\xc4\xa0" }, *m3[1] = { "b a" }, *m4[1] = { " ab" };
    CHECK_REFUSED(ra_bpe_init(&b, tok, v.n, m1, 1, &o), RA_EFORMAT,
                  "vocab.gguf: merge 0 ('ab') is not two tokens separated by a space");
    CHECK_REFUSED(ra_bpe_init(&b, tok, v.n, m4, 1, &o), RA_EFORMAT, "merge 0 (' ab') is not two tokens");
    CHECK_REFUSED(ra_bpe_init(&b, tok, v.n, m2, 1, &o), RA_EFORMAT,
                  "vocab.gguf: merge 0 ('a' 'q\xc4\xa0'): 'q\xc4\xa0' is not in the vocabulary");
    CHECK_REFUSED(ra_bpe_init(&b, tok, v.n, m3, 1, &o), RA_EFORMAT,
                  "vocab.gguf: merge 0 ('b' 'a'): 'ba' is not in the vocabulary");
    const char *p1[2] = { "a", "" }, *p2[2] = { "a", "zz" };
    CHECK_REFUSED(ra_bpe_init_pairs(&b, tok, v.n, p1, 1, &o), RA_EFORMAT,
                  "vocab.gguf: merge 0: each side must be a token of 1 to 4096 bytes");
    CHECK_REFUSED(ra_bpe_init_pairs(&b, tok, v.n, p2, 1, &o), RA_EFORMAT, "'zz' is not in the vocabulary");

    char *long_token = malloc(RA_BPE_MAX_TOKEN_BYTES + 2);
    memset(long_token, 'x', RA_BPE_MAX_TOKEN_BYTES + 1);
    long_token[RA_BPE_MAX_TOKEN_BYTES + 1] = 0;
    char *keep = v.tok[7];
    v.tok[7] = long_token;
    CHECK_REFUSED(ra_bpe_init(&b, tok, v.n, mrg, 1, &o), RA_ERANGE, "vocab.gguf: token 7 is longer than 4096 bytes");
    v.tok[7] = keep;
    free(long_token);

    int32_t sp[1] = { 9999 };
    o.special_ids = sp;
    o.n_special = 1;
    CHECK_REFUSED(init(&b, &v, &o), RA_EINVAL, "vocab.gguf: special token id 9999 is outside the vocabulary of 257");
    keep = v.tok[5], v.tok[5] = NULL, sp[0] = 5;
    CHECK_REFUSED(init(&b, &v, &o), RA_EINVAL, "vocab.gguf: special token id 5 has no token");
    v.tok[5] = keep;
    char *empty = strdup("");
    keep = v.tok[6], v.tok[6] = empty, sp[0] = 6;
    CHECK_REFUSED(init(&b, &v, &o), RA_EINVAL, "vocab.gguf: special token 6 is empty");
    v.tok[6] = keep;
    free(empty);
    o.n_special = 0;

    o.bos_id = 300;
    CHECK_REFUSED(init(&b, &v, &o), RA_EINVAL, "vocab.gguf: BOS id 300 is outside the vocabulary");
    o.bos_id = -1, o.eos_id = -7;
    CHECK_REFUSED(init(&b, &v, &o), RA_EINVAL, "vocab.gguf: EOS id -7 is outside the vocabulary");
    o.eos_id = -1, o.unk_id = 257;
    CHECK_REFUSED(init(&b, &v, &o), RA_EINVAL, "vocab.gguf: unknown token id 257 is outside");
    o.unk_id = -1, o.add_bos = 1;
    CHECK_REFUSED(init(&b, &v, &o), RA_EINVAL, "vocab.gguf: BOS is to be added but there is no BOS token");
    o.add_bos = 0, o.add_eos = 1;
    CHECK_REFUSED(init(&b, &v, &o), RA_EINVAL, "vocab.gguf: EOS is to be added but there is no EOS token");
    o.add_eos = 0, o.pre = "falcon\x1b[31m";
    CHECK_REFUSED(init(&b, &v, &o), RA_EUNSUPPORTED,
                  "vocab.gguf: unknown pre-tokenizer 'falcon\\x1b[31m' (known: gpt-2, smollm, llama-bpe, qwen2)");
    o.source = NULL;
    CHECK_REFUSED(init(&b, &v, &o), RA_EUNSUPPORTED, "BPE tokenizer: unknown pre-tokenizer");
    CHECK(b.s == NULL); /* nothing left to free after a refusal */
    vocab_free(&v);
}

/* ------------------------------------------------------------- tokenizer.json */

static char json_path[4096];

/* A small valid tokenizer.json: the 256 byte symbols, "ab", "Ġa", two special tokens. */
static json_t *base_json(int pair_merges)
{
    json_t *vocab = json_object(), *merges = json_array();
    char sym[3];
    for (int c = 0; c < 256; c++) {
        byte_symbol((unsigned)c, sym);
        json_object_set_new(vocab, sym, json_integer(c));
    }
    json_object_set_new(vocab, "ab", json_integer(256));
    json_object_set_new(vocab, "\xc4\xa0" "a", json_integer(257));
    if (pair_merges) {
        json_array_append_new(merges, json_pack("[ss]", "a", "b"));
        json_array_append_new(merges, json_pack("[ss]", "\xc4\xa0", "a"));
    } else {
        json_array_append_new(merges, json_string("a b"));
        json_array_append_new(merges, json_string("\xc4\xa0 a"));
    }
    return json_pack("{s:s, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}, {s:i, s:s, s:b}], s:n, "
                     "s:{s:s, s:b, s:b, s:b}, s:n, s:{s:s, s:n, s:n, s:o, s:o}}",
                     "version", "1.0",
                     "added_tokens", "id", 258, "content", "<|s|>", "single_word", 0, "lstrip", 0, "rstrip", 0,
                     "normalized", 0, "special", 1, "id", 259, "content", "<|e|>", "special", 1,
                     "normalizer",
                     "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1,
                     "post_processor",
                     "model", "type", "BPE", "dropout", "unk_token", "vocab", vocab, "merges", merges);
}

static void write_json(json_t *root)
{
    if (json_dump_file(root, json_path, JSON_COMPACT) != 0) {
        fprintf(stderr, "cannot write %s\n", json_path);
        exit(1);
    }
    json_decref(root);
}

static void write_text(const char *text)
{
    FILE *f = fopen(json_path, "w");
    fputs(text, f);
    fclose(f);
}

/* Loading json_path must fail with STATUS and a message naming the file and holding TEXT. */
static void json_refused(int status, const char *text, int line)
{
    struct ra_bpe b;
    int rc = ra_bpe_load_json(&b, json_path);
    const char *msg = ra_error_message();
    if (rc != status || !strstr(msg, json_path) || !strstr(msg, text) || strchr(msg, '\n') || b.s) {
        fprintf(stderr, "%s:%d: load gave %d \"%s\", want %d, the path and \"%s\"\n", __FILE__, line, rc, msg,
                status, text);
        test_failures++;
    }
    ra_bpe_free(&b);
}
#define JSON_REFUSED(status, text) json_refused(status, text, __LINE__)

static void test_json_loads(void)
{
    struct ra_bpe b;
    for (int pairs = 0; pairs < 2; pairs++) {
        write_json(base_json(pairs));
        CHECK_OK(ra_bpe_load_json(&b, json_path));
        CHECK(b.n_tokens == 260 && strcmp(b.pre, "gpt-2") == 0 && b.bos_id == -1 && !b.add_bos);
        CHECK_PIECES(&b, "ab a<|s|><|e|>b", 0, "ab| a|<|s|>|<|e|>|b");
        ra_bpe_free(&b);
    }
    /* smollm's Sequence, a BOS/EOS template in a Sequence, an unknown token, NFC, lstrip. */
    json_t *root = base_json(1);
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{s:s, s:[{s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence", "pretokenizers",
                                  "type", "Digits", "individual_digits", 1, "type", "ByteLevel", "add_prefix_space",
                                  0, "trim_offsets", 1, "use_regex", 1));
    json_object_set_new(root, "post_processor", json_pack(
        "{s:s, s:[{s:s}, {s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:[i]}, s:{s:[i]}}}]}",
        "type", "Sequence", "processors", "type", "ByteLevel", "type", "TemplateProcessing", "single",
        "SpecialToken", "id", "<|s|>", "type_id", 0, "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id",
        "<|e|>", "type_id", 0, "special_tokens", "<|s|>", "ids", 258, "<|e|>", "ids", 259));
    json_object_set_new(root, "normalizer", json_pack("{s:s}", "type", "NFC"));
    json_object_set_new(json_object_get(root, "model"), "unk_token", json_string("a"));
    json_object_set_new(json_array_get(json_object_get(root, "added_tokens"), 1), "lstrip", json_true());
    write_json(root);
    CHECK_OK(ra_bpe_load_json(&b, json_path));
    CHECK(strcmp(b.pre, "smollm") == 0 && b.bos_id == 258 && b.eos_id == 259 && b.add_bos && b.add_eos);
    CHECK(b.unk_id == 'a');
    CHECK_PIECES(&b, "ab12", RA_BPE_ADD_SPECIAL, "<|s|>|ab|1|2|<|e|>");
    CHECK_PIECES(&b, "a \t<|e|>", 0, "a|<|e|>");
    ra_bpe_free(&b);
    /* llama-bpe: a Split with Llama 3's regex, ByteLevel without its own. */
    root = base_json(0);
    json_object_set_new(root, "pre_tokenizer", json_pack(
        "{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence", "pretokenizers", "type",
        "Split", "pattern", "Regex", ra_bpe_pre_regex("llama-bpe", 0), "behavior", "Isolated", "invert", 0, "type",
        "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0));
    json_object_set_new(json_object_get(root, "model"), "ignore_merges", json_true());
    write_json(root);
    CHECK_OK(ra_bpe_load_json(&b, json_path));
    CHECK(strcmp(b.pre, "llama-bpe") == 0 && b.ignore_merges == 1);
    ra_bpe_free(&b);
}

/* Sets KEY of the object at PATH ("" for the root, "model", "added_tokens.0") in a fresh base file. */
static void write_with(const char *where, const char *key, json_t *value)
{
    json_t *root = base_json(0), *obj = root;
    if (strcmp(where, "model") == 0)
        obj = json_object_get(root, "model");
    else if (strncmp(where, "added_tokens.", 13) == 0)
        obj = json_array_get(json_object_get(root, "added_tokens"), (size_t)atoi(where + 13));
    if (value)
        json_object_set_new(obj, key, value);
    else
        json_object_del(obj, key);
    write_json(root);
}

static void test_json_refusals(void)
{
    struct ra_bpe b;
    char missing[4200];
    snprintf(missing, sizeof missing, "%s.absent", json_path);
    CHECK_REFUSED(ra_bpe_load_json(&b, missing), RA_EIO, "cannot open");
    write_text("{\"model\": ");
    JSON_REFUSED(RA_EFORMAT, "not valid JSON");
    write_text("[1, 2]");
    JSON_REFUSED(RA_EFORMAT, "not a JSON object");
    write_text("{\"version\": \"1.0\"}");
    JSON_REFUSED(RA_EFORMAT, "no \"model\" object: not a tokenizer.json");
    /* a file past the limit, refused before it is read (sparse: no disk used) */
    int fd = open(json_path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)RA_BPE_MAX_JSON_BYTES + 1) == 0);
    close(fd);
    JSON_REFUSED(RA_ERANGE, "more than a tokenizer.json may have");

    write_with("model", "type", json_string("Unigram"));
    JSON_REFUSED(RA_EUNSUPPORTED, "model.type is 'Unigram': only BPE models are read");
    write_with("model", "byte_fallback", json_true());
    JSON_REFUSED(RA_EUNSUPPORTED, "model.byte_fallback is true");
    write_with("model", "byte_fallback", json_string("yes"));
    JSON_REFUSED(RA_EFORMAT, "model.byte_fallback is not true or false");
    write_with("model", "continuing_subword_prefix", json_string("##"));
    JSON_REFUSED(RA_EUNSUPPORTED, "model.continuing_subword_prefix is set");
    write_with("model", "dropout", json_real(0.1));
    JSON_REFUSED(RA_EUNSUPPORTED, "model.dropout is set");
    write_with("model", "vocab", NULL);
    JSON_REFUSED(RA_EFORMAT, "model.vocab is missing or empty");
    write_with("model", "vocab", json_pack("{s:i, s:s}", "a", 0, "b", "1"));
    JSON_REFUSED(RA_EFORMAT, "a model.vocab value is not an id from 0 to 2097151");
    write_with("model", "vocab", json_pack("{s:i, s:i}", "a", 0, "b", RA_BPE_MAX_TOKENS));
    JSON_REFUSED(RA_EFORMAT, "a model.vocab value is not an id");
    write_with("model", "vocab", json_pack("{s:i, s:i}", "a", 0, "b", 0));
    JSON_REFUSED(RA_EFORMAT, "model.vocab gives id 0 to both 'a' and 'b'");
    write_with("model", "merges", NULL);
    JSON_REFUSED(RA_EFORMAT, "model.merges is missing: a BPE tokenizer needs its merges");
    write_with("model", "merges", json_array());
    JSON_REFUSED(RA_EFORMAT, "model.merges is empty");
    write_with("model", "merges", json_pack("[s, [ss]]", "a b", "a", "b"));
    JSON_REFUSED(RA_EFORMAT, "model.merges[1] is not a string \"a b\", as merges[0] is");
    write_with("model", "merges", json_pack("[[ss], [s]]", "a", "b", "a"));
    JSON_REFUSED(RA_EFORMAT, "model.merges[1] is not a pair of strings");
    write_with("model", "merges", json_pack("[i]", 3));
    JSON_REFUSED(RA_EFORMAT, "model.merges[0] is neither a string \"a b\" nor a pair of strings");
    write_with("model", "merges", json_pack("[s]", "a zz"));
    JSON_REFUSED(RA_EFORMAT, "merge 0 ('a' 'zz'): 'zz' is not in the vocabulary");
    write_with("model", "merges", json_pack("[[ss]]", "b", "a"));
    JSON_REFUSED(RA_EFORMAT, "merge 0 ('b' 'a'): 'ba' is not in the vocabulary");
    write_with("model", "unk_token", json_string("<unk>"));
    JSON_REFUSED(RA_EFORMAT, "model.unk_token '<unk>' is not in model.vocab");

    write_with("", "added_tokens", json_string("x"));
    JSON_REFUSED(RA_EFORMAT, "added_tokens is not an array");
    write_with("added_tokens.0", "id", json_integer(-1));
    JSON_REFUSED(RA_EFORMAT, "an added token's id is not an id");
    write_with("added_tokens.0", "id", json_integer(256));
    JSON_REFUSED(RA_EFORMAT, "added token '<|s|>' has id 256, which model.vocab gives to 'ab'");
    write_with("added_tokens.0", "content", json_string(""));
    JSON_REFUSED(RA_EFORMAT, "added_tokens[0].content is not a non-empty string");
    write_with("added_tokens.1", "rstrip", json_integer(1));
    JSON_REFUSED(RA_EFORMAT, "added_tokens[1].rstrip is not true or false");
    write_with("added_tokens.1", "single_word", json_true());
    JSON_REFUSED(RA_EUNSUPPORTED, "added token '<|e|>' is single_word: not supported");

    write_with("", "pre_tokenizer", NULL);
    JSON_REFUSED(RA_EUNSUPPORTED, "pre_tokenizer is missing: not a byte-level BPE");
    write_with("", "pre_tokenizer", json_pack("{s:s}", "type", "Whitespace"));
    JSON_REFUSED(RA_EUNSUPPORTED, "pre_tokenizer Whitespace is not a known byte-level pre-tokenizer");
    write_with("", "pre_tokenizer", json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1,
                                              "use_regex", 1));
    JSON_REFUSED(RA_EUNSUPPORTED, "pre_tokenizer ByteLevel(add_prefix_space=true, use_regex=true) is not a known");
    write_with("", "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b}]}", "type",
                                              "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex",
                                              "\\p{L}+", "behavior", "Isolated", "invert", 0, "type", "ByteLevel",
                                              "add_prefix_space", 0, "use_regex", 0));
    JSON_REFUSED(RA_EUNSUPPORTED, "pre_tokenizer Sequence[Split(Regex \"\\\\p{L}+\", Isolated, invert=false), "
                                  "ByteLevel(add_prefix_space=false, use_regex=false)] is not a known");
    write_with("", "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:b}, {s:s, s:b}]}", "type", "Sequence",
                                              "pretokenizers", "type", "Digits", "individual_digits", 0, "type",
                                              "ByteLevel", "add_prefix_space", 0));
    JSON_REFUSED(RA_EUNSUPPORTED, "Digits(individual_digits=false), ByteLevel(add_prefix_space=false, "
                                  "use_regex=absent)] is not a known");
    write_with("", "normalizer", json_pack("{s:s}", "type", "Lowercase"));
    JSON_REFUSED(RA_EUNSUPPORTED, "normalizer Lowercase is not supported (none or NFC)");
    write_with("", "post_processor", json_pack("{s:s}", "type", "RobertaProcessing"));
    JSON_REFUSED(RA_EUNSUPPORTED, "post_processor RobertaProcessing is not supported");
    write_with("", "post_processor", json_pack("{s:s, s:[{s:{s:s}}, {s:{s:s}}]}", "type", "TemplateProcessing",
                                               "single", "Sequence", "id", "A", "Sequence", "id", "B"));
    JSON_REFUSED(RA_EUNSUPPORTED, "TemplateProcessing: \"single\" holds an item that is neither $A nor a special");
    write_with("", "post_processor", json_pack("{s:s, s:[{s:{s:s}}, {s:{s:s}}, {s:{s:s}}]}", "type",
                                               "TemplateProcessing", "single", "SpecialToken", "id", "<|s|>",
                                               "SpecialToken", "id", "<|s|>", "Sequence", "id", "A"));
    JSON_REFUSED(RA_EUNSUPPORTED, "post_processor TemplateProcessing: \"single\" is not [BOS] $A [EOS]");
    write_with("", "post_processor", json_pack("{s:s, s:[{s:{s:s}}, {s:{s:s}}], s:{}}", "type",
                                               "TemplateProcessing", "single", "SpecialToken", "id", "<|s|>",
                                               "Sequence", "id", "A", "special_tokens"));
    JSON_REFUSED(RA_EFORMAT, "special_tokens['<|s|>'].ids is not one id");
    write_with("", "post_processor", json_pack("{s:s, s:[{s:{s:s}}, {s:{s:s}}], s:{s:{s:[i]}}}", "type",
                                               "TemplateProcessing", "single", "SpecialToken", "id", "<|s|>",
                                               "Sequence", "id", "A", "special_tokens", "<|s|>", "ids", 999));
    JSON_REFUSED(RA_EINVAL, "BOS id 999 is outside the vocabulary of 260 tokens");
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(json_path, sizeof json_path, "%s/test_tokenizer_bpe.%d.json", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    test_merge_order();
    test_byte_alphabet();
    test_pre_tokenizers();
    test_ignore_merges();
    test_special_tokens();
    test_unknown_bytes();
    test_decode();
    test_init_refusals();
    test_json_loads();
    test_json_refusals();
    unlink(json_path);
    return test_result("test_tokenizer_bpe");
}
