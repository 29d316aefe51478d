#!/bin/sh
# The Slurm batch scripts on a one-node cluster started here (jobs/slurm-local):
# prefill.sbatch runs KV-Runahead on 2 ranks through srun --mpi=pmix; a
# tune.sbatch array of 2 tasks (one context length each) merges into one
# table; scaling.sbatch runs a small study through srun; a job whose ranks
# are started as separate one-rank copies stops with the world-size error.
# The daemons are stopped by pid, also on failure.
# Skips (77) without Slurm or root.
. "$(dirname "$0")/lib.sh"
for p in sbatch slurmctld slurmd munged; do
    command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] ||
        { echo "skip: $p not installed (apt-get install --no-install-recommends slurmctld slurmd slurm-client munge)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skip: a local Slurm cluster needs root"; exit 77; }
J=$SRC/jobs
D=$TMP/cluster
# Ports away from a cluster the user may run with the defaults (6817, 6818).
ports=$((26817 + $$ % 500 * 2)),$((26818 + $$ % 500 * 2))
trap '"$J/slurm-local" stop --dir "$D" >/dev/null 2>&1' EXIT
trap 'exit 1' INT TERM
eval "$("$J/slurm-local" start --dir "$D" --ports "$ports" 2>"$TMP/start.err")" ||
    { fail "slurm-local start: $(tail -2 "$TMP/start.err")"; finish; }
export SLURM_CONF RA_TOP=$SRC RA_BUILD_DIR=$BUILD RA_RESULTS_DIR=$TMP/results
"$BUILD/runahead-synth" --preset tiny --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
cd "$TMP" || exit 1

# submit NAME SBATCH-ARGS...: sbatch --wait (bounded); prints the job id.
submit() {
    name=$1; shift
    timeout 300 sbatch --parsable --wait --ntasks=2 --ntasks-per-node=2 --overcommit --output="$TMP/$name-%A_%a.out" "$@" 2>"$TMP/$name.sbatch.err"
}

id=$(submit prefill "$J/prefill.sbatch" --model "$TMP/tiny" --context 160 --method kvr --repeat 2) ||
    { fail "prefill.sbatch: exit $? ($(cat "$TMP"/prefill-*.out "$TMP/prefill.sbatch.err" 2>/dev/null | tail -3))"; }
R=$TMP/results/prefill-$id
python3 - "$R/report.json" <<'PY' || fail "prefill.sbatch: report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ranks"] == 2 and r["method"] == "kvr" and r["context_length"] == 160, r
assert r["ttft_s"]["median"] > 0 and len(r["ttft_s"]["all"]) == 2
assert sum(x["bytes_sent"] for x in r["per_rank"]) > 0
PY
[ "$(wc -w <"$R/output.txt")" -eq 16 ] || fail "prefill.sbatch: expected 16 generated ids in $R/output.txt"

id=$(submit tune --array=0-1 "$J/tune.sbatch" --model "$TMP/tiny" --contexts 96,160 \
     -- --repeats 1 --points 3 --min-stride 16 --no-baselines) ||
    { fail "tune.sbatch: exit $? ($(cat "$TMP"/tune-*.out "$TMP/tune.sbatch.err" 2>/dev/null | tail -3))"; }
T=$TMP/results/tune-$id/table.h5
"$BUILD/runahead-table" validate "$T" >/dev/null || fail "tune.sbatch: $T does not validate"
"$BUILD/runahead-table" show "$T" >"$TMP/show.txt" 2>&1 || fail "tune.sbatch: cannot show $T"
grep -q "/p2: 2 entries" "$TMP/show.txt" || { fail "tune.sbatch: the merged table lacks an array task's entry"; cat "$TMP/show.txt" >&2; }
for c in 96 160; do grep -Eq "^ +$c " "$TMP/show.txt" || fail "tune.sbatch: no entry at $c tokens"; done
[ -s "$TMP/results/tune-$id/parts/task-0.h5" ] && [ -s "$TMP/results/tune-$id/parts/task-1.h5" ] ||
    fail "tune.sbatch: the tasks' own tables are missing"

# A small scaling study inside one allocation: every run through srun.
id=$(submit scaling "$J/scaling.sbatch" --model "$TMP/tiny" --contexts 96,160 --methods single,tsp,kvr-e --repeat 1 --no-plots) ||
    { fail "scaling.sbatch: exit $? ($(cat "$TMP"/scaling-*.out "$TMP/scaling.sbatch.err" 2>/dev/null | tail -3))"; }
python3 - "$TMP/results/scaling-$id" <<'PY' || fail "scaling.sbatch: summary"
import csv, os, sys
rows = list(csv.DictReader(open(os.path.join(sys.argv[1], "summary.csv"))))
got = sorted((r["method"], r["ranks"], r["context"]) for r in rows)
assert got == sorted((m, p, c) for m, p in (("single", "1"), ("tsp", "2"), ("kvr-e", "2")) for c in ("96", "160")), got
assert open(os.path.join(sys.argv[1], "table1.txt")).read().count("|") >= 3
PY

# The world-size check: hide Slurm's and PMIx's environment from each rank, so
# Open MPI starts two independent one-rank copies instead of one 2-rank job.
cat >"$TMP/strip-env" <<'EOF'
#!/bin/sh
for v in $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\|PMIX_[A-Za-z0-9_]*\|OMPI_MCA_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
exec "$@"
EOF
chmod +x "$TMP/strip-env"
if RA_RANK_WRAPPER=$TMP/strip-env submit copies "$J/prefill.sbatch" --model "$TMP/tiny" --context 64 >/dev/null; then
    fail "prefill.sbatch with one-rank copies succeeded"
fi
grep -q "started as 1 MPI rank, but --expect-ranks 2" "$TMP"/copies-*.out ||
    { fail "prefill.sbatch with one-rank copies: no world-size error"; cat "$TMP"/copies-*.out >&2; }
if RA_RANK_WRAPPER=$TMP/strip-env submit copies-tune "$J/tune.sbatch" --model "$TMP/tiny" --contexts 64 >/dev/null; then
    fail "tune.sbatch with one-rank copies succeeded"
fi
grep -q "srun did not start one 2-rank MPI job; nothing searched" "$TMP"/copies-tune-*.out ||
    { fail "tune.sbatch with one-rank copies: no world-size error"; cat "$TMP"/copies-tune-*.out >&2; }

"$J/slurm-local" stop --dir "$D" 2>"$TMP/stop.err" || fail "slurm-local stop"
for f in slurmd slurmctld; do [ ! -e "$D/run/$f.pid" ] || fail "$f still has a pid file after stop"; done
finish
