#!/bin/sh
# chain.sh with a bf16 KV cache (test_chain --kv-dtype bf16), for P = 2 and 3:
# distributed equals single-process with bf16 rows on both sides, and the
# bytes MPI moved equal the traffic formulas at 2 bytes an element, half of
# fp32's. Apart from chain.sh so that each stays within ctest's timeout in the
# sanitizer build.
. "$(dirname "$0")/lib.sh"
chain_models
for p in 2 3; do
    timeout 600 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/tests/test_chain" --kv-dtype bf16 $models \
        || fail "test_chain --kv-dtype bf16 with $p ranks"
done
finish
