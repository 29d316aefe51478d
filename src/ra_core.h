/* librunahead, the core library (no MPI): one header per part, all re-exported here. Named
 * apart from the program mpi/runahead.c, which is built on it. */
#ifndef RA_CORE_H
#define RA_CORE_H

#include "status.h"
#include "cpu_isa.h"
#include "mapped_file.h"
#include "model.h"
#include "safetensors.h"
#include "gguf.h"
#include "backend.h"
#include "kvcache.h"
#include "forward.h"
#include "sampler.h"
#include "generate.h"
#include "tokenizer.h"
#include "tokenizer_bpe.h"
#include "prompt.h"
#include "outfile.h"
#include "filelock.h"
#include "timing.h"

#endif
