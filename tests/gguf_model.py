#!/usr/bin/env python3
"""tests/gguf_model.sh's helpers, on llama.cpp's gguf-py:

  gguf_model.py GGUF PIECE...          the ids of vocabulary pieces (byte-level strings,
                                       "Ġ" for a space) in the file's tokenizer.ggml.tokens
  gguf_model.py --bad GGUF DIR         writes DIR/NAME.gguf, each GGUF with one lie patched into
                                       its bytes (NAME: what the lie is; see BAD below). GGUF must
                                       be a llama model with blk.0.ffn_down.weight rows of 256
                                       elements (whole blocks of every K and IQ type), F32
  gguf_model.py --odd GGUF OUT         OUT: GGUF rewritten by gguf-py with general.alignment 1
                                       and its data section at an odd offset (every tensor
                                       misaligned in memory; a valid file)
Exits 77 where gguf cannot be imported."""
import struct
import sys

try:
    import gguf
except ImportError:
    sys.exit(77)

DOWN = "blk.0.ffn_down.weight"


def vocab_ids(path, pieces):
    f = gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"]
    vocab = {bytes(f.parts[i]).decode("utf-8"): n for n, i in enumerate(f.data)}
    print(" ".join(str(vocab[p]) for p in pieces))


def bad_files(path, out):
    r = gguf.GGUFReader(path)
    base = open(path, "rb").read()
    tensors = {t.name: t for t in r.tensors}

    def value_at(key):  # a metadata value: after the key's length, the key and the value type
        return r.fields[key].offset + 8 + len(key.encode()) + 4

    def info_at(name, field):  # a tensor info's type (u32) or offset (u64): after name and dims
        t = tensors[name]
        at = t.field.offset + 8 + len(name.encode()) + 4 + 8 * len(t.shape)
        return at if field == "type" else at + 4

    def write(name, data):
        with open(f"{out}/{name}.gguf", "wb") as f:
            f.write(data)

    def patch(name, at, fmt, value):
        b = bytearray(base)
        struct.pack_into(fmt, b, at, value)
        write(name, b)

    assert tensors[DOWN].tensor_type == gguf.GGMLQuantizationType.F32 and tensors[DOWN].shape[0] % 256 == 0
    BAD = {  # name: (where, format, value)
        "q5k": (info_at(DOWN, "type"), "<I", 13),      # Q5_K: known to ggml, not converted here
        "iq2": (info_at(DOWN, "type"), "<I", 16),      # IQ2_XXS, the same
        "type99": (info_at(DOWN, "type"), "<I", 99),   # no ggml type
        "offset": (info_at(r.tensors[-1].name, "offset"), "<Q", 1 << 40),  # aligned, far past the end
        "misaligned": (info_at(DOWN, "offset"), "<Q", int(tensors[DOWN].data_offset - r.data_offset) + 4),
        "strlen": (value_at("general.name"), "<Q", 2 ** 64 - 1),
        "arrlen": (value_at("tokenizer.ggml.tokens") + 4, "<Q", 2 ** 64 - 1),  # after the element type
        "arrlen63": (value_at("tokenizer.ggml.tokens") + 4, "<Q", 2 ** 63 + 1),
    }
    for name, (at, fmt, value) in BAD.items():
        patch(name, at, fmt, value)
    write("datacut", base[:-1000])  # the last tensor cut short
    b = bytearray(base)  # blk.0.attn_k.weight renamed blk.0.attn_q.weight (same length): a duplicate
    k = tensors["blk.0.attn_k.weight"].field.offset + 8
    assert b[k:k + 19] == b"blk.0.attn_k.weight"
    b[k:k + 19] = b"blk.0.attn_q.weight"
    write("dup", b)


def odd_file(path, out):
    r = gguf.GGUFReader(path)

    def rewrite(pad):
        w = gguf.GGUFWriter(out, r.fields["general.architecture"].contents())
        w.add_custom_alignment(1)
        for key, f in r.fields.items():
            if not key.startswith("GGUF.") and key not in ("general.architecture", "general.alignment"):
                w.add_key_value(key, f.contents(), f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
        if pad:
            w.add_uint8("t.pd", 0)  # 17 bytes of metadata: the data section moves to an odd offset
        for t in r.tensors:
            w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return gguf.GGUFReader(out).data_offset

    if rewrite(False) % 2 == 0 and rewrite(True) % 2 == 0:
        sys.exit(f"{out}: the data section is still at an even offset")


if __name__ == "__main__":
    if sys.argv[1] == "--bad":
        bad_files(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--odd":
        odd_file(sys.argv[2], sys.argv[3])
    else:
        vocab_ids(sys.argv[1], sys.argv[2:])
