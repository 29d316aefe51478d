#!/bin/sh
# runahead-chunks' bad input, on stories260K: each is one line naming the rank,
# the file and the cause, a non-zero exit, and the store as it was (the same
# chunks, verify clean, no temporary file left): a missing chunk file, a chunk
# longer than the model's context, ids outside the vocabulary, text without a
# tokenizer, a store of another model, a full disk during add (emulated with
# ulimit -f; under mpirun the failing rank names itself and the other's chunks
# are stored), a store directory that is not writable (not checked as root:
# chmod does not stop root's writes); a corrupted chunk file fails verify,
# naming the file; usage errors.
. "$(dirname "$0")/lib.sh"
need_fixture stories260K.bin
need_command "$MPIEXEC"
M="$MODELS/stories260K.bin"
C="$BUILD/runahead-chunks"
S="$TMP/store"
chunks() { "$C" "$@" -m "$M" --store "$S" -T 1; }
# tokens STORE: the chunks' lengths, sorted, on one line.
tokens() { "$C" ls -m "$M" --store "$1" | awk 'NR > 1 { print $2 }' | sort -n | tr '\n' ' '; }
seq_ids() { awk -v a="$1" -v n="$2" 'BEGIN { for (i = 0; i < n; i++) printf "%d ", 1 + (a + 7 * i) % 500 }'; }

chunks add --ids "$(seq_ids 1 3)" --ids "$(seq_ids 2 5)" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "add"; finish; }
before=$(tokens "$S")
expect_error "^runahead-chunks: rank 0: .*missing\.txt.*" chunks add "$TMP/missing.txt"
expect_error "^runahead-chunks: rank 0: --ids chunk 1: a chunk of 600 tokens behind a prefix of 0 exceeds the model's context of 512" \
    chunks add --ids "$(seq_ids 1 600)"
printf 'Once upon a time' >"$TMP/a.txt"
expect_error "^runahead-chunks: rank 0: .*a\.txt: a text chunk needs a tokenizer" chunks add "$TMP/a.txt"
expect_error "^runahead-chunks: rank 0: --ids chunk 2: token id 512 at 1 is outside the vocabulary \(0\.\.511\)" \
    chunks add --ids "1 2" --ids "3 512"
"$BUILD/runahead-synth" --preset tiny --seed 3 --out "$TMP/other" >/dev/null 2>&1 || fail "runahead-synth"
expect_error "^runahead-chunks: rank 0: .*store\.json.*" "$C" add -m "$TMP/other" --store "$S" --ids "1 2 3"
# A chunk file larger than the file-size limit: the write fails (EFBIG), nothing else changes.
# (PMIx's default shared-memory store would hit the limit in MPI_Init: its hash store does not.)
(ulimit -f 64; PMIX_MCA_gds=hash exec "$C" add -m "$M" --store "$S" -T 1 --ids "$(seq_ids 5 500)") >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
    grep -Eq "^runahead-chunks: rank 0: --ids chunk 1: .*(too large|No space|File too large)" "$TMP/err" ||
    { cat "$TMP/err" >&2; fail "add past ulimit -f: rc $rc, not one error line"; }
[ "$(find "$S" -type f ! -name '*.rachunk' ! -name '*.racraft' ! -name index ! -name lock ! -name store.json | wc -l)" -eq 0 ] ||
    { find "$S" -type f >&2; fail "add past ulimit -f left a temporary file"; }
[ "$(tokens "$S")" = "$before" ] || fail "a failed add changed the store: '$(tokens "$S")'"
chunks verify >/dev/null 2>&1 || fail "verify after the failed adds"
# Under mpirun the rank that fails names itself and its chunk; the other rank's chunks are stored.
# (Open MPI's shared memory would hit the limit too: its warnings are not ours.)
(ulimit -f 64; PMIX_MCA_gds=hash OMPI_MCA_btl=self,tcp exec timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$C" add -m "$M" \
    --store "$TMP/s2" -T 1 --ids "1 2 3" --ids "$(seq_ids 5 500)" --ids "4 5") >/dev/null 2>"$TMP/err" &&
    fail "mpirun add past ulimit -f succeeded"
[ "$(grep -c "^runahead-chunks:" "$TMP/err")" -eq 2 ] &&
    grep -q "^runahead-chunks: rank 1: --ids chunk 2: .*File too large" "$TMP/err" &&
    grep -q "^runahead-chunks: rank 0: 2 chunks: 2 added (5 tokens)" "$TMP/err" ||
    { cat "$TMP/err" >&2; fail "mpirun add past ulimit -f: not rank 1's error and rank 0's summary"; }
[ "$(tokens "$TMP/s2")" = "2 3 " ] && "$C" verify -m "$M" --store "$TMP/s2" >/dev/null 2>&1 ||
    fail "mpirun add past ulimit -f: rank 0's chunks not stored, or the store does not verify"
mkdir -p "$TMP/ro" && chmod 555 "$TMP/ro"
if touch "$TMP/ro/probe" 2>/dev/null; then
    echo "note: running as root, chmod does not stop writes: the unwritable store is not checked"
else
    expect_error "^runahead-chunks: rank 0: .*ro/store.*" "$C" add -m "$M" --store "$TMP/ro/store" --ids "1 2 3"
fi
# A flipped byte in a layer's rows: verify fails and names the file.
f=$(find "$S/chunks" -name '*.rachunk' | head -n 1)
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(4096 + 5); b = f.read(1); f.seek(4096 + 5)
f.write(bytes([b[0] ^ 0x40]))' "$f"
chunks verify >"$TMP/out" 2>"$TMP/err" && fail "verify passed a corrupted chunk"
grep -q "$(basename "$f")" "$TMP/err" || { cat "$TMP/err" >&2; fail "verify did not name $f"; }
grep -q "^runahead-chunks: rank 0: .*1 fault" "$TMP/err" || { cat "$TMP/err" >&2; fail "verify: no summary"; }

# --- usage errors
expect_error "^runahead-chunks: rank 0: no command" "$C" -m "$M"
expect_error "^runahead-chunks: rank 0: unknown command 'lst'" "$C" lst -m "$M"
expect_error "^runahead-chunks: rank 0: evict: give exactly one of --to SIZE and --all" "$C" evict -m "$M"
expect_error "^runahead-chunks: rank 0: add: no chunks" "$C" add -m "$M"
expect_error "^runahead-chunks: rank 0: --capacity: 'x' is not a size" "$C" add -m "$M" --capacity x --ids 1
expect_error "^runahead-chunks: rank 0: --capacity is for add" "$C" stats -m "$M" --store "$S" --capacity 1M
# Under mpirun the launcher adds its own lines: one of ours, and a non-zero exit.
timeout 120 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$C" ls -m "$M" --store "$S" >/dev/null 2>"$TMP/err" &&
    fail "ls under mpirun -np 2 ran"
[ "$(grep -c "^runahead-chunks:" "$TMP/err")" -eq 1 ] &&
    grep -q "^runahead-chunks: rank 0: ls runs as one process, but 2 ranks" "$TMP/err" ||
    { cat "$TMP/err" >&2; fail "ls under mpirun -np 2: not one error line"; }
"$C" --help | grep -q "^Usage: runahead-chunks add" || fail "--help"

finish
