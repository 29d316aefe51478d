/* Prints how many CUDA devices this build sees (0 without --with-cuda), for
 * the script tests that need a GPU. */
#include "backend_cuda.h"

#include <stdio.h>

int main(void)
{
    printf("%d\n", ra_cuda_device_count());
    return 0;
}
