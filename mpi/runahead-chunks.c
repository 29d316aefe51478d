/* runahead-chunks: fill, list, check and trim a chunk store (src/reuse/store.h).
 *
 *   runahead-chunks add --model M doc1.txt doc2.txt        chunks as text files
 *   mpirun -np 4 runahead-chunks add --model M --jsonl c.jsonl
 *   runahead-chunks ls|verify|stats --model M
 *   runahead-chunks evict --model M --to 1G
 *
 * Under mpirun, `add` gives chunk i to rank i % P: every rank reads and
 * checks all the chunks (so bad input fails before anything is stored), then
 * computes and stores its share. The other commands run as one process. MPI is
 * used only to know the rank and the number of ranks. */
#include "config.h"
#include "args.h"
#include "backend_cuda.h"
#include "program.h"
#include "ra_core.h"
#include "ra_mpi.h"
#include "reuse/request.h"
#include "reuse/store.h"
#include "vocab.h"

#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "runahead-chunks"

enum command { CMD_ADD, CMD_LS, CMD_VERIFY, CMD_EVICT, CMD_STATS };

struct options {
    enum command cmd;
    const char *store, *model, *tokenizer;
    int threads, no_check_weights;
    struct ra_program_backend be;
    unsigned long long capacity; /* 0: the store's own */
    /* add: where the chunks come from */
    const char *system, *system_ids, *jsonl, *request;
    const char **ids;   /* --ids, once per chunk */
    int n_ids;
    char **files;       /* the remaining arguments: one chunk per text file */
    int n_files;
    int progress;       /* 1: a line per chunk; 0: only once the add has run for a while */
    /* ls, evict */
    int json, all;
    unsigned long long to;
    int have_to;
    enum ra_store_policy policy; /* add, evict: which chunks go first past the capacity */
};

/* A chunk to add: its ids and what to call it in messages. */
struct chunk {
    char *name;
    int32_t *ids;
    int n;
};

/* The chunks of one add, behind one leading prefix. */
struct chunks {
    int32_t *prefix;
    int n_prefix;
    struct chunk *c;
    int n, cap;
};

static int rank, world;

static void usage(FILE *f)
{
    fprintf(f,
"Usage: runahead-chunks add    --model PATH [options] [FILE...]\n"
"       runahead-chunks ls     --model PATH [--json]\n"
"       runahead-chunks verify --model PATH\n"
"       runahead-chunks evict  --model PATH --to SIZE | --all\n"
"       runahead-chunks stats  --model PATH\n"
"       mpirun -np P runahead-chunks add ...   (chunk i is computed by rank i %% P)\n"
"\n"
"Fills and maintains a chunk store: the K and V rows of text chunks, each computed\n"
"in isolation behind a leading prefix, which runahead --reuse prefix|full|blend\n"
"loads instead of computing. A store serves one model (its weights, tokenizer\n"
"and KV dtype): give the model the store was made for.\n"
"\n"
"Commands:\n"
"  add       compute the chunks not yet stored and store them (progress and a\n"
"            summary per rank on stderr)\n"
"  ls        one line per chunk, least recently used first: key, tokens, bytes,\n"
"            last use (UTC), uses, its craft record's cache-context impact (- for\n"
"            none) and the chunk it is a variant of (its base: - for a chunk\n"
"            behind the leading prefix alone, stored by add)\n"
"  verify    check every chunk file (header, identity, each layer's checksum) and\n"
"            the index; exit 1 when anything is bad\n"
"  evict     remove least recently used chunks down to --to SIZE, or --all\n"
"  stats     chunks, bytes, capacity and model (the path given, and the start of\n"
"            its identity, which the store's store.json names)\n"
"\n"
"Store and model (every command):\n"
"      --store DIR           the store (default: $RA_STORE, else ~/.cache/runahead/chunks);\n"
"                            add creates it\n"
"      --capacity SIZE       add: bytes the store may hold from now on (K/M/G/T suffixes;\n"
"                            default: the store's, 16G for a new one); the least recently\n"
"                            used chunks beyond it are evicted\n"
"  -m, --model PATH          llama2.c checkpoint, Hugging Face directory or GGUF file\n"
"  -z, --tokenizer PATH      its vocabulary (default: the model's own, as runahead finds it)\n"
"      --no-check-weights    skip the scan for NaN/Inf weights at load\n"
"      --kv-dtype T          the rows stored: f32 (default) or bf16, as runahead --kv-dtype\n"
"Chunks to add (any mix; their order is the chunk numbering):\n"
"  FILE...                   text files, one chunk each\n"
"      --jsonl FILE          one chunk per line: \"text\", {\"text\": ...}, {\"file\": PATH}\n"
"                            (relative to FILE's directory) or {\"ids\": [1, 2, 3]}\n"
"      --ids \"1 2 3\"         one chunk as token ids (repeat for more chunks)\n"
"      --request FILE        the chunks of a runahead request file, behind its prefix\n"
"The leading prefix every chunk is computed behind, as a request renders it:\n"
"      --system TEXT         a system prompt (default: the chat template's default,\n"
"                            else none: BOS where the vocabulary adds it)\n"
"      --system-ids \"1 2\"    the same as token ids (models without a tokenizer)\n"
"How add computes (as runahead spells them):\n"
"      --backend B           cpu or cuda (default: $RA_BACKEND, else cuda where a GPU is seen)\n"
"      --device N            cuda: the GPU (default: the rank's index on its node)\n"
"      --device-dtype D      cuda: weights as bf16 (default), f16 or f32\n"
"      --compute-dtype D     linear layers in auto (default), f32 or bf16\n"
"  -T, --threads N           CPU threads per rank (default: the rank's share of its CPUs)\n"
"      --progress            a progress line per chunk (default: once the add has run 2 s)\n"
"Output:\n"
"      --policy lru|craft    add, evict: the least recently used chunks go first (lru, the\n"
"                            default), or those of least uses x rows saved per byte (craft)\n"
"      --json                ls: a JSON array instead of the table\n"
"  -h, --help                this help\n"
"  -V, --version             version\n"
"\n"
"Errors are one line naming the rank, the file and the cause; the exit status is\n"
"then 1 (2 for a usage error).\n");
}

