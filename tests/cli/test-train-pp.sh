#!/usr/bin/env bash
# Pipeline parallel over MPI (pipeline_model_parallel_size: P, world = P x
# D x T): on a 4-layer tiny model, P = 2 (1F1B), P = 2 x D = 2, T = 2 x P =
# 2, P = 4 and the interleaved schedule (2 virtual stages, tied head)
# follow the one-rank run (losses within 1e-5 relative per step, validation loss, and
# the whole-model checkpoint within 1e-5 after 6 steps), with an untied and
# a tied head (P = 2 x D = 2 and interleaved: the embedding's gradient
# summed between the first and last stage), with recomputation and with a
# given pipeline_layer_split; a P = 2 checkpoint resumes at P = 1 and a P =
# 1 one at P = 2 to the weights of an uninterrupted run; fewer micro-batches
# than stages warn and stay exact; events carry the bubble and `benchmark
# train` reports it beside the schedule's; a stage holds only its own
# tensors (about half the parameters at P = 2, the stages' parameter,
# gradient and optimizer bytes in events adding up to the one-rank run's,
# and a 4 M-parameter model's peak RSS per rank lower than at D = 2 by at
# least half the state it no longer holds; a stage loading weights reads
# its own tensors); and bad layouts (more stages
# than layers, bad splits, a world P does not
# divide, an interleaved M that P does not divide) are refused with the
# key named.
source "$(dirname "$0")/lib.sh"
multirank_setup

exp() { # NAME [KEY: VALUE...]: 4 layers, 4 micro-batches of 1 a step, 6 steps
  local n=$1
  shift
  tiny_exp "$n" "micro_batch_size: 1" "global_batch_size: 4" "train_iters: 6" "eval_iters: 1" \
    "eval_interval: 6" "log_interval: 3" "save: $T/ck-$n" "save_interval: 6" \
    "lr_decay_iters: 6" "$@"
  sed -i 's/num_layers: 2/num_layers: 4/' "$n.yaml"
}
final() { echo "$T/ck-$1/iter_0000006/model.safetensors"; }
eval_loss() { run_events "$1" | grep '"event":"eval"' | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
launch() { # NP NAME: one rank plain, more through the launcher
  if [[ $1 == 1 ]]; then run train pretrain --config "$2.yaml"; else run direct --nproc "$1" -- train pretrain --config "$2.yaml"; fi
}

# same NAME REF WHAT: NAME's losses, validation loss and final weights follow REF's.
same() {
  local n=$1 ref=$2 what=$3 d w
  expect_eq "$what: 6 steps logged once" "$(run_losses "$n" | wc -l)" 6
  d=$(loss_diff "$ref" "$n")
  if within "$d" 1e-5; then ok "$what: losses within 1e-5 of $ref (worst $d)"; else bad "$what: losses differ from $ref by $d"; fi
  d=$(awk -v a="$(eval_loss "$n")" -v b="$(eval_loss "$ref")" 'BEGIN { if (a == "" || b == "") { print "none"; exit } d = a - b; if (d < 0) d = -d; printf "%.3e", d / b }')
  if within "$d" 1e-5; then ok "$what: validation loss within 1e-5 ($d)"; else bad "$what: validation loss differs by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$ref")" "$(final "$n")")
  if within "$w" 1e-5; then ok "$what: whole-model weights within 1e-5 of $ref after 6 steps ($w)"; else bad "$what: weights differ by $w"; fi
}

