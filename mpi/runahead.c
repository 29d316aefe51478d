/* runahead: process a prompt and generate, on one rank or along a chain of ranks.
 *
 *   runahead --model M --prompt "Once upon a time" --generate 64
 *   mpirun -np 4 runahead --model M --prompt-file p.txt --method kvr
 *
 * Rank 0 reads and tokenizes the prompt and broadcasts the ids; every rank
 * maps the model; the last rank produces the first token and decodes. */
#include "config.h"
#include "args.h"
#include "backend_cuda.h"
#include "netem.h"
#include "offload/offload.h"
#include "partition.h"
#include "autosplit.h"
#include "prefill.h"
#include "program.h"
#include "ra_mpi.h"
#include "report.h"
#include "ra_core.h"
#include "chat.h"
#include "reuse/request.h"
#include "reuse/run.h"
#include "reuse_chain.h"
#include "vocab.h"
#include "sysinfo.h"
#include "spec.h"
#include "watchdog.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum output_kind { OUTPUT_AUTO, OUTPUT_TEXT, OUTPUT_IDS, OUTPUT_JSON };

struct options {
    const char *model, *tokenizer;
    const char *prompt, *prompt_file, *prompt_ids, *prompt_ids_file;
    const char *system, *user, *messages; /* a chat, rendered with the model's template */
    const char *request;           /* --request: a prompt made of chunks (reuse/request.h) */
    int reuse_given;               /* --reuse: the prefill runs through reuse/run.h */
    struct ra_reuse_run reuse;
    enum ra_reuse_send reuse_send; /* on the chain: --reuse-send, --blend-scope */
    enum ra_blend_scope blend_scope;
    int generate, threads, tokenize_only, ignore_eos, no_check_weights, dequantize_weights;
    float temperature, top_p;
    unsigned long long seed;
    enum output_kind output;
    enum ra_method method;
    enum ra_route route;
    enum ra_transport_kind transport;
    const char *partition, *report, *trace, *hw_tag;
    struct ra_partition_spec spec; /* --partition parsed (resolved once the backend is attached) */
    int repeat;
    enum ra_compute compute;       /* --compute-dtype */
    int expect_ranks;              /* 0, or the world size the launcher must have started */
    int watchdog;                  /* seconds a rank may wait in a prompt pass; 0 = off */
    struct ra_netem_config netem;  /* an emulated link; link_gbps 0 = none */
    const char *backend;           /* NULL (auto), "cpu" or "cuda" */
    int device;                    /* --device, or -1: the node-local rank modulo the GPUs */
    enum ra_dtype device_dtype;
    enum ra_dtype kv_dtype;        /* of the KV cache: f32 (default) or bf16 */
    struct ra_offload_config offload; /* decode on the last rank from a host KV pool */
};

/* The output files, opened by the last rank (which writes them) before any work. */
struct outputs {
    struct ra_outfile report, trace;
};

/* What one run produced, for the output stage. */
struct result {
    int32_t *prompt;
    int n_prompt;
    int32_t *generated;
    int n_generated;
    double *ttft; /* [repeat] */
    struct ra_passes passes; /* which of them the report and trace show: the median one */
    double t_decode;
};

