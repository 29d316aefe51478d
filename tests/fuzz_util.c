/* Helpers shared by the fuzz harnesses: see fuzz.h. */
#define _XOPEN_SOURCE 700
#include "fuzz.h"

#include "backend.h"
#include "forward.h"
#include "kvcache.h"
#include "model.h"
#include "safetensors.h"
#include "status.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "invariant: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (last error: %s)\n", ra_error_message());
    abort();
}

void fuzz_note(const char *fmt, ...)
{
    static int verbose = -1;
    va_list ap;
    if (verbose < 0)
        verbose = getenv("FUZZ_VERBOSE") && atoi(getenv("FUZZ_VERBOSE")) > 0;
    if (!verbose)
        return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

/* ------------------------------------------------------------------ scratch files */

static char scratch[4096];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_scratch(void)
{
    nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_dir(void)
{
    if (scratch[0])
        return scratch;
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(scratch, sizeof scratch, "%s/ra-fuzz.XXXXXX", base);
    if (!mkdtemp(scratch)) {
        perror(scratch);
        abort();
    }
    atexit(remove_scratch);
    return scratch;
}

const char *fuzz_write(const char *dir, const char *name, const void *data, size_t size)
{
    static char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

void fuzz_check_error(const char *where, const uint8_t *input, size_t size)
{
    const char *msg = ra_error_message();
    fuzz_note("  refused: %s", msg);
    if (strchr(msg, '\n') && !memchr(input, '\n', size))
        fuzz_fail("the error message is more than one line");
    if (!strstr(msg, where))
        fuzz_fail("the error message does not name %s", where);
}

/* ------------------------------------------------------------------ loaded models */

static int inside(const struct ra_mapped_file *f, const unsigned char *p, size_t bytes)
{
    return f->data && p >= f->data && bytes <= f->size && (size_t)(p - f->data) <= f->size - bytes;
}

static int owned(const struct ra_model *m, const void *p)
{
    for (int i = 0; i < m->n_owned; i++)
        if (m->owned[i] == p)
            return 1;
    return 0;
}

static void check_tensor(const struct ra_model *m, const struct ra_tensor *t, int64_t rows, int64_t cols,
                         const char *name)
{
    if (!t->data || t->rows != rows || t->cols != cols)
        fuzz_fail("tensor %s is missing or has shape [%lld, %lld], not [%lld, %lld]", name, (long long)t->rows,
                  (long long)t->cols, (long long)rows, (long long)cols);
    size_t bytes = (size_t)(rows * cols) * ra_dtype_size(t->dtype);
    int ok = owned(m, t->data);
    for (int i = 0; i < m->n_files && !ok; i++)
        ok = inside(&m->files[i], t->data, bytes);
    if (!ok)
        fuzz_fail("tensor %s (%zu bytes) is not inside a mapping or an owned buffer", name, bytes);
    const volatile unsigned char *p = t->data;
    unsigned sum = 0;
    for (size_t i = 0; i < bytes; i++)
        sum += p[i];
    (void)sum;
}

static void check_layer(const struct ra_model *m, const struct ra_layer_weights *w)
{
    const struct ra_config *c = &m->config;
    int64_t d = c->dim, q = (int64_t)c->n_heads * c->head_dim, kv = ra_config_kv_dim(c), h = c->hidden_dim;
    check_tensor(m, &w->attn_norm, 1, d, "attn_norm");
    check_tensor(m, &w->wq, q, d, "wq");
    check_tensor(m, &w->wk, kv, d, "wk");
    check_tensor(m, &w->wv, kv, d, "wv");
    check_tensor(m, &w->wo, d, q, "wo");
    check_tensor(m, &w->ffn_norm, 1, d, "ffn_norm");
    check_tensor(m, &w->w_gate, h, d, "w_gate");
    check_tensor(m, &w->w_down, d, h, "w_down");
    check_tensor(m, &w->w_up, h, d, "w_up");
}

/* Spans [0, n-1) and [n-1, n) with n = min(3, context): a prefill and a decode step. */
static void run_forward(struct ra_model *m)
{
    static struct ra_backend *be;
    const struct ra_config *c = &m->config;
    int n = c->seq_len < 3 ? c->seq_len : 3, first = n > 1 ? n - 1 : n;
    int32_t tokens[3] = { 1 % c->vocab_size, c->vocab_size - 1, 0 };
    float *logits = malloc(sizeof *logits * (size_t)c->vocab_size);
    struct ra_kvcache kv;
    struct ra_context cx;

    if (!be && ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 }) != RA_OK)
        fuzz_fail("no CPU backend");
    if (ra_context_init(&cx, m, be) != RA_OK || ra_kvcache_init(&kv, be, c->n_layers, ra_config_kv_dim(c), n) != RA_OK)
        fuzz_fail("cannot attach a model that loaded");
    if (ra_forward_span(&cx, tokens, 0, first, &kv, first == n ? logits : NULL) != RA_OK ||
        (first < n && ra_forward_span(&cx, tokens + first, first, n - first, &kv, logits) != RA_OK))
        fuzz_fail("a forward pass over a model that loaded failed");
    ra_kvcache_free(&kv);
    ra_context_free(&cx);
    free(logits);
}

void fuzz_check_model(struct ra_model *m)
{
    const struct ra_config *c = &m->config;
    if (ra_config_validate(c, "fuzz") != RA_OK)
        fuzz_fail("a model loaded with an invalid config");
    check_tensor(m, &m->weights.embed, c->vocab_size, c->dim, "embed");
    for (int l = 0; l < c->n_layers; l++)
        check_layer(m, &m->weights.layers[l]);
    check_tensor(m, &m->weights.final_norm, 1, c->dim, "final_norm");
    check_tensor(m, &m->weights.output, c->vocab_size, c->dim, "output");
    run_forward(m);
    fuzz_note("  accepted: dim %d, %d layers, %d/%d heads, vocabulary %d%s", c->dim, c->n_layers, c->n_heads,
              c->n_kv_heads, c->vocab_size, m->weights.tied ? ", tied" : "");
}

/* ------------------------------------------------------------------ a tiny HF model */

static const char tiny_config[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 8,\n"
    " \"intermediate_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,\n"
    " \"num_key_value_heads\": 1, \"vocab_size\": 8, \"max_position_embeddings\": 32,\n"
    " \"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false,\n"
    " \"hidden_act\": \"silu\"}\n";

#define L0 "model.layers.0."
/* The first shard ends after entry TINY_SPLIT. */
#define TINY_SPLIT 6
static const struct ra_st_write_entry tiny_tensors[] = {
    { "model.embed_tokens.weight", RA_DTYPE_F32, 2, { 8, 8 }, NULL },
    { L0 "input_layernorm.weight", RA_DTYPE_F32, 1, { 8 }, NULL },
    { L0 "self_attn.q_proj.weight", RA_DTYPE_F32, 2, { 8, 8 }, NULL },
    { L0 "self_attn.k_proj.weight", RA_DTYPE_F32, 2, { 4, 8 }, NULL },
    { L0 "self_attn.v_proj.weight", RA_DTYPE_F32, 2, { 4, 8 }, NULL },
    { L0 "self_attn.o_proj.weight", RA_DTYPE_F32, 2, { 8, 8 }, NULL },
    { L0 "post_attention_layernorm.weight", RA_DTYPE_F32, 1, { 8 }, NULL },
    { L0 "mlp.gate_proj.weight", RA_DTYPE_F32, 2, { 16, 8 }, NULL },
    { L0 "mlp.up_proj.weight", RA_DTYPE_F32, 2, { 16, 8 }, NULL },
    { L0 "mlp.down_proj.weight", RA_DTYPE_F32, 2, { 8, 16 }, NULL },
    { "model.norm.weight", RA_DTYPE_F32, 1, { 8 }, NULL },
    { "lm_head.weight", RA_DTYPE_F32, 2, { 8, 8 }, NULL },
};
#define TINY_N ((int)(sizeof tiny_tensors / sizeof tiny_tensors[0]))

static void write_weights(const char *dir, const char *name, int from, int to)
{
    static float values[128]; /* the largest tensor; the loader never looks at the values */
    struct ra_st_write_entry e[TINY_N];
    char path[8192];
    for (int i = from; i < to; i++) {
        e[i - from] = tiny_tensors[i];
        e[i - from].data = values;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (ra_safetensors_write(path, e, to - from) != RA_OK)
        fuzz_fail("cannot write the tiny model's %s", name);
}

void fuzz_write_tiny_hf(const char *dir, int config, int sharded)
{
    if (config)
        fuzz_write(dir, "config.json", tiny_config, sizeof tiny_config - 1);
    if (!sharded) {
        write_weights(dir, "model.safetensors", 0, TINY_N);
        return;
    }
    write_weights(dir, "model-00001-of-00002.safetensors", 0, TINY_SPLIT);
    write_weights(dir, "model-00002-of-00002.safetensors", TINY_SPLIT, TINY_N);
}
