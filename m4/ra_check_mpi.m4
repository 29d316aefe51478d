# RA_CHECK_MPI: MPI for mpi/, its programs and tests, and a launcher for the tests.
#
# Sets
#   MPI_CFLAGS, MPI_LIBS  empty where CC (RA_PROG_CC_MPI) builds MPI programs itself,
#                         else pkg-config's ompi-c; they reach mpi/'s targets only
#                         (Makefile.am: RA_MPI_CPPFLAGS, RA_MPI_LIBS), never the core
#   MPIEXEC               mpirun or mpiexec (none where absent: the MPI tests skip)
#   MPIEXEC_FLAGS         precious, default --oversubscribe
AC_DEFUN([RA_CHECK_MPI], [
AC_REQUIRE([RA_PROG_CC_MPI])
AC_MSG_CHECKING([whether $CC builds MPI programs])
AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[MPI_Init(0, 0); MPI_Finalize();]])],
  [AC_MSG_RESULT([yes])],
  [AC_MSG_RESULT([no])
   PKG_CHECK_MODULES([MPI], [ompi-c], [],
     [AC_MSG_ERROR([no MPI: apt-get install libopenmpi-dev openmpi-bin])])])
AC_SUBST([MPI_CFLAGS])
AC_SUBST([MPI_LIBS])
AC_PATH_PROGS([MPIEXEC], [mpirun mpiexec], [none])
AC_ARG_VAR([MPIEXEC_FLAGS], [extra flags for mpirun in the tests (default: --oversubscribe)])
: ${MPIEXEC_FLAGS="--oversubscribe"}
])
