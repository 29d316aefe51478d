#include "generate.h"
#include "status.h"
#include "offload/offload.h"

int ra_generate_run(struct ra_context *ctx, struct ra_kvcache *kv, int n_prompt, float *logits,
                    struct ra_sampler *s, const struct ra_generate *g, int32_t *out, int *n_out)
{
    int rc = RA_OK;
    *n_out = 0;
    if (g->max_tokens > 0 && n_prompt + g->max_tokens - 1 > ctx->model->config.seq_len)
        return ra_error_set(RA_ERANGE, "prompt (%d tokens) plus %d generated tokens exceed the model's context of %d",
                            n_prompt, g->max_tokens, ctx->model->config.seq_len);
    for (int i = 0; i < g->max_tokens; i++) {
        /* the span that produced these logits: the prompt's slice, then each generated token */
        const int32_t *span = i ? (g->offload ? NULL : &out[i - 1]) : g->prompt ? g->prompt + g->prompt_start : NULL;
        const int start = i ? n_prompt + i - 1 : g->prompt_start, n = i ? 1 : n_prompt - g->prompt_start;
        if ((rc = ra_forward_check_logits(ctx, span, start, n, kv, logits)) != RA_OK)
            break;
        if (i == 0 && g->offload) { /* the prompt's rows move to the host pool; the device keeps only its budget */
            if ((rc = ra_offload_begin(g->offload, kv, n_prompt)) != RA_OK)
                break;
            ra_kvcache_free(kv);
        }
        const int32_t token = ra_sampler_sample(s, logits);
        out[(*n_out)++] = token;
        if ((g->on_token && g->on_token(g->ctx, token)) || token == g->eos_id || i + 1 == g->max_tokens)
            break;
        rc = g->offload ? ra_offload_step(g->offload, token, n_prompt + i, logits)
                        : ra_forward_span(ctx, &token, n_prompt + i, 1, kv, logits);
        if (rc != RA_OK)
            break;
    }
    return rc;
}
