/* A helper of tests/hf_oracle (not a test): runahead's last-position logits,
 * computed in fp32 on the CPU backend (a GGUF's blocks converted to f32 at
 * load, as transformers reads them), for prompts given as token ids.
 *
 *   logits_dump MODEL IDS_FILE OUT.f32
 *
 * IDS_FILE holds one prompt per line (ids separated by spaces); OUT.f32 gets,
 * per prompt in order, vocab little-endian floats: the logits after the
 * prompt's last token, from one ra_forward_span over the whole prompt. Each
 * prompt starts at position 0 of the same KV cache (its rows overwrite the
 * previous prompt's). stderr gets one line with the load time (map, convert,
 * NaN check), which the oracle prints. */
#include "ra_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The prompts: ids of all lines back to back, and where each line starts. */
struct prompts {
    int32_t *ids;
    int *start; /* [n + 1] */
    int n, cap_ids, cap_lines, longest;
};

static int push(void **buf, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return RA_OK;
    int ncap = *cap ? 2 * *cap : 256;
    void *p = realloc(*buf, (size_t)ncap * elem);
    if (!p)
        return ra_error_set(RA_ENOMEM, "out of memory reading the prompts");
    *buf = p, *cap = ncap;
    return RA_OK;
}

/* Ends the line that began at start[n]: records it unless it is empty. */
static int end_line(struct prompts *p, int n_ids)
{
    int len = n_ids - p->start[p->n];
    if (len == 0)
        return RA_OK;
    p->n++;
    if (len > p->longest)
        p->longest = len;
    int rc = push((void **)&p->start, &p->cap_lines, p->n + 1, sizeof *p->start);
    if (rc == RA_OK)
        p->start[p->n] = n_ids;
    return rc;
}

static int read_prompts(const char *path, int vocab, struct prompts *p)
{
    int rc = RA_OK, n_ids = 0, c;
    FILE *f = fopen(path, "r");
    memset(p, 0, sizeof *p);
    if (!f)
        return ra_error_set(RA_EIO, "%s: %s", path, strerror(errno));
    if ((rc = push((void **)&p->start, &p->cap_lines, 0, sizeof *p->start)) != RA_OK)
        goto out;
    p->start[0] = 0;
    while ((c = fgetc(f)) != EOF) {
        if (c == '\n') {
            if ((rc = end_line(p, n_ids)) != RA_OK)
                goto out;
        } else if (c >= '0' && c <= '9') {
            long v = c - '0';
            while ((c = fgetc(f)) >= '0' && c <= '9' && v < vocab)
                v = 10 * v + (c - '0');
            if (v >= vocab) {
                rc = ra_error_set(RA_EINVAL, "%s: id %ld is not below the vocabulary size %d", path, v, vocab);
                goto out;
            }
            if ((rc = push((void **)&p->ids, &p->cap_ids, n_ids, sizeof *p->ids)) != RA_OK)
                goto out;
            p->ids[n_ids++] = (int32_t)v;
            if (c == '\n' && (rc = end_line(p, n_ids)) != RA_OK)
                goto out;
        } else if (c != ' ' && c != '\r') {
            rc = ra_error_set(RA_EINVAL, "%s: unexpected character '%c' (only ids and spaces)", path, c);
            goto out;
        }
    }
    rc = end_line(p, n_ids);
out:
    fclose(f);
    return rc;
}

static int dump(const char *model_path, const char *ids_path, const char *out_path)
{
    struct ra_model m;
    struct ra_backend *be = NULL;
    struct ra_context cx = { 0 };
    struct ra_kvcache kv;
    struct prompts p = { 0 };
    float *logits = NULL;
    FILE *out = NULL;
    int have_model = 0, have_kv = 0, rc;

    double t0 = ra_wall_s();
    const struct ra_load_options f32 = { .dequantize_weights = 1 }; /* an fp32 reference: blocks as floats */
    if ((rc = ra_model_load_opts(&m, model_path, &f32)) != RA_OK)
        goto out;
    have_model = 1;
    fprintf(stderr, "logits_dump: loaded %s in %.2f s (map, convert, NaN check)\n", model_path, ra_wall_s() - t0);
    const int vocab = m.config.vocab_size;
    if ((rc = read_prompts(ids_path, vocab, &p)) != RA_OK)
        goto out;
    if (p.n == 0 || p.longest > m.config.seq_len) {
        rc = ra_error_set(RA_EINVAL, "%s: no prompt, or one longer than the model's context %d", ids_path,
                          m.config.seq_len);
        goto out;
    }
    /* One thread: see tests/hf_oracle.py. */
    if ((rc = ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 1 })) != RA_OK)
        goto out;
    be->compute = RA_COMPUTE_F32; /* the oracle computes in fp32: so does this side */
    if ((rc = ra_context_init(&cx, &m, be)) != RA_OK)
        goto out;
    if ((rc = ra_kvcache_init(&kv, be, m.config.n_layers, ra_config_kv_dim(&m.config), p.longest)) != RA_OK)
        goto out;
    have_kv = 1;
    logits = malloc((size_t)vocab * sizeof *logits);
    out = fopen(out_path, "wb");
    if (!logits || !out) {
        rc = ra_error_set(RA_EIO, "%s: %s", out_path, logits ? strerror(errno) : "out of memory");
        goto out;
    }
    for (int i = 0; i < p.n && rc == RA_OK; i++) {
        rc = ra_forward_span(&cx, p.ids + p.start[i], 0, p.start[i + 1] - p.start[i], &kv, logits);
        if (rc == RA_OK && fwrite(logits, sizeof *logits, (size_t)vocab, out) != (size_t)vocab)
            rc = ra_error_set(RA_EIO, "%s: %s", out_path, strerror(errno));
    }
    if (fclose(out) != 0 && rc == RA_OK)
        rc = ra_error_set(RA_EIO, "%s: %s", out_path, strerror(errno));
    out = NULL;
out:
    if (out)
        fclose(out);
    free(logits);
    free(p.ids);
    free(p.start);
    if (have_kv)
        ra_kvcache_free(&kv);
    ra_context_free(&cx);
    if (have_model)
        ra_model_free(&m);
    if (be)
        ra_backend_free(be);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: logits_dump MODEL IDS_FILE OUT.f32\n");
        return 2;
    }
    if (dump(argv[1], argv[2], argv[3]) != RA_OK) {
        fprintf(stderr, "logits_dump: %s\n", ra_error_message());
        return 1;
    }
    return 0;
}
