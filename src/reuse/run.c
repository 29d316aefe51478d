/* runahead --reuse on one process (run.h). */
#include "reuse/run.h"

#include "config.h"

#include "args.h"
#include "reuse/store.h"
#include "status.h"
#include "timing.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- option values */

int ra_reuse_ratio_parse(const char *s, double *ratio)
{
    if (!strcmp(s, "auto")) {
        *ratio = -1;
        return RA_OK;
    }
    int rc = ra_arg_double(s, "--blend-ratio", ratio);
    if (rc == RA_OK && !(*ratio >= 0 && *ratio <= 1))
        rc = ra_error_set(RA_EINVAL, "--blend-ratio: '%s' is not in [0, 1] (or auto)", s);
    return rc;
}

int ra_reuse_check_layers_parse(const char *s, int *layers, int *n)
{
    int rc = ra_arg_int_list(s, "--blend-check-layers", 0, 1 << 20, layers, RA_BLEND_MAX_CHECK, n);
    for (int i = 1; rc == RA_OK && i < *n; i++)
        if (layers[i] <= layers[i - 1])
            rc = ra_error_set(RA_EINVAL, "--blend-check-layers: '%s' is not ascending", s);
    return rc;
}

int ra_reuse_schedule_parse(const char *s, double *ratios, int *n)
{
    char *copy = strdup(s), *save = NULL;
    int rc = RA_OK;
    *n = 0;
    if (!copy)
        return ra_error_set(RA_ENOMEM, "out of memory");
    for (char *t = strtok_r(copy, ",", &save); t && rc == RA_OK; t = strtok_r(NULL, ",", &save)) {
        if (*n == RA_REUSE_MAX_SCHEDULE)
            rc = ra_error_set(RA_EINVAL, "--blend-schedule: more than %d ratios", RA_REUSE_MAX_SCHEDULE);
        else if ((rc = ra_arg_double(t, "--blend-schedule", &ratios[*n])) == RA_OK &&
                 !(ratios[*n] >= 0 && ratios[*n] <= 1))
            rc = ra_error_set(RA_EINVAL, "--blend-schedule: '%s' is not in [0, 1]", t);
        else if (rc == RA_OK && *n > 0 && ratios[*n] > ratios[*n - 1])
            rc = ra_error_set(RA_EINVAL, "--blend-schedule: '%s' is not non-increasing", s);
        (*n)++;
    }
    if (rc == RA_OK && *n == 0)
        rc = ra_error_set(RA_EINVAL, "--blend-schedule: '%s' holds no ratio", s);
    free(copy);
    return rc;
}

/* ------------------------------------------------------------- the request against the model */

int ra_reuse_check_request(const struct ra_reuse_run *o, const struct ra_request *req, const char *path,
                           const struct ra_config *c, int generate)
{
    for (int ch = 0; ch < req->n_chunks; ch++)
        if (req->n_prefix + req->chunk_len[ch] > c->seq_len)
            return ra_error_set(RA_ERANGE, "%s: %d tokens behind a prefix of %d, more than the model's context of "
                                "%d tokens", req->chunk_name[ch], req->chunk_len[ch], req->n_prefix, c->seq_len);
    if (req->n + (generate > 0 ? generate - 1 : 0) > c->seq_len)
        return ra_error_set(RA_ERANGE, "%s: the prompt has %d tokens%s, more than the model's context of %d "
                            "tokens", path, req->n, generate > 1 ? " plus the tokens to generate" : "", c->seq_len);
    for (int i = 0; i < req->n; i++)
        if (req->ids[i] >= c->vocab_size)
            return ra_error_set(RA_ERANGE, "%s: token id %d at position %d is outside the model's vocabulary "
                                "(0..%d)", path, req->ids[i], i, c->vocab_size - 1);
    for (int i = 0; o->mode == RA_REUSE_BLEND && i < o->cfg.n_check; i++)
        if (o->cfg.check[i] >= c->n_layers)
            return ra_error_set(RA_EINVAL, "--blend-check-layers: layer %d, but the model has %d layers",
                                o->cfg.check[i], c->n_layers);
    return RA_OK;
}

/* ------------------------------------------------------------- the prefill */

/* The store, for the modes that read it and for --store-write: created
 * where it is written; a reader records its uses (LRU) where it can write. */
