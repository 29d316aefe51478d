#!/bin/sh
# jobs/bench-reuse-chain-bin on 2 ranks at tiny sizes on a tiny synthetic model (ids requests), with a
# profile from runahead-tune --calibrate: a row per size and run with a positive TTFT, a finite
# prediction and its error, the reuse runs on the reuse auto split and the full prefill on the plain
# one, the four ratio rows per size, the temporary request and stores removed; a size past the context
# skipped with a line; one error line (exit 2) for bad options. Timing means nothing here.
. "$(dirname "$0")/lib.sh"
"$BUILD/runahead-synth" --preset tiny --seed 5 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
B="$BUILD/jobs/bench-reuse-chain-bin"
run() { timeout 300 $MPIEXEC -np "$@"; }
run 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$TMP/tiny" --calibrate --out "$TMP/p.h5" >/dev/null 2>"$TMP/err" \
    || { fail "calibrate: $(tail -1 "$TMP/err")"; finish; }
TMPDIR=$TMP run 2 $MPIEXEC_FLAGS "$B" --model "$TMP/tiny" --chunks 3,5 --chunk-tokens 16 --question-tokens 4 \
    --repeat 2 --profile "$TMP/p.h5" >"$TMP/out" 2>"$TMP/err" || fail "bench-reuse-chain: $(cat "$TMP/err")"
# 3 x 16 + 4 = 52 and 5 x 16 + 4 = 84 tokens
for n in 52 84; do
    for r in blend-kvr blend-1 none-kvr blend-tsp none-tsp; do
        # tokens run ranks bounds TTFT [min-max] model error
        awk -v n=$n -v r=$r '$1 == n && $2 == r && $5 > 0 && $7 > 0 && $8 ~ /%$/ && NF == 8 { ok = 1 }
            END { exit !ok }' "$TMP/out" || fail "no $n $r row with a TTFT and a prediction: $(cat "$TMP/out")"
    done
    awk -v n=$n '$1 == n && $2 == "blend-1" && $3 == 1 && $4 == "0,"n { ok = 1 } END { exit !ok }' "$TMP/out" \
        || fail "$n: blend-1 is not one rank over the whole request"
    awk -v n=$n '$1 == n && $2 == "none-tsp" && $3 == 2 { split($4, b, ","); ok = b[2] == int(n / 2) + n % 2 }
        END { exit !ok }' "$TMP/out" || fail "$n: full prefill on TSP is not the even split"
    for q in blend-1/blend-kvr none-kvr/blend-kvr blend-1/blend-tsp none-tsp/blend-tsp; do
        awk -v n=$n -v q=$q '$1 == "ratio" && $2 == n && $3 == q && $4 > 0 && $6 > 0 { ok = 1 } END { exit !ok }' \
            "$TMP/out" || fail "no ratio row $n $q: $(cat "$TMP/out")"
    done
done
grep -q "^# machine : .* 2 ranks x 1 threads" "$TMP/out" || fail "the header does not name the machine and ranks"
ls -d "$TMP"/bench-reuse-chain-* >/dev/null 2>&1 && fail "the run's requests and stores were left in $TMP"
# Without a profile: no predictions, still every row; 64 chunks of 40 exceed the tiny model's context.
TMPDIR=$TMP run 2 $MPIEXEC_FLAGS "$B" --model "$TMP/tiny" --chunks 3,64 --chunk-tokens 40 --question-tokens 4 \
    --repeat 1 --blend-scope local --partition even >"$TMP/out2" 2>"$TMP/err" \
    || fail "bench-reuse-chain without a profile: $(cat "$TMP/err")"
[ "$(awk '$1 == 124 && $7 == "nan" && $8 == "-"' "$TMP/out2" | wc -l)" -eq 5 ] || fail "no profile: $(cat "$TMP/out2")"
grep -q "^# 64 chunks: .* exceed the model's context of 2048: skipped" "$TMP/out2" || fail "the long request was not skipped"
grep -q "scope local, sends full, partition even" "$TMP/out2" || fail "the header does not give the reuse settings"
# Bad options: exit 2 and one line of the program's (mpirun adds its own).
one_line() {
    pattern=$1; shift
    "$@" >"$TMP/o" 2>"$TMP/e"; rc=$?
    n=$(grep -c "^bench-reuse-chain:" "$TMP/e")
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ] && grep -Eq -- "$pattern" "$TMP/e" \
        || { fail "wanted one line /$pattern/ (rc $rc, $n lines): $*"; cat "$TMP/e" >&2; }
}
one_line "^bench-reuse-chain: --model is required" run 2 $MPIEXEC_FLAGS "$B"
one_line "^bench-reuse-chain: needs at least 2 ranks" "$B" --model "$TMP/tiny"
one_line "^bench-reuse-chain: .*reuse-send" run 2 $MPIEXEC_FLAGS "$B" --model "$TMP/tiny" --reuse-send x
finish
