/* Run contexts and their hook lists (src/context.h).
 *
 * Two contexts over one model, used interleaved (f32 and bf16 compute, on two
 * backends; one with hooks, one without), give bit for bit the logits each
 * gives alone: a context's run state (the backend's weight copies, the
 * workspace) is its own. The hooks run in list order at every point, see the
 * fresh fp32 K and V (before a bf16 cache rounds them) and the layer's
 * activations, compose their attend choices as a pipeline, can be removed,
 * and a failing one stops the pass with its status. A hook can end a pass
 * after a layer (RA_HOOK_STOP) and narrow the rows the rest of it computes. */
#include "half.h"
#include "random_model.h"
#include "ra_core.h"
#include "test.h"

#include <math.h>
#include <string.h>

#define STEPS 24

/* ------------------------------------------------------------ two contexts */

/* Greedy decoding of STEPS tokens after a prompt of N_PROMPT on CX alone; logits[STEPS+1][V]. */
static void greedy(struct ra_context *cx, const int32_t *prompt, int n_prompt, float *logits)
{
    const struct ra_config *c = &cx->model->config;
    const int V = c->vocab_size;
    struct ra_kvcache kv;
    CHECK_OK(ra_kvcache_init(&kv, cx->backend, c->n_layers, ra_config_kv_dim(c), n_prompt + STEPS));
    CHECK_OK(ra_forward_span(cx, prompt, 0, n_prompt, &kv, logits));
    for (int s = 0; s < STEPS && !test_failures; s++) {
        const int32_t t = ra_argmax(logits + (size_t)s * V, V);
        CHECK_OK(ra_forward_span(cx, &t, n_prompt + s, 1, &kv, logits + (size_t)(s + 1) * V));
    }
    ra_kvcache_free(&kv);
}

/* The same on A and B step by step, alternating: each must reproduce its own run. */
static void interleaved(struct ra_context *a, struct ra_context *b, const int32_t *prompt, int n_prompt,
                        const float *want_a, const float *want_b, const char *what)
{
    const struct ra_config *c = &a->model->config;
    const int V = c->vocab_size, kvd = ra_config_kv_dim(c);
    struct ra_context *cx[2] = { a, b };
    const float *want[2] = { want_a, want_b };
    struct ra_kvcache kv[2];
    float *logits = malloc(sizeof(float) * (size_t)V * 2);
    int same = 1;
    for (int i = 0; i < 2; i++)
        CHECK_OK(ra_kvcache_init(&kv[i], cx[i]->backend, c->n_layers, kvd, n_prompt + STEPS));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(ra_forward_span(cx[i], prompt, 0, n_prompt, &kv[i], logits + (size_t)i * V));
        same &= memcmp(logits + (size_t)i * V, want[i], sizeof(float) * (size_t)V) == 0;
    }
    for (int s = 0; s < STEPS && !test_failures; s++)
        for (int i = 0; i < 2; i++) {
            const int32_t t = ra_argmax(want[i] + (size_t)s * V, V);
            CHECK_OK(ra_forward_span(cx[i], &t, n_prompt + s, 1, &kv[i], logits + (size_t)i * V));
            same &= memcmp(logits + (size_t)i * V, want[i] + (size_t)(s + 1) * V, sizeof(float) * (size_t)V) == 0;
        }
    printf("interleaved contexts, %s: %s\n", what, same ? "the logits of each alone, bit for bit" : "DIFFER");
    CHECK(same);
    for (int i = 0; i < 2; i++)
        ra_kvcache_free(&kv[i]);
    free(logits);
}

/* ------------------------------------------------------------ hooks */

enum { MAX_LOG = 4096 };

/* A test hook: logs every call as (id, point, layer), checks what it sees. */
struct probe_hook {
    struct ra_hook hook;
    int id;
    int fail_layer;         /* kv_ready of this layer returns RA_EINVAL; -1: never */
    float *own_k, *own_v;   /* attend: a copy of the rows it received, handed on (NULL: no attend) */
    const float *expect_k;  /* attend: the rows it must receive (the previous attend hook's copy) */
    int kv_checked;         /* kv_ready calls whose fresh K and V matched the cache */
};

static struct {
    int id, point, layer;
} hook_log[MAX_LOG];
static int n_log;

static void log_call(const struct probe_hook *h, int point, int layer)
{
    if (n_log < MAX_LOG)
        hook_log[n_log].id = h->id, hook_log[n_log].point = point, hook_log[n_log++].layer = layer;
}

