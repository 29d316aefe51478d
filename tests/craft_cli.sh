#!/bin/sh
# runahead --reuse craft and runahead-chunks' craft records on stories260K
# (src/reuse/craft.h). A request of ids: none prints the tokens of the same
# ids given as --prompt-ids (the independent reference); craft with
# --store-write on an empty store prints them too (every chunk a miss) and
# stores each chunk behind its real context; runahead-chunks add stores the
# base variants (behind the system prompt alone); ls lists every chunk with
# its record's impact and the variants with the chunk they vary; craft at
# ratio 1 prints none's tokens, at ratio 0 it loads every chunk (3 hits); on 2
# ranks (--method kvr and tsp) craft at 0 and 0.3 prints what one rank prints.
# evict --policy craft empties the store, records with it (verify clean). Bad
# input: --blend-ratio auto with craft, --policy of another name.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
M="$MODELS/stories260K.bin"
RA="$BUILD/runahead"
C="$BUILD/runahead-chunks"
S="$TMP/store"
cat >"$TMP/req.json" <<'EOF2'
{"system": {"ids": [1, 9]}, "chunks": [{"ids": [403, 407, 261, 378]}, {"ids": [280, 303, 411, 300, 301]},
 {"ids": [33, 44, 55]}], "question": {"ids": [500, 266]}}
EOF2
args="--model $M --request $TMP/req.json --store $S -T 1 -n 10 -o ids"
ids=$($RA --model $M --request "$TMP/req.json" --tokenize-only 2>"$TMP/err") || fail "--tokenize-only: $(cat "$TMP/err")"
want=$($RA --model $M --prompt-ids "$ids" -n 10 -o ids 2>"$TMP/err") || fail "reference: $(cat "$TMP/err")"
got=$($RA $args --reuse none 2>"$TMP/err") || fail "none: $(cat "$TMP/err")"
[ "$got" = "$want" ] || fail "none printed '$got', --prompt-ids '$want'"
got=$($RA $args --reuse craft --store-write 2>"$TMP/err") || fail "craft --store-write: $(cat "$TMP/err")"
[ "$got" = "$want" ] || fail "craft on an empty store printed '$got', not '$want'"
grep -q "^reuse craft (ratio 0.150): 16 rows, 3 chunks: 0 hits, 3 misses" "$TMP/err" || fail "craft: $(grep ^reuse "$TMP/err")"
"$C" add -m "$M" --store "$S" -T 1 --system-ids "1 9" --ids "280 303 411 300 301" --ids "33 44 55" \
    --ids "403 407 261 378" 2>"$TMP/err" || fail "add: $(cat "$TMP/err")"
grep -q "3 chunks: 2 added (8 tokens), 1 already stored" "$TMP/err" || fail "add: $(cat "$TMP/err")"
"$C" ls -m "$M" --store "$S" >"$TMP/ls" || fail "ls"
n=$(awk 'NR > 1' "$TMP/ls" | wc -l)
rec=$(awk 'NR > 1 && $8 ~ /^0\.[0-9]+$/' "$TMP/ls" | wc -l)
var=$(awk 'NR > 1 && $9 != "-"' "$TMP/ls" | wc -l)
[ "$n" -eq 5 ] && [ "$rec" -eq 5 ] && [ "$var" -eq 2 ] ||
    { cat "$TMP/ls" >&2; fail "ls: $n chunks, $rec with records, $var variants (want 5, 5, 2)"; }
"$C" ls --json -m "$M" --store "$S" >"$TMP/ls.json" || fail "ls --json"
python3 -c 'import json, sys
e = json.load(open(sys.argv[1]))
keys = {x["key"] for x in e}
v = [x for x in e if x["base"] is not None]
assert len(e) == 5 and len(v) == 2 and all(x["base"] in keys for x in v), e
assert all(0 <= x["impact"] <= 1 for x in e), e' "$TMP/ls.json" || fail "ls --json: base and impact"
got=$($RA $args --reuse craft --blend-ratio 1 2>"$TMP/err") || fail "craft 1: $(cat "$TMP/err")"
[ "$got" = "$want" ] || fail "craft at ratio 1 printed '$got', none '$want'"
$RA $args --reuse craft --blend-ratio 0 >/dev/null 2>"$TMP/err" || fail "craft 0: $(cat "$TMP/err")"
grep -q "^reuse craft (ratio 0.000): 16 rows, 3 chunks: 3 hits, 0 misses; 12 rows loaded" "$TMP/err" ||
    fail "craft 0: $(grep ^reuse "$TMP/err")"
grep -q "^reuse recomputed rows per layer: 4 4 4 4 4" "$TMP/err" || fail "craft 0: $(grep recomputed "$TMP/err")"
if command -v "$MPIEXEC" >/dev/null 2>&1; then
    for r in 0 0.3; do
        one=$($RA $args --reuse craft --blend-ratio $r 2>"$TMP/err") || fail "craft $r: $(cat "$TMP/err")"
        for method in kvr tsp; do
            got=$(timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS $RA $args --method $method --reuse craft --blend-ratio $r \
                2>"$TMP/err") || { fail "craft $r on 2 ranks ($method): $(cat "$TMP/err")"; continue; }
            [ "$got" = "$one" ] || fail "craft $r on 2 ranks ($method) printed '$got', one rank '$one'"
        done
    done
fi
"$C" evict -m "$M" --store "$S" --all --policy craft >/dev/null 2>"$TMP/err" || fail "evict: $(cat "$TMP/err")"
"$C" verify -m "$M" --store "$S" >/dev/null 2>"$TMP/err" || fail "verify after evict: $(cat "$TMP/err")"
[ -z "$(find "$S/chunks" -type f)" ] || fail "evict left $(find "$S/chunks" -type f)"
expect_error "craft: takes a --blend-ratio in \[0, 1\]" $RA $args --reuse craft --blend-ratio auto
expect_error "--policy: 'lfu' is not lru or craft" "$C" evict -m "$M" --store "$S" --all --policy lfu
finish
