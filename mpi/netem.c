/* An emulated link and noise sidecar between ranks: see netem.h for the model. */
#define _POSIX_C_SOURCE 200809L
#include "netem.h"
#include "ra_mpi.h"
#include "watchdog.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ra_netem {
    struct ra_netem_config c;
    double bw, lat, noisy_bw, slot; /* bytes/s, s, bytes/s on the noisy pair, s */
    MPI_Comm comm;                  /* companions (arrival times) and the all-gather's start */
    unsigned pass;                  /* passes begun: each sees its own noise pattern */
    double ready;                   /* relay: the next send cannot leave before this */
    double *link_free;              /* [size] when my link to each rank is free again */
    double *send_stamp;             /* [max_send] arrival times sent with the pass's send i */
    MPI_Request *send_req;
    double *recv_stamp;             /* [2 * size] arrival times of x->recv[i] */
    MPI_Request *recv_req;
};

int ra_netem_config_check(const struct ra_netem_config *c)
{
    if (!(c->link_gbps == 0 || (c->link_gbps >= RA_NETEM_GBPS_MIN && c->link_gbps <= RA_NETEM_GBPS_MAX)))
        return ra_error_set(RA_EINVAL, "--link-gbps %g must be 0 (no emulated link) or in [%g, %g] GB/s",
                            c->link_gbps, RA_NETEM_GBPS_MIN, RA_NETEM_GBPS_MAX);
    if (!(c->latency_us >= 0 && c->latency_us <= RA_NETEM_LATENCY_US_MAX))
        return ra_error_set(RA_EINVAL, "--link-latency-us %g must be in [0, %g] us", c->latency_us,
                            RA_NETEM_LATENCY_US_MAX);
    if (!(c->noise_gbps >= 0 && c->noise_gbps <= RA_NETEM_GBPS_MAX))
        return ra_error_set(RA_EINVAL, "--noise-gbps %g must be in [0, %g] GB/s", c->noise_gbps, RA_NETEM_GBPS_MAX);
    if (!(c->noise_slot_ms >= RA_NETEM_SLOT_MS_MIN && c->noise_slot_ms <= RA_NETEM_SLOT_MS_MAX))
        return ra_error_set(RA_EINVAL, "--noise-slot-ms %g must be in [%g, %g] ms", c->noise_slot_ms,
                            RA_NETEM_SLOT_MS_MIN, RA_NETEM_SLOT_MS_MAX);
    if (c->link_gbps == 0 && (c->latency_us > 0 || c->noise_gbps > 0))
        return ra_error_set(RA_EINVAL, "%s needs --link-gbps G: the emulation runs on an emulated link",
                            c->noise_gbps > 0 ? "--noise-gbps" : "--link-latency-us");
    return RA_OK;
}

/* The flags' ranges bound one message; this bounds what a rank can wait for in
 * one pass: the busiest link's emulated time, at worst half the bandwidth (noise
 * takes at most half), latency on as many messages as any route sends on it. */
static int check_pass_time(const struct ra_exchange *x, const struct ra_netem_config *c)
{
    const int p = x->size;
    double rows = x->bounds[p - 1]; /* KVR: rows [0, b_{p-1}) reach the last rank over one link */
    if (x->method == RA_METHOD_TSP) { /* the ring moves p-1 blocks of the largest slice over every link */
        int most = 0;
        for (int r = 0; r < p; r++)
            most = x->bounds[r + 1] - x->bounds[r] > most ? x->bounds[r + 1] - x->bounds[r] : most;
        rows = (double)(p - 1) * most;
    }
    const double bytes = 2.0 * x->n_layers * rows * (double)x->row_bytes; /* K and V, every layer */
    const double bw = c->link_gbps * 1e9 / (c->noise_gbps > 0 ? 2 : 1);
    const double lat = 2.0 * x->n_layers * (p - 1) * c->latency_us * 1e-6;
    const double pass_s = bytes / bw + lat;
    if (pass_s <= RA_NETEM_PASS_S_MAX)
        return RA_OK;
    if (lat >= RA_NETEM_PASS_S_MAX)
        return ra_error_set(RA_EINVAL, "--link-latency-us %g: the latency alone of one prompt pass's %d messages on "
                            "the busiest emulated link would take %.3g s; the limit is %g s", c->latency_us,
                            2 * x->n_layers * (p - 1), lat, RA_NETEM_PASS_S_MAX);
    return ra_error_set(RA_EINVAL, "--link-gbps %g: one prompt pass would keep the busiest emulated link busy for "
                        "%.3g s (%.3g MB of KV rows); the limit is %g s: use --link-gbps >= %.3g", c->link_gbps,
                        pass_s, bytes / 1e6, RA_NETEM_PASS_S_MAX,
                        bytes / (RA_NETEM_PASS_S_MAX - lat) * (c->noise_gbps > 0 ? 2 : 1) / 1e9);
}

