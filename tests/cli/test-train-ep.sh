#!/usr/bin/env bash
# Expert parallel over MPI (expert_model_parallel_size: E, a subset of the
# data-parallel group): on a tiny MoE model (4 experts, both layers MoE),
# E = 2 on 2 ranks, E = 2 x 2 expert-parallel groups and E = 4 on 4 ranks
# follow the runs without expert parallelism with the same data-parallel
# size (losses within 1e-5 relative per step, whole-model weights within
# 1e-5 after the run), and two E = 2 runs are byte-identical; so do the
# router's edge cases: top-k equal to the number of experts, a capacity
# factor that drops assignments (with a shared expert and recomputation),
# and a router that sends every token to expert 0 so that one rank
# receives no rows. The routing statistics are the group's (summed over
# the expert-parallel ranks); checkpoints hold the whole model, so an E = 2
# checkpoint resumes at E = 1 and the reverse to the weights of an
# uninterrupted run. moe_layer_freq as a list: [1, 0] is the int 2, [0, 1]
# trains (with E = 2 too) and its checkpoint names its MoE layers. Bad
# sizes and lists are refused naming the key.
source "$(dirname "$0")/lib.sh"
multirank_setup

exp() { moe_exp "$@"; } # NAME [KEY: VALUE...]
final() { echo "$T/ck-$1/iter_0000006/model.safetensors"; }
launch() { # NPROC NAME
  run direct --nproc "$1" -- train pretrain --config "$2.yaml"
  expect_rc "$2 on $1 ranks" 0
}

# same NAME REF WHAT: NAME's losses and final weights follow REF's.
same() {
  local n=$1 ref=$2 what=$3 d w
  expect_eq "$what: 6 steps logged once" "$(run_losses "$n" | wc -l)" 6
  d=$(loss_diff "$ref" "$n")
  if within "$d" 1e-5; then ok "$what: losses within 1e-5 of $ref (worst $d)"; else bad "$what: losses differ from $ref by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$ref")" "$(final "$n")")
  if within "$w" 1e-5; then ok "$what: whole-model weights within 1e-5 of $ref ($w)"; else bad "$what: weights differ by $w"; fi
}

# counts NAME STEP: the per-layer expert counts of that step in events.jsonl,
# "layer:c0/c1/c2/c3" joined by spaces.
counts() {
  run_events "$1" | grep "^{\"step\":$2," | $PY -c '
import json, sys
ev = json.loads(sys.stdin.readline())
print(" ".join("%d:%s" % (l["layer"], "/".join(map(str, l["counts"]))) for l in ev["moe"]["layers"]))'
}

# ---- E = 2 on 2 ranks ----
exp dp2
launch 2 dp2
DP2_ERR=$ERR
exp ep2 "expert_model_parallel_size: 2"
launch 2 ep2
expect_in "ep2: says it is expert parallel" "expert parallel: 2 ranks per group (this is rank 0: experts 0-1 of 4" "$ERR"
expect_in "ep2: the memory line names the experts held" "experts 2-3 of 4: expert-parallel rank 2 of 2" "$ERR"
same ep2 dp2 "E = 2"
# Parameters per rank: the attention, router and head whole, half the experts.
p1=$(grep -o 'memory: params [0-9.]* KiB' <<<"$DP2_ERR" | head -1 | awk '{print $3}')
p2=$(grep -o 'memory: params [0-9.]* KiB' <<<"$ERR" | head -1 | awk '{print $3}')
if [[ -n $p1 && -n $p2 ]] && awk -v a="$p2" -v b="$p1" 'BEGIN { exit !(a < 0.8 * b) }'; then
  ok "E = 2: parameters per rank $p2 KiB, below the $p1 KiB of the whole model"
else bad "E = 2: parameters per rank '$p2' vs '$p1' KiB"; fi
expect_in "E = 2: all-to-all time per step in events" '"ep_comm_ms":' "$(run_events ep2)"
# The counts are the group's: every step routes 4 x 32 tokens x 2 choices per layer.
c=$(counts ep2 1)
if $PY -c 'import sys; sys.exit(0 if all(sum(map(int, x.split(":")[1].split("/"))) == 256 for x in sys.argv[1].split()) and len(sys.argv[1].split()) == 2 else 1)' "$c"; then
  ok "E = 2: events count the group's 256 assignments per layer ($c)"
