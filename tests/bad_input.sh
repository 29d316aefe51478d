#!/bin/sh
# Bad input gets one clear error line and a non-zero exit, never a crash:
# truncated and lying weight files, unknown versions, missing tokenizers,
# prompts longer than the context, token ids outside the vocabulary, bad flags.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
RA="$BUILD/runahead"
M="$MODELS/stories260K.bin"

# Weight files crafted from the real one.
python3 - "$M" "$TMP" <<'PY'
import struct, sys, os
src, out = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
def put(name, b): open(os.path.join(out, name), "wb").write(b)
put("truncated.bin", data[: len(data) // 2])
put("header-only.bin", data[:28])
put("short-header.bin", data[:10])
put("empty.bin", b"")
put("trailing.bin", data + b"\0" * 64)
h = list(struct.unpack("7i", data[:28]))
lie = h[:]; lie[0] = 128                      # dim doubled: the tensors no longer fit
put("lying-dim.bin", struct.pack("7i", *lie) + data[28:])
lie = h[:]; lie[2] = 1 << 30                  # absurd layer count
put("lying-layers.bin", struct.pack("7i", *lie) + data[28:])
lie = h[:]; lie[4] = 3                        # 3 KV heads do not divide 8 heads
put("lying-kvheads.bin", struct.pack("7i", *lie) + data[28:])
v2 = struct.pack("Ii", 0x616b3432, 2) + struct.pack("7i", *h) + b"\1"
put("v2.bin", v2 + b"\0" * (256 - len(v2)) + data[28:])
v9 = struct.pack("Ii", 0x616b3432, 9) + struct.pack("7i", *h) + b"\1"
put("v9.bin", v9 + b"\0" * (256 - len(v9)) + data[28:])
put("long-prompt.ids", (" ".join(["1"] * 600)).encode())
PY

expect_error "no such model"                            "$RA" --model "$TMP/nonexistent.bin" --prompt-ids 1
expect_error "truncated.bin: truncated: .*tensor"       "$RA" --model "$TMP/truncated.bin" --prompt-ids 1
expect_error "header-only.bin: truncated"               "$RA" --model "$TMP/header-only.bin" --prompt-ids 1
expect_error "short-header.bin: too short"              "$RA" --model "$TMP/short-header.bin" --prompt-ids 1
expect_error "empty.bin: file is empty"                 "$RA" --model "$TMP/empty.bin" --prompt-ids 1
expect_error "trailing.bin: 64 bytes after"             "$RA" --model "$TMP/trailing.bin" --prompt-ids 1
expect_error "lying-dim.bin: truncated"                 "$RA" --model "$TMP/lying-dim.bin" --prompt-ids 1
expect_error "lying-layers.bin: layer count"            "$RA" --model "$TMP/lying-layers.bin" --prompt-ids 1
expect_error "lying-kvheads.bin: 3 KV heads"            "$RA" --model "$TMP/lying-kvheads.bin" --prompt-ids 1
expect_error "v2.bin: .*version 2 .*not supported"      "$RA" --model "$TMP/v2.bin" --prompt-ids 1
expect_error "v9.bin: unknown llama2.c checkpoint version 9" "$RA" --model "$TMP/v9.bin" --prompt-ids 1
mkdir -p "$TMP/emptydir"
expect_error "emptydir.*config.json"                    "$RA" --model "$TMP/emptydir" --prompt-ids 1

# Prompts and generation against the context (512) and the vocabulary (512).
expect_error "600 tokens.*context of 512"               "$RA" --model "$M" --prompt-ids-file "$TMP/long-prompt.ids"
expect_error "exceeds the model's context of 512"       "$RA" --model "$M" --prompt-ids "1 2 3" --generate 511
expect_error "token id 600 at position 1 is outside the vocabulary" "$RA" --model "$M" --prompt-ids "1 600"
expect_error "--prompt-ids: 'x' .*not a token id"       "$RA" --model "$M" --prompt-ids "1 x"
expect_error "nope.ids: cannot open"                    "$RA" --model "$M" --prompt-ids-file "$TMP/nope.ids"

# Tokenizers.
expect_error "missing-tok.bin: cannot open"             "$RA" --model "$M" --tokenizer "$TMP/missing-tok.bin" --prompt "hi"
expect_error "no tokenizer"                             "$RA" --model "$M" --prompt "hi"
expect_error "no tokenizer"                             "$RA" --model "$M" --prompt-ids 1 --output text
if [ -r "$MODELS/llama2-tokenizer.bin" ]; then
    expect_error "tokenizer has 32000 tokens but the model .* has 512" \
        "$RA" --model "$M" --tokenizer "$MODELS/llama2-tokenizer.bin" --prompt "hi"
else
    skip_part "fixture $MODELS/llama2-tokenizer.bin not found: the tokenizer/model vocabulary mismatch is unchecked"
fi

# Flags.
expect_error "--generate: 'abc' is not an integer"      "$RA" --model "$M" --prompt-ids 1 --generate abc
expect_error "--threads: '0' is not an integer in 1"    "$RA" --model "$M" --prompt-ids 1 --threads 0
expect_error "unknown option '--frobnicate'"            "$RA" --model "$M" --prompt-ids 1 --frobnicate
expect_error "exactly one of --prompt"                  "$RA" --model "$M" --prompt-ids 1 --prompt hi
expect_error "exactly one of --prompt"                  "$RA" --model "$M"
expect_error "no model given"                           "$RA" --prompt-ids 1
expect_error "--temperature -1 must be >= 0"            "$RA" --model "$M" --prompt-ids 1 --temperature -1
expect_error "--top-p 2 must be in"                     "$RA" --model "$M" --prompt-ids 1 --top-p 2
expect_error "--output: 'xml' is not"                   "$RA" --model "$M" --prompt-ids 1 --output xml
expect_error "--model needs a value"                    "$RA" --prompt-ids 1 --model

# --help and --version succeed.
"$RA" --help | grep -q -- "--prompt-ids" || fail "--help does not list --prompt-ids"
"$RA" --version | grep -Eq "^runahead [0-9]" || fail "--version"
finish
