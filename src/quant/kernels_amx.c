/* The amx build of the quantized-weight kernels (kernels_impl.h): the
 * AVX512-VNNI kernels, with the prefill GEMM on AMX-INT8 tiles. */
#define RA_QK_AMX 1
#include "kernels_impl.h"
