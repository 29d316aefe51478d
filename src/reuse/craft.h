/* Cache-Craft's chunk-cache management over the chunk store (store.h):
 * attention records kept with each chunk, variants of a chunk computed under
 * different contexts, a per-chunk recompute budget, and `--reuse craft`.
 *
 * Only Cache-Craft's abstract is published to us: the quantities below are
 * our reading of it (src/reuse/README.md says which parts are which).
 *
 * RECORDS. When the store computes a chunk (ra_store_add, or the chunks of a
 * real request stored under their context, ra_craft_store_request), a hook
 * on the pass computes, on the host, every chunk row's attention softmax
 * (Q after RoPE against the cache's K rows it attends to, 1/sqrt(head_dim)),
 * averaged over the heads and over the layers of each of RA_CRAFT_GROUPS
 * layer groups, and splits it over three parts of what the row sees:
 *   sink     row 0 (the first token takes mass whatever it says)
 *   context  rows [1, chunk start): the leading prefix and, for a variant,
 *            the chunks it was computed behind
 *   self     the chunk's own rows up to the row
 * A record keeps, per group, the chunk's mean mass on each part, and per
 * group and token the token's mass on the context. The hook reads what the
 * pass wrote and writes nothing: the K and V stored are the pass's.
 *
 * VARIANTS. A chunk may be stored several times: behind the leading prefix
 * alone (its base variant: the file ra_store_add writes) and behind the
 * prefix and the chunks that preceded it in a request (a file of the store
 * whose prefix is those ids). Each variant's record names its base key and
 * its context: the base keys of those chunks, in order. The index names each
 * file's base key, so a lookup by the chunk's own ids finds every variant.
 *
 * RECORD FILE (DIR/chunks/KK/KEY.racraft beside KEY.rachunk, little-endian):
 *   magic "RACRAFT\0", u32 version (1), n_groups, n_tokens, n_lead,
 *   n_context (tokens between the lead and the chunk), n_ctx_keys,
 *   u8 base[32], u8 ctx_keys[n_ctx_keys][32],
 *   f32 sink[G], context[G], self[G], token_context[G][n_tokens],
 *   u8 sha256 of every byte before it.
 * Written before the chunk's file (a chunk file never points at a half
 * record); a chunk without a record file (an older store) loads as a chunk
 * without records. */
#ifndef RA_REUSE_CRAFT_H
#define RA_REUSE_CRAFT_H

#include <stdint.h>

#include "context.h"
#include "reuse/reuse.h"
#include "reuse/store.h"

#define RA_CRAFT_GROUPS 4
#define RA_CRAFT_MAX_CTX_KEYS 4096
/* The order penalty: a stored context chunk present in the new request but
 * out of order counts this fraction less than one in order. */
#define RA_CRAFT_ORDER_PENALTY 0.5

struct ra_craft_record {
    int n_groups, n_tokens;
    int n_lead;             /* the leading prefix's tokens */
    int n_context;          /* the context's tokens between the lead and the chunk */
    int n_ctx_keys;
    uint8_t base[RA_STORE_HASH_BYTES];        /* the chunk's key behind the lead alone */
    uint8_t (*ctx_keys)[RA_STORE_HASH_BYTES]; /* [n_ctx_keys] base keys of the context's chunks, in order */
    float sink[RA_CRAFT_GROUPS], context[RA_CRAFT_GROUPS], self[RA_CRAFT_GROUPS]; /* mean mass per group */
    float *token_context;   /* [n_groups][n_tokens] */
};
void ra_craft_record_free(struct ra_craft_record *r);

/* Cache-context impact in [0, 1]: the chunk's mass on its context over its
 * mass on context and self (the sink left out), averaged over the groups. */
double ra_craft_cci(const struct ra_craft_record *r);
/* Token T's score: its context mass averaged over the groups. */
double ra_craft_token_score(const struct ra_craft_record *r, int t);

/* The record file's bytes (malloc'ed) and their parse; a parse fault is
 * RA_EFORMAT naming PATH and the fault (checksum, sizes, magic, version). */
int ra_craft_record_encode(const struct ra_craft_record *r, uint8_t **out, size_t *bytes);
int ra_craft_record_parse(const uint8_t *data, size_t size, const char *path, struct ra_craft_record *r);
/* DIR/chunks/KK/KEY.racraft of chunk C's file (malloc'ed). */
char *ra_craft_record_path(const char *chunk_path);
/* Reads chunk C's record: RA_OK with *have 0 when there is none. */
int ra_craft_record_load(const struct ra_chunk *c, struct ra_craft_record *r, int *have);

/* ------------------------------------------------------------ recording */

/* A hook computing the records of the chunks at prompt rows SEG_START[i],
 * SEG_LEN[i] (i < n_seg) of the passes it joins. */
struct ra_craft_recorder;
int ra_craft_recorder_new(struct ra_craft_recorder **r, const struct ra_context *ctx, const int *seg_start,
                          const int *seg_len, int n_seg);
