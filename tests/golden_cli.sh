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
