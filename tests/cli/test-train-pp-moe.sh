#!/usr/bin/env bash
# Mixture-of-experts models in a pipeline (pipeline_model_parallel_size
# with num_experts): on a 4-layer tiny MoE model (4 experts, top-2, every
# layer MoE, aux and z losses on), P = 2 on 2 ranks follows the one-rank
# run and P = 2 x E = 2 on 4 ranks (two data-parallel ranks sharing the
# experts in each stage) the E = 2 run on 2 ranks: the losses, the aux
# loss and the per-expert counts of every layer (both stages' layers in
# rank 0's events and log line) per step, and the whole-model weights
# after 6 steps, within 1e-5 relative. Each stage holds its own layers'
# experts only (and, with E = 2, half of them). Checkpoints stay
# whole-model: a P = 2 x E = 2 checkpoint resumes at P = 1 on one rank and
# a one-rank checkpoint at P = 2 x E = 2, to the weights of an
# uninterrupted run. P = 2 x E = 2 with ZeRO-1 follows the E = 2 run too.
source "$(dirname "$0")/lib.sh"
multirank_setup

exp() { # NAME [KEY: VALUE...]: moe_exp with 4 MoE layers
  moe_exp "$@"
  sed -i 's/num_layers: 2/num_layers: 4/' "$1.yaml"
}
final() { echo "$T/ck-$1/iter_0000006/model.safetensors"; }
launch() { # NPROC NAME
  if [[ $1 == 1 ]]; then run train pretrain --config "$2.yaml"; else run direct --nproc "$1" -- train pretrain --config "$2.yaml"; fi
  expect_rc "$2 on $1 rank(s)" 0
}
# moe NAME: per step, the aux and z losses and every layer's expert counts
# from the events ("step aux z layer:c0/c1/c2/c3 ...").
moe() {
  run_events "$1" | grep '^{"step"' | $PY -c '
import json, sys
for line in sys.stdin:
    ev = json.loads(line)
    m = ev["moe"]
    print(ev["step"], "%.9g" % m["aux_loss"], "%.9g" % m["z_loss"],
          " ".join("%d:%s" % (l["layer"], "/".join(map(str, l["counts"]))) for l in m["layers"]))'
}
# same NAME REF WHAT: NAME's losses, MoE statistics and final weights follow REF's.
same() {
  local n=$1 ref=$2 what=$3 d w
  expect_eq "$what: 6 steps logged once" "$(run_losses "$n" | wc -l)" 6
  d=$(loss_diff "$ref" "$n")
  if within "$d" 1e-5; then ok "$what: losses within 1e-5 of $ref (worst $d)"; else bad "$what: losses differ from $ref by $d"; fi
  if $PY - <(moe "$ref") <(moe "$n") <<'PYEOF'; then
import sys
ref = [l.split() for l in open(sys.argv[1])]
got = [l.split() for l in open(sys.argv[2])]
worst = 0.0
for a, b in zip(ref, got):
    for x, y in zip(a[1:3], b[1:3]):
        worst = max(worst, abs(float(x) - float(y)) / max(abs(float(x)), 1e-30))
print("aux/z worst %.3e; %s" % (worst, " ".join(got[0][3:]) if got else "none"))
sys.exit(0 if len(ref) == len(got) == 6 and worst <= 1e-5 and
         all(a[0] == b[0] and a[3:] == b[3:] and len(b) == 3 + 4 for a, b in zip(ref, got)) else 1)
PYEOF
    ok "$what: aux and z losses within 1e-5 and the expert counts of all 4 layers equal, every step"
  else bad "$what: MoE statistics differ from $ref"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$ref")" "$(final "$n")")
  if within "$w" 1e-5; then ok "$what: whole-model weights within 1e-5 of $ref ($w)"; else bad "$what: weights differ by $w"; fi
}
# stage_params STAGE: "S M", the parameters stage STAGE holds of M (last run).
stage_params() { sed -n "s/.*stage $1 of [0-9]* holds .*, \\([0-9]*\\) of \\([0-9]*\\) parameters;.*/\\1 \\2/p" <<<"$ERR" | head -1; }

