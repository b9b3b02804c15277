#!/usr/bin/env bash
# Data parallel over MPI (primus direct --nproc N): 2 and 4 ranks follow the
# one-rank run with the same global batch (losses within 1e-6 relative per
# step, weights within 1e-5 relative after 20 steps), with and without
# overlapped bucketed all-reduce; two runs with the same rank count are
# byte-identical; the distributed optimizer (ZeRO-1) at 2 and 4 ranks
# (also with a parameter count that does not divide by the ranks) follows
# them with the optimizer memory per rank divided by the ranks, both with
# the blocking reduce-scatter and with overlapped per-bucket reductions
# (small buckets cut at the shard boundaries; byte-identical across runs);
# its checkpoints resume at other rank counts (resharding), from the
# overlapped path, and from version-1 optimizer files; a NaN on one rank rolls every rank back; a batch that
# does not split over the ranks is refused; and the supervisor restarts a
# crashed rank of a 2-rank run to the same bytes as a fault-free one.
source "$(dirname "$0")/lib.sh"
multirank_setup

exp() { # NAME [KEY: VALUE...]
  local n=$1
  shift
  tiny_exp "$n" "micro_batch_size: 1" "global_batch_size: 8" "train_iters: 20" "eval_iters: 2" \
    "eval_interval: 20" "log_interval: 10" "save: $T/ck-$n" "load: $T/ck-$n" "save_interval: 10" \
    "auto_continue_train: true" "ddp_bucket_size: 3000" "$@"
}
events() { run_events "$1"; }
final() { echo "$T/ck-$1/iter_0000020/model.safetensors"; }

exp one
run train pretrain --config one.yaml
expect_rc "one rank" 0
ONE_ERR=$ERR