int ra_reuse_run_open_store(struct ra_context *ctx, const struct ra_vocab *v, const struct ra_reuse_run *o,
                            enum ra_dtype kv_dtype, unsigned reader, struct ra_store **st)
{
    struct ra_store_identity id = { .kv_dtype = kv_dtype };
    char dir[4096];
    const char *d = o->store_dir;
    int rc = RA_OK;
    *st = NULL;
    if (o->mode == RA_REUSE_NONE && !o->cfg.store_write)
        return RA_OK;
    if (!d && (rc = ra_store_default_dir(dir, sizeof dir)) == RA_OK)
        d = dir;
    if (rc == RA_OK)
        rc = ra_store_model_identity(ctx->model, id.model);
    if (rc == RA_OK)
        rc = ra_store_vocab_identity(v, id.tokenizer);
    if (rc == RA_OK)
        rc = ra_store_open(st, d, ctx->model, &id, 0, o->cfg.store_write ? RA_STORE_CREATE : reader);
    return rc;
}

int ra_reuse_run_prefill(struct ra_context *ctx, const struct ra_vocab *v, const struct ra_reuse_run *o,
                         const struct ra_request *req, struct ra_kvcache *kv, float *logits, double *ttft,
                         struct ra_reuse_report *rep)
{
    struct ra_store *st = NULL;
    memset(rep, 0, sizeof *rep);
    int rc = ra_reuse_run_open_store(ctx, v, o, kv->dtype, RA_STORE_USES, &st);
    for (int i = 0; rc == RA_OK && i < o->repeat; i++) {
        ra_reuse_report_free(rep);
        if ((rc = ra_reuse_prefill(ctx, st, req, o->mode, &o->cfg, kv, logits, rep)) == RA_OK)
            ttft[i] = rep->ttft;
    }
    ra_store_close(st);
    return rc;
}

/* ------------------------------------------------------------- the report */

void ra_reuse_report_print(FILE *f, const struct ra_reuse_report *rep, const struct ra_request *req)
{
    fprintf(f, "reuse %s", ra_reuse_mode_name(rep->mode));
    if (rep->mode == RA_REUSE_BLEND || rep->mode == RA_REUSE_CRAFT)
        fprintf(f, " (ratio %.3f)", rep->ratio);
    fprintf(f, ": %d rows, %d chunks: %d hits, %d misses; %d rows loaded (%.3f MB)\n", rep->n_rows, req->n_chunks,
            rep->hits, rep->misses, rep->loaded_rows, rep->bytes_loaded / 1e6);
    fprintf(f, "reuse recomputed rows per layer:");
    for (int l = 0; l < rep->n_layers; l++)
        fprintf(f, " %d", rep->recomputed[l]);
    fprintf(f, "\nreuse TTFT %.3f ms: pass A %.3f, select %.3f, pass B %.3f, waiting for the loader %.3f "
            "(loader %.3f)", rep->ttft * 1e3, rep->t_pass_a * 1e3, rep->t_select * 1e3, rep->t_pass_b * 1e3,
            rep->t_load_wait * 1e3, rep->t_load * 1e3);
    if (rep->t_store_write > 0)
        fprintf(f, "; misses added to the store after it: %.3f ms", rep->t_store_write * 1e3);
    fputc('\n', f);
}

static json_t *config_json(const struct ra_reuse_run *o)
{
    json_t *j = json_object(), *check = json_array(), *sched = json_array();
    for (int i = 0; i < o->cfg.n_check; i++)
        json_array_append_new(check, json_integer(o->cfg.check[i]));
    for (int i = 0; i < o->cfg.n_schedule; i++)
        json_array_append_new(sched, json_real(o->cfg.schedule[i]));
    json_object_set_new(j, "blend_ratio", o->cfg.ratio < 0 ? json_string("auto") : json_real(o->cfg.ratio));
    json_object_set_new(j, "blend_check_layers", check);
    json_object_set_new(j, "blend_schedule", sched);
    json_object_set_new(j, "store_gbps", json_real(o->cfg.store_gbps));
    json_object_set_new(j, "store_write", json_boolean(o->cfg.store_write));
    return j;
}

