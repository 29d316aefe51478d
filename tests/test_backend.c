/* ra_backend_open and ra_backend_supports: which backend a name (or
 * RA_BACKEND, or nothing) gives, the error line of each refusal, and the CPU
 * backend's answers about ops and dtypes, checked against what the CPU
 * backend documents and what its bf16 unit reports. */
#include "backend.h"
#include "status.h"
#include "test.h"

static const enum ra_dtype dtypes[] = { RA_DTYPE_F32, RA_DTYPE_F16, RA_DTYPE_BF16 };

/* NAME opens and gives a cpu backend with the params' threads and compute dtype. */
static void opens_cpu(const char *name)
{
    struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
    p.threads = 3;
    p.compute = RA_COMPUTE_F32;
    struct ra_backend *be = NULL;
    CHECK_OK(ra_backend_open(&be, name, &p));
    CHECK(be && !strcmp(be->ops->name, "cpu") && be->n_threads == 3 && be->compute == RA_COMPUTE_F32);
    ra_backend_free(be);
}

/* NAME (with P) is refused with status RC and an error line containing WANT; nothing is returned. */
static void refused(const char *name, const struct ra_backend_params *p, int rc, const char *want)
{
    struct ra_backend *be = (struct ra_backend *)&be; /* must come back NULL */
    const int got = ra_backend_open(&be, name, p);
    CHECK(got == rc && be == NULL);
    if (!strstr(ra_error_message(), want)) {
        fprintf(stderr, "open(%s): error '%s' lacks '%s'\n", name ? name : "NULL", ra_error_message(), want);
        test_failures++;
    }
}

static void test_names(void)
{
    unsetenv("RA_BACKEND");
    opens_cpu("cpu");
    if (ra_cuda_device_count() == 0) { /* the default where no GPU is visible */
        opens_cpu(NULL);
        opens_cpu("");
    }
    setenv("RA_BACKEND", "cpu", 1);
    opens_cpu(NULL);
    setenv("RA_BACKEND", "gpu", 1);
    refused(NULL, NULL, RA_EINVAL, "RA_BACKEND: 'gpu' is not cpu or cuda");
    opens_cpu("cpu"); /* a name overrides the environment */
    unsetenv("RA_BACKEND");
    refused("tpu", NULL, RA_EINVAL, "--backend: 'tpu' is not cpu or cuda");
    CHECK(ra_backend_name_check("cuda", "--backend") == RA_OK && ra_backend_name_check(NULL, "--backend") == RA_OK);
    CHECK(ra_backend_name_check("CPU", "--backend") == RA_EINVAL);
    struct ra_backend_params f16kv = RA_BACKEND_PARAMS_INIT;
    f16kv.kv_dtype = RA_DTYPE_F16; /* a KV cache the CPU backend does not have */
    refused("cpu", &f16kv, RA_EUNSUPPORTED, "--kv-dtype f16: the cpu backend has no such KV cache");
    if (!ra_cuda_built())
        refused("cuda", NULL, RA_EUNSUPPORTED, "--backend cuda: this runahead was built without CUDA");
    else if (ra_cuda_device_count() == 0)
        refused("cuda", NULL, ra_cuda_load() == RA_OK ? RA_EINVAL : RA_EUNSUPPORTED, "--backend cuda: ");
}

/* The CPU backend's answers: weights of every dtype, f32 activations, an f32
 * or bf16 KV cache, bf16 compute exactly where a bf16 unit is in use. */
