/* Chunk reuse along the chain: a request (reuse/request.h) prefilled by P
 * ranks, each owning rows [b_r, b_{r+1}) of it, with the stored rows of its
 * chunks loaded locally from a store every rank reads (reuse.h's modes).
 *
 *   plan     every rank looks up the chunks it needs (its slice's; with
 *            delta sends, every chunk before its slice's end too); a chunk
 *            is loaded only where every rank that needs it has it (an
 *            all-reduce of the hits), otherwise its rows are recomputed
 *            everywhere: a rank whose store lacks a chunk never hangs the
 *            chain. A chunk may straddle two ranks: each loads its rows.
 *   pass A   (blend) the prompt's layers 0..check as a normal chain or TSP
 *            pass over fresh rows, every rank its slice; deviations of its
 *            loaded rows.
 *   select   global: the deviations and must flags all-gathered and one
 *            ra_blend_select over the prompt (the single-rank result);
 *            local: each rank selects the ratio of its own loaded rows
 *            (the single-rank run with quota_bounds = the partition).
 *            craft: no pass A; every rank chooses every chunk's variant
 *            and computes the whole prompt's selection from their records
 *            (ra_craft_select, the single-rank result); a chunk whose
 *            variant differs between ranks is computed everywhere.
 *   pass B   each rank its selected rows through every layer over its
 *            installed loads; what travels per layer:
 *              full   the fused rows as a plain pass sends them (chain:
 *                     [0, b_{r+1}) to rank r+1; TSP: every slice to all);
 *              delta  only the rows recomputed anywhere (pass B's rows and
 *                     the must rows) with their positions; the receiver
 *                     rebuilds the rest from the store.
 *
 * MPI stays here; the engine's phases are reuse/blend.h's. */
#ifndef RA_REUSE_CHAIN_H
#define RA_REUSE_CHAIN_H

#include <mpi.h>

#include "exchange.h"
#include "reuse/reuse.h"

enum ra_reuse_send { RA_REUSE_SEND_FULL = 0, RA_REUSE_SEND_DELTA };
enum ra_blend_scope { RA_BLEND_SCOPE_GLOBAL = 0, RA_BLEND_SCOPE_LOCAL };

/* "full"/"delta" (--reuse-send), "global"/"local" (--blend-scope); one line naming OPT otherwise. */
int ra_reuse_send_parse(const char *s, enum ra_reuse_send *send);
int ra_blend_scope_parse(const char *s, enum ra_blend_scope *scope);
const char *ra_reuse_send_name(enum ra_reuse_send send);
const char *ra_blend_scope_name(enum ra_blend_scope scope);

/* How the ranks share the request. */
struct ra_reuse_chain {
    enum ra_method method;     /* RA_METHOD_KVR or RA_METHOD_TSP */
    enum ra_route route;       /* kvr's route */
    const int *bounds;         /* [size+1]: rank r owns rows [bounds[r], bounds[r+1]) of the request */
    enum ra_reuse_send send;
    enum ra_blend_scope scope;
    enum ra_transport_kind transport;
};

/* What the chain moved and where the time went, for reports and tests:
 * this rank's bytes and messages of both passes as the exchange counted
 * them (the formula's terms), and the rows it recomputed. */
struct ra_reuse_chain_stats {
    long long bytes_sent, bytes_recv;   /* K and V rows and, with delta, the position lists */
    int msgs_sent, msgs_recv;
    int rows_pass_a, rows_pass_b;       /* this rank's rows in each pass */
    double t_pass_a, t_select, t_pass_b, t_wait;
    int pass_failed;                    /* this rank failed inside a pass (below) */
};

/* Collective over COMM: prefills REQ (every rank holds all of it) in MODE
 * into this rank's KV (KVR: at least bounds[rank+1] rows; TSP: req->n) and,
 * on the last rank, LOGITS (the prompt's last row) and REP (the whole
 * request's figures: hits, misses, loaded rows, ratio, recomputed rows per
 * layer summed over the ranks, TTFT from the start barrier). ST: this rank's
 * handle of the shared store (NULL for none). STATS (may be NULL): this
 * rank's figures. An error before or between the passes is agreed: every
 * rank returns it, with the first failing rank's line. One inside a pass (a
 * chunk failing its checksum while the pass loads it) returns on that rank
 * at once with stats->pass_failed set: its peers may be blocked in the
 * pass, and the caller ends the job, as runahead does for a plain pass. */
int ra_reuse_chain_prefill(struct ra_context *ctx, MPI_Comm comm, struct ra_store *st, const struct ra_request *req,
                           enum ra_reuse_mode mode, const struct ra_reuse_config *cfg, const struct ra_reuse_chain *ch,
                           struct ra_kvcache *kv, float *logits, struct ra_reuse_report *rep,
                           struct ra_reuse_chain_stats *stats);

#endif
