#!/usr/bin/env bash
# Tensor parallel over MPI (tensor_model_parallel_size: T, world = T x D):
# T = 2 and T = 4 follow the one-rank run (losses within 1e-5 relative per
# step, weights within 1e-5 relative after 10 steps), with a tied and an
# untied head and with recomputation; T = 2 x D = 2 on 4 ranks follows
# them too; the checkpoints hold the whole model, so a T = 2 checkpoint
# resumes at T = 1 and a T = 1 one at T = 2 to the same weights as an
# uninterrupted run; two T = 2 runs are byte-identical; a rank that dies
# ends the job promptly, and under the supervisor the restarted run ends
# with the fault-free bytes; sizes that do not
# divide by T, a world T does not divide, and T > 1 on one rank are
# refused with the key named.
source "$(dirname "$0")/lib.sh"
multirank_setup

exp() { # NAME [KEY: VALUE...]
  local n=$1
  shift
  tiny_exp "$n" "micro_batch_size: 1" "global_batch_size: 4" "train_iters: 10" "eval_iters: 2" \
    "eval_interval: 10" "log_interval: 5" "save: $T/ck-$n" "save_interval: 10" "$@"
}
final() { echo "$T/ck-$1/iter_0000010/model.safetensors"; }
eval_loss() { run_events "$1" | grep '"event":"eval"' | sed 's/.*"loss":\([^,]*\),.*/\1/'; }

# same NAME REF WHAT: NAME's losses, validation loss and final weights follow REF's.
same() {
  local n=$1 ref=$2 what=$3 d w
  expect_eq "$what: 10 steps logged once (world rank 0 writes events)" "$(run_losses "$n" | wc -l)" 10
  d=$(loss_diff "$ref" "$n")
  if within "$d" 1e-5; then ok "$what: losses within 1e-5 of $ref (worst $d)"; else bad "$what: losses differ from $ref by $d"; fi
  d=$(awk -v a="$(eval_loss "$n")" -v b="$(eval_loss "$ref")" 'BEGIN { if (a == "" || b == "") { print "none"; exit } d = a - b; if (d < 0) d = -d; printf "%.3e", d / b }')
  if within "$d" 1e-5; then ok "$what: validation loss within 1e-5 ($d)"; else bad "$what: validation loss differs by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$ref")" "$(final "$n")")
  if within "$w" 1e-5; then ok "$what: whole-model weights within 1e-5 of $ref after 10 steps ($w)"; else bad "$what: weights differ by $w"; fi
}

# ---- T = 1, 2, 4 (tiny model: 4 heads, 2 kv groups: T = 4 needs 4 groups) ----
for head in tied untied; do
  untie=false
  [[ $head == untied ]] && untie=true
  exp "one-$head" "untie_embeddings_and_output_weights: $untie"
  run train pretrain --config "one-$head.yaml"
  expect_rc "one rank, $head head" 0
  ONE_ERR=$ERR
  exp "tp2-$head" "untie_embeddings_and_output_weights: $untie" "tensor_model_parallel_size: 2"
  run direct --nproc 2 -- train pretrain --config "tp2-$head.yaml"
  expect_rc "T = 2, $head head" 0
  expect_in "tp2-$head: says it is tensor parallel" "tensor parallel: 2 ranks per group" "$ERR"
  same "tp2-$head" "one-$head" "T = 2, $head head"
  # Parameters, gradients and moments per rank: about half (the norms are whole).
  p1=$(grep -o 'memory: params [0-9.]* KiB' <<<"$ONE_ERR" | head -1 | awk '{print $3}')
  p2=$(grep -o 'memory: params [0-9.]* KiB' <<<"$ERR" | head -1 | awk '{print $3}')
  if [[ -n $p1 && -n $p2 ]] && awk -v a="$p2" -v b="$p1" 'BEGIN { exit !(a < 0.55 * b && a > 0.45 * b) }'; then
    ok "T = 2, $head head: parameters per rank $p2 KiB, about half of $p1 KiB"
  else bad "T = 2, $head head: parameters per rank '$p2' vs '$p1' KiB"; fi
  expect_in "T = 2, $head head: the memory line says it is a shard" "tensor-parallel shard 1 of 2" "$ERR"
  expect_in "T = 2, $head head: tensor-parallel communication per step in events" '"tp_comm_ms":' "$(run_events "tp2-$head")"
done
expect_in "tp2: rank 0 holds half of the heads and groups" "2/4 heads, 1/2 kv groups" "$ERR"

exp one-g4
exp tp4 "tensor_model_parallel_size: 4"
sed -i 's/num_query_groups: 2/num_query_groups: 4/' one-g4.yaml tp4.yaml
run train pretrain --config one-g4.yaml
expect_rc "one rank, 4 kv groups" 0
run direct --nproc 4 -- train pretrain --config tp4.yaml
expect_rc "T = 4" 0
same tp4 one-g4 "T = 4"

exp one-rc "recompute_granularity: full"
run train pretrain --config one-rc.yaml
expect_rc "one rank, full recomputation" 0
exp tp2-rc "recompute_granularity: full" "tensor_model_parallel_size: 2"
run direct --nproc 2 -- train pretrain --config tp2-rc.yaml
expect_rc "T = 2, full recomputation" 0
same tp2-rc one-rc "T = 2 with recomputation"