static int command_parse(const char *s, enum command *cmd)
{
    static const char *const names[] = { "add", "ls", "verify", "evict", "stats" };
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) {
            *cmd = (enum command)i;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "unknown command '%s': add, ls, verify, evict or stats (see --help)", s);
}

/* Returns RA_OK, a negative status, or 1 when the program should exit 0 (help, version). */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_STORE = 256, OPT_CAPACITY, OPT_NO_CHECK_WEIGHTS, OPT_KV_DTYPE, OPT_JSONL, OPT_IDS, OPT_REQUEST,
           OPT_SYSTEM, OPT_SYSTEM_IDS, OPT_BACKEND, OPT_DEVICE, OPT_DEVICE_DTYPE, OPT_COMPUTE_DTYPE, OPT_PROGRESS,
           OPT_JSON, OPT_TO, OPT_ALL, OPT_POLICY };
    static const struct option longopts[] = {
        { "store", required_argument, NULL, OPT_STORE },
        { "capacity", required_argument, NULL, OPT_CAPACITY },
        { "model", required_argument, NULL, 'm' },
        { "tokenizer", required_argument, NULL, 'z' },
        { "no-check-weights", no_argument, NULL, OPT_NO_CHECK_WEIGHTS },
        { "kv-dtype", required_argument, NULL, OPT_KV_DTYPE },
        { "jsonl", required_argument, NULL, OPT_JSONL },
        { "ids", required_argument, NULL, OPT_IDS },
        { "request", required_argument, NULL, OPT_REQUEST },
        { "system", required_argument, NULL, OPT_SYSTEM },
        { "system-ids", required_argument, NULL, OPT_SYSTEM_IDS },
        { "backend", required_argument, NULL, OPT_BACKEND },
        { "device", required_argument, NULL, OPT_DEVICE },
        { "device-dtype", required_argument, NULL, OPT_DEVICE_DTYPE },
        { "compute-dtype", required_argument, NULL, OPT_COMPUTE_DTYPE },
        { "threads", required_argument, NULL, 'T' },
        { "progress", no_argument, NULL, OPT_PROGRESS },
        { "json", no_argument, NULL, OPT_JSON },
        { "to", required_argument, NULL, OPT_TO },
        { "all", no_argument, NULL, OPT_ALL },
        { "policy", required_argument, NULL, OPT_POLICY },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int c, rc = RA_OK;
    *o = (struct options){ .be = { .device = -1, .device_dtype = RA_DTYPE_BF16 } };
    if (!(o->ids = calloc((size_t)argc, sizeof *o->ids)))
        return ra_error_set(RA_ENOMEM, "out of memory");
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:z:T:hV", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_STORE: o->store = optarg; break;
        case OPT_CAPACITY:
            if ((rc = ra_arg_size(optarg, "--capacity", &o->capacity)) == RA_OK && o->capacity == 0)
                rc = ra_error_set(RA_EINVAL, "--capacity: must be more than 0 bytes");
            break;
        case 'm': o->model = optarg; break;
        case 'z': o->tokenizer = optarg; break;
        case OPT_NO_CHECK_WEIGHTS: o->no_check_weights = 1; break;
        case OPT_KV_DTYPE: rc = ra_kv_dtype_parse(optarg, "--kv-dtype", &o->be.kv_dtype); break;
        case OPT_JSONL: o->jsonl = optarg; break;
        case OPT_IDS: o->ids[o->n_ids++] = optarg; break;
        case OPT_REQUEST: o->request = optarg; break;
        case OPT_SYSTEM: o->system = optarg; break;
        case OPT_SYSTEM_IDS: o->system_ids = optarg; break;
        case OPT_BACKEND:
            rc = ra_backend_name_check(optarg, "--backend");
            o->be.name = optarg;
            break;
        case OPT_DEVICE: rc = ra_arg_int(optarg, "--device", 0, 1023, &o->be.device); break;
        case OPT_DEVICE_DTYPE: rc = ra_device_dtype_parse(optarg, &o->be.device_dtype); break;
        case OPT_COMPUTE_DTYPE: rc = ra_compute_parse(optarg, &o->be.compute); break;
        case 'T': rc = ra_arg_int(optarg, "--threads", 1, 1024, &o->threads); break;
        case OPT_PROGRESS: o->progress = 1; break;
        case OPT_JSON: o->json = 1; break;
        case OPT_TO:
            rc = ra_arg_size(optarg, "--to", &o->to);
            o->have_to = 1;
            break;
        case OPT_ALL: o->all = 1; break;
        case OPT_POLICY: rc = ra_store_policy_parse(optarg, "--policy", &o->policy); break;
        case 'h': if (rank == 0) usage(stdout); return 1;
        case 'V': if (rank == 0) ra_print_version(PROG); return 1;
        case ':': return ra_error_set(RA_EINVAL, "%s needs a value (see --help)", argv[optind - 1]);
        default: return ra_error_set(RA_EINVAL, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        if (rc != RA_OK)
            return rc;
    }
    if (optind >= argc)
        return ra_error_set(RA_EINVAL, "no command: add, ls, verify, evict or stats (see --help)");
    if ((rc = command_parse(argv[optind++], &o->cmd)) != RA_OK)
        return rc;
    o->files = argv + optind;
    o->n_files = argc - optind;
    return RA_OK;
}

