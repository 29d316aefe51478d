/* Partition lookup tables (HDF5), paper §4.2; their interpolation is interp.h.
 *
 * Layout, schema_version 3 (partition/README.md):
 *   /                          attribute schema_version (int) = RA_TABLE_SCHEMA_VERSION
 *   /<model-id>/<hw-tag>/p<P>/ attributes backend, compute_dtype, kv_dtype (strings: the run key),
 *                              datasets context_lengths[N] (int, ascending, unique),
 *                              boundaries[N][P+1] (int), ratios[N][P] (double),
 *                              ttft_kvr_s[N], ttft_even_s[N], ttft_tsp_s[N] (double, NaN = not measured),
 *                              and each entry's provenance: objective[N] ("measure"|"model"),
 *                              min_stride[N], repeats[N] (int), date[N], host[N],
 *                              runahead_version[N] (fixed-length strings)
 *   /<model-id>/<hw-tag>/profile  scalar double attributes of the cost model
 * Schema 1 held the provenance once per group, as attributes objective, min_stride, repeats,
 * date, runahead_version (a merge overwrote it); schemas 1 and 2 had no run key: their tables
 * are read as the CPU backend in f32 with an f32 KV cache (RA_TABLE_KEY_LEGACY). Both are
 * read, and any write rewrites the whole file as schema 3.
 *
 * Writers (merge, profile write) hold an fcntl lock on TABLE.lock beside the table from the read
 * to the rename (filelock.h), so concurrent writers never lose each other's entries, and write
 * the new file through a mkstemp temporary file (outfile.h).
 *
 * Nothing here uses MPI or exposes HDF5 types: callers include only this header.
 * Errors: RA_EIO (cannot open / not HDF5 / I/O failed / lock timed out), RA_EFORMAT (a malformed
 * file), RA_EINVAL (bad arguments, or the asked-for group is not in the file), RA_ENOMEM. */
#ifndef RA_TABLE_H
#define RA_TABLE_H

#include <stddef.h>
#include <stdio.h>

#include "filelock.h"
#include "interp.h"
#include "model.h"

#define RA_TABLE_SCHEMA_VERSION 3    /* written; 1 to 3 are read */
#define RA_TABLE_MAX_RANKS 4096      /* guards allocations against corrupt shapes */
#define RA_TABLE_MAX_ENTRIES 1000000
#define RA_TABLE_MAX_PROFILE 256     /* attributes in one profile group */
#define RA_TABLE_LOCK_TIMEOUT_S 120  /* default wait for another writer's lock */

/* Where one entry came from: its search's settings, and when, where and by what it ran. */
struct ra_table_prov {
    char objective[16];  /* "measure" or "model" */
    int min_stride, repeats;
    char date[32];       /* when its search finished, UTC "YYYY-MM-DDTHH:MM:SSZ" */
    char host[64];       /* the host it ran on; "" when unknown (schema 1 tables) */
    char version[32];    /* the runahead version that searched it */
};

/* What a table was tuned on besides the model and the hardware: a split tuned for one backend
 * or dtype is not the split for another. Each is 1..15 characters of [a-z0-9]. */
struct ra_table_key {
    char backend[16]; /* the backend's name: "cpu", "cuda" */
    char compute[16]; /* the dtype the linear layers compute in: "f32", "bf16", "f16" */
    char kv[16];      /* the KV cache rows' dtype: "f32", "bf16" */
};

#define RA_TABLE_KEY_LEGACY { "cpu", "f32", "f32" } /* the key of schema 1 and 2 tables */

/* Sets k from the three names; RA_EINVAL naming the bad one. */
int ra_table_key_set(struct ra_table_key *k, const char *backend, const char *compute, const char *kv);
/* "backend cpu, compute f32, KV f32" */
void ra_table_key_format(const struct ra_table_key *k, char *buf, size_t len);
int ra_table_key_equal(const struct ra_table_key *a, const struct ra_table_key *b);

struct ra_table_group {
    char model_id[128], hw_tag[128];
    struct ra_table_key key;  /* RA_TABLE_KEY_LEGACY after ra_table_group_init */
    int p, n;                 /* ranks, entries */
    int *context_lengths;     /* [n] ascending */
    int *boundaries;          /* [n][p+1] */
    double *ratios;           /* [n][p] */
    double *ttft_kvr_s, *ttft_even_s, *ttft_tsp_s; /* [n]; NaN where not measured */
    struct ra_table_prov *prov; /* [n] */
};

/* How a writer waits for the others and where it says so. */
struct ra_table_writer {
    double lock_timeout_s; /* wait at most this long for TABLE.lock (0: one try) */
    const char *prog;      /* prefix of the notes, e.g. "runahead-table" */
    FILE *notes;           /* one line per long wait and per merge conflict; NULL: none */
};

/* lock_timeout_s from the environment's RA_TABLE_LOCK_TIMEOUT (seconds), else
 * RA_TABLE_LOCK_TIMEOUT_S; RA_EINVAL if that variable is set but not a number >= 0. */
int ra_table_writer_init(struct ra_table_writer *w, const char *prog, FILE *notes);

/* What a merge did with the entries it was given. */
struct ra_table_merge_stats {
    int added;    /* context lengths new to the group */
    int replaced; /* conflicts won by the given entry */
    int kept;     /* conflicts won by the entry already in the table */
    int same;     /* entries identical to the table's (no conflict) */
};

/* Allocates n entries (n >= 0) for p ranks: zero bounds and ratios, NaN TTFTs, and provenance
 * defaulting to objective "measure", min_stride 1, repeats 1, the current UTC time, this host
 * and this build's version. model_id and hw_tag must be usable as HDF5 group names (no '/'). */
