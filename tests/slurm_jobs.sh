#!/bin/sh
# The Slurm batch scripts on a one-node cluster started here (jobs/slurm-local):
# prefill.sbatch runs KV-Runahead on 2 ranks through srun --mpi=pmix; a
# tune.sbatch array of 2 tasks (one context length each) merges into one
# table; scaling.sbatch runs a small study through srun; a job whose ranks
# are started as separate one-rank copies stops with the world-size error.
# A job that cannot launch fails the test within a minute, with the daemons'
# log lines. The daemons are stopped by pid however the test ends.
# Skips without Slurm or root (a failure where the fixtures exist, see lib.sh).
. "$(dirname "$0")/lib.sh"
for p in sbatch slurmctld slurmd munged; do
    command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] ||
        skip "$p not installed (apt-get install --no-install-recommends slurmctld slurmd slurm-client munge)"
done
[ "$(id -u)" -eq 0 ] || skip "a local Slurm cluster needs root (RA_ALLOW_SKIPS=1 to run the rest as a user)"
J=$SRC/jobs
D=$TMP/cluster
# Ports away from a cluster the user may run with the defaults (6817, 6818).
ports=$((26817 + $$ % 500 * 2)),$((26818 + $$ % 500 * 2))
# Stop the daemons on exit and on signals. SIGKILL (ctest's timeout) runs no
# trap: --watch has a detached watcher stop them once this shell has gone, and
# the next start from $D stops leftovers by their pid files anyway.
trap '"$J/slurm-local" stop --dir "$D" >/dev/null 2>&1' EXIT
trap 'exit 1' INT TERM HUP
eval "$("$J/slurm-local" start --dir "$D" --ports "$ports" --watch $$ 2>"$TMP/start.err")" ||
    { fail "slurm-local start: $(tail -2 "$TMP/start.err")"; finish; }
export SLURM_CONF RA_TOP=$SRC RA_BUILD_DIR=$BUILD RA_RESULTS_DIR=$TMP/results
"$BUILD/runahead-synth" --preset tiny --out "$TMP/tiny" >/dev/null 2>&1 || { fail "runahead-synth"; finish; }
cd "$TMP" || exit 1

# What says a job cannot start: Slurm requeues and holds a job whose batch
# step fails to launch (slurmd's step socket path too long, say), so it would
# stay pending for good and `sbatch --wait` would never return.
stuck_job='Restarts=[1-9]|JobState=(REQUEUE[A-Z_]*|BOOT_FAIL|NODE_FAIL|LAUNCH_FAILED|SPECIAL_EXIT) |Reason=[^ ]*(launch_failed|BadConstraints|PartitionConfig|ReqNodeNotAvail|NodeDown|Nodes_required|JobHeld)'
stuck_log='Requeu|[Ll]aunch fail|launch_failed|Unable to .*socket|socket path .* too long|domain socket|slurmstepd failed'

# new_lines slurmctld|slurmd: what that daemon logged since the job was submitted.
new_lines() {
    case $1 in slurmctld) from=$ctld_from ;; *) from=$slurmd_from ;; esac
    tail -n +$((from + 1)) "$D/log/$1.log"
}

# give_up WHY: print the job as Slurm sees it and the daemons' log lines since
# it was submitted, then end the test (the trap stops the cluster).
give_up() {
    echo "FAIL: $1" >&2
    echo "$job_state" | sed -n 's/.*\(JobId=[^ ]*\).*\( JobState=[^ ]* Reason=[^ ]*\).*\( Restarts=[^ ]*\).*/  \1\2\3/p' >&2
    for l in slurmctld slurmd; do
        new_lines $l | grep -E "$stuck_log|fatal" | tail -6 | sed "s/^/  $l: /" >&2
    done
    exit 1
}

# wait_job ID NAME: polls until every task of job ID has ended; returns
# non-zero unless all completed with exit code 0 ($job_exit says how they
# ended). Gives up at once on a requeue or launch failure, after 45 s pending
# with no task running (an array's next task waits for the running one), and
# after 300 s in all.
wait_job() {
    t0=$(date +%s) busy=$(date +%s)
    while :; do
        sleep 0.5
        job_state=$(scontrol -o show job "$1" 2>&1) || give_up "$2: scontrol show job $1 failed"
        if echo "$job_state" | grep -Eq "$stuck_job"; then give_up "$2: job $1 could not launch"; fi
        for l in slurmctld slurmd; do
            new_lines $l | grep -Eq "$stuck_log" &&
                give_up "$2: job $1 could not launch ($l.log)"
        done
        states=$(echo "$job_state" | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p')
        now=$(date +%s)
        case $states in *RUNNING*|*CONFIGURING*|*COMPLETING*) busy=$now ;; esac
        case $states in *PENDING*) [ $((now - busy)) -lt 45 ] || give_up "$2: job $1 pending for 45 s" ;; esac
        [ $((now - t0)) -lt 300 ] || give_up "$2: job $1 not done in 300 s"
        ended=yes
        for s in $states; do
            case $s in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|DEADLINE|PREEMPTED) ;; *) ended=no ;; esac
        done
        [ "$ended" = no ] || break
    done
    job_exit=$(echo "$job_state" | sed -n 's/.* JobState=\([A-Z_]*\) .* ExitCode=\([0-9:]*\).*/\1 \2/p' | sort -u | tr '\n' ' ')
    [ "$(echo "$job_state" | grep -vc 'JobState=COMPLETED .* ExitCode=0:0 ')" -eq 0 ]
}

