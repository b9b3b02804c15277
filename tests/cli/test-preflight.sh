#!/usr/bin/env bash
# primus preflight: checks on fixture nodes (healthy 8 x MI300X, a missing
# GPU, a busy device, an inactive RDMA port, a kernel log with planted
# errors), the reports in the run directory, PRIMUS_NODE_NAME, several
# ranks (mpirun, MPMD: two named nodes, one failing) gathered on rank 0,
# the merge of node files, the simulated bad-node search, and calibrate ->
# check --perf; the bad-node search with real group tests (a stand-in
# command: 16 nodes, 2 bad, halves run at once), a hang past --timeout,
# and bad commands, node lists and placeholders.
source "$(dirname "$0")/lib.sh"
FX=${PRIMUS_FIXTURES:-$PRIMUS_SRC/tests/fixtures}
cd "$T" || exit 1
export PRIMUS_PLATFORM_NO_SMI=1
unset NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME
HOST=$(hostname)

json_ok() { python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; }

# --- healthy 8 x MI300X -----------------------------------------------------
export PRIMUS_RUN_DIR=$T/run-ok
PRIMUS_SYSFS_ROOT=$FX/sysfs/mi300x-8 run preflight check --gpu --network --expect_gpus 8
expect_rc "8 x MI300X with --expect_gpus 8 passes" 0
expect_in "count line" "8 accelerators found, 8 expected" "$OUT"
expect_not_in "no FAIL" " FAIL " "$OUT"
expect_in "says where the reports are" "reports: $T/run-ok/{bench_report.txt," "$OUT"
expect_not_in "one node: no '(1 node so far)'" "so far" "$OUT"
for f in preflight.json preflight.md bench_report.txt healthy_nodes.txt failed_nodes.txt "nodes/$HOST.json"; do
  expect_file "report $f" "$T/run-ok/$f"
done
if json_ok "$T/run-ok/preflight.json"; then ok "preflight.json parses"; else bad "preflight.json does not parse"; fi
if json_ok "$T/run-ok/nodes/$HOST.json"; then ok "node json parses"; else bad "node json does not parse"; fi
expect_eq "healthy_nodes.txt" "$(cat "$T/run-ok/healthy_nodes.txt")" "$HOST"
expect_eq "failed_nodes.txt empty" "$(cat "$T/run-ok/failed_nodes.txt")" ""
expect_in "bench_report summary" "Summary: 1 healthy nodes out of 1 total nodes checked" "$(cat "$T/run-ok/bench_report.txt")"

# --- a missing GPU ----------------------------------------------------------
export PRIMUS_RUN_DIR=$T/run-7
PRIMUS_SYSFS_ROOT=$FX/sysfs/mi300x-7 run preflight check --gpu --expect_gpus 8
expect_rc "mi300x-7 fails" 2
expect_in "names the count" "7 accelerators found, 8 expected" "$OUT"
expect_in "remediation shown" "drain the node" "$OUT"
expect_eq "failed_nodes.txt names the host" "$(cat "$T/run-7/failed_nodes.txt")" "$HOST"
expect_in "bench_report node check" "Failed Nodes (Node Check) - 1 nodes" "$(cat "$T/run-7/bench_report.txt")"
expect_in "node json level" '"level":	"FAIL"' "$(cat "$T/run-7/nodes/$HOST.json")"

# --- a busy device: WARN (exit 0) -------------------------------------------
mkdir -p "$T/smi" && cp "$FX/smi/amd-mi300x/amd-smi" "$T/smi/" && chmod +x "$T/smi/amd-smi"
export PRIMUS_RUN_DIR=$T/run-busy
PATH="$T/smi:$PATH" PRIMUS_PLATFORM_NO_SMI=0 PRIMUS_SYSFS_ROOT=$FX/sysfs/mi300x-8 \
  run preflight check --gpu --expect_gpus 8
expect_rc "busy device is a WARN" 0
expect_in "busy device named" "1 of 8 devices in use: 2 (0000:46:00.0)" "$OUT"
expect_in "busy line is WARN" "gpu.busy    WARN" "$OUT"

