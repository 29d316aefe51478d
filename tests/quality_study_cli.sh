#!/bin/sh
# jobs/quality-study-bin on stories260K, briefly (jobs/quality-study runs it on SmolLM2): rows for f32,
# bf16 compute, a bf16 KV cache and InfiniGen at each budget, with agreement and recall in [0, 1],
# KL >= 0 and the free-running count within the steps; InfiniGen with every token selected (ratio 1,
# alpha inf, budget 100%) decodes as dense f32 does: agreement 1, KL 0, recall 1, every step the
# same token; --csv writes a header and a line per row; bad input is one error line.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
B="$BUILD/jobs/quality-study-bin"
M="$MODELS/stories260K.bin"
awk 'BEGIN { srand(7); for (i = 0; i < 96; i++) printf "%d ", 1 + int(rand() * 500); print "" }' >"$TMP/p.ids"
"$B" --model "$M" --prompt-ids-file "$TMP/p.ids" --steps 8 --budgets 10,30 --csv "$TMP/q.csv" >"$TMP/q.out" \
    2>"$TMP/err" || fail "quality-study: $(cat "$TMP/err")"
for mode in f32 bf16-compute bf16-kv "infinigen +10%" "infinigen +30%"; do
    grep -Eq "^p.ids +$mode " "$TMP/q.out" || fail "no '$mode' row: $(cat "$TMP/q.out")"
done
# prompt mode budget fetched% recall rec_min q_cos agree kl kl_max same
awk '$1 == "p.ids" { split($11, s, "/"); if ($8 < 0 || $8 > 1 || $9 < 0 || s[1] < 0 || s[1] > 8 || s[2] != 8) bad = 1
                     if ($2 == "f32" && ($8 != 1 || $11 != "8/8")) bad = 1
                     if ($2 == "infinigen" && ($4 <= 0 || $4 > 100 || $5 <= 0 || $5 > 1)) bad = 1 }
     END { exit bad }' "$TMP/q.out" || fail "a row is out of range: $(cat "$TMP/q.out")"
head -n 1 "$TMP/q.csv" | grep -q '^prompt,n_prompt,mode,budget_pct,' || fail "no CSV header"
[ "$(wc -l <"$TMP/q.csv")" -eq 6 ] || fail "CSV: expected a header and 5 lines: $(cat "$TMP/q.csv")"
# jobs/quality-study --summary: the mean of two prompts' rows (the same rows twice: the same means)
sed 1d "$TMP/q.csv" | sed 's/^p.ids,/again,/' >>"$TMP/q.csv"
"$SRC/jobs/quality-study" --summary "$TMP/q.csv" >"$TMP/sum.out" 2>"$TMP/err" || fail "--summary: $(cat "$TMP/err")"
[ "$(grep -c -E '^(f32|bf16-compute|bf16-kv|infinigen) ' "$TMP/sum.out")" -eq 5 ] || fail "--summary: $(cat "$TMP/sum.out")"
for mode in "infinigen +10%" "infinigen +30%"; do
    want=$(grep -E "^p.ids +$mode " "$TMP/q.out" | awk '{ print $4, $8, $9 }')
    got=$(grep -E "^$mode " "$TMP/sum.out" | awk '{ print $3, $6, $7 }')
    [ "$got" = "$want" ] || fail "--summary: '$mode' fetched, agree, kl are '$got', the rows' '$want'"
done
# every token selected: InfiniGen's decode is dense decode
"$B" --model "$M" --prompt-ids-file "$TMP/p.ids" --steps 8 --modes infinigen --ratio 1 --alpha inf --budgets 100 \
    >"$TMP/all.out" 2>"$TMP/err" || fail "quality-study, full selection: $(cat "$TMP/err")"
awk '$2 == "infinigen" && $5 == 1 && $8 == 1 && $9 == 0 && $11 == "8/8" { ok = 1 } END { exit !ok }' "$TMP/all.out" ||
    fail "InfiniGen with every token selected differs from dense f32: $(cat "$TMP/all.out")"
expect_error "^quality-study: .*nothing" "$B" --model "$M" --prompt-ids-file "$TMP/nothing"
expect_error "^quality-study: .*--budgets" "$B" --model "$M" --prompt-ids-file "$TMP/p.ids" --budgets 0
expect_error "^quality-study: .*--ratio" "$B" --model "$M" --prompt-ids-file "$TMP/p.ids" --ratio 2
expect_error "^quality-study: .*context" "$B" --model "$M" --prompt-ids-file "$TMP/p.ids" --steps 500
expect_error "^quality-study: .*required" "$B" --model "$M"
finish
