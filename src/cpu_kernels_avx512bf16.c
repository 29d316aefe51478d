/* The CPU kernels in AVX-512F with AVX512-BF16 (vdpbf16ps for attention over
 * bf16 KV rows), compiled with AVX512BF16_CFLAGS. */
#define RA_KERNELS_AVX512 1
#define RA_KERNELS_BF16DP 1
#include "cpu_kernels_impl.h"
