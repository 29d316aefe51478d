/* InfiniGen: skewing, partial key cache, speculation and a pooled decode
 * loop; see infinigen.h and the digest's Part B. */
#include "infinigen.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kvcache.h"
#include "status.h"

void ra_infinigen_params_default(struct ra_infinigen_params *p)
{
    p->ratio = 0.3f;
    p->alpha = 5.0f;
    p->cap = 0.2f;
    p->skew = 1;
    p->oracle = 0;
    p->dense_layers = 2;
}

int ra_infinigen_dense_layers(const struct ra_infinigen_params *p, int n_layers)
{
    return p->dense_layers < 1 ? 1 : p->dense_layers > n_layers ? n_layers : p->dense_layers;
}

int ra_infinigen_n_part(float ratio, int head_dim)
{
    const int n = (int)(ratio * head_dim + 1e-4f); /* int(0.3·d) as the paper's code, 1 at least */
    return n < 1 ? 1 : n > head_dim ? head_dim : n;
}

int ra_infinigen_init(struct ra_infinigen *ig, const struct ra_config *c, const struct ra_infinigen_params *p,
                      int capacity)
{
    return ra_infinigen_init_on(ig, c, p, capacity, NULL);
}

int ra_infinigen_init_on(struct ra_infinigen *ig, const struct ra_config *c, const struct ra_infinigen_params *p,
                         int capacity, struct ra_backend *be)
{
    memset(ig, 0, sizeof *ig);
    if (!(p->ratio > 0 && p->ratio <= 1) || isnan(p->alpha) || !(p->cap > 0) || capacity <= 0)
        return ra_error_set(RA_EINVAL, "infinigen: bad parameters (ratio %g in (0, 1], alpha %g, cap %g > 0, "
                            "capacity %d > 0)", p->ratio, p->alpha, p->cap, capacity);
    const int d = c->head_dim, L = c->n_layers, G = c->n_kv_heads;
    ig->c = *c;
    ig->p = *p;
    ig->p.dense_layers = ra_infinigen_dense_layers(p, L);
    ig->n_part = ra_infinigen_n_part(p->ratio, d);
    ig->capacity = capacity;
    ig->A = calloc((size_t)L * G * d * d, sizeof(float));
    ig->idx = malloc((size_t)L * G * ig->n_part * sizeof(int32_t));
    const size_t kp_count = (size_t)L * capacity * G * ig->n_part;
    ig->kp = be ? be->ops->alloc_mem(be, kp_count * sizeof(float), RA_MEM_DEVICE) /* zeroed */
                : calloc(kp_count, sizeof(float));
    ig->kp_backend = ig->kp ? be : NULL;
    ig->kp_token = malloc((size_t)L * capacity * sizeof(int32_t));
    if (!ig->A || !ig->idx || !ig->kp || !ig->kp_token) {
        ra_infinigen_free(ig);
        return ra_error_set(RA_ENOMEM, "infinigen: out of memory for %d layers of %d slots", L, capacity);
    }
    for (int l = 0; l < L; l++)
        for (int g = 0; g < G; g++) {
            float *A = ra_infinigen_A(ig, l, g);
            int32_t *idx = ra_infinigen_idx(ig, l, g);
            for (int i = 0; i < d; i++)
                A[i * d + i] = 1;
            for (int j = 0; j < ig->n_part; j++)
                idx[j] = j;
        }
    for (size_t i = 0; i < (size_t)L * capacity; i++)
        ig->kp_token[i] = -1;
    return RA_OK;
}

void ra_infinigen_free(struct ra_infinigen *ig)
{
    free(ig->A);
    free(ig->idx);
    if (ig->kp_backend)
        ig->kp_backend->ops->release_mem(ig->kp_backend, ig->kp, RA_MEM_DEVICE);
    else
        free(ig->kp);
    free(ig->kp_token);
    memset(ig, 0, sizeof *ig);
}

