/* The CUDA module's entry: librunahead-cuda.so exports ra_cuda_module_open,
 * which the core's loader (cuda_loader.c) calls once after dlopen.
 *
 * The module's files report errors with ra_error_set, as the core's do. The
 * definition here forwards each line to the core's own (the host's), so the
 * programs keep one error store. (A program that links the module itself,
 * test_cuda_ops, binds the core's definition instead.) Before a host is known
 * the line goes to stderr, so that none is lost. ra_quant_dequantize is
 * forwarded to the core's the same way. */
#include "module.h"
#include "quant/quant.h"
#include "status.h"

#include <stdarg.h>
#include <stdio.h>

static const struct ra_cuda_host *host;

int ra_error_set(int status, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (host)
        return host->error_set(status, "%s", line);
    fprintf(stderr, "librunahead-cuda: %s\n", line);
    return status;
}

int ra_quant_dequantize(enum ra_dtype t, const void *src, float *dst, int64_t n)
{
    if (!host)
        return ra_error_set(RA_EINVAL, "dequantize: the CUDA module has no host yet");
    return host->dequantize(t, src, dst, n);
}

static const struct ra_cuda_module module = {
    .abi = RA_CUDA_MODULE_ABI,
    .versions = ra_cuda_versions,
    .device_count = ra_cuda_devices,
    .backend_init = ra_cuda_backend_open,
    .backend_set_dtype = ra_cuda_backend_dtype,
    .nccl = &ra_cuda_nccl_ops,
};

const struct ra_cuda_module *ra_cuda_module_open(const struct ra_cuda_host *h)
{
    if (!h || h->abi != RA_CUDA_MODULE_ABI)
        return NULL;
    host = h;
    return &module;
}
