#!/bin/sh
# Regenerates the seed inputs tests/corpus/<harness>/seed-*: the fuzzers'
# starting points (jobs/fuzz) and, replayed by CTest (tests fuzz_<harness>),
# regression inputs. Every seed is generated here, nothing is copied from the
# fixtures: tiny models from runahead-synth, the rest written by the Python
# below, each a few hundred bytes to a few KB. Inputs found by fuzzing are
# kept beside them under other names (found-*) and left alone.
#
#   tests/corpus/make-seeds.sh [BUILD_DIR]   (default: build; uses its runahead-synth)
#
# The index and config seeds describe the tiny model that tests/fuzz_util.c
# writes (fuzz_write_tiny_hf: dim 8, FFN 16, 1 layer, 2 heads, 1 KV head,
# vocabulary 8, context 32, untied): change both together.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
synth=$build/runahead-synth
[ -x "$synth" ] || { echo "make-seeds: $synth is not built (make -C $build runahead-synth)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

shape="--dim 8 --hidden-dim 16 --layers 1 --heads 2 --kv-heads 1 --vocab 8 --context 32"
"$synth" --out "$tmp/f32" $shape >/dev/null
"$synth" --out "$tmp/bf16" $shape --dtype bf16 --tied >/dev/null
for h in llama2c safetensors config tokenizer partition table; do
    mkdir -p "$here/$h"
    rm -f "$here/$h"/seed-*
done

python3 - "$here" "$tmp" <<'PY'
import json, os, struct, sys

corpus, tmp = sys.argv[1], sys.argv[2]

def put(harness, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(corpus, harness, "seed-" + name), "wb") as f:
        f.write(data)

def floats(n, scale=0.01):
    return struct.pack("<%df" % n, *[(i % 17 - 8) * scale for i in range(n)])

# ---------------------------------------------------------------- llama2.c checkpoints
def llama2c(dim=8, hidden=16, layers=1, heads=2, kv_heads=1, vocab=8, seq=4, shared=True, version=0):
    hd, kv = dim // heads, (dim // heads) * kv_heads
    norms = floats(layers * dim) * 2 + floats(dim)
    attn = floats(layers * dim * dim) + floats(layers * kv * dim) * 2 + floats(layers * dim * dim)
    ffn = floats(layers * hidden * dim) * 3
    embed, out = floats(vocab * dim), (b"" if shared else floats(vocab * dim))
    params = [dim, hidden, layers, heads, kv_heads, vocab, seq]
    if version == 0:
        params[5] = vocab if shared else -vocab
        layer_norms = floats(layers * dim)
        body = embed + layer_norms + attn + layer_norms + ffn + floats(dim) + floats(seq * hd)
        return struct.pack("<7i", *params) + body + out
    header = struct.pack("<Ii7iB", 0x616b3432, version, *params, 1 if shared else 0).ljust(256, b"\0")
    return header + norms + embed + attn + ffn + out

put("llama2c", "v0-shared", llama2c())
put("llama2c", "v0-classifier", llama2c(shared=False))
put("llama2c", "v0-mha-2layers", llama2c(layers=2, kv_heads=2))
put("llama2c", "v1-shared", llama2c(version=1))
put("llama2c", "v1-classifier", llama2c(version=1, shared=False, layers=2))
put("llama2c", "v2-int8", llama2c(version=2)[:256])
put("llama2c", "v0-truncated", llama2c()[:300])
put("llama2c", "v0-header-only", llama2c()[:28])
put("llama2c", "v0-trailing-bytes", llama2c() + b"\0" * 12)
put("llama2c", "v0-odd-head-dim", struct.pack("<7i", 6, 16, 1, 2, 1, 8, 4) + floats(600))

# ---------------------------------------------------------------- safetensors (mode byte 0) and index (1)
def safetensors(entries, data=b"", meta=None, pad=True):
    h = {} if meta is None else {"__metadata__": meta}
    h.update(entries)
    text = json.dumps(h, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data

def st(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}

for dt in ("f32", "bf16"):
    with open(os.path.join(tmp, dt, "model.safetensors"), "rb") as f:
        put("safetensors", "synth-" + dt, b"\0" + f.read())
put("safetensors", "empty-header", b"\0" + safetensors({}))
put("safetensors", "meta-only", b"\0" + safetensors({}, meta={"format": "pt", "note": "x"}))
put("safetensors", "one-f16", b"\0" + safetensors({"a": st("F16", [2, 3], 0, 12)}, bytes(12)))
put("safetensors", "scalar-and-empty", b"\0" + safetensors({"s": st("F32", [], 0, 4), "e": st("BF16", [0, 5], 4, 4)}, bytes(4)))
put("safetensors", "gap-unpadded", b"\0" + safetensors({"a": st("F32", [2], 8, 16), "b": st("F32", [1], 0, 4)}, bytes(16), pad=False))
put("safetensors", "overlap", b"\0" + safetensors({"a": st("F32", [2], 0, 8), "b": st("F32", [2], 4, 12)}, bytes(12)))
put("safetensors", "past-end", b"\0" + safetensors({"a": st("F32", [4], 0, 16)}, bytes(8)))
put("safetensors", "bad-dtype", b"\0" + safetensors({"a": st("I8", [4], 0, 4)}, bytes(4)))
put("safetensors", "eight-dims", b"\0" + safetensors({"a": st("F32", [1] * 8, 0, 4)}, bytes(4)))
put("safetensors", "length-lies", b"\0" + struct.pack("<Q", 1 << 40) + b"{}")

tiny = [("model.embed_tokens.weight", 0)] + [
    ("model.layers.0." + n + ".weight", 0) for n in
    ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")] + [
    ("model.layers.0." + n + ".weight", 1) for n in
    ("post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")] + [
    ("model.norm.weight", 1), ("lm_head.weight", 1)]
shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
def index(weight_map, meta=True):
    doc = {"metadata": {"total_size": 2968}} if meta else {}
    doc["weight_map"] = weight_map
    return b"\1" + json.dumps(doc, indent=1).encode()
good = {name: shards[s] for name, s in tiny}
put("safetensors", "index", index(good))
put("safetensors", "index-no-lm-head", index({k: v for k, v in good.items() if k != "lm_head.weight"}, meta=False))
put("safetensors", "index-wrong-shard", index(dict(good, **{"model.norm.weight": shards[0]})))
put("safetensors", "index-missing-shard", index(dict(good, **{"lm_head.weight": "model-00003-of-00003.safetensors"})))
put("safetensors", "index-path", index(dict(good, **{"lm_head.weight": "../model.safetensors"})))
put("safetensors", "index-not-string", index(dict(good, **{"lm_head.weight": 2})))
put("safetensors", "index-empty", b"\1" + b'{"weight_map": {}}')
put("safetensors", "index-not-object", b"\1" + b'["weight_map"]')

# ---------------------------------------------------------------- config.json
with open(os.path.join(tmp, "f32", "config.json")) as f:
    cfg = json.load(f)
def config(name, **changes):
    c = dict(cfg)
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    put("config", name, json.dumps(c, indent=1))
config("synth")
config("minimal", **{k: None for k in ("head_dim", "rope_theta", "rms_norm_eps", "tie_word_embeddings", "torch_dtype",
                                       "bos_token_id", "eos_token_id", "initializer_range", "attention_bias",
                                       "attention_dropout", "mlp_bias", "pretraining_tp", "rope_scaling", "use_cache",
                                       "hidden_act", "model_type")})
config("tied", tie_word_embeddings=True)
config("mha", num_key_value_heads=2)
config("no-kv-heads", num_key_value_heads=None)
config("head-dim-wrong", head_dim=8)
config("rope-scaling", rope_scaling={"type": "linear", "factor": 2.0})
config("mistral", model_type="mistral", architectures=["MistralForCausalLM"])
config("gelu", hidden_act="gelu")
config("bias", attention_bias=True)
config("huge", hidden_size=2 ** 31, max_position_embeddings=2 ** 40)
config("negative", num_hidden_layers=-1)
config("float-size", hidden_size=8.0)
config("string-theta", rope_theta="10000")
config("zero-eps", rms_norm_eps=0)
put("config", "not-object", "[1, 2, 3]")
put("config", "truncated", json.dumps(cfg)[:60])

# ---------------------------------------------------------------- tokenizer (mode byte 0: file, 1: text)
def tokenizer(pieces, max_len=None):
    max_len = max(len(p) for p, _ in pieces) if max_len is None else max_len
    out = struct.pack("<i", max_len)
    for p, score in pieces:
        out += struct.pack("<fi", score, len(p)) + p
    return out
base = [(b"<unk>", 0.0), (b"<s>", 0.0), (b"</s>", 0.0)] + [(b"<0x%02X>" % b, 0.0) for b in range(256)]
merges = [(p.encode(), -float(i)) for i, p in enumerate([" ", "e", "t", "h", "th", " t", "he", " the", "\u00e9", "\u2581"])]
put("tokenizer", "file-bytes-merges", b"\0" + tokenizer(base + merges))
put("tokenizer", "file-small", b"\0" + tokenizer([(b"<unk>", 0.0), (b"<s>", 0.0), (b"</s>", 0.0), (b" a", -1.0), (b"a", -2.0), (b" ", -3.0)]))
put("tokenizer", "file-no-bytes", b"\0" + tokenizer([(b"<unk>", 0.0), (b"<s>", 0.0), (b"</s>", 0.0), (b"ab", 1.0), (b"a\0b", 2.0)]))
put("tokenizer", "file-nan-score", b"\0" + tokenizer([(b"<unk>", float("nan"))]))
put("tokenizer", "file-too-long", b"\0" + tokenizer([(b"<unk>", 0.0), (b"abcdef", 0.0)], max_len=3))
put("tokenizer", "file-truncated", b"\0" + tokenizer(base[:5])[:-3])
put("tokenizer", "file-zero-max", b"\0" + struct.pack("<i", 0))
for i, text in enumerate([
        "Once upon a time, there was a little girl named Lily.",
        "  leading spaces,\ttabs\nand newlines\r\n  ",
        "Grüße, 你好, こんにちは, Привет, مرحبا, שלום, नमस्ते, 안녕하세요, Γειά σου",
        "👩‍👩‍👧‍👦 👍🏽 🏳️‍🌈 emoji with ZWJ and skin tones",
        "\u2581space\u2581symbol\u2581 and <s> </s> <unk> <0x41> as text",
        "1234567890 !@#$%^&*()_+-=[]{}|;':\",./<>?`~",
        "x" * 300,
        ""]):
    put("tokenizer", "text-%d" % i, b"\1" + text.encode())
put("tokenizer", "text-invalid-utf8", b"\1" + b"ok \xff\xfe \xc3( \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end")

# ---------------------------------------------------------------- partition specs: P, prompt length, short buffer, spec
def spec(p, n, text, short=7):
    return struct.pack("<biB", p, n, short) + text.encode()
for name, args in {
        "even": (4, 3000, "even"), "even-one-rank": (1, 1, "even"), "even-p-equals-n": (7, 7, "even"),
        "ratios": (4, 3000, "ratios:0.35,0.25,0.21,0.19"), "ratios-one": (1, 10, "ratios:1"),
        "ratios-tiny-slice": (3, 100, "ratios:0.998,0.001,0.001"), "ratios-sum": (2, 100, "ratios:0.5,0.6"),
        "ratios-nan": (2, 100, "ratios:nan,0.5"), "ratios-hex": (2, 64, "ratios:0x1p-1,0x1p-1"),
        "ratios-trailing-comma": (2, 64, "ratios:0.5,0.5,"), "ratios-too-many": (2, 64, "ratios:0.25,0.25,0.5"),
        "bounds": (4, 3000, "bounds:0,900,1700,2400,3000"), "bounds-empty-slice": (3, 312, "bounds:0,100,100,312"),
        "bounds-fraction": (2, 10, "bounds:0,4.5,10"), "bounds-huge": (2, 2147483647, "bounds:0,1e9,2147483647"),
        "bounds-negative": (2, 10, "bounds:0,-1,10"), "bounds-exponent": (2, 100, "bounds:0,5e1,1e2"),
        "fewer-tokens-than-ranks": (8, 3, "even"), "zero-ranks": (0, 10, "even"), "negative-ranks": (-3, 10, "even"),
        "negative-tokens": (2, -5, "even"), "unknown": (2, 10, "table:t.h5"), "max-ranks": (127, 100000, "even")}.items():
    put("partition", name, spec(*args))
# The grammar's table: and auto: (their FILE is one of fuzz_partition.c's fixtures); the short-buffer
# byte's bit 5 makes the run's key cuda/bf16/bf16, bit 6 sets RA_PROFILE to the fixture table.
for name, args in {
        "auto": (4, 3000, "auto"), "auto-env-profile": (4, 3000, "auto", 7 | 64), "auto-file": (4, 3000, "auto:t.h5"),
        "auto-missing": (2, 100, "auto:none.h5"), "auto-text": (2, 100, "auto:text.h5"), "auto-empty": (2, 100, "auto:"),
        "auto-one-rank": (1, 50, "auto:t.h5"), "table": (4, 100, "table:t.h5"), "table-extrapolated": (3, 1000, "table:t.h5"),
        "table-cuda-key": (4, 100, "table:cuda.h5", 7 | 32), "table-key-mismatch": (4, 100, "table:cuda.h5"),
        "table-cpu-on-cuda": (2, 100, "table:t.h5", 7 | 32), "table-other-model": (2, 100, "table:other.h5"),
        "table-cut": (2, 100, "table:cut.h5"), "table-text": (2, 100, "table:text.h5"),
        "table-missing": (2, 100, "table:none.h5"), "table-slash": (2, 100, "table:../t.h5"),
        "table-p9": (9, 100, "table:t.h5"), "table-empty": (2, 100, "table:"), "ratios-empty": (2, 100, "ratios:"),
        "table-fewer-tokens": (4, 3, "table:t.h5")}.items():
    put("partition", name, spec(*args))

# ---------------------------------------------------------------- table recipes (see tests/fuzz_table.c)
def entry(slices, ttfts=(16, 32, 255)):
    return bytes(s - 1 for s in slices) + bytes(ttfts)
# Each dataset's bytes are its mode byte and what that mode reads (see put_table_dataset);
# the attributes': objective, min_stride, repeats, date, runahead_version.
def table_group(kind, p_byte, entries, ds=None, attrs=b"\0\0\0\0\0\0\0\0"):
    ds = ds or {}
    return (bytes([kind, p_byte, len(entries)]) + b"".join(entries)
            + b"".join(ds.get(k, b"\0") for k in range(6)) + attrs)
def profile_attr(name, value, kind):
    return bytes([len(name)]) + name + struct.pack("<d", value) + bytes([kind])
valid_p2 = table_group(0x00, 1, [entry([50, 50]), entry([100, 150]), entry([200, 256])])
valid_p4 = table_group(0x00, 3, [entry([10, 20, 30, 40]), entry([100, 100, 100, 100], (1, 2, 3))])
valid_p1 = table_group(0x00, 0, [entry([5]), entry([17])])
profile = bytes([0x40, 0, 2]) + profile_attr(b"gemm_gflops", 100.0, 0) + profile_attr(b"link_gbps", 0.5, 0)
mixed_profile = bytes([0x40, 0, 3]) + profile_attr(b"rate", 1.0, 0) + profile_attr(b"alpha", 0.5, 1) + profile_attr(b"xyz", 2.0, 3)
def flags(schema, earliest=False, list_len=1):
    return schema | (4 if earliest else 0) | (min((list_len - 1) // 4, 31) << 3)
one = lambda group, **f: bytes([flags(1, **f), 1]) + group
put("table", "valid-p2", one(valid_p2, list_len=200))
put("table", "valid-three-groups-earliest", bytes([flags(1, True, 40), 3]) + valid_p4 + valid_p1 + profile)
put("table", "profile-mixed", one(mixed_profile))
put("table", "profile-too-many", one(bytes([0x40, 0, 6])))
put("table", "no-schema", bytes([flags(0), 1]) + valid_p2)
put("table", "schema-double", bytes([flags(3), 1]) + valid_p2)
put("table", "schema-fuzzed", bytes([flags(2)]) + struct.pack("<i", 7) + bytes([1]) + valid_p2)
put("table", "unsorted-contexts", one(table_group(0x00, 1, [entry([100, 150]), entry([50, 50])])))
put("table", "missing-ratios", one(table_group(0x00, 1, [entry([50, 50])], {2: b"\4"})))
put("table", "other-class", one(table_group(0x00, 1, [entry([50, 50])], {0: b"\5" + struct.pack("<d", 100)})))
put("table", "other-shape", one(table_group(0x00, 1, [entry([50, 50])], {1: b"\6\1\1" + struct.pack("<4i", 0, 50, 100, 100)})))
put("table", "other-rank", one(table_group(0x00, 1, [entry([50, 50])], {3: b"\6\0" + struct.pack("<d", 1.5)})))
put("table", "fuzzed-ratios", one(table_group(0x00, 1, [entry([50, 50])], {2: b"\7" + struct.pack("<2d", 0.75, 0.25)})))
put("table", "no-entries", one(table_group(0x00, 1, [])))
put("table", "bad-attrs", one(table_group(0x00, 1, [entry([50, 50])],
    attrs=b"\5\4spin\1" + b"\4" + struct.pack("<d", 2.5) + b"\5\1" + struct.pack("<2i", 0, 3) + b"\3" + b"\0\1")))
put("table", "name-mismatch", one(table_group(0x30, 20, [entry([10] * 8)])))
put("table", "fuzzed-names", one(bytes([0x5a, 3]) + b"m.x" + b"\2hw" + b"\0" + b"\4p002" + bytes(1 + 6 + 8)))
put("table", "soft-link-and-stray", bytes([flags(1), 3]) + valid_p2 + bytes([0x60, 0, 3]) + b"a/b" + b"\0" + bytes([0x70, 0]))
put("table", "slash-in-names", one(table_group(0x0f, 1, [entry([50, 50])])))
PY

# ---------------------------------------------------------------- GGUF (tests/fuzz_gguf.c: the input is the file)
mkdir -p "$here/gguf"
rm -f "$here/gguf"/seed-*
python3 - "$here" <<'PY'
import os, struct, sys

out = os.path.join(sys.argv[1], "gguf")
def put(name, data):
    with open(os.path.join(out, "seed-" + name), "wb") as f:
        f.write(data)

VT = dict(u8=0, i8=1, u16=2, i16=3, u32=4, i32=5, f32=6, bool=7, str=8, arr=9, u64=10, i64=11, f64=12)
FMT = dict(u8="B", i8="b", u16="H", i16="h", u32="I", i32="i", f32="f", bool="B", u64="Q", i64="q", f64="d")
def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b
def vtype(t):  # "u32", or ("arr", element type) for arrays
    return VT[t] if isinstance(t, str) else VT["arr"]
def value(t, v):
    if isinstance(t, tuple):
        return struct.pack("<IQ", vtype(t[1]), len(v)) + b"".join(value(t[1], x) for x in v)
    return gstr(v) if t == "str" else struct.pack("<" + FMT[t], v)
def kv(key, t, v):
    return gstr(key) + struct.pack("<I", vtype(t)) + value(t, v)

# Tensor data: valid f16 scales, then deterministic quants.
def quants(n, k):
    return bytes((i * 37 + k) % 256 for i in range(n))
def blocks(ggml_type, n_blocks):
    head = {2: lambda i: struct.pack("<e", 0.25 * (i + 1)), 3: lambda i: struct.pack("<ee", 0.125, -1.0 - i),
            8: lambda i: struct.pack("<e", 0.5 / (i + 1))}[ggml_type]
    size = 32 if ggml_type == 8 else 16
    return b"".join(head(i) + quants(size, i) for i in range(n_blocks))
def plain(ggml_type, n):
    vals = [(i % 11 - 5) * 0.375 for i in range(n)]
    if ggml_type == 0:
        return struct.pack("<%df" % n, *vals)
    if ggml_type == 1:
        return struct.pack("<%de" % n, *vals)
    return b"".join(struct.pack("<f", v)[2:] for v in vals)  # bf16: the top half of the f32
def data(ggml_type, n):
    return blocks(ggml_type, n // 32) if ggml_type in (2, 3, 8) else plain(ggml_type, n)

def gguf(kvs, tensors, version=3, align=32, offsets=None, n_kvs=None, n_tensors=None):
    """tensors: (name, dims, ggml type, data); offsets: override the computed ones."""
    infos, blob, pos = b"", b"", []
    for name, dims, t, d in tensors:
        blob += b"\0" * (-len(blob) % align)
        pos.append(len(blob))
        blob += d
    for i, (name, dims, t, d) in enumerate(tensors):
        off = offsets[i] if offsets else pos[i]
        infos += gstr(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims) + struct.pack("<IQ", t, off)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kvs is None else n_kvs)
    meta = head + b"".join(kvs) + infos
    return meta + b"\0" * (-len(meta) % align) + blob

every_type = [
    kv("general.architecture", "str", "llama"), kv("u8", "u8", 200), kv("i8", "i8", -5), kv("u16", "u16", 60000),
    kv("i16", "i16", -300), kv("u32", "u32", 4000000000), kv("i32", "i32", -7), kv("f32", "f32", 1.5),
    kv("bool", "bool", 1), kv("str", "str", "h\u00e9llo\0x"), kv("u64", "u64", 2 ** 63 + 5), kv("i64", "i64", -2 ** 40),
    kv("f64", "f64", 0.1), kv("arr.i32", ("arr", "i32"), [1, -2, 3]), kv("arr.f32", ("arr", "f32"), [-0.25, 8.0]),
    kv("arr.str", ("arr", "str"), ["a", "", "<0x0A>"]), kv("arr.bool", ("arr", "bool"), [0, 1]),
    kv("arr.empty", ("arr", "u64"), []), kv("arr.nested", ("arr", ("arr", "i16")), [[1, 2], [], [3]]),
    kv("arr.nested_str", ("arr", ("arr", "str")), [["x"], ["y", "z"]])]
types = [("t.f32", [4, 2], 0), ("t.f16", [8], 1), ("t.bf16", [2, 2, 2], 30), ("t.q8_0", [32, 2], 8),
         ("t.q4_0", [64], 2), ("t.q4_1", [32, 1, 2], 3)]
def tensors(spec):
    out = []
    for name, dims, t in spec:
        n = 1
        for d in dims:
            n *= d
        out.append((name, dims, t, data(t, n)))
    return out
every_tensor = tensors(types)

put("v3-every-type", gguf(every_type, every_tensor))
put("v2-every-type", gguf(every_type, every_tensor, version=2))
put("v3-align-64", gguf(every_type[:3] + [kv("general.alignment", "u32", 64)], every_tensor[3:], align=64))
put("v2-align-1", gguf([kv("general.alignment", "u32", 1)], every_tensor[:3], version=2, align=1))
kquant = lambda t, k: struct.pack("<ee", 0.5, 0.25) + quants(140, k) if t == 12 else quants(208, k) + struct.pack("<e", 0.125)
put("v3-k-quants", gguf(every_type[:1], [("q4_k", [256], 12, kquant(12, 0)), ("q6_k", [256, 2], 14, kquant(14, 1) + kquant(14, 2))]))
put("header-only", gguf([], []))
put("empty-tensor", gguf([], [("e", [0, 7], 3, b""), ("f", [4], 0, data(0, 4))]))
put("scalar-tensor", gguf([], [("s", [], 0, data(0, 1))]))
put("llama-like", gguf([
    kv("general.architecture", "str", "llama"), kv("llama.context_length", "u32", 32),
    kv("llama.embedding_length", "u32", 32), kv("llama.block_count", "u32", 1),
    kv("llama.attention.head_count", "u32", 2), kv("llama.attention.head_count_kv", "u32", 1),
    kv("llama.rope.freq_base", "f32", 10000.0), kv("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5),
    kv("tokenizer.ggml.model", "str", "gpt2"), kv("tokenizer.ggml.tokens", ("arr", "str"), ["a", "b", "ab", "<s>"]),
    kv("tokenizer.ggml.scores", ("arr", "f32"), [0.0, -1.0, -2.0, 0.0]),
    kv("tokenizer.ggml.token_type", ("arr", "i32"), [1, 1, 1, 3]),
    kv("tokenizer.ggml.merges", ("arr", "str"), ["a b"]), kv("tokenizer.ggml.bos_token_id", "u32", 3)],
    tensors([("token_embd.weight", [32, 4], 8), ("blk.0.attn_norm.weight", [32], 0),
             ("blk.0.attn_q.weight", [32, 32], 3), ("output_norm.weight", [32], 0)])))
# refusals
good = gguf(every_type[:4], every_tensor[:4])
put("v1", b"GGUF" + struct.pack("<III", 1, 0, 0))
put("big-endian", b"GGUF" + struct.pack(">IQQ", 3, 0, 1) + struct.pack(">Q", 1) + b"k" + struct.pack(">II", 4, 7))
put("truncated-meta", good[:70])
put("truncated-string", gguf(every_type[:1], [])[:66])  # inside "llama"
put("truncated-data", good[:-5])
put("bad-alignment", gguf([kv("general.alignment", "u32", 48)], every_tensor[:1]))
put("alignment-u64", gguf([kv("general.alignment", "u64", 32)], []))
put("overlap", gguf([], every_tensor[:2], offsets=[0, 0]))
put("misaligned", gguf([], every_tensor[:2], offsets=[0, 8]))
put("past-end", gguf([], every_tensor[:1], offsets=[4096]))
put("unknown-type", gguf([], [("w", [4], 99, bytes(16))]))
put("rows-not-blocks", gguf([], [("w", [16], 2, bytes(18))]))
put("five-dims", gguf([], [("w", [1, 1, 1, 1, 4], 0, bytes(16))]))
put("huge-kv-count", gguf([], [], n_kvs=2 ** 63))
put("huge-tensor-count", gguf(every_type[:1], [], n_tensors=2 ** 64 - 1))
put("huge-string", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("s") + struct.pack("<IQ", 8, 2 ** 64 - 1) + b"x" * 16)
put("huge-array", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("a") + struct.pack("<IIQ", 9, 5, 2 ** 62) + b"x" * 16)
put("duplicate-key", gguf([kv("k", "u8", 1), kv("k", "u8", 2)], []))
put("duplicate-tensor", gguf([], [("w", [4], 0, bytes(16)), ("w", [4], 0, bytes(16))]))
put("bool-2", gguf([gstr("b") + struct.pack("<IB", VT["bool"], 2)], []))
deep = ("arr", "u8")
for _ in range(20):
    deep = ("arr", deep)
put("nested-too-deep", gguf([kv("deep", deep, [[[[[[[[[[[[[[[[[[[[[7]]]]]]]]]]]]]]]]]]]]])], []))
PY
rm -f "$here"/tokenizer_json/seed-*
python3 - "$here" <<'PY'
# tokenizer_json: small Hugging Face tokenizer.json files (compact, < 4 KiB) for the byte-level BPE.
import json, os, sys
out = os.path.join(sys.argv[1], "tokenizer_json")
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
def sym(b):
    n = 0
    for c in range(256):
        pr = 0x21 <= c <= 0x7e or 0xa1 <= c <= 0xac or 0xae <= c <= 0xff
        if c == b:
            return chr(c) if pr else chr(0x100 + n)
        n += not pr
def vocab(full):
    chars = [sym(b) for b in range(256)] if full else [sym(b) for b in b" \n\tabcdehilorswxy!12.'<>|_"]
    v = {c: i for i, c in enumerate(chars)}
    for t in ["he", "ll", "hell", "hello", "\u0120w", "or", "\u0120wor", "ld", "\u0120world", "\u010a\u010a", "'s"]:
        v[t] = len(v)
    return v
MERGES = ["h e", "l l", "he ll", "hell o", "\u0120 w", "o r", "\u0120w or", "l d", "\u0120wor ld", "\u010a \u010a", "' s"]
def byte_level(regex=True):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": regex}
def split(rx):
    return {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}
def added(v, content, special=True, **kw):
    i = v.setdefault(content, len(v)) if kw.pop("in_vocab", False) else len(v) + 100
    d = {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": special}
    d.update(kw)
    return d
def full_added(a):
    d = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    d.update(a)
    return d
def tok(pre, full=False, pairs=False, post=None, norm=None, added_tokens=(), model=None):
    v = vocab(full)
    added_tokens = [full_added(a) for a in added_tokens]
    for a in added_tokens:  # ids right after the vocabulary, as real files have them
        a["id"] = v[a["content"]] if a["content"] in v else len(v) + sum(1 for b in added_tokens[:added_tokens.index(a)] if b["content"] not in v)
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": v, "merges": [m.split(" ") for m in MERGES] if pairs else MERGES}
    m.update(model or {})
    if post:  # the template's ids from the added tokens
        for proc in [post] + post.get("processors", []):
            for n, st in proc.get("special_tokens", {}).items():
                st["ids"] = [next(a["id"] for a in added_tokens if a["content"] == n)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added_tokens),
            "normalizer": norm, "pre_tokenizer": pre, "post_processor": post, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": m}
def template(single, specials):
    return {"type": "TemplateProcessing", "single": single, "pair": single + [{"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {n: {"id": n, "ids": [i], "tokens": [n]} for n, i in specials}}
S = lambda n: {"SpecialToken": {"id": n, "type_id": 0}}
A = {"Sequence": {"id": "A", "type_id": 0}}
seeds = {
    "gpt2-full-alphabet": tok(byte_level(), full=True),
    "gpt2-pairs": tok(byte_level(), pairs=True, added_tokens=[{"id": 200, "content": "<|endoftext|>", "special": True}]),
    "smollm": tok({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level()]},
                  pairs=True, added_tokens=[{"id": 100, "content": "<|im_start|>", "special": True},
                                            {"id": 101, "content": "<|im_end|>", "special": True}]),
    "llama-bpe-template": tok({"type": "Sequence", "pretokenizers": [split(LLAMA3), byte_level(False)]},
                              model={"ignore_merges": True},
                              added_tokens=[{"id": 100, "content": "<|begin_of_text|>", "special": True}],
                              post=template([S("<|begin_of_text|>"), A], [("<|begin_of_text|>", 100)])),
    "qwen2-nfc-eos": tok({"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(False)]}, norm={"type": "NFC"},
                         added_tokens=[{"id": 100, "content": "<|im_end|>", "special": True}],
                         post={"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
                               template([A, S("<|im_end|>")], [("<|im_end|>", 100)])]}),
    "added-strip-unk": tok(byte_level(), model={"unk_token": "a", "fuse_unk": True},
                           added_tokens=[{"id": 100, "content": "<mask>", "lstrip": True, "rstrip": True, "special": True},
                                         {"id": 101, "content": "wor", "special": False}]),
    "no-merges": tok(byte_level(), model={"merges": []}),
    "unknown-pre": tok({"type": "Whitespace"}),
    "merge-unknown-token": tok(byte_level(), model={"merges": ["h e", "q z"]}),
}
os.makedirs(out, exist_ok=True)
for name, d in seeds.items():
    text = json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert len(text) < 4096, (name, len(text))
    open(os.path.join(out, "seed-" + name), "wb").write(text)
PY
# ---------------------------------------------------------------- chunk files (tests/fuzz_chunk.c: the input is the file)
mkdir -p "$here/chunk"
rm -f "$here/chunk"/seed-*
python3 - "$here" <<'PY'
import hashlib, os, struct, sys

out = os.path.join(sys.argv[1], "chunk")
def put(name, data):
    with open(os.path.join(out, "seed-" + name), "wb") as f:
        f.write(data)

def align(x):
    return (x + 4095) // 4096 * 4096

# src/reuse/store_impl.h: the fixed header, ids, a SHA-256 per layer, 4 KiB aligned layers of K then V.
def chunk(layers=1, kv_dim=4, dtype=0, prefix=(1,), tokens=(5, 6), version=1, fix=None, damage=None):
    size = 4 if dtype == 0 else 2
    layer_bytes = 2 * kv_dim * size * len(tokens)
    stride = align(layer_bytes)
    head = 192 + 4 * (len(prefix) + len(tokens)) + 32 * layers
    data_off = align(head)
    file_bytes = data_off + stride * layers
    f = dict(data=data_off, stride=stride, layer=layer_bytes, file=file_bytes, layers=layers, tokens=len(tokens))
    f.update(fix or {})
    rows = [bytes((l * 7 + i) % 251 for i in range(layer_bytes)) for l in range(layers)]
    sums = b"".join(hashlib.sha256(r).digest() for r in rows)
    h = b"RACHUNK\0" + struct.pack("<6I", version, dtype, f["layers"], kv_dim, len(prefix), f["tokens"])
    h += bytes(range(32)) + b"\1" * 32 + bytes(32) + b"\2" * 32
    h += struct.pack("<4Q", f["data"], f["stride"], f["layer"], f["file"])
    h += struct.pack("<%di" % (len(prefix) + len(tokens)), *prefix, *tokens) + sums
    body = bytearray(h.ljust(data_off, b"\0") + b"".join(r.ljust(stride, b"\0") for r in rows))
    if damage is not None:
        body[damage] ^= 0x40
    return bytes(body)

put("f32", chunk())
put("bf16-3-layers", chunk(layers=3, kv_dim=8, dtype=2, prefix=(1, 2, 3), tokens=tuple(range(10, 40))))
put("no-prefix", chunk(prefix=()))
put("layer-checksum", chunk(layers=2, damage=4096 + 4096 + 3))
put("truncated", chunk()[:5000])
put("sizes-lie", chunk(fix=dict(stride=8192)))
put("tokens-lie", chunk(fix=dict(tokens=3)))
put("version-2", chunk(version=2))
put("dtype-f16", chunk(dtype=1))
put("huge-counts", chunk(fix=dict(layers=0xffffffff, tokens=0x7fffffff)))
put("header-only", chunk()[:192])
PY

# ---------------------------------------------------------------- craft records (tests/fuzz_craft_record.c: the input is the file)
mkdir -p "$here/craft_record"
rm -f "$here/craft_record"/seed-*
python3 - "$here" <<'PY'
import hashlib, os, struct, sys

out = os.path.join(sys.argv[1], "craft_record")
def put(name, data):
    with open(os.path.join(out, "seed-" + name), "wb") as f:
        f.write(data)

# src/reuse/craft.h: magic, version, groups, tokens, lead, context, keys, base, keys, masses, token masses, SHA-256.
def record(groups=2, tokens=3, keys=1, version=1, fix=None, mass=0.25, damage=None):
    f = dict(groups=groups, tokens=tokens, keys=keys)
    f.update(fix or {})
    b = b"RACRAFT\0" + struct.pack("<6I", version, f["groups"], f["tokens"], 2, 5, f["keys"])
    b += b"\3" * 32 + b"\4" * 32 * keys
    b += struct.pack("<%df" % (3 * groups), *([0.1] * groups + [0.3] * groups + [0.6] * groups))
    b += struct.pack("<%df" % (groups * tokens), *([mass] * (groups * tokens)))
    b = bytearray(b + hashlib.sha256(b).digest())
    if damage is not None:
        b[damage] ^= 0x10
    return bytes(b)

put("ok", record())
put("no-keys", record(keys=0, groups=4, tokens=9))
put("checksum", record(damage=70))
put("truncated", record()[:50])
put("version-2", record(version=2))
put("sizes-lie", record(fix=dict(tokens=4)))
put("huge-counts", record(fix=dict(groups=0xffffffff, tokens=0x7fffffff, keys=0xffffffff)))
put("mass-nan", record(mass=float("nan")))
put("mass-big", record(mass=7.0))
PY

echo "make-seeds: wrote $(ls "$here"/*/seed-* | wc -l) seeds, $(cat "$here"/*/seed-* | wc -c) bytes"
