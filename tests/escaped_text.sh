#!/bin/sh
# Text read from files never reaches the terminal raw: a config.json value, a
# safetensors tensor name or dtype, an index's shard or tensor name, jansson's
# quote of a broken JSON file, and HDF5 group names in runahead-table's errors,
# listings and validation all come out escaped (\x1b, \n, \\, long strings cut
# with "..."), so each error is one line and no escape sequence reaches the
# terminal.
. "$(dirname "$0")/lib.sh"
RA="$BUILD/runahead"
ESC=$(printf '\033')

# escaped WANT CMD...: CMD fails with one error line that holds WANT (fixed text)
# and no raw control character.
escaped() {
    want=$1; shift
    expect_error "." "$@"
    grep -qF -- "$want" "$TMP/err" || { fail "no '$want' in the error of: $*"; cat "$TMP/err" >&2; }
    ! LC_ALL=C grep -q '[[:cntrl:]]' "$TMP/err" || fail "a raw control character reached stderr: $*"
}

"$BUILD/runahead-synth" --preset tiny --out "$TMP/hf" >/dev/null 2>&1 || fail "runahead-synth"
# spoil NAME PYTHON: a copy of the model directory, changed by a Python snippet run in it.
spoil() {
    rm -rf "${TMP:?}/$1" && cp -r "$TMP/hf" "$TMP/$1" && (cd "$TMP/$1" && python3 -c "$2") || fail "spoil $1"
}
HEADER='
import json, struct
def header(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
def write(path, h, data):
    text = json.dumps(h).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
'

# config.json
spoil cfg-type 'import json; c = json.load(open("config.json")); c["model_type"] = "ll\u001b[31mama\nX\\"; json.dump(c, open("config.json", "w"))'
escaped 'model_type ll\x1b[31mama\nX\\ is not supported' "$RA" --model "$TMP/cfg-type" --prompt-ids 1
spoil cfg-act 'import json; c = json.load(open("config.json")); c["hidden_act"] = "\u001b]0;owned\u0007\u009b2J\u202e"; json.dump(c, open("config.json", "w"))'
escaped 'hidden_act \x1b]0;owned\x07\u009b2J\u202e is not supported' "$RA" --model "$TMP/cfg-act" --prompt-ids 1
printf '{"model_type": "llama", %s[2J\n\n}' "$ESC" >"$TMP/bad.json"
spoil cfg-json "import shutil; shutil.copy('$TMP/bad.json', 'config.json')"
escaped 'config.json: not valid JSON' "$RA" --model "$TMP/cfg-json" --prompt-ids 1

# safetensors headers: a tensor name and a dtype; a very long name is cut.
spoil st-dtype "$HEADER"'
h, data = header("model.safetensors")
name = "model.norm.weight"
e = h.pop(name)
e["dtype"] = "F64\u001b[0m"
h["model.\u001b[2Jevil\nname"] = e
write("model.safetensors", h, data)'
escaped 'tensor model.\x1b[2Jevil\nname: dtype F64\x1b[0m is not supported' "$RA" --model "$TMP/st-dtype" --prompt-ids 1
spoil st-long "$HEADER"'
h, data = header("model.safetensors")
e = dict(h["model.norm.weight"]); e["dtype"] = "F64"
h["\u001b[31m" + "A" * 5000] = e
write("model.safetensors", h, data)'
escaped 'tensor \x1b[31mAAAA' "$RA" --model "$TMP/st-long" --prompt-ids 1
grep -qF 'AAA...: dtype F64 is not supported' "$TMP/err" || { fail "a 5000-character name was not cut with ..."; cat "$TMP/err" >&2; }
[ "$(wc -c <"$TMP/err")" -lt 600 ] || fail "the error with a 5000-character name is $(wc -c <"$TMP/err") bytes"
spoil st-json 'import struct; h = b"{\"a\": \x1b[31m\n}"; open("model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h)'
escaped 'model.safetensors: header is not valid JSON' "$RA" --model "$TMP/st-json" --prompt-ids 1

# A shard index: a shard name and a tensor name.
spoil index-shard 'import json, os; os.rename("model.safetensors", "a.safetensors"); json.dump({"weight_map": {"model.norm.weight": "\u001b[31m/etc/passwd"}}, open("model.safetensors.index.json", "w"))'
escaped 'shard name "\x1b[31m/etc/passwd" is not a file name' "$RA" --model "$TMP/index-shard" --prompt-ids 1
spoil index-name 'import json, os; os.rename("model.safetensors", "a.safetensors"); json.dump({"weight_map": {"bad\n\u001b[1mname": 7}}, open("model.safetensors.index.json", "w"))'
escaped 'tensor bad\n\x1b[1mname: weight_map value is not a file name' "$RA" --model "$TMP/index-name" --prompt-ids 1

# HDF5 tables: group names in runahead-table's listing, validation and errors, and in
# runahead's "the file has: ..." list.
if command -v h5mkgrp >/dev/null 2>&1; then
    T="$TMP/t.h5"
    "$BUILD/runahead-table" write-example "$T" --hw-tag hw >/dev/null || fail "write-example"
    h5mkgrp -p "$T" "/evil${ESC}[31m/h$(printf 'w\nx')/p2" || fail "h5mkgrp"
    escaped '/evil\x1b[31m/hw\nx/p2' "$BUILD/runahead-table" show "$T"
    ! LC_ALL=C grep -q '[[:cntrl:]]' "$TMP/out" || fail "runahead-table show printed a raw control character"
    "$BUILD/runahead-table" validate "$T" >"$TMP/out" 2>"$TMP/err" && fail "validate passed a bad group"
    grep -qF '/evil\x1b[31m/hw\nx' "$TMP/out" || { fail "validate: no escaped group name"; cat "$TMP/out" >&2; }
    ! LC_ALL=C grep -q '[[:cntrl:]]' "$TMP/out" || fail "runahead-table validate printed a raw control character"
    if [ -r "$MODELS/stories260K.bin" ]; then
        escaped 'the file has: evil\x1b[31m/hw\nx/p2' "$RA" --model "$MODELS/stories260K.bin" --prompt-ids "1 2 3" \
            --partition "table:$T" --hw-tag hw
    else
        skip_part "fixture $MODELS/stories260K.bin not found: the table list in runahead's error is unchecked"
    fi
else
    skip_part "h5mkgrp not installed (apt-get install hdf5-tools): HDF5 names are unchecked"
fi
finish
