#!/bin/sh
# jobs/compare-llama-cpp and jobs/gguf-from-hf.py. llama.cpp is not part of runahead, so the
# checks that need it run only when LLAMA_CPP_DIR names a built llama.cpp tree (they are
# optional tooling, not a missing fixture: no skip):
# - always: no llama.cpp, a missing llama-bench, bad lists and unknown options are refused
#   with one clear line;
# - with gguf-py and numpy: the GGUF copy of a random HF model holds exactly the weights of
#   the same model written as a llama2.c checkpoint (runahead-synth --format llama2c), whose
#   q/k rows are in the interleaved RoPE order GGUF's LLaMA graph expects: the converter's
#   q/k permutation and tensor mapping are checked against runahead's own;
# - with llama-bench and llama-quantize built: a tiny end-to-end run prints both tables with
#   a figure in every cell it ran, and runahead's bf16 lane ran on the bf16 copy of the model
#   (MODEL-bf16, written for it), its f32 lane on the model itself, its q8_0 lane on llama.cpp's
#   Q8_0 file, with that lane's share of the read-bandwidth bound in the decode table; then
#   --gguf on the Q8_0 copy: one lane of each engine, both named q8_0, on that same file.
. "$(dirname "$0")/lib.sh"
JOB=$SRC/jobs/compare-llama-cpp
export RA_BUILD_DIR="$BUILD"
[ -x "$BUILD/runahead" ] && [ -x "$BUILD/runahead-synth" ] || skip "runahead not built in $BUILD"

# --- refusals (a fake tree where one is needed: only the checks before any work run)
expect_error 'no llama.cpp: give --llama-cpp DIR or set LLAMA_CPP_DIR' env -u LLAMA_CPP_DIR "$JOB"
expect_error 'not a directory' env -u LLAMA_CPP_DIR "$JOB" --llama-cpp "$TMP/absent"
mkdir -p "$TMP/fake/build/bin" "$TMP/fake/gguf-py/gguf"
expect_error 'llama-bench not found: build llama.cpp first' "$JOB" --llama-cpp "$TMP/fake"
for p in llama-bench llama-quantize; do printf '#!/bin/sh\nexit 1\n' >"$TMP/fake/build/bin/$p"; chmod +x "$TMP/fake/build/bin/$p"; done
expect_error "--tokens: '0' is not a positive integer" "$JOB" --llama-cpp "$TMP/fake" --tokens 512,0
expect_error "--ll-types: 'f16' is not f32, bf16, q8_0, q4_0, q4_1 or q4_k_m" "$JOB" --llama-cpp "$TMP/fake" --ll-types f32,f16
expect_error "--ra-types: 'q5_0' is not f32, bf16, q8_0, q4_0, q4_1 or q4_k_m" "$JOB" --llama-cpp "$TMP/fake" --ra-types q5_0
expect_error "--ra-types: 'q4_0' runs llama.cpp's q4_0 file: add q4_0 to --ll-types" "$JOB" --llama-cpp "$TMP/fake" --ra-types q4_0
expect_error "--quantizer: 'gptq' is not llama.cpp or runahead" "$JOB" --llama-cpp "$TMP/fake" --quantizer gptq
expect_error "--fa: '2' is not 0 or 1" "$JOB" --llama-cpp "$TMP/fake" --fa 2
expect_error "unknown option '--bogus'" "$JOB" --llama-cpp "$TMP/fake" --bogus
"$JOB" --help >"$TMP/help" 2>&1 && grep -q -- '--llama-cpp DIR' "$TMP/help" || fail "--help does not list --llama-cpp"
grep -q -- '--gguf FILE' "$TMP/help" || fail "--help does not list --gguf"
# --gguf: the file as it is (no llama-quantize needed: a tree without it), so no other model nor
# conversion options
mkdir -p "$TMP/fake-bench/build/bin" "$TMP/fake-bench/gguf-py/gguf"
cp "$TMP/fake/build/bin/llama-bench" "$TMP/fake-bench/build/bin/"
printf 'not a gguf' >"$TMP/x.gguf"
expect_error "--gguf: $TMP/absent.gguf is not a file" "$JOB" --llama-cpp "$TMP/fake-bench" --gguf "$TMP/absent.gguf"
expect_error "--gguf and --model: give one model" "$JOB" --llama-cpp "$TMP/fake-bench" --gguf "$TMP/x.gguf" --model "$TMP"
expect_error "--ll-types does not apply" "$JOB" --llama-cpp "$TMP/fake-bench" --gguf "$TMP/x.gguf" --ll-types q8_0
expect_error "--bf16-model do not apply" "$JOB" --llama-cpp "$TMP/fake-bench" --gguf "$TMP/x.gguf" --bf16-model "$TMP"
if python3 -c 'import gguf' 2>/dev/null; then
    expect_error "--gguf: $TMP/x.gguf: cannot read its file type" "$JOB" --llama-cpp "$TMP/fake-bench" --gguf "$TMP/x.gguf"
