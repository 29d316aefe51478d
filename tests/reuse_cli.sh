#!/bin/sh
# runahead --request and --reuse on stories260K (src/reuse/run.h, mpi/runahead.c).
#  1. One request file of ids (no tokenizer) and one of text (a 512-piece
#     SentencePiece vocabulary written here, the size of stories260K's) drive
#     every mode through one store; none, blend on an empty store and blend at
#     ratio 1 print the tokens of the same prompt given as --prompt-ids (the
#     ids --tokenize-only --request prints) to the chain's single-rank
#     prefill, the independent reference; blend at ratio 0 prints full's.
#     --request alone on 2 ranks prints them too.
#  2. --report: the reuse record (mode, rows recomputed per layer, hits and
#     misses, rows and bytes loaded, the prompt's parts, one TTFT per
#     --repeat).
#  3. Bad input, one line naming the file and the cause, non-zero exit: a
#     missing chunk file, malformed JSON, a chunk and a prompt longer than the
#     context, ids outside the vocabulary, text without a tokenizer, a store
#     directory that does not exist, options
#     that do not fit together (their values: test_request). --reuse on the
#     chain: reuse_chain_cli.sh.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
need_command python3 python3
M="$MODELS/stories260K.bin"
RA="$BUILD/runahead"

# tok512.bin: <unk>, <s>, </s>, the 256 byte pieces, printable ASCII, two-letter pieces.
python3 - "$TMP/tok512.bin" <<'PY' || { fail "cannot write tok512.bin"; finish; }
import struct, sys
pieces = [(b"<unk>", 0.0), (b"<s>", 0.0), (b"</s>", 0.0)]
pieces += [(b"<0x%02X>" % i, 0.0) for i in range(256)]
pieces += [(bytes([c]), -2.0) for c in range(32, 127)]
pieces += [(bytes([97 + k // 26 % 26, 97 + k % 26]), -1.0) for k in range(512 - len(pieces))]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<i", 6))
    for p, s in pieces:
        f.write(struct.pack("<fi", s, len(p)) + p)
PY
mkdir -p "$TMP/docs"
printf 'the cat sat on the mat. ' >"$TMP/docs/a.txt"
cat >"$TMP/ids.json" <<'EOF'
{"system": {"ids": [1]}, "chunks": [{"ids": [403, 407, 261, 378]}, {"ids": [280, 303, 411, 300, 301]}],
 "question": {"ids": [500, 266]}}
EOF
cat >"$TMP/text.json" <<'EOF'
{"system": "once upon a time", "chunks": ["there was a dog. ", {"file": "docs/a.txt"}, {"ids": [300, 301]}],
 "question": "what did the cat do?"}
EOF
TOK="--tokenizer $TMP/tok512.bin"
ids_want=""

# 1. Every mode from one request file. The reference: the same ids (--tokenize-only --request) as
# --prompt-ids through the chain's single-rank prefill; none prints its tokens, and so does blend
# with --store-write on an empty store (every chunk a miss, computed, then added). Then every chunk
# is a hit: blend at ratio 1 prints what none prints, at ratio 0 what full prints (nothing but the
# rows no chunk holds recomputed, as full), prefix loads the first chunk.
summary() { grep "^reuse $1" "$TMP/err" | head -n 1; }
for req in ids text; do
    args="--model $M --request $TMP/$req.json"
    [ $req = text ] && args="$args $TOK"
    n_chunks=$(python3 -c "import json, sys; print(len(json.load(open(sys.argv[1]))['chunks']))" "$TMP/$req.json")
    ids=$($RA $args --tokenize-only 2>"$TMP/err") || { fail "$req: --tokenize-only: $(cat "$TMP/err")"; continue; }
    want=$($RA --model $M --prompt-ids "$ids" -n 12 -o ids 2>"$TMP/err") || { fail "$req: reference: $(cat "$TMP/err")"; continue; }
    [ $req = ids ] && ids_want=$want
    runs() { # runs NAME REUSE-ARGS...: the tokens into $TMP/NAME, stderr into $TMP/err
        name=$1; shift
        $RA $args --store "$TMP/store-$req" "$@" -n 12 -o ids >"$TMP/$name" 2>"$TMP/err" || fail "$req $*: $(cat "$TMP/err")"
        [ "$(wc -w <"$TMP/$name")" -eq 12 ] || fail "$req $*: printed '$(cat "$TMP/$name")', not 12 tokens"
    }
    runs none --reuse none
    [ "$(cat "$TMP/none")" = "$want" ] || fail "$req --reuse none printed '$(cat "$TMP/none")', --prompt-ids '$want'"
    runs write --reuse blend --store-write
    [ "$(cat "$TMP/write")" = "$want" ] || fail "$req: blend on an empty store printed '$(cat "$TMP/write")', not '$want'"
    summary blend | grep -q ": 0 hits, $n_chunks misses" || fail "$req: the empty store: $(summary blend)"
    runs prefix --reuse prefix
    summary prefix | grep -q ": [1-9][0-9]* hits" || fail "$req: prefix found no chunk: $(summary prefix)"
    runs full --reuse full
    summary full | grep -q ": $n_chunks hits, 0 misses" || fail "$req: full: $(summary full)"
    runs blend1 --reuse blend --blend-ratio 1
    [ "$(cat "$TMP/blend1")" = "$want" ] || fail "$req: blend at ratio 1 printed '$(cat "$TMP/blend1")', none '$want'"
    runs blend0 --reuse blend --blend-ratio 0
    [ "$(cat "$TMP/blend0")" = "$(cat "$TMP/full")" ] ||
        fail "$req: blend at ratio 0 printed '$(cat "$TMP/blend0")', full '$(cat "$TMP/full")'"
    runs blend --reuse blend
    summary blend | grep -q "(ratio 0.150): .*: $n_chunks hits" || fail "$req: blend: $(summary blend)"
done

# --request alone is a prompt source for the chain too.
got=$(timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS $RA --model $M --request "$TMP/ids.json" -n 12 -o ids 2>"$TMP/err") ||
    fail "--request on 2 ranks: $(cat "$TMP/err")"
[ "$got" = "$ids_want" ] || fail "--request on 2 ranks printed '$got', one rank '$ids_want'"

# 2. The report (the ids request's store holds both chunks: 9 rows, the prefix and the question computed).
$RA --model $M --request "$TMP/ids.json" --reuse blend --blend-ratio 0.34 --store "$TMP/store-ids" --repeat 3 -n 4 \
    -o ids --report "$TMP/r.json" >/dev/null 2>"$TMP/err" || fail "--report: $(cat "$TMP/err")"
python3 - "$TMP/r.json" <<'PY' || fail "the reuse record is wrong (above)"
import json, sys
r = json.load(open(sys.argv[1]))
u, p = r["reuse"], r["prompt_parts"]
bad = []
if u["mode"] != "blend" or u["ratio"] != 0.34: bad.append("mode %s ratio %s" % (u["mode"], u["ratio"]))
rec = u["recomputed_rows"]
# Layers 0 and 1 (to the check layer) every row; then the 3 rows no chunk holds and 0.34 x 9 loaded, rounded: 3.
if len(rec) != 5 or rec[:2] != [12, 12] or not all(x == 3 + 3 for x in rec[2:]): bad.append("recomputed %s" % rec)
if (u["hits"], u["misses"], u["rows"], u["loaded_rows"]) != (2, 0, 12, 9): bad.append("hits %d misses %d rows %d loaded %d" % (u["hits"], u["misses"], u["rows"], u["loaded_rows"]))
if u["bytes_loaded"] <= 0: bad.append("bytes %s" % u["bytes_loaded"])
if p != {"prefix": 1, "chunks": [4, 5], "suffix": 2} or r["context_length"] != 12: bad.append("parts %s" % p)
if len(r["ttft_s"]["all"]) != 3 or not all(t > 0 for t in r["ttft_s"]["all"]): bad.append("ttft %s" % r["ttft_s"])
if len(r["generated_ids"]) != 4: bad.append("generated %s" % r["generated_ids"])
if bad: print("; ".join(bad)); sys.exit(1)
PY

# 3. Bad input.
printf '{"chunks": [{"file": "docs/nope.txt"}], "question": "q"}' >"$TMP/missing.json"
printf '{"chunks": [{"ids": [1, 2]}], "question": {"ids": [3]},}' >"$TMP/malformed.json"
python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
json.dump({"chunks": [{"ids": [5] * 600}], "question": {"ids": [3]}}, open(d + "/longchunk.json", "w"))
json.dump({"chunks": [{"ids": [5] * 300}, {"ids": [6] * 300}], "question": {"ids": [3]}}, open(d + "/longprompt.json", "w"))
json.dump({"chunks": [{"ids": [5, 600]}], "question": {"ids": [3]}}, open(d + "/outside.json", "w"))
PY
expect_error "missing.json: chunk 0: .*docs/nope.txt: cannot open" $RA --model $M $TOK --request "$TMP/missing.json" --reuse none
expect_error "malformed.json: line 1" $RA --model $M --request "$TMP/malformed.json" --reuse none
expect_error "longchunk.json: chunk 0: 600 tokens .* context of 512" $RA --model $M --request "$TMP/longchunk.json" --reuse none
expect_error "longprompt.json: the prompt has 601 tokens, more than the model's context of 512" \
    $RA --model $M --request "$TMP/longprompt.json" --reuse none -n 1
expect_error "outside.json: token id 600 at position 1 is outside the model's vocabulary" \
    $RA --model $M --request "$TMP/outside.json" --reuse none
expect_error "text.json: \"system\" is text, but the model has no tokenizer" $RA --model $M --request "$TMP/text.json"
expect_error "$TMP/nostore: cannot open the chunk store" $RA --model $M --request "$TMP/ids.json" --reuse full \
    --store "$TMP/nostore"
expect_error "--reuse needs --request" $RA --model $M --prompt-ids "1 2" --reuse none
expect_error "need --reuse blend" $RA --model $M --request "$TMP/ids.json" --reuse full --blend-ratio 0.2
expect_error "need --reuse" $RA --model $M --request "$TMP/ids.json" --store-write
expect_error "--blend-check-layers: layer 5, but the model has 5 layers" $RA --model $M --request "$TMP/ids.json" \
    --reuse blend --blend-check-layers 1,5
finish
