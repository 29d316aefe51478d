#!/bin/sh
# jobs/quant-quality-bin on stories260K, in seconds (jobs/quant-quality runs it on SmolLM2): the
# table's shape; the reference's own copy scores as the reference (KL 0, top-1 1, the greedy run
# followed throughout, the same perplexity); a deliberately worse copy (its weights' mantissas cut
# to 2 bits) scores worse than a mild one (10 bits) on KL, top-1 and perplexity, and its Q4_0
# (runahead-quantize) worse than its Q8_0, each computed on its blocks. Against the
# reference implementation (llama2.c, the fixtures): on its greedy sequence every scored position's
# top-1 is the sequence's next token, and the perplexity of positions 4-6 of a chunk of 8 is the
# one of its logits (stories260K.bos.logits8.f32). --keep-going gives a model that does not load a
# row saying so. Bad input is one error line.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
need_fixture stories260K.bos.greedy200.ids
need_fixture stories260K.bos.logits8.f32
B="$BUILD/jobs/quant-quality-bin"
M="$MODELS/stories260K.bin"
(echo 1; cat "$MODELS/stories260K.bos.greedy200.ids") | tr -s ' \n' ' ' >"$TMP/greedy.ids"
# copies of the model with each float's low 13 (mild) and 21 (crude) bits cleared
python3 - "$M" "$TMP" <<'PY' || fail "writing the cut copies"
import array, sys
data = open(sys.argv[1], "rb").read()
for name, bits in (("mild", 13), ("crude", 21)):
    w = array.array("I")
    w.frombytes(data[28:])
    mask = (0xFFFFFFFF << bits) & 0xFFFFFFFF
    for i in range(len(w)):
        w[i] &= mask
    open(f"{sys.argv[2]}/{name}.bin", "wb").write(data[:28] + w.tobytes())
PY
"$B" --ref "$M" --model "same=$M" --model "mild=$TMP/mild.bin" --model "crude=$TMP/crude.bin" --ids "$TMP/greedy.ids" \
    --ctx 96 --prompt 1 --continue 40 --csv "$TMP/q.csv" >"$TMP/q.out" 2>"$TMP/err" ||
    fail "quant-quality: $(cat "$TMP/err")"
# | model | loaded | MiB | PPL | KL mean | KL p99 | top-1 | text top-1 | greedy agree | greedy same |
[ "$(grep -c '^| ' "$TMP/q.out")" -eq 6 ] || fail "expected a header, a rule and 4 rows: $(cat "$TMP/q.out")"
awk -F' [|] ' '/^[|] / && NF != 10 { bad = 1 } END { exit bad }' "$TMP/q.out" || fail "a row without 10 cells: $(cat "$TMP/q.out")"
grep -q '^# text .*greedy.ids: 201 tokens.* 2 chunks of 96' "$TMP/q.out" || fail "no text line: $(cat "$TMP/q.out")"
[ "$(wc -l <"$TMP/q.csv")" -eq 5 ] || fail "CSV: expected a header and 4 lines: $(cat "$TMP/q.csv")"
# name,path,loaded,mib,ppl,ppl_err,kl_mean,kl_p99,top1_agree,text_top1,positions,greedy_agree,greedy_kl,greedy_same,steps
awk -F, 'NR > 1 { n[$1] = NR; p[$1] = $5; kl[$1] = $7; t[$1] = $9; g[$1] = $12; s[$1] = $14; pos[$1] = $11 }
    END { exit !(n["reference"] == 2 && p["same"] == p["reference"] && kl["same"] == 0 && t["same"] == 1 &&
                 s["same"] == 40 && g["same"] == 1 && pos["reference"] == 94 &&
                 kl["mild"] > 0 && kl["crude"] > kl["mild"] && t["crude"] < t["mild"] && p["crude"] > p["mild"] &&
                 p["crude"] > p["reference"] && s["crude"] < s["mild"]) }' "$TMP/q.csv" ||
    fail "the copy does not score as the reference, or the crude cut not worse than the mild one: $(cat "$TMP/q.csv")"
