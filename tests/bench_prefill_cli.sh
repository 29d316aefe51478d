#!/bin/sh
# jobs/bench-prefill-bin on a tiny synthetic model, briefly: a row per (threads, dtype, tokens) with
# positive tok/s and GFLOP/s, the ratio table, and one error line for a bad option or a backend that
# is not there (exit 2 for options). Timing means nothing here: this checks the program, not the machine.
. "$(dirname "$0")/lib.sh"
"$BUILD/runahead-synth" --preset tiny --seed 5 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
B="$BUILD/jobs/bench-prefill-bin"
"$B" --model "$TMP/tiny" --tokens 64,128 --threads 1,2 --repeat 2 --no-scaling --dtypes f32 >"$TMP/out" 2>"$TMP/err" ||
    fail "bench-prefill: $(cat "$TMP/err")"
for t in 1 2; do
    for n in 64 128; do
        # T dtype tokens tok/s [min-max] linear [min-max] peak [min-max] of-peak attention [min-max] lin% attn% other%
        awk -v t=$t -v n=$n '$1 == t && $2 == "f32" && $3 == n && $4 > 0 && $6 > 0 && $8 > 0 && $10 ~ /^[0-9]+%$/ &&
             NF == 15 {
             ok = 1 } END { exit !ok }' "$TMP/out" || fail "no T=$t f32 $n row with positive figures: $(cat "$TMP/out")"
    done
done
grep -Eq "^2 +128 +- +- +- +[0-9]+% " "$TMP/out" || fail "no ratio row for T=2, 128 tokens"
grep -q "^# runahead bench-prefill: .*, cpu backend$" "$TMP/out" || fail "the header does not name the backend"
expect_error "^bench-prefill: --backend: 'tpu' is not cpu or cuda" "$B" --backend tpu
expect_error "^bench-prefill: --dtypes: 'f64'" "$B" --dtypes f64
if [ ! -x "$BUILD/tests/cuda_devices" ] || [ "$("$BUILD/tests/cuda_devices")" = 0 ]; then
    expect_error "^bench-prefill: backend: --backend cuda: " "$B" --model "$TMP/tiny" --tokens 64 --no-scaling --backend cuda
fi
finish