/* How the split was chosen, for stderr and the report (auto only). */
static char partition_source[512];

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
"  -m, --model PATH          llama2.c checkpoint (.bin), Hugging Face directory\n"
"                            (config.json + model.safetensors, or sharded) or GGUF file\n"
"  -z, --tokenizer PATH      llama2.c tokenizer.bin, Hugging Face tokenizer.json or a GGUF\n"
"                            file's vocabulary (default: the GGUF model's own, else\n"
"                            tokenizer.bin or tokenizer.json in or next to the model)\n"
"      --no-check-weights    skip the scan for NaN/Inf weights at load (for files known to be good)\n"
"      --dequantize-weights  GGUF: convert Q8_0/Q4_0/Q4_1/Q4_K/Q6_K weights to f32 at load instead of\n"
"                            computing on the blocks (a reference for the quantized kernels)\n"
"Prompt (exactly one):\n"
"  -p, --prompt TEXT         text, encoded with BOS where the vocabulary adds it; special\n"
"                            tokens written in it (<|im_start|>) become their ids (not with\n"
"                            a tokenizer.bin)\n"
"  -f, --prompt-file FILE    text read from FILE\n"
"      --user TEXT           a chat: one user message (after --system TEXT, if given),\n"
"                            rendered with the model's chat template (ChatML, Llama 2 or\n"
"                            Llama 3) and the assistant's turn appended\n"
"      --messages FILE.json  a chat: [{\"role\": \"user\", \"content\": \"...\"}, ...]\n"
"      --request FILE.json   a prompt made of chunks: {\"system\": S, \"chunks\": [C, ...],\n"
"                            \"question\": Q}, each a text or {\"ids\": [...]}, a chunk also\n"
"                            {\"file\": PATH}; rendered with the chat template where there is\n"
"                            one (see mpi/README.md)\n"
"  -i, --prompt-ids \"1 2 3\"  token ids, space or comma separated\n"
"  -I, --prompt-ids-file F   token ids read from F\n"
"Generation:\n"
"  -n, --generate N          tokens to generate, the first included (default 64)\n"
"  -t, --temperature T       0 = greedy (default 0)\n"
"      --top-p P             nucleus sampling threshold in (0,1] (default 0.9)\n"
"  -s, --seed S              sampling seed (default 1)\n"
"      --ignore-eos          do not stop at the end of generation (EOS, or a token such\n"
"                            as <|im_end|> or <|eot_id|>)\n"
"Execution:\n"
"      --method M            single (one rank), kvr (KV-Runahead) or tsp (all-gather\n"
"                            baseline); default: single on one rank, kvr on several\n"
"      --route R             kvr: chain (default), relay or direct\n"
"      --transport T         how KV rows move between ranks: auto (default: mpi for host\n"
"                            memory; for device memory nccl, else CUDA-aware mpi, else\n"
"                            mpi through pinned host buffers), mpi, mpi-cuda or nccl\n"
"      --partition SPEC      kvr: auto (default) | even (KVR-E) | ratios:0.35,0.25,...\n"
"                            | bounds:0,900,...,C | table:FILE.h5 (interpolated from a\n"
"                            runahead-tune table tuned on this backend, compute and KV\n"
"                            dtypes; another's is refused). auto gives every rank the same FLOPs\n"
"                            (linear layers + causal attention); with a calibrated profile\n"
"                            (auto:FILE.h5, or RA_PROFILE=FILE.h5) the same predicted time,\n"
"                            refined by the cost model when it has a measured link\n"
"      --hw-tag TAG          hardware tag to look up in the table (default: CPU model and cores)\n"
"      --repeat N            run the prompt N times, report median/min/max TTFT; the per-rank\n"
"                            figures and the trace are the median run's (default 1)\n"
"  -T, --threads N           CPU threads per rank (default: the CPUs of the rank's affinity\n"
"                            mask (taskset, Slurm, mpirun binding), shared with the node's\n"
"                            ranks bound to the same CPUs)\n"
"      --backend B           cpu or cuda (default: $RA_BACKEND, else cuda when built with\n"
"                            it and a GPU is visible, else cpu)\n"
"      --device N            cuda: the GPU of every rank (default: the rank's index on its\n"
"                            node, modulo the node's GPUs)\n"
"      --device-dtype D      cuda: weight matrices on the GPU as bf16 (default), f16 or f32;\n"
"                            activations, KV cache and accumulation stay fp32\n"
"      --compute-dtype D     linear layers in auto (default: bf16 for bf16/f16 weights on a\n"
"                            CPU with AMX-BF16 or AVX512-BF16, else f32), f32, or bf16 (f32\n"
"                            weights too: a bf16 copy made at load, half their size)\n"
"      --kv-dtype T          KV cache rows: f32 (default) or bf16 (half the memory and\n"
"                            the bytes kvr/tsp move; attention still sums in fp32)\n"
"      --no-mmap             read weight files into private memory in huge pages instead\n"
"                            of mapping them (RA_MMAP=0 too): decode streams them faster,\n"
"                            but ranks on a node no longer share one page-cache copy\n"
"      --expect-ranks N      fail at once unless the launcher started N ranks as one job\n"
"                            (catches N separate one-rank copies, e.g. srun without PMIx)\n"
"      --watchdog SECONDS    abort the job when a rank has waited SECONDS for another in a\n"
"                            prompt pass (a stopped or hung rank); set it above the time\n"
"                            of one pass. Default: off\n"
"Chunk-cache reuse (needs --request; on several ranks with --method kvr or tsp):\n"
"      --reuse MODE          none: full prefill (the reference); prefix: reuse the longest\n"
"                            stored prefix of chunks; full: every stored chunk's K/V re-positioned,\n"
"                            nothing recomputed; blend: CacheBlend, full and then the rows that\n"
"                            deviate most recomputed; craft: Cache-Craft as we read it, each\n"
"                            chunk's best stored variant, a budget per chunk from its recorded\n"
"                            attention to its context. Default: none\n"
"      --store DIR           the chunk store (default $RA_STORE, else ~/.cache/runahead/chunks)\n"
"      --store-write         compute the chunks the store misses and add them (after the first\n"
"                            token)\n"
"      --blend-ratio R|auto  blend, craft: the fraction of the loaded rows recomputed (default 0.15;\n"
"                            craft: the mean of its per-chunk budgets; no auto);\n"
"                            auto: the larger of 0.15 and the ratio whose recompute time equals\n"
"                            the load time\n"
"      --blend-check-layers L[,L...]  blend: the layers whose K/V deviation selects the rows\n"
"                            (ascending, at most 8; default 1)\n"
"      --blend-schedule R,R,...  blend: gradual filtering, a non-increasing ratio for each layer\n"
"                            after the last check layer\n"
"      --store-gbps G        emulate a store that reads G GB/s (1e9 bytes/s); default: as fast as\n"
"                            it reads\n"
"      --reuse-send S        on the chain: full (default) sends the fused rows as a plain pass;\n"
"                            delta only the recomputed rows (every rank rebuilds the rest from\n"
"                            the store)\n"
"      --blend-scope S       blend on the chain: global (default) gathers the check layer's\n"
"                            deviations and selects once over the prompt (one rank's result);\n"
"                            local: each rank selects the ratio of its own rows\n"
"                            (auto ratio, --blend-schedule and --store-write: one rank only)\n"
"Decode on the last rank (after any --method):\n"
"      --offload MODE        none (default): the KV cache stays where the prefill left it;\n"
"                            full: the prompt's KV lives in a host pool and every step fetches\n"
"                            each layer's rows into a device working set; kvpr: KVPR partial\n"
"                            recompute (exact; X of the first rows sent, their K, V recomputed);\n"
"                            infinigen: InfiniGen (approximate): layer l >= 1 fetches only the\n"
"                            tokens a rehearsal from layer l-1's input selects (CPU backend,\n"
"                            --kv-dtype f32). The pool and working set hold --kv-dtype rows\n"
"      --device-kv-mem SIZE  device bytes for the KV working set (K/M/G suffixes); two\n"
"                            layers' worth double-buffers the fetch, one does not, less fails\n"
"      --host-link-gbps G    the host<->device link: G GB/s (CPU backend: emulated, the rows are\n"
"                            copied and the link time modelled; every report says so)\n"
"      --host-link-latency-us U  ... and U microseconds per message (default 0)\n"
"      --kvpr-l L            force KVPR's split (rows recomputed) instead of planning it\n"
"      --infinigen-ratio R   partial key columns, a fraction of head_dim (default 0.3)\n"
"      --infinigen-alpha A   keep the tokens scoring above max - A (default 5; inf: all)\n"
"      --infinigen-cap C     fetch at most C of a layer's tokens (default 0.2; >= 1: no cap)\n"
"      --infinigen-pool-mem SIZE  host pool limit (K/M/G); beyond it tokens are evicted by\n"
"                            fetch counters (default: unlimited)\n"
"Emulated network (every report says so; the KV rows still move through MPI):\n"
"      --link-gbps G         each message also waits for a link of G GB/s (1e9 bytes/s)\n"
"      --link-latency-us U   ... and U microseconds of latency per message (default 0)\n"
"      --noise-gbps N        a noise sidecar: N GB/s of bidirectional traffic on one random\n"
"                            adjacent pair of ranks at a time, sharing that link (needs --link-gbps)\n"
"      --noise-slot-ms MS    how long one pair stays noisy (default 5)\n"
"      --noise-seed S        seed of the noisy pairs (default 1)\n"
"Output:\n"
"  -o, --output KIND         text | ids | json (default: text with a tokenizer, else ids)\n"
"      --report FILE.json    one JSON record: config, partition, TTFTs, per-rank figures\n"
"      --trace FILE.json     Chrome-trace/Perfetto timeline, one track per rank\n"
"                            (both checked before any work; each must be absent or a regular\n"
"                            file, not a link, FIFO, device or directory; written to a temporary\n"
"                            file beside it and renamed over it at the end)\n"
"      --tokenize-only       print the prompt's token ids and exit (needs no model)\n"
"  -h, --help                this help\n"
"  -V, --version             version\n"
"\n"
"ids prints the generated ids, space separated, on one line. The last rank prints\n"
"the output; timings and the per-rank summary go to stderr.\n");
}

/* An --infinigen-* number: in (0, 1] (unit), > 0, or "inf" (allow_inf). */
static int infinigen_arg(const char *s, const char *flag, int unit, int allow_inf, float *out)
{
    double v = INFINITY;
    int rc = allow_inf && !strcmp(s, "inf") ? RA_OK : ra_arg_double(s, flag, &v);
    if (rc == RA_OK && !(v > 0 && (!unit || v <= 1)))
        rc = ra_error_set(RA_EINVAL, "%s: %s must be %s", flag, s, unit ? "in (0, 1]" : "more than 0");
    *out = (float)v;
    return rc;
}

/* The reuse options fit together and with the rest. */
static int reuse_options_check(struct options *o, int blend_given, int store_given, int chain_given)
{
    o->reuse.repeat = o->repeat;
    if (blend_given && o->reuse.mode != RA_REUSE_BLEND && o->reuse.mode != RA_REUSE_CRAFT)
        return ra_error_set(RA_EINVAL, "--blend-ratio, --blend-check-layers and --blend-schedule need --reuse blend "
                            "(--blend-ratio: or craft)");
    if (store_given && !o->reuse_given)
        return ra_error_set(RA_EINVAL, "--store, --store-write and --store-gbps need --reuse");
    if (chain_given && !o->reuse_given)
        return ra_error_set(RA_EINVAL, "--reuse-send and --blend-scope need --reuse");
    if (!o->reuse_given)
        return RA_OK;
    if (!o->request)
        return ra_error_set(RA_EINVAL, "--reuse needs --request FILE (a prompt made of chunks)");
    if (chain_given && o->method == RA_METHOD_SINGLE)
        return ra_error_set(RA_EINVAL, "--reuse-send and --blend-scope are for --method kvr or tsp");
    if (o->method == RA_METHOD_SINGLE)
        return RA_OK;
    /* What the chain does not run (ra_reuse_chain_prefill refuses them too), before any work. */
    if (o->reuse.cfg.ratio < 0 || o->reuse.cfg.n_schedule > 0 || o->reuse.cfg.store_write)
        return ra_error_set(RA_EINVAL, "--blend-ratio auto, --blend-schedule and --store-write run on one rank only");
    if (o->offload.mode != RA_OFFLOAD_NONE || o->trace)
        return ra_error_set(RA_EINVAL, "--reuse does not combine with --offload or --trace in this version");
    return RA_OK;
}

