/* The CPU kernels in AVX-512F, compiled with AVX512_CFLAGS. */
#define RA_KERNELS_AVX512 1
#include "cpu_kernels_impl.h"
