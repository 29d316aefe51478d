#!/bin/sh
# runahead-tune end to end on a tiny synthetic model: a short measured search
# with calibration writes a valid table; runahead --partition table: uses it
# (interpolating, and saying when it extrapolates) and still gives the
# single-process tokens; the cost-model objective searches rank counts this
# machine cannot run; bad requests fail with one clear line.
. "$(dirname "$0")/lib.sh"
"$BUILD/runahead-synth" --preset tiny --seed 5 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
M="$TMP/tiny"
T="$TMP/table.h5"
run() { timeout 300 $MPIEXEC -np "$@"; }

run 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$M" --calibrate --contexts 128,256 --out "$T" \
    --repeats 1 --min-stride 32 --points 3 >"$TMP/tune.out" 2>"$TMP/tune.err" \
    || { cat "$TMP/tune.err" >&2; fail "runahead-tune"; finish; }
grep -q "calibrated with 2 ranks" "$TMP/tune.err" || fail "no calibration line"
# The link calibration (mpi/calibrate.c): medians and minima stored, a verdict on the machine.
# On a quiet machine two ranks of one node talk through shared memory: microseconds, not the
# milliseconds a least-squares fit over large messages once stored.
"$BUILD/runahead-table" show "$T" >"$TMP/show" || fail "runahead-table show"
value() { awk -v k="$1" '$1 == k { print $2 }' "$TMP/show"; }
for k in p2p_latency p2p_latency_min p2p_bandwidth p2p_bandwidth_peak allgather_latency allgather_latency_min \
         calibration_busy calibration_cpu_share calibration_others_busy calibration_latency_spread; do
    [ -n "$(value $k)" ] || fail "profile: no $k"
done
awk -v a="$(value p2p_latency_min)" -v b="$(value p2p_latency)" 'BEGIN { exit !(a > 0 && a <= b) }' \
    || fail "profile: p2p latency min $(value p2p_latency_min) not in (0, median $(value p2p_latency)]"
# The reuse model's figures: a position-list pass against the model of its rows, installs, loads.
awk -v f="$(value row_list_factor)" -v i="$(value install_s_per_row_layer)" -v b="$(value load_bandwidth)" \
    'BEGIN { exit !(f > 0.2 && f < 20 && i > 0 && i < 1e-3 && b > 1e6) }' \
    || fail "profile: row_list_factor $(value row_list_factor), install_s_per_row_layer $(value install_s_per_row_layer), load_bandwidth $(value load_bandwidth)"
grep -Eq "^ +8 +[0-9.]+ +[0-9.]+ +[0-9]+$" "$TMP/tune.err" || fail "no per-size calibration table"
if [ "$(value calibration_busy)" = 0 ]; then
    grep -q "the machine was quiet" "$TMP/tune.err" || fail "quiet calibration not reported"
    awk -v l="$(value p2p_latency)" 'BEGIN { exit !(l < 100e-6) }' \
        || fail "quiet machine, yet a p2p latency of $(value p2p_latency) s between two ranks of one node"
else
    grep -q "WARNING: the machine was busy" "$TMP/tune.err" || fail "busy calibration not flagged on stderr"
    echo "note: the machine was busy, the latency bound is not checked: $(grep 'machine was busy' "$TMP/tune.err")"
fi
grep -Eq "^128 +0,[0-9]+,128 " "$TMP/tune.out" || fail "no result row for 128"
grep -Eq "^256 +0,[0-9]+,256 " "$TMP/tune.out" || fail "no result row for 256"
grep -q "cost model" "$TMP/tune.err" || fail "no prediction error reported"
"$BUILD/runahead-table" validate "$T" >/dev/null || fail "the table does not validate"
"$BUILD/runahead-table" show "$T" | grep -q "objective measure" || fail "search attributes missing"

# KVR-P from the table: same tokens as a single process, interpolation announced.
python3 -c "import random; random.seed(2); print(' '.join(str(random.randrange(3, 512)) for _ in range(192)))" >"$TMP/p192"
python3 -c "import random; random.seed(3); print(' '.join(str(random.randrange(3, 512)) for _ in range(300)))" >"$TMP/p300"
for p in p192 p300; do
    single=$("$BUILD/runahead" --model "$M" --prompt-ids-file "$TMP/$p" --generate 8 --output ids 2>/dev/null)
    got=$(run 2 $MPIEXEC_FLAGS "$BUILD/runahead" --model "$M" --prompt-ids-file "$TMP/$p" --generate 8 --output ids \
          --partition "table:$T" 2>"$TMP/err") || { fail "$p: $(grep runahead: "$TMP/err")"; continue; }
    [ "$got" = "$single" ] || fail "$p: KVR-P tokens differ from the single-process run"
