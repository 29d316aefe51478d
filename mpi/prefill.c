#include "prefill.h"
#include "ra_mpi.h"
#include "report.h"
#include "watchdog.h"

#include <stdlib.h>
#include <string.h>

int ra_prefill_kv_rows(const struct ra_exchange *x)
{
    if (x->method == RA_METHOD_KVR)
        return x->bounds[x->rank + 1];
    return x->bounds[x->size];
}

int ra_prefill_start(struct ra_exchange *x, const struct ra_kvcache *kv)
{
    int rc = RA_OK;
    const int r = x->rank;
    /* Collective like the pass itself; a caller that wants a particular transport attached it before. */
    if (!x->tr && (rc = ra_exchange_attach_transport(x, RA_TRANSPORT_AUTO, kv)) != RA_OK)
        return rc;
    if (x->tr && (x->tr->row_bytes != ra_kvcache_row_bytes(kv) || x->tr->mem != kv->mem))
        return ra_error_set(RA_EINVAL, "rank %d: the transport was set up for KV rows of %zu bytes in %s memory, "
                            "but this KV cache has rows of %zu bytes in %s memory", r, x->tr->row_bytes,
                            ra_mem_name(x->tr->mem), ra_kvcache_row_bytes(kv), ra_mem_name(kv->mem));
    ra_watchdog_wait(RA_WATCH_START, -1, -1);
    MPI_CHECK(MPI_Barrier(x->comm));
out:
    ra_watchdog_done(); /* also when MPI_CHECK left the wait early */
    return rc;
}

int ra_prefill_pass(struct ra_context *ctx, struct ra_exchange *x, int (*body)(void *arg), void *arg)
{
    int rc = ra_exchange_begin(x);
    if (rc != RA_OK)
        return rc;
    const struct ra_hook *hook = ra_exchange_hooks(x);
    if (hook && (rc = ra_context_hook_add(ctx, hook)) != RA_OK)
        return rc;
    rc = body(arg);
    if (hook)
        ra_context_hook_remove(ctx, hook);
    if (rc == RA_OK)
        rc = ra_exchange_finish(x);
    ra_watchdog_done(); /* when a hook's MPI_CHECK left a wait early */
    return rc;
}

/* The plain pass: the rank's slice as one span; the last rank times the first token. */
struct span_pass {
    struct ra_context *ctx;
    struct ra_exchange *x;
    struct ra_kvcache *kv;
    const int32_t *tokens;
    float *logits;
    double *ttft;
};

static int span_body(void *arg)
{
    struct span_pass *s = arg;
    const struct ra_exchange *x = s->x;
    const int r = x->rank, start = x->bounds[r], n = x->bounds[r + 1] - start;
    const int last = r == x->size - 1;
    int rc = ra_forward_span(s->ctx, s->tokens + start, start, n, s->kv, last ? s->logits : NULL);
    if (last)
        *s->ttft = MPI_Wtime() - x->t0;
    return rc;
}

int ra_prefill_run(struct ra_context *ctx, struct ra_exchange *x, struct ra_kvcache *kv,
                   const int32_t *tokens, float *logits, double *ttft)
{
    struct span_pass s = { ctx, x, kv, tokens, logits, ttft };
    int rc = ra_prefill_start(x, kv);
    return rc == RA_OK ? ra_prefill_pass(ctx, x, span_body, &s) : rc;
}

static void spread_of(const double *v, int n, double *out)
{
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    out[0] = ra_median(v, n);
    out[1] = lo;
    out[2] = hi;
}

int ra_prefill_median(struct ra_context *ctx, MPI_Comm comm, enum ra_method method, enum ra_route route,
                      const int *bounds, struct ra_kvcache *kv, const int32_t *tokens, int repeats,
                      double *median_ttft)
{
    double spread[3];
    int rc = ra_prefill_spread(ctx, comm, method, route, bounds, kv, tokens, repeats, spread);
    if (rc == RA_OK)
        *median_ttft = spread[0];
    return rc;
}

int ra_prefill_spread(struct ra_context *ctx, MPI_Comm comm, enum ra_method method, enum ra_route route,
                      const int *bounds, struct ra_kvcache *kv, const int32_t *tokens, int repeats,
                      double spread[3])
{
    struct ra_exchange x = { 0 };
    struct ra_passes ps = { .ttft = calloc((size_t)repeats, sizeof(double)) };
    float *logits = malloc(sizeof(float) * (size_t)ctx->model->config.vocab_size);
    int rc = RA_OK;
    if (!ps.ttft || !logits) {
        rc = ra_error_set(RA_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = ra_exchange_init(&x, comm, method, route, bounds, ctx->model->config.n_layers,
                               ra_kvcache_row_bytes(kv))) != RA_OK)
        goto out;
    /* Every rank gets the last rank's TTFTs, so every rank computes the same spread. */
    if ((rc = ra_prefill_repeat(ctx, &x, kv, tokens, logits, repeats, &ps)) == RA_OK)
        spread_of(ps.ttft, repeats, spread);
out:
    ra_exchange_free(&x);
    free(ps.ttft);
    free(logits);
    return rc;
}

struct timed_pass {
    double ttft;
    int pass;
};

static int cmp_pass(const void *a, const void *b)
{
    const struct timed_pass *x = a, *y = b;
    if (x->ttft != y->ttft)
        return x->ttft < y->ttft ? -1 : 1;
    return (x->pass > y->pass) - (x->pass < y->pass);
}

/* The pass whose TTFT is the median: the lower middle for even n, the first
 * of equal ones (so every rank, holding the same array, picks the same). */
