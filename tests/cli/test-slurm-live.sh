#!/usr/bin/env bash
# test-slurm-live.sh - the slurm runtime against real daemons: a private
# three-node cluster on this host (scripts/slurm-local.sh with
# SLURM_LOCAL_NODES=3: munge, slurmctld, one slurmd per node on 127.0.0.1)
# in this test's temp folder, brought down by the EXIT trap even after a
# failure.
#   - `primus slurm srun -N1 -n2 -- train pretrain` trains with 2
#     data-parallel ranks that srun starts with --mpi=pmix (the cluster's
#     MpiDefault is none, so primus must ask) and ends with the same bytes
#     and losses as `primus direct --nproc 2` (mpirun);
#   - `primus slurm sbatch -p low -n 2 -- train pretrain` writes sbatch.sh
#     into the run directory, submits, prints the job id; `primus slurm
#     status` follows the job to COMPLETED (bounded poll), its log and the
#     rank logs end up in the run directory, and the weights match again;
#   - `primus slurm srun -N 3 -- preflight check --host`: one rank per node
#     (srun --mpi=pmix), rank 0 gathers the three results over MPI and
#     writes nodes/node{1,2,3}.json and the report;
#   - `primus preflight bisect` whose group test is a real `srun -N {n}
#     --nodelist {nodes}` (a stand-in step that fails on a node listed in
#     a file) finds that node;
#   - slurm-local.sh status/down: down stops every daemon and is idempotent.
# Skips (exit 0, "SKIP: ..." with the daemons' log tails) only when the
# cluster cannot start here; PRIMUS_REQUIRE_SLURM=1 turns that into a
# failure.
source "$(dirname "$0")/lib.sh"
slurm_test_setup
PY=/usr/bin/python3
SL=$PRIMUS_SRC/scripts/slurm-local.sh
C=$T/slurm
trap '"$SL" down "$C" >/dev/null 2>&1; _cleanup' EXIT
trap 'exit 130' INT TERM

start=$SECONDS
UP=$(SLURM_LOCAL_NODES=3 "$SL" up "$C" 2>&1)
UP_RC=$?
if [[ $UP_RC != 0 ]]; then
  echo "SKIP: the local Slurm cluster did not start (scripts/slurm-local.sh up: exit $UP_RC):"
  sed 's/^/  /' <<<"$UP" | tail -n 60
  if [[ -n ${PRIMUS_REQUIRE_SLURM:-} ]]; then bad "PRIMUS_REQUIRE_SLURM is set: a live cluster is required"; finish; exit; fi
  exit 0
fi
eval "$(grep '^export SLURM_CONF=' <<<"$UP")"
expect_eq "slurm-local.sh up prints SLURM_CONF" "${SLURM_CONF:-}" "$C/etc/slurm.conf"
ok "cluster up in $((SECONDS - start)) s"
ST=$("$SL" status "$C" 2>&1)
expect_in "status: slurmctld running" "slurmctld: running" "$ST"
expect_in "status: node idle in partition low" "node1 low* idle" "$ST"
expect_in "status: partition high" "node1 high idle" "$ST"
expect_in "status: node3 idle (three slurmds on one host)" "node3 low* idle" "$ST"
LISTEN=$(ss -Hltnp 2>/dev/null | grep -E '"(slurmctld|slurmd|munged)"' || true)
if [[ -n $LISTEN ]] && ! grep -qvE '127\.0\.0\.1:' <<<"$LISTEN"; then ok "daemons listen on 127.0.0.1 only"
else bad "daemon sockets: ${LISTEN:-none seen}"; fi

# trun CMD...: run, but a job that never starts (or hangs) ends after 120 s.
trun() {
  OUT=$(timeout -k 5 120 "$PRIMUS_BIN" "$@" 2>"$T/.err" </dev/null)
  RC=$?
  ERR=$(cat "$T/.err")
}

