/* Cache-Craft's records (craft.h): the hook that measures a chunk's
 * attention on its context while the store computes it, and the record file
 * kept beside the chunk's. */
#include "reuse/craft.h"
#include "backend.h"
#include "half.h"
#include "outfile.h"
#include "reuse/store_impl.h"
#include "status.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RECORD_MAGIC "RACRAFT\0"
#define RECORD_VERSION 1
#define RECORD_FIXED (8 + 6 * 4 + RA_STORE_HASH_BYTES)

void ra_craft_record_free(struct ra_craft_record *r)
{
    if (!r)
        return;
    free(r->ctx_keys);
    free(r->token_context);
    r->ctx_keys = NULL;
    r->token_context = NULL;
}

double ra_craft_cci(const struct ra_craft_record *r)
{
    double s = 0;
    for (int g = 0; g < r->n_groups; g++) {
        const double both = (double)r->context[g] + (double)r->self[g];
        s += both > 0 ? r->context[g] / both : 0;
    }
    return r->n_groups ? s / r->n_groups : 0;
}

double ra_craft_token_score(const struct ra_craft_record *r, int t)
{
    double s = 0;
    for (int g = 0; g < r->n_groups; g++)
        s += r->token_context[(size_t)g * r->n_tokens + t];
    return r->n_groups ? s / r->n_groups : 0;
}

/* ------------------------------------------------------------ the file */

static void put_u32(uint8_t **p, uint32_t x)
{
    for (int i = 0; i < 4; i++)
        *(*p)++ = (uint8_t)(x >> (8 * i));
}
static uint32_t get_u32(const uint8_t **p)
{
    uint32_t x = 0;
    for (int i = 0; i < 4; i++)
        x |= (uint32_t)(*p)[i] << (8 * i);
    *p += 4;
    return x;
}
static void put_floats(uint8_t **p, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        put_u32(p, u);
    }
}
static void get_floats(const uint8_t **p, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = get_u32(p);
        memcpy(&x[i], &u, 4);
    }
}

static size_t record_bytes(int n_groups, int n_tokens, int n_ctx_keys)
{
    return RECORD_FIXED + (size_t)n_ctx_keys * RA_STORE_HASH_BYTES + 4 * (3 * (size_t)n_groups) +
           4 * (size_t)n_groups * (size_t)n_tokens + RA_STORE_HASH_BYTES;
}

