/* runahead-synth: writes a Llama model in the Hugging Face layout
 * (config.json + model.safetensors) or as a llama2.c checkpoint (--format
 * llama2c), either with deterministic random weights of a named shape, or
 * converted from a checkpoint runahead can load (--from: a llama2.c .bin or an
 * HF directory). The formats differ in their RoPE convention (model.h): q/k
 * rows are permuted between them, and only then.
 *
 * Benchmarks load synthetic models through exactly the path real models take,
 * so the output must be a real HF model: transformers loads it as
 * LlamaForCausalLM. Large shapes are streamed tensor by tensor through a
 * bounded buffer: llama2-7b in f32 is 27 GB and never sits in memory. */
#include "config.h"
#include "args.h"
#include "half.h"
#include "model.h"
#include "outfile.h"
#include "safetensors.h"
#include "status.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROG "runahead-synth"
#define CHUNK_FLOATS (1 << 22)               /* the streaming buffer: 16 MB of floats */
#define PROGRESS_BYTES (100ull * 1024 * 1024) /* files larger than this report progress */

struct preset {
    const char *name;
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

static const struct preset presets[] = {
    { "tiny", 64, 176, 4, 8, 8, 512, 2048 },
    { "tiny-gqa", 64, 176, 4, 8, 4, 512, 2048 },
    { "bench-small", 768, 2048, 12, 12, 12, 32000, 16384 },
    /* TinyLlama's own context is 2048; benchmarks want long prompts. */
    { "tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 16384 },
    { "llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096 },
};

enum out_format { OUT_HF = 0, OUT_LLAMA2C };

struct options {
    struct ra_config cfg;
    int tied;
    enum out_format format;
    enum ra_dtype dtype;
    uint64_t seed;
    const char *out, *from;
    const char *rope_scaling; /* --rope-scaling, applied once the shape is known */
    int force;
};

/* One tensor to write: its HF name and shape, and where its values come from. */
struct job {
    char name[128];
    int64_t rows, cols; /* rows == 1 && vector: a 1-D tensor */
    int vector;
    enum { GEN_LINEAR, GEN_EMBED, GEN_NORM, GEN_FROM, GEN_FREQ_COS, GEN_FREQ_SIN } kind;
    const struct ra_tensor *src; /* GEN_FROM */
    /* q/k of a model whose RoPE convention changes on the way: written row r
     * is source row meta_row(r) (to HF) or hf_row(r) (to llama2.c). Generated
     * values are made in HF order, so both formats hold the same model. */
    enum { PERM_NONE, PERM_TO_HF, PERM_TO_META } perm;
    int64_t head_dim;
};

struct writer_state {
    const struct options *o;
    struct ra_safetensors_writer *w; /* HF */
    FILE *fp;                        /* llama2.c */
    const struct ra_config *cfg;
    float *f32;
    void *out;
    uint64_t total, done, next_report;
    const char *path;
};

/* ------------------------------------------------------------------ messages */

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: " PROG " --out DIR [--preset NAME] [shape flags] [--dtype f32|bf16|f16] [--seed S] [--force]\n"
            "       " PROG " --out DIR --from CHECKPOINT [--dtype f32|bf16|f16] [--force]\n"
            "       " PROG " --format llama2c --out FILE.bin [--preset NAME | --from CHECKPOINT] ...\n"
            "\n"
            "Writes a Llama model in the Hugging Face layout (config.json + model.safetensors)\n"
            "or as a llama2.c checkpoint: deterministic random weights of a named shape, or a\n"
            "conversion of a checkpoint. q/k are permuted between the formats' RoPE conventions\n"
            "(llama2.c: interleaved pairs; HF: rotate-half), so every route gives the same model.\n"
            "\n"
            "  --out DIR          output directory (created); with --format llama2c, the file\n"
            "  --format F         hf (default) or llama2c (the legacy header, f32 only)\n"
            "  --preset NAME      tiny (default), tiny-gqa, bench-small, tinyllama-1.1b, llama2-7b\n"
            "  --dim N --hidden-dim N --layers N --heads N --kv-heads N --vocab N --context N\n"
            "  --rope-theta X     override one field of the preset\n"
            "  --rope-scaling S   linear:F, or llama3:F,LOW,HIGH,ORIG (factor, low/high_freq_factor,\n"
            "                     original_max_position_embeddings), written into config.json\n"
            "  --tied             share the output matrix with the embedding (random tied models\n"
            "                     decode greedily to one repeated token: use untied ones to compare outputs)\n"
            "  --dtype T          stored weight type: f32 (default), bf16, f16\n"
            "  --seed S           random seed (default 1); the same seed gives the same bytes anywhere\n"
            "  --from FILE        convert a llama2.c checkpoint (or an HF directory) instead\n"
            "  --force            overwrite a model already in DIR\n"
            "  --help, --version\n");
}

/* Bad flags: one line and exit code 2. */
#define usage_error(...) ra_arg_usage_error(PROG, __VA_ARGS__)

#define fail() ra_arg_fail(PROG)

/* ------------------------------------------------------------------ random weights */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A key per (seed, tensor name): every value is then a pure function of the
 * key and its index, so any slice of any tensor can be made independently. */
static uint64_t tensor_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix64(mix64(seed) ^ h);
}

