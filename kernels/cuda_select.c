/* What callers of the CUDA backend need in every build: the --device-dtype
 * parser, and, in a build without CUDA (the default), the backend's entry
 * points as stubs, so that callers compile and link the same way and asking
 * for the backend is one clear error. */
#include "config.h"

#include "backend_cuda.h"
#include "status.h"

#include <string.h>

int ra_device_dtype_parse(const char *s, enum ra_dtype *out)
{
    if (strcmp(s, "bf16") == 0)
        *out = RA_DTYPE_BF16;
    else if (strcmp(s, "f16") == 0)
        *out = RA_DTYPE_F16;
    else if (strcmp(s, "f32") == 0)
        *out = RA_DTYPE_F32;
    else
        return ra_error_set(RA_EINVAL, "--device-dtype: '%s' is not one of bf16, f16, f32", ra_esc(s));
    return RA_OK;
}

#ifndef HAVE_CUDA

int ra_cuda_built(void) { return 0; }

int ra_cuda_device_count(void) { return 0; }

int ra_backend_cuda_init(struct ra_backend **out, int device)
{
    *out = NULL;
    return ra_error_set(RA_EUNSUPPORTED, "cuda backend: this build has no CUDA (configure with --with-cuda)");
}

int ra_backend_cuda_set_dtype(struct ra_backend *be, enum ra_dtype dtype)
{
    return ra_error_set(RA_EUNSUPPORTED, "cuda backend: this build has no CUDA (configure with --with-cuda)");
}

#endif
