#!/usr/bin/env python3
"""runahead's GGUF reader against gguf-py (PyPI package gguf, llama.cpp's own Python library).

gguf-py writes the files: metadata of every value type (nested arrays too) and tensors
F32, F16, BF16 and the block formats Q8_0, Q4_0, Q4_1 quantized by gguf.quants (Q4_K and
Q6_K, which gguf-py cannot quantize, as random blocks with finite scales), with the
default alignment and with general.alignment 64. tests/gguf_dump prints what runahead
reads of each (src/gguf.h); every key, type, value, tensor shape, offset and every
dequantized element must equal what gguf.GGUFReader and gguf.quants.dequantize read,
bit for bit. A big-endian file and a truncated one must be refused with one error line,
and runahead's table of ggml types must agree with gguf.GGML_QUANT_SIZES.

    gguf_oracle.py GGUF_DUMP TMPDIR     exit 0 pass, 1 fail, 77 gguf-py not importable
"""
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q, GGUFValueType as V
except ImportError as e:
    print(f"skip: cannot import gguf-py ({e}); pip install gguf")
    sys.exit(77)

SHORT = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32", V.INT32: "i32",
         V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "str", V.ARRAY: "arr", V.UINT64: "u64", V.INT64: "i64",
         V.FLOAT64: "f64"}
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def typed_arrays(w):
    """Arrays of every element type (gguf-py infers i32, f32, bool and str from Python values)."""
    w.add_array("t.arr.i32", [1, -2, 3, 2 ** 31 - 1])
    w.add_array("t.arr.f32", [0.5, -0.25, 3.0e38, 1.0e-40])
    w.add_array("t.arr.bool", [True, False, True])
    w.add_array("t.arr.str", ["a", "", "<0x0A>", "\u00e9\u2713", "x\0y"])
    for name, vtype, vals in [("u8", V.UINT8, [0, 1, 255]), ("i8", V.INT8, [-128, 0, 127]),
                              ("u16", V.UINT16, [65535, 7]), ("i16", V.INT16, [-32768, 32767]),
                              ("u32", V.UINT32, [4294967295, 0]), ("u64", V.UINT64, [2 ** 64 - 1, 5]),
                              ("i64", V.INT64, [-2 ** 63, 2 ** 63 - 1]), ("f64", V.FLOAT64, [0.1, -1e300])]:
        w.add_key_value("t.arr." + name, vals, V.ARRAY, sub_type=vtype)
    w.add_array("t.nested", [[1, 2], [3], [4, 5, 6]])
    w.add_array("t.nested_str", [["x"], ["y", "z"]])
    w.add_array("t.nested3", [[[1.5], [2.5, 3.5]], [[4.5]]])


def scalars(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -7)
    w.add_float32("t.f32", 0.1)
    w.add_uint64("t.u64", 2 ** 63 + 5)
    w.add_int64("t.i64", -2 ** 40)
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.true", True)
    w.add_bool("t.false", False)
    w.add_string("t.str", "h\u00e9llo\0x \u2713")


def add_tensors(w, rng, quantized_only=False):
    def rand(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    if not quantized_only:
        w.add_tensor("f32", rand(3, 40))
        w.add_tensor("f16", rand(4, 32).astype(np.float16))
        w.add_tensor("bf16", gguf.quants.quantize(rand(5, 16), Q.BF16), raw_dtype=Q.BF16)
    # rows of several blocks, a 3-D tensor, a zero row (d = 0), large and tiny scales
    special = rand(4, 64)
    special[0] = 0
    special[1] *= 1000
    special[2] *= 1e-3
    special[3] = np.linspace(-7, 8, 64)
    for qt in (Q.Q8_0, Q.Q4_0, Q.Q4_1):
        name = qt.name.lower()
        w.add_tensor(name, gguf.quants.quantize(rand(16, 96), qt), raw_dtype=qt)
        w.add_tensor(name + ".3d", gguf.quants.quantize(rand(2, 3, 64), qt), raw_dtype=qt)
        w.add_tensor(name + ".special", gguf.quants.quantize(special, qt), raw_dtype=qt)
    # gguf-py cannot quantize the K-quants: random blocks with finite f16 scales at their places
    for qt, scales in ((Q.Q4_K, (0, 2)), (Q.Q6_K, (208,))):
        block, size = gguf.GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, size=(3, 2 * size), dtype=np.uint8)
        for b in range(raw.shape[1] // size):
            for at in scales:
                f16 = (rng.standard_normal((3, 1)) * 0.01).astype(np.float16).view(np.uint8)
                raw[:, b * size + at:b * size + at + 2] = f16
        w.add_tensor(qt.name.lower(), raw, raw_dtype=qt)


def write(path, alignment=None, endianess=gguf.GGUFEndian.LITTLE, seed=1, quantized_only=False):
    w = gguf.GGUFWriter(path, "llama", endianess=endianess)
    if alignment:
        w.add_custom_alignment(alignment)
    scalars(w)
    typed_arrays(w)
    add_tensors(w, np.random.default_rng(seed), quantized_only)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_dump(dump, *args):
    return subprocess.run([dump, *args], capture_output=True, text=True)


def flatten(v, vtype):
    """V as gguf-py's contents() gives it: nested arrays flattened, u64 (written as strings past 2^63 - 1) as int."""
    if isinstance(v, list):
        return [x for e in v for x in flatten(e, vtype)]
    return [int(v) if vtype == V.UINT64 else v]


def compare_kv(path, key, field, mine):
    if mine["type"] != SHORT[field.types[0]]:
        fail(f"{path}: {key}: type {mine['type']}, gguf-py {SHORT[field.types[0]]}")
        return
    if field.types[0] == V.ARRAY and mine.get("elem") != SHORT[field.types[1]]:
        fail(f"{path}: {key}: element type {mine.get('elem')}, gguf-py {SHORT[field.types[1]]}")
    ours = flatten(mine["value"], field.types[-1])
    if field.types[0] != V.ARRAY:
        ours = ours[0]
    theirs = field.contents()
    if ours != theirs:
        fail(f"{path}: {key}: runahead reads {ours!r}, gguf-py {theirs!r}")


def compare_tensor(path, t, mine, data_offset):
    got = {k: mine[k] for k in ("type", "dims", "n_elements", "bytes")}
    want = {"type": int(t.tensor_type), "dims": [int(d) for d in t.shape], "n_elements": int(t.n_elements),
            "bytes": int(t.n_bytes)}
    if got != want or data_offset + mine["offset"] != t.data_offset:
        fail(f"{path}: tensor {t.name}: runahead reads {got} at {data_offset + mine['offset']}, "
             f"gguf-py {want} at {t.data_offset}")
        return 0
    ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
    ours = np.array(mine["values"], dtype=np.float64).astype(np.float32)
    if ours.shape != ref.shape or not np.array_equal(ours.view(np.uint32), ref.view(np.uint32)):
        bad = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32)) if ours.shape == ref.shape else [0]
        fail(f"{path}: tensor {t.name} ({t.tensor_type.name}): {len(bad)} elements differ from "
             f"gguf.quants.dequantize, first at {bad[0]}")
        return 0
    return ref.size


