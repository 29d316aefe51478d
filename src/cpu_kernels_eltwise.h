/* The element-wise CPU kernels: RMSNorm, RoPE, SwiGLU, add, and the
 * conversions between fp32 and bf16/f16.
 *
 * Part of the CPU kernels (cpu_kernels_impl.h includes it once per
 * instruction set, after cpu_kernels_simd.h); not a header of its own. */

static void rmsnorm(float *y, const float *x, const float *w, int n, int dim, float eps, int n_threads)
{
#pragma omp parallel for schedule(static) if (n > 16) num_threads(n_threads)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *yi = y + (size_t)i * dim;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int j = 0; j < dim; j++)
            ss += xi[j] * xi[j];
        const float inv = 1.0f / sqrtf(ss / dim + eps);
#pragma omp simd
        for (int j = 0; j < dim; j++)
            yi[j] = w[j] * (inv * xi[j]);
    }
}

/* RoPE in both conventions. The two loops are the same arithmetic on
 * different pairs: interleaved reads its pairs with a stride of 2, which the
 * compiler vectorises with even/odd shuffles; rotate-half reads two
 * contiguous halves and needs none. */
static void rope(float *x, int ld, int n, int n_heads, int head_dim, const float *cs, const float *sn, int n_threads)
{
    const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (n > 16) num_threads(n_threads)
    for (int i = 0; i < n; i++) {
        const float *c = cs + (size_t)i * half, *s = sn + (size_t)i * half;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)i * ld + (size_t)h * head_dim;
#pragma omp simd
            for (int j = 0; j < half; j++) {
                const float a = v[2 * j], b = v[2 * j + 1];
                v[2 * j] = a * c[j] - b * s[j];
                v[2 * j + 1] = a * s[j] + b * c[j];
            }
        }
    }
}

static void rope_half(float *x, int ld, int n, int n_heads, int head_dim, const float *cs, const float *sn,
                      int n_threads)
{
    const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (n > 16) num_threads(n_threads)
    for (int i = 0; i < n; i++) {
        const float *c = cs + (size_t)i * half, *s = sn + (size_t)i * half;
        for (int h = 0; h < n_heads; h++) {
            float *lo = x + (size_t)i * ld + (size_t)h * head_dim, *hi = lo + half;
#pragma omp simd
            for (int j = 0; j < half; j++) {
                const float a = lo[j], b = hi[j];
                lo[j] = a * c[j] - b * s[j];
                hi[j] = a * s[j] + b * c[j];
            }
        }
    }
}

/* exp(x), ~2 ulp, by float arithmetic only so that loops around it vectorise:
 * x = k ln2 + r with |r| <= ln2/2 (round-to-nearest by the 1.5*2^23 trick),
 * exp(r) by its degree-6 Taylor polynomial, 2^k by building the exponent. The
 * clamp to [-87, 88] keeps 2^k a normal float; silu only meets the ends with
 * |g| > 87, where it is g or 0 to far below fp32 resolution of its use. */
static inline float exp_clamped(float x)
{
    /* Written so that NaN fails both tests and is clamped too: converting a
     * NaN k to int32_t below would be undefined behaviour. The caller's own
     * NaN operand still makes its result NaN. */
    x = x > -87.0f ? x : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - k * 0.693145751953125f;
    r = r - k * 1.428606765330187e-06f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const uint32_t e = (uint32_t)((int32_t)k + 127) << 23; /* k in [-126, 127]: a normal float's exponent */
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

static void swiglu(float *gate, const float *up, size_t count, int n_threads)
{
#pragma omp parallel for simd schedule(static) if (count > 65536) num_threads(n_threads)
    for (size_t i = 0; i < count; i++) {
        const float g = gate[i];
        gate[i] = g * (1.0f / (1.0f + exp_clamped(-g))) * up[i]; /* llama2.c's order */
    }
}

static void add(float *x, const float *y, size_t count, int n_threads)
{
#pragma omp parallel for simd schedule(static) if (count > 65536) num_threads(n_threads)
    for (size_t i = 0; i < count; i++)
        x[i] += y[i];
}

static void widen_bf16(float *dst, const uint16_t *src, size_t count)
{
#pragma omp simd
    for (size_t i = 0; i < count; i++)
        dst[i] = ra_bf16_to_f32(src[i]);
}

static void narrow_bf16(uint16_t *dst, const float *src, size_t count, int n_threads)
{
#pragma omp parallel for simd schedule(static) if (count > 65536) num_threads(n_threads)
    for (size_t i = 0; i < count; i++)
        dst[i] = ra_f32_to_bf16(src[i]);
}

static void widen_f16(float *dst, const uint16_t *src, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dst[i] = ra_f16_to_f32(src[i]);
}