/* What each command accepts: one line naming what does not belong. */
static int check_options(const struct options *o)
{
    const int sources = o->n_files + o->n_ids + !!o->jsonl + !!o->request;
    if (!o->model)
        return ra_error_set(RA_EINVAL, "no model given (use --model PATH: a store serves one model)");
    if (o->cmd != CMD_ADD && (sources || o->system || o->system_ids))
        return ra_error_set(RA_EINVAL, "chunks (%s) are for add", o->n_files ? o->files[0] : "--jsonl, --ids, --request");
    if (o->cmd == CMD_ADD && !sources)
        return ra_error_set(RA_EINVAL, "add: no chunks: give text files, --jsonl FILE, --ids \"1 2 3\" or --request FILE");
    if (o->system && o->system_ids)
        return ra_error_set(RA_EINVAL, "give --system or --system-ids, not both");
    if (o->request && (o->system || o->system_ids))
        return ra_error_set(RA_EINVAL, "--request FILE brings its own system prompt: drop --system");
    if (o->capacity && o->cmd != CMD_ADD)
        return ra_error_set(RA_EINVAL, "--capacity is for add (it sets the store's capacity)");
    if (o->json && o->cmd != CMD_LS)
        return ra_error_set(RA_EINVAL, "--json is for ls");
    if ((o->have_to || o->all) && o->cmd != CMD_EVICT)
        return ra_error_set(RA_EINVAL, "--to and --all are for evict");
    if (o->cmd == CMD_EVICT && o->have_to == o->all)
        return ra_error_set(RA_EINVAL, "evict: give exactly one of --to SIZE and --all");
    if (o->cmd != CMD_ADD && world > 1)
        return ra_error_set(RA_EINVAL, "%s runs as one process, but %d ranks were started (only add runs under mpirun)",
                            o->cmd == CMD_LS ? "ls" : o->cmd == CMD_VERIFY ? "verify" : o->cmd == CMD_EVICT ? "evict"
                                                                                                  : "stats",
                            world);
    return RA_OK;
}

