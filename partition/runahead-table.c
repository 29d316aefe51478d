/* runahead-table: shows, looks up and validates partition lookup tables (HDF5).
 *
 * A serial program: it links the MPI-built HDF5 but never calls MPI, so it runs without mpirun.
 * Errors: one line "runahead-table: ..." and exit 1; usage errors exit 2. */
#include "config.h"
#include "args.h"
#include "model.h"
#include "status.h"
#include "table.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define PROG "runahead-table"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: " PROG " show [KEY] FILE\n"
            "       " PROG " lookup FILE --model M --ranks P --context N [--hw-tag T] [KEY]\n"
            "       " PROG " validate FILE\n"
            "       " PROG " merge [--lock-timeout S] OUT IN [IN ...]\n"
            "\n"
            "Partition lookup tables (HDF5: /<model-id>/<hardware-tag>/p<P>/, see partition/README.md).\n"
            "\n"
            "  show       every table with its key, its entries (context length, TTFTs, boundaries,\n"
            "             ratios) and search attributes, and every cost-model profile; with KEY options\n"
            "             only the tables whose key has those values\n"
            "  lookup     the partition for a context: the table's entry, or linear interpolation\n"
            "             between the two nearest; outside the table the nearest entry (said on stderr).\n"
            "             Prints lines 'bounds:...' and 'ratios:...' usable as --partition specs. A table\n"
            "             tuned for another key (default cpu, f32, f32) is refused\n"
            "  validate   checks the whole file and prints every problem; exit 1 if any\n"
            "  merge      merges every table and cost-model profile of each IN into OUT (created if\n"
            "             absent), as runahead-tune merges. Each entry keeps its own provenance.\n"
            "             Two entries for one model, hardware, rank count and context length are a\n"
            "             conflict, reported on stderr: the newer search (its date) wins, at the same\n"
            "             date the lower KVR-S TTFT, then the entry already in OUT; so merges in any\n"
            "             order give the same table. Writers of OUT (merges, runahead-tune) take turns\n"
            "             on the lock file OUT.lock (an fcntl lock), so none loses another's entries\n"
            "\n"
            "  --model M      a model path (its config gives the id) or a literal model id\n"
            "  --ranks P      rank count\n"
            "  --context N    prompt length in tokens\n"
            "  --hw-tag T     hardware tag (default: this machine's, e.g. Intel_R_Xeon_R_Processor-2c)\n"
            "  KEY: --backend B --compute-dtype D --kv-dtype T  what a table was tuned on: the backend\n"
            "                 (cpu, cuda), the linear layers' dtype and the KV cache's (f32, bf16, ...)\n"
            "  --lock-timeout S  how long merge waits for another writer's lock on OUT.lock\n"
            "                 (default: RA_TABLE_LOCK_TIMEOUT, else 120 s); a timeout names the holder\n"
            "  --help, --version\n");
}

#define usage_error(...) ra_arg_usage_error(PROG, __VA_ARGS__)

#define fail() ra_arg_fail(PROG)

static int parse_int(const char *s, const char *flag, int min, int *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (!*s || *end || errno || x < min || x > INT_MAX)
        return usage_error("%s '%s': want an integer >= %d", flag, s, min);
    *v = (int)x;
    return 0;
}

/* --backend, --compute-dtype, --kv-dtype: the values given (NULL: not given). */
struct key_opts {
    const char *backend, *compute, *kv;
};

enum { OPT_BACKEND = 300, OPT_COMPUTE, OPT_KV };
#define KEY_OPTIONS                                                                                               \
    { "backend", required_argument, NULL, OPT_BACKEND }, { "compute-dtype", required_argument, NULL, OPT_COMPUTE }, \
        { "kv-dtype", required_argument, NULL, OPT_KV }

/* 1 if c was a key option (stored), else 0. */
static int key_option(int c, struct key_opts *k)
{
    const char **f = c == OPT_BACKEND ? &k->backend : c == OPT_COMPUTE ? &k->compute : c == OPT_KV ? &k->kv : NULL;
    if (f)
        *f = optarg;
    return f != NULL;
}

