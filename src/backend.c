/* Choosing a backend (ra_backend_open) and asking what it runs
 * (ra_backend_supports): the one place every program and test gets its
 * backend from, so that none of them finds out by failing mid-run. */
#include "backend.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>

static const char *const op_names[RA_N_OPS] = {
    [RA_OP_EMBED] = "embed",       [RA_OP_MATMUL] = "matmul",       [RA_OP_RMSNORM] = "rmsnorm",
    [RA_OP_ROPE] = "rope",         [RA_OP_ATTENTION] = "attention", [RA_OP_SWIGLU] = "swiglu",
    [RA_OP_ADD] = "add",           [RA_OP_NARROW] = "narrow",       [RA_OP_WEIGHT_PREPARE] = "weight_prepare",
    [RA_OP_GET_ROWS] = "get_rows", [RA_OP_SET_ROWS] = "set_rows",   [RA_OP_ROPE_SHIFT] = "rope_shift",
    [RA_OP_POSITIONS] = "positions",
    [RA_OP_KV_CACHE] = "kv_cache", [RA_OP_COMPUTE] = "compute",     [RA_OP_WEIGHTS] = "weights",
};

const char *ra_op_name(enum ra_op op)
{
    return op >= 0 && op < RA_N_OPS ? op_names[op] : "?";
}

/* Whether the table has the op at all (the dtype classes need the ops that use them). */
static int has_op(const struct ra_backend_ops *o, enum ra_op op)
{
    switch (op) {
    case RA_OP_EMBED: return o->embed != NULL;
    case RA_OP_MATMUL: return o->matmul != NULL;
    case RA_OP_RMSNORM: return o->rmsnorm != NULL;
    case RA_OP_ROPE: return o->rope != NULL;
    case RA_OP_ATTENTION: return o->attention != NULL;
    case RA_OP_SWIGLU: return o->swiglu != NULL;
    case RA_OP_ADD: return o->add != NULL;
    case RA_OP_NARROW: return o->narrow != NULL;
    case RA_OP_WEIGHT_PREPARE: return o->weight_prepare != NULL;
    case RA_OP_GET_ROWS: return o->get_rows != NULL;
    case RA_OP_SET_ROWS: return o->set_rows != NULL;
    case RA_OP_ROPE_SHIFT: return o->rope_shift != NULL;
    case RA_OP_POSITIONS: return o->set_rows != NULL; /* a list's K/V rows are written by set_rows */
    case RA_OP_KV_CACHE: return o->attention != NULL;
    case RA_OP_COMPUTE:
    case RA_OP_WEIGHTS: return o->matmul != NULL;
    case RA_N_OPS: break;
    }
    return 0;
}

int ra_backend_supports(struct ra_backend *be, enum ra_op op, enum ra_dtype dtype)
{
    if (!be || op < 0 || op >= RA_N_OPS || !has_op(be->ops, op))
        return 0;
    if (op == RA_OP_KV_CACHE && dtype != RA_DTYPE_F32 && !be->ops->narrow) /* rows are narrowed on write */
        return 0;
    if (be->ops->supports)
        return be->ops->supports(be, op, dtype) != 0;
    return dtype == RA_DTYPE_F32;
}

int ra_backend_name_check(const char *name, const char *opt)
{
    if (name && *name && strcmp(name, "cpu") && strcmp(name, "cuda"))
        return ra_error_set(RA_EINVAL, "%s: '%s' is not cpu or cuda", opt, ra_esc(name));
    return RA_OK;
}

/* The name asked for: NAME, else $RA_BACKEND (the test suite runs its CPU
 * checks with cpu on a GPU machine too); "" when neither says. */
static int backend_name(const char *name, const char **out)
{
    const char *from = "--backend";
    if (!name || !*name) {
        name = getenv("RA_BACKEND");
        from = "RA_BACKEND";
    }
    const int rc = ra_backend_name_check(name, from);
    *out = name ? name : "";
    return rc;
}

/* cuda on P->device, else on the rank's index on its node modulo the visible devices. */
static int open_cuda(struct ra_backend **out, const struct ra_backend_params *p, int gpus)
{
    if (!ra_cuda_built())
        return ra_error_set(RA_EUNSUPPORTED, "--backend cuda: this runahead was built without CUDA (configure "
                            "--with-cuda)");
    if (ra_cuda_load() != RA_OK) /* the module or a CUDA library it needs is missing on this node */
        return ra_error_set(RA_EUNSUPPORTED, "--backend cuda: %s", ra_error_message());
    if (gpus == 0)
        return ra_error_set(RA_EINVAL, "--backend cuda: rank %d sees no CUDA device (check the driver and "
                            "CUDA_VISIBLE_DEVICES)", p->rank);
    const int dev = p->device >= 0 ? p->device : (p->local_rank > 0 ? p->local_rank : 0) % gpus;
    if (dev >= gpus)
        return ra_error_set(RA_EINVAL, "--device %d: rank %d sees only %d CUDA device%s", dev, p->rank, gpus,
                            gpus == 1 ? "" : "s");
    int rc = ra_backend_cuda_init(out, dev);
    if (rc == RA_OK && (rc = ra_backend_cuda_set_dtype(*out, p->device_dtype)) != RA_OK) {
        ra_backend_free(*out);
        *out = NULL;
    }
    return rc;
}

int ra_backend_open(struct ra_backend **out, const char *name, const struct ra_backend_params *params)
{
    static const struct ra_backend_params defaults = RA_BACKEND_PARAMS_INIT;
    const struct ra_backend_params *p = params ? params : &defaults;
    *out = NULL;
    int rc = backend_name(name, &name);
    if (rc != RA_OK)
        return rc;
    /* Counting devices loads the module: only when cuda is asked for or may be the default. */
    const int gpus = strcmp(name, "cpu") ? ra_cuda_device_count() : 0;
    if (*name ? !strcmp(name, "cuda") : gpus > 0)
        rc = open_cuda(out, p, gpus);
    else
        rc = ra_backend_cpu_init(out, p->threads);
    if (rc != RA_OK)
        return rc;
    (*out)->compute = p->compute;
    if (!ra_backend_supports(*out, RA_OP_KV_CACHE, p->kv_dtype)) {
        rc = ra_error_set(RA_EUNSUPPORTED, "--kv-dtype %s: the %s backend has no such KV cache",
                          ra_dtype_name(p->kv_dtype), (*out)->ops->name);
        ra_backend_free(*out);
        *out = NULL;
    }
    return rc;
}
