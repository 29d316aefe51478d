#!/bin/sh
# Bad input gets one clear error line and a non-zero exit, never a crash or a
# silent wrong answer: truncated and lying weight files, a safetensors header
# length off by one, NaN weights and non-finite logits, unknown versions,
# missing tokenizers, prompts longer than the context, token ids outside the
# vocabulary, bad flags and values a float cannot hold.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
RA="$BUILD/runahead"
M="$MODELS/stories260K.bin"

# Weight files crafted from the real one.
python3 - "$M" "$TMP" <<'PY'
import struct, sys, os
src, out = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
def put(name, b): open(os.path.join(out, name), "wb").write(b)
put("truncated.bin", data[: len(data) // 2])
put("header-only.bin", data[:28])
put("short-header.bin", data[:10])
put("empty.bin", b"")
put("trailing.bin", data + b"\0" * 64)
h = list(struct.unpack("7i", data[:28]))
lie = h[:]; lie[0] = 128                      # dim doubled: the tensors no longer fit
put("lying-dim.bin", struct.pack("7i", *lie) + data[28:])
lie = h[:]; lie[2] = 1 << 30                  # absurd layer count
put("lying-layers.bin", struct.pack("7i", *lie) + data[28:])
lie = h[:]; lie[4] = 3                        # 3 KV heads do not divide 8 heads
put("lying-kvheads.bin", struct.pack("7i", *lie) + data[28:])
v2 = struct.pack("Ii", 0x616b3432, 2) + struct.pack("7i", *h) + b"\1"
put("v2.bin", v2 + b"\0" * (256 - len(v2)) + data[28:])
v9 = struct.pack("Ii", 0x616b3432, 9) + struct.pack("7i", *h) + b"\1"
put("v9.bin", v9 + b"\0" * (256 - len(v9)) + data[28:])
put("long-prompt.ids", (" ".join(["1"] * 600)).encode())
lie = h[:]; lie[5] = -(1 << 31)               # -INT_MIN does not fit: abs() would be undefined
put("vocab-min.bin", struct.pack("7i", *lie) + data[28:])
# Non-finite weights. Offsets of the v0 layout: the final norm follows the
# embedding and the nine per-layer tensor kinds.
dim, hid, L, H, KV, V = h[0], h[1], h[2], h[3], h[4], abs(h[5])
kv = KV * (dim // H)
norm = 28 + 4 * (V * dim + L * (2 * dim + 2 * dim * dim + 2 * kv * dim + 3 * hid * dim))
d = bytearray(data); struct.pack_into("<f", d, norm + 4 * 17, float("nan"))
put("nan-norm.bin", bytes(d))                 # the issue's case
d = bytearray(data)                           # finite, but layer 2's activations overflow
for i in range(dim):
    struct.pack_into("<f", d, 28 + 4 * (V * dim + 2 * dim + i), 3e38)
put("huge-l2.bin", bytes(d))
PY

# Hugging Face directories converted from the checkpoint, then damaged.
"$BUILD/runahead-synth" --from "$M" --out "$TMP/hf" >/dev/null 2>&1 || fail "runahead-synth --from $M"
python3 - "$TMP" <<'PY'
import json, os, shutil, struct, sys
tmp = sys.argv[1]
src = os.path.join(tmp, "hf")
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = raw[8:8 + n], raw[8 + n:]
def clone(name, hlen, hdr, body):
    d = os.path.join(tmp, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    open(os.path.join(d, "model.safetensors"), "wb").write(struct.pack("<Q", hlen) + hdr + body)
    return d
# The issue's file: a header length one byte short, so the header's last
# padding space becomes the first data byte and every weight shifts by one.
padded = header.rstrip(b" ") + b"        "
clone("hf-hlen", len(padded) - 1, padded, data)
body = bytearray(data)
struct.pack_into("<f", body, json.loads(header)["model.norm.weight"]["data_offsets"][0] + 4 * 17, float("nan"))
clone("hf-nan", n, header, bytes(body))
d = clone("hf-nohead", n, header, data)       # untied, and no lm_head to use
cfg = json.load(open(os.path.join(d, "config.json")))
cfg["tie_word_embeddings"] = False
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
PY

expect_error "no such model"                            "$RA" --model "$TMP/nonexistent.bin" --prompt-ids 1
expect_error "truncated.bin: truncated: .*tensor"       "$RA" --model "$TMP/truncated.bin" --prompt-ids 1
expect_error "header-only.bin: truncated"               "$RA" --model "$TMP/header-only.bin" --prompt-ids 1
expect_error "short-header.bin: too short"              "$RA" --model "$TMP/short-header.bin" --prompt-ids 1
expect_error "empty.bin: file is empty"                 "$RA" --model "$TMP/empty.bin" --prompt-ids 1
expect_error "trailing.bin: 64 bytes after"             "$RA" --model "$TMP/trailing.bin" --prompt-ids 1
expect_error "lying-dim.bin: truncated"                 "$RA" --model "$TMP/lying-dim.bin" --prompt-ids 1
expect_error "lying-layers.bin: layer count"            "$RA" --model "$TMP/lying-layers.bin" --prompt-ids 1
expect_error "lying-kvheads.bin: 3 KV heads"            "$RA" --model "$TMP/lying-kvheads.bin" --prompt-ids 1
expect_error "v2.bin: .*version 2 .*not supported"      "$RA" --model "$TMP/v2.bin" --prompt-ids 1
expect_error "v9.bin: unknown llama2.c checkpoint version 9" "$RA" --model "$TMP/v9.bin" --prompt-ids 1
expect_error "vocab-min.bin: vocabulary size -2147483648 is out of range" "$RA" --model "$TMP/vocab-min.bin" --prompt-ids 1
expect_error "hf-hlen/model.safetensors: the data region has [0-9]+ bytes but the tensors cover [0-9]+, up to the end of tensor .*wrong header length" \
    "$RA" --model "$TMP/hf-hlen" --prompt-ids 1
expect_error "lm_head.weight is missing and tie_word_embeddings is not true in .*hf-nohead/config.json" \
    "$RA" --model "$TMP/hf-nohead" --prompt-ids 1

# Non-finite weights are refused at load; --no-check-weights skips that, and
# non-finite logits are then caught at run time, traced to where they begin.
expect_error "hf-nan/model.safetensors: tensor model.norm.weight: element 17 is NaN$" \
    "$RA" --model "$TMP/hf-nan" --prompt-ids 1
expect_error "nan-norm.bin: tensor norm: element 17 is NaN$" "$RA" --model "$TMP/nan-norm.bin" --prompt-ids 1
expect_error "nan-norm.bin: tensor norm: element 17 is NaN$" \
    "$BUILD/runahead-tune" --model "$TMP/nan-norm.bin" --objective model --contexts 64 --out "$TMP/t.h5"
expect_error "logits at position 2 are not finite \(id 0 is NaN\); the first non-finite value \(NaN\) is in the final norm at position 2" \
    "$RA" --model "$TMP/nan-norm.bin" --prompt-ids "1 2 3" --no-check-weights
expect_error "logits at position 2 are not finite .* is in the final norm at position 2" \
    "$RA" --model "$TMP/hf-nan" --prompt-ids "1 2 3" --no-check-weights --temperature 0.8
expect_error "logits at position 2 are not finite .* is in layer 2's keys at position 0" \
    "$RA" --model "$TMP/huge-l2.bin" --prompt-ids "1 2 3"
mkdir -p "$TMP/emptydir"
expect_error "emptydir.*config.json"                    "$RA" --model "$TMP/emptydir" --prompt-ids 1

# Prompts and generation against the context (512) and the vocabulary (512).
expect_error "600 tokens.*context of 512"               "$RA" --model "$M" --prompt-ids-file "$TMP/long-prompt.ids"
expect_error "exceeds the model's context of 512"       "$RA" --model "$M" --prompt-ids "1 2 3" --generate 511
expect_error "token id 600 at position 1 is outside the vocabulary" "$RA" --model "$M" --prompt-ids "1 600"
expect_error "--prompt-ids: 'x' .*not a token id"       "$RA" --model "$M" --prompt-ids "1 x"
expect_error "nope.ids: cannot open"                    "$RA" --model "$M" --prompt-ids-file "$TMP/nope.ids"

# Tokenizers.
expect_error "missing-tok.bin: cannot open"             "$RA" --model "$M" --tokenizer "$TMP/missing-tok.bin" --prompt "hi"
expect_error "no tokenizer"                             "$RA" --model "$M" --prompt "hi"
expect_error "no tokenizer"                             "$RA" --model "$M" --prompt-ids 1 --output text
if [ -r "$MODELS/llama2-tokenizer.bin" ]; then
    expect_error "tokenizer has 32000 tokens but the model .* has 512" \
        "$RA" --model "$M" --tokenizer "$MODELS/llama2-tokenizer.bin" --prompt "hi"
else
    skip_part "fixture $MODELS/llama2-tokenizer.bin not found: the tokenizer/model vocabulary mismatch is unchecked"
fi

# Flags.
expect_error "--generate: 'abc' is not an integer"      "$RA" --model "$M" --prompt-ids 1 --generate abc
expect_error "--threads: '0' is not an integer in 1"    "$RA" --model "$M" --prompt-ids 1 --threads 0
expect_error "--compute-dtype: 'bf17' is not one of auto, f32, bf16" "$RA" --model "$M" --prompt-ids 1 --compute-dtype bf17
expect_error "unknown option '--frobnicate'"            "$RA" --model "$M" --prompt-ids 1 --frobnicate
expect_error "exactly one of --prompt"                  "$RA" --model "$M" --prompt-ids 1 --prompt hi
expect_error "exactly one of --prompt"                  "$RA" --model "$M"
expect_error "no model given"                           "$RA" --prompt-ids 1
expect_error "--temperature -1 must be >= 0"            "$RA" --model "$M" --prompt-ids 1 --temperature -1
expect_error "--top-p 2 must be in"                     "$RA" --model "$M" --prompt-ids 1 --top-p 2
expect_error "--temperature: '1e-40' is below the smallest normal float" "$RA" --model "$M" --prompt-ids 1 --temperature 1e-40
expect_error "--temperature: '1e300' is too large for a float" "$RA" --model "$M" --prompt-ids 1 --temperature 1e300
expect_error "--temperature: 'nan' is not a finite number" "$RA" --model "$M" --prompt-ids 1 --temperature nan
expect_error "partition 'ratios:nan': 'nan' is not a finite number" "$RA" --model "$M" --prompt-ids 1 --partition ratios:nan
# The spec is parsed before anything is loaded: its error comes first, even with a model that is not there.
expect_error "partition 'table:': the FILE after ':' is missing" "$RA" --model "$TMP/no-model" --prompt-ids 1 --partition table:
expect_error "partition 'uneven' is not 'even', 'ratios:...', 'bounds:...', 'auto', 'auto:FILE' or 'table:FILE'" \
    "$RA" --model "$TMP/no-model" --prompt-ids 1 --partition uneven
# An error with context added to the one below it, intact (it once overlapped its own buffer).
expect_error "no cost-model profile for .*: run runahead-tune --calibrate first \($TMP/none.h5: cannot open: No such file or directory\)$" \
    "$BUILD/runahead-tune" --model "$M" --objective model --contexts 64 --out "$TMP/none.h5"
expect_error "--output: 'xml' is not"                   "$RA" --model "$M" --prompt-ids 1 --output xml
expect_error "--model needs a value"                    "$RA" --prompt-ids 1 --model

# Values that work as asked: a temperature so small that logits / T overflow
# is, to float precision, greedy (it made every probability NaN, and top-p read
# before its buffer), and more than 64 threads are used, not capped at 64.
greedy=$("$RA" --model "$M" --prompt-ids "1 2 3" --generate 8 --output ids 2>/dev/null)
for top_p in 0.9 1; do
    got=$("$RA" --model "$M" --prompt-ids "1 2 3" --generate 8 --output ids --temperature 2e-38 --top-p $top_p 2>"$TMP/err") ||
        fail "--temperature 2e-38 --top-p $top_p: $(cat "$TMP/err")"
    [ "$got" = "$greedy" ] || fail "--temperature 2e-38 --top-p $top_p gave '$got', greedy gives '$greedy'"
done
got=$("$RA" --model "$M" --prompt-ids "1 2 3" --generate 8 --output ids --threads 100 --report "$TMP/t100.json" 2>"$TMP/err") ||
    fail "--threads 100: $(cat "$TMP/err")"
[ "$got" = "$greedy" ] || fail "--threads 100 gave '$got', 1 thread '$greedy'"
grep -q '"threads_per_rank": 100,' "$TMP/t100.json" || fail "--threads 100 did not run 100 threads: $(grep -o '"threads_per_rank": [0-9]*' "$TMP/t100.json")"

# Backend options: a bad value is one line; cuda in a build without it says so.
expect_error "--backend: 'gpu' is not cpu or cuda"        "$RA" --model "$TMP/nonexistent.bin" --prompt-ids 1 --backend gpu
expect_error "--device-dtype: 'fp8' is not one of"        "$RA" --model "$TMP/nonexistent.bin" --prompt-ids 1 --device-dtype fp8
if [ ! -x "$BUILD/tests/cuda_devices" ]; then # the CPU-only build
    expect_error "rank 0: --backend cuda: .*built without CUDA" "$RA" --model "$M" --prompt-ids 1 \
        --backend cuda
fi

# --help and --version succeed.
"$RA" --help | grep -q -- "--prompt-ids" || fail "--help does not list --prompt-ids"
"$RA" --version | grep -Eq "^runahead [0-9]" || fail "--version"
finish