/* The key the options name, the legacy key's values where not given. */
static int key_from(const struct key_opts *o, struct ra_table_key *k)
{
    const struct ra_table_key legacy = RA_TABLE_KEY_LEGACY;
    return ra_table_key_set(k, o->backend ? o->backend : legacy.backend, o->compute ? o->compute : legacy.compute,
                            o->kv ? o->kv : legacy.kv);
}

static int key_matches(const struct key_opts *o, const struct ra_table_key *k)
{
    return (!o->backend || !strcmp(o->backend, k->backend)) && (!o->compute || !strcmp(o->compute, k->compute)) &&
           (!o->kv || !strcmp(o->kv, k->kv));
}

/* ------------------------------------------------------------------ show */

static void print_ttft(double t)
{
    if (isnan(t))
        printf(" %11s", "-");
    else
        printf(" %11.6f", t);
}

/* "; objective measure, min_stride 16, repeats 3" when every entry was searched alike. */
static void search_summary(const struct ra_table_group *g, char *buf, size_t len)
{
    const struct ra_table_prov *a = &g->prov[0];
    for (int i = 1; i < g->n; i++) {
        const struct ra_table_prov *b = &g->prov[i];
        if (strcmp(a->objective, b->objective) || a->min_stride != b->min_stride || a->repeats != b->repeats) {
            snprintf(buf, len, "; searches differ (see each entry)");
            return;
        }
    }
    snprintf(buf, len, g->n ? "; objective %s, min_stride %d, repeats %d" : "", ra_esc(a->objective), a->min_stride,
             a->repeats);
}

static void print_entry(const struct ra_table_group *g, int i)
{
    const struct ra_table_prov *pv = &g->prov[i];
    char list[4096];
    int p = g->p;
    size_t used = 0;
    printf("  %8d", g->context_lengths[i]);
    print_ttft(g->ttft_kvr_s[i]);
    print_ttft(g->ttft_even_s[i]);
    print_ttft(g->ttft_tsp_s[i]);
    for (int r = 0; r <= p && used < sizeof list; r++)
        used += (size_t)snprintf(list + used, sizeof list - used, r ? ",%d" : "%d", g->boundaries[i * (p + 1) + r]);
    for (int r = 0; r < p && used < sizeof list; r++)
        used += (size_t)snprintf(list + used, sizeof list - used, r ? ",%.6f" : " / %.6f", g->ratios[i * p + r]);
    printf("  %s\n", list);
    printf("  %8s searched %s on %s, objective %s, min_stride %d, repeats %d, runahead %s\n", "",
           pv->date[0] ? ra_esc(pv->date) : "(date unknown)", pv->host[0] ? ra_esc(pv->host) : "(host unknown)",
           ra_esc(pv->objective), pv->min_stride, pv->repeats, pv->version[0] ? ra_esc(pv->version) : "(unknown)");
}

struct show_ctx {
    const char *path;
    struct key_opts filter;
};

static int show_table(const struct show_ctx *s, const char *m, const char *hw, int p)
{
    struct ra_table_group g;
    char summary[128], key[80];
    if (ra_table_read(s->path, m, hw, p, &g) != RA_OK)
        return -1;
    if (!key_matches(&s->filter, &g.key)) {
        ra_table_group_free(&g);
        return 0;
    }
    search_summary(&g, summary, sizeof summary);
    ra_table_key_format(&g.key, key, sizeof key);
    /* Names come from the file: escaped, so the listing stays plain lines of text. */
    printf("\n/%s/%s/p%d: %d entr%s; %s%s\n", ra_esc(m), ra_esc(hw), p, g.n, g.n == 1 ? "y" : "ies", key, summary);
    printf("  %8s %11s %11s %11s  %s\n", "context", "ttft_kvr_s", "ttft_even_s", "ttft_tsp_s", "boundaries / ratios");
    for (int i = 0; i < g.n; i++)
        print_entry(&g, i);
    ra_table_group_free(&g);
    return 0;
}

