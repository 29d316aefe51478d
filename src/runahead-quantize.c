/* runahead-quantize: any model runahead loads (a Hugging Face directory, a
 * llama2.c checkpoint, a GGUF file) to a block-quantized GGUF file that
 * llama.cpp loads too: llama.cpp's tensor names and llama.* metadata, its
 * vocabulary arrays (copied from a GGUF, or built from a tokenizer.json or a
 * llama2.c tokenizer.bin), q/k rows in Meta's adjacent-pair layout, and weights
 * quantized as llama-quantize's reference quantizers do (ra_quant_quantize).
 *
 * Types: q8_0 and q4_0 quantize every matrix (the embedding too); q4_k_m is
 * llama.cpp's mix: Q6_K for the classifier (or the embedding it is tied to)
 * and for attn_v and ffn_down of the layers use_more_bits picks, Q4_K for the
 * rest. A matrix whose rows are not whole 256-element super-blocks falls back
 * to Q4_1 for Q4_K and Q8_0 for Q6_K (llama.cpp falls back to Q5_0, which
 * runahead does not compute on). Norms stay f32. A matrix whose rows are not
 * whole 32-element blocks is refused, or written f16 with --f16-fallback (as
 * llama-quantize does).
 *
 * The output is written to a temporary file beside OUT and renamed when
 * complete (outfile.h): a failure leaves no partial file. */
#include "config.h"
#include "args.h"
#include "gguf.h"
#include "gguf_write.h"
#include "half.h"
#include "model.h"
#include "outfile.h"
#include "quant/quant.h"
#include "status.h"
#include "tokenizer.h"
#include "vocab.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "runahead-quantize"
#define PROGRESS_BYTES (256ull << 20) /* larger outputs report progress */

/* llama.cpp's llama_ftype values for general.file_type. */
enum { FTYPE_Q4_0 = 2, FTYPE_Q8_0 = 7, FTYPE_Q4_K_M = 15 };

enum qtype { QT_Q8_0, QT_Q4_0, QT_Q4_K_M };

struct options {
    const char *in, *out, *tokenizer;
    enum qtype type;
    int no_vocab, quiet, f16_fallback;
};

/* One tensor of the output. */
struct item {
    char name[96];
    const struct ra_tensor *src; /* NULL: rope_freqs, from the config */
    int64_t rows, cols;          /* rows == 1 && vector: a 1-D tensor */
    int vector;
    int perm_heads;              /* > 0: q/k rows of that many heads, rotate-half to adjacent pairs */
    enum ra_dtype type;          /* f32 or a block format */
};

struct job {
    const struct options *o;
    struct ra_model m;
    struct item *items;
    int n_items;
    uint64_t out_bytes;
};

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: " PROG " IN OUT --type q8_0|q4_0|q4_k_m [--tokenizer FILE | --no-vocab]\n"
            "       [--f16-fallback] [--quiet]\n"
            "\n"
            "Writes the model IN (a Hugging Face directory, a llama2.c checkpoint or a GGUF file:\n"
            "anything runahead loads) as a block-quantized GGUF file OUT that runahead and\n"
            "llama.cpp both load: llama.cpp's tensor names, llama.* metadata (shape, RoPE, norm\n"
            "epsilon) and vocabulary, and q/k rows in the adjacent-pair RoPE layout GGUF llama\n"
            "files use (a Hugging Face input's rotate-half rows are permuted as llama.cpp's\n"
            "converter does). Weights are quantized by llama-quantize's reference quantizers\n"
            "(no importance matrix): each tensor holds the bytes llama-quantize writes for its\n"
            "type. A quantized IN is dequantized first, so requantizing adds to its error.\n"
            "\n"
            "  --type T         q8_0: every matrix Q8_0 (the embedding too); norms stay f32\n"
            "                   q4_0: every matrix Q4_0\n"
            "                   q4_k_m: llama.cpp's mix: Q6_K for the classifier (or the\n"
            "                   embedding it is tied to) and for attn_v and ffn_down of the\n"
            "                   layers llama.cpp's use_more_bits picks (the first and last\n"
            "                   eighth, every third between), Q4_K for the rest. A matrix whose\n"
            "                   rows are not multiples of 256 (SmolLM2-135M: 576) falls back to\n"
            "                   Q4_1 for Q4_K and Q8_0 for Q6_K (llama.cpp takes Q5_0, which\n"
            "                   runahead does not compute on).\n"
            "                   Rows must be multiples of 32 for every type.\n"
            "  --f16-fallback   write a matrix whose rows are not multiples of 32 as f16, as\n"
            "                   llama-quantize does (stories260K's FFN of 172), instead of refusing\n"
            "  --tokenizer FILE the vocabulary to write: a GGUF file (its tokenizer.* keys are\n"
            "                   copied), a Hugging Face tokenizer.json (byte-level BPE, with the\n"
            "                   tokenizer_config.json beside it: BOS, EOS, chat template) or a\n"
            "                   llama2.c tokenizer.bin (SentencePiece). Default: IN's own (a\n"
            "                   GGUF's tokenizer.* keys, tokenizer.json or tokenizer.bin beside IN)\n"
            "  --no-vocab       write no vocabulary (runahead runs the file on token ids;\n"
            "                   llama.cpp needs a vocabulary to load it)\n"
            "  --quiet          no summary line and no progress\n"
            "  --help, --version\n"
            "\n"
            "One summary line on stderr names the types used; larger models report progress.\n"
            "OUT is written to a temporary file beside it and renamed when complete.\n");
}