def compare_file(dump, path):
    r = run_dump(dump, path)
    if r.returncode != 0:
        fail(f"{path}: gguf_dump failed: {r.stderr.strip()}")
        return
    mine = json.loads(r.stdout)
    reader = gguf.GGUFReader(path)
    if (mine["version"], mine["alignment"], mine["data_offset"]) != (3, reader.alignment, reader.data_offset):
        fail(f"{path}: version/alignment/data offset {mine['version']}/{mine['alignment']}/{mine['data_offset']}, "
             f"gguf-py 3/{reader.alignment}/{reader.data_offset}")
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    if set(fields) != set(mine["kv"]):
        fail(f"{path}: keys differ: only runahead {sorted(set(mine['kv']) - set(fields))}, "
             f"only gguf-py {sorted(set(fields) - set(mine['kv']))}")
    for key in sorted(set(fields) & set(mine["kv"])):
        compare_kv(path, key, fields[key], mine["kv"][key])
    if {t.name for t in reader.tensors} != set(mine["tensors"]):
        fail(f"{path}: tensor names differ")
    values = sum(compare_tensor(path, t, mine["tensors"][t.name], mine["data_offset"])
                 for t in reader.tensors if t.name in mine["tensors"])
    print(f"gguf_oracle: {os.path.basename(path)}: {len(fields)} keys, {len(reader.tensors)} tensors, "
          f"{values} values as gguf-py reads them")


def expect_refused(dump, path, words):
    r = run_dump(dump, path)
    lines = r.stderr.strip().split("\n")
    if r.returncode != 1 or len(lines) != 1 or path not in lines[0] or words not in lines[0]:
        fail(f"{path}: expected one error line naming it and '{words}', got exit {r.returncode}: {r.stderr!r}")
    else:
        print(f"gguf_oracle: refused as it should: {lines[0]}")


def compare_types(dump):
    r = run_dump(dump, "--types")
    ours = json.loads(r.stdout)
    for number, (name, block, size) in ours.items():
        qt = Q(int(number)) if int(number) in Q._value2member_map_ else None
        if qt is None or qt.name != name or gguf.GGML_QUANT_SIZES[qt] != (block, size):
            fail(f"ggml type {number}: runahead has {name} ({block}, {size}), gguf-py "
                 f"{(qt.name, gguf.GGML_QUANT_SIZES[qt]) if qt else 'nothing'}")
    print(f"gguf_oracle: {len(ours)} ggml type layouts as in gguf-py {len(Q)}")


def main():
    dump, tmp = sys.argv[1], sys.argv[2]
    every, align64 = os.path.join(tmp, "every.gguf"), os.path.join(tmp, "align64.gguf")
    write(every)
    write(align64, alignment=64, seed=2, quantized_only=True)
    for path in (every, align64):
        compare_file(dump, path)
    big = os.path.join(tmp, "big-endian.gguf")
    write(big, endianess=gguf.GGUFEndian.BIG, quantized_only=True)
    expect_refused(dump, big, "big-endian")
    cut = os.path.join(tmp, "truncated.gguf")
    with open(every, "rb") as f, open(cut, "wb") as g:
        g.write(f.read()[:-100])
    expect_refused(dump, cut, "truncated")
    compare_types(dump)
    if failures:
        print(f"gguf_oracle: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
