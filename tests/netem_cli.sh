#!/bin/sh
# The emulated link and noise sidecar (mpi/netem.c) and --expect-ranks:
# emulated runs give the same tokens and the same counted bytes (the arrival
# times travel as uncounted companion messages), their TTFT is at least the
# link's transfer time, noise on the only adjacent pair halves the bandwidth,
# every report and summary says "emulated", a run without the flags has no
# "link" field; bad values and a wrong world size give one clear error, and so
# do values whose emulated waits would never end.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
M="$MODELS/stories260K.bin"
python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(1, 512)) for _ in range(256)))" >"$TMP/p.ids"
run() { timeout 300 $MPIEXEC -np "$@"; }
RA="$BUILD/runahead --model $M --prompt-ids-file $TMP/p.ids --generate 8 --output ids --threads 1"
single=$($RA 2>/dev/null) || fail "single run"

# check REPORT P METHOD GBPS NOISE_FACTOR: tokens were checked by the caller; here the
# report's bytes equal the quiet run's, its link fields, and TTFT >= the link's time.
check() {
    python3 - "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); q = json.load(open(sys.argv[2]))
p, method, gbps, factor = int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
assert r["link"] == {"emulated": True, "gbps": gbps, "latency_us": 0.0}, r.get("link")
assert ("noise" in r) == (factor > 1), "noise field"
assert "link" not in q, "a run without emulation must not have a link field"
assert r["bytes_sent_total"] == q["bytes_sent_total"], "companion messages were counted"
assert [x["msgs_sent"] for x in r["per_rank"]] == [x["msgs_sent"] for x in q["per_rank"]], "messages"
if method == "kvr":   # the last message into the last rank leaves only after all before it on that link
    link_bytes = r["per_rank"][p - 2]["bytes_sent"]
else:                 # ring all-gather: 2 (K, V) x (p-1) steps x the largest block, every layer
    b = r["partition"]["bounds"]; row = r["bytes_sent_total"] / (2 * r["model_shape"]["layers"] * (p - 1) * b[-1])
    link_bytes = 2 * r["model_shape"]["layers"] * (p - 1) * max(b[i + 1] - b[i] for i in range(p)) * row
bound = factor * link_bytes / (gbps * 1e9)
t = r["ttft_s"]["min"]
assert t >= 0.97 * bound, f"TTFT {t:.4f} s below the link's {bound:.4f} s"
assert t <= bound + 2.0, f"TTFT {t:.4f} s far above the link's {bound:.4f} s"
PY
}

for m in kvr tsp; do
    run 2 $MPIEXEC_FLAGS $RA --method $m --report "$TMP/quiet.json" >/dev/null 2>&1 || fail "$m quiet run"
    # 2 MB/s: rank 0's 128 rows x 4 layers x K,V take about 0.1 s on the link.
    got=$(run 2 $MPIEXEC_FLAGS $RA --method $m --link-gbps 0.002 --report "$TMP/link.json" 2>"$TMP/err") \
        || { fail "$m emulated: $(tail -1 "$TMP/err")"; continue; }
    [ "$got" = "$single" ] || fail "$m emulated: tokens differ from the single-process run"
    grep -q "(emulated link 0.002 GB/s" "$TMP/err" || fail "$m emulated: the summary does not say so"
    check "$TMP/link.json" "$TMP/quiet.json" 2 $m 0.002 1 || fail "$m emulated: report"
    # Noise of at least half the link on the only adjacent pair leaves half of it.
    got=$(run 2 $MPIEXEC_FLAGS $RA --method $m --link-gbps 0.002 --noise-gbps 0.004 --report "$TMP/noisy.json" 2>"$TMP/err") \
        || { fail "$m noisy: $(tail -1 "$TMP/err")"; continue; }
    [ "$got" = "$single" ] || fail "$m noisy: tokens differ"
    grep -q "emulated noise 0.004 GB/s" "$TMP/err" || fail "$m noisy: the summary does not say so"
    check "$TMP/noisy.json" "$TMP/quiet.json" 2 $m 0.002 2 || fail "$m noisy: report"
done

# Every route and 3 ranks under a noisy emulated link with latency: right tokens, no hang.
for m in "kvr --route chain" "kvr --route relay" "kvr --route direct" "tsp"; do
    got=$(run 3 $MPIEXEC_FLAGS $RA --method $m --link-gbps 0.05 --link-latency-us 50 --noise-gbps 0.02 \
          --noise-slot-ms 1 --repeat 2 2>"$TMP/err") || { fail "p=3 $m noisy: $(tail -1 "$TMP/err")"; continue; }
    [ "$got" = "$single" ] || fail "p=3 $m noisy: tokens differ"