done
grep -q "EXTRAPOLATED" "$TMP/err" || fail "300 tokens lies past the table: no extrapolation notice"
run 2 $MPIEXEC_FLAGS "$BUILD/runahead" --model "$M" --prompt-ids-file "$TMP/p192" --generate 1 --output ids \
    --partition "table:$T" 2>&1 >/dev/null | grep -q "interpolated from" || fail "no interpolation notice"

# The table was tuned on the CPU backend in f32 with f32 KV rows (its key, shown by runahead-table): a
# run with a bf16 KV cache is refused in one line naming the file and both keys, never silently served.
"$BUILD/runahead-table" show "$T" | grep -q "/p2: [0-9]* entries; backend cpu, compute f32, KV f32;" ||
    fail "the table's key is not cpu/f32/f32"
run 2 $MPIEXEC_FLAGS "$BUILD/runahead" --model "$M" --prompt-ids-file "$TMP/p192" --generate 1 --output ids \
    --kv-dtype bf16 --partition "table:$T" >/dev/null 2>"$TMP/err" && fail "a table of another KV dtype was used"
[ "$(grep -c "was tuned for backend cpu, compute f32, KV f32; this run is backend cpu, compute f32, KV bf16: not using it" "$TMP/err")" -eq 1 ] ||
    { fail "no one-line refusal of the table's key"; cat "$TMP/err" >&2; }
grep "not using it" "$TMP/err" | grep -q "$T" || fail "the refusal does not name the file"
# A table tuned with a bf16 KV cache carries that key and serves the runs that have it.
run 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$M" --contexts 128 --out "$TMP/kvbf16.h5" --kv-dtype bf16 \
    --repeats 1 --min-stride 64 --points 3 --no-baselines >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "runahead-tune --kv-dtype bf16"; }
"$BUILD/runahead-table" show "$TMP/kvbf16.h5" | grep -q "/p2: 1 entry; backend cpu, compute f32, KV bf16;" ||
    fail "runahead-tune --kv-dtype bf16 did not write its key"
run 2 $MPIEXEC_FLAGS "$BUILD/runahead" --model "$M" --prompt-ids-file "$TMP/p192" --generate 1 --output ids \
    --kv-dtype bf16 --partition "table:$TMP/kvbf16.h5" 2>"$TMP/err" >/dev/null ||
    fail "a bf16-KV run refused the bf16-KV table: $(grep runahead: "$TMP/err")"
run 2 $MPIEXEC_FLAGS "$BUILD/runahead" --model "$M" --prompt-ids-file "$TMP/p192" --generate 1 --output ids \
    --partition "table:$TMP/kvbf16.h5" >/dev/null 2>"$TMP/err" && fail "an f32-KV run used the bf16-KV table"
[ "$(grep -c "^runahead: rank 0: .*kvbf16.h5: .* was tuned for backend cpu, compute f32, KV bf16; this run is backend cpu, compute f32, KV f32: not using it" "$TMP/err")" -eq 1 ] ||
    { fail "no one-line refusal of the bf16-KV table"; cat "$TMP/err" >&2; }

# The stored KVR-S TTFT is a fresh median at the chosen split, reported with its spread.
grep -Eq "C=128 done: .*medians of 1 fresh runs \[min\.\.max\]: KVR-S [0-9.]+ s \[" "$TMP/tune.err" ||
    fail "no re-measured KVR-S line"