for case in "2 false" "2 true" "4 true"; do
  read -r np ov <<<"$case"
  name=dp${np}-${ov}
  exp "$name" "overlap_grad_reduce: $ov"
  run direct --nproc "$np" -- train pretrain --config "$name.yaml"
  expect_rc "$np ranks, overlap_grad_reduce $ov" 0
  expect_in "$name: says it is data parallel" "data parallel: $np ranks" "$ERR"
  expect_eq "$name: 20 steps logged once (rank 0 writes events)" "$(run_losses "$name" | wc -l)" 20
  d=$(loss_diff one "$name")
  if within "$d" 1e-6; then ok "$name: losses within 1e-6 of one rank (worst $d)"; else bad "$name: losses differ by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$(final "$name")")
  if within "$w" 1e-5; then ok "$name: weights within 1e-5 of one rank after 20 steps ($w)"; else bad "$name: weights differ by $w"; fi
  expect_in "$name: exposed communication recorded" '"comm_ms":' "$(events "$name")"
  EVAL=$(events "$name" | grep '"event":"eval"' | sed 's/,"time.*//')
  expect_in "$name: evaluated" '"event":"eval","step":20' "$EVAL"
  ev() { sed 's/.*"loss":\([^,]*\),.*"tokens":\([0-9]*\).*/\1 \2/' <<<"$1"; }
  read -r el et <<<"$(ev "$EVAL")"
  read -r ol ot <<<"$(ev "$(events one | grep '"event":"eval"')")"
  expect_eq "$name: evaluation over the ranks covers the same tokens" "$et" "$ot"
  ed=$(awk -v a="$el" -v b="$ol" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.3e", d / b }')
  if within "$ed" 1e-6; then ok "$name: validation loss within 1e-6 of one rank ($ed)"; else bad "$name: validation loss differs by $ed"; fi
done

# Two runs with the same rank count: byte-identical.
exp again "overlap_grad_reduce: true"
run direct --nproc 2 -- train pretrain --config again.yaml
expect_rc "2 ranks again" 0
if cmp -s "$(final dp2-true)" "$(final again)"; then ok "same rank count: byte-identical weights"; else bad "two 2-rank runs differ"; fi
expect_eq "same rank count: identical losses" "$(run_losses again | tr '\n' ' ')" "$(run_losses dp2-true | tr '\n' ' ')"
expect_eq "and 20 of them" "$(run_losses again | wc -l)" 20

# ---- The distributed optimizer (ZeRO-1) ----
# The optimizer size from the start-up memory line, in bytes.
optim_bytes() {
  grep -o 'optimizer [0-9.]* [KMG]*i*B' <<<"$1" | head -1 | awk '{ v = $2; u = $3;
    m = u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1; printf "%d", v * m }'
}
ONE_OPT=$(optim_bytes "$ONE_ERR")
for np in 2 4; do
  name=zero$np
  exp "$name" "use_distributed_optimizer: true" "overlap_grad_reduce: true"
  run direct --nproc "$np" -- train pretrain --config "$name.yaml"
  expect_rc "ZeRO-1, $np ranks" 0
  expect_in "$name: says it shards the optimizer" "data parallel: $np ranks with the distributed optimizer (ZeRO-1)" "$ERR"
  expect_in "$name: memory line names the shard" "(shard 1/$np)" "$ERR"
  expect_eq "$name: 20 steps logged once" "$(run_losses "$name" | wc -l)" 20
  d=$(loss_diff one "$name")
  if within "$d" 1e-6; then ok "$name: losses within 1e-6 of one rank (worst $d)"; else bad "$name: losses differ by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$(final "$name")")
  if within "$w" 1e-5; then ok "$name: weights within 1e-5 of one rank after 20 steps ($w)"; else bad "$name: weights differ by $w"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final dp$np-true)" "$(final "$name")")
  if within "$w" 1e-5; then ok "$name: weights within 1e-5 of plain DP ($w)"; else bad "$name: weights differ from plain DP by $w"; fi
  n=$(ls "$T/ck-$name/iter_0000020"/optim-rank-*.bin | wc -l)
  expect_eq "$name: one optimizer shard per rank" "$n" "$np"
  expect_file "$name: one state file per rank" "$T/ck-$name/iter_0000020/state-rank-0000$((np - 1)).json"
  expect_file "$name: DONE" "$T/ck-$name/iter_0000020/DONE"
  expect_eq "$name: no temporary folders left" "$(ls "$T/ck-$name" | grep -c '\.tmp\.')" 0
  # Optimizer memory per rank: the one-rank figure divided by the ranks.
  Z_OPT=$(optim_bytes "$ERR")
  if [[ -n $ONE_OPT && -n $Z_OPT && $Z_OPT -gt 0 ]] &&
     awk -v a="$ONE_OPT" -v b="$Z_OPT" -v n="$np" 'BEGIN { r = a / b; exit !(r > n * 0.97 && r < n * 1.03) }'; then
    ok "$name: optimizer memory per rank $Z_OPT bytes = one rank's $ONE_OPT / $np"
  else bad "$name: optimizer memory per rank $Z_OPT vs one rank's $ONE_OPT (expected / $np)"; fi
done

