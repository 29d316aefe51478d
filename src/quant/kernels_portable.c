/* The portable build of the quantized-weight kernels (kernels_impl.h). */
#include "kernels_impl.h"
