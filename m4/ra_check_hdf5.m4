# RA_CHECK_HDF5: --with-hdf5=DIR, else pkg-config's hdf5-openmpi, then hdf5, then h5pcc.
#
# Sets HDF5_CFLAGS and HDF5_LIBS, checked to compile and link (with MPI's flags where
# HDF5 is parallel and CC is not the MPI wrapper). The Open MPI
# build is asked for by name so a serial HDF5 is never picked by accident. Only
# the partition tables (partition/table*.c) and the tests that write HDF5
# themselves use them: the core library and mpi/ build without HDF5.
AC_DEFUN([RA_CHECK_HDF5], [
AC_REQUIRE([RA_CHECK_MPI])
AC_ARG_WITH([hdf5],
  [AS_HELP_STRING([--with-hdf5=DIR], [HDF5 install prefix (default: pkg-config hdf5-openmpi, then hdf5)])],
  [], [with_hdf5=check])
AS_IF([test "x$with_hdf5" != xcheck && test "x$with_hdf5" != xyes], [
  HDF5_CFLAGS="-I$with_hdf5/include"
  HDF5_LIBS="-L$with_hdf5/lib -Wl,-rpath,$with_hdf5/lib -lhdf5"
  ra_hdf5_add_mpi=yes
], [
  PKG_CHECK_MODULES([HDF5], [hdf5-openmpi], [],
    [PKG_CHECK_MODULES([HDF5], [hdf5], [],
      [AC_PATH_PROGS([H5PCC], [h5pcc h5cc], [none])
       AS_IF([test "x$H5PCC" = xnone],
         [AC_MSG_ERROR([no HDF5: apt-get install libhdf5-openmpi-dev, or --with-hdf5=DIR])])
       HDF5_CFLAGS=`$H5PCC -showconfig 2>/dev/null | sed -n 's/^ *Installation point: *//p' | sed 's|$|/include|;s|^|-I|'`
       HDF5_LIBS="`echo $HDF5_CFLAGS | sed 's|^-I|-L|;s|/include$|/lib|'` -lhdf5"
       ra_hdf5_add_mpi=yes])])
])
dnl A parallel HDF5's hdf5.h includes mpi.h: outside pkg-config (whose hdf5-openmpi names
dnl MPI itself) its flags take MPI's, empty where CC is the MPI wrapper.
AS_IF([test "x$ra_hdf5_add_mpi" = xyes],
  [HDF5_CFLAGS="$HDF5_CFLAGS $MPI_CFLAGS"; HDF5_LIBS="$HDF5_LIBS $MPI_LIBS"])
ra_hdf5_save_CFLAGS=$CFLAGS; ra_hdf5_save_LIBS=$LIBS
CFLAGS="$CFLAGS $HDF5_CFLAGS"; LIBS="$HDF5_LIBS $LIBS"
AC_CHECK_HEADER([hdf5.h], [], [AC_MSG_ERROR([hdf5.h not usable with $HDF5_CFLAGS])])
AC_CHECK_FUNC([H5Fopen], [], [AC_MSG_ERROR([HDF5 not linkable with $HDF5_LIBS])])
CFLAGS=$ra_hdf5_save_CFLAGS; LIBS=$ra_hdf5_save_LIBS
AC_SUBST([HDF5_CFLAGS])
AC_SUBST([HDF5_LIBS])
])
