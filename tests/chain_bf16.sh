#!/bin/sh
# chain.sh with a bf16 KV cache (test_chain --kv-dtype bf16), for P = 2 and 3:
# distributed equals single-process with bf16 rows on both sides, and the
# bytes MPI moved equal the traffic formulas at 2 bytes an element, half of
# fp32's. Apart from chain.sh so that each stays within ctest's timeout in the
# sanitizer build.
. "$(dirname "$0")/lib.sh"
models=""
if [ -r "$MODELS/stories260K.bin" ]; then
    models="$MODELS/stories260K.bin"
else
    skip_part "fixture $MODELS/stories260K.bin not found: the trained GQA model is unchecked"
fi
"$BUILD/runahead-synth" --preset tiny --seed 3 --out "$TMP/tiny" >/dev/null 2>"$TMP/synth.err" \
    || { cat "$TMP/synth.err" >&2; fail "runahead-synth --preset tiny failed"; finish; }
models="$models $TMP/tiny"
for p in 2 3; do
    timeout 600 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/tests/test_chain" --kv-dtype bf16 $models \
        || fail "test_chain --kv-dtype bf16 with $p ranks"
done
finish
