#!/bin/sh
# jobs/run-prefill, jobs/scaling-study, jobs/bench-chain and jobs/network-study
# in a tiny configuration through mpirun: the CSV, the JSON lines, the
# Table-1-shaped table, the caption and the plots exist and hold the expected
# rows; a second start resumes without rerunning; --figure updates a copy of
# the README; bench-chain grows its sweep past the edge and re-measures KVR-S; the noise study reports every method's overhead, and the
# plots are real PNG and SVG files (jobs/setup installs gnuplot-nox; without it
# the plot checks are a listed skip).
. "$(dirname "$0")/lib.sh"
plots=1
command -v gnuplot >/dev/null 2>&1 || { plots=0; skip_part "gnuplot not installed (apt-get install gnuplot-nox): plots unchecked"; }
export RA_BUILD_DIR=$BUILD
J=$SRC/jobs
"$BUILD/runahead-synth" --preset tiny --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }

# run-prefill: one prompt, results in one directory, the world size checked.
out=$("$J/run-prefill" --model "$TMP/tiny" --context 200 --ranks 2 --method kvr --repeat 2 --oversubscribe \
      --out "$TMP/prefill" --trace 2>"$TMP/err") || { fail "run-prefill: $(tail -1 "$TMP/err")"; }
[ "$(echo "$out" | wc -w)" -eq 16 ] || fail "run-prefill: expected 16 generated ids, got '$out'"
for f in report.json trace.json output.txt run.log command.txt prompt.ids; do
    [ -s "$TMP/prefill/$f" ] || fail "run-prefill: no $f"
done
"$J/run-prefill" --model "$TMP/tiny" --context 200 --ranks 4 --out "$TMP/p4" >"$TMP/out" 2>"$TMP/err" &&
    fail "run-prefill: 4 ranks on $(nproc) cores without --oversubscribe succeeded"
grep -q "pass --oversubscribe" "$TMP/err" || [ "$(nproc)" -ge 4 ] || fail "run-prefill: no hint about --oversubscribe"
expect_error "run-prefill: no prompt" "$J/run-prefill" --model "$TMP/tiny"
expect_error "run-prefill: unknown option '--bogus'" "$J/run-prefill" --bogus

# The scaling study: 2 contexts x (single + TSP, KVR-E, KVR-A, KVR-S, KVR-P on 2 ranks).
S="$J/scaling-study --model $TMP/tiny --contexts 128,256 --ranks 2 --repeat 2 --oversubscribe --out $TMP/scaling"
$S >"$TMP/table.txt" 2>"$TMP/err" || { fail "scaling-study: $(tail -3 "$TMP/err")"; finish; }
grep -q "\[12/12\] kvr-p p=2 C=256" "$TMP/err" || fail "scaling-study: no progress line for run 12 of 12"
python3 - "$TMP/scaling" "$TMP/table.txt" "$plots" <<'PY' || fail "scaling-study: outputs"
import csv, json, os, sys
d, table, plots = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3] == "1"
rows = list(csv.DictReader(open(os.path.join(d, "summary.csv"))))
got = sorted((r["method"], int(r["ranks"]), int(r["context"])) for r in rows)
want = sorted([("single", 1, c) for c in (128, 256)] +
              [(m, 2, c) for m in ("tsp", "kvr-e", "kvr-a", "kvr-s", "kvr-p") for c in (128, 256)])
assert got == want, got
assert all(float(r["ttft_median_s"]) > 0 for r in rows)
lines = [json.loads(l) for l in open(os.path.join(d, "runs.jsonl"))]
assert len(lines) == 12 and all("label" in l and "ttft_s" in l for l in lines)
assert all(l["partition"]["spec"] == "auto" for l in lines if l["label"] == "kvr-a")
# KVR-S ran the searched split; KVR-P one interpolated from the other context's search.
kvrs = [l for l in lines if l["label"] == "kvr-s"]
assert all(l["partition"]["spec"].startswith("table:") for l in kvrs)
for want_row in ("TSP", "KVR-E", "KVR-A", "KVR-S", "KVR-P", "speedup", "2 ranks"):
    assert want_row in table, want_row
body = [l.split() for l in table.splitlines() if l.split() and l.split()[0] in ("128", "256")]
assert len(body) == 2 and all(len(b) == 9 and b[-1].endswith("x") for b in body), body
cap = open(os.path.join(d, "caption.md")).read()
assert "`jobs/scaling-study --model " in cap and "--contexts 128,256" in cap and " UTC on " in cap, cap
assert "median TTFT of 2 runs" in cap and "model tiny" in cap, cap
for name in ("ttft-context", "speedup", "ttft-ranks", "bytes") if plots else ():
    png = open(os.path.join(d, "plots", name + ".png"), "rb").read()
    svg = open(os.path.join(d, "plots", name + ".svg")).read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, name
    assert "<svg" in svg, name
PY
# A second start finds every run done.
$S >/dev/null 2>"$TMP/err2" || fail "scaling-study resume: $(tail -1 "$TMP/err2")"
[ "$(grep -c "done before" "$TMP/err2")" -eq 12 ] || fail "scaling-study resume: reran finished runs"

# --figure puts the figure and its caption into the tree: here a copy of the scripts and the README.
mkdir -p "$TMP/top/jobs/figures" && cp "$J/scaling-study" "$J/common.sh" "$J/study-report" "$TMP/top/jobs/" &&
    cp "$SRC/README.md" "$TMP/top/" || fail "copying the tree"