# --- an inactive RDMA port --------------------------------------------------
export PRIMUS_RUN_DIR=$T/run-rdma
PRIMUS_SYSFS_ROOT=$FX/sysfs/cpu-rdma-down run preflight check --network
expect_rc "inactive RDMA port fails" 2
expect_in "port named" "mlx5_1/1 (1: DOWN)" "$OUT"
expect_in "bench_report network check" "Failed Nodes (Network Check) - 1 nodes" "$(cat "$T/run-rdma/bench_report.txt")"
NCCL_SOCKET_IFNAME=lo PRIMUS_SYSFS_ROOT=$FX/sysfs/cpu-net-ok run preflight check --network
expect_rc "NCCL_SOCKET_IFNAME=lo fails" 2
expect_in "loopback named" "NCCL_SOCKET_IFNAME=lo selects only the loopback interface" "$OUT"
NCCL_SOCKET_IFNAME=eth0 PRIMUS_SYSFS_ROOT=$FX/sysfs/cpu-net-ok run preflight check --network
expect_rc "healthy network passes" 0

# --- kernel log ---------------------------------------------------------------
export PRIMUS_RUN_DIR=$T/run-klog
run preflight check --cpu --kernel_log "$FX/preflight/kernel.log"
expect_rc "planted kernel errors fail" 2
for w in "gpu-reset x3" "gpu-ecc x1" "gpu-xid x1" "mce x1" "lockup x1" "link-flap x3" "nvme x2" "oom-kill x1"; do
  expect_in "kernel log: $w" "$w" "$OUT"
done
run preflight check --cpu --kernel_log "$FX/preflight/kernel-clean.log"
expect_rc "clean kernel log passes" 0
printf 'FAIL\tx\tone\ty\n' > "$T/bad.tsv"
run preflight check --cpu --kernel_log "$FX/preflight/kernel-clean.log" --patterns "$T/bad.tsv"
expect_rc "malformed pattern table" 2
expect_in "pattern table error names the line" "bad.tsv:1: min_count" "$ERR"

# --- the default selection on a CPU node -------------------------------------
export PRIMUS_RUN_DIR=$T/run-default
run preflight check --expect_gpus 0 --kernel_log "$FX/preflight/kernel-clean.log" --workspace "$T"
expect_rc "cpu node, expect 0, default checks" 0
for id in host.os host.memlock cpu.model gpu.count net.interfaces io.disk_free kernel.log sw.mpi sw.libs; do
  expect_in "default runs $id" "$id" "$OUT"
done
expect_not_in "default has no perf" "perf." "$OUT"
run preflight check --threshold 2
expect_rc "bad threshold" 2
expect_in "threshold explained" "--threshold: expected a fraction" "$ERR"

# --- the node name override, and a single process leaves MPI alone -----------
export PRIMUS_RUN_DIR=$T/run-solo
PRIMUS_NODE_NAME=solo01 PRIMUS_SYSFS_ROOT=$FX/sysfs/mi300x-8 run --debug preflight check --gpu --expect_gpus 8
expect_rc "PRIMUS_NODE_NAME, one process" 0
expect_in "the node is named after PRIMUS_NODE_NAME" "preflight on solo01 (platform MI300X)" "$OUT"
expect_file "node file under that name" "$T/run-solo/nodes/solo01.json"
expect_not_in "one process does not initialise MPI" "MPI initialised" "$ERR"
PRIMUS_NODE_NAME=bad/name run preflight check --gpu
expect_rc "an invalid PRIMUS_NODE_NAME" 2
expect_in "the error names the variable" 'PRIMUS_NODE_NAME="bad/name": expected a host name' "$ERR"

