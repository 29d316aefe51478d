/* Byte-level BPE tokenizers, as GPT-2, Llama 3, Qwen2 and SmolLM2 use them
 * (Hugging Face tokenizers' BPE model with a ByteLevel pre-tokenizer; GGUF's
 * tokenizer.ggml.model = "gpt2").
 *
 * Encoding, as HF tokenizers does it:
 *   1. special tokens in the text become their ids: leftmost match first, the
 *      longest where several start at the same byte (HF: the special tokens
 *      first, then, in the text between them, the added tokens that are not
 *      special);
 *   2. each stretch of text between them is split by the pre-tokenizer's
 *      regular expressions (PCRE2, Unicode properties), one after the other,
 *      each cutting every piece into its matches and the text between them;
 *   3. each piece's bytes are written in the GPT-2 byte-to-unicode alphabet
 *      (printable Latin-1 as itself, the other 68 bytes as U+0100..U+0143);
 *   4. BPE: the piece starts as one symbol per byte and the adjacent pair of
 *      lowest merge rank is merged first, leftmost among equal ranks, until no
 *      pair has a merge (with ignore_merges, a piece that is a whole token is
 *      that token at once);
 *   5. the symbols' ids, BOS first and EOS last where the tokenizer adds them.
 * A byte whose symbol is not in the vocabulary becomes the unknown token, or
 * is dropped where there is none (as HF does); real vocabularies hold all 256.
 * Text that is not valid UTF-8 is encoded too: an invalid byte never matches a
 * pre-tokenizer class, so it ends up in a piece of its own.
 *
 * Decoding writes each token's bytes: a special token's text as it is, any
 * other token's symbols mapped back to bytes (a token with a character outside
 * the byte alphabet as its own UTF-8, as HF's ByteLevel decoder does), so
 * decode(encode(s)) == s wherever every byte has a token.
 *
 * Pre-tokenizers, by their llama.cpp names (tokenizer.ggml.pre):
 *   gpt-2 (also gpt2)     GPT-2's regex, HF's ByteLevel(use_regex=true)
 *   smollm                each digit apart (HF Digits(individual_digits)), then GPT-2's
 *   llama-bpe (llama3, llama-v3)  Llama 3's regex (digits in threes, case-insensitive
 *                         contractions); ignore_merges by default, as llama.cpp does
 *   qwen2                 Llama 3's with single digits
 * The regexes are tokenizer.json's, with \s read as Oniguruma (HF's engine) reads it:
 * the Unicode separators (Z), U+0009..U+000D and U+0085. */
#ifndef RA_TOKENIZER_BPE_H
#define RA_TOKENIZER_BPE_H

#include <stddef.h>
#include <stdint.h>

/* Limits on what a file may ask for, checked before anything is allocated. */
#define RA_BPE_MAX_TOKENS (1 << 21)              /* ids 0 .. 2^21 - 1 */
#define RA_BPE_MAX_MERGES (1 << 22)
#define RA_BPE_MAX_TOKEN_BYTES 4096              /* one token's stored form */
#define RA_BPE_MAX_JSON_BYTES ((size_t)512 << 20) /* a tokenizer.json */

/* Per special token (ra_bpe_options.special_flags), as HF's added tokens say. */
enum {
    RA_BPE_LSTRIP = 1, /* the match takes the whitespace before it too ("lstrip") */
    RA_BPE_RSTRIP = 2, /* ... and after it ("rstrip") */
    RA_BPE_ADDED = 4,  /* an added token that is not special ("special": false): matched in
                          the text between the special ones; encoded even with RA_BPE_TEXT_ONLY */
};

struct ra_bpe_options {
    const char *source;           /* names the vocabulary in messages (its file); NULL: "BPE tokenizer" */
    const char *pre;              /* the pre-tokenizer's name (see above); NULL: "gpt-2" */
    const int32_t *special_ids;   /* tokens matched whole in the text (GGUF: types CONTROL and
                                     USER_DEFINED; tokenizer.json: added_tokens) */
    const unsigned char *special_flags; /* RA_BPE_* per special_ids entry; NULL: all 0 */
    int n_special;
    int32_t bos_id, eos_id, unk_id; /* -1: none */
    int add_bos, add_eos;         /* what RA_BPE_ADD_SPECIAL adds */
    int ignore_merges;            /* 1, 0, or -1: the pre-tokenizer's default (llama-bpe: 1) */
    int fuse_unk;                 /* consecutive unknown bytes give one unknown token */
};
#define RA_BPE_OPTIONS_INIT { .bos_id = -1, .eos_id = -1, .unk_id = -1, .ignore_merges = -1 }