static int probe_begin(void *self, const struct ra_hook_args *a)
{
    struct probe_hook *h = self;
    log_call(h, 0, a->layer);
    CHECK(a->x && !a->xa && !a->q && !a->k && !a->v); /* the layer's input only */
    return RA_OK;
}

/* The fresh rows: fp32, and what the cache holds (rounded to bf16 in a bf16 cache). */
static int probe_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct probe_hook *h = self;
    log_call(h, 1, a->layer);
    CHECK(a->x && a->xa && a->q && a->k && a->v);
    const struct ra_kvcache *kv = a->kv;
    const size_t count = (size_t)a->n * kv->kv_dim;
    int ok = 1;
    for (size_t i = 0; i < count; i++) {
        const void *ck = ra_kvcache_k(kv, a->layer, a->start), *cv = ra_kvcache_v(kv, a->layer, a->start);
        if (kv->dtype == RA_DTYPE_F32)
            ok &= ((const float *)ck)[i] == a->k[i] && ((const float *)cv)[i] == a->v[i];
        else
            ok &= ((const uint16_t *)ck)[i] == ra_f32_to_bf16(a->k[i]) &&
                  ((const uint16_t *)cv)[i] == ra_f32_to_bf16(a->v[i]);
    }
    h->kv_checked += ok;
    return a->layer == h->fail_layer ? ra_error_set(RA_EINVAL, "test hook %d: layer %d", h->id, a->layer) : RA_OK;
}

static int probe_attend(void *self, const struct ra_hook_args *a, const float **k, const float **v, int *rows)
{
    struct probe_hook *h = self;
    log_call(h, 2, a->layer);
    if (h->expect_k)
        CHECK(*k == h->expect_k);
    const size_t bytes = (size_t)*rows * ra_kvcache_row_bytes(a->kv);
    memcpy(h->own_k, *k, bytes);
    memcpy(h->own_v, *v, bytes);
    *k = h->own_k;
    *v = h->own_v;
    return RA_OK;
}

static int probe_end(void *self, const struct ra_hook_args *a)
{
    struct probe_hook *h = self;
    log_call(h, 3, a->layer);
    CHECK(a->x && !a->k);
    return RA_OK;
}

static void probe_init(struct probe_hook *h, int id, size_t attend_bytes)
{
    memset(h, 0, sizeof *h);
    h->id = id;
    h->fail_layer = -1;
    h->hook = (struct ra_hook){ .self = h, .layer_begin = probe_begin, .kv_ready = probe_kv_ready,
                                .layer_end = probe_end };
    if (attend_bytes) {
        h->hook.attend = probe_attend;
        h->own_k = malloc(attend_bytes);
        h->own_v = malloc(attend_bytes);
    }
}

/* The log of one pass of L layers with hooks IDS[n] (ATTENDS of them with attend):
 * per layer every begin in list order, every kv_ready, the attends, every end. */
static int log_is(const int *ids, int n, const int *attends, int n_att, int L)
{
    int k = 0;
    for (int l = 0; l < L; l++)
        for (int point = 0; point < 4; point++) {
            const int *who = point == 2 ? attends : ids, count = point == 2 ? n_att : n;
            for (int i = 0; i < count; i++, k++)
                if (k >= n_log || hook_log[k].id != who[i] || hook_log[k].point != point || hook_log[k].layer != l)
                    return 0;
        }
    return k == n_log;
}