# ---- Untied head: P = 2, P = 2 x D = 2, T = 2 x P = 2, P = 4, a given split ----
U="untie_embeddings_and_output_weights: true"
exp one "$U"
launch 1 one
expect_rc "one rank" 0
exp pp2 "$U" "pipeline_model_parallel_size: 2"
launch 2 pp2
expect_rc "P = 2" 0
expect_in "pp2: stage 0 holds the first half (balanced)" "stage 0 of 2 holds layers [0, 2) and the embedding" "$ERR"
expect_in "pp2: stage 1 the rest and the head" "stage 1 of 2 holds layers [2, 4) and the final norm and head" "$ERR"
expect_in "pp2: 1F1B over 4 micro-batches" "4 micro-batches a step, 1F1B schedule" "$ERR"
expect_in "pp2: every rank reports the loss" "[rank 0/2" "$(grep 'step 6/6' <<<"$ERR")"
expect_in "pp2: ... rank 1 too" "[rank 1/2" "$(grep 'step 6/6' <<<"$ERR")"
expect_in "pp2: the bubble in events" '"pp_bubble_ms":' "$(run_events pp2)"
# A stage's share of the model: "S of M parameters" on its pipeline line.
stage_params() { sed -n "s/.*stage $1 of [0-9]* holds .*, \([0-9]*\) of \([0-9]*\) parameters;.*/\1 \2/p" <<<"$ERR" | head -1; }
read -r p0 full <<<"$(stage_params 0)"
read -r p1 _ <<<"$(stage_params 1)"
if [[ -n $p0 && -n $p1 && -n $full ]] && ((p0 + p1 == full && 10 * p0 > 4 * full && 10 * p0 < 6 * full)); then
  ok "pp2: each stage holds its share of the parameters ($p0 + $p1 = $full)"
else bad "pp2: stages hold '$p0' and '$p1' of '$full' parameters"; fi
# The first step's event: this rank's state bytes and, in a pipeline, every stage's.
if $PY - <(run_events one) <(run_events pp2) <<'PYEOF'; then
import json, sys
one = [json.loads(l) for l in open(sys.argv[1])][0]["memory"]
pp = [json.loads(l) for l in open(sys.argv[2])][0]["memory"]
st = pp["pp_stage_state_bytes"]
print("one rank %d bytes; stages %s" % (one["state_bytes"], st))
ok = (len(st) == 2 and sum(st) == one["state_bytes"] and max(st) < 0.6 * one["state_bytes"]
      and pp["params"] < one["params"] and pp["full_params"] == one["params"]
      and pp["param_bytes"] == 4 * pp["params"])
sys.exit(0 if ok else 1)
PYEOF
  ok "pp2: events give each stage's parameter, gradient and optimizer bytes, adding up to one rank's"
else bad "pp2: the memory in events"; fi
same pp2 one "P = 2"
exp pp2dp2 "$U" "pipeline_model_parallel_size: 2"
launch 4 pp2dp2
expect_rc "P = 2 x D = 2" 0
expect_in "pp2dp2: data parallel over 2 ranks" "data parallel: 2 ranks" "$ERR"
same pp2dp2 one "P = 2 x D = 2"
exp tp2pp2 "$U" "pipeline_model_parallel_size: 2" "tensor_model_parallel_size: 2"
launch 4 tp2pp2
expect_rc "T = 2 x P = 2" 0
same tp2pp2 one "T = 2 x P = 2"
exp pp4 "$U" "pipeline_model_parallel_size: 4"
launch 4 pp4
expect_rc "P = 4" 0
expect_in "pp4: stage 3 holds the last layer" "stage 3 of 4 holds layers [3, 4)" "$ERR"
same pp4 one "P = 4"
exp split "$U" "pipeline_model_parallel_size: 2" "pipeline_layer_split: [1, 3]" "recompute_granularity: full"
launch 2 split
expect_rc "P = 2, split [1, 3], recomputation" 0
expect_in "split: stage 1 holds three layers" "stage 1 of 2 holds layers [1, 4)" "$ERR"
same split one "P = 2 split [1, 3] with recomputation"

# ---- Tied head: the embedding's gradient summed between the ends ----
exp one-tied
launch 1 one-tied
expect_rc "one rank, tied head" 0
exp pp2dp2-tied "pipeline_model_parallel_size: 2"
launch 4 pp2dp2-tied
expect_rc "P = 2 x D = 2, tied head" 0
same pp2dp2-tied one-tied "P = 2 x D = 2, tied head"
exp vpp-tied "pipeline_model_parallel_size: 2" "num_layers_per_virtual_pipeline_stage: 1"
launch 2 vpp-tied
expect_rc "P = 2 interleaved, tied head" 0
expect_in "vpp: stage 0 holds chunks 0 and 2" "stage 0 of 2 holds layers [0, 1), [2, 3)" "$ERR"
expect_in "vpp: the interleaved schedule" "interleaved 1F1B" "$ERR"
same vpp-tied one-tied "P = 2 interleaved, tied head"

