#!/bin/sh
# Faults on a cluster of network-namespace hosts (jobs/netns-cluster), mid-prompt:
#   - host h0's data link taken down (ip link set ... down), and h0's ranks stopped (SIGSTOP):
#     with --watchdog 8 the job ends within 16 s (twice the period) with one line naming rank 1
#     and what it waited for (rank 0's KV rows, TSP's all-gather or the start barrier); with the
#     link down rank 0 may wait too (for its sends to drain): then a second line names rank 0;
#   - without the watchdog, rank 1 killed (SIGKILL): mpirun ends and no process is left on any host;
#   - runahead-tune merging its searches into a partition table when host h1's rank is killed:
#     the table still validates and keeps every entry it had;
#   - 1% loss and jitter (only where the kernel has netem; said otherwise): the same tokens.
# Every job runs under `timeout`; the cluster is taken down at the end. About 60 s on 2 busy cores.
. "$(dirname "$0")/lib.sh"
netns_cluster tnf 2
RA="$BUILD/runahead"
# 24 thin layers and a 95/5 split: rank 0 computes nearly all the time and rank 1 waits for its
# rows, so a fault almost surely lands while rank 1 waits on a layer.
"$BUILD/runahead-synth" --preset tiny --layers 24 --out "$TMP/tiny24" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
python3 -c "print(' '.join(str(i % 500 + 3) for i in range(2000)))" >"$TMP/p.ids"
ARGS="--model $TMP/tiny24 --prompt-ids-file $TMP/p.ids --generate 1 --output ids --threads 1"

# rank_pid HOST RANK: the pid of MPI rank RANK on HOST (from the processes in HOST's namespace).
rank_pid() {
    for p in $($NC pids "$1" 2>/dev/null); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}
