/* quality-study: the approximate modes' quality on a real model and a real
 * prompt, against dense f32 decoding of the same model.
 *
 * From the prompt (--prompt-ids-file: token ids, e.g. of a long English text,
 * written by jobs/quality-prompts.py) dense f32 decoding gives the reference:
 * its greedy tokens and, for each of --steps decode steps, its next-token
 * logits. Each mode then runs twice:
 *   - teacher-forced on the reference's tokens, so that every step compares
 *     two next-token distributions from the same context: `agree` = fraction
 *     of steps whose greedy tokens agree, `kl` = mean (and max) KL(f32 ||
 *     mode) in nats;
 *   - free-running (its own greedy tokens): `same` = how many of the first
 *     --steps generated tokens equal the reference's before the first that
 *     differs (a free-running decode that diverged once goes its own way).
 * Modes: bf16 compute (the linear layers in bf16 on the CPU's bf16 unit, the
 * KV cache f32), a bf16 KV cache (f32 compute), and InfiniGen at each
 * --budgets cap (a percentage of the pooled tokens a layer may fetch; ratio
 * and alpha as --offload infinigen's defaults unless given), whose rows add
 * the fraction of the pooled K/V rows fetched over all layers (the dense
 * layers, 0 and 1 unless --dense-layers says otherwise, fetch every token),
 * the attention-mass recall of the fetched tokens (mean over steps, the
 * speculated layers and heads; and the smallest per-(layer, head) value), and
 * the cosine of the speculated and the real query.
 * --csv FILE appends one line per mode for jobs/quality-study's summary. */
#include "args.h"
#include "backend.h"
#include "forward.h"
#include "kvcache.h"
#include "model.h"
#include "offload/infinigen.h"
#include "offload/kvpool.h"
#include "prompt.h"
#include "sampler.h"
#include "status.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUDGETS 16

static void usage(FILE *f)
{
    fprintf(f, "usage: quality-study --model PATH --prompt-ids-file F [options]\n"
               "  --steps N          decode steps compared (default 128)\n"
               "  --budgets LIST     InfiniGen caps, percent of a layer's pooled tokens (default 10,20,30)\n"
               "  --ratio R          InfiniGen partial columns, fraction of head_dim (default 0.3)\n"
               "  --alpha A          InfiniGen threshold below the max score (default 5; inf: every token)\n"
               "  --dense-layers N   InfiniGen layers that fetch every token (default 2, as InfiniGen's code)\n"
               "  --modes LIST       of bf16-compute, bf16-kv, infinigen (default all three)\n"
               "  --name S           the prompt's name in the table and CSV (default: F's file name)\n"
               "  --csv FILE         append one line per mode (a header if FILE is empty)\n"
               "  --threads N        CPU threads (default 1)\n");
}

/* The dense f32 reference: tokens [steps + 1] (tokens[0] from the prompt's
 * logits, tokens[s + 1] from step s's) and logits [steps][vocab]. */
struct reference {
    int steps, vocab;
    int32_t *tokens;
    float *logits;
};

/* One mode's row: NAN where it does not apply. */
struct row {
    double fetched, recall, recall_min, q_cos, agree, kl_mean, kl_max;
    int same;
};

static int kv_init(struct ra_kvcache *kv, struct ra_context *cx, int rows, enum ra_dtype dtype)
{
    const struct ra_config *c = &cx->model->config;
    return ra_kvcache_init_dtype(kv, cx->backend, c->n_layers, ra_config_kv_dim(c), rows, dtype);
}

static int reference_run(struct ra_context *cx, const int32_t *prompt, int n, int steps, struct reference *ref)
{
    const int V = cx->model->config.vocab_size;
    struct ra_kvcache kv = { 0 };
    float *last = malloc((size_t)V * sizeof(float));
    *ref = (struct reference){ steps, V, malloc((size_t)(steps + 1) * sizeof(int32_t)),
                               malloc((size_t)steps * V * sizeof(float)) };
    int rc = last && ref->tokens && ref->logits ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory for the reference");
    if (rc == RA_OK && (rc = kv_init(&kv, cx, n + steps, RA_DTYPE_F32)) == RA_OK)
        rc = ra_forward_span(cx, prompt, 0, n, &kv, last);
    if (rc == RA_OK)
        ref->tokens[0] = ra_argmax(last, V);
    for (int s = 0; s < steps && rc == RA_OK; s++) {
        float *l = ref->logits + (size_t)s * V;
        if ((rc = ra_forward_span(cx, &ref->tokens[s], n + s, 1, &kv, l)) == RA_OK)
            ref->tokens[s + 1] = ra_argmax(l, V);
    }
    ra_kvcache_free(&kv);
    free(last);
    return rc;
}

