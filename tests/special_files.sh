#!/bin/sh
# Every file the programs read as data (weights, config.json, the shard index,
# shards, tokenizer, prompt files, partition tables) must be a regular file:
# a FIFO, a directory or a device such as /dev/zero gets one error line at
# once, instead of an open() that waits forever for a writer or a read that
# never ends. Each command runs under `timeout`, so a regression fails here
# (exit 124, no error line) rather than hanging the suite; /dev/zero runs also
# under a memory limit, since an endless read grows without bound.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
M="$MODELS/stories260K.bin"
RA="$BUILD/runahead"
T="timeout 30"
# An endless read of /dev/zero must not take the machine's memory with it.
# The memory cap catches a reader that slurps /dev/zero; an ASan build
# reserves terabytes of shadow address space, so it runs uncapped (timeout
# still bounds it).
if grep -q __asan_init "$RA" 2>/dev/null; then
    limited() { "$@"; }
else
    limited() { (ulimit -v 4000000 2>/dev/null; "$@"); }
fi

mkfifo "$TMP/fifo" || skip "mkfifo failed"
mkdir -p "$TMP/dir"
F="$TMP/fifo"
fifo="fifo: is a FIFO, not a regular file"

# Weights, tokenizer, prompts.
expect_error "$fifo"                                   $T "$RA" --model "$F" --prompt-ids 1
expect_error "/dev/zero: is a character device, not a regular file" $T "$RA" --model /dev/zero --prompt-ids 1
expect_error "$fifo"                                   $T "$RA" --model "$M" --tokenizer "$F" --prompt hi
expect_error "dir: is a directory, not a regular file" $T "$RA" --model "$M" --tokenizer "$TMP/dir" --prompt hi
expect_error "/dev/zero: is a character device"        $T "$RA" --model "$M" --tokenizer /dev/zero --prompt hi
expect_error "$fifo"                                   $T "$RA" --model "$M" --prompt-ids-file "$F"
expect_error "$fifo"                                   $T "$RA" --model "$M" --tokenizer "$F" --prompt-file "$F"
expect_error "/dev/zero: is a character device"        limited $T "$RA" --model "$M" --prompt-ids-file /dev/zero
expect_error "dir: is a directory, not a regular file" $T "$RA" --model "$M" --prompt-ids-file "$TMP/dir"

# A Hugging Face directory whose config.json, weights, index or shard is not a regular file.
"$BUILD/runahead-synth" --preset tiny --out "$TMP/hf" >/dev/null 2>&1 || fail "runahead-synth"
hf() { # hf NAME: a copy of the synthetic model directory to spoil
    rm -rf "${TMP:?}/$1" && cp -r "$TMP/hf" "$TMP/$1"
}
hf cfg-fifo && rm "$TMP/cfg-fifo/config.json" && mkfifo "$TMP/cfg-fifo/config.json"
expect_error "config.json: is a FIFO, not a regular file" $T "$RA" --model "$TMP/cfg-fifo" --prompt-ids 1
hf cfg-dir && rm "$TMP/cfg-dir/config.json" && mkdir "$TMP/cfg-dir/config.json"
expect_error "config.json: is a directory, not a regular file" $T "$RA" --model "$TMP/cfg-dir" --prompt-ids 1
hf cfg-zero && ln -sf /dev/zero "$TMP/cfg-zero/config.json"
expect_error "config.json: is a character device"      limited $T "$RA" --model "$TMP/cfg-zero" --prompt-ids 1
hf st-fifo && rm "$TMP/st-fifo/model.safetensors" && mkfifo "$TMP/st-fifo/model.safetensors"
expect_error "model.safetensors: is a FIFO, not a regular file" $T "$RA" --model "$TMP/st-fifo" --prompt-ids 1
hf index-fifo && rm "$TMP/index-fifo/model.safetensors" && mkfifo "$TMP/index-fifo/model.safetensors.index.json"
expect_error "model.safetensors.index.json: is a FIFO, not a regular file" \
    $T "$RA" --model "$TMP/index-fifo" --prompt-ids 1
hf shard-fifo && mv "$TMP/shard-fifo/model.safetensors" "$TMP/shard-fifo/real.safetensors" &&
    python3 - "$TMP/shard-fifo" <<'PY'
import json, struct, sys
d = sys.argv[1]
raw = open(d + "/real.safetensors", "rb").read()
names = [k for k in json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]]) if k != "__metadata__"]
# The last tensor lives in a shard that is a FIFO.
wm = {n: "real.safetensors" for n in names}
wm[sorted(names)[-1]] = "pipe.safetensors"
json.dump({"metadata": {}, "weight_map": wm}, open(d + "/model.safetensors.index.json", "w"))
PY
mkfifo "$TMP/shard-fifo/pipe.safetensors"
expect_error "pipe.safetensors: is a FIFO, not a regular file" $T "$RA" --model "$TMP/shard-fifo" --prompt-ids 1
expect_error "$fifo"                                   $T "$BUILD/runahead-synth" --from "$F" --out "$TMP/conv"

# Partition tables: runahead's table: partitions, runahead-table, runahead-tune's --out.
expect_error "$fifo"                                   $T "$RA" --model "$M" --prompt-ids "1 2 3 4" --partition "table:$F"
expect_error "$fifo"                                   $T "$BUILD/runahead-table" show "$F"
expect_error "dir: is a directory, not a regular file" $T "$BUILD/runahead-table" show "$TMP/dir"
expect_error "$fifo"                                   $T "$BUILD/runahead-table" lookup "$F" --model m --ranks 2 --context 100
expect_error "$fifo"                                   $T "$BUILD/runahead-tune" --model "$M" --objective model --ranks 2 \
    --contexts 64 --out "$F"
finish
