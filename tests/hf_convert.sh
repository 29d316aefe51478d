#!/bin/sh
# The Hugging Face path end to end: runahead-synth converts the trained
# stories260K llama2.c checkpoint to a safetensors directory (q/k rows permuted
# into HF's rotate-half order), and runahead, loading it through the HF loader
# (which keeps them as they are and rotates halves), must generate exactly the
# reference 200 greedy tokens. Converting the HF directory again must give the
# same bytes (the source is already in HF's convention: no second permutation),
# and converting it back to llama2.c (q/k permuted back) the original
# checkpoint's weights; a random model written in both formats is one model
# (the same tokens, and the same HF bytes after a round trip). A bf16
# conversion must run; a truncated weight file must fail with one clear line.
# Synthetic models must be deterministic, and bad flags must be refused.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
need_fixture stories260K.bos.greedy200.ids
SYNTH=$BUILD/runahead-synth
RUN=$BUILD/runahead

# words: ids on stdin, one per line on stdout, for comparing id lists
words() { tr -s ' \n' '\n\n' | sed '/^$/d'; }

# --- conversion of a trained model: exact greedy tokens
"$SYNTH" --from "$MODELS/stories260K.bin" --out "$TMP/s260k-hf" 2>"$TMP/err" ||
    fail "conversion failed: $(cat "$TMP/err")"
[ -s "$TMP/s260k-hf/config.json" ] && [ -s "$TMP/s260k-hf/model.safetensors" ] ||
    fail "conversion did not write config.json and model.safetensors"
"$RUN" --model "$TMP/s260k-hf" --prompt-ids 1 --generate 200 --output ids >"$TMP/f32.ids" 2>"$TMP/err" ||
    fail "runahead on the converted model failed: $(cat "$TMP/err")"
words <"$TMP/f32.ids" >"$TMP/got"
words <"$MODELS/stories260K.bos.greedy200.ids" >"$TMP/want"
cmp -s "$TMP/got" "$TMP/want" || fail "f32 conversion: generated ids differ from the reference"

# --- HF to HF: the RoPE convention is converted only when it differs
"$SYNTH" --from "$TMP/s260k-hf" --out "$TMP/s260k-hf2" 2>"$TMP/err" ||
    fail "HF to HF conversion failed: $(cat "$TMP/err")"
cmp -s "$TMP/s260k-hf/model.safetensors" "$TMP/s260k-hf2/model.safetensors" ||
    fail "converting the HF model again changed its weights (q/k permuted twice?)"

# --- HF back to llama2.c: the original's bytes up to its RoPE table (which
# llama2.c computed with PyTorch; runahead recomputes it and never reads it)
"$SYNTH" --from "$TMP/s260k-hf" --format llama2c --out "$TMP/back.bin" 2>"$TMP/err" ||
    fail "HF to llama2.c conversion failed: $(cat "$TMP/err")"
size=$(wc -c <"$MODELS/stories260K.bin")
# shellcheck disable=SC2046
set -- $(od -An -t d4 -N 28 "$MODELS/stories260K.bin") # dim hidden layers heads kv_heads vocab seq_len
rope_table=$(($7 * ($1 / $4) * 4)) # seq_len x head_dim floats: cosines and sines
[ "$(wc -c <"$TMP/back.bin")" -eq "$size" ] || fail "llama2.c round trip: size differs from the original"
cmp -s -n $((size - rope_table)) "$TMP/back.bin" "$MODELS/stories260K.bin" ||
    fail "llama2.c round trip: weights differ from the original (q/k not permuted back?)"
"$RUN" --model "$TMP/back.bin" --prompt-ids 1 --generate 200 --output ids >"$TMP/back.ids" 2>"$TMP/err" ||
    fail "runahead on the round-tripped checkpoint failed: $(cat "$TMP/err")"
words <"$TMP/back.ids" | cmp -s - "$TMP/want" || fail "llama2.c round trip: generated ids differ from the reference"

# --- a random model in both formats is one model
"$SYNTH" --preset tiny-gqa --out "$TMP/r-hf" 2>"$TMP/err" || fail "synth tiny-gqa: $(cat "$TMP/err")"
"$SYNTH" --preset tiny-gqa --format llama2c --out "$TMP/r.bin" 2>"$TMP/err" ||
    fail "synth tiny-gqa --format llama2c: $(cat "$TMP/err")"
"$RUN" --model "$TMP/r-hf" --prompt-ids 1,5,9 --generate 40 --output ids >"$TMP/r-hf.ids" 2>/dev/null || fail "run r-hf"
"$RUN" --model "$TMP/r.bin" --prompt-ids 1,5,9 --generate 40 --output ids >"$TMP/r.ids" 2>/dev/null || fail "run r.bin"
cmp -s "$TMP/r-hf.ids" "$TMP/r.ids" || fail "the same random model as HF and as llama2.c generates different ids"
"$SYNTH" --from "$TMP/r.bin" --out "$TMP/r-hf2" 2>/dev/null || fail "llama2.c to HF of the random model"
cmp -s "$TMP/r-hf/model.safetensors" "$TMP/r-hf2/model.safetensors" ||
    fail "the random llama2.c model converted to HF differs from the one written as HF"
