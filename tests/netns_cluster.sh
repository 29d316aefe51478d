#!/bin/sh
# Ranks on separate hosts (jobs/netns-cluster: network namespaces joined by shaped veth links,
# Open MPI over TCP between them) compute what one host does. test_chain on 2, 3 and 4 hosts, and
# on 2 hosts with 2 ranks each (shared memory inside a host, TCP between), checks every KVR route,
# TSP and every partition against its own single-process run (logits, KV cache, 16 tokens) and the
# bytes counted by PMPI against the runtime's counts and the traffic formulas. runahead on 2 and 4
# hosts prints the tokens and moves, rank by rank, the bytes of the same run on one host, and those
# bytes really cross the links: the bridge counts at least as many on each receiving host's port.
# The cluster's hosts are distinct (hostnames, --slots); down ends a killed run's processes and
# removes the namespaces, and may run again.
# About 60 s on 2 busy cores (and under AddressSanitizer).
. "$(dirname "$0")/lib.sh"
netns_cluster tnc 4 --gbps 10
chain_models

# The hosts: one rank per host, or two with --slots 2.
got=$($NC run -np 4 hostname 2>"$TMP/err" | sort | tr '\n' ' ')
[ "$got" = "tnc-h0 tnc-h1 tnc-h2 tnc-h3 " ] || { fail "4 ranks on 4 hosts ran on: $got"; cat "$TMP/err" >&2; }
got=$($NC run --slots 2 --hosts 2 -np 4 hostname 2>"$TMP/err" | sort | tr '\n' ' ')
[ "$got" = "tnc-h0 tnc-h0 tnc-h1 tnc-h1 " ] || { fail "--slots 2 --hosts 2 ran on: $got"; cat "$TMP/err" >&2; }

# Under AddressSanitizer (jobs/sanitize), for time, test_chain runs on 2 hosts and 2 x 2 only, on
# the synthetic model only (3.5 minutes otherwise; chain.sh runs both models on one host there).
hosts="2 3 4"
if sanitized "$BUILD/tests/test_chain"; then
    hosts=2 models=$TMP/tiny
fi
for p in $hosts; do
    timeout 300 $NC run --hosts $p -np $p "$BUILD/tests/test_chain" $models >"$TMP/chain$p.out" 2>&1 ||
        { tail -20 "$TMP/chain$p.out" >&2; fail "test_chain on $p hosts"; }
done
timeout 300 $NC run --slots 2 --hosts 2 -np 4 "$BUILD/tests/test_chain" $models >"$TMP/chain2x2.out" 2>&1 ||
    { tail -20 "$TMP/chain2x2.out" >&2; fail "test_chain on 2 hosts x 2 ranks"; }

# runahead: tokens and per-rank bytes equal to one host's, and the bridge carries them.
python3 -c "print(' '.join(str(i % 500 + 3) for i in range(600)))" >"$TMP/p.ids"
RA="$BUILD/runahead"
ARGS="--model $TMP/tiny --prompt-ids-file $TMP/p.ids --generate 8 --output ids --threads 1"
# port_tx HOST: bytes the bridge has sent to HOST (what HOST received).
port_tx() { ip -n tnc-br -s -j link show "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'; }
# rank_bytes FILE: each rank's bytes sent and received, from a --report.
rank_bytes() {
    python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["per_rank"]: print(r["rank"], int(r["bytes_sent"]), int(r["bytes_recv"]))' "$1"
}
want=$("$RA" $ARGS 2>/dev/null) || fail "single-process run"
for case in "2 kvr --route chain" "2 tsp" "4 kvr --route relay" "4 kvr --route direct" "4 tsp"; do
    set -- $case
    p=$1; shift
    tag=$(echo "$p $*" | tr ' ' '-')
    one=$(timeout 120 $MPIEXEC -np $p $MPIEXEC_FLAGS "$RA" $ARGS --method "$@" --partition even \
        --report "$TMP/one-$tag.json" 2>"$TMP/err") || { fail "$tag on one host: $(tail -1 "$TMP/err")"; continue; }
    before=$(port_tx h$((p - 1)))
    got=$(timeout 120 $NC run --hosts $p -np $p "$RA" $ARGS --method "$@" --partition even \
        --report "$TMP/net-$tag.json" 2>"$TMP/err") || { fail "$tag on $p hosts: $(tail -1 "$TMP/err")"; continue; }
    after=$(port_tx h$((p - 1)))
    [ "$one" = "$want" ] || fail "$tag on one host: tokens differ from one process"
    [ "$got" = "$want" ] || fail "$tag on $p hosts: tokens '$got', want '$want'"
    [ "$(rank_bytes "$TMP/net-$tag.json")" = "$(rank_bytes "$TMP/one-$tag.json")" ] ||
        fail "$tag: bytes per rank on $p hosts ($(rank_bytes "$TMP/net-$tag.json" | tr '\n' ';')) differ from one host's ($(rank_bytes "$TMP/one-$tag.json" | tr '\n' ';'))"
    recv=$(rank_bytes "$TMP/net-$tag.json" | awk -v r=$((p - 1)) '$1 == r { print $3 }')
    [ -n "$recv" ] && [ "$recv" -gt 0 ] && [ $((after - before)) -ge "$recv" ] ||
        fail "$tag: the last host received $((after - before)) bytes over its link, less than its $recv KV bytes"
done

$NC status >"$TMP/status" 2>&1 || fail "status"
grep -q "^tnc-h3 .* link UP gbps 10 " "$TMP/status" || { fail "status does not show h3's shaped link"; cat "$TMP/status" >&2; }
# A killed `run` (SIGKILL: no trap runs) leaves mpirun and its ranks on the hosts; down ends them.
$NC run -np 2 sleep 300 >/dev/null 2>&1 &
job=$!
i=0
while [ -z "$($NC pids h1)" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
left=$($NC pids h0; $NC pids h1)
kill -KILL $job
wait $job 2>/dev/null
[ -n "$left" ] || fail "the sleeping job never reached h1"
$NC down || fail "down"
# (A zombie is gone: its parent, the killed script, cannot reap it, and init may take its time.)
for pid in $left; do
    st=$(sed 's/.*) \(.\).*/\1/' "/proc/$pid/stat" 2>/dev/null) || continue
    [ "$st" = Z ] || fail "process $pid ($(cat /proc/$pid/comm 2>/dev/null), state $st) outlived down"
done
! ip netns list | grep -q '^tnc-' || fail "namespaces left after down: $(ip netns list | grep '^tnc-')"
[ ! -e /etc/netns/tnc-h0 ] || fail "/etc/netns/tnc-h0 left after down"
$NC down || fail "a second down failed"
# Refusals: one line each.
expect_error "^netns-cluster: cluster tnc is not up" $NC run -np 1 true
expect_error "^netns-cluster: up: '0' is not a number of hosts in 1..64$" $NC up 0
expect_error "^netns-cluster: unknown command 'start'" $NC start
expect_error "^netns-cluster: --gbps: 'fast' is not a non-negative number$" $NC up 2 --gbps fast
$NC --help | grep -q "jobs/netns-cluster up N" || fail "--help"
finish