/* Returns RA_OK, a negative status, or 1 when the program should exit 0 (help). */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_TOP_P = 256, OPT_METHOD, OPT_TOKENIZE_ONLY, OPT_IGNORE_EOS, OPT_ROUTE, OPT_PARTITION, OPT_REPEAT,
           OPT_REPORT, OPT_TRACE, OPT_HW_TAG, OPT_EXPECT_RANKS, OPT_LINK_GBPS, OPT_LINK_LATENCY, OPT_NOISE_GBPS,
           OPT_NOISE_SLOT, OPT_NOISE_SEED, OPT_NO_CHECK_WEIGHTS, OPT_DEQUANTIZE, OPT_WATCHDOG, OPT_TRANSPORT, OPT_BACKEND, OPT_DEVICE,
           OPT_DEVICE_DTYPE, OPT_COMPUTE_DTYPE, OPT_KV_DTYPE, OPT_OFFLOAD, OPT_DEVICE_KV_MEM,
           OPT_HOST_LINK_GBPS, OPT_HOST_LINK_LATENCY, OPT_KVPR_L,
           OPT_IG_RATIO, OPT_IG_ALPHA, OPT_IG_CAP, OPT_IG_POOL_MEM, OPT_NO_MMAP, OPT_SYSTEM, OPT_USER,
           OPT_MESSAGES, OPT_REQUEST, OPT_REUSE, OPT_STORE, OPT_STORE_WRITE, OPT_BLEND_RATIO,
           OPT_BLEND_CHECK, OPT_BLEND_SCHEDULE, OPT_STORE_GBPS, OPT_REUSE_SEND, OPT_BLEND_SCOPE };
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'm' },
        { "tokenizer", required_argument, NULL, 'z' },
        { "no-check-weights", no_argument, NULL, OPT_NO_CHECK_WEIGHTS },
        { "dequantize-weights", no_argument, NULL, OPT_DEQUANTIZE },
        { "prompt", required_argument, NULL, 'p' },
        { "prompt-file", required_argument, NULL, 'f' },
        { "prompt-ids", required_argument, NULL, 'i' },
        { "prompt-ids-file", required_argument, NULL, 'I' },
        { "system", required_argument, NULL, OPT_SYSTEM },
        { "user", required_argument, NULL, OPT_USER },
        { "messages", required_argument, NULL, OPT_MESSAGES },
        { "request", required_argument, NULL, OPT_REQUEST },
        { "reuse", required_argument, NULL, OPT_REUSE },
        { "store", required_argument, NULL, OPT_STORE },
        { "store-write", no_argument, NULL, OPT_STORE_WRITE },
        { "blend-ratio", required_argument, NULL, OPT_BLEND_RATIO },
        { "blend-check-layers", required_argument, NULL, OPT_BLEND_CHECK },
        { "blend-schedule", required_argument, NULL, OPT_BLEND_SCHEDULE },
        { "store-gbps", required_argument, NULL, OPT_STORE_GBPS },
        { "reuse-send", required_argument, NULL, OPT_REUSE_SEND },
        { "blend-scope", required_argument, NULL, OPT_BLEND_SCOPE },
        { "generate", required_argument, NULL, 'n' },
        { "temperature", required_argument, NULL, 't' },
        { "top-p", required_argument, NULL, OPT_TOP_P },
        { "seed", required_argument, NULL, 's' },
        { "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
        { "method", required_argument, NULL, OPT_METHOD },
        { "route", required_argument, NULL, OPT_ROUTE },
        { "transport", required_argument, NULL, OPT_TRANSPORT },
        { "partition", required_argument, NULL, OPT_PARTITION },
        { "repeat", required_argument, NULL, OPT_REPEAT },
        { "report", required_argument, NULL, OPT_REPORT },
        { "trace", required_argument, NULL, OPT_TRACE },
        { "hw-tag", required_argument, NULL, OPT_HW_TAG },
        { "threads", required_argument, NULL, 'T' },
        { "compute-dtype", required_argument, NULL, OPT_COMPUTE_DTYPE },
        { "kv-dtype", required_argument, NULL, OPT_KV_DTYPE },
        { "no-mmap", no_argument, NULL, OPT_NO_MMAP },
        { "expect-ranks", required_argument, NULL, OPT_EXPECT_RANKS },
        { "watchdog", required_argument, NULL, OPT_WATCHDOG },
        { "backend", required_argument, NULL, OPT_BACKEND },
        { "device", required_argument, NULL, OPT_DEVICE },
        { "device-dtype", required_argument, NULL, OPT_DEVICE_DTYPE },
        { "offload", required_argument, NULL, OPT_OFFLOAD },
        { "device-kv-mem", required_argument, NULL, OPT_DEVICE_KV_MEM },
        { "host-link-gbps", required_argument, NULL, OPT_HOST_LINK_GBPS },
        { "host-link-latency-us", required_argument, NULL, OPT_HOST_LINK_LATENCY },
        { "kvpr-l", required_argument, NULL, OPT_KVPR_L },
        { "infinigen-ratio", required_argument, NULL, OPT_IG_RATIO },
        { "infinigen-alpha", required_argument, NULL, OPT_IG_ALPHA },
        { "infinigen-cap", required_argument, NULL, OPT_IG_CAP },
        { "infinigen-pool-mem", required_argument, NULL, OPT_IG_POOL_MEM },
        { "link-gbps", required_argument, NULL, OPT_LINK_GBPS },
        { "link-latency-us", required_argument, NULL, OPT_LINK_LATENCY },
        { "noise-gbps", required_argument, NULL, OPT_NOISE_GBPS },
        { "noise-slot-ms", required_argument, NULL, OPT_NOISE_SLOT },
        { "noise-seed", required_argument, NULL, OPT_NOISE_SEED },
        { "output", required_argument, NULL, 'o' },
        { "tokenize-only", no_argument, NULL, OPT_TOKENIZE_ONLY },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int c, rc = RA_OK;
    *o = (struct options){ .generate = 64, .temperature = 0.0f, .top_p = 0.9f, .seed = 1, .partition = NULL,
                           .repeat = 1, .method = world > 1 ? RA_METHOD_KVR : RA_METHOD_SINGLE,
                           .netem = { .noise_slot_ms = 5, .noise_seed = 1 }, .device = -1,
                           .device_dtype = RA_DTYPE_BF16, .offload = { .kvpr_force_l = -1 },
                           .reuse = { .mode = RA_REUSE_NONE, .cfg = RA_REUSE_CONFIG_INIT } };
    int blend_given = 0, store_given = 0, chain_given = 0;
    unsigned long long kv_mem = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:z:p:f:i:I:n:t:s:T:o:hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'z': o->tokenizer = optarg; break;
        case OPT_NO_CHECK_WEIGHTS: o->no_check_weights = 1; break;
        case OPT_DEQUANTIZE: o->dequantize_weights = 1; break;
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case 'i': o->prompt_ids = optarg; break;
        case 'I': o->prompt_ids_file = optarg; break;
        case OPT_SYSTEM: o->system = optarg; break;
        case OPT_USER: o->user = optarg; break;
        case OPT_MESSAGES: o->messages = optarg; break;
        case OPT_REQUEST: o->request = optarg; break;
        case OPT_REUSE: rc = ra_reuse_mode_parse(optarg, "--reuse", &o->reuse.mode), o->reuse_given = 1; break;
        case OPT_STORE: o->reuse.store_dir = optarg, store_given = 1; break;
        case OPT_STORE_WRITE: o->reuse.cfg.store_write = 1, store_given = 1; break;
        case OPT_STORE_GBPS:
            if ((rc = ra_arg_double(optarg, "--store-gbps", &o->reuse.cfg.store_gbps)) == RA_OK &&
                !(o->reuse.cfg.store_gbps > 0))
                rc = ra_error_set(RA_EINVAL, "--store-gbps: '%s' must be more than 0", optarg);
            store_given = 1;
            break;
        case OPT_BLEND_RATIO: rc = ra_reuse_ratio_parse(optarg, &o->reuse.cfg.ratio), blend_given = 1; break;
        case OPT_BLEND_CHECK:
            rc = ra_reuse_check_layers_parse(optarg, o->reuse.cfg.check, &o->reuse.cfg.n_check);
            blend_given = 1;
            break;
        case OPT_BLEND_SCHEDULE:
            rc = ra_reuse_schedule_parse(optarg, o->reuse.schedule, &o->reuse.cfg.n_schedule);
            o->reuse.cfg.schedule = o->reuse.schedule;
            blend_given = 1;
            break;
        case OPT_REUSE_SEND: rc = ra_reuse_send_parse(optarg, &o->reuse_send), chain_given = 1; break;
        case OPT_BLEND_SCOPE: rc = ra_blend_scope_parse(optarg, &o->blend_scope), chain_given = 1; break;
        case 'n': rc = ra_arg_int(optarg, "--generate", 0, 1 << 24, &o->generate); break;
        case 't': rc = ra_arg_float(optarg, "--temperature", &o->temperature); break;
        case OPT_TOP_P: rc = ra_arg_float(optarg, "--top-p", &o->top_p); break;
        case 's': rc = ra_arg_u64(optarg, "--seed", &o->seed); break;
        case OPT_IGNORE_EOS: o->ignore_eos = 1; break;
        case OPT_METHOD: rc = ra_method_parse(optarg, &o->method); break;
        case OPT_ROUTE: rc = ra_route_parse(optarg, &o->route); break;
        case OPT_TRANSPORT: rc = ra_transport_parse(optarg, &o->transport); break;
        case OPT_PARTITION: o->partition = optarg; break;
        case OPT_REPEAT: rc = ra_arg_int(optarg, "--repeat", 1, 100000, &o->repeat); break;
        case OPT_REPORT: o->report = optarg; break;
        case OPT_TRACE: o->trace = optarg; break;
        case OPT_HW_TAG: o->hw_tag = optarg; break;
        case 'T': rc = ra_arg_int(optarg, "--threads", 1, 1024, &o->threads); break;
        case OPT_COMPUTE_DTYPE: rc = ra_compute_parse(optarg, &o->compute); break;
        case OPT_KV_DTYPE: rc = ra_kv_dtype_parse(optarg, "--kv-dtype", &o->kv_dtype); break;
        case OPT_NO_MMAP: ra_mapped_file_copy = 1; break;
        case OPT_EXPECT_RANKS: rc = ra_arg_int(optarg, "--expect-ranks", 1, RA_MAX_RANKS, &o->expect_ranks); break;
        case OPT_WATCHDOG: rc = ra_arg_int(optarg, "--watchdog", 0, 7 * 24 * 3600, &o->watchdog); break;
        case OPT_BACKEND:
            rc = ra_backend_name_check(optarg, "--backend");
            o->backend = optarg;
            break;
        case OPT_DEVICE: rc = ra_arg_int(optarg, "--device", 0, 1023, &o->device); break;
        case OPT_DEVICE_DTYPE: rc = ra_device_dtype_parse(optarg, &o->device_dtype); break;
        case OPT_OFFLOAD: rc = ra_offload_mode_parse(optarg, &o->offload.mode); break;
        case OPT_DEVICE_KV_MEM:
            if ((rc = ra_arg_size(optarg, "--device-kv-mem", &kv_mem)) == RA_OK && kv_mem == 0)
                rc = ra_error_set(RA_EINVAL, "--device-kv-mem: must be more than 0 bytes");
            o->offload.device_kv_mem = (size_t)kv_mem;
            break;
        case OPT_HOST_LINK_GBPS: rc = ra_arg_double(optarg, "--host-link-gbps", &o->offload.link_gbps); break;
        case OPT_HOST_LINK_LATENCY:
            rc = ra_arg_double(optarg, "--host-link-latency-us", &o->offload.link_latency_us);
            break;
        case OPT_KVPR_L: rc = ra_arg_int(optarg, "--kvpr-l", 0, 1 << 30, &o->offload.kvpr_force_l); break;
        case OPT_IG_RATIO: rc = infinigen_arg(optarg, "--infinigen-ratio", 1, 0, &o->offload.ig_ratio); break;
        case OPT_IG_ALPHA: rc = infinigen_arg(optarg, "--infinigen-alpha", 0, 1, &o->offload.ig_alpha); break;
        case OPT_IG_CAP: rc = infinigen_arg(optarg, "--infinigen-cap", 0, 0, &o->offload.ig_cap); break;
        case OPT_IG_POOL_MEM:
            if ((rc = ra_arg_size(optarg, "--infinigen-pool-mem", &kv_mem)) == RA_OK && kv_mem == 0)
                rc = ra_error_set(RA_EINVAL, "--infinigen-pool-mem: must be more than 0 bytes");
            o->offload.ig_pool_mem = (size_t)kv_mem;
            break;
        case OPT_LINK_GBPS: rc = ra_arg_double(optarg, "--link-gbps", &o->netem.link_gbps); break;
        case OPT_LINK_LATENCY: rc = ra_arg_double(optarg, "--link-latency-us", &o->netem.latency_us); break;
        case OPT_NOISE_GBPS: rc = ra_arg_double(optarg, "--noise-gbps", &o->netem.noise_gbps); break;
        case OPT_NOISE_SLOT: rc = ra_arg_double(optarg, "--noise-slot-ms", &o->netem.noise_slot_ms); break;
        case OPT_NOISE_SEED: rc = ra_arg_u64(optarg, "--noise-seed", &o->netem.noise_seed); break;
        case 'o':
            if (!strcmp(optarg, "text")) o->output = OUTPUT_TEXT;
            else if (!strcmp(optarg, "ids")) o->output = OUTPUT_IDS;
            else if (!strcmp(optarg, "json")) o->output = OUTPUT_JSON;
            else rc = ra_error_set(RA_EINVAL, "--output: '%s' is not text, ids or json", optarg);
            break;
        case OPT_TOKENIZE_ONLY: o->tokenize_only = 1; break;
        case 'h': if (rank == 0) usage(stdout); return 1;
        case 'V': if (rank == 0) ra_print_version("runahead"); return 1;
        case ':': return ra_error_set(RA_EINVAL, "%s needs a value (see --help)", argv[optind - 1]);
        default: return ra_error_set(RA_EINVAL, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        if (rc != RA_OK)
            return rc;
    }
    if (optind < argc)
        return ra_error_set(RA_EINVAL, "unexpected argument '%s' (see --help)", argv[optind]);
    int sources = !!o->prompt + !!o->prompt_file + !!o->prompt_ids + !!o->prompt_ids_file;
    sources += !!o->user + !!o->messages + !!o->request;
    if (sources != 1)
        return ra_error_set(RA_EINVAL, "give exactly one of --prompt, --prompt-file, --prompt-ids, --prompt-ids-file, "
                            "--user, --messages, --request (got %d)", sources);
    if ((rc = reuse_options_check(o, blend_given, store_given, chain_given)) != RA_OK)
        return rc;
    if (o->system && !o->user)
        return ra_error_set(RA_EINVAL, "--system needs --user (with --messages, put it in the file)");
    if (!o->tokenize_only && !o->model)
        return ra_error_set(RA_EINVAL, "no model given (use --model PATH)");
    if (world > 1 && o->method == RA_METHOD_SINGLE)
        return ra_error_set(RA_EINVAL, "--method single runs on one rank, but %d were started: use mpirun -np 1", world);
    if (!o->partition) /* KV-Runahead balances by default; TSP always splits evenly */
        o->partition = o->method == RA_METHOD_KVR ? "auto" : "even";
    if (o->method == RA_METHOD_TSP && strcmp(o->partition, "even") != 0)
        return ra_error_set(RA_EINVAL, "--method tsp always splits evenly; --partition %s is for kvr", o->partition);
    if ((rc = ra_partition_spec_parse(o->partition, &o->spec)) != RA_OK) /* a bad spec fails before loading */
        return rc;
    if (!(o->temperature >= 0))
        return ra_error_set(RA_EINVAL, "--temperature %g must be >= 0", o->temperature);
    if (!(o->top_p > 0 && o->top_p <= 1))
        return ra_error_set(RA_EINVAL, "--top-p %g must be in (0, 1]", o->top_p);
    if (!(o->offload.link_gbps >= 0) || !(o->offload.link_latency_us >= 0))
        return ra_error_set(RA_EINVAL, "--host-link-gbps and --host-link-latency-us must be >= 0");
    if (o->offload.mode == RA_OFFLOAD_NONE &&
        (o->offload.device_kv_mem || o->offload.link_gbps > 0 || o->offload.link_latency_us > 0))
        return ra_error_set(RA_EINVAL, "--device-kv-mem and --host-link-* need --offload full|kvpr|infinigen");
    if ((o->offload.ig_ratio > 0 || o->offload.ig_alpha > 0 || o->offload.ig_cap > 0 || o->offload.ig_pool_mem) &&
        o->offload.mode != RA_OFFLOAD_INFINIGEN)
        return ra_error_set(RA_EINVAL, "--infinigen-* needs --offload infinigen");
    if (o->offload.kvpr_force_l >= 0 && o->offload.mode != RA_OFFLOAD_KVPR)
        return ra_error_set(RA_EINVAL, "--kvpr-l needs --offload kvpr");
    if (o->offload.mode == RA_OFFLOAD_INFINIGEN && o->kv_dtype != RA_DTYPE_F32) /* its pool holds fp32 rows */
        return ra_error_set(RA_EINVAL, "--offload infinigen needs --kv-dtype f32");
    o->offload.kv_dtype = o->kv_dtype; /* the pool and the slots hold the cache's rows */
    return ra_netem_config_check(&o->netem);
}

