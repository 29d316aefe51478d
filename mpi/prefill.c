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

int ra_prefill_run(struct ra_model *m, struct ra_exchange *x, struct ra_kvcache *kv,
                   const int32_t *tokens, float *logits, double *ttft)
{
    int rc = RA_OK;
    const int r = x->rank, start = x->bounds[r], n = x->bounds[r + 1] - start;
    const int last = r == x->size - 1;
    ra_watchdog_wait(RA_WATCH_START, -1, -1);
    MPI_CHECK(MPI_Barrier(x->comm));
    ra_watchdog_done();
    ra_exchange_begin(x);
    rc = ra_forward_span(m, tokens + start, start, n, kv, ra_exchange_hooks(x), last ? logits : NULL);
    if (last)
        *ttft = MPI_Wtime() - x->t0;
    if (rc == RA_OK)
        rc = ra_exchange_finish(x);
out:
    ra_watchdog_done(); /* when MPI_CHECK left a wait early */
    return rc;
}

int ra_prefill_median(struct ra_model *m, MPI_Comm comm, enum ra_method method, enum ra_route route,
                      const int *bounds, struct ra_kvcache *kv, const int32_t *tokens, int repeats,
                      double *median_ttft)
{
    struct ra_exchange x = { .row = MPI_DATATYPE_NULL };
    double *ttft = calloc((size_t)repeats, sizeof *ttft);
    float *logits = malloc(sizeof(float) * (size_t)m->config.vocab_size);
    int rc = RA_OK;
    if (!ttft || !logits) {
        rc = ra_error_set(RA_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = ra_exchange_init(&x, comm, method, route, bounds, m->config.n_layers,
                               ra_kvcache_row_bytes(kv))) != RA_OK)
        goto out;
    for (int i = 0; i < repeats && rc == RA_OK; i++)
        rc = ra_prefill_run(m, &x, kv, tokens, logits, &ttft[i]);
    if (rc == RA_OK) {
        *median_ttft = ra_median(ttft, repeats);
        ra_watchdog_wait(RA_WATCH_RESULT, -1, x.size - 1);
        MPI_CHECK(MPI_Bcast(median_ttft, 1, MPI_DOUBLE, x.size - 1, comm));
        ra_watchdog_done();
    }
out:
    ra_watchdog_done();
    if (x.send)
        ra_exchange_free(&x);
    free(ttft);
    free(logits);
    return rc;
}

/* Per rank: t_total, t_wait, bytes/msgs sent/received, t_drain, then 5 times per layer. */
int ra_stats_gather(struct ra_exchange *x, struct ra_all_stats *all)
{
    int rc = RA_OK;
    const int L = x->n_layers, width = 7 + 5 * L, root = x->size - 1;
    double *mine = malloc(sizeof(double) * (size_t)width), *every = NULL;
    memset(all, 0, sizeof *all);
    if (!mine)
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", x->rank);
    const struct ra_rank_stats *s = &x->stats;
    double head[7] = { s->t_total, s->t_wait, (double)s->bytes_sent, (double)s->bytes_recv, s->msgs_sent, s->msgs_recv,
                       s->t_drain };
    memcpy(mine, head, sizeof head);
    memcpy(mine + 7, s->layers, sizeof(double) * 5 * (size_t)L);
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
    if (!all->t_total || !all->layers) {
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
    memset(all, 0, sizeof *all);
}
