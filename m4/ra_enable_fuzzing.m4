# RA_ENABLE_FUZZING: --enable-fuzzing links the parser harnesses (tests/fuzz_*.c)
# with libFuzzer (clang -fsanitize=fuzzer) instead of the corpus-replay main, so
# that every other build still runs the committed corpus as a plain CTest test.
# jobs/fuzz sets it, with CC=clang and the sanitizer CFLAGS. Sets enable_fuzzing
# and the Automake conditional FUZZING.
AC_DEFUN([RA_ENABLE_FUZZING], [
AC_ARG_ENABLE([fuzzing],
  [AS_HELP_STRING([--enable-fuzzing], [link the tests/fuzz_* harnesses with libFuzzer (needs clang; see jobs/fuzz)])],
  [], [enable_fuzzing=no])
AM_CONDITIONAL([FUZZING], [test "x$enable_fuzzing" != xno])
])
