/* Chunk reuse along the chain (reuse_chain.h): the plan agreed over the
 * ranks, the engine's phases (reuse/blend.h) run as passes of the chain or
 * TSP (prefill.h's barrier, begin, hook and finish), the selection's scope,
 * and the whole request's report on the last rank. */
#include "reuse_chain.h"
#include "prefill.h"
#include "ra_mpi.h"
#include "reuse/blend.h"
#include "reuse/craft.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ names */

static const char *const send_names[] = { "full", "delta" };
static const char *const scope_names[] = { "global", "local" };

int ra_reuse_send_parse(const char *s, enum ra_reuse_send *send)
{
    for (int i = 0; i < 2; i++)
        if (s && strcmp(s, send_names[i]) == 0) {
            *send = (enum ra_reuse_send)i;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "--reuse-send: '%s' is not full or delta", s ? ra_esc(s) : "");
}

int ra_blend_scope_parse(const char *s, enum ra_blend_scope *scope)
{
    for (int i = 0; i < 2; i++)
        if (s && strcmp(s, scope_names[i]) == 0) {
            *scope = (enum ra_blend_scope)i;
            return RA_OK;
        }
    return ra_error_set(RA_EINVAL, "--blend-scope: '%s' is not global or local", s ? ra_esc(s) : "");
}

const char *ra_reuse_send_name(enum ra_reuse_send send)
{
    return (unsigned)send < 2 ? send_names[send] : "?";
}

const char *ra_blend_scope_name(enum ra_blend_scope scope)
{
    return (unsigned)scope < 2 ? scope_names[scope] : "?";
}

/* ------------------------------------------------------------ the plan */

/* Rows [offset, offset + n) of a stored chunk: what a rank loads of a chunk
 * that straddles its slice's edge. */
struct piece {
    struct ra_chunk *chunk;
    size_t offset_bytes; /* offset rows of the KV dtype */
};

static int piece_read(void *src, int layer, const void **k, const void **v)
{
    const struct piece *p = src;
    int rc = ra_chunk_layer(p->chunk, layer, k, v);
    if (rc == RA_OK) {
        *k = (const uint8_t *)*k + p->offset_bytes;
        *v = (const uint8_t *)*v + p->offset_bytes;
    }
    return rc;
}

struct plan {
    int n_chunks;
    struct ra_chunk **chunks;   /* [n_chunks] this rank's lookups (NULL: a miss, or not needed here) */
    uint8_t *loaded;            /* [n_chunks] agreed by every rank */
    struct piece *pieces;       /* [n_chunks] */
    struct ra_blend_load *loads;/* [n_chunks] this rank's rows of the loaded chunks */
    int n_loads, hits;
    struct ra_craft_choice *craft; /* craft: [n_chunks] every chunk's variant (the pieces point into it) */
};

static void plan_free(struct plan *p)
{
    for (int c = 0; p->chunks && c < p->n_chunks; c++)
        if (p->chunks[c])
            ra_chunk_close(p->chunks[c]);
    free(p->chunks), free(p->loaded), free(p->pieces), free(p->loads);
    ra_craft_choices_free(p->craft, p->n_chunks);
    memset(p, 0, sizeof *p);
}

/* Every rank's RC agreed: RA_OK where all succeeded; otherwise every rank
 * returns the failing rank's status and its message (the first failing
 * rank's, which names it), so whichever rank speaks says what went wrong. */
static int agree(MPI_Comm comm, int rc)
{
    char msg[1024] = "";
    int failed = -1, rank = 0;
    MPI_Comm_rank(comm, &rank);
    const int status = ra_mpi_agree(rc, comm, &failed);
    if (status == RA_OK || failed < 0)
        return status;
    if (rank == failed)
        snprintf(msg, sizeof msg, "%s", ra_error_message());
    if (MPI_Bcast(msg, sizeof msg, MPI_CHAR, failed, comm) != MPI_SUCCESS)
        return ra_error_set(RA_ECOMM, "rank %d: MPI_Bcast of rank %d's error failed", rank, failed);
    return ra_error_set(status, "%s", msg);
}

