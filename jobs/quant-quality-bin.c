/* quant-quality: what quantized weights cost in quality, against a reference
 * model (the same model in f32), on a real text.
 *
 * The text (--text) is tokenized whole with the vocabulary of the first file
 * that has one (BOS first where the vocabulary adds it) and evaluated as
 * llama.cpp's llama-perplexity does by default: split into chunks of --ctx
 * tokens (whole chunks only; at least two), each chunk a fresh pass from
 * position 0 whose first token becomes BOS where the vocabulary adds one,
 * and only the second half of each chunk scored: the logits at positions
 * ctx/2 .. ctx-2 against the next tokens. Per model, over those positions:
 *   - perplexity, exp of the mean negative log-likelihood, and its ± (the
 *     standard error of the mean log-likelihood times the perplexity), as
 *     llama-perplexity prints them;
 *   - KL(reference || model) of the next-token distributions, mean and 99th
 *     percentile, in nats;
 *   - top-1 agreement: the share of positions where both models' most likely
 *     next tokens are the same; and text top-1: where the model's most
 *     likely next token is the text's.
 * Then a greedy continuation: the reference decodes --continue tokens after
 * the text's first --prompt tokens; each model, fed the reference's tokens,
 * agrees with its next token at some share of those steps, and follows it
 * for `same` steps before its own greedy token first differs.
 *
 * Every position's logits come from one pass over the chunk: a hook at the
 * last layer's end applies the final norm and the classifier to the scored
 * rows of the residual stream on the model's own backend (its weights as
 * loaded: dequantized or in blocks) and ends the pass there.
 * Prints a markdown table; --csv FILE writes one line per model. With
 * --keep-going a model under test that cannot be loaded (a block type this
 * build does not read) gets a row saying why instead of ending the run. */
#include "args.h"
#include "backend.h"
#include "bench_util.h"
#include "forward.h"
#include "kvcache.h"
#include "model.h"
#include "prompt.h"
#include "quant/quant.h"
#include "sampler.h"
#include "status.h"
#include "vocab.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PROG "quant-quality"
#define MAX_MODELS 8

const char bench_name[] = PROG;

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " --ref MODEL --model MODEL [--model MODEL ...] --text FILE [options]\n"
               "  --ref MODEL      the reference (the f32 model); the first row\n"
               "  --model MODEL    a model under test (up to %d); NAME=MODEL names its row\n"
               "  --text FILE      the text whose perplexity is measured\n"
               "  --ids FILE       or its token ids (space-separated), taken as they are: no BOS added\n"
               "  --ctx N          tokens per chunk (default 512, as llama-perplexity's)\n"
               "  --chunks N       at most N chunks (default: as many as the text holds)\n"
               "  --prompt N       the greedy run's prompt: the text's first N tokens (default 128; less for a short --ctx)\n"
               "  --continue M     greedy steps compared (default 64; 0: none)\n"
               "  --vocab PATH     the tokenizer (default: the first model that carries one)\n"
               "  --csv FILE       write one line per model (with a header)\n"
               "  --keep-going     a model under test that does not load gets a row saying why\n"
               "  --threads N      CPU threads (default 1)\n",
            MAX_MODELS - 1);
}

/* The scored rows' logits of a pass, gathered at the last layer's end. */
struct all_logits {
    struct ra_context *cx;
    int on;          /* 0: the hook does nothing (decode passes) */
    int from, n;     /* the span's rows [from, from + n) */
    float *xb, *dev; /* backend buffers: [n][dim] normed rows, [n][vocab] logits */
    float *host;     /* [n][vocab] */
};