static void test_cpu_supports(void)
{
    struct ra_backend *be = NULL;
    CHECK_OK(ra_backend_open(&be, "cpu", NULL));
    if (!be)
        return;
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
        const enum ra_dtype t = dtypes[i];
        const int f32 = t == RA_DTYPE_F32, kv = t == RA_DTYPE_F32 || t == RA_DTYPE_BF16;
        CHECK(ra_backend_supports(be, RA_OP_EMBED, t) && ra_backend_supports(be, RA_OP_MATMUL, t));
        CHECK(ra_backend_supports(be, RA_OP_RMSNORM, t) && ra_backend_supports(be, RA_OP_WEIGHTS, t));
        CHECK(ra_backend_supports(be, RA_OP_WEIGHT_PREPARE, t));
        CHECK(ra_backend_supports(be, RA_OP_ROPE, t) == f32 && ra_backend_supports(be, RA_OP_SWIGLU, t) == f32);
        CHECK(ra_backend_supports(be, RA_OP_ADD, t) == f32);
        CHECK(ra_backend_supports(be, RA_OP_ATTENTION, t) == kv && ra_backend_supports(be, RA_OP_KV_CACHE, t) == kv);
        CHECK(ra_backend_supports(be, RA_OP_NARROW, t) == kv);
        CHECK(ra_backend_supports(be, RA_OP_GET_ROWS, t) == kv && ra_backend_supports(be, RA_OP_SET_ROWS, t) == kv);
        CHECK(ra_backend_supports(be, RA_OP_ROPE_SHIFT, t) == kv && ra_backend_supports(be, RA_OP_POSITIONS, t) == kv);
    }
    CHECK(ra_backend_supports(be, RA_OP_COMPUTE, RA_DTYPE_F32));
    CHECK(!ra_backend_supports(be, RA_OP_COMPUTE, RA_DTYPE_F16));
    char unit[256];
    ra_backend_cpu_describe_linear(be, unit, sizeof unit);
    CHECK(ra_backend_supports(be, RA_OP_COMPUTE, RA_DTYPE_BF16) == (strncmp(unit, "none", 4) != 0));
    CHECK(!ra_backend_supports(be, RA_N_OPS, RA_DTYPE_F32) && !ra_backend_supports(be, (enum ra_op)-1, RA_DTYPE_F32));
    CHECK(!ra_backend_supports(NULL, RA_OP_MATMUL, RA_DTYPE_F32));
    ra_backend_free(be);

    /* RA_GEMM=f32 takes the bf16 unit away: bf16 compute is then unsupported. */
    setenv("RA_GEMM", "f32", 1);
    CHECK_OK(ra_backend_open(&be, "cpu", NULL));
    CHECK(be && !ra_backend_supports(be, RA_OP_COMPUTE, RA_DTYPE_BF16));
    ra_backend_free(be);
    unsetenv("RA_GEMM");
}

/* A backend without a supports op: the ops it has, on f32 only; no bf16
 * cache without narrow. */
static int fake_matmul(struct ra_backend *be, float *y, int ldy, const float *x, int ldx, const struct ra_tensor *w,
                       int n)
{
    (void)be, (void)y, (void)ldy, (void)x, (void)ldx, (void)w, (void)n;
    return RA_OK;
}

static int fake_attention(struct ra_backend *be, float *out, const float *q, const struct ra_rows *qr, const void *k,
                          const void *v, const struct ra_rows *kr, const struct ra_attention_shape *s)
{
    (void)be, (void)out, (void)q, (void)qr, (void)k, (void)v, (void)kr, (void)s;
    return RA_OK;
}

static void test_default_answers(void)
{
    const struct ra_backend_ops ops = { .name = "fake", .matmul = fake_matmul, .attention = fake_attention };
    struct ra_backend be = { .ops = &ops, .n_threads = 1 };
    CHECK(ra_backend_supports(&be, RA_OP_MATMUL, RA_DTYPE_F32) && !ra_backend_supports(&be, RA_OP_MATMUL, RA_DTYPE_BF16));
    CHECK(ra_backend_supports(&be, RA_OP_KV_CACHE, RA_DTYPE_F32) && !ra_backend_supports(&be, RA_OP_KV_CACHE, RA_DTYPE_BF16));
    CHECK(!ra_backend_supports(&be, RA_OP_ROPE, RA_DTYPE_F32) && !ra_backend_supports(&be, RA_OP_NARROW, RA_DTYPE_F32));
    CHECK(!ra_backend_supports(&be, RA_OP_SET_ROWS, RA_DTYPE_F32) && !ra_backend_supports(&be, RA_OP_POSITIONS, RA_DTYPE_F32));
    CHECK(!strcmp(ra_op_name(RA_OP_KV_CACHE), "kv_cache") && !strcmp(ra_op_name(RA_OP_EMBED), "embed"));
    CHECK(!strcmp(ra_op_name(RA_N_OPS), "?"));
}

int main(void)
{
    test_names();
    test_cpu_supports();
    test_default_answers();
    return test_result("test_backend");
}