/* Rows [need_lo, need_hi) of the request are this rank's to load: each
 * chunk overlapping them is looked up here (prefix: behind its exact
 * context), then every rank's hits all-reduced, so a chunk is loaded only
 * where every rank needing it holds it (prefix: the leading run of those).
 * A chunk holding the request's last row is computed. LOADS then hold this
 * rank's rows of the loaded chunks. The lookups' errors are agreed first. */
static int plan_make(struct plan *p, MPI_Comm comm, int rank, struct ra_store *st, const struct ra_request *req,
                     enum ra_reuse_mode mode, const struct ra_kvcache *kv, int need_lo, int need_hi)
{
    const int nc = req->n_chunks;
    int rc = RA_OK;
    int *have = malloc(sizeof *have * (size_t)(nc + 1));
    p->n_chunks = nc;
    p->chunks = calloc((size_t)nc + 1, sizeof *p->chunks);
    p->loaded = calloc((size_t)nc + 1, 1);
    p->pieces = calloc((size_t)nc + 1, sizeof *p->pieces);
    p->loads = calloc((size_t)nc + 1, sizeof *p->loads);
    if (!have || !p->chunks || !p->loaded || !p->pieces || !p->loads)
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory planning %d chunks", rank, nc);
    for (int c = 0; c < nc && rc == RA_OK; c++) {
        const int start = req->chunk_start[c], end = start + req->chunk_len[c];
        have[c] = 1; /* a chunk this rank does not need does not hold the others back */
        if (mode == RA_REUSE_NONE || end <= need_lo || start >= need_hi)
            continue;
        if ((rc = ra_reuse_lookup(st, req, c, mode, kv, &p->chunks[c])) != RA_OK)
            rc = ra_error_set(rc, "rank %d: %s", rank, ra_error_message());
        have[c] = p->chunks[c] != NULL && end < req->n;
    }
    if ((rc = agree(comm, rc)) != RA_OK)
        goto out;
    if (MPI_Allreduce(MPI_IN_PLACE, have, nc, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) {
        rc = ra_error_set(RA_ECOMM, "rank %d: MPI_Allreduce of the chunks' hits failed", rank);
        goto out;
    }
    for (int c = 0; c < nc; c++) {
        if (!have[c] && mode == RA_REUSE_PREFIX)
            break;
        p->loaded[c] = mode != RA_REUSE_NONE && have[c];
        p->hits += p->loaded[c];
    }
    for (int c = 0; c < nc; c++) {
        const int start = req->chunk_start[c], end = start + req->chunk_len[c];
        const int lo = start > need_lo ? start : need_lo, hi = end < need_hi ? end : need_hi;
        if (!p->loaded[c] || lo >= hi)
            continue;
        p->pieces[c] = (struct piece){ p->chunks[c], (size_t)(lo - start) * ra_kvcache_row_bytes(kv) };
        p->loads[p->n_loads++] = (struct ra_blend_load){ .start = lo, .n = hi - lo,
                                                         .shift = start - ra_chunk_n_prefix(p->chunks[c]),
                                                         .read = piece_read, .src = &p->pieces[c] };
    }
out:
    free(have);
    return rc;
}

/* ------------------------------------------------------------ craft's plan and selection
 *
 * --reuse craft selects from the store's per-chunk records, without pass A:
 * every rank chooses every chunk's variant (ra_craft_choose: the records of
 * the whole request make the budgets), a chunk is loaded only where every
 * rank chose the same variant (the first 8 bytes of its key, all-reduced
 * min and max), and every rank computes the same selection of the whole
 * prompt (ra_craft_select), of which it runs its slice's rows. */

static int plan_make_craft(struct plan *p, MPI_Comm comm, int rank, struct ra_store *st, const struct ra_request *req,
                           const struct ra_kvcache *kv, int need_lo, int need_hi)
{
    const int nc = req->n_chunks;
    int rc = RA_OK;
    long long *lo_key = calloc((size_t)nc + 1, sizeof *lo_key), *hi_key = calloc((size_t)nc + 1, sizeof *hi_key);
    p->n_chunks = nc;
    p->chunks = calloc((size_t)nc + 1, sizeof *p->chunks);
    p->loaded = calloc((size_t)nc + 1, 1);
    p->pieces = calloc((size_t)nc + 1, sizeof *p->pieces);
    p->loads = calloc((size_t)nc + 1, sizeof *p->loads);
    if (!lo_key || !hi_key || !p->chunks || !p->loaded || !p->pieces || !p->loads)
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory planning %d chunks", rank, nc);
    if (rc == RA_OK && (rc = ra_craft_choose(st, req, kv, &p->craft)) != RA_OK)
        rc = ra_error_set(rc, "rank %d: %s", rank, ra_error_message());
    for (int c = 0; c < nc && rc == RA_OK; c++) {
        uint64_t k = 0;
        if (p->craft[c].chunk)
            memcpy(&k, ra_chunk_key(p->craft[c].chunk), sizeof k);
        lo_key[c] = hi_key[c] = (long long)(k >> 1) + (p->craft[c].chunk != NULL); /* 0: none */
    }
    if ((rc = agree(comm, rc)) != RA_OK)
        goto out;
    if (MPI_Allreduce(MPI_IN_PLACE, lo_key, nc, MPI_LONG_LONG, MPI_MIN, comm) != MPI_SUCCESS ||
        MPI_Allreduce(MPI_IN_PLACE, hi_key, nc, MPI_LONG_LONG, MPI_MAX, comm) != MPI_SUCCESS) {
        rc = ra_error_set(RA_ECOMM, "rank %d: MPI_Allreduce of the chunks' variants failed", rank);
        goto out;
    }
    for (int c = 0; c < nc; c++) {
        const int start = req->chunk_start[c], end = start + req->chunk_len[c];
        const int lo = start > need_lo ? start : need_lo, hi = end < need_hi ? end : need_hi;
        p->loaded[c] = lo_key[c] != 0 && lo_key[c] == hi_key[c];
        p->hits += p->loaded[c];
        if (!p->loaded[c] || lo >= hi)
            continue;
        struct ra_chunk *chunk = p->craft[c].chunk;
        p->pieces[c] = (struct piece){ chunk, (size_t)(lo - start) * ra_kvcache_row_bytes(kv) };
        p->loads[p->n_loads++] = (struct ra_blend_load){ .start = lo, .n = hi - lo,
                                                         .shift = start - ra_chunk_n_prefix(chunk),
                                                         .read = piece_read, .src = &p->pieces[c] };
    }
out:
    free(lo_key);
    free(hi_key);
    return rc;
}

/* ------------------------------------------------------------ passes */

struct run {
    struct ra_blend *e;
    struct ra_exchange *x;
    MPI_Comm ctl;               /* the plan's and the selection's collectives, apart from the rows' traffic */
    const struct ra_reuse_chain *ch;
    const struct ra_reuse_config *cfg;
    int n, lo, hi, last;
    const float *dev;           /* pass A: the slice's */
    const uint8_t *must;
    int32_t *sel;               /* [hi - lo] pass B's rows, positions */
    int pass_failed;            /* a pass failed here: peers may wait in it, nothing is agreed after */
    int n_sel;
    float *logits;
    double t0, ttft;
};

static int pass_a_body(void *arg)
{
    struct run *r = arg;
    return ra_blend_pass_a(r->e, &r->dev, &r->must);
}

static int pass_b_body(void *arg)
{
    struct run *r = arg;
    int rc = ra_blend_pass_b(r->e, r->sel, r->n_sel, r->last ? r->logits : NULL);
    if (r->last)
        r->ttft = MPI_Wtime() - r->t0;
    return rc;
}

/* Adds what the pass moved to this rank's figures. */
static void count_pass(const struct ra_exchange *x, struct ra_reuse_chain_stats *s)
{
    s->bytes_sent += x->stats.bytes_sent;
    s->bytes_recv += x->stats.bytes_recv;
    s->msgs_sent += x->stats.msgs_sent;
    s->msgs_recv += x->stats.msgs_recv;
    s->t_wait += x->stats.t_wait;
}

/* The slice's rows no load holds (full, prefix, none): pass B's rows. */
static void select_must(struct run *r, const uint8_t *must)
{
    r->n_sel = 0;
    for (int i = 0; i < r->hi - r->lo; i++)
        if (must[i])
            r->sel[r->n_sel++] = r->lo + i;
}

/* Craft: the whole prompt's selection, the same on every rank, the slice's rows of it. */
static int craft_select(struct run *r, const struct ra_request *req, const struct plan *p, double ratio,
                        double *t_select)
{
    const double t = MPI_Wtime();
    int32_t *all = malloc(sizeof *all * (size_t)r->n);
    int n_all = 0, rc = all ? ra_craft_select(req, p->craft, p->loaded, ratio, all, &n_all)
                            : ra_error_set(RA_ENOMEM, "rank %d: out of memory", r->x->rank);
    r->n_sel = 0;
    for (int i = 0; rc == RA_OK && i < n_all; i++)
        if (all[i] >= r->lo && all[i] < r->hi)
            r->sel[r->n_sel++] = all[i];
    free(all);
    *t_select = MPI_Wtime() - t;
    return rc;
}

/* Global scope: every rank's deviations and must flags gathered, one selection over the prompt, the slice's part. */
static int select_global(struct run *r)
{
    const int size = r->x->size, rank = r->x->rank;
    int rc = RA_OK, n_all = 0;
    int *counts = malloc(sizeof *counts * (size_t)size), *displs = malloc(sizeof *displs * (size_t)size);
    float *dev = malloc(sizeof *dev * (size_t)r->n);
    uint8_t *must = malloc((size_t)r->n);
    int32_t *all = malloc(sizeof *all * (size_t)r->n);
    if (!counts || !displs || !dev || !must || !all) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory selecting %d rows", rank, r->n);
        goto out;
    }
    for (int i = 0; i < size; i++) {
        displs[i] = r->ch->bounds[i];
        counts[i] = r->ch->bounds[i + 1] - r->ch->bounds[i];
    }
    MPI_CHECK(MPI_Allgatherv(r->dev, r->hi - r->lo, MPI_FLOAT, dev, counts, displs, MPI_FLOAT, r->ctl));
    MPI_CHECK(MPI_Allgatherv(r->must, r->hi - r->lo, MPI_UINT8_T, must, counts, displs, MPI_UINT8_T, r->ctl));
    if ((rc = ra_blend_select(dev, must, r->n, r->cfg->ratio, all, &n_all)) != RA_OK)
        goto out;
    r->n_sel = 0;
    for (int i = 0; i < n_all; i++)
        if (all[i] >= r->lo && all[i] < r->hi)
            r->sel[r->n_sel++] = all[i];
out:
    free(counts), free(displs), free(dev), free(must), free(all);
    return rc;
}

