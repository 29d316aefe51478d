#!/bin/sh
# --watchdog: a rank that stops making progress (here: SIGSTOP) no longer hangs
# the job. Rank 0 of a 2-rank prompt pass is stopped mid-run; rank 1, waiting
# for its KV rows, must print one line naming itself, the layer and rank 0,
# and the job must end (MPI_Abort) within seconds of the watchdog's limit.
# Without the watchdog the same job hangs until the timeout. Also: runahead-tune
# and TSP, a healthy run with the watchdog on prints the same tokens, and a bad
# value is one error line. Everything runs under `timeout`; stopped ranks are
# continued and killed by pid afterwards.
. "$(dirname "$0")/lib.sh"
need_command pgrep procps
RA="$BUILD/runahead"
# 24 thin layers and a 95/5 split: rank 0 computes nearly all the time and rank 1
# waits for its rows, so a stop almost surely lands while rank 1 waits on a layer.
"$BUILD/runahead-synth" --preset tiny --layers 24 --out "$TMP/tiny24" >/dev/null 2>&1 || fail "runahead-synth"
python3 -c "print(' '.join(str(i % 500 + 3) for i in range(2000)))" >"$TMP/p.ids"
ARGS="--model $TMP/tiny24 --prompt-ids-file $TMP/p.ids --generate 1 --output ids --threads 1"

# rank_pid MARKER RANK: the pid of the MPI rank RANK whose command line holds MARKER.
rank_pid() {
    for p in $(pgrep -f -- "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}
# has_watchdog PID: the rank runs its watchdog thread, so its prompt passes have begun.
has_watchdog() { cat /proc/"$1"/task/*/comm 2>/dev/null | grep -qx ra-watchdog; }
# alive PID: a process that is not gone or a zombie.
alive() { s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [ "${s#Z}" = "$s" ]; }

# stopped NAME RANK PATTERN MARKER CMD...: runs CMD (a job that would run for many minutes;
# MARKER is an argument of it that finds its processes), stops rank RANK once its passes
# run, and wants the job to fail within 20 s with one line matching PATTERN.
stopped() {
    name=$1 victim=$2 pattern=$3 marker=$4; shift 4
    timeout 120 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    job=$!
    pid="" tries=0
    while [ $tries -lt 600 ]; do # up to 60 s to start under load
        [ -n "$pid" ] || pid=$(rank_pid "$marker" "$victim")
        [ -n "$pid" ] && has_watchdog "$pid" && break
        kill -0 $job 2>/dev/null || break
        sleep 0.1; tries=$((tries + 1))
    done
    if [ -z "$pid" ] || ! has_watchdog "$pid"; then
        fail "$name: rank $victim never started its passes"; cat "$TMP/$name.err" >&2
        kill $job 2>/dev/null; wait $job; return
    fi
    sleep 1
    kill -STOP "$pid"
    t0=$(date +%s)
    wait $job; rc=$?
    dt=$(($(date +%s) - t0))
    kill -CONT "$pid" 2>/dev/null
    sleep 1
    if alive "$pid"; then
        fail "$name: the stopped rank $victim (pid $pid) outlived the job"
        kill -KILL "$pid" 2>/dev/null
    fi
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { fail "$name: the job did not end by itself (rc $rc, 124: hung)"; return; }
    [ $dt -le 20 ] || fail "$name: the job took $dt s to end after the stop"
    n=$(grep -Ec -- "$pattern" "$TMP/$name.err")
    [ "$n" -eq 1 ] && [ "$(grep -c 'watchdog' "$TMP/$name.err")" -eq 1 ] ||
        { fail "$name: wanted one line /$pattern/, got $n"; cat "$TMP/$name.err" >&2; }
}

# Rank 0 spends nearly all of a pass computing, but it may be stopped in the short window between its
# last send (or all-gather) and the next pass's barrier, while rank 1 finishes its slice: both waits
# are named right.
stopped kvr 0 "^runahead: rank 1: watchdog: no progress for 3 s while waiting for (layer [0-9]+ KV rows from rank 0|every rank at the barrier that starts a prompt pass); aborting$" \
    "$TMP/kvr.json" $MPIEXEC -np 2 $MPIEXEC_FLAGS "$RA" $ARGS --repeat 10000 --partition ratios:0.95,0.05 \
    --watchdog 3 --report "$TMP/kvr.json"
stopped tsp 0 "^runahead: rank 1: watchdog: no progress for 3 s while waiting for every rank (in the all-gather of layer [0-9]+ KV rows|at the barrier that starts a prompt pass); aborting$" \
    "$TMP/tsp.json" $MPIEXEC -np 2 $MPIEXEC_FLAGS "$RA" $ARGS --repeat 10000 --method tsp --watchdog 3 \
    --report "$TMP/tsp.json"
# The tune search's first trial is an even split: rank 0 may be idle at the pass's end.
stopped tune 0 "^runahead-tune: rank 1: watchdog: no progress for 3 s while waiting for (layer [0-9]+ KV rows from rank 0|every rank at the barrier that starts a prompt pass); aborting$" \
    "$TMP/t.h5" $MPIEXEC -np 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$TMP/tiny24" --contexts 2000 \
    --repeats 1000 --threads 1 --out "$TMP/t.h5" --watchdog 3

# Without the watchdog the stopped job hangs: the reason for the flag. (A short timeout.)
timeout 8 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$RA" $ARGS --repeat 10000 --report "$TMP/nowd.marker" >/dev/null 2>&1 &
job=$!
sleep 3
pid=$(rank_pid "$TMP/nowd.marker" 0)
[ -n "$pid" ] && kill -STOP "$pid"
wait $job; rc=$?
[ -n "$pid" ] && { kill -CONT "$pid"; alive "$pid" && kill -KILL "$pid"; } 2>/dev/null
[ $rc -eq 124 ] || echo "note: without --watchdog the stopped job ended with rc $rc (expected a hang, 124)"

# A healthy run with the watchdog on: same tokens, no message. Its limit is
# generous: a pass may legitimately wait that long (slow builds, loaded nodes).
want=$("$RA" $ARGS 2>/dev/null) || fail "single run"
got=$(timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$RA" $ARGS --repeat 3 --watchdog 60 2>"$TMP/err") ||
    { fail "healthy run with --watchdog: $(tail -1 "$TMP/err")"; }
[ "$got" = "$want" ] || fail "--watchdog changed the tokens"
! grep -q watchdog "$TMP/err" || fail "a healthy run's watchdog spoke: $(cat "$TMP/err")"
# An abbreviated --watch= still gets the thread level the watchdog needs.
timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$RA" $ARGS --watch=60 >/dev/null 2>"$TMP/err" ||
    fail "--watch=60: $(tail -1 "$TMP/err")"

expect_error "--watchdog: 'soon' is not an integer in 0..604800" "$RA" $ARGS --watchdog soon
expect_error "--watchdog: '-1' is not an integer in 0..604800" "$BUILD/runahead-tune" --model "$TMP/tiny24" \
    --contexts 64 --out "$TMP/x.h5" --watchdog -1
finish
