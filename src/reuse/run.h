/* A request prefilled with chunk-cache reuse on one process: what runahead
 * --reuse does between loading the model and decoding. The options' values,
 * the request checked against the model, the store opened, the prefill
 * (reuse.h) run --repeat times, and its report on stderr and in JSON. */
#ifndef RA_REUSE_RUN_H
#define RA_REUSE_RUN_H

#include <jansson.h>
#include <stdio.h>

#include "context.h"
#include "kvcache.h"
#include "outfile.h"
#include "reuse/request.h"
#include "reuse/reuse.h"

#define RA_REUSE_MAX_SCHEDULE 256

/* What the options ask for. */
struct ra_reuse_run {
    enum ra_reuse_mode mode;
    const char *store_dir; /* --store, or NULL: ra_store_default_dir */
    struct ra_reuse_config cfg;
    double schedule[RA_REUSE_MAX_SCHEDULE]; /* cfg.schedule points here when given */
    int repeat;
};

/* --blend-ratio: a fraction in [0, 1], or "auto" (cfg.ratio < 0). */
int ra_reuse_ratio_parse(const char *s, double *ratio);
/* --blend-check-layers: "L[,L...]", ascending, at most RA_BLEND_MAX_CHECK. */
int ra_reuse_check_layers_parse(const char *s, int *layers, int *n);
/* --blend-schedule: "R,R,...", each in [0, 1], non-increasing. */
int ra_reuse_schedule_parse(const char *s, double *ratios, int *n);

/* The request REQ (from PATH) fits model configuration C with GENERATE more
 * tokens: no chunk and no prompt longer than the context, every id in the
 * vocabulary, the check layers inside the model. One line naming the file
 * (and the chunk) otherwise. */
int ra_reuse_check_request(const struct ra_reuse_run *o, const struct ra_request *req, const char *path,
                           const struct ra_config *c, int generate);

/* Prefills REQ into KV (initialised by the caller, at least req->n rows)
 * o->repeat times, each time from scratch; TTFT[repeat] gets each time's
 * first-token time, REP the last run's report, LOGITS the last row's.
 * V: the request's vocabulary (the store's key), or NULL. */
int ra_reuse_run_prefill(struct ra_context *ctx, const struct ra_vocab *v, const struct ra_reuse_run *o,
                         const struct ra_request *req, struct ra_kvcache *kv, float *logits, double *ttft,
                         struct ra_reuse_report *rep);

/* The store O names for KV rows of KV_DTYPE, opened by a reader with
 * READER (RA_STORE_USES; RA_STORE_READONLY for the chain's other ranks),
 * created with --store-write; *ST NULL for `none` without --store-write. */
int ra_reuse_run_open_store(struct ra_context *ctx, const struct ra_vocab *v, const struct ra_reuse_run *o,
                            enum ra_dtype kv_dtype, unsigned reader, struct ra_store **st);

/* The report: a few lines on F, or a JSON object (new reference). */
void ra_reuse_report_print(FILE *f, const struct ra_reuse_report *rep, const struct ra_request *req);
json_t *ra_reuse_report_json(const struct ra_reuse_report *rep, const struct ra_reuse_run *o);

/* What runahead --report writes for a reuse run, besides the report. */
struct ra_reuse_record {
    const char *model, *request, *backend;
    const struct ra_config *config;
    int threads;
    enum ra_dtype kv_dtype;
    const struct ra_request *req;
    const double *ttft; /* [repeat] */
    const int32_t *generated;
    int n_generated;
    double t_decode;
    /* On the chain (method NULL: one rank): how the ranks shared it. */
    const char *method, *route, *send, *scope;
    const int *bounds;  /* [ranks + 1] */
    int ranks;
};
/* One JSON record into OF (opened with ra_outfile_open), committed. */
int ra_reuse_record_write(struct ra_outfile *of, const struct ra_reuse_record *rec, const struct ra_reuse_run *o,
                          const struct ra_reuse_report *rep);

#endif