# --- several ranks: one check per node, gathered on rank 0 --------------------
# Two "nodes" on this host (PRIMUS_NODE_NAME), started as primus starts its
# ranks (mpirun ... env PRIMUS_LAUNCHED=1 primus direct -- TASK), MPMD: nodeA
# healthy, nodeB with a GPU missing. Rank 1 gets a run directory of its own,
# which must stay free of preflight output: rank 0 alone writes, from what
# it gathered over MPI.
mpiflags=(--oversubscribe)
[[ $(id -u) == 0 ]] && mpiflags+=(--allow-run-as-root)
if command -v mpirun >/dev/null; then
  R0=$T/run-mpmd R1=$T/run-mpmd-rank1
  OUT=$(timeout 120 mpirun "${mpiflags[@]}" --bind-to none \
    -np 1 env PRIMUS_LAUNCHED=1 PRIMUS_RUN_DIR="$R0" PRIMUS_NODE_NAME=nodeA PRIMUS_SYSFS_ROOT="$FX/sysfs/mi300x-8" \
    "$PRIMUS_BIN" --debug direct -- preflight check --gpu --expect_gpus 8 : \
    -np 1 env PRIMUS_LAUNCHED=1 PRIMUS_RUN_DIR="$R1" PRIMUS_NODE_NAME=nodeB PRIMUS_SYSFS_ROOT="$FX/sysfs/mi300x-7" \
    "$PRIMUS_BIN" --debug direct -- preflight check --gpu --expect_gpus 8 2>"$T/.err")
  RC=$?
  ERR=$(cat "$T/.err")
  expect_rc "two nodes, one failing: rank 0 exits 2" 2
  expect_in "the ranks initialised MPI" "MPI initialised: rank 1 of 2" "$ERR"
  expect_in "rank 1 printed its own node" "7 accelerators found, 8 expected" "$OUT"
  expect_in "rank 0 printed the cluster summary" "cluster: 2 nodes checked by 2 ranks: 1 healthy, 1 failed the node check" "$OUT"
  expect_in "the summary names nodeB and why" "nodeB                FAIL   gpu.count: 7 accelerators found, 8 expected  (rank 1)" "$OUT"
  expect_file "rank 0 wrote nodeA's file" "$R0/nodes/nodeA.json"
  expect_file "rank 0 wrote nodeB's file (gathered)" "$R0/nodes/nodeB.json"
  expect_in "nodeB's file holds nodeB's result" '"level":	"FAIL"' "$(cat "$R0/nodes/nodeB.json" 2>/dev/null)"
  expect_eq "failed_nodes.txt names nodeB" "$(cat "$R0/failed_nodes.txt" 2>/dev/null)" nodeB
  expect_eq "healthy_nodes.txt names nodeA" "$(cat "$R0/healthy_nodes.txt" 2>/dev/null)" nodeA
  BR=$(cat "$R0/bench_report.txt" 2>/dev/null)
  expect_in "bench_report: nodeB failed the node check" "Failed Nodes (Node Check) - 1 nodes" "$BR"
  expect_in "bench_report: nodeB's line" "nodeB (" "$BR"
  expect_in "bench_report: summary" "Summary: 1 healthy nodes out of 2 total nodes checked" "$BR"
  n=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["nodes"]), d["failed_nodes"])' "$R0/preflight.json" 2>&1)
  expect_eq "preflight.json: two nodes, nodeB failed" "$n" "2 ['nodeB']"
  expect_file "preflight.md" "$R0/preflight.md"
  left=$(cd "$R1" 2>/dev/null && ls -d nodes preflight.json preflight.md bench_report.txt healthy_nodes.txt failed_nodes.txt 2>/dev/null)
  expect_eq "rank 1 wrote no preflight output into its run directory" "$left" ""

  # A rank that cannot check its node (an invalid name) still joins the
  # gather: rank 0 writes the others and names it; nobody hangs.
  R2=$T/run-mpmd-bad
  OUT=$(timeout 120 mpirun "${mpiflags[@]}" --bind-to none \
    -np 1 env PRIMUS_LAUNCHED=1 PRIMUS_RUN_DIR="$R2" PRIMUS_NODE_NAME=nodeA PRIMUS_SYSFS_ROOT="$FX/sysfs/mi300x-8" \
    "$PRIMUS_BIN" direct -- preflight check --gpu : \
    -np 1 env PRIMUS_LAUNCHED=1 PRIMUS_RUN_DIR="$R2" PRIMUS_NODE_NAME=bad/name \
    "$PRIMUS_BIN" direct -- preflight check --gpu 2>"$T/.err")
  RC=$?
  ERR=$(cat "$T/.err")
  if [[ $RC != 0 && $RC != 124 ]]; then ok "a rank that could not check: non-zero exit ($RC), no hang"; else bad "a rank that could not check: exit $RC"; fi
  expect_in "rank 0 names the rank and why" '1 rank could not check its node: rank 1: PRIMUS_NODE_NAME="bad/name"' "$ERR"
  expect_in "the summary lists it" "ERROR  rank 1 could not check it" "$OUT"
  expect_file "the other node was still written" "$R2/nodes/nodeA.json"

  # Two ranks on one node: one check, one node file.
  export PRIMUS_RUN_DIR=$T/run-np2
  PRIMUS_SYSFS_ROOT=$FX/sysfs/mi300x-8 run direct --nproc 2 -- preflight check --gpu --expect_gpus 8
  expect_rc "two ranks on one node" 0
  expect_in "rank 1 leaves the node to rank 0" "rank 1 of 2 shares this node with rank 0, which checks it" "$OUT"
  expect_eq "the node's checks ran once" "$(grep -c '8 accelerators found, 8 expected' <<<"$OUT")" 1
  expect_in "one node, two ranks" "cluster: 1 node checked by 2 ranks: 1 healthy" "$OUT"
  expect_eq "one node file" "$(ls "$T/run-np2/nodes" 2>/dev/null)" "$HOST.json"