#define usage_error(...) ra_arg_usage_error(PROG, __VA_ARGS__)

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longs[] = {
        { "type", required_argument, NULL, 't' }, { "tokenizer", required_argument, NULL, 'k' },
        { "no-vocab", no_argument, NULL, 'n' },   { "quiet", no_argument, NULL, 'q' },
        { "f16-fallback", no_argument, NULL, 'f' },
        { "help", no_argument, NULL, 'h' },       { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    const char *type = NULL;
    int c;
    memset(o, 0, sizeof *o);
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 't': type = optarg; break;
        case 'k': o->tokenizer = optarg; break;
        case 'n': o->no_vocab = 1; break;
        case 'q': o->quiet = 1; break;
        case 'f': o->f16_fallback = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': ra_print_version(PROG); return 0;
        default: return usage_error("unknown option or missing value: %s", argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return usage_error("give IN and OUT (%d arguments given)", argc - optind);
    o->in = argv[optind];
    o->out = argv[optind + 1];
    if (!type)
        return usage_error("--type is required: q8_0, q4_0 or q4_k_m");
    if (!strcmp(type, "q8_0"))
        o->type = QT_Q8_0;
    else if (!strcmp(type, "q4_0"))
        o->type = QT_Q4_0;
    else if (!strcmp(type, "q4_k_m"))
        o->type = QT_Q4_K_M;
    else
        return usage_error("--type: '%s' is not q8_0, q4_0 or q4_k_m", type);
    if (o->no_vocab && o->tokenizer)
        return usage_error("--tokenizer and --no-vocab exclude each other");
    return -1;
}

/* ------------------------------------------------------------------ the plan */

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between. */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The type of a matrix of COLS columns: WANT_K6 asks for Q6_K under q4_k_m. */
static enum ra_dtype matrix_type(const struct options *o, int64_t cols, int want_k6)
{
    if (o->type == QT_Q8_0)
        return RA_DTYPE_Q8_0;
    if (o->type == QT_Q4_0)
        return RA_DTYPE_Q4_0;
    if (cols % RA_QK_K != 0)
        return want_k6 ? RA_DTYPE_Q8_0 : RA_DTYPE_Q4_1;
    return want_k6 ? RA_DTYPE_Q6_K : RA_DTYPE_Q4_K;
}

static int add_item(struct job *J, const char *name, const struct ra_tensor *t, int vector, int perm_heads,
                    int want_k6)
{
    struct item *it = &J->items[J->n_items++];
    memset(it, 0, sizeof *it);
    snprintf(it->name, sizeof it->name, "%s", name);
    it->src = t;
    it->rows = t ? t->rows : 1;
    it->cols = t ? t->cols : J->m.config.head_dim / 2;
    it->vector = vector;
    it->perm_heads = perm_heads;
    it->type = vector ? RA_DTYPE_F32 : matrix_type(J->o, it->cols, want_k6);
    if (!vector && it->cols % RA_QK != 0) {
        if (!J->o->f16_fallback)
            return ra_error_set(RA_EUNSUPPORTED, "%s: tensor %s has rows of %lld values, not whole blocks of %d: "
                                "give --f16-fallback to write such matrices f16", J->o->in, name,
                                (long long)it->cols, RA_QK);
        it->type = RA_DTYPE_F16;
    }
    J->out_bytes += ra_dtype_row_bytes(it->type, it->cols) * (uint64_t)it->rows;
    return RA_OK;
}

static int plan_layer(struct job *J, int i)
{
    const struct ra_config *c = &J->m.config;
    const struct ra_layer_weights *w = &J->m.weights.layers[i];
    /* rotate-half rows go back to Meta's pairs, as llama.cpp's converter writes llama files */
    const int hf = c->rope_style == RA_ROPE_HALF;
    const int more = J->o->type == QT_Q4_K_M && more_bits(i, c->n_layers);
    const struct {
        const char *what;
        const struct ra_tensor *t;
        int vector, perm_heads, k6;
    } parts[] = {
        { "attn_norm", &w->attn_norm, 1, 0, 0 },  { "attn_q", &w->wq, 0, hf ? c->n_heads : 0, 0 },
        { "attn_k", &w->wk, 0, hf ? c->n_kv_heads : 0, 0 }, { "attn_v", &w->wv, 0, 0, more },
        { "attn_output", &w->wo, 0, 0, 0 },       { "ffn_norm", &w->ffn_norm, 1, 0, 0 },
        { "ffn_gate", &w->w_gate, 0, 0, 0 },      { "ffn_down", &w->w_down, 0, 0, more },
        { "ffn_up", &w->w_up, 0, 0, 0 },
    };
    char name[96];
    int rc;
    for (size_t p = 0; p < sizeof parts / sizeof *parts; p++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", i, parts[p].what);
        if ((rc = add_item(J, name, parts[p].t, parts[p].vector, parts[p].perm_heads, parts[p].k6)) != RA_OK)
            return rc;
    }
    return RA_OK;
}

static int plan(struct job *J)
{
    const struct ra_model *m = &J->m;
    int rc;
    J->items = calloc((size_t)m->config.n_layers * 9 + 4, sizeof *J->items);
    if (!J->items)
        return ra_error_set(RA_ENOMEM, "out of memory");
    /* a tied embedding is the classifier too: it takes the classifier's type */
    if ((rc = add_item(J, "token_embd.weight", &m->weights.embed, 0, 0, m->weights.tied)) != RA_OK ||
        (rc = add_item(J, "output_norm.weight", &m->weights.final_norm, 1, 0, 0)) != RA_OK)
        return rc;
    if (!m->weights.tied && (rc = add_item(J, "output.weight", &m->weights.output, 0, 0, 1)) != RA_OK)
        return rc;
    if (m->config.rope_scaled && m->config.rope_scaled != RA_ROPE_LINEAR &&
        (rc = add_item(J, "rope_freqs.weight", NULL, 1, 0, 0)) != RA_OK)
        return rc;
    for (int i = 0; i < m->config.n_layers; i++)
        if ((rc = plan_layer(J, i)) != RA_OK)
            return rc;
    return RA_OK;
}

/* ------------------------------------------------------------------ metadata */

static int write_config(struct ra_gguf_writer *w, const struct job *J)
{
    const struct ra_config *c = &J->m.config;
    const char *base = strrchr(J->o->in, '/');
    static const uint32_t ftype[] = { [QT_Q8_0] = FTYPE_Q8_0, [QT_Q4_0] = FTYPE_Q4_0, [QT_Q4_K_M] = FTYPE_Q4_K_M };
    int rc;
    if ((rc = ra_gguf_writer_str(w, "general.architecture", "llama")) != RA_OK ||
        (rc = ra_gguf_writer_str(w, "general.name", base && base[1] ? base + 1 : J->o->in)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "general.file_type", ftype[J->o->type])) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "general.quantization_version", 2)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "llama.context_length", (uint32_t)c->seq_len)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "llama.embedding_length", (uint32_t)c->dim)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "llama.block_count", (uint32_t)c->n_layers)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads)) != RA_OK ||
        (rc = ra_gguf_writer_f32(w, "llama.attention.layer_norm_rms_epsilon", c->norm_eps)) != RA_OK ||
        (rc = ra_gguf_writer_f32(w, "llama.rope.freq_base", c->rope_theta)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size)) != RA_OK)
        return rc;
    if (c->rope_scaled != RA_ROPE_LINEAR) /* other scalings travel as rope_freqs.weight */
        return RA_OK;
    if ((rc = ra_gguf_writer_str(w, "llama.rope.scaling.type", "linear")) != RA_OK)
        return rc;
    return ra_gguf_writer_f32(w, "llama.rope.scaling.factor", c->rope_factors[0]);
}

