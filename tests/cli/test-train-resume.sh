#!/usr/bin/env bash
# Bit-exact resume: training 0 -> 8 in one go, and 0 -> 5, stop, then 5 -> 8
# with auto_continue_train, give byte-identical weights, optimizer state and
# per-step losses. A checkpoint without DONE, or with a damaged optimizer
# file, is skipped with a warning naming it, and the one before is used.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2
small_corpus corpus.txt

exp() { # NAME SAVE
  tiny_exp "$1" "lr_warmup_iters: 2" "lr_decay_iters: 8" "log_interval: 1" "save: $2" "load: $2" \
    "save_interval: 5" "auto_continue_train: true"
}
losses() { cat "$@" | grep '^{"step"' | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }

exp full "$T/full"
run train pretrain --config full.yaml
expect_rc "0 -> 8 in one go" 0
expect_in "nothing to resume at first" "no complete checkpoint" "$ERR"
FULL_EV=$(newest_run full)/events.jsonl

exp split "$T/split"
run train pretrain --config split.yaml train_iters=5
expect_rc "0 -> 5" 0
FIRST_EV=$(newest_run split)/events.jsonl
for f in model.safetensors config.json optim-rank-00000.bin state-rank-00000.json DONE; do
  expect_file "checkpoint has $f" "$T/split/iter_0000005/$f"
done
expect_in "state records the data position" '"consumed_samples": 20' "$(cat "$T/split/iter_0000005/state-rank-00000.json")"
sleep 1
run train pretrain --config split.yaml
expect_rc "5 -> 8, resumed" 0
expect_in "says where it resumed" "resuming from $T/split/iter_0000005 (iteration 5" "$ERR"
SECOND_EV=$(newest_run split)/events.jsonl
expect_eq "steps 6..8 only in the second run" "$(losses "$SECOND_EV" | cut -d' ' -f1 | tr '\n' ' ')" "6 7 8 "
owner_less() { if [[ $1 == *.json ]]; then grep -v '"run_id"\|"lineage"' "$1"; else cat "$1"; fi; }
for f in model.safetensors optim-rank-00000.bin state-rank-00000.json; do
  # (state-rank-*.json also names the run and lineage that wrote it: those lines differ)
  if [[ -s $T/split/iter_0000008/$f ]] && cmp -s <(owner_less "$T/full/iter_0000008/$f") <(owner_less "$T/split/iter_0000008/$f"); then
    ok "$f byte-identical to the uninterrupted run"
  else bad "$f differs from the uninterrupted run"; fi
done
expect_eq "a resumed run keeps the lineage it resumed" \
  "$(grep '"lineage"' "$T/split/iter_0000008/state-rank-00000.json")" \
  "$(grep '"lineage"' "$T/split/iter_0000005/state-rank-00000.json")"
expect_eq "every step's loss identical" "$(losses "$FIRST_EV" "$SECOND_EV")" "$(losses "$FULL_EV")"

# A torn checkpoint (no DONE) and a damaged optimizer file are never loaded.
rm "$T/split/iter_0000008/DONE"
sleep 1
run train pretrain --config split.yaml train_iters=9 save_interval=100
expect_rc "resume past a torn checkpoint" 0
expect_in "names the torn folder" "iter_0000008: no DONE marker" "$ERR"
expect_in "uses the one before" "resuming from $T/split/iter_0000005" "$ERR"
printf 'x' | dd of="$T/full/iter_0000008/optim-rank-00000.bin" bs=1 seek=1000 conv=notrunc 2>/dev/null
sleep 1
run train pretrain --config full.yaml train_iters=9 save_interval=100
expect_rc "resume past a damaged optimizer file" 0
expect_in "names the checksum" "optim-rank-00000.bin: checksum mismatch" "$ERR"
expect_in "falls back to iteration 5" "resuming from $T/full/iter_0000005" "$ERR"
# ckpt_keep: only the newest complete checkpoints stay; a torn one is left.
exp keep "$T/keep"
run train pretrain --config keep.yaml save_interval=2 ckpt_keep=2
expect_rc "train with ckpt_keep 2" 0
expect_eq "the two newest remain" "$(ls "$T/keep" | tr '\n' ' ')" "iter_0000006 iter_0000008 latest_checkpointed_iteration.txt "
expect_in "says what it removed" "ckpt_keep 2: removed $T/keep/iter_0000002" "$ERR"
# Preemption: SIGTERM to the launcher mid-run finishes the step, saves a
# checkpoint and exits 4; the rerun resumes and ends byte-identical to an
# uninterrupted run.
LONG=(train_iters=400 lr_decay_iters=400 save_interval=1000 log_interval=100)
exp ref "$T/ref"
run train pretrain --config ref.yaml "${LONG[@]}"
expect_rc "uninterrupted 400 steps" 0
exp pre "$T/pre"
"$PRIMUS_BIN" train pretrain --config pre.yaml "${LONG[@]}" 2>"$T/pre.err" &
pid=$!
EV=
for _ in $(seq 400); do
  EV=$(ls "$T"/ws/team/tester/pre/run-*/events.jsonl 2>/dev/null | tail -1)
  [[ -n $EV ]] && (($(grep -c '^{"step"' "$EV") >= 3)) && break
  sleep 0.05
done
kill -TERM "$pid"
wait "$pid"
RC=$?
expect_eq "preempted run exits 4" "$RC" 4
expect_in "says it was preempted and saved" "preempted by SIGTERM after step" "$(cat "$T/pre.err")"
STOP=$(grep '"event":"preempted"' "$EV" | sed 's/.*"step":\([0-9]*\).*/\1/')
if [[ -n $STOP ]] && ((STOP < 400)); then ok "stopped at step $STOP"; else bad "no preempted event: '$STOP'"; fi
expect_file "a complete checkpoint at the stop" "$T/pre/$(printf 'iter_%07d' "${STOP:-0}")/DONE"
run train pretrain --config pre.yaml "${LONG[@]}"
expect_rc "the rerun resumes" 0
expect_in "from the preemption checkpoint" "(iteration $STOP," "$ERR"
if cmp -s "$T/pre/iter_0000400/model.safetensors" "$T/ref/iter_0000400/model.safetensors"; then
  ok "weights after preemption and resume are byte-identical"
else
  bad "weights after preemption and resume differ"
fi
finish
