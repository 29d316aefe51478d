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
command -v python3 >/dev/null 2>&1 || { echo "skip: python3 not found on PATH"; exit 77; }
HELPER="$BUILD/tests/tokenize_lines"
[ -x "$HELPER" ] || { echo "FAIL: $HELPER not built (make check builds it)" >&2; exit 1; }

python3 "$SRC/tests/tokenizer_sentencepiece.py" "$HELPER" \
    "$MODELS/llama2-tokenizer.bin" "$MODELS/llama2-tokenizer.model" "$TMP"
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || fail "the ids differ from sentencepiece's, or the comparison failed (exit $rc)"
[ "$rc" -eq 77 ] && exit 77
finish