/* Uniform on (-1, 1) in steps of 2^-23, as an exact double: k + 1/2 for a
 * 24-bit k. Scaling it is then one multiply, rounded the same everywhere
 * (there is no a*b+c for the compiler to fuse differently per machine). */
static double uniform(uint64_t key, uint64_t idx)
{
    int64_t k = (int64_t)(mix64(key + (idx + 1) * 0x9e3779b97f4a7c15ull) >> 40) - (1 << 23);
    return ((double)k + 0.5) * 0x1p-23;
}

/* Scales that keep a random model lively. Linear layers are uniform with
 * variance gain^2/fan_in, so activations stay O(1) through the layers. With
 * one gain for all, attention is almost uniform and greedy decoding soon
 * repeats one token forever, which would make every comparison of argmax
 * sequences trivially true; sharper q/k (gain 1.5) make attention depend on
 * content and position, and a larger lm_head gain spreads the logits over a
 * few units so the argmax is decisive (checked against transformers: ~150
 * distinct tokens in 200 greedy steps of the tiny preset). Tied models stay
 * degenerate whatever the scales: the output matrix is the embedding, so the
 * current token's own logit dominates; they are for timing only. */
static double gen_scale(const struct job *j)
{
    double gain = 0.5;
    if (j->kind == GEN_EMBED)
        return 1.0;
    if (j->kind != GEN_LINEAR)
        return 0;
    if (strstr(j->name, "q_proj") || strstr(j->name, "k_proj"))
        gain = 1.5;
    else if (strcmp(j->name, "lm_head.weight") == 0)
        gain = 2.0;
    return gain * sqrt(3.0 / (double)j->cols);
}

static void generate(const struct job *j, uint64_t key, uint64_t first, size_t n, float *out)
{
    double scale = gen_scale(j);
    for (size_t i = 0; i < n; i++) {
        double u = uniform(key, first + i);
        /* norms: 1 +- 1/16; the product by a power of two is exact */
        out[i] = j->kind == GEN_NORM ? (float)(1.0 + u * 0x1p-4) : (float)(u * scale);
    }
}

/* ------------------------------------------------------------------ converted weights */

