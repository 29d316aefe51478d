/* Chat prompts: a conversation rendered with a model's chat template.
 *
 * runahead does not run Jinja: it recognises the template's family by
 * substrings (as llama.cpp's llama-chat.cpp does) and writes what that
 * family's template renders, with the generation prompt appended:
 *   ChatML   "<|im_start|>" (SmolLM2, Qwen): <|im_start|>ROLE\nCONTENT<|im_end|>\n
 *            per message, then <|im_start|>assistant\n. Where the template
 *            holds a default system message ('<|im_start|>system\nTEXT<|im_end|>'
 *            written out in one string literal, as SmolLM2's and Qwen2's do), it
 *            comes first when the first message is not a system message.
 *   Llama 2  "[INST]" and "<<SYS>>" (Llama-2-*-chat): BOS [INST] CONTENT [/INST]
 *            per user message, " CONTENT EOS" per assistant message, a leading
 *            system message as <<SYS>>\nTEXT\n<</SYS>>\n\n before the first
 *            user content; contents stripped; roles must alternate
 *            user/assistant (the template raises an error otherwise). It has
 *            no generation prompt.
 *   Llama 3  "<|start_header_id|>" and "<|end_header_id|>" (Meta-Llama-3-*-Instruct;
 *            not 3.1's, which adds dates and tools: "Cutting Knowledge" makes it
 *            unknown): BOS first, <|start_header_id|>ROLE<|end_header_id|>\n\n
 *            CONTENT (trimmed) <|eot_id|> per message, then the assistant header.
 * Stripping and trimming remove ASCII whitespace (and U+001C..U+001F), not
 * the other Unicode spaces Python's str.strip() also removes.
 * Anything else is an unknown template: one error naming its start. */
#ifndef RA_CHAT_H
#define RA_CHAT_H

#include <stddef.h>

enum ra_chat_format { RA_CHAT_UNKNOWN, RA_CHAT_CHATML, RA_CHAT_LLAMA2, RA_CHAT_LLAMA3 };

struct ra_chat_message {
    char *role, *content;
};

struct ra_chat {
    struct ra_chat_message *messages;
    int n, cap;
};

/* Appends a message (both strings copied). */
int ra_chat_add(struct ra_chat *c, const char *role, const char *content);

/* Appends the messages of a JSON file holding an array of
 * {"role": "...", "content": "..."} objects (at least one). Anything else is
 * one error line naming the file and the entry. */
int ra_chat_load_json(struct ra_chat *c, const char *path);

void ra_chat_free(struct ra_chat *c);

/* The family of template TMPL, or RA_CHAT_UNKNOWN. */
enum ra_chat_format ra_chat_detect(const char *tmpl);

/* Renders C with template TMPL (from SOURCE, named in errors) and the
 * generation prompt into a malloc'ed string. BOS and EOS are the texts of
 * the vocabulary's BOS and EOS tokens (Llama 2 and 3 write them). Errors: an
 * unknown template (its first 60 characters), no messages, Llama 2's roles
 * out of turn. */
int ra_chat_render(const char *tmpl, const char *source, const struct ra_chat *c, const char *bos, const char *eos,
                   char **out);

#endif
