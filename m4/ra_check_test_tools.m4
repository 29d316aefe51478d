# RA_CHECK_TEST_TOOLS: what the test suite needs beyond the build.
#
# Sets RA_MODELS_DIR (--with-models=DIR: the fixtures stories260K.bin and
# llama2-tokenizer.bin; default ../shared/models beside the source tree;
# RA_MODELS_DIR in the environment overrides it at test time), CTEST (cmake's
# ctest, which runs the suite: make check warns without it).
AC_DEFUN([RA_CHECK_TEST_TOOLS], [
AC_ARG_WITH([models],
  [AS_HELP_STRING([--with-models=DIR], [test fixtures (stories260K.bin, llama2-tokenizer.bin); default ../shared/models beside the source tree; RA_MODELS_DIR overrides at test time])],
  [RA_MODELS_DIR=$withval], [RA_MODELS_DIR='$(abs_top_srcdir)/../shared/models'])
AC_SUBST([RA_MODELS_DIR])
AC_PATH_PROG([CTEST], [ctest], [none])
AS_IF([test "x$CTEST" = xnone], [AC_MSG_WARN([ctest not found: make check needs cmake's ctest (apt-get install cmake)])])
])