/* y[j] = Σ_i x[i]·A[i][j] for one head (y and x distinct). */
static void skew_row(float *y, const float *x, const float *A, int d)
{
    for (int j = 0; j < d; j++)
        y[j] = 0;
    for (int i = 0; i < d; i++) {
        const float xi = x[i];
        const float *a = A + (size_t)i * d;
        for (int j = 0; j < d; j++)
            y[j] += xi * a[j];
    }
}

void ra_infinigen_skew(const struct ra_infinigen *ig, int layer, float *x, int n, int ld, int heads)
{
    const int d = ig->c.head_dim, group = heads / ig->c.n_kv_heads;
    float tmp[d];
    for (int t = 0; t < n; t++)
        for (int h = 0; h < heads; h++) {
            float *row = x + (size_t)t * ld + (size_t)h * d;
            skew_row(tmp, row, ra_infinigen_A(ig, layer, h / group), d);
            memcpy(row, tmp, sizeof tmp);
        }
}

/* Sorting helpers: (value, index) pairs, largest value first, ties by index. */
struct ranked {
    double v;
    int32_t i;
};

static int by_value_desc(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->v != y->v)
        return x->v < y->v ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i);
}

static int by_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* A of KV head g: the right singular vectors of the group's stacked queries
 * (rows n·group), in the order of decreasing singular values. */
static int svd_head(struct ra_infinigen *ig, int layer, int g, const float *q, int n)
{
    const int d = ig->c.head_dim, H = ig->c.n_heads, group = H / ig->c.n_kv_heads, rows = n * group;
    float *a = malloc((size_t)rows * d * sizeof(float)), *s = malloc((size_t)d * sizeof(float));
    float *vt = malloc((size_t)d * d * sizeof(float)), *superb = malloc((size_t)d * sizeof(float));
    int rc = RA_OK;
    if (!a || !s || !vt || !superb) {
        rc = ra_error_set(RA_ENOMEM, "infinigen: out of memory for the SVD of %d×%d", rows, d);
        goto out;
    }
    for (int t = 0; t < n; t++)
        for (int j = 0; j < group; j++)
            memcpy(a + ((size_t)t * group + j) * d, q + (size_t)t * H * d + (size_t)(g * group + j) * d,
                   (size_t)d * sizeof(float));
    const lapack_int info = LAPACKE_sgesvd(LAPACK_ROW_MAJOR, 'N', 'A', rows, d, a, d, s, NULL, 1, vt, d, superb);
    if (info != 0) {
        rc = ra_error_set(RA_EBACKEND, "infinigen: sgesvd of layer %d KV head %d failed (info %d)", layer, g,
                          (int)info);
        goto out;
    }
    float *A = ra_infinigen_A(ig, layer, g);
    for (int i = 0; i < d; i++) /* A = V = VTᵀ */
        for (int j = 0; j < d; j++)
            A[i * d + j] = vt[j * d + i];
out:
    free(a);
    free(s);
    free(vt);
    free(superb);
    return rc;
}

int ra_infinigen_skew_layer(struct ra_infinigen *ig, int layer, const float *q, const float *k, int n)
{
    const struct ra_config *c = &ig->c;
    const int d = c->head_dim, H = c->n_heads, G = c->n_kv_heads, group = H / G, kvd = G * d;
    if (layer < 0 || layer >= c->n_layers || n <= 0)
        return ra_error_set(RA_EINVAL, "infinigen: skew of layer %d over %d tokens", layer, n);
    int rc;
    for (int g = 0; g < G; g++) {
        if (ig->p.skew && (rc = svd_head(ig, layer, g, q, n)) != RA_OK)
            return rc;
        /* the partial index: column sums of |Q̃| + |K̃| over the tokens */
        const float *A = ra_infinigen_A(ig, layer, g);
        double sum[d];
        float y[d];
        memset(sum, 0, sizeof sum);
        for (int t = 0; t < n; t++) {
            for (int j = 0; j < group; j++) {
                skew_row(y, q + (size_t)t * H * d + (size_t)(g * group + j) * d, A, d);
                for (int i = 0; i < d; i++)
                    sum[i] += fabsf(y[i]);
            }
            skew_row(y, k + (size_t)t * kvd + (size_t)g * d, A, d);
            for (int i = 0; i < d; i++)
                sum[i] += fabsf(y[i]);
        }
        struct ranked r[d];
        for (int i = 0; i < d; i++)
            r[i] = (struct ranked){ sum[i], i };
        qsort(r, d, sizeof r[0], by_value_desc);
        int32_t *idx = ra_infinigen_idx(ig, layer, g);
        for (int j = 0; j < ig->n_part; j++)
            idx[j] = r[j].i;
        qsort(idx, ig->n_part, sizeof idx[0], by_i32);
    }
    return RA_OK;
}

