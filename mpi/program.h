/* What the programs that compute (runahead, runahead-tune, runahead-chunks)
 * open from their command line, the same way in each. */
#ifndef RA_PROGRAM_H
#define RA_PROGRAM_H

#include <stddef.h>

#include "backend.h"

/* --backend, --device, --device-dtype, --compute-dtype and --kv-dtype. */
struct ra_program_backend {
    const char *name;           /* NULL (the default), "cpu" or "cuda" */
    int device;                 /* -1: the rank's index on its node, modulo the GPUs it sees */
    enum ra_dtype device_dtype; /* weights on a GPU */
    enum ra_compute compute;    /* the CPU's linear layers */
    enum ra_dtype kv_dtype;     /* the KV cache the run will use */
};

/* The backend of rank RANK (named in errors), LOCAL_RANK its index on its
 * node (ra_mpi_local_rank), with THREADS CPU threads (ra_backend_open). */
int ra_program_open_backend(const struct ra_program_backend *o, int rank, int local_rank, int threads,
                            struct ra_backend **be);

/* The vocabulary's file: TOKENIZER when given, else the model's own
 * (ra_vocab_find). Returns 1 with PATH set, 0 when there is none. */
int ra_program_find_tokenizer(const char *tokenizer, const char *model, char *path, size_t len);

#endif
