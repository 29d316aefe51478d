#!/bin/sh
# `runahead --compute-dtype` on stories260K: bf16 compute over MPI (KV-Runahead
# and TSP, 2 ranks) prints the single-process bf16 tokens, as fp32 does (bf16
# rounds each row on its own: a rank's span gives the rows the whole prompt
# gives); a model written in bf16 runs in bf16 by default and with
# --compute-dtype f32 in fp32; and below the avx512 kernels (RA_CPU_ISA=avx2)
# a bf16 request falls back to the fp32 path and prints the reference tokens.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
M="$MODELS/stories260K.bin"
expected=$(tr -s ' \n' ' ' <"$MODELS/stories260K.bos.greedy200.ids" | sed 's/ $//')
python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(1, 512)) for _ in range(200)))" >"$TMP/p.ids"
run() { timeout 300 $MPIEXEC -np "$@"; }
RA="$BUILD/runahead --prompt-ids-file $TMP/p.ids --generate 24 --output ids"

# Fallback first: it needs no bf16 unit.
got=$(RA_CPU_ISA=avx2 "$BUILD/runahead" --model "$M" --prompt-ids 1 --generate 200 --output ids --compute-dtype bf16 \
      2>"$TMP/err") || fail "RA_CPU_ISA=avx2 --compute-dtype bf16: $(cat "$TMP/err")"
[ "$got" = "$expected" ] || fail "RA_CPU_ISA=avx2 --compute-dtype bf16: tokens differ from the fp32 reference"
RA_CPU_ISA=avx2 "$BUILD/runahead" --version | grep -q "^bf16 GEMM: none (" ||
    fail "--version under RA_CPU_ISA=avx2 does not say that there is no bf16 unit"

# Without a bf16 unit what follows runs the fp32 path and must hold all the same.
"$BUILD/runahead" --version | grep '^bf16 GEMM'
single=$($RA --model "$M" --compute-dtype bf16 2>"$TMP/err") || fail "single bf16: $(cat "$TMP/err")"
for m in "kvr --route chain" "tsp"; do
    got=$(run 2 $MPIEXEC_FLAGS $RA --model "$M" --compute-dtype bf16 --method $m 2>"$TMP/err") \
        || { fail "2 ranks $m bf16: $(tail -1 "$TMP/err")"; continue; }
    [ "$got" = "$single" ] || fail "2 ranks $m, bf16 compute: tokens differ from the single-process bf16 run"
done

# A bf16 file: bf16 by default (in place), fp32 on request; the latter equals fp32 compute of the
# bf16-rounded weights, which the bf16 run need not equal (test_bf16 explains why).
"$BUILD/runahead-synth" --from "$M" --dtype bf16 --out "$TMP/bf16" >/dev/null 2>&1 || fail "runahead-synth --dtype bf16"
auto=$($RA --model "$TMP/bf16" 2>"$TMP/err") || fail "bf16 file: $(cat "$TMP/err")"
bf=$($RA --model "$TMP/bf16" --compute-dtype bf16 2>/dev/null) || fail "bf16 file, --compute-dtype bf16"
[ "$auto" = "$bf" ] || fail "a bf16 file does not run in bf16 by default"
f32=$(RA_GEMM=f32 $RA --model "$TMP/bf16" 2>/dev/null) || fail "bf16 file, RA_GEMM=f32"
got=$($RA --model "$TMP/bf16" --compute-dtype f32 2>/dev/null) || fail "bf16 file, --compute-dtype f32"
[ "$got" = "$f32" ] || fail "--compute-dtype f32 on a bf16 file is not the fp32 path"
finish