static void check_hooks(const struct ra_model *m, enum ra_dtype kv_dtype)
{
    const struct ra_config *c = &m->config;
    const int V = c->vocab_size, n = 19, L = c->n_layers;
    int32_t tokens[19 + 1];
    for (int i = 0; i <= n; i++)
        tokens[i] = test_rand_int(0, V - 1);
    struct ra_backend *be;
    struct ra_context plain, hooked;
    struct ra_kvcache kv;
    float *want = malloc(sizeof(float) * (size_t)V * 2), *got = malloc(sizeof(float) * (size_t)V * 2);
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 2 }));
    CHECK_OK(ra_context_init(&plain, m, be));
    CHECK_OK(ra_context_init(&hooked, m, be));
    /* a prompt span and a decode step without hooks */
    CHECK_OK(ra_kvcache_init_dtype(&kv, be, L, ra_config_kv_dim(c), n + 1, kv_dtype));
    CHECK_OK(ra_forward_span(&plain, tokens, 0, n, &kv, want));
    CHECK_OK(ra_forward_span(&plain, tokens + n, n, 1, &kv, want + V));
    ra_kvcache_free(&kv);

    /* three hooks, the last two with attend: the third receives the second's rows */
    struct probe_hook h[3];
    const size_t rows_bytes = (size_t)(n + 1) * ra_kv_row_bytes(ra_config_kv_dim(c), kv_dtype);
    probe_init(&h[0], 1, 0);
    probe_init(&h[1], 2, rows_bytes);
    probe_init(&h[2], 3, rows_bytes);
    h[2].expect_k = h[1].own_k;
    for (int i = 0; i < 3; i++)
        CHECK_OK(ra_context_hook_add(&hooked, &h[i].hook));
    CHECK(ra_context_hook_add(&hooked, &h[1].hook) == RA_EINVAL && hooked.n_hooks == 3);
    CHECK_OK(ra_kvcache_init_dtype(&kv, be, L, ra_config_kv_dim(c), n + 1, kv_dtype));
    n_log = 0;
    CHECK_OK(ra_forward_span(&hooked, tokens, 0, n, &kv, got));
    const int all[3] = { 1, 2, 3 }, att[2] = { 2, 3 };
    CHECK(log_is(all, 3, att, 2, L));
    for (int i = 0; i < 3; i++)
        CHECK(h[i].kv_checked == L);
    /* the hooks' rows are copies of the cache's: the same logits */
    CHECK(memcmp(got, want, sizeof(float) * (size_t)V) == 0);

    /* removed: the others keep their order */
    ra_context_hook_remove(&hooked, &h[1].hook);
    h[2].expect_k = NULL;
    n_log = 0;
    CHECK_OK(ra_forward_span(&hooked, tokens + n, n, 1, &kv, got + V));
    const int left[2] = { 1, 3 }, left_att[1] = { 3 };
    CHECK(log_is(left, 2, left_att, 1, L));
    CHECK(memcmp(got + V, want + V, sizeof(float) * (size_t)V) == 0);

    /* a failing hook stops the pass with its status; the hooks after it do not run there */
    h[0].fail_layer = 1;
    n_log = 0;
    CHECK(ra_forward_span(&hooked, tokens, 0, n, &kv, got) == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "test hook 1: layer 1") != NULL);
    CHECK(n_log > 0 && hook_log[n_log - 1].id == 1 && hook_log[n_log - 1].point == 1 &&
          hook_log[n_log - 1].layer == 1);
    printf("hooks, %s KV: list order at every point, fresh fp32 K and V, attend as a pipeline, removal, "
           "failure: %s\n", ra_dtype_name(kv_dtype), test_failures ? "FAIL" : "ok");

    /* a full list */
    struct probe_hook more[RA_CONTEXT_MAX_HOOKS];
    int rc = RA_OK;
    for (int i = 0; i < RA_CONTEXT_MAX_HOOKS && rc == RA_OK; i++) {
        probe_init(&more[i], 10 + i, 0);
        rc = ra_context_hook_add(&plain, &more[i].hook);
    }
    CHECK(rc == RA_OK && ra_context_hook_add(&plain, &h[0].hook) == RA_ERANGE);

    ra_kvcache_free(&kv);
    for (int i = 0; i < 3; i++)
        free(h[i].own_k), free(h[i].own_v);
    ra_context_free(&hooked);
    ra_context_free(&plain);
    ra_backend_free(be);
    free(want);
    free(got);
}

/* ------------------------------------------------------------ stop and narrow */

/* Ends the pass at kv_ready of layer stop_layer; narrows to rows keep[n_keep] after layer narrow_layer;
 * records the rows each layer computed. */
struct cut_hook {
    struct ra_hook hook;
    int stop_layer, narrow_layer;
    const int32_t *keep;
    int n_keep;
    int seen_n[16];          /* per layer: a->n at kv_ready (0: not run) */
    int32_t seen_pos[16][64]; /* and their positions */
};

static int cut_kv_ready(void *self, const struct ra_hook_args *a)
{
    struct cut_hook *h = self;
    h->seen_n[a->layer] = a->n;
    for (int i = 0; i < a->n && i < 64; i++)
        h->seen_pos[a->layer][i] = ra_rows_pos(a->rows, i);
    return a->layer == h->stop_layer ? RA_HOOK_STOP : RA_OK;
}

