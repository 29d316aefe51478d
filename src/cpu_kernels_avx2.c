/* The CPU kernels in AVX2 + FMA, compiled with AVX2_CFLAGS. */
#define RA_KERNELS_AVX2 1
#include "cpu_kernels_impl.h"
