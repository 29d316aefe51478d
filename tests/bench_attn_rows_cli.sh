#!/bin/sh
# jobs/bench-attn-rows-bin at tiny sizes: a row per (threads, lane) of the kernel table with positive
# figures, the span's rate ratio 1.00, the forward table's span and list rows on a tiny model, and one
# error line (exit 2) for bad options. Timing means nothing here: this checks the program.
. "$(dirname "$0")/lib.sh"
"$BUILD/runahead-synth" --preset tiny --seed 5 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
B="$BUILD/jobs/bench-attn-rows-bin"
"$B" --tokens 200 --ratio 0.2 --threads 1,2 --repeat 2 --kv-dtype bf16 --model "$TMP/tiny" >"$TMP/out" 2>"$TMP/err" ||
    fail "bench-attn-rows: $(cat "$TMP/err")"
for t in 1 2; do
    for lane in span list by-4; do
        rows=40; [ $lane = span ] && rows=200
        # threads lane rows ms [min-max] GFLOP/s vs-span
        awk -v t=$t -v l=$lane -v r=$rows '$1 == t && $2 == l && $3 == r && $4 > 0 && $6 > 0 && $7 > 0 && NF == 7 {
             ok = 1 } END { exit !ok }' "$TMP/out" || fail "no T=$t $lane row of $rows rows: $(cat "$TMP/out")"
    done
    grep -Eq "^$t +span +200 .* 1\.00$" "$TMP/out" || fail "T=$t: the span's ratio is not 1.00"
    # threads pass rows ms [min-max] linear attn other other/row
    awk -v t=$t '$1 == t && $2 == "list" && $3 == 40 && $4 > 0 && $6 > 0 && NF == 9 { ok = 1 } END { exit !ok }' \
        "$TMP/out" || fail "no T=$t forward list row: $(cat "$TMP/out")"
done
grep -q "^# machine : " "$TMP/out" || fail "the header does not name the machine"
expect_error "^bench-attn-rows: --ratio: 0 is not in \(0, 1\]" "$B" --ratio 0
expect_error "^bench-attn-rows: --kv-dtype: 'f16' is not f32 or bf16" "$B" --kv-dtype f16
expect_error "^bench-attn-rows: --heads 9 is not a multiple of --kv-heads 2" "$B" --heads 9 --kv-heads 2
expect_error "^bench-attn-rows: --tokens 5000 exceeds .*'s context of " "$B" --tokens 5000 --repeat 1 --threads 1 \
    --model "$TMP/tiny"
finish
