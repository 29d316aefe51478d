/* The CUDA backend's loader, in the core library: no CUDA header or library
 * is needed to build or run it. The backend, its kernels, cuBLAS and NCCL
 * live in the module librunahead-cuda.so (cuda_module.h), opened here on the
 * first call that needs it; the programs link none of them, so one build
 * serves login nodes without GPUs (the CPU backend) and GPU nodes alike.
 *
 * Where the module is looked for, first found first: $RA_CUDA_MODULE (a path,
 * and then only it); beside the program, one folder up (the build tree's
 * tests/) and in ../lib (an unpacked bundle); the installed pkglibdir; then
 * the dynamic loader's own search (LD_LIBRARY_PATH). A module that is found
 * but does not load (a CUDA library missing on this node, another ABI) is
 * one error line naming the file and the cause. */
#define _GNU_SOURCE /* dladdr */
#include "config.h"

#include "backend_cuda.h"
#include "cuda_module.h"
#include "quant/quant.h"
#include "status.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

#ifdef HAVE_CUDA
int ra_cuda_built(void) { return 1; }
#else
int ra_cuda_built(void) { return 0; }
#endif

#ifndef RA_CUDA_MODULE_DIR
#define RA_CUDA_MODULE_DIR ""
#endif

static const struct ra_cuda_module *module;
static char module_path[PATH_MAX];
static int tried;
static char why[1024]; /* why the module is not loaded */

static const struct ra_cuda_host host = { RA_CUDA_MODULE_ABI, ra_error_set, ra_quant_dequantize };

/* Opens PATH (a path, or a bare name for the loader's search); 1 when the
 * module is in, 0 when PATH is not there, -1 when it is but failed (WHY says). */
static int open_module(const char *path, int bare)
{
    if (!bare && access(path, F_OK) != 0)
        return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (bare && e && strstr(e, RA_CUDA_MODULE_FILE ": cannot open shared object file"))
            return 0;
        snprintf(why, sizeof why, "cannot load the CUDA module %s: %s", path, e ? e : "dlopen failed");
        return -1;
    }
    ra_cuda_module_open_fn entry = (ra_cuda_module_open_fn)dlsym(h, RA_CUDA_MODULE_ENTRY);
    const struct ra_cuda_module *m = entry ? entry(&host) : NULL;
    if (!m) {
        snprintf(why, sizeof why, "the CUDA module %s is not this runahead's (no %s, or another ABI than %d)", path,
                 RA_CUDA_MODULE_ENTRY, RA_CUDA_MODULE_ABI);
        dlclose(h);
        return -1;
    }
    module = m;
    Dl_info info; /* where the loader's search found it, for ra_cuda_describe */
    if (dladdr((void *)entry, &info) && info.dli_fname && realpath(info.dli_fname, module_path))
        return 1;
    snprintf(module_path, sizeof module_path, "%s", path);
    return 1;
}

static void load(void)
{
    char exe[PATH_MAX], path[PATH_MAX + 64];
    const char *env = getenv("RA_CUDA_MODULE");
    tried = 1;
    if (!ra_cuda_built()) {
        snprintf(why, sizeof why, "this runahead was built without CUDA (configure --with-cuda)");
        return;
    }
    if (env && *env) {
        if (open_module(env, 0) == 0)
            snprintf(why, sizeof why, "RA_CUDA_MODULE=%s: no such file", env);
        return;
    }
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        static const char *const near[] = { "", "/..", "/../lib" };
        for (size_t i = 0; i < sizeof near / sizeof *near; i++) {
            snprintf(path, sizeof path, "%s%s/" RA_CUDA_MODULE_FILE, exe, near[i]);
            if (open_module(path, 0))
                return;
        }
    }
    if (*RA_CUDA_MODULE_DIR && open_module(RA_CUDA_MODULE_DIR "/" RA_CUDA_MODULE_FILE, 0))
        return;
    if (open_module(RA_CUDA_MODULE_FILE, 1))
        return;
    snprintf(why, sizeof why, "the CUDA module " RA_CUDA_MODULE_FILE " was not found (RA_CUDA_MODULE, beside the "
             "program, %s, LD_LIBRARY_PATH)", *RA_CUDA_MODULE_DIR ? RA_CUDA_MODULE_DIR : "no install directory");
}

int ra_cuda_load(void)
{
    if (!tried)
        load();
    return module ? RA_OK : ra_error_set(RA_EUNSUPPORTED, "%s", why);
}

int ra_cuda_device_count(void)
{
    if (!tried)
        load();
    return module ? module->device_count() : 0;
}

void ra_cuda_describe(char *buf, size_t size)
{
    char versions[256] = "";
    if (!tried)
        load();
    if (!module) {
        snprintf(buf, size, "not loaded: %s", why);
        return;
    }
    module->versions(versions, sizeof versions);
    snprintf(buf, size, "%s (%s)", module_path, versions);
}

int ra_backend_cuda_init(struct ra_backend **out, int device)
{
    *out = NULL;
    const int rc = ra_cuda_load();
    return rc == RA_OK ? module->backend_init(out, device) : rc;
}

int ra_backend_cuda_set_dtype(struct ra_backend *be, enum ra_dtype dtype)
{
    const int rc = ra_cuda_load();
    return rc == RA_OK ? module->backend_set_dtype(be, dtype) : rc;
}

const struct ra_cuda_nccl *ra_cuda_nccl(void)
{
    return ra_cuda_load() == RA_OK ? module->nccl : NULL;
}