/* The vocabulary: --tokenizer, or the model's own (src/vocab.h, ra_vocab_find). */
static int find_tokenizer(const struct options *o, char *path, size_t len)
{
    return ra_program_find_tokenizer(o->tokenizer, o->model, path, len);
}

static int need_text(const struct options *o)
{
    return o->prompt || o->prompt_file || o->user || o->messages || (o->tokenize_only && !o->request) ||
           o->output == OUTPUT_TEXT;
}

/* --user/--messages: the chat rendered with the vocabulary's template, its
 * special tokens parsed and nothing added (the template writes any BOS). */
static int chat_prompt(const struct options *o, const struct ra_vocab *v, int32_t **ids, int *n)
{
    struct ra_chat chat = { 0 };
    char bos[256] = "", eos[256] = "", *text = NULL;
    int rc = RA_OK;
    if (!v->chat_template)
        return ra_error_set(RA_EINVAL, "%s: the vocabulary has no chat template: use --prompt with the chat "
                            "written out", v->path);
    if (o->messages)
        rc = ra_chat_load_json(&chat, o->messages);
    else if (o->system)
        rc = ra_chat_add(&chat, "system", o->system);
    if (rc == RA_OK && o->user)
        rc = ra_chat_add(&chat, "user", o->user);
    if (rc == RA_OK && v->bos_id >= 0)
        rc = ra_vocab_token_text(v, v->bos_id, bos, sizeof bos);
    if (rc == RA_OK && v->eos_id >= 0)
        rc = ra_vocab_token_text(v, v->eos_id, eos, sizeof eos);
    if (rc == RA_OK)
        rc = ra_chat_render(v->chat_template, v->path, &chat, bos, eos, &text);
    if (rc == RA_OK && (rc = ra_vocab_encode(v, text, strlen(text), RA_VOCAB_PARSE_SPECIAL, ids, n)) == RA_OK &&
        *n == 0) /* Llama 2 renders a lone system message as nothing */
        rc = ra_error_set(RA_EINVAL, "%s: the chat renders as no text", o->messages ? o->messages : "--user");
    free(text);
    ra_chat_free(&chat);
    return rc;
}

