/* Fuzz harness: a Hugging Face tokenizer.json read as a byte-level BPE
 * (src/tokenizer_bpe_json.c, and the tables of src/tokenizer_bpe.c). The input
 * is the file. It must be refused with one error line naming the file, or
 * load; a tokenizer that loads must encode the input's own bytes (any bytes:
 * invalid UTF-8, NUL) with and without its special tokens, every id inside the
 * vocabulary and decodable, and encoding twice must give the same ids.
 * Seeds: tests/corpus/tokenizer_json/ (small tokenizer.json files for each
 * known pre-tokenizer, both merge forms, templates, added tokens), with
 * tests/corpus/tokenizer_json.dict. */
#include "fuzz.h"
#include "status.h"
#include "tokenizer_bpe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_encoding(const struct ra_bpe *b, const uint8_t *data, size_t size, unsigned flags)
{
    int32_t *ids = NULL, *again = NULL;
    char *back = NULL;
    size_t len;
    int n = 0, n_again = 0;
    if (ra_bpe_encode(b, (const char *)data, size, flags, &ids, &n) != RA_OK)
        fuzz_fail("encoding failed with a tokenizer that loaded");
    if ((size_t)n > size + 2)
        fuzz_fail("%d ids for %zu bytes", n, size);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= b->n_tokens || !ra_bpe_token_bytes(b, ids[i], &len))
            fuzz_fail("id %d is not a token of the vocabulary of %d", ids[i], b->n_tokens);
    if (ra_bpe_decode(b, ids, n, &back, &len) != RA_OK)
        fuzz_fail("decoding the ids just encoded failed");
    if (ra_bpe_encode(b, (const char *)data, size, flags, &again, &n_again) != RA_OK || n_again != n ||
        (n && memcmp(ids, again, sizeof *ids * (size_t)n) != 0))
        fuzz_fail("encoding the same text twice gave different ids");
    free(ids);
    free(again);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(NULL, "tokenizer.json", data, size);
    struct ra_bpe b;
    if (ra_bpe_load_json(&b, path) != RA_OK) {
        if (b.s)
            fuzz_fail("a refused tokenizer.json left tables behind");
        fuzz_check_error(path, data, size);
        return 0;
    }
    check_encoding(&b, data, size, 0);
    check_encoding(&b, data, size, RA_BPE_ADD_SPECIAL | RA_BPE_TEXT_ONLY);
    fuzz_note("  accepted: %d tokens, pre-tokenizer %s, BOS %d, EOS %d", b.n_tokens, b.pre, (int)b.bos_id,
              (int)b.eos_id);
    ra_bpe_free(&b);
    return 0;
}
