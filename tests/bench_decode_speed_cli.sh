#!/bin/sh
# jobs/bench-decode-speed-bin on stories260K, briefly: it decodes in both lanes on 1 and 2 threads, prints
# a row per (threads, lane) with the read bandwidth, the share of its bound and the triad, the bf16/f32
# ratios and the read/triad ratio, and rejects bad options with exit 2. (Timing means nothing here: this checks the program, not the machine.)
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
B="$BUILD/jobs/bench-decode-speed-bin"
"$B" --model "$MODELS/stories260K.bin" --threads 1,2 --steps 4 --repeat 1 --membw-mib 8 >"$TMP/out" 2>"$TMP/err" ||
    fail "bench-decode: $(cat "$TMP/err")"
for t in 1 2; do
    for lane in f32 bf16 bf16kv; do
        # T lane ctx tok/s [min-max] MB/step read [min-max] share [min-max] triad lin% attn% oth%
        # (the share is a whole percent: on this tiny model, with the read in cache, it may round to 0)
        awk -v t=$t -v l=$lane '$1 == t && $2 == l && $3 > 0 && $4 > 0 && $6 > 0 && $7 > 0 && $9 ~ /^[0-9]+$/ &&
             $11 > 0 && NF == 14 { ok = 1 }
             END { exit !ok }' "$TMP/out" || fail "no T=$t $lane row with positive figures: $(cat "$TMP/out")"
    done
done
grep -Eq "^1 +[0-9]+ +[0-9.]+x +[0-9.]+x$" "$TMP/out" || fail "no bf16/f32 and bf16kv/f32 ratio row"
grep -Eq "^# read / triad bandwidth, medians: T=1 [0-9.]+x T=2 [0-9.]+x$" "$TMP/out" || fail "no read/triad ratios"
grep -q "^# lane bf16: f32 weights, bf16 compute" "$TMP/out" ||
    grep -q "^# lane bf16: f32 weights, f32 compute (bf16 unit: none" "$TMP/out" || fail "the bf16 lane does not say what it runs"
# --membw-only: one line per thread count, the read bandwidth alone (jobs/compare-llama-cpp's bound)
"$B" --membw-only --threads 1,2 --repeat 1 --membw-mib 8 >"$TMP/bw" 2>&1 || fail "--membw-only failed: $(cat "$TMP/bw")"
awk '$1 != "read_gbs" || $3 <= 0 { exit 1 } END { exit NR != 2 }' "$TMP/bw" ||
    fail "--membw-only: not one 'read_gbs T GB/s' line per thread count: $(cat "$TMP/bw")"
expect_error "^bench-decode-speed: .*--threads" "$B" --threads 0
expect_error "^bench-decode-speed: .*--lanes" "$B" --lanes f64
expect_error "^bench-decode-speed: .*--membw-mib" "$B" --membw-mib 0
expect_error "^bench-decode-speed: .*holds no" "$B" --model "$MODELS/stories260K.bin" --steps 100000
expect_error "^bench-decode-speed: --backend: 'tpu' is not cpu or cuda" "$B" --backend tpu
if [ ! -x "$BUILD/tests/cuda_devices" ] || [ "$("$BUILD/tests/cuda_devices")" = 0 ]; then
    expect_error "^bench-decode-speed: backend: --backend cuda: " "$B" --model "$MODELS/stories260K.bin" --backend cuda
fi
finish