static float widen(const void *p, enum ra_dtype t, size_t i)
{
    switch (t) {
    case RA_DTYPE_F16: return ra_f16_to_f32(((const uint16_t *)p)[i]);
    case RA_DTYPE_BF16: return ra_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* The Meta row stored at HF row R: within a head, HF rows [0, half) are the
 * even Meta rows and [half, head_dim) the odd ones. */
static int64_t meta_row(int64_t r, int64_t head_dim)
{
    int64_t h = r / head_dim, j = r % head_dim, half = head_dim / 2;
    return h * head_dim + (j < half ? 2 * j : 2 * (j - half) + 1);
}

/* The HF row stored at Meta row R (the inverse of meta_row). */
static int64_t hf_row(int64_t r, int64_t head_dim)
{
    int64_t h = r / head_dim, j = r % head_dim, half = head_dim / 2;
    return h * head_dim + (j % 2 ? half + j / 2 : j / 2);
}

static int64_t source_row(const struct job *j, int64_t r)
{
    return j->perm == PERM_TO_HF ? meta_row(r, j->head_dim) : j->perm == PERM_TO_META ? hf_row(r, j->head_dim) : r;
}

/* llama2.c's legacy files carry the RoPE table they were exported with:
 * [seq_len][head_dim/2] cosines, then sines (runahead recomputes them). */
static void freq_rows(const struct job *j, const struct ra_config *c, int64_t row0, int64_t nrows, float *out)
{
    const int half = c->head_dim / 2;
    for (int64_t r = 0; r < nrows; r++)
        for (int i = 0; i < half; i++) {
            const float a = (float)(row0 + r) * (1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim));
            out[r * half + i] = j->kind == GEN_FREQ_COS ? cosf(a) : sinf(a);
        }
}

static void convert_rows(const struct job *j, int64_t row0, int64_t nrows, float *out)
{
    const struct ra_tensor *t = j->src;
    size_t esize = ra_dtype_size(t->dtype);
    for (int64_t r = 0; r < nrows; r++) {
        int64_t src = source_row(j, row0 + r);
        const unsigned char *row = (const unsigned char *)t->data + (size_t)(src * t->cols) * esize;
        for (int64_t c = 0; c < t->cols; c++)
            out[r * t->cols + c] = widen(row, t->dtype, (size_t)c);
    }
}

/* ------------------------------------------------------------------ writing */

static void narrow(const float *in, size_t n, enum ra_dtype t, void *out)
{
    uint16_t *h = out;
    if (t == RA_DTYPE_F32)
        memcpy(out, in, n * sizeof *in);
    else if (t == RA_DTYPE_BF16)
        for (size_t i = 0; i < n; i++)
            h[i] = ra_f32_to_bf16(in[i]);
    else
        for (size_t i = 0; i < n; i++)
            h[i] = ra_f32_to_f16(in[i]);
}

static void report(struct writer_state *s, int last)
{
    if (s->total < PROGRESS_BYTES || (!last && s->done < s->next_report))
        return;
    fprintf(stderr, PROG ": %s: %3d%% (%.1f of %.1f GB)\n", s->path, (int)(100.0 * (double)s->done / (double)s->total),
            (double)s->done / 1e9, (double)s->total / 1e9);
    s->next_report = s->done + s->total / 20;
}

static int write_job(struct writer_state *s, const struct job *j)
{
    int64_t rows_per_chunk = j->cols >= CHUNK_FLOATS ? 1 : CHUNK_FLOATS / j->cols;
    uint64_t key = tensor_key(s->o->seed, j->name);
    size_t esize = ra_dtype_size(s->o->dtype);

    if (j->cols > CHUNK_FLOATS)
        return ra_error_set(RA_ERANGE, "%s: tensor %s: rows of %lld values exceed the buffer", s->path, j->name,
                            (long long)j->cols);
    for (int64_t r = 0; r < j->rows; r += rows_per_chunk) {
        int64_t n = j->rows - r < rows_per_chunk ? j->rows - r : rows_per_chunk;
        size_t count = (size_t)(n * j->cols);
        if (j->kind == GEN_FROM)
            convert_rows(j, r, n, s->f32);
        else if (j->kind == GEN_FREQ_COS || j->kind == GEN_FREQ_SIN)
            freq_rows(j, s->cfg, r, n, s->f32);
        else if (j->perm != PERM_NONE) /* row by row, each from its HF row */
            for (int64_t k = 0; k < n; k++)
                generate(j, key, (uint64_t)(source_row(j, r + k) * j->cols), (size_t)j->cols, s->f32 + k * j->cols);
        else
            generate(j, key, (uint64_t)(r * j->cols), count, s->f32);
        narrow(s->f32, count, s->o->dtype, s->out);
        int rc = RA_OK;
        if (s->w)
            rc = ra_safetensors_writer_write(s->w, s->out, count * esize);
        else if (fwrite(s->out, esize, count, s->fp) != count)
            rc = ra_error_set(RA_EIO, "%s: cannot write: %s", s->path, strerror(errno));
        if (rc != RA_OK)
            return rc;
        s->done += count * esize;
        report(s, 0);
    }
    return RA_OK;
}

static void set_job(struct job *j, const char *name, int64_t rows, int64_t cols, int kind)
{
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", name);
    j->rows = rows;
    j->cols = cols;
    j->kind = kind;
}

static void set_layer_job(struct job *j, int layer, const char *suffix, int64_t rows, int64_t cols, int kind)
{
    char name[128];
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer, suffix);
    set_job(j, name, rows, cols, kind);
}

#define JOBS_PER_LAYER 9

/* Every tensor in HF names and shapes, in file order. SRC (may be NULL) gives
 * the weights to convert; without it the values are generated. */