/* --request, read on rank 0; a reuse run on the chain gives every rank its parts (share_request). */
static struct ra_request request;

static int request_prompt(const struct options *o, const struct ra_vocab *v, int32_t **ids, int *n)
{
    int rc = ra_request_load(&request, o->request, v, v ? v->chat_template : NULL);
    if (rc != RA_OK)
        return rc;
    if (!(*ids = malloc(sizeof **ids * (size_t)request.n)))
        return ra_error_set(RA_ENOMEM, "out of memory for %d prompt ids", request.n);
    memcpy(*ids, request.ids, sizeof **ids * (size_t)request.n);
    *n = request.n;
    return RA_OK;
}

static int read_prompt(const struct options *o, const struct ra_vocab *v, int32_t **ids, int *n)
{
    char *text = NULL;
    size_t len = 0;
    int rc;
    if (o->request)
        return request_prompt(o, v, ids, n);
    if (o->prompt_ids)
        return ra_prompt_parse_ids(o->prompt_ids, "--prompt-ids", ids, n);
    if (o->user || o->messages)
        return chat_prompt(o, v, ids, n);
    const char *file = o->prompt_ids_file ? o->prompt_ids_file : o->prompt_file;
    if (file && (rc = ra_read_file(file, &text, &len)) != RA_OK)
        return rc;
    if (o->prompt_ids_file)
        rc = ra_prompt_parse_ids(text, file, ids, n);
    else if ((rc = ra_vocab_encode(v, text ? text : o->prompt, text ? len : strlen(o->prompt),
                                   RA_VOCAB_ADD_SPECIAL | RA_VOCAB_PARSE_SPECIAL, ids, n)) == RA_OK && *n == 0)
        rc = ra_error_set(RA_EINVAL, "%s: the prompt is empty (and %s adds no BOS)", file ? file : "--prompt",
                          v->path);
    free(text);
    return rc;
}

/* What on_token needs: the vocabulary, whether to print, whether to stop at
 * the end of generation, the previous token (SentencePiece's leading space). */
struct stream {
    const struct ra_vocab *v;
    int print, stop_at_eog, prev;
};

/* Streams each token's bytes as it comes (a byte-level token may end inside a
 * UTF-8 character: the terminal joins them); the token that ends generation
 * is not printed. Returns 1 to stop there. */
static int on_token(void *ctx, int token)
{
    struct stream *st = ctx;
    const int stop = st->stop_at_eog && ra_vocab_is_eog(st->v, token);
    char byte[2];
    size_t len;
    if (st->print && !stop) {
        const char *piece = ra_vocab_token_bytes(st->v, st->prev, token, byte, &len);
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
    }
    st->prev = token;
    return stop;
}

/* Every rank's status becomes the first failing rank's; only that rank prints. */
static int failed_rank = -1;

static int agree(int rc)
{
    int agreed = ra_mpi_agree(rc, MPI_COMM_WORLD, &failed_rank);
    return agreed;
}