# ZeRO-1 with overlap_grad_reduce and buckets of 16 parameters: the final
# norm, each layer and the embedding are buckets of their own (the model
# announces whole layers), and at 2 and 4 ranks buckets straddle shard
# boundaries, so they are cut into several reductions to their owners.
# Follows plain data parallel and the one-rank run, and two runs are
# byte-identical.
for np in 2 4; do
  name=zov$np
  for r in "$name" "$name-again"; do
    exp "$r" "use_distributed_optimizer: true" "overlap_grad_reduce: true" "ddp_bucket_size: 16"
    run direct --nproc "$np" -- train pretrain --config "$r.yaml"
    expect_rc "$r: ZeRO-1 overlapped, $np ranks, buckets of 16" 0
  done
  expect_eq "$name: 20 steps logged once" "$(run_losses "$name" | wc -l)" 20
  expect_in "$name: exposed communication recorded" '"comm_ms":' "$(events "$name")"
  d=$(loss_diff one "$name")
  if within "$d" 1e-6; then ok "$name: losses within 1e-6 of one rank (worst $d)"; else bad "$name: losses differ by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final dp$np-true)" "$(final "$name")")
  if within "$w" 1e-5; then ok "$name: weights within 1e-5 of plain DP ($w)"; else bad "$name: weights differ from plain DP by $w"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$(final "$name")")
  if within "$w" 1e-5; then ok "$name: weights within 1e-5 of one rank ($w)"; else bad "$name: weights differ by $w"; fi
  if cmp -s "$(final "$name")" "$(final "$name-again")"; then ok "$name: two runs byte-identical"
  else bad "$name: two overlapped ZeRO-1 runs differ"; fi
  expect_eq "$name: two runs, identical losses" "$(run_losses "$name-again" | tr '\n' ' ')" "$(run_losses "$name" | tr '\n' ' ')"
  expect_eq "$name: one optimizer shard per rank" "$(ls "$T/ck-$name/iter_0000020"/optim-rank-*.bin | wc -l)" "$np"
done

# A parameter count that does not divide by the ranks: 24,150 parameters
# over 4 ranks, so the last rank also owns the 2-parameter tail.
TAIL="hidden_size=30 num_attention_heads=3 num_query_groups=1"
exp tail1
run train pretrain --config tail1.yaml $TAIL
expect_rc "tail: one rank" 0
exp tail4 "use_distributed_optimizer: true"
run direct --nproc 4 -- train pretrain --config tail4.yaml $TAIL
expect_rc "tail: ZeRO-1, 4 ranks" 0
expect_in "tail: the last rank owns the tail" '"optimizer_shard": [18111, 24150]' \
  "$(cat "$T/ck-tail4/iter_0000020/state-rank-00003.json")"
d=$(loss_diff tail1 tail4)
if within "$d" 1e-6; then ok "tail: losses within 1e-6 of one rank (worst $d)"; else bad "tail: losses differ by $d"; fi
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final tail1)" "$(final tail4)")
if within "$w" 1e-5; then ok "tail: weights within 1e-5 of one rank ($w)"; else bad "tail: weights differ by $w"; fi
# The same overlapped: the tail travels in the last shard's reduction.
exp tail4ov "use_distributed_optimizer: true" "overlap_grad_reduce: true" "ddp_bucket_size: 16"
run direct --nproc 4 -- train pretrain --config tail4ov.yaml $TAIL
expect_rc "tail: ZeRO-1 overlapped, 4 ranks" 0
d=$(loss_diff tail1 tail4ov)
if within "$d" 1e-6; then ok "tail overlapped: losses within 1e-6 of one rank (worst $d)"; else bad "tail overlapped: losses differ by $d"; fi
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final tail4)" "$(final tail4ov)")
if within "$w" 1e-5; then ok "tail overlapped: weights within 1e-5 of the blocking reduce-scatter ($w)"; else bad "tail overlapped: weights differ from blocking by $w"; fi

