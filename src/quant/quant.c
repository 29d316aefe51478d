/* Block formats: type mapping, sizes and the scalar references; see quant.h. */
#include "quant.h"
#include "gguf.h"
#include "status.h"

#include <math.h>
#include <string.h>

static const struct {
    enum ra_dtype dtype;
    uint32_t ggml;
} type_map[] = {
    { RA_DTYPE_F32, RA_GGML_F32 },   { RA_DTYPE_F16, RA_GGML_F16 },   { RA_DTYPE_BF16, RA_GGML_BF16 },
    { RA_DTYPE_Q8_0, RA_GGML_Q8_0 }, { RA_DTYPE_Q4_0, RA_GGML_Q4_0 }, { RA_DTYPE_Q4_1, RA_GGML_Q4_1 },
    { RA_DTYPE_Q4_K, RA_GGML_Q4_K }, { RA_DTYPE_Q6_K, RA_GGML_Q6_K },
};

int ra_quant_from_ggml(uint32_t t, enum ra_dtype *out)
{
    for (size_t i = 0; i < sizeof type_map / sizeof *type_map; i++)
        if (type_map[i].ggml == t) {
            *out = type_map[i].dtype;
            return RA_OK;
        }
    const char *name = ra_ggml_type_name(t);
    return ra_error_set(RA_EUNSUPPORTED, "ggml type %s (%u) is not one runahead computes on (F32, F16, BF16, Q8_0, "
                        "Q4_0, Q4_1, Q4_K, Q6_K)", name ? name : "?", (unsigned)t);
}

uint32_t ra_quant_to_ggml(enum ra_dtype t)
{
    for (size_t i = 0; i < sizeof type_map / sizeof *type_map; i++)
        if (type_map[i].dtype == t)
            return type_map[i].ggml;
    return UINT32_MAX;
}

size_t ra_quant_act_row_bytes(enum ra_dtype wtype, int64_t k)
{
    if (wtype == RA_DTYPE_Q4_K || wtype == RA_DTYPE_Q6_K)
        return (size_t)(k / RA_QK_K) * sizeof(struct ra_block_q8k);
    return (size_t)(k / RA_QK) * sizeof(struct ra_block_q8x);
}

int ra_quant_dequantize(enum ra_dtype t, const void *src, float *dst, int64_t n)
{
    const uint32_t g = ra_quant_to_ggml(t);
    if (g == UINT32_MAX)
        return ra_error_set(RA_EINVAL, "dequantize: unknown weight type %d", (int)t);
    return ra_gguf_dequantize(g, src, dst, n);
}

/* d = max|x| / 127 and the quants of n floats; returns the sum of the quants. */
static int act_block(const float *x, int n, float *d, int8_t *q)
{
    float amax = 0;
    for (int j = 0; j < n; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    *d = amax / 127.0f;
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < n; j++) {
        q[j] = (int8_t)roundf(x[j] * id);
        sum += q[j];
    }
    return sum;
}

void ra_quant_act_ref(enum ra_dtype wtype, const float *x, void *xq, int64_t k)
{
    if (wtype == RA_DTYPE_Q4_K || wtype == RA_DTYPE_Q6_K) {
        struct ra_block_q8k *b = xq;
        for (int64_t i = 0; i < k / RA_QK_K; i++, x += RA_QK_K) {
            act_block(x, RA_QK_K, &b[i].d, b[i].qs);
            for (int s = 0; s < RA_QK_K / 16; s++) {
                int sum = 0;
                for (int j = 0; j < 16; j++)
                    sum += b[i].qs[16 * s + j];
                b[i].bsums[s] = (int16_t)sum;
            }
        }
        return;
    }
    struct ra_block_q8x *b = xq;
    for (int64_t i = 0; i < k / RA_QK; i++, x += RA_QK) {
        const int sum = act_block(x, RA_QK, &b[i].d, b[i].qs);
        b[i].s = b[i].d * (float)sum;
    }
}
