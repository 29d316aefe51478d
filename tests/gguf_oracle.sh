#!/bin/sh
# runahead's GGUF reader (src/gguf.h) against gguf-py, llama.cpp's own Python
# library: tests/gguf_oracle.py writes files with gguf.GGUFWriter (every metadata
# type, nested arrays, F32/F16/BF16 and Q8_0/Q4_0/Q4_1 tensors from gguf.quants,
# random Q4_K/Q6_K blocks, alignments 32 and 64) and compares what tests/gguf_dump reads of them with
# gguf.GGUFReader and gguf.quants.dequantize, bit for bit; a big-endian and a
# truncated file must be refused with one line. Skips where python3 cannot
# import gguf (pip install gguf).
. "$(dirname "$0")/lib.sh"
need_command python3 python3
DUMP="$BUILD/tests/gguf_dump"
[ -x "$DUMP" ] || { echo "FAIL: $DUMP not built (make tests-build builds it)" >&2; exit 1; }

python3 "$SRC/tests/gguf_oracle.py" "$DUMP" "$TMP"
rc=$?
[ "$rc" -ne 77 ] || skip "python3 cannot import the gguf package (pip install gguf)"
[ "$rc" -eq 0 ] || fail "runahead reads GGUF files differently from gguf-py, or the comparison failed (exit $rc)"
finish