expect_error "no rope_theta" "$SYNTH" --preset tiny --rope-theta 500000 --format llama2c --out "$TMP/theta.bin"

# --- bf16 conversion: rounding may change the tokens, not their count
"$SYNTH" --from "$MODELS/stories260K.bin" --out "$TMP/s260k-bf16" --dtype bf16 2>"$TMP/err" ||
    fail "bf16 conversion failed: $(cat "$TMP/err")"
"$RUN" --model "$TMP/s260k-bf16" --prompt-ids 1 --generate 200 --output ids >"$TMP/bf16.ids" 2>"$TMP/err" ||
    fail "runahead on the bf16 model failed: $(cat "$TMP/err")"
n=$(words <"$TMP/bf16.ids" | wc -l)
[ "$n" -eq 200 ] || fail "bf16 conversion: generated $n ids, not 200"
f32_size=$(wc -c <"$TMP/s260k-hf/model.safetensors")
bf16_size=$(wc -c <"$TMP/s260k-bf16/model.safetensors")
[ "$bf16_size" -lt "$f32_size" ] || fail "bf16 file ($bf16_size bytes) is not smaller than f32 ($f32_size)"

# --- a lying file: the header promises more bytes than the file holds
cp -r "$TMP/s260k-hf" "$TMP/s260k-cut"
size=$(wc -c <"$TMP/s260k-cut/model.safetensors")
truncate -s $((size - 100)) "$TMP/s260k-cut/model.safetensors"
expect_error "s260k-cut/model.safetensors" "$RUN" --model "$TMP/s260k-cut" --prompt-ids 1 --generate 4 --output ids

# --- synthetic models: deterministic bytes, seeds differ, runnable
"$SYNTH" --preset tiny-gqa --out "$TMP/a" 2>"$TMP/err" || fail "synth tiny-gqa failed: $(cat "$TMP/err")"
"$SYNTH" --preset tiny-gqa --out "$TMP/b" 2>/dev/null || fail "synth tiny-gqa (again) failed"
"$SYNTH" --preset tiny-gqa --out "$TMP/c" --seed 2 2>/dev/null || fail "synth --seed 2 failed"
cmp -s "$TMP/a/model.safetensors" "$TMP/b/model.safetensors" || fail "the same seed gave different weights"
cmp -s "$TMP/a/model.safetensors" "$TMP/c/model.safetensors" && fail "different seeds gave the same weights"
"$RUN" --model "$TMP/a" --prompt-ids 1 --generate 30 --output ids >"$TMP/tiny.ids" 2>"$TMP/err" ||
    fail "runahead on the synthetic model failed: $(cat "$TMP/err")"
distinct=$(words <"$TMP/tiny.ids" | sort -u | wc -l)
[ "$distinct" -ge 5 ] || fail "the synthetic model is degenerate: $distinct distinct tokens in 30"
"$SYNTH" --preset tiny --dim 32 --layers 2 --kv-heads 2 --dtype f16 --out "$TMP/d" 2>/dev/null ||
    fail "synth with shape flags failed"
grep -q '"num_key_value_heads": 2' "$TMP/d/config.json" && grep -q '"hidden_size": 32' "$TMP/d/config.json" &&
    grep -q '"torch_dtype": "float16"' "$TMP/d/config.json" || fail "shape flags did not reach config.json"

# --- refusals: an existing model without --force, bad flags (exit 2)
expect_error "already holds a model.*--force" "$SYNTH" --preset tiny --out "$TMP/a"
"$SYNTH" --preset tiny --out "$TMP/a" --force 2>/dev/null || fail "--force did not overwrite"
for args in "--preset nope --out $TMP/x" "--dtype f64 --out $TMP/x" "--heads 5 --out $TMP/x" "--preset tiny" \
            "--format gguf --out $TMP/x" "--format llama2c --dtype bf16 --out $TMP/x.bin" \
            "--from $MODELS/stories260K.bin --layers 2 --out $TMP/x" "--dim -1 --out $TMP/x" "--bogus"; do
    # shellcheck disable=SC2086
    "$SYNTH" $args >/dev/null 2>"$TMP/err"; rc=$?
    [ "$rc" -eq 2 ] || fail "runahead-synth $args: exit $rc, expected 2"
    [ "$(wc -l <"$TMP/err")" -ge 1 ] || fail "runahead-synth $args: no error message"
done
expect_error "runahead-synth: .*no such" "$SYNTH" --from "$TMP/none.bin" --out "$TMP/y"
"$SYNTH" --version | grep -q "^runahead-synth [0-9]" || fail "--version"
"$SYNTH" --help | grep -q -- "--preset" || fail "--help"
finish
