/* One text tokenizer for the programs: whatever vocabulary a model comes with,
 * encoded, decoded and streamed through one interface.
 *
 * Sources (ra_vocab_load picks by content, not by name):
 *   - a llama2.c tokenizer.bin: SentencePiece (src/tokenizer.h), BOS added,
 *     EOS (id 2) ends generation, no special tokens parsed in text (its
 *     <s>/</s> are not marked as such in the file);
 *   - a GGUF file, tokenizer.ggml.model "llama": SentencePiece from the
 *     arrays (tokens with U+2581, scores, token types), add_bos_token,
 *     add_eos_token, add_space_prefix as the file says (llama.cpp's defaults:
 *     BOS yes, EOS no, space prefix yes);
 *   - a GGUF file, tokenizer.ggml.model "gpt2": byte-level BPE
 *     (src/tokenizer_bpe.h) from tokens, merges, tokenizer.ggml.pre and the
 *     token types (CONTROL and USER_DEFINED are special);
 *   - a Hugging Face tokenizer.json (ra_bpe_load_json), with the
 *     tokenizer_config.json beside it for add_bos_token, add_eos_token,
 *     bos_token, eos_token and chat_template (or chat_template.jinja beside
 *     it, as transformers 5 saves it).
 *
 * Special tokens written in a text (the CONTROL and USER_DEFINED tokens of a
 * GGUF, the added tokens of a tokenizer.json) become their ids, as llama.cpp
 * does with parse_special: "<|im_start|>user" is one id and then "user".
 *
 * End of generation (ra_vocab_is_eog), as llama.cpp decides it: the EOS
 * token, the GGUF's tokenizer.ggml.eot_token_id and eom_token_id, and any
 * special token whose text is one of <|im_end|>, <|eot_id|>, <|eom_id|>,
 * <|end|>, <|endoftext|>, <|end_of_text|>, <end_of_turn>, <EOT>, _<EOT>,
 * <end_of_utterance>, <|return|>, <|call|> (the FIM tokens llama.cpp adds are
 * left out). */
#ifndef RA_VOCAB_H
#define RA_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "tokenizer.h"
#include "tokenizer_bpe.h"

#define RA_VOCAB_MAX_EOG 16

enum ra_vocab_kind { RA_VOCAB_SPM, RA_VOCAB_BPE };

struct ra_vocab {
    enum ra_vocab_kind kind;
    struct ra_tokenizer spm;       /* RA_VOCAB_SPM */
    struct ra_bpe bpe;             /* RA_VOCAB_BPE */
    int n_tokens;
    int32_t bos_id, eos_id;        /* -1: none */
    int add_bos, add_eos;          /* what RA_VOCAB_ADD_SPECIAL adds */
    int32_t eog[RA_VOCAB_MAX_EOG]; /* the tokens that end generation */
    int n_eog;
    int32_t *special;              /* SPM: the tokens matched whole in a text (sorted by id) */
    int n_special;
    char *chat_template;           /* the file's chat template, or NULL */
    char *path;                    /* the file it came from, for messages */
};

/* Loads the vocabulary of PATH: a GGUF file (by its magic), a tokenizer.json
 * (a name ending in .json) or a llama2.c tokenizer.bin (anything else).
 * Errors name the file and the cause: a GGUF without tokenizer.ggml.model,
 * an unknown tokenizer.ggml.model, a gpt2 vocabulary without merges... */
int ra_vocab_load(struct ra_vocab *v, const char *path);

/* The vocabulary of an open GGUF file G (read from PATH). */
int ra_vocab_from_gguf(struct ra_vocab *v, const struct ra_gguf *g, const char *path);

void ra_vocab_free(struct ra_vocab *v);

/* Where the vocabulary of MODEL is, written to PATH: the model itself when it
 * is a GGUF file with tokenizer.ggml.model (or one that does not parse: its
 * load names the fault), else tokenizer.bin or
 * tokenizer.json in the model's directory (MODEL itself or the one holding
 * it). Returns 1 if found, 0 if not. */
int ra_vocab_find(const char *model, char *path, size_t len);

/* ra_vocab_encode flags. */
enum {
    RA_VOCAB_ADD_SPECIAL = 1,   /* BOS / EOS as add_bos / add_eos say */
    RA_VOCAB_PARSE_SPECIAL = 2, /* special tokens in the text become their ids */
};

/* Encodes LEN bytes of TEXT into *ids (malloc'ed, *n_ids of them). */
int ra_vocab_encode(const struct ra_vocab *v, const char *text, size_t len, unsigned flags, int32_t **ids,
                    int *n_ids);

/* The text of N ids, malloc'ed and NUL-terminated (*len bytes, may be NULL). */
int ra_vocab_decode(const struct ra_vocab *v, const int32_t *ids, int n, char **text, size_t *len);

/* The bytes to print for token ID after token PREV (-1: the first), *len of
 * them (not NUL-terminated; a byte-level token may end inside a UTF-8
 * character: print the bytes as they come). BUF holds a byte token's byte.
 * Never NULL: an id outside the vocabulary gives no bytes. */
const char *ra_vocab_token_bytes(const struct ra_vocab *v, int32_t prev, int32_t id, char buf[2], size_t *len);

/* The text of token ID ("<s>", "<|im_end|>") into BUF (SIZE bytes, NUL-
 * terminated): the bos_token and eos_token of a chat template. Errors: no
 * such id, a text that does not fit or holds a NUL. */
int ra_vocab_token_text(const struct ra_vocab *v, int32_t id, char *buf, size_t size);

/* 1 if ID ends generation, else 0. */
int ra_vocab_is_eog(const struct ra_vocab *v, int32_t id);

#endif