int ra_infinigen_kp_store(struct ra_infinigen *ig, int layer, int slot, int token, const float *k_rot)
{
    if (layer < 0 || layer >= ig->c.n_layers || slot < 0 || slot >= ig->capacity)
        return ra_error_set(RA_EINVAL, "infinigen: partial key row %d of layer %d out of range (%d rows)", slot,
                            layer, ig->capacity);
    const int d = ig->c.head_dim;
    float *dst = ra_infinigen_kp(ig, layer, slot), y[d];
    for (int g = 0; g < ig->c.n_kv_heads; g++) {
        const int32_t *idx = ra_infinigen_idx(ig, layer, g);
        skew_row(y, k_rot + (size_t)g * d, ra_infinigen_A(ig, layer, g), d);
        for (int j = 0; j < ig->n_part; j++)
            dst[g * ig->n_part + j] = y[idx[j]];
    }
    ig->kp_token[(size_t)layer * ig->capacity + slot] = token;
    return RA_OK;
}

int ra_infinigen_speculate(const struct ra_infinigen *ig, int layer, const float *q_rot, int n_slots,
                           int32_t *sel, int *n_sel)
{
    const struct ra_config *c = &ig->c;
    const int d = c->head_dim, H = c->n_heads, G = c->n_kv_heads, group = H / G, np = ig->n_part;
    if (layer < 0 || layer >= c->n_layers || n_slots < 0 || n_slots > ig->capacity)
        return ra_error_set(RA_EINVAL, "infinigen: speculation for layer %d over %d rows (%d)", layer, n_slots,
                            ig->capacity);
    *n_sel = 0;
    if (n_slots == 0)
        return RA_OK;
    float *score = malloc((size_t)H * n_slots * sizeof(float));
    struct ranked *r = malloc((size_t)n_slots * sizeof *r);
    if (!score || !r) {
        free(score);
        free(r);
        return ra_error_set(RA_ENOMEM, "infinigen: out of memory for %d scores", H * n_slots);
    }
    /* partial scores, on the scale of the real logits */
    const float scale = 1.0f / sqrtf((float)d);
    int64_t counted = 0;
    for (int h = 0; h < H; h++) {
        const int g = h / group;
        const int32_t *idx = ra_infinigen_idx(ig, layer, g);
        float y[d], qp[np];
        skew_row(y, q_rot + (size_t)h * d, ra_infinigen_A(ig, layer, g), d);
        for (int j = 0; j < np; j++)
            qp[j] = y[idx[j]];
        float *s = score + (size_t)h * n_slots, max = -INFINITY;
        for (int t = 0; t < n_slots; t++) {
            const float *kp = ra_infinigen_kp(ig, layer, t) + (size_t)g * np;
            float acc = 0;
            for (int j = 0; j < np; j++)
                acc += qp[j] * kp[j];
            s[t] = acc * scale;
            if (s[t] > max)
                max = s[t];
        }
        const float floor = max - ig->p.alpha; /* -inf when alpha is +inf: every token */
        for (int t = 0; t < n_slots; t++) {
            counted += s[t] > floor || s[t] == max;
            s[t] -= max; /* relative to the head's maximum, which is what the threshold compares */
        }
    }
    /* one count for every head: the mean, truncated, then the cap */
    int n = (int)(counted / H);
    if (ig->p.cap < 1) {
        int most = (int)(ig->p.cap * n_slots);
        if (n > most)
            n = most;
    }
    if (n < 1)
        n = 1;
    if (n > n_slots)
        n = n_slots;
    for (int g = 0; g < G; g++) {
        /* a token ranks by the group's largest score relative to each head's maximum (heads'
           scales differ: by raw scores one sharp head would starve its neighbours) */
        for (int t = 0; t < n_slots; t++) {
            float best = -INFINITY;
            for (int j = 0; j < group; j++)
                best = fmaxf(best, score[(size_t)(g * group + j) * n_slots + t]);
            r[t] = (struct ranked){ best, t };
        }
        if (n < n_slots)
            qsort(r, n_slots, sizeof r[0], by_value_desc);
        int32_t *out = sel + (size_t)g * n;
        for (int i = 0; i < n; i++)
            out[i] = r[i].i;
        qsort(out, n, sizeof out[0], by_i32); /* slot order: full selection gathers the cache as it is */
    }
    *n_sel = n;
    free(score);
    free(r);
    return RA_OK;
}

