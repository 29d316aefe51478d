/* ra_quant_quantize and the GGUF writer.
 *
 * Quantizing: every format round-trips through ra_quant_dequantize (the
 * reader's conversion, checked against gguf-py) within its bound, worked out
 * from the format: half a step of the block's scale plus the fp16 rounding of
 * that scale (Q8_0, Q4_0, Q4_1), and for the K formats, whose scales are
 * searched, a relative RMSE bound on Gaussian weights plus never worse than
 * the plain min-max quantizer of the same sub-blocks. Zero, constant and
 * one-outlier blocks, a partial block and every non-finite value are covered.
 * (Byte equality with ggml's own quantizers: tests/quantize_cli.sh.)
 *
 * Writing: a file with every metadata type, arrays of each, arrays of strings
 * and nested arrays, tensors of several types at a non-default alignment is
 * read back by src/gguf.c value for value and byte for byte; copying every
 * entry of it gives the same metadata; duplicates, partial blocks, wrong
 * sizes and out-of-order calls are refused. */
#include "gguf.h"
#include "gguf_write.h"
#include "quant/quant.h"
#include "status.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}

static float gauss(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

/* n values: Gaussian, with some blocks zero, constant, positive only, or one outlier. */
static void fill(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = gauss();
    for (int64_t b = 0; b + 256 <= n; b += 256) {
        const int kind = (int)(b / 256 % 8);
        for (int j = 0; j < 256; j++) {
            float *v = &x[b + j];
            if (kind == 1)
                *v = 0;
            else if (kind == 2)
                *v = 0.375f;
            else if (kind == 3)
                *v = fabsf(*v) + 0.5f;
            else if (kind == 4 && j == 77)
                *v = 40.0f;
            else if (kind == 5)
                *v *= 1e-3f;
        }
    }
}

static double block_amax(const float *x, int n, double *min, double *max)
{
    double a = 0;
    *min = *max = x[0];
    for (int j = 0; j < n; j++) {
        a = fmax(a, fabs(x[j]));
        *min = fmin(*min, x[j]);
        *max = fmax(*max, x[j]);
    }
    return a;
}

/* Every element of the 32-element formats within its block's bound. */
static void check_q32(enum ra_dtype t, const float *x, const float *y, int64_t n)
{
    const double eps = 1.0 / 2048, sub = 1.0 / (1 << 25); /* fp16's rounding: relative, and absolute below 2^-14 */
    int bad = 0;
    for (int64_t b = 0; b < n; b += 32) {
        double min, max, amax = block_amax(x + b, 32, &min, &max), bound;
        if (t == RA_DTYPE_Q8_0)
            bound = amax / 127 * (0.5 + 127 * eps) + 127 * sub;
        else if (t == RA_DTYPE_Q4_0) /* the far side of the largest |x| is clamped at 7 steps */
            bound = amax / 8 * (1 + 8 * eps) + 8 * sub;
        else
            bound = (max - min) / 15 * (0.5 + 15 * eps) + fabs(fmin(min, max)) * eps + 16 * sub;
        for (int j = 0; j < 32; j++)
            if (fabs(x[b + j] - y[b + j]) > bound * (1 + 1e-6) + 1e-7 && bad++ < 3)
                fprintf(stderr, "%s: element %lld: %g became %g (bound %g)\n", ra_dtype_name(t), (long long)(b + j),
                        x[b + j], y[b + j], bound);
    }
    CHECK(bad == 0);
}

/* Sum of squared errors of the plain min-max 4-bit quantizer of 32 values
 * (the start the Q4_K search improves on) and of a 6-bit symmetric one of 16. */
static double naive_sse(const float *x, int n, int levels, int symmetric)
{
    double min, max, amax = block_amax(x, n, &min, &max), sse = 0;
    if (symmetric)
        min = -amax, max = amax;
    min = fmin(min, 0);
    const double d = (max - min) / (levels - 1);
    for (int j = 0; j < n; j++) {
        const double q = d > 0 ? fmin(levels - 1, fmax(0, nearbyint((x[j] - min) / d))) : 0;
        sse += pow(x[j] - (min + d * q), 2);
    }
    return sse;
}

static void check_k(enum ra_dtype t, const float *x, const float *y, int64_t n)
{
    double se = 0, ss = 0, naive = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        se += pow(x[i] - y[i], 2);
        ss += (double)x[i] * x[i];
    }
    const int sub = t == RA_DTYPE_Q4_K ? 32 : 16;
    for (int64_t i = 0; i < n; i += sub)
        naive += naive_sse(x + i, sub, t == RA_DTYPE_Q4_K ? 16 : 64, t == RA_DTYPE_Q6_K);
    for (int64_t b = 0; b < n; b += 256) { /* the zero and constant blocks come back exactly */
        double min, max;
        block_amax(x + b, 256, &min, &max);
        for (int j = 0; min == max && j < 256; j++)
            if (fabsf(x[b + j] - y[b + j]) > 1e-3f * fabsf(x[b + j]) && bad++ < 3)
                fprintf(stderr, "%s: constant block %lld: %g became %g\n", ra_dtype_name(t), (long long)b / 256,
                        x[b + j], y[b + j]);
    }
    const double rel = sqrt(se / ss);
    printf("%s: relative RMSE %.4f, plain min-max %.4f\n", ra_dtype_name(t), rel, sqrt(naive / ss));
    CHECK(rel < (t == RA_DTYPE_Q4_K ? 0.12 : 0.035));
    CHECK(se < naive);
    CHECK(bad == 0);
}

