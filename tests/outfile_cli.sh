#!/bin/sh
# Output files (--report, --trace, runahead-tune --out, runahead-table merge OUT, runahead-synth's
# config.json): a place that cannot be written fails at once, before any work, with the errno
# text; a FIFO, a device, a directory or a symbolic link is refused, not replaced; a symbolic
# link planted at the old predictable NAME.tmp is not followed; SIGTERM or SIGINT during a run
# leaves no temporary file behind.
. "$(dirname "$0")/lib.sh"
"$BUILD/runahead-synth" --preset tiny --seed 3 --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
M="$TMP/tiny"
python3 -c "import random; random.seed(4); print(' '.join(str(random.randrange(3, 512)) for _ in range(256)))" >"$TMP/prompt.ids" ||
    { fail "python3"; finish; }
RA="$BUILD/runahead --model $M --prompt-ids-file $TMP/prompt.ids --generate 2 --output ids"
LONG=100000 # repeats: minutes of work, so a check that waits for it shows as a timeout

# fast_error PATTERN CMD...: as expect_error, and within 10 s (the work would take minutes).
fast_error() {
    t0=$(date +%s)
    expect_error "$@"
    [ $(($(date +%s) - t0)) -le 10 ] || fail "took $(($(date +%s) - t0)) s to fail, not at once: $2 ..."
}

# A place that cannot be written: before any work, with the errno text.
mkdir -p "$TMP/res"
echo "not a directory" >"$TMP/afile"
fast_error "nodir/r.json: cannot create a file in .*/nodir: No such file or directory" \
    timeout 15 $RA --repeat $LONG --report "$TMP/nodir/r.json"
fast_error "afile/t.json: cannot create a file in .*/afile: Not a directory" \
    timeout 15 $RA --repeat $LONG --trace "$TMP/afile/t.json"
if [ "$(id -u)" -ne 0 ]; then
    mkdir -p "$TMP/readonly" && chmod 555 "$TMP/readonly"
    fast_error "readonly/r.json: cannot create a file in .*/readonly: Permission denied" \
        timeout 15 $RA --repeat $LONG --report "$TMP/readonly/r.json"
    chmod 755 "$TMP/readonly"
fi
timeout 60 $MPIEXEC -np 2 $MPIEXEC_FLAGS $RA --repeat $LONG --report "$TMP/nodir/r.json" >/dev/null 2>"$TMP/err"
grep -q "nodir/r.json: cannot create a file in .*/nodir: No such file or directory" "$TMP/err" ||
    { fail "2 ranks: no error for a report in a missing directory"; cat "$TMP/err" >&2; }

# Targets that are not regular files are refused and left alone.
mkfifo "$TMP/fifo"
fast_error "fifo: is a FIFO, not a regular file: not replacing it" timeout 15 $RA --repeat $LONG --report "$TMP/fifo"
[ -p "$TMP/fifo" ] || fail "the FIFO was replaced"
fast_error "/dev/null: is a character device, not a regular file: not replacing it" \
    timeout 15 $RA --repeat $LONG --trace /dev/null
[ -c /dev/null ] || fail "/dev/null is no longer a device"
mkdir -p "$TMP/dir"
fast_error "dir: is a directory: not replacing it" timeout 15 $RA --repeat $LONG --report "$TMP/dir"
echo '{"victim": true}' >"$TMP/victim.json"
ln -s "$TMP/victim.json" "$TMP/link.json"
fast_error "link.json: is a symbolic link: not replacing it" timeout 15 $RA --repeat $LONG --report "$TMP/link.json"
[ -L "$TMP/link.json" ] || fail "the symbolic link was replaced"
grep -q victim "$TMP/victim.json" || fail "the symbolic link's target was written"

# A symbolic link planted at the old predictable temporary names is not followed.
ln -s "$TMP/victim.json" "$TMP/res/r.json.tmp"
ln -s "$TMP/victim.json" "$TMP/res/t.json.tmp"
$RA --report "$TMP/res/r.json" --trace "$TMP/res/t.json" >/dev/null 2>"$TMP/err" || fail "run with planted links: $(cat "$TMP/err")"
grep -q victim "$TMP/victim.json" || fail "the planted link at NAME.tmp was followed: the victim was overwritten"
[ -f "$TMP/res/r.json" ] && [ ! -L "$TMP/res/r.json" ] && grep -q '"ttft_s"' "$TMP/res/r.json" ||
    fail "the report is not a regular file holding the record"
[ -f "$TMP/res/t.json" ] && [ ! -L "$TMP/res/t.json" ] && grep -q traceEvents "$TMP/res/t.json" ||
    fail "the trace is not a regular file holding the timeline"
[ "$(stat -c %a "$TMP/res/r.json")" = "$(printf '%o' $((0666 & ~$(umask))))" ] ||
    fail "the report's mode is $(stat -c %a "$TMP/res/r.json"), not 0666 less the umask"
