#!/bin/sh
# runahead's encoder against the sentencepiece library: tests/tokenizer_sentencepiece.py
# builds a seeded corpus of over 20,000 strings (ASCII, several scripts, emoji,
# whitespace runs, byte fallback, long strings), encodes it with tests/tokenize_lines
# (BOS first, as runahead --tokenize-only) and with sentencepiece on the .model
# fixture, and fails on any difference. Skips where python3 or its sentencepiece
# package is missing (jobs/setup installs it with pip).
. "$(dirname "$0")/lib.sh"
need_fixture llama2-tokenizer.bin
need_fixture llama2-tokenizer.model
need_command python3 python3
HELPER="$BUILD/tests/tokenize_lines"
[ -x "$HELPER" ] || { echo "FAIL: $HELPER not built (make check builds it)" >&2; exit 1; }

python3 "$SRC/tests/tokenizer_sentencepiece.py" "$HELPER" \
    "$MODELS/llama2-tokenizer.bin" "$MODELS/llama2-tokenizer.model" "$TMP"
rc=$?
[ "$rc" -ne 77 ] || skip "python3 cannot import sentencepiece (jobs/setup pip-installs it)"
[ "$rc" -eq 0 ] || fail "the ids differ from sentencepiece's, or the comparison failed (exit $rc)"
finish
