/* fp32 -> bf16 rounding with AVX512-BF16 (vcvtneps2bf16: nearest even, NaN
 * kept a NaN), compiled with BF16_CFLAGS; called only where the CPU has it
 * (gemm_bf16.c checks). */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

void ra_narrow_bf16_avx512(uint16_t *dst, const float *src, size_t n);

void ra_narrow_bf16_avx512(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512((void *)(dst + i), (__m512i)b);
    }
    for (; i < n; i += 16) { /* AVX-512F masks only: BW/VL are not assumed */
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        uint16_t tmp[16];
        _mm256_storeu_si256((__m256i *)tmp, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i)));
        for (size_t j = 0; j < 16 && i + j < n; j++)
            dst[i + j] = tmp[j];
    }
}
