/* The trained stories260K checkpoint reproduces the reference llama2.c run:
 * logits of the first 8 positions, then 200 greedy tokens from BOS. */
#include "ra_core.h"
#include "test.h"

#define VOCAB 512
#define N_IDS 200

int main(void)
{
    const char *model = test_fixture("stories260K.bin");
    const char *ids_path = test_fixture("stories260K.bos.greedy200.ids");
    const char *logits_path = test_fixture("stories260K.bos.logits8.f32");
    if (!model || !ids_path || !logits_path)
        return test_failures ? test_result("test_golden") : TEST_SKIP;

    static float ref_logits[8][VOCAB], logits[VOCAB];
    int32_t expected[N_IDS], got[N_IDS];
    FILE *f = fopen(logits_path, "rb");
    CHECK(f && fread(ref_logits, sizeof ref_logits, 1, f) == 1);
    if (f)
        fclose(f);
    CHECK(test_read_ids(ids_path, expected, N_IDS) == N_IDS);

    struct ra_model m;
    struct ra_backend *be;
    struct ra_context cx;
    struct ra_kvcache kv;
    CHECK_OK(ra_model_load(&m, model));
    CHECK(m.config.dim == 64 && m.config.n_layers == 5 && m.config.n_kv_heads == 4 && m.weights.tied);
    CHECK_OK(ra_backend_open(&be, "cpu", &(struct ra_backend_params){ .threads = 2 }));
    CHECK_OK(ra_context_init(&cx, &m, be));
    CHECK_OK(ra_kvcache_init(&kv, be, m.config.n_layers, ra_config_kv_dim(&m.config), N_IDS + 1));
    if (test_failures)
        return test_result("test_golden");

    /* Step by step, as the reference ran: feed BOS, then each argmax. */
    int32_t token = 1;
    for (int pos = 0; pos < N_IDS; pos++) {
        CHECK_OK(ra_forward_span(&cx, &token, pos, 1, &kv, logits));
        if (pos < 8) {
            double diff = test_max_rel_diff(logits, ref_logits[pos], VOCAB);
            if (diff > 1e-4)
                fprintf(stderr, "position %d: logits differ from the reference by %.3g\n", pos, diff);
            CHECK(diff <= 1e-4);
        }
        got[pos] = token = ra_argmax(logits, VOCAB);
    }
    int first_bad = -1;
    for (int i = 0; i < N_IDS && first_bad < 0; i++)
        if (got[i] != expected[i])
            first_bad = i;
    if (first_bad >= 0)
        fprintf(stderr, "token %d: got %d, the reference has %d\n", first_bad, got[first_bad], expected[first_bad]);
    CHECK(first_bad < 0);

    /* The same run through ra_generate_run after a one-token prompt span. */
    struct ra_sampler s;
    struct ra_generate g = { .max_tokens = N_IDS, .eos_id = -1 };
    int n_out = 0;
    token = 1;
    CHECK_OK(ra_sampler_init(&s, VOCAB, 0.0f, 1.0f, 1));
    CHECK_OK(ra_forward_span(&cx, &token, 0, 1, &kv, logits));
    CHECK_OK(ra_generate_run(&cx, &kv, 1, logits, &s, &g, got, &n_out));
    CHECK(n_out == N_IDS && memcmp(got, expected, sizeof got) == 0);

    ra_sampler_free(&s);
    ra_kvcache_free(&kv);
    ra_context_free(&cx);
    ra_model_free(&m);
    ra_backend_free(be);
    return test_result("test_golden");
}
