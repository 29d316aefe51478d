/* The JSON record of a run and its Chrome-trace/Perfetto timeline. */
#ifndef RA_REPORT_H
#define RA_REPORT_H

#include <stdio.h>

#include "prefill.h"
#include "timing.h" /* ra_median */

struct ra_netem_config;
struct ra_outfile;
struct ra_proc_info;

struct ra_run_info {
    const char *model_path, *partition_spec;
    const struct ra_config *config;
    enum ra_method method;
    enum ra_route route;
    const int *bounds;
    int ranks, threads, n_prompt, repeat;
    const double *ttft;             /* [repeat] */
    int median_pass;                /* the pass whose figures `all` holds (ra_prefill_repeat) */
    const char *partition_source;   /* how the split was chosen (auto: "equal-work from FLOPs"), or NULL */
    const int32_t *generated;
    int n_generated;
    double t_decode;
    const char *transport;          /* what moved the KV rows: ra_exchange_transport_name() */
    const struct ra_netem_config *link; /* an emulated link (netem.h), or NULL */
    const struct ra_proc_info *procs;   /* [ranks]: each rank's CPUs, threads and memory, or NULL */
    const char *backend;            /* the compute backend's name ("cpu", "cuda"); NULL: cpu */
    enum ra_dtype kv_dtype;         /* of the KV cache rows (f32 when left zero) */
};

/* Write the record / the timeline into `of`, opened with ra_outfile_open before the run (so a
 * place that cannot be written fails at once), and commit it; on failure of is aborted. */
int ra_report_write(struct ra_outfile *of, const struct ra_run_info *run, const struct ra_all_stats *all);
int ra_trace_write(struct ra_outfile *of, const struct ra_run_info *run, const struct ra_all_stats *all);
/* A few lines for humans on stderr. */
void ra_report_print(FILE *f, const struct ra_run_info *run, const struct ra_all_stats *all);

#endif