/* Every tokenizer.* entry of the GGUF file PATH. */
static int vocab_from_gguf(struct ra_gguf_writer *w, const char *path, int vocab_size)
{
    struct ra_gguf g;
    enum ra_gguf_type et;
    uint64_t n = 0;
    int rc = ra_gguf_open(&g, path);
    if (rc != RA_OK)
        return rc;
    if (!ra_gguf_find_kv(&g, "tokenizer.ggml.tokens") ||
        (rc = ra_gguf_get_arr(&g, "tokenizer.ggml.tokens", &et, &n)) != RA_OK || n != (uint64_t)vocab_size) {
        rc = ra_error_set(RA_EFORMAT, "%s: its vocabulary (tokenizer.ggml.tokens) has %llu tokens, the model %d",
                          path, (unsigned long long)n, vocab_size);
        goto out;
    }
    for (int64_t i = 0; i < g.n_kvs && rc == RA_OK; i++)
        if (!strncmp(g.kvs[i].key, "tokenizer.", 10))
            rc = ra_gguf_writer_copy(w, &g, &g.kvs[i]);
out:
    ra_gguf_close(&g);
    return rc;
}

/* A llama2.c tokenizer.bin as GGUF's SentencePiece arrays: spaces as U+2581,
 * its "\n<s>\n" control pieces as "<s>", byte pieces typed as bytes. */
