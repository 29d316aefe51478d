/* A request made of chunks: a system prompt, retrieved text chunks and a
 * question, rendered into one prompt whose parts are known.
 *
 * The file is one JSON object (jansson):
 *   {"system": S, "chunks": [C, ...], "question": Q}
 * where "system" (optional) and "question" are a text or {"ids": [...]},
 * and each chunk is a text, {"file": PATH} (relative to the request's
 * directory) or {"ids": [...]} (token ids, for models without a tokenizer).
 *
 * Rendering. With a chat template (chat.h) the conversation [system (or the
 * template's default), user: CHUNKS + QUESTION] is rendered with the
 * generation prompt and cut where the user's content starts and ends:
 *   prefix  = the template's text up to the user content (BOS where the
 *             vocabulary adds it), with special tokens parsed;
 *   chunk c = its text, encoded alone (no BOS), so the ids of a chunk are
 *             the same in every request and in `runahead-chunks add`;
 *   suffix  = the question and the template's tail (end of turn, the
 *             assistant's header).
 * Without a template: prefix = BOS (where added) and the system text;
 * suffix = the question. Every mode of --reuse runs the same ids.
 * Parts given as text are encoded without parsing special tokens (a
 * document's "<|im_end|>" stays text), and are not stripped as the Llama 2
 * and 3 templates strip a content: a chunk's ids are the same wherever it
 * stands. Encoding the parts alone can differ from encoding the whole
 * rendered text where a cut falls inside what the tokenizer keeps together
 * (a chunk ending in a space before the next one's word); the decoded text
 * is the same. */
#ifndef RA_REUSE_REQUEST_H
#define RA_REUSE_REQUEST_H

#include <stdint.h>

struct ra_vocab;

struct ra_request {
    int32_t *ids;     /* [n] the whole prompt: prefix, chunks in order, suffix */
    int n;
    int n_prefix;     /* ids [0, n_prefix): the leading prefix every chunk is computed behind */
    int n_chunks;
    int *chunk_start; /* chunk c: ids [chunk_start[c], chunk_start[c] + chunk_len[c]) */
    int *chunk_len;
    int suffix_start; /* ids [suffix_start, n): the question, always computed */
    char **chunk_name; /* per chunk, for messages: "REQ: chunk 3 (docs/a.txt)" */
};

/* Parses and renders the request file PATH with vocabulary V (NULL: every
 * part must be ids) and chat template TMPL (NULL or "": none). Errors, one
 * line naming the file and the entry: not JSON, a missing question, a chunk
 * file that cannot be read, ids outside the vocabulary, an empty chunk. */
int ra_request_load(struct ra_request *r, const char *path, const struct ra_vocab *v, const char *tmpl);
void ra_request_free(struct ra_request *r);

/* The parts on their own, for `runahead-chunks add`: the leading prefix for
 * system text SYSTEM (NULL: the template's default or none), and one chunk
 * text encoded as a request encodes it. Both malloc'ed. */
int ra_request_prefix(const struct ra_vocab *v, const char *tmpl, const char *system, int32_t **ids, int *n);
int ra_request_encode_chunk(const struct ra_vocab *v, const char *text, int32_t **ids, int *n);

#endif