else
  bad "several ranks: mpirun is missing (Debian: openmpi-bin)"
fi

# --- merge of node files ------------------------------------------------------
mkdir -p "$T/merge/nodes"
node() { # HOST LEVEL CATEGORY ID
  cat > "$T/merge/nodes/$1.json" <<J
{"version": 1, "host": "$1", "addr": "10.0.0.${1#n}", "platform": "MI300X", "level": "$2",
 "results": [{"id": "host.os", "category": "host", "level": "OK", "message": "ok", "hint": ""},
             {"id": "$4", "category": "$3", "level": "$2", "message": "$4 says $2", "hint": "fix it"}]}
J
}
node n1 OK gpu gpu.count
node n2 FAIL gpu gpu.count
node n3 FAIL network net.rdma
node n4 WARN gpu gpu.busy
unset PRIMUS_RUN_DIR
run preflight report "$T/merge"
expect_rc "report with failed nodes" 2
expect_eq "merged failed_nodes.txt" "$(cat "$T/merge/failed_nodes.txt")" "$(printf 'n2\nn3')"
expect_eq "merged healthy_nodes.txt" "$(cat "$T/merge/healthy_nodes.txt")" "$(printf 'n1\nn4')"
BR=$(cat "$T/merge/bench_report.txt")
expect_in "merged node check" "Failed Nodes (Node Check) - 1 nodes" "$BR"
expect_in "merged node line" "  n2 (10.0.0.2): gpu.count: gpu.count says FAIL" "$BR"
expect_in "merged network check" "Failed Nodes (Network Check) - 1 nodes" "$BR"
expect_in "merged healthy" "Healthy Nodes (Passed All Checks) - 2 nodes" "$BR"
expect_in "merged summary" "Summary: 2 healthy nodes out of 4 total nodes checked" "$BR"
expect_in "report printed" "PrimusBench Node Check Report" "$OUT"
if json_ok "$T/merge/preflight.json"; then ok "merged preflight.json parses"; else bad "merged preflight.json does not parse"; fi
n=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["nodes"]), d["summary"]["healthy"])' "$T/merge/preflight.json")
expect_eq "merged json nodes and healthy" "$n" "4 2"
rm "$T/merge/nodes/n2.json" "$T/merge/nodes/n3.json"
run preflight report "$T/merge"
expect_rc "report of healthy nodes" 0
run preflight report "$T/nowhere"
expect_rc "report without node files" 2

# --- bisect (simulated) -------------------------------------------------------
NODES=$(printf 'n%02d,' $(seq 1 16)); NODES=${NODES%,}
for seed in 1 2 3; do
  run preflight bisect --nodes "$NODES" --simulate_bad n04,n13 --rounds 3 --seed $seed
  expect_rc "bisect seed $seed finds bad nodes" 2
  expect_in "bisect seed $seed names exactly n04 n13" "bad nodes (2): n04 n13" "$OUT"
done
printf 'n%02d\n' $(seq 1 16) > "$T/nodes.txt"
run preflight bisect --nodes "$T/nodes.txt" --simulate_bad n16 --rounds 2
expect_in "bisect from a file" "bad nodes (1): n16" "$OUT"
run preflight bisect --nodes "$T/nodes.txt" --simulate_bad= --rounds 2
expect_rc "bisect with no bad node" 0
expect_in "bisect none" "bad nodes (0): none" "$OUT"
run preflight bisect --nodes "$T/nodes.txt"
expect_rc "bisect without a group test" 2
expect_in "bisect asks for a command or a simulation" 'no group test: give a command after "--" with {nodes}' "$ERR"
run preflight bisect --nodes "$T/nodes.txt" --simulate_bad n99
expect_rc "bisect unknown node" 2

