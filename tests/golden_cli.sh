#!/bin/sh
# `runahead` on the trained stories260K checkpoint prints the reference
# implementation's 200 greedy tokens, with 1 and 2 threads.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
expected=$(cat "$MODELS/stories260K.bos.greedy200.ids" | tr -s ' \n' ' ' | sed 's/ $//')
for threads in 1 2; do
    got=$("$BUILD/runahead" --model "$MODELS/stories260K.bin" --prompt-ids 1 --generate 200 \
          --output ids --threads $threads 2>"$TMP/err") || { fail "runahead failed: $(cat "$TMP/err")"; continue; }
    [ "$got" = "$expected" ] || fail "threads=$threads: generated ids differ from the reference"
done
# The same weights in the other llama2.c layouts: the v1 header (magic ak42, norms
# first) and the legacy header with a separate classifier (negative vocab size).
python3 - "$MODELS/stories260K.bin" "$TMP" <<'PY'
import struct, sys
src, out = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
dim, hidden, L, H, KV, V, S = struct.unpack("7i", data[:28])
hd, kvd = dim // H, KV * dim // H
f = 4
sizes = [("emb", V * dim), ("att_norm", L * dim), ("wq", L * dim * dim), ("wk", L * dim * kvd),
         ("wv", L * dim * kvd), ("wo", L * dim * dim), ("ffn_norm", L * dim), ("w1", L * hidden * dim),
         ("w2", L * dim * hidden), ("w3", L * hidden * dim), ("norm", dim), ("freqs", S * hd)]
t, pos = {}, 28
for name, n in sizes:
    t[name] = data[pos:pos + n * f]; pos += n * f
assert pos == len(data)
hdr = struct.pack("Ii", 0x616b3432, 1) + struct.pack("7i", dim, hidden, L, H, KV, V, S) + b"\1"
v1 = hdr + b"\0" * (256 - len(hdr))
for name in ["att_norm", "ffn_norm", "norm", "emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3"]:
    v1 += t[name]
open(out + "/v1.bin", "wb").write(v1)
# legacy, separate classifier: the same matrix stored twice gives the same model
legacy = struct.pack("7i", dim, hidden, L, H, KV, -V, S) + data[28:] + t["emb"]
open(out + "/untied.bin", "wb").write(legacy)
PY
# (--no-mmap only reads files of 2 MiB and more into memory; test_util checks that copy.)
for variant in v1 untied; do
    got=$("$BUILD/runahead" --model "$TMP/$variant.bin" --prompt-ids 1 --generate 200 --output ids --no-mmap 2>"$TMP/err") \
        || { fail "$variant: $(cat "$TMP/err")"; continue; }
    [ "$got" = "$expected" ] || fail "$variant: generated ids differ from the reference"
done

# JSON output carries the same ids and a TTFT.
"$BUILD/runahead" --model "$MODELS/stories260K.bin" --prompt-ids 1 --generate 200 --output json \
    >"$TMP/run.json" 2>/dev/null || fail "--output json failed"
python3 - "$TMP/run.json" "$MODELS/stories260K.bos.greedy200.ids" <<'PY' || fail "JSON record is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
ref = [int(x) for x in open(sys.argv[2]).read().split()]
assert r["generated_ids"] == ref, "ids"
assert r["prompt_ids"] == [1] and r["ttft_s"] > 0, "fields"
PY
finish