if [ "$plots" = 1 ]; then
    "$TMP/top/jobs/scaling-study" --model "$TMP/tiny" --contexts 128,256 --ranks 2 --repeat 2 --oversubscribe \
        --out "$TMP/scaling" --figure >/dev/null 2>"$TMP/err3" || fail "scaling-study --figure: $(tail -1 "$TMP/err3")"
    cmp -s "$TMP/scaling/plots/ttft-context.png" "$TMP/top/jobs/figures/scaling-ttft.png" || fail "--figure: no figure"
    grep -q "^The figure below is .*jobs/scaling-study --model $TMP/tiny --contexts 128,256 .*model tiny" \
        "$TMP/top/README.md" || fail "--figure: the README's caption was not replaced"
    [ "$(grep -c "The figure below is" "$TMP/top/README.md")" -eq 1 ] || fail "--figure: two captions in the README"
fi

# bench-chain in a tiny configuration: the table, KVR-S's search (partition/search.h: every share
# it measured, the chosen one marked and re-measured with its own runs), the bound's runs, drain
# apart from waits.
RA_BUILDDIR=$BUILD BENCH_CHAIN_MPI_FLAGS="$MPIEXEC_FLAGS" "$J/bench-chain" --model "$TMP/tiny" --contexts 192 \
    --repeat 3 --points 3 --min-stride 24 --quiet-wait 0 --retries 0 --report-dir "$TMP/bc" >"$TMP/bc.txt" 2>"$TMP/err" ||
    fail "bench-chain: $(tail -3 "$TMP/err")"
python3 - "$TMP/bc.txt" "$TMP/bc/bench-chain.jsonl" <<'PY' || { fail "bench-chain: outputs"; cat "$TMP/bc.txt" >&2; }
import json, sys
txt = open(sys.argv[1]).read()
runs = [json.loads(l) for l in open(sys.argv[2])]
labels = {r["label"] for r in runs}
assert {"single-1t", "single-2t", "TSP", "KVR-E", "KVR-S", "bound"} <= labels, labels
search = [l.split() for l in txt.split("# the search ")[1].splitlines() if l.split() and l.split()[0] == "192"]
shares = [float(l[1]) for l in search]
chosen = [l for l in search if l[-1] == "*"]
# 3 points over [0, 192) zoomed to a stride of 24: at least the first level's 3 shares, none twice.
assert shares == sorted(shares) and len(set(shares)) == len(shares) >= 3 and len(chosen) == 1, search
kvrs = [r for r in runs if r["label"] == "KVR-S" and r["kept"]]
assert len(kvrs) == 3, "KVR-S not re-measured with 3 runs"
assert abs(kvrs[0]["bounds"][1] / 192 - float(chosen[0][1])) < 1e-3, (kvrs[0]["bounds"], chosen)
assert sum(r["label"].startswith("KVR 0.") and r["kept"] for r in runs) == 3 * len(search), "a searched share without 3 runs"
assert all("drain_s" in x for r in runs if r["label"] == "KVR-S" for x in r["per_rank"])
assert "min..max" in txt and "KVR-S/bound" in txt
assert all(r["backend"] == "cpu" for r in runs) and "cpu backend" in txt
PY
# --backend cuda without a GPU: the first launch ends with the backend's line.
if [ ! -x "$BUILD/tests/cuda_devices" ] || [ "$("$BUILD/tests/cuda_devices")" = 0 ]; then
    RA_BUILDDIR=$BUILD BENCH_CHAIN_MPI_FLAGS="$MPIEXEC_FLAGS" "$J/bench-chain" --model "$TMP/tiny" --contexts 192 \
        --backend cuda >/dev/null 2>"$TMP/err" && fail "bench-chain --backend cuda without a GPU succeeded"
    grep -q "^bench-chain: rank 0: --backend cuda: " "$TMP/err" || { fail "bench-chain --backend cuda: no error line"; cat "$TMP/err" >&2; }
fi

# The network study: TTFT overhead of each method under emulated noise (Fig. 11c), and Table 3.
"$J/network-study" --model "$TMP/tiny" --contexts 128,256 --ranks 2 --link-gbps 0.05 --repeat 2 --oversubscribe \
    --slow-links 0.02 --slow-ranks 2 --out "$TMP/network" >"$TMP/net.txt" 2>"$TMP/err" ||
    { fail "network-study: $(tail -3 "$TMP/err")"; finish; }
python3 - "$TMP/network" "$TMP/net.txt" "$plots" <<'PY' || { fail "network-study: outputs"; cat "$TMP/net.txt" >&2; }
import csv, json, os, sys
d, txt, plots = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3] == "1"
rows = list(csv.DictReader(open(os.path.join(d, "noise.csv"))))
assert sorted((r["method"], r["context"]) for r in rows) == sorted((m, c) for m in ("tsp", "kvr-e", "kvr-s") for c in ("128", "256")), rows
assert all(r["overhead_pct"] not in ("", "None") for r in rows)
assert "mean overhead: TSP" in txt and "Table 3" in txt and "0.02 GB/s" in txt
for l in open(os.path.join(d, "noisy", "runs.jsonl")):
    r = json.loads(l)
    assert r["link"]["emulated"] and r["noise"]["emulated"], "a noisy run not labelled"
for l in open(os.path.join(d, "quiet", "runs.jsonl")):
    r = json.loads(l)
    assert r["link"]["emulated"] and "noise" not in r
assert not plots or os.path.getsize(os.path.join(d, "plots", "noise-overhead.png")) > 3000
PY
finish