static int vocab_from_spm(struct ra_gguf_writer *w, const char *path, int vocab_size)
{
    struct ra_tokenizer t;
    char **texts = NULL;
    int32_t *types = NULL;
    int rc = ra_tokenizer_load(&t, path, vocab_size);
    if (rc != RA_OK)
        return rc;
    texts = calloc((size_t)vocab_size, sizeof *texts);
    types = calloc((size_t)vocab_size, sizeof *types);
    if (!texts || !types) {
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < vocab_size; i++) {
        const char *p = t.pieces[i];
        size_t len = (size_t)t.piece_lens[i], o = 0;
        const int control = i == t.bos_id || i == t.eos_id;
        if (control && len >= 2 && p[0] == '\n' && p[len - 1] == '\n')
            p++, len -= 2;
        if (!(texts[i] = malloc(3 * len + 1))) {
            rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
            goto out;
        }
        for (size_t j = 0; j < len; j++)
            o += p[j] == ' ' ? (size_t)sprintf(texts[i] + o, "\xe2\x96\x81") : (texts[i][o] = p[j], 1);
        texts[i][o] = 0;
        types[i] = i == t.unk_id ? RA_TOKEN_UNKNOWN : control ? RA_TOKEN_CONTROL : RA_TOKEN_NORMAL;
    }
    for (int b = 0; b < 256; b++)
        if (t.byte_tokens[b] >= 0)
            types[t.byte_tokens[b]] = RA_TOKEN_BYTE;
    if ((rc = ra_gguf_writer_str(w, "tokenizer.ggml.model", "llama")) != RA_OK ||
        (rc = ra_gguf_writer_str(w, "tokenizer.ggml.pre", "default")) != RA_OK ||
        (rc = ra_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts, NULL,
                                     (uint64_t)vocab_size)) != RA_OK ||
        (rc = ra_gguf_writer_arr(w, "tokenizer.ggml.scores", RA_GGUF_F32, t.scores, (uint64_t)vocab_size)) != RA_OK ||
        (rc = ra_gguf_writer_arr(w, "tokenizer.ggml.token_type", RA_GGUF_I32, types, (uint64_t)vocab_size)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t.unk_id)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t.bos_id)) != RA_OK ||
        (rc = ra_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t.eos_id)) != RA_OK ||
        (rc = ra_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", 1)) != RA_OK)
        goto out;
    rc = ra_gguf_writer_bool(w, "tokenizer.ggml.add_eos_token", 0);
out:
    for (int i = 0; texts && i < vocab_size; i++)
        free(texts[i]);
    free(texts);
    free(types);
    ra_tokenizer_free(&t);
    return rc;
}

