# RA_CHECK_JANSSON: jansson >= 2.10 (required), for the JSON the programs read
# and write (Hugging Face configs, reports). Sets JANSSON_CFLAGS and JANSSON_LIBS.
AC_DEFUN([RA_CHECK_JANSSON], [
PKG_CHECK_MODULES([JANSSON], [jansson >= 2.10], [],
  [AC_MSG_ERROR([no jansson: apt-get install libjansson-dev])])
])
