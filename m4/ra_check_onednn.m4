# RA_CHECK_ONEDNN: --without-onednn, else oneDNN 2.x where present (optional).
#
# The linear layers run as bf16 x bf16 -> fp32 GEMMs through oneDNN's matmul
# where the CPU has a bf16 unit (AMX-BF16 tiles, AVX512-BF16). Debian's
# libdnnl-dev has no .pc file: the header and the library are checked directly.
# Sets have_onednn (yes/no), RA_HAVE_ONEDNN (config.h) and DNNL_LIBS.
# --with-onednn makes its absence an error.
AC_DEFUN([RA_CHECK_ONEDNN], [
AC_ARG_WITH([onednn],
  [AS_HELP_STRING([--without-onednn], [do not use oneDNN for the bf16 linear layers])],
  [], [with_onednn=check])
have_onednn=no
AS_IF([test "x$with_onednn" != xno], [
  AC_CHECK_HEADER([oneapi/dnnl/dnnl.h],
    [AC_CHECK_LIB([dnnl], [dnnl_matmul_desc_init], [have_onednn=yes])])
  AS_IF([test "x$have_onednn$with_onednn" = xnoyes],
    [AC_MSG_ERROR([--with-onednn: oneDNN 2.x not found (apt-get install libdnnl-dev)])])])
AS_IF([test "x$have_onednn" = xyes], [
  AC_DEFINE([RA_HAVE_ONEDNN], [1], [Define if oneDNN runs the bf16 linear layers])
  DNNL_LIBS=-ldnnl])
AC_SUBST([DNNL_LIBS])
])