/* Local scope: the ratio of this slice's loaded rows, no synchronisation. */
static int select_local(struct run *r)
{
    int rc = ra_blend_select(r->dev, r->must, r->hi - r->lo, r->cfg->ratio, r->sel, &r->n_sel);
    for (int i = 0; rc == RA_OK && i < r->n_sel; i++)
        r->sel[i] += r->lo;
    return rc;
}

/* A step between the passes settled: global scope agrees its status over
 * the ranks (they have just synchronised anyway); local scope runs without
 * synchronisation, so rank 0 begins pass B while the last rank is still in
 * pass A, and a failure there ends the job like a failed pass (its peers
 * may already wait on its rows). */
static int settle(struct run *r, int rc)
{
    if (r->ch->scope == RA_BLEND_SCOPE_GLOBAL)
        return agree(r->ctl, rc);
    r->pass_failed |= rc != RA_OK;
    return rc;
}

/* blend's pass A over the chain, then the selection. */
static int blend_select(struct ra_context *ctx, struct run *r, struct ra_reuse_chain_stats *s, double *t_pass_a,
                        double *t_select)
{
    double t = MPI_Wtime();
    int rc = ra_prefill_pass(ctx, r->x, pass_a_body, r);
    count_pass(r->x, s);
    if ((r->pass_failed = rc != RA_OK))
        return rc;
    s->rows_pass_a = r->hi - r->lo;
    *t_pass_a = MPI_Wtime() - t;
    t = MPI_Wtime();
    rc = r->ch->scope == RA_BLEND_SCOPE_GLOBAL ? select_global(r) : select_local(r);
    *t_select = MPI_Wtime() - t;
    return settle(r, rc);
}