const struct ra_hook *ra_craft_recorder_hook(struct ra_craft_recorder *r);
/* Segment I's record (masses and token scores; the keys left for the caller),
 * after the passes: OUT's arrays are malloc'ed (ra_craft_record_free). */
int ra_craft_recorder_take(struct ra_craft_recorder *r, int i, struct ra_craft_record *out);
void ra_craft_recorder_free(struct ra_craft_recorder *r);

/* Puts the record file for the chunk TOKENS[n] behind PREFIX[n_prefix]
 * (the key's file name), before its chunk file is put. */
int ra_craft_record_put(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                        const struct ra_craft_record *r);

/* ra_store_put of a chunk with its record: the record file first, then the
 * chunk's, its index entry naming REC's base key and cache-context impact. */
int ra_store_put_record(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                        const struct ra_kvcache *kv, const struct ra_craft_record *rec);

/* Stores every chunk of REQ (but one holding the prompt's last row) as a
 * variant behind its real context (the ids before it), with its record: one
 * pass of the prompt up to the last such chunk on a fresh cache. */
int ra_craft_store_request(struct ra_store *st, struct ra_context *ctx, const struct ra_request *req);

/* ------------------------------------------------------------ budgets */

/* How much of a variant's stored context CTX[m] is present in front of the
 * chunk in the new request, whose preceding chunks are NEW[j] (base keys):
 * (present - penalty x (present - in_order)) / max(m, j), in_order the
 * longest common subsequence; 1 when both are empty. */
double ra_craft_overlap(const uint8_t (*ctx)[RA_STORE_HASH_BYTES], int m, const uint8_t (*new_keys)[RA_STORE_HASH_BYTES],
                        int j);

/* One loaded chunk of the plan. */
struct ra_craft_chunk {
    int start, n;                        /* prompt rows */
    const struct ra_craft_record *rec;   /* NULL: no record (loaded as full reuse, never recomputed) */
    double overlap;                      /* ra_craft_overlap of its variant */
};
/* A chunk's impact: cci x (1 - overlap); 0 without a record. */
double ra_craft_impact(const struct ra_craft_chunk *c);

/* The plan, pure (shared with the chain): of prompt rows [0, n) with MUST
 * flags, chunk i recomputes round(f_i x n_i) rows, f_i = min(1, alpha x
 * (impact_i + 1e-6)), alpha found by bisection so that the mean of f over
 * the loaded rows equals RATIO (chunks without records: f 0); ratio 1 takes
 * every row, 0 the must rows only. Within a chunk the rows of highest token
 * score (ties to the lower position). OUT[n] receives the must rows and the
 * chosen ones, ascending (as ra_blend_select); FRAC (may be NULL) each
 * chunk's f; *ALPHA (may be NULL) alpha. */
int ra_craft_plan(const struct ra_craft_chunk *chunks, int n_chunks, const uint8_t *must, int n, double ratio,
                  int32_t *out, int *n_out, double *frac, double *alpha);

/* ------------------------------------------------------------ the mode */

/* Each chunk's variant for REQ: the one of least impact x rows (a variant
 * with a record before one without; records' overlap against the chunks
 * before it in REQ), its use recorded; a miss, and a chunk holding the
 * prompt's last row, leave CHUNK NULL. *OUT: [req->n_chunks], malloc'ed. A
 * chunk of other rows than KV's is an error naming its file. */
struct ra_craft_choice {
    struct ra_chunk *chunk;
    struct ra_craft_record rec;
    int have_rec;
    double overlap;
};
int ra_craft_choose(struct ra_store *st, const struct ra_request *req, const struct ra_kvcache *kv,
                    struct ra_craft_choice **out);
void ra_craft_choices_free(struct ra_craft_choice *ch, int n);
/* The whole request's selection (ra_craft_plan) over the chosen chunks that
 * LOADED marks (NULL: every chosen one); every other row is a must row. OUT:
 * [req->n]. Every rank of a chain computes the same one. */
int ra_craft_select(const struct ra_request *req, const struct ra_craft_choice *ch, const uint8_t *loaded,
                    double ratio, int32_t *out, int *n_out);

/* `--reuse craft` on one rank: every chunk's variants looked up, the one of
 * least impact x rows loaded, the plan, pass B of the engine (blend.h's
 * phases, no pass A). As ra_reuse_prefill (which calls it). */
int ra_craft_prefill(struct ra_context *ctx, struct ra_store *st, const struct ra_request *req,
                     const struct ra_reuse_config *cfg, struct ra_kvcache *kv, float *logits,
                     struct ra_reuse_report *rep);

/* The variants of chunk TOKENS[n] behind the leading PREFIX[n_prefix]: every
 * file of the index whose base key is the chunk's (the base variant first if
 * present), opened; *C and *R malloc'ed arrays of *n_out (close with
 * ra_craft_variants_free). A variant whose file is gone is skipped. */
int ra_craft_variants(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                      struct ra_chunk ***c, struct ra_craft_record **r, int **have, int *n_out);
void ra_craft_variants_free(struct ra_chunk **c, struct ra_craft_record *r, int *have, int n);

#endif
