#!/bin/sh
# runahead-table: show, lookup and validate on a table written by its hidden write-example
# command (a C path: no Python packages needed), h5dump reads it, and malformed files or bad
# arguments are one clear error line.
. "$(dirname "$0")/lib.sh"
RT="$BUILD/runahead-table"
T="$TMP/example.h5"
HW=test-hw

# expect_out PATTERN CMD...: CMD must succeed and print a line matching PATTERN (grep -E).
expect_out() {
    pattern=$1; shift
    "$@" >"$TMP/out" 2>"$TMP/err" || { fail "exit $?: $* ($(cat "$TMP/err"))"; return; }
    grep -Eq -- "$pattern" "$TMP/out" || { fail "no /$pattern/ in the output of: $*"; cat "$TMP/out" >&2; }
}

"$RT" --version | grep -q '^runahead-table [0-9]' || fail "--version"
"$RT" --help | grep -q '^usage: runahead-table show \[KEY\] FILE' || fail "--help"

"$RT" write-example "$T" --hw-tag "$HW" || fail "write-example failed"
expect_out '^/example-model/test-hw/p2: 2 entries; backend cpu, compute f32, KV f32; objective measure, min_stride 16, repeats 3' "$RT" show "$T"
expect_out '^ +2048 +0\.210000 +0\.250000 +0\.300000  0,1126,2048 / 0\.549805,0\.450195$' "$RT" show "$T"
expect_out '^ +8192 +1\.900000 +2\.400000 +-  0,5325,8192 /' "$RT" show "$T"
# Each entry's provenance on the line below it.
expect_out "^ +searched 20[0-9-]+T[0-9:]+Z on $(hostname), objective measure, min_stride 16, repeats 3, runahead [0-9]" "$RT" show "$T"
expect_out '^[^ ]*example.h5: schema_version 3$' "$RT" show "$T"
expect_out '^/example-model/test-hw/p4: 1 entry; backend cpu, compute f32, KV f32; objective model' "$RT" show "$T"

# The run key: a table tuned for CUDA in bf16 is shown with its key, found by show's filter, used by
# a lookup for that key, and refused (one line naming the file, the table's key and the run's) by
# any other lookup, the default (cpu, f32, f32) included; merging it into a CPU table is refused.
"$RT" write-example --hw-tag "$HW" --backend cuda --compute-dtype bf16 "$TMP/cuda.h5" || fail "write-example cuda"
expect_out '^/example-model/test-hw/p2: 2 entries; backend cuda, compute bf16, KV f32;' "$RT" show "$TMP/cuda.h5"
"$RT" show --backend cpu "$TMP/cuda.h5" | grep -q '^/example-model/test-hw/p[0-9]' && fail "show --backend cpu listed a cuda table"
expect_out '^/example-model/test-hw/p4: 1 entry; backend cuda' "$RT" show --backend cuda --kv-dtype f32 "$TMP/cuda.h5"
expect_out '^bounds:0,2389,4096$' "$RT" lookup "$TMP/cuda.h5" --model example-model --hw-tag "$HW" --ranks 2 --context 4096 --backend cuda --compute-dtype bf16
expect_out '^key: backend cuda, compute bf16, KV f32$' "$RT" lookup "$TMP/cuda.h5" --model example-model --hw-tag "$HW" --ranks 2 --context 4096 --backend cuda --compute-dtype bf16
expect_error 'cuda.h5: /example-model/test-hw/p2 was tuned for backend cuda, compute bf16, KV f32; this run is backend cpu, compute f32, KV f32: not using it' \
    "$RT" lookup "$TMP/cuda.h5" --model example-model --hw-tag "$HW" --ranks 2 --context 4096
expect_error 'was tuned for backend cuda, compute bf16, KV f32; this run is backend cuda, compute bf16, KV bf16' \
    "$RT" lookup "$TMP/cuda.h5" --model example-model --hw-tag "$HW" --ranks 2 --context 4096 --backend cuda --compute-dtype bf16 --kv-dtype bf16
expect_error 'holds a table tuned for backend cpu, compute f32, KV f32, not backend cuda, compute bf16, KV f32: not merging' \
    "$RT" merge "$T" "$TMP/cuda.h5"
expect_error "backend 'CUDA!' must be 1..15 characters" "$RT" lookup "$T" --model m --ranks 2 --context 10 --backend 'CUDA!'
expect_out '^  p2p_latency_s +2e-06$' "$RT" show "$T"
expect_out "^$TMP/example.h5: ok\$" "$RT" validate "$T"