fi

lcpp=${LLAMA_CPP_DIR:-}
if [ -z "$lcpp" ] || [ ! -d "$lcpp/gguf-py/gguf" ] || ! python3 -c 'import numpy' 2>/dev/null; then
    echo "note: LLAMA_CPP_DIR (with gguf-py) and numpy absent: the conversion and run checks did not run"
    finish
fi

# --- conversion: the same weights as runahead's llama2.c export (GQA, and a hidden size that
# is a multiple of 32 so that Q8_0 can quantize it)
"$BUILD/runahead-synth" --preset tiny-gqa --vocab 512 --hidden-dim 192 --out "$TMP/m" >/dev/null 2>&1 &&
"$BUILD/runahead-synth" --format llama2c --from "$TMP/m" --out "$TMP/m.bin" >/dev/null 2>&1 ||
    fail "runahead-synth failed"
python3 "$SRC/jobs/gguf-from-hf.py" --gguf-py "$lcpp/gguf-py" "$TMP/m" "$TMP/m.gguf" 2>"$TMP/err" ||
    fail "gguf-from-hf.py failed: $(cat "$TMP/err")"
expect_error "--bf16-model: $TMP/absent is not a Hugging Face directory" \
    "$JOB" --llama-cpp "$TMP/fake" --model "$TMP/m" --bf16-model "$TMP/absent"
python3 - "$lcpp/gguf-py" "$TMP/m.gguf" "$TMP/m.bin" >"$TMP/cmp" 2>&1 <<'PY' || fail "GGUF weights differ from the llama2.c export: $(cat "$TMP/cmp")"
import struct, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import gguf
r = gguf.GGUFReader(sys.argv[2])
t = {x.name: np.array(x.data).ravel() for x in r.tensors}
b = open(sys.argv[3], "rb").read()
dim, hid, L, H, KV, V, S = struct.unpack("<7i", b[:28])
assert V < 0, "the export should be untied"
V = -V
f = np.frombuffer(b[28:], dtype=np.float32)
kvd, o = dim * KV // H, 0
def take(n):
    global o
    o += n
    return f[o - n:o]
ref = {"token_embd.weight": take(V * dim)}
per = [("attn_norm", dim), ("attn_q", dim * dim), ("attn_k", dim * kvd), ("attn_v", dim * kvd),
       ("attn_output", dim * dim), ("ffn_norm", dim), ("ffn_gate", hid * dim), ("ffn_down", hid * dim),
       ("ffn_up", hid * dim)]
for name, n in per:
    a = take(L * n)
    for l in range(L):
        ref[f"blk.{l}.{name}.weight"] = a[l * n:(l + 1) * n]