done

# Bad values: one error line each.
expect_error "--noise-gbps needs --link-gbps" $RA --noise-gbps 1
expect_error "--link-latency-us needs --link-gbps" $RA --link-latency-us 5
expect_error "--link-gbps -1 must be" $RA --link-gbps -1
expect_error "--noise-slot-ms 0 must be in \\[0.1, 1e\\+06\\] ms" $RA --link-gbps 1 --noise-slot-ms 0
expect_error "--link-gbps: 'fast' is not a number" $RA --link-gbps fast

# Values whose emulated waits never end (2 ranks hung on them) are refused with the accepted
# range, and so is a link on which one prompt pass would take over an hour (known once the
# split is): one line from one rank, long before the timeout (124 = hung).
refused() {
    pattern=$1; shift
    timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { fail "expected a clean failure, got rc $rc: $*"; return; }
    n=$(grep -c "^runahead: rank" "$TMP/err")
    grep -Eq -- "$pattern" "$TMP/err" && [ "$n" -eq 1 ] || { fail "wanted one line /$pattern/, got $n: $*"; cat "$TMP/err" >&2; }
}
refused "rank 0: --link-gbps 1e-09 must be 0 \\(no emulated link\\) or in \\[1e-06, 1e\\+06\\] GB/s" $RA --link-gbps 1e-9
refused "rank 0: --link-latency-us 1e\\+300 must be in \\[0, 1e\\+06\\] us" $RA --link-gbps 1 --link-latency-us 1e300
refused "rank 0: --noise-slot-ms 1e-300 must be in \\[0.1, 1e\\+06\\] ms" $RA --link-gbps 1 --noise-gbps 1 --noise-slot-ms 1e-300
refused "rank 0: --noise-gbps 1e\\+300 must be in \\[0, 1e\\+06\\] GB/s" $RA --link-gbps 1 --noise-gbps 1e300
# The tiny synthetic model (4 layers, 256-byte rows) with a 2048-token prompt split evenly: 1024
# rows of K and V per layer at 1 kB/s, halved by noise, is 4194 s.
"$BUILD/runahead-synth" --preset tiny --out "$TMP/tiny" >/dev/null 2>&1 || fail "runahead-synth"
python3 -c "print(' '.join(str(i % 500 + 3) for i in range(2048)))" >"$TMP/long.ids"
refused "rank 0: --link-gbps 1e-06: one prompt pass would keep the busiest emulated link busy for 4.19e\\+03 s .*the limit is 3600 s: use --link-gbps >= 1.17e-06" \
    "$BUILD/runahead" --model "$TMP/tiny" --prompt-ids-file "$TMP/long.ids" --generate 1 --output ids --threads 1 \
    --partition even --link-gbps 1e-6 --noise-gbps 1

# --expect-ranks: a wrong world size, and two one-rank copies started side by side
# (what Open MPI does under a launcher without PMIx), each fail at once.
run 2 $MPIEXEC_FLAGS $RA --expect-ranks 3 >"$TMP/out" 2>"$TMP/err" && fail "--expect-ranks 3 on 2 ranks succeeded"
[ "$(grep -c "started as 2 MPI ranks, but --expect-ranks 3" "$TMP/err")" -eq 1 ] ||
    { fail "--expect-ranks: wanted one error line"; cat "$TMP/err" >&2; }
$RA --expect-ranks 2 >"$TMP/out1" 2>"$TMP/err1" & pid=$!
$RA --expect-ranks 2 >"$TMP/out2" 2>"$TMP/err2" && fail "a one-rank copy with --expect-ranks 2 succeeded"
wait $pid && fail "a one-rank copy with --expect-ranks 2 succeeded"
for e in "$TMP/err1" "$TMP/err2"; do
    grep -q "started as 1 MPI rank, but --expect-ranks 2: the launcher did not join" "$e" ||
        { fail "one-rank copy: no clear error"; cat "$e" >&2; }
done
[ ! -s "$TMP/out1" ] && [ ! -s "$TMP/out2" ] || fail "a one-rank copy produced output"
run 2 $MPIEXEC_FLAGS $RA --expect-ranks 2 >/dev/null 2>&1 || fail "--expect-ranks 2 on 2 ranks failed"
finish
