# RA_CHECK_PCRE2: PCRE2 >= 10.34 (required). The byte-level BPE pre-tokenizers
# (src/tokenizer_bpe.c) split text by Unicode properties (\p{L}, \p{N}) with UTF,
# UCP and PCRE2_MATCH_INVALID_UTF (10.34). Sets PCRE2_CFLAGS and PCRE2_LIBS.
AC_DEFUN([RA_CHECK_PCRE2], [
PKG_CHECK_MODULES([PCRE2], [libpcre2-8 >= 10.34], [],
  [AC_MSG_ERROR([no PCRE2: apt-get install libpcre2-dev])])
])