/* Teacher-forced, step s feeding the reference's token s and comparing logits; and free-running,
 * its own greedy tokens until the first that differs. Until then both feed the same tokens at the
 * same positions, so one pass gives both: r->same counts the leading steps whose greedy token is
 * the reference's (the prompt's logits pick step 0's, step s's logits step s + 1's). */
static int dense_row(struct ra_context *cx, enum ra_dtype kv_dtype, const int32_t *prompt, int n,
                     const struct reference *ref, struct row *r)
{
    const int V = ref->vocab;
    struct ra_kvcache kv = { 0 };
    float *l = malloc((size_t)V * sizeof(float));
    int rc = l ? kv_init(&kv, cx, n + ref->steps, kv_dtype) : ra_error_set(RA_ENOMEM, "out of memory");
    if (rc == RA_OK)
        rc = ra_forward_span(cx, prompt, 0, n, &kv, l);
    r->agree = r->kl_mean = r->kl_max = 0;
    int follows = rc == RA_OK && ra_argmax(l, V) == ref->tokens[0];
    r->same = follows;
    for (int s = 0; s < ref->steps && rc == RA_OK; s++) {
        const float *want = ref->logits + (size_t)s * V;
        if ((rc = ra_forward_span(cx, &ref->tokens[s], n + s, 1, &kv, l)) != RA_OK)
            break;
        const double kl = ra_infinigen_kl(want, l, V);
        const int agree = ra_argmax(l, V) == ra_argmax(want, V);
        r->agree += agree;
        r->kl_mean += kl;
        r->kl_max = fmax(r->kl_max, kl);
        follows = follows && agree;
        r->same += follows && s + 1 < ref->steps;
    }
    r->agree /= ref->steps;
    r->kl_mean /= ref->steps;
    ra_kvcache_free(&kv);
    free(l);
    return rc;
}

/* InfiniGen free-running: calibrated and prefilled as ra_infinigen_quality does. */
static int infinigen_free(struct ra_context *cx, const struct ra_infinigen_params *p, const int32_t *prompt, int n,
                          const struct reference *ref, struct row *r)
{
    const struct ra_config *c = &cx->model->config;
    const int V = ref->vocab;
    struct ra_infinigen ig = { 0 };
    struct ra_kvpool pool = { 0 };
    float *l = malloc((size_t)V * sizeof(float));
    int rc = l ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    if (rc == RA_OK &&
        ((rc = ra_kvpool_init(&pool, c->n_layers, c->n_kv_heads, c->head_dim, n + ref->steps, 0)) != RA_OK ||
         (rc = ra_infinigen_init(&ig, c, p, pool.capacity)) != RA_OK ||
         (rc = ra_infinigen_calibrate(&ig, cx, prompt, n)) != RA_OK))
        goto out;
    rc = ra_infinigen_prefill(&ig, &pool, cx, prompt, n, l);
    r->same = 0;
    while (rc == RA_OK && r->same < ref->steps && ra_argmax(l, V) == ref->tokens[r->same]) {
        const int32_t tok = ref->tokens[r->same];
        if (++r->same < ref->steps)
            rc = ra_infinigen_decode(&ig, &pool, cx, tok, n + r->same - 1, l, NULL);
    }
out:
    ra_infinigen_free(&ig);
    ra_kvpool_free(&pool);
    free(l);
    return rc;
}

static int infinigen_row(struct ra_context *cx, const struct ra_infinigen_params *p, const int32_t *prompt, int n,
                         const struct reference *ref, struct row *r)
{
    struct ra_infinigen_quality q;
    int rc = ra_infinigen_quality(cx, p, 0, prompt, n, ref->steps, &q);
    if (rc != RA_OK)
        return rc;
    r->fetched = q.bytes_dense_per_layer > 0 ? q.bytes_per_layer / q.bytes_dense_per_layer : NAN;
    r->recall = q.recall_mean, r->recall_min = q.recall_min, r->q_cos = q.q_cos;
    r->agree = q.agreement, r->kl_mean = q.kl_mean, r->kl_max = q.kl_max;
    return infinigen_free(cx, p, prompt, n, ref, r);
}

struct study {
    const char *name; /* the prompt's */
    int n, steps;
    FILE *csv;
};

static void put(double v, int width, int prec)
{
    if (isnan(v))
        printf(" %*s", width, "-");
    else
        printf(" %*.*f", width, prec, v);
}

