/* reuse-quality: the quality of chunk-cache reuse (src/reuse/reuse.h) on a
 * real model, against full prefill of the same requests.
 *
 * For each request file (src/reuse/request.h) its chunks are computed in
 * isolation behind the request's leading prefix and put in a store made for
 * the run in a temporary directory (removed at the end). Then the request is
 * prefilled with ra_reuse_prefill in every mode:
 *   none                 the reference (full prefill);
 *   prefix, full         exact prefix caching, and every chunk reused as is;
 *   blend R              CacheBlend at each ratio of --ratios (deviation-selected rows);
 *   random R / seed S    blend with the same count of rows drawn at random, each
 *                        ratio of --random-ratios, seeds 1..--seeds (the control);
 *   craft R              Cache-Craft as src/reuse/craft.h reads it, at each ratio of
 *                        --craft-ratios (default --ratios): per-chunk budgets from the
 *                        chunks' attention records, no pass A.
 * From each mode's cache and logits:
 *   first   the first token (greedy) is the reference's: 1 or 0;
 *   kl      KL(p_none || p_mode) of the next-token distributions, nats;
 *   answer  --steps greedy tokens decoded from the mode's cache (stopping at an
 *           end-of-generation token): `exact` 1 when the token sequence is the
 *           reference's, `same` the length of the common leading run, `f1` the
 *           word F1 of the decoded texts as LongBench scores QA (lower case, no
 *           punctuation, no articles; two empty answers score 1);
 *   kdev, vdev  per layer, ||K_mode - K_none|| / ||K_none|| (Frobenius over the
 *           prompt's rows), and the same for V;
 *   attn    per layer, ||A_mode - A_none|| / ||A_none|| where A is the attention
 *           (softmax of q.k / sqrt(head_dim)) of the question's rows (the
 *           request's suffix) over every earlier row, all heads: the question
 *           recomputed over a copy of the mode's cache up to the question;
 *   recomputed  rows computed per layer (the engine's report).
 * Prints a line per request and mode as it goes ('#'), then the table of means
 * over the requests (random: and over the seeds); --json FILE keeps every
 * number (rewritten after each request, so a cut run keeps what it did). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "args.h"
#include "bench_util.h"
#include "backend.h"
#include "forward.h"
#include "kvcache.h"
#include "model.h"
#include "outfile.h"
#include "reuse/request.h"
#include "reuse/reuse.h"
#include "reuse/store.h"
#include "sampler.h"
#include "status.h"
#include "vocab.h"

#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "reuse-quality"
const char bench_name[] = PROG; /* bench_util.h: the first word of its error lines */
#define MAX_RATIOS 16

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " --model PATH [options] REQUEST.json...\n"
               "  --ratios LIST         blend ratios (default 0,0.05,0.1,0.15,0.2,0.3,0.5,1)\n"
               "  --random-ratios LIST  ratios of the random-row control (default 0.05,0.15,0.3;\n"
               "                        'none': no control)\n"
               "  --seeds N             random draws per ratio (default 3)\n"
               "  --craft-ratios LIST   craft's ratios (default: --ratios; 'none': no craft)\n"
               "  --check-layers LIST   blend's check layers (default 1)\n"
               "  --steps N             answer tokens decoded per mode (default 24)\n"
               "  --json FILE           every number, per request and mode, and the means\n"
               "  --tmpdir DIR          where the run's store is made (default $TMPDIR, else /tmp)\n"
               "  --threads N           CPU threads (default 1)\n");
}

struct options {
    const char *model, *json, *tmpdir;
    double ratios[MAX_RATIOS], random_ratios[MAX_RATIOS], craft_ratios[MAX_RATIOS];
    int n_ratios, n_random, n_craft, seeds, steps, threads;
    int check[RA_BLEND_MAX_CHECK], n_check;
    char **requests;
    int n_requests;
};

/* One mode of the study: a row of the table. */
struct variant {
    enum ra_reuse_mode mode;
    enum ra_blend_pick pick;
    double ratio; /* blend; NAN otherwise */
    uint64_t seed;
    int group;    /* its row of the table: the random draws of one ratio share one */
};

static const char *variant_name(const struct variant *v)
{
    return v->mode == RA_REUSE_BLEND && v->pick == RA_BLEND_PICK_RANDOM ? "random" : ra_reuse_mode_name(v->mode);
}

/* ----------------------------------------------------------- the metrics */

/* LongBench's normalize_answer: lower case, punctuation dropped, the words a,
 * an, the dropped; the words (pointers into TEXT, NUL-separated) in W, at most MAX. */
static int answer_words(char *text, char **w, int max)
{
    static const char *const articles[] = { "a", "an", "the" };
    int n = 0;
    for (char *p = text; *p; p++)
        *p = ispunct((unsigned char)*p) ? ' ' : (char)tolower((unsigned char)*p);
    for (char *save = NULL, *t = strtok_r(text, " \t\r\n\f\v", &save); t && n < max;
         t = strtok_r(NULL, " \t\r\n\f\v", &save)) {
        int article = 0;
        for (int i = 0; i < 3; i++)
            article |= !strcmp(t, articles[i]);
        if (!article)
            w[n++] = t;
    }
    return n;
}