has_watchdog() { cat /proc/"$1"/task/*/comm 2>/dev/null | grep -qx ra-watchdog; }
# wait_rank HOST RANK JOB: sets $pid once rank RANK on HOST runs its prompt passes (its watchdog
# thread runs; without one, once it exists and 2 s have passed); fails after 60 s.
wait_rank() {
    pid="" tries=0
    while [ $tries -lt 600 ]; do
        [ -n "$pid" ] || pid=$(rank_pid "$1" "$2")
        if [ -n "$pid" ]; then has_watchdog "$pid" && break; fi
        kill -0 "$3" 2>/dev/null || break
        sleep 0.1; tries=$((tries + 1))
    done
    [ -n "$pid" ] && has_watchdog "$pid"
}
# no_processes: nothing runs on any host any more (within 10 s).
no_processes() {
    i=0
    while [ -n "$($NC pids h0)$($NC pids h1)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    [ -z "$($NC pids h0)$($NC pids h1)" ]
}

# fault NAME METHOD-ARGS ACTION PATTERN: a 2-host job with --watchdog 8; once rank 1 runs its
# passes, ACTION (link or stop) hits host h0; the job must end within 16 s with one line PATTERN
# from rank 1, and at most one watchdog line from each rank (only rank 1's when h0 is stopped).
fault() {
    name=$1 margs=$2 action=$3 pattern=$4
    timeout 120 $NC run -np 2 "$RA" $ARGS $margs --repeat 10000 --watchdog 8 >"$TMP/$name.out" 2>"$TMP/$name.err" &
    job=$!
    if ! wait_rank h1 1 $job; then
        fail "$name: rank 1 never started its passes"; cat "$TMP/$name.err" >&2
        kill $job 2>/dev/null; wait $job; $NC link h0 up >/dev/null 2>&1; return
    fi
    sleep 1
    case $action in
        link) $NC link h0 down 2>/dev/null ;;
        stop) for p in $($NC pids h0); do
                  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=" && kill -STOP "$p"
              done ;;
    esac
    t0=$(date +%s.%N)
    wait $job; rc=$?
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    $NC link h0 up 2>/dev/null
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { fail "$name: the job did not end by itself (rc $rc, 124: hung)"; }
    awk -v d="$dt" 'BEGIN { exit !(d < 16) }' || fail "$name: the job took $dt s to end after the fault, not under 16 (twice --watchdog 8)"
    n=$(grep -Ec -- "$pattern" "$TMP/$name.err")
    all=$(grep -c 'watchdog' "$TMP/$name.err")
    well=$(grep -Ec '^runahead: rank [01]: watchdog: no progress for 8 s while waiting for .+; aborting$' "$TMP/$name.err")
    r0=$(grep -c '^runahead: rank 0: watchdog' "$TMP/$name.err")
    max0=1
    [ "$action" = link ] || max0=0
    [ "$n" -eq 1 ] && [ "$all" -eq "$well" ] && [ "$r0" -le $max0 ] ||
        { fail "$name: wanted one line /$pattern/ (got $n) and no other but rank 0's waits (at most $max0)"; cat "$TMP/$name.err" >&2; }
    no_processes || fail "$name: processes left after the job: $($NC pids h0) $($NC pids h1)"
    echo "$name: ended ${dt} s after the fault: $(grep watchdog "$TMP/$name.err")"
}
KVR_WAIT="^runahead: rank 1: watchdog: no progress for 8 s while waiting for (layer [0-9]+ KV rows from rank 0|every rank at the barrier that starts a prompt pass); aborting$"
TSP_WAIT="^runahead: rank 1: watchdog: no progress for 8 s while waiting for every rank (in the all-gather of layer [0-9]+ KV rows|at the barrier that starts a prompt pass); aborting$"
fault kvr-link "--partition ratios:0.95,0.05" link "$KVR_WAIT"
fault kvr-stop "--partition ratios:0.95,0.05" stop "$KVR_WAIT"
fault tsp-link "--method tsp" link "$TSP_WAIT"

# Without the watchdog, a rank killed: mpirun and every rank end.
timeout 60 $NC run -np 2 "$RA" $ARGS --repeat 10000 >/dev/null 2>"$TMP/kill.err" &
job=$!
pid="" tries=0
while [ -z "$pid" ] && [ $tries -lt 600 ] && kill -0 $job 2>/dev/null; do
    pid=$(rank_pid h1 1); sleep 0.1; tries=$((tries + 1))
done
if [ -n "$pid" ]; then
    sleep 2
    kill -KILL "$pid"
    wait $job; rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "SIGKILL of rank 1: mpirun did not end by itself (rc $rc)"
    no_processes || fail "SIGKILL of rank 1: processes left: $($NC pids h0) $($NC pids h1)"
else
    fail "SIGKILL: rank 1 never started"; kill $job 2>/dev/null; wait $job
fi

# A partition table being merged when a host fails: a measured search of 6 contexts on 2 hosts
# merges after each into a table that already has 2 entries; h1's rank is killed mid-search.
RT="$BUILD/runahead-table"
T="$TMP/t.h5"
entries() { "$RT" show "$1" 2>/dev/null | sed -n 's|^/.*/nf/p2: \([0-9]*\) entr.*|\1|p'; }
TUNE="$BUILD/runahead-tune --model $TMP/tiny24 --hw-tag nf --out $T --repeats 1 --min-stride 64 --points 3 --no-baselines --threads 1"
timeout 120 $NC run -np 2 $TUNE --contexts 256,320 >/dev/null 2>"$TMP/tune0.err" ||
    { cat "$TMP/tune0.err" >&2; fail "the first search"; }
before=$(entries "$T")
[ "$before" = 2 ] || fail "the first search left ${before:-no} entries, want 2"
timeout 120 $NC run -np 2 $TUNE --contexts 384,448,512,576,640,704 >"$TMP/tune.out" 2>"$TMP/tune.err" &
job=$!
# Kill once the search has merged its first context (the table has 3 entries), or after 20 s.
i=0
while [ "$(entries "$T")" = 2 ] && [ $i -lt 200 ] && kill -0 $job 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
pid=$(rank_pid h1 1)
if [ -n "$pid" ]; then kill -KILL "$pid"; else echo "note: the search ended before h1 could be killed"; fi
wait $job
no_processes || fail "killed search: processes left: $($NC pids h0) $($NC pids h1)"
"$RT" validate "$T" >/dev/null 2>"$TMP/val.err" || fail "the table does not validate after the host failed: $(cat "$TMP/val.err")"
after=$(entries "$T")
[ -n "$after" ] && [ "$after" -ge "$before" ] || fail "the table had $before entries, has ${after:-none} after the host failed"
for c in 256 320; do
    "$RT" show "$T" 2>/dev/null | grep -Eq "^ +$c " || fail "entry $c lost after the host failed"
done
echo "table: $before entries before, $after after the host failed mid-search"

# Loss and jitter do not change the tokens (TCP retransmits), where the kernel has netem.
want=$("$RA" $ARGS 2>/dev/null) || fail "single run"
if $NC shape all --delay 1 --jitter 1 --loss 1 >"$TMP/shape.err" 2>&1; then
    for m in kvr tsp; do
        got=$(timeout 120 $NC run -np 2 "$RA" $ARGS --method $m 2>"$TMP/err") || fail "$m with loss: $(tail -1 "$TMP/err")"
        [ "$got" = "$want" ] || fail "$m: 1% loss and jitter changed the tokens"
    done
else
    grep -q "no netem" "$TMP/shape.err" || fail "shape --loss failed otherwise than for netem: $(cat "$TMP/shape.err")"
    # The kernel's, like missing hardware: never a failure, strict or not.
    echo "skip: this kernel has no netem (sch_netem): loss and jitter unchecked"
fi
finish
