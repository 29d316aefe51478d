#!/bin/sh
# jobs/bench-trace-bin at tiny sizes on a tiny synthetic model (a random-id pool): the table's rows
# (none, each mode and policy) and window columns, the JSON; the hits the stores give against the hits
# a replay of the stream predicts (an unbounded store: blend and craft hit every chunk an earlier
# request held, prefix the longest run of chunks an earlier request began with; a store smaller than
# the pool, LRU or craft's policy: no more);
# blend at ratio 1 equals full prefill (KL 0, every token the same); on 2 ranks (KVR, TSP) the same hits
# and blend at 1 equal to the chain's full prefill; the stores removed after; one error line and a
# non-zero exit for bad input. Timing means nothing here: this checks the program.
. "$(dirname "$0")/lib.sh"
"$BUILD/runahead-synth" --preset tiny --seed 5 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
B="$BUILD/jobs/bench-trace-bin"
base="--model $TMP/tiny --pool 10 --chunk-tokens 8-16 --chunks 2-4 --question-tokens 4 --seed 3"
run() { # run NAME ARGS...: the table in $TMP/NAME.txt, the JSON in $TMP/NAME.json
    name=$1; shift
    TMPDIR=$TMP timeout 120 "$B" $base --json "$TMP/$name.json" "$@" >"$TMP/$name.txt" 2>"$TMP/$name.err" ||
        fail "bench-trace $*: $(cat "$TMP/$name.err")"
}
run2() { # run2 NAME ARGS...: as run, on 2 ranks
    name=$1; shift
    TMPDIR=$TMP timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$B" $base --json "$TMP/$name.json" "$@" \
        >"$TMP/$name.txt" 2>"$TMP/$name.err" || fail "bench-trace on 2 ranks $*: $(cat "$TMP/$name.err")"
}
run small --requests 6 --warmup 2 --store-frac 0.3
run big --requests 6 --warmup 2 --store-frac 100
run one --requests 4 --modes blend --blend-ratio 1 --windows 2
run2 big2 --requests 6 --warmup 2 --modes prefix,blend --store-frac 100
run2 one2 --requests 4 --modes blend --blend-ratio 1 --windows 2 --method tsp

# the table: mode policy hit% recomp% p50 p90 p99 write x-p50 x-sum KL top1 greedy
t=$TMP/small.txt
[ "$(sed '/^$/q' "$t" | grep -c '^[a-z]')" -eq 6 ] ||
    fail "expected 6 rows (the header, none, prefix, blend, craft with LRU and with its policy): $(cat "$t")"
awk '$1 == "none" && $2 == "-" && $3 == "-" && $4 == "100.0" && $8 == "0.0" && $9 == "1.00" && $10 == "1.00" &&
    $11 == "0.0000" && $12 == "1.000" && $13 == "1.000" && NF == 13 { ok = 1 } END { exit !ok }' "$t" || fail "none's row: $(cat "$t")"
for mp in prefix/lru blend:0.15/lru craft:0.15/lru craft:0.15/craft; do
    m=${mp%/*} p=${mp#*/}
    awk -v m=$m -v p=$p '$1 == m && $2 == p && $3 >= 0 && $3 <= 100 && $4 > 0 && $4 <= 100 && $5 > 0 && $5 <= $6 &&
        $6 <= $7 && $8 > 0 && $9 > 0 && $10 > 0 && $11 >= 0 && $12 >= 0 && $12 <= 1 && NF == 13 { ok = 1 } END { exit !ok }' "$t" ||
        fail "no $m $p row with figures in range: $(cat "$t")"
done
awk '$1 == "prefix" && $11 < 0.001 { ok = 1 } END { exit !ok }' "$t" || fail "prefix is not exact (KL): $(cat "$t")"
grep -q '^mode  *policy  *1-2  *3-4  *5-6$' "$t" || fail "no windows 1-2, 3-4, 5-6: $(cat "$t")"
[ "$(grep -c '^[a-z].*x (.*%)' "$t")" -eq 4 ] || fail "expected 4 window rows: $(cat "$t")"
grep -q "^# pool    : 10 chunks of .* (random ids)" "$t" || fail "the header does not describe the pool"
grep -q "^# stream  : 6 requests after 2 warm-up, 2-4 chunks each by Zipf s=1.1" "$t" ||
    fail "the header does not describe the stream"