# --- bisect with real group tests ------------------------------------------------
# A stand-in group test: fails when its group holds a node listed in the
# bad-node file, checks {n} against the group, and logs its start and end
# (pid, time) so the halves can be seen running at once.
cat >"$T/group-test.sh" <<'SH'
#!/bin/bash
# group-test.sh NODES N LOG BADFILE: exit 1 when NODES holds a bad node.
nodes=$1 n=$2 log=$3 bad=$4 rc=0
echo "start $$ $(date +%s.%N) $n $nodes" >>"$log"
sleep 0.25
IFS=, read -ra ns <<<"$nodes"
[[ ${#ns[@]} == "$n" ]] || { echo "{n} is $n, the group has ${#ns[@]}"; rc=3; }
for x in "${ns[@]}"; do grep -qx -- "$x" "$bad" && rc=1; done
echo "group $nodes: exit $rc"
echo "end $$ $(date +%s.%N) $n $nodes" >>"$log"
exit $rc
SH
chmod +x "$T/group-test.sh"
printf 'n04\nn13\n' >"$T/bad-nodes.txt"
export PRIMUS_RUN_DIR=$T/run-bisect
run preflight bisect --nodes "$NODES" --rounds 3 --seed 5 --timeout 30 -- \
  "$T/group-test.sh" {nodes} {n} "$T/gt.log" "$T/bad-nodes.txt"
expect_rc "real bisect over 16 nodes finds bad nodes" 2
expect_in "exactly n04 and n13" "bad nodes (2): n04 n13 (accused by every round)" "$OUT"
expect_in "progress: the whole group fails first" "test   1  FAIL (exit 1)" "$OUT"
expect_in "progress: a passing half, with seconds and nodes" "PASS  0." "$OUT"
expect_in "each round's accused nodes" "round 3 accuses" "$OUT"
expect_eq "failed_nodes.txt" "$(cat "$T/run-bisect/failed_nodes.txt" 2>/dev/null)" "$(printf 'n04\nn13')"
expect_eq "healthy_nodes.txt: the other 14" "$(grep -c . "$T/run-bisect/healthy_nodes.txt" 2>/dev/null)" 14
ntests=$(sed -n 's/^\([0-9]*\) group tests in .*/\1/p' <<<"$OUT")
expect_eq "every group test ran the command once" "$(grep -c '^start' "$T/gt.log" 2>/dev/null)" "${ntests:-?}"
expect_in "a group test's output is in its log" "exit 1" "$(cat "$T"/run-bisect/logs/bisect/test-001.log 2>/dev/null)"
if msg=$(python3 - "$T/gt.log" <<'PY' 2>&1
import sys
runs = {}
for line in open(sys.argv[1]):
    kind, pid, t, n, nodes = line.split()
    runs.setdefault(pid, {})[kind] = float(t)
    runs[pid]["n"], runs[pid]["nodes"] = int(n), nodes
for r in runs.values():
    assert "start" in r and "end" in r, r
    assert r["n"] == len(r["nodes"].split(",")), r
# The two halves of round 1's whole group (8 nodes each) ran at once.
halves = sorted((r for r in runs.values() if r["n"] == 8), key=lambda r: r["start"])[:2]
assert len(halves) == 2, "no two 8-node halves"
a, b = halves
assert set(a["nodes"].split(",")).isdisjoint(b["nodes"].split(",")), (a, b)
assert a["start"] < b["end"] and b["start"] < a["end"], f"halves did not overlap: {a} {b}"
print(f"{b['start'] - a['start']:.3f}")
PY
); then ok "the two halves of a failing group ran at the same time (starts $msg s apart)"; else bad "halves in parallel: $msg"; fi

# A hang is a failure: past --timeout the test's whole process group ends.
cat >"$T/hang.sh" <<'SH'
#!/bin/bash
# hang.sh NODES PIDFILE: never ends; leaves a child in its process group.
sleep 300 &
echo $! >>"$2"
sleep 300
SH
chmod +x "$T/hang.sh"
run preflight bisect --nodes h1,h2 --rounds 1 --timeout 1 -- "$T/hang.sh" {nodes} "$T/hang.pids"
expect_rc "hanging group tests fail" 2
expect_in "the hang is reported as a timeout" "FAIL (timed out)  1." "$OUT"
expect_in "every hanging node accused" "bad nodes (2): h1 h2" "$OUT"
left=""
# (A killed child whose parent died first may stay a zombie here, where
# PID 1 does not reap: it counts as ended.)
for p in $(cat "$T/hang.pids" 2>/dev/null); do
  st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)
  [[ -n $st && $st != Z ]] && left+="$p "
done
expect_eq "the hung tests' children were killed with their group ($(wc -l <"$T/hang.pids" 2>/dev/null) started)" "$left" ""

# Bad commands, node lists and placeholders.
run preflight bisect --nodes n1,n2 -- no-such-command-xyz {nodes}
expect_rc "unknown command" 2
expect_in "unknown command named" 'command "no-such-command-xyz" is not found in PATH' "$ERR"
run preflight bisect --nodes n1,n2 -- true --nodelist {node}
expect_rc "unknown placeholder" 2
expect_in "unknown placeholder named" 'argument 3 "{node}": unknown placeholder {node}' "$ERR"
run preflight bisect --nodes n1,n2 -- true n1
expect_rc "no {nodes}" 2
expect_in "no {nodes} explained" "the command never names the group" "$ERR"
: >"$T/empty.txt"
run preflight bisect --nodefile "$T/empty.txt" -- true {nodes}
expect_rc "empty node file" 2
expect_in "empty node list named" "--nodefile $T/empty.txt: no node names" "$ERR"
run preflight bisect --nodes n1,n2,n1 -- true {nodes}
expect_rc "a node twice" 2
expect_in "duplicate named" 'node "n1" is listed twice' "$ERR"
run preflight bisect --nodes n1,n2 --simulate_bad n1 -- true {nodes}
expect_rc "simulation and a command" 2
run preflight bisect --nodefile "$T/nodes.txt" --rounds 1 -- true {nodes}
expect_rc "all groups pass" 0
expect_in "one test when the whole group passes" "1 group tests in" "$OUT"
expect_in "nothing accused" "bad nodes (0): none" "$OUT"
unset PRIMUS_RUN_DIR

# --- calibrate, then check --perf reads it ------------------------------------
export PRIMUS_RUN_DIR=$T/run-cal
run preflight calibrate --quick --workspace "$T"
expect_rc "calibrate" 0
BL=$HOME/.config/primus/baselines/cpu.yaml
expect_in "calibrate says where" "written to $BL" "$OUT"
# Its table lines up: every value ends in the same column.
cols=$(grep '^  [a-z_0-9]* *[0-9.e+-]* ' <<<"$OUT" | awk '{ print index($0, $2) + length($2) }' | sort -u | wc -l)
expect_eq "calibrate's table is aligned" "$cols" 1
expect_file "baseline written" "$BL"
expect_in "baseline has gemm" "gemm_fp32_gflops:" "$(cat "$BL")"
expect_in "baseline header" "# Measured by \`primus preflight calibrate --quick\`" "$(cat "$BL")"
# Scale a baseline by a factor: throughputs times F, latencies (keys
# ending in _us) divided by F.
scale_baseline() {
  python3 - "$1" "$2" "$3" <<'P'
import sys
f = float(sys.argv[3])
out = []
for line in open(sys.argv[1]):
    k, _, v = line.partition(":")
    v = v.split("#")[0].strip()
    if k.strip().endswith("_us") and v not in ("", "null"): line = f"{k}: {float(v) / f}\n"
    elif not line.startswith(("#", "platform")) and v not in ("", "null"): line = f"{k}: {float(v) * f}\n"
    out.append(line)
open(sys.argv[2], "w").writelines(out)
P
}
# A baseline no machine reaches fails (exit 2), latency included.
scale_baseline "$BL" "$T/fast.yaml" 1000
# The user's baseline is the one read and compared. Its figures are scaled
# down 1000-fold first: the suite shares two cores with other tests, and a
# figure measured a minute later (an OpenMP dispatch latency above all) can
# be many times the calibrated one, which is not what this test is about.
scale_baseline "$BL" "$T/slow.yaml" 0.001
cp "$T/slow.yaml" "$BL"
export PRIMUS_RUN_DIR=$T/run-perf
run preflight check --perf --quick --workspace "$T"
expect_rc "check --perf against the user's baseline" 0
expect_in "perf compares with the user baseline" "vs baseline" "$OUT"
expect_in "perf names the file" "[$BL]" "$OUT"
for id in perf.gemm_fp32 perf.triad perf.disk_write perf.disk_read perf.dispatch_omp perf.dispatch_pool; do
  expect_in "perf runs $id" "$id" "$OUT"
done
run preflight check --perf --quick --baseline "$T/fast.yaml" --workspace "$T"
expect_rc "check --perf against an unreachable baseline" 2
expect_in "gemm fails" "perf.gemm_fp32      FAIL" "$OUT"
expect_in "latency fails" "perf.dispatch_omp   FAIL" "$OUT"
run preflight calibrate --quick --workspace "$T" --output "$T/out/cal.yaml"
expect_rc "calibrate --output" 0
expect_file "calibrate --output file" "$T/out/cal.yaml"

run preflight --help
expect_in "help lists subtasks" "calibrate" "$OUT"

finish