static void chunks_free(struct chunks *cs)
{
    for (int i = 0; i < cs->n; i++) {
        free(cs->c[i].name);
        free(cs->c[i].ids);
    }
    free(cs->c);
    free(cs->prefix);
}

/* Appends a chunk, taking IDS; NAME is copied. */
static int chunks_push(struct chunks *cs, const char *name, int32_t *ids, int n)
{
    if (cs->n == cs->cap) {
        const int cap = cs->cap ? 2 * cs->cap : 16;
        struct chunk *c = realloc(cs->c, sizeof *c * (size_t)cap);
        if (!c) {
            free(ids);
            return ra_error_set(RA_ENOMEM, "out of memory for %d chunks", cap);
        }
        cs->c = c;
        cs->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        free(ids);
        return ra_error_set(RA_ENOMEM, "out of memory");
    }
    cs->c[cs->n++] = (struct chunk){ copy, ids, n };
    return RA_OK;
}

/* A chunk of text, encoded as a request encodes it (no BOS). */
static int push_text(struct chunks *cs, const char *name, const struct ra_vocab *v, const char *text)
{
    int32_t *ids = NULL;
    int n = 0;
    if (!v)
        return ra_error_set(RA_EINVAL, "%s: a text chunk needs a tokenizer (give --tokenizer PATH, or the chunk as "
                            "ids)", name);
    int rc = ra_request_encode_chunk(v, text, &ids, &n);
    if (rc != RA_OK)
        return ra_error_set(rc, "%s: %s", name, ra_error_message());
    return chunks_push(cs, name, ids, n);
}

static int push_file(struct chunks *cs, const char *path, const struct ra_vocab *v)
{
    char *text = NULL;
    size_t len = 0;
    int rc = ra_read_file(path, &text, &len);
    if (rc == RA_OK && strlen(text) != len)
        rc = ra_error_set(RA_EFORMAT, "%s: the text holds a NUL byte", path);
    if (rc == RA_OK)
        rc = push_text(cs, path, v, text);
    free(text);
    return rc;
}

/* {"ids": [...]} of a JSON value into ids (NAME in errors). */
static int json_ids(const json_t *arr, const char *name, int32_t **ids, int *n)
{
    const size_t len = json_array_size(arr);
    if (!json_is_array(arr) || len == 0 || len > (1u << 24))
        return ra_error_set(RA_EFORMAT, "%s: \"ids\" must be a non-empty array of token ids", name);
    if (!(*ids = malloc(sizeof(int32_t) * len)))
        return ra_error_set(RA_ENOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) {
        const json_t *x = json_array_get(arr, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX) {
            free(*ids);
            *ids = NULL;
            return ra_error_set(RA_EFORMAT, "%s: \"ids\"[%zu] is not a token id", name, i);
        }
        (*ids)[i] = (int32_t)json_integer_value(x);
    }
    *n = (int)len;
    return RA_OK;
}

/* PATH relative to the directory of BASE (a JSONL file), unless absolute. */
static int relative_path(const char *base, const char *path, char *out, size_t size)
{
    const char *slash = strrchr(base, '/');
    const int dir = path[0] == '/' || !slash ? 0 : (int)(slash - base + 1);
    if (snprintf(out, size, "%.*s%s", dir, base, path) >= (int)size)
        return ra_error_set(RA_EINVAL, "%s: path too long", path);
    return RA_OK;
}

/* One JSONL line: "text", {"text": ...}, {"file": PATH} or {"ids": [...]}. */
static int push_jsonl_line(struct chunks *cs, const char *name, const char *file, const char *line,
                           const struct ra_vocab *v)
{
    json_error_t err;
    json_t *j = json_loads(line, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err), *x;
    int32_t *ids = NULL;
    int n = 0, rc;
    char path[4096];
    if (!j)
        return ra_error_set(RA_EFORMAT, "%s: not JSON (%s)", name, err.text);
    if (json_is_string(j))
        rc = push_text(cs, name, v, json_string_value(j));
    else if (json_is_object(j) && json_object_size(j) == 1 && json_is_string(x = json_object_get(j, "text")))
        rc = push_text(cs, name, v, json_string_value(x));
    else if (json_is_object(j) && json_object_size(j) == 1 && json_is_string(x = json_object_get(j, "file"))) {
        if ((rc = relative_path(file, json_string_value(x), path, sizeof path)) == RA_OK &&
            (rc = push_file(cs, path, v)) != RA_OK)
            rc = ra_error_set(rc, "%s: %s", name, ra_error_message());
    } else if (json_is_object(j) && json_object_size(j) == 1 && (x = json_object_get(j, "ids"))) {
        if ((rc = json_ids(x, name, &ids, &n)) == RA_OK)
            rc = chunks_push(cs, name, ids, n);
    } else {
        rc = ra_error_set(RA_EFORMAT, "%s: a chunk is a string, {\"text\": ...}, {\"file\": PATH} or {\"ids\": [...]}",
                          name);
    }
    json_decref(j);
    return rc;
}