static void test_round_trip(void)
{
    const int64_t n = 256 * 64;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    void *q = malloc(n * 2);
    fill(x, n);
    for (enum ra_dtype t = RA_DTYPE_Q8_0; t < RA_DTYPE_COUNT; t++) {
        CHECK_OK(ra_quant_quantize(t, x, q, n));
        CHECK_OK(ra_quant_dequantize(t, q, y, n));
        if (t == RA_DTYPE_Q4_K || t == RA_DTYPE_Q6_K)
            check_k(t, x, y, n);
        else
            check_q32(t, x, y, n);
    }
    free(x);
    free(y);
    free(q);
}

static void test_refusals(void)
{
    float x[256] = { 0 };
    unsigned char q[512];
    const float bad[] = { NAN, INFINITY, -INFINITY };
    for (enum ra_dtype t = RA_DTYPE_Q8_0; t < RA_DTYPE_COUNT; t++) {
        CHECK(ra_quant_quantize(t, x, q, ra_dtype_block(t) / 2) == RA_EINVAL);
        CHECK(ra_quant_quantize(t, x, q, ra_dtype_block(t) + 16) == RA_EINVAL);
        for (int i = 0; i < 3; i++) {
            x[200] = bad[i];
            CHECK(ra_quant_quantize(t, x, q, 256) == RA_EINVAL);
            CHECK(strstr(ra_error_message(), "value 200") != NULL);
        }
        x[200] = 0;
    }
    CHECK(ra_quant_quantize(RA_DTYPE_F32, x, q, 32) == RA_EINVAL);
    /* extremes quantize without undefined conversions (jobs/sanitize's UBSan checks that) */
    for (int i = 0; i < 256; i++)
        x[i] = i % 3 == 0 ? 3e38f : i % 3 == 1 ? -1e-44f : 1e-45f;
    for (enum ra_dtype t = RA_DTYPE_Q8_0; t < RA_DTYPE_COUNT; t++)
        CHECK_OK(ra_quant_quantize(t, x, q, 256));
    for (int i = 0; i < 256; i++)
        x[i] = i % 2 ? 1e-45f : -1e-45f;
    for (enum ra_dtype t = RA_DTYPE_Q8_0; t < RA_DTYPE_COUNT; t++)
        CHECK_OK(ra_quant_quantize(t, x, q, 256));
}

/* ------------------------------------------------------------------ the writer */

static const uint8_t u8s[] = { 0, 7, 255 };
static const int16_t i16s[] = { -32768, 5, 32767 };
static const uint64_t u64s[] = { 0, 1ull << 40, UINT64_MAX };
static const double f64s[] = { -0.5, 3.25e300, 0 };
static const char *strs[] = { "a", "", "\xe2\x96\x81hello" };

