#!/usr/bin/env python3
"""gguf-from-hf: write a Llama model in the Hugging Face layout (config.json +
model.safetensors, as runahead-synth writes it) as an f32 GGUF file for llama.cpp.

Tooling for jobs/compare-llama-cpp and tests/gguf_model.sh (no runtime dependency of
runahead): it needs numpy and llama.cpp's own gguf-py (--gguf-py DIR, $LLAMA_CPP_DIR/gguf-py,
or the gguf package from PyPI), plus sentencepiece when --tokenizer is given. It reads safetensors directly (F32, BF16,
F16; one file or shards listed in model.safetensors.index.json), so no torch.

q_proj/k_proj are permuted from HF's rotate-half RoPE layout back to the interleaved
(Meta) pairs GGUF's LLaMA graph expects, as llama.cpp's convert_hf_to_gguf.py does.

Vocabulary: --tokenizer FILE.model (SentencePiece, e.g. the Llama 2 tokenizer) writes
the real one; without it, a placeholder of the model's vocab size (<unk>, <s>, </s>,
the 256 byte tokens, then tok<N>): enough for llama-bench, which feeds token ids,
not text.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


def die(msg):
    print(f"gguf-from-hf: {msg}", file=sys.stderr)
    sys.exit(1)


def safetensors_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(model_dir, n) for n in names]
    single = os.path.join(model_dir, "model.safetensors")
    if not os.path.isfile(single):
        die(f"{model_dir}: no model.safetensors (nor an index of shards)")
    return [single]


def read_tensors(path):
    """Yields (name, f32 ndarray) of one safetensors file, memory-mapped."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        raw = data[lo:hi]
        shape = info["shape"]
        dt = info["dtype"]
        if dt == "F32":
            a = raw.view(np.float32)
        elif dt == "F16":
            a = raw.view(np.float16).astype(np.float32)
        elif dt == "BF16":
            a = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            die(f"{path}: tensor {name} has dtype {dt} (F32, BF16 or F16 expected)")
        yield name, a.reshape(shape)