static int all_logits_end(void *self, const struct ra_hook_args *a)
{
    struct all_logits *h = self;
    const struct ra_context *cx = h->cx;
    const struct ra_config *c = &cx->model->config;
    struct ra_backend *be = cx->backend;
    if (!h->on || a->layer != c->n_layers - 1)
        return RA_OK;
    if (a->rows->pos || a->start != 0 || h->from + h->n > a->n)
        return ra_error_set(RA_EINVAL, "all-position logits need a span from position 0");
    const int d = c->dim;
    int rc = be->ops->rmsnorm(be, h->xb, a->x + (size_t)h->from * d, &cx->weights.final_norm, h->n, d, c->norm_eps);
    if (rc == RA_OK)
        rc = be->ops->matmul(be, h->dev, c->vocab_size, h->xb, d, &cx->weights.output, h->n);
    if (rc == RA_OK)
        rc = be->ops->download(be, h->host, h->dev, (size_t)h->n * c->vocab_size * sizeof(float));
    return rc == RA_OK ? RA_HOOK_STOP : rc;
}

/* One model: its context, its chunk's logits and its running figures. */
struct lane {
    const char *name, *path;
    struct ra_model m;
    int loaded;
    struct ra_backend *be;
    struct ra_context cx;
    struct ra_kvcache kv;
    struct all_logits al;
    struct ra_hook hook;
    double nll, nll2;
    long count, agree, hits;
    double *kl; /* [positions] */
    long n_kl;
    double cont_agree, cont_kl;
    int same;
    char loaded_as[256];
    int failed; /* not loaded (--keep-going): loaded_as says why */
};

static int lane_open(struct lane *l, int threads, int ctx, int scored)
{
    const struct ra_config *c;
    int rc = ra_model_load(&l->m, l->path);
    if (rc != RA_OK)
        return rc;
    l->loaded = 1;
    c = &l->m.config;
    if (ctx > c->seq_len)
        return ra_error_set(RA_ERANGE, "%s: --ctx %d exceeds the model's context of %d", l->path, ctx, c->seq_len);
    if ((rc = ra_backend_open(&l->be, "cpu", &(struct ra_backend_params){ .threads = threads })) != RA_OK ||
        (rc = ra_context_init(&l->cx, &l->m, l->be)) != RA_OK ||
        (rc = ra_kvcache_init_dtype(&l->kv, l->be, c->n_layers, ra_config_kv_dim(c), ctx, RA_DTYPE_F32)) != RA_OK)
        return rc;
    l->al = (struct all_logits){ &l->cx, 0, 0, scored, ra_backend_alloc(l->be, (size_t)scored * c->dim * sizeof(float)),
                                 ra_backend_alloc(l->be, (size_t)scored * c->vocab_size * sizeof(float)),
                                 malloc((size_t)scored * c->vocab_size * sizeof(float)) };
    if (!l->al.xb || !l->al.dev || !l->al.host)
        return ra_error_set(RA_ENOMEM, "%s: out of memory for %d rows of logits", l->path, scored);
    l->hook = (struct ra_hook){ .self = &l->al, .layer_end = all_logits_end };
    return ra_context_hook_add(&l->cx, &l->hook);
}

static void lane_close(struct lane *l)
{
    if (l->be) {
        ra_backend_release(l->be, l->al.xb);
        ra_backend_release(l->be, l->al.dev);
    }
    free(l->al.host);
    free(l->kl);
    ra_kvcache_free(&l->kv);
    ra_context_free(&l->cx);
    ra_backend_free(l->be);
    if (l->loaded)
        ra_model_free(&l->m);
}

/* What the weights are as loaded: each dtype of the linear layers and the classifier, with its count. */
static void describe_weights(struct lane *l)
{
    int count[RA_DTYPE_COUNT] = { 0 };
    const struct ra_weights *w = &l->m.weights;
    for (int i = 0; i < l->m.config.n_layers; i++) {
        const struct ra_layer_weights *y = &w->layers[i];
        const struct ra_tensor *t[] = { &y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_down, &y->w_up };
        for (size_t j = 0; j < sizeof t / sizeof *t; j++)
            count[t[j]->dtype]++;
    }
    count[w->output.dtype]++;
    size_t off = 0;
    l->loaded_as[0] = 0;
    for (int d = 0; d < RA_DTYPE_COUNT; d++)
        if (count[d] && off < sizeof l->loaded_as)
            off += (size_t)snprintf(l->loaded_as + off, sizeof l->loaded_as - off, "%s%s %d", off ? "; " : "",
                                    ra_dtype_name((enum ra_dtype)d), count[d]);
}