# 4096 between 2048 (1126/2048) and 8192 (5325/8192): share 0.5498046875 + (0.6500244140625 -
# 0.5498046875) / 3 = 0.583211263 of 4096 = 2388.8 -> 2389.
expect_out '^bounds:0,2389,4096$' "$RT" lookup "$T" --model example-model --hw-tag "$HW" --ranks 2 --context 4096
expect_out '^from: interpolated between entries 2048 and 8192$' "$RT" lookup "$T" --model example-model --hw-tag "$HW" --ranks 2 --context 4096
expect_out '^bounds:0,1126,2048$' "$RT" lookup "$T" --hw-tag "$HW" --model example-model --ranks 2 --context 2048
expect_out '^bounds:0,1434,2458,3318,4096$' "$RT" lookup "$T" --model example-model --hw-tag "$HW" --ranks 4 --context 4096
# Outside the table: the nearest entry, and a note on stderr.
"$RT" lookup "$T" --model example-model --hw-tag "$HW" --ranks 2 --context 100 >"$TMP/out" 2>"$TMP/err" || fail "lookup 100"
grep -q '^bounds:0,55,100$' "$TMP/out" || fail "lookup 100: $(cat "$TMP/out")"
grep -q 'note: context 100 is outside the table' "$TMP/err" || fail "no extrapolation note: $(cat "$TMP/err")"
# The default hardware tag is this machine's.
"$RT" write-example "$TMP/default.h5" || fail "write-example with the default tag"
expect_out '^bounds:0,2389,4096$' "$RT" lookup "$TMP/default.h5" --model example-model --ranks 2 --context 4096

# A model path gives its id through its config.
if [ -r "$MODELS/stories260K.bin" ]; then
    "$RT" write-example "$TMP/model.h5" --model "$MODELS/stories260K.bin" --hw-tag "$HW" || fail "write-example --model"
    expect_out '^model: llama-d64-l5-h8-kv4-f172-v512-[0-9a-f]{8}$' "$RT" lookup "$TMP/model.h5" --model "$MODELS/stories260K.bin" --hw-tag "$HW" --ranks 2 --context 4096
    expect_error 'no partition table for model llama-d64' "$RT" lookup "$T" --model "$MODELS/stories260K.bin" --hw-tag "$HW" --ranks 2 --context 4096
else
    skip_part "fixture $MODELS/stories260K.bin not found: model ids of real checkpoints unchecked"
fi

# h5dump reads it (only the header: the layout, not the values).
if ! command -v h5dump >/dev/null 2>&1; then
    skip_part "h5dump not installed (apt-get install hdf5-tools): the layout as h5dump reads it is unchecked"
else
    h5dump -H "$T" >"$TMP/dump" 2>&1 || fail "h5dump -H failed: $(head -3 "$TMP/dump")"
    for want in 'ATTRIBUTE "schema_version"' 'GROUP "p2"' 'DATASET "boundaries"' 'DATASPACE  SIMPLE { ( 2, 3 ) / ( 2, 3 ) }' \
                'DATASET "objective"' 'DATASET "host"' 'DATASET "date"' 'GROUP "profile"'; do
        grep -qF "$want" "$TMP/dump" || fail "h5dump -H has no '$want'"
    done
fi

# Errors: one line each.
expect_error 'no partition table for model example-model, hardware test-hw \(group /example-model/test-hw/p3\); the file has: example-model/test-hw/p2, example-model/test-hw/p4, example-model/test-hw/profile' \
    "$RT" lookup "$T" --model example-model --hw-tag "$HW" --ranks 3 --context 4096
expect_error 'fewer than the 4 ranks' "$RT" lookup "$T" --model example-model --hw-tag "$HW" --ranks 4 --context 3
printf 'context,ratio\n2048,0.55\n' >"$TMP/text.h5"
expect_error 'text.h5: not an HDF5 file' "$RT" show "$TMP/text.h5"
expect_error 'text.h5: not an HDF5 file' "$RT" lookup "$TMP/text.h5" --model m --ranks 2 --context 10
expect_error 'text.h5: 1 problem$' "$RT" validate "$TMP/text.h5"
grep -q 'text.h5: not an HDF5 file' "$TMP/out" || fail "validate did not print the problem"
head -c 1500 "$T" >"$TMP/cut.h5"
expect_error 'cut.h5: cannot open as HDF5, truncated or corrupt' "$RT" lookup "$TMP/cut.h5" --model m --ranks 2 --context 10
expect_error 'absent.h5: cannot open: No such file' "$RT" show "$TMP/absent.h5"

# Usage errors: exit 2.
"$RT" >/dev/null 2>&1; [ $? -eq 2 ] || fail "no command: want exit 2"
"$RT" frobnicate "$T" >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown command: want exit 2"
"$RT" lookup "$T" --ranks 2 --context 10 >/dev/null 2>&1; [ $? -eq 2 ] || fail "lookup without --model: want exit 2"
"$RT" lookup "$T" --model m --ranks two --context 10 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--ranks two: want exit 2"
expect_error 'unknown or incomplete option' "$RT" lookup "$T" --model m --ranks 2 --context 10 --bogus
finish
