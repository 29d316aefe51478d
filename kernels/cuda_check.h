/* Error checks for the CUDA backend, one macro per library.
 *
 * CUDA_CHECK(call) and CUBLAS_CHECK(call) evaluate a runtime or cuBLAS call;
 * on failure they record one line (the device, the call, the library's own
 * words, file:line) with ra_error_set and return RA_EBACKEND from the
 * enclosing function, which must return int. C and CUDA C both include it. */
#ifndef RA_CUDA_CHECK_H
#define RA_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Record the error and return RA_EBACKEND (defined in backend_cuda.c). */
int ra_cuda_fail(cudaError_t err, const char *expr, const char *file, int line);
int ra_cublas_fail(cublasStatus_t st, const char *expr, const char *file, int line);

#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call)                                                    \
    do {                                                                    \
        cudaError_t ra_cuda_err_ = (call);                                  \
        if (ra_cuda_err_ != cudaSuccess)                                    \
            return ra_cuda_fail(ra_cuda_err_, #call, __FILE__, __LINE__);   \
    } while (0)

#define CUBLAS_CHECK(call)                                                  \
    do {                                                                    \
        cublasStatus_t ra_cublas_st_ = (call);                              \
        if (ra_cublas_st_ != CUBLAS_STATUS_SUCCESS)                         \
            return ra_cublas_fail(ra_cublas_st_, #call, __FILE__, __LINE__); \
    } while (0)

/* After a kernel launch: a bad configuration shows up here, not at the launch. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#endif
