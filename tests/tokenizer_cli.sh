#!/bin/sh
# runahead --tokenize-only: the prompt's ids (BOS first) on one line, exactly as
# SentencePiece encodes them; a missing or malformed tokenizer is one clear error.
. "$(dirname "$0")/lib.sh"
need_fixture llama2-tokenizer.bin
need_fixture llama2-tokenizer.cases.jsonl
RA="$BUILD/runahead"
TOK="$MODELS/llama2-tokenizer.bin"

# Each case becomes case<N>.txt (the exact text) and case<N>.ids (the ids);
# tokenizer-cut.bin is the fixture cut short.
python3 - "$MODELS/llama2-tokenizer.cases.jsonl" "$TMP" "$TOK" <<'PY' || fail "cannot read the cases"
import json, os, sys
n = 0
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.strip():
        continue
    case = json.loads(line)
    with open(os.path.join(sys.argv[2], "case%d.txt" % n), "wb") as f:
        f.write(case["text"].encode("utf-8"))
    with open(os.path.join(sys.argv[2], "case%d.ids" % n), "w") as f:
        f.write(" ".join(str(i) for i in case["ids"]) + "\n")
    n += 1
with open(os.path.join(sys.argv[2], "tokenizer-cut.bin"), "wb") as f:
    f.write(open(sys.argv[3], "rb").read()[:1001])  # ends inside a record
PY

# check_ids TEXT EXPECTED: the ids runahead prints for TEXT must be EXPECTED.
check_ids() {
    out=$("$RA" --tokenizer "$TOK" --prompt "$1" --tokenize-only 2>"$TMP/err")
    rc=$?
    if [ "$rc" -ne 0 ]; then fail "exit $rc for prompt '$1': $(cat "$TMP/err")"; return; fi
    [ "$out" = "$2" ] || fail "prompt '$1': got '$out', want '$2'"
}

cases=0
for txt in "$TMP"/case*.txt; do
    [ -e "$txt" ] || break
    text=$(cat "$txt"; printf x)   # the x keeps trailing newlines through $(...)
    check_ids "${text%x}" "$(cat "${txt%.txt}.ids")"
    cases=$((cases + 1))
done
[ "$cases" -eq 3 ] || fail "expected 3 cases, found $cases"

# A few more, with ids from the sentencepiece library (not from runahead).
check_ids "Hello  world" "1 15043 29871 3186"
check_ids "$(printf 'line1\nline2')" "1 1196 29896 13 1220 29906"
check_ids "$(printf '\344\270\255\346\226\207')" "1 29871 30275 30333"
check_ids "$(printf '\360\237\230\200')" "1 29871 243 162 155 131"

expect_error "nonexistent-tokenizer.bin" \
    "$RA" --tokenizer "$TMP/nonexistent-tokenizer.bin" --prompt "hi" --tokenize-only
expect_error "tokenizer-cut.bin: .*(truncated|past the end)" \
    "$RA" --tokenizer "$TMP/tokenizer-cut.bin" --prompt "hi" --tokenize-only
finish
