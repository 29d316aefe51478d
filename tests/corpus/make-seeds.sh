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
echo "make-seeds: wrote $(ls "$here"/*/seed-* | wc -l) seeds, $(cat "$here"/*/seed-* | wc -c) bytes"