#define MAX_WORDS 512

/* Word F1 of answer GOT against WANT (LongBench's qa_f1_score, common words
 * counted with multiplicity); 1 when both have no words. */
static double answer_f1(const char *got, const char *want)
{
    char *a = strdup(got), *b = strdup(want);
    char *wa[MAX_WORDS], *wb[MAX_WORDS];
    unsigned char used[MAX_WORDS] = { 0 };
    double f1 = 0;
    if (!a || !b)
        goto out;
    const int na = answer_words(a, wa, MAX_WORDS), nb = answer_words(b, wb, MAX_WORDS);
    if (!na && !nb) {
        f1 = 1;
        goto out;
    }
    int same = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (!used[j] && !strcmp(wa[i], wb[j])) {
                used[j] = 1, same++;
                break;
            }
    if (same) {
        const double p = (double)same / na, r = (double)same / nb;
        f1 = 2 * p * r / (p + r);
    }
out:
    free(a);
    free(b);
    return f1;
}

/* ||a - b|| / ||b|| over N floats, accumulated into SUMS[0] (difference) and SUMS[1] (reference). */
static void dev_add(const float *a, const float *b, size_t n, double sums[2])
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = (double)a[i] - b[i];
        d += x * x, r += (double)b[i] * b[i];
    }
    sums[0] += d, sums[1] += r;
}

static double dev_ratio(const double sums[2])
{
    return sums[1] > 0 ? sqrt(sums[0] / sums[1]) : sqrt(sums[0]);
}

/* Per layer, the relative deviation of A's K and V rows [0, n) from REF's (f32 caches on the host). */
static void kv_deviation(const struct ra_kvcache *a, const struct ra_kvcache *ref, int n, double *kdev, double *vdev)
{
    const size_t len = (size_t)n * ref->kv_dim;
    for (int l = 0; l < ref->n_layers; l++) {
        double sk[2] = { 0 }, sv[2] = { 0 };
        dev_add(ra_kvcache_k(a, l, 0), ra_kvcache_k(ref, l, 0), len, sk);
        dev_add(ra_kvcache_v(a, l, 0), ra_kvcache_v(ref, l, 0), len, sv);
        kdev[l] = dev_ratio(sk), vdev[l] = dev_ratio(sv);
    }
}

/* The question's attention, as an attend hook of a pass over the question's
 * rows: per layer, head and row, the softmax of q.k / sqrt(head_dim) over the
 * keys at or before the row, into probs[layer][head][row][key] (the keys
 * [0, n_keys)), or, with REF set, its deviation from REF per layer. */
struct attn_probe {
    const struct ra_config *c;
    int n_rows, n_keys;
    float *probs;   /* [n_layers][n_heads][n_rows][n_keys]: the reference's */
    int ref;        /* 0: fill probs; 1: compare with them */
    double *sums;   /* [n_layers][2] with ref */
    double *scores; /* [n_keys] scratch */
    float *row;     /* [n_keys] scratch */
};