static int push_jsonl(struct chunks *cs, const char *file, const struct ra_vocab *v)
{
    char *text = NULL, *line, *save = NULL, name[4200];
    size_t len = 0;
    int rc = ra_read_file(file, &text, &len), lineno = 0, found = 0;
    if (rc == RA_OK && strlen(text) != len)
        rc = ra_error_set(RA_EFORMAT, "%s: holds a NUL byte", file);
    for (line = rc == RA_OK ? text : NULL; line && rc == RA_OK; line = save) {
        char *end = strchr(line, '\n');
        save = end ? end + 1 : NULL;
        if (end)
            *end = '\0';
        lineno++;
        if (strspn(line, " \t\r") == strlen(line)) /* blank lines are no chunks */
            continue;
        snprintf(name, sizeof name, "%s line %d", file, lineno);
        rc = push_jsonl_line(cs, name, file, line, v);
        found++;
    }
    if (rc == RA_OK && !found)
        rc = ra_error_set(RA_EFORMAT, "%s: no chunks in the file", file);
    free(text);
    return rc;
}

/* The chunks of a request file, and its prefix. */
static int push_request(struct chunks *cs, const char *file, const struct ra_vocab *v)
{
    struct ra_request r = { 0 };
    char name[4200];
    int rc = ra_request_load(&r, file, v, v ? v->chat_template : NULL);
    if (rc == RA_OK && !(cs->prefix = malloc(sizeof(int32_t) * (size_t)(r.n_prefix ? r.n_prefix : 1))))
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    if (rc == RA_OK) {
        memcpy(cs->prefix, r.ids, sizeof(int32_t) * (size_t)r.n_prefix);
        cs->n_prefix = r.n_prefix;
    }
    for (int c = 0; rc == RA_OK && c < r.n_chunks; c++) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)r.chunk_len[c]);
        if (!ids) {
            rc = ra_error_set(RA_ENOMEM, "out of memory");
            break;
        }
        memcpy(ids, r.ids + r.chunk_start[c], sizeof(int32_t) * (size_t)r.chunk_len[c]);
        snprintf(name, sizeof name, "%s", r.chunk_name && r.chunk_name[c] ? r.chunk_name[c] : file);
        rc = chunks_push(cs, name, ids, r.chunk_len[c]);
    }
    ra_request_free(&r);
    return rc;
}

/* The leading prefix of --system / --system-ids / the template's default. */
static int read_prefix(const struct options *o, const struct ra_vocab *v, struct chunks *cs)
{
    int32_t *sys = NULL, *pre = NULL;
    int n_sys = 0, n_pre = 0, rc;
    if (!o->system_ids)
        return ra_request_prefix(v, v ? v->chat_template : NULL, o->system, &cs->prefix, &cs->n_prefix);
    if (v && v->chat_template) /* a request would render the template around the ids */
        return ra_error_set(RA_EINVAL, "--system-ids: %s has a chat template: give --system TEXT (or a --request "
                            "file)", v->path);
    if ((rc = ra_prompt_parse_ids(o->system_ids, "--system-ids", &sys, &n_sys)) != RA_OK)
        return rc;
    /* As a request renders {"system": {"ids": ...}} without a template: BOS, then the ids. */
    if ((rc = ra_request_prefix(v, NULL, NULL, &pre, &n_pre)) == RA_OK &&
        !(cs->prefix = malloc(sizeof(int32_t) * (size_t)(n_pre + n_sys))))
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    if (rc == RA_OK) {
        if (n_pre) /* a vocabulary without BOS renders no prefix (memcpy of NULL is undefined, even of 0 bytes) */
            memcpy(cs->prefix, pre, sizeof(int32_t) * (size_t)n_pre);
        if (n_sys)
            memcpy(cs->prefix + n_pre, sys, sizeof(int32_t) * (size_t)n_sys);
        cs->n_prefix = n_pre + n_sys;
    }
    free(pre);
    free(sys);
    return rc;
}

