/* runahead: process a prompt and generate, on one rank or along a chain of ranks.
 *
 *   runahead --model M --prompt "Once upon a time" --generate 64
 *   mpirun -np 4 runahead --model M --prompt-file p.txt --method kvr
 *
 * Rank 0 reads and tokenizes the prompt and broadcasts the ids; every rank
 * maps the model; the last rank produces the first token and decodes. */
#include "config.h"
#include "ra_mpi.h"
#include "runahead.h"

#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum output_kind { OUTPUT_AUTO, OUTPUT_TEXT, OUTPUT_IDS, OUTPUT_JSON };

struct options {
    const char *model, *tokenizer;
    const char *prompt, *prompt_file, *prompt_ids, *prompt_ids_file;
    int generate, threads, tokenize_only, ignore_eos;
    float temperature, top_p;
    unsigned long long seed;
    enum output_kind output;
    const char *method;
};

/* What one run produced, for the output stage. */
struct result {
    int32_t *prompt;
    int n_prompt;
    int32_t *generated;
    int n_generated;
    double t_prefill, t_decode;
};

static int rank, world;

static void usage(FILE *f)
{
    fprintf(f,
"Usage: runahead --model PATH [prompt] [options]\n"
"       mpirun -np P runahead --model PATH [prompt] --method kvr|tsp [options]\n"
"\n"
"Processes a prompt and generates tokens with a Llama-family model.\n"
"\n"
"Model:\n"
"  -m, --model PATH          llama2.c checkpoint (.bin) or Hugging Face directory\n"
"                            (config.json + model.safetensors, or sharded)\n"
"  -z, --tokenizer PATH      llama2.c tokenizer.bin (default: tokenizer.bin next to the model)\n"
"Prompt (exactly one):\n"
"  -p, --prompt TEXT         text, encoded with BOS\n"
"  -f, --prompt-file FILE    text read from FILE\n"
"  -i, --prompt-ids \"1 2 3\"  token ids, space or comma separated\n"
"  -I, --prompt-ids-file F   token ids read from F\n"
"Generation:\n"
"  -n, --generate N          tokens to generate, the first included (default 64)\n"
"  -t, --temperature T       0 = greedy (default 0)\n"
"      --top-p P             nucleus sampling threshold in (0,1] (default 0.9)\n"
"  -s, --seed S              sampling seed (default 1)\n"
"      --ignore-eos          do not stop at the end-of-sequence token\n"
"Execution:\n"
"      --method M            single (default; one rank)\n"
"  -T, --threads N           CPU threads per rank (default: all cores)\n"
"Output:\n"
"  -o, --output KIND         text | ids | json (default: text with a tokenizer, else ids)\n"
"      --tokenize-only       print the prompt's token ids and exit (needs no model)\n"
"  -h, --help                this help\n"
"  -V, --version             version\n"
"\n"
"ids prints the generated ids, space separated, on one line. Timings go to stderr.\n");
}

static int parse_int(const char *s, const char *flag, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return ra_error_set(RA_EINVAL, "%s: '%s' is not an integer in %d..%d", flag, s, lo, hi);
    *out = (int)v;
    return RA_OK;
}

static int parse_float(const char *s, const char *flag, float *out)
{
    char *end;
    float v = strtof(s, &end);
    if (!*s || *end)
        return ra_error_set(RA_EINVAL, "%s: '%s' is not a number", flag, s);
    *out = v;
    return RA_OK;
}