/* Rank 0 reads and tokenizes the prompt; every rank gets the ids. */
static int share_prompt(const struct options *o, const struct ra_vocab *tok, struct result *r)
{
    int rc = RA_OK;
    if (rank == 0)
        rc = read_prompt(o, tok, &r->prompt, &r->n_prompt);
    if ((rc = agree(rc)) != RA_OK)
        return rc;
    MPI_CHECK(MPI_Bcast(&r->n_prompt, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank != 0 && !(r->prompt = malloc(sizeof(int32_t) * (size_t)r->n_prompt)))
        rc = ra_error_set(RA_ENOMEM, "out of memory for %d prompt ids", r->n_prompt);
    if ((rc = agree(rc)) != RA_OK)
        return rc;
    MPI_CHECK(MPI_Bcast(r->prompt, r->n_prompt, MPI_INT32_T, 0, MPI_COMM_WORLD));
out:
    return rc;
}

/* Rank 0's request to every rank, for a reuse run on the chain: its ids are
 * the prompt's (shared already), then its layout; chunk names stay on rank 0
 * (the one that names a chunk in messages). */
static int share_request(const struct result *r)
{
    int rc = RA_OK, head[3] = { request.n_prefix, request.n_chunks, request.suffix_start };
    MPI_CHECK(MPI_Bcast(head, 3, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank != 0) {
        request.n = r->n_prompt, request.n_prefix = head[0], request.n_chunks = head[1], request.suffix_start = head[2];
        request.ids = malloc(sizeof *request.ids * (size_t)r->n_prompt);
        request.chunk_start = malloc(sizeof(int) * (size_t)(head[1] + 1));
        request.chunk_len = malloc(sizeof(int) * (size_t)(head[1] + 1));
        if (!request.ids || !request.chunk_start || !request.chunk_len)
            rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory for the request's %d chunks", rank, head[1]);
        else
            memcpy(request.ids, r->prompt, sizeof *request.ids * (size_t)r->n_prompt);
    }
    if ((rc = agree(rc)) != RA_OK)
        return rc;
    MPI_CHECK(MPI_Bcast(request.chunk_start, request.n_chunks, MPI_INT, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Bcast(request.chunk_len, request.n_chunks, MPI_INT, 0, MPI_COMM_WORLD));
out:
    return rc;
}

/* The --partition spec resolved for this run and its key (backend, linear and KV dtypes:
 * partition/spec.h); rank 0 says where a table's or auto's split came from. TSP always splits
 * evenly. */
static int choose_partition(const struct options *o, const struct ra_context *ctx, int n_prompt,
                            const struct ra_partition_reuse *reuse, int *bounds)
{
    const struct ra_model *m = ctx->model;
    const struct ra_partition_spec *spec = &o->spec;
    struct ra_table_key key;
    const struct ra_partition_run run = { &m->config, n_prompt, world, o->hw_tag, &key };
    int extrapolated = 0;
    int rc = ra_partition_run_key(&key, ctx->backend, ctx->weights.layers[0].wq.dtype, o->device_dtype, o->kv_dtype);
    if (rc == RA_OK)
        rc = ra_partition_resolve_reuse(spec, &run, reuse, bounds, partition_source, sizeof partition_source,
                                        &extrapolated);
    if (rc != RA_OK || (spec->kind != RA_PARTITION_AUTO && spec->kind != RA_PARTITION_TABLE)) {
        partition_source[0] = '\0'; /* the spec says it all */
        return rc;
    }
    if (rank == 0) {
        char b[256];
        ra_partition_format(bounds, world, b, sizeof b);
        if (spec->kind == RA_PARTITION_TABLE)
            fprintf(stderr, "runahead: partition for %d tokens %s: [%s]\n", n_prompt, partition_source, b);
        else
            fprintf(stderr, "runahead: partition auto for %d tokens on %d ranks: [%s] (%s)\n", n_prompt, world, b,
                    partition_source);
    }
    return RA_OK;
}

static int check_fit(const struct options *o, const struct ra_model *m, const struct ra_vocab *tok,
                     const char *tok_path, const struct result *r)
{
    const struct ra_config *c = &m->config;
    if (tok && tok->n_tokens != c->vocab_size)
        return ra_error_set(RA_EINVAL, "%s: tokenizer has %d tokens but the model %s has %d", tok_path,
                            tok->n_tokens, o->model, c->vocab_size);
    if (r->n_prompt > c->seq_len)
        return ra_error_set(RA_ERANGE, "the prompt has %d tokens, more than the model's context of %d tokens",
                            r->n_prompt, c->seq_len);
    if (r->n_prompt + (o->generate > 0 ? o->generate - 1 : 0) > c->seq_len)
        return ra_error_set(RA_ERANGE, "prompt of %d tokens plus %d generated exceeds the model's context of %d tokens",
                            r->n_prompt, o->generate, c->seq_len);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= c->vocab_size)
            return ra_error_set(RA_ERANGE, "prompt token id %d at position %d is outside the vocabulary (0..%d)",
                                r->prompt[i], i, c->vocab_size - 1);
    return RA_OK;
}

static int print_output(const struct options *o, const struct ra_vocab *tok, const struct result *r)
{
    if (o->output == OUTPUT_IDS) {
        for (int i = 0; i < r->n_generated; i++)
            printf(i ? " %d" : "%d", r->generated[i]);
        putchar('\n');
    } else if (o->output == OUTPUT_JSON) {
        json_t *root = json_object(), *prompt = json_array(), *gen = json_array();
        char *text = NULL;
        for (int i = 0; i < r->n_prompt; i++)
            json_array_append_new(prompt, json_integer(r->prompt[i]));
        for (int i = 0; i < r->n_generated; i++)
            json_array_append_new(gen, json_integer(r->generated[i]));
        json_object_set_new(root, "prompt_tokens", json_integer(r->n_prompt));
        json_object_set_new(root, "prompt_ids", prompt);
        json_object_set_new(root, "generated_ids", gen);
        int n_text = r->n_generated; /* the text leaves out the token that ended generation */
        if (tok && n_text > 0 && !o->ignore_eos && ra_vocab_is_eog(tok, r->generated[n_text - 1]))
            n_text--;
        if (tok && ra_vocab_decode(tok, r->generated, n_text, &text, NULL) == RA_OK)
            json_object_set_new(root, "text", json_string(text));
        json_object_set_new(root, "ttft_s", json_real(ra_median(r->ttft, o->repeat)));
        json_object_set_new(root, "decode_s", json_real(r->t_decode));
        int bad = json_dumpf(root, stdout, JSON_INDENT(2));
        putchar('\n');
        free(text);
        json_decref(root);
        if (bad)
            return ra_error_set(RA_EIO, "cannot write JSON to stdout");
    }
    fflush(stdout);
    return RA_OK;
}

/* The last rank: sample the first token from the prompt's logits, then decode. */
static int decode(const struct options *o, struct ra_context *ctx, struct ra_kvcache *kv,
                  const struct ra_vocab *tok, float *logits, struct result *r, int slice_start,
                  struct ra_offload *off)
{
    struct ra_sampler sampler = { 0 };
    int rc = ra_sampler_init(&sampler, ctx->model->config.vocab_size, o->temperature, o->top_p, o->seed);
    const int text = o->output == OUTPUT_TEXT;
    struct stream st = { .v = tok, .print = text && tok, .stop_at_eog = tok && !o->ignore_eos, .prev = -1 };
    const struct ra_generate g = {
        .max_tokens = o->generate,
        .eos_id = -1, /* the vocabulary's end-of-generation tokens: on_token */
        .on_token = tok ? on_token : NULL,
        .ctx = &st,
        .prompt = r->prompt,
        .prompt_start = slice_start,
        .offload = off,
    };
    const double t0 = MPI_Wtime();
    if (rc == RA_OK)
        rc = ra_generate_run(ctx, kv, r->n_prompt, logits, &sampler, &g, r->generated, &r->n_generated);
    if (rc == RA_OK && off)
        ra_offload_report(off, stderr);
    r->t_decode = MPI_Wtime() - t0;
    if (text)
        putchar('\n');
    ra_sampler_free(&sampler);
    return rc;
}

/* The last rank creates the temporary files of --report and --trace now: a directory that
 * does not exist or a target that must not be replaced fails before the model loads. */
static int open_outputs(const struct options *o, struct outputs *out)
{
    FILE *fp;
    int rc = RA_OK;
    if (rank != world - 1)
        return RA_OK;
    if (o->report)
        rc = ra_outfile_open(&out->report, o->report, &fp);
    if (rc == RA_OK && o->trace)
        rc = ra_outfile_open(&out->trace, o->trace, &fp);
    return rc;
}

static int write_reports(const struct options *o, struct outputs *out, struct ra_exchange *x,
                         const struct ra_context *ctx, const struct result *r, const int *bounds)
{
    const struct ra_model *m = ctx->model;
    struct ra_all_stats all;
    struct ra_proc_info me, *procs = NULL;
    int rc = RA_OK;
    /* Every rank's CPUs, threads and peak memory, now that the work is done. */
    ra_proc_info_get(&me, ctx->backend->n_threads);
    if (rank == world - 1 && !(procs = calloc((size_t)world, sizeof *procs))) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
        goto out;
    }
    MPI_CHECK(MPI_Gather(&me, (int)sizeof me, MPI_BYTE, procs, (int)sizeof me, MPI_BYTE, world - 1, MPI_COMM_WORLD));
    rc = ra_stats_gather_passes(x, o->repeat > 1 ? &r->passes : NULL, &all);
    if (rc != RA_OK || rank != world - 1)
        goto out;
    const struct ra_run_info info = {
        .model_path = o->model, .partition_spec = o->method == RA_METHOD_TSP ? "even" : o->partition,
        .config = &m->config, .method = o->method, .route = o->route, .bounds = bounds, .ranks = world,
        .threads = ctx->backend->n_threads, .n_prompt = r->n_prompt, .repeat = o->repeat, .ttft = r->ttft,
        .median_pass = r->passes.median, .partition_source = partition_source[0] ? partition_source : NULL,
        .generated = r->generated, .n_generated = r->n_generated, .t_decode = r->t_decode, .transport = ra_exchange_transport_name(x),
        .link = o->netem.link_gbps > 0 ? &o->netem : NULL, .procs = procs,
        .backend = ctx->backend->ops->name, .kv_dtype = o->kv_dtype,
    };
    ra_report_print(stderr, &info, &all);
    if (r->n_generated > 1)
        fprintf(stderr, "decode: %d tokens in %.3f s (%.1f tokens/s)\n", r->n_generated - 1, r->t_decode,
                (r->n_generated - 1) / r->t_decode);
    if (o->report && (rc = ra_report_write(&out->report, &info, &all)) != RA_OK)
        goto out;
    if (o->trace)
        rc = ra_trace_write(&out->trace, &info, &all);
out:
    ra_stats_free(&all);
    free(procs);
    return rc;
}

/* --reuse: the request prefilled through the chunk store (reuse/run.h) on this one rank, then
 * the usual decode; the report on stderr and in --report. */
static int run_reuse(struct options *o, struct ra_context *ctx, const struct ra_vocab *tok, struct result *r,
                     struct outputs *outs)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_kvcache kv = { 0 };
    struct ra_reuse_report rep = { 0 };
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    r->ttft = calloc((size_t)o->repeat, sizeof *r->ttft);
    r->generated = malloc(sizeof(int32_t) * (size_t)(o->generate > 0 ? o->generate : 1));
    int rc = logits && r->ttft && r->generated ? RA_OK : ra_error_set(RA_ENOMEM, "out of memory");
    if (rc == RA_OK)
        rc = ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c), r->n_prompt + o->generate,
                                   o->kv_dtype);
    if (rc == RA_OK)
        rc = ra_reuse_run_prefill(ctx, tok, &o->reuse, &request, &kv, logits, r->ttft, &rep);
    if (rc == RA_OK && (rc = decode(o, ctx, &kv, tok, logits, r, 0, NULL)) == RA_OK)
        rc = print_output(o, tok, r);
    if (rc == RA_OK) {
        ra_reuse_report_print(stderr, &rep, &request);
        if (r->n_generated > 1)
            fprintf(stderr, "decode: %d tokens in %.3f s (%.1f tokens/s)\n", r->n_generated - 1, r->t_decode,
                    (r->n_generated - 1) / r->t_decode);
    }
    if (rc == RA_OK && o->report) {
        const struct ra_reuse_record rec = {
            .model = o->model, .request = o->request, .backend = ctx->backend->ops->name, .config = c,
            .threads = ctx->backend->n_threads, .kv_dtype = o->kv_dtype, .req = &request, .ttft = r->ttft,
            .generated = r->generated, .n_generated = r->n_generated, .t_decode = r->t_decode,
        };
        rc = ra_reuse_record_write(&outs->report, &rec, &o->reuse, &rep);
    }
    ra_reuse_report_free(&rep);
    ra_kvcache_free(&kv);
    free(logits);
    return rc;
}