static void write_meta(struct ra_gguf_writer *w)
{
    const int8_t i8 = -3;
    const uint16_t u16 = 65535;
    const int16_t i16 = -300;
    const int64_t i64 = INT64_MIN;
    const uint64_t u64 = UINT64_MAX;
    const double f64 = 1.0 / 3;
    CHECK_OK(ra_gguf_writer_scalar(w, "t.u8", RA_GGUF_U8, &u8s[1]));
    CHECK_OK(ra_gguf_writer_scalar(w, "t.i8", RA_GGUF_I8, &i8));
    CHECK_OK(ra_gguf_writer_scalar(w, "t.u16", RA_GGUF_U16, &u16));
    CHECK_OK(ra_gguf_writer_scalar(w, "t.i16", RA_GGUF_I16, &i16));
    CHECK_OK(ra_gguf_writer_u32(w, "t.u32", 4000000000u));
    CHECK_OK(ra_gguf_writer_i32(w, "t.i32", -7));
    CHECK_OK(ra_gguf_writer_f32(w, "t.f32", 0.1f));
    CHECK_OK(ra_gguf_writer_bool(w, "t.bool", 1));
    CHECK_OK(ra_gguf_writer_str(w, "t.str", "llama"));
    CHECK_OK(ra_gguf_writer_scalar(w, "t.u64", RA_GGUF_U64, &u64));
    CHECK_OK(ra_gguf_writer_scalar(w, "t.i64", RA_GGUF_I64, &i64));
    CHECK_OK(ra_gguf_writer_scalar(w, "t.f64", RA_GGUF_F64, &f64));
    CHECK_OK(ra_gguf_writer_arr(w, "a.u8", RA_GGUF_U8, u8s, 3));
    CHECK_OK(ra_gguf_writer_arr(w, "a.i16", RA_GGUF_I16, i16s, 3));
    CHECK_OK(ra_gguf_writer_arr(w, "a.u64", RA_GGUF_U64, u64s, 3));
    CHECK_OK(ra_gguf_writer_arr(w, "a.f64", RA_GGUF_F64, f64s, 3));
    CHECK_OK(ra_gguf_writer_arr(w, "a.empty", RA_GGUF_I32, NULL, 0));
    CHECK_OK(ra_gguf_writer_arr_str(w, "a.str", strs, NULL, 3));
}

static const int64_t dims_f32[] = { 5 }, dims_q8[] = { 64, 3 }, dims_q4k[] = { 256, 2 };

static void write_tensors(struct ra_gguf_writer *w, FILE *f, const float *x)
{
    unsigned char q8[6 * 34], q4k[2 * 144];
    CHECK_OK(ra_gguf_writer_tensor(w, "v", 1, dims_f32, RA_GGML_F32));
    CHECK_OK(ra_gguf_writer_tensor(w, "m.q8", 2, dims_q8, RA_GGML_Q8_0));
    CHECK_OK(ra_gguf_writer_tensor(w, "m.q4k", 2, dims_q4k, RA_GGML_Q4_K));
    CHECK_OK(ra_quant_quantize(RA_DTYPE_Q8_0, x, q8, 192));
    CHECK_OK(ra_quant_quantize(RA_DTYPE_Q4_K, x, q4k, 512));
    CHECK_OK(ra_gguf_writer_begin(w, f));
    CHECK_OK(ra_gguf_writer_data(w, x, 5 * sizeof *x));
    CHECK_OK(ra_gguf_writer_data(w, q8, sizeof q8));
    CHECK_OK(ra_gguf_writer_data(w, q4k, sizeof q4k));
    CHECK_OK(ra_gguf_writer_end(w));
}

