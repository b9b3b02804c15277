#!/usr/bin/env bash
# Checkpoints belong to the run that wrote them (issue 30): the README's
# pretraining, then its fire drill into the same `save` folder. A start
# from scratch into a folder holding another run's checkpoints is refused
# (exit 2, naming the folder, its newest checkpoint and the ways out);
# with overwrite_checkpoints the drill's restart resumes its own iteration
# 10 (the tracker's), never the other run's 20, ckpt_keep never removes
# the drill's checkpoints in favour of the other run's, and the weights
# left behind are byte-identical to a clean run's. A crash before the
# first save restarts from scratch. auto_continue_train takes over the
# lineage (and ckpt_keep prunes it); the tracker is the authority; a
# replay saves into a fresh folder. The model is shrunk by overrides.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=1
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR PRIMUS_RUN_ID DATA TRAIN_ITERS LR
small_corpus corpus.txt
export PRIMUS_WORKSPACE=$T/ws DATA=$T/corpus.txt PRIMUS_TEAM=team USER=tester
EX=$PRIMUS_SRC/configs/examples/llama_tiny-pretrain.yaml
SMALL=(hidden_size=32 num_layers=2 num_attention_heads=4 num_query_groups=2 ffn_hidden_size=64
       seq_length=32 max_position_embeddings=64 micro_batch_size=4 global_batch_size=4
       eval_iters=0 lr_warmup_iters=2 fault_tolerance.restart_backoff_s=0.1)
CK=$T/ws/llama_tiny-pretrain/checkpoints
it() { printf '%s/iter_%07d' "${2:-$CK}" "$1"; }
field() { # KEY ITER [SAVE]: a string field of the checkpoint's state json
  grep -o "\"$1\": \"[^\"]*\"" "$(it "$2" "${3:-}")/state-rank-00000.json" 2>/dev/null | cut -d'"' -f4
}
run_name() { basename "$(newest_run llama_tiny-pretrain)"; }
tracker() { cat "$CK/latest_checkpointed_iteration.txt" 2>/dev/null; }

# 1. The README's pretraining, shortened: iterations 15 and 20 stay (ckpt_keep 2).
run train pretrain --config "$EX" "${SMALL[@]}" save_interval=5 train_iters=20
expect_rc "pretraining" 0
A=$(run_name)
expect_in "iteration 20 carries the run's id" "$A-" "$(field run_id 20)"
expect_eq "a fresh start is its own lineage" "$(field lineage 20)" "$(field run_id 20)"
expect_eq "tracker says 20" "$(tracker)" 20
cp "$(it 20)/model.safetensors" a20.st

# 2. The fire drill exactly as the README writes it, into the same save:
# refused before any step, nothing touched, no restart.
PRIMUS_FAULT_INJECT=crash:step=15 run train pretrain --config "$EX" "${SMALL[@]}" \
  train_iters=20 save_interval=5 fault_tolerance.max_restarts=2
expect_rc "a fresh start into another run's save" 2
expect_in "names the folder and its newest checkpoint" \
  "save: $CK already holds checkpoints of another run (the newest: $(it 20), iteration 20)" "$ERR"
expect_in "offers auto_continue_train" "auto_continue_train: true (with load: $CK)" "$ERR"
expect_in "offers a new folder and overwrite_checkpoints" \
  "use a new or empty save folder, or set overwrite_checkpoints: true" "$ERR"
expect_not_in "not restarted" "supervisor: restart" "$ERR"
if cmp -s a20.st "$(it 20)/model.safetensors"; then ok "the other run's iteration 20 untouched"
else bad "the other run's iteration 20 changed"; fi

# 3. The same drill with overwrite_checkpoints: the restart resumes the
# drill's own iteration 10 (the tracker's), not the other run's 15 or 20.
PRIMUS_FAULT_INJECT=crash:step=15 run train pretrain --config "$EX" "${SMALL[@]}" \
  train_iters=20 save_interval=5 fault_tolerance.max_restarts=2 overwrite_checkpoints=true
expect_rc "fire drill with overwrite_checkpoints" 0
B=$(run_name)
expect_in "warns that it writes over another run's" "overwrite_checkpoints: $CK holds checkpoints of another run" "$ERR"
expect_in "crashed and restarted" "supervisor: rank 0 crashed" "$ERR"
expect_in "restart resumes the drill's own iteration 10" "resuming from $(it 10) (iteration 10," "$ERR"
expect_not_in "never resumes the other run's 20" "resuming from $(it 20)" "$ERR"
expect_in "the other run's 20 is above the tracker" "$(it 20): not resumed: newer than latest_checkpointed_iteration.txt (10)" "$ERR"
expect_not_in "before the crash ckpt_keep removed nothing (the drill had 2 of its own)" \
  "ckpt_keep 2: removed" "$(sed '/supervisor: rank 0 crashed/q' <<<"$ERR")"
