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
#include "tok512.h"
#include "vocab.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char chatml[] = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                             "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";

/* tok512.h's tokenizer, loaded once. */
static const struct ra_vocab *vocab(void)
{
    static struct ra_vocab v;
    static int loaded;
    if (loaded)
        return &v;
    char buf[TOK512_BYTES];
    const size_t at = tok512_bytes(buf, 0);
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