/* Delta sends in pass B: this rank's recomputed rows travel (the selected
 * and the must rows); every other row is installed from the store wherever
 * it is needed. Pass A sends full rows: every row is fresh there. */
static int set_travel(struct run *r)
{
    uint8_t *travel = calloc((size_t)(r->hi - r->lo), 1);
    if (!travel)
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", r->x->rank);
    for (int i = 0; i < r->n_sel; i++)
        travel[r->sel[i] - r->lo] = 1;
    int rc = ra_exchange_set_travel(r->x, travel);
    free(travel);
    return rc;
}

/* ------------------------------------------------------------ the request */

/* What the chain does not run (yet), one line before anything moves. */
static int check_chain(const struct ra_reuse_chain *ch, enum ra_reuse_mode mode, const struct ra_reuse_config *cfg,
                       int rank, int size, const struct ra_request *req, const struct ra_kvcache *kv)
{
    if (ch->method != RA_METHOD_KVR && ch->method != RA_METHOD_TSP)
        return ra_error_set(RA_EINVAL, "rank %d: reuse on the chain runs --method kvr or tsp", rank);
    if (ch->send != RA_REUSE_SEND_FULL && ch->send != RA_REUSE_SEND_DELTA)
        return ra_error_set(RA_EINVAL, "rank %d: unknown reuse send mode %d", rank, (int)ch->send);
    if (mode == RA_REUSE_BLEND && cfg->ratio < 0)
        return ra_error_set(RA_EINVAL, "rank %d: --blend-ratio auto runs on one rank only", rank);
    if (mode == RA_REUSE_BLEND && cfg->n_schedule > 0)
        return ra_error_set(RA_EINVAL, "rank %d: --blend-schedule runs on one rank only", rank);
    if (cfg->store_write)
        return ra_error_set(RA_EINVAL, "rank %d: --store-write runs on one rank only", rank);
    if (cfg->pick != RA_BLEND_PICK_DEVIATION || cfg->quota_bounds)
        return ra_error_set(RA_EINVAL, "rank %d: random picks and quota bounds run on one rank only", rank);
    if (ch->bounds[0] != 0 || ch->bounds[size] != req->n)
        return ra_error_set(RA_EINVAL, "rank %d: the partition covers [%d, %d), not the request's %d rows", rank,
                            ch->bounds[0], ch->bounds[size], req->n);
    for (int i = 0; i < size; i++)
        if (ch->bounds[i + 1] <= ch->bounds[i])
            return ra_error_set(RA_EINVAL, "rank %d: rank %d's slice [%d, %d) is empty", rank, i, ch->bounds[i],
                                ch->bounds[i + 1]);
    const int rows = ch->method == RA_METHOD_KVR ? ch->bounds[rank + 1] : req->n;
    if (kv->capacity < rows)
        return ra_error_set(RA_ERANGE, "rank %d: the KV cache's %d rows do not hold the %d this rank needs", rank,
                            kv->capacity, rows);
    return RA_OK;
}