# ---- P = 2 on 2 ranks against one rank ----
exp one
launch 1 one
exp pp2 "pipeline_model_parallel_size: 2"
launch 2 pp2
expect_in "pp2: stage 1 holds layers 2 and 3" "stage 1 of 2 holds layers [2, 4)" "$ERR"
expect_in "pp2: rank 0's log line has stage 1's layers" "layer 3: tokens" "$(grep 'rank 0/2' <<<"$ERR")"
read -r p0 full <<<"$(stage_params 0)"
read -r p1 _ <<<"$(stage_params 1)"
vocab=$(sed -n 's/.*model: .*vocab \([0-9]*\),.*/\1/p' <<<"$ERR" | head -1)
if [[ -n $p0 && -n $p1 && -n $vocab ]] && ((p0 + p1 == full + vocab * 32 && 10 * p0 < 6 * full)); then
  ok "pp2: each stage holds its own layers' experts ($p0 + $p1 of $full, the tied embedding on both)"
else bad "pp2: stages hold '$p0' and '$p1' of '$full' parameters"; fi
same pp2 one "P = 2"

# ---- P = 2 x E = 2 on 4 ranks against E = 2 on 2 ranks ----
exp ep2 "expert_model_parallel_size: 2"
launch 2 ep2
exp pp2ep2 "expert_model_parallel_size: 2" "pipeline_model_parallel_size: 2"
launch 4 pp2ep2
n=$(grep 'memory:' <<<"$ERR" | grep 'pipeline stage 1 of 2' | grep -c 'experts 2-3 of 4: expert-parallel rank 2 of 2')
expect_eq "pp2ep2: one rank of stage 1 holds experts 2-3 (of its layers only)" "$n" 1
same pp2ep2 ep2 "P = 2 x E = 2"

# ---- Checkpoints across P and E ----
exp rs-a "expert_model_parallel_size: 2" "pipeline_model_parallel_size: 2" "train_iters: 3" \
  "save_interval: 3" "save: $T/ck-rs"
launch 4 rs-a
exp rs-b "save: $T/ck-rs" "load: $T/ck-rs" "auto_continue_train: true"
launch 1 rs-b
expect_in "P = 2 x E = 2 -> P = 1: resumed from iteration 3" "iteration 3" "$ERR"
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$T/ck-rs/iter_0000006/model.safetensors")
if within "$w" 1e-5; then ok "P = 2 x E = 2 -> P = 1: weights within 1e-5 of an uninterrupted run ($w)"; else bad "P = 2 x E = 2 -> P = 1: weights differ by $w"; fi
exp sr-a "train_iters: 3" "save_interval: 3" "save: $T/ck-sr"
launch 1 sr-a
exp sr-b "expert_model_parallel_size: 2" "pipeline_model_parallel_size: 2" "save: $T/ck-sr" \
  "load: $T/ck-sr" "auto_continue_train: true"
launch 4 sr-b
expect_in "P = 1 -> P = 2 x E = 2: resumed from iteration 3" "iteration 3" "$ERR"
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final ep2)" "$T/ck-sr/iter_0000006/model.safetensors")
if within "$w" 1e-5; then ok "P = 1 -> P = 2 x E = 2: weights within 1e-5 of an uninterrupted run ($w)"; else bad "P = 1 -> P = 2 x E = 2: weights differ by $w"; fi

# ---- P = 2 x E = 2 x ZeRO-1 on 4 ranks against E = 2 on 2 ranks ----
# The dense tensors of each stage sharded over its data-parallel pair; the
# experts are each rank's own (E = D), kept whole.
exp pp2ep2z "expert_model_parallel_size: 2" "pipeline_model_parallel_size: 2" \
  "use_distributed_optimizer: true"
launch 4 pp2ep2z
expect_in "pp2ep2z: ZeRO-1 over the data-parallel pair" "data parallel: 2 ranks with the distributed optimizer (ZeRO-1)" "$ERR"
same pp2ep2z ep2 "P = 2 x E = 2 x ZeRO-1"
finish
