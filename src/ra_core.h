/* runahead: the core library (no MPI). One header per part, all re-exported here. */
#ifndef RUNAHEAD_H
#define RUNAHEAD_H

#include "status.h"
#include "cpu_isa.h"
#include "mapped_file.h"
#include "model.h"
#include "safetensors.h"
#include "backend.h"
#include "kvcache.h"
#include "forward.h"
#include "sampler.h"
#include "generate.h"
#include "tokenizer.h"
#include "prompt.h"
#include "outfile.h"
#include "filelock.h"

#endif