json_t *ra_reuse_report_json(const struct ra_reuse_report *rep, const struct ra_reuse_run *o)
{
    json_t *j = json_object(), *rec = json_array();
    for (int l = 0; l < rep->n_layers; l++)
        json_array_append_new(rec, json_integer(rep->recomputed[l]));
    json_object_set_new(j, "mode", json_string(ra_reuse_mode_name(rep->mode)));
    json_object_set_new(j, "config", config_json(o));
    json_object_set_new(j, "rows", json_integer(rep->n_rows));
    json_object_set_new(j, "hits", json_integer(rep->hits));
    json_object_set_new(j, "misses", json_integer(rep->misses));
    json_object_set_new(j, "loaded_rows", json_integer(rep->loaded_rows));
    json_object_set_new(j, "bytes_loaded", json_integer(rep->bytes_loaded));
    json_object_set_new(j, "ratio", json_real(rep->ratio));
    json_object_set_new(j, "recomputed_rows", rec);
    json_object_set_new(j, "ttft_s", json_real(rep->ttft));
    json_object_set_new(j, "pass_a_s", json_real(rep->t_pass_a));
    json_object_set_new(j, "select_s", json_real(rep->t_select));
    json_object_set_new(j, "pass_b_s", json_real(rep->t_pass_b));
    json_object_set_new(j, "load_wait_s", json_real(rep->t_load_wait));
    json_object_set_new(j, "load_s", json_real(rep->t_load));
    json_object_set_new(j, "store_write_s", json_real(rep->t_store_write));
    return j;
}

static json_t *int_array(const int32_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

/* The prompt's parts: prefix, each chunk's length, suffix. */
static json_t *layout_json(const struct ra_request *req)
{
    json_t *chunks = json_array();
    for (int c = 0; c < req->n_chunks; c++)
        json_array_append_new(chunks, json_integer(req->chunk_len[c]));
    return json_pack("{s:i, s:o, s:i}", "prefix", req->n_prefix, "chunks", chunks, "suffix",
                     req->n - req->suffix_start);
}

int ra_reuse_record_write(struct ra_outfile *of, const struct ra_reuse_record *rec, const struct ra_reuse_run *o,
                          const struct ra_reuse_report *rep)
{
    json_t *root = json_object(), *ttft = json_array();
    int rc = RA_OK;
    for (int i = 0; i < o->repeat; i++)
        json_array_append_new(ttft, json_real(rec->ttft[i]));
    json_object_set_new(root, "runahead_version", json_string(PACKAGE_VERSION));
    json_object_set_new(root, "model", json_string(rec->model));
    json_object_set_new(root, "model_shape", json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i}",
        "dim", rec->config->dim, "hidden_dim", rec->config->hidden_dim, "layers", rec->config->n_layers,
        "heads", rec->config->n_heads, "kv_heads", rec->config->n_kv_heads, "vocab", rec->config->vocab_size,
        "context", rec->config->seq_len));
    json_object_set_new(root, "ranks", json_integer(rec->method ? rec->ranks : 1));
    if (rec->method)
        json_object_set_new(root, "chain", json_pack("{s:s, s:s, s:s, s:s, s:o}", "method", rec->method, "route",
                                                     rec->route, "send", rec->send, "scope", rec->scope, "bounds",
                                                     int_array(rec->bounds, rec->ranks + 1)));
    json_object_set_new(root, "threads_per_rank", json_integer(rec->threads));
    json_object_set_new(root, "backend", json_string(rec->backend));
    json_object_set_new(root, "kv_dtype", json_string(ra_dtype_name(rec->kv_dtype)));
    json_object_set_new(root, "request", json_string(rec->request));
    json_object_set_new(root, "context_length", json_integer(rec->req->n));
    json_object_set_new(root, "prompt_parts", layout_json(rec->req));
    json_object_set_new(root, "repeat", json_integer(o->repeat));
    json_object_set_new(root, "ttft_s", json_pack("{s:f, s:o}", "median", ra_median(rec->ttft, o->repeat), "all",
                                                  ttft));
    json_object_set_new(root, "reuse", ra_reuse_report_json(rep, o));
    json_object_set_new(root, "first_token", rec->n_generated > 0 ? json_integer(rec->generated[0]) : json_null());
    json_object_set_new(root, "generated_ids", int_array(rec->generated, rec->n_generated));
    json_object_set_new(root, "decode_s", json_real(rec->t_decode));
    errno = 0;
    if (!of->fp)
        rc = ra_error_set(RA_EINVAL, "%s: not open for writing", of->path);
    else if (json_dumpf(root, of->fp, JSON_INDENT(1)) != 0 || fputc('\n', of->fp) == EOF || fflush(of->fp) != 0)
        rc = ra_error_set(RA_EIO, "%s: cannot write %s: %s", of->path, of->tmp, errno ? strerror(errno) : "out of memory");
    json_decref(root);
    if (rc == RA_OK)
        return ra_outfile_commit(of);
    ra_outfile_abort(of);
    return rc;
}