static int make_jobs(const struct ra_config *c, int tied, const struct ra_weights *src, struct job *jobs)
{
    int64_t d = c->dim, q = (int64_t)c->n_heads * c->head_dim, kv = ra_config_kv_dim(c), h = c->hidden_dim;
    int n = 0, lin = src ? GEN_FROM : GEN_LINEAR, norm = src ? GEN_FROM : GEN_NORM;

    set_job(&jobs[n++], "model.embed_tokens.weight", c->vocab_size, d, src ? GEN_FROM : GEN_EMBED);
    if (src)
        jobs[n - 1].src = &src->embed;
    for (int l = 0; l < c->n_layers; l++) {
        const struct ra_layer_weights *w = src ? &src->layers[l] : NULL;
        struct job *lj = &jobs[n];
        set_layer_job(&jobs[n++], l, "input_layernorm", 1, d, norm);
        set_layer_job(&jobs[n++], l, "self_attn.q_proj", q, d, lin);
        set_layer_job(&jobs[n++], l, "self_attn.k_proj", kv, d, lin);
        set_layer_job(&jobs[n++], l, "self_attn.v_proj", kv, d, lin);
        set_layer_job(&jobs[n++], l, "self_attn.o_proj", d, q, lin);
        set_layer_job(&jobs[n++], l, "post_attention_layernorm", 1, d, norm);
        set_layer_job(&jobs[n++], l, "mlp.gate_proj", h, d, lin);
        set_layer_job(&jobs[n++], l, "mlp.up_proj", h, d, lin);
        set_layer_job(&jobs[n++], l, "mlp.down_proj", d, h, lin);
        lj[0].vector = lj[5].vector = 1;
        if (w) {
            const struct ra_tensor *t[JOBS_PER_LAYER] = { &w->attn_norm, &w->wq, &w->wk, &w->wv, &w->wo,
                                                          &w->ffn_norm, &w->w_gate, &w->w_up, &w->w_down };
            for (int k = 0; k < JOBS_PER_LAYER; k++)
                lj[k].src = t[k];
        }
        /* HF files rotate halves: a source in the interleaved convention
         * (llama2.c) has its q/k rows permuted into HF's order; a source
         * already in HF's (another HF directory) is copied as it is. */
        if (w && c->rope_style == RA_ROPE_INTERLEAVED)
            lj[1].perm = lj[2].perm = PERM_TO_HF;
        lj[1].head_dim = lj[2].head_dim = c->head_dim;
    }
    set_job(&jobs[n++], "model.norm.weight", 1, d, norm);
    jobs[n - 1].vector = 1;
    if (src)
        jobs[n - 1].src = &src->final_norm;
    if (!tied) {
        set_job(&jobs[n++], "lm_head.weight", c->vocab_size, d, lin);
        if (src)
            jobs[n - 1].src = &src->output;
    }
    return n;
}

/* Source tensors must have the shapes the config implies before we read them. */
static int check_sources(const struct job *jobs, int n, const char *from)
{
    for (int i = 0; i < n; i++) {
        if (jobs[i].kind != GEN_FROM)
            continue;
        int rc = ra_tensor_check(jobs[i].src, jobs[i].rows, jobs[i].cols, from, jobs[i].name);
        if (rc != RA_OK)
            return rc;
    }
    return RA_OK;
}

static int write_weights(const struct options *o, const struct job *jobs, int n, const char *path)
{
    struct ra_st_write_entry *e = calloc((size_t)n, sizeof *e);
    static const char *const meta[] = { "format", "pt", NULL };
    struct writer_state s = { .o = o, .path = path }; /* no RoPE tables in HF files: no cfg */
    int rc = RA_OK;

    s.f32 = malloc(CHUNK_FLOATS * sizeof(float));
    s.out = malloc(CHUNK_FLOATS * sizeof(float));
    if (!e || !s.f32 || !s.out) {
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        e[i] = (struct ra_st_write_entry){ .name = jobs[i].name, .dtype = o->dtype, .n_dims = jobs[i].vector ? 1 : 2 };
        e[i].shape[0] = jobs[i].vector ? jobs[i].cols : jobs[i].rows;
        e[i].shape[1] = jobs[i].cols;
        s.total += (uint64_t)(jobs[i].rows * jobs[i].cols) * ra_dtype_size(o->dtype);
    }
    if ((rc = ra_safetensors_writer_open(&s.w, path, e, n, meta)) != RA_OK)
        goto out;
    for (int i = 0; i < n && rc == RA_OK; i++)
        rc = write_job(&s, &jobs[i]);
    if (rc == RA_OK) {
        report(&s, 1);
        rc = ra_safetensors_writer_close(s.w);
    } else {
        ra_safetensors_writer_abort(s.w);
    }
out:
    free(e);
    free(s.f32);
    free(s.out);
    return rc;
}

/* ------------------------------------------------------------------ llama2.c */

