# RA_CHECK_CRYPTO: OpenSSL's libcrypto >= 1.1 (required), for SHA-256 (the EVP API): the chunk
# store's keys and per-layer checksums (src/reuse/store.h). Sets CRYPTO_CFLAGS and CRYPTO_LIBS.
AC_DEFUN([RA_CHECK_CRYPTO], [
PKG_CHECK_MODULES([CRYPTO], [libcrypto >= 1.1], [],
  [AC_MSG_ERROR([no libcrypto (OpenSSL): apt-get install libssl-dev])])
])