def permute(w, n_head):
    """HF rotate-half rows -> interleaved pairs (convert_hf_to_gguf.py's LlamaModel.permute)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_name(name):
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if name in fixed:
        return fixed[name]
    layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    parts = name.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in layer:
        return f"blk.{int(parts[2])}.{layer[parts[3]]}"
    if name.endswith("rotary_emb.inv_freq"):
        return None  # recomputed from rope_theta
    die(f"unexpected tensor {name} (not a Llama model?)")


def add_vocab(gguf, w, n_vocab, tokenizer):
    if tokenizer:
        try:
            from sentencepiece import SentencePieceProcessor
        except ImportError:
            die("--tokenizer needs the sentencepiece package (pip install sentencepiece)")
        sp = SentencePieceProcessor()
        if not sp.LoadFromFile(tokenizer):
            die(f"{tokenizer}: not a SentencePiece model")
        if sp.vocab_size() != n_vocab:
            die(f"{tokenizer}: {sp.vocab_size()} tokens, the model has {n_vocab}")
        tokens, scores, types = [], [], []
        for i in range(n_vocab):
            t = gguf.TokenType.NORMAL
            if sp.IsUnknown(i):
                t = gguf.TokenType.UNKNOWN
            if sp.IsControl(i):
                t = gguf.TokenType.CONTROL
            if sp.IsUnused(i):
                t = gguf.TokenType.UNUSED
            if sp.IsByte(i):
                t = gguf.TokenType.BYTE
            tokens.append(sp.IdToPiece(i).encode("utf-8"))
            scores.append(sp.GetScore(i))
            types.append(t)
    else:
        if n_vocab < 3 + 256:
            die(f"a placeholder vocabulary needs at least 259 tokens, the model has {n_vocab}")
        tokens = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)]
        types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] \
            + [gguf.TokenType.BYTE] * 256
        tokens += [b"tok%d" % i for i in range(len(tokens), n_vocab)]
        types += [gguf.TokenType.NORMAL] * (n_vocab - len(types))
        scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(259, n_vocab)]
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def llama3_rope_factors(c, s, head_dim):
    """Llama 3.1's per-pair frequency divisors, as llama.cpp's convert_hf_to_gguf.py
    (LlamaModel.generate_extra_tensors) computes them for rope_freqs.weight, but with
    original_max_position_embeddings read from rope_scaling, where transformers reads it."""
    base = float(c.get("rope_theta", 10000.0))
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
    factor = s.get("factor", 8.0)
    low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_ctx = s.get("original_max_position_embeddings", c.get("original_max_position_embeddings", 8192))
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def add_rope_scaling(gguf, w, c, cfg_path, head_dim):
    """rope_scaling as llama.cpp writes it: linear as rope.scaling.type/factor; llama3
    as the tensor rope_freqs.weight (returned, to add with the weights); others refused."""
    s = c.get("rope_scaling") or c.get("rope_parameters")
    if not s:
        return None
    kind = s.get("rope_type", s.get("type"))
    if kind in (None, "default"):
        return None
    if kind == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(s["factor"]))
        return None
    if kind == "llama3":
        return llama3_rope_factors(c, s, head_dim)
    die(f"{cfg_path}: rope_scaling type {kind} is not supported by this converter (linear, llama3)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="HF model directory (config.json + model.safetensors)")
    ap.add_argument("out", help="output .gguf file (f32 tensors, or quantized matrices with --type)")
    ap.add_argument("--gguf-py", help="llama.cpp's gguf-py directory "
                    "(default $LLAMA_CPP_DIR/gguf-py)")
    ap.add_argument("--tokenizer", help="SentencePiece tokenizer.model of the vocabulary "
                    "(default: a placeholder vocabulary)")
    ap.add_argument("--name", default=None, help="general.name (default: the directory's name)")
    ap.add_argument("--type", choices=("f32", "q8_0", "q4_0", "q4_1"), default="f32",
                    help="matrices as blocks of this type (gguf.quants' reference quantizers), not f32")
    ap.add_argument("--q8_0", action="store_true", help="the same as --type q8_0")
    ap.add_argument("--quantize-norms", action="store_true",
                    help="the norm vectors too (llama.cpp keeps them f32; for tests of a reader)")
    args = ap.parse_args()
    if args.q8_0:
        args.type = "q8_0"

    gp = args.gguf_py or (os.path.join(os.environ["LLAMA_CPP_DIR"], "gguf-py")
                          if os.environ.get("LLAMA_CPP_DIR") else None)
    if gp:
        if not os.path.isdir(os.path.join(gp, "gguf")):
            die(f"{gp}: not llama.cpp's gguf-py (no gguf/ inside)")
        sys.path.insert(0, gp)
    try:
        import gguf
    except ImportError:
        die("llama.cpp's gguf-py not found: give --gguf-py DIR, set LLAMA_CPP_DIR, or pip install gguf")

    cfg_path = os.path.join(args.model, "config.json")
    if not os.path.isfile(cfg_path):
        die(f"{args.model}: no config.json (an HF directory is expected)")
    with open(cfg_path) as f:
        c = json.load(f)
    if c.get("model_type", "llama") != "llama":
        die(f"{cfg_path}: model_type {c.get('model_type')} (llama expected)")
    dim = c["hidden_size"]
    n_head = c["num_attention_heads"]
    n_kv = c.get("num_key_value_heads", n_head)
    head_dim = c.get("head_dim", dim // n_head)
    if head_dim * n_head != dim:
        die(f"{cfg_path}: head_dim * heads != hidden_size (not supported)")
    n_vocab = c["vocab_size"]

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(args.name or os.path.basename(os.path.normpath(args.model)))
    w.add_context_length(c.get("max_position_embeddings", 2048))
    w.add_embedding_length(dim)
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(c.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(n_vocab)
    qtype = None if args.type == "f32" else getattr(gguf.GGMLQuantizationType, args.type.upper())
    w.add_file_type(getattr(gguf.LlamaFileType, "MOSTLY_" + args.type.upper()) if qtype else gguf.LlamaFileType.ALL_F32)
    add_vocab(gguf, w, n_vocab, args.tokenizer)
    rope_factors = add_rope_scaling(gguf, w, c, cfg_path, head_dim)
    if rope_factors is not None:
        w.add_tensor("rope_freqs.weight", rope_factors)

    seen = set()
    for path in safetensors_files(args.model):
        for name, a in read_tensors(path):
            g = gguf_name(name)
            if g is None:
                continue
            if name.endswith("q_proj.weight"):
                a = permute(a, n_head)
            elif name.endswith("k_proj.weight"):
                a = permute(a, n_kv)
            a = np.ascontiguousarray(a, dtype=np.float32)
            # rows of whole blocks; others stay f32
            if qtype and (a.ndim == 2 or args.quantize_norms) and a.shape[-1] % 32 == 0:
                w.add_tensor(g, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
            else:
                w.add_tensor(g, a)
            seen.add(g)
    if "output.weight" not in seen:
        if not c.get("tie_word_embeddings", False):
            die(f"{args.model}: no lm_head.weight and tie_word_embeddings is false")
        # llama.cpp reuses token_embd.weight when output.weight is absent.
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"gguf-from-hf: wrote {args.out} ({len(seen)} tensors, vocab {n_vocab}"
          f"{', ' + os.path.basename(args.tokenizer) if args.tokenizer else ', placeholder'})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