# ---- T = 2 x D = 2 ----
exp tp2dp2 "tensor_model_parallel_size: 2" "overlap_grad_reduce: true" "ddp_bucket_size: 2000"
run direct --nproc 4 -- train pretrain --config tp2dp2.yaml
expect_rc "T = 2 x D = 2" 0
expect_in "tp2dp2: two groups" "2 tensor-parallel groups" "$ERR"
expect_in "tp2dp2: and data parallel over them" "data parallel: 2 ranks" "$ERR"
same tp2dp2 one-tied "T = 2 x D = 2"

# ---- Determinism ----
exp again "tensor_model_parallel_size: 2"
run direct --nproc 2 -- train pretrain --config again.yaml
expect_rc "T = 2 again" 0
if cmp -s "$(final tp2-tied)" "$(final again)"; then ok "T = 2 twice: byte-identical weights"; else bad "two T = 2 runs differ"; fi

# ---- A rank that dies ----
# Without a supervisor the job ends promptly (its peer waits in a group
# collective that can never finish); with one, it restarts from step 5 and
# ends with the fault-free bytes.
exp dies "tensor_model_parallel_size: 2"
t0=$SECONDS
PRIMUS_FAULT_INJECT=crash:rank=1:step=4 run direct --nproc 2 -- train pretrain --config dies.yaml
took=$((SECONDS - t0))
if [[ $RC != 0 ]]; then ok "T = 2, a dead rank fails the job (exit $RC)"; else bad "the job succeeded although rank 1 died"; fi
if (( took < 60 )); then ok "and promptly (${took} s)"; else bad "the job took ${took} s to end after rank 1 died"; fi
expect_in "the launcher points at the rank logs" "each rank's log is" "$ERR"
exp sup "tensor_model_parallel_size: 2" "save_interval: 5" "fault_tolerance: {max_restarts: 2, restart_backoff_s: 0.2}"
PRIMUS_FAULT_INJECT=crash:rank=1:step=7 run direct --nproc 2 -- train pretrain --config sup.yaml
expect_rc "T = 2, rank 1 crashes at step 7: restarted" 0
expect_in "restart recorded" '"event":"restart"' "$(run_events sup)"
if cmp -s "$(final tp2-tied)" "$(final sup)"; then ok "restarted T = 2 run byte-identical to the fault-free one"
else bad "restarted T = 2 run differs from the fault-free one"; fi

# ---- Checkpoints hold the whole model: resume across T ----
# 5 steps at T = 2, then steps 6-10 at T = 1 (and the reverse): the same
# weights as 10 uninterrupted steps.
for pair in "2 1" "1 2"; do
  read -r a b <<<"$pair"
  n=resume-$a-$b
  exp "$n-a" "tensor_model_parallel_size: $a" "train_iters: 5" "save_interval: 5" "save: $T/ck-$n" \
    "lr_decay_iters: 10" "lr_warmup_iters: 0"
  exp "$n-b" "tensor_model_parallel_size: $b" "save: $T/ck-$n" "load: $T/ck-$n" "auto_continue_train: true" \
    "lr_decay_iters: 10" "lr_warmup_iters: 0"
  exp "$n-ref" "lr_decay_iters: 10" "lr_warmup_iters: 0"
  if [[ $a == 1 ]]; then run train pretrain --config "$n-a.yaml"; else run direct --nproc "$a" -- train pretrain --config "$n-a.yaml"; fi
  expect_rc "T = $a: 5 steps" 0
  if [[ $b == 1 ]]; then run train pretrain --config "$n-b.yaml"; else run direct --nproc "$b" -- train pretrain --config "$n-b.yaml"; fi
  expect_rc "resumed at T = $b" 0
  expect_in "T = $a -> $b: resumed from iteration 5" "iteration 5" "$ERR"
  run train pretrain --config "$n-ref.yaml"
  expect_rc "reference for T = $a -> $b" 0
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$T/ck-$n-ref/iter_0000010/model.safetensors" "$T/ck-$n/iter_0000010/model.safetensors")
  if within "$w" 1e-5; then ok "T = $a -> $b: weights within 1e-5 of an uninterrupted run ($w)"; else bad "T = $a -> $b: weights differ by $w"; fi
done

# ---- Refusals ----
exp bad-ffn "tensor_model_parallel_size: 3"
run direct --nproc 3 -- train pretrain --config bad-ffn.yaml
expect_rc "heads that do not divide by T" 2
expect_in "names the key" "tensor_model_parallel_size 3 must divide num_attention_heads (4)" "$ERR"
exp bad-world "tensor_model_parallel_size: 2"
run direct --nproc 3 -- train pretrain --config bad-world.yaml
expect_rc "a world T does not divide" 2
expect_in "says why" "tensor_model_parallel_size 2 must divide the 3 ranks" "$ERR"
run train pretrain --config bad-world.yaml
expect_rc "T = 2 on one rank" 2
expect_in "says how to start it" "start it with --nproc 2" "$ERR"
# ZeRO-1 with T > 1: test-train-zero.sh.
finish