# --partition auto with the calibrated profile (auto:FILE, or RA_PROFILE): equal time,
# refined by the cost model; same tokens as a single process. A profile for another
# model in RA_PROFILE is said and skipped: equal work from FLOPs.
single=$("$BUILD/runahead" --model "$M" --prompt-ids-file "$TMP/p300" --generate 8 --output ids 2>/dev/null)
auto_run() { # auto_run LABEL [env VAR=VALUE] -- runahead options...
    label=$1; shift
    got=$(run 2 $MPIEXEC_FLAGS "$@" --prompt-ids-file "$TMP/p300" --generate 8 --output ids 2>"$TMP/err") ||
        { fail "auto ($label): $(grep runahead: "$TMP/err")"; return; }
    [ "$got" = "$single" ] || fail "auto ($label): tokens differ from the single-process run"
    grep -q "partition auto for 300 tokens on 2 ranks: .*refined by the cost model .*$T" "$TMP/err" ||
        { fail "auto ($label): stderr does not name the profile"; cat "$TMP/err" >&2; }
}
auto_run "auto:FILE" "$BUILD/runahead" --model "$M" --partition "auto:$T"
auto_run "RA_PROFILE" env "RA_PROFILE=$T" "$BUILD/runahead" --model "$M"
"$BUILD/runahead-synth" --preset tiny --seed 6 --layers 3 --out "$TMP/other" >/dev/null 2>&1 || fail "runahead-synth other"
run 2 $MPIEXEC_FLAGS env "RA_PROFILE=$T" "$BUILD/runahead" --model "$TMP/other" --prompt-ids-file "$TMP/p192" \
    --generate 1 --output ids 2>&1 >/dev/null | grep -q "equal-work from FLOPs.*RA_PROFILE=.* has no usable profile" ||
    fail "RA_PROFILE without this model's profile: no notice"

# The cost model searches 8 ranks on one process, into the same file.
"$BUILD/runahead-tune" --model "$M" --objective model --ranks 8 --contexts 1024,2048 --out "$T" \
    >"$TMP/model.out" 2>"$TMP/model.err" || { cat "$TMP/model.err" >&2; fail "--objective model"; }
"$BUILD/runahead-table" show "$T" | grep -q "/p8: 2 entries; backend cpu, compute f32, KV f32; objective model" || fail "no p8 group from the model"
"$BUILD/runahead-table" validate "$T" >/dev/null || fail "the table does not validate after the model search"

# Clear errors.
one_line() {
    pattern=$1; shift
    "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
    n=$(grep -c "rank [0-9]*:" "$TMP/err")
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ] && grep -Eq -- "$pattern" "$TMP/err" \
        || { fail "wanted one line /$pattern/ (rc $rc, $n lines): $*"; cat "$TMP/err" >&2; }
}
one_line "no partition table for model .* the file has" \
    run 3 $MPIEXEC_FLAGS "$BUILD/runahead" --model "$M" --prompt-ids-file "$TMP/p192" --partition "table:$T" --output ids
one_line "run runahead-tune --calibrate first" \
    "$BUILD/runahead-tune" --model "$M" --objective model --ranks 4 --contexts 512 --out "$TMP/empty.h5"
one_line "exceeds the model's context of 2048" \
    run 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$M" --contexts 4096 --out "$TMP/x.h5"
one_line "measuring needs mpirun -np 4" \
    run 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$M" --contexts 512 --ranks 4 --out "$TMP/x.h5"
one_line "needs at least 2 ranks" "$BUILD/runahead-tune" --model "$M" --contexts 512 --out "$TMP/x.h5"

# --backend (ra_backend_open): a bad name is one line; so is cuda where no GPU is visible. With a
# GPU, a short measured search on it gives its rows (KVR-S on the device).
one_line "--backend: 'gpu' is not cpu or cuda" \
    "$BUILD/runahead-tune" --model "$M" --backend gpu --calibrate --out "$TMP/x.h5"
gpus=0
[ -x "$BUILD/tests/cuda_devices" ] && gpus=$("$BUILD/tests/cuda_devices" 2>/dev/null || echo 0)
if [ "$gpus" -gt 0 ]; then
    run 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$M" --backend cuda --contexts 128 --out "$TMP/cuda.h5" \
        --repeats 1 --min-stride 32 --points 3 >"$TMP/cuda.out" 2>"$TMP/cuda.err" \
        || { cat "$TMP/cuda.err" >&2; fail "runahead-tune --backend cuda"; }
    grep -Eq "^128 +0,[0-9]+,128 " "$TMP/cuda.out" || fail "runahead-tune --backend cuda: no result row for 128"
else
    one_line "rank 0: --backend cuda: " \
        "$BUILD/runahead-tune" --model "$M" --backend cuda --calibrate --out "$TMP/x.h5"
fi
finish