static void check_read(const struct ra_gguf *g, const float *x)
{
    uint32_t u32;
    int64_t i64;
    float f;
    int b;
    const char *s;
    uint64_t n, u;
    enum ra_gguf_type et;
    CHECK(g->version == 3 && g->alignment == 64);
    CHECK(ra_gguf_get_u32(g, "t.u32", &u32) == RA_OK && u32 == 4000000000u);
    CHECK(ra_gguf_get_i64(g, "t.i32", &i64) == RA_OK && i64 == -7);
    CHECK(ra_gguf_get_i64(g, "t.i8", &i64) == RA_OK && i64 == -3);
    CHECK(ra_gguf_get_i64(g, "t.i16", &i64) == RA_OK && i64 == -300);
    CHECK(ra_gguf_get_i64(g, "t.u16", &i64) == RA_OK && i64 == 65535);
    CHECK(ra_gguf_get_i64(g, "t.u8", &i64) == RA_OK && i64 == 7);
    CHECK(ra_gguf_get_i64(g, "t.i64", &i64) == RA_OK && i64 == INT64_MIN);
    CHECK(ra_gguf_value_u64(g, &ra_gguf_find_kv(g, "t.u64")->value, &u) == RA_OK && u == UINT64_MAX);
    CHECK(ra_gguf_get_f32(g, "t.f32", &f) == RA_OK && f == 0.1f);
    CHECK(ra_gguf_get_f32(g, "t.f64", &f) == RA_OK && f == (float)(1.0 / 3));
    CHECK(ra_gguf_get_bool(g, "t.bool", &b) == RA_OK && b == 1);
    CHECK(ra_gguf_get_str(g, "t.str", &s, NULL) == RA_OK && !strcmp(s, "llama"));
    CHECK(ra_gguf_get_arr(g, "a.u8", &et, &n) == RA_OK && et == RA_GGUF_U8 && n == 3);
    CHECK(ra_gguf_get_arr_i64(g, "a.u8", 2, &i64) == RA_OK && i64 == 255);
    CHECK(ra_gguf_get_arr_i64(g, "a.i16", 0, &i64) == RA_OK && i64 == -32768);
    CHECK(ra_gguf_get_arr_f32(g, "a.f64", 0, &f) == RA_OK && f == -0.5f);
    CHECK(ra_gguf_get_arr(g, "a.empty", &et, &n) == RA_OK && et == RA_GGUF_I32 && n == 0);
    for (int i = 0; i < 3; i++)
        CHECK(ra_gguf_get_arr_str(g, "a.str", (uint64_t)i, &s, NULL) == RA_OK && !strcmp(s, strs[i]));
    CHECK(g->n_tensors == 3);
    const struct ra_gguf_tensor *v = ra_gguf_find(g, "v"), *q8 = ra_gguf_find(g, "m.q8"),
                                *q4k = ra_gguf_find(g, "m.q4k");
    CHECK(v && q8 && q4k);
    if (!v || !q8 || !q4k)
        return;
    CHECK(v->n_dims == 1 && v->dims[0] == 5 && !memcmp(v->data, x, 5 * sizeof *x));
    CHECK(q8->n_dims == 2 && q8->dims[0] == 64 && q8->dims[1] == 3 && q8->type == RA_GGML_Q8_0);
    CHECK(q4k->type == RA_GGML_Q4_K && q4k->offset % 64 == 0 && q8->offset % 64 == 0);
    unsigned char want[2 * 144];
    CHECK_OK(ra_quant_quantize(RA_DTYPE_Q4_K, x, want, 512));
    CHECK(!memcmp(q4k->data, want, sizeof want));
}

static int write_file(const char *path, const float *x, const struct ra_gguf *copy_from)
{
    struct ra_gguf_writer w;
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    CHECK_OK(ra_gguf_writer_init(&w, 64));
    if (copy_from) {
        for (int64_t i = 0; i < copy_from->n_kvs; i++)
            CHECK_OK(ra_gguf_writer_copy(&w, copy_from, &copy_from->kvs[i]));
    } else {
        write_meta(&w);
    }
    write_tensors(&w, f, x);
    ra_gguf_writer_free(&w);
    return fclose(f) != 0;
}

static void le(unsigned char **p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        *(*p)++ = (unsigned char)(v >> (8 * i));
}

/* A file built byte by byte with the nested array n = [[1, 2], ["x"]] and no
 * tensor: its copy has the same bytes. */
static void check_nested(const char *dir)
{
    unsigned char src[256], *p = src;
    memcpy(p, "GGUF", 4), p += 4;
    le(&p, 3, 4), le(&p, 0, 8), le(&p, 1, 8);
    le(&p, 1, 8), *p++ = 'n', le(&p, RA_GGUF_ARR, 4), le(&p, RA_GGUF_ARR, 4), le(&p, 2, 8);
    le(&p, RA_GGUF_U32, 4), le(&p, 2, 8), le(&p, 1, 4), le(&p, 2, 4);
    le(&p, RA_GGUF_STR, 4), le(&p, 1, 8), le(&p, 1, 8), *p++ = 'x';
    const size_t len = (size_t)(p - src);
    while ((p - src) % 32)
        *p++ = 0;
    struct ra_mapped_file mf = { src, (size_t)(p - src), "nested.gguf" };
    struct ra_gguf g;
    struct ra_gguf_writer w;
    char path[4200];
    snprintf(path, sizeof path, "%s/nested.gguf", dir);
    CHECK_OK(ra_gguf_parse(&g, &mf));
    CHECK_OK(ra_gguf_writer_init(&w, 0));
    CHECK_OK(ra_gguf_writer_copy(&w, &g, &g.kvs[0]));
    FILE *f = fopen(path, "w+b");
    CHECK(f != NULL);
    if (f) {
        unsigned char back[256];
        CHECK_OK(ra_gguf_writer_begin(&w, f));
        CHECK_OK(ra_gguf_writer_end(&w));
        rewind(f);
        CHECK(fread(back, 1, sizeof back, f) == (size_t)(p - src) && !memcmp(back, src, len));
        fclose(f);
    }
    ra_gguf_writer_free(&w);
    ra_gguf_close(&g);
}

