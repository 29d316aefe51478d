# RA_PROG_CC_MPI: the C compiler, Open MPI's wrapper unless the user set CC.
#
# Sets MPICC (precious: the wrapper found, or none) and CC (to MPICC where CC
# was unset), then runs AC_PROG_CC. Every file is compiled by it, but only mpi/
# includes mpi.h (tests/layering.sh and tests/core_deps.sh check the core).
AC_DEFUN([RA_PROG_CC_MPI], [
AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc)])
AC_CHECK_PROGS([MPICC], [mpicc mpicc.openmpi], [none])
AS_IF([test -z "$CC" && test "x$MPICC" != xnone], [CC="$MPICC"])
AC_PROG_CC
])
