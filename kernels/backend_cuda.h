/* The CUDA backend: struct ra_backend_ops on one GPU (kernels/README.md).
 *
 * Built with ./configure --with-cuda; otherwise every function here exists
 * but reports that CUDA is not built in (backend_cuda_stub.c), so callers
 * compile either way. */
#ifndef RA_BACKEND_CUDA_H
#define RA_BACKEND_CUDA_H

#include "backend.h"
#include "model.h"

/* 1 when the library was built with the CUDA backend. */
int ra_cuda_built(void);

/* Visible CUDA devices: 0 when none (no driver, no GPU, or no CUDA build). */
int ra_cuda_device_count(void);

/* A backend on DEVICE (0-based). Weights go to the device as bf16 unless
 * ra_backend_cuda_set_dtype says otherwise; activations and the KV cache are
 * fp32. Errors name the device. */
int ra_backend_cuda_init(struct ra_backend **out, int device);

/* The dtype weight matrices take on the device (--device-dtype): bf16 (the
 * default) or f16, with fp32 accumulation, or f32. Norm weights stay fp32.
 * Set it before ra_model_attach. */
int ra_backend_cuda_set_dtype(struct ra_backend *be, enum ra_dtype dtype);


/* Parses "bf16", "f16" or "f32" (--device-dtype). */
int ra_device_dtype_parse(const char *s, enum ra_dtype *out);

#endif
