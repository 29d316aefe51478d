#!/bin/sh
# Block-quantized GGUF weights through the runtime (src/loader_gguf.c keeps them in their blocks):
#  1. A synthetic GQA model as Q8_0, Q4_0 and Q4_1 GGUF (jobs/gguf-from-hf.py, gguf-py's
#     quantizers) and as Q4_K_M (Q4_K and Q6_K matrices; runahead-quantize): test_quant_model compares each with the same file dequantized at load (logits, greedy
#     tokens) on every prefill path and checks the scan for non-finite block scales.
#  2. The Q4_1 file on 2 ranks: test_chain (KVR on every route, TSP, the emulated link; the int8
#     prefill path) equals one process; runahead --reuse blend (kvr and tsp) on 2 ranks prints one rank's
#     tokens; --offload full and kvpr decode print the prefill's tokens; --dequantize-weights runs;
#     the file with its data at an odd offset (every block misaligned) prints the same tokens.
#  3. Bad input, one line naming the file and the cause: a NaN block scale, a block count that
#     does not match the shape, a quantized tensor cut short. A quantized norm vector is read
#     (converted to f32 at load).
. "$(dirname "$0")/lib.sh"
need_command python3 python3
need_command "$MPIEXEC" "openmpi-bin"
python3 -c "import gguf, numpy" 2>/dev/null || skip "python3 cannot import gguf and numpy (pip install gguf)"
convert() { python3 "$SRC/jobs/gguf-from-hf.py" "$@" 2>"$TMP/convert.err" || { cat "$TMP/convert.err" >&2; return 1; }; }
RA="$BUILD/runahead"
run2() { timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$@"; }

# 1. Native against dequantized at load. (An FFN of 192: every row whole blocks of 32.)
"$BUILD/runahead-synth" --preset tiny-gqa --hidden-dim 192 --seed 11 --out "$TMP/hf" >/dev/null 2>"$TMP/err" \
    || { cat "$TMP/err" >&2; fail "runahead-synth"; finish; }
files=""
for t in q8_0 q4_0 q4_1; do
    convert "$TMP/hf" "$TMP/$t.gguf" --type $t && files="$files $TMP/$t.gguf" || fail "converting to $t"
done
# K-quants need rows of 256: a wider model, as Q4_K_M by runahead-quantize (whose bytes are
# llama-quantize's: tests/quantize_llama_cpp.sh).
"$BUILD/runahead-synth" --preset tiny-gqa --dim 256 --hidden-dim 512 --layers 2 --seed 11 --out "$TMP/hf256" \
    >/dev/null 2>"$TMP/err" || fail "runahead-synth --dim 256"
if "$BUILD/runahead-quantize" "$TMP/hf256" "$TMP/q4_k_m.gguf" --type q4_k_m --no-vocab >"$TMP/quantize.out" 2>&1; then
    files="$files $TMP/q4_k_m.gguf"
else
    tail -n 3 "$TMP/quantize.out" >&2
    fail "runahead-quantize q4_k_m"
fi
# every prefill path (the bf16 one where the CPU has a bf16 unit: auto picks it)
for path in int8 f32 auto; do
    RA_QUANT_GEMM=$path "$BUILD/tests/test_quant_model" $files || fail "test_quant_model, RA_QUANT_GEMM=$path"
done

# 2. Distributed equals one process on quantized weights.
m=$TMP/q4_1.gguf
# The int8 products give a token the same result however many tokens share the matmul, so the
# chain (slices of 1 token and of 311) equals one process; prefill's automatic path would take
# bf16 panels for long slices and the int8 GEMV for short ones (logits apart by up to ~3%).
RA_QUANT_GEMM=int8 run2 -x RA_QUANT_GEMM "$BUILD/tests/test_chain" "$m" || fail "test_chain on the Q4_1 file, 2 ranks"
ids="1 403 407 261 263 286 280 260 290 284 327 265 379 297 281 273 299 309 275 283 291 256 262 301"
ref=$($RA --model "$m" --prompt-ids "$ids" -n 12 --ignore-eos -o ids 2>"$TMP/err") || fail "one process: $(tail -n 1 "$TMP/err")"
[ "$(echo "$ref" | wc -w)" -eq 12 ] || fail "one process gave '$ref', not 12 ids"
for mode in full kvpr; do
    got=$($RA --model "$m" --prompt-ids "$ids" -n 12 --ignore-eos -o ids --offload $mode --host-link-gbps 8 \
        2>"$TMP/err") || fail "--offload $mode: $(tail -n 1 "$TMP/err")"
    [ "$got" = "$ref" ] || fail "--offload $mode gave '$got', not '$ref'"
done
got=$(run2 $RA --model "$m" --prompt-ids "$ids" -n 12 --ignore-eos -o ids --method kvr --offload kvpr \
    --host-link-gbps 8 2>"$TMP/err") || fail "kvr then --offload kvpr: $(tail -n 1 "$TMP/err")"
[ "$got" = "$ref" ] || fail "kvr on 2 ranks then --offload kvpr gave '$got', not '$ref'"
$RA --model "$m" --prompt-ids "$ids" -n 4 -o ids --dequantize-weights >/dev/null 2>"$TMP/err" \
    || fail "--dequantize-weights: $(tail -n 1 "$TMP/err")"
# the file's data at an odd offset (alignment 1): the blocks copied to where their f16 scales align
python3 "$SRC/tests/gguf_model.py" --odd "$m" "$TMP/odd.gguf" || fail "writing a GGUF at alignment 1"
got=$($RA --model "$TMP/odd.gguf" --prompt-ids "$ids" -n 12 --ignore-eos -o ids 2>"$TMP/err") \
    || fail "odd.gguf: $(tail -n 1 "$TMP/err")"
[ "$got" = "$ref" ] || fail "the Q4_1 file at an odd data offset gave '$got', its original '$ref'"
python3 - "$TMP/req.json" <<'PY'
import json, random, sys
random.seed(5)
chunks = [{"ids": [random.randrange(3, 512) for _ in range(16)]} for _ in range(3)]
json.dump({"system": {"ids": [1]}, "chunks": chunks, "question": {"ids": [500, 266, 301, 280]}}, open(sys.argv[1], "w"))
PY
args="--model $m --request $TMP/req.json --store $TMP/store -n 8 --ignore-eos -o ids"
$RA $args --reuse blend --store-write >/dev/null 2>"$TMP/err" || fail "filling the store: $(tail -n 1 "$TMP/err")"
blend1=$($RA $args --reuse blend --blend-ratio 0.15 2>"$TMP/err") || fail "blend on one rank: $(tail -n 1 "$TMP/err")"
for method in kvr tsp; do
    got=$(run2 $RA $args --method $method --reuse blend --blend-ratio 0.15 --blend-scope global 2>"$TMP/err") \
        || { fail "blend, $method on 2 ranks: $(tail -n 1 "$TMP/err")"; continue; }
    [ -n "$blend1" ] && [ "$got" = "$blend1" ] || fail "blend, $method on 2 ranks gave '$got', one rank '$blend1'"
done

# 3. Bad input: patched copies of the Q8_0 file.
python3 - "$TMP/q8_0.gguf" "$TMP" <<'PY' || fail "writing the bad files"
import shutil, struct, sys, numpy as np, gguf
src, out = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(src)
t = next(t for t in r.tensors if t.name == "blk.0.attn_q.weight")
# block 3's scale d (f16, the first 2 bytes of each 34-byte block) as NaN
shutil.copy(src, out + "/nan.gguf")
with open(out + "/nan.gguf", "r+b") as f:
    f.seek(t.data_offset + 3 * 34)
    f.write(struct.pack("<H", 0x7e00))
# the tensor's first dimension (64) as 48 in its info (name, n_dims, dims): not whole blocks of 32
data = bytearray(open(src, "rb").read())
name = t.name.encode()
at = data.find(struct.pack("<Q", len(name)) + name) + 8 + len(name)
assert struct.unpack_from("<I", data, at)[0] == 2 and struct.unpack_from("<Q", data, at + 4)[0] == 64
struct.pack_into("<Q", data, at + 4, 48)
open(out + "/blocks.gguf", "wb").write(data)
# cut inside the last tensor's blocks
open(out + "/cut.gguf", "wb").write(open(src, "rb").read()[:-40])
PY
expect_error "nan\.gguf: tensor blk\.0\.attn_q\.weight: q8_0 block 3's scale d is NaN" $RA --model "$TMP/nan.gguf" --prompt-ids 1 -n 1
expect_error "blocks\.gguf: tensor blk\.0\.attn_q\.weight: rows of 48 elements are not whole blocks of 32 \(type Q8_0\)" \
    $RA --model "$TMP/blocks.gguf" --prompt-ids 1 -n 1
expect_error "cut\.gguf: tensor [a-z0-9_.]*: its [0-9]+ bytes at offset [0-9]+ run past the end of the data section" \
    $RA --model "$TMP/cut.gguf" --prompt-ids 1 -n 1
# Quantized norm vectors: read as f32; with and without --dequantize-weights the same file runs.
convert "$TMP/hf" "$TMP/qnorm.gguf" --type q8_0 --quantize-norms || fail "converting with quantized norms"
python3 -c 'import sys, gguf
t = {t.name: t.tensor_type.name for t in gguf.GGUFReader(sys.argv[1]).tensors}
sys.exit(t["blk.0.attn_norm.weight"] != "Q8_0")' "$TMP/qnorm.gguf" || fail "qnorm.gguf's norms are not Q8_0"
a=$($RA --model "$TMP/qnorm.gguf" --prompt-ids "$ids" -n 8 --ignore-eos -o ids 2>"$TMP/err") \
    || fail "qnorm.gguf: $(tail -n 1 "$TMP/err")"
[ "$(echo "$a" | wc -w)" -eq 8 ] || fail "qnorm.gguf gave '$a', not 8 ids"
finish
