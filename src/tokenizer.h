/* llama2.c tokenizer.bin: SentencePiece BPE with scores and byte fallback.
 *
 * File layout: int32 max_token_length, then per token float32 score, int32
 * length, bytes (all little-endian). The token count is not stored: it is the
 * number of records before EOF. Pieces use ' ' where SentencePiece uses U+2581;
 * byte pieces are "<0xNN>". Ids 0, 1, 2 are <unk>, <s> (BOS), </s> (EOS). */
#ifndef RA_TOKENIZER_H
#define RA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct ra_token_index; /* private: pieces sorted by bytes, for lookup */

struct ra_tokenizer {
    int vocab_size;
    char **pieces;                  /* NUL-terminated; may hold NUL bytes: use piece_lens */
    int *piece_lens;
    float *scores;
    unsigned max_token_length;
    int byte_tokens[256];           /* id of "<0xNN>" per byte, -1 if absent */
    struct ra_token_index *sorted;  /* the mergeable pieces (not control, unk or byte) */
    int n_sorted;
    int unk_id, bos_id, eos_id;
    int no_dummy_prefix;            /* 1: no leading space before the text (GGUF
                                       tokenizer.ggml.add_space_prefix = false) */
    char *piece_data;               /* owns the bytes that pieces[] point into */
};

/* vocab_size > 0: the file must hold exactly that many tokens (the model's
 * vocabulary); 0: as many as the file holds. */
int ra_tokenizer_load(struct ra_tokenizer *t, const char *path, int vocab_size);
void ra_tokenizer_free(struct ra_tokenizer *t);

/* GGUF's token types (tokenizer.ggml.token_type). */
enum { RA_TOKEN_NORMAL = 1, RA_TOKEN_UNKNOWN, RA_TOKEN_CONTROL, RA_TOKEN_USER_DEFINED, RA_TOKEN_UNUSED,
       RA_TOKEN_BYTE };

/* A tokenizer from arrays, as a GGUF file with tokenizer.ggml.model = "llama"
 * stores them: pieces[i] NUL-terminated, U+2581 for a space (read as ' ');
 * types[i] one of RA_TOKEN_* (NULL: all normal): only normal pieces take part
 * in merges, as SentencePiece does. unk_id, bos_id, eos_id may be -1 (none)
 * except unk_id, which unknown bytes without a byte token fall back to.
 * SOURCE names the vocabulary in errors. The arrays are copied. */
int ra_tokenizer_init(struct ra_tokenizer *t, const char *source, const char *const *pieces, const float *scores,
                      const int *types, int n, int unk_id, int bos_id, int eos_id);

/* Encodes UTF-8 text exactly as SentencePiece does for Llama 2: optional BOS,
 * the dummy-prefix space (non-empty text only), BPE merges by score, unknown
 * characters (and invalid UTF-8 bytes) as byte tokens. *ids is malloc'ed. */
int ra_tokenizer_encode(const struct ra_tokenizer *t, const char *text, int add_bos,
                        int32_t **ids, int *n_ids);

/* The text of token `id` when it follows token `prev` (prev < 0: at the start
 * of the text). The leading space of a piece after BOS or at the start is
 * stripped (it is the dummy prefix); "<0xNN>" becomes its byte, written to
 * byte_buf; BOS/EOS give "", <unk> gives " \u2047 " as SentencePiece does, an id
 * outside the vocabulary gives "". Never NULL. */
const char *ra_tokenizer_piece(const struct ra_tokenizer *t, int prev, int id, char byte_buf[2]);

/* Decodes ids into a malloc'ed NUL-terminated string (no BOS text, no leading
 * dummy space). Byte tokens give raw bytes, so decode(encode(s)) == s. */
int ra_tokenizer_decode(const struct ra_tokenizer *t, const int32_t *ids, int n, char **text);

#endif
