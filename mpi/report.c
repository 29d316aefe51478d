#include "report.h"
#include "config.h"
#include "netem.h"
#include "cpu_isa.h"
#include "outfile.h"
#include "status.h"
#include "timing.h"
#include "sysinfo.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double min_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double max_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static json_t *int_array(const int32_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *bytes_or_null(int64_t v)
{
    return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

static json_t *proc_json(const struct ra_proc_info *p)
{
    const struct ra_mem_usage *u = &p->mem;
    return json_pack("{s:i, s:s, s:i, s:o, s:o, s:o, s:o, s:o}", "threads", p->threads, "cpus", p->cpus,
                     "n_cpus", p->n_cpus, "vm_hwm_bytes", bytes_or_null(u->hwm), "vm_rss_bytes", bytes_or_null(u->rss),
                     "rss_anon_bytes", bytes_or_null(u->rss_anon), "rss_file_bytes", bytes_or_null(u->rss_file),
                     "pss_bytes", bytes_or_null(u->pss));
}

/* A rank's total, wait and drain over the passes: {median, min, max} each. */
static json_t *spread_json(const double *v)
{
    static const char *const names[3] = { "total_s", "wait_s", "drain_s" };
    json_t *o = json_object();
    for (int k = 0; k < 3; k++)
        json_object_set_new(o, names[k], json_pack("{s:f, s:f, s:f}", "median", v[3 * k], "min", v[3 * k + 1],
                                                   "max", v[3 * k + 2]));
    return o;
}

/* Into the temporary file opened before the run, then renamed over the target (outfile.h). */
static int dump(json_t *root, struct ra_outfile *of)
{
    int rc = RA_OK;
    errno = 0;
    if (!of->fp)
        rc = ra_error_set(RA_EINVAL, "%s: not open for writing", of->path);
    else if (json_dumpf(root, of->fp, JSON_INDENT(1)) != 0 || fputc('\n', of->fp) == EOF || fflush(of->fp) != 0)
        rc = ra_error_set(RA_EIO, "%s: cannot write %s: %s", of->path, of->tmp,
                          errno ? strerror(errno) : "out of memory");
    json_decref(root);
    if (rc == RA_OK)
        return ra_outfile_commit(of);
    ra_outfile_abort(of);
    return rc;
}

int ra_report_write(struct ra_outfile *of, const struct ra_run_info *run, const struct ra_all_stats *all)
{
    const struct ra_config *c = run->config;
    json_t *root = json_object(), *ranks = json_array(), *ttfts = json_array(), *bounds = json_array();
    double sent = 0;
    for (int i = 0; i < run->repeat; i++)
        json_array_append_new(ttfts, json_real(run->ttft[i]));
    for (int r = 0; r <= run->ranks; r++)
        json_array_append_new(bounds, json_integer(run->bounds[r]));
    for (int r = 0; r < all->size; r++) {
        json_t *one = json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:i}",
            "rank", r, "tokens", run->bounds[r + 1] - run->bounds[r], "total_s", all->t_total[r],
            "compute_s", all->t_total[r] - all->t_wait[r] - all->t_drain[r], "wait_s", all->t_wait[r],
            "drain_s", all->t_drain[r],
            "bytes_sent", all->bytes_sent[r], "bytes_recv", all->bytes_recv[r],
            "msgs_sent", (int)all->msgs_sent[r], "msgs_recv", (int)all->msgs_recv[r]);
        if (all->spread) /* the figures above are the median pass's; these span every pass */
            json_object_set_new(one, "spread", spread_json(all->spread + 9 * r));
        if (run->procs) /* resident bytes count the weights' shared page-cache pages in every rank */
            json_object_update_new(one, proc_json(&run->procs[r]));
        json_array_append_new(ranks, one);
        sent += all->bytes_sent[r];
    }
    json_object_set_new(root, "runahead_version", json_string(PACKAGE_VERSION));
    json_object_set_new(root, "model", json_string(run->model_path));
    json_object_set_new(root, "model_shape", json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i}",
        "dim", c->dim, "hidden_dim", c->hidden_dim, "layers", c->n_layers, "heads", c->n_heads,
        "kv_heads", c->n_kv_heads, "vocab", c->vocab_size, "context", c->seq_len));
    json_object_set_new(root, "ranks", json_integer(run->ranks));
    json_object_set_new(root, "threads_per_rank", json_integer(run->threads));
    enum ra_cpu_isa isa;
    if (ra_cpu_isa_active(&isa) == RA_OK) /* the backends were made with it, so it cannot fail here */
        json_object_set_new(root, "cpu_kernels", json_string(ra_cpu_isa_name(isa)));
    json_object_set_new(root, "backend", json_string(run->backend ? run->backend : "cpu"));
    json_object_set_new(root, "method", json_string(ra_method_name(run->method)));
    json_object_set_new(root, "route", run->method == RA_METHOD_KVR ? json_string(ra_route_name(run->route)) : json_null());
    json_object_set_new(root, "transport", json_string(run->transport));
    json_object_set_new(root, "kv_dtype", json_string(ra_dtype_name(run->kv_dtype)));
    if (run->link) { /* absent unless emulated: every TTFT of this record includes emulated transfers */
        const struct ra_netem_config *k = run->link;
        json_object_set_new(root, "link", json_pack("{s:b, s:f, s:f}", "emulated", 1, "gbps", k->link_gbps,
                                                    "latency_us", k->latency_us));
        if (k->noise_gbps > 0)
            json_object_set_new(root, "noise", json_pack("{s:b, s:f, s:f, s:I, s:s}", "emulated", 1, "gbps",
                k->noise_gbps, "slot_ms", k->noise_slot_ms, "seed", (json_int_t)k->noise_seed,
                "pattern", "one random adjacent pair per slot, bidirectional, max-min fair share"));
    }
    json_t *part = json_pack("{s:s, s:o}", "spec", run->partition_spec, "bounds", bounds);
    if (run->partition_source)
        json_object_set_new(part, "source", json_string(run->partition_source));
    json_object_set_new(root, "partition", part);
    json_object_set_new(root, "context_length", json_integer(run->n_prompt));
    json_object_set_new(root, "repeat", json_integer(run->repeat));
    json_object_set_new(root, "ttft_s", json_pack("{s:f, s:f, s:f, s:o, s:i}", "median", ra_median(run->ttft, run->repeat),
        "min", min_of(run->ttft, run->repeat), "max", max_of(run->ttft, run->repeat), "all", ttfts,
        "median_pass", run->median_pass));
    /* per_rank and the trace show one pass, the median one (index into ttft_s.all), not the last. */
    json_object_set_new(root, "per_rank_pass", json_integer(run->median_pass));
    json_object_set_new(root, "per_rank", ranks);
    json_object_set_new(root, "bytes_sent_total", json_real(sent));
    json_object_set_new(root, "first_token", run->n_generated > 0 ? json_integer(run->generated[0]) : json_null());
    json_object_set_new(root, "generated_ids", int_array(run->generated, run->n_generated));
    json_object_set_new(root, "decode_s", json_real(run->t_decode));
    return dump(root, of);
}