static float dot(const float *a, const float *b, int n)
{
    float s[8] = { 0 };
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += a[i + j] * b[i + j];
    for (; i < n; i++)
        s[0] += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static int attn_probe_attend(void *self, const struct ra_hook_args *a, const float **k, const float **v, int *rows)
{
    struct attn_probe *p = self;
    const struct ra_config *c = p->c;
    const int hd = c->head_dim, kvd = ra_config_kv_dim(c), group = c->n_heads / c->n_kv_heads;
    const int first = a->start + a->n - *rows; /* the position of (*k)[0] */
    const double scale = 1.0 / sqrt((double)hd);
    (void)v;
    if (a->n != p->n_rows || first != 0 || a->start + a->n > p->n_keys)
        return ra_error_set(RA_EINVAL, PROG ": the question's pass is not the one the probe was made for");
    for (int h = 0; h < c->n_heads; h++) {
        const float *kh = *k + (size_t)(h / group) * hd;
        for (int i = 0; i < a->n; i++) {
            const float *q = a->q + (size_t)i * c->n_heads * hd + (size_t)h * hd;
            const int last = a->start + i; /* keys [0, last] */
            double m = -INFINITY, z = 0;
            for (int j = 0; j <= last; j++) {
                p->scores[j] = dot(q, kh + (size_t)j * kvd, hd) * scale;
                m = fmax(m, p->scores[j]);
            }
            for (int j = 0; j <= last; j++)
                z += p->scores[j] = exp(p->scores[j] - m);
            float *ref = p->probs + (((size_t)a->layer * c->n_heads + h) * p->n_rows + i) * p->n_keys;
            float *out = p->ref ? p->row : ref;
            for (int j = 0; j < p->n_keys; j++)
                out[j] = j <= last ? (float)(p->scores[j] / z) : 0.0f;
            if (p->ref)
                dev_add(out, ref, (size_t)p->n_keys, p->sums + 2 * a->layer);
        }
    }
    return RA_OK;
}

/* The question's attention in the cache KV (rows [0, req->suffix_start) of
 * every layer): the question recomputed over a copy of those rows in SCRATCH,
 * its last row's logits in LOGITS. With P->ref, ATTN[l] receives the
 * deviation from the reference per layer; without, P->probs the reference. */
static int question_attention(struct ra_context *cx, const struct ra_request *req, const struct ra_kvcache *kv,
                              struct ra_kvcache *scratch, struct attn_probe *p, float *logits, double *attn)
{
    const size_t bytes = (size_t)req->suffix_start * ra_kvcache_row_bytes(kv);
    const struct ra_hook hook = { .self = p, .attend = attn_probe_attend };
    for (int l = 0; l < kv->n_layers && bytes; l++) {
        memcpy(scratch->k[l], kv->k[l], bytes);
        memcpy(scratch->v[l], kv->v[l], bytes);
    }
    memset(p->sums, 0, sizeof(double) * 2 * kv->n_layers);
    int rc = ra_context_hook_add(cx, &hook);
    if (rc != RA_OK)
        return rc;
    rc = ra_forward_span(cx, req->ids + req->suffix_start, req->suffix_start, req->n - req->suffix_start, scratch,
                         logits);
    ra_context_hook_remove(cx, &hook);
    for (int l = 0; l < kv->n_layers && p->ref; l++)
        attn[l] = dev_ratio(p->sums + 2 * l);
    return rc;
}

/* ------------------------------------------------------------ one request */

/* The table's columns, summed per group. */
enum { C_FIRST, C_EXACT, C_F1, C_SAME, C_KL, C_KDEV, C_VDEV, C_ATTN, C_RECOMP, N_COLS };

/* What one mode gave on one request. */
struct outcome {
    int first, exact, same, n_answer;
    double kl, f1, probe_kl;
    int32_t *answer; /* [steps] */
    char *text;
    double *kdev, *vdev, *attn; /* [n_layers] */
    struct ra_reuse_report rep;
};

struct run {
    const struct options *o;
    struct ra_model m;
    struct ra_vocab vocab;
    int has_vocab;
    struct ra_backend *be;
    struct ra_context cx;
    struct ra_store *st;
    char store_dir[PATH_MAX];
    struct variant *variants;
    int n_variants;
    int n_groups;
    json_t *requests; /* the JSON's per-request entries */
    /* per group: sums of the table's columns (N_COLS), of kdev and attn per layer, and their count */
    double (*sum)[N_COLS];
    double *sum_kdev, *sum_attn; /* [n_groups][n_layers] */
    int *count;
};

/* Greedy decoding from KV (prefilled with N rows, LOGITS its last row's): up to
 * steps tokens, the last an end of generation if one comes. */
static int decode(struct run *r, struct ra_kvcache *kv, int n, const float *logits, struct outcome *out)
{
    const int V = r->m.config.vocab_size;
    float *l = malloc(sizeof(float) * (size_t)V);
    int rc = l ? RA_OK : ra_error_set(RA_ENOMEM, PROG ": out of memory");
    if (rc == RA_OK)
        memcpy(l, logits, sizeof(float) * (size_t)V);
    out->n_answer = 0;
    while (rc == RA_OK && out->n_answer < r->o->steps) {
        const int32_t tok = ra_argmax(l, V);
        out->answer[out->n_answer++] = tok;
        if ((r->has_vocab && ra_vocab_is_eog(&r->vocab, tok)) || out->n_answer == r->o->steps)
            break;
        rc = ra_forward_span(&r->cx, &tok, n + out->n_answer - 1, 1, kv, l);
    }
    free(l);
    if (rc != RA_OK)
        return rc;
    if (r->has_vocab) {
        int n_text = out->n_answer;
        while (n_text > 0 && ra_vocab_is_eog(&r->vocab, out->answer[n_text - 1]))
            n_text--;
        return ra_vocab_decode(&r->vocab, out->answer, n_text, &out->text, NULL);
    }
    size_t len = 1; /* no vocabulary: the ids, as words */
    for (int i = 0; i < out->n_answer; i++)
        len += 12;
    if (!(out->text = malloc(len)))
        return ra_error_set(RA_ENOMEM, PROG ": out of memory");
    out->text[0] = 0;
    for (int i = 0, at = 0; i < out->n_answer; i++)
        at += snprintf(out->text + at, len - at, "%s%d", i ? " " : "", out->answer[i]);
    return RA_OK;
}

static void outcome_free(struct outcome *o)
{
    free(o->answer);
    free(o->text);
    free(o->kdev);
    free(o->vdev);
    free(o->attn);
    ra_reuse_report_free(&o->rep);
    memset(o, 0, sizeof *o);
}

static int outcome_init(struct outcome *o, int steps, int n_layers)
{
    memset(o, 0, sizeof *o);
    o->answer = malloc(sizeof(int32_t) * (size_t)steps);
    o->kdev = calloc((size_t)n_layers, sizeof(double));
    o->vdev = calloc((size_t)n_layers, sizeof(double));
    o->attn = calloc((size_t)n_layers, sizeof(double));
    if (!o->answer || !o->kdev || !o->vdev || !o->attn) {
        outcome_free(o);
        return ra_error_set(RA_ENOMEM, PROG ": out of memory");
    }
    return RA_OK;
}

static double mean(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return n ? s / n : NAN;
}

/* A number, or null where it is not finite (jansson has no NaN). */
static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *doubles(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, num(v[i]));
    return a;
}

