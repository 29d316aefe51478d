/* bench-decode: decode from an offloaded KV cache (src/offload), one process.
 *
 * For each context length it runs one prefill of random tokens (KVPR's layer
 * inputs captured), then decodes --steps greedy tokens with each --offload mode
 * from the same prompt rows, with a device budget of --budget-frac of the KV
 * (25% by default), and prints per output token: bytes fetched per layer (KV
 * and X), the device working set, the link time, the emulated device time and
 * the wall time, and KVPR's split. Every exact mode (full, kvpr) must give
 * the tokens of `none`: a mismatch is an error. InfiniGen is approximate and
 * exempt: instead, per context, ra_infinigen_quality teacher-forces it on
 * none's greedy tokens for --ig-steps steps (clipped to the model's context)
 * and the row shows the greedy-token agreement with none, the mean KL
 * divergence of the next-token distributions and the mean attention-mass
 * recall of the selected tokens. --csv FILE appends one line per (context,
 * mode) for jobs/plot-bench-decode. On the CPU backend the host link is
 * EMULATED (rows copied, link time modelled): the table says so. Timings on a
 * shared machine mean little; the byte columns are exact. */
#include "offload/infinigen.h"
#include "args.h"
#include "offload/offload.h"
#include "ra_core.h"

#include <errno.h>

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 16

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-decode --model PATH [options]\n"
               "  --contexts LIST         prompt lengths (default 512,1024,2048,4096,8192; clipped to the model)\n"
               "  --steps N               tokens decoded per mode (default 8)\n"
               "  --modes LIST            offload modes, none first (default none,full,kvpr,infinigen)\n"
               "  --ig-steps N            InfiniGen quality: teacher-forced steps (default 128, clipped to the\n"
               "                          model's context; 0: no quality figures)\n"
               "  --random-weights        say that quality figures on this model mean little (synthetic weights)\n"
               "  --csv FILE              append one line per context and mode (header if FILE is empty)\n"
               "  --budget-frac F         device KV budget as a fraction of the KV (default 0.25)\n"
               "  --host-link-gbps G      emulated host link (default 16)\n"
               "  --host-link-latency-us U  per message (default 5)\n"
               "  --kvpr-l L              force KVPR's split (default: planned; on the CPU backend the\n"
               "                          recompute costs the whole span's GEMM, so the plan is often 0)\n"
               "  --threads N             CPU threads (default 1)\n");
}

/* What every context's run shares. */
struct bench {
    char (*modes)[16];
    int n_modes;
    double frac, gbps, lat_us;
    int force_l;
    int ig_steps;     /* quality steps; 0: none */
    FILE *csv;        /* NULL: no CSV */
    const char *name; /* the model, in the CSV */
};

/* One (context, mode) row; NAN: not applicable (printed "-", "NaN" in the CSV). */
struct row {
    double kv_b, x_b, ws, link_ms, emul_ms, wall_ms, kvpr_l;
    double q_steps, agree, kl_mean, kl_max, recall, recall_min;
};

static void put(double v, int width, int prec)
{
    if (isnan(v))
        printf(" %*s", width, "-");
    else
        printf(" %*.*f", width, prec, v);
}

static void row_print(const struct bench *b, int n, const char *mode, const struct row *r)
{
    printf("%6d %-9s", n, mode);
    put(r->kv_b, 12, 0), put(r->x_b, 12, 0), put(r->ws, 12, 0), put(r->link_ms, 10, 3), put(r->emul_ms, 12, 3);
    put(r->wall_ms, 10, 3), put(r->kvpr_l, 6, 0), put(r->q_steps, 7, 0), put(r->agree, 7, 3), put(r->kl_mean, 9, 4);
    put(r->recall, 7, 4);
    printf("\n");
    if (b->csv)
        fprintf(b->csv, "%s,%d,%s,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g\n",
                b->name, n, mode, r->kv_b, r->x_b, r->ws, r->link_ms, r->emul_ms, r->wall_ms, r->kvpr_l, r->q_steps,
                r->agree, r->kl_mean, r->kl_max, r->recall, r->recall_min);
}

static const char csv_header[] = "model,ctx,mode,kv_bytes_per_layer,x_bytes_per_layer,ws_bytes,link_ms_per_tok,"
                                 "emul_ms_per_tok,wall_ms_per_tok,kvpr_l,ig_steps,agreement,kl_mean,kl_max,"
                                 "recall_mean,recall_min\n";

