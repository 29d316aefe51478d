/* Fuzz harness: the tokenizer (src/tokenizer.c). The first input byte picks
 * the mode:
 *   even: the rest is a tokenizer.bin. Loading must fail with one error line
 *         naming the file, or succeed; then encoding the same bytes as text
 *         must give ids inside the vocabulary, and decoding them must work.
 *   odd:  the rest is text for the Llama 2 tokenizer (FUZZ_TOKENIZER, else
 *         $RA_MODELS_DIR/llama2-tokenizer.bin, else
 *         ../shared/models/llama2-tokenizer.bin; without it, a small
 *         tokenizer with every byte piece written here): decode(encode(text))
 *         must give the text back, with U+2581 read as a space, with and
 *         without BOS (by the text's length).
 * Seeds: tests/corpus/tokenizer/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "status.h"
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The text SentencePiece sees: U+2581 is its own space symbol. */
static char *expected_text(const char *text)
{
    char *out = malloc(strlen(text) + 1), *o = out;
    for (const char *p = text; *p;) {
        if (strncmp(p, "\xe2\x96\x81", 3) == 0)
            *o++ = ' ', p += 3;
        else
            *o++ = *p++;
    }
    *o = '\0';
    return out;
}

static char *as_text(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    return text;
}

static void fuzz_file(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(NULL, "tokenizer.bin", data, size);
    struct ra_tokenizer t;
    int32_t *ids = NULL;
    char *back = NULL;
    int n = 0;

    if (ra_tokenizer_load(&t, path, 0) != RA_OK) {
        fuzz_check_error(path, data, size);
        return;
    }
    char *text = as_text(data, size);
    if (ra_tokenizer_encode(&t, text, 1, &ids, &n) != RA_OK)
        fuzz_fail("encoding failed with a tokenizer that loaded");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t.vocab_size)
            fuzz_fail("id %d is outside the vocabulary of %d", ids[i], t.vocab_size);
    if (ra_tokenizer_decode(&t, ids, n, &back) != RA_OK)
        fuzz_fail("decoding the ids just encoded failed");
    fuzz_note("  accepted: %d tokens; its own bytes encode to %d ids", t.vocab_size, n);
    free(back);
    free(ids);
    free(text);
    ra_tokenizer_free(&t);
}

static void put_piece(FILE *f, const char *piece, int len, float score)
{
    int32_t n = len;
    fwrite(&score, sizeof score, 1, f);
    fwrite(&n, sizeof n, 1, f);
    fwrite(piece, 1, (size_t)len, f);
}

/* <unk>, <s>, </s>, the 256 byte pieces, then a few merges (with the space
 * piece, so that the dummy prefix is never a byte token, as in Llama 2). */
static const char *synthetic_tokenizer(void)
{
    static const char *const merges[] = { " ", "e", "t", "h", "th", " t", "he", " the", "\xc3\xa9" };
    static char path[8192];
    int32_t max_len = 8;
    snprintf(path, sizeof path, "%s/synthetic-tokenizer.bin", fuzz_dir());
    FILE *f = fopen(path, "wb");
    if (!f)
        fuzz_fail("cannot write %s", path);
    fwrite(&max_len, sizeof max_len, 1, f);
    put_piece(f, "<unk>", 5, 0);
    put_piece(f, "<s>", 3, 0);
    put_piece(f, "</s>", 4, 0);
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        put_piece(f, piece, 6, 0);
    }
    for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++)
        put_piece(f, merges[i], (int)strlen(merges[i]), -(float)i);
    if (fclose(f) != 0)
        fuzz_fail("cannot write %s", path);
    return path;
}

static const char *text_tokenizer(void)
{
    static char path[8192];
    const char *env = getenv("FUZZ_TOKENIZER"), *models = getenv("RA_MODELS_DIR");
    if (env && *env)
        return env;
    snprintf(path, sizeof path, "%s/llama2-tokenizer.bin", models && *models ? models : "../shared/models");
    return access(path, R_OK) == 0 ? path : synthetic_tokenizer();
}

static void fuzz_text(const uint8_t *data, size_t size)
{
    static struct ra_tokenizer t;
    static int loaded;
    int32_t *ids = NULL;
    char *back = NULL;
    int n = 0;

    if (!loaded) {
        if (ra_tokenizer_load(&t, text_tokenizer(), 0) != RA_OK)
            fuzz_fail("cannot load the text-mode tokenizer");
        loaded = 1;
    }
    char *text = as_text(data, size), *want = expected_text(text);
    if (ra_tokenizer_encode(&t, text, size & 1, &ids, &n) != RA_OK ||
        ra_tokenizer_decode(&t, ids, n, &back) != RA_OK)
        fuzz_fail("encoding or decoding failed");
    if (strcmp(back, want) != 0)
        fuzz_fail("decode(encode(text)) is not the text");
    fuzz_note("  text: %zu bytes, %d ids, round trip exact", size, n);
    free(back);
    free(want);
    free(ids);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        fuzz_text(data + 1, size - 1);
    else
        fuzz_file(data + 1, size - 1);
    return 0;
}
