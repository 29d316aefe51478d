/* The whole --partition grammar, parsed and resolved in one place:
 *
 *   auto                      equal work from the config's FLOPs, or equal time from the cost-model
 *                             profile of $RA_PROFILE when it has one for this model and hardware
 *   auto:FILE                 equal time from FILE's profile (its absence is an error)
 *   even                      equal slices
 *   ratios:R0,R1,...          P shares summing to 1
 *   bounds:0,B1,...,C         P+1 explicit boundaries
 *   table:FILE                interpolated from FILE's runahead-tune table for this model,
 *                             hardware, rank count and run key (table.h); another key is refused
 *
 * Parsing (the spec's text) and resolving (the run: model, prompt length, ranks, hardware, key)
 * are separate steps, so a bad spec fails before any model is loaded. */
#ifndef RA_PARTITION_SPEC_H
#define RA_PARTITION_SPEC_H

#include <stddef.h>

#include "costmodel.h"
#include "model.h"
#include "table.h"

#define RA_PARTITION_SPEC_MAX 4096 /* the longest spec (and so FILE) accepted */

enum ra_partition_kind { RA_PARTITION_AUTO, RA_PARTITION_EVEN, RA_PARTITION_RATIOS, RA_PARTITION_BOUNDS,
                         RA_PARTITION_TABLE };

struct ra_partition_spec {
    enum ra_partition_kind kind;
    char text[RA_PARTITION_SPEC_MAX]; /* the spec as given */
    const char *file;                 /* inside text: auto:FILE's or table:FILE's FILE; NULL for the others */
};

/* Parses `text` into s: its kind, its FILE, and for ratios: and bounds: the list's syntax
 * (comma-separated finite numbers; their count is checked when resolved). RA_EINVAL with one
 * line naming the spec and the cause. */
int ra_partition_spec_parse(const char *text, struct ra_partition_spec *s);

struct ra_backend;

/* The key of a run (table.h) on backend `be` with weights stored as `weights`: the backend's
 * name; the dtype its linear layers compute in (the CPU's after its --compute-dtype and its bf16
 * unit, ra_backend_cpu_linear_dtype; any other backend's device_dtype); the KV cache's kv. */
int ra_partition_run_key(struct ra_table_key *key, const struct ra_backend *be, enum ra_dtype weights,
                         enum ra_dtype device_dtype, enum ra_dtype kv);

/* What a spec resolves against. */
struct ra_partition_run {
    const struct ra_config *config;
    int n_tokens, p;
    const char *hw_tag;             /* NULL: this machine's (ra_table_default_hw_tag) */
    const struct ra_table_key *key; /* the run's backend and dtypes (table: refuses other keys);
                                     * NULL: RA_TABLE_KEY_LEGACY */
};

/* bounds[p+1] for the run, and in source[len] one line on where they came from (for the
 * program's message and its report): "even", "interpolated from FILE's 4 entries (512..8192
 * tokens)", "equal-work from FLOPs; RA_PROFILE=... has no usable profile for ...", ...
 * *extrapolated (may be NULL) says a table: spec used its nearest entry outside its range.
 * Reads $RA_PROFILE for bare auto. Errors name the spec or the file and the cause. */
int ra_partition_resolve(const struct ra_partition_spec *s, const struct ra_partition_run *run, int *bounds,
                         char *source, size_t len, int *extrapolated);

/* A reuse run (mpi/reuse_chain.h) as the cost model sees it. */
struct ra_partition_reuse {
    const struct ra_cost_reuse *cost; /* ra_cost_reuse_of_request (autosplit.h) */
    enum ra_cost_method method;       /* RA_COST_KVR or RA_COST_TSP */
    const char *tag;                  /* the tables' hardware tag for it (ra_partition_reuse_tag) */
};

/* ra_partition_resolve for a reuse run: auto (and auto:FILE) balance the work
 * reuse leaves (ra_partition_auto_reuse, with the hardware's profile as for
 * a plain run), table:FILE reads the group of REUSE's tag (what runahead-tune
 * --reuse writes); the other specs as for any run. REUSE NULL: a plain run. */
int ra_partition_resolve_reuse(const struct ra_partition_spec *s, const struct ra_partition_run *run,
                               const struct ra_partition_reuse *reuse, int *bounds, char *source, size_t len,
                               int *extrapolated);

#endif