else bad "E = 2: expected 256 assignments per layer, got '$c'"; fi
expect_in "E = 2: and the log line" "layer 0: tokens" "$ERR"
# The exchange's layout is fixed by the ranks and counts, not by timing.
exp again "expert_model_parallel_size: 2"
launch 2 again
if cmp -s "$(final ep2)" "$(final again)"; then ok "E = 2 twice: byte-identical weights"; else bad "two E = 2 runs differ"; fi

# ---- 4 ranks: E = 2 x 2 groups (overlapped buckets), E = 4 ----
exp dp4
launch 4 dp4
exp ep2dp2 "expert_model_parallel_size: 2" "overlap_grad_reduce: true" "ddp_bucket_size: 3000"
launch 4 ep2dp2
expect_in "ep2dp2: two groups, expert gradients over 2 ranks" "2 groups; expert gradients summed over 2 ranks" "$ERR"
same ep2dp2 dp4 "E = 2 x D = 4 (overlapped buckets)"
exp ep4 "expert_model_parallel_size: 4"
launch 4 ep4
expect_in "ep4: one expert per rank" "experts 3-3 of 4: expert-parallel rank 4 of 4" "$ERR"
same ep4 dp4 "E = 4 x D = 4"

# ---- Router edge cases ----
exp dp2-k4 "moe_router_topk: 4"
launch 2 dp2-k4
exp ep2-k4 "moe_router_topk: 4" "expert_model_parallel_size: 2"
launch 2 ep2-k4
same ep2-k4 dp2-k4 "E = 2, top-k = num_experts"
cap=("moe_expert_capacity_factor: 1.0" "moe_shared_expert_intermediate_size: 24" "recompute_granularity: full")
exp dp2-cap "${cap[@]}"
launch 2 dp2-cap
exp ep2-cap "${cap[@]}" "expert_model_parallel_size: 2"
launch 2 ep2-cap
same ep2-cap dp2-cap "E = 2, capacity 1.0, shared expert, recomputation"
if run_events ep2-cap | grep -q '"dropped":[1-9]'; then ok "E = 2, capacity 1.0: assignments dropped"
else bad "E = 2, capacity 1.0: nothing dropped"; fi

# Every token to expert 0 at step 1: a checkpoint whose routers are zero
# (equal logits: ties go to the lower expert) with top-1 routing, so that
# rank 1 of the group receives no rows; the aux loss moves the router on.
exp seed "moe_router_topk: 1" "train_iters: 1" "save_interval: 1"
run train pretrain --config seed.yaml
expect_rc "a checkpoint to start from" 0
if $PY - "$T/ck-seed/iter_0000001/model.safetensors" <<'PYEOF'; then
import json, struct, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    hit = 0
    for name, t in head.items():
        if name.endswith("block_sparse_moe.gate.weight"):
            lo, hi = t["data_offsets"]
            f.seek(8 + n + lo)
            f.write(bytes(hi - lo))
            hit += 1
sys.exit(0 if hit == 2 else 1)
PYEOF
  ok "zeroed the two routers"
else bad "could not zero the routers"; fi
one=("moe_router_topk: 1" "load: $T/ck-seed/iter_0000001")
exp dp2-one "${one[@]}"
launch 2 dp2-one
exp ep2-one "${one[@]}" "expert_model_parallel_size: 2"
launch 2 ep2-one
same ep2-one dp2-one "E = 2, every token to expert 0 at step 1"
expect_eq "E = 2: step 1 routes the group's 128 tokens to expert 0" "$(counts ep2-one 1)" \
  "0:128/0/0/0 1:128/0/0/0"
c=$(counts ep2-one 6)
if [[ -n $c && $c != "0:128/0/0/0 1:128/0/0/0" ]]; then ok "and the routing moves as the router learns (step 6: $c)"
else bad "step 6 routing: '$c'"; fi