/* Copies (which come in the parser's order, sorted by key) read back the
 * same, and a copy of a copy has the same header bytes. */
static void check_copy(const char *dir, const float *x)
{
    char a[4200], b[4200], c[4200];
    struct ra_gguf g1, g2, g3;
    snprintf(a, sizeof a, "%s/written.gguf", dir);
    snprintf(b, sizeof b, "%s/copied.gguf", dir);
    snprintf(c, sizeof c, "%s/copied2.gguf", dir);
    CHECK(write_file(a, x, NULL) == 0);
    CHECK_OK(ra_gguf_open(&g1, a));
    check_read(&g1, x);
    CHECK(write_file(b, x, &g1) == 0);
    CHECK_OK(ra_gguf_open(&g2, b));
    check_read(&g2, x);
    CHECK(g2.n_kvs == g1.n_kvs && g2.data_offset == g1.data_offset);
    CHECK(write_file(c, x, &g2) == 0);
    CHECK_OK(ra_gguf_open(&g3, c));
    CHECK(g3.data_offset == g2.data_offset && g3.file->size == g2.file->size &&
          !memcmp(g3.file->data, g2.file->data, g2.file->size));
    ra_gguf_close(&g3);
    ra_gguf_close(&g2);
    ra_gguf_close(&g1);
}

static void check_refusals(const float *x)
{
    struct ra_gguf_writer w;
    const int64_t partial[] = { 48, 2 }, zero[] = { 0 };
    CHECK(ra_gguf_writer_init(&w, 48) == RA_EINVAL);
    CHECK_OK(ra_gguf_writer_init(&w, 0));
    CHECK_OK(ra_gguf_writer_u32(&w, "k", 1));
    CHECK(ra_gguf_writer_str(&w, "k", "again") == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "key k is given twice") != NULL);
    CHECK(ra_gguf_writer_tensor(&w, "p", 2, partial, RA_GGML_Q8_0) == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "whole blocks") != NULL);
    CHECK(ra_gguf_writer_tensor(&w, "z", 1, zero, RA_GGML_F32) == RA_EINVAL);
    CHECK(ra_gguf_writer_tensor(&w, "u", 1, dims_f32, 99) != RA_OK);
    CHECK_OK(ra_gguf_writer_tensor(&w, "v", 1, dims_f32, RA_GGML_F32));
    CHECK(ra_gguf_writer_tensor(&w, "v", 1, dims_f32, RA_GGML_F32) == RA_EINVAL);
    CHECK(ra_gguf_writer_data(&w, x, 20) == RA_EINVAL); /* before the header */
    FILE *f = tmpfile();
    CHECK_OK(ra_gguf_writer_begin(&w, f));
    CHECK(ra_gguf_writer_u32(&w, "late", 1) == RA_EINVAL);
    CHECK(ra_gguf_writer_end(&w) == RA_EINVAL);
    CHECK(ra_gguf_writer_data(&w, x, 16) == RA_EINVAL);
    CHECK(strstr(ra_error_message(), "16 bytes given") != NULL);
    CHECK_OK(ra_gguf_writer_data(&w, x, 20));
    CHECK(ra_gguf_writer_data(&w, x, 20) == RA_EINVAL);
    CHECK_OK(ra_gguf_writer_end(&w));
    fclose(f);
    ra_gguf_writer_free(&w);
}

int main(void)
{
    test_round_trip();
    test_refusals();
    float x[512];
    fill(x, 512);
    const char *dir = test_tmpdir("test_quantize");
    CHECK(dir != NULL);
    if (dir) {
        check_copy(dir, x);
        check_nested(dir);
    }
    check_refusals(x);
    return test_result("test_quantize");
}