/* Returns RA_OK, a negative status, or 1 when the program should exit 0 (help). */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_TOP_P = 256, OPT_METHOD, OPT_TOKENIZE_ONLY, OPT_IGNORE_EOS };
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'm' },
        { "tokenizer", required_argument, NULL, 'z' },
        { "prompt", required_argument, NULL, 'p' },
        { "prompt-file", required_argument, NULL, 'f' },
        { "prompt-ids", required_argument, NULL, 'i' },
        { "prompt-ids-file", required_argument, NULL, 'I' },
        { "generate", required_argument, NULL, 'n' },
        { "temperature", required_argument, NULL, 't' },
        { "top-p", required_argument, NULL, OPT_TOP_P },
        { "seed", required_argument, NULL, 's' },
        { "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
        { "method", required_argument, NULL, OPT_METHOD },
        { "threads", required_argument, NULL, 'T' },
        { "output", required_argument, NULL, 'o' },
        { "tokenize-only", no_argument, NULL, OPT_TOKENIZE_ONLY },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int c, rc = RA_OK;
    *o = (struct options){ .generate = 64, .temperature = 0.0f, .top_p = 0.9f, .seed = 1, .method = "single" };
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:z:p:f:i:I:n:t:s:T:o:hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'z': o->tokenizer = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case 'i': o->prompt_ids = optarg; break;
        case 'I': o->prompt_ids_file = optarg; break;
        case 'n': rc = parse_int(optarg, "--generate", 0, 1 << 24, &o->generate); break;
        case 't': rc = parse_float(optarg, "--temperature", &o->temperature); break;
        case OPT_TOP_P: rc = parse_float(optarg, "--top-p", &o->top_p); break;
        case 's': {
            char *end;
            o->seed = strtoull(optarg, &end, 10);
            if (!*optarg || *end)
                rc = ra_error_set(RA_EINVAL, "--seed: '%s' is not a non-negative integer", optarg);
            break;
        }
        case OPT_IGNORE_EOS: o->ignore_eos = 1; break;
        case OPT_METHOD: o->method = optarg; break;
        case 'T': rc = parse_int(optarg, "--threads", 1, 1024, &o->threads); break;
        case 'o':
            if (!strcmp(optarg, "text")) o->output = OUTPUT_TEXT;
            else if (!strcmp(optarg, "ids")) o->output = OUTPUT_IDS;
            else if (!strcmp(optarg, "json")) o->output = OUTPUT_JSON;
            else rc = ra_error_set(RA_EINVAL, "--output: '%s' is not text, ids or json", optarg);
            break;
        case OPT_TOKENIZE_ONLY: o->tokenize_only = 1; break;
        case 'h': if (rank == 0) usage(stdout); return 1;
        case 'V': if (rank == 0) printf("runahead %s\n", PACKAGE_VERSION); return 1;
        case ':': return ra_error_set(RA_EINVAL, "%s needs a value (see --help)", argv[optind - 1]);
        default: return ra_error_set(RA_EINVAL, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        if (rc != RA_OK)
            return rc;
    }
    if (optind < argc)
        return ra_error_set(RA_EINVAL, "unexpected argument '%s' (see --help)", argv[optind]);
    int sources = !!o->prompt + !!o->prompt_file + !!o->prompt_ids + !!o->prompt_ids_file;
    if (sources != 1)
        return ra_error_set(RA_EINVAL, "give exactly one of --prompt, --prompt-file, --prompt-ids, --prompt-ids-file (got %d)", sources);
    if (!o->tokenize_only && !o->model)
        return ra_error_set(RA_EINVAL, "no model given (use --model PATH)");
    if (strcmp(o->method, "single") != 0)
        return ra_error_set(RA_EINVAL, "--method: '%s' is not a method (single)", o->method);
    if (world > 1 && !strcmp(o->method, "single"))
        return ra_error_set(RA_EINVAL, "--method single runs on one rank, but %d were started: use mpirun -np 1", world);
    if (!(o->temperature >= 0))
        return ra_error_set(RA_EINVAL, "--temperature %g must be >= 0", o->temperature);
    if (!(o->top_p > 0 && o->top_p <= 1))
        return ra_error_set(RA_EINVAL, "--top-p %g must be in (0, 1]", o->top_p);
    return RA_OK;
}

/* The tokenizer path: --tokenizer, or tokenizer.bin beside (or inside) the model. */
static int find_tokenizer(const struct options *o, char *path, size_t len)
{
    if (o->tokenizer) {
        snprintf(path, len, "%s", o->tokenizer);
        return 1;
    }
    if (!o->model)
        return 0;
    char *copy = strdup(o->model);
    if (!copy)
        return 0;
    snprintf(path, len, "%s/tokenizer.bin", o->model);
    if (access(path, R_OK) != 0)
        snprintf(path, len, "%s/tokenizer.bin", dirname(copy));
    free(copy);
    return access(path, R_OK) == 0;
}

