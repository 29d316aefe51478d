# RA_CHECK_ISA: the per-instruction-set CPU kernels (x86 only).
#
# One binary for login and compute nodes: no -march=native. The kernels of each
# instruction set are compiled with that set's flags and chosen at run time
# (src/cpu_isa.c); everything else keeps the compiler's baseline. Each set is
# built where the compiler takes its flags and intrinsics; each has its own
# shell variable, config.h define and Automake conditional:
#   x86_kernels        AVX2 + AVX-512 kernels: AVX2_CFLAGS, AVX512_CFLAGS,
#                      RA_HAVE_X86_KERNELS, X86_KERNELS
#   avx512bf16_kernels a fourth build of the same kernels with vdpbf16ps:
#                      AVX512BF16_CFLAGS, RA_HAVE_AVX512BF16_KERNELS, AVX512BF16_KERNELS
#   avx512vnni_kernels the quantized-weight kernels on AVX512-VNNI (src/quant/):
#                      AVX512VNNI_CFLAGS, RA_HAVE_AVX512VNNI_KERNELS, AVX512VNNI_KERNELS
#   avxvnni_kernels    the same on AVX-VNNI (VEX): AVXVNNI_CFLAGS,
#                      RA_HAVE_AVXVNNI_KERNELS, AVXVNNI_KERNELS
#   amx_kernels        the AVX512-VNNI quant kernels with the AMX-INT8 tile GEMM:
#                      AMX_CFLAGS, RA_HAVE_AMX_KERNELS, AMX_KERNELS
#   bf16_conversions   the AVX512-BF16 conversion of activations for the bf16
#                      GEMMs (src/gemm_bf16_avx512.c): BF16_CFLAGS,
#                      RA_HAVE_BF16_CONVERSIONS, BF16_CONVERSIONS
# The flags are precious; a set that does not build has them emptied.
AC_DEFUN([RA_CHECK_ISA], [
AC_REQUIRE([AC_CANONICAL_HOST])
AC_ARG_VAR([AVX2_CFLAGS], [flags for the AVX2 kernels (default: -mavx2 -mfma -mf16c)])
AC_ARG_VAR([AVX512_CFLAGS], [flags for the AVX-512 kernels (default: -mavx512f -mavx2 -mfma -mf16c)])
AC_ARG_VAR([AVX512BF16_CFLAGS], [flags for the AVX512-BF16 kernels (default: AVX512_CFLAGS -mavx512bf16)])
AC_ARG_VAR([BF16_CFLAGS], [flags for the AVX512-BF16 conversions (default: -mavx512f -mavx512bf16)])
AC_ARG_VAR([AVX512VNNI_CFLAGS], [flags for the AVX512-VNNI quant kernels (default: AVX512_CFLAGS -mavx512bw -mavx512vl -mavx512vnni)])
AC_ARG_VAR([AVXVNNI_CFLAGS], [flags for the AVX-VNNI quant kernels (default: AVX2_CFLAGS -mavxvnni)])
AC_ARG_VAR([AMX_CFLAGS], [flags for the AMX-INT8 quant kernels (default: AVX512VNNI_CFLAGS -mamx-tile -mamx-int8)])
: ${AVX2_CFLAGS="-mavx2 -mfma -mf16c"}
: ${AVX512_CFLAGS="-mavx512f -mavx2 -mfma -mf16c"}
: ${AVX512BF16_CFLAGS="$AVX512_CFLAGS -mavx512bf16"}
: ${BF16_CFLAGS="-mavx512f -mavx512bf16"}
: ${AVX512VNNI_CFLAGS="$AVX512_CFLAGS -mavx512bw -mavx512vl -mavx512vnni"}
: ${AVXVNNI_CFLAGS="$AVX2_CFLAGS -mavxvnni"}
: ${AMX_CFLAGS="$AVX512VNNI_CFLAGS -mamx-tile -mamx-int8"}
x86_kernels=no
avx512bf16_kernels=no
bf16_conversions=no
avx512vnni_kernels=no
avxvnni_kernels=no
amx_kernels=no
AS_CASE([$host_cpu], [x86_64|i?86], [
  _RA_CHECK_ISA_BUILDS([the AVX2 and AVX-512 kernels], [$AVX512_CFLAGS], [x86_kernels],
    [[__m512 a = _mm512_set1_ps(1.0f); __m256 b = _mm256_fmadd_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(2.0f), _mm256_set1_ps(3.0f));
      return (int)(_mm512_reduce_add_ps(a) + _mm256_cvtss_f32(b));]])])
AS_IF([test "x$x86_kernels" = xyes], [
  _RA_CHECK_ISA_BUILDS([the AVX512-BF16 kernels], [$AVX512BF16_CFLAGS], [avx512bf16_kernels],
    [[__m512 a = _mm512_set1_ps(1.0f);
      __m512bh b = (__m512bh)_mm512_set1_epi32(0x3f803f80);
      __m256bh c = _mm512_cvtneps_pbh(a);
      return (int)_mm512_reduce_add_ps(_mm512_dpbf16_ps(a, b, b)) + (int)_mm256_extract_epi16((__m256i)c, 0);]])
  _RA_CHECK_ISA_BUILDS([the AVX512-BF16 conversions], [$BF16_CFLAGS], [bf16_conversions],
    [[__m256bh b = _mm512_cvtneps_pbh(_mm512_set1_ps(1.0f)); return (int)_mm256_extract_epi16((__m256i)b, 0);]])
  _RA_CHECK_ISA_BUILDS([the AVX512-VNNI quant kernels], [$AVX512VNNI_CFLAGS], [avx512vnni_kernels],
    [[__m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_set1_epi8(2));
      return _mm512_reduce_add_epi32(a);]])
  _RA_CHECK_ISA_BUILDS([the AVX-VNNI quant kernels], [$AVXVNNI_CFLAGS], [avxvnni_kernels],
    [[__m256i a = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), _mm256_set1_epi8(2));
      return _mm256_extract_epi32(a, 0);]])])
