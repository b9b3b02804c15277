#!/usr/bin/env bash
# Mixture of experts with tensor AND expert parallel (issue 28) on 4 ranks:
# T = 2 x E = 2 (D = 2; each expert-parallel pair holds one tensor-parallel
# rank, inside its data-parallel pair, as Megatron lays them out) on a tiny
# MoE model (4 experts, top 2, both layers MoE, a shared expert, aux and z
# losses), 12 steps of 4 micro-batches of 1, against one rank with the same
# global batch: per-step losses and gradient norms within 1e-5 relative,
# the router's aux and z losses too and the expert counts equal, and the
# whole-model weights within 1e-5 after the run (the checkpoint gathers the
# experts over both groups). Layouts: the experts split over the
# tensor-parallel pair (expert_tensor_parallel_size null = T) with
# overlapped bucket reductions; whole on each tensor-parallel rank
# (expert_tensor_parallel_size: 1) with a capacity factor that drops
# assignments and full recomputation; both with the distributed optimizer
# (ZeRO-1); split with sequence parallel. bf16 stays within 1% of bf16 on
# one rank. Parameters and optimizer per rank fall as the sharding says.
# Checkpoints hold the whole model: a T = 2 x E = 2 ZeRO-1 checkpoint
# (step 6) resumes on one rank and a one-rank checkpoint at T = 2 x E = 2
# with ZeRO-1 (both expert layouts), each ending within 1e-5 of the
# uninterrupted run.
#
# Under the sanitizers (a 4-rank launch takes half a minute there) only the
# split experts, the whole experts with ZeRO-1 and the resume at
# T = 2 x E = 2 x ZeRO-1 run; the rest is left to the plain build.
source "$(dirname "$0")/lib.sh"
multirank_setup
SAN=
[[ -n ${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-} ]] && SAN=1

exp() { # NAME [KEY: VALUE...]: 12 steps, saved at 6 and 12
  moe_exp "$1" "moe_layer_freq: 1" "moe_shared_expert_intermediate_size: 32" "train_iters: 12" \
    "lr_decay_iters: 12" "save_interval: 6" "log_interval: 6" "${@:2}"
}
TE=("tensor_model_parallel_size: 2" "expert_model_parallel_size: 2")
final() { echo "$T/ck-$1/iter_0000012/model.safetensors"; }
launch() { # NP NAME
  if [[ $1 == 1 ]]; then run train pretrain --config "$2.yaml"
  else run direct --nproc "$1" -- train pretrain --config "$2.yaml"; fi
  expect_rc "$2 on $1 rank(s)" 0
}
# step_field NAME FIELD: "step value" per step line of events.jsonl
# (FIELD: grad_norm, aux_loss, z_loss, or counts: each layer's expert
# counts joined by / and spaces).
step_field() {
  run_events "$1" | grep '^{"step"' | $PY -c '
import json, sys
f = sys.argv[1]
for line in sys.stdin:
    ev = json.loads(line)
    if f == "counts":
        v = " ".join("/".join(map(str, l["counts"])) for l in ev["moe"]["layers"])
    elif f in ("aux_loss", "z_loss"):
        v = "%.9g" % ev["moe"][f]
    else:
        v = "%.9g" % ev[f]
    print(ev["step"], v)' "$2"
}
# field_diff REF NAME FIELD: the worst relative difference of FIELD over the steps.
field_diff() {
  join <(step_field "$1" "$3" | sort -k1,1) <(step_field "$2" "$3" | sort -k1,1) |
    awk '{d = $2 - $3; if (d < 0) d = -d; r = $2 ? d / $2 : d; if (r > m) m = r}
      END {if (NR == 0) print "none"; else printf "%.3e", m}'
}
# same NAME REF WHAT: NAME follows REF (losses, norms, router losses, counts, weights).
same() {
  local n=$1 ref=$2 what=$3 d f w
  expect_eq "$what: 12 steps logged once" "$(run_losses "$n" | wc -l)" 12
  d=$(loss_diff "$ref" "$n")
  if within "$d" 1e-5; then ok "$what: losses within 1e-5 of $ref (worst $d)"; else bad "$what: losses differ from $ref by $d"; fi
  for f in grad_norm aux_loss z_loss; do
    d=$(field_diff "$ref" "$n" $f)
    if within "$d" 1e-5; then ok "$what: $f within 1e-5 of $ref (worst $d)"; else bad "$what: $f differs from $ref by $d"; fi
  done
  expect_eq "$what: the expert counts of every step equal $ref's" "$(step_field "$n" counts)" \
    "$(step_field "$ref" counts)"
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$ref")" "$(final "$n")")
  if within "$w" 1e-5; then ok "$what: whole-model weights within 1e-5 of $ref ($w)"; else bad "$what: weights differ by $w"; fi
}
# kib NAME RANK: the first "memory: ... NAME X KiB" figure of that rank.
kib() { grep "rank $2/" <<<"$ERR" | grep -o "$1 [0-9.]* KiB" | head -1 | awk '{print $2}'; }
# ratio WHAT A B LO HI: A / B between LO and HI.
ratio() {
  if [[ -n $2 && -n $3 ]] && awk -v a="$2" -v b="$3" -v lo="$4" -v hi="$5" \
      'BEGIN { r = a / b; exit !(r >= lo && r <= hi) }'; then ok "$1 ($2 / $3 KiB)"
  else bad "$1: '$2' / '$3' KiB not in [$4, $5]"; fi
}