static void row_print(const struct study *st, const char *mode, int budget, const struct row *r)
{
    char b[16] = "-";
    if (budget > 0)
        snprintf(b, sizeof b, "%d%%", budget);
    printf("%-12s %-13s %6s", st->name, mode, b);
    put(100 * r->fetched, 8, 1), put(r->recall, 7, 4), put(r->recall_min, 7, 3), put(r->q_cos, 6, 3);
    put(r->agree, 6, 3), put(r->kl_mean, 8, 4), put(r->kl_max, 7, 3);
    printf(" %4d/%d\n", r->same, st->steps);
    fflush(stdout);
    if (st->csv)
        fprintf(st->csv, "%s,%d,%s,%d,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%d,%d\n", st->name, st->n, mode,
                budget, r->fetched, r->recall, r->recall_min, r->q_cos, r->agree, r->kl_mean, r->kl_max, r->same,
                st->steps);
}

static const char csv_header[] =
    "prompt,n_prompt,mode,budget_pct,fetched,recall,recall_min,q_cos,agree,kl_mean,kl_max,same,steps\n";

/* A context over M on its own CPU backend computing in COMPUTE. */
static int context_open(const struct ra_model *m, enum ra_compute compute, int threads, struct ra_context *cx,
                        struct ra_backend **be)
{
    int rc = ra_backend_open(be, "cpu", &(struct ra_backend_params){ .threads = threads });
    if (rc == RA_OK) {
        (*be)->compute = compute;
        rc = ra_context_init(cx, m, *be);
    }
    if (rc != RA_OK) {
        ra_backend_free(*be);
        *be = NULL;
    }
    return rc;
}

static int has_mode(const char *list, const char *mode)
{
    const size_t len = strlen(mode);
    for (const char *p = list; (p = strstr(p, mode)); p += len)
        if ((p == list || p[-1] == ',') && (p[len] == ',' || !p[len]))
            return 1;
    return 0;
}

struct options {
    const char *model, *ids_file, *name, *csv, *modes;
    int steps, threads, budgets[MAX_BUDGETS], n_budgets;
    struct ra_infinigen_params ig;
};

static int study(const struct options *o, const int32_t *prompt, int n, FILE *csv)
{
    struct ra_model m;
    struct ra_context cx = { 0 }, cb = { 0 }; /* f32 and bf16 compute over the one model */
    struct ra_backend *be = NULL, *bb = NULL;
    struct reference ref = { 0 };
    struct study st = { o->name, n, o->steps, csv };
    const struct row none = { NAN, NAN, NAN, NAN, 1, 0, 0, o->steps };
    char unit[128];
    int rc = ra_model_load(&m, o->model);
    if (rc != RA_OK)
        return rc;
    if ((rc = context_open(&m, RA_COMPUTE_F32, o->threads, &cx, &be)) != RA_OK)
        goto out;
    if (n + o->steps > m.config.seq_len) {
        rc = ra_error_set(RA_ERANGE, "%s: %d prompt tokens + %d steps exceed the model's context of %d", o->ids_file,
                          n, o->steps, m.config.seq_len);
        goto out;
    }
    printf("# %s, prompt %s (%d tokens), %d decode steps against dense f32 decoding; infinigen ratio %.2f alpha %g, "
           "layers 0-%d dense\n", o->model, o->ids_file, n, o->steps, o->ig.ratio, o->ig.alpha,
           ra_infinigen_dense_layers(&o->ig, m.config.n_layers) - 1);
    printf("%-12s %-13s %6s %8s %7s %7s %6s %6s %8s %7s %9s\n", "prompt", "mode", "budget", "fetched%", "recall",
           "rec_min", "q_cos", "agree", "kl", "kl_max", "same");
    if ((rc = reference_run(&cx, prompt, n, o->steps, &ref)) != RA_OK)
        goto out;
    row_print(&st, "f32", 0, &none);
    if (has_mode(o->modes, "bf16-compute")) {
        struct row r = none;
        if ((rc = context_open(&m, RA_COMPUTE_BF16, o->threads, &cb, &bb)) != RA_OK)
            goto out;
        ra_backend_cpu_describe_linear(bb, unit, sizeof unit);
        if ((rc = dense_row(&cb, RA_DTYPE_F32, prompt, n, &ref, &r)) == RA_OK)
            row_print(&st, "bf16-compute", 0, &r);
        ra_context_free(&cb);
        ra_backend_free(bb);
        if (rc != RA_OK)
            goto out;
        printf("#   (bf16 compute: %s)\n", unit);
    }
    if (has_mode(o->modes, "bf16-kv")) {
        struct row r = none;
        if ((rc = dense_row(&cx, RA_DTYPE_BF16, prompt, n, &ref, &r)) != RA_OK)
            goto out;
        row_print(&st, "bf16-kv", 0, &r);
    }
    for (int i = 0; i < o->n_budgets && has_mode(o->modes, "infinigen"); i++) {
        struct ra_infinigen_params p = o->ig;
        struct row r = none;
        p.cap = o->budgets[i] / 100.0f;
        if ((rc = infinigen_row(&cx, &p, prompt, n, &ref, &r)) != RA_OK)
            goto out;
        row_print(&st, "infinigen", o->budgets[i], &r);
    }
out:
    free(ref.tokens);
    free(ref.logits);
    ra_context_free(&cx);
    ra_model_free(&m);
    ra_backend_free(be);
    return rc;
}

