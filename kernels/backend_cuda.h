/* The CUDA backend, as the core and the programs see it (kernels/README.md).
 *
 * Every function here is in the core library and works in every build: the
 * backend itself is the module librunahead-cuda.so, loaded on first use
 * (cuda_loader.c). Without --with-cuda, or where the module cannot load, the
 * functions say so (ra_cuda_load's error line) and ra_cuda_device_count is 0. */
#ifndef RA_BACKEND_CUDA_H
#define RA_BACKEND_CUDA_H

#include <stddef.h>

#include "backend.h"
#include "model.h"

struct ra_cuda_nccl;

/* ra_cuda_built, ra_cuda_load, ra_cuda_device_count, ra_backend_cuda_init and
 * ra_backend_cuda_set_dtype are declared in backend.h (ra_backend_open uses them). */

/* One line: the module's path and the CUDA, cuBLAS and NCCL versions it
 * runs with, or why it is not loaded. */
void ra_cuda_describe(char *buf, size_t size);

/* NCCL through the module (mpi/transport_nccl.c), or NULL (ra_cuda_load says why). */
const struct ra_cuda_nccl *ra_cuda_nccl(void);

/* Parses "bf16", "f16" or "f32" (--device-dtype). */
int ra_device_dtype_parse(const char *s, enum ra_dtype *out);

#endif
