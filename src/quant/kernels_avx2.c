/* The avx2 build of the quantized-weight kernels (kernels_impl.h). */
#define RA_QK_AVX2 1
#include "kernels_impl.h"
