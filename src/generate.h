/* Decoding after the prompt: one span of length 1 per token. */
#ifndef RA_GENERATE_H
#define RA_GENERATE_H

#include <stdint.h>

#include "forward.h"
#include "sampler.h"

/* Called with each new token; a non-zero return stops generation. */
struct ra_offload;

typedef int (*ra_token_fn)(void *ctx, int token);

struct ra_generate {
    int max_tokens;
    int eos_id;          /* stop after this token; -1 = never stop early */
    ra_token_fn on_token;
    void *ctx;
    /* The span that produced the prompt's logits: this process's slice
     * [prompt_start, n_prompt) of prompt (the last rank's, on several). Lets a
     * non-finite logit be traced to its layer and position; NULL: not traced. */
    const int32_t *prompt;
    int prompt_start;
    /* Decode from a host KV pool (src/offload/offload.h): once the prompt's
     * logits are checked, ra_generate_run moves the cache's rows into the pool
     * (ra_offload_begin) and releases the cache (ra_kvcache_free: freeing it
     * again is harmless), so the device holds only the offload's working set.
     * NULL: decode from the cache in place (--offload none). */
    struct ra_offload *offload;
};

/* The KV cache holds rows [0, n_prompt) and `logits` are the prompt's last
 * logits (host, modified). Writes up to g->max_tokens ids to out, *n_out.
 * Logits that are not finite stop it with an error (ra_forward_check_logits)
 * rather than be sampled: greedy decoding of NaN gives token 0 forever. */
int ra_generate_run(struct ra_context *ctx, struct ra_kvcache *kv, int n_prompt, float *logits,
                    struct ra_sampler *s, const struct ra_generate *g, int32_t *out, int *n_out);

#endif
