# Shared by run-prefill, scaling-study, network-study and the Slurm batch
# scripts: sourced, not run. POSIX sh. Expects $top (the source tree).
#
#   RA_BUILD_DIR   the build directory (default: $top/build)
#   RA_MPIRUN      the mpirun command (default: mpirun)
#   RA_SRUN        the srun command and its MPI plugin (default: srun --mpi=pmix)
#   RA_RANK_WRAPPER a command every rank runs the program through (a profiler;
#                  the tests use one that hides Slurm's environment from Open MPI)

# An installed copy ($(pkgdatadir)/jobs, make install) finds the programs in the install's
# bindir: jobs/installed.sh, written by make install, sets RA_BUILD_DIR's default.
[ ! -f "$top/jobs/installed.sh" ] || . "$top/jobs/installed.sh"
build=${RA_BUILD_DIR:-$top/build}
prog=${prog:-$(basename "$0")}

die() { echo "$prog: $*" >&2; exit 1; }
say() { echo "$prog: $*" >&2; }

# Open MPI refuses root unless told; jobs often run as root in containers.
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

need_build() {
    for p in runahead runahead-tune runahead-table runahead-synth; do
        [ -x "$build/$p" ] || die "$build/$p not found: build first (jobs/setup), or set RA_BUILD_DIR"
    done
}

is_uint() { case $1 in ''|*[!0-9]*) return 1 ;; *) return 0 ;; esac; }
need_uint() { is_uint "$2" && [ "$2" -ge 1 ] || die "$1: '$2' is not a positive integer"; }
# need_list FLAG LIST: a comma-separated list of positive integers
need_list() {
    case $2 in ''|,*|*,|*,,*) die "$1: '$2' is not a comma-separated list of positive integers" ;; esac
    for v in $(echo "$2" | tr ',' ' '); do need_uint "$1" "$v"; done
}

ncores() { nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1; }

# The model's vocabulary size and context, from config.json (HF directory) or
# a llama2.c header (7 int32: dim hidden layers heads kv_heads vocab seq_len).
model_field() { # model_field PATH vocab|context
    python3 - "$1" "$2" <<'PY' || die "$1: cannot read the model's $2 (not an HF directory or llama2.c .bin)"
import json, os, struct, sys
path, field = sys.argv[1], sys.argv[2]
if os.path.isdir(path):
    c = json.load(open(os.path.join(path, "config.json")))
    print(c["vocab_size"] if field == "vocab" else c.get("max_position_embeddings", 2048))
else:
    with open(path, "rb") as f:
        h = f.read(36)
    off = 8 if h[:4] == b"ak42" else 0   # v1 header: magic, version, then the config
    dim, hid, layers, heads, kvh, vocab, seq = struct.unpack("<7i", h[off:off + 28])
    print(abs(vocab) if field == "vocab" else seq)
PY
}

# make_prompt N VOCAB SEED FILE: N token ids drawn uniformly from 1..VOCAB-1.
make_prompt() {
    awk -v n="$1" -v v="$2" -v s="$3" 'BEGIN { srand(s); for (i = 0; i < n; i++) printf "%s%d", (i ? " " : ""), 1 + int(rand() * (v - 1)); print "" }' >"$4"
}

# launch P T CMD...: runs CMD on P ranks with T threads each, through
# $launcher (mpirun or srun). $oversubscribe=1 lets mpirun put more ranks
# than cores on a machine; $mpirun_args are extra mpirun options (hostfile...).
launcher=${launcher:-}
oversubscribe=${oversubscribe:-0}
mpirun_args=${mpirun_args:-}
default_launcher() {
    [ -n "$launcher" ] && return
    if [ -n "${SLURM_JOB_ID:-}" ] && [ -n "${SLURM_NTASKS:-}" ]; then launcher=srun; else launcher=mpirun; fi
}
launch() {
    p=$1 t=$2; shift 2
    [ -z "${RA_RANK_WRAPPER:-}" ] || set -- $RA_RANK_WRAPPER "$@"
    case $launcher in
    srun)
        # Inside an allocation: at most SLURM_NTASKS ranks; --overcommit lets the
        # allocation's CPUs carry more ranks than CPUs (one-node tests).
        ${RA_SRUN:-srun --mpi=pmix} -n "$p" --cpus-per-task="$t" ${SLURM_OVERCOMMIT:+--overcommit} "$@" ;;
    mpirun)
        if [ "$oversubscribe" = 1 ]; then
            # Binding more ranks than cores to cores only makes them queue.
            set -- --oversubscribe --bind-to none --map-by slot "$@"
        else
            set -- --bind-to core --map-by "slot:PE=$t" "$@"
        fi
        ${RA_MPIRUN:-mpirun} -np "$p" $mpirun_args -x OMP_NUM_THREADS="$t" "$@" ;;
    *) die "--launcher: '$launcher' is not mpirun or srun" ;;
    esac
}

# check_fits P T: without --oversubscribe or mpirun_args, P ranks x T threads must fit this machine.
check_fits() {
    [ "$launcher" = mpirun ] && [ "$oversubscribe" != 1 ] && [ -z "$mpirun_args" ] || return 0
    c=$(ncores)
    [ $(($1 * $2)) -le "$c" ] ||
        die "$1 ranks x $2 threads need $(($1 * $2)) cores and this machine has $c: pass --oversubscribe (the ranks then share cores, so timings mix), fewer --threads, or --mpirun-args with a hostfile"
}

# report_ranks FILE: the "ranks" of a runahead --report.
report_ranks() {
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ranks"])' "$1" 2>/dev/null || echo "?"
}
