#!/bin/sh
# Chunk-cache reuse on the CUDA backend, through the program, on stories260K
# and an ids request of three chunks: the store filled on the GPU (--reuse full
# --store-write), then --reuse blend --blend-ratio 1 prints the greedy ids of
# --reuse none and --blend-ratio 0 those of --reuse full (both equalities hold
# bit for bit, src/reuse/reuse.h), and blend at 0.15 reports its recomputed
# rows. Exits 77 without a GPU. RA_BLEND_CHECK_BACKEND=cpu runs the same
# checks on the CPU backend (the script's own check, no GPU needed).
. "$(dirname "$0")/lib.sh"
backend=${RA_BLEND_CHECK_BACKEND:-cuda}
if [ "$backend" = cuda ]; then
    devices=$("$BUILD/tests/cuda_devices") || { fail "tests/cuda_devices failed"; finish; }
    [ "$devices" -gt 0 ] || skip_no_device "cuda_blend: no CUDA device (the CUDA build compiled and linked)"
fi
need_fixture stories260K.bin
cat >"$TMP/req.json" <<'JSON'
{"system": {"ids": [1]},
 "chunks": [{"ids": [403, 407, 261, 378, 280, 303, 411, 300, 301, 266, 286, 500]},
            {"ids": [280, 303, 411, 300, 301, 403, 407, 261, 378, 266]},
            {"ids": [266, 286, 500, 403, 280, 411, 301, 300]}],
 "question": {"ids": [500, 266, 403, 407]}}
JSON
run() {
    "$BUILD/runahead" --model "$MODELS/stories260K.bin" --request "$TMP/req.json" --store "$TMP/store" \
        --backend "$backend" -n 16 -o ids --ignore-eos "$@" 2>"$TMP/err"
}
run --reuse full --store-write >/dev/null || { fail "filling the store: $(cat "$TMP/err")"; finish; }
none=$(run --reuse none) || fail "--reuse none: $(cat "$TMP/err")"
full=$(run --reuse full) || fail "--reuse full: $(cat "$TMP/err")"
grep -q "3 chunks: 3 hits" "$TMP/err" || fail "--reuse full did not find the 3 chunks the store was filled with: $(cat "$TMP/err")"
one=$(run --reuse blend --blend-ratio 1) || fail "--reuse blend --blend-ratio 1: $(cat "$TMP/err")"
zero=$(run --reuse blend --blend-ratio 0) || fail "--reuse blend --blend-ratio 0: $(cat "$TMP/err")"
part=$(run --reuse blend --blend-ratio 0.15) || fail "--reuse blend --blend-ratio 0.15: $(cat "$TMP/err")"
grep -q "^reuse blend" "$TMP/err" || fail "--reuse blend: no reuse summary on stderr: $(cat "$TMP/err")"
echo "$backend: none '$none', full '$full', blend 0.15 '$part'"
[ "$(echo "$none" | wc -w)" -eq 16 ] || fail "--reuse none printed '$none', not 16 ids"
[ "$one" = "$none" ] || fail "blend at ratio 1 printed '$one', none '$none'"
[ "$zero" = "$full" ] || fail "blend at ratio 0 printed '$zero', full '$full'"
[ "$(echo "$part" | wc -w)" -eq 16 ] || fail "blend at 0.15 printed '$part', not 16 ids"
finish