# An existing regular report is replaced.
$RA --report "$TMP/res/r.json" >/dev/null 2>&1 || fail "replacing an existing report"
ls -A "$TMP/res" | grep -v '^[rt]\.json\(\.tmp\)\?$' | grep -q . && fail "temporary files left: $(ls -A "$TMP/res")"

# A signal during a long run: the temporary files (created at the start, so a place that cannot
# be written fails at once) are removed, and the process dies of the signal.
for sig in TERM:15 INT:2; do
    num=${sig#*:} sig=${sig%:*}
    d="$TMP/sig$sig"
    mkdir -p "$d"
    # A background job of a script ignores SIGINT; python gives the run default signal handling.
    python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' $RA --repeat $LONG --report "$d/r.json" --trace "$d/t.json" >/dev/null 2>"$TMP/err" &
    pid=$!
    i=0
    until [ "$(ls -A "$d" | wc -l)" -ge 2 ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
    [ "$(ls -A "$d" | wc -l)" -ge 2 ] || fail "SIG$sig: no temporary files while running (created late?)"
    sleep 1
    kill -$sig $pid
    wait $pid
    rc=$?
    [ $rc -eq $((128 + num)) ] || fail "SIG$sig: exit status $rc, want death by the signal"
    [ -z "$(ls -A "$d")" ] || fail "SIG$sig: left behind: $(ls -A "$d")"
done

# runahead-tune --out: an unwritable place fails at once, on one rank and on two.
T="$TMP/res/table.h5"
fast_error "nodir/t.h5: cannot create a file in .*/nodir: No such file or directory" \
    "$BUILD/runahead-tune" --model "$M" --objective model --ranks 2 --contexts 512 --out "$TMP/nodir/t.h5"
fast_error "afile/t.h5: cannot create a file in .*/afile: Not a directory" \
    "$BUILD/runahead-tune" --model "$M" --objective model --ranks 2 --contexts 512 --out "$TMP/afile/t.h5"
fast_error "/dev/null: is a character device, not a regular file: not replacing it" \
    "$BUILD/runahead-tune" --model "$M" --objective model --ranks 2 --contexts 512 --out /dev/null
t0=$(date +%s)
timeout 60 $MPIEXEC -np 2 $MPIEXEC_FLAGS "$BUILD/runahead-tune" --model "$M" --contexts 2048 --repeats 5 \
    --out "$TMP/nodir/t.h5" >/dev/null 2>"$TMP/err" && fail "runahead-tune on 2 ranks into a missing directory succeeded"
grep -q "nodir/t.h5: cannot create a file in .*/nodir: No such file or directory" "$TMP/err" ||
    { fail "runahead-tune on 2 ranks: no error for a missing directory"; cat "$TMP/err" >&2; }
[ $(($(date +%s) - t0)) -le 20 ] || fail "runahead-tune on 2 ranks took $(($(date +%s) - t0)) s to fail"

# runahead-table merge OUT: the same refusals; a good merge leaves only the table and its lock.
"$BUILD/runahead-table" write-example "$TMP/in.h5" --hw-tag hw >/dev/null || fail "write-example"
expect_error "link.h5: is a symbolic link: not replacing it" sh -c "ln -sf '$TMP/in.h5' '$TMP/link.h5' &&
    '$BUILD/runahead-table' merge '$TMP/link.h5' '$TMP/in.h5'"
expect_error "fifo: is a FIFO, not a regular file: not replacing it" timeout 20 "$BUILD/runahead-table" merge "$TMP/fifo" "$TMP/in.h5"
expect_error "dir: is a directory: not replacing it" "$BUILD/runahead-table" merge "$TMP/dir" "$TMP/in.h5"
expect_error "nodir/t.h5: cannot create a file in .*/nodir: No such file or directory" \
    "$BUILD/runahead-table" merge "$TMP/nodir/t.h5" "$TMP/in.h5"
mkdir -p "$TMP/merge"
"$BUILD/runahead-table" merge "$TMP/merge/t.h5" "$TMP/in.h5" 2>/dev/null || fail "merge into a new table"
[ "$(ls -A "$TMP/merge" | tr '\n' ' ')" = "t.h5 t.h5.lock " ] || fail "merge left: $(ls -A "$TMP/merge")"

# runahead-synth: a link planted at config.json.tmp is not followed.
mkdir -p "$TMP/synth"
ln -s "$TMP/victim.json" "$TMP/synth/config.json.tmp"
"$BUILD/runahead-synth" --preset tiny --out "$TMP/synth" >/dev/null 2>&1 || fail "runahead-synth beside a planted link"
grep -q victim "$TMP/victim.json" || fail "runahead-synth followed the link planted at config.json.tmp"
grep -q hidden_size "$TMP/synth/config.json" || fail "runahead-synth wrote no config.json"
finish