static json_t *ints(const int32_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *variant_json(const struct variant *v)
{
    return json_pack("{s:s, s:o, s:o}", "mode", variant_name(v), "ratio", num(v->ratio), "seed",
                     v->pick == RA_BLEND_PICK_RANDOM ? json_integer((json_int_t)v->seed) : json_null());
}

static json_t *outcome_json(const struct run *r, const struct variant *v, const struct outcome *o)
{
    const int L = r->m.config.n_layers;
    json_t *j = variant_json(v);
    json_object_update_new(j, json_pack("{s:i, s:o, s:i, s:i, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:i, "
                                        "s:o, s:o, s:o}",
                                        "first", o->first, "kl", num(o->kl), "exact", o->exact, "same", o->same, "f1",
                                        num(o->f1), "answer", o->text ? o->text : "", "tokens", ints(o->answer, o->n_answer),
                                        "kdev", doubles(o->kdev, L), "vdev", doubles(o->vdev, L), "attn",
                                        doubles(o->attn, L), "recomputed", ints(o->rep.recomputed, o->rep.n_layers),
                                        "loaded_rows", o->rep.loaded_rows, "hits", o->rep.hits, "misses",
                                        o->rep.misses, "ratio_used", num(o->rep.ratio), "ttft", num(o->rep.ttft), "probe_kl",
                                        num(o->probe_kl)));
    return j;
}

/* The fraction of the prompt's rows recomputed, over every layer. */
static double recomputed_frac(const struct ra_reuse_report *rep)
{
    double s = 0;
    for (int l = 0; l < rep->n_layers && rep->recomputed; l++)
        s += rep->recomputed[l];
    return rep->n_rows > 0 && rep->n_layers > 0 ? s / ((double)rep->n_rows * rep->n_layers) : NAN;
}

static void tally(struct run *r, int g, const struct outcome *o)
{
    const int L = r->m.config.n_layers;
    double *s = r->sum[g];
    s[C_FIRST] += o->first, s[C_EXACT] += o->exact, s[C_F1] += o->f1, s[C_SAME] += o->same, s[C_KL] += o->kl;
    s[C_KDEV] += mean(o->kdev, L), s[C_VDEV] += mean(o->vdev, L), s[C_ATTN] += mean(o->attn, L);
    s[C_RECOMP] += recomputed_frac(&o->rep);
    for (int l = 0; l < L; l++)
        r->sum_kdev[(size_t)g * L + l] += o->kdev[l], r->sum_attn[(size_t)g * L + l] += o->attn[l];
    r->count[g]++;
}

/* Prefills REQ in variant V into KV and measures it against the reference
 * (REF: its outcome, cache and logits; NULL: this is the reference, whose
 * attention the probe keeps). LOGITS and CHECK: scratch of a vocabulary. */
static int measure(struct run *r, const struct ra_request *req, const struct variant *v, struct ra_kvcache *kv,
                   struct ra_kvcache *scratch, struct attn_probe *probe, const struct outcome *ref,
                   const struct ra_kvcache *ref_kv, const float *ref_logits, float *logits, float *check,
                   struct outcome *out)
{
    const int V = r->m.config.vocab_size;
    struct ra_reuse_config cfg = RA_REUSE_CONFIG_INIT;
    cfg.ratio = isnan(v->ratio) ? 0 : v->ratio;
    cfg.pick = v->pick, cfg.seed = v->seed;
    memcpy(cfg.check, r->o->check, sizeof cfg.check);
    cfg.n_check = r->o->n_check;
    int rc = ra_reuse_prefill(&r->cx, r->st, req, v->mode, &cfg, kv, logits, &out->rep);
    if (rc != RA_OK)
        return rc;
    if (ref) {
        out->first = ra_argmax(logits, V) == ra_argmax(ref_logits, V);
        out->kl = bench_kl_logits(ref_logits, logits, V);
        kv_deviation(kv, ref_kv, req->n, out->kdev, out->vdev);
    }
    probe->ref = ref != NULL;
    if ((rc = question_attention(&r->cx, req, kv, scratch, probe, check, out->attn)) != RA_OK)
        return rc;
    /* the question over the mode's cache again: its logits are the mode's, up to rounding */
    out->probe_kl = bench_kl_logits(logits, check, V);
    if ((rc = decode(r, kv, req->n, logits, out)) != RA_OK || !ref)
        return rc;
    out->f1 = answer_f1(out->text, ref->text);
    while (out->same < out->n_answer && out->same < ref->n_answer && out->answer[out->same] == ref->answer[out->same])
        out->same++;
    out->exact = out->same == out->n_answer && out->same == ref->n_answer;
    return RA_OK;
}

/* The caches of one request: the reference's, a mode's (both with room for
 * the answer) and the question probe's scratch. */
static int kv_init(struct ra_kvcache *kv, struct run *r, int rows)
{
    const struct ra_config *c = &r->m.config;
    return ra_kvcache_init_dtype(kv, r->be, c->n_layers, ra_config_kv_dim(c), rows, RA_DTYPE_F32);
}

static int probe_init(struct attn_probe *p, const struct ra_config *c, const struct ra_request *req)
{
    *p = (struct attn_probe){ .c = c, .n_rows = req->n - req->suffix_start, .n_keys = req->n };
    p->probs = malloc(sizeof(float) * (size_t)c->n_layers * c->n_heads * p->n_rows * p->n_keys);
    p->sums = calloc((size_t)c->n_layers * 2, sizeof(double));
    p->scores = malloc(sizeof(double) * (size_t)p->n_keys);
    p->row = malloc(sizeof(float) * (size_t)p->n_keys);
    return p->probs && p->sums && p->scores && p->row ? RA_OK : ra_error_set(RA_ENOMEM, PROG ": out of memory");
}

static void probe_free(struct attn_probe *p)
{
    free(p->probs);
    free(p->sums);
    free(p->scores);
    free(p->row);
}

static void print_outcome(const char *file, const struct variant *v, const struct outcome *o, int n_layers)
{
    char ratio[32] = "-";
    if (!isnan(v->ratio))
        snprintf(ratio, sizeof ratio, "%g", v->ratio);
    printf("# %-12s %-7s %5s", file, variant_name(v), ratio);
    if (v->pick == RA_BLEND_PICK_RANDOM)
        printf(" seed %llu", (unsigned long long)v->seed);
    printf(": first %d, same %d/%d, f1 %.2f, kl %.4f, kdev %.4f, attn %.4f, recomputed %.1f%%, '%s'\n", o->first,
           o->same, o->n_answer, o->f1, o->kl, mean(o->kdev, n_layers), mean(o->attn, n_layers),
           100 * recomputed_frac(&o->rep), ra_esc(o->text ? o->text : ""));
    fflush(stdout);
}

static json_t *request_json(const char *path, const struct ra_request *req, const struct outcome *ref)
{
    json_t *lens = json_array();
    for (int c = 0; c < req->n_chunks; c++)
        json_array_append_new(lens, json_integer(req->chunk_len[c]));
    return json_pack("{s:s, s:i, s:i, s:i, s:o, s:i, s:s, s:o, s:o, s:[]}", "file", path, "n_rows", req->n,
                     "n_prefix", req->n_prefix, "n_chunks", req->n_chunks, "chunk_len", lens, "question_rows",
                     req->n - req->suffix_start, "answer", ref->text ? ref->text : "", "tokens",
                     ints(ref->answer, ref->n_answer), "ttft", num(ref->rep.ttft), "modes");
}

/* The reference's own row: agreement 1, every deviation 0 by definition. */
static void reference_self(struct outcome *ref, int n_layers)
{
    ref->first = ref->exact = 1, ref->same = ref->n_answer, ref->kl = 0;
    ref->f1 = answer_f1(ref->text ? ref->text : "", ref->text ? ref->text : "");
    for (int l = 0; l < n_layers; l++)
        ref->kdev[l] = ref->vdev[l] = ref->attn[l] = 0;
}

static int run_request(struct run *r, const char *path)
{
    const struct ra_config *c = &r->m.config;
    const int V = c->vocab_size, L = c->n_layers;
    struct ra_request req = { 0 };
    struct ra_kvcache ref_kv = { 0 }, kv = { 0 }, scratch = { 0 };
    struct attn_probe probe = { 0 };
    struct outcome ref = { 0 }, out = { 0 };
    float *ref_logits = malloc(sizeof(float) * (size_t)V), *logits = malloc(sizeof(float) * (size_t)V),
          *check = malloc(sizeof(float) * (size_t)V);
    const struct variant none = { RA_REUSE_NONE, RA_BLEND_PICK_DEVIATION, NAN, 0, 0 };
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    json_t *entry = NULL;
    int rc = ref_logits && logits && check ? RA_OK : ra_error_set(RA_ENOMEM, PROG ": out of memory");
    if (rc != RA_OK ||
        (rc = ra_request_load(&req, path, r->has_vocab ? &r->vocab : NULL,
                              r->has_vocab ? r->vocab.chat_template : NULL)) != RA_OK)
        goto out;
    if (req.n + r->o->steps > c->seq_len) {
        rc = ra_error_set(RA_ERANGE, "%s: %d prompt tokens + %d answer tokens exceed the model's context of %d", path,
                          req.n, r->o->steps, c->seq_len);
        goto out;
    }
    for (int i = 0; i < req.n_chunks && rc == RA_OK; i++)
        rc = ra_store_add(r->st, &r->cx, req.ids, req.n_prefix, req.ids + req.chunk_start[i], req.chunk_len[i]);
    if (rc != RA_OK || (rc = kv_init(&ref_kv, r, req.n + r->o->steps)) != RA_OK ||
        (rc = kv_init(&kv, r, req.n + r->o->steps)) != RA_OK || (rc = kv_init(&scratch, r, req.n)) != RA_OK ||
        (rc = probe_init(&probe, c, &req)) != RA_OK || (rc = outcome_init(&ref, r->o->steps, L)) != RA_OK ||
        (rc = measure(r, &req, &none, &ref_kv, &scratch, &probe, NULL, NULL, NULL, ref_logits, check, &ref)) != RA_OK)
        goto out;
    printf("# %s: %d rows (prefix %d, %d chunks, question %d); full prefill %.2f s, answer '%s'\n", name, req.n,
           req.n_prefix, req.n_chunks, req.n - req.suffix_start, ref.rep.ttft, ra_esc(ref.text ? ref.text : ""));
    reference_self(&ref, L);
    tally(r, 0, &ref);
    entry = request_json(path, &req, &ref);
    json_array_append_new(json_object_get(entry, "modes"), outcome_json(r, &none, &ref));
    for (int i = 1; i < r->n_variants && rc == RA_OK; i++) {
        const struct variant *v = &r->variants[i];
        if ((rc = outcome_init(&out, r->o->steps, L)) != RA_OK ||
            (rc = measure(r, &req, v, &kv, &scratch, &probe, &ref, &ref_kv, ref_logits, logits, check, &out)) !=
                RA_OK)
            break;
        tally(r, v->group, &out);
        json_array_append_new(json_object_get(entry, "modes"), outcome_json(r, v, &out));
        print_outcome(name, v, &out, L);
        outcome_free(&out);
    }
    if (rc == RA_OK) {
        json_array_append(r->requests, entry);
        printf("#\n");
    }
out:
    json_decref(entry);
    outcome_free(&out);
    outcome_free(&ref);
    probe_free(&probe);
    ra_kvcache_free(&ref_kv);
    ra_kvcache_free(&kv);
    ra_kvcache_free(&scratch);
    ra_request_free(&req);
    free(ref_logits);
    free(logits);
    free(check);
    return rc;
}

/* ------------------------------------------------------------ the table */

/* The first variant of each group: its name and ratio. */
static const struct variant *group_variant(const struct run *r, int g)
{
    for (int i = 0; i < r->n_variants; i++)
        if (r->variants[i].group == g)
            return &r->variants[i];
    return NULL;
}

static json_t *summary_json(const struct run *r)
{
    static const char *const cols[N_COLS] = { "first", "exact", "f1", "same", "kl", "kdev", "vdev", "attn",
                                              "recomputed" };
    const int L = r->m.config.n_layers;
    json_t *a = json_array();
    for (int g = 0; g < r->n_groups; g++) {
        const struct variant *v = group_variant(r, g);
        const int n = r->count[g];
        json_t *j = json_pack("{s:s, s:o, s:i}", "mode", variant_name(v), "ratio", num(v->ratio), "n", n);
        double kd[L], at[L];
        for (int k = 0; k < N_COLS; k++)
            json_object_set_new(j, cols[k], n ? num(r->sum[g][k] / n) : json_null());
        for (int l = 0; l < L; l++)
            kd[l] = n ? r->sum_kdev[(size_t)g * L + l] / n : NAN, at[l] = n ? r->sum_attn[(size_t)g * L + l] / n : NAN;
        json_object_set_new(j, "kdev_layers", doubles(kd, L));
        json_object_set_new(j, "attn_layers", doubles(at, L));
        json_array_append_new(a, j);
    }
    return a;
}

static void print_table(const struct run *r)
{
    printf("%-7s %5s %4s %6s %6s %6s %5s %8s %7s %7s %7s %8s\n", "mode", "ratio", "n", "first", "exact", "f1", "same",
           "kl", "kdev", "vdev", "attn", "recomp%");
    for (int g = 0; g < r->n_groups; g++) {
        const struct variant *v = group_variant(r, g);
        const double n = r->count[g] ? r->count[g] : NAN;
        const double *s = r->sum[g];
        char ratio[32] = "-";
        if (!isnan(v->ratio))
            snprintf(ratio, sizeof ratio, "%g", v->ratio);
        printf("%-7s %5s %4d %6.3f %6.3f %6.3f %5.1f %8.4f %7.4f %7.4f %7.4f %8.1f\n", variant_name(v), ratio,
               r->count[g], s[C_FIRST] / n, s[C_EXACT] / n, s[C_F1] / n, s[C_SAME] / n, s[C_KL] / n, s[C_KDEV] / n,
               s[C_VDEV] / n, s[C_ATTN] / n, 100 * s[C_RECOMP] / n);
    }
}

static int write_json(const struct run *r)
{
    const struct options *o = r->o;
    struct ra_outfile of = RA_OUTFILE_INIT;
    FILE *f;
    json_t *ratios = json_array(), *rnd = json_array(), *check = json_array();
    for (int i = 0; i < o->n_ratios; i++)
        json_array_append_new(ratios, json_real(o->ratios[i]));
    for (int i = 0; i < o->n_random; i++)
        json_array_append_new(rnd, json_real(o->random_ratios[i]));
    for (int i = 0; i < o->n_check; i++)
        json_array_append_new(check, json_integer(o->check[i]));
    json_t *root = json_pack("{s:s, s:i, s:i, s:i, s:o, s:o, s:i, s:o, s:s, s:O, s:o}", "model", o->model,
                             "n_layers", r->m.config.n_layers, "n_heads", r->m.config.n_heads, "steps", o->steps,
                             "ratios", ratios, "random_ratios", rnd, "seeds", o->seeds, "check_layers", check,
                             "kv_dtype", "f32", "requests", r->requests, "summary", summary_json(r));
    int rc = root ? ra_outfile_open(&of, o->json, &f) : ra_error_set(RA_ENOMEM, PROG ": out of memory");
    if (rc == RA_OK && json_dumpf(root, f, JSON_INDENT(1) | JSON_REAL_PRECISION(9)) != 0)
        rc = ra_error_set(RA_EIO, "--json %s: %s", o->json, strerror(errno));
    if (rc == RA_OK && (fputc('\n', f) == EOF || (rc = ra_outfile_commit(&of)) != RA_OK) && rc == RA_OK)
        rc = ra_error_set(RA_EIO, "--json %s: %s", o->json, strerror(errno));
    ra_outfile_abort(&of);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------ the run */

static int make_variants(struct run *r)
{
    const struct options *o = r->o;
    const int n = 3 + o->n_ratios + o->n_random * o->seeds + o->n_craft;
    if (!(r->variants = calloc((size_t)n, sizeof *r->variants)))
        return ra_error_set(RA_ENOMEM, PROG ": out of memory");
    struct variant *v = r->variants;
    int g = 0;
    v[r->n_variants++] = (struct variant){ RA_REUSE_NONE, RA_BLEND_PICK_DEVIATION, NAN, 0, g++ };
    v[r->n_variants++] = (struct variant){ RA_REUSE_PREFIX, RA_BLEND_PICK_DEVIATION, NAN, 0, g++ };
    v[r->n_variants++] = (struct variant){ RA_REUSE_FULL, RA_BLEND_PICK_DEVIATION, NAN, 0, g++ };
    for (int i = 0; i < o->n_ratios; i++)
        v[r->n_variants++] = (struct variant){ RA_REUSE_BLEND, RA_BLEND_PICK_DEVIATION, o->ratios[i], 0, g++ };
    for (int i = 0; i < o->n_random; i++, g++)
        for (int s = 1; s <= o->seeds; s++)
            v[r->n_variants++] = (struct variant){ RA_REUSE_BLEND, RA_BLEND_PICK_RANDOM, o->random_ratios[i],
                                                   (uint64_t)s, g };
    for (int i = 0; i < o->n_craft; i++)
        v[r->n_variants++] = (struct variant){ RA_REUSE_CRAFT, RA_BLEND_PICK_DEVIATION, o->craft_ratios[i], 0, g++ };
    r->n_groups = g;
    r->sum = calloc((size_t)g, sizeof *r->sum);
    r->sum_kdev = calloc((size_t)g * r->m.config.n_layers, sizeof(double));
    r->sum_attn = calloc((size_t)g * r->m.config.n_layers, sizeof(double));
    r->count = calloc((size_t)g, sizeof(int));
    return r->sum && r->sum_kdev && r->sum_attn && r->count ? RA_OK : ra_error_set(RA_ENOMEM, PROG ": out of memory");
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    if (remove(path) != 0)
        fprintf(stderr, PROG ": warning: cannot remove %s: %s\n", path, strerror(errno));
    return 0;
}

/* The run's store, in a directory of its own under TMPDIR. */
static int store_open(struct run *r)
{
    const char *tmp = r->o->tmpdir ? r->o->tmpdir : getenv("TMPDIR");
    struct ra_store_identity id = { .kv_dtype = RA_DTYPE_F32 };
    char dir[PATH_MAX + 8];
    if (!tmp || !*tmp)
        tmp = "/tmp";
    if (snprintf(r->store_dir, sizeof r->store_dir, "%s/reuse-quality.XXXXXX", tmp) >= (int)sizeof r->store_dir)
        return ra_error_set(RA_EINVAL, "--tmpdir %s: the name is too long", tmp);
    if (!mkdtemp(r->store_dir)) {
        int e = errno;
        r->store_dir[0] = 0;
        return ra_error_set(RA_EIO, "%s: cannot make a directory for the store: %s", tmp, strerror(e));
    }
    snprintf(dir, sizeof dir, "%s/store", r->store_dir);
    int rc = ra_store_model_identity(&r->m, id.model);
    if (rc == RA_OK)
        rc = ra_store_vocab_identity(r->has_vocab ? &r->vocab : NULL, id.tokenizer);
    if (rc == RA_OK)
        rc = ra_store_open(&r->st, dir, &r->m, &id, 0, RA_STORE_CREATE);
    return rc;
}

static void run_free(struct run *r)
{
    if (r->st)
        ra_store_close(r->st);
    if (r->store_dir[0])
        nftw(r->store_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    ra_context_free(&r->cx);
    ra_backend_free(r->be);
    if (r->has_vocab)
        ra_vocab_free(&r->vocab);
    ra_model_free(&r->m);
    json_decref(r->requests);
    free(r->variants);
    free(r->sum);
    free(r->sum_kdev);
    free(r->sum_attn);
    free(r->count);
}

static int study(const struct options *o)
{
    struct run r = { .o = o };
    char vpath[PATH_MAX];
    int rc = ra_model_load(&r.m, o->model);
    if (rc != RA_OK)
        return rc;
    if (ra_vocab_find(o->model, vpath, sizeof vpath)) {
        if ((rc = ra_vocab_load(&r.vocab, vpath)) != RA_OK)
            goto out;
        r.has_vocab = 1;
    }
    if ((rc = ra_backend_open(&r.be, "cpu", &(struct ra_backend_params){ .threads = o->threads })) != RA_OK ||
        (rc = ra_context_init(&r.cx, &r.m, r.be)) != RA_OK || (rc = make_variants(&r)) != RA_OK ||
        (rc = store_open(&r)) != RA_OK)
        goto out;
    if (!(r.requests = json_array())) {
        rc = ra_error_set(RA_ENOMEM, PROG ": out of memory");
        goto out;
    }
    printf("# reuse-quality: %s, %d requests, %d answer tokens per mode, blend check layers", o->model,
           o->n_requests, o->steps);
    for (int i = 0; i < o->n_check; i++)
        printf("%s%d", i ? "," : " ", o->check[i]);
    printf(", random rows: %d seeds; store %s\n", o->seeds, r.store_dir);
    for (int i = 0; i < o->n_requests && rc == RA_OK; i++)
        if ((rc = run_request(&r, o->requests[i])) == RA_OK && o->json)
            rc = write_json(&r);
    if (rc == RA_OK) {
        printf("# means over %d requests (random: and over its %d seeds); kdev, vdev, attn: relative deviation from "
               "full prefill, mean over the layers\n", o->n_requests, o->seeds);
        print_table(&r);
    }
out:
    run_free(&r);
    return rc;
}

static int double_list(const char *s, const char *flag, double *out, int max, int *n)
{
    char *copy = strdup(s), *save = NULL;
    int rc = copy ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    *n = 0;
    for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && rc == RA_OK; t = strtok_r(NULL, ",", &save)) {
        if (*n == max)
            rc = ra_error_set(RA_EINVAL, "%s: more than %d values", flag, max);
        else if ((rc = ra_arg_double(t, flag, &out[*n])) == RA_OK && !(out[*n] >= 0 && out[*n] <= 1))
            rc = ra_error_set(RA_EINVAL, "%s: '%s' is not a ratio in [0, 1]", flag, t);
        (*n)++;
    }
    free(copy);
    if (rc == RA_OK && *n == 0)
        rc = ra_error_set(RA_EINVAL, "%s: no values given", flag);
    return rc;
}

static int parse(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'm' },        { "ratios", required_argument, NULL, 'r' },
        { "random-ratios", required_argument, NULL, 'R' }, { "seeds", required_argument, NULL, 'S' },
        { "check-layers", required_argument, NULL, 'c' },  { "steps", required_argument, NULL, 's' },
        { "json", required_argument, NULL, 'j' },          { "tmpdir", required_argument, NULL, 'd' },
        { "threads", required_argument, NULL, 'T' },       { "help", no_argument, NULL, 'h' },
        { "craft-ratios", required_argument, NULL, 'C' },
        { NULL, 0, NULL, 0 },
    };
    int opt, rc = RA_OK;
    *o = (struct options){ .ratios = { 0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1 }, .n_ratios = 8,
                           .random_ratios = { 0.05, 0.15, 0.3 }, .n_random = 3, .seeds = 3,
                           .steps = 24, .threads = 1, .check = { 1 }, .n_check = 1, .n_craft = -1 };
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1 && rc == RA_OK) {
        switch (opt) {
        case 'm': o->model = optarg; break;
        case 'r': rc = double_list(optarg, "--ratios", o->ratios, MAX_RATIOS, &o->n_ratios); break;
        case 'R':
            if (!strcmp(optarg, "none"))
                o->n_random = 0;
            else
                rc = double_list(optarg, "--random-ratios", o->random_ratios, MAX_RATIOS, &o->n_random);
            break;
        case 'S': rc = ra_arg_int(optarg, "--seeds", 1, 1000, &o->seeds); break;
        case 'C':
            if (!strcmp(optarg, "none"))
                o->n_craft = 0;
            else
                rc = double_list(optarg, "--craft-ratios", o->craft_ratios, MAX_RATIOS, &o->n_craft);
            break;
        case 'c':
            rc = ra_arg_int_list(optarg, "--check-layers", 0, 1 << 20, o->check, RA_BLEND_MAX_CHECK, &o->n_check);
            break;
        case 's': rc = ra_arg_int(optarg, "--steps", 1, 4096, &o->steps); break;
        case 'j': o->json = optarg; break;
        case 'd': o->tmpdir = optarg; break;
        case 'T': rc = ra_arg_int(optarg, "--threads", 1, 1024, &o->threads); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (rc != RA_OK)
        return ra_arg_fail(PROG);
    if (o->n_craft < 0) { /* craft at blend's ratios */
        memcpy(o->craft_ratios, o->ratios, sizeof o->ratios);
        o->n_craft = o->n_ratios;
    }
    if (!o->model)
        return ra_arg_usage_error(PROG, "--model is required");
    if (optind >= argc)
        return ra_arg_usage_error(PROG, "no request files given");
    for (int i = 1; i < o->n_check; i++)
        if (o->check[i] <= o->check[i - 1])
            return ra_arg_usage_error(PROG, "--check-layers must be ascending");
    o->requests = argv + optind;
    o->n_requests = argc - optind;
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse(argc, argv, &o);
    if (rc != 0)
        return rc;
    if (o.json && ra_outfile_check(o.json) != RA_OK)
        return ra_arg_fail(PROG);
    if (study(&o) != RA_OK)
        return ra_arg_fail(PROG);
    return 0;
}
