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

/* 1 when the library was built with the CUDA module (configure --with-cuda). */
int ra_cuda_built(void);

/* Loads the module once: RA_OK, or RA_EUNSUPPORTED with one line saying what
 * is missing (the module, or a CUDA library it needs) and where it looked. */
int ra_cuda_load(void);

/* Visible CUDA devices: 0 when none (no driver, no GPU, no module). */
int ra_cuda_device_count(void);

/* One line: the module's path and the CUDA, cuBLAS and NCCL versions it
 * runs with, or why it is not loaded. */
void ra_cuda_describe(char *buf, size_t size);

/* A backend on DEVICE (0-based). Weights go to the device as bf16 unless
 * ra_backend_cuda_set_dtype says otherwise; activations are fp32, the KV
 * cache fp32 or bf16 (--kv-dtype). Errors name the device. */
int ra_backend_cuda_init(struct ra_backend **out, int device);

/* The dtype weight matrices take on the device (--device-dtype): bf16 (the
 * default) or f16, with fp32 accumulation, or f32. Norm weights stay fp32.
 * Set it before ra_model_attach. */
int ra_backend_cuda_set_dtype(struct ra_backend *be, enum ra_dtype dtype);

/* NCCL through the module (mpi/transport_nccl.c), or NULL (ra_cuda_load says why). */
const struct ra_cuda_nccl *ra_cuda_nccl(void);

/* Parses "bf16", "f16" or "f32" (--device-dtype). */
int ra_device_dtype_parse(const char *s, enum ra_dtype *out);

#endif
