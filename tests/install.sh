#!/bin/sh
# make install into a scratch prefix gives what a code that links librunahead needs: a
# program built with only `pkg-config --cflags --libs runahead` links, runs and loads
# stories260K's configuration; every installed header compiles on its own (the public ones are
# self-contained: none needs a header that is not installed, or config.h); the job scripts
# installed under share/runahead/jobs find the installed programs. Then it uninstalls and
# checks that nothing of runahead's files is left.
. "$(dirname "$0")/lib.sh"
command -v pkg-config >/dev/null || skip "pkg-config is not installed"
prefix=$TMP/prefix
make -C "$BUILD" install prefix="$prefix" >"$TMP/install.log" 2>&1 ||
    { tail -20 "$TMP/install.log" >&2; fail "make install prefix=$prefix"; finish; }
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cflags=$(pkg-config --cflags runahead) || fail "pkg-config --cflags runahead"
libs=$(pkg-config --libs runahead) || fail "pkg-config --libs runahead"
[ "$(pkg-config --modversion runahead)" = "$(sed -n "s/^PACKAGE_VERSION = //p" "$BUILD/Makefile")" ] ||
    fail "runahead.pc's version is not the package's"
case " $cflags " in
    *" -I$prefix/include "*) ;;
    *) fail "runahead.pc's Cflags miss -I$prefix/include: $cflags" ;;
esac
# The C compiler beneath an MPI wrapper: a user of the core needs no MPI.
cc=$(sed -n 's/^CC = //p' "$BUILD/Makefile")
! base=$($cc -showme:command 2>/dev/null) || cc=$base
# The build's own CFLAGS and LDFLAGS (jobs/sanitize's -fsanitize=...) are what a user of this
# library needs too.
build_cflags=$(sed -n 's/^CFLAGS = //p' "$BUILD/Makefile")
build_ldflags=$(sed -n 's/^LDFLAGS = //p' "$BUILD/Makefile")

cat > "$TMP/use.c" <<'C'
#include <runahead/ra_core.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    printf("%s\n", ra_strerror(RA_EINVAL));
    if (argc < 2)
        return 0;
    struct ra_model m;
    if (ra_model_load(&m, argv[1]) != RA_OK) {
        fprintf(stderr, "use: %s\n", ra_error_message());
        return 1;
    }
    printf("layers %d dim %d vocab %d\n", m.config.n_layers, m.config.dim, m.config.vocab_size);
    ra_model_free(&m);
    return 0;
}
C
# shellcheck disable=SC2086 # pkg-config's words
$cc $build_cflags $cflags -o "$TMP/use" "$TMP/use.c" $build_ldflags $libs 2>"$TMP/cc.log" ||
    { cat "$TMP/cc.log" >&2; fail "a program does not build with pkg-config's runahead"; }
if [ -x "$TMP/use" ]; then
    [ -n "$("$TMP/use")" ] || fail "the installed library's ra_strerror printed nothing"
    if [ -f "$MODELS/stories260K.bin" ]; then
        out=$("$TMP/use" "$MODELS/stories260K.bin") || fail "the installed library does not load stories260K.bin"
        echo "$out" | grep -qx 'layers 5 dim 64 vocab 512' || fail "stories260K.bin through the install: $out"
        echo "a program built with pkg-config's runahead: $out"
    else
        skip_part "fixture $MODELS/stories260K.bin not found"
    fi
fi

# Each installed header alone; the install holds exactly the headers Makefile.am names public.
n=0
for h in "$prefix"/include/runahead/*.h; do
    printf '#include <runahead/%s>\n' "$(basename "$h")" > "$TMP/one.c"
    # shellcheck disable=SC2086
    $cc $build_cflags $cflags -std=gnu11 -fsyntax-only "$TMP/one.c" 2>"$TMP/one.log" ||
        fail "installed header $(basename "$h") does not compile alone: $(grep -m1 error "$TMP/one.log")"
    n=$((n + 1))
done
[ "$n" -ge 10 ] || fail "only $n headers installed under $prefix/include/runahead"
echo "$n installed headers compile alone with: $cflags"
grep -l 'config.h' "$prefix"/include/runahead/*.h && fail "an installed header includes config.h"

# The job scripts: installed, and an installed launcher runs the installed runahead.
jobs=$prefix/share/runahead/jobs
for s in run-prefill prefill.sbatch common.sh installed.sh; do
    [ -f "$jobs/$s" ] || fail "make install did not install jobs/$s"
done
if [ -f "$MODELS/stories260K.bin" ]; then
    # Without RA_BUILD_DIR (jobs/sanitize sets it for its build tree): the install's own default.
    out=$(cd "$TMP" && env -u RA_BUILD_DIR "$jobs/run-prefill" --model "$MODELS/stories260K.bin" --context 8 --ranks 1 --dry-run 2>&1) ||
        fail "installed run-prefill --dry-run: $out"
    echo "$out" | grep -q "$prefix/bin/runahead " || fail "installed run-prefill does not run $prefix/bin/runahead: $out"
fi

make -C "$BUILD" uninstall prefix="$prefix" >"$TMP/uninstall.log" 2>&1 || fail "make uninstall"
left=$(find "$prefix" -type f 2>/dev/null)
[ -z "$left" ] || fail "make uninstall left: $left"
rm -rf "$prefix"
finish
