#!/bin/sh
# Decode from the host KV pool after any prefill: --offload full, kvpr (forced
# and planned split, one or two device slots) and infinigen at its exact
# settings (every column, alpha inf, no cap) give the single-process --offload
# none tokens, token for token, after a KVR chain and TSP on 2-4 ranks;
# infinigen at its defaults (approximate) and with a small pool (evictions)
# runs and reports; on the CPU backend the prefill writes into the pool (no
# prompt row is moved after it); with --kv-dtype bf16, full and kvpr give
# --offload none's bf16 tokens; bad offload flags are one clear error.
. "$(dirname "$0")/lib.sh"
need_command "$MPIEXEC"
"$BUILD/runahead-synth" --preset tiny --seed 5 --out "$TMP/tiny" >/dev/null 2>"$TMP/synth.err" \
    || { cat "$TMP/synth.err" >&2; fail "runahead-synth --preset tiny failed"; finish; }
models="$TMP/tiny"
[ -r "$MODELS/stories260K.bin" ] && models="$models $MODELS/stories260K.bin" \
    || skip_part "fixture $MODELS/stories260K.bin not found: the trained GQA model is unchecked"
ig_exact="infinigen --infinigen-ratio 1 --infinigen-alpha inf --infinigen-cap 1"
ids=1,403,407,261,378,260,425,300,271,394,312,286,333,290,364,271,380,311,263,299,405
for model in $models; do
    base="-m $model -i $ids -n 24 -o ids --ignore-eos -T 1"
    $MPIEXEC -np 1 $MPIEXEC_FLAGS "$BUILD/runahead" $base >"$TMP/ref" 2>"$TMP/err" \
        || { cat "$TMP/err" >&2; fail "single-process decode failed"; continue; }
    for p in 1 2 3 4; do
        for method in kvr tsp; do
            [ $p = 1 ] && [ $method = tsp ] && continue
            m="--method $method"; [ $p = 1 ] && m=""
            for mode in "none" "full" "full --device-kv-mem 1K" "kvpr" "kvpr --kvpr-l 0" "kvpr --kvpr-l 7" \
                        "kvpr --kvpr-l 100000" "$ig_exact" "infinigen" "infinigen --infinigen-pool-mem 6K"; do
                link="--host-link-gbps 8 --host-link-latency-us 3"
                [ "$mode" = none ] && link=""
                timeout 300 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/runahead" $base $m --offload $mode $link \
                    >"$TMP/got" 2>"$TMP/err"
                rc=$?
                if [ "$mode" = "full --device-kv-mem 1K" ]; then
                    [ $rc != 0 ] && grep -q "cannot hold one layer's working set" "$TMP/err" \
                        || fail "$model: a 1K device budget is not one clear error"
                    continue
                fi
                [ $rc = 0 ] || { cat "$TMP/err" >&2; fail "$model: -np $p $m --offload $mode failed"; continue; }
                # the emulated device's memory is host memory: the prefill wrote into the pool
                if [ "$mode" != none ] && grep -q "offload: emulated host link" "$TMP/err"; then
                    grep -q ", 0 bytes of prompt rows moved into the pool after the prefill" "$TMP/err" \
                        || fail "$model: -np $p $m --offload $mode moved prompt rows into the pool after the prefill"
                fi
                case "$mode" in infinigen*) # approximate: it ran, decoded 24 tokens and reported
                    [ "$(wc -w <"$TMP/got")" = "$(wc -w <"$TMP/ref")" ] && grep -q "offload: infinigen, " "$TMP/err" \
                        || fail "$model: -np $p $m --offload $mode: no decode or no report"
                    continue ;;
                esac
                cmp -s "$TMP/ref" "$TMP/got" || fail "$model: -np $p $m --offload $mode differs from one process"
                [ "$mode" = none ] || grep -q "offload: emulated host link" "$TMP/err" \
                    || fail "$model: --offload $mode does not say the link is emulated"
            done
        done
    done
done
# bf16 rows in the pool and the slots: full and kvpr give --offload none's tokens on the same ranks
# (bf16 rounding makes the tokens depend on the split, so one process is no reference here); a
# budget of one bf16 slot, half an f32 one, is one slot
for model in $models; do
    base="-m $model -i $ids -n 24 -o ids --ignore-eos -T 1 --kv-dtype bf16"
    one=12K; case "$model" in *stories260K*) one=6K ;; esac # f32: 22.5K and 11.25K
    for run in "1" "3 --method kvr" "3 --method tsp"; do
        p=${run%% *}; m=""; [ "$p" = "$run" ] || m=${run#* }
        timeout 300 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/runahead" $base $m --offload none >"$TMP/ref" 2>"$TMP/err" \
            || { cat "$TMP/err" >&2; fail "$model: bf16 -np $p $m --offload none failed"; continue; }
        for mode in "full" "full --device-kv-mem $one" "kvpr" "kvpr --kvpr-l 7"; do
            timeout 300 $MPIEXEC -np $p $MPIEXEC_FLAGS "$BUILD/runahead" $base $m --offload $mode \
                --host-link-gbps 8 >"$TMP/got" 2>"$TMP/err" \
                || { cat "$TMP/err" >&2; fail "$model: bf16 -np $p $m --offload $mode failed"; continue; }
            cmp -s "$TMP/ref" "$TMP/got" || fail "$model: bf16 -np $p $m --offload $mode differs from --offload none"
            grep -q ", 0 bytes of prompt rows moved into the pool after the prefill" "$TMP/err" \
                || fail "$model: bf16 -np $p $m --offload $mode moved prompt rows into the pool after the prefill"
            case "$mode" in *device-kv-mem*)
                grep -q "offload: full, 1 device slot" "$TMP/err" || fail "$model: bf16 rows: $one is not one slot" ;;
            esac
        done
    done
done
r="$BUILD/runahead"
expect_error "--offload infinigen needs --kv-dtype f32" "$r" -m "$TMP/tiny" -i 1,2 --offload infinigen --kv-dtype bf16
expect_error "--device-kv-mem: '12Q' is not a size" "$r" -m "$TMP/tiny" -i 1,2 --offload full --device-kv-mem 12Q
expect_error "--device-kv-mem: must be more than 0" "$r" -m "$TMP/tiny" -i 1,2 --offload full --device-kv-mem 0
expect_error "--offload: 'fast' is not none, full, kvpr or infinigen" "$r" -m "$TMP/tiny" -i 1,2 --offload fast
expect_error "infinigen-. needs --offload infinigen" "$r" -m "$TMP/tiny" -i 1,2 --offload full --infinigen-cap 0.5
expect_error "--infinigen-ratio: 1.5 must be in .0, 1.$" "$r" -m "$TMP/tiny" -i 1,2 --offload infinigen --infinigen-ratio 1.5
expect_error "--infinigen-alpha: -1 must be more than 0" "$r" -m "$TMP/tiny" -i 1,2 --offload infinigen --infinigen-alpha -1
expect_error "--infinigen-pool-mem: '3Q' is not a size" "$r" -m "$TMP/tiny" -i 1,2 --offload infinigen --infinigen-pool-mem 3Q
expect_error "need --offload" "$r" -m "$TMP/tiny" -i 1,2 --device-kv-mem 1M
expect_error "--kvpr-l needs --offload kvpr" "$r" -m "$TMP/tiny" -i 1,2 --offload full --kvpr-l 3
finish
