#!/bin/sh
# Scaled RoPE (linear, Llama 3's) against Hugging Face transformers, and the same
# model through jobs/gguf-from-hf.py's GGUF: tests/rope_scaling.py says what and
# how close. Bad scaling in config.json is refused with one error line; the GGUF
# refusals are in tests/gguf_model.sh. Skips without torch/transformers.
. "$(dirname "$0")/lib.sh"
need_command python3 python3
DUMP="$BUILD/tests/logits_dump"
[ -x "$DUMP" ] || { echo "FAIL: $DUMP not built (make tests-build builds it)" >&2; exit 1; }

# bad input in config.json: one error line each
"$BUILD/runahead-synth" --preset tiny --layers 1 --out "$TMP/bad" >/dev/null 2>&1 || fail "runahead-synth tiny"
bad_config() { # bad_config NAME JSON-OF-rope_scaling
    mkdir -p "$TMP/$1" && cp "$TMP/bad/model.safetensors" "$TMP/$1/" &&
        python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["rope_scaling"] = json.loads(sys.argv[2]); json.dump(c, open(sys.argv[3], "w"))' \
            "$TMP/bad/config.json" "$2" "$TMP/$1/config.json" || fail "writing $1"
}
bad_config yarn '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}'
expect_error "yarn/config.json: RoPE scaling type yarn is not supported \(only linear and llama3\)" \
    "$BUILD/runahead" --model "$TMP/yarn" --prompt-ids 1 -n 1
bad_config dynamic '{"type": "dynamic", "factor": 2.0}'
expect_error "dynamic/config.json: RoPE scaling type dynamic is not supported" \
    "$BUILD/runahead" --model "$TMP/dynamic" --prompt-ids 1 -n 1
bad_config zero '{"rope_type": "linear", "factor": 0}'
expect_error "zero/config.json: RoPE scaling factor 0 must be finite and positive" \
    "$BUILD/runahead" --model "$TMP/zero" --prompt-ids 1 -n 1
bad_config nofactor '{"rope_type": "llama3", "low_freq_factor": 1, "high_freq_factor": 4}'
expect_error "nofactor/config.json: rope_scaling has no factor" \
    "$BUILD/runahead" --model "$TMP/nofactor" --prompt-ids 1 -n 1
bad_config bands '{"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1}'
expect_error "bands/config.json: llama3 RoPE scaling needs" \
    "$BUILD/runahead" --model "$TMP/bands" --prompt-ids 1 -n 1
expect_error "bad --rope-scaling 'yarn:2'" "$BUILD/runahead-synth" --rope-scaling yarn:2 --out "$TMP/x"

python3 "$SRC/tests/rope_scaling.py" "$BUILD/runahead" "$DUMP" "$BUILD/runahead-synth" \
    "$SRC/jobs/gguf-from-hf.py" "$TMP"
rc=$?
[ "$rc" -ne 77 ] || skip "python3 cannot import torch, transformers, gguf and numpy (jobs/setup installs them)"
[ "$rc" -eq 0 ] || fail "scaled RoPE disagrees with Hugging Face transformers or between the directory and its GGUF (exit $rc)"
finish