expect_in "iteration 20 is the drill's" "$B-" "$(field run_id 20)"
expect_in "iteration 15 is the drill's" "$B-" "$(field run_id 15)"
expect_eq "only the drill's 15 and 20 stay" "$(cd "$CK" && echo iter_*)" "iter_0000015 iter_0000020"
expect_eq "tracker says 20" "$(tracker)" 20
cp "$(it 20)/model.safetensors" b20.st

# The same run without a fault, into a folder of its own: the drill's
# weights are this run's, byte for byte.
run train pretrain --config "$EX" "${SMALL[@]}" train_iters=20 save_interval=5 save="$T/ref"
expect_rc "clean reference run" 0
REF=$(run_name)
if cmp -s "$(it 20 "$T/ref")/model.safetensors" b20.st; then ok "drill's final weights byte-identical to the clean run's"
else bad "drill's final weights differ from the clean run's"; fi

# 4. A crash before the drill's first save: the restart finds no checkpoint
# of its own and starts again from scratch (not from the other run's 20).
PRIMUS_FAULT_INJECT=crash:step=3 run train pretrain --config "$EX" "${SMALL[@]}" \
  train_iters=20 save_interval=5 fault_tolerance.max_restarts=2 overwrite_checkpoints=true
expect_rc "crash before the first save" 0
expect_in "restart: none of its own" "no complete checkpoint of this run" "$ERR"
expect_not_in "restart: did not resume another run's" "resuming from $CK/" "$ERR"
if cmp -s "$(it 20 "$T/ref")/model.safetensors" "$(it 20)/model.safetensors"; then
  ok "restarted from scratch: final weights byte-identical to the clean run's"
else bad "restart from scratch: final weights differ from the clean run's"; fi
C=$(run_name)

# 5. auto_continue_train resumes the tracker's checkpoint and takes over
# its lineage; ckpt_keep then prunes that lineage.
run train pretrain --config "$EX" "${SMALL[@]}" train_iters=25 save_interval=5 \
  auto_continue_train=true load="$CK"
expect_rc "auto_continue_train" 0
expect_in "resumed iteration 20" "resuming from $(it 20) (iteration 20," "$ERR"
expect_in "iteration 25 written by the new run" "$(run_name)-" "$(field run_id 25)"
expect_in "iteration 25 keeps the lineage" "$C-" "$(field lineage 25)"
expect_in "ckpt_keep prunes the lineage" "ckpt_keep 2: removed $(it 15)" "$ERR"

# 6. The tracker is the authority: a checkpoint above it is never resumed.
echo 20 > "$CK/latest_checkpointed_iteration.txt"
run train pretrain --config "$EX" "${SMALL[@]}" train_iters=25 save_interval=5 \
  auto_continue_train=true load="$CK"
expect_rc "auto_continue_train with the tracker at 20" 0
expect_in "resumed the tracker's 20" "resuming from $(it 20) (iteration 20," "$ERR"
expect_in "skipped 25, above the tracker" "$(it 25): not resumed: newer than latest_checkpointed_iteration.txt (20)" "$ERR"

# 7. A replay of the clean run saves into a fresh folder: the original's
# checkpoints stay as they were, and the replay's weights equal them.
cp "$(it 20 "$T/ref")/model.safetensors" ref20.st
run replay "$T/ws/team/tester/llama_tiny-pretrain/$REF"
expect_rc "replay of a run that saved checkpoints" 0
expect_in "says where the replay saves" "replay: the recorded run saved checkpoints in $T/ref; this replay saves into $T/ref-replay-" "$ERR"
if cmp -s ref20.st "$(it 20 "$T/ref")/model.safetensors"; then ok "replay left the original's checkpoints alone"
else bad "replay changed the original's checkpoints"; fi
RP=$(ls -d "$T"/ref-replay-* 2>/dev/null | head -1)
if [[ -n $RP ]] && cmp -s ref20.st "$(it 20 "$RP")/model.safetensors"; then ok "the replay's weights equal the original's"
else bad "the replay's checkpoint is missing or differs ($RP)"; fi

finish