/* A model under test that did not load: its row says why (commas, the CSV's separator, become
 * semicolons); it takes no further part. */
static void not_loaded(struct lane *l)
{
    const char *why = ra_error_message();
    const size_t n = strlen(l->path);
    if (!strncmp(why, l->path, n) && !strncmp(why + n, ": ", 2))
        why += n + 2; /* the row names the file */
    snprintf(l->loaded_as, sizeof l->loaded_as, "not loaded: %s", why);
    for (char *c = l->loaded_as; *c; c++)
        if (*c == ',' || *c == '|' || *c == '\n')
            *c = ';';
    fprintf(stderr, PROG ": %s: %s\n", l->path, l->loaded_as);
    ra_error_clear();
    lane_close(l);
    const struct lane keep = *l;
    *l = (struct lane){ .name = keep.name, .path = keep.path, .failed = 1 };
    memcpy(l->loaded_as, keep.loaded_as, sizeof l->loaded_as);
}

/* -log p(tok) of LOGITS as llama-perplexity's log_softmax computes it (float max, double sum of expf). */
static double nll_of(const float *logits, int V, int tok)
{
    float max = logits[0];
    for (int i = 1; i < V; i++)
        max = fmaxf(max, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < V; i++)
        sum += expf(logits[i] - max);
    return -(logits[tok] - max - log(sum));
}

/* One chunk (CHUNK: ctx tokens, the first already BOS where it should be) through lane L: the logits of
 * positions [first, ctx - 1) into l->al.host. */
static int chunk_pass(struct lane *l, const int32_t *chunk, int ctx, int first)
{
    l->al.on = 1, l->al.from = first, l->al.n = ctx - 1 - first;
    int rc = ra_forward_span(&l->cx, chunk, 0, ctx - 1, &l->kv, NULL);
    l->al.on = 0;
    return rc;
}

struct options {
    const char *ref, *text, *ids, *vocab, *csv;
    const char *models[MAX_MODELS], *names[MAX_MODELS];
    int n_models, ctx, chunks, prompt, steps, threads, keep_going;
};

/* The perplexity pass: every chunk through every lane, the reference (lane 0) first. */
static int perplexity(struct lane *ln, int n_lanes, const int32_t *tokens, int n_chunks, int ctx, int32_t bos)
{
    const int V = ln[0].m.config.vocab_size, first = ctx / 2, scored = ctx - 1 - first;
    int32_t *chunk = malloc((size_t)ctx * sizeof *chunk);
    int rc = chunk ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    for (int i = 0; i < n_lanes && rc == RA_OK; i++)
        if (!(ln[i].kl = malloc((size_t)n_chunks * scored * sizeof(double))))
            rc = ra_error_set(RA_ENOMEM, "out of memory");
    for (int c = 0; c < n_chunks && rc == RA_OK; c++) {
        const int32_t *text = tokens + (size_t)c * ctx;
        memcpy(chunk, text, (size_t)ctx * sizeof *chunk);
        if (bos >= 0)
            chunk[0] = bos;
        for (int i = 0; i < n_lanes && rc == RA_OK; i++) {
            struct lane *l = &ln[i];
            if (l->failed)
                continue;
            if ((rc = chunk_pass(l, chunk, ctx, first)) != RA_OK)
                break;
            for (int k = 0; k < scored; k++) {
                const float *lg = l->al.host + (size_t)k * V, *ref = ln[0].al.host + (size_t)k * V;
                const double nll = nll_of(lg, V, text[first + k + 1]);
                l->nll += nll, l->nll2 += nll * nll, l->count++;
                l->kl[l->n_kl++] = i ? bench_kl_logits(ref, lg, V) : 0.0;
                const int top = ra_argmax(lg, V);
                l->agree += top == ra_argmax(ref, V);
                l->hits += top == text[first + k + 1];
            }
        }
        fprintf(stderr, PROG ": chunk %d/%d: ppl", c + 1, n_chunks);
        for (int i = 0; i < n_lanes; i++)
            if (!ln[i].failed)
                fprintf(stderr, " %s %.4f", ln[i].name, exp(ln[i].nll / (double)ln[i].count));
        fputc('\n', stderr);
    }
    free(chunk);
    return rc;
}

