/* What the CUDA module's own files share (cuda_module.h is what crosses to
 * the core): the entries of its table, defined in backend_cuda.c and nccl.c. */
#ifndef RA_CUDA_MODULE_INTERNAL_H
#define RA_CUDA_MODULE_INTERNAL_H

#include "cuda_module.h"

int ra_cuda_devices(void);
int ra_cuda_backend_open(struct ra_backend **out, int device);
int ra_cuda_backend_dtype(struct ra_backend *be, enum ra_dtype dtype);
void ra_cuda_versions(char *buf, size_t size);
extern const struct ra_cuda_nccl ra_cuda_nccl_ops;

#endif