/* InfiniGen's quality against none from the same prompt (teacher-forced on
 * none's greedy tokens), with the mode's parameters; leaves NAN when the
 * context leaves no room or --ig-steps is 0. */
static int quality(struct ra_context *cx, const struct bench *b, const struct ra_offload_config *cfg,
                   const int32_t *prompt, int n, struct row *r)
{
    const struct ra_model *m = cx->model;
    const int steps = b->ig_steps < m->config.seq_len - n ? b->ig_steps : m->config.seq_len - n;
    struct ra_infinigen_params p;
    struct ra_infinigen_quality q;
    int rc;
    if (steps < 1)
        return RA_OK;
    if ((rc = ra_infinigen_params_of(cfg, &p)) != RA_OK ||
        (rc = ra_infinigen_quality(cx, &p, cfg->ig_pool_mem, prompt, n, steps, &q)) != RA_OK)
        return rc;
    r->q_steps = q.steps, r->agree = q.agreement, r->kl_mean = q.kl_mean, r->kl_max = q.kl_max;
    r->recall = q.recall_mean, r->recall_min = q.recall_min;
    return RA_OK;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        b = x[i] > x[b] ? i : b;
    return b;
}

static int bench_context(struct ra_context *cx, int n, int steps, const struct bench *b)
{
    const struct ra_model *m = cx->model;
    char(*modes)[16] = b->modes;
    const int n_modes = b->n_modes, force_l = b->force_l;
    const double frac = b->frac, gbps = b->gbps, lat_us = b->lat_us;
    const struct ra_config *c = &m->config;
    const int V = c->vocab_size, rows = n + steps;
    struct ra_kvcache kv = { 0 };
    int32_t *prompt = malloc((size_t)n * sizeof *prompt), *ref = malloc((size_t)steps * sizeof *ref),
            *got = malloc((size_t)steps * sizeof *got);
    float *logits0 = malloc((size_t)V * sizeof(float)), *logits = malloc((size_t)V * sizeof(float));
    struct ra_offload *kvpr = NULL;
    const double kv_bytes = 2.0 * c->n_layers * rows * ra_config_kv_dim(c) * sizeof(float);
    int rc = (!prompt || !ref || !got || !logits0 || !logits) ? ra_error_set(RA_ENOMEM, "out of memory") : RA_OK;
    srand(1234);
    for (int i = 0; i < n && rc == RA_OK; i++)
        prompt[i] = 1 + rand() % (V - 1);
    struct ra_offload_config cfg = { .mode = RA_OFFLOAD_KVPR, .device_kv_mem = (size_t)(frac * kv_bytes),
                                     .link_gbps = gbps, .link_latency_us = lat_us, .kvpr_force_l = force_l };
    int kvpr_ok = 0;
    for (int i = 0; i < n_modes; i++)
        kvpr_ok |= !strcmp(modes[i], "kvpr");
    if (rc == RA_OK && kvpr_ok && ra_offload_create(&kvpr, cx, &cfg, rows) != RA_OK) {
        printf("%6d %-9s %s\n", n, "kvpr", ra_error_message());
        kvpr = NULL;
    }
    if (rc == RA_OK)
        rc = ra_kvcache_init(&kv, cx->backend, c->n_layers, ra_config_kv_dim(c), rows);
    if (rc == RA_OK && kvpr)
        rc = ra_offload_capture(kvpr);
    if (rc == RA_OK)
        rc = ra_forward_span(cx, prompt, 0, n, &kv, logits0);
    if (rc == RA_OK && kvpr) /* ends the capture before any decode step */
        rc = ra_offload_begin(kvpr, &kv, n);
    for (int i = 0; i < n_modes && rc == RA_OK; i++) {
        enum ra_offload_mode mode;
        if ((rc = ra_offload_mode_parse(modes[i], &mode)) != RA_OK)
            break;
        struct ra_offload *o = NULL;
        cfg.mode = mode;
        cfg.kvpr_force_l = mode == RA_OFFLOAD_KVPR ? force_l : -1;
        if (mode == RA_OFFLOAD_KVPR)
            o = kvpr;
        else if (mode != RA_OFFLOAD_NONE && ra_offload_create(&o, cx, &cfg, rows) != RA_OK) {
            printf("%6d %-9s %s\n", n, modes[i], ra_error_message());
            continue;
        }
        if (mode != RA_OFFLOAD_NONE && !o)
            continue;
        if (o && o != kvpr && (rc = ra_offload_begin(o, &kv, n)) != RA_OK)
            break;
        memcpy(logits, logits0, (size_t)V * sizeof(float));
        const double t0 = ra_wall_s();
        for (int s = 0; s < steps && rc == RA_OK; s++) {
            got[s] = argmax(logits, V);
            rc = o ? ra_offload_step(o, got[s], n + s, logits) : ra_forward_span(cx, &got[s], n + s, 1, &kv, logits);
        }
        const double wall = (ra_wall_s() - t0) / steps;
        if (rc != RA_OK)
            break;
        /* InfiniGen is approximate: its quality figures replace the token check */
        if (mode == RA_OFFLOAD_NONE)
            memcpy(ref, got, (size_t)steps * sizeof *ref);
        else if (mode != RA_OFFLOAD_INFINIGEN && memcmp(ref, got, (size_t)steps * sizeof *ref))
            rc = ra_error_set(RA_ERANGE, "context %d: --offload %s decoded other tokens than none", n, modes[i]);
        struct row r = { NAN, NAN, NAN, NAN, NAN, 1e3 * wall, NAN, NAN, NAN, NAN, NAN, NAN, NAN };
        if (o) {
            const struct ra_offload_stats *st = ra_offload_stats(o);
            const double per = (double)st->steps * c->n_layers;
            r.kv_b = st->bytes_kv / per, r.x_b = st->bytes_x / per, r.ws = (double)ra_offload_working_set(o);
            r.link_ms = 1e3 * st->link_s / st->steps, r.emul_ms = 1e3 * st->emulated_s / st->steps;
            r.kvpr_l = mode == RA_OFFLOAD_KVPR ? (double)st->kvpr_l : NAN;
        }
        if (rc == RA_OK && mode == RA_OFFLOAD_INFINIGEN)
            rc = quality(cx, b, &cfg, prompt, n, &r);
        if (rc == RA_OK)
            row_print(b, n, modes[i], &r);
        if (o != kvpr)
            ra_offload_free(o);
    }
    ra_offload_free(kvpr);
    ra_kvcache_free(&kv);
    free(prompt), free(ref), free(got), free(logits0), free(logits);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'm' },   { "contexts", required_argument, NULL, 'c' },
        { "steps", required_argument, NULL, 's' },   { "modes", required_argument, NULL, 'M' },
        { "budget-frac", required_argument, NULL, 'b' }, { "host-link-gbps", required_argument, NULL, 'g' },
        { "host-link-latency-us", required_argument, NULL, 'l' }, { "threads", required_argument, NULL, 'T' },
        { "kvpr-l", required_argument, NULL, 'L' },  { "ig-steps", required_argument, NULL, 'q' },
        { "csv", required_argument, NULL, 'C' },     { "random-weights", no_argument, NULL, 'R' },
        { "help", no_argument, NULL, 'h' },          { NULL, 0, NULL, 0 },
    };
    const char *model = NULL;
    int ctx[MAX_LIST] = { 512, 1024, 2048, 4096, 8192 }, n_ctx = 5, steps = 8, threads = 1, n_modes = 0, opt,
        rc = RA_OK;
    double frac = 0.25, gbps = 16, lat = 5;
    int force_l = -1, ig_steps = 128, random_weights = 0;
    char modes[8][16];
    const char *mode_list = "none,full,kvpr,infinigen", *csv_path = NULL;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1 && rc == RA_OK) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 'c': rc = ra_arg_int_list(optarg, "--contexts", 1, 1 << 20, ctx, MAX_LIST, &n_ctx); break;
        case 's': rc = ra_arg_int(optarg, "--steps", 1, 100000, &steps); break;
        case 'M': mode_list = optarg; break;
        case 'b': rc = ra_arg_double(optarg, "--budget-frac", &frac); break;
        case 'g': rc = ra_arg_double(optarg, "--host-link-gbps", &gbps); break;
        case 'l': rc = ra_arg_double(optarg, "--host-link-latency-us", &lat); break;
        case 'T': rc = ra_arg_int(optarg, "--threads", 1, 1024, &threads); break;
        case 'L': rc = ra_arg_int(optarg, "--kvpr-l", 0, 1 << 30, &force_l); break;
        case 'q': rc = ra_arg_int(optarg, "--ig-steps", 0, 1 << 20, &ig_steps); break;
        case 'C': csv_path = optarg; break;
        case 'R': random_weights = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (rc != RA_OK)
        return ra_arg_fail("bench-decode");
    if (!model)
        return ra_arg_usage_error("bench-decode", "--model is required");
    for (const char *p = mode_list; *p && n_modes < 8;) {
        size_t len = strcspn(p, ",");
        snprintf(modes[n_modes++], sizeof modes[0], "%.*s", (int)len, p);
        p += len + (p[len] == ',');
    }
    if (strcmp(modes[0], "none"))
        return ra_arg_usage_error("bench-decode", "--modes must start with none (the reference)");
    for (int i = 0; i < n_modes; i++) {
        enum ra_offload_mode mode;
        if (ra_offload_mode_parse(modes[i], &mode) != RA_OK)
            return ra_arg_usage_error("bench-decode", "--modes: %s", ra_error_message());
    }
    FILE *csv = NULL;
    if (csv_path) { /* appended to, so that jobs/bench-decode gathers both models in one file */
        if (!(csv = fopen(csv_path, "a"))) {
            fprintf(stderr, "bench-decode: --csv %s: %s\n", csv_path, strerror(errno));
            return 1;
        }
        if (ftell(csv) == 0)
            fputs(csv_header, csv);
    }
    const char *name = strrchr(model, '/') && strrchr(model, '/')[1] ? strrchr(model, '/') + 1 : model;
    struct bench b = { modes, n_modes, frac, gbps, lat, force_l, ig_steps, csv, name };
    struct ra_model m;
    struct ra_backend *be = NULL;
    struct ra_context cx = { 0 };
    if ((rc = ra_model_load(&m, model)) != RA_OK)
        return ra_arg_fail("bench-decode");
    if ((rc = ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = threads })) == RA_OK)
        rc = ra_context_init(&cx, &m, be);
    if (rc == RA_OK) {
        printf("# bench-decode %s: %d layers, dim %d, kv_dim %d; device budget %.0f%% of the KV; host link %.3g GB/s "
               "+ %.3g us/message, EMULATED on the %s backend (rows copied, link time modelled)\n", model,
               m.config.n_layers, m.config.dim, ra_config_kv_dim(&m.config), 100 * frac, gbps, lat, be->ops->name);
        printf("# per output token: kv_B/layer, x_B/layer = bytes fetched per layer (K/V rows, KVPR's layer inputs); "
               "ws_bytes = device working set; link_ms = emulated link time; emul_ms/tok = emulated device time; "
               "wall_ms = measured time per output token\n"
               "# full and kvpr are exact (their tokens must equal none's); infinigen is approximate: q_steps "
               "teacher-forced steps on none's tokens give agree = greedy-token agreement with none, kl = mean "
               "KL(none || infinigen) of the next-token distributions in nats, recall = mean attention mass of the "
               "selected tokens (layers >= 1)\n");
        if (random_weights)
            printf("# NOTE: this model has random (synthetic) weights: its attention is nearly uniform, so InfiniGen's "
                   "quality figures (agree, kl, recall) mean little here; the byte and time columns hold\n");
        printf("%6s %-9s %12s %12s %12s %10s %12s %10s %6s %7s %7s %9s %7s\n", "ctx", "mode", "kv_B/layer",
               "x_B/layer", "ws_bytes", "link_ms", "emul_ms/tok", "wall_ms", "kvpr_l", "q_steps", "agree", "kl",
               "recall");
    }
    for (int i = 0; i < n_ctx && rc == RA_OK; i++) {
        if (ctx[i] + steps > m.config.seq_len) {
            printf("%6d (beyond the model's context of %d)\n", ctx[i], m.config.seq_len);
            continue;
        }
        rc = bench_context(&cx, ctx[i], steps, &b);
        fflush(stdout);
    }
    if (rc != RA_OK)
        ra_arg_fail("bench-decode");
    if (csv && fclose(csv) != 0 && rc == RA_OK) {
        fprintf(stderr, "bench-decode: --csv %s: %s\n", csv_path, strerror(errno));
        rc = RA_EIO;
    }
    ra_context_free(&cx);
    ra_model_free(&m);
    ra_backend_free(be);
    return rc == RA_OK ? 0 : 1;
}
