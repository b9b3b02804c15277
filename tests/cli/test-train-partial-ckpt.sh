#!/usr/bin/env bash
# Megatron-LM's no_load_optim, no_load_rng, no_save_optim and no_save_rng.
# A run 0 -> 8 in one go is the reference; 0 -> 5, then 5 -> 8 resumed:
# - no_load_optim: the weights, iteration and data position are resumed
#   (step 6's loss is the reference's), the AdamW moments start at zero
#   (step 7's is not), said in the log;
# - no_save_optim: the checkpoint has no optim-rank file and says so; its
#   resume warns and starts the moments at zero: the same losses and final
#   weights as no_load_optim's resume of a full checkpoint;
# - no_save_rng: the state has no seed ("rng": false); the resume warns and
#   takes its own seed (the same one here, so it continues exactly);
# - no_load_rng with another seed: said, and the data order follows it; the
#   same without no_load_rng warns that the seeds differ.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
small_corpus corpus.txt

exp() { # NAME SAVE [KEY: VALUE]...
  local n=$1 d=$2
  shift 2
  tiny_exp "$n" "lr_warmup_iters: 2" "lr_decay_iters: 8" "log_interval: 1" "save: $d" "load: $d" \
    "save_interval: 5" "auto_continue_train: true" "$@"
}
losses() { cat "$@" | grep '^{"step"' | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
loss_at() { losses "$1" | awk -v s="$2" '$1 == s {print $2}'; }
# split NAME [KEY=VALUE]... : 0 -> 5 with the first settings, then 5 -> 8.
split_run() {
  local n=$1
  shift
  run train pretrain --config "$n.yaml" train_iters=5
  expect_rc "$n: 0 -> 5" 0
  sleep 1
  run train pretrain --config "$n.yaml" "$@"
  expect_rc "$n: 5 -> 8 resumed" 0
  expect_in "$n: resumed at 5" "resuming from $T/$n/iter_0000005 (iteration 5" "$ERR"
  RESUME_ERR=$ERR
  SECOND=$(newest_run "$n")/events.jsonl
}

exp full "$T/full"
run train pretrain --config full.yaml
expect_rc "reference 0 -> 8" 0
FULL=$(newest_run full)/events.jsonl

# no_load_optim on a full checkpoint.
exp nlo "$T/nlo"
split_run nlo no_load_optim=true
expect_in "no_load_optim: said" "no_load_optim: resumed the weights, iteration 5 and data position; the AdamW moments start at zero" "$RESUME_ERR"
expect_eq "no_load_optim: step 6 loss is the reference's (weights and data resumed)" \
  "$(loss_at "$SECOND" 6)" "$(loss_at "$FULL" 6)"
if [[ -n $(loss_at "$SECOND" 7) && $(loss_at "$SECOND" 7) != "$(loss_at "$FULL" 7)" ]]; then
  ok "no_load_optim: step 7 differs (fresh moments)"
else bad "no_load_optim: step 7 $(loss_at "$SECOND" 7) equals the reference's"; fi
NLO=$SECOND

# no_save_optim: the checkpoint leaves the moments out.
exp nso "$T/nso" "no_save_optim: true"
run train pretrain --config nso.yaml train_iters=5
expect_rc "no_save_optim: 0 -> 5" 0
expect_in "no_save_optim: warned at start" "no_save_optim: checkpoints in $T/nso leave out the optimizer state" "$ERR"
if [[ -e $T/nso/iter_0000005/DONE && ! -e $T/nso/iter_0000005/optim-rank-00000.bin ]]; then
  ok "no_save_optim: a complete checkpoint without optim-rank-00000.bin"
else bad "no_save_optim: optim file present or checkpoint incomplete: $(ls "$T/nso/iter_0000005" 2>&1)"; fi
expect_in "no_save_optim: the state says so" '"optimizer": false' "$(cat "$T/nso/iter_0000005/state-rank-00000.json" 2>/dev/null)"
sleep 1
run train pretrain --config nso.yaml no_save_optim=false
expect_rc "no_save_optim: 5 -> 8 resumed" 0
expect_in "no_save_optim: the resume says what is missing" "has no optimizer state (saved with no_save_optim: true): the AdamW moments start at zero" "$ERR"
expect_eq "no_save_optim: the same losses as no_load_optim's resume" \
  "$(losses "$(newest_run nso)/events.jsonl")" "$(losses "$NLO")"
if cmp -s "$T/nso/iter_0000008/model.safetensors" "$T/nlo/iter_0000008/model.safetensors"; then
  ok "no_save_optim: final weights byte-identical to no_load_optim's"
else bad "no_save_optim: final weights differ from no_load_optim's"; fi

# no_save_rng: no seed saved; the resume takes its own.
exp nsr "$T/nsr" "no_save_rng: true"
split_run nsr
ST=$(cat "$T/nsr/iter_0000005/state-rank-00000.json" 2>/dev/null)
expect_in "no_save_rng: the state says so" '"rng": false' "$ST"
expect_not_in "no_save_rng: no seed saved" '"seed"' "$ST"
expect_in "no_save_rng: the resume says what is missing" "has no random state (saved with no_save_rng: true): this run's seed 1234" "$RESUME_ERR"
expect_eq "no_save_rng: same seed, so the losses continue the reference's" \
  "$(losses "$SECOND")" "$(losses "$FULL" | awk '$1 > 5')"

# no_load_rng with another seed: said; without it the mismatch is warned.
exp nlr "$T/nlr"
split_run nlr no_load_rng=true seed=99
expect_in "no_load_rng: said" "no_load_rng: the checkpoint's random state is not loaded; this run's seed 99" "$RESUME_ERR"
expect_not_in "no_load_rng: no mismatch warning" "but this run's seed is" "$RESUME_ERR"
rm -rf "$T/nlr/iter_0000008"
echo 5 > "$T/nlr/latest_checkpointed_iteration.txt"
run train pretrain --config nlr.yaml seed=99
expect_rc "another seed without no_load_rng" 0
expect_in "the seeds' mismatch is warned" "the checkpoint's random state is seed 1234 but this run's seed is 99" "$ERR"

finish
