/* An emulated link between ranks (--link-gbps, --link-latency-us) and an
 * emulated noise sidecar on it (--noise-gbps).
 *
 * Every message still moves through MPI at the machine's own speed; the
 * emulation only makes the receiver wait longer, until the moment the message
 * would have arrived over the emulated link:
 *
 *   start   = max(sender's post time, the time that link finished its previous message)
 *   arrival = end of transmitting `bytes` from `start` + latency
 *
 * Each directed pair of ranks is one full-duplex link; messages on it are
 * serialised. The sender does that bookkeeping and sends the arrival time as a
 * companion message (one double, same tag, on a duplicated communicator, so it
 * never mixes with the KV rows and is not counted in the bytes moved). Times
 * are seconds since the pass's start barrier on each rank, so ranks on
 * different nodes need no common clock.
 *
 * TSP's all-gather is emulated as a ring all-gather (p-1 steps, each moving
 * the largest block over every ring link at once) that starts when the last
 * rank arrives (an MPI_Allreduce of the arrival times).
 *
 * Noise (the paper's noisy sidecar, Fig. 11) is emulated too: time is cut into
 * slots; in each slot one random adjacent pair (r, r+1) carries bidirectional
 * sidecar traffic of `noise_gbps`, which shares that pair's links max-min
 * fairly (the message keeps link - min(noise, link/2)). Every rank derives the
 * same pair from (seed, pass, slot), so no sidecar process is needed and runs
 * are reproducible. Real sidecar traffic on one node would contend for cores
 * and memory bandwidth, not for a link, and so would measure the wrong thing.
 *
 * With no emulation flags the exchange has no netem at all (NULL) and runs
 * exactly as before. */
#ifndef RA_NETEM_H
#define RA_NETEM_H

#include <stdio.h>

#include "exchange.h"

struct ra_netem_config {
    double link_gbps;    /* GB/s (1e9 bytes/s) per direction; 0 = no emulation */
    double latency_us;   /* per message */
    double noise_gbps;   /* sidecar traffic per direction on the noisy pair; 0 = quiet */
    double noise_slot_ms;/* how long one pair stays noisy */
    unsigned long long noise_seed;
};

/* The flags' accepted ranges. No emulated wait may last for ever: one message
 * waits at most 1 s of latency plus its bytes at 1e-6 GB/s (1 kB/s), and the
 * tighter bound is on the whole pass, checked when the split is known: the
 * busiest link's emulated time in one prompt pass (every layer's K and V rows
 * and latencies, at half bandwidth if noisy) must stay within an hour. The noise
 * slot's lower bound keeps the slot-by-slot transfer arithmetic short: at most
 * 3.6e7 slots in that hour. */
#define RA_NETEM_GBPS_MIN 1e-6
#define RA_NETEM_GBPS_MAX 1e6
#define RA_NETEM_LATENCY_US_MAX 1e6
#define RA_NETEM_SLOT_MS_MIN 0.1
#define RA_NETEM_SLOT_MS_MAX 1e6
#define RA_NETEM_PASS_S_MAX 3600.0

/* Checks the flags' values against those ranges (noise needs a link). */
int ra_netem_config_check(const struct ra_netem_config *c);

/* Collective over x->comm: gives x an emulated link (x->netem) when c asks for
 * one, else leaves x->netem NULL. Freed by ra_exchange_free. Refuses (on every
 * rank alike, before the collective) a link on which one prompt pass would take
 * longer than RA_NETEM_PASS_S_MAX. */
int ra_netem_attach(struct ra_exchange *x, const struct ra_netem_config *c);
void ra_netem_free(struct ra_netem *n);

/* The hooks, called only when x->netem is set. */
void ra_netem_begin(struct ra_exchange *x);
int ra_netem_post_send(struct ra_exchange *x, int rows, int dest, int tag);
int ra_netem_post_recv(struct ra_exchange *x, int source, int tag);
/* Relay: the next send forwards receive `idx`, so it cannot leave before that arrived. */
int ra_netem_forwarding(struct ra_exchange *x, int idx);
/* After this layer's receives completed: wait until the last one has arrived over the link. */
int ra_netem_wait_recvs(struct ra_exchange *x);
/* After TSP's real all-gathers of `rows[r]` rows per rank (K and V): wait for the emulated ring. */
int ra_netem_allgather(struct ra_exchange *x, double t_enter, const int *rows);
/* The same for an all-gather whose largest block is `block` bytes (delta sends' position lists). */
int ra_netem_allgather_bytes(struct ra_exchange *x, double t_enter, double block);
/* A message of `bytes` to dest that carries no arrival stamp (delta sends'
 * position lists, sent blocking): it only keeps the link busy, so the rows
 * that follow it on that link arrive that much later. */
int ra_netem_charge(struct ra_exchange *x, int dest, double bytes);
int ra_netem_finish(struct ra_exchange *x);

/* "emulated link 10 GB/s, 5 us latency; emulated noise ..." for the stderr summary. */
void ra_netem_describe(const struct ra_netem_config *c, char *buf, size_t len);

#endif
