#!/usr/bin/env python3
"""Checks of runahead-quantize's output for tests/quantize_cli.sh and tests/quantize_llama_cpp.sh.

  quantize_check.py logits GOT.f32 WANT.f32 VOCAB BOUND
      per prompt, ||got - want|| / ||want|| of the logits rows must be at most BOUND
      (prints the worst)
  quantize_check.py read FILE.gguf TYPES [REF.gguf]
      gguf-py reads FILE: general.architecture llama, the llama.* shape keys, every tensor
      of a type in TYPES (comma-separated ggml names, F32 for the 1-D norms); with REF
      (an f32 or f16 GGUF of the same model) each tensor dequantized by gguf-py is within
      its type's error of REF's (relative RMSE: Q8_0 1%, Q6_K 3%, Q4_* 12%)
  quantize_check.py vocab FILE.gguf REF.gguf
      every tokenizer.* key of REF is in FILE with the same type and value bytes
  quantize_check.py same A.gguf B.gguf [NAMES]
      the two files hold the same tensors (names, ggml types, shapes) with the same bytes;
      NAMES (comma-separated) limits the comparison to those tensors of A
  quantize_check.py tokenizer DIR N_VOCAB
      writes a small byte-level BPE tokenizer.json and tokenizer_config.json into DIR
Several commands, separated by "+", run in one process.
Exit 77 when gguf or numpy cannot be imported, 1 on a failed check.
"""
import sys

try:
    import numpy as np
    import gguf
    from gguf.quants import dequantize
except ImportError:
    sys.exit(77)


def fail(msg):
    print(f"quantize_check: {msg}", file=sys.stderr)
    sys.exit(1)


def logits(got, want, vocab, bound):
    a = np.fromfile(got, dtype=np.float32).reshape(-1, int(vocab))
    b = np.fromfile(want, dtype=np.float32).reshape(-1, int(vocab))
    if a.shape != b.shape or a.size == 0:
        fail(f"{got}: {a.shape} logits, {want}: {b.shape}")
    rel = np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)
    print(f"logits: worst relative error {rel.max():.4f} (bound {bound})")
    if not np.all(rel <= float(bound)):
        fail(f"{got}: logits of prompt {int(rel.argmax())} differ by {rel.max():.4f} > {bound}")


def field_value(f):
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]) for i in f.data]
        return [f.parts[i].tolist() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]])
    return f.parts[f.data[0]].tolist()


def tensors(reader):
    return {t.name: t for t in reader.tensors}


def as_f32(t):
    shape = list(reversed([int(x) for x in t.shape]))
    return dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)


def read(path, types, ref=None):
    r = gguf.GGUFReader(path)
    arch = field_value(r.fields["general.architecture"])
    if arch != b"llama":
        fail(f"{path}: general.architecture {arch!r}")
    for key in ("embedding_length", "block_count", "feed_forward_length", "attention.head_count",
                "attention.head_count_kv", "context_length", "rope.freq_base",
                "attention.layer_norm_rms_epsilon"):
        if f"llama.{key}" not in r.fields:
            fail(f"{path}: llama.{key} is missing")
    allowed = set(types.split(","))
    for t in r.tensors:
        if t.tensor_type.name not in allowed:
            fail(f"{path}: tensor {t.name} is {t.tensor_type.name}, not one of {types}")
    if ref is None:
        print(f"{path}: {len(r.tensors)} tensors read by gguf-py")
        return
    rr = gguf.GGUFReader(ref)
    want, got = tensors(rr), tensors(r)
    if set(want) != set(got):
        fail(f"{path}: tensors {sorted(set(want) ^ set(got))[:4]} are in one file only")
    bounds = {"F32": 1e-7, "F16": 1e-3, "Q8_0": 0.01, "Q6_K": 0.03}
    worst = {}
    for name, t in got.items():
        a, b = as_f32(t), as_f32(want[name])
        if a.shape != b.shape:
            fail(f"{path}: tensor {name} is {a.shape}, {ref} has {b.shape}")
        rel = np.sqrt(np.mean((a - b) ** 2) / max(np.mean(b ** 2), 1e-30))
        kind = t.tensor_type.name
        worst[kind] = max(worst.get(kind, 0), rel)
        if rel > bounds.get(kind, 0.12):
            fail(f"{path}: tensor {name} ({kind}) has relative RMSE {rel:.4f} against {ref}")
    print(f"{path}: read by gguf-py; worst relative RMSE per type: "
          + ", ".join(f"{k} {v:.4f}" for k, v in sorted(worst.items())))


SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def raw_kvs(path):
    """{key: the value's bytes (type included)} of a GGUF file, read with struct alone:
    gguf-py's reader takes seconds on a 49k-token vocabulary."""
    import struct
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    if data[:4] != b"GGUF":
        fail(f"{path}: not a GGUF file")
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos = 24

    def string(p):
        n = struct.unpack_from("<Q", data, p)[0]
        return p + 8 + n

    def value(p, t):
        if t in SCALAR:
            return p + SCALAR[t]
        if t == 8:
            return string(p)
        et, n = struct.unpack_from("<IQ", data, p)
        p += 12
        if et in SCALAR:
            return p + n * SCALAR[et]
        for _ in range(n):
            p = value(p, et)
        return p

    out = {}
    for _ in range(n_kv):
        end = string(pos)
        key = data[pos + 8:end].decode()
        t = struct.unpack_from("<I", data, end)[0]
        stop = value(end + 4, t)
        out[key] = data[end:stop]
        pos = stop
    return out


def vocab(path, ref):
    got, want = raw_kvs(path), raw_kvs(ref)
    keys = [k for k in want if k.startswith("tokenizer.")]
    if not keys:
        fail(f"{ref} has no tokenizer.* keys")
    for key in keys:
        if key not in got:
            fail(f"{path}: {key} was not copied")
        if got[key] != want[key]:
            fail(f"{path}: {key} differs from {ref}'s")
    print(f"{path}: {len(keys)} tokenizer keys equal to {ref}'s")


def same(a, b, names=None):
    ta, tb = tensors(gguf.GGUFReader(a)), tensors(gguf.GGUFReader(b))
    pick = names.split(",") if names else sorted(ta)
    if not names and set(ta) != set(tb):
        fail(f"{a} and {b} hold different tensors: {sorted(set(ta) ^ set(tb))[:4]}")
    for name in pick:
        x, y = ta.get(name), tb.get(name)
        if x is None or y is None:
            fail(f"tensor {name} is missing from {a if x is None else b}")
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            fail(f"tensor {name}: {x.tensor_type.name} {list(x.shape)} in {a}, "
                 f"{y.tensor_type.name} {list(y.shape)} in {b}")
        if not np.array_equal(np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)):
            n = int((np.asarray(x.data).view(np.uint8) != np.asarray(y.data).view(np.uint8)).sum())
            fail(f"tensor {name} ({x.tensor_type.name}): {n} bytes differ between {a} and {b}")
    print(f"{len(pick)} tensors byte-equal")


def bytes_to_unicode():
    """GPT-2's alphabet: printable Latin-1 as itself, the other bytes from U+0100 up."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [b for b in range(256) if b not in keep]
    return {b: chr(b) if b in keep else chr(256 + extra.index(b)) for b in range(256)}


def tokenizer(out_dir, n_vocab):
    """A byte-level BPE tokenizer.json (merges in the [a, b] form, two special
    tokens and one plain added token) and its tokenizer_config.json, for a model
    of N_VOCAB ids: the ids past the tokenizer's own are left out."""
    import json
    import os
    alphabet = bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    merges = []
    text = ("the quick brown fox jumps over the lazy dog while the tokenizer of runahead "
            "quantizes every matrix into blocks and llama reads them back")
    for word in text.split():
        pieces = [alphabet[b] for b in (" " + word).encode()]
        cur = pieces[0]
        for c in pieces[1:]:
            if cur + c not in vocab:
                merges.append([cur, c])
                vocab[cur + c] = len(vocab)
            cur = cur + c
    n = len(vocab)
    added = [{"id": n, "content": "<|im_start|>", "special": True}, {"id": n + 1, "content": "<|im_end|>", "special": True},
             {"id": n + 2, "content": "<extra>", "special": False}]
    if n + 3 > int(n_vocab):
        fail(f"the tokenizer needs {n + 3} ids, the model has {n_vocab}")
    for a in added:
        a.update({"single_word": False, "lstrip": False, "rstrip": False, "normalized": False})
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": merges}}
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                   "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                                    "<|im_end|>\n{% endfor %}"}, f)
    print(f"{out_dir}: tokenizer.json with {n + 3} tokens, {len(merges)} merges")


if __name__ == "__main__":
    commands = {"logits": logits, "read": read, "vocab": vocab, "same": same, "tokenizer": tokenizer}
    words = sys.argv[1:]
    while words:  # commands separated by "+", run in one process
        n = words.index("+") if "+" in words else len(words)
        commands[words[0]](*words[1:n])
        words = words[n + 1:]