ref["output_norm.weight"] = take(dim)
take(S * (dim // H))  # llama2.c's RoPE tables
ref["output.weight"] = take(V * dim)
assert o == f.size, "unexpected llama2.c layout"
assert set(ref) == set(t), f"tensor names differ: {sorted(set(ref) ^ set(t))}"
bad = [k for k in ref if ref[k].shape != t[k].shape or not np.array_equal(ref[k], t[k])]
assert not bad, f"differ: {bad}"
print(f"{len(ref)} tensors equal")
PY

# --- end to end, when llama.cpp is built
if [ ! -x "$lcpp/build/bin/llama-bench" ] || [ ! -x "$lcpp/build/bin/llama-quantize" ]; then
    echo "note: $lcpp/build/bin has no llama-bench and llama-quantize: the run check did not run"
    finish
fi
"$JOB" --llama-cpp "$lcpp" --model "$TMP/m" --tokens 16 --threads 1 --rounds 1 --repeat 1 \
    --ra-types f32,bf16,q8_0 --decode 4 --out "$TMP/res" >"$TMP/run" 2>"$TMP/err" ||
    { fail "compare-llama-cpp failed: $(tail -n 3 "$TMP/err")"; finish; }
for g in f32 bf16 q8_0; do [ -s "$TMP/m-gguf/m-$g.gguf" ] || fail "no $g GGUF written"; done
# Each table: a header naming every lane, then one row of numbers (no '-': every lane ran).
for title in 'prefill, prompt tokens/s' 'decode, tokens/s after a one-token prompt'; do
    row=$(grep -A2 "^$title" "$TMP/run" | tail -n 1)
    grep -A1 "^$title" "$TMP/run" | tail -n 1 | grep -q 'll f32  *ll bf16  *ll q8_0  *ra f32  *ra bf16  *ra q8_0  *f32 ra/ll  *bf16 ra/ll  *q8_0 ra/ll' ||
        fail "$title: header lacks a lane: $(cat "$TMP/run")"
    n=14; case $title in decode*) n=15 ;; esac # decode: the q8_0 lane's share of its bound too
    echo "$row" | awk -v n=$n 'NF != n { exit 1 } { for (i = 1; i <= NF; i++) if ($i !~ /^[0-9.]+\*?$/) exit 1 }' ||
        fail "$title: row is not $n figures: '$row'"
done
grep -q '^bound: read GB/s of the round (median) over the lane.s bytes per token: q8_0 ' "$TMP/run" ||
    fail "the decode table does not say what its bound is: $(cat "$TMP/run")"
# 6 llama.cpp and 3 runahead runs per phase, and one bandwidth sample before the decode round
[ "$(wc -l <"$TMP/res/raw.tsv")" -eq $((1 + 2 * (6 + 3) + 1)) ] || fail "raw.tsv should hold 19 results: $(cat "$TMP/res/raw.tsv")"
grep -q '"torch_dtype": "bfloat16"' "$TMP/m-bf16/config.json" 2>/dev/null || fail "no bf16 copy written to $TMP/m-bf16"
# Each runahead run's report names the model it loaded: the lane's own.
for j in "$TMP"/res/ra-*.json; do
    case $j in *-bf16-*) want=$TMP/m-bf16 ;; *-q8_0-*) want=$TMP/m-gguf/m-q8_0.gguf ;; *) want=$TMP/m ;; esac
    python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["model"] != sys.argv[2])' "$j" "$want" ||
        fail "$j: runahead did not run on $want"
done
[ -e "$TMP/res/ra-tg-t1-n4-bf16-r1-0.json" ] || fail "no bf16 decode report: $(ls "$TMP/res")"

# --gguf: the Q8_0 file as it is, for both engines.
q8=$TMP/m-gguf/m-q8_0.gguf
"$JOB" --llama-cpp "$lcpp" --gguf "$q8" --tokens 16 --threads 1 --rounds 1 --repeat 1 --decode 4 \
    --out "$TMP/res-gguf" >"$TMP/run" 2>"$TMP/err" || { fail "compare-llama-cpp --gguf failed: $(tail -n 3 "$TMP/err")"; finish; }
grep -q "^--gguf $q8: both engines compute on its q8_0 blocks" "$TMP/run" ||
    fail "--gguf: the summary does not say how each engine ran the file: $(cat "$TMP/run")"
for title in 'prefill, prompt tokens/s' 'decode, tokens/s after a one-token prompt'; do
    row=$(grep -A2 "^$title" "$TMP/run" | tail -n 1)
    head='^ *thr  *tokens  *ll q8_0  *ra q8_0  *q8_0 ra/ll  *ra q8_0/best$' n=6
    case $title in decode*) head='^ *thr  *tokens  *ll q8_0  *ra q8_0  *q8_0 ra/ll  *ra q8_0/best  *ra q8_0/bound$' n=7 ;; esac
    grep -A1 "^$title" "$TMP/run" | tail -n 1 | grep -q "$head" ||
        fail "--gguf: $title: header is not one q8_0 lane of each engine: $(cat "$TMP/run")"
    echo "$row" | awk -v n=$n 'NF != n { exit 1 } { for (i = 1; i <= NF; i++) if ($i !~ /^[0-9.]+\*?$/) exit 1 }' ||
        fail "--gguf: $title: row is not $n figures: '$row'"
done
[ "$(wc -l <"$TMP/res-gguf/raw.tsv")" -eq $((1 + 2 * (2 + 1) + 1)) ] || fail "--gguf: raw.tsv should hold 7 results: $(cat "$TMP/res-gguf/raw.tsv")"
for j in "$TMP"/res-gguf/ra-*.json; do
    python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["model"] != sys.argv[2])' "$j" "$q8" ||
        fail "$j: runahead did not run on $q8"
done
python3 -c 'import json, sys
sys.exit(not all(json.loads(open(f).readline())["model_filename"] == sys.argv[1] for f in sys.argv[2:]))' \
    "$q8" "$TMP"/res-gguf/ll-*.jsonl || fail "--gguf: llama-bench did not run on $q8"
finish