/* The reference's greedy continuation of PROMPT, STEPS tokens (tok[0] from the prompt's logits), and the
 * logits of each step (fed tok[s]) in LOGITS [steps][vocab]. */
static int continuation(struct lane *l, const int32_t *prompt, int n, int steps, int32_t *tok, float *logits,
                        float *last)
{
    const int V = l->m.config.vocab_size;
    int rc = ra_forward_span(&l->cx, prompt, 0, n, &l->kv, last);
    if (rc == RA_OK)
        tok[0] = ra_argmax(last, V);
    for (int s = 0; s < steps && rc == RA_OK; s++)
        if ((rc = ra_forward_span(&l->cx, &tok[s], n + s, 1, &l->kv, logits + (size_t)s * V)) == RA_OK)
            tok[s + 1] = ra_argmax(logits + (size_t)s * V, V);
    return rc;
}

/* Lane L fed the reference's tokens: agreement, KL and the steps it follows the reference greedily. */
static int follow(struct lane *l, const int32_t *prompt, int n, int steps, const int32_t *tok, const float *ref,
                  float *lg)
{
    const int V = l->m.config.vocab_size;
    int rc = ra_forward_span(&l->cx, prompt, 0, n, &l->kv, lg);
    int follows = rc == RA_OK && ra_argmax(lg, V) == tok[0];
    l->same = follows;
    for (int s = 0; s < steps && rc == RA_OK; s++) {
        const float *want = ref + (size_t)s * V;
        if ((rc = ra_forward_span(&l->cx, &tok[s], n + s, 1, &l->kv, lg)) != RA_OK)
            break;
        const int agree = ra_argmax(lg, V) == ra_argmax(want, V);
        l->cont_agree += agree;
        l->cont_kl += bench_kl_logits(want, lg, V);
        follows = follows && agree;
        l->same += follows && s + 1 < steps;
    }
    l->cont_agree /= steps;
    l->cont_kl /= steps;
    return rc;
}

