#!/bin/sh
# jobs/bench-reuse-bin at tiny sizes on a tiny synthetic model (an ids request): a row per (threads,
# store, mode) with a positive TTFT and speed-up, none's speed-up 1.00, blend's rows recomputed in the
# last layer between the question's and all, the store removed after; one error line (exit 2) for bad
# options. Timing means nothing here: this checks the program.
. "$(dirname "$0")/lib.sh"
"$BUILD/runahead-synth" --preset tiny --seed 5 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
B="$BUILD/jobs/bench-reuse-bin"
TMPDIR=$TMP "$B" --model "$TMP/tiny" --chunks 3 --chunk-tokens 20 --question-tokens 4 --threads 1,2 \
    --store-gbps 0,2 --repeat 2 >"$TMP/out" 2>"$TMP/err" || fail "bench-reuse: $(cat "$TMP/err")"
n=$(grep -c '^[0-9]' "$TMP/out")
[ "$n" -eq 16 ] || fail "expected 16 rows (2 thread counts x 2 stores x 4 modes), got $n: $(cat "$TMP/out")"
for t in 1 2; do
    for s in cache 2GB/s; do
        for m in none prefix full blend:0.15; do
            # threads store mode TTFT [min-max] speed-up rows
            awk -v t=$t -v s=$s -v m=$m '$1 == t && $2 == s && $3 == m && $4 > 0 && $6 > 0 && NF == 7 { ok = 1 }
                END { exit !ok }' "$TMP/out" || fail "no T=$t $s $m row with positive figures: $(cat "$TMP/out")"
        done
        awk -v t=$t -v s=$s '$1 == t && $2 == s && $3 == "none" && $6 == "1.00" { ok = 1 } END { exit !ok }' \
            "$TMP/out" || fail "T=$t $s: none's speed-up is not 1.00"
        # 64 rows: prefix + 3 x 20 + question; blend recomputes the question and 15% of the chunks' rows
        awk -v t=$t -v s=$s '$1 == t && $2 == s && $3 == "blend:0.15" && $7 > 4 && $7 < 60 { ok = 1 } END { exit !ok }' \
            "$TMP/out" || fail "T=$t $s: blend's recomputed rows are not between the question's and all"
    done
done
grep -q "^# machine : " "$TMP/out" || fail "the header does not name the machine"
grep -q "^# request : .* 3 chunks of 20 (ids)" "$TMP/out" || fail "the header does not describe the request"
ls -d "$TMP"/bench-reuse-* >/dev/null 2>&1 && fail "the run's request and store were left in $TMP"
expect_error "^bench-reuse: --store-gbps: 'x' is not a list" "$B" --model "$TMP/tiny" --store-gbps x
expect_error "^bench-reuse: --model is required" "$B"
expect_error "^bench-reuse: .*context" "$B" --model "$TMP/tiny" --chunks 64 --chunk-tokens 4096
finish