/* Every chunk of the command line, in order: files, --jsonl, --ids, --request. */
static int read_chunks(const struct options *o, const struct ra_vocab *v, struct chunks *cs)
{
    int rc = o->request ? push_request(cs, o->request, v) : read_prefix(o, v, cs);
    for (int i = 0; rc == RA_OK && i < o->n_files; i++)
        rc = push_file(cs, o->files[i], v);
    if (rc == RA_OK && o->jsonl)
        rc = push_jsonl(cs, o->jsonl, v);
    for (int i = 0; rc == RA_OK && i < o->n_ids; i++) {
        int32_t *ids = NULL;
        int n = 0;
        char name[64];
        snprintf(name, sizeof name, "--ids chunk %d", i + 1);
        if ((rc = ra_prompt_parse_ids(o->ids[i], name, &ids, &n)) == RA_OK)
            rc = chunks_push(cs, name, ids, n);
    }
    return rc;
}

/* Every chunk fits the model: ids in the vocabulary, not empty, prefix + chunk within the context. */
static int check_chunks(const struct chunks *cs, const struct ra_config *c)
{
    for (int i = -1; i < cs->n; i++) {
        const int32_t *ids = i < 0 ? cs->prefix : cs->c[i].ids;
        const int n = i < 0 ? cs->n_prefix : cs->c[i].n;
        const char *name = i < 0 ? "the prefix" : cs->c[i].name;
        if (i >= 0 && n == 0)
            return ra_error_set(RA_EINVAL, "%s: the chunk is empty (no tokens)", name);
        if (i >= 0 && cs->n_prefix + n > c->seq_len)
            return ra_error_set(RA_ERANGE, "%s: a chunk of %d tokens behind a prefix of %d exceeds the model's "
                                "context of %d tokens", name, n, cs->n_prefix, c->seq_len);
        for (int j = 0; j < n; j++)
            if (ids[j] < 0 || ids[j] >= c->vocab_size)
                return ra_error_set(RA_ERANGE, "%s: token id %d at %d is outside the vocabulary (0..%d)", name,
                                    ids[j], j, c->vocab_size - 1);
    }
    return RA_OK;
}

/* What a command works on: the model, its vocabulary, and for add a backend and a context. */
struct setup {
    struct ra_vocab tok_storage, *tok;
    struct ra_model m;
    struct ra_backend *be;
    struct ra_context ctx;
    struct ra_store *st;
    char dir[4096];
};

static int open_model(const struct options *o, struct setup *s)
{
    char tok_path[4096];
    int rc = RA_OK;
    if (ra_program_find_tokenizer(o->tokenizer, o->model, tok_path, sizeof tok_path)) {
        if ((rc = ra_vocab_load(&s->tok_storage, tok_path)) != RA_OK)
            return rc;
        s->tok = &s->tok_storage;
    }
    const int threads = o->cmd != CMD_ADD ? 1 : o->threads ? o->threads : ra_mpi_threads_per_rank();
    const struct ra_load_options load = { .no_check_weights = o->no_check_weights, .n_threads = threads };
    if ((rc = ra_model_load_opts(&s->m, o->model, &load)) != RA_OK)
        return rc;
    if (s->tok && s->tok->n_tokens != s->m.config.vocab_size)
        return ra_error_set(RA_EINVAL, "%s: tokenizer has %d tokens but the model %s has %d", tok_path,
                            s->tok->n_tokens, o->model, s->m.config.vocab_size);
    if (o->cmd != CMD_ADD)
        return RA_OK;
    if ((rc = ra_program_open_backend(&o->be, rank, ra_mpi_local_rank(), threads, &s->be)) != RA_OK)
        return rc;
    return ra_context_init(&s->ctx, &s->m, s->be);
}

static int open_store(const struct options *o, struct setup *s)
{
    struct ra_store_identity id = { .kv_dtype = o->be.kv_dtype };
    int rc = RA_OK;
    if (o->store)
        snprintf(s->dir, sizeof s->dir, "%s", o->store);
    else
        rc = ra_store_default_dir(s->dir, sizeof s->dir);
    if (rc == RA_OK)
        rc = ra_store_model_identity(&s->m, id.model);
    if (rc == RA_OK)
        rc = ra_store_vocab_identity(s->tok, id.tokenizer);
    if (rc != RA_OK)
        return rc;
    /* add creates the store, evict rewrites its index, the others only read it. */
    const unsigned flags = o->cmd == CMD_ADD ? RA_STORE_CREATE : o->cmd == CMD_EVICT ? 0 : RA_STORE_READONLY;
    rc = ra_store_open(&s->st, s->dir, &s->m, &id, o->capacity, flags);
    if (rc == RA_OK)
        ra_store_set_policy(s->st, o->policy);
    return rc;
}

