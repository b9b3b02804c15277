# sp-lib.sh - what test-train-sp.sh and test-train-sp-combo.sh share
# (sourced after lib.sh and multirank_setup): the 6-step tiny experiment,
# its launch on one rank or several, and the check that a run's losses and
# final weights follow a reference run's.
SP="sequence_parallel: true"
exp() { # NAME [KEY: VALUE...]
  local n=$1
  shift
  tiny_exp "$n" "micro_batch_size: 2" "global_batch_size: 4" "train_iters: 6" "log_interval: 3" \
    "save: $T/ck-$n" "save_interval: 6" "lr_decay_iters: 6" "lr_warmup_iters: 0" "$@"
}
final() { echo "$T/ck-$1/iter_0000006/model.safetensors"; }
launch() { # NPROC NAME
  if [[ $1 == 1 ]]; then run train pretrain --config "$2.yaml"
  else run direct --nproc "$1" -- train pretrain --config "$2.yaml"; fi
  expect_rc "$2 on $1 rank(s)" 0
}
# same NAME REF WHAT [TOL]: NAME's losses and final weights follow REF's.
same() {
  local n=$1 ref=$2 what=$3 tol=${4:-1e-5} d w
  expect_eq "$what: 6 steps logged" "$(run_losses "$n" | wc -l)" 6
  d=$(loss_diff "$ref" "$n")
  if within "$d" "$tol"; then ok "$what: losses within $tol of $ref (worst $d)"; else bad "$what: losses differ from $ref by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$ref")" "$(final "$n")")
  if within "$w" "$tol"; then ok "$what: whole-model weights within $tol of $ref ($w)"; else bad "$what: weights differ from $ref by $w"; fi
}