for f in one one2; do
    awk '$1 == "blend:1" && $11 == "0.0000" && $12 == "1.000" && $13 == "1.000" && $4 == "100.0" { ok = 1 }
        END { exit !ok }' "$TMP/$f.txt" || fail "$f: blend at ratio 1 is not full prefill: $(cat "$TMP/$f.txt")"
done
grep -q "^# runahead bench-trace: .*, 2 ranks (tsp," "$TMP/one2.txt" || fail "one2: the header does not name the chain"

python3 - "$TMP/small.json" "$TMP/big.json" "$TMP/big2.json" <<'PY' || fail "the JSON's hits against the stream's replay"
import json, sys
small, big, big2 = (json.load(open(p)) for p in sys.argv[1:4])
stream = [r["chunks"] for r in big["stream"]]
assert [r["chunks"] for r in small["stream"]] == stream and len(stream) == 8, "the stream"
warm = sum(r["warmup"] for r in big["stream"])
def predict(mode):
    out = []
    for i, req in enumerate(stream):
        if mode == "prefix":
            h = 0
            while h < len(req) and any(s[: h + 1] == req[: h + 1] for s in stream[:i]):
                h += 1
        else:
            h = sum(any(c in s for s in stream[:i]) for c in req)
        out.append(h)
    return out[warm:]
for d in (small, big):
    assert [(v["mode"], v.get("policy")) for v in d["variants"]] == [("none", None), ("prefix", "lru"),
        ("blend:0.15", "lru"), ("craft:0.15", "lru"), ("craft:0.15", "craft")], d["variants"]
    for v in d["variants"]:
        assert len(v["requests"]) == 6 and len(v["windows"]) == 3, v["mode"]
        assert [r["chunks"] for r in v["requests"]] == [len(s) for s in stream[warm:]], v["mode"]
total = {}
for v_small, v_big in zip(small["variants"][1:], big["variants"][1:]):
    mode = v_big["mode"].split(":")[0]
    mode = "blend" if mode == "craft" else mode  # a variant of any context is a hit
    got = [r["hits"] for r in v_big["requests"]]
    assert got == predict(mode), "%s, unbounded store: hits %s, the replay %s" % (mode, got, predict(mode))
    less = [r["hits"] for r in v_small["requests"]]
    assert all(a <= b for a, b in zip(less, got)), "%s: a smaller store hit more: %s > %s" % (mode, less, got)
    total[v_big["mode"] + "/" + v_big["policy"]] = (sum(less), sum(got))
assert total["blend:0.15/lru"][1] > total["blend:0.15/lru"][0] > 0, "blend: hits, small and unbounded store %s" % total
assert big2["ranks"] == 2 and [r["chunks"] for r in big2["stream"]] == [r["chunks"] for r in big["stream"]]
for v, v2 in zip(big["variants"], big2["variants"]):
    assert [r["hits"] for r in v["requests"]] == [r["hits"] for r in v2["requests"]], "2 ranks: %s's hits" % v["mode"]
PY
ls -d "$TMP"/bench-trace-* >/dev/null 2>&1 && fail "the run's stores were left in $TMP"

expect_error "^bench-trace: --model is required" "$B"
expect_error "^bench-trace: --zipf: -1 is not in" "$B" $base --zipf -1
expect_error "^bench-trace: --chunks: '5-2' is not A-B" "$B" $base --chunks 5-2
expect_error "^bench-trace: --modes: 'none' is not a list" "$B" $base --modes none
expect_error "^bench-trace: --modes: 'blend/mru' is not a list" "$B" $base --modes blend/mru
expect_error "^bench-trace: --store-frac: 0 is not in" "$B" $base --store-frac 0
expect_error "^bench-trace: a request of .* exceeds .*context" "$B" $base --chunks 8 --chunk-tokens 1000-1000
echo '{"chunks": [' >"$TMP/bad.json"
expect_error "^bench-trace: .*bad.json" "$B" --model "$TMP/tiny" "$TMP/bad.json"
finish