# Resharded resume: the checkpoint of step 10 of one run, continued to step
# 20 with another rank count. The moments are carried over exactly (each
# rank copies its part out of every shard file); the steps after the resume
# use the new rank count's arithmetic (other summation orders in the
# reduction and the norm), so the result is within tolerance of the
# uninterrupted runs, not byte-identical.
reshard() { # NAME FROM NP [YAML LINE...]
  local n=$1 from=$2 np=$3
  shift 3
  rm -rf "$T/ck-$n"
  mkdir -p "$T/ck-$n"
  cp -r "$T/ck-$from/iter_0000010" "$T/ck-$n/"
  echo 10 >"$T/ck-$n/latest_checkpointed_iteration.txt"
  exp "$n" "$@"
  if [[ $np == 1 ]]; then run train pretrain --config "$n.yaml"
  else run direct --nproc "$np" -- train pretrain --config "$n.yaml"; fi
  expect_rc "$n: resumed" 0
  expect_in "$n: from iteration 10" "iteration 10, 80 samples consumed" "$ERR"
  expect_eq "$n: 10 steps" "$(run_losses "$n" | wc -l)" 10
  d=$(loss_diff one "$n")
  if within "$d" 1e-6; then ok "$n: losses within 1e-6 of one rank (worst $d)"; else bad "$n: losses differ by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$(final "$n")")
  if within "$w" 1e-5; then ok "$n: weights within 1e-5 of one rank ($w)"; else bad "$n: weights differ by $w"; fi
}
reshard z2-to-1 zero2 1 "use_distributed_optimizer: true"
reshard z2-to-plain1 zero2 1
reshard one-to-z2 one 2 "use_distributed_optimizer: true"
reshard z4-to-z2 zero4 2 "use_distributed_optimizer: true"
reshard z2-to-dp2 zero2 2
# The same rank count resumes to the same bytes.
reshard z2-to-z2 zero2 2 "use_distributed_optimizer: true" "overlap_grad_reduce: true"
if cmp -s "$(final zero2)" "$(final z2-to-z2)"; then ok "ZeRO-1 resumed at the same rank count: byte-identical"
else bad "ZeRO-1 resumed at 2 ranks differs from the uninterrupted run"; fi

# A checkpoint saved under overlapped ZeRO-1 resumes: at the same rank
# count and bucket size to the same bytes, and resharded to 2 ranks
# (overlapped too) within tolerance.
reshard zov4-to-zov4 zov4 4 "use_distributed_optimizer: true" "overlap_grad_reduce: true" \
  "ddp_bucket_size: 16"
if cmp -s "$(final zov4)" "$(final zov4-to-zov4)"; then ok "overlapped ZeRO-1 resumed at 4 ranks: byte-identical"
else bad "overlapped ZeRO-1 resumed at 4 ranks differs from the uninterrupted run"; fi
reshard zov4-to-zov2 zov4 2 "use_distributed_optimizer: true" "overlap_grad_reduce: true" \
  "ddp_bucket_size: 16"

# Version-1 optimizer files (one rank, full moments, no shard record) load.
$PY - "$T/ck-one/iter_0000010/optim-rank-00000.bin" "$T/v1.bin" <<'PY'
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
magic, ver, tensors, step, numel, crc, zero = struct.unpack("<8sIIQQII", b[:40])
assert ver == 2
body = b[72:]  # drop the 32-byte shard record of version 2
hdr = struct.pack("<8sIIQQII", magic, 1, tensors, step, numel, zlib.crc32(body), 0)
open(sys.argv[2], "wb").write(hdr + body)
PY
rm -rf "$T/ck-one-v1" && mkdir -p "$T/ck-one-v1" && cp -r "$T/ck-one/iter_0000010" "$T/ck-one-v1/"
mv "$T/v1.bin" "$T/ck-one-v1/iter_0000010/optim-rank-00000.bin"
echo 10 >"$T/ck-one-v1/latest_checkpointed_iteration.txt"
exp one-v1
run train pretrain --config one-v1.yaml
expect_in "version-1 optimizer file resumed" "iteration 10, 80 samples consumed" "$ERR"
if cmp -s "$(final one)" "$(final one-v1)"; then ok "version 1 resumed: byte-identical to the uninterrupted run"
else bad "version-1 resume differs"; fi
reshard v1-to-z2 one-v1 2 "use_distributed_optimizer: true"

# A NaN on rank 1 alone under ZeRO-1: the norm is summed over the ranks, so
# every rank sees it and rolls back to step 10, then replays to the same
# bytes as the fault-free run. async_save falls back to synchronous saves.
exp znan "use_distributed_optimizer: true" "overlap_grad_reduce: true" "async_save: true" \
  "fault_tolerance: {nan_policy: rollback}"