static int need_text(const struct options *o)
{
    return o->prompt || o->prompt_file || o->tokenize_only || o->output == OUTPUT_TEXT;
}

static int read_prompt(const struct options *o, const struct ra_tokenizer *tok, int32_t **ids, int *n)
{
    char *text = NULL;
    int rc;
    if (o->prompt_ids)
        return ra_prompt_parse_ids(o->prompt_ids, "--prompt-ids", ids, n);
    const char *file = o->prompt_ids_file ? o->prompt_ids_file : o->prompt_file;
    if (file && (rc = ra_read_file(file, &text, NULL)) != RA_OK)
        return rc;
    if (o->prompt_ids_file)
        rc = ra_prompt_parse_ids(text, file, ids, n);
    else
        rc = ra_tokenizer_encode(tok, text ? text : o->prompt, 1, ids, n);
    free(text);
    return rc;
}

static int print_piece(void *ctx, int token)
{
    const struct ra_tokenizer *tok = ctx;
    static int prev = 1;
    char byte[2];
    const char *piece = ra_tokenizer_piece(tok, prev, token, byte);
    if (piece)
        fputs(piece, stdout);
    fflush(stdout);
    prev = token;
    return 0;
}

static int write_json(const struct options *o, const struct ra_model *m, const struct ra_tokenizer *tok,
                      const struct result *r)
{
    json_t *root = json_object(), *prompt = json_array(), *gen = json_array();
    char *text = NULL;
    for (int i = 0; i < r->n_prompt; i++)
        json_array_append_new(prompt, json_integer(r->prompt[i]));
    for (int i = 0; i < r->n_generated; i++)
        json_array_append_new(gen, json_integer(r->generated[i]));
    json_object_set_new(root, "model", json_string(o->model));
    json_object_set_new(root, "method", json_string(o->method));
    json_object_set_new(root, "ranks", json_integer(world));
    json_object_set_new(root, "threads", json_integer(m->backend->n_threads));
    json_object_set_new(root, "prompt_tokens", json_integer(r->n_prompt));
    json_object_set_new(root, "prompt_ids", prompt);
    json_object_set_new(root, "generated_ids", gen);
    if (tok && ra_tokenizer_decode(tok, r->generated, r->n_generated, &text) == RA_OK)
        json_object_set_new(root, "text", json_string(text));
    json_object_set_new(root, "ttft_s", json_real(r->t_prefill));
    json_object_set_new(root, "prefill_tokens_per_s", json_real(r->n_prompt / r->t_prefill));
    json_object_set_new(root, "decode_s", json_real(r->t_decode));
    int rc = json_dumpf(root, stdout, JSON_INDENT(2)) == 0 ? RA_OK : ra_error_set(RA_EIO, "cannot write JSON to stdout");
    putchar('\n');
    free(text);
    json_decref(root);
    return rc;
}

static int run_single(const struct options *o, struct ra_model *m, struct ra_tokenizer *tok, struct result *r)
{
    struct ra_kvcache kv = { 0 };
    struct ra_sampler sampler = { 0 };
    float *logits = NULL;
    const struct ra_config *c = &m->config;
    int rc, n_gen = o->generate;

    if (r->n_prompt + (n_gen > 0 ? n_gen - 1 : 0) > c->seq_len)
        return ra_error_set(RA_ERANGE, "prompt of %d tokens plus %d generated exceeds the model's context of %d tokens",
                            r->n_prompt, n_gen, c->seq_len);
    if ((rc = ra_kvcache_init(&kv, m->backend, c->n_layers, ra_config_kv_dim(c), r->n_prompt + n_gen)) ||
        (rc = ra_sampler_init(&sampler, c->vocab_size, o->temperature, o->top_p, o->seed)))
        goto out;
    logits = malloc((size_t)c->vocab_size * sizeof *logits);
    r->generated = malloc((size_t)(n_gen > 0 ? n_gen : 1) * sizeof *r->generated);
    if (!logits || !r->generated) {
        rc = ra_error_set(RA_ENOMEM, "out of memory");
        goto out;
    }
    double t0 = ra_mpi_wtime();
    if ((rc = ra_forward_span(m, r->prompt, 0, r->n_prompt, &kv, NULL, logits)) != RA_OK)
        goto out;
    double t1 = ra_mpi_wtime();
    const int text = o->output == OUTPUT_TEXT;
    struct ra_generate g = {
        .max_tokens = n_gen,
        .eos_id = o->ignore_eos || !tok ? -1 : tok->eos_id,
        .on_token = text ? print_piece : NULL,
        .ctx = tok,
    };
    rc = ra_generate_run(m, &kv, r->n_prompt, logits, &sampler, &g, r->generated, &r->n_generated);
    if (text)
        putchar('\n');
    r->t_prefill = t1 - t0;
    r->t_decode = ra_mpi_wtime() - t1;
out:
    free(logits);
    ra_sampler_free(&sampler);
    ra_kvcache_free(&kv);
    return rc;
}

