#!/bin/sh
# jobs/reuse-quality-bin on stories260K, briefly (jobs/reuse-quality runs it on SmolLM2): three
# requests of token ids, four chunks each. The table has a row per mode and ratio (random: the
# seeds of a ratio in one row); full prefill agrees with itself; blend at ratio 1 is full prefill
# (first token and answer agree, KL and every deviation 0), at ratio 0 it is `full`, whose K/V and
# attention deviate (the chunks were computed apart); craft (at blend's ratios by default) is full
# prefill at 1 and `full` at 0; the JSON holds every request's modes; the
# run's store is removed; bad input is one error line and a non-zero exit.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
B="$BUILD/jobs/reuse-quality-bin"
M="$MODELS/stories260K.bin"
# request R: a system prompt of 6 ids, 4 chunks of 24-40 ids, a question of 8 (ids 3..499)
awk -v d="$TMP" 'function ids(n,   s, i) { s = ""; for (i = 0; i < n; i++) s = s (i ? ", " : "") (3 + int(rand() * 497)); return "{\"ids\": [" s "]}" }
    BEGIN { srand(22)
        for (r = 0; r < 3; r++) {
            f = d "/r" r ".json"
            printf "{\"system\": %s, \"chunks\": [", ids(6) >f
            for (c = 0; c < 4; c++) printf "%s%s", (c ? ", " : ""), ids(24 + int(rand() * 17)) >f
            printf "], \"question\": %s}\n", ids(8) >f
            close(f)
        }
        f = d "/long.json"   # past stories260K context of 512
        printf "{\"chunks\": [%s, %s], \"question\": %s}\n", ids(300), ids(200), ids(8) >f
    }'
"$B" --model "$M" --ratios 0,0.15,1 --random-ratios 0.15 --seeds 2 --steps 6 --json "$TMP/q.json" --tmpdir "$TMP" \
    "$TMP/r0.json" "$TMP/r1.json" "$TMP/r2.json" >"$TMP/q.out" 2>"$TMP/err" || fail "reuse-quality: $(cat "$TMP/err")"
grep -v '^#' "$TMP/q.out" >"$TMP/table"
head -n 1 "$TMP/table" | grep -Eq '^mode +ratio +n +first +exact +f1 +same +kl +kdev +vdev +attn +recomp%$' ||
    fail "no table header: $(cat "$TMP/q.out")"
[ "$(sed 1d "$TMP/table" | awk '{ printf "%s/%s/%s ", $1, $2, $3 }')" = \
    "none/-/3 prefix/-/3 full/-/3 blend/0/3 blend/0.15/3 blend/1/3 random/0.15/6 craft/0/3 craft/0.15/3 craft/1/3 " ] ||
    fail "the table's rows are not the modes asked for: $(cat "$TMP/table")"
# mode ratio n first exact f1 same kl kdev vdev attn recomp%
awk 'NR > 1 { if ($4 < 0 || $4 > 1 || $5 < 0 || $5 > 1 || $6 < 0 || $6 > 1 || $7 < 0 || $7 > 6 || $8 < 0 ||
                  $9 < 0 || $10 < 0 || $11 < 0 || $12 < 0 || $12 > 100) bad = 1 }
     END { exit bad }' "$TMP/table" || fail "a value is out of range: $(cat "$TMP/table")"
exact='$4 == 1 && $5 == 1 && $6 == 1 && $8 == 0 && $9 == 0 && $10 == 0 && $11 == 0'
awk "\$1 == \"none\" && $exact { ok = 1 } END { exit !ok }" "$TMP/table" ||
    fail "full prefill does not agree with itself: $(cat "$TMP/table")"
awk "\$1 == \"blend\" && \$2 == 1 && $exact && \$12 == 100 { ok = 1 } END { exit !ok }" "$TMP/table" ||
    fail "blend at ratio 1 is not full prefill: $(cat "$TMP/table")"
full=$(awk '$1 == "full" { print $4, $5, $6, $7, $8, $9, $10, $11 }' "$TMP/table")
blend0=$(awk '$1 == "blend" && $2 == 0 { print $4, $5, $6, $7, $8, $9, $10, $11 }' "$TMP/table")
[ -n "$full" ] && [ "$full" = "$blend0" ] || fail "blend at ratio 0 ($blend0) is not full ($full)"
awk "\$1 == \"craft\" && \$2 == 1 && $exact && \$12 == 100 { ok = 1 } END { exit !ok }" "$TMP/table" ||
    fail "craft at ratio 1 is not full prefill: $(cat "$TMP/table")"
craft0=$(awk '$1 == "craft" && $2 == 0 { print $4, $5, $6, $7, $8, $9, $10, $11 }' "$TMP/table")
[ "$full" = "$craft0" ] || fail "craft at ratio 0 ($craft0) is not full ($full)"
awk '$1 == "full" && $9 > 0 && $11 > 0 && $12 < 100 { ok = 1 } END { exit !ok }' "$TMP/table" ||
    fail "full reuse neither deviates nor saves rows: $(cat "$TMP/table")"
[ "$(grep -c '^# r[0-2].json ' "$TMP/q.out")" -eq 30 ] || fail "not a line per request and mode: $(cat "$TMP/q.out")"
if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["requests"]) == 3 and all(len(r["modes"]) == 11 for r in d["requests"]), "requests"
assert len(d["summary"]) == 10 and all(len(s["kdev_layers"]) == d["n_layers"] for s in d["summary"]), "summary"
for r in d["requests"]:
    for m in r["modes"]:
        assert len(m["kdev"]) == len(m["attn"]) == len(m["recomputed"]) == d["n_layers"], "layers"' "$TMP/q.json" \
        2>"$TMP/err" || fail "--json: $(cat "$TMP/err")"
fi
ls -d "$TMP"/reuse-quality.* >/dev/null 2>&1 && fail "the run's store was left in $TMP"
expect_error "^reuse-quality: .*no request files" "$B" --model "$M"
expect_error "^reuse-quality: .*--ratios" "$B" --model "$M" --ratios 0,2 "$TMP/r0.json"
expect_error "^reuse-quality: .*--check-layers" "$B" --model "$M" --check-layers 2,1 "$TMP/r0.json"
expect_error "^reuse-quality: .*missing\.json" "$B" --model "$M" "$TMP/missing.json"
expect_error "^reuse-quality: .*long\.json.*context" "$B" --model "$M" --tmpdir "$TMP" "$TMP/long.json"
expect_error "^reuse-quality: .*nowhere" "$B" --model "$M" --tmpdir "$TMP/nowhere" "$TMP/r0.json"
ls -d "$TMP"/reuse-quality.* >/dev/null 2>&1 && fail "a failed run left its store in $TMP"
finish