static int show_profile(const char *path, const char *m, const char *hw)
{
    char(*names)[64] = malloc(sizeof *names * RA_TABLE_MAX_PROFILE);
    double *values = malloc(sizeof *values * RA_TABLE_MAX_PROFILE);
    int n = 0, rc = -1;
    if (!names || !values)
        ra_error_set(RA_ENOMEM, "out of memory");
    else if (ra_table_profile_read(path, m, hw, names, values, RA_TABLE_MAX_PROFILE, &n) == RA_OK)
        rc = 0;
    if (rc == 0) {
        printf("\n/%s/%s/profile: %d value%s\n", ra_esc(m), ra_esc(hw), n, n == 1 ? "" : "s");
        for (int i = 0; i < n; i++)
            printf("  %-32s %.9g\n", ra_esc(names[i]), values[i]);
    }
    free(names);
    free(values);
    return rc;
}

static int show_one(const char *m, const char *hw, const char *leaf, void *ctx)
{
    const struct show_ctx *s = ctx;
    if (!strcmp(leaf, "profile"))
        return show_profile(s->path, m, hw);
    if (leaf[0] == 'p' && atoi(leaf + 1) > 0)
        return show_table(s, m, hw, atoi(leaf + 1));
    return ra_error_set(RA_EFORMAT, "%s: /%s/%s/%s is not a table p<P> or a profile", s->path, ra_esc(m),
                        ra_esc(hw), ra_esc(leaf));
}

static const char *schema_note(int version)
{
    if (version == 1)
        return " (provenance per group, no key: read as backend cpu, compute f32, KV f32; a merge rewrites it)";
    if (version == 2)
        return " (no key: read as backend cpu, compute f32, KV f32; a merge rewrites it)";
    return "";
}

static int cmd_show(int argc, char **argv)
{
    static const struct option opts[] = { KEY_OPTIONS, { NULL, 0, NULL, 0 } };
    struct show_ctx s = { 0 };
    int version = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
        if (!key_option(c, &s.filter))
            return usage_error("show: unknown or incomplete option");
    if (optind != argc - 1)
        return usage_error("show needs one FILE");
    s.path = argv[optind];
    if (ra_table_schema_version(s.path, &version) != RA_OK)
        return fail();
    printf("%s: schema_version %d%s\n", s.path, version, schema_note(version));
    return ra_table_each(s.path, show_one, &s) == RA_OK ? 0 : fail();
}

/* ------------------------------------------------------------------ lookup */

/* A model path gives its id through its config; anything else is taken as an id. */
static int resolve_model(const char *arg, char *id, size_t len)
{
    struct stat st;
    if (stat(arg, &st) != 0) {
        snprintf(id, len, "%s", arg);
        return 0;
    }
    struct ra_model m;
    memset(&m, 0, sizeof m);
    if (ra_model_load(&m, arg) != RA_OK)
        return -1;
    ra_table_model_id(&m.config, id, len);
    ra_model_free(&m);
    return 0;
}

static void print_source(const struct ra_table_group *g, int context, int extrapolated)
{
    const int *cl = g->context_lengths;
    int n = g->n, i = 0;
    if (extrapolated) {
        int near = context < cl[0] ? cl[0] : cl[n - 1];
        fprintf(stderr, PROG ": note: context %d is outside the table's %d..%d: using the nearest entry's ratios (%d)\n",
                context, cl[0], cl[n - 1], near);
        printf("from: nearest entry %d (extrapolated)\n", near);
        return;
    }
    while (i < n && cl[i] < context)
        i++;
    if (i < n && cl[i] == context)
        printf("from: entry %d\n", context);
    else
        printf("from: interpolated between entries %d and %d\n", cl[i - 1], cl[i]);
}

