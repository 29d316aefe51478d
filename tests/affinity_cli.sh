#!/bin/sh
# Threads follow the CPU allocation: runahead's default thread count is the
# number of CPUs in its affinity mask (taskset here; Slurm's cgroups and
# --cpus-per-task, mpirun's binding elsewhere), not the node's core count, and
# ranks that share a mask split it. The report records, per rank, the mask as
# a CPU list, the thread count and the resident memory (VmHWM, VmRSS).
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
need_command taskset util-linux
need_command python3 python3
M="$MODELS/stories260K.bin"
RA="$BUILD/runahead --model $M --prompt-ids 1,2,3,4 --generate 4 --output ids"
# the mask this test was given, as the kernel lists it ("0-1", "0,2-3"), and its size
mask=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
ncpu=$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")

# check REPORT RANKS THREADS CPUS: every rank's figures in the JSON report
check() {
    python3 - "$@" <<'PY'
import json, sys
path, ranks, threads, cpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r = json.load(open(path))
assert len(r["per_rank"]) == ranks, f"{len(r['per_rank'])} ranks"
for p in r["per_rank"]:
    assert p["threads"] == threads, f"rank {p['rank']}: {p['threads']} threads, expected {threads}"
    assert p["cpus"] == cpus, f"rank {p['rank']}: cpus {p['cpus']!r}, expected {cpus!r}"
    # the model (about 1 MB) and the runtime are resident: more than 1 MB, less than 1 GB
    assert 1e6 < p["vm_rss_bytes"] <= p["vm_hwm_bytes"] < 1e9, f"rank {p['rank']}: memory {p}"
    assert 0 < p["rss_anon_bytes"] < p["vm_rss_bytes"] and 0 < p["rss_file_bytes"] < p["vm_rss_bytes"], f"{p}"
    assert p["pss_bytes"] is None or 0 < p["pss_bytes"] <= p["vm_rss_bytes"], f"{p}"
PY
}

# --- one process: taskset -c 0 gives 1 thread, the whole mask one per CPU
taskset -c 0 $RA --report "$TMP/one.json" >/dev/null 2>"$TMP/err" || fail "taskset -c 0: $(tail -1 "$TMP/err")"
check "$TMP/one.json" 1 1 0 || fail "taskset -c 0: report"
grep -Eq '^ +0 .* 1  0$' "$TMP/err" || fail "taskset -c 0: the summary does not show 1 thread on CPU 0: $(cat "$TMP/err")"
$RA --report "$TMP/all.json" >/dev/null 2>"$TMP/err" || fail "whole mask: $(tail -1 "$TMP/err")"
check "$TMP/all.json" 1 "$ncpu" "$mask" || fail "whole mask ($mask): report"
grep -q "hwm_MB" "$TMP/err" || fail "the summary has no memory column"
# --threads still wins
taskset -c 0 $RA --threads 3 --report "$TMP/t3.json" >/dev/null 2>&1 || fail "--threads 3"
check "$TMP/t3.json" 1 3 0 || fail "--threads 3: report"

# --- ranks: two ranks sharing one CPU get a thread each
if command -v "$MPIEXEC" >/dev/null 2>&1; then
    taskset -c 0 timeout 300 $MPIEXEC -np 2 $MPIEXEC_FLAGS --bind-to none $RA --report "$TMP/mpi.json" \
        >/dev/null 2>"$TMP/err" || fail "2 ranks on CPU 0: $(tail -1 "$TMP/err")"
    check "$TMP/mpi.json" 2 1 0 || fail "2 ranks on CPU 0: report"
    if [ "$ncpu" -ge 2 ]; then
        # unbound, both ranks may run on every CPU: they split the mask
        timeout 300 $MPIEXEC -np 2 $MPIEXEC_FLAGS --bind-to none $RA --report "$TMP/mpi2.json" \
            >/dev/null 2>"$TMP/err" || fail "2 unbound ranks: $(tail -1 "$TMP/err")"
        check "$TMP/mpi2.json" 2 $(((ncpu + 1) / 2)) "$mask" || fail "2 unbound ranks: report"
    fi
else
    skip_part "$MPIEXEC not found: the multi-rank part"
fi
finish