/* ------------------------------------------------------------------ tokenizer.json */

/* GGUF's byte-level BPE arrays from a Hugging Face tokenizer.json, as
 * llama.cpp's converter writes them: tokens by id ([PADn], unused, where the
 * model has ids the tokenizer lacks), added tokens CONTROL when special and
 * USER_DEFINED otherwise, merges as "left right". */
struct bpe_arrays {
    const char **tokens;
    int32_t *types;
    char **merges;
    uint64_t n_merges;
    char **pads;
};

static int bpe_tokens(struct bpe_arrays *A, json_t *root, const char *path, int vocab_size)
{
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab"), *added = json_object_get(root, "added_tokens");
    const char *key;
    json_t *val;
    if (!json_is_object(vocab))
        return ra_error_set(RA_EFORMAT, "%s: model.vocab is not an object", path);
    json_object_foreach(vocab, key, val) {
        const json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= vocab_size)
            return ra_error_set(RA_EFORMAT, "%s: token %s has id %lld, outside the model's %d", path, ra_esc(key),
                                (long long)id, vocab_size);
        A->tokens[id] = key, A->types[id] = RA_TOKEN_NORMAL;
    }
    for (size_t i = 0; json_is_array(added) && i < json_array_size(added); i++) {
        json_t *t = json_array_get(added, i), *id = json_object_get(t, "id");
        const char *content = json_string_value(json_object_get(t, "content"));
        if (!json_is_integer(id) || !content || json_integer_value(id) < 0 || json_integer_value(id) >= vocab_size)
            return ra_error_set(RA_EFORMAT, "%s: added_tokens[%zu] has no id inside the model's %d or no content", path,
                                i, vocab_size);
        A->tokens[json_integer_value(id)] = content;
        A->types[json_integer_value(id)] = json_is_true(json_object_get(t, "special")) ? RA_TOKEN_CONTROL
                                                                                      : RA_TOKEN_USER_DEFINED;
    }
    for (int i = 0; i < vocab_size; i++) {
        if (A->tokens[i])
            continue;
        if (!(A->pads[i] = malloc(24)))
            return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
        snprintf(A->pads[i], 24, "[PAD%d]", i);
        A->tokens[i] = A->pads[i], A->types[i] = RA_TOKEN_UNUSED;
    }
    return RA_OK;
}

static int bpe_merges(struct bpe_arrays *A, json_t *root, const char *path)
{
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    if (!json_is_array(merges))
        return ra_error_set(RA_EFORMAT, "%s: model.merges is not an array", path);
    A->n_merges = json_array_size(merges);
    if (!(A->merges = calloc(A->n_merges ? A->n_merges : 1, sizeof *A->merges)))
        return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < A->n_merges; i++) {
        json_t *m = json_array_get(merges, i);
        const char *one = json_string_value(m), *l = json_string_value(json_array_get(m, 0)),
                   *r = json_string_value(json_array_get(m, 1));
        if (!one && (!l || !r))
            return ra_error_set(RA_EFORMAT, "%s: model.merges[%zu] is neither \"a b\" nor [a, b]", path, i);
        const size_t len = one ? strlen(one) + 1 : strlen(l) + strlen(r) + 2;
        if (!(A->merges[i] = malloc(len)))
            return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
        if (one)
            memcpy(A->merges[i], one, len);
        else
            snprintf(A->merges[i], len, "%s %s", l, r);
    }
    return RA_OK;
}

