/* Llama-family model: configuration, weights and loading.
 *
 * Weights stay where the loader found them (a memory-mapped file) in their
 * stored dtype; the backend widens them to fp32 when it uses them. RoPE
 * follows the convention of the file (ra_config.rope_style): Meta and
 * llama2.c rotate adjacent pairs (2i, 2i+1) of each head, Hugging Face stores
 * q/k rows permuted and rotates (i, i + head_dim/2). The kernels do either,
 * so no loader copies q/k to convert them: the ranks of a node share one
 * page-cache copy of every weight. Q and K always use the same style, so the
 * KV cache rows are in the model's own convention; the chain moves them as
 * they are. */
#ifndef RA_MODEL_H
#define RA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "mapped_file.h"

/* Element types, then ggml's block formats (src/quant/quant.h), which only
 * weight matrices and embeddings have: a row of them is whole blocks of
 * ra_dtype_block elements in ra_dtype_block_bytes bytes. */
enum ra_dtype {
    RA_DTYPE_F32 = 0, RA_DTYPE_F16, RA_DTYPE_BF16,
    RA_DTYPE_Q8_0, RA_DTYPE_Q4_0, RA_DTYPE_Q4_1, RA_DTYPE_Q4_K, RA_DTYPE_Q6_K,
    RA_DTYPE_COUNT
};

/* Which dimensions of a head RoPE rotates together (both use the angle
 * pos * theta^(-2i/head_dim) for pair i). */
enum ra_rope_style {
    RA_ROPE_INTERLEAVED = 0, /* pairs (2i, 2i+1): Meta, llama2.c */
    RA_ROPE_HALF             /* pairs (i, i + head_dim/2): Hugging Face rotate_half, GPT-NeoX */
};

const char *ra_rope_style_name(enum ra_rope_style s);

/* RoPE frequency scaling, as data: pair j of a head turns at
 * theta^(-2j/head_dim) / factor[j] radians per position. Linear scaling has
 * every factor equal; Llama 3's has 1 for the high frequencies, its factor for
 * the low ones and a smooth blend between (ra_rope_llama3_factors). A model
 * with no scaling keeps no factors, and its frequencies are computed exactly as
 * llama2.c computes them (the golden tests compare its tokens bit for bit). */
#define RA_ROPE_MAX_PAIRS 256 /* scaled models: head_dim up to 512 */

/* Where a config's factors came from (config.json can say linear and llama3 only). */
enum ra_rope_scaling { RA_ROPE_UNSCALED = 0, RA_ROPE_LINEAR, RA_ROPE_LLAMA3, RA_ROPE_FACTORS };

/* What the backends' rope op needs besides the shapes. */
struct ra_rope {
    float theta;
    enum ra_rope_style style;
    const float *factors; /* [head_dim/2], or NULL: unscaled */
};

/* Inline, so that the CUDA module (which links no core object) has them too. */
static inline int ra_dtype_is_quant(enum ra_dtype t) { return t >= RA_DTYPE_Q8_0 && t < RA_DTYPE_COUNT; }

/* Bytes of one element: element types only (0 for a block format: use ra_dtype_row_bytes). */
static inline size_t ra_dtype_size(enum ra_dtype t)
{
    return t == RA_DTYPE_F32 ? 4 : t == RA_DTYPE_F16 || t == RA_DTYPE_BF16 ? 2 : 0;
}

/* Elements per block (1 for element types) and the bytes of one block. */
static inline int64_t ra_dtype_block(enum ra_dtype t)
{
    return t == RA_DTYPE_Q4_K || t == RA_DTYPE_Q6_K ? 256 : ra_dtype_is_quant(t) ? 32 : 1;
}

static inline size_t ra_dtype_block_bytes(enum ra_dtype t)
{
    switch (t) {
    case RA_DTYPE_F32: return 4;
    case RA_DTYPE_F16: case RA_DTYPE_BF16: return 2;
    case RA_DTYPE_Q8_0: return 34;
    case RA_DTYPE_Q4_0: return 18;
    case RA_DTYPE_Q4_1: return 20;
    case RA_DTYPE_Q4_K: return 144;
    case RA_DTYPE_Q6_K: return 210;
    default: return 0;
    }
}