/* llama2.c's legacy order (its export.py, legacy_export): each kind of tensor
 * for all layers in a row, the RoPE table, the classifier when not shared.
 * HF_JOBS are make_jobs' list; q/k end in the interleaved convention. */
static int llama2c_jobs(const struct ra_config *c, int tied, const struct ra_weights *src, const struct job *hf,
                        struct job *jobs)
{
    /* a layer's HF jobs: attn_norm q k v o ffn_norm gate up down; llama2.c's kinds in its order */
    static const int order[JOBS_PER_LAYER] = { 0, 1, 2, 3, 4, 5, 6, 8, 7 };
    const int L = c->n_layers;
    int n = 0;
    jobs[n++] = hf[0];
    for (int k = 0; k < JOBS_PER_LAYER; k++)
        for (int l = 0; l < L; l++) {
            struct job *j = &jobs[n++];
            *j = hf[1 + JOBS_PER_LAYER * l + order[k]];
            if (order[k] == 1 || order[k] == 2) /* q/k: generated values and HF sources are in HF order */
                j->perm = src && c->rope_style == RA_ROPE_INTERLEAVED ? PERM_NONE : PERM_TO_META;
        }
    jobs[n++] = hf[1 + JOBS_PER_LAYER * L];
    set_job(&jobs[n++], "freq_cis_real", c->seq_len, c->head_dim / 2, GEN_FREQ_COS);
    set_job(&jobs[n++], "freq_cis_imag", c->seq_len, c->head_dim / 2, GEN_FREQ_SIN);
    if (!tied)
        jobs[n++] = hf[2 + JOBS_PER_LAYER * L];
    return n;
}

static int write_llama2c(const struct options *o, const struct ra_config *c, int tied, const struct job *jobs, int n)
{
    struct ra_outfile of = RA_OUTFILE_INIT;
    struct writer_state s = { .o = o, .path = o->out, .cfg = c };
    const int32_t header[7] = { c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                                tied ? c->vocab_size : -c->vocab_size, c->seq_len };
    int rc;

    if (c->rope_scaled)
        return ra_error_set(RA_EUNSUPPORTED, "%s: llama2.c checkpoints have no RoPE scaling: cannot store it", o->out);
    if (c->rope_theta != 10000.0f) /* the loader assumes llama2.c's fixed base */
        return ra_error_set(RA_EUNSUPPORTED, "%s: llama2.c checkpoints have no rope_theta (10000 is assumed): "
                            "cannot store %g", o->out, c->rope_theta);
    if (!o->force && access(o->out, F_OK) == 0)
        return ra_error_set(RA_EIO, "%s: already exists; use --force to overwrite", o->out);
    s.f32 = malloc(CHUNK_FLOATS * sizeof(float));
    s.out = malloc(CHUNK_FLOATS * sizeof(float));
    for (int i = 0; i < n; i++)
        s.total += (uint64_t)(jobs[i].rows * jobs[i].cols) * sizeof(float);
    if (!s.f32 || !s.out)
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", o->out);
    else if ((rc = ra_outfile_open(&of, o->out, &s.fp)) == RA_OK &&
             fwrite(header, sizeof header, 1, s.fp) != 1)
        rc = ra_error_set(RA_EIO, "%s: cannot write: %s", o->out, strerror(errno));
    for (int i = 0; i < n && rc == RA_OK; i++)
        rc = write_job(&s, &jobs[i]);
    if (rc == RA_OK) {
        report(&s, 1);
        rc = ra_outfile_commit(&of);
    }
    ra_outfile_abort(&of);
    free(s.f32);
    free(s.out);
    return rc;
}

/* ------------------------------------------------------------------ config.json */

/* The shortest decimal that reads back as F, so config.json says 1e-05 and
 * not 9.9999997473787516e-06. */
static json_t *json_float(float f)
{
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    return json_real(strtod(buf, NULL));
}

/* config.json's rope_scaling: null, or the parameters transformers reads. */
static json_t *make_rope_scaling(const struct ra_config *c)
{
    const float *p = c->rope_scaling_params;
    if (c->rope_scaled == RA_ROPE_LINEAR)
        return json_pack("{s:s, s:o}", "rope_type", "linear", "factor", json_float(p[0]));
    if (c->rope_scaled == RA_ROPE_LLAMA3)
        return json_pack("{s:s, s:o, s:o, s:o, s:i}", "rope_type", "llama3", "factor", json_float(p[0]),
                         "low_freq_factor", json_float(p[1]), "high_freq_factor", json_float(p[2]),
                         "original_max_position_embeddings", (int)p[3]);
    return json_null();
}

