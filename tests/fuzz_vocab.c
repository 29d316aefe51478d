/* Fuzz harness: a GGUF file's vocabulary (src/vocab.c on src/gguf.c: the
 * arrays of tokenizer.ggml.*, read into SentencePiece or byte-level BPE) and
 * its chat template. The input is the file. It must be refused with one error
 * line naming it, or load with every end-of-generation id inside the
 * vocabulary; then the input's first bytes, as text, must encode (with and
 * without BOS/EOS and special tokens) to ids of the vocabulary, the same ids
 * twice, that decode and stream; a template must render a fixed chat or be
 * refused naming the file.
 * Seeds: tests/corpus/vocab/ (tests/vocab_oracle.py seeds). */
#include "chat.h"
#include "fuzz.h"
#include "status.h"
#include "vocab.h"

#include <stdlib.h>
#include <string.h>

#define VOCAB_PATH "fuzz.gguf"
#define TEXT_MAX 256 /* bytes of the input encoded as text */

static void check_encoding(const struct ra_vocab *v, const char *text, size_t len, unsigned flags)
{
    int32_t *ids = NULL, *again = NULL;
    char *back = NULL, buf[2];
    size_t n_bytes;
    int n = 0, n_again = 0;
    if (ra_vocab_encode(v, text, len, flags, &ids, &n) != RA_OK)
        fuzz_fail("encoding failed with a vocabulary that loaded");
    for (int i = 0, prev = -1; i < n; prev = ids[i++]) {
        if (ids[i] < 0 || ids[i] >= v->n_tokens)
            fuzz_fail("id %d outside the vocabulary of %d", ids[i], v->n_tokens);
        ra_vocab_token_bytes(v, prev, ids[i], buf, &n_bytes);
    }
    if (ra_vocab_decode(v, ids, n, &back, &n_bytes) != RA_OK)
        fuzz_fail("decoding the ids just encoded failed");
    if (ra_vocab_encode(v, text, len, flags, &again, &n_again) != RA_OK || n_again != n ||
        (n && memcmp(ids, again, sizeof *ids * (size_t)n) != 0))
        fuzz_fail("encoding the same text twice gave different ids");
    free(ids);
    free(again);
    free(back);
}

static void check_template(const struct ra_vocab *v, const char *path)
{
    struct ra_chat chat = { 0 };
    char *out = NULL;
    if (ra_chat_add(&chat, "system", "Be brief.") != RA_OK || ra_chat_add(&chat, "user", "Hi") != RA_OK)
        fuzz_fail("adding a message failed");
    if (ra_chat_render(v->chat_template, path, &chat, "<s>", "</s>", &out) != RA_OK)
        fuzz_check_error(path, (const uint8_t *)v->chat_template, strlen(v->chat_template));
    free(out);
    ra_chat_free(&chat);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(NULL, VOCAB_PATH, data, size);
    const size_t len = size < TEXT_MAX ? size : TEXT_MAX;
    struct ra_vocab v;
    if (ra_vocab_load(&v, path) != RA_OK) {
        fuzz_check_error(path, data, size);
        return 0;
    }
    for (int i = 0; i < v.n_eog; i++)
        if (v.eog[i] < 0 || v.eog[i] >= v.n_tokens)
            fuzz_fail("end-of-generation id %d outside the vocabulary", v.eog[i]);
    for (unsigned flags = 0; flags < 4; flags++)
        check_encoding(&v, (const char *)data, len, flags);
    if (v.chat_template)
        check_template(&v, path);
    fuzz_note("  accepted: %s, %d tokens, %d end tokens%s", v.kind == RA_VOCAB_BPE ? "BPE" : "SentencePiece",
              v.n_tokens, v.n_eog, v.chat_template ? ", a chat template" : "");
    ra_vocab_free(&v);
    return 0;
}