int ra_table_group_init(struct ra_table_group *g, const char *model_id, const char *hw_tag, int p, int n);
void ra_table_group_free(struct ra_table_group *g);

/* The search settings of every entry (objective "measure" or "model"). */
int ra_table_group_set_search(struct ra_table_group *g, const char *objective, int min_stride, int repeats);

/* Sets entry i from a partition: context = bounds[p], ratios = slice lengths / context; its
 * date becomes now (its search has just finished). */
int ra_table_entry_set(struct ra_table_group *g, int i, const int *bounds,
                       double ttft_kvr_s, double ttft_even_s, double ttft_tsp_s);

/* Reads /<model_id>/<hw_tag>/p<p> into g (initialised here; free with ra_table_group_free).
 * The group is checked as ra_table_validate() checks it; the first problem is the error.
 * A missing group is RA_EINVAL naming what was asked and which groups the file has. */
int ra_table_read(const char *path, const char *model_id, const char *hw_tag, int p,
                  struct ra_table_group *g);

/* ra_table_read for a run: also RA_EINVAL, with g freed, when the table's key is not the run's
 * (one line naming the file, the group, the table's key and the run's). */
int ra_table_read_for(const char *path, const char *model_id, const char *hw_tag, int p,
                      const struct ra_table_key *run, struct ra_table_group *g);

/* Adds g's entries to the file's group, keeping every other group and entry with its own
 * provenance. Creates the file if absent. A group in the file with another key than g's is
 * not merged into (RA_EINVAL naming both keys). Two entries for one context length are a conflict,
 * reported to w->notes and resolved by one rule, so merges in any order give the same table:
 * the newer search (its date) wins; at the same date the lower KVR-S TTFT; then the entry
 * already in the table stays. Identical entries are no conflict. g's entries need not be
 * sorted but must be valid.
 *
 * Holds TABLE.lock from the read to the rename (waiting up to w->lock_timeout_s for another
 * writer), writes a mkstemp temporary file beside the table, fsyncs it and renames it over, so
 * neither a concurrent writer nor a crash mid-write loses entries or leaves a corrupt table.
 * The target must be absent or a regular file (outfile.h). w may be NULL (defaults, no notes);
 * stats (may be NULL) gets what happened to the entries. */
int ra_table_merge_with(const char *path, const struct ra_table_group *g, const struct ra_table_writer *w,
                        struct ra_table_merge_stats *stats);
int ra_table_merge(const char *path, const struct ra_table_group *g); /* w and stats NULL */

/* Takes the writers' lock of the table at `path` (the file path + ".lock"), as merges do. */
int ra_table_lock(const char *path, const struct ra_table_writer *w, struct ra_filelock *l);

/* Whether a table could be written at `path`, before any work: it is absent or a regular file
 * that validates, and a file can be created beside it. */
int ra_table_check_target(const char *path);

/* The schema version of a table file (after checking it is one this runahead reads). */
int ra_table_schema_version(const char *path, int *version);

/* Checks the whole file: schema version, every group's datasets present with matching shapes
 * and types, boundaries strictly increasing from 0 to the context length, ratios in (0,1]
 * summing to 1 within 1e-6 and consistent with the boundaries (within 1 token), context lengths
 * ascending and unique, provenance present and sound (per entry; per group in schema 1),
 * profile attributes scalar doubles.
 * Prints every problem (one line each, naming the group and dataset) to `out` (may be NULL);
 * *n_problems (may be NULL) gets their count. Returns RA_OK if none, else RA_EFORMAT (or RA_EIO
 * when the file cannot be opened as HDF5) with the first problem as the error message. */
int ra_table_validate(const char *path, FILE *out, int *n_problems);

/* The cost model's measured rates: /<model_id>/<hw_tag>/profile with one scalar double
 * attribute per name. Writing replaces the whole profile (stale rates would mislead) and keeps
 * everything else, locked and atomically as ra_table_merge_with does (w may be NULL). Names:
 * 1..63 characters. Reading returns them sorted by name; more than `max` is RA_ERANGE. */
int ra_table_profile_write(const char *path, const char *model_id, const char *hw_tag,
                           const char *const *names, const double *values, int n,
                           const struct ra_table_writer *w);
int ra_table_profile_read(const char *path, const char *model_id, const char *hw_tag,
                          char (*names)[64], double *values, int max, int *n);

/* Calls fn for every group /<model>/<hw>/<leaf> of the file (leaf "p<P>" or "profile"), in
 * name order, after checking the schema version; stops at and returns fn's first non-zero. */
typedef int (*ra_table_each_fn)(const char *model_id, const char *hw_tag, const char *leaf, void *ctx);
int ra_table_each(const char *path, ra_table_each_fn fn, void *ctx);

/* Lists the groups a file has ("model/hw/p2, model/hw/profile", or "no tables"), for error
 * messages; truncated with "..." to fit buf. */
int ra_table_list(const char *path, char *buf, size_t len);

/* Identity of a model for table lookup: "<shape>-<8 hex of an FNV-1a hash of every config
 * field>", e.g. "llama-d768-l12-h12-kv12-f2048-v32000-3f2a9c1e". The weights' dtype is not in
 * the config and so not in the id. */
void ra_table_model_id(const struct ra_config *c, char *buf, size_t len);

/* Default hardware tag "<cpu model>-<n>c" from /proc/cpuinfo's first "model name" and the
 * online cores; every character outside [A-Za-z0-9.+-] becomes '_' (runs collapsed), so
 * "Intel(R) Xeon(R) Processor" on 2 cores gives "Intel_R_Xeon_R_Processor-2c". */
void ra_table_default_hw_tag(char *buf, size_t len);

#endif