# ---- Checkpoints hold the whole model: resume across P ----
for pair in "2 1" "1 2"; do
  read -r a b <<<"$pair"
  n=resume-$a-$b
  exp "$n-a" "$U" "pipeline_model_parallel_size: $a" "train_iters: 3" "save_interval: 3" "save: $T/ck-$n"
  exp "$n-b" "$U" "pipeline_model_parallel_size: $b" "save: $T/ck-$n" "load: $T/ck-$n" "auto_continue_train: true"
  launch "$a" "$n-a"
  expect_rc "P = $a: 3 steps" 0
  launch "$b" "$n-b"
  expect_rc "resumed at P = $b" 0
  expect_in "P = $a -> $b: resumed from iteration 3" "iteration 3" "$ERR"
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$T/ck-$n/iter_0000006/model.safetensors")
  if within "$w" 1e-5; then ok "P = $a -> $b: weights within 1e-5 of an uninterrupted run ($w)"; else bad "P = $a -> $b: weights differ by $w"; fi
done

# ---- Peak RSS: 16 layers of hidden 128 (4 M parameters, 60 MiB of state) ----
mem() { # NAME [KEY: VALUE...]: 2 steps, no saves (the writer would stage the whole model)
  local n=$1
  shift
  preset_exp "$n" "num_layers: 16" "ffn_hidden_size: 512" "seq_length: 16" "micro_batch_size: 1" \
    "global_batch_size: 2" "train_iters: 2" "$@"
}
# Under ASan, freed blocks wait in its quarantine (256 MiB by default)
# and stay resident: the peak then follows the run's allocation history
# more than its state (P = 2 measured 15 MiB below D = 2 with it, 37 MiB
# with a 1 MiB quarantine). The measurement wants the live bytes; the
# runs after it get the whole quarantine back.
asan_saved=${ASAN_OPTIONS-}
[[ -n ${PRIMUS_SANITIZED:-} ]] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=1"
peaks() { sed -n 's/.*peak rss .* (\([0-9]*\) bytes).*/\1/p' <<<"$ERR"; }
state() { run_events "$1" | head -1 | sed 's/.*"state_bytes":\([0-9]*\).*/\1/'; }
mem memdp
run direct --nproc 2 -- train pretrain --config memdp.yaml
expect_rc "D = 2, 16 layers" 0
dpk=$(peaks | sort -n | head -1)
mem mempp "pipeline_model_parallel_size: 2"
run direct --nproc 2 -- train pretrain --config mempp.yaml
expect_rc "P = 2, 16 layers" 0
ppk=$(peaks | sort -n | tail -1)
saved=$(($(state memdp) - $(state mempp)))
if [[ -n $dpk && -n $ppk ]] && ((saved > 0 && ppk < dpk - saved / 2)); then
  ok "P = 2: peak RSS per rank $((ppk >> 20)) MiB, below D = 2's $((dpk >> 20)) MiB by more than half the $((saved >> 20)) MiB of state a stage no longer holds"
else bad "P = 2: peak RSS '$ppk' against D = 2's '$dpk' (state saved: $saved bytes)"; fi
export ASAN_OPTIONS=$asan_saved

# T = 2 x P = 2 with a background save at step 3 (the stages' shards
# gathered to the writer), resumed from it at P = 1.
n=resume-async
exp "$n-a" "$U" "pipeline_model_parallel_size: 2" "tensor_model_parallel_size: 2" "save_interval: 3" \
  "async_save: true"
exp "$n-b" "$U" "load: $T/ck-$n-a" "auto_continue_train: true"
launch 4 "$n-a"
expect_rc "T = 2 x P = 2, async saves" 0
expect_in "T = 2 x P = 2: step 3 saved in the background" "iter_0000003 in" "$(grep 'in the background' <<<"$ERR")"
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$(final "$n-a")")
if within "$w" 1e-5; then ok "T = 2 x P = 2, async saves: weights within 1e-5 of one rank ($w)"; else bad "T = 2 x P = 2, async: weights differ by $w"; fi
rm -r "$T/ck-$n-a/iter_0000006"
echo 3 >"$T/ck-$n-a/latest_checkpointed_iteration.txt"
launch 1 "$n-b"
expect_rc "resumed at P = 1 from the background save" 0
expect_in "T = 2 x P = 2 -> P = 1: resumed from iteration 3" "iteration 3" "$ERR"
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$(final "$n-b")")
if within "$w" 1e-5; then ok "T = 2 x P = 2 -> P = 1: weights within 1e-5 of an uninterrupted run ($w)"; else bad "T = 2 x P = 2 -> P = 1: weights differ by $w"; fi

