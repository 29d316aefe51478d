#!/bin/sh
# Delta sends (test_chain_delta) for P = 1, 2, 3, 4 (oversubscribed): only a
# travel set's rows move, every route and TSP, f32 and bf16 caches; the caches
# and logits equal a single-process prefill, the bytes MPI moved the formula.
. "$(dirname "$0")/lib.sh"
for p in 1 2 3 4; do
    timeout 300 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/tests/test_chain_delta" || fail "test_chain_delta with $p ranks"
done
finish