static int lookup(const char *path, const char *model, const char *hw, int p, int context,
                  const struct ra_table_key *key)
{
    struct ra_table_group g;
    char id[256], key_text[80];
    int *bounds = NULL, extrapolated = 0, rc = 1;
    double *ratios = NULL;
    if (resolve_model(model, id, sizeof id) != 0)
        return fail();
    if (ra_table_read_for(path, id, hw, p, key, &g) != RA_OK)
        return fail();
    ra_table_key_format(key, key_text, sizeof key_text);
    bounds = malloc(sizeof *bounds * (size_t)(p + 1));
    ratios = malloc(sizeof *ratios * (size_t)p);
    if (!bounds || !ratios)
        ra_error_set(RA_ENOMEM, "out of memory");
    else if (ra_table_interpolate(&g, context, bounds, &extrapolated) == RA_OK &&
             ra_table_ratios_at(&g, context, ratios, NULL) == RA_OK)
        rc = 0;
    if (rc == 0) {
        printf("model: %s\nhw-tag: %s\nkey: %s\nranks: %d\ncontext: %d\n", id, hw, key_text, p, context);
        print_source(&g, context, extrapolated);
        printf("bounds:");
        for (int r = 0; r <= p; r++)
            printf(r ? ",%d" : "%d", bounds[r]);
        printf("\nratios:");
        for (int r = 0; r < p; r++)
            printf(r ? ",%.9g" : "%.9g", ratios[r]);
        printf("\n");
    }
    free(bounds);
    free(ratios);
    ra_table_group_free(&g);
    return rc ? fail() : 0;
}

static int cmd_lookup(int argc, char **argv)
{
    enum { OPT_MODEL = 256, OPT_RANKS, OPT_CONTEXT, OPT_HW };
    static const struct option opts[] = {
        { "model", required_argument, NULL, OPT_MODEL },     { "ranks", required_argument, NULL, OPT_RANKS },
        { "context", required_argument, NULL, OPT_CONTEXT }, { "hw-tag", required_argument, NULL, OPT_HW },
        KEY_OPTIONS, { NULL, 0, NULL, 0 },
    };
    const char *model = NULL, *hw = NULL;
    char hw_default[256];
    struct key_opts ko = { 0 };
    struct ra_table_key key;
    int p = 0, context = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (key_option(c, &ko))
            continue;
        switch (c) {
        case OPT_MODEL: model = optarg; break;
        case OPT_HW: hw = optarg; break;
        case OPT_RANKS:
            if (parse_int(optarg, "--ranks", 1, &p))
                return 2;
            break;
        case OPT_CONTEXT:
            if (parse_int(optarg, "--context", 1, &context))
                return 2;
            break;
        default: return usage_error("lookup: unknown or incomplete option");
        }
    }
    if (optind != argc - 1)
        return usage_error("lookup needs one FILE");
    if (!model || !p || !context)
        return usage_error("lookup needs --model, --ranks and --context");
    if (key_from(&ko, &key) != RA_OK)
        return usage_error("%s", ra_error_message());
    if (!hw) {
        ra_table_default_hw_tag(hw_default, sizeof hw_default);
        hw = hw_default;
    }
    return lookup(argv[optind], model, hw, p, context, &key);
}

/* ------------------------------------------------------------------ validate */

static int cmd_validate(const char *path)
{
    int n = 0;
    if (ra_table_validate(path, stdout, &n) == RA_OK) {
        printf("%s: ok\n", path);
        return 0;
    }
    fflush(stdout);
    fprintf(stderr, PROG ": %s: %d problem%s\n", path, n, n == 1 ? "" : "s");
    return 1;
}

/* ------------------------------------------------------------------ write-example (hidden) */

/* A small table for the tests and for trying the program: p2 at 2048 and 8192 tokens, p4 at
 * 4096, and a profile, under the given model id and hardware tag. */
static int write_example(const char *path, const char *model, const char *hw, const struct ra_table_key *key)
{
    struct ra_table_group g;
    const char *names[] = { "gemm_flops", "p2p_bandwidth_Bps", "p2p_latency_s" };
    const double values[] = { 5.0e10, 8.0e9, 2.0e-6 };
    char id[256];
    int rc = resolve_model(model, id, sizeof id) == 0 ? RA_OK : RA_EINVAL;
    if (rc == RA_OK && (rc = ra_table_group_init(&g, id, hw, 2, 2)) == RA_OK) {
        g.key = *key;
        ra_table_entry_set(&g, 0, (const int[]){ 0, 1126, 2048 }, 0.21, 0.25, 0.30);
        ra_table_entry_set(&g, 1, (const int[]){ 0, 5325, 8192 }, 1.9, 2.4, NAN);
        ra_table_group_set_search(&g, "measure", 16, 3);
        rc = ra_table_merge(path, &g);
        ra_table_group_free(&g);
    }
    if (rc == RA_OK && (rc = ra_table_group_init(&g, id, hw, 4, 1)) == RA_OK) {
        g.key = *key;
        ra_table_entry_set(&g, 0, (const int[]){ 0, 1434, 2458, 3318, 4096 }, 0.5, 0.6, 0.7);
        ra_table_group_set_search(&g, "model", 1, 1);
        rc = ra_table_merge(path, &g);
        ra_table_group_free(&g);
    }
    if (rc == RA_OK)
        rc = ra_table_profile_write(path, id, hw, names, values, 3, NULL);
    return rc == RA_OK ? 0 : fail();
}