# Loading weights (a fresh optimizer): each stage reads its own tensors
# from the files, to the losses of one rank loading them.
exp load1 "$U" "load: $T/ck-one" "train_iters: 2" "save: $T/ck-load1"
launch 1 load1
exp load2 "$U" "load: $T/ck-one" "train_iters: 2" "save: $T/ck-load2" "pipeline_model_parallel_size: 2"
launch 2 load2
expect_rc "P = 2 loading a one-rank checkpoint" 0
expect_in "P = 2: loaded the weights" "loaded weights from $T/ck-one" "$ERR"
d=$(loss_diff load1 load2)
if within "$d" 1e-5; then ok "P = 2 loading weights: losses within 1e-5 of one rank loading them ($d)"; else bad "P = 2 loading weights: losses differ by $d"; fi

# ---- Fewer micro-batches than stages: a warning, still exact ----
exp few-one "$U" "global_batch_size: 1"
launch 1 few-one
exp few "$U" "global_batch_size: 1" "pipeline_model_parallel_size: 2"
launch 2 few
expect_rc "P = 2 with 1 micro-batch" 0
expect_in "warns that the pipeline never fills" "the pipeline never fills" "$ERR"
d=$(loss_diff few-one few)
if within "$d" 1e-5; then ok "P = 2 with 1 micro-batch: losses within 1e-5 ($d)"; else bad "P = 2, M = 1: losses differ by $d"; fi

# ---- benchmark train: the measured bubble beside the schedule's ----
run direct --nproc 2 -- benchmark train --config pp2.yaml --warmup 1 --iters 3 -o bench.json
expect_rc "benchmark train, P = 2" 0
row=$(grep -o '{.*}' bench.json)
bf=$(sed 's/.*"bubble_fraction": \([^,}]*\).*/\1/' <<<"$row")
bs=$(sed 's/.*"bubble_schedule": \([^,}]*\).*/\1/' <<<"$row")
expect_eq "benchmark train: the schedule's bubble for P = 2, M = 4 is 1/5" "$bs" "0.2000"
if awk -v b="$bf" 'BEGIN { exit !(b > 0 && b < 1) }'; then ok "benchmark train: a measured bubble fraction ($bf)"
else bad "benchmark train: bubble_fraction '$bf'"; fi

# ---- Refusals ----
refuse() { # WHAT NP NEEDLE KEY: VALUE...
  local what=$1 np=$2 needle=$3
  shift 3
  exp bad "$@"
  launch "$np" bad
  if [[ $RC != 0 ]]; then ok "$what: refused (exit $RC)"; else bad "$what: accepted"; fi
  expect_in "$what: the message" "$needle" "$ERR"
}
refuse "more stages than layers" 1 "pipeline_model_parallel_size: 8 stages but num_layers is 4" "pipeline_model_parallel_size: 8"
refuse "a split that does not sum to num_layers" 1 "pipeline_layer_split: the counts sum to 5 layers, but num_layers is 4" \
  "pipeline_model_parallel_size: 2" "pipeline_layer_split: [2, 3]"
refuse "a stage without layers" 1 'pipeline_layer_split: item 1: expected a layer count >= 1, got "0"' \
  "pipeline_model_parallel_size: 2" "pipeline_layer_split: [0, 4]"
refuse "a split with the wrong length" 1 "pipeline_layer_split: 3 counts for 2 model chunks" \
  "pipeline_model_parallel_size: 2" "pipeline_layer_split: [1, 1, 2]"
refuse "P = 2 on one rank" 1 "needs 2 ranks or a multiple" "pipeline_model_parallel_size: 2"
refuse "a world P does not divide" 3 "must divide the 3 ranks" "pipeline_model_parallel_size: 2"
refuse "interleaved with micro-batches not a multiple of P" 2 "needs the 3 micro-batches" \
  "pipeline_model_parallel_size: 2" "virtual_pipeline_model_parallel_size: 2" "global_batch_size: 3"
finish