static int median_pass(const double *ttft, int n, int *pass)
{
    struct timed_pass *v = malloc(sizeof *v * (size_t)n);
    if (!v)
        return ra_error_set(RA_ENOMEM, "out of memory for the TTFTs of %d passes", n);
    for (int i = 0; i < n; i++)
        v[i] = (struct timed_pass){ ttft[i], i };
    qsort(v, (size_t)n, sizeof *v, cmp_pass);
    *pass = v[(n - 1) / 2].pass;
    free(v);
    return RA_OK;
}

int ra_prefill_repeat(struct ra_context *ctx, struct ra_exchange *x, struct ra_kvcache *kv, const int32_t *tokens,
                      float *logits, int n, struct ra_passes *ps)
{
    const int L = x->n_layers;
    const size_t layer_bytes = sizeof(struct ra_layer_times) * (size_t)L;
    struct ra_rank_stats *kept = calloc((size_t)n, sizeof *kept);
    struct ra_layer_times *layers = malloc(layer_bytes * (size_t)n);
    double *v = malloc(sizeof(double) * 3 * (size_t)n);
    int rc = RA_OK;
    if (!kept || !layers || !v) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory for the figures of %d passes", x->rank, n);
        goto out;
    }
    ps->n = n;
    for (int i = 0; i < n; i++) {
        ps->ttft[i] = 0;
        if ((rc = ra_prefill_run(ctx, x, kv, tokens, logits, &ps->ttft[i])) != RA_OK)
            goto out;
        kept[i] = x->stats;
        memcpy(layers + (size_t)i * L, x->stats.layers, layer_bytes);
    }
    /* Only the last rank timed the first token: every rank needs the same median pass. */
    ra_watchdog_wait(RA_WATCH_RESULT, -1, x->size - 1);
    MPI_CHECK(MPI_Bcast(ps->ttft, n, MPI_DOUBLE, x->size - 1, x->comm));
    ra_watchdog_done();
    if ((rc = median_pass(ps->ttft, n, &ps->median)) != RA_OK)
        goto out;
    struct ra_layer_times *mine = x->stats.layers;
    x->stats = kept[ps->median];
    x->stats.layers = mine;
    memcpy(mine, layers + (size_t)ps->median * L, layer_bytes);
    for (int i = 0; i < n; i++) {
        v[i] = kept[i].t_total;
        v[n + i] = kept[i].t_wait;
        v[2 * n + i] = kept[i].t_drain;
    }
    for (int k = 0; k < 3; k++)
        spread_of(v + (size_t)k * n, n, ps->spread[k]);
out:
    ra_watchdog_done();
    free(kept);
    free(layers);
    free(v);
    return rc;
}

/* Per rank: t_total, t_wait, bytes/msgs sent/received, t_drain, then 5 times
 * per layer, then (with ps) the 9 figures of the spread. */
int ra_stats_gather_passes(struct ra_exchange *x, const struct ra_passes *ps, struct ra_all_stats *all)
{
    int rc = RA_OK;
    const int L = x->n_layers, width = 7 + 5 * L + (ps ? 9 : 0), root = x->size - 1;
    double *mine = malloc(sizeof(double) * (size_t)width), *every = NULL;
    memset(all, 0, sizeof *all);
    if (!mine)
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", x->rank);
    const struct ra_rank_stats *s = &x->stats;
    double head[7] = { s->t_total, s->t_wait, (double)s->bytes_sent, (double)s->bytes_recv, s->msgs_sent, s->msgs_recv,
                       s->t_drain };
    memcpy(mine, head, sizeof head);
    memcpy(mine + 7, s->layers, sizeof(double) * 5 * (size_t)L);
    if (ps)
        memcpy(mine + 7 + 5 * L, ps->spread, sizeof(double) * 9);
    if (x->rank == root && !(every = malloc(sizeof(double) * (size_t)width * (size_t)x->size))) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory", x->rank);
        goto out;
    }
    MPI_CHECK(MPI_Gather(mine, width, MPI_DOUBLE, every, width, MPI_DOUBLE, root, x->comm));
    if (x->rank != root)
        goto out;
    const size_t p = (size_t)x->size;
    all->size = x->size;
    all->n_layers = L;
    all->t_total = calloc(7 * p, sizeof(double));
    all->layers = calloc(p * (size_t)L, sizeof *all->layers);
    all->spread = ps ? calloc(9 * p, sizeof(double)) : NULL;
    if (!all->t_total || !all->layers || (ps && !all->spread)) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory", x->rank);
        goto out;
    }
    all->t_wait = all->t_total + p;
    all->bytes_sent = all->t_total + 2 * p;
    all->bytes_recv = all->t_total + 3 * p;
    all->msgs_sent = all->t_total + 4 * p;
    all->msgs_recv = all->t_total + 5 * p;
    all->t_drain = all->t_total + 6 * p;
    for (size_t r = 0; r < p; r++) {
        const double *row = every + r * (size_t)width;
        for (int k = 0; k < 7; k++)
            all->t_total[(size_t)k * p + r] = row[k];
        memcpy(all->layers + r * (size_t)L, row + 7, sizeof(double) * 5 * (size_t)L);
        if (ps)
            memcpy(all->spread + 9 * r, row + 7 + 5 * L, sizeof(double) * 9);
    }
out:
    free(mine);
    free(every);
    return rc;
}

void ra_stats_free(struct ra_all_stats *all)
{
    free(all->t_total);
    free(all->layers);
    free(all->spread);
    memset(all, 0, sizeof *all);
}