static int cmd_write_example(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' }, { "hw-tag", required_argument, NULL, 'h' }, KEY_OPTIONS,
        { NULL, 0, NULL, 0 },
    };
    const char *model = "example-model", *hw = NULL;
    char hw_default[256];
    struct key_opts ko = { 0 };
    struct ra_table_key key;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (key_option(c, &ko))
            continue;
        if (c == 'm')
            model = optarg;
        else if (c == 'h')
            hw = optarg;
        else
            return usage_error("write-example: unknown or incomplete option");
    }
    if (optind != argc - 1)
        return usage_error("write-example needs one FILE");
    if (key_from(&ko, &key) != RA_OK)
        return usage_error("%s", ra_error_message());
    if (!hw) {
        ra_table_default_hw_tag(hw_default, sizeof hw_default);
        hw = hw_default;
    }
    return write_example(argv[optind], model, hw, &key);
}

/* ------------------------------------------------------------------ merge */

/* Tables written by separate runahead-tune runs (e.g. the tasks of a
 * jobs/tune.sbatch array) merged into one, each IN validated first. Each group is one locked
 * read-modify-write of OUT (ra_table_merge_with), so concurrent merges interleave safely. */
struct merge_ctx {
    const char *in, *out;
    const struct ra_table_writer *w;
    int groups, profiles, entries, conflicts;
};

static int merge_table(struct merge_ctx *m, const char *model, const char *hw, int p)
{
    struct ra_table_group g = { 0 };
    struct ra_table_merge_stats st = { 0 };
    int rc = ra_table_read(m->in, model, hw, p, &g);
    if (rc == RA_OK && g.n > 0) {
        rc = ra_table_merge_with(m->out, &g, m->w, &st);
        m->entries += g.n;
        m->conflicts += st.replaced + st.kept;
    }
    if (rc == RA_OK)
        m->groups++;
    ra_table_group_free(&g);
    return rc;
}

static int merge_profile(struct merge_ctx *m, const char *model, const char *hw)
{
    static char names[RA_TABLE_MAX_PROFILE][64];
    double values[RA_TABLE_MAX_PROFILE];
    const char *ptr[RA_TABLE_MAX_PROFILE];
    int n = 0;
    int rc = ra_table_profile_read(m->in, model, hw, names, values, RA_TABLE_MAX_PROFILE, &n);
    for (int i = 0; i < n; i++)
        ptr[i] = names[i];
    if (rc == RA_OK && n > 0)
        rc = ra_table_profile_write(m->out, model, hw, ptr, values, n, m->w);
    if (rc == RA_OK)
        m->profiles++;
    return rc;
}

static int merge_one(const char *model, const char *hw, const char *leaf, void *ctx)
{
    struct merge_ctx *m = ctx;
    char *end;
    if (!strcmp(leaf, "profile"))
        return merge_profile(m, model, hw);
    long p = leaf[0] == 'p' ? strtol(leaf + 1, &end, 10) : 0;
    if (p < 1 || *end)
        return ra_error_set(RA_EFORMAT, "%s: /%s/%s/%s is neither p<P> nor profile", m->in, model, hw, leaf);
    return merge_table(m, model, hw, (int)p);
}