small_corpus corpus.txt
exp() { # NAME [KEY: VALUE...]: the tiny model, a checkpoint at the last step
  local n=$1
  shift
  tiny_exp "$n" "save: $T/ck-$n" "save_interval: 8" "$@"
}
final() { echo "$T/ck-$1/iter_0000008/model.safetensors"; }
# same_weights NAME A B: byte-identical, or within 1e-6 (relative, worst tensor).
same_weights() {
  if cmp -s "$(final "$2")" "$(final "$3")"; then ok "$1: weights byte-identical to mpirun's"; return; fi
  local w
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$2")" "$(final "$3")" 2>&1)
  if [[ $w =~ ^[0-9][0-9.e+-]*$ ]] && awk -v a="$w" 'BEGIN { exit !(a + 0 <= 1e-6) }'; then
    ok "$1: weights within 1e-6 of mpirun's ($w)"
  else
    bad "$1: weights differ from mpirun's: $w"
  fi
}

# ---- the reference: 2 ranks through mpirun ----
exp mp
trun direct --nproc 2 -- train pretrain --config mp.yaml
expect_rc "mpirun reference, 2 ranks" 0
expect_eq "mpirun reference: 8 steps" "$(run_losses mp | wc -l)" 8

# ---- srun: 2 ranks started by srun --mpi=pmix ----
exp sr
trun slurm srun -N1 -n2 -- train pretrain --config sr.yaml
expect_rc "slurm srun -N1 -n2" 0
expect_in "srun asked for PMIx" "srun -N1 -n2 --mpi=pmix " "$ERR"
expect_in "srun ranks are data parallel" "data parallel: 2 ranks" "$ERR"
expect_in "rank 1 of 2 ran" "[rank 1/2 " "$ERR"
SR=$(newest_run sr)
expect_in "ran inside a Slurm job" "SLURM_JOB_ID=" "$(cat "$SR/env/env_dump.txt" 2>/dev/null)"
expect_eq "srun: same losses as mpirun" "$(run_losses sr | tr '\n' ' ')" "$(run_losses mp | tr '\n' ' ')"
expect_eq "srun: 8 steps" "$(run_losses sr | wc -l)" 8
same_weights "srun" mp sr

# ---- sbatch: the batch script in the run directory, status, logs ----
exp sb
trun slurm sbatch -p low -n 2 -- train pretrain --config sb.yaml
expect_rc "slurm sbatch -p low -n 2" 0
JOB=$(sed -n 's/^Submitted batch job \([0-9][0-9]*\)$/\1/p' <<<"$OUT")
if [[ -n $JOB ]]; then ok "sbatch printed job id $JOB"; else bad "no job id in: $OUT"; fi
SB=$(newest_run sb)
expect_in "sbatch printed the run directory" "run directory: $SB" "$OUT"
expect_eq "slurm_job_id recorded" "$(cat "$SB/slurm_job_id" 2>/dev/null)" "$JOB"
SCRIPT=$(cat "$SB/sbatch.sh" 2>/dev/null)
expect_in "batch script in the run directory" "#SBATCH -p low" "$SCRIPT"
expect_in "batch script's srun asks for PMIx" "srun --mpi=pmix " "$SCRIPT"
expect_in "batch output goes to the run directory" "#SBATCH --output=$SB/logs/slurm-%j.out" "$SCRIPT"
expect_in "a requeued job appends to its output" "#SBATCH --open-mode=append" "$SCRIPT"
expect_in "the step runs in the background, signals are passed on" 'trap "prm_forward $prm_sig"' "$SCRIPT"

trun slurm status "${JOB:-0}"
expect_rc "status right after submit" 0
expect_in "status names a state" "job $JOB: " "$OUT"
# A short job: the scheduler runs every 2 s; allow 60 s before failing.
STATE=""
for ((i = 0; i < 300; i++)); do
  trun slurm status "${JOB:-0}"
  STATE=$(sed -n "s/^job $JOB: //p" <<<"$OUT")
  case $STATE in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.2
done
expect_eq "sbatch job completed (after $i polls)" "$STATE" COMPLETED
expect_in "status: partition" "partition: low" "$OUT"
expect_in "status: exit code" "exit code: 0:0" "$OUT"
expect_in "status: run directory" "run directory: $SB" "$OUT"
expect_in "status: log" "log: $SB/logs/slurm-$JOB.out" "$OUT"
trun slurm status "$SB"
expect_rc "status by run directory" 0
expect_in "status by run directory names the job" "job $JOB: COMPLETED" "$OUT"
SLOG=$(cat "$SB/logs/slurm-$JOB.out" 2>/dev/null)
expect_in "job log in the run directory" "trained 8 steps" "$SLOG"
expect_file "rank 0 log in the run directory" "$SB/logs/rank-0.log"
expect_file "rank 1 log in the run directory" "$SB/logs/rank-1.log"
expect_eq "sbatch: same losses as mpirun" "$(run_losses sb | tr '\n' ' ')" "$(run_losses mp | tr '\n' ' ')"
same_weights "sbatch" mp sb

