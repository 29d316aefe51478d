/* The avx512vnni build of the quantized-weight kernels (kernels_impl.h). */
#define RA_QK_AVX512VNNI 1
#include "kernels_impl.h"
