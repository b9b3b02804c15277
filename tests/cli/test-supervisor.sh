#!/usr/bin/env bash
# The SaFE supervisor with the real trainer (docs/safe.md): a crash, a hang
# and a SIGKILL from outside are each restarted from the newest checkpoint
# and end with weights byte-identical to a fault-free run, as does a crash
# in the middle of a checkpoint write (the torn save is never loaded); a
# launcher killed with SIGKILL leaves no rank running; a crash on every
# attempt gives up with exit 3; a NaN stop is not restarted; events.jsonl
# and metadata.json record the faults, the restarts and the goodput.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
small_corpus corpus.txt

ITERS=300
exp() { # NAME MAX_RESTARTS HANG_TIMEOUT_S
  tiny_exp "$1" "train_iters: $ITERS" "lr_warmup_iters: 2" "lr_decay_iters: $ITERS" \
    "log_interval: 100" "save: $T/ck-$1" "load: $T/ck-$1" "save_interval: 10" "auto_continue_train: true" \
    "fault_tolerance: {max_restarts: $2, restart_backoff_s: 0.2, hang_timeout_s: $3}"
}
final() { echo "$T/ck-$1/$(printf 'iter_%07d' $ITERS)/model.safetensors"; }
same_weights() { # NAME
  if cmp -s "$(final ref)" "$(final "$1")"; then ok "$1: final weights byte-identical to the fault-free run"
  else bad "$1: final weights differ from the fault-free run"; fi
}
events() { run_events "$1"; }
# bg_train NAME: `train pretrain --config NAME.yaml` in the background, its
# pid in $lpid and its stderr in $T/NAME.err; stopped at exit if still there.
BG=()
bg_train() {
  "$PRIMUS_BIN" train pretrain --config "$1.yaml" 2>"$T/$1.err" &
  lpid=$!
  BG+=("$lpid")
}
trap 'for p in "${BG[@]}"; do kill -TERM "$p" 2>/dev/null; done; _cleanup' EXIT
# wait_step NAME N: until rank 0's heartbeat shows step >= N (15 s at
# most); sets hpid (the rank's pid) and hstep.
wait_step() {
  local hb
  for _ in $(seq 1500); do
    hb=$(newest_run "$1")/heartbeat/rank-0
    if [[ -s $hb ]] && read -r hpid hstep _ < "$hb" && [[ ${hstep:-0} -ge $2 ]]; then return 0; fi
    sleep 0.01
  done
  return 1
}
# The metadata's goodput object on one line, whitespace dropped.
goodput() { tr -d ' \t\n' < "$(newest_run "$1")/metadata.json" | grep -o '"goodput":{[^}]*}'; }

# The reference: no supervisor (max_restarts 0, no watchdog), no fault.
exp ref 0 0
run train pretrain --config ref.yaml
expect_rc "fault-free reference run" 0
expect_not_in "unsupervised when max_restarts and hang_timeout_s are 0" "supervisor:" "$ERR"
expect_file "reference final checkpoint" "$(final ref)"
expect_in "goodput of an unsupervised run" '"restarts":0}' "$(goodput ref)"
expect_in "goodput line printed" "[INFO] goodput " "$ERR"

# 1. A crash (SIGABRT before step 37) is restarted from iteration 30.
exp crash 3 0
PRIMUS_FAULT_INJECT=crash:step=37 run train pretrain --config crash.yaml
expect_rc "crash: restarted and finished" 0
expect_in "crash: says it crashed" "supervisor: rank 0 crashed: killed by SIGABRT" "$ERR"
expect_in "crash: resumed from iteration 30" "(iteration 30," "$ERR"
EV=$(events crash)
expect_in "crash: fault event" '{"event":"fault","time":' "$EV"
expect_in "crash: fault fields" '"attempt":0,"rank":0,"cause":"crash","detail":"killed by SIGABRT","step":36' "$EV"
expect_in "crash: restart event" '"attempt":1,"backoff_s":0.2}' "$EV"
expect_not_in "crash: no give_up" 'give_up' "$EV"
expect_in "crash: summary" "attempt 0, rank 0: crash - killed by SIGABRT after step 36" "$ERR"
expect_in "crash: summary quotes the rank log" "| [WARN] fault injection: crash at step 37" "$ERR"
expect_in "crash: metadata goodput counts the restart" '"restarts":1}' "$(goodput crash)"
expect_in "crash: goodput line counts the restart" "; 1 restart)" "$ERR"
expect_file "crash: launcher log of its own" "$(newest_run crash)/logs/launcher.log"
expect_in "crash: the rank's log holds both attempts" "restart 1" "$(cat "$(newest_run crash)/logs/rank-0.log")"
same_weights crash

# 2. A hang before step 50: no heartbeat for 6 s (the first step under ASan
# on a loaded machine can take 2-3 s), stopped and restarted.
exp hang 3 6
PRIMUS_FAULT_INJECT=hang:step=50 run train pretrain --config hang.yaml
expect_rc "hang: restarted and finished" 0
EV=$(events hang)
expect_in "hang: fault event" '"cause":"hang","detail":"no heartbeat for ' "$EV"
expect_in "hang: names the step and phase" 's at step 49 (phase step)' "$EV"
expect_in "hang: restart event" '{"event":"restart"' "$EV"
expect_in "hang: summary" "rank 0: hang - no heartbeat for" "$ERR"
same_weights hang