static void add_span(json_t *ev, const char *name, const char *cat, int rank, int layer, double b, double e)
{
    if (e <= b)
        return;
    json_array_append_new(ev, json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:{s:i}}", "name", name, "cat", cat,
                                        "ph", "X", "pid", 0, "tid", rank, "ts", b * 1e6, "dur", (e - b) * 1e6,
                                        "args", "layer", layer));
}

int ra_trace_write(struct ra_outfile *of, const struct ra_run_info *run, const struct ra_all_stats *all)
{
    json_t *root = json_object(), *ev = json_array();
    char name[64];
    for (int r = 0; r < all->size; r++) {
        snprintf(name, sizeof name, "rank %d [%d, %d)", r, run->bounds[r], run->bounds[r + 1]);
        json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M",
                                            "pid", 0, "tid", r, "args", "name", name));
        for (int l = 0; l < all->n_layers; l++) {
            const struct ra_layer_times *t = &all->layers[(size_t)r * all->n_layers + l];
            snprintf(name, sizeof name, "L%d qkv", l);
            add_span(ev, name, "compute", r, l, t->begin, t->wait_begin);
            snprintf(name, sizeof name, "L%d wait kv", l);
            add_span(ev, name, "wait", r, l, t->wait_begin, t->wait_end);
            snprintf(name, sizeof name, "L%d attn+mlp", l);
            add_span(ev, name, "compute", r, l, t->wait_end, t->end);
            if (t->send > 0) {
                snprintf(name, sizeof name, "L%d send", l);
                json_array_append_new(ev, json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:f}", "name", name, "cat", "send",
                                                    "ph", "i", "s", "t", "pid", 0, "tid", r, "ts", t->send * 1e6));
            }
        }
    }
    const double first = run->ttft[run->median_pass];
    json_array_append_new(ev, json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:f}", "name", "first token", "cat", "ttft",
                                        "ph", "i", "s", "t", "pid", 0, "tid", all->size - 1, "ts", first * 1e6));
    json_object_set_new(root, "traceEvents", ev);
    /* Which pass this is: the median one of --repeat, so its TTFT is the reported median (odd counts). */
    json_object_set_new(root, "otherData", json_pack("{s:i, s:i, s:f, s:f}", "pass", run->median_pass, "passes",
                                                     run->repeat, "ttft_s", first, "ttft_median_s",
                                                     ra_median(run->ttft, run->repeat)));
    json_object_set_new(root, "displayTimeUnit", json_string("ms"));
    return dump(root, of);
}