# ---- One rank: the references ----
exp one
launch 1 one
P1=$(kib params 0)
O1=$(kib optimizer 0)
exp one-cap "moe_expert_capacity_factor: 1.0" "recompute_granularity: full"
launch 1 one-cap

# ---- T = 2 x E = 2, experts split over the tensor-parallel pair ----
exp te "${TE[@]}" "overlap_grad_reduce: true" "ddp_bucket_size: 3000"
launch 4 te
expect_in "te: tensor parallel" "tensor parallel: 2 ranks per group" "$ERR"
expect_in "te: rank 3 (tensor-parallel rank 1 of data-parallel rank 1) holds experts 2-3" \
  "expert parallel: 2 ranks per group (this is rank 1: experts 2-3 of 4" "$(grep 'rank 3/' <<<"$ERR")"
same te one "T = 2 x E = 2, experts split, overlapped buckets"
PS=$(kib params 0)

if [[ -z $SAN ]]; then
# ---- T = 2 x E = 2, experts whole on each tensor-parallel rank ----
exp tew "${TE[@]}" "expert_tensor_parallel_size: 1" "moe_expert_capacity_factor: 1.0" \
  "recompute_granularity: full"
launch 4 tew
same tew one-cap "T = 2 x E = 2, experts whole, capacity 1, recomputation"
if run_events tew | grep -q '"dropped":[1-9]'; then ok "tew: assignments dropped"; else
  bad "tew: nothing dropped"; fi
PW=$(kib params 0)
echo "# parameters per rank: one rank $P1 KiB, T2 x E2 split $PS KiB, whole experts $PW KiB"
# Split: attention, shared expert, head halved, the experts a quarter (2 of 4, half
# of each); whole: the experts a half.
ratio "T = 2 x E = 2 split: parameters per rank about a third of one rank's" "$PS" "$P1" 0.3 0.4
ratio "T = 2 x E = 2 whole experts: between the split and one rank" "$PW" "$P1" 0.45 0.6

# ---- With the distributed optimizer ----
exp tez "${TE[@]}" "use_distributed_optimizer: true"
launch 4 tez
expect_in "tez: ZeRO-1 over the data-parallel pair" "with the distributed optimizer (ZeRO-1)" "$ERR"
same tez one "T = 2 x E = 2 x ZeRO-1, experts split"
OZ=$(kib optimizer 0)
# The dense part's moments halved once more; the experts (D = E) kept whole.
ratio "tez: optimizer per rank below a third of one rank's" "$OZ" "$O1" 0.2 0.33
fi
exp tewz "${TE[@]}" "use_distributed_optimizer: true" "expert_tensor_parallel_size: 1" \
  "moe_expert_capacity_factor: 1.0" "recompute_granularity: full" "overlap_grad_reduce: true" \
  "ddp_bucket_size: 3000"
launch 4 tewz
same tewz one-cap "T = 2 x E = 2 x ZeRO-1, experts whole, overlapped"

if [[ -z $SAN ]]; then
# ---- Sequence parallel ----
exp tesp "${TE[@]}" "sequence_parallel: true"
launch 4 tesp
same tesp one "T = 2 x E = 2, sequence parallel"

# ---- bf16 ----
exp one-bf16 "bf16: true"
launch 1 one-bf16
exp te-bf16 "${TE[@]}" "bf16: true"
launch 4 te-bf16
d=$(loss_diff one-bf16 te-bf16)
if within "$d" 0.01; then ok "bf16 T = 2 x E = 2 within 1% of bf16 on one rank (worst $d)"; else
  bad "bf16 T = 2 x E = 2 differs by $d"; fi

# ---- Resume across layouts: step 6 of one layout, steps 7-12 on another ----
resume() { # NAME FROM NP [KEY: VALUE...]
  local n=$1 from=$2 np=$3 w
  shift 3
  rm -rf "$T/ck-$n" && mkdir -p "$T/ck-$n"
  cp -r "$T/ck-$from/iter_0000006" "$T/ck-$n/"
  echo 6 >"$T/ck-$n/latest_checkpointed_iteration.txt"
  exp "$n" "load: $T/ck-$n" "auto_continue_train: true" "$@"
  launch "$np" "$n"
  expect_in "$n: from iteration 6" "iteration 6" "$ERR"
  expect_eq "$n: 6 steps logged" "$(run_losses "$n" | wc -l)" 6
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$(final "$n")")
  if within "$w" 1e-5; then ok "$n: weights within 1e-5 of the uninterrupted run ($w)"; else
    bad "$n: weights differ by $w"; fi
}
resume r-tez-one tez 1
fi
resume r-one-tez one 4 "${TE[@]}" "use_distributed_optimizer: true"
[[ -z $SAN ]] && resume r-one-tewz one 4 "${TE[@]}" "use_distributed_optimizer: true" \
  "expert_tensor_parallel_size: 1"
[[ -n $SAN ]] && echo "# sanitizers: T = 2 x E = 2 whole without ZeRO-1, split with ZeRO-1, sequence parallel, bf16 and two resumes are left to the plain build"
finish