/* A reuse run's bounds: --partition resolved with the cost model's view of
 * the run (partition/spec.h): auto balances the work reuse leaves, table:
 * reads the group runahead-tune --request wrote for this mode and options. */
static int reuse_bounds(const struct options *o, const struct ra_context *ctx, int n_prompt, int *bounds)
{
    struct ra_cost_span *spans = malloc(sizeof *spans * (size_t)(request.n_chunks + 1));
    struct ra_cost_reuse cost;
    char hw[128], tag[256];
    const int global = o->blend_scope == RA_BLEND_SCOPE_GLOBAL, delta = o->reuse_send == RA_REUSE_SEND_DELTA;
    if (!spans)
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
    if (o->hw_tag)
        snprintf(hw, sizeof hw, "%s", o->hw_tag);
    else
        ra_table_default_hw_tag(hw, sizeof hw);
    ra_partition_reuse_tag(hw, o->reuse.mode, o->reuse.cfg.ratio, global, delta, tag, sizeof tag);
    const struct ra_partition_reuse pr = { &cost, o->method == RA_METHOD_TSP ? RA_COST_TSP : RA_COST_KVR, tag };
    int rc = ra_cost_reuse_of_request(&request, o->reuse.mode, &o->reuse.cfg, global, delta, o->kv_dtype, spans, &cost);
    if (rc == RA_OK)
        rc = choose_partition(o, ctx, n_prompt, &pr, bounds);
    free(spans);
    return rc;
}

/* The chain's figures on stderr (the last rank): how the ranks shared the request. */
static void print_chain(const struct options *o, const int *bounds, const struct ra_reuse_chain_stats *s)
{
    char b[256];
    ra_partition_format(bounds, world, b, sizeof b);
    fprintf(stderr, "reuse on %d ranks: %s%s%s, send %s, scope %s, bounds [%s]; the last rank received %.3f MB, "
            "waited %.3f ms\n", world, ra_method_name(o->method), o->method == RA_METHOD_KVR ? " " : "",
            o->method == RA_METHOD_KVR ? ra_route_name(o->route) : "", ra_reuse_send_name(o->reuse_send),
            ra_blend_scope_name(o->blend_scope), b, s->bytes_recv / 1e6, s->t_wait * 1e3);
}

/* --reuse with --method kvr or tsp: every rank opens the store and prefills
 * its slice of the request (reuse_chain.h) --repeat times; the last rank
 * decodes and reports the whole request. Collective. */
static int run_reuse_chain(struct options *o, struct ra_context *ctx, const struct ra_vocab *tok, struct result *r,
                           struct outputs *outs)
{
    const struct ra_config *c = &ctx->model->config;
    const int last = rank == world - 1;
    int bounds[RA_MAX_RANKS + 1];
    struct ra_store *st = NULL;
    struct ra_kvcache kv = { 0 };
    struct ra_reuse_report rep = { 0 };
    struct ra_reuse_chain_stats stats = { 0 };
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    r->ttft = calloc((size_t)o->repeat, sizeof *r->ttft);
    r->generated = malloc(sizeof(int32_t) * (size_t)(o->generate > 0 ? o->generate : 1));
    int rc = logits && r->ttft && r->generated ? RA_OK : ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
    if ((rc = agree(rc == RA_OK ? share_request(r) : rc)) != RA_OK)
        goto out;
    if ((rc = agree(reuse_bounds(o, ctx, r->n_prompt, bounds))) != RA_OK)
        goto out;
    const struct ra_reuse_chain ch = { .method = o->method, .route = o->route, .bounds = bounds,
                                       .send = o->reuse_send, .scope = o->blend_scope, .transport = o->transport };
    const int rows = o->method == RA_METHOD_KVR ? bounds[rank + 1] : r->n_prompt;
    rc = ra_reuse_run_open_store(ctx, tok, &o->reuse, o->kv_dtype, rank == 0 ? RA_STORE_USES : RA_STORE_READONLY, &st);
    if (rc == RA_OK)
        rc = ra_kvcache_init_dtype(&kv, ctx->backend, c->n_layers, ra_config_kv_dim(c),
                                   rows + (last ? o->generate : 0), o->kv_dtype);
    if ((rc = agree(rc)) != RA_OK)
        goto out;
    if ((rc = agree(ra_watchdog_start(o->watchdog, "runahead", rank))) != RA_OK)
        goto out;
    for (int i = 0; rc == RA_OK && i < o->repeat; i++) {
        ra_reuse_report_free(&rep);
        rc = ra_reuse_chain_prefill(ctx, MPI_COMM_WORLD, st, &request, o->reuse.mode, &o->reuse.cfg, &ch, &kv, logits,
                                    &rep, &stats);
        r->ttft[i] = rep.ttft;
        if (stats.pass_failed) /* peers may be blocked on this rank's KV rows: nothing else ends them */
            ra_mpi_abort("runahead", rank);
    }
    ra_watchdog_stop(); /* the others now wait for the last rank's decoding */
    if (rc == RA_OK && last && (rc = decode(o, ctx, &kv, tok, logits, r, bounds[world - 1], NULL)) == RA_OK)
        rc = print_output(o, tok, r);
    if (rc == RA_OK && last) {
        ra_reuse_report_print(stderr, &rep, &request);
        print_chain(o, bounds, &stats);
    }
    if (rc == RA_OK && last && o->report) {
        const struct ra_reuse_record rec = {
            .model = o->model, .request = o->request, .backend = ctx->backend->ops->name, .config = c,
            .threads = ctx->backend->n_threads, .kv_dtype = o->kv_dtype, .req = &request, .ttft = r->ttft,
            .generated = r->generated, .n_generated = r->n_generated, .t_decode = r->t_decode,
            .method = ra_method_name(o->method), .route = ra_route_name(o->route),
            .send = ra_reuse_send_name(o->reuse_send), .scope = ra_blend_scope_name(o->blend_scope),
            .bounds = bounds, .ranks = world,
        };
        rc = ra_reuse_record_write(&outs->report, &rec, &o->reuse, &rep);
    }
    rc = agree(rc);
out:
    ra_reuse_report_free(&rep);
    ra_kvcache_free(&kv);
    ra_store_close(st);
    free(logits);
    return rc;
}

