#!/bin/sh
# The transports (mpi/transport.h): test_transport moves known KV rows through
# every host-MPI flavour on 2 and 3 ranks (chain, relay, uneven all-gather),
# checked row by row and against a PMPI byte count; then the runahead program:
# --transport names what the report records, and a transport that cannot work
# on the CPU backend's host rows is one clear error naming the rank.
. "$(dirname "$0")/lib.sh"
run() { timeout 300 $MPIEXEC -np "$@"; }
for p in 2 3; do
    run $p $MPIEXEC_FLAGS "$BUILD/tests/test_transport" || fail "test_transport with $p ranks"
done

"$BUILD/runahead-synth" --preset tiny --seed 3 --out "$TMP/tiny" >/dev/null 2>"$TMP/synth.err" \
    || { cat "$TMP/synth.err" >&2; fail "runahead-synth --preset tiny failed"; finish; }
RA="$BUILD/runahead --model $TMP/tiny --prompt-ids 1,2,3,4,5,6,7,8,9,10 --generate 4 --output ids"
single=$($RA 2>/dev/null) || fail "single run"
for t in auto mpi; do
    got=$(run 2 $MPIEXEC_FLAGS $RA --transport $t --report "$TMP/r.json" 2>"$TMP/err") \
        || { fail "--transport $t: $(tail -1 "$TMP/err")"; continue; }
    [ "$got" = "$single" ] || fail "--transport $t: tokens differ from the single-process run"
    grep -q "transport mpi," "$TMP/err" || fail "--transport $t: the summary does not name the transport"
    python3 -c "import json, sys; r = json.load(open(sys.argv[1])); assert r['transport'] == 'mpi', r['transport']" \
        "$TMP/r.json" || fail "--transport $t: report"
done
$RA --report "$TMP/r1.json" >/dev/null 2>&1 || fail "single run with a report"
python3 -c "import json, sys; r = json.load(open(sys.argv[1])); assert r['transport'] == 'none', r['transport']" \
    "$TMP/r1.json" || fail "a single rank moves no rows: transport none"

# One line from one rank, every rank exits.
bad() {
    pattern=$1; shift
    run "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { fail "expected a clean failure (rc $rc): $*"; return; }
    n=$(grep -c "^runahead: rank" "$TMP/err")
    grep -Eq -- "$pattern" "$TMP/err" && [ "$n" -eq 1 ] || { fail "wanted one line /$pattern/, got $n: $*"; cat "$TMP/err" >&2; }
}
bad "rank 0: --transport mpi-cuda moves device memory, but the cpu backend keeps the KV cache in host memory" \
    2 $MPIEXEC_FLAGS $RA --transport mpi-cuda
bad "rank 0: --transport nccl(: this runahead was built without CUDA| moves device memory, but the cpu backend)" \
    2 $MPIEXEC_FLAGS $RA --transport nccl
bad "rank 0: --transport nccl" 1 $RA --transport nccl
bad "--transport: 'ucx' is not auto, mpi, mpi-cuda or nccl" 2 $MPIEXEC_FLAGS $RA --transport ucx
finish
