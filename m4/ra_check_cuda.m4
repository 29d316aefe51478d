# RA_CHECK_CUDA: --with-cuda[=DIR] (default no; DIR defaults to /usr/local/cuda).
#
# With it: finds nvcc, the CUDA runtime, cuBLAS and NCCL headers, checks that
# the libraries link, and sets
#   NVCC, NVCCFLAGS    the compiler and its flags (SASS for sm_80 and sm_90,
#                      compute_90 PTX for later GPUs), both precious
#   CUDA_HOME          the toolkit
#   CUDA_CFLAGS        the headers, for the module's C files (kernels/backend_cuda.c, nccl.c);
#                      -isystem, as nccl.h has old-style declarations
#   CUDA_MODULE_LIBS   what the module librunahead-cuda.so links (nvcc's link
#                      syntax); the programs link none of it
#   CUDA_RT_LIBS       the CUDA runtime, for the one test that calls it directly
#                      (found at run time through the module's rpath)
#   HAVE_CUDA          config.h define and Automake conditional
# lib64/stubs lets a host without a driver link the checks; at run time the
# module then finds no device and the GPU tests skip.
AC_DEFUN([RA_CHECK_CUDA], [
AC_ARG_WITH([cuda],
  [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@],
    [build the CUDA backend module librunahead-cuda.so (cuBLAS + NCCL); DIR defaults to /usr/local/cuda])],
  [], [with_cuda=no])
AC_ARG_VAR([NVCC], [CUDA compiler])
AC_ARG_VAR([NVCCFLAGS], [flags for nvcc])
AS_IF([test "x$with_cuda" != xno], [
  AS_IF([test "x$with_cuda" = xyes], [CUDA_HOME=/usr/local/cuda], [CUDA_HOME=$with_cuda])
  AC_PATH_PROG([NVCC], [nvcc], [no], [$CUDA_HOME/bin$PATH_SEPARATOR$PATH])
  AS_IF([test "x$NVCC" = xno], [AC_MSG_ERROR([nvcc not found under $CUDA_HOME/bin])])
  : ${NVCCFLAGS="-O2 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
  CUDA_CFLAGS="-isystem $CUDA_HOME/include"
  CUDA_MODULE_LIBS="-L$CUDA_HOME/lib64 -Xlinker -rpath=$CUDA_HOME/lib64 -lnccl -lcublas"
  CUDA_RT_LIBS="-L$CUDA_HOME/lib64 -lcudart"
  ra_cuda_save_CFLAGS=$CFLAGS; ra_cuda_save_LIBS=$LIBS
  CFLAGS="$CFLAGS $CUDA_CFLAGS"
  LIBS="-L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lnccl -lcublas -lcudart $LIBS"
  AC_CHECK_HEADERS([cuda_runtime.h cublas_v2.h nccl.h], [],
    [AC_MSG_ERROR([CUDA headers missing under $CUDA_HOME/include])])
  AC_CHECK_FUNCS([cudaGetDeviceCount cublasCreate_v2 ncclGetVersion], [],
    [AC_MSG_ERROR([CUDA libraries not linkable from $CUDA_HOME/lib64])])
  CFLAGS=$ra_cuda_save_CFLAGS; LIBS=$ra_cuda_save_LIBS
  AC_DEFINE([HAVE_CUDA], [1], [Define if the CUDA backend module is built])
])
AC_SUBST([CUDA_HOME])
AC_SUBST([CUDA_CFLAGS])
AC_SUBST([CUDA_MODULE_LIBS])
AC_SUBST([CUDA_RT_LIBS])
AM_CONDITIONAL([HAVE_CUDA], [test "x$with_cuda" != xno])
])
