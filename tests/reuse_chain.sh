#!/bin/sh
# Chunk reuse on the chain equals chunk reuse on one rank, for P = 1, 2, 3, 4
# (oversubscribed): tests/test_reuse_chain.c on a random model and a store it
# fills; with a bf16 KV cache and store on 2 and 4 ranks.
. "$(dirname "$0")/lib.sh"
for p in 1 2 3 4; do
    timeout 300 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/tests/test_reuse_chain" || fail "test_reuse_chain with $p ranks"
done
for p in 2 4; do
    timeout 300 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/tests/test_reuse_chain" --kv-dtype bf16 ||
        fail "test_reuse_chain --kv-dtype bf16 with $p ranks"
done
finish
