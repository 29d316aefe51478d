/* The --partition grammar (spec.h): parse a spec, resolve it for a run. */
#include "spec.h"
#include "autosplit.h"
#include "backend.h"
#include "interp.h"
#include "partition.h"
#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const grammar = "'even', 'ratios:...', 'bounds:...', 'auto', 'auto:FILE' or 'table:FILE'";

int ra_partition_spec_parse(const char *text, struct ra_partition_spec *s)
{
    int n = 0;
    memset(s, 0, sizeof *s);
    if (!text || strlen(text) >= sizeof s->text)
        return ra_error_set(RA_EINVAL, "partition: a spec of 1..%d characters, one of %s", RA_PARTITION_SPEC_MAX - 1,
                            grammar);
    snprintf(s->text, sizeof s->text, "%s", text);
    if (!strcmp(text, "even")) {
        s->kind = RA_PARTITION_EVEN;
    } else if (!strcmp(text, "auto")) {
        s->kind = RA_PARTITION_AUTO;
    } else if (!strncmp(text, "auto:", 5) || !strncmp(text, "table:", 6)) {
        s->kind = text[0] == 'a' ? RA_PARTITION_AUTO : RA_PARTITION_TABLE;
        s->file = strchr(s->text, ':') + 1;
        if (!*s->file)
            return ra_error_set(RA_EINVAL, "partition '%s': the FILE after ':' is missing", ra_esc(text));
    } else if (!strncmp(text, "ratios:", 7) || !strncmp(text, "bounds:", 7)) {
        s->kind = text[0] == 'r' ? RA_PARTITION_RATIOS : RA_PARTITION_BOUNDS;
        if (!text[7])
            return ra_error_set(RA_EINVAL, "partition '%s': the list after ':' is missing", ra_esc(text));
        return ra_partition_parse_list(text, text + 7, NULL, 0, &n);
    } else {
        return ra_error_set(RA_EINVAL, "partition '%s' is not %s", ra_esc(text), grammar);
    }
    return RA_OK;
}

int ra_partition_run_key(struct ra_table_key *key, const struct ra_backend *be, enum ra_dtype weights,
                         enum ra_dtype device_dtype, enum ra_dtype kv)
{
    const char *name = be->ops->name;
    enum ra_dtype compute = !strcmp(name, "cpu") ? ra_backend_cpu_linear_dtype(be, weights) : device_dtype;
    return ra_table_key_set(key, name, ra_dtype_name(compute), ra_dtype_name(kv));
}

static void run_hw_tag(const struct ra_partition_run *run, char *buf, size_t len)
{
    if (run->hw_tag)
        snprintf(buf, len, "%s", run->hw_tag);
    else
        ra_table_default_hw_tag(buf, len);
}

/* table:FILE: interpolated from the table for this model, hardware, rank count and key. */
static int resolve_table(const struct ra_partition_spec *s, const struct ra_partition_run *run,
                         const struct ra_partition_reuse *reuse, int *bounds, char *source, size_t len,
                         int *extrapolated)
{
    const struct ra_table_key legacy = RA_TABLE_KEY_LEGACY;
    struct ra_table_group g;
    char model_id[128], hw_tag[128];
    int rc;
    ra_table_model_id(run->config, model_id, sizeof model_id);
    if (reuse && reuse->tag)
        snprintf(hw_tag, sizeof hw_tag, "%s", reuse->tag);
    else
        run_hw_tag(run, hw_tag, sizeof hw_tag);
    if ((rc = ra_table_read_for(s->file, model_id, hw_tag, run->p, run->key ? run->key : &legacy, &g)) != RA_OK)
        return rc;
    if (run->n_tokens < run->p)
        rc = ra_error_set(RA_EINVAL, "the prompt has %d tokens, fewer than the %d ranks: every rank needs at least one",
                          run->n_tokens, run->p);
    else
        rc = ra_table_interpolate(&g, run->n_tokens, bounds, extrapolated);
    if (rc == RA_OK)
        snprintf(source, len, "%s %s's %d entries (%d..%d tokens)",
                 *extrapolated ? "EXTRAPOLATED from the nearest of" : "interpolated from", ra_esc(s->file), g.n,
                 g.context_lengths[0], g.context_lengths[g.n - 1]);
    ra_table_group_free(&g);
    return rc;
}

/* auto: equal work from the config's FLOPs, or equal time (refined by the cost model) from the
 * profile of auto:FILE or $RA_PROFILE. The same inputs give every rank the same split. */
static int resolve_auto(const struct ra_partition_spec *s, const struct ra_partition_run *run,
                        const struct ra_partition_reuse *reuse, int *bounds, char *source, size_t len)
{
    struct ra_cost_profile pf;
    const char *env = getenv("RA_PROFILE"), *path = s->file;
    char model_id[128], hw_tag[128], how[256], note[512] = "";
    int have = 0, rc;
    if (!path && env && *env)
        path = env;
    if (path) {
        ra_table_model_id(run->config, model_id, sizeof model_id);
        run_hw_tag(run, hw_tag, sizeof hw_tag); /* the profile is the hardware's, reuse or not */
        rc = ra_cost_profile_load(path, model_id, hw_tag, &pf, NULL);
        if (rc != RA_OK && path != env) /* asked for by name: its absence is an error */
            return ra_error_set(rc, "--partition %s: no usable profile for %s on %s (%s)", ra_esc(s->text), model_id,
                                hw_tag, ra_error_message());
        if (rc != RA_OK) /* the environment's profile is for other models too: say so and go on */
            snprintf(note, sizeof note, "; RA_PROFILE=%s has no usable profile for %s on %s", ra_esc(path), model_id,
                     hw_tag);
        have = rc == RA_OK;
    }
    if (reuse)
        rc = ra_partition_auto_reuse(run->config, have ? &pf : NULL, reuse->method, reuse->cost, run->n_tokens, run->p,
                                     bounds, how, sizeof how);
    else
        rc = ra_partition_auto(run->config, have ? &pf : NULL, run->n_tokens, run->p, bounds, how, sizeof how);
    if (rc != RA_OK)
        return rc;
    if (have)
        snprintf(source, len, "%s; profile: %s", how, ra_esc(path));
    else
        snprintf(source, len, "%s%s", how, note);
    return RA_OK;
}

int ra_partition_resolve(const struct ra_partition_spec *s, const struct ra_partition_run *run, int *bounds,
                         char *source, size_t len, int *extrapolated)
{
    return ra_partition_resolve_reuse(s, run, NULL, bounds, source, len, extrapolated);
}

int ra_partition_resolve_reuse(const struct ra_partition_spec *s, const struct ra_partition_run *run,
                               const struct ra_partition_reuse *reuse, int *bounds, char *source, size_t len,
                               int *extrapolated)
{
    int ext = 0;
    if (extrapolated)
        *extrapolated = 0;
    if (len)
        source[0] = '\0';
    if (run->p < 1)
        return ra_error_set(RA_EINVAL, "partition: %d ranks", run->p);
    if (reuse && !reuse->cost)
        return ra_error_set(RA_EINVAL, "partition: a reuse run without its cost-model view");
    switch (s->kind) {
    case RA_PARTITION_TABLE: {
        int rc = resolve_table(s, run, reuse, bounds, source, len, &ext);
        if (extrapolated)
            *extrapolated = ext;
        return rc;
    }
    case RA_PARTITION_AUTO: return resolve_auto(s, run, reuse, bounds, source, len);
    default:
        snprintf(source, len, "%s", ra_esc(s->text));
        return ra_partition_parse(s->text, run->n_tokens, run->p, bounds);
    }
}
