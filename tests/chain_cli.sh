#!/bin/sh
# The runahead program over MPI: every method and route, with the default
# (auto) and the even split, prints the single-process tokens; the report's
# byte counts (received: from MPI's statuses; sent: as handed to MPI) follow
# the paper's traffic formulas (TSP (p-1)C, KVR sum of b_r, (p-1)C/2 when even,
# rows per layer); each rank's time splits into compute, wait and drain; auto
# says how it split; with --repeat the per-rank figures and the trace are the
# median run's; bad partitions and rank counts give one clear error and every
# rank exits (a timeout guards hangs).
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
M="$MODELS/stories260K.bin"
python3 -c "import random; random.seed(5); print(' '.join(str(random.randrange(1, 512)) for _ in range(312)))" >"$TMP/p.ids"
run() { timeout 300 $MPIEXEC -np "$@"; }
RA="$BUILD/runahead --model $M --prompt-ids-file $TMP/p.ids --generate 24 --output ids"
single=$($RA 2>/dev/null) || fail "single run"
for p in 2 3 4; do
    for m in "kvr --route chain" "kvr --route relay" "kvr --route direct" "kvr --partition even" "tsp"; do
        got=$(run $p $MPIEXEC_FLAGS $RA --method $m --report "$TMP/r.json" 2>"$TMP/err") \
            || { fail "p=$p $m: $(tail -1 "$TMP/err")"; continue; }
        [ "$got" = "$single" ] || fail "p=$p $m: tokens differ from the single-process run"
        python3 - "$TMP/r.json" $p "$m" <<'PY' || fail "p=$p $m: report"
import json, sys
r = json.load(open(sys.argv[1])); p = int(sys.argv[2]); method = sys.argv[3].split()[0]
shape = r["model_shape"]
C, L = r["context_length"], shape["layers"]
b = r["partition"]["bounds"]
row = shape["kv_heads"] * shape["dim"] // shape["heads"] * 4          # one K or V row in bytes
rows = (p - 1) * C if method == "tsp" else sum(b[1:p])                 # Eq. 5 / rank r receives rows [0, b_r)
if r["partition"]["spec"] == "even" and method == "kvr":
    assert rows == (p - 1) * C // 2, "Eq. 7 (C divisible by p)"
if "--partition" not in sys.argv[3] and method == "kvr":                # the default: auto, balanced by FLOPs
    assert r["partition"]["spec"] == "auto", r["partition"]
    assert r["partition"]["source"].startswith("equal-work from FLOPs"), r["partition"]
    sizes = [b[i + 1] - b[i] for i in range(p)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1], sizes   # later tokens cost more
want = rows * 2 * L * row                                               # K and V, every layer
assert r["ranks"] == p and r["method"] == method, "header"
assert len(r["per_rank"]) == p and r["ttft_s"]["median"] > 0, "per-rank figures"
assert r["bytes_sent_total"] == want, f"{r['bytes_sent_total']} != {want}"
assert sum(x["bytes_recv"] for x in r["per_rank"]) == want, "received"
assert r["generated_ids"][0] == r["first_token"], "first token"
assert all(abs(x["compute_s"] + x["wait_s"] + x["drain_s"] - x["total_s"]) < 1e-9 for x in r["per_rank"]), "drain_s"
PY
    done
done

# A trace has one track per rank and spans per layer; with --repeat 3 it is the
# median run's, as are the report's per-rank figures: the trace's TTFT is the
# reported median, the last rank's last layer ends before it, and that rank's
# total (first token, then its sends done) is no shorter.
run 3 $MPIEXEC_FLAGS $RA --repeat 3 --trace "$TMP/t.json" --report "$TMP/r3.json" >/dev/null 2>"$TMP/err" ||
    fail "trace run: $(tail -1 "$TMP/err")"
grep -q "^runahead: partition auto for 312 tokens on 3 ranks: \[0,[0-9]*,[0-9]*,312\] (equal-work from FLOPs" "$TMP/err" ||
    fail "auto: stderr does not say which split and why"
grep -q "per rank: the median run (run [123] of 3" "$TMP/err" || fail "stderr does not say which run the figures are"
python3 - "$TMP/t.json" "$TMP/r3.json" <<'PY' || fail "trace"
import json, sys
t = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
ev = t["traceEvents"]
tracks = {e["tid"] for e in ev if e["ph"] == "X"}
assert tracks == {0, 1, 2}, tracks
assert any(e["name"].endswith("wait kv") for e in ev if e["tid"] == 2)
ttft = r["ttft_s"]; m = ttft["median_pass"]
assert sorted(ttft["all"])[1] == ttft["median"] == ttft["all"][m], ttft
assert r["per_rank_pass"] == m and t["otherData"]["pass"] == m and t["otherData"]["passes"] == 3
assert t["otherData"]["ttft_s"] == ttft["median"], (t["otherData"], ttft)
first = [e for e in ev if e["name"] == "first token"]
assert len(first) == 1 and first[0]["tid"] == 2 and abs(first[0]["ts"] - 1e6 * ttft["median"]) < 1e-3, first
last_end = max(e["ts"] + e["dur"] for e in ev if e["ph"] == "X" and e["tid"] == 2)
assert last_end <= 1e6 * ttft["median"] + 1e-3, (last_end, ttft)
assert r["per_rank"][2]["total_s"] >= ttft["median"] - 1e-9, (r["per_rank"][2], ttft)
for x in r["per_rank"]:
    s = x["spread"]
    for k in ("total_s", "wait_s", "drain_s"):
        assert s[k]["min"] <= x[k] <= s[k]["max"] and s[k]["min"] <= s[k]["median"] <= s[k]["max"], (k, x)
PY

# Bad partitions and rank counts: one clear error line from one rank, all ranks exit.
bad() {
    pattern=$1; shift
    run "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { fail "expected a clean failure (rc $rc): $*"; return; }
    n=$(grep -c "^runahead: rank" "$TMP/err")
    grep -Eq -- "$pattern" "$TMP/err" && [ "$n" -eq 1 ] || { fail "wanted one line /$pattern/, got $n: $*"; cat "$TMP/err" >&2; }
}
bad "ratios sum to 0.9"              3 $MPIEXEC_FLAGS $RA --partition ratios:0.5,0.2,0.2
bad "need 3 comma-separated ratios"  3 $MPIEXEC_FLAGS $RA --partition ratios:0.5,0.5
bad "need 4 boundaries for 3 ranks"  3 $MPIEXEC_FLAGS $RA --partition bounds:0,100,312
bad "rank 1 gets an empty slice"     3 $MPIEXEC_FLAGS $RA --partition bounds:0,100,100,312
bad "must run from 0 to the prompt length 312" 2 $MPIEXEC_FLAGS $RA --partition bounds:0,100,300
bad "not 'even', 'ratios"            2 $MPIEXEC_FLAGS $RA --partition uneven
bad "--partition auto:$TMP/none.h5: no usable profile" 2 $MPIEXEC_FLAGS $RA --partition "auto:$TMP/none.h5"
bad "fewer than the 4 ranks"         4 $MPIEXEC_FLAGS $BUILD/runahead --model $M --prompt-ids "1 2 3" --output ids
bad "use mpirun -np 1"               2 $MPIEXEC_FLAGS $RA --method single
bad "tsp always splits evenly"       2 $MPIEXEC_FLAGS $RA --method tsp --partition bounds:0,100,312
bad "--route: 'ring'"                2 $MPIEXEC_FLAGS $RA --route ring
bad "no such model"                  2 $MPIEXEC_FLAGS $BUILD/runahead --model "$TMP/none.bin" --prompt-ids 1,2,3
finish