# run_job NAME SBATCH-ARGS...: submits a 2-task job and waits for it; sets $job
# to its id (an array's own id) and returns as wait_job does.
run_job() {
    name=$1; shift
    ctld_from=$(wc -l <"$D/log/slurmctld.log") slurmd_from=$(wc -l <"$D/log/slurmd.log")
    job_state="" job_exit="sbatch failed"
    job=$(sbatch --parsable --ntasks=2 --ntasks-per-node=2 --overcommit --output="$TMP/$name-%A_%a.out" "$@" \
          2>"$TMP/$name.sbatch.err") || return 1
    wait_job "$job" "$name"
}

run_job prefill "$J/prefill.sbatch" --model "$TMP/tiny" --context 160 --method kvr --repeat 2 ||
    { fail "prefill.sbatch: $job_exit($(cat "$TMP"/prefill-*.out "$TMP/prefill.sbatch.err" 2>/dev/null | tail -3))"; }
R=$TMP/results/prefill-$job
python3 - "$R/report.json" <<'PY' || fail "prefill.sbatch: report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ranks"] == 2 and r["method"] == "kvr" and r["context_length"] == 160, r
assert r["ttft_s"]["median"] > 0 and len(r["ttft_s"]["all"]) == 2
assert sum(x["bytes_sent"] for x in r["per_rank"]) > 0
PY
[ "$(wc -w <"$R/output.txt")" -eq 16 ] || fail "prefill.sbatch: expected 16 generated ids in $R/output.txt"

run_job tune --array=0-1 "$J/tune.sbatch" --model "$TMP/tiny" --contexts 96,160 \
     -- --repeats 1 --points 3 --min-stride 16 --no-baselines ||
    { fail "tune.sbatch: $job_exit($(cat "$TMP"/tune-*.out "$TMP/tune.sbatch.err" 2>/dev/null | tail -3))"; }
T=$TMP/results/tune-$job/table.h5
"$BUILD/runahead-table" validate "$T" >/dev/null || fail "tune.sbatch: $T does not validate"
"$BUILD/runahead-table" show "$T" >"$TMP/show.txt" 2>&1 || fail "tune.sbatch: cannot show $T"
grep -q "/p2: 2 entries" "$TMP/show.txt" || { fail "tune.sbatch: the merged table lacks an array task's entry"; cat "$TMP/show.txt" >&2; }
for c in 96 160; do grep -Eq "^ +$c " "$TMP/show.txt" || fail "tune.sbatch: no entry at $c tokens"; done
[ -s "$TMP/results/tune-$job/parts/task-0.h5" ] && [ -s "$TMP/results/tune-$job/parts/task-1.h5" ] ||
    fail "tune.sbatch: the tasks' own tables are missing"

# A small scaling study inside one allocation: every run through srun.
run_job scaling "$J/scaling.sbatch" --model "$TMP/tiny" --contexts 96,160 --methods single,tsp,kvr-e --repeat 1 --no-plots ||
    { fail "scaling.sbatch: $job_exit($(cat "$TMP"/scaling-*.out "$TMP/scaling.sbatch.err" 2>/dev/null | tail -3))"; }
python3 - "$TMP/results/scaling-$job" <<'PY' || fail "scaling.sbatch: summary"
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
if RA_RANK_WRAPPER=$TMP/strip-env run_job copies "$J/prefill.sbatch" --model "$TMP/tiny" --context 64; then
    fail "prefill.sbatch with one-rank copies succeeded"
fi
grep -q "started as 1 MPI rank, but --expect-ranks 2" "$TMP"/copies-*.out ||
    { fail "prefill.sbatch with one-rank copies: no world-size error"; cat "$TMP"/copies-*.out >&2; }
if RA_RANK_WRAPPER=$TMP/strip-env run_job copies-tune "$J/tune.sbatch" --model "$TMP/tiny" --contexts 64; then
    fail "tune.sbatch with one-rank copies succeeded"
fi
grep -q "srun did not start one 2-rank MPI job; nothing searched" "$TMP"/copies-tune-*.out ||
    { fail "tune.sbatch with one-rank copies: no world-size error"; cat "$TMP"/copies-tune-*.out >&2; }

# stop leaves no daemon and no runtime directory behind.
"$J/slurm-local" stop --dir "$D" 2>"$TMP/stop.err" || fail "slurm-local stop: $(tail -2 "$TMP/stop.err")"
"$J/slurm-local" status --dir "$D" >"$TMP/status.txt" 2>&1
! grep -E '^slurm(ctld|d): running' "$TMP/status.txt" || fail "slurm-local stop left daemons running"
rt=$(sed -n 's/^runtime: //p' "$TMP/status.txt")
[ -n "$rt" ] && [ ! -e "$rt" ] || fail "slurm-local stop left the runtime directory '$rt'"
finish
