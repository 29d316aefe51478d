/* libFuzzer target for the tokenizer (not part of the build).
 *
 * The first input byte picks the mode:
 *   even: the rest is a tokenizer file. Loading must fail cleanly or succeed;
 *         on success, encoding and decoding the same bytes as text must work
 *         and give ids inside the vocabulary.
 *   odd:  the rest is text for the Llama 2 tokenizer (FUZZ_TOKENIZER, default
 *         ../shared/models/llama2-tokenizer.bin): decode(encode(text)) must
 *         give the text back, with U+2581 read as a space.
 *
 *   clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
 *       src/status.c src/mapped_file.c src/tokenizer.c tests/fuzz_tokenizer.c -lm -o fuzz_tokenizer
 *   ./fuzz_tokenizer -max_total_time=120 corpus/
 */
#include "status.h"
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

static void fuzz_file(const uint8_t *data, size_t size)
{
    static char path[64];
    struct ra_tokenizer t;
    int32_t *ids = NULL;
    char *text = NULL, *back = NULL;
    int n = 0;

    if (!path[0])
        snprintf(path, sizeof path, "/tmp/fuzz_tokenizer.%d.bin", (int)getpid());
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp) != 0)
        abort();
    if (ra_tokenizer_load(&t, path, 0) != RA_OK) {
        if (!strstr(ra_error_message(), path))
            abort(); /* every load error names the file */
        return;
    }
    text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    if (ra_tokenizer_encode(&t, text, 1, &ids, &n) != RA_OK)
        abort();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t.vocab_size)
            abort();
    if (ra_tokenizer_decode(&t, ids, n, &back) != RA_OK)
        abort();
    free(back);
    free(ids);
    free(text);
    ra_tokenizer_free(&t);
}

static void fuzz_text(const uint8_t *data, size_t size)
{
    static struct ra_tokenizer t;
    static int loaded;
    int32_t *ids = NULL;
    char *back = NULL;
    int n = 0;

    if (!loaded) {
        const char *p = getenv("FUZZ_TOKENIZER");
        if (ra_tokenizer_load(&t, p ? p : "../shared/models/llama2-tokenizer.bin", 0) != RA_OK) {
            fprintf(stderr, "%s\n", ra_error_message());
            exit(1);
        }
        loaded = 1;
    }
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    char *want = expected_text(text);
    if (ra_tokenizer_encode(&t, text, size & 1, &ids, &n) != RA_OK ||
        ra_tokenizer_decode(&t, ids, n, &back) != RA_OK || strcmp(back, want) != 0)
        abort();
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
