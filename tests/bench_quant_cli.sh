#!/bin/sh
# jobs/bench-quant (wrapper and binary) at tiny sizes: the header names the CPU, the quant kernels and the
# read bandwidth of each thread count; a gemv row per (threads, type, shape) with two rates and two ratios
# to the read bandwidth; a prefill row per (threads, type, shape) naming its best path, the quantized
# types with int8, gemv and f32 figures (and bf16 where there is a unit; maxima with --max), bf16 weights at 1.00x of
# themselves; Q4_K/Q6_K skip a k of 96; bad options exit 2 with one line. (Timing means nothing here:
# this checks the program, not the machine.)
. "$(dirname "$0")/lib.sh"
B="$SRC/jobs/bench-quant"
RA_BUILDDIR=$BUILD "$B" --threads 1,2 --shapes 40x256,24x96 --prefill-n 6 --repeat 2 --min-ms 1 --max \
    --membw-mib 8 --cold-mib 1 >"$TMP/out" 2>"$TMP/err" || fail "bench-quant: $(cat "$TMP/err")"
grep -q "^# CPU: " "$TMP/out" || fail "no CPU line"
grep -q "^# prefill n=6: .* int8 gemv f32 bf16 (maxima of 2, in turn)" "$TMP/out" || fail "no prefill header with --max"
grep -Eq "^# quant kernels: (amx|avx512vnni|avxvnni|avx2|portable) " "$TMP/out" || fail "no quant kernels line"
grep -Eq "^# read bandwidth .*: T=1 [0-9.]+ T=2 [0-9.]+$" "$TMP/out" || fail "no read bandwidths"
unit=1
grep -q "^# bf16 unit: none" "$TMP/out" && unit=0
for t in 1 2; do
    for ty in q8_0 q4_0 q4_1 q4_k q6_k bf16 f32; do
        for shape in 40x256 24x96; do
            case $ty$shape in q4_k24x96|q6_k24x96)
                grep -Eq "^(gemv|prefill) $t +$ty +$shape " "$TMP/out" && fail "$ty ran a k of 96"
                continue ;;
            esac
            # gemv T type shape n1 [min-max] ratio n4 [min-max] ratio
            awk -v t=$t -v ty=$ty -v s=$shape '$1 == "gemv" && $2 == t && $3 == ty && $4 == s && $5 >= 0 &&
                 $6 ~ /^\[/ && $7 ~ /^[0-9.]+x$/ && $9 ~ /^\[/ && $10 ~ /^[0-9.]+x$/ && NF == 10 { ok = 1 }
                 END { exit !ok }' "$TMP/out" || fail "no gemv row T=$t $ty $shape: $(cat "$TMP/out")"
            # prefill T type shape int8 gemv f32 bf16 best ratio
            awk -v t=$t -v ty=$ty -v s=$shape -v unit=$unit '$1 == "prefill" && $2 == t && $3 == ty && $4 == s &&
                 $9 ~ /^(int8|gemv|f32|bf16)$/ && $10 ~ /^[0-9.]+x$/ && NF == 10 &&
                 (ty ~ /^q/ ? $5 != "-" && $6 != "-" && $7 != "-" && ($8 != "-") == unit : $5 == "-" && $6 == "-") { ok = 1 }
                 END { exit !ok }' "$TMP/out" || fail "no prefill row T=$t $ty $shape"
        done
    done
    grep -Eq "^prefill $t +bf16 +40x256 .* 1\.00x$" "$TMP/out" || fail "bf16 weights are not 1.00x of themselves"
    grep -Eq "^# T=$t quantized weights by default: prefill: .*; decode: int8 " "$TMP/out" || fail "no describe line"
done
expect_error "^bench-quant: --threads" "$B" --threads 0
expect_error "^bench-quant: --types: .*'q3_k'" "$B" --types q3_k
expect_error "^bench-quant: --shapes: .*'10x33'" "$B" --shapes 10x33
expect_error "^bench-quant: --shapes: not smollm2, bench-small, tinyllama or ROWSxK .*'tiny'" "$B" --shapes tiny
expect_error "^bench-quant: --prefill-n: .*'4'" "$B" --prefill-n 4
expect_error "^bench-quant: --repeat: '0'" "$B" --repeat 0
finish