static json_t *make_config(const struct ra_config *c, int tied, enum ra_dtype dtype)
{
    static const char *const torch_dtype[] = { "float32", "float16", "bfloat16" };
    return json_pack("{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:o, s:b, s:s, "
                     "s:i, s:i, s:f, s:b, s:f, s:b, s:i, s:o, s:b}",
                     "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_act", "silu",
                     "hidden_size", c->dim, "intermediate_size", c->hidden_dim, "num_hidden_layers", c->n_layers,
                     "num_attention_heads", c->n_heads, "num_key_value_heads", c->n_kv_heads,
                     "head_dim", c->head_dim, "vocab_size", c->vocab_size, "max_position_embeddings", c->seq_len,
                     "rope_theta", json_float(c->rope_theta), "rms_norm_eps", json_float(c->norm_eps),
                     "tie_word_embeddings", tied, "torch_dtype", torch_dtype[dtype],
                     "bos_token_id", 1, "eos_token_id", 2, "initializer_range", 0.02, "attention_bias", 0,
                     "attention_dropout", 0.0, "mlp_bias", 0, "pretraining_tp", 1, "rope_scaling",
                     make_rope_scaling(c), "use_cache", 1);
}

/* Through a mkstemp temporary file (outfile.h): a link planted at a guessable name such as
 * config.json.tmp is never followed. */
static int write_config(const struct ra_config *c, int tied, enum ra_dtype dtype, const char *dir)
{
    struct ra_outfile of = RA_OUTFILE_INIT;
    char path[PATH_MAX];
    json_t *root = make_config(c, tied, dtype);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    FILE *fp;
    int rc;

    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!text)
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    else if ((rc = ra_outfile_open(&of, path, &fp)) == RA_OK && fprintf(fp, "%s\n", text) < 0)
        rc = ra_error_set(RA_EIO, "%s: cannot write %s: %s", path, of.tmp, strerror(errno));
    if (rc == RA_OK)
        rc = ra_outfile_commit(&of);
    ra_outfile_abort(&of);
    free(text);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------------ output directory */