void ra_report_print(FILE *f, const struct ra_run_info *run, const struct ra_all_stats *all)
{
    fprintf(f, "%s", ra_method_name(run->method));
    if (run->method == RA_METHOD_KVR)
        fprintf(f, " (%s)", ra_route_name(run->route));
    fprintf(f, ": %d ranks x %d threads, transport %s, %d prompt tokens, TTFT median %.4f s (min %.4f, max %.4f, %d runs)\n",
            run->ranks, run->threads, run->transport, run->n_prompt, ra_median(run->ttft, run->repeat),
            min_of(run->ttft, run->repeat), max_of(run->ttft, run->repeat), run->repeat);
    if (run->link) {
        char what[256];
        ra_netem_describe(run->link, what, sizeof what);
        fprintf(f, "  (%s: the TTFTs include emulated transfer times)\n", what);
    }
    if (run->partition_source)
        fprintf(f, "  partition %s: %s\n", run->partition_spec, run->partition_source);
    if (run->repeat > 1)
        fprintf(f, "  per rank: the median run (run %d of %d, TTFT %.4f s); total_s range: min..max over the runs\n",
                run->median_pass + 1, run->repeat, run->ttft[run->median_pass]);
    fprintf(f, "%6s %15s %10s %10s %10s %10s %12s %12s%s", "rank", "slice", "total_s", "compute_s", "wait_s",
            "drain_s", "sent_MB", "recv_MB", all->spread ? "     total_s range" : "");
    if (run->procs)
        fprintf(f, " %9s %9s %9s %9s %7s  %s", "hwm_MB", "rss_MB", "anon_MB", "pss_MB", "threads", "cpus");
    fputc('\n', f);
    for (int r = 0; r < all->size; r++) {
        char slice[32], range[64] = "";
        snprintf(slice, sizeof slice, "[%d,%d)", run->bounds[r], run->bounds[r + 1]);
        if (all->spread)
            snprintf(range, sizeof range, "  %8.4f..%.4f", all->spread[9 * r + 1], all->spread[9 * r + 2]);
        fprintf(f, "%6d %15s %10.4f %10.4f %10.4f %10.4f %12.3f %12.3f%s", r, slice, all->t_total[r],
                all->t_total[r] - all->t_wait[r] - all->t_drain[r], all->t_wait[r], all->t_drain[r],
                all->bytes_sent[r] / 1e6, all->bytes_recv[r] / 1e6, range);
        if (run->procs) {
            const struct ra_proc_info *p = &run->procs[r];
            fprintf(f, " %9.1f %9.1f %9.1f %9.1f %7d  %s", p->mem.hwm / 1e6, p->mem.rss / 1e6, p->mem.rss_anon / 1e6,
                    p->mem.pss / 1e6, p->threads, p->cpus);
        }
        fputc('\n', f);
    }
    if (run->procs)
        fprintf(f, "  (hwm, rss: peak and final resident memory, counting in every rank the mapped weights it read,\n"
                   "   which the node holds once in its page cache; anon: the rank's private memory; pss: its share)\n");
}