/* The whole request's report on the last rank: recomputed rows summed over
 * the ranks per layer, loaded rows and bytes summed; the rest the last rank's. */
static int report_whole(MPI_Comm comm, int rank, int last_rank, struct ra_reuse_report *mine,
                        struct ra_reuse_report *rep)
{
    int rc = RA_OK;
    const int L = mine->n_layers;
    long long in[2] = { mine->loaded_rows, mine->bytes_loaded }, sum[2] = { 0, 0 };
    int *recomputed = calloc((size_t)(L > 0 ? L : 1), sizeof *recomputed);
    if (!recomputed)
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
    MPI_CHECK(MPI_Reduce(mine->recomputed, recomputed, L, MPI_INT, MPI_SUM, last_rank, comm));
    MPI_CHECK(MPI_Reduce(in, sum, 2, MPI_LONG_LONG, MPI_SUM, last_rank, comm));
    if (rank == last_rank && rep) {
        free(rep->recomputed);
        *rep = *mine;
        rep->recomputed = recomputed;
        rep->loaded_rows = (int)sum[0];
        rep->bytes_loaded = sum[1];
        recomputed = NULL;
    }
out:
    free(recomputed);
    return rc;
}

/* Before the start barrier: the request and the partition checked, the
 * exchange set up, its transport attached; agreed over the ranks. */