static int cut_narrow(void *self, const struct ra_hook_args *a, int32_t *keep, int *n_keep)
{
    struct cut_hook *h = self;
    if (a->layer != h->narrow_layer)
        return RA_OK;
    CHECK(*n_keep == a->n);
    memcpy(keep, h->keep, sizeof *keep * (size_t)h->n_keep);
    *n_keep = h->n_keep;
    return RA_OK;
}

/* Layer L's K and V rows [0, n) of KV on the host, as bytes. */
static void *layer_rows(const struct ra_kvcache *kv, int l, int n, int v)
{
    const size_t bytes = (size_t)n * ra_kvcache_row_bytes(kv);
    void *out = malloc(bytes);
    CHECK_OK(kv->backend->ops->download(kv->backend, out, v ? kv->v[l] : kv->k[l], bytes));
    return out;
}

static int same_layer(const struct ra_kvcache *a, const struct ra_kvcache *b, int l, int n)
{
    int same = 1;
    for (int v = 0; v < 2; v++) {
        void *x = layer_rows(a, l, n, v), *y = layer_rows(b, l, n, v);
        same &= memcmp(x, y, (size_t)n * ra_kvcache_row_bytes(a)) == 0;
        free(x);
        free(y);
    }
    return same;
}

/* A hook ends a pass at a layer's kv_ready: layers up to it are the full
 * pass's, the later ones untouched, no logits. A narrow hook after layer 0
 * over a cache the full pass filled: the rest of the pass runs the kept rows
 * only (at their positions) and, since every other row is in the cache
 * already, gives back the full pass's logits (within rounding: the GEMMs
 * over fewer rows may sum in another order). */
static void check_stop_narrow(const struct ra_model *m, enum ra_dtype kv_dtype)
{
    const struct ra_config *c = &m->config;
    const int V = c->vocab_size, n = 23, L = c->n_layers, kvd = ra_config_kv_dim(c);
    int32_t tokens[23];
    for (int i = 0; i < n; i++)
        tokens[i] = test_rand_int(0, V - 1);
    struct ra_backend *be;
    struct ra_context plain, cut;
    struct ra_kvcache full, kv;
    float *want = malloc(sizeof(float) * (size_t)V), *got = malloc(sizeof(float) * (size_t)V);
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 2, .compute = RA_COMPUTE_F32 }));
    CHECK_OK(ra_context_init(&plain, m, be));
    CHECK_OK(ra_context_init(&cut, m, be));
    CHECK_OK(ra_kvcache_init_dtype(&full, be, L, kvd, n, kv_dtype));
    CHECK_OK(ra_forward_span(&plain, tokens, 0, n, &full, want));

    struct cut_hook h = { .stop_layer = 1, .narrow_layer = -1 };
    h.hook = (struct ra_hook){ .self = &h, .kv_ready = cut_kv_ready, .narrow = cut_narrow };
    CHECK_OK(ra_context_hook_add(&cut, &h.hook));
    CHECK_OK(ra_kvcache_init_dtype(&kv, be, L, kvd, n, kv_dtype));
    for (int i = 0; i < V; i++)
        got[i] = -7.0f;
    CHECK_OK(ra_forward_span(&cut, tokens, 0, n, &kv, got));
    int stopped = got[0] == -7.0f && got[V - 1] == -7.0f && h.seen_n[1] == n && h.seen_n[2] == 0;
    for (int l = 0; l < L; l++) {
        void *k = layer_rows(&kv, l, n, 0);
        int zero = 1;
        for (size_t i = 0; i < (size_t)n * ra_kvcache_row_bytes(&kv); i++)
            zero &= ((unsigned char *)k)[i] == 0;
        free(k);
        stopped &= l <= 1 ? same_layer(&kv, &full, l, n) : zero;
    }
    printf("stop at layer 1's kv_ready, %s KV: layers 0-1 the full pass's, the others untouched, no logits: %s\n",
           ra_dtype_name(kv_dtype), stopped ? "ok" : "FAIL");
    CHECK(stopped);

    /* narrowed after layer 0 to every third row and the last (the hook leaves it out: the pass adds it) */
    int32_t keep[23];
    int nk = 0;
    for (int i = 1; i < n - 1; i += 3)
        keep[nk++] = i;
    memset(&h.seen_n, 0, sizeof h.seen_n);
    h.stop_layer = -1, h.narrow_layer = 0, h.keep = keep, h.n_keep = nk;
    CHECK_OK(ra_forward_span(&cut, tokens, 0, n, &full, got));
    int narrowed = h.seen_n[0] == n;
    for (int l = 1; l < L; l++) {
        narrowed &= h.seen_n[l] == nk + 1 && h.seen_pos[l][nk] == n - 1;
        for (int i = 0; i < nk; i++)
            narrowed &= h.seen_pos[l][i] == keep[i];
    }
    double err = 0;
    for (int i = 0; i < V; i++)
        err = fmax(err, fabs((double)got[i] - want[i]));
    printf("narrow after layer 0 to %d of %d rows, %s KV: later layers computed those rows (and the last), logits "
           "within %.2g of the full pass's: %s\n", nk + 1, n, ra_dtype_name(kv_dtype), err,
           narrowed && err < 1e-4 ? "ok" : "FAIL");
    CHECK(narrowed && err < 1e-4);

    /* a hook keeping no row is refused */
    h.n_keep = 0;
    CHECK(ra_forward_span(&cut, tokens, 0, n, &full, got) == RA_EINVAL);
    ra_kvcache_free(&kv);
    ra_kvcache_free(&full);
    ra_context_free(&cut);
    ra_context_free(&plain);
    ra_backend_free(be);
    free(want);
    free(got);
}