void ra_netem_free(struct ra_netem *n)
{
    if (!n)
        return;
    if (n->comm != MPI_COMM_NULL)
        MPI_Comm_free(&n->comm);
    free(n->link_free);
    free(n->send_stamp);
    free(n->send_req);
    free(n->recv_stamp);
    free(n->recv_req);
    free(n);
}

int ra_netem_attach(struct ra_exchange *x, const struct ra_netem_config *c)
{
    int rc = RA_OK;
    struct ra_netem *n = NULL;
    if (c->link_gbps <= 0)
        return RA_OK;
    /* The same verdict on every rank (the same flags and split), so all return before the collective. */
    if ((rc = check_pass_time(x, c)) != RA_OK)
        return rc;
    if (!(n = calloc(1, sizeof *n))) { /* still take part in the collective the others enter */
        MPI_Comm dup;
        if (MPI_Comm_dup(x->comm, &dup) == MPI_SUCCESS)
            MPI_Comm_free(&dup);
        return ra_error_set(RA_ENOMEM, "rank %d: out of memory", x->rank);
    }
    n->comm = MPI_COMM_NULL;
    /* The collective first, so that every rank takes part even if an allocation below fails. */
    MPI_CHECK(MPI_Comm_dup(x->comm, &n->comm));
    n->c = *c;
    n->bw = c->link_gbps * 1e9;
    n->lat = c->latency_us * 1e-6;
    n->noisy_bw = n->bw - fmin(c->noise_gbps * 1e9, n->bw / 2);
    n->slot = c->noise_slot_ms * 1e-3;
    const size_t per_layer = 2 * (size_t)x->size;
    n->link_free = calloc((size_t)x->size, sizeof *n->link_free);
    n->send_stamp = calloc((size_t)x->max_send, sizeof *n->send_stamp);
    n->send_req = calloc((size_t)x->max_send, sizeof *n->send_req);
    n->recv_stamp = calloc(per_layer, sizeof *n->recv_stamp);
    n->recv_req = calloc(per_layer, sizeof *n->recv_req);
    if (!n->link_free || !n->send_stamp || !n->send_req || !n->recv_stamp || !n->recv_req) {
        rc = ra_error_set(RA_ENOMEM, "rank %d: out of memory for the emulated link", x->rank);
        goto out;
    }
    for (size_t i = 0; i < per_layer; i++)
        n->recv_req[i] = MPI_REQUEST_NULL;
    x->netem = n;
    n = NULL;
out:
    ra_netem_free(n);
    return rc;
}

/* ------------------------------------------------------------------ the link model */

static uint64_t splitmix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Is the link between ranks a and b carrying sidecar traffic in noise slot k? */
static int noisy(const struct ra_netem *n, int p, int a, int b, long long k)
{
    if (n->c.noise_gbps <= 0 || p < 2)
        return 0;
    const int lo = a < b ? a : b, hi = a < b ? b : a;
    if (hi != lo + 1)
        return 0;
    const uint64_t h = splitmix64(n->c.noise_seed ^ splitmix64(((uint64_t)n->pass << 40) ^ (uint64_t)k));
    return (int)(h % (uint64_t)(p - 1)) == lo;
}

/* When `bytes` that start at t on the link from `src` to `dst` have all left. */
static double transfer_end(const struct ra_netem *n, int p, int src, int dst, double t, double bytes)
{
    if (n->c.noise_gbps <= 0)
        return t + bytes / n->bw;
    if (t < 0)
        t = 0;
    /* Slot by slot: the rate changes only at slot edges. k counts on as an
     * integer, since floor(edge / slot) can round back into the slot just left. */
    for (long long k = (long long)floor(t / n->slot);; k++) {
        const double slot_end = (double)(k + 1) * n->slot;
        const double rate = noisy(n, p, src, dst, k) ? n->noisy_bw : n->bw;
        const double dt = bytes / rate;
        if (t + dt <= slot_end)
            return t + dt;
        if (slot_end > t) {
            bytes -= (slot_end - t) * rate;
            t = slot_end;
        }
    }
}

void ra_netem_describe(const struct ra_netem_config *c, char *buf, size_t len)
{
    int k = snprintf(buf, len, "emulated link %g GB/s, %g us latency", c->link_gbps, c->latency_us);
    if (c->noise_gbps > 0 && k > 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, "; emulated noise %g GB/s each way on one random adjacent pair per %g ms (seed %llu)",
                 c->noise_gbps, c->noise_slot_ms, c->noise_seed);
}

/* ------------------------------------------------------------------ the hooks */

