/* The reuse engine's inside (reuse.h is its interface): loaded chunks as
 * rows of a prompt, the loader that reads and verifies them layer by layer,
 * and the passes that install them and recompute the rest.
 *
 * A load is a run of prompt rows whose K and V come from elsewhere: a chunk
 * of the store, or (tests) rows made by hand. Its K rows were rotated at
 * the positions they were computed at; `shift` moves them to the prompt's
 * (rope_shift; a shift of 0 leaves them bit for bit). */
#ifndef RA_REUSE_BLEND_H
#define RA_REUSE_BLEND_H

#include <pthread.h>
#include <stdint.h>

#include "reuse/reuse.h"

struct ra_blend_load {
    int start, n;           /* prompt rows [start, start+n) */
    int shift;              /* start minus the position of the first row where it was computed */
    /* Layer LAYER's K and V rows [n][kv_dim] of the KV dtype, host memory
     * that stays valid through the prefill (a chunk of the store:
     * ra_chunk_layer, which verifies the layer's checksum). Called from the
     * loader thread, for distinct layers. */
    int (*read)(void *src, int layer, const void **k, const void **v);
    void *src;
};

/* The loader: a thread that, layer by layer in order, reads and verifies
 * every load's layer (its read: the checksum read is the I/O) and, with
 * gbps > 0, waits until bytes / gbps has passed since it began, as a store of
 * that bandwidth would. It only reads host memory: the compute thread
 * installs what it gives (ra_loader_wait). */
struct ra_loader {
    const struct ra_blend_load *loads;
    int n_loads, n_layers;
    size_t row_bytes;       /* one K (or V) row */
    double gbps;
    const void **k, **v;    /* [n_layers][n_loads] host rows, once the layer is ready */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;              /* layers [0, ready) are ready */
    int rc;                 /* the loader's failure, and its message */
    char msg[512];
    int quit;               /* the compute thread gave up: stop early */
    double t0, t_load;      /* when it began; its own time (reads, checks, waits) */
    int64_t bytes;          /* read so far */
    int64_t total_bytes;    /* of every layer */
    double t_wait;          /* the compute thread's time waiting for it */
};

/* Starts the loader over LOADS (kept until ra_loader_stop). */
int ra_loader_start(struct ra_loader *ld, const struct ra_blend_load *loads, int n_loads, int n_layers,
                    size_t row_bytes, double gbps);
/* Waits until layer LAYER is ready (or the loader failed: its status, its message). */
int ra_loader_wait(struct ra_loader *ld, int layer);
/* The loader's estimate of its whole time: bytes / gbps, or from its own pace so far. */
double ra_loader_total_s(struct ra_loader *ld);
/* Stops (early, if it still runs) and joins it; frees what it holds. */
void ra_loader_stop(struct ra_loader *ld);

/* The plan's steps, shared with the chain (mpi/reuse_chain.c). Chunk C of
 * REQ looked up in ST as MODE needs it: behind the leading prefix (full,
 * blend) or behind every id before it (prefix); *CH NULL: a miss. A hit the
 * cache cannot hold (another KV dtype or shape) is an error naming its file. */
int ra_reuse_lookup(struct ra_store *st, const struct ra_request *req, int c, enum ra_reuse_mode mode,
                    const struct ra_kvcache *kv, struct ra_chunk **ch);
/* REQ is not empty, fits KV (NULL: not checked), and its chunks lie in order inside it. */
int ra_reuse_request_fits(const struct ra_request *req, const struct ra_kvcache *kv);

/* Prefills prompt IDS[n] into KV in MODE (RA_REUSE_FULL, RA_REUSE_BLEND or
 * RA_REUSE_PREFIX) from LOADS (sorted, disjoint); every other row is a must
 * row (computed). PREFIX: loads are unshifted and the rows before the first
 * load and after the last are computed as two spans. Fills REP's timings,
 * ratio, loaded_rows, bytes_loaded and recomputed (n_layers entries, which
 * it allocates); not hits, misses or ttft. */
int ra_blend_prefill(struct ra_context *ctx, const int32_t *ids, int n, const struct ra_blend_load *loads,
                     int n_loads, enum ra_reuse_mode mode, const struct ra_reuse_config *cfg, struct ra_kvcache *kv,
                     float *logits, struct ra_reuse_report *rep);

/* ------------------------------------------------------------ phases
 *
 * The engine one phase at a time, for a rank that owns prompt rows
 * [lo, hi) of a chain (mpi/reuse_chain.c); ra_blend_prefill is these with
 * lo = 0, hi = n and the selection between pass A and pass B. The caller
 * puts its exchange hook on the context's list around each pass (before
 * ra_blend_pass_a and ra_blend_pass_b): it delivers rows [0, lo) of every
 * layer, as for any slice of the chain.
 *
 * LOADS may reach outside [lo, hi) (a chain that sends only recomputed rows
 * rebuilds the rows before its slice from the store): pass B installs every
 * load at each layer's begin; rows outside the slice are never computed
 * here, and only the slice's rows have deviations or must flags. */
struct ra_blend;

/* The engine over rows [lo, hi) of prompt IDS[n] (KV must hold hi rows). */
int ra_blend_open(struct ra_blend **e, struct ra_context *ctx, const int32_t *ids, int n, int lo, int hi,
                  const struct ra_blend_load *loads, int n_loads, const struct ra_reuse_config *cfg,
                  struct ra_kvcache *kv);
/* Pass A: rows [lo, hi) through layers 0..check (cfg), fresh, into the
 * cache. *DEV and *MUST then point at the slice's hi-lo deviations (summed
 * over the check layers; 0 for must rows) and must flags (rows no load
 * holds), valid until ra_blend_close. */
int ra_blend_pass_a(struct ra_blend *e, const float **dev, const uint8_t **must);
/* The slice's must flags without pass A (full, prefix, craft). */
const uint8_t *ra_blend_must(const struct ra_blend *e);
/* Pass B: rows SEL[n_sel] (positions in [lo, hi), ascending; n_sel 0: a
 * pass that runs the hooks of every layer and computes nothing, so a rank
 * with nothing to recompute still passes rows on) through every layer, over
 * the loads installed at each layer's begin. LOGITS: the last row's (it must
 * be SEL's last, and the prompt's), or NULL. With cfg's schedule the rows
 * narrow layer by layer (one rank only). */
int ra_blend_pass_b(struct ra_blend *e, const int32_t *sel, int n_sel, float *logits);
/* The report's engine figures (as ra_blend_prefill fills them: timings,
 * loaded_rows, bytes_loaded, recomputed), then frees the engine. REP may be
 * NULL; RATIO is the selection's, for the report. */
void ra_blend_close(struct ra_blend *e, double ratio, struct ra_reuse_report *rep);

/* Local scope on one rank (the chain's --blend-scope local, reproduced):
 * the rows of each slice [bounds[i], bounds[i+1]) (p slices covering [0, n))
 * selected separately by ra_blend_select with RATIO, the results joined. */
int ra_blend_select_local(const float *dev, const uint8_t *must, int n, double ratio, const int *bounds, int p,
                          int32_t *out, int *n_out);

/* ra_blend_select's rule with the count of other rows given: the MUST rows
 * and the K others of highest deviation (ties to the lower index). */
int ra_blend_select_count(const float *dev, const uint8_t *must, int n, int k, int32_t *out, int *n_out);

#endif