static int bpe_keys(struct ra_gguf_writer *w, const struct ra_vocab *v, const struct bpe_arrays *A, int n)
{
    int rc;
    if ((rc = ra_gguf_writer_str(w, "tokenizer.ggml.model", "gpt2")) != RA_OK ||
        (rc = ra_gguf_writer_str(w, "tokenizer.ggml.pre", v->bpe.pre)) != RA_OK ||
        (rc = ra_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", A->tokens, NULL, (uint64_t)n)) != RA_OK ||
        (rc = ra_gguf_writer_arr(w, "tokenizer.ggml.token_type", RA_GGUF_I32, A->types, (uint64_t)n)) != RA_OK ||
        (rc = ra_gguf_writer_arr_str(w, "tokenizer.ggml.merges", (const char *const *)A->merges, NULL,
                                     A->n_merges)) != RA_OK)
        return rc;
    if (v->bos_id >= 0 && (rc = ra_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos_id)) != RA_OK)
        return rc;
    if (v->eos_id >= 0 && (rc = ra_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos_id)) != RA_OK)
        return rc;
    if ((rc = ra_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos)) != RA_OK ||
        (rc = ra_gguf_writer_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos)) != RA_OK)
        return rc;
    return v->chat_template ? ra_gguf_writer_str(w, "tokenizer.chat_template", v->chat_template) : RA_OK;
}

/* The vocabulary of a tokenizer.json (and the tokenizer_config.json beside
 * it), checked first by loading it as runahead does: what it cannot encode
 * is refused here too. */
static int vocab_from_json(struct ra_gguf_writer *w, const char *path, int vocab_size)
{
    struct ra_vocab v;
    struct bpe_arrays A = { 0 };
    json_error_t jerr;
    json_t *root = NULL;
    int rc = ra_vocab_load(&v, path);
    if (rc != RA_OK)
        return rc;
    if (v.kind != RA_VOCAB_BPE) {
        rc = ra_error_set(RA_EUNSUPPORTED, "%s: not a byte-level BPE vocabulary", path);
        goto out;
    }
    if (!(root = json_load_file(path, 0, &jerr))) {
        rc = ra_error_set(RA_EFORMAT, "%s: %s", path, jerr.text);
        goto out;
    }
    A.tokens = calloc((size_t)vocab_size, sizeof *A.tokens);
    A.types = calloc((size_t)vocab_size, sizeof *A.types);
    A.pads = calloc((size_t)vocab_size, sizeof *A.pads);
    if (!A.tokens || !A.types || !A.pads)
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    if (rc == RA_OK && (rc = bpe_tokens(&A, root, path, vocab_size)) == RA_OK &&
        (rc = bpe_merges(&A, root, path)) == RA_OK)
        rc = bpe_keys(w, &v, &A, vocab_size);
out:
    for (uint64_t i = 0; A.merges && i < A.n_merges; i++)
        free(A.merges[i]);
    for (int i = 0; A.pads && i < vocab_size; i++)
        free(A.pads[i]);
    free(A.merges);
    free(A.pads);
    free(A.tokens);
    free(A.types);
    json_decref(root);
    ra_vocab_free(&v);
    return rc;
}

static int is_gguf(const char *path)
{
    char magic[4] = { 0 };
    FILE *f = fopen(path, "rb");
    const int yes = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f)
        fclose(f);
    return yes;
}

static int write_vocab(struct ra_gguf_writer *w, const struct job *J)
{
    const struct options *o = J->o;
    char found[4096];
    const char *path = o->tokenizer;
    if (o->no_vocab)
        return RA_OK;
    if (!path && ra_vocab_find(o->in, found, sizeof found))
        path = found;
    if (!path)
        return ra_error_set(RA_EINVAL, "%s: no vocabulary found (no tokenizer.ggml.model in it, no tokenizer.bin "
                            "or tokenizer.json beside it): give --tokenizer FILE, or --no-vocab", o->in);
    const size_t len = strlen(path);
    if (is_gguf(path))
        return vocab_from_gguf(w, path, J->m.config.vocab_size);
    if (len >= 5 && !strcmp(path + len - 5, ".json"))
        return vocab_from_json(w, path, J->m.config.vocab_size);
    return vocab_from_spm(w, path, J->m.config.vocab_size);
}

