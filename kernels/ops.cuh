/* The CUDA kernels' host-side launchers, one .cu + .cuh pair per op; this
 * header gathers them for backend_cuda.c. Every launcher enqueues on STREAM
 * and returns RA_OK or RA_EBACKEND (after ra_error_set); none synchronises. */
#ifndef RA_CUDA_OPS_CUH
#define RA_CUDA_OPS_CUH

#include "attention.cuh"
#include "convert.cuh"
#include "embedding.cuh"
#include "get_rows.cuh"
#include "residual.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "rope_shift.cuh"
#include "set_rows.cuh"
#include "swiglu.cuh"

#endif