static void merge_summary(const struct merge_ctx *m)
{
    char conflicts[64] = "";
    if (m->conflicts)
        snprintf(conflicts, sizeof conflicts, "; %d conflict%s (see above)", m->conflicts,
                 m->conflicts == 1 ? "" : "s");
    fprintf(stderr, PROG ": %s: %d table%s (%d entries) and %d profile%s merged into %s%s\n", m->in, m->groups,
            m->groups == 1 ? "" : "s", m->entries, m->profiles, m->profiles == 1 ? "" : "s", m->out, conflicts);
}

/* --lock-timeout S, else the environment's default; returns 0 or an exit code. */
static int writer_options(int argc, char **argv, struct ra_table_writer *w, const char *cmd)
{
    static const struct option opts[] = { { "lock-timeout", required_argument, NULL, 't' }, { NULL, 0, NULL, 0 } };
    int c;
    if (ra_table_writer_init(w, PROG, stderr) != RA_OK)
        return fail();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        errno = 0;
        double t = c == 't' ? strtod(optarg, &end) : -1;
        if (c != 't')
            return usage_error("%s: unknown or incomplete option", cmd);
        if (*end || errno || !(t >= 0) || !isfinite(t))
            return usage_error("--lock-timeout '%s': want a number of seconds >= 0", optarg);
        w->lock_timeout_s = t;
    }
    return 0;
}

static int cmd_merge(int argc, char **argv)
{
    struct ra_table_writer w;
    int rc = writer_options(argc, argv, &w, "merge");
    if (rc)
        return rc;
    if (argc - optind < 2)
        return usage_error("merge needs OUT and at least one IN");
    const char *out = argv[optind];
    for (int i = optind + 1; i < argc; i++)
        if (!strcmp(argv[i], out))
            return usage_error("merge: %s is both the output and an input", out);
    if (ra_table_check_target(out) != RA_OK) /* before reading the inputs: a bad OUT fails at once */
        return fail();
    for (int i = optind + 1; i < argc; i++) {
        struct merge_ctx m = { .in = argv[i], .out = out, .w = &w };
        rc = ra_table_validate(m.in, NULL, NULL);
        if (rc == RA_OK)
            rc = ra_table_each(m.in, merge_one, &m);
        if (rc != RA_OK)
            return fail();
        merge_summary(&m);
    }
    return 0;
}

/* ------------------------------------------------------------------ hold-lock (hidden) */

/* Holds TABLE's writers' lock for SECONDS, saying "locked" on stdout once it has it: for the
 * tests, and for a person who wants to keep writers off a table for a while. */
static int cmd_hold_lock(int argc, char **argv)
{
    struct ra_table_writer w;
    struct ra_filelock lock;
    int rc = writer_options(argc, argv, &w, "hold-lock");
    if (rc)
        return rc;
    if (argc - optind != 2)
        return usage_error("hold-lock needs TABLE and SECONDS");
    char *end;
    double seconds = strtod(argv[optind + 1], &end);
    if (*end || !(seconds >= 0) || seconds > 1e6)
        return usage_error("hold-lock: SECONDS '%s': want a number of seconds >= 0", argv[optind + 1]);
    if (ra_table_lock(argv[optind], &w, &lock) != RA_OK)
        return fail();
    printf("locked\n");
    fflush(stdout);
    struct timespec ts = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    ra_filelock_release(&lock);
    return 0;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("no command");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf(PROG " %s\n", PACKAGE_VERSION);
        return 0;
    }
    opterr = 0; /* our usage_error says it in one line */
    if (!strcmp(cmd, "lookup"))
        return cmd_lookup(argc - 1, argv + 1);
    if (!strcmp(cmd, "merge"))
        return cmd_merge(argc - 1, argv + 1);
    if (!strcmp(cmd, "write-example"))
        return cmd_write_example(argc - 1, argv + 1);
    if (!strcmp(cmd, "hold-lock"))
        return cmd_hold_lock(argc - 1, argv + 1);
    if (!strcmp(cmd, "show"))
        return cmd_show(argc - 1, argv + 1);
    if (strcmp(cmd, "validate"))
        return usage_error("unknown command '%s'", cmd);
    if (argc != 3 || argv[2][0] == '-')
        return usage_error("%s needs one FILE", cmd);
    return cmd_validate(argv[2]);
}