static int parse(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'm' },  { "prompt-ids-file", required_argument, NULL, 'I' },
        { "steps", required_argument, NULL, 's' },  { "budgets", required_argument, NULL, 'b' },
        { "ratio", required_argument, NULL, 'r' },  { "alpha", required_argument, NULL, 'a' },
        { "modes", required_argument, NULL, 'M' },  { "name", required_argument, NULL, 'N' },
        { "csv", required_argument, NULL, 'C' },    { "threads", required_argument, NULL, 'T' },
        { "dense-layers", required_argument, NULL, 'D' },
        { "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
    };
    int opt, rc = RA_OK;
    *o = (struct options){ .steps = 128, .threads = 1, .budgets = { 10, 20, 30 }, .n_budgets = 3,
                           .modes = "bf16-compute,bf16-kv,infinigen" };
    ra_infinigen_params_default(&o->ig);
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1 && rc == RA_OK) {
        switch (opt) {
        case 'm': o->model = optarg; break;
        case 'I': o->ids_file = optarg; break;
        case 's': rc = ra_arg_int(optarg, "--steps", 1, 1 << 20, &o->steps); break;
        case 'b': rc = ra_arg_int_list(optarg, "--budgets", 1, 100, o->budgets, MAX_BUDGETS, &o->n_budgets); break;
        case 'r': rc = ra_arg_float(optarg, "--ratio", &o->ig.ratio); break;
        case 'a': /* "inf": every token passes the threshold, as --infinigen-alpha inf */
            if (!strcmp(optarg, "inf"))
                o->ig.alpha = INFINITY;
            else
                rc = ra_arg_float(optarg, "--alpha", &o->ig.alpha);
            break;
        case 'M': o->modes = optarg; break;
        case 'N': o->name = optarg; break;
        case 'C': o->csv = optarg; break;
        case 'T': rc = ra_arg_int(optarg, "--threads", 1, 1024, &o->threads); break;
        case 'D': rc = ra_arg_int(optarg, "--dense-layers", 1, 1 << 20, &o->ig.dense_layers); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (rc != RA_OK)
        return ra_arg_fail("quality-study");
    if (!o->model || !o->ids_file)
        return ra_arg_usage_error("quality-study", "--model and --prompt-ids-file are required");
    if (!(o->ig.ratio > 0 && o->ig.ratio <= 1) || !(o->ig.alpha > 0))
        return ra_arg_usage_error("quality-study", "--ratio must be in (0, 1] and --alpha positive");
    if (!o->name) {
        const char *slash = strrchr(o->ids_file, '/');
        o->name = slash ? slash + 1 : o->ids_file;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse(argc, argv, &o), n = 0;
    if (rc != 0)
        return rc;
    char *text = NULL;
    size_t len = 0;
    int32_t *prompt = NULL;
    FILE *csv = NULL;
    if ((rc = ra_read_file(o.ids_file, &text, &len)) != RA_OK ||
        (rc = ra_prompt_parse_ids(text, o.ids_file, &prompt, &n)) != RA_OK)
        goto fail;
    if (o.csv) {
        if (!(csv = fopen(o.csv, "a"))) {
            rc = ra_error_set(RA_EIO, "--csv %s: %s", o.csv, strerror(errno));
            goto fail;
        }
        if (ftell(csv) == 0)
            fputs(csv_header, csv);
    }
    if ((rc = study(&o, prompt, n, csv)) != RA_OK)
        goto fail;
    if (csv && fclose(csv) != 0) {
        csv = NULL;
        rc = ra_error_set(RA_EIO, "--csv %s: %s", o.csv, strerror(errno));
        goto fail;
    }
    free(text);
    free(prompt);
    return 0;
fail:
    if (csv)
        fclose(csv);
    free(text);
    free(prompt);
    return ra_arg_fail("quality-study");
}