/* ------------------------------------------------------------------ the data */

/* Row R of T as floats. */
static int row_f32(const struct ra_tensor *t, int64_t r, float *out)
{
    const int64_t n = t->cols;
    if (ra_dtype_is_quant(t->dtype)) {
        const size_t rb = ra_dtype_row_bytes(t->dtype, n);
        return ra_quant_dequantize(t->dtype, (const unsigned char *)t->data + (size_t)r * rb, out, n);
    }
    const unsigned char *p = (const unsigned char *)t->data + (size_t)(r * n) * ra_dtype_size(t->dtype);
    for (int64_t j = 0; j < n; j++) {
        uint16_t h;
        if (t->dtype == RA_DTYPE_F32) {
            memcpy(&out[j], p + 4 * j, 4);
            continue;
        }
        memcpy(&h, p + 2 * j, 2);
        out[j] = t->dtype == RA_DTYPE_BF16 ? ra_bf16_to_f32(h) : ra_f16_to_f32(h);
    }
    return RA_OK;
}

/* The source row of output row R: within each head, rotate-half row i (first
 * half) and i + hd/2 become adjacent rows 2i and 2i + 1. */
static int64_t source_row(const struct item *it, int64_t r)
{
    if (!it->perm_heads)
        return r;
    const int64_t hd = it->rows / it->perm_heads, h = r / hd, j = r % hd;
    return h * hd + (j % 2) * (hd / 2) + j / 2;
}

/* Row R of IT into its place in OUT (ROW: cols floats of scratch). */
static int convert_row(const struct item *it, int64_t r, unsigned char *out, float *row)
{
    const size_t rb = ra_dtype_row_bytes(it->type, it->cols);
    unsigned char *dst = out + (size_t)r * rb;
    int rc = row_f32(it->src, source_row(it, r), row);
    if (rc != RA_OK)
        return rc;
    if (it->type == RA_DTYPE_F32) {
        memcpy(dst, row, rb);
    } else if (it->type == RA_DTYPE_F16) {
        for (int64_t j = 0; j < it->cols; j++) {
            const uint16_t h = ra_f32_to_f16(row[j]);
            memcpy(dst + 2 * (size_t)j, &h, 2);
        }
    } else {
        rc = ra_quant_quantize(it->type, row, dst, it->cols);
    }
    return rc;
}

/* Item IT's bytes into OUT (ra_dtype_row_bytes(type, cols) * rows), the rows
 * on OpenMP's threads (each row's bytes depend on that row alone). */
static int convert(const struct job *J, const struct item *it, unsigned char *out)
{
    int64_t bad = it->rows; /* the first row that failed */
    if (!it->src) { /* rope_freqs: the per-pair divisors */
        memcpy(out, J->m.config.rope_factors, (size_t)it->cols * sizeof(float));
        return RA_OK;
    }
#pragma omp parallel
    {
        float *row = malloc((size_t)it->cols * sizeof *row);
#pragma omp for schedule(dynamic, 16)
        for (int64_t r = 0; r < it->rows; r++)
            if (!row || convert_row(it, r, out, row) != RA_OK) {
#pragma omp critical(quantize_bad_row)
                bad = r < bad ? r : bad;
            }
        free(row);
    }
    if (bad == it->rows)
        return RA_OK;
    /* the failed row again on this thread, whose error message is the one reported */
    float *row = malloc((size_t)it->cols * sizeof *row);
    int rc = row ? convert_row(it, bad, out, row) : ra_error_set(RA_ENOMEM, "out of memory");
    free(row);
    if (rc == RA_OK)
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ra_error_message());
    return ra_error_set(rc, "%s: tensor %s row %lld: %s", J->o->in, it->name, (long long)bad, msg);
}