AS_IF([test "x$avx512vnni_kernels" = xyes], [
  _RA_CHECK_ISA_BUILDS([the AMX-INT8 quant kernels], [$AMX_CFLAGS], [amx_kernels],
    [[static unsigned char cfg[64] __attribute__((aligned(64)));
      _tile_loadconfig(cfg); _tile_zero(0); _tile_loadd(1, cfg, 64); _tile_dpbsud(0, 1, 2);
      _tile_stored(0, cfg, 64); _tile_release();
      return cfg[0] + _mm512_reduce_add_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_set1_epi8(2)));]])])
AS_IF([test "x$x86_kernels" = xyes],
  [AC_DEFINE([RA_HAVE_X86_KERNELS], [1], [Define if the AVX2 and AVX-512 kernels are built])],
  [AVX2_CFLAGS=; AVX512_CFLAGS=])
AS_IF([test "x$avx512bf16_kernels" = xyes],
  [AC_DEFINE([RA_HAVE_AVX512BF16_KERNELS], [1], [Define if the AVX512-BF16 kernels are built])],
  [AVX512BF16_CFLAGS=])
AS_IF([test "x$avx512vnni_kernels" = xyes],
  [AC_DEFINE([RA_HAVE_AVX512VNNI_KERNELS], [1], [Define if the AVX512-VNNI quant kernels are built])],
  [AVX512VNNI_CFLAGS=])
AS_IF([test "x$avxvnni_kernels" = xyes],
  [AC_DEFINE([RA_HAVE_AVXVNNI_KERNELS], [1], [Define if the AVX-VNNI quant kernels are built])],
  [AVXVNNI_CFLAGS=])
AS_IF([test "x$amx_kernels" = xyes],
  [AC_DEFINE([RA_HAVE_AMX_KERNELS], [1], [Define if the AMX-INT8 quant kernels are built])],
  [AMX_CFLAGS=])
AS_IF([test "x$bf16_conversions" = xyes],
  [AC_DEFINE([RA_HAVE_BF16_CONVERSIONS], [1], [Define if the AVX512-BF16 conversions are built])],
  [BF16_CFLAGS=])
AM_CONDITIONAL([X86_KERNELS], [test "x$x86_kernels" = xyes])
AM_CONDITIONAL([AVX512BF16_KERNELS], [test "x$avx512bf16_kernels" = xyes])
AM_CONDITIONAL([AVX512VNNI_KERNELS], [test "x$avx512vnni_kernels" = xyes])
AM_CONDITIONAL([AVXVNNI_KERNELS], [test "x$avxvnni_kernels" = xyes])
AM_CONDITIONAL([AMX_KERNELS], [test "x$amx_kernels" = xyes])
AM_CONDITIONAL([BF16_CONVERSIONS], [test "x$bf16_conversions" = xyes])
])

# _RA_CHECK_ISA_BUILDS(WHAT, FLAGS, VARIABLE, BODY): VARIABLE=yes where CC
# compiles BODY (with immintrin.h) under FLAGS.
AC_DEFUN([_RA_CHECK_ISA_BUILDS], [
ra_isa_save_CFLAGS=$CFLAGS; CFLAGS="$CFLAGS $2"
AC_MSG_CHECKING([whether $CC builds $1])
AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <immintrin.h>]], [$4])], [$3=yes], [$3=no])
AC_MSG_RESULT([$$3])
CFLAGS=$ra_isa_save_CFLAGS
])