static int chain_open(struct run *r, struct ra_context *ctx, MPI_Comm comm, const struct ra_store *st,
                      const struct ra_request *req, enum ra_reuse_mode mode, struct ra_kvcache *kv)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int rc = ra_reuse_request_fits(req, NULL);
    if (rc == RA_OK)
        rc = check_chain(r->ch, mode, r->cfg, rank, size, req, kv);
    if (rc == RA_OK && mode != RA_REUSE_NONE && !st)
        rc = ra_error_set(RA_EINVAL, "rank %d: --reuse %s needs a chunk store", rank, ra_reuse_mode_name(mode));
    if ((rc = agree(r->ctl, rc)) != RA_OK)
        return rc;
    r->n = req->n, r->lo = r->ch->bounds[rank], r->hi = r->ch->bounds[rank + 1], r->last = rank == size - 1;
    if (!(r->sel = malloc(sizeof *r->sel * (size_t)(r->hi - r->lo))))
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory", rank);
    if (rc == RA_OK)
        rc = ra_exchange_init(r->x, comm, r->ch->method, r->ch->route, r->ch->bounds, ctx->model->config.n_layers,
                              ra_kvcache_row_bytes(kv));
    if ((rc = agree(r->ctl, rc)) != RA_OK)
        return rc;
    return agree(r->ctl, ra_exchange_attach_transport(r->x, r->ch->transport, kv)); /* collective */
}

/* From the start barrier to the first token: the plan, the engine, the
 * selection (blend: pass A first; craft: from the plan's records), pass B.
 * A failure inside a pass returns at once (r->pass_failed). */