size_t ra_infinigen_kp_bytes(const struct ra_infinigen *ig)
{
    return (size_t)ig->c.n_layers * ig->capacity * ig->c.n_kv_heads * ig->n_part * sizeof(float);
}

int ra_infinigen_check_pool(const struct ra_infinigen *ig, const struct ra_kvpool *pool)
{
    if (pool->capacity > ig->capacity || pool->n_layers != ig->c.n_layers)
        return ra_error_set(RA_ERANGE, "infinigen: pool of %d slots × %d layers, partial key cache of %d × %d",
                            pool->capacity, pool->n_layers, ig->capacity, ig->c.n_layers);
    for (int l = 0; l < pool->n_layers; l++)
        for (int s = 0; s < pool->capacity; s++) {
            const int32_t a = pool->token[(size_t)l * pool->capacity + s];
            const int32_t b = ig->kp_token[(size_t)l * ig->capacity + s];
            if (a != b)
                return ra_error_set(RA_ERANGE, "infinigen: layer %d slot %d holds token %d in the pool, %d in Kp",
                                    l, s, a, b);
        }
    return RA_OK;
}

/* ---------------------------------------------------------------- metrics */

double ra_infinigen_recall(const struct ra_config *c, const float *q, const float *k, int n, const int32_t *sel,
                           int n_sel, double *recall)
{
    const int d = c->head_dim, H = c->n_heads, G = c->n_kv_heads, group = H / G, kvd = G * d;
    double *p = malloc((size_t)n * sizeof(double)), mean = 0;
    if (!p)
        return NAN;
    for (int h = 0; h < H; h++) {
        const int g = h / group;
        double max = -INFINITY, sum = 0, kept;
        for (int t = 0; t < n; t++) {
            double s = 0;
            for (int i = 0; i < d; i++)
                s += (double)q[h * d + i] * k[(size_t)t * kvd + g * d + i];
            p[t] = s / sqrt((double)d);
            max = fmax(max, p[t]);
        }
        for (int t = 0; t < n; t++)
            sum += p[t] = exp(p[t] - max);
        kept = p[n - 1];
        for (int i = 0; i < n_sel; i++)
            kept += p[sel[(size_t)g * n_sel + i]];
        if (recall)
            recall[h] = kept / sum;
        mean += kept / sum / H;
    }
    free(p);
    return mean;
}

double ra_infinigen_kl(const float *logits_p, const float *logits_q, int n)
{
    double mp = -INFINITY, mq = -INFINITY, zp = 0, zq = 0, kl = 0;
    for (int i = 0; i < n; i++) {
        mp = fmax(mp, logits_p[i]);
        mq = fmax(mq, logits_q[i]);
    }
    for (int i = 0; i < n; i++) {
        zp += exp(logits_p[i] - mp);
        zq += exp(logits_q[i] - mq);
    }
    const double lzp = mp + log(zp), lzq = mq + log(zq);
    for (int i = 0; i < n; i++) {
        const double lp = logits_p[i] - lzp, lq = logits_q[i] - lzq;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0;
}
