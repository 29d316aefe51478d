#!/bin/sh
# Every test file of tests/ is registered, once: each tests/<name>.sh (but lib.sh) in
# SCRIPT_TESTS, each harness tests/fuzz_<name>.c in FUZZ_TESTS, each tests/test_<name>.c in
# C_TESTS or, run by a script, TEST_HELPERS (Makefile.am), and no name in two places. A test
# added to the tree but not to those lists would never run. First it proves on a crafted tree
# that it finds an unregistered and a doubly registered test, then it checks the real one.
. "$(dirname "$0")/lib.sh"

# The words of Makefile.am's assignments to VARIABLE (= and +=, continuation lines joined).
list() { # ROOT VARIABLE
    sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$1/Makefile.am" |
        awk -v v="$2" '$1 == v && ($2 == "=" || $2 == "+=") { for (i = 3; i <= NF; i++) print $i }'
}

# Prints one line per problem under ROOT; the count goes to $problems.
check_tree() { # ROOT
    problems=0
    all=$(for v in C_TESTS SCRIPT_TESTS FUZZ_TESTS TEST_HELPERS; do list "$1" $v; done)
    dups=$(echo "$all" | sort | uniq -d)
    for d in $dups; do echo "registered twice: $d"; problems=$((problems + 1)); done
    for f in "$1"/tests/*.sh "$1"/tests/fuzz_*.c "$1"/tests/test_*.c; do
        [ -e "$f" ] || continue
        base=$(basename "$f")
        case $base in
            lib.sh|fuzz_replay.c|fuzz_util.c) continue ;;
            *.sh) want="SCRIPT_TESTS"; entry=tests/$base ;;
            fuzz_*) want="FUZZ_TESTS"; entry=tests/${base%.c} ;;
            *) want="C_TESTS TEST_HELPERS"; entry=tests/${base%.c} ;;
        esac
        found=no
        for v in $want; do list "$1" "$v" | grep -qx "$entry" && found=yes; done
        [ $found = yes ] || { echo "not registered: $entry (Makefile.am: $want)"; problems=$((problems + 1)); }
    done
}

# The crafted tree: a script and a C test unregistered, a harness registered twice.
craft=$TMP/craft
mkdir -p "$craft/tests"
touch "$craft/tests/lib.sh" "$craft/tests/a.sh" "$craft/tests/b.sh" "$craft/tests/test_c.c" \
    "$craft/tests/test_d.c" "$craft/tests/fuzz_e.c" "$craft/tests/fuzz_util.c"
printf '%s\n' 'SCRIPT_TESTS = tests/a.sh' 'C_TESTS = tests/test_c \' '	tests/fuzz_e' \
    'FUZZ_TESTS += tests/fuzz_e' > "$craft/Makefile.am"
out=$(check_tree "$craft")
echo "$out" | grep -qx 'not registered: tests/b (Makefile.am: SCRIPT_TESTS)' ||
    echo "$out" | grep -q 'not registered: tests/b.sh' || fail "the crafted tree's unregistered script went unseen: $out"
echo "$out" | grep -q 'not registered: tests/test_d ' || fail "the crafted tree's unregistered C test went unseen: $out"
echo "$out" | grep -qx 'registered twice: tests/fuzz_e' || fail "the crafted tree's double registration went unseen: $out"
echo "$out" | grep -q 'tests/test_c\|tests/a.sh' && fail "registered tests reported on the crafted tree: $out"

out=$(check_tree "$SRC")
[ -z "$out" ] || fail "$out"
n=$(for v in C_TESTS SCRIPT_TESTS FUZZ_TESTS; do list "$SRC" $v; done | wc -l)
[ "$n" -ge 50 ] || fail "only $n tests found in $SRC/Makefile.am"
echo "$n tests registered"
finish