# ---- preflight: one rank per node, gathered on rank 0 ----
trun slurm srun -N 3 -- preflight check --host
if [[ $RC == 0 || $RC == 2 ]]; then ok "slurm srun -N 3 -- preflight check (exit $RC)"; else bad "preflight over 3 nodes: exit $RC: $ERR"; fi
expect_in "srun asked for PMIx" "srun -N 3 --mpi=pmix " "$ERR"
expect_in "rank 0 printed the cluster summary" "cluster: 3 nodes checked by 3 ranks" "$OUT"
PF=$(sed -n 's|^reports: \(.*\)/{bench_report.*|\1|p' <<<"$OUT")
for n in node1 node2 node3; do expect_file "rank 0 wrote $n's result (Slurm's node name)" "$PF/nodes/$n.json"; done
expect_eq "every node in healthy or failed_nodes.txt" \
  "$(cat "$PF/healthy_nodes.txt" "$PF/failed_nodes.txt" 2>/dev/null | sort | tr '\n' ' ')" "node1 node2 node3 "
expect_in "bench_report counts 3 nodes" "out of 3 total nodes checked" "$(cat "$PF/bench_report.txt" 2>/dev/null)"

# ---- bisect: each group test a real srun over {nodes} ----
cat >"$T/node-test.sh" <<'SH'
#!/bin/bash
# node-test.sh BADFILE LOG: one task of a group's step; fails on a bad node.
echo "$SLURMD_NODENAME $SLURM_JOB_ID $(date +%s.%N)" >>"$2"
sleep 0.2
! grep -qx "$SLURMD_NODENAME" "$1"
SH
chmod +x "$T/node-test.sh"
echo node2 >"$T/slurm-bad.txt"
export PRIMUS_RUN_DIR=$T/bisect-run
trun preflight bisect --nodes node1,node2,node3 --rounds 2 --timeout 60 -- \
  srun -N {n} --nodelist {nodes} --ntasks-per-node 1 "$T/node-test.sh" "$T/slurm-bad.txt" "$T/node-test.log"
unset PRIMUS_RUN_DIR
expect_rc "bisect over srun group tests finds a bad node" 2
expect_in "exactly node2" "bad nodes (1): node2 (accused by every round)" "$OUT"
expect_eq "failed_nodes.txt" "$(cat "$T/bisect-run/failed_nodes.txt" 2>/dev/null)" node2
ntests=$(sed -n 's/^\([0-9]*\) group tests in .*/\1/p' <<<"$OUT")
expect_eq "one Slurm job per group test" "$(awk '{print $2}' "$T/node-test.log" 2>/dev/null | sort -u | wc -l)" "${ntests:-?}"
grep -E '^(  test|round)' <<<"$OUT" | sed 's/^/# /'

trun slurm status 999999
expect_rc "unknown job" 2
expect_in "unknown job named" "job 999999: slurmctld does not know it" "$ERR"
trun slurm status "$T/nowhere"
expect_rc "neither a job id nor a run directory" 2

# ---- down: every daemon stopped by pid, idempotent ----
PIDS=$(cat "$C"/run/*.pid 2>/dev/null | tr '\n' ' ')
"$SL" down "$C" >/dev/null 2>&1
expect_rc_down=$?
expect_eq "down" "$expect_rc_down" 0
left=""
for p in $PIDS; do kill -0 "$p" 2>/dev/null && left+="$p "; done
expect_eq "no daemon left (pids $PIDS)" "$left" ""
"$SL" status "$C" >/dev/null 2>&1
expect_eq "status after down says stopped (exit 3)" "$?" 3
"$SL" down "$C" >/dev/null 2>&1
expect_eq "down again is a no-op" "$?" 0
ok "whole test in $((SECONDS - start)) s"
finish