/* Bytes of `count` elements (whole blocks) of t: a row of a weight matrix. */
static inline size_t ra_dtype_row_bytes(enum ra_dtype t, int64_t count)
{
    return (size_t)(count / ra_dtype_block(t)) * ra_dtype_block_bytes(t);
}

static inline const char *ra_dtype_name(enum ra_dtype t)
{
    switch (t) {
    case RA_DTYPE_F32: return "f32";
    case RA_DTYPE_F16: return "f16";
    case RA_DTYPE_BF16: return "bf16";
    case RA_DTYPE_Q8_0: return "q8_0";
    case RA_DTYPE_Q4_0: return "q4_0";
    case RA_DTYPE_Q4_1: return "q4_1";
    case RA_DTYPE_Q4_K: return "q4_k";
    case RA_DTYPE_Q6_K: return "q6_k";
    default: break;
    }
    return "?";
}

/* A weight matrix [rows][cols] (row-major; a vector has rows == 1). */
struct ra_tensor {
    enum ra_dtype dtype;
    int64_t rows, cols;
    const void *data;   /* host bytes, usually inside a mapping */
    void *device;       /* a backend's copy: set only in a run context's tensors (context.h) */
};

struct ra_config {
    int dim;          /* model width */
    int hidden_dim;   /* FFN width */
    int n_layers;
    int n_heads;
    int n_kv_heads;   /* divides n_heads: MHA, GQA or MQA */
    int vocab_size;
    int seq_len;      /* the model's context length */
    int head_dim;     /* dim / n_heads */
    float rope_theta;
    float norm_eps;
    enum ra_rope_style rope_style; /* set by the loader from the file's convention */
    int rope_scaled;               /* enum ra_rope_scaling; RA_ROPE_UNSCALED (0): rope_factors unused */
    float rope_scaling_params[4];  /* linear: factor; llama3: factor, low/high_freq_factor, original context */
    float rope_factors[RA_ROPE_MAX_PAIRS]; /* [head_dim/2] when rope_scaled: pair j's frequency divisor */
};

/* The rope op's view of a config (it points into c). */
static inline struct ra_rope ra_config_rope(const struct ra_config *c)
{
    struct ra_rope r = { c->rope_theta, c->rope_style, c->rope_scaled ? c->rope_factors : NULL };
    return r;
}

/* Sets every factor to f (linear scaling); RA_EFORMAT naming `what` if f is not finite and positive. */
int ra_rope_set_linear(struct ra_config *c, double f, const char *what);

/* Sets the factors as transformers' _compute_llama3_parameters (Llama 3.1)
 * scales theta^(-2j/head_dim): factor f below the frequency of a wave of
 * original_ctx/low tokens, 1 above that of original_ctx/high tokens, a smooth
 * blend between. c->head_dim and c->rope_theta must be set. */
int ra_rope_set_llama3(struct ra_config *c, double f, double low, double high, double original_ctx, const char *what);

static inline int ra_config_kv_dim(const struct ra_config *c) { return c->n_kv_heads * c->head_dim; }

/* Checks every field and their relations; names `what` (a file) in the error. */
int ra_config_validate(const struct ra_config *c, const char *what);

struct ra_layer_weights {
    struct ra_tensor attn_norm; /* [1][dim] */
    struct ra_tensor wq;        /* [n_heads*head_dim][dim] */
    struct ra_tensor wk;        /* [kv_dim][dim] */
    struct ra_tensor wv;        /* [kv_dim][dim] */
    struct ra_tensor wo;        /* [dim][n_heads*head_dim] */
    struct ra_tensor ffn_norm;  /* [1][dim] */
    struct ra_tensor w_gate;    /* [hidden][dim]   (w1) */
    struct ra_tensor w_down;    /* [dim][hidden]   (w2) */
    struct ra_tensor w_up;      /* [hidden][dim]   (w3) */
};

