/* IEEE half and bfloat16 <-> float, exact widening and round-to-nearest-even narrowing. */
#ifndef RA_HALF_H
#define RA_HALF_H

#include <stdint.h>
#include <string.h>

static inline float ra_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t ra_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* _Float16 where the compiler has it (gcc >= 12; clang only from 15 on x86,
 * which defines __FLT16_MANT_DIG__ with it), else the bit arithmetic below:
 * the fuzz build (jobs/fuzz) uses clang 14. */
#if defined(__FLT16_MANT_DIG__)
#define RA_HAVE_FLOAT16 1
#endif

static inline float ra_f16_to_f32(uint16_t h)
{
#if defined(RA_HAVE_FLOAT16) && (defined(__F16C__) || defined(__aarch64__))
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { e++; mant <<= 1; } while (!(mant & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* Half subnormals (and zero) from |f| < 2^-14, A its bits: mantissa / 2^s, rounded to nearest even. */
static inline uint16_t ra_f32_to_f16_small(uint32_t a)
{
    int s = 126 - (int)(a >> 23);
    if (s > 24)
        return 0;
    uint32_t mant = (a & 0x7fffffu) | 0x800000u, q = mant >> s, rem = mant & ((1u << s) - 1), half = 1u << (s - 1);
    return (uint16_t)(q + (rem > half || (rem == half && (q & 1u))));
}

static inline uint16_t ra_f32_to_f16(float f)
{
#if defined(RA_HAVE_FLOAT16)
    _Float16 x = (_Float16)f; /* rounds to nearest even */
    uint16_t h;
    memcpy(&h, &x, 2);
    return h;
#else
    uint32_t u, a, h;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, with the payload's top bits */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* from 65520 (half-way past 65504, the largest half) up: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u)
        return (uint16_t)(sign | ra_f32_to_f16_small(a));
    h = (a - 0x38000000u) >> 13; /* rebias the exponent from 127 to 15 */
    uint32_t rem = a & 0x1fffu;
    h += rem > 0x1000u || (rem == 0x1000u && (h & 1u));
    return (uint16_t)(sign | h);
#endif
}

#endif
