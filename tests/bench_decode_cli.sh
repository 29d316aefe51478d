#!/bin/sh
# jobs/bench-decode-bin on stories260K, briefly: every mode (none, full, kvpr, infinigen) prints a row per
# context (the exact modes' tokens equal none's, else it fails); the infinigen row carries its quality
# figures (q_steps teacher-forced steps, agreement and recall in [0, 1], KL >= 0) and fetches fewer bytes
# per layer than full; --csv writes a header and one line per (context, mode) that jobs/plot-bench-decode
# draws; --ig-steps 0 leaves the quality out; bad options are one error line. (Timing means nothing here.)
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
B="$BUILD/jobs/bench-decode-bin"
M="$MODELS/stories260K.bin"
# 5 layers: at 25% of the KV neither KVPR's nor InfiniGen's working set fits (jobs/bench-decode uses 70%)
"$B" --model "$M" --contexts 48,96 --steps 3 --ig-steps 6 --budget-frac 0.7 --csv "$TMP/b.csv" >"$TMP/b.out" \
    2>"$TMP/err" || fail "bench-decode: $(cat "$TMP/err")"
for n in 48 96; do
    for mode in none full kvpr infinigen; do
        grep -Eq "^ +$n $mode " "$TMP/b.out" || fail "context $n: no $mode row: $(cat "$TMP/b.out")"
    done
    # ctx mode kv_B x_B ws link emul wall kvpr_l q_steps agree kl recall
    awk -v n=$n '$1 == n && $2 == "full" { full = $3 }
                 $1 == n && $2 == "infinigen" { ig = $3; q = $10; a = $11; kl = $12; r = $13 }
                 END { exit !(q == 6 && a >= 0 && a <= 1 && kl >= 0 && r > 0 && r <= 1 && ig > 0 && ig < full) }' \
        "$TMP/b.out" || fail "context $n: infinigen's quality or bytes are off: $(grep -E "^ +$n " "$TMP/b.out")"
done
grep -q "EMULATED" "$TMP/b.out" || fail "the table does not say that the link is emulated"
head -n 1 "$TMP/b.csv" | grep -q '^model,ctx,mode,kv_bytes_per_layer,' || fail "no CSV header"
[ "$(wc -l <"$TMP/b.csv")" -eq 9 ] || fail "CSV: expected a header and 8 lines: $(cat "$TMP/b.csv")"
awk -F, 'NF != 16 { bad = 1 } NR > 1 && $1 != "stories260K.bin" { bad = 1 }
         $3 == "infinigen" && $11 != 6 { bad = 1 } END { exit bad }' "$TMP/b.csv" || fail "CSV: malformed: $(cat "$TMP/b.csv")"
# the CSV appends: a second run adds lines, not a second header
"$B" --model "$M" --contexts 48 --steps 2 --ig-steps 0 --budget-frac 0.7 --random-weights --csv "$TMP/b.csv" \
    >"$TMP/b2.out" 2>"$TMP/err" || fail "bench-decode --ig-steps 0: $(cat "$TMP/err")"
[ "$(grep -c '^model,' "$TMP/b.csv")" -eq 1 ] && [ "$(wc -l <"$TMP/b.csv")" -eq 13 ] || fail "CSV: the second run did not append"
awk '$1 == 48 && $2 == "infinigen" && $10 == "-" { ok = 1 } END { exit !ok }' "$TMP/b2.out" ||
    fail "--ig-steps 0 still printed quality figures"
grep -q "^# NOTE: this model has random" "$TMP/b2.out" || fail "--random-weights printed no note"
if command -v gnuplot >/dev/null 2>&1; then
    "$SRC/jobs/plot-bench-decode" "$TMP/b.csv" "$TMP/b.png" >/dev/null 2>"$TMP/err" || fail "plot: $(cat "$TMP/err")"
    [ -s "$TMP/b.png" ] || fail "plot-bench-decode wrote no PNG"
else
    skip_part "gnuplot not installed (apt-get install gnuplot-nox): jobs/plot-bench-decode unchecked"
fi
expect_error "^bench-decode: .*--modes" "$B" --model "$M" --modes full,none
expect_error "^bench-decode: .*--modes" "$B" --model "$M" --modes none,fast
expect_error "^bench-decode: .*--ig-steps" "$B" --model "$M" --ig-steps -1
finish
