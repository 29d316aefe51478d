/* Run contexts and their hook lists: see context.h. */
#include "context.h"
#include "backend.h"
#include "quant/quant.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>

/* The context's tensors, each once (a tied classifier is the embedding), and
 * whether a matmul reads each (the rest: the embedding table, norm vectors). */
static int weight_list(struct ra_context *ctx, struct ra_tensor **list, int *matmul)
{
    struct ra_weights *w = &ctx->weights;
    const int tied = w->output.data == w->embed.data;
    int k = 0;
    matmul[k] = tied;
    list[k++] = &w->embed;
    for (int l = 0; w->layers && l < ctx->model->config.n_layers; l++) {
        struct ra_layer_weights *lw = &w->layers[l];
        struct ra_tensor *t[] = { &lw->attn_norm, &lw->wq, &lw->wk, &lw->wv, &lw->wo,
                                  &lw->ffn_norm, &lw->w_gate, &lw->w_down, &lw->w_up };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            matmul[k] = t[i]->rows > 1;
            list[k++] = t[i];
        }
    }
    matmul[k] = 0;
    list[k++] = &w->final_norm;
    if (!tied) {
        matmul[k] = 1;
        list[k++] = &w->output;
    }
    return k;
}

/* Applies the backend's weight_prepare (RELEASE 0) or weight_release to every tensor. */
static int weights_each(struct ra_context *ctx, int release)
{
    struct ra_backend *be = ctx->backend;
    const size_t most = 3 + 9 * (size_t)ctx->model->config.n_layers;
    struct ra_tensor **list = malloc(sizeof *list * most);
    int *matmul = malloc(sizeof *matmul * most);
    int rc = RA_OK;
    if (!list || !matmul) {
        rc = ra_error_set(RA_ENOMEM, "context: out of memory");
        goto out;
    }
    const int k = weight_list(ctx, list, matmul);
    for (int i = 0; i < k && rc == RA_OK; i++) {
        if (!release)
            rc = be->ops->weight_prepare(be, list[i], matmul[i]);
        else if (list[i]->device)
            be->ops->weight_release(be, list[i]);
    }
    /* a tied classifier reads the embedding's copy (released with it) */
    if (ctx->weights.output.data == ctx->weights.embed.data)
        ctx->weights.output.device = release ? NULL : ctx->weights.embed.device;
out:
    free(list);
    free(matmul);
    return rc;
}

/* T's f32 values in a buffer the context owns, where BE has no kernel for
 * T's block format (OP: RA_OP_MATMUL, or RA_OP_EMBED for the table). */
static int widen_unsupported(struct ra_context *ctx, struct ra_tensor *t, enum ra_op op)
{
    if (!ra_dtype_is_quant(t->dtype) || ra_backend_supports(ctx->backend, op, t->dtype))
        return RA_OK;
    void **list = realloc(ctx->widened, sizeof *list * (size_t)(ctx->n_widened + 1));
    if (!list)
        return ra_error_set(RA_ENOMEM, "context: out of memory");
    ctx->widened = list;
    const int64_t n = t->rows * t->cols;
    float *f = malloc(sizeof *f * (size_t)n);
    if (!f)
        return ra_error_set(RA_ENOMEM, "context: no memory for an f32 copy of a %lld x %lld %s weight (the %s backend "
                            "does not compute on %s)", (long long)t->rows, (long long)t->cols, ra_dtype_name(t->dtype),
                            ctx->backend->ops->name, ra_dtype_name(t->dtype));
    ctx->widened[ctx->n_widened++] = f;
    const int rc = ra_quant_dequantize(t->dtype, t->data, f, n);
    t->data = f;
    t->dtype = RA_DTYPE_F32;
    return rc;
}

/* Every matrix through widen_unsupported; a tied classifier is the table. */
static int widen_weights(struct ra_context *ctx)
{
    struct ra_weights *w = &ctx->weights;
    const int tied = w->output.data == w->embed.data;
    int rc = widen_unsupported(ctx, &w->embed, RA_OP_EMBED);
    if (rc == RA_OK && tied)
        rc = widen_unsupported(ctx, &w->embed, RA_OP_MATMUL);
    for (int l = 0; rc == RA_OK && w->layers && l < ctx->model->config.n_layers; l++) {
        struct ra_layer_weights *lw = &w->layers[l];
        struct ra_tensor *t[] = { &lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_down, &lw->w_up };
        for (size_t i = 0; i < sizeof t / sizeof t[0] && rc == RA_OK; i++)
            rc = widen_unsupported(ctx, t[i], RA_OP_MATMUL);
    }
    if (rc == RA_OK && !tied)
        rc = widen_unsupported(ctx, &w->output, RA_OP_MATMUL);
    if (tied)
        w->output = w->embed;
    return rc;
}

static void widened_free(struct ra_context *ctx)
{
    for (int i = 0; i < ctx->n_widened; i++)
        free(ctx->widened[i]);
    free(ctx->widened);
}

int ra_context_init(struct ra_context *ctx, const struct ra_model *model, struct ra_backend *be)
{
    memset(ctx, 0, sizeof *ctx);
    if (!model || !be)
        return ra_error_set(RA_EINVAL, "context: no model or no backend");
    const int L = model->config.n_layers;
    ctx->model = model;
    ctx->backend = be;
    ctx->weights = model->weights;
    ctx->weights.layers = NULL;
    if (L > 0 && model->weights.layers) {
        if (!(ctx->weights.layers = malloc(sizeof *ctx->weights.layers * (size_t)L)))
            return ra_error_set(RA_ENOMEM, "context: out of memory");
        memcpy(ctx->weights.layers, model->weights.layers, sizeof *ctx->weights.layers * (size_t)L);
    }
    int rc = widen_weights(ctx);
    if (rc == RA_OK && be->ops->weight_prepare)
        rc = weights_each(ctx, 0);
    if (rc != RA_OK) {
        if (be->ops->weight_prepare)
            weights_each(ctx, 1);
        widened_free(ctx);
        free(ctx->weights.layers);
        memset(ctx, 0, sizeof *ctx);
    }
    return rc;
}

void ra_context_free(struct ra_context *ctx)
{
    if (!ctx || !ctx->backend) {
        if (ctx)
            memset(ctx, 0, sizeof *ctx);
        return;
    }
    if (ctx->backend->ops->weight_release)
        weights_each(ctx, 1);
    ra_workspace_free(ctx->backend, ctx->ws);
    widened_free(ctx);
    free(ctx->weights.layers);
    memset(ctx, 0, sizeof *ctx);
}

int ra_context_hook_add(struct ra_context *ctx, const struct ra_hook *hook)
{
    for (int i = 0; i < ctx->n_hooks; i++)
        if (ctx->hooks[i] == hook)
            return ra_error_set(RA_EINVAL, "context: the hook is already in the list");
    if (ctx->n_hooks == RA_CONTEXT_MAX_HOOKS)
        return ra_error_set(RA_ERANGE, "context: more than %d hooks", RA_CONTEXT_MAX_HOOKS);
    ctx->hooks[ctx->n_hooks++] = hook;
    return RA_OK;
}

void ra_context_hook_remove(struct ra_context *ctx, const struct ra_hook *hook)
{
    for (int i = 0; i < ctx->n_hooks; i++)
        if (ctx->hooks[i] == hook) {
            memmove(&ctx->hooks[i], &ctx->hooks[i + 1], sizeof ctx->hooks[0] * (size_t)(ctx->n_hooks - i - 1));
            ctx->n_hooks--;
            return;
        }
}