static int make_dirs(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return ra_error_set(RA_EINVAL, "%s: path too long", dir);
    for (char *p = path + 1; ; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return ra_error_set(RA_EIO, "%s: cannot create directory: %s", path, strerror(errno));
        *p = saved;
        if (!saved)
            break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ra_error_set(RA_EIO, "%s: not a directory", dir);
    return RA_OK;
}

static int prepare_out(const char *dir, int force)
{
    char path[PATH_MAX];
    int rc = make_dirs(dir);
    if (rc != RA_OK || force)
        return rc;
    const char *names[] = { "config.json", "model.safetensors", "model.safetensors.index.json" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (access(path, F_OK) == 0)
            return ra_error_set(RA_EIO, "%s: already holds a model (%s); use --force to overwrite", dir, names[i]);
    }
    return RA_OK;
}

/* ------------------------------------------------------------------ the two modes */

static int write_model(const struct options *o, const struct ra_config *c, int tied, const struct ra_weights *src)
{
    int n_jobs = 5 + JOBS_PER_LAYER * c->n_layers;
    struct job *jobs = calloc((size_t)n_jobs, sizeof *jobs), *ordered = calloc((size_t)n_jobs, sizeof *jobs);
    char path[PATH_MAX];
    int rc;

    if (!jobs || !ordered) {
        free(jobs);
        free(ordered);
        return ra_error_set(RA_ENOMEM, "out of memory");
    }
    n_jobs = make_jobs(c, tied, src, jobs);
    if (o->format == OUT_LLAMA2C) {
        n_jobs = llama2c_jobs(c, tied, src, jobs, ordered);
        if ((rc = check_sources(ordered, n_jobs, o->from)) == RA_OK)
            rc = write_llama2c(o, c, tied, ordered, n_jobs);
    } else if ((size_t)snprintf(path, sizeof path, "%s/model.safetensors", o->out) >= sizeof path)
        rc = ra_error_set(RA_EINVAL, "%s: path too long", o->out);
    else if ((rc = check_sources(jobs, n_jobs, o->from)) == RA_OK &&
             (rc = prepare_out(o->out, o->force)) == RA_OK &&
             (rc = write_weights(o, jobs, n_jobs, path)) == RA_OK)
        rc = write_config(c, tied, o->dtype, o->out);
    free(jobs);
    free(ordered);
    return rc;
}

static int convert(const struct options *o)
{
    struct ra_model m;
    const struct ra_load_options widen_blocks = { .dequantize_weights = 1 }; /* a GGUF's blocks, read as floats */
    int rc = ra_model_load_opts(&m, o->from, &widen_blocks);
    if (rc != RA_OK)
        return rc;
    if (m.config.rope_scaled == RA_ROPE_FACTORS && o->format != OUT_LLAMA2C) /* before any file is written */
        rc = ra_error_set(RA_EUNSUPPORTED, "%s: the RoPE factors (a GGUF rope_freqs.weight) have no config.json form "
                          "without their llama3 parameters", o->from);
    else
        rc = write_model(o, &m.config, m.weights.tied, &m.weights);
    ra_model_free(&m);
    return rc;
}

/* ------------------------------------------------------------------ flags */

enum { OPT_DIM = 256, OPT_HIDDEN, OPT_LAYERS, OPT_HEADS, OPT_KV_HEADS, OPT_VOCAB, OPT_CONTEXT, OPT_THETA,
       OPT_TIED, OPT_DTYPE, OPT_SEED, OPT_OUT, OPT_FROM, OPT_FORCE, OPT_PRESET, OPT_HELP, OPT_VERSION, OPT_FORMAT,
       OPT_ROPE_SCALING };

/* The shape flags come first, in OPT_ order: parse_flag names them by index. */
static const struct option long_options[] = {
    { "dim", required_argument, NULL, OPT_DIM },
    { "hidden-dim", required_argument, NULL, OPT_HIDDEN },
    { "layers", required_argument, NULL, OPT_LAYERS },
    { "heads", required_argument, NULL, OPT_HEADS },
    { "kv-heads", required_argument, NULL, OPT_KV_HEADS },
    { "vocab", required_argument, NULL, OPT_VOCAB },
    { "context", required_argument, NULL, OPT_CONTEXT },
    { "rope-theta", required_argument, NULL, OPT_THETA },
    { "tied", no_argument, NULL, OPT_TIED },
    { "dtype", required_argument, NULL, OPT_DTYPE },
    { "seed", required_argument, NULL, OPT_SEED },
    { "out", required_argument, NULL, OPT_OUT },
    { "from", required_argument, NULL, OPT_FROM },
    { "force", no_argument, NULL, OPT_FORCE },
    { "preset", required_argument, NULL, OPT_PRESET },
    { "format", required_argument, NULL, OPT_FORMAT },
    { "rope-scaling", required_argument, NULL, OPT_ROPE_SCALING },
    { "help", no_argument, NULL, OPT_HELP },
    { "version", no_argument, NULL, OPT_VERSION },
    { NULL, 0, NULL, 0 },
};

static int parse_positive(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v <= 0 || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

static const struct preset *find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

static void apply_preset(struct ra_config *c, const struct preset *p)
{
    c->dim = p->dim;
    c->hidden_dim = p->hidden_dim;
    c->n_layers = p->n_layers;
    c->n_heads = p->n_heads;
    c->n_kv_heads = p->n_kv_heads;
    c->vocab_size = p->vocab_size;
    c->seq_len = p->seq_len;
    c->rope_theta = 10000.0f;
    c->norm_eps = 1e-5f;
}

static int parse_dtype(const char *s, enum ra_dtype *t)
{
    for (int i = RA_DTYPE_F32; i <= RA_DTYPE_BF16; i++) {
        if (strcmp(s, ra_dtype_name((enum ra_dtype)i)) == 0) {
            *t = (enum ra_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* Shape flags land in OVER (0 = not given) and override the preset later, so
 * their order relative to --preset does not matter. Returns an exit code, or
 * -1 to go on. */
static int parse_flag(int opt, const char *arg, struct options *o, int *over, const struct preset **preset)
{
    double theta;
    char *end;
    if (opt >= OPT_DIM && opt <= OPT_CONTEXT)
        return parse_positive(arg, &over[opt - OPT_DIM])
                   ? usage_error("--%s: '%s' is not a positive integer", long_options[opt - OPT_DIM].name, arg) : -1;
    switch (opt) {
    case OPT_THETA:
        theta = strtod(arg, &end);
        if (end == arg || *end || !(theta > 0) || !isfinite(theta))
            return usage_error("bad --rope-theta '%s'", arg);
        o->cfg.rope_theta = (float)theta;
        return -1;
    case OPT_ROPE_SCALING: o->rope_scaling = arg; return -1;
    case OPT_TIED: o->tied = 1; return -1;
    case OPT_DTYPE: return parse_dtype(arg, &o->dtype) ? usage_error("bad --dtype '%s': use f32, bf16 or f16", arg) : -1;
    case OPT_SEED:
        errno = 0;
        o->seed = strtoull(arg, &end, 0);
        return errno || end == arg || *end || *arg == '-' ? usage_error("bad --seed '%s'", arg) : -1;
    case OPT_OUT: o->out = arg; return -1;
    case OPT_FROM: o->from = arg; return -1;
    case OPT_FORCE: o->force = 1; return -1;
    case OPT_FORMAT:
        if (strcmp(arg, "hf") && strcmp(arg, "llama2c"))
            return usage_error("bad --format '%s': use hf or llama2c", arg);
        o->format = strcmp(arg, "hf") ? OUT_LLAMA2C : OUT_HF;
        return -1;
    case OPT_PRESET: return (*preset = find_preset(arg)) ? -1 : usage_error("unknown preset '%s'", arg);
    case OPT_HELP: usage(stdout); return 0;
    case OPT_VERSION: printf(PROG " %s\n", PACKAGE_VERSION); return 0;
    default: return usage_error("bad option");
    }
}

/* --rope-scaling linear:F or llama3:F,LOW,HIGH,ORIG; an exit code, or -1 to go on. */
static int parse_rope_scaling(const char *arg, struct ra_config *c)
{
    double v[4];
    int used = 0, rc = RA_EINVAL;
    if (sscanf(arg, "linear:%lf%n", &v[0], &used) == 1 && !arg[used])
        rc = ra_rope_set_linear(c, v[0], "--rope-scaling");
    else if (sscanf(arg, "llama3:%lf,%lf,%lf,%lf%n", &v[0], &v[1], &v[2], &v[3], &used) == 4 && !arg[used])
        rc = ra_rope_set_llama3(c, v[0], v[1], v[2], v[3], "--rope-scaling");
    else
        return usage_error("bad --rope-scaling '%s': use linear:F or llama3:F,LOW,HIGH,ORIG", arg);
    return rc == RA_OK ? -1 : usage_error("%s", ra_error_message());
}

static int finish_config(struct options *o, const int *over, const struct preset *preset, float theta)
{
    struct ra_config *c = &o->cfg;
    apply_preset(c, preset);
    int *fields[] = { &c->dim, &c->hidden_dim, &c->n_layers, &c->n_heads, &c->n_kv_heads, &c->vocab_size, &c->seq_len };
    for (int i = 0; i <= OPT_CONTEXT - OPT_DIM; i++)
        if (over[i])
            *fields[i] = over[i];
    if (theta > 0)
        c->rope_theta = theta;
    c->head_dim = c->dim / c->n_heads;
    if (ra_config_validate(c, "shape") != RA_OK)
        return usage_error("%s", ra_error_message());
    return o->rope_scaling ? parse_rope_scaling(o->rope_scaling, c) : -1;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    int over[OPT_CONTEXT - OPT_DIM + 1] = { 0 }, opt, code, shape_flags = 0;
    const struct preset *preset = NULL;

    memset(o, 0, sizeof *o);
    o->seed = 1;
    opterr = 0; /* one error line, ours */
    while ((opt = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        /* getopt has stepped past the offending word */
        if (opt == '?')
            return usage_error("unknown option or missing value: %s", argv[optind - 1 < argc ? optind - 1 : argc - 1]);
        if ((code = parse_flag(opt, optarg, o, over, &preset)) >= 0)
            return code;
        shape_flags |= (opt >= OPT_DIM && opt <= OPT_TIED) || opt == OPT_PRESET || opt == OPT_ROPE_SCALING;
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!o->out)
        return usage_error("--out DIR is required");
    if (o->format == OUT_LLAMA2C && o->dtype != RA_DTYPE_F32)
        return usage_error("--format llama2c stores f32 only (got --dtype %s)", ra_dtype_name(o->dtype));
    if (o->from)
        return shape_flags ? usage_error("--from takes the shape from the checkpoint: no --preset, shape flags or --tied") : -1;
    float theta = o->cfg.rope_theta;
    return finish_config(o, over, preset ? preset : &presets[0], theta);
}

int main(int argc, char **argv)
{
    struct options o;
    int code = parse_args(argc, argv, &o);
    if (code >= 0)
        return code;
    int rc = o.from ? convert(&o) : write_model(&o, &o.cfg, o.tied, NULL);
    return rc == RA_OK ? 0 : fail();
}