PRIMUS_FAULT_INJECT=nan:rank=1:step=13 run direct --nproc 2 -- train pretrain --config znan.yaml
expect_rc "ZeRO-1 NaN on rank 1: rolled back" 0
expect_in "rollback recorded" '"event":"rollback","from_step":13,"to_step":10' "$(events znan)"
expect_in "async_save falls back with a warning" "async_save: not with use_distributed_optimizer" "$ERR"
if cmp -s "$(final zero2)" "$(final znan)"; then ok "ZeRO-1 rollback: byte-identical to the fault-free run"
else bad "ZeRO-1 rollback differs from the fault-free run"; fi

# The same with plain data parallel and overlapped buckets: the NaN planted
# in rank 1's gradient reaches rank 0 through the all-reduce, both roll back.
exp dnan "overlap_grad_reduce: true" "fault_tolerance: {nan_policy: rollback}"
PRIMUS_FAULT_INJECT=nan:rank=1:step=13 run direct --nproc 2 -- train pretrain --config dnan.yaml
expect_rc "DP NaN on rank 1: rolled back" 0
expect_in "rollback recorded" '"event":"rollback","from_step":13,"to_step":10' "$(events dnan)"
if cmp -s "$(final dp2-true)" "$(final dnan)"; then ok "DP rollback: byte-identical to the fault-free run"
else bad "DP rollback differs from the fault-free run"; fi

# A global batch that does not split over the ranks.
exp odd
run direct --nproc 4 -- train pretrain --config odd.yaml global_batch_size=6
expect_rc "global batch not divisible by micro-batch x ranks" 2
expect_in "names the numbers" "global_batch_size 6 is not a multiple of micro_batch_size 1 x 4 data-parallel ranks" "$ERR"


# Without a supervisor, a rank that dies ends the job promptly with a
# clear message instead of leaving the other rank waiting in a collective.
exp dies
t0=$SECONDS
PRIMUS_FAULT_INJECT=crash:rank=1:step=5 run direct --nproc 2 -- train pretrain --config dies.yaml
took=$((SECONDS - t0))
if [[ $RC != 0 ]]; then ok "a dead rank fails the job (exit $RC)"; else bad "the job succeeded although rank 1 died"; fi
if (( took < 60 )); then ok "and promptly (${took} s)"; else bad "the job took ${took} s to end after rank 1 died"; fi
expect_in "mpirun names the dead rank" "process rank 1 with PID" "$ERR"
expect_in "the launcher points at the rank logs" "2 ranks: mpirun exited with 134; each rank's log is" "$ERR"

# The supervisor with two real ranks: rank 1 crashes before step 13, the
# job restarts from step 10 and ends with the fault-free bytes.
exp sup "overlap_grad_reduce: true" "fault_tolerance: {max_restarts: 2, restart_backoff_s: 0.2}"
PRIMUS_FAULT_INJECT=crash:rank=1:step=13 run direct --nproc 2 -- train pretrain --config sup.yaml
expect_rc "2 ranks, rank 1 crashes: restarted" 0
expect_in "fault recorded" '"event":"fault"' "$(events sup)"
expect_in "restart recorded" '"event":"restart"' "$(events sup)"
if cmp -s "$(final dp2-true)" "$(final sup)"; then ok "restarted 2-rank run byte-identical to the fault-free one"
else bad "restarted 2-rank run differs from the fault-free one"; fi
# The same under ZeRO-1: the restart reads the optimizer shards back.
exp supz "use_distributed_optimizer: true" "fault_tolerance: {max_restarts: 2, restart_backoff_s: 0.2}"
PRIMUS_FAULT_INJECT=crash:rank=1:step=13 run direct --nproc 2 -- train pretrain --config supz.yaml
expect_rc "ZeRO-1, rank 1 crashes: restarted" 0
expect_in "ZeRO-1 restart recorded" '"event":"restart"' "$(events supz)"
if cmp -s "$(final zero2)" "$(final supz)"; then ok "restarted ZeRO-1 run byte-identical to the fault-free one"
else bad "restarted ZeRO-1 run differs from the fault-free one"; fi
finish
