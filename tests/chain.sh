#!/bin/sh
# Distributed equals single-process for P = 2, 3, 4 (oversubscribed), on the
# trained stories260K checkpoint (GQA) and a synthetic MHA model (with a bf16
# KV cache: chain_bf16.sh).
. "$(dirname "$0")/lib.sh"
chain_models
for p in 2 3 4; do
    timeout 600 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/tests/test_chain" $models || fail "test_chain with $p ranks"
done
finish
