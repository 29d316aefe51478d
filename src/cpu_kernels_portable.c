/* The CPU kernels in plain C, the compiler's baseline for the target (no extra flags). */
#include "cpu_kernels_impl.h"