/* One model, contexts on an f32 and a bf16 backend, and one with an observer hook. */
static void check_contexts(const struct ra_model *m, const char *name)
{
    const struct ra_config *c = &m->config;
    const int V = c->vocab_size, n = 21;
    int32_t prompt[21];
    for (int i = 0; i < n; i++)
        prompt[i] = test_rand_int(0, V - 1);
    struct ra_backend *bf, *bb;
    struct ra_context cf, cb, ch;
    const size_t bytes = sizeof(float) * (size_t)V * (STEPS + 1);
    float *lf = malloc(bytes), *lb = malloc(bytes);
    CHECK_OK(ra_backend_open(&bf, "cpu", &(struct ra_backend_params){ .threads = 2, .compute = RA_COMPUTE_F32 }));
    CHECK_OK(ra_backend_open(&bb, "cpu", &(struct ra_backend_params){ .threads = 2, .compute = RA_COMPUTE_BF16 }));
    CHECK_OK(ra_context_init(&cf, m, bf));
    CHECK_OK(ra_context_init(&cb, m, bb));
    greedy(&cf, prompt, n, lf);
    greedy(&cb, prompt, n, lb);
    char label[160], unit[128];
    ra_backend_cpu_describe_linear(bb, unit, sizeof unit);
    snprintf(label, sizeof label, "%s f32 and bf16 compute (%s)", name, unit);
    interleaved(&cf, &cb, prompt, n, lf, lb, label);

    struct probe_hook h;
    probe_init(&h, 1, 0);
    CHECK_OK(ra_context_init(&ch, m, bf));
    CHECK_OK(ra_context_hook_add(&ch, &h.hook));
    n_log = 0;
    snprintf(label, sizeof label, "%s f32 with and without a hook", name);
    interleaved(&cf, &ch, prompt, n, lf, lf, label);
    CHECK(n_log == MAX_LOG || n_log == 3 * c->n_layers * (STEPS + 1));
    ra_context_free(&ch);

    ra_context_free(&cf);
    ra_context_free(&cb);
    ra_backend_free(bf);
    ra_backend_free(bb);
    free(lf);
    free(lb);
}

int main(void)
{
    struct ra_model m;
    const struct ra_config gqa = { .dim = 64, .hidden_dim = 160, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                                   .vocab_size = 211, .seq_len = 128, .rope_theta = 10000.0f, .norm_eps = 1e-5f };
    test_random_model(&m, &gqa, RA_DTYPE_F32, 1.0f);
    check_hooks(&m, RA_DTYPE_F32);
    check_hooks(&m, RA_DTYPE_BF16);
    check_stop_narrow(&m, RA_DTYPE_F32);
    check_stop_narrow(&m, RA_DTYPE_BF16);
    check_contexts(&m, "random f32 weights,");
    ra_model_free(&m);
    const char *s260k = test_fixture("stories260K.bin");
    if (s260k) {
        CHECK_OK(ra_model_load(&m, s260k));
        if (!test_failures)
            check_contexts(&m, "stories260K,");
        ra_model_free(&m);
    }
    return test_result("test_forward_hooks");
}