static int greedy(struct lane *ln, int n_lanes, const int32_t *prompt, int n, int steps)
{
    const int V = ln[0].m.config.vocab_size;
    int32_t *tok = malloc((size_t)(steps + 1) * sizeof *tok);
    float *ref = malloc((size_t)steps * V * sizeof(float)), *lg = malloc((size_t)V * sizeof(float));
    int rc = tok && ref && lg ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    if (rc == RA_OK)
        rc = continuation(&ln[0], prompt, n, steps, tok, ref, lg);
    ln[0].cont_agree = 1, ln[0].same = steps;
    for (int i = 1; i < n_lanes && rc == RA_OK; i++)
        if (!ln[i].failed)
            rc = follow(&ln[i], prompt, n, steps, tok, ref, lg);
    free(tok);
    free(ref);
    free(lg);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank percentile P of the lane's KL values (sorts them). */
static double kl_percentile(struct lane *l, double p)
{
    qsort(l->kl, (size_t)l->n_kl, sizeof *l->kl, cmp_double);
    long k = (long)ceil(p / 100.0 * (double)l->n_kl) - 1;
    return l->kl[k < 0 ? 0 : k];
}

static double file_mib(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return NAN;
    if (!S_ISDIR(st.st_mode))
        return st.st_size / 1048576.0;
    return NAN; /* a directory: its weights are several files */
}

static void report(struct lane *ln, int n_lanes, const struct options *o, FILE *csv)
{
    printf("| model | weights as loaded | MiB | PPL | KL mean | KL p99 | top-1 agree | text top-1 | greedy agree | "
           "greedy same |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    if (csv)
        fprintf(csv, "name,path,loaded,mib,ppl,ppl_err,kl_mean,kl_p99,top1_agree,text_top1,positions,greedy_agree,"
                     "greedy_kl,greedy_same,greedy_steps\n");
    for (int i = 0; i < n_lanes; i++) {
        struct lane *l = &ln[i];
        if (l->failed) {
            printf("| %s | %s | - | - | - | - | - | - | - | - |\n", l->name, l->loaded_as);
            if (csv)
                fprintf(csv, "%s,%s,%s,nan,nan,nan,nan,nan,nan,nan,0,nan,nan,0,%d\n", l->name, l->path, l->loaded_as,
                        o->steps);
            continue;
        }
        const double mean = l->nll / (double)l->count, ppl = exp(mean);
        const double var = l->nll2 / (double)l->count - mean * mean;
        const double err = var > 0 && l->count > 1 ? sqrt(var / (double)(l->count - 1)) * ppl : NAN;
        double kl_mean = 0;
        for (long k = 0; k < l->n_kl; k++)
            kl_mean += l->kl[k];
        kl_mean /= (double)l->n_kl;
        const double p99 = kl_percentile(l, 99), agree = (double)l->agree / (double)l->count, mib = file_mib(l->path);
        char size[32] = "-", cont[32] = "-", same[32] = "-";
        if (!isnan(mib))
            snprintf(size, sizeof size, "%.1f", mib);
        if (o->steps > 0)
            snprintf(cont, sizeof cont, "%.3f", l->cont_agree), snprintf(same, sizeof same, "%d/%d", l->same, o->steps);
        const double hits = (double)l->hits / (double)l->count;
        printf("| %s | %s | %s | %.4f ± %.5f | %.5f | %.4f | %.4f | %.4f | %s | %s |\n", l->name, l->loaded_as, size,
               ppl, err, kl_mean, p99, agree, hits, cont, same);
        if (csv)
            fprintf(csv, "%s,%s,%s,%.3f,%.6f,%.6f,%.8f,%.8f,%.6f,%.6f,%ld,%.6f,%.8f,%d,%d\n", l->name, l->path,
                    l->loaded_as, mib, ppl, err, kl_mean, p99, agree, hits, l->count, o->steps ? l->cont_agree : NAN,
                    o->steps ? l->cont_kl : NAN, l->same, o->steps);
    }
}

/* The text's tokens, BOS first where the vocabulary adds it, and that BOS (or -1). */
static int tokenize(const struct options *o, int32_t **ids, int *n, int32_t *bos, char *vocab_path, size_t size)
{
    struct ra_vocab v = { 0 };
    char *text = NULL;
    size_t len = 0;
    int rc = RA_OK;
    if (o->ids) {
        snprintf(vocab_path, size, "token ids");
        *bos = -1;
        if ((rc = ra_read_file(o->ids, &text, &len)) == RA_OK)
            rc = ra_prompt_parse_ids(text, o->ids, ids, n);
        free(text);
        return rc;
    }
    if (o->vocab)
        snprintf(vocab_path, size, "%s", o->vocab);
    else {
        int found = ra_vocab_find(o->ref, vocab_path, size);
        for (int i = 0; i < o->n_models && !found; i++)
            found = ra_vocab_find(o->models[i], vocab_path, size);
        if (!found)
            return ra_error_set(RA_EINVAL, "no model carries a vocabulary: give --vocab");
    }
    if ((rc = ra_vocab_load(&v, vocab_path)) != RA_OK || (rc = ra_read_file(o->text, &text, &len)) != RA_OK)
        goto out;
    if ((rc = ra_vocab_encode(&v, text, len, RA_VOCAB_ADD_SPECIAL, ids, n)) != RA_OK)
        goto out;
    *bos = v.add_bos ? v.bos_id : -1;
out:
    free(text);
    ra_vocab_free(&v);
    return rc;
}

static int run(const struct options *o)
{
    struct lane ln[MAX_MODELS] = { 0 };
    const int n_lanes = o->n_models + 1, first = o->ctx / 2, scored = o->ctx - 1 - first;
    int32_t *tokens = NULL, bos = -1;
    int n_tokens = 0, rc;
    char vocab_path[4096], unit[160], isa[160], cpu[128], flags[128], qmm[256];
    FILE *csv = NULL;
    if ((rc = tokenize(o, &tokens, &n_tokens, &bos, vocab_path, sizeof vocab_path)) != RA_OK)
        goto out;
    if (n_tokens < 2 * o->ctx) {
        rc = ra_error_set(RA_ERANGE, "%s: %d tokens, fewer than two chunks of --ctx %d", o->text ? o->text : o->ids,
                          n_tokens, o->ctx);
        goto out;
    }
    const int n_chunks = o->chunks > 0 && o->chunks < n_tokens / o->ctx ? o->chunks : n_tokens / o->ctx;
    ln[0] = (struct lane){ .name = "reference", .path = o->ref };
    for (int i = 0; i < o->n_models; i++)
        ln[i + 1] = (struct lane){ .name = o->names[i], .path = o->models[i] };
    for (int i = 0; i < n_lanes; i++) {
        if ((rc = lane_open(&ln[i], o->threads, o->ctx, scored)) != RA_OK) {
            if (i == 0 || !o->keep_going)
                goto out;
            not_loaded(&ln[i]);
            rc = RA_OK;
            continue;
        }
        describe_weights(&ln[i]);
        if (ln[i].m.config.vocab_size != ln[0].m.config.vocab_size) {
            rc = ra_error_set(RA_EINVAL, "%s: vocabulary of %d tokens, the reference's has %d", ln[i].path,
                              ln[i].m.config.vocab_size, ln[0].m.config.vocab_size);
            goto out;
        }
    }
    for (int i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= ln[0].m.config.vocab_size) {
            rc = ra_error_set(RA_EINVAL, "%s: token %d is outside the models' vocabulary", vocab_path, tokens[i]);
            goto out;
        }
    ra_backend_cpu_describe_linear(ln[0].be, unit, sizeof unit);
    printf("# text %s: %d tokens (vocabulary of %s%s), %d chunks of %d, positions %d-%d of each scored (%d)\n",
           o->text ? o->text : o->ids, n_tokens, vocab_path, bos >= 0 ? ", BOS first" : "", n_chunks, o->ctx, first,
           o->ctx - 2, n_chunks * scored);
    printf("# greedy: %d steps after the text's first %d tokens; %d thread(s); linear unit: %s\n", o->steps,
           o->prompt, o->threads, unit);
    ra_quant_isa_describe(isa, sizeof isa);
    bench_cpu_name(cpu, sizeof cpu);
    bench_cpu_flags(flags, sizeof flags);
    ra_backend_cpu_describe_quant(ln[0].be, qmm, sizeof qmm);
    printf("# CPU: %s (%s); quantized-weight kernels: %s; block weights computed as: %s\n", cpu, flags, isa, qmm);
    for (int i = 0; i < n_lanes; i++)
        printf("# %s: %s (%s)\n", ln[i].name, ln[i].path, ln[i].loaded_as);
    fflush(stdout);
    if ((rc = perplexity(ln, n_lanes, tokens, n_chunks, o->ctx, bos)) != RA_OK)
        goto out;
    if (o->steps > 0) {
        fprintf(stderr, PROG ": greedy continuation, %d steps\n", o->steps);
        if ((rc = greedy(ln, n_lanes, tokens, o->prompt < n_tokens ? o->prompt : n_tokens, o->steps)) !=
            RA_OK)
            goto out;
    }
    if (o->csv && !(csv = fopen(o->csv, "w"))) {
        rc = ra_error_set(RA_EIO, "--csv %s: %s", o->csv, strerror(errno));
        goto out;
    }
    report(ln, n_lanes, o, csv);
    if (csv && fclose(csv) != 0)
        rc = ra_error_set(RA_EIO, "--csv %s: %s", o->csv, strerror(errno));
    csv = NULL;
out:
    if (csv)
        fclose(csv);
    for (int i = 0; i < n_lanes; i++)
        lane_close(&ln[i]);
    free(tokens);
    return rc;
}

static int parse(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        { "ref", required_argument, NULL, 'r' },    { "model", required_argument, NULL, 'm' },
        { "text", required_argument, NULL, 't' },   { "ctx", required_argument, NULL, 'c' },
        { "chunks", required_argument, NULL, 'k' }, { "prompt", required_argument, NULL, 'p' },
        { "continue", required_argument, NULL, 's' }, { "vocab", required_argument, NULL, 'v' },
        { "ids", required_argument, NULL, 'I' },
        { "csv", required_argument, NULL, 'C' },    { "threads", required_argument, NULL, 'T' },
        { "keep-going", no_argument, NULL, 'K' },
        { "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
    };
    int opt, rc = RA_OK;
    *o = (struct options){ .ctx = 512, .steps = 64, .threads = 1 };
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1 && rc == RA_OK) {
        switch (opt) {
        case 'r': o->ref = optarg; break;
        case 'm': {
            if (o->n_models == MAX_MODELS - 1)
                return ra_arg_usage_error(PROG, "at most %d --model", MAX_MODELS - 1);
            char *eq = strchr(optarg, '=');
            const char *slash = strrchr(optarg, '/');
            if (eq)
                *eq = 0;
            o->names[o->n_models] = eq ? optarg : slash ? slash + 1 : optarg;
            o->models[o->n_models++] = eq ? eq + 1 : optarg;
            break;
        }
        case 't': o->text = optarg; break;
        case 'c': rc = ra_arg_int(optarg, "--ctx", 4, 1 << 20, &o->ctx); break;
        case 'k': rc = ra_arg_int(optarg, "--chunks", 1, 1 << 20, &o->chunks); break;
        case 'p': rc = ra_arg_int(optarg, "--prompt", 1, 1 << 20, &o->prompt); break;
        case 's': rc = ra_arg_int(optarg, "--continue", 0, 1 << 20, &o->steps); break;
        case 'v': o->vocab = optarg; break;
        case 'I': o->ids = optarg; break;
        case 'K': o->keep_going = 1; break;
        case 'C': o->csv = optarg; break;
        case 'T': rc = ra_arg_int(optarg, "--threads", 1, 1024, &o->threads); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (rc != RA_OK)
        return ra_arg_fail(PROG);
    if (optind < argc)
        return ra_arg_usage_error(PROG, "unexpected argument '%s'", argv[optind]);
    if (!o->ref || !o->n_models || !o->text == !o->ids)
        return ra_arg_usage_error(PROG, "--ref, --model and one of --text and --ids are required");
    if (!o->prompt) /* 128 tokens, fewer where the continuation would not fit in a chunk */
        o->prompt = o->ctx - o->steps < 128 ? (o->ctx - o->steps > 1 ? o->ctx - o->steps : 1) : 128;
    if (o->steps > 0 && o->prompt + o->steps > o->ctx)
        return ra_arg_usage_error(PROG, "--prompt %d + --continue %d exceed --ctx %d", o->prompt, o->steps, o->ctx);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc;
    if (run(&o) != RA_OK)
        return ra_arg_fail(PROG);
    return 0;
}