# 3. SIGKILL from outside to the rank at a random step.
exp kill 3 0
AT=$((5 + RANDOM % 150))
bg_train kill
killed=
wait_step kill "$AT" && kill -KILL "$hpid" && killed=$hpid
wait "$lpid"
RC=$?
ERR=$(cat "$T/kill.err")
if [[ -n $killed ]]; then ok "sigkill: killed rank pid $killed at step >= $AT"; else bad "sigkill: never killed the rank"; fi
expect_rc "sigkill: restarted and finished" 0
expect_in "sigkill: fault names SIGKILL" '"cause":"crash","detail":"killed by SIGKILL"' "$(events kill)"
same_weights kill

# 4. SIGTERM to the launcher reaches the rank, which saves and exits 4:
# preemption, not a fault, so no restart.
exp pre 3 0
bg_train pre
wait_step pre 3
kill -TERM "$lpid"
wait "$lpid"
RC=$?
ERR=$(cat "$T/pre.err")
expect_rc "preempted through the supervisor" 4
expect_in "preempt: passed on" "supervisor: passing SIGTERM on to the ranks" "$ERR"
expect_in "preempt: the rank saved" "preempted by SIGTERM after step" "$ERR"
expect_not_in "preempt: not a fault" '"event":"fault"' "$(events pre)"
expect_not_in "preempt: no restart" "supervisor: restart" "$ERR"

# 5. A crash on every attempt: two restarts, then give up with exit 3.
exp giveup 2 0
PRIMUS_FAULT_INJECT=crash:step=3:attempt=any run train pretrain --config giveup.yaml
expect_rc "give up after max_restarts" 3
expect_in "give up: says so" "giving up after 2 restarts (max_restarts 2)" "$ERR"
expect_in "give up: summary names SIGABRT" "attempt 2, rank 0: crash - killed by SIGABRT" "$ERR"
EV=$(events giveup)
expect_in "give up: give_up event" '{"event":"give_up","time":' "$EV"
expect_in "give up: give_up restarts" '"restarts":2}' "$EV"
expect_eq "give up: three faults" "$(grep -c '"event":"fault"' <<<"$EV")" 3
expect_in "give up: metadata exit code" '"exit_code":	3' "$(cat "$(newest_run giveup)/metadata.json")"
expect_in "give up: goodput restarts" '"restarts":2}' "$(goodput giveup)"

# 6. A NaN with nan_policy stop is reported, not restarted.
exp nan 3 0
PRIMUS_FAULT_INJECT=nan:step=4 run train pretrain --config nan.yaml
expect_rc "nan stop: exit 3" 3
EV=$(events nan)
expect_in "nan stop: fault cause nan" '"cause":"nan"' "$EV"
expect_not_in "nan stop: no restart" '"event":"restart"' "$EV"
expect_not_in "nan stop: no give_up" 'give_up' "$EV"

# 7. A crash in the middle of writing checkpoint 20: restarted from 10,
# the torn folder never loaded, the result byte-identical.
exp torn 3 0
PRIMUS_FAULT_INJECT=ckpt_crash:step=20 run train pretrain --config torn.yaml
expect_rc "ckpt_crash: restarted and finished" 0
expect_in "ckpt_crash: resumed from iteration 10" "resuming from $T/ck-torn/iter_0000010 (iteration 10," "$ERR"
expect_in "ckpt_crash: the torn save removed" "iter_0000020.tmp." "$ERR"
expect_eq "ckpt_crash: no temporary folder left" "$(ls "$T/ck-torn" | grep -c tmp)" "0"
same_weights torn

# 8. The launcher killed with SIGKILL: its rank gets SIGTERM (parent-death
# signal), saves and stops instead of running on unsupervised.
exp orphan 3 0
bg_train orphan
rpid=
wait_step orphan 3 && rpid=$hpid
kill -KILL "$lpid"
wait "$lpid" 2>/dev/null
gone=
for _ in $(seq 500); do
  if [[ -n $rpid ]] && ! kill -0 "$rpid" 2>/dev/null; then gone=1; break; fi
  sleep 0.02
done
if [[ -n $gone ]]; then ok "orphan: the rank stopped after the launcher died"
else bad "orphan: rank ${rpid:-?} still running after its launcher was killed"; kill -KILL "$rpid" 2>/dev/null; fi
expect_in "orphan: the rank saved on the way out" '"event":"preempted"' "$(events orphan)"
expect_in "orphan: and said so" "preempted by SIGTERM after step" "$(cat "$T/orphan.err")"

# 9. Under `primus slurm srun` the supervisor wraps srun (here a stand-in
# that runs the command as task 0 of 1): the step is restarted from the
# checkpoint, and the direct launcher inside does not supervise again.
mkdir -p "$T/bin"
cat > "$T/bin/srun" <<'SH'
#!/bin/bash
# srun stand-in: skips srun's options, runs the command as task 0 of 1.
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in -n | -N | -p | --ntasks | --nodes | --partition) shift 2 ;; *) shift ;; esac
done
export SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0
exec "$@"
SH
chmod +x "$T/bin/srun"
exp slurm 3 0
OUT=$(PATH="$T/bin:$PATH" PRIMUS_FAULT_INJECT=crash:step=37 "$PRIMUS_BIN" slurm srun -n 1 -- train pretrain --config slurm.yaml 2>"$T/slurm.err")
RC=$?
ERR=$(cat "$T/slurm.err")
expect_rc "slurm srun: restarted and finished" 0
expect_in "slurm srun: the supervisor saw the crash" "supervisor: rank 0 crashed: killed by SIGABRT" "$ERR"
expect_eq "slurm srun: one supervisor (one fault line)" "$(grep -c '"event":"fault"' <<<"$(events slurm)")" 1
expect_in "slurm srun: restart event" '"event":"restart"' "$(events slurm)"
same_weights slurm

finish
