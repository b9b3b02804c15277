#!/usr/bin/env bash
# Ranks of one node share its cores instead of each taking all of them
# (issue 30): the launcher says how many ranks share the node
# (PRIMUS_RANKS_PER_NODE: --nproc, or an srun step's tasks on the node),
# the cpu profile gives each rank its part of the cores as its thread
# count, and each rank binds itself to a disjoint set of CPUs before its
# libraries start threads. On this 2-core machine: two ranks, one thread
# and one CPU each.
source "$(dirname "$0")/lib.sh"
multirank_setup
unset OMP_NUM_THREADS OMP_PROC_BIND OMP_PLACES OPENBLAS_NUM_THREADS PRIMUS_RANKS_PER_NODE \
  PRIMUS_CPUS_AVAILABLE PRIMUS_CPU_SHARE SLURM_JOB_ID SLURM_STEP_ID SLURM_LOCALID \
  SLURM_STEP_TASKS_PER_NODE SLURM_TASKS_PER_NODE SLURM_NODEID SLURM_CPU_BIND_TYPE
CORES=$(nproc)
tiny_exp dp "train_iters: 2" "global_batch_size: 4" "micro_batch_size: 2"

# The dry run shows what the ranks are told.
run --dry-run direct --nproc 2 -- train pretrain --config dp.yaml
expect_rc "dry run" 0
expect_in "ranks per node passed on" "PRIMUS_RANKS_PER_NODE=2" "$OUT"
if ((CORES >= 2)); then
  expect_in "each rank gets its part of the cores" "OMP_NUM_THREADS=$((CORES / 2))" "$OUT"
fi

run direct --nproc 2 -- train pretrain --config dp.yaml
expect_rc "two ranks" 0
# The launcher's own lines are tagged as the launcher's, not as a rank's.
expect_in "launcher lines tagged" "[launcher $(hostname)] [INFO] launching 2 ranks" "$ERR"
expect_not_in "no [rank 0/1] among the ranks' [rank R/2]" "[rank 0/1 " "$ERR"
RD=$(newest_run dp)
L0=$(cat "$RD/logs/rank-0.log" 2>/dev/null)
L1=$(cat "$RD/logs/rank-1.log" 2>/dev/null)
share() { sed -n 's/.*cores: local rank [0-9] of 2 on this node: CPUs \([0-9,-]*\), .*/\1/p' <<<"$1" | head -1; }
S0=$(share "$L0")
S1=$(share "$L1")
if [[ -n $S0 && -n $S1 && $S0 != "$S1" ]]; then ok "disjoint CPU shares: rank 0 on $S0, rank 1 on $S1"
else bad "CPU shares: rank 0 '$S0', rank 1 '$S1'"; fi
if ((CORES == 2)); then
  expect_in "rank 0 logs 1 thread" "GEMM onednn, 1 threads" "$L0"
  expect_in "rank 1 logs 1 thread" "GEMM onednn, 1 threads" "$L1"
  expect_in "rank 0 says its share" "cores: local rank 0 of 2 on this node: CPUs 0, 1 thread" "$L0"
  expect_in "rank 1 says its share" "cores: local rank 1 of 2 on this node: CPUs 1, 1 thread" "$L1"
fi
# (each rank logs its share after binding itself and starting again)
expect_not_in "no rank runs unbound" "going on unbound" "$L0$L1"

# An srun step with two tasks on this node: each task is told 2.
SLURM_STEP_ID=0 SLURM_LOCALID=1 SLURM_NODEID=0 SLURM_STEP_TASKS_PER_NODE='2(x2)' \
  run --dry-run direct -- train pretrain --config dp.yaml
expect_rc "srun task dry run" 0
expect_in "srun: ranks per node from SLURM_STEP_TASKS_PER_NODE" "PRIMUS_RANKS_PER_NODE=2" "$OUT"
SLURM_STEP_ID=0 SLURM_LOCALID=0 SLURM_NODEID=2 SLURM_STEP_TASKS_PER_NODE='2(x2),3' \
  run --dry-run direct -- train pretrain --config dp.yaml
expect_in "srun: the count of this node" "PRIMUS_RANKS_PER_NODE=3" "$OUT"
# A value the user set wins.
PRIMUS_RANKS_PER_NODE=1 run --dry-run direct --nproc 2 -- train pretrain --config dp.yaml
expect_not_in "the user's PRIMUS_RANKS_PER_NODE wins" "PRIMUS_RANKS_PER_NODE=2" "$OUT"
finish