static void report_timing(const struct result *r)
{
    fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tokens/s; TTFT %.3f s)\n", r->n_prompt, r->t_prefill,
            r->n_prompt / r->t_prefill, r->t_prefill);
    if (r->n_generated > 1)
        fprintf(stderr, "decode: %d tokens in %.3f s (%.1f tokens/s)\n", r->n_generated - 1, r->t_decode,
                (r->n_generated - 1) / r->t_decode);
}

static int run(int argc, char **argv)
{
    struct options o;
    struct ra_tokenizer tok_storage, *tok = NULL;
    struct ra_model m = { 0 };
    struct ra_backend *be = NULL;
    struct result r = { 0 };
    char tok_path[4096];
    int rc = parse_options(argc, argv, &o);
    if (rc != RA_OK)
        return rc > 0 ? RA_OK : rc;

    if (find_tokenizer(&o, tok_path, sizeof tok_path)) {
        if ((rc = ra_tokenizer_load(&tok_storage, tok_path, 0)) != RA_OK)
            return rc;
        tok = &tok_storage;
    } else if (need_text(&o)) {
        return ra_error_set(RA_EINVAL, "no tokenizer: give --tokenizer PATH (none found next to the model)");
    }
    if (o.output == OUTPUT_AUTO)
        o.output = tok ? OUTPUT_TEXT : OUTPUT_IDS;
    if ((rc = read_prompt(&o, tok, &r.prompt, &r.n_prompt)) != RA_OK)
        goto out;
    if (o.tokenize_only) {
        for (int i = 0; i < r.n_prompt; i++)
            printf(i ? " %d" : "%d", r.prompt[i]);
        putchar('\n');
        goto out;
    }
    if ((rc = ra_model_load(&m, o.model)) != RA_OK)
        goto out;
    if (tok && tok->vocab_size != m.config.vocab_size) {
        rc = ra_error_set(RA_EINVAL, "%s: tokenizer has %d tokens but the model %s has %d", tok_path,
                          tok->vocab_size, o.model, m.config.vocab_size);
        goto out;
    }
    if ((rc = ra_backend_cpu_init(&be, o.threads)) != RA_OK || (rc = ra_model_attach(&m, be)) != RA_OK)
        goto out;
    if ((rc = run_single(&o, &m, tok, &r)) != RA_OK)
        goto out;
    if (o.output == OUTPUT_IDS) {
        for (int i = 0; i < r.n_generated; i++)
            printf(i ? " %d" : "%d", r.generated[i]);
        putchar('\n');
    } else if (o.output == OUTPUT_JSON) {
        rc = write_json(&o, &m, tok, &r);
    }
    report_timing(&r);
out:
    free(r.prompt);
    free(r.generated);
    ra_model_free(&m);
    ra_backend_free(be);
    if (tok)
        ra_tokenizer_free(tok);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = ra_mpi_init(&argc, &argv, &rank, &world);
    if (rc == RA_OK)
        rc = run(argc, argv);
    if (rc != RA_OK)
        fprintf(stderr, "runahead: rank %d: %s\n", rank, ra_error_message());
    MPI_Finalize();
    return rc == RA_OK ? 0 : 1;
}
