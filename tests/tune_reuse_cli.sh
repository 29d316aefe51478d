#!/bin/sh
# runahead-tune --request --reuse on a tiny synthetic model and an ids request of 4 chunks: the store
# filled first, a short measured search of the reuse run's split (every trial ra_reuse_chain_prefill)
# writes one entry at the request's length into the group of its reuse tag, beside the plain groups and
# never in them; runahead --reuse on 2 ranks splits by that table (table:) or by the reuse cost model
# (auto) and prints one rank's tokens; the cost-model objective searches 4 ranks of the same run; bad
# combinations fail with one line.
. "$(dirname "$0")/lib.sh"
"$BUILD/runahead-synth" --preset tiny --seed 5 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
M="$TMP/tiny"
T="$TMP/t.h5"
run() { timeout 300 $MPIEXEC -np "$@"; }
python3 - "$TMP/req.json" <<'PY'
import json, random, sys
random.seed(7)
ids = lambda n: [random.randrange(3, 512) for _ in range(n)]
json.dump({"chunks": [{"ids": ids(40)} for _ in range(4)], "question": {"ids": ids(8)}}, open(sys.argv[1], "w"))
PY
# 4 x 40 + 8 = 168 tokens.
run 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$M" --calibrate --hw-tag hw --request "$TMP/req.json" \
    --store "$TMP/store" --reuse blend --blend-ratio 0.15 --out "$T" --repeats 1 --min-stride 16 --points 3 \
    >"$TMP/tune.out" 2>"$TMP/tune.err" || { cat "$TMP/tune.err" >&2; fail "runahead-tune --request"; finish; }
grep -q "added 4 of the request's 4 chunks" "$TMP/tune.err" || fail "the store was not filled first"
grep -Eq "^168 +0,[0-9]+,168 " "$TMP/tune.out" || fail "no result row for the request's 168 tokens: $(cat "$TMP/tune.out")"
grep -q "hardware hw+reuse-blend-r0.15-global-full" "$TMP/tune.err" || fail "the search did not name its reuse tag"
grep -q "C=168 KVR-S measured .* cost model" "$TMP/tune.err" || fail "no reuse prediction beside the measurement"
"$BUILD/runahead-table" show "$T" >"$TMP/show" || fail "runahead-table show"
grep -q "/hw+reuse-blend-r0.15-global-full/p2: 1 entry" "$TMP/show" || fail "no entry under the reuse tag: $(cat "$TMP/show")"
grep -q "/hw/p2:" "$TMP/show" && fail "the reuse search wrote into the plain group"
"$BUILD/runahead-table" validate "$T" >/dev/null || fail "the table does not validate"
# runahead --reuse on 2 ranks: auto is the reuse split, table: reads the reuse group; one rank's tokens.
RA="$BUILD/runahead --model $M --request $TMP/req.json --store $TMP/store --reuse blend -n 6 -o ids"
one=$($RA 2>"$TMP/err") || fail "blend on one rank: $(cat "$TMP/err")"
got=$(run 2 $MPIEXEC_FLAGS $RA --method kvr 2>"$TMP/err") || fail "blend on 2 ranks, auto: $(cat "$TMP/err")"
[ "$got" = "$one" ] || fail "auto: 2 ranks printed '$got', one rank '$one'"
grep -q "partition auto for 168 tokens on 2 ranks: .*reuse-balanced by the cost model" "$TMP/err" ||
    fail "auto for a reuse run is not the reuse split: $(grep partition "$TMP/err")"
got=$(run 2 $MPIEXEC_FLAGS $RA --method kvr --hw-tag hw --partition "table:$T" 2>"$TMP/err") ||
    fail "blend on 2 ranks, table: $(cat "$TMP/err")"
[ "$got" = "$one" ] || fail "table: 2 ranks printed '$got', one rank '$one'"
b=$(awk '$1 == 168 { print $2 }' "$TMP/tune.out")
grep -q "partition for 168 tokens interpolated from .*t.h5's 1 entries .*: \[$b\]" "$TMP/err" ||
    fail "table: for a reuse run did not give the searched split [$b]: $(grep partition "$TMP/err")"
# A second search finds the chunks stored; local scope is another group.
run 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$M" --hw-tag hw --request "$TMP/req.json" \
    --store "$TMP/store" --blend-scope local --out "$T" --repeats 1 --min-stride 32 --points 3 --no-baselines \
    >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "runahead-tune --blend-scope local"; }
grep -q "added" "$TMP/err" && fail "the chunks stored by the first search were added again"
"$BUILD/runahead-table" show "$T" | grep -q "/hw+reuse-blend-r0.15-local-full/p2: 1 entry" || fail "no local-scope group"
# The cost model of the reuse run, 4 ranks on one process.
"$BUILD/runahead-tune" --model "$M" --hw-tag hw --objective model --ranks 4 --request "$TMP/req.json" \
    --store "$TMP/store" --reuse full --out "$T" >"$TMP/model.out" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "--objective model"; }
"$BUILD/runahead-table" show "$T" | grep -q "/hw+reuse-full-global-full/p4: 1 entry; .* objective model" ||
    fail "no p4 model entry under the full-reuse tag"
# Clear errors.
one_line() {
    pattern=$1; shift
    "$@" >"$TMP/o" 2>"$TMP/e"; rc=$?
    n=$(grep -c "rank [0-9]*:" "$TMP/e")
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ] && grep -Eq -- "$pattern" "$TMP/e" \
        || { fail "wanted one line /$pattern/ (rc $rc, $n lines): $*"; cat "$TMP/e" >&2; }
}
one_line "--request needs --store" "$BUILD/runahead-tune" --model "$M" --request "$TMP/req.json" --out "$T"
one_line "need --request" "$BUILD/runahead-tune" --model "$M" --contexts 128 --reuse-send delta --out "$T"
one_line "--reuse craft: runahead-tune searches prefix, full or blend" "$BUILD/runahead-tune" --model "$M" \
    --request "$TMP/req.json" --store "$TMP/store" --reuse craft --out "$T"
one_line "--contexts does not go with --request" "$BUILD/runahead-tune" --model "$M" --contexts 128 \
    --request "$TMP/req.json" --store "$TMP/store" --out "$T"
finish
