/* The avxvnni build of the quantized-weight kernels (kernels_impl.h). */
#define RA_QK_AVXVNNI 1
#include "kernels_impl.h"
