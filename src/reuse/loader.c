/* The reuse engine's loader thread (blend.h): layer by layer, every load's
 * rows read and verified, paced to an emulated store bandwidth. */
#include "reuse/blend.h"
#include "status.h"
#include "timing.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Sleeps until the monotonic clock reads T (ra_wall_s's clock). */
static void sleep_until(double t)
{
    for (;;) {
        const double left = t - ra_wall_s();
        if (left <= 0)
            return;
        struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
        if (nanosleep(&ts, NULL) == 0)
            return;
        if (errno != EINTR)
            return;
    }
}

/* One layer of every load: host pointers, the chunk's layer checksum verified. */
static int load_layer(struct ra_loader *ld, int l)
{
    for (int i = 0; i < ld->n_loads; i++) {
        const struct ra_blend_load *d = &ld->loads[i];
        const void **k = &ld->k[(size_t)l * ld->n_loads + i], **v = &ld->v[(size_t)l * ld->n_loads + i];
        int rc = d->read(d->src, l, k, v);
        if (rc != RA_OK)
            return rc;
        ld->bytes += 2 * (int64_t)d->n * (int64_t)ld->row_bytes;
    }
    return RA_OK;
}

static void *loader_main(void *arg)
{
    struct ra_loader *ld = arg;
    for (int l = 0; l < ld->n_layers; l++) {
        pthread_mutex_lock(&ld->mu);
        const int quit = ld->quit;
        pthread_mutex_unlock(&ld->mu);
        if (quit)
            break;
        int rc = load_layer(ld, l);
        if (rc == RA_OK && ld->gbps > 0)
            sleep_until(ld->t0 + (double)ld->bytes / (ld->gbps * 1e9));
        pthread_mutex_lock(&ld->mu);
        if (rc != RA_OK) { /* the message is this thread's: hand it over */
            ld->rc = rc;
            snprintf(ld->msg, sizeof ld->msg, "%s", ra_error_message());
        } else {
            ld->ready = l + 1;
        }
        ld->t_load = ra_wall_s() - ld->t0;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        if (rc != RA_OK)
            break;
    }
    return NULL;
}

int ra_loader_start(struct ra_loader *ld, const struct ra_blend_load *loads, int n_loads, int n_layers,
                    size_t row_bytes, double gbps)
{
    memset(ld, 0, sizeof *ld);
    ld->loads = loads;
    ld->n_loads = n_loads;
    ld->n_layers = n_layers;
    ld->row_bytes = row_bytes;
    ld->gbps = gbps;
    for (int i = 0; i < n_loads; i++)
        ld->total_bytes += 2 * (int64_t)loads[i].n * (int64_t)row_bytes * n_layers;
    const size_t slots = (size_t)n_layers * (size_t)(n_loads > 0 ? n_loads : 1);
    ld->k = calloc(slots, sizeof *ld->k);
    ld->v = calloc(slots, sizeof *ld->v);
    if (!ld->k || !ld->v) {
        free(ld->k), free(ld->v);
        ld->k = ld->v = NULL;
        return ra_error_set(RA_ENOMEM, "reuse: out of memory for the loader");
    }
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
    ld->t0 = ra_wall_s();
    if (pthread_create(&ld->thread, NULL, loader_main, ld) != 0) {
        ra_loader_stop(ld);
        return ra_error_set(RA_ENOMEM, "reuse: cannot start the loader thread");
    }
    ld->started = 1;
    return RA_OK;
}

int ra_loader_wait(struct ra_loader *ld, int layer)
{
    const double t0 = ra_wall_s();
    pthread_mutex_lock(&ld->mu);
    while (ld->ready <= layer && ld->rc == RA_OK)
        pthread_cond_wait(&ld->cv, &ld->mu);
    const int rc = ld->ready > layer ? RA_OK : ld->rc;
    pthread_mutex_unlock(&ld->mu);
    ld->t_wait += ra_wall_s() - t0;
    return rc == RA_OK ? RA_OK : ra_error_set(rc, "%s", ld->msg);
}

double ra_loader_total_s(struct ra_loader *ld)
{
    if (ld->gbps > 0)
        return (double)ld->total_bytes / (ld->gbps * 1e9);
    pthread_mutex_lock(&ld->mu);
    const int ready = ld->ready;
    const double t = ld->t_load;
    pthread_mutex_unlock(&ld->mu);
    if (ready >= ld->n_layers || ready == 0)
        return ready ? t : 0;
    return t * ld->n_layers / ready;
}

void ra_loader_stop(struct ra_loader *ld)
{
    if (ld->started) {
        pthread_mutex_lock(&ld->mu);
        ld->quit = 1;
        pthread_mutex_unlock(&ld->mu);
        pthread_join(ld->thread, NULL);
        ld->started = 0;
    }
    if (ld->k || ld->v) {
        pthread_cond_destroy(&ld->cv);
        pthread_mutex_destroy(&ld->mu);
    }
    free(ld->k);
    free(ld->v);
    ld->k = ld->v = NULL;
}
