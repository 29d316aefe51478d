#!/bin/sh
# One binary for every x86 CPU: the kernels are chosen at run time.
# - --version and the --report record name the kernels in use; RA_CPU_ISA
#   forces each one this CPU supports, and the trained model's greedy tokens
#   are the reference's on every one.
# - An unknown or unsupported RA_CPU_ISA is one error line, not a SIGILL.
# - On emulated older CPUs (qemu-x86_64, from jobs/setup's qemu-user): a
#   Nehalem (no AVX) and a SandyBridge (AVX, no AVX2) run the portable
#   kernels and a Haswell (AVX2, no AVX-512) the AVX2 ones, with the
#   reference tokens; a Cooper Lake (AVX512-BF16 listed, but no AVX-512
#   state under qemu-user) the AVX2 ones too, with a bf16 KV cache. Not in a sanitizer build (jobs/sanitize): qemu-user
#   cannot run ASan binaries.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
need_fixture stories260K.bos.greedy200.ids
RA=$BUILD/runahead
M=$MODELS/stories260K.bin
N=40 # greedy tokens compared: enough to diverge on any wrong kernel, quick under emulation
want=$(tr -s ' \n' ' ' <"$MODELS/stories260K.bos.greedy200.ids" | cut -d' ' -f1-$N)

# kernels_of CMD...: the "cpu kernels:" name that CMD --version prints.
kernels_of() { "$@" --version | sed -n 's/^cpu kernels: \([a-z0-9]*\).*/\1/p'; }

# check_tokens LABEL CMD...: CMD (a runahead command line) reproduces the
# reference's first N tokens and its report names the kernels of LABEL.
check_tokens() {
    label=$1; shift
    got=$("$@" --model "$M" --prompt-ids 1 --generate $N --output ids --threads 2 --report "$TMP/$label.json" \
          2>"$TMP/err") || { fail "$label: runahead failed: $(tail -1 "$TMP/err")"; return; }
    [ "$got" = "$want" ] || fail "$label: the first $N greedy ids differ from the reference"
    grep -q "\"cpu_kernels\": \"${label%%-*}\"" "$TMP/$label.json" || fail "$label: the report does not name the ${label%%-*} kernels"
}

case $(uname -m) in
x86_64) ;;
*) echo "not x86-64: only the portable kernels exist here"; check_tokens portable "$RA"; finish ;;
esac

supported=$("$RA" --version | sed -n 's/^cpu kernels: .*(this CPU and build: \(.*\))$/\1/p' | tr -d ,)
[ -n "$supported" ] || fail "--version does not list the supported kernels: $("$RA" --version)"
best=$(kernels_of "$RA")
[ "$best" = "$(echo "$supported" | cut -d' ' -f1)" ] || fail "default kernels '$best' are not the best supported ($supported)"
for isa in $supported; do
    [ "$(RA_CPU_ISA=$isa kernels_of "$RA")" = "$isa" ] || fail "RA_CPU_ISA=$isa: --version names other kernels"
    RA_CPU_ISA=$isa check_tokens "$isa" "$RA"
done

expect_error "RA_CPU_ISA='sse9': not one of avx512bf16, avx512, avx2, portable" env RA_CPU_ISA=sse9 "$RA" --model "$M" --prompt-ids 1

# qemu-user cannot start an ASan binary (it reserves terabytes of shadow
# memory at fixed addresses); jobs/test runs this part on the plain build.
if sanitized "$RA"; then
    echo "skip: emulated older CPUs: qemu-x86_64 cannot run a sanitizer build (jobs/test runs them)"
    finish
fi
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
    skip_part "qemu-x86_64 not installed (apt-get install qemu-user): older CPUs not emulated"
    finish
fi
[ "$(kernels_of qemu-x86_64 -cpu Nehalem "$RA")" = portable ] || fail "Nehalem: the portable kernels were not chosen"
check_tokens portable-nehalem qemu-x86_64 -cpu Nehalem "$RA"
expect_error "RA_CPU_ISA=avx2: this CPU cannot run the avx2 kernels \(it supports: portable\)" \
    env RA_CPU_ISA=avx2 qemu-x86_64 -cpu Nehalem "$RA" --model "$M" --prompt-ids 1
[ "$(kernels_of qemu-x86_64 -cpu SandyBridge "$RA")" = portable ] || fail "SandyBridge (AVX, no AVX2): the portable kernels were not chosen"
[ "$(kernels_of qemu-x86_64 -cpu Haswell "$RA")" = avx2 ] || fail "Haswell: the AVX2 kernels were not chosen"
check_tokens avx2-haswell qemu-x86_64 -cpu Haswell "$RA"
# A Cooper Lake lists AVX512-BF16, but qemu-user saves no AVX-512 state: the
# AVX512-BF16 kernels need both, so the AVX2 ones run, bf16 KV rows included.
[ "$(kernels_of qemu-x86_64 -cpu Cooperlake "$RA")" = avx2 ] || fail "Cooperlake under qemu-user (no AVX-512 state): the AVX2 kernels were not chosen"
# qemu_isa ISA ARGS...: qemu-x86_64 ARGS with RA_CPU_ISA=ISA, without qemu's
# warnings about the model's features TCG lacks (Cooper Lake has several).
qemu_isa() {
    isa=$1; shift
    RA_CPU_ISA=$isa qemu-x86_64 "$@" 2>"$TMP/qemu.err"; rc=$?
    grep -v '^qemu-x86_64: warning' "$TMP/qemu.err" >&2
    return $rc
}
expect_error "RA_CPU_ISA=avx512bf16: this CPU cannot run the avx512bf16 kernels \(it supports: avx2, portable\)" \
    qemu_isa avx512bf16 -cpu Cooperlake "$RA" --model "$M" --prompt-ids 1
got=$(qemu-x86_64 -cpu Cooperlake "$RA" --model "$M" --prompt-ids 1 --generate 30 --output ids --kv-dtype bf16 2>"$TMP/err") \
    || fail "Cooperlake, bf16 KV: runahead failed: $(tail -1 "$TMP/err")"
[ "$got" = "$(echo "$want" | cut -d' ' -f1-30)" ] || fail "Cooperlake, bf16 KV: the first 30 greedy ids differ from the reference"
# Its quantized-weight kernels: AVX512-VNNI listed but not run (no AVX-512 state), AVX2's pass test_quant
# and test_quant_panel.
out=$(qemu-x86_64 -cpu Cooperlake "$BUILD/tests/test_quant" 2>"$TMP/qemu.err") \
    || fail "Cooperlake: test_quant failed: $(grep -v '^qemu-x86_64: warning' "$TMP/qemu.err" | tail -1)"
echo "$out" | grep -q '^avx512vnni: not run' || fail "Cooperlake under qemu-user: test_quant ran the AVX512-VNNI kernels"
echo "$out" | grep -q '^avx2 q4_0: gemv' || fail "Cooperlake under qemu-user: test_quant did not run the AVX2 kernels"
out=$(qemu-x86_64 -cpu Cooperlake "$BUILD/tests/test_quant_panel" 2>"$TMP/qemu.err") \
    || fail "Cooperlake: test_quant_panel failed: $(grep -v '^qemu-x86_64: warning' "$TMP/qemu.err" | tail -1)"
echo "$out" | grep -q '^avx2 q4_0: gemm worst' || fail "Cooperlake under qemu-user: test_quant_panel did not run the AVX2 GEMM"
finish
