# zero-lib.sh - what test-train-zero.sh and test-train-layout8.sh share
# (sourced after lib.sh and multirank_setup, ZERO_GB set to the global
# batch): the 12-step runs of the 4-layer tiny model saved at steps 6 and
# 12, their launch on one rank or several, the check that a run's losses
# and final weights follow a reference run's, a step-6 checkpoint resumed
# in another layout, and the optimizer's size from a rank's memory line.
exp() { # NAME [KEY: VALUE...]: 12 steps of ZERO_GB micro-batches of 1, saved at 6 and 12
  local n=$1
  shift
  tiny_exp "$n" "micro_batch_size: 1" "global_batch_size: $ZERO_GB" "train_iters: 12" \
    "log_interval: 6" "save: $T/ck-$n" "load: $T/ck-$n" "auto_continue_train: true" \
    "save_interval: 6" "lr_decay_iters: 12" "$@"
  sed -i 's/num_layers: 2/num_layers: 4/' "$n.yaml"
}
final() { echo "$T/ck-$1/iter_0000012/model.safetensors"; }
launch() { # NP NAME
  if [[ $1 == 1 ]]; then run train pretrain --config "$2.yaml"
  else run direct --nproc "$1" -- train pretrain --config "$2.yaml"; fi
  expect_rc "$2 on $1 rank(s)" 0
}
# same NAME REF WHAT [STEPS]: NAME's losses and final weights follow REF's.
same() {
  local n=$1 ref=$2 what=$3 steps=${4:-12} d w
  expect_eq "$what: $steps steps logged once" "$(run_losses "$n" | wc -l)" "$steps"
  d=$(loss_diff "$ref" "$n")
  if within "$d" 1e-5; then ok "$what: losses within 1e-5 of $ref (worst $d)"; else bad "$what: losses differ from $ref by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$ref")" "$(final "$n")")
  if within "$w" 1e-5; then ok "$what: whole-model weights within 1e-5 of $ref ($w)"; else bad "$what: weights differ by $w"; fi
}
# The optimizer size from the start-up memory line of rank R, in bytes.
optim_bytes() { # R
  grep "rank $1/" <<<"$ERR" | grep -o 'optimizer [0-9.]* [KMG]*i*B' | head -1 | awk '{ v = $2; u = $3;
    m = u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1; printf "%d", v * m }'
}
# resume NAME FROM NP CMD...: FROM's step-6 checkpoint resumed on NP ranks
# to step 12; CMD writes NAME's experiment.
resume() {
  local n=$1 from=$2 np=$3
  shift 3
  rm -rf "$T/ck-$n" && mkdir -p "$T/ck-$n"
  cp -r "$T/ck-$from/iter_0000006" "$T/ck-$n/"
  echo 6 >"$T/ck-$n/latest_checkpointed_iteration.txt"
  "$@"
  launch "$np" "$n"
  expect_in "$n: from iteration 6" "iteration 6, $((6 * ZERO_GB)) samples consumed" "$ERR"
}