# real block types (runahead-quantize): Q4_0 scores worse than Q8_0, both computed on their blocks
if [ -x "$BUILD/runahead-quantize" ]; then
    for t in q8_0 q4_0; do
        "$BUILD/runahead-quantize" "$M" "$TMP/$t.gguf" --type $t --f16-fallback --no-vocab --quiet 2>"$TMP/err" ||
            fail "runahead-quantize --type $t: $(cat "$TMP/err")"
    done
    "$B" --ref "$M" --model "q8_0=$TMP/q8_0.gguf" --model "q4_0=$TMP/q4_0.gguf" --ids "$TMP/greedy.ids" --ctx 96 \
        --prompt 1 --continue 40 --csv "$TMP/blocks.csv" >"$TMP/blocks.out" 2>"$TMP/err" ||
        fail "quant-quality on Q8_0 and Q4_0: $(cat "$TMP/err")"
    awk -F, 'NR > 1 { p[$1] = $5; kl[$1] = $7; t[$1] = $9; w[$1] = $3 }
        END { exit !(kl["q8_0"] > 0 && kl["q4_0"] > kl["q8_0"] && t["q4_0"] < t["q8_0"] && p["q4_0"] > p["q8_0"] &&
                     w["q8_0"] ~ /q8_0 [0-9]/ && w["q4_0"] ~ /q4_0 [0-9]/) }' "$TMP/blocks.csv" ||
        fail "Q4_0 does not score worse than Q8_0, or the blocks were not kept: $(cat "$TMP/blocks.csv")"
else
    skip_part "runahead-quantize not built: no Q8_0/Q4_0 rows"
fi
# one chunk from BOS: the reference's top-1 is llama2.c's greedy token at every scored position
"$B" --ref "$M" --model "$M" --ids "$TMP/greedy.ids" --ctx 96 --chunks 1 --continue 0 --csv "$TMP/one.csv" \
    >"$TMP/one.out" 2>"$TMP/err" || fail "--chunks 1: $(cat "$TMP/err")"
awk -F, '$1 == "reference" && $10 == 1 && $11 == 47 { ok = 1 } END { exit !ok }' "$TMP/one.csv" ||
    fail "the reference's top-1 is not llama2.c's greedy token everywhere: $(cat "$TMP/one.csv")"
# a chunk of 8: positions 4-6 scored against tokens 5-7, from the reference implementation's logits
"$B" --ref "$M" --model "$M" --ids "$TMP/greedy.ids" --ctx 8 --chunks 1 --continue 0 --csv "$TMP/eight.csv" \
    >"$TMP/eight.out" 2>"$TMP/err" || fail "--ctx 8: $(cat "$TMP/err")"
want=$(python3 - "$MODELS/stories260K.bos.logits8.f32" "$TMP/greedy.ids" <<'PY'
import array, math, sys
lg = array.array("f")
lg.frombytes(open(sys.argv[1], "rb").read())
ids = [int(t) for t in open(sys.argv[2]).read().split()]
nll = []
for p in (4, 5, 6):
    row = lg[p * 512:(p + 1) * 512]
    m = max(row)
    nll.append(-(row[ids[p + 1]] - m - math.log(sum(math.exp(x - m) for x in row))))
print(math.exp(sum(nll) / 3))
PY
) || fail "the fixture's perplexity"
got=$(awk -F, '$1 == "reference" { print $5 }' "$TMP/eight.csv")
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(b > 0 && (d < 0 ? -d : d) <= 1e-4 * b) }' ||
    fail "perplexity of positions 4-6: $got, the reference implementation's logits give $want"
# --keep-going: a model that does not load gets its row, the others theirs
"$B" --ref "$M" --model "gone=$TMP/nothing" --model "$M" --ids "$TMP/greedy.ids" --ctx 96 --continue 8 --keep-going \
    >"$TMP/keep.out" 2>"$TMP/err" || fail "--keep-going: $(cat "$TMP/err")"
grep -q '^| gone | not loaded: no such model file .* | - |' "$TMP/keep.out" || fail "--keep-going: no 'not loaded' row: $(cat "$TMP/keep.out")"
grep -q '^| stories260K.bin | f32 36 |' "$TMP/keep.out" || fail "--keep-going: no row after it: $(cat "$TMP/keep.out")"
expect_error "^quant-quality: .*required" "$B" --ref "$M" --ids "$TMP/greedy.ids"
expect_error "^quant-quality: .*fewer than two chunks" "$B" --ref "$M" --model "$M" --ids "$TMP/greedy.ids" --ctx 128
expect_error "^quant-quality: .*nothing" "$B" --ref "$M" --model "$TMP/nothing" --ids "$TMP/greedy.ids" --ctx 64 --continue 8
expect_error "^quant-quality: .*--ctx" "$B" --ref "$M" --model "$M" --ids "$TMP/greedy.ids" --ctx 2
expect_error "^quant-quality: .*exceed --ctx" "$B" --ref "$M" --model "$M" --ids "$TMP/greedy.ids" --ctx 64 --prompt 60
expect_error "^quant-quality: .*vocabulary" "$B" --ref "$M" --model "$M" --text "$SRC/README.md" \
    --vocab "$MODELS/llama2-tokenizer.bin" --ctx 64 --continue 8
"$SRC/jobs/quant-quality" --help | grep -q -- '--quantizer' || fail "jobs/quant-quality --help"
finish