static void setup_free(struct setup *s)
{
    if (s->st)
        ra_store_close(s->st);
    ra_context_free(&s->ctx);
    ra_backend_free(s->be);
    ra_model_free(&s->m);
    if (s->tok)
        ra_vocab_free(s->tok);
}

/* This rank's share of the chunks (i % world == rank): each looked up first, computed and stored when missing. */
static int add_chunks(const struct options *o, struct setup *s, const struct chunks *cs)
{
    const double t0 = ra_wall_s();
    int mine = 0, done = 0, added = 0, present = 0, rc = RA_OK;
    long long tokens = 0;
    for (int i = rank; i < cs->n; i += world)
        mine++;
    for (int i = rank; i < cs->n && rc == RA_OK; i += world) {
        const struct chunk *c = &cs->c[i];
        struct ra_chunk *hit = NULL;
        const double t = ra_wall_s();
        if ((rc = ra_store_get(s->st, cs->prefix, cs->n_prefix, c->ids, c->n, &hit)) == RA_OK && hit) {
            ra_chunk_close(hit);
            present++;
        } else if (rc == RA_OK && (rc = ra_store_add(s->st, &s->ctx, cs->prefix, cs->n_prefix, c->ids, c->n)) == RA_OK) {
            added++;
            tokens += c->n;
        }
        if (rc != RA_OK)
            return ra_error_set(rc, "rank %d: %s: %s", rank, c->name, ra_error_message());
        done++;
        const double now = ra_wall_s();
        if (o->progress || now - t0 >= 2.0)
            fprintf(stderr, PROG ": rank %d: chunk %d/%d (%d tokens) %.1f s%s\n", rank, done, mine, c->n, now - t,
                    hit ? ", already stored" : "");
    }
    if ((rc = ra_store_sync(s->st)) != RA_OK)
        return ra_error_set(rc, "rank %d: %s", rank, ra_error_message());
    fprintf(stderr, PROG ": rank %d: %d chunk%s: %d added (%lld tokens), %d already stored, %.2f s\n", rank, mine,
            mine == 1 ? "" : "s", added, tokens, present, ra_wall_s() - t0);
    return RA_OK;
}

/* "2026-11-26 23:31:09" (UTC) */
static void format_time(double t, char *buf, size_t size)
{
    const time_t s = (time_t)t;
    struct tm tm;
    if (t <= 0 || !gmtime_r(&s, &tm) || !strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, size, "never");
}

/* Whether E is a variant: a chunk stored behind a context, its base another chunk. */
static int is_variant(const struct ra_store_entry *e)
{
    return e->base[0] && strcmp(e->base, e->key) != 0;
}

static int list_chunks(const struct options *o, struct setup *s)
{
    struct ra_store_entry *e = NULL;
    int n = 0, rc = ra_store_list(s->st, &e, &n);
    char when[64];
    if (rc != RA_OK)
        return rc;
    if (o->json) {
        json_t *arr = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(arr, json_pack("{s:s, s:i, s:i, s:I, s:f, s:I, s:o, s:o}", "key", e[i].key, "tokens",
                                                 e[i].n_tokens, "prefix_tokens", e[i].n_prefix, "bytes",
                                                 (json_int_t)e[i].bytes, "last_use", e[i].last_use, "uses",
                                                 (json_int_t)e[i].uses, "impact",
                                                 e[i].impact >= 0 ? json_real(e[i].impact) : json_null(), "base",
                                                 is_variant(&e[i]) ? json_string(e[i].base) : json_null()));
        if (json_dumpf(arr, stdout, JSON_INDENT(2)) || putchar('\n') == EOF)
            rc = ra_error_set(RA_EIO, "cannot write to stdout");
        json_decref(arr);
    } else {
        printf("%-64s %7s %7s %12s  %-19s %6s %7s  %s\n", "key", "tokens", "prefix", "bytes", "last use (UTC)", "uses",
               "impact", "variant of");
        for (int i = 0; i < n; i++) {
            char impact[16] = "-";
            format_time(e[i].last_use, when, sizeof when);
            if (e[i].impact >= 0)
                snprintf(impact, sizeof impact, "%.4f", e[i].impact);
            printf("%-64s %7d %7d %12llu  %-19s %6llu %7s  %.16s\n", e[i].key, e[i].n_tokens, e[i].n_prefix,
                   (unsigned long long)e[i].bytes, when, (unsigned long long)e[i].uses, impact,
                   is_variant(&e[i]) ? e[i].base : "-");
        }
    }
    free(e);
    return rc;
}

