#!/bin/sh
# Distributed equals single-process for P = 2, 3, 4 (oversubscribed), on the
# trained stories260K checkpoint (GQA) and a synthetic MHA model (with a bf16
# KV cache: chain_bf16.sh).
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
for p in 2 3 4; do
    timeout 600 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/tests/test_chain" $models || fail "test_chain with $p ranks"
done
finish
