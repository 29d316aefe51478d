/* The amx build of the quantized-weight kernels (kernels_impl.h): the
 * AVX512-VNNI kernels, with the prefill GEMM on AMX-INT8 tiles
 * (kernels_amx.h), whose operations are here the tile instructions. */
#include <immintrin.h>

/* GCC's tileloadd names no memory input and its ldtilecfg only 8 of the 64
 * bytes: a compiler barrier before each keeps the stores before them (the
 * configuration, the activations) ahead of them. */
#define AMX_BARRIER() __asm__ volatile("" ::: "memory")
#define AMX_LOADCONFIG(cfg)                                                                                        \
    do {                                                                                                           \
        AMX_BARRIER();                                                                                             \
        _tile_loadconfig(cfg);                                                                                     \
    } while (0)
#define AMX_LOADD(t, base, stride)                                                                                 \
    do {                                                                                                           \
        AMX_BARRIER();                                                                                             \
        _tile_loadd(t, base, stride);                                                                              \
    } while (0)
#define AMX_STORED(t, base, stride) _tile_stored(t, base, stride)
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define AMX_RELEASE() _tile_release()

#define RA_QK_AMX 1
#include "kernels_impl.h"