/* --backend (ra_backend_open): cpu, or cuda on the GPU of the rank's index on
 * its node (modulo the GPUs it sees) unless --device names one; by default
 * cuda when the build has it and this rank sees a GPU. LOCAL_RANK comes from
 * ra_mpi_local_rank. */
static int open_backend(const struct options *o, int threads, int local_rank, struct ra_backend **be)
{
    const struct ra_program_backend b = { o->backend, o->device, o->device_dtype, o->compute, o->kv_dtype };
    return ra_program_open_backend(&b, rank, local_rank, threads, be);
}

static int run(int argc, char **argv)
{
    struct options o;
    struct ra_vocab tok_storage, *tok = NULL;
    struct ra_model m = { 0 };
    struct ra_backend *be = NULL;
    struct ra_context ctx = { 0 };
    struct ra_exchange x = { 0 };
    struct ra_kvcache kv = { 0 };
    struct ra_offload *off = NULL;
    struct result r = { 0 };
    struct outputs outs = { RA_OUTFILE_INIT, RA_OUTFILE_INIT };
    float *logits = NULL;
    char tok_path[4096];
    int bounds[RA_MAX_RANKS + 1];
    const int last = rank == world - 1;

    int rc = parse_options(argc, argv, &o);
    if (rc != RA_OK) { /* every rank parsed the same argv: let rank 0 speak */
        failed_rank = 0;
        return rc > 0 ? RA_OK : rc;
    }
    if (o.expect_ranks && o.expect_ranks != world) { /* same on every rank: rank 0 speaks */
        failed_rank = 0;
        return ra_error_set(RA_EINVAL, "started as %d MPI rank%s, but --expect-ranks %d: the launcher did not join "
                            "the ranks into one MPI job (under Slurm use srun --mpi=pmix; Open MPI without PMIx "
                            "starts separate one-rank copies)", world, world == 1 ? "" : "s", o.expect_ranks);
    }
    if ((rc = agree(open_outputs(&o, &outs))) != RA_OK)
        goto out;
    if (world > RA_MAX_RANKS)
        rc = ra_error_set(RA_EINVAL, "%d ranks exceed the limit of %d", world, RA_MAX_RANKS);
    else if (find_tokenizer(&o, tok_path, sizeof tok_path)) {
        if ((rc = ra_vocab_load(&tok_storage, tok_path)) == RA_OK)
            tok = &tok_storage;
    } else if (need_text(&o)) {
        rc = ra_error_set(RA_EINVAL, "no tokenizer: give --tokenizer PATH (none found next to the model)");
    }
    if ((rc = agree(rc)) != RA_OK)
        goto out;
    if (o.output == OUTPUT_AUTO)
        o.output = tok ? OUTPUT_TEXT : OUTPUT_IDS;
    if ((rc = share_prompt(&o, tok, &r)) != RA_OK)
        goto out;
    if (o.tokenize_only) {
        if (rank == 0) {
            for (int i = 0; i < r.n_prompt; i++)
                printf(i ? " %d" : "%d", r.prompt[i]);
            putchar('\n');
        }
        goto out;
    }
    const struct ra_load_options load = { .no_check_weights = o.no_check_weights,
                                          .dequantize_weights = o.dequantize_weights,
                                          .n_threads = o.threads ? o.threads : ra_mpi_threads_per_rank() };
    rc = ra_model_load_opts(&m, o.model, &load);
    if (rc == RA_OK && o.request && rank == 0) /* names the request's file and chunk */
        rc = ra_reuse_check_request(&o.reuse, &request, o.request, &m.config, o.generate);
    if (rc == RA_OK)
        rc = check_fit(&o, &m, tok, tok_path, &r);
    const int local_rank = ra_mpi_local_rank(); /* collective: every rank, whatever rc is */
    if (rc == RA_OK)
        rc = open_backend(&o, load.n_threads, local_rank, &be);
    if (rc == RA_OK)
        rc = ra_context_init(&ctx, &m, be);
    if (o.reuse_given && o.method != RA_METHOD_SINGLE) { /* the chain's: every rank, whatever rc is */
        if ((rc = agree(rc)) == RA_OK)
            rc = run_reuse_chain(&o, &ctx, tok, &r, &outs);
        goto out;
    }
    if (rc == RA_OK && o.reuse_given) {
        rc = run_reuse(&o, &ctx, tok, &r, &outs); /* one rank: nothing to agree on */
        goto out;
    }
    if (rc == RA_OK)
        rc = choose_partition(&o, &ctx, r.n_prompt, NULL, bounds);
    if (rc == RA_OK)
        rc = ra_exchange_init(&x, MPI_COMM_WORLD, o.method, o.route, bounds, m.config.n_layers,
                              ra_kv_row_bytes(ra_config_kv_dim(&m.config), o.kv_dtype));
    if (rc == RA_OK && last) { /* before the prefill: KVPR keeps the layer inputs of this rank's span */
        if ((rc = ra_offload_create(&off, &ctx, &o.offload, r.n_prompt + (o.generate > 0 ? o.generate : 1))) ==
            RA_OK)
            rc = ra_offload_capture(off);
    }
    if (rc == RA_OK && off) /* the prefill writes into the host pool (CPU backend; a device cache on a GPU) */
        rc = ra_offload_prefill_cache(off, &kv, o.kv_dtype);
    else if (rc == RA_OK)
        rc = ra_kvcache_init_dtype(&kv, be, m.config.n_layers, ra_config_kv_dim(&m.config),
                                   ra_prefill_kv_rows(&x) + (last ? o.generate : 0), o.kv_dtype);
    logits = malloc(sizeof(float) * (size_t)(m.config.vocab_size > 0 ? m.config.vocab_size : 1));
    r.ttft = calloc((size_t)o.repeat, sizeof *r.ttft);
    r.generated = malloc(sizeof(int32_t) * (size_t)(o.generate > 0 ? o.generate : 1));
    if (rc == RA_OK && (!logits || !r.ttft || !r.generated))
        rc = ra_error_set(RA_ENOMEM, "out of memory");
    if ((rc = agree(rc)) != RA_OK)
        goto out;
    /* Collective (NCCL sets up its communicator), so only once every rank is ready. */
    if ((rc = agree(ra_exchange_attach_transport(&x, o.transport, &kv))) != RA_OK)
        goto out;
    /* Collective (it duplicates the communicator), so only once every rank is ready. */
    if ((rc = agree(ra_netem_attach(&x, &o.netem))) != RA_OK)
        goto out;
    if ((rc = agree(ra_watchdog_start(o.watchdog, "runahead", rank))) != RA_OK)
        goto out;

    r.passes.ttft = r.ttft;
    if ((rc = ra_prefill_repeat(&ctx, &x, &kv, r.prompt, logits, o.repeat, &r.passes)) != RA_OK)
        ra_mpi_abort("runahead", rank); /* peers may be blocked on this rank's KV rows: nothing else ends them */
    /* The others now wait for the last rank's decoding, however long it takes. */
    ra_watchdog_stop();
    if (last && (rc = decode(&o, &ctx, &kv, tok, logits, &r, bounds[world - 1], off)) == RA_OK)
        rc = print_output(&o, tok, &r);
    if ((rc = agree(rc)) == RA_OK)
        rc = agree(write_reports(&o, &outs, &x, &ctx, &r, bounds));
out:
    ra_outfile_abort(&outs.report); /* no-ops once committed */
    ra_outfile_abort(&outs.trace);
    free(logits);
    free(r.prompt);
    free(r.generated);
    free(r.ttft);
    ra_watchdog_stop();
    ra_kvcache_free(&kv);
    ra_offload_free(off);
    ra_exchange_free(&x);
    ra_context_free(&ctx);
    ra_model_free(&m);
    ra_backend_free(be);
    if (tok)
        ra_vocab_free(tok);
    ra_request_free(&request);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = ra_mpi_init_threads(&argc, &argv, &rank, &world, ra_watchdog_requested(argc, argv));
    if (rc == RA_OK)
        rc = run(argc, argv);
    if (rc != RA_OK && (failed_rank == rank || failed_rank < 0))
        ra_mpi_print_error("runahead", rank);
    MPI_Finalize();
    return rc == RA_OK ? 0 : 1;
}