static double now(const struct ra_exchange *x)
{
    return MPI_Wtime() - x->t0;
}

/* Waits until `target` (s since t0), sleeping so that other ranks on the same
 * cores run, and keeping this rank's own sends moving meanwhile. */
static int wait_until(struct ra_exchange *x, double target)
{
    int rc = RA_OK;
    for (double t = now(x); t < target; t = now(x)) {
        if (x->n_send && (rc = ra_transport_progress(x->tr)) != RA_OK)
            goto out;
        const double nap = fmin(target - t - 50e-6, 1e-3);
        if (nap > 0) {
            struct timespec ts = { 0, (long)(nap * 1e9) };
            nanosleep(&ts, NULL);
        }
        ra_watchdog_pet(); /* a deliberate wait for the emulated link, not a stuck peer */
    }
out:
    return rc;
}

void ra_netem_begin(struct ra_exchange *x)
{
    struct ra_netem *n = x->netem;
    n->pass++;
    n->ready = 0;
    memset(n->link_free, 0, sizeof *n->link_free * (size_t)x->size);
}

int ra_netem_post_send(struct ra_exchange *x, int rows, int dest, int tag)
{
    struct ra_netem *n = x->netem;
    int rc = RA_OK;
    const int i = x->n_send;
    const double bytes = (double)rows * (double)x->row_bytes;
    const double start = fmax(fmax(now(x), n->ready), n->link_free[dest]);
    n->ready = 0;
    n->link_free[dest] = transfer_end(n, x->size, x->rank, dest, start, bytes);
    n->send_stamp[i] = n->link_free[dest] + n->lat;
    MPI_CHECK(MPI_Isend(&n->send_stamp[i], 1, MPI_DOUBLE, dest, tag, n->comm, &n->send_req[i]));
out:
    return rc;
}

int ra_netem_charge(struct ra_exchange *x, int dest, double bytes)
{
    struct ra_netem *n = x->netem;
    const double start = fmax(now(x), n->link_free[dest]);
    n->link_free[dest] = transfer_end(n, x->size, x->rank, dest, start, bytes);
    return RA_OK;
}

int ra_netem_post_recv(struct ra_exchange *x, int source, int tag)
{
    struct ra_netem *n = x->netem;
    int rc = RA_OK;
    const int i = x->n_recv;
    MPI_CHECK(MPI_Irecv(&n->recv_stamp[i], 1, MPI_DOUBLE, source, tag, n->comm, &n->recv_req[i]));
out:
    return rc;
}

int ra_netem_forwarding(struct ra_exchange *x, int idx)
{
    struct ra_netem *n = x->netem;
    int rc = RA_OK;
    /* The companion follows its rows on the same pair and tag: it is here or nearly. */
    MPI_CHECK(MPI_Wait(&n->recv_req[idx], MPI_STATUS_IGNORE));
    n->ready = n->recv_stamp[idx];
out:
    return rc;
}

int ra_netem_wait_recvs(struct ra_exchange *x)
{
    struct ra_netem *n = x->netem;
    int rc = RA_OK;
    double last = 0;
    MPI_CHECK(MPI_Waitall(x->n_recv, n->recv_req, MPI_STATUSES_IGNORE));
    for (int i = 0; i < x->n_recv; i++)
        last = fmax(last, n->recv_stamp[i]);
    rc = wait_until(x, last);
out:
    return rc;
}

int ra_netem_allgather(struct ra_exchange *x, double t_enter, const int *rows)
{
    int most = 0;
    for (int r = 0; r < x->size; r++)
        most = rows[r] > most ? rows[r] : most;
    return ra_netem_allgather_bytes(x, t_enter, (double)most * (double)x->row_bytes);
}

int ra_netem_allgather_bytes(struct ra_exchange *x, double t_enter, double block)
{
    struct ra_netem *n = x->netem;
    const int p = x->size;
    int rc = RA_OK;
    double t;
    /* The ring starts when the last rank has its rows. */
    MPI_CHECK(MPI_Allreduce(&t_enter, &t, 1, MPI_DOUBLE, MPI_MAX, n->comm));
    for (int kv = 0; kv < 2; kv++)
        for (int step = 1; step < p; step++) {
            double step_end = t;
            for (int r = 0; r < p; r++)
                step_end = fmax(step_end, transfer_end(n, p, r, (r + 1) % p, t, block));
            t = step_end + n->lat;
        }
    rc = wait_until(x, t);
out:
    return rc;
}

int ra_netem_finish(struct ra_exchange *x)
{
    int rc = RA_OK;
    MPI_CHECK(MPI_Waitall(x->n_send, x->netem->send_req, MPI_STATUSES_IGNORE));
out:
    return rc;
}
