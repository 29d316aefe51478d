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

#define PROG "runahead-table"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: " PROG " show FILE\n"
            "       " PROG " lookup FILE --model M --ranks P --context N [--hw-tag T]\n"
            "       " PROG " validate FILE\n"
            "       " PROG " merge OUT IN [IN ...]\n"
            "\n"
            "Partition lookup tables (HDF5: /<model-id>/<hardware-tag>/p<P>/, see DESIGN.md).\n"
            "\n"
            "  show       every table with its entries (context length, TTFTs, boundaries, ratios)\n"
            "             and search attributes, and every cost-model profile\n"
            "  lookup     the partition for a context: the table's entry, or linear interpolation\n"
            "             between the two nearest; outside the table the nearest entry (said on stderr).\n"
            "             Prints lines 'bounds:...' and 'ratios:...' usable as --partition specs\n"
            "  validate   checks the whole file and prints every problem; exit 1 if any\n"
            "  merge      merges every table and cost-model profile of each IN into OUT (created if\n"
            "             absent), as runahead-tune merges: entries at a context length OUT has are\n"
            "             replaced. Not safe against two writers of OUT at once: run it under flock\n"
            "\n"
            "  --model M      a model path (its config gives the id) or a literal model id\n"
            "  --ranks P      rank count\n"
            "  --context N    prompt length in tokens\n"
            "  --hw-tag T     hardware tag (default: this machine's, e.g. Intel_R_Xeon_R_Processor-2c)\n"
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

/* ------------------------------------------------------------------ show */

static void print_ttft(double t)
{
    if (isnan(t))
        printf(" %11s", "-");
    else
        printf(" %11.6f", t);
}

static int show_table(const char *path, const char *m, const char *hw, int p)
{
    struct ra_table_group g;
    char list[4096];
    if (ra_table_read(path, m, hw, p, &g) != RA_OK)
        return -1;
    /* Names and attributes come from the file: escaped, so the listing stays plain lines of text. */
    printf("\n/%s/%s/p%d: %d entr%s; objective %s, min_stride %d, repeats %d, date %s, runahead %s\n", ra_esc(m),
           ra_esc(hw), p, g.n, g.n == 1 ? "y" : "ies", ra_esc(g.objective), g.min_stride, g.repeats, ra_esc(g.date),
           ra_esc(g.version));
    printf("  %8s %11s %11s %11s  %s\n", "context", "ttft_kvr_s", "ttft_even_s", "ttft_tsp_s", "boundaries / ratios");
    for (int i = 0; i < g.n; i++) {
        printf("  %8d", g.context_lengths[i]);
        print_ttft(g.ttft_kvr_s[i]);
        print_ttft(g.ttft_even_s[i]);
        print_ttft(g.ttft_tsp_s[i]);
        size_t used = 0;
        for (int r = 0; r <= p && used < sizeof list; r++)
            used += (size_t)snprintf(list + used, sizeof list - used, r ? ",%d" : "%d", g.boundaries[i * (p + 1) + r]);
        for (int r = 0; r < p && used < sizeof list; r++)
            used += (size_t)snprintf(list + used, sizeof list - used, r ? ",%.6f" : " / %.6f", g.ratios[i * p + r]);
        printf("  %s\n", list);
    }
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
    const char *path = ctx;
    if (!strcmp(leaf, "profile"))
        return show_profile(path, m, hw);
    if (leaf[0] == 'p' && atoi(leaf + 1) > 0)
        return show_table(path, m, hw, atoi(leaf + 1));
    return ra_error_set(RA_EFORMAT, "%s: /%s/%s/%s is not a table p<P> or a profile", path, ra_esc(m), ra_esc(hw),
                        ra_esc(leaf));
}

