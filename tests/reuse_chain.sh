#!/bin/sh
# Chunk reuse on the chain equals chunk reuse on one rank, for P = 1, 2, 3, 4
# (oversubscribed): tests/test_reuse_chain.c on a random model and a store it fills.
. "$(dirname "$0")/lib.sh"
for p in 1 2 3 4; do
    timeout 300 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/tests/test_reuse_chain" || fail "test_reuse_chain with $p ranks"
done
finish