int ra_craft_record_encode(const struct ra_craft_record *r, uint8_t **out, size_t *bytes)
{
    const size_t size = record_bytes(r->n_groups, r->n_tokens, r->n_ctx_keys);
    uint8_t *buf = malloc(size), *p = buf;
    if (!buf)
        return ra_error_set(RA_ENOMEM, "craft: out of memory for a record");
    memcpy(p, RECORD_MAGIC, 8);
    p += 8;
    put_u32(&p, RECORD_VERSION);
    put_u32(&p, (uint32_t)r->n_groups);
    put_u32(&p, (uint32_t)r->n_tokens);
    put_u32(&p, (uint32_t)r->n_lead);
    put_u32(&p, (uint32_t)r->n_context);
    put_u32(&p, (uint32_t)r->n_ctx_keys);
    memcpy(p, r->base, RA_STORE_HASH_BYTES);
    p += RA_STORE_HASH_BYTES;
    if (r->n_ctx_keys)
        memcpy(p, r->ctx_keys, (size_t)r->n_ctx_keys * RA_STORE_HASH_BYTES);
    p += (size_t)r->n_ctx_keys * RA_STORE_HASH_BYTES;
    put_floats(&p, r->sink, (size_t)r->n_groups);
    put_floats(&p, r->context, (size_t)r->n_groups);
    put_floats(&p, r->self, (size_t)r->n_groups);
    put_floats(&p, r->token_context, (size_t)r->n_groups * (size_t)r->n_tokens);
    int rc = ra_sha256(buf, (size_t)(p - buf), p);
    if (rc != RA_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    *bytes = size;
    return RA_OK;
}

int ra_craft_record_parse(const uint8_t *data, size_t size, const char *path, struct ra_craft_record *r)
{
    const uint8_t *p = data;
    uint8_t sha[RA_STORE_HASH_BYTES];
    memset(r, 0, sizeof *r);
    if (size < RECORD_FIXED || memcmp(p, RECORD_MAGIC, 8) != 0)
        return ra_error_set(RA_EFORMAT, "%s: not a craft record", path);
    p += 8;
    const uint32_t version = get_u32(&p), g = get_u32(&p), n = get_u32(&p), lead = get_u32(&p),
                   ctx = get_u32(&p), m = get_u32(&p);
    if (version != RECORD_VERSION)
        return ra_error_set(RA_EFORMAT, "%s: craft record version %u (this build reads %d)", path, version,
                            RECORD_VERSION);
    if (g < 1 || g > RA_CRAFT_GROUPS || n < 1 || n > RA_CHUNK_MAX_TOKENS || lead > RA_CHUNK_MAX_TOKENS ||
        ctx > RA_CHUNK_MAX_TOKENS || m > RA_CRAFT_MAX_CTX_KEYS || size != record_bytes((int)g, (int)n, (int)m))
        return ra_error_set(RA_EFORMAT, "%s: craft record sizes disagree with the file's %zu bytes", path, size);
    int rc = ra_sha256(data, size - RA_STORE_HASH_BYTES, sha);
    if (rc != RA_OK)
        return rc;
    if (memcmp(sha, data + size - RA_STORE_HASH_BYTES, RA_STORE_HASH_BYTES) != 0)
        return ra_error_set(RA_EFORMAT, "%s: craft record checksum mismatch (a corrupted record)", path);
    r->n_groups = (int)g;
    r->n_tokens = (int)n;
    r->n_lead = (int)lead;
    r->n_context = (int)ctx;
    r->n_ctx_keys = (int)m;
    memcpy(r->base, p, RA_STORE_HASH_BYTES);
    p += RA_STORE_HASH_BYTES;
    r->ctx_keys = malloc((size_t)(m ? m : 1) * RA_STORE_HASH_BYTES);
    r->token_context = malloc(sizeof(float) * (size_t)g * n);
    if (!r->ctx_keys || !r->token_context) {
        ra_craft_record_free(r);
        return ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    }
    memcpy(r->ctx_keys, p, (size_t)m * RA_STORE_HASH_BYTES);
    p += (size_t)m * RA_STORE_HASH_BYTES;
    get_floats(&p, r->sink, g);
    get_floats(&p, r->context, g);
    get_floats(&p, r->self, g);
    get_floats(&p, r->token_context, (size_t)g * n);
    /* masses are fractions of a softmax: a value outside [0, 1] (or NaN) is not one */
    int bad = 0;
    for (uint32_t i = 0; i < g; i++)
        bad |= !(r->sink[i] >= 0 && r->sink[i] <= 1.001f) || !(r->context[i] >= 0 && r->context[i] <= 1.001f) ||
               !(r->self[i] >= 0 && r->self[i] <= 1.001f);
    for (size_t i = 0; i < (size_t)g * n; i++)
        bad |= !(r->token_context[i] >= 0 && r->token_context[i] <= 1.001f);
    if (bad) {
        ra_craft_record_free(r);
        return ra_error_set(RA_EFORMAT, "%s: craft record masses outside [0, 1]", path);
    }
    return RA_OK;
}

char *ra_craft_record_path(const char *chunk_path)
{
    const size_t len = strlen(chunk_path);
    const char *ext = ".rachunk";
    const size_t el = strlen(ext);
    const size_t stem = len >= el && strcmp(chunk_path + len - el, ext) == 0 ? len - el : len;
    char *out = malloc(stem + 9);
    if (out) {
        memcpy(out, chunk_path, stem);
        memcpy(out + stem, ".racraft", 9);
    }
    return out;
}

/* Reads PATH whole: RA_OK with *data NULL when it does not exist. */
static int read_whole(const char *path, uint8_t **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? RA_OK : ra_error_set(RA_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    int rc = RA_OK;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0 || sb.st_size > (1 << 30))
        rc = ra_error_set(RA_EFORMAT, "%s: not a craft record (its size)", path);
    else if (!(*data = malloc((size_t)sb.st_size + 1)))
        rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
    else if (fread(*data, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size)
        rc = ra_error_set(RA_EIO, "%s: read failed", path);
    fclose(f);
    if (rc != RA_OK) {
        free(*data);
        *data = NULL;
    } else {
        *size = (size_t)sb.st_size;
    }
    return rc;
}

int ra_craft_record_load(const struct ra_chunk *c, struct ra_craft_record *r, int *have)
{
    char *path = ra_craft_record_path(ra_chunk_path(c));
    uint8_t *data = NULL;
    size_t size = 0;
    *have = 0;
    memset(r, 0, sizeof *r);
    int rc = path ? read_whole(path, &data, &size) : ra_error_set(RA_ENOMEM, "craft: out of memory");
    if (rc == RA_OK && data) {
        rc = ra_craft_record_parse(data, size, path, r);
        if (rc == RA_OK && r->n_tokens != ra_chunk_tokens(c)) {
            ra_craft_record_free(r);
            rc = ra_error_set(RA_EFORMAT, "%s: a record of %d tokens for a chunk of %d", path, r->n_tokens,
                              ra_chunk_tokens(c));
        }
        *have = rc == RA_OK;
    }
    free(data);
    free(path);
    return rc;
}

int ra_craft_record_put(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                        const struct ra_craft_record *r)
{
    uint8_t key[RA_STORE_HASH_BYTES], *buf = NULL;
    char hex[2 * RA_STORE_HASH_BYTES + 1];
    size_t bytes = 0;
    int rc = ra_store_key(&st->id, st->rope, prefix, n_prefix, tokens, n, key);
    if (rc != RA_OK)
        return rc;
    ra_store_hex(key, hex);
    char *cpath = ra_store_chunk_path(st, hex), *path = cpath ? ra_craft_record_path(cpath) : NULL;
    free(cpath);
    if (!path)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
    if ((rc = ra_craft_record_encode(r, &buf, &bytes)) == RA_OK)
        rc = ra_store_write_file(path, buf, bytes);
    free(buf);
    free(path);
    return rc;
}

/* ------------------------------------------------------------ the recorder */

struct ra_craft_recorder {
    struct ra_hook hook;
    const struct ra_context *ctx;
    int n_seg;
    int *seg_start, *seg_len;
    int n_groups, n_layers, n_heads, n_kv_heads, head_dim, kv_dim;
    double *mass;           /* [n_seg][G][3]: sink, context, self, summed */
    double *tok;            /* per segment, [G][len] summed (offsets in tok_off) */
    size_t *tok_off;
    int *layers_in_group;   /* [G] */
    float *q, *k, *w;       /* host scratch: the pass's queries, a layer's K rows, one head's weights */
    int cap_q, cap_k;
};

static int group_of(const struct ra_craft_recorder *r, int layer)
{
    return (int)((long)layer * r->n_groups / r->n_layers);
}

static int grow(float **p, int *cap, int need)
{
    if (need <= *cap)
        return RA_OK;
    float *q = realloc(*p, sizeof *q * (size_t)need);
    if (!q)
        return ra_error_set(RA_ENOMEM, "craft: out of memory recording attention");
    *p = q;
    *cap = need;
    return RA_OK;
}

/* Layer a->layer's K rows [0, last] of the cache as f32, into r->k. */
static int cache_k(struct ra_craft_recorder *r, const struct ra_hook_args *a, int last)
{
    struct ra_backend *be = r->ctx->backend;
    const size_t rows = (size_t)last + 1, elems = rows * (size_t)r->kv_dim;
    int rc = grow(&r->k, &r->cap_k, (int)elems);
    if (rc != RA_OK)
        return rc;
    if (ra_kvcache_first(a->kv, a->layer) != 0)
        return ra_error_set(RA_EUNSUPPORTED, "craft: recording over a windowed cache");
    const void *src = ra_kvcache_k(a->kv, a->layer, 0);
    if (a->kv->dtype == RA_DTYPE_F32)
        return be->ops->download(be, r->k, src, elems * sizeof(float));
    uint16_t *tmp = malloc(elems * sizeof *tmp);
    if (!tmp)
        return ra_error_set(RA_ENOMEM, "craft: out of memory recording attention");
    rc = be->ops->download(be, tmp, src, elems * sizeof *tmp);
    for (size_t i = 0; rc == RA_OK && i < elems; i++)
        r->k[i] = ra_bf16_to_f32(tmp[i]);
    free(tmp);
    return rc;
}

/* Row P of segment S: its softmax per head, split over sink, context, self. */
static void record_row(struct ra_craft_recorder *r, int s, int g, int p, const float *q)
{
    const int start = r->seg_start[s], per = r->n_heads / r->n_kv_heads;
    const float scale = 1.0f / sqrtf((float)r->head_dim);
    double *m = r->mass + ((size_t)s * r->n_groups + g) * 3;
    double *tok = r->tok + r->tok_off[s] + (size_t)g * r->seg_len[s] + (p - start);
    for (int h = 0; h < r->n_heads; h++) {
        const float *qh = q + (size_t)h * r->head_dim;
        const int kh = h / per;
        float mx = -INFINITY;
        for (int j = 0; j <= p; j++) {
            const float *kj = r->k + (size_t)j * r->kv_dim + (size_t)kh * r->head_dim;
            float d = 0;
            for (int t = 0; t < r->head_dim; t++)
                d += qh[t] * kj[t];
            r->w[j] = d * scale;
            mx = r->w[j] > mx ? r->w[j] : mx;
        }
        double sum = 0, sink = 0, ctxm = 0;
        for (int j = 0; j <= p; j++) {
            const double e = exp((double)(r->w[j] - mx));
            sum += e;
            if (j == 0)
                sink += e;
            else if (j < start)
                ctxm += e;
        }
        m[0] += sink / sum;
        m[1] += ctxm / sum;
        m[2] += (sum - sink - ctxm) / sum;
        *tok += ctxm / sum;
    }
}

static int recorder_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct ra_craft_recorder *r = self;
    struct ra_backend *be = r->ctx->backend;
    const int qdim = r->n_heads * r->head_dim;
    int last = -1, rc;
    for (int i = 0; i < a->n; i++) {
        const int p = ra_rows_pos(a->rows, i);
        for (int s = 0; s < r->n_seg; s++)
            if (p >= r->seg_start[s] && p < r->seg_start[s] + r->seg_len[s] && p > last)
                last = p;
    }
    if (last < 0)
        return RA_OK;
    if ((rc = grow(&r->q, &r->cap_q, a->n * qdim)) != RA_OK ||
        (rc = be->ops->download(be, r->q, a->q, sizeof(float) * (size_t)a->n * qdim)) != RA_OK ||
        (rc = cache_k(r, a, last)) != RA_OK)
        return rc;
    const int g = group_of(r, a->layer);
    for (int i = 0; i < a->n; i++) {
        const int p = ra_rows_pos(a->rows, i);
        for (int s = 0; s < r->n_seg; s++)
            if (p >= r->seg_start[s] && p < r->seg_start[s] + r->seg_len[s])
                record_row(r, s, g, p, r->q + (size_t)i * qdim);
    }
    return RA_OK;
}

int ra_craft_recorder_new(struct ra_craft_recorder **out, const struct ra_context *ctx, const int *seg_start,
                          const int *seg_len, int n_seg)
{
    const struct ra_config *c = &ctx->model->config;
    struct ra_craft_recorder *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r)
        return ra_error_set(RA_ENOMEM, "craft: out of memory");
    r->ctx = ctx;
    r->n_seg = n_seg;
    r->n_layers = c->n_layers;
    r->n_groups = c->n_layers < RA_CRAFT_GROUPS ? c->n_layers : RA_CRAFT_GROUPS;
    r->n_heads = c->n_heads;
    r->n_kv_heads = c->n_kv_heads;
    r->head_dim = c->head_dim;
    r->kv_dim = ra_config_kv_dim(c);
    size_t tok = 0;
    int max_end = 1;
    r->seg_start = malloc(sizeof(int) * (size_t)(n_seg + 1));
    r->seg_len = malloc(sizeof(int) * (size_t)(n_seg + 1));
    r->tok_off = malloc(sizeof(size_t) * (size_t)(n_seg + 1));
    r->layers_in_group = calloc((size_t)r->n_groups, sizeof(int));
    for (int s = 0; r->seg_start && r->seg_len && r->tok_off && s < n_seg; s++) {
        r->seg_start[s] = seg_start[s];
        r->seg_len[s] = seg_len[s];
        r->tok_off[s] = tok;
        tok += (size_t)r->n_groups * seg_len[s];
        if (seg_start[s] + seg_len[s] > max_end)
            max_end = seg_start[s] + seg_len[s];
    }
    r->mass = calloc((size_t)(n_seg ? n_seg : 1) * r->n_groups * 3, sizeof(double));
    r->tok = calloc(tok ? tok : 1, sizeof(double));
    r->w = malloc(sizeof(float) * (size_t)max_end);
    if (!r->seg_start || !r->seg_len || !r->tok_off || !r->layers_in_group || !r->mass || !r->tok || !r->w) {
        ra_craft_recorder_free(r);
        return ra_error_set(RA_ENOMEM, "craft: out of memory");
    }
    for (int l = 0; l < r->n_layers; l++)
        r->layers_in_group[group_of(r, l)]++;
    r->hook = (struct ra_hook){ .self = r, .kv_ready = recorder_kv_ready };
    *out = r;
    return RA_OK;
}

