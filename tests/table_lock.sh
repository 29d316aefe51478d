#!/bin/sh
# Concurrent writers of one partition table: runahead-table merge and runahead-tune serialise
# on TABLE.lock (an fcntl lock), so 4 merges started at once, and 2 cost-model searches into
# one table, never lose an entry; a held lock makes a writer with a short --lock-timeout fail
# with one line naming the holder; two entries for one context are a reported conflict, won by
# the newer search whatever the merge order; every entry keeps its own provenance.
. "$(dirname "$0")/lib.sh"
RT="$BUILD/runahead-table"
TUNE="$BUILD/runahead-tune"
"$BUILD/runahead-synth" --preset tiny --seed 7 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
M="$TMP/tiny"
HW=lock-hw

# A cost-model profile (2 ranks measure the point-to-point rates), then one table per input.
P="$TMP/profile.h5"
timeout 300 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$TUNE" --model "$M" --calibrate --hw-tag "$HW" --out "$P" \
    >/dev/null 2>"$TMP/cal.err" || { cat "$TMP/cal.err" >&2; fail "runahead-tune --calibrate"; finish; }
# tune_into FILE CONTEXTS [ARGS...]: a cost-model search of 4 ranks into FILE.
tune_into() {
    f=$1 c=$2; shift 2
    "$TUNE" --model "$M" --objective model --ranks 4 --hw-tag "$HW" --contexts "$c" --out "$f" \
        --min-stride 32 --points 3 "$@"
}
# entries FILE: the number of entries of the p4 table ("" if unreadable).
entries() {
    "$RT" show "$1" 2>/dev/null | sed -n 's|^/.*/lock-hw/p4: \([0-9]*\) entr.*|\1|p'
}
for i in 1 2 3 4; do
    cp "$P" "$TMP/in$i.h5"
    tune_into "$TMP/in$i.h5" $((256 * i)) >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "input $i"; finish; }
done

# 4 merges started at once, 5 times over: all 4 entries, every time.
for round in 1 2 3 4 5; do
    T="$TMP/merged$round.h5"
    pids=""
    for i in 1 2 3 4; do
        "$RT" merge "$T" "$TMP/in$i.h5" 2>"$TMP/merge$i.err" &
        pids="$pids $!"
    done
    rcs=""
    for pid in $pids; do wait "$pid"; rcs="$rcs $?"; done
    case "$rcs" in *[1-9]*) fail "round $round: a merge failed (exit codes$rcs): $(cat "$TMP"/merge*.err)" ;; esac
    n=$(entries "$T")
    [ "$n" = 4 ] || fail "round $round: 4 concurrent merges left ${n:-no} entries, want 4"
    "$RT" validate "$T" >/dev/null || fail "round $round: the merged table does not validate"
done

# 2 cost-model searches into one table at once, 8 short contexts each (a merge after each,
# which also merges the earlier ones again): all 16 land, 5 times over.
for round in 1 2 3 4 5; do
    T="$TMP/tuned$round.h5"
    cp "$P" "$T"
    tune_into "$T" 128,192,256,320,384,448,512,576 >/dev/null 2>"$TMP/tuneA.err" &
    pids=$!
    tune_into "$T" 160,224,288,352,416,480,544,608 >/dev/null 2>"$TMP/tuneB.err" &
    pids="$pids $!"
    rcs=""
    for pid in $pids; do wait "$pid"; rcs="$rcs $?"; done
    case "$rcs" in *[1-9]*) fail "round $round: a search failed (exit codes$rcs): $(cat "$TMP"/tune?.err)" ;; esac
    n=$(entries "$T")
    [ "$n" = 16 ] || fail "round $round: 2 concurrent searches left ${n:-no} entries, want 16"
done

# A held lock: a writer with a short timeout fails at once with one line naming the holder.
T="$TMP/held.h5"
cp "$TMP/in1.h5" "$T"
"$RT" hold-lock "$T" 30 >"$TMP/hold.out" 2>"$TMP/hold.err" &
holder=$!
i=0
until grep -q locked "$TMP/hold.out" 2>/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
grep -q locked "$TMP/hold.out" || fail "hold-lock did not take the lock: $(cat "$TMP/hold.err")"
host=$(hostname)
start=$(date +%s)
expect_error "held.h5.lock: .*timed out after 1 s waiting for the lock held by $host:$holder since [0-9-]+T[0-9:]+Z" \
    "$RT" merge --lock-timeout 1 "$T" "$TMP/in2.h5"
[ $(($(date +%s) - start)) -le 10 ] || fail "the timed-out merge took more than 10 s"
# runahead-tune prints its progress first: its last line is the error.
start=$(date +%s)
tune_into "$T" 300 --lock-timeout 1 >/dev/null 2>"$TMP/err" && fail "runahead-tune succeeded under a held lock"
tail -1 "$TMP/err" | grep -Eq "^runahead-tune: rank 0: .*held.h5.lock: timed out after 1 s waiting for the lock held by $host:$holder since" ||
    { fail "runahead-tune under a held lock: no error naming the holder"; cat "$TMP/err" >&2; }
