/* Fuzz harness: a request file (src/reuse/request.c) parsed and rendered.
 * The first byte picks the vocabulary (0: none, every part must be ids; 1: a
 * 512-piece SentencePiece one; 2: the same with a ChatML template), the rest
 * is the JSON file, beside a chunk file "a.txt". It must be refused with one
 * error line naming the request, leaving nothing behind, or load with its
 * parts tiling the ids (prefix, non-empty chunks in order, a non-empty
 * suffix) and every id inside the vocabulary.
 * Seeds: tests/corpus/request/ (written by hand: each form of each part and
 * the mistakes the loader names). */
#include "fuzz.h"
#include "reuse/request.h"
#include "status.h"
#include "vocab.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char chatml[] = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                             "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";

/* tok512.bin, as tests/test_request.c writes it: <unk>, <s>, </s>, 256
 * byte pieces, printable ASCII, two-letter pieces. Loaded once. */
static const struct ra_vocab *vocab(void)
{
    static struct ra_vocab v;
    static int loaded;
    if (loaded)
        return &v;
    char buf[8192];
    size_t at = 0;
    int32_t maxlen = 6;
    memcpy(buf, &maxlen, 4), at = 4;
    for (int i = 0; i < 512; i++) {
        char piece[8];
        float score = i < 259 ? 0 : i < 259 + 95 ? -2 : -1;
        if (i < 3)
            strcpy(piece, i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 259)
            snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else if (i < 259 + 95)
            piece[0] = (char)(32 + i - 259), piece[1] = '\0';
        else
            piece[0] = (char)('a' + (i - 354) / 26 % 26), piece[1] = (char)('a' + (i - 354) % 26), piece[2] = '\0';
        int32_t len = (int32_t)strlen(piece);
        memcpy(buf + at, &score, 4), memcpy(buf + at + 4, &len, 4), memcpy(buf + at + 8, piece, (size_t)len);
        at += 8 + (size_t)len;
    }
    if (ra_vocab_load(&v, fuzz_write(NULL, "tok512.bin", buf, at)) != RA_OK)
        fuzz_fail("the harness's own vocabulary does not load");
    loaded = 1;
    return &v;
}

static void check_request(const struct ra_request *r, const struct ra_vocab *v)
{
    int at = r->n_prefix;
    if (r->n_prefix < 0 || r->n_chunks < 0)
        fuzz_fail("negative prefix %d or chunk count %d", r->n_prefix, r->n_chunks);
    for (int c = 0; c < r->n_chunks; c++) {
        if (r->chunk_start[c] != at || r->chunk_len[c] <= 0 || !r->chunk_name[c])
            fuzz_fail("chunk %d at %d (+%d), want it at %d and non-empty", c, r->chunk_start[c], r->chunk_len[c], at);
        at += r->chunk_len[c];
    }
    if (r->suffix_start != at || r->n <= at)
        fuzz_fail("suffix at %d of %d, want it at %d and non-empty", r->suffix_start, r->n, at);
    for (int i = 0; i < r->n; i++)
        if (r->ids[i] < 0 || (v && r->ids[i] >= v->n_tokens))
            fuzz_fail("id %d at %d is not a token", r->ids[i], i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int mode = data[0] % 3;
    const struct ra_vocab *v = mode ? vocab() : NULL;
    struct ra_request r;
    fuzz_write(NULL, "a.txt", "alice met bob", 13);
    const char *path = fuzz_write(NULL, "request.json", data + 1, size - 1);
    if (ra_request_load(&r, path, v, mode == 2 ? chatml : NULL) != RA_OK) {
        if (r.ids || r.chunk_name || r.chunk_start || r.n)
            fuzz_fail("a refused request left parts behind");
        fuzz_check_error(path, data + 1, size - 1);
        fuzz_note("  mode %d: %s", mode, ra_error_message());
        return 0;
    }
    check_request(&r, v);
    fuzz_note("  mode %d: %d ids, prefix %d, %d chunks", mode, r.n, r.n_prefix, r.n_chunks);
    ra_request_free(&r);
    return 0;
}