static int cmd_show(const char *path)
{
    printf("%s: schema_version %d\n", path, RA_TABLE_SCHEMA_VERSION);
    return ra_table_each(path, show_one, (void *)path) == RA_OK ? 0 : fail();
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

static int lookup(const char *path, const char *model, const char *hw, int p, int context)
{
    struct ra_table_group g;
    char id[256];
    int *bounds = NULL, extrapolated = 0, rc = 1;
    double *ratios = NULL;
    if (resolve_model(model, id, sizeof id) != 0)
        return fail();
    if (ra_table_read(path, id, hw, p, &g) != RA_OK)
        return fail();
    bounds = malloc(sizeof *bounds * (size_t)(p + 1));
    ratios = malloc(sizeof *ratios * (size_t)p);
    if (!bounds || !ratios)
        ra_error_set(RA_ENOMEM, "out of memory");
    else if (ra_table_interpolate(&g, context, bounds, &extrapolated) == RA_OK &&
             ra_table_ratios_at(&g, context, ratios, NULL) == RA_OK)
        rc = 0;
    if (rc == 0) {
        printf("model: %s\nhw-tag: %s\nranks: %d\ncontext: %d\n", id, hw, p, context);
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
        { NULL, 0, NULL, 0 },
    };
    const char *model = NULL, *hw = NULL;
    char hw_default[256];
    int p = 0, context = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
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
    if (!hw) {
        ra_table_default_hw_tag(hw_default, sizeof hw_default);
        hw = hw_default;
    }
    return lookup(argv[optind], model, hw, p, context);
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
static int write_example(const char *path, const char *model, const char *hw)
{
    struct ra_table_group g;
    const char *names[] = { "gemm_flops", "p2p_bandwidth_Bps", "p2p_latency_s" };
    const double values[] = { 5.0e10, 8.0e9, 2.0e-6 };
    char id[256];
    int rc = resolve_model(model, id, sizeof id) == 0 ? RA_OK : RA_EINVAL;
    if (rc == RA_OK && (rc = ra_table_group_init(&g, id, hw, 2, 2)) == RA_OK) {
        ra_table_entry_set(&g, 0, (const int[]){ 0, 1126, 2048 }, 0.21, 0.25, 0.30);
        ra_table_entry_set(&g, 1, (const int[]){ 0, 5325, 8192 }, 1.9, 2.4, NAN);
        g.min_stride = 16, g.repeats = 3;
        rc = ra_table_merge(path, &g);
        ra_table_group_free(&g);
    }
    if (rc == RA_OK && (rc = ra_table_group_init(&g, id, hw, 4, 1)) == RA_OK) {
        ra_table_entry_set(&g, 0, (const int[]){ 0, 1434, 2458, 3318, 4096 }, 0.5, 0.6, 0.7);
        snprintf(g.objective, sizeof g.objective, "model");
        rc = ra_table_merge(path, &g);
        ra_table_group_free(&g);
    }
    if (rc == RA_OK)
        rc = ra_table_profile_write(path, id, hw, names, values, 3);
    return rc == RA_OK ? 0 : fail();
}

static int cmd_write_example(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' }, { "hw-tag", required_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    const char *model = "example-model", *hw = NULL;
    char hw_default[256];
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'm')
            model = optarg;
        else if (c == 'h')
            hw = optarg;
        else
            return usage_error("write-example: unknown or incomplete option");
    }
    if (optind != argc - 1)
        return usage_error("write-example needs one FILE");
    if (!hw) {
        ra_table_default_hw_tag(hw_default, sizeof hw_default);
        hw = hw_default;
    }
    return write_example(argv[optind], model, hw);
}

/* ------------------------------------------------------------------ merge */

/* Tables written by separate runahead-tune runs (e.g. the tasks of a
 * jobs/tune.sbatch array) merged into one, each IN validated first. */
struct merge_ctx {
    const char *in, *out;
    int groups, profiles, entries;
};

static int merge_table(struct merge_ctx *m, const char *model, const char *hw, int p)
{
    struct ra_table_group g = { 0 };
    int rc = ra_table_read(m->in, model, hw, p, &g);
    if (rc == RA_OK && g.n > 0) {
        rc = ra_table_merge(m->out, &g);
        m->entries += g.n;
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
        rc = ra_table_profile_write(m->out, model, hw, ptr, values, n);
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

static int cmd_merge(int argc, char **argv)
{
    if (argc < 3)
        return usage_error("merge needs OUT and at least one IN");
    for (int i = 2; i < argc; i++) {
        struct merge_ctx m = { .in = argv[i], .out = argv[1] };
        if (!strcmp(m.in, m.out))
            return usage_error("merge: %s is both the output and an input", m.in);
        int rc = ra_table_validate(m.in, NULL, NULL);
        if (rc == RA_OK)
            rc = ra_table_each(m.in, merge_one, &m);
        if (rc != RA_OK)
            return fail();
        fprintf(stderr, PROG ": %s: %d table%s (%d entries) and %d profile%s merged into %s\n", m.in, m.groups,
                m.groups == 1 ? "" : "s", m.entries, m.profiles, m.profiles == 1 ? "" : "s", m.out);
    }
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
    if (strcmp(cmd, "show") && strcmp(cmd, "validate"))
        return usage_error("unknown command '%s'", cmd);
    if (argc != 3 || argv[2][0] == '-')
        return usage_error("%s needs one FILE", cmd);
    return !strcmp(cmd, "show") ? cmd_show(argv[2]) : cmd_validate(argv[2]);
}
