/* What the programs that compute open from their command line (program.h). */
#include "program.h"

#include <stdio.h>

#include "vocab.h"

int ra_program_open_backend(const struct ra_program_backend *o, int rank, int local_rank, int threads,
                            struct ra_backend **be)
{
    struct ra_backend_params p = RA_BACKEND_PARAMS_INIT;
    p.device = o->device;
    p.local_rank = local_rank;
    p.rank = rank;
    p.threads = threads;
    p.compute = o->compute;
    p.device_dtype = o->device_dtype;
    p.kv_dtype = o->kv_dtype;
    return ra_backend_open(be, o->name, &p);
}

int ra_program_find_tokenizer(const char *tokenizer, const char *model, char *path, size_t len)
{
    if (tokenizer) {
        snprintf(path, len, "%s", tokenizer);
        return 1;
    }
    return model && ra_vocab_find(model, path, len);
}