struct ra_weights {
    struct ra_tensor embed;       /* [vocab][dim] */
    struct ra_layer_weights *layers;
    struct ra_tensor final_norm;  /* [1][dim] */
    struct ra_tensor output;      /* [vocab][dim]; same data as embed when tied */
    int tied;
};

enum ra_format { RA_FORMAT_LLAMA2C = 0, RA_FORMAT_HF, RA_FORMAT_GGUF };

#define RA_MAX_SHARDS 64

/* Where a loaded tensor's bytes came from, in the file's element order, so
 * that a bad value is reported where the file has it (a copy a loader makes,
 * of a misaligned tensor, keeps that order). */
struct ra_weight_source {
    char *name;        /* the file's name for it: "model.norm.weight", "layers.3.wq" */
    const char *file;  /* the file's path (owned by the model's mapping) */
    const void *data;
    enum ra_dtype dtype;
    int64_t count;     /* elements */
};

struct ra_model {
    struct ra_config config;
    struct ra_weights weights;
    enum ra_format format;
    char *path;
    /* Mappings that hold the weights. */
    struct ra_mapped_file files[RA_MAX_SHARDS];
    int n_files;
    /* Buffers the loader had to create (e.g. a copy of a misaligned tensor). */
    void **owned;
    int n_owned;
    /* Every tensor the loader took from a file, in load order. */
    struct ra_weight_source *sources;
    int n_sources;
};

/* How ra_model_load_opts loads; all zero is ra_model_load's default. */
struct ra_load_options {
    int no_check_weights;   /* skip the scan for NaN/Inf weights (files known to be good) */
    int n_threads;          /* threads for that scan; <= 0: OpenMP's default */
    int dequantize_weights; /* GGUF: convert block-quantized weights to f32 at load instead of
                             * computing on them (runahead --dequantize-weights: a reference
                             * for the quantized kernels, and for backends without them) */
};

/* Loads a model from PATH: a llama2.c checkpoint (.bin: legacy or v1 header),
 * a GGUF file (llama.cpp's; told by its magic), or a Hugging Face directory
 * (config.json + model.safetensors, or sharded with model.safetensors.index.json). Validates every header against the file,
 * then checks that every weight is finite (ra_model_check_weights). */
int ra_model_load(struct ra_model *m, const char *path);
int ra_model_load_opts(struct ra_model *m, const char *path, const struct ra_load_options *opt);
void ra_model_free(struct ra_model *m);

/* The first NaN or Inf in any loaded tensor is an error naming the file, the
 * tensor and the element: one such weight turns every logit into NaN, and
 * greedy decoding of NaN logits emits token 0 forever without complaint.
 * One parallel streaming read of the weights (src/README.md: its cost). */
int ra_model_check_weights(const struct ra_model *m, int n_threads);

/* Format-specific loaders (ra_model_load picks one). */
int ra_model_load_llama2c(struct ra_model *m, const char *path);
int ra_model_load_hf(struct ra_model *m, const char *dir);
int ra_model_load_gguf(struct ra_model *m, const char *path, const struct ra_load_options *opt);

/* Helpers for loaders. */
void *ra_model_own(struct ra_model *m, size_t bytes); /* a zeroed buffer freed with the model */
/* Records where T's bytes came from (T still in the file's element order). */
int ra_model_add_source(struct ra_model *m, const char *file, const char *name, const struct ra_tensor *t);
int ra_tensor_check(const struct ra_tensor *t, int64_t rows, int64_t cols, const char *file, const char *name);

/* Weights count and bytes, for reports. */
int64_t ra_model_n_params(const struct ra_model *m);
/* Bytes of T as stored (block types: whole blocks of each row). */
static inline size_t ra_tensor_bytes(const struct ra_tensor *t)
{
    return (size_t)t->rows * ra_dtype_row_bytes(t->dtype, t->cols);
}
/* Bytes of every weight as loaded (a tied classifier once): what a forward
 * pass reads per token, to first order. */
size_t ra_model_weight_bytes(const struct ra_model *m);

#endif