static int stats(const struct options *o, struct setup *s)
{
    struct ra_store_entry *e = NULL;
    int n = 0, rc = ra_store_list(s->st, &e, &n);
    unsigned long long bytes = 0, tokens = 0;
    if (rc != RA_OK)
        return rc;
    for (int i = 0; i < n; i++) {
        bytes += e[i].bytes;
        tokens += (unsigned long long)e[i].n_tokens;
    }
    const unsigned long long cap = ra_store_capacity(s->st);
    printf("store     %s\n", ra_store_dir(s->st));
    uint8_t id[RA_STORE_HASH_BYTES];
    if ((rc = ra_store_model_identity(&s->m, id)) != RA_OK) {
        free(e);
        return rc;
    }
    printf("model     %s (%d layers; identity ", o->model, s->m.config.n_layers);
    for (int i = 0; i < 8; i++)
        printf("%02x", id[i]);
    printf("...)\n");
    printf("chunks    %d (%llu tokens)\n", n, tokens);
    printf("bytes     %llu (%.1f MiB)\n", bytes, bytes / 1048576.0);
    printf("capacity  %llu (%.1f MiB, %.1f%% used)\n", cap, cap / 1048576.0, cap ? 100.0 * bytes / cap : 0.0);
    free(e);
    return RA_OK;
}

static int run_command(const struct options *o, struct setup *s, const struct chunks *cs)
{
    int bad = 0, evicted = 0, rc = RA_OK;
    switch (o->cmd) {
    case CMD_ADD: return add_chunks(o, s, cs);
    case CMD_LS: return list_chunks(o, s);
    case CMD_STATS: return stats(o, s);
    case CMD_VERIFY:
        if ((rc = ra_store_verify(s->st, &bad)) != RA_OK)
            return rc;
        if (bad)
            return ra_error_set(RA_EFORMAT, "%s: %d fault%s (each named above)", ra_store_dir(s->st), bad,
                                bad == 1 ? "" : "s");
        printf("%s: every chunk verified\n", ra_store_dir(s->st));
        return RA_OK;
    case CMD_EVICT:
        if ((rc = ra_store_evict(s->st, o->all ? 0 : o->to, &evicted)) == RA_OK)
            printf("%s: %d chunk%s evicted\n", ra_store_dir(s->st), evicted, evicted == 1 ? "" : "s");
        return rc;
    }
    return RA_OK;
}

/* Every rank's status becomes the first failing rank's; only that rank prints. */
static int failed_rank = -1;
static int usage_error; /* the command line is wrong: exit 2 */

static int agree(int rc)
{
    return ra_mpi_agree(rc, MPI_COMM_WORLD, &failed_rank);
}

static int run(int argc, char **argv)
{
    struct options o;
    struct setup s = { 0 };
    struct chunks cs = { 0 };
    int rc = parse_options(argc, argv, &o);
    if (rc == RA_OK)
        rc = check_options(&o);
    if (rc != RA_OK) { /* every rank parsed the same argv: rank 0 speaks */
        failed_rank = 0;
        usage_error = rc < 0;
        free(o.ids);
        return rc > 0 ? RA_OK : rc;
    }
    /* Collective (threads per rank, local rank): every rank, then agree. */
    rc = agree(open_model(&o, &s));
    if (rc == RA_OK && o.cmd == CMD_ADD) { /* the same input on every rank: a fault fails on all */
        if ((rc = read_chunks(&o, s.tok, &cs)) == RA_OK)
            rc = check_chunks(&cs, &s.m.config);
        if ((rc = agree(rc)) == RA_OK)
            rc = agree(open_store(&o, &s));
    } else if (rc == RA_OK) {
        rc = open_store(&o, &s);
    }
    if (rc == RA_OK)
        rc = agree(run_command(&o, &s, &cs));
    chunks_free(&cs);
    setup_free(&s);
    free(o.ids);
    return rc;
}

int main(int argc, char **argv)
{
    /* A file-size limit (ulimit -f) makes a write fail with EFBIG, reported as
     * any full disk, instead of killing the process mid-file. */
    signal(SIGXFSZ, SIG_IGN);
    int rc = ra_mpi_init(&argc, &argv, &rank, &world);
    if (rc == RA_OK)
        rc = run(argc, argv);
    if (rc != RA_OK && (failed_rank == rank || failed_rank < 0))
        ra_mpi_print_error(PROG, rank);
    MPI_Finalize();
    return rc == RA_OK ? 0 : usage_error ? 2 : 1;
}