[ $(($(date +%s) - start)) -le 10 ] || fail "the timed-out search took more than 10 s"
n=$(entries "$T")
[ "$n" = 1 ] || fail "a writer that timed out changed the table (${n:-no} entries, want 1)"
# RA_TABLE_LOCK_TIMEOUT sets the default; a waiter says who it waits for.
RA_TABLE_LOCK_TIMEOUT=1 "$RT" merge "$T" "$TMP/in2.h5" >/dev/null 2>"$TMP/err" && fail "RA_TABLE_LOCK_TIMEOUT=1: merge succeeded under a held lock"
grep -q "timed out after 1 s" "$TMP/err" || fail "RA_TABLE_LOCK_TIMEOUT=1 ignored: $(cat "$TMP/err")"
"$RT" merge --lock-timeout 60 "$T" "$TMP/in2.h5" >/dev/null 2>"$TMP/wait.err" &
waiter=$!
sleep 3
kill "$holder"
wait "$holder" 2>/dev/null
wait "$waiter" || fail "a merge waiting for a released lock failed: $(cat "$TMP/wait.err")"
grep -q "waiting for $T.lock held by $host:$holder since" "$TMP/wait.err" || fail "no waiting note: $(cat "$TMP/wait.err")"
n=$(entries "$T")
[ "$n" = 2 ] || fail "the merge after the wait left ${n:-no} entries, want 2"
# A lock held by another program (python's fcntl.lockf: no holder line in the file) names its pid.
if command -v python3 >/dev/null 2>&1; then
    python3 -c "
import fcntl, sys, time
f = open(sys.argv[1], 'a'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(30)" \
        "$T.lock" >"$TMP/py.out" &
    py=$!
    i=0
    until grep -q locked "$TMP/py.out" 2>/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
    expect_error "timed out after 1 s waiting for the lock held by process $py" \
        "$RT" merge --lock-timeout 1 "$T" "$TMP/in3.h5"
    kill "$py"
    wait "$py" 2>/dev/null
else
    skip_part "python3 not installed: a lock held by another program is unchecked"
fi

# A conflict: one context from two searches. The newer search wins in either merge order, and
# the merge says so on stderr.
cp "$P" "$TMP/old.h5"
cp "$P" "$TMP/new.h5"
tune_into "$TMP/old.h5" 2000 --min-stride 64 >/dev/null 2>&1 || fail "old search"
sleep 1.1 # dates have whole seconds
tune_into "$TMP/new.h5" 2000 --min-stride 48 >/dev/null 2>&1 || fail "new search"
for order in "old new" "new old"; do
    T="$TMP/conflict-$(echo $order | tr ' ' -).h5"
    set -- $order
    "$RT" merge "$T" "$TMP/$1.h5" "$TMP/$2.h5" >/dev/null 2>"$TMP/err" || { fail "merge $order: $(cat "$TMP/err")"; continue; }
    grep -Eq "p4 context 2000: conflict: kept the entry searched .* min_stride 48.*, dropped the one searched .* min_stride 64.*newer search wins" \
        "$TMP/err" || { fail "merge $order: conflict not reported"; cat "$TMP/err" >&2; }
    grep -q "1 conflict" "$TMP/err" || fail "merge $order: the summary does not count the conflict"
    "$RT" show "$T" >"$TMP/show" 2>&1
    grep -A1 -E '^ +2000 ' "$TMP/show" | grep -q "min_stride 48" || { fail "merge $order: the older entry won"; cat "$TMP/show" >&2; }
done
# Merging an identical entry again is no conflict.
"$RT" merge "$T" "$TMP/new.h5" >/dev/null 2>"$TMP/err" || fail "merge of the same entry again"
grep -q "conflict:" "$TMP/err" && fail "merging an identical entry again reported a conflict: $(cat "$TMP/err")"

# Provenance per entry: entries of two searches keep their own objective, stride, date, host.
T="$TMP/prov.h5"
id=$("$RT" show "$TMP/in1.h5" | sed -n 's|^/\([^/]*\)/lock-hw/p4: .*|\1|p')
"$RT" write-example "$T" --model "$id" --hw-tag "$HW" || fail "write-example"
"$RT" merge "$T" "$TMP/in1.h5" "$TMP/in2.h5" >/dev/null 2>&1 || fail "merge into the example table"
"$RT" show "$T" >"$TMP/show" 2>&1
grep -A1 -E '^ +4096 ' "$TMP/show" | grep -Eq "searched 20[0-9-]+T[0-9:]+Z on .*objective model, min_stride 1, repeats 1" ||
    { fail "the example's p4 entry lost its provenance"; cat "$TMP/show" >&2; }
grep -A1 -E '^ +256 ' "$TMP/show" | grep -Eq "searched 20[0-9-]+T[0-9:]+Z on $host, objective model, min_stride 32, repeats 1, runahead [0-9]" ||
    { fail "the merged entry 256 has not its own provenance"; cat "$TMP/show" >&2; }
grep -A1 -E '^ +2048 ' "$TMP/show" | grep -q "objective measure, min_stride 16, repeats 3" ||
    { fail "the example's p2 entries lost their provenance"; cat "$TMP/show" >&2; }
finish