# ---- Checkpoints hold the whole model: resume across E ----
# 3 steps at E = 2, then steps 4-6 at E = 1 (and the reverse), 2 ranks:
# the weights of 6 uninterrupted steps (dp2: the schedule is fixed by
# lr_decay_iters, not by train_iters).
for pair in "2 1" "1 2"; do
  read -r a b <<<"$pair"
  n=resume-$a-$b
  exp "$n-a" "expert_model_parallel_size: $a" "train_iters: 3" "save_interval: 3" "save: $T/ck-$n"
  exp "$n-b" "expert_model_parallel_size: $b" "save: $T/ck-$n" "load: $T/ck-$n" \
    "auto_continue_train: true"
  launch 2 "$n-a"
  launch 2 "$n-b"
  expect_in "E = $a -> $b: resumed from iteration 3" "iteration 3" "$ERR"
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final dp2)" "$T/ck-$n/iter_0000006/model.safetensors")
  if within "$w" 1e-5; then ok "E = $a -> $b: weights within 1e-5 of an uninterrupted run ($w)"; else bad "E = $a -> $b: weights differ by $w"; fi
done

# ---- moe_layer_freq as a list (Megatron's [1, 0, 1, 0]) ----
# [1, 0] is the int 2 (byte-identical weights on one rank); [0, 1] (layer 1
# MoE, which no int can say) follows it under E = 2 as well, and its
# checkpoint names the layers (primus_moe_layers) and refuses an
# experiment whose MoE layers differ.
exp int2 "moe_layer_freq: 2" "train_iters: 2" "save_interval: 2"
run train pretrain --config int2.yaml
expect_rc "moe_layer_freq: 2" 0
exp list10 "moe_layer_freq: [1, 0]" "train_iters: 2" "save_interval: 2"
run train pretrain --config list10.yaml
expect_rc "moe_layer_freq: [1, 0]" 0
if cmp -s "$T/ck-int2/iter_0000002/model.safetensors" "$T/ck-list10/iter_0000002/model.safetensors"; then
  ok "[1, 0] is the int 2: byte-identical weights"; else bad "[1, 0] and 2 differ"; fi
exp dp2-list "moe_layer_freq: [0, 1]"
launch 2 dp2-list
expect_in "[0, 1]: layer 1 is MoE" "layer 1: tokens" "$ERR"
expect_not_in "[0, 1]: layer 0 is dense" "layer 0: tokens" "$ERR"
exp ep2-list "moe_layer_freq: [0, 1]" "expert_model_parallel_size: 2"
launch 2 ep2-list
same ep2-list dp2-list "E = 2, moe_layer_freq [0, 1]"
expect_in "[0, 1]: config.json lists the MoE layers" '"primus_moe_layers"' \
  "$(cat "$T/ck-ep2-list/iter_0000006/config.json" 2>/dev/null)"
run train pretrain --config list10.yaml "load=$T/ck-ep2-list/iter_0000006" train_iters=1 save=null
expect_rc "a checkpoint with other MoE layers is refused" 2
expect_in "naming the layer" "layer 0 is dense but the experiment's moe_layer_freq makes it MoE" "$ERR"

# ---- Refusals ----
refuse() { # NAME NPROC NEEDLE [KEY: VALUE...]
  local name=$1 np=$2 needle=$3
  shift 3
  exp bad "train_iters: 1" "$@"
  if [[ $np == 1 ]]; then run train pretrain --config bad.yaml; else run direct --nproc "$np" -- train pretrain --config bad.yaml; fi
  if [[ $RC == 2 && $ERR == *"$needle"* ]]; then ok "refused: $name"; else
    bad "refused: $name (exit $RC): '$needle' not in: $ERR"; fi
}
refuse "E not dividing num_experts" 1 "expert_model_parallel_size 3 must divide num_experts (4)" \
  "expert_model_parallel_size: 3"
refuse "E on one rank" 1 "expert_model_parallel_size 2 needs 2 ranks or a multiple" \
  "expert_model_parallel_size: 2"
refuse "E not dividing the data-parallel ranks" 2 \
  "expert_model_parallel_size 4 must divide the 2 data-parallel ranks" "expert_model_parallel_size: 4"
refuse "E with a dense model" 1 "expert_model_parallel_size 2 needs a mixture-of-experts model" \
  "expert_model_parallel_size: 2" "num_experts: null"
refuse "a moe_layer_freq list of the wrong length" 1 \
  "moe_layer_freq: the list has 3 entries but num_layers is 2" "moe_layer_freq: [1, 0, 1]"
refuse "a moe_layer_freq list entry other than 0/1" 1 \
  "moe_layer_freq: expected an integer or a list of 0/1 per layer, got \"2\"" "moe_layer_freq: [1, 2]"
finish