static int chain_passes(struct run *r, struct ra_context *ctx, struct ra_store *st, const struct ra_request *req,
                        enum ra_reuse_mode mode, struct ra_kvcache *kv, struct plan *p, struct ra_reuse_chain_stats *s)
{
    const int rank = r->x->rank;
    int rc = ra_prefill_start(r->x, kv);
    if (rc != RA_OK)
        return rc;
    r->t0 = MPI_Wtime(); /* the TTFT's origin: the lookups count, as on one rank */
    /* Delta sends: this rank rebuilds the rows before its slice from the store too. */
    const int need_lo = r->ch->send == RA_REUSE_SEND_DELTA ? 0 : r->lo;
    rc = mode == RA_REUSE_CRAFT ? plan_make_craft(p, r->ctl, rank, st, req, kv, need_lo, r->hi)
                                : plan_make(p, r->ctl, rank, st, req, mode, kv, need_lo, r->hi);
    if (rc != RA_OK)
        return rc;
    rc = ra_blend_open(&r->e, ctx, req->ids, req->n, r->lo, r->hi, p->loads, p->n_loads, r->cfg, kv);
    if ((rc = agree(r->ctl, rc)) != RA_OK)
        return rc;
    if (mode == RA_REUSE_BLEND)
        rc = blend_select(ctx, r, s, &s->t_pass_a, &s->t_select);
    else if (mode == RA_REUSE_CRAFT)
        rc = agree(r->ctl, craft_select(r, req, p, r->cfg->ratio, &s->t_select));
    else
        select_must(r, ra_blend_must(r->e));
    if (rc != RA_OK || r->pass_failed)
        return rc;
    if (r->ch->send == RA_REUSE_SEND_DELTA && (rc = settle(r, set_travel(r))) != RA_OK)
        return rc;
    const double t = MPI_Wtime();
    rc = ra_prefill_pass(ctx, r->x, pass_b_body, r);
    s->t_pass_b = MPI_Wtime() - t;
    count_pass(r->x, s);
    s->rows_pass_b = r->n_sel;
    if ((r->pass_failed = rc != RA_OK))
        return rc;
    return agree(r->ctl, rc);
}

int ra_reuse_chain_prefill(struct ra_context *ctx, MPI_Comm comm, struct ra_store *st, const struct ra_request *req,
                           enum ra_reuse_mode mode, const struct ra_reuse_config *cfg, const struct ra_reuse_chain *ch,
                           struct ra_kvcache *kv, float *logits, struct ra_reuse_report *rep,
                           struct ra_reuse_chain_stats *stats)
{
    static const struct ra_reuse_config defaults = RA_REUSE_CONFIG_INIT;
    struct ra_reuse_chain_stats s = { 0 };
    struct ra_reuse_report mine = { 0 };
    struct ra_exchange x = { 0 };
    struct plan p = { 0 };
    struct run r = { .x = &x, .ch = ch, .cfg = cfg ? cfg : &defaults, .logits = logits, .ctl = MPI_COMM_NULL };
    int rc = RA_OK, rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (rep)
        memset(rep, 0, sizeof *rep);
    if (MPI_Comm_dup(comm, &r.ctl) != MPI_SUCCESS)
        return ra_error_set(RA_ECOMM, "rank %d: MPI_Comm_dup failed", rank);
    if ((rc = chain_open(&r, ctx, comm, st, req, mode, kv)) != RA_OK ||
        (rc = chain_passes(&r, ctx, st, req, mode, kv, &p, &s)) != RA_OK)
        goto out;
    ra_blend_close(r.e, mode == RA_REUSE_BLEND || mode == RA_REUSE_CRAFT ? r.cfg->ratio : mode == RA_REUSE_NONE ? 1 : 0,
                   &mine);
    r.e = NULL;
    mine.mode = mode;
    mine.n_rows = req->n;
    mine.hits = p.hits;
    mine.misses = mode == RA_REUSE_NONE ? 0 : req->n_chunks - p.hits; /* none looks nothing up */
    mine.ttft = r.ttft;
    mine.t_pass_a = s.t_pass_a, mine.t_select = s.t_select, mine.t_pass_b = s.t_pass_b;
    rc = report_whole(r.ctl, rank, x.size - 1, &mine, rep);
out:
    if (r.e)
        ra_blend_close(r.e, 0, NULL);
    s.pass_failed = r.pass_failed;
    if (stats)
        *stats = s;
    ra_reuse_report_free(&mine);
    plan_free(&p);
    ra_exchange_free(&x);
    free(r.sel);
    MPI_Comm_free(&r.ctl);
    return rc;
}
