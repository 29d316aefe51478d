# RA_CHECK_BLAS: OpenBLAS (CBLAS) and LAPACKE, required.
#
# Sets OPENBLAS_CFLAGS and OPENBLAS_LIBS (pkg-config's openblas, plus -llapacke
# where LAPACKE is apart: Debian's liblapacke-dev, on OpenBLAS's LAPACK), and
# HAVE_CBLAS_SBGEMM where this OpenBLAS has the bf16 GEMM (Debian's 0.3.21 has not).
AC_DEFUN([RA_CHECK_BLAS], [
PKG_CHECK_MODULES([OPENBLAS], [openblas], [],
  [AC_MSG_ERROR([no OpenBLAS: apt-get install libopenblas-dev])])
ra_blas_save_CFLAGS=$CFLAGS; ra_blas_save_LIBS=$LIBS
CFLAGS="$CFLAGS $OPENBLAS_CFLAGS"; LIBS="$OPENBLAS_LIBS $LIBS"
AC_CHECK_HEADERS([cblas.h lapacke.h], [], [AC_MSG_ERROR([OpenBLAS headers missing (cblas.h, lapacke.h)])])
AC_CHECK_FUNCS([cblas_sgemm openblas_set_num_threads], [], [AC_MSG_ERROR([OpenBLAS not linkable])])
AC_SEARCH_LIBS([LAPACKE_sgesvd], [lapacke], [], [AC_MSG_ERROR([LAPACKE not linkable: apt-get install liblapacke-dev])])
AS_IF([test "x$ac_cv_search_LAPACKE_sgesvd" != "xnone required"],
  [OPENBLAS_LIBS="$OPENBLAS_LIBS $ac_cv_search_LAPACKE_sgesvd"])
LIBS="$OPENBLAS_LIBS $ra_blas_save_LIBS"
AC_CHECK_FUNCS([cblas_sbgemm])
CFLAGS=$ra_blas_save_CFLAGS; LIBS=$ra_blas_save_LIBS
])