const struct ra_hook *ra_craft_recorder_hook(struct ra_craft_recorder *r)
{
    return &r->hook;
}

int ra_craft_recorder_take(struct ra_craft_recorder *r, int s, struct ra_craft_record *out)
{
    const int n = r->seg_len[s], G = r->n_groups;
    memset(out, 0, sizeof *out);
    out->n_groups = G;
    out->n_tokens = n;
    out->token_context = malloc(sizeof(float) * (size_t)G * n);
    out->ctx_keys = malloc(RA_STORE_HASH_BYTES);
    if (!out->token_context || !out->ctx_keys) {
        ra_craft_record_free(out);
        return ra_error_set(RA_ENOMEM, "craft: out of memory");
    }
    for (int g = 0; g < G; g++) {
        const double per_row = (double)r->n_heads * r->layers_in_group[g];
        const double *m = r->mass + ((size_t)s * G + g) * 3;
        out->sink[g] = (float)(m[0] / (per_row * n));
        out->context[g] = (float)(m[1] / (per_row * n));
        out->self[g] = (float)(m[2] / (per_row * n));
        for (int t = 0; t < n; t++)
            out->token_context[(size_t)g * n + t] = (float)(r->tok[r->tok_off[s] + (size_t)g * n + t] / per_row);
    }
    return RA_OK;
}

void ra_craft_recorder_free(struct ra_craft_recorder *r)
{
    if (!r)
        return;
    free(r->seg_start);
    free(r->seg_len);
    free(r->tok_off);
    free(r->layers_in_group);
    free(r->mass);
    free(r->tok);
    free(r->q);
    free(r->k);
    free(r->w);
    free(r);
}