struct ra_bpe_state; /* private: lookup tables, merges, compiled regexes */

struct ra_bpe {
    int n_tokens;                 /* ids are 0 .. n_tokens - 1 (some may be unused) */
    int32_t bos_id, eos_id, unk_id; /* -1: none */
    int add_bos, add_eos;
    int ignore_merges;
    const char *pre;              /* the pre-tokenizer's canonical name ("smollm") */
    struct ra_bpe_state *s;
};

/* A tokenizer from arrays, as GGUF stores them: tokens[i] is id i's stored
 * (byte-level) form, NUL-terminated, NULL for an unused id; merges[r] is the
 * merge of rank r, "left right" (split at the first space after the first
 * byte, as llama.cpp does). o may be NULL (RA_BPE_OPTIONS_INIT). Refused, with
 * one line naming o->source: counts out of bounds, an empty or over-long token,
 * no merges, a merge without a space or naming a token (or a result) that is
 * not in the vocabulary, special/BOS/EOS/UNK ids out of range or unused,
 * add_bos without a BOS, an unknown pre-tokenizer. The arrays are copied. */
int ra_bpe_init(struct ra_bpe *b, const char *const *tokens, int n_tokens, const char *const *merges,
                int n_merges, const struct ra_bpe_options *o);

/* The same with each merge as two strings, pairs[2r] and pairs[2r + 1]
 * (tokenizer.json's [left, right] form, where a token may hold a space). */
int ra_bpe_init_pairs(struct ra_bpe *b, const char *const *tokens, int n_tokens, const char *const *pairs,
                      int n_merges, const struct ra_bpe_options *o);

/* A Hugging Face tokenizer.json: model (type BPE: vocab, merges in the "a b"
 * or the [a, b] form, unk_token, fuse_unk, ignore_merges), added_tokens (the
 * special tokens, with lstrip/rstrip), pre_tokenizer (ByteLevel alone, Digits +
 * ByteLevel, or Split with a known regex + ByteLevel: mapped to gpt-2,
 * smollm, llama-bpe or qwen2), normalizer (none, or NFC, accepted but not
 * applied: as llama.cpp, exact for text already in NFC) and post_processor
 * (ByteLevel, TemplateProcessing "single" = [BOS] $A [EOS], or a Sequence of
 * them: BOS and EOS with add_bos/add_eos). Anything else, a missing or empty
 * merges list, a merge naming an unknown token, an unknown pre-tokenizer (the
 * message says what is there), lengths and counts past the limits above: one
 * error line naming the file. */
int ra_bpe_load_json(struct ra_bpe *b, const char *path);

void ra_bpe_free(struct ra_bpe *b);

/* ra_bpe_encode flags. */
enum {
    RA_BPE_ADD_SPECIAL = 1, /* BOS / EOS as add_bos / add_eos say */
    RA_BPE_TEXT_ONLY = 2,   /* special tokens in the text are plain text (prompts from users) */
};

/* Encodes LEN bytes of TEXT (any bytes, NUL included) into *ids (malloc'ed,
 * *n_ids entries). Errors: a text over INT_MAX / 2 bytes, out of memory, a
 * regex engine failure. */
int ra_bpe_encode(const struct ra_bpe *b, const char *text, size_t len, unsigned flags, int32_t **ids,
                  int *n_ids);

/* The bytes of N ids into a malloc'ed, NUL-terminated *text of *len bytes
 * (len may be NULL). An id outside the vocabulary or unused is refused. */
int ra_bpe_decode(const struct ra_bpe *b, const int32_t *ids, int n, char **text, size_t *len);

/* The bytes token ID decodes to (not NUL-terminated: *len of them), or NULL
 * for an id outside the vocabulary or unused. For printing as tokens arrive. */
const char *ra_bpe_token_bytes(const struct ra_bpe *b, int32_t id, size_t *len);

/* The id of the token stored as TOKEN (its byte-level form: "Ġthe",
 * "<|im_start|>"), or -1. */
int32_t ra_bpe_token_id(const struct ra_bpe *b, const char *token);

/* 1 if ID is one of the special tokens, else 0. */
int ra_bpe_is_special(const struct ra_bpe *b, int32_t id);

/* The I-th regular expression of pre-tokenizer PRE (any of its names), as
 * tokenizer.json writes it, or NULL past the last one or for an unknown name. */
const char *ra_bpe_pre_regex(const char *pre, int i);

/* The canonical name of the pre-tokenizer that splits by exactly these N
 * regular expressions in this order (tokenizer.json's text), or NULL. */
const char *ra_bpe_pre_find(const char *const *regexes, int n);

#endif