static int write_data(struct ra_gguf_writer *w, const struct job *J)
{
    size_t max_bytes = 0;
    uint64_t done = 0, next_report = PROGRESS_BYTES;
    for (int i = 0; i < J->n_items; i++) {
        const size_t b = ra_dtype_row_bytes(J->items[i].type, J->items[i].cols) * (size_t)J->items[i].rows;
        max_bytes = b > max_bytes ? b : max_bytes;
    }
    unsigned char *buf = malloc(max_bytes);
    int rc = RA_OK;
    if (!buf)
        rc = ra_error_set(RA_ENOMEM, "out of memory (%zu bytes for one tensor)", max_bytes);
    for (int i = 0; i < J->n_items && rc == RA_OK; i++) {
        const struct item *it = &J->items[i];
        const uint64_t bytes = ra_dtype_row_bytes(it->type, it->cols) * (uint64_t)it->rows;
        if ((rc = convert(J, it, buf)) != RA_OK || (rc = ra_gguf_writer_data(w, buf, bytes)) != RA_OK)
            break;
        done += bytes;
        if (!J->o->quiet && J->out_bytes > PROGRESS_BYTES && (done >= next_report || i + 1 == J->n_items)) {
            fprintf(stderr, PROG ": %d of %d tensors, %.0f of %.0f MB\n", i + 1, J->n_items, done / 1e6,
                    J->out_bytes / 1e6);
            next_report = done + PROGRESS_BYTES;
        }
    }
    free(buf);
    return rc;
}

/* "12 q4_k, 3 q6_k, 11 f32" */
static void summary(const struct job *J)
{
    int count[RA_DTYPE_COUNT] = { 0 };
    char line[256] = "";
    size_t o = 0;
    for (int i = 0; i < J->n_items; i++)
        count[J->items[i].type]++;
    for (int t = RA_DTYPE_COUNT - 1; t >= 0; t--)
        if (count[t] && o < sizeof line)
            o += (size_t)snprintf(line + o, sizeof line - o, "%s%d %s", o ? ", " : "", count[t],
                                  ra_dtype_name((enum ra_dtype)t));
    fprintf(stderr, PROG ": wrote %s: %d tensors (%s), %.1f MB\n", J->o->out, J->n_items, line, J->out_bytes / 1e6);
}

static int run(const struct options *o)
{
    struct job J;
    struct ra_gguf_writer w;
    struct ra_outfile of = RA_OUTFILE_INIT;
    FILE *f = NULL;
    int rc;
    memset(&J, 0, sizeof J);
    J.o = o;
    if ((rc = ra_gguf_writer_init(&w, 0)) != RA_OK || (rc = ra_outfile_check(o->out)) != RA_OK ||
        (rc = ra_model_load(&J.m, o->in)) != RA_OK)
        goto out;
    if ((rc = plan(&J)) != RA_OK || (rc = write_config(&w, &J)) != RA_OK || (rc = write_vocab(&w, &J)) != RA_OK)
        goto out;
    for (int i = 0; i < J.n_items; i++) {
        const struct item *it = &J.items[i];
        const int64_t dims[2] = { it->cols, it->rows };
        if ((rc = ra_gguf_writer_tensor(&w, it->name, it->vector ? 1 : 2, dims, ra_quant_to_ggml(it->type))) != RA_OK)
            goto out;
    }
    if ((rc = ra_outfile_open(&of, o->out, &f)) != RA_OK || (rc = ra_gguf_writer_begin(&w, f)) != RA_OK ||
        (rc = write_data(&w, &J)) != RA_OK || (rc = ra_gguf_writer_end(&w)) != RA_OK)
        goto out;
    if ((rc = ra_outfile_commit(&of)) == RA_OK && !o->quiet)
        summary(&J);
out:
    if (rc != RA_OK && !strncmp(ra_error_message(), "GGUF writer", 11)) { /* name the file */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ra_error_message());
        ra_error_set(rc, "%s: %s", o->out, msg);
    }
    ra_outfile_abort(&of);
    ra_gguf_writer_free(&w);
    free(J.items);
    ra_model_free(&J.m);
    return rc;
}

int main(int argc, char **argv)
{
    struct options o;
    int code = parse_args(argc, argv, &o);
    if (code >= 0)
        return code;
    return run(&o) == RA_OK ? 0 : ra_arg_fail(PROG);
}
