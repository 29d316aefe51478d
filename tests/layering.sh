#!/bin/sh
# The layering (README.md's Architecture), checked on the #include lines of the source tree: src/ (the
# core) includes only src/ headers; kernels/ only src/ and kernels/; partition/ only src/ and
# partition/ (its MPI program, runahead-tune, lives in mpi/); mpi/ anything but jobs/ and tests/.
# The build enforces the same through per-target include paths (Makefile.am), but a quoted
# relative path ("../mpi/x.h") would get around those; this check resolves every include the
# way the compiler does (the including file's directory first, then the -I directories).
# First it proves on a crafted tree that it finds violations, then it checks the real one. Last:
# only src/backend.c opens backends (ra_backend_open); no program or test calls their constructors.
. "$(dirname "$0")/lib.sh"

# The parts a file may include from.
allowed_for() { # PART RELPATH
    case $1/$2 in
        src/*) echo src ;;
        kernels/*) echo "src kernels" ;;
        partition/*) echo "src partition" ;;
        mpi/*) echo "src mpi partition kernels" ;;
    esac
}

# The part (top-level directory) an include resolves to, or "none" (a system or generated
# header such as config.h).
resolve() { # ROOT FILE INCLUDE ALLOWED
    dir=$(dirname "$2")
    if [ -e "$dir/$3" ]; then
        target=$(realpath -m "$dir/$3")
    else
        target=
        for q in $4 src kernels partition mpi jobs tests; do
            [ -e "$1/$q/$3" ] && { target=$(realpath -m "$1/$q/$3"); break; }
        done
        [ -n "$target" ] || { echo none; return; }
    fi
    case $target in
        "$1"/*) rel=${target#"$1"/}; echo "${rel%%/*}" ;;
        *) echo outside ;;
    esac
}

# Prints one line per violation under ROOT; the count goes to $violations.
check_tree() { # ROOT
    root=$(realpath "$1")
    violations=0
    for part in src kernels partition mpi; do
        [ -d "$root/$part" ] || continue
        for f in $(find "$root/$part" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort); do
            rel=${f#"$root"/}
            allowed=$(allowed_for "$part" "${rel#*/}")
            for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
                got=$(resolve "$root" "$f" "$inc" "$allowed")
                [ "$got" = none ] && continue
                case " $allowed " in
                    *" $got "*) ;;
                    *) echo "$rel: #include \"$inc\" is in $got/, but $part/ may include only: $allowed"
                       violations=$((violations + 1)) ;;
                esac
            done
        done
    done
}

# The checker finds what it must on a crafted tree: 4 violations, no false alarm.
T="$TMP/tree"
mkdir -p "$T/src" "$T/mpi" "$T/partition" "$T/kernels"
: >"$T/src/b.h"; : >"$T/mpi/exchange.h"; : >"$T/partition/p.h"; : >"$T/kernels/k.cuh"
printf '#include "config.h"\n#include "b.h"\n#include "exchange.h"\n  #  include "../partition/p.h"\n' >"$T/src/a.c"
printf '#include "k.cuh"\n#include "b.h"\n#include "exchange.h"\n' >"$T/kernels/k.cu"
printf '#include "p.h"\n#include "exchange.h"\n' >"$T/partition/x.c"
printf '#include "p.h"\n#include "b.h"\n#include "k.cuh"\n#include <mpi.h>\n' >"$T/mpi/m.c"
out=$(check_tree "$T"; echo "count $violations")
for want in 'src/a.c: #include "exchange.h" is in mpi/' 'src/a.c: #include "../partition/p.h" is in partition/' \
            'kernels/k.cu: #include "exchange.h" is in mpi/' 'partition/x.c: #include "exchange.h" is in mpi/' \
            'count 4'; do
    printf '%s\n' "$out" | grep -qF "$want" || fail "self-test: the checker missed: $want (it said: $out)"
done

# The real tree.
check_tree "$SRC"
[ "$violations" -eq 0 ] || fail "$violations include(s) break the layering (listed above)"

# Backends are chosen in one place: only src/backend.c calls the backends' own constructors
# (test_cuda_ops also calls the CUDA module's, to check its refusal of a device it lacks).
direct=$(grep -rlE "ra_backend_(cpu|cuda)_init\(" "$SRC/src" "$SRC/mpi" "$SRC/partition" "$SRC/jobs" "$SRC/tests" \
    --include='*.c' --include='*.cu' | sed "s|^$SRC/||" | grep -vxE "src/backend(_cpu)?\.c|tests/test_cuda_ops\.c")
[ -z "$direct" ] || fail "backends opened around ra_backend_open in: $(echo $direct)"
finish
