/* Prints how many CUDA devices this build sees (0 without --with-cuda, or
 * where the CUDA module cannot load), for the script tests that need a GPU.
 * With -v, also the module's path and versions, or why it is not loaded. */
#include "backend_cuda.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const int n = ra_cuda_device_count();
    printf("%d\n", n);
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        char line[1024];
        ra_cuda_describe(line, sizeof line);
        printf("cuda module: %s\n", line);
    }
    return 0;
}
