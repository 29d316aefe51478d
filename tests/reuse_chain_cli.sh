#!/bin/sh
# runahead --reuse on the chain (mpi/reuse_chain.h) from the command line, on stories260K:
#  1. A store filled on one rank (--store-write); on 2 ranks with --method kvr (and tsp) blend at
#     ratio 1 and none print the tokens of the same ids given as --prompt-ids to the single-rank
#     prefill (the independent reference), blend at ratio 0 prints one rank's full, blend at 0.15
#     (global scope) one rank's blend at 0.15, with full sends and with delta sends.
#  2. --report: the reuse record with the chain's method, route, send, scope and bounds, the
#     whole request's hits and recomputed rows.
#  3. Bad input, one line and a non-zero exit: a --reuse-send or --blend-scope that is not one of
#     its values, --reuse-send on one rank, the auto ratio, a schedule and --store-write on the chain.
#  4. A chunk that fails its checksum while rank 0's pass B loads it (rank 1 waits for those rows):
#     the job ends with the line naming the file and the layer, never hangs.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
need_command python3 python3
M="$MODELS/stories260K.bin"
RA="$BUILD/runahead"
run2() { timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$@"; }

# A prefix, 4 chunks of 16 ids, a question: 71 rows, the chunks cut wherever the split falls.
python3 - "$TMP/req.json" <<'PY'
import json, random, sys
random.seed(5)
chunks = [{"ids": [random.randrange(3, 512) for _ in range(16)]} for _ in range(4)]
json.dump({"system": {"ids": [1]}, "chunks": chunks, "question": {"ids": [500, 266, 301, 280, 303, 411]}},
          open(sys.argv[1], "w"))
PY
args="--model $M --request $TMP/req.json --store $TMP/store -n 12 -o ids"
ids=$($RA --model $M --request "$TMP/req.json" --tokenize-only 2>"$TMP/err") || fail "--tokenize-only: $(cat "$TMP/err")"
want=$($RA --model $M --prompt-ids "$ids" -n 12 -o ids 2>"$TMP/err") || fail "reference: $(cat "$TMP/err")"
$RA $args --reuse blend --store-write >/dev/null 2>"$TMP/err" || fail "filling the store: $(cat "$TMP/err")"
full1=$($RA $args --reuse full 2>"$TMP/err") || fail "full on one rank: $(cat "$TMP/err")"
blend1=$($RA $args --reuse blend 2>"$TMP/err") || fail "blend on one rank: $(cat "$TMP/err")"

# 1. On two ranks.
for method in "kvr" "tsp" "kvr --reuse-send delta" "tsp --reuse-send delta"; do
    for case in "none:$want:--reuse none" "blend 1:$want:--reuse blend --blend-ratio 1" \
                "blend 0:$full1:--reuse blend --blend-ratio 0" "blend 0.15:$blend1:--reuse blend --blend-scope global"; do
        name=${case%%:*}; rest=${case#*:}; expect=${rest%%:*}; opts=${rest#*:}
        got=$(run2 $RA $args --method $method $opts 2>"$TMP/err") || { fail "$method $name: $(cat "$TMP/err")"; continue; }
        [ "$got" = "$expect" ] || fail "$method $name on 2 ranks printed '$got', want '$expect'"
    done
    grep -q "^reuse on 2 ranks: ${method%% *}" "$TMP/err" || fail "$method: no chain line: $(cat "$TMP/err")"
done
[ -n "$want" ] && [ "$full1" != "" ] || fail "empty reference tokens"

# 2. The report of a chain run: 4 hits, layers 0 and 1 every row, then the rows of the selection.
run2 $RA $args --method kvr --route relay --partition even --reuse blend --blend-scope local \
    --report "$TMP/r.json" >/dev/null 2>"$TMP/err" || fail "--report: $(cat "$TMP/err")"
python3 - "$TMP/r.json" <<'PY' || fail "the chain's reuse record is wrong (above)"
import json, sys
r = json.load(open(sys.argv[1]))
u, c = r["reuse"], r.get("chain", {})
bad = []
if r["ranks"] != 2 or c.get("method") != "kvr" or c.get("route") != "relay" or c.get("send") != "full" \
        or c.get("scope") != "local" or c.get("bounds", [None])[0] != 0 or c["bounds"][-1] != 71:
    bad.append("chain %s ranks %s" % (c, r["ranks"]))
rec = u["recomputed_rows"]
if (u["hits"], u["misses"], u["rows"], u["loaded_rows"]) != (4, 0, 71, 64): bad.append("hits %d misses %d rows %d loaded %d" % (u["hits"], u["misses"], u["rows"], u["loaded_rows"]))
if len(rec) != 5 or rec[:2] != [71, 71] or not all(7 < x < 71 for x in rec[2:]): bad.append("recomputed %s" % rec)
if bad: print("; ".join(bad)); sys.exit(1)
PY

# 3. Bad input.
expect_error "--reuse-send: 'half' is not full or delta" $RA $args --method kvr --reuse blend --reuse-send half
expect_error "--blend-scope: 'all' is not global or local" $RA $args --method kvr --reuse blend --blend-scope all
expect_error "are for --method kvr or tsp" $RA $args --reuse blend --reuse-send full
expect_error "--reuse-send and --blend-scope need --reuse" $RA --model $M --prompt-ids "1 2" --blend-scope local
for case in "--blend-ratio auto:run on one rank only" \
            "--store-write:run on one rank only" "--blend-schedule 0.3,0.1:run on one rank only"; do
    opt=${case%%:*}; pattern=${case#*:}
    run2 $RA $args --method kvr --reuse blend $opt >"$TMP/out" 2>"$TMP/err"; rc=$?
    n=$(grep -c "^runahead: " "$TMP/err")
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ] && grep -q -- "$pattern" "$TMP/err" ||
        { fail "$opt on 2 ranks: rc $rc, $n error lines"; cat "$TMP/err" >&2; }
done

# 4. Chunk 0 (rank 0's only, with an even split and full sends) corrupted in its last layer.
cp -r "$TMP/store" "$TMP/bad"
python3 - "$TMP/req.json" "$TMP/bad" <<'PY' || fail "no chunk file holds chunk 0's ids"
import glob, json, struct, sys
ids = json.load(open(sys.argv[1]))["chunks"][0]["ids"]
needle, n = struct.pack("<%di" % len(ids), *ids), 0
for f in glob.glob(sys.argv[2] + "/chunks/*/*.rachunk"):
    b = bytearray(open(f, "rb").read())
    if needle in b:  # the layers from data_offset (one alignment unit here), 5 of them: layer 4's first K byte
        b[4096 + 4 * ((len(b) - 4096) // 5) + 3] ^= 0xFF
        open(f, "wb").write(b)
        n += 1
sys.exit(0 if n == 1 else 1)
PY
run2 $RA --model $M --request "$TMP/req.json" --store "$TMP/bad" -n 4 -o ids --method kvr --partition even \
    --reuse full >"$TMP/out" 2>"$TMP/err"; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^runahead: rank 0: .*\.rachunk: layer 4: checksum mismatch" "$TMP/err" ||
    { fail "a corrupted chunk on the chain: rc $rc"; cat "$TMP/err" >&2; }
finish
