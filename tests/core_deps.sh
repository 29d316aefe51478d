#!/bin/sh
# The core library builds without MPI and HDF5: every core source preprocesses with the core's
# own flags alone (tests/core_flags.sh, written by make: no MPI_CFLAGS, no HDF5_CFLAGS) under the
# compiler that Open MPI's wrapper calls (its MPI include path dropped), and src/librunahead.a
# needs no MPI or HDF5 symbol. First it proves that those flags cannot reach mpi.h or hdf5.h,
# so a core file that included either would fail here.
. "$(dirname "$0")/lib.sh"
flags=$BUILD/tests/core_flags.sh
[ -r "$flags" ] || { echo "missing $flags: run make tests-build" >&2; exit 1; }
CORE_ISA=
core_isa() { [ -z "$2" ] || CORE_ISA="$CORE_ISA$1 $2
"; } # FILE FLAGS, one line each
. "$flags"
cd "$BUILD" || exit 1

# The C compiler beneath an MPI wrapper: Open MPI says it with -showme:command.
base_cc=$($CORE_CC -showme:command 2>/dev/null) || base_cc=$CORE_CC
echo "core compiler: $base_cc"

for header in mpi.h hdf5.h; do
    printf '#include <%s>\n' "$header" > "$TMP/probe.c"
    # shellcheck disable=SC2086 # the flags are a word list
    if $base_cc $CORE_FLAGS -E -o /dev/null "$TMP/probe.c" 2>/dev/null; then
        fail "the core's flags reach <$header>: the check below would prove nothing"
    fi
done

checked=0
check_source() { # FILE [EXTRA FLAGS]
    # shellcheck disable=SC2086 # the flags are word lists
    if ! err=$($base_cc $CORE_FLAGS ${2:-} -E -o /dev/null "$SRC/$1" 2>&1); then
        fail "$1 does not build with the core's flags alone: $(echo "$err" | grep -m1 error)"
    fi
    checked=$((checked + 1))
}
for f in $CORE_SOURCES; do check_source "$f"; done
while read -r f isa_flags; do
    [ -z "$f" ] || check_source "$f" "$isa_flags"
done <<EOF
$CORE_ISA
EOF
[ "$checked" -ge 20 ] || fail "only $checked core sources listed in $flags"
echo "checked $checked core sources"

lib=$BUILD/src/librunahead.a
[ -r "$lib" ] || fail "missing $lib"
foreign=$(nm -u "$lib" 2>/dev/null | awk '$1 == "U" && $2 ~ /^(P?MPI_|ompi_|H5)/ {print $2}' | sort -u)
[ -z "$foreign" ] || fail "src/librunahead.a needs MPI or HDF5 symbols: $(echo $foreign)"
[ -n "$(nm -u "$lib" 2>/dev/null | awk '$1 == "U"')" ] || fail "nm lists no undefined symbol in $lib"
finish
