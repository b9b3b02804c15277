#!/usr/bin/env bash
# test-slurm-preempt.sh - preemption end to end against real daemons (a
# private one-node cluster from scripts/slurm-local.sh, brought down by the
# EXIT trap even after a failure), then --exclude-failed and --topology for
# real:
#   - `primus slurm sbatch -p low --requeue --signal=B:USR1@30` starts a
#     training job (auto_continue_train, save == load); a job in partition
#     high preempts it; the batch shell gets USR1 and passes it to the srun
#     step; the trainer saves a checkpoint synchronously and exits 4; the
#     script requeues the job (same id, SLURM_RESTART_COUNT=1); it resumes
#     from that checkpoint once the node is free and ends with weights
#     byte-identical to an uninterrupted run; events.jsonl, metadata.json and
#     the goodput line account for the preempted time;
#   - `primus slurm srun -N1 -- preflight check --host` writes
#     failed_nodes.txt; `--exclude-failed RUN_DIR` with it empty runs, with
#     node1 planted in it is refused by Slurm (no node left) and says so;
#   - `--topology FILE` writes RUN_DIR/hostfile.txt and srun follows it
#     (--distribution=arbitrary).
# Skips (exit 0, "SKIP: ...") only when the cluster cannot start here;
# PRIMUS_REQUIRE_SLURM=1 turns that into a failure.
source "$(dirname "$0")/lib.sh"
slurm_test_setup
SL=$PRIMUS_SRC/scripts/slurm-local.sh
C=$T/slurm
REF_PID=
trap '[[ -n $REF_PID ]] && kill "$REF_PID" 2>/dev/null; "$SL" down "$C" >/dev/null 2>&1; _cleanup' EXIT
trap 'exit 130' INT TERM

start=$SECONDS
# A requeued job may start again once cred_expire has passed: keep it short.
UP=$(SLURM_LOCAL_GRACE_TIME=10 SLURM_LOCAL_CRED_EXPIRE=5 "$SL" up "$C" 2>&1)
UP_RC=$?
if [[ $UP_RC != 0 ]]; then
  echo "SKIP: the local Slurm cluster did not start (scripts/slurm-local.sh up: exit $UP_RC):"
  sed 's/^/  /' <<<"$UP" | tail -n 60
  if [[ -n ${PRIMUS_REQUIRE_SLURM:-} ]]; then bad "PRIMUS_REQUIRE_SLURM is set: a live cluster is required"; finish; exit; fi
  exit 0
fi
eval "$(grep '^export SLURM_CONF=' <<<"$UP")"
expect_in "GraceTime and cred_expire from the environment" "GraceTime=10" "$(cat "$SLURM_CONF")"
expect_in "cred_expire=5" "cred_expire=5" "$(cat "$SLURM_CONF")"
ok "cluster up in $((SECONDS - start)) s"

# daemon_tails: what the daemons said, for a failure message (also after
# a poll_until that ran out of time).
daemon_tails() {
  local f
  for f in "$C"/log/slurmctld.log "$C"/log/slurmd.log; do
    echo "---- last lines of $f"
    tail -n 20 "$f" 2>/dev/null
  done
}
trun() {
  OUT=$(timeout -k 5 120 "$PRIMUS_BIN" "$@" 2>"$T/.err" </dev/null)
  RC=$?
  ERR=$(cat "$T/.err")
}
on_poll_timeout() { daemon_tails; }
job_state() { squeue -h -j "$1" -t all -o %T 2>/dev/null; }

# ---- the scheduler's late copy of the preemption signal ----------------------
# Every rank stops after the same step, whichever got the signal; Slurm
# signals each host's processes at its own pace, so the copy meant for a
# rank that learned of the preemption from its peers may come after that
# rank saved and began to end - it must not turn its exit 4 into a death by
# SIGUSR1 (the namespace cluster's rank 1 exited 138, and the batch script
# did not requeue). `primus slurm srun -n2`; only rank 0 gets SIGUSR1;
# rank 1's second sigaction after strace attaches (the SIGUSR1 one, where
# the run ends) is held 4 s, and its copy arrives meanwhile; srun reports
# each task's own end. Rank 0, which ends first, waits in MPI_Finalize: a
# rank leaving unfinalised gets srun's PMIx plugin to cancel the step
# ("task 1: Killed"). Not under the sanitizers (LeakSanitizer cannot stop
# a process that strace traces).
late_copy_check() {
  local p r0= r1= i spid lpid env
  if ! command -v strace >/dev/null; then
    echo "# strace missing: the late-signal check is skipped"
    return 0
  fi
  if [[ -n ${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-} ]]; then
    echo "# sanitizers: the late-signal check is left to the plain build"
    return 0
  fi
  tiny_exp late "micro_batch_size: 1" "global_batch_size: 4" "train_iters: 1000000" "save: $T/ck-late" \
    "save_interval: 1000000" "log_interval: 100000"
  timeout -k 5 120 "$PRIMUS_BIN" slurm srun -n2 -- train pretrain --config late.yaml >"$T/late.out" 2>&1 </dev/null &
  lpid=$!
  REF_PID=$lpid
  # The ranks: the launchers' children (PRIMUS_LAUNCHED) of this experiment.
  for ((i = 0; i < 600; i++)); do
    for p in $(pgrep -f -- "--config late.yaml"); do
      env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)
      grep -qx PRIMUS_LAUNCHED=1 <<<"$env" || continue
      grep -qx SLURM_PROCID=0 <<<"$env" && r0=$p
      grep -qx SLURM_PROCID=1 <<<"$env" && r1=$p
    done
    [[ -n $r0 && -n $r1 ]] && grep -q '^{"step":5,' "$(newest_run late)/events.jsonl" 2>/dev/null && break
    sleep 0.1
  done
  if [[ -z $r0 || -z $r1 ]]; then
    bad "late copy: the two ranks did not start: $(tail -5 "$T/late.out")"
    return 0
  fi
  strace -qq -o /dev/null -e trace=rt_sigaction -e inject=rt_sigaction:delay_exit=4000000:when=2 -p "$r1" 2>/dev/null &
  spid=$!
  sleep 1
  kill -USR1 "$r0"
  # Rank 0 saves; rank 1, held in its last sigaction meanwhile, gets its
  # copy; rank 0 waits for it in MPI_Finalize.
  for ((i = 0; i < 300; i++)); do
    compgen -G "$T/ck-late/iter_*/DONE" >/dev/null && break
    sleep 0.1
  done
  sleep 1
  kill -USR1 "$r1" 2>/dev/null
  wait "$lpid"
  RC=$?
  REF_PID=
  wait "$spid" 2>/dev/null
  OUT=$(cat "$T/late.out")
  ERR=$OUT
  expect_rc "late copy: the run exited 4 (preempted, saved)" 4
  # srun: "tasks 0-1: Exited with exit code 4" when both end together.
  local ends
  ends=$(grep -E '^srun: error: node1: tasks? ' <<<"$OUT")
  if grep -qE 'tasks? (0-1|1): Exited with exit code 4$' <<<"$ends" && ! grep -qv 'Exited with exit code 4$' <<<"$ends"
  then ok "late copy: rank 1, whose signal came late, exited 4 like rank 0"
  else bad "late copy: how the tasks ended: ${ends:-srun said nothing}"; fi
}

small_corpus corpus.txt
late_copy_check

# ---- preemption ------------------------------------------------------------
# The llama_tiny preset (~70 ms a step here, ~0.8 s under ASan): 150 steps,
# time for the high job to arrive mid-run. Same experiment twice, only the
# checkpoint folder differs.
COMMON=("train_iters: 150" "save_interval: 1000" "log_interval: 10" "auto_continue_train: true")
preset_exp ref "save: $T/ck-ref" "load: $T/ck-ref" "${COMMON[@]}"
preset_exp pre "save: $T/ck-pre" "load: $T/ck-pre" "${COMMON[@]}"
# The uninterrupted reference runs meanwhile on the other core.
"$PRIMUS_BIN" direct -- train pretrain --config ref.yaml >"$T/ref.out" 2>&1 </dev/null &
REF_PID=$!

trun slurm sbatch -p low --requeue --signal=B:USR1@30 -- train pretrain --config pre.yaml
expect_rc "slurm sbatch -p low --requeue --signal=B:USR1@30" 0
JOB=$(sed -n 's/^Submitted batch job \([0-9][0-9]*\)$/\1/p' <<<"$OUT")
RD=$(sed -n 's/^run directory: //p' <<<"$OUT")
if [[ -n $JOB && -d $RD ]]; then ok "job $JOB, run directory $RD"; else bad "no job id or run directory in: $OUT $ERR"; fi
SCRIPT=$(cat "$RD/sbatch.sh" 2>/dev/null)
expect_in "batch script: the signal flag" "#SBATCH --signal=B:USR1@30" "$SCRIPT"
expect_in "batch script: appends to its log when requeued" "#SBATCH --open-mode=append" "$SCRIPT"
expect_in "batch script: passes signals on to the step" 'trap "prm_forward $prm_sig"' "$SCRIPT"
expect_in "batch script: requeues after exit 4" 'scontrol requeue "$SLURM_JOB_ID"' "$SCRIPT"

steps_done() { grep -c '^{"step"' "$RD/events.jsonl" 2>/dev/null; }
poll_until 90 "low job running and past step 20" bash -c "[[ \$(grep -c '^{\"step\"' '$RD/events.jsonl' 2>/dev/null) -ge 20 ]]"
# Bounds from this machine's speed: twice the time of the whole training.
STEP_MS=$(grep '^{"step"' "$RD/events.jsonl" 2>/dev/null | sed 's/.*"step_ms":\([0-9.]*\).*/\1/' | awk '{s += $1} END {printf "%d", NR ? s / NR : 100}')
TRAIN_S=$((150 * STEP_MS / 1000 + 1))
T_HIGH=$(date +%s.%N)
HIGH=$(sbatch --parsable -p high --exclusive -o "$T/high-%j.out" --wrap 'sleep 5' 2>&1)
if [[ $HIGH =~ ^[0-9]+$ ]]; then ok "high job $HIGH submitted at step $(steps_done)"; else bad "sbatch -p high: $HIGH"; fi
poll_until 40 "the training saw the signal and stopped" grep -q '"event":"preempted"' "$RD/events.jsonl"
EV=$(cat "$RD/events.jsonl" 2>/dev/null)
expect_in "preempted by SIGUSR1 (B: reaches the batch shell, which passes it on)" '"signal":"SIGUSR1"' "$EV"
PSTEP=$(grep '"event":"preempted"' "$RD/events.jsonl" | sed 's/.*"step":\([0-9]*\).*/\1/')
if [[ $PSTEP =~ ^[0-9]+$ ]] && ((PSTEP >= 20 && PSTEP < 150)); then ok "preempted mid-run, after step $PSTEP"; else bad "preempted at step '$PSTEP'"; fi
expect_file "checkpoint of the preemption step saved" "$T/ck-pre/iter_$(printf %07d "${PSTEP:-0}")/DONE"
poll_until 30 "high job ran" bash -c "[[ \$(squeue -h -j ${HIGH:-0} -t all -o %T) == COMPLETED ]]"
poll_until $((60 + 2 * TRAIN_S)) "low job requeued, resumed and completed" bash -c "[[ \$(squeue -h -j ${JOB:-0} -t all -o %T) == COMPLETED ]]"
trun slurm status "${JOB:-0}"
expect_in "status: completed" "job $JOB: COMPLETED" "$OUT"
expect_in "status: one requeue" "restarts: 1" "$OUT"
expect_in "status: exit code 0" "exit code: 0:0" "$OUT"
SLOG=$(cat "$RD/logs/slurm-$JOB.out" 2>/dev/null)
expect_in "log: the first run's preemption is kept (open-mode append)" "preempted by SIGUSR1 after step $PSTEP" "$SLOG"
expect_in "log: the batch script requeued the job" "requeueing job $JOB" "$SLOG"
expect_in "log: the second run knows it was requeued" "slurm job requeued (SLURM_RESTART_COUNT=1)" "$SLOG"
expect_in "log: resumed from the preemption checkpoint" "resuming from $T/ck-pre/iter_$(printf %07d "${PSTEP:-0}")" "$SLOG"
expect_in "log: trained the rest" "trained $((150 - ${PSTEP:-0})) steps" "$SLOG"
expect_in "requeued attempt ran with SLURM_RESTART_COUNT=1" "SLURM_RESTART_COUNT=1" "$(cat "$RD/env/env_dump.txt" 2>/dev/null)"
EV=$(cat "$RD/events.jsonl" 2>/dev/null)
expect_in "events: requeue" '"event":"requeue","restart_count":1' "$EV"
expect_eq "every step ran once over both attempts" "$(grep '^{"step"' <<<"$EV" | sed 's/.*"step":\([0-9]*\),.*/\1/' | sort -n | uniq | wc -l) $(grep -c '^{"step"' <<<"$EV")" "150 150"

poll_until $((60 + 2 * TRAIN_S)) "uninterrupted reference run ended" bash -c "! kill -0 $REF_PID 2>/dev/null"
kill "$REF_PID" 2>/dev/null
wait "$REF_PID"
REF_RC=$?
REF_PID=
expect_eq "uninterrupted reference run" "$REF_RC" 0
if cmp -s "$T/ck-ref/iter_0000150/model.safetensors" "$T/ck-pre/iter_0000150/model.safetensors"; then
  ok "preempted + requeued run: weights byte-identical to the uninterrupted run"
else
  bad "weights differ: $(cmp "$T/ck-ref/iter_0000150/model.safetensors" "$T/ck-pre/iter_0000150/model.safetensors" 2>&1)"
fi

META=$(tr -d ' \t\n' <"$RD/metadata.json" 2>/dev/null)
expect_in "metadata: exit code 0" '"exit_code":0' "$META"
expect_in "metadata: the requeue" '"slurm_restart_count":1' "$META"
expect_in "metadata: one preemption" '"preemptions":1' "$META"
PRE_S=$(grep -o '"preempted_s":[0-9.]*' <<<"$META" | cut -d: -f2)
WALL=$(grep -o '"wall_s":[0-9.]*' <<<"$META" | cut -d: -f2)
DUR=$(grep -o '"duration_s":[0-9.e+-]*' <<<"$META" | cut -d: -f2)
# The job waited for the high job (5 s) and cred_expire (5 s) at least.
if awk -v p="${PRE_S:-0}" 'BEGIN { exit !(p >= 5 && p < 120) }'; then ok "goodput: preempted ${PRE_S} s"; else bad "goodput: preempted_s '${PRE_S}'"; fi
T_END=$(date +%s.%N)
if awk -v w="${WALL:-0}" -v d="${DUR:-0}" -v p="${PRE_S:-0}" -v a="$T_HIGH" -v b="$T_END" \
  'BEGIN { exit !(w > p && w <= b - a + 120 && (d - w < 0.01 && w - d < 0.01)) }'; then
  ok "goodput: wall ${WALL} s spans both attempts (duration_s ${DUR})"
else
  bad "goodput wall '${WALL}' / duration '${DUR}' / preempted '${PRE_S}'"
fi
expect_in "goodput line names the preemption" "preempted $(printf %.1f "${PRE_S:-0}") s" "$SLOG"
expect_in "goodput line counts it" "; 0 restarts, 1 preemption)" "$SLOG"
ok "preemption part in $((SECONDS - start)) s"

# ---- preflight under Slurm, then --exclude-failed ----------------------------
trun slurm srun -N1 -- preflight check --host
expect_rc "slurm srun -N1 -- preflight check --host" 0
# The run directory the node wrote into (srun's task may name its own run
# directory a second later: the newest by name is not always the one).
PF=$(for d in "$T"/output/default/*/preflight-check/run-*; do [[ -d $d/nodes ]] && echo "$d"; done | tail -1)
ls -d "$T"/output/default/*/preflight-check/run-* 2>/dev/null | sed 's/^/# preflight run directory: /'
expect_file "preflight: node file named after Slurm's node (node1)" "$PF/nodes/node1.json"
expect_file "preflight: failed_nodes.txt" "$PF/failed_nodes.txt"
expect_eq "preflight: no failed node" "$(cat "$PF/failed_nodes.txt" 2>/dev/null)" ""
trun slurm srun -N1 --exclude-failed "$PF" -- preflight check --host
expect_rc "--exclude-failed with an empty list runs" 0
expect_in "--exclude-failed: said so" "failed_nodes.txt is empty, nothing to exclude" "$ERR"
expect_not_in "--exclude-failed: no --exclude added" "--exclude" "$(grep 'slurm: srun' <<<"$ERR")"
BAD=$T/badrun
mkdir -p "$BAD"
echo node1 >"$BAD/failed_nodes.txt"
trun slurm srun -N1 --immediate=10 --exclude-failed "$BAD" -- preflight check --host
if [[ $RC != 0 ]]; then ok "node1 excluded: the job is refused (exit $RC)"; else bad "node1 excluded, but the job ran"; fi
expect_in "--exclude-failed: the srun command excludes node1" "--exclude=node1" "$ERR"
expect_in "--exclude-failed: said what it excluded" "excluding 1 failed node: node1" "$ERR"
expect_in "Slurm says why" "srun: error:" "$ERR"
trun slurm srun -N1 --exclude-failed "$T/nowhere" -- preflight check --host
expect_rc "--exclude-failed without failed_nodes.txt" 2
expect_in "the missing file is named" "$T/nowhere/failed_nodes.txt does not exist" "$ERR"

# ---- --topology on the one-node cluster ------------------------------------
printf '# node rack ip\nnode1 rack1 127.0.0.1\n' >"$T/topo.txt"
small_corpus corpus.txt
tiny_exp topo "save: $T/ck-topo" "save_interval: 8"
trun slurm srun -N1 -n2 --topology "$T/topo.txt" -- train pretrain --config topo.yaml
expect_rc "slurm srun -N1 -n2 --topology" 0
TR=$(newest_run topo)
expect_eq "hostfile in the run directory (one line a rank)" "$(cat "$TR/hostfile.txt" 2>/dev/null | tr '\n' ' ')" "node1 node1 "
expect_in "srun follows the hostfile" "--distribution=arbitrary" "$(grep 'slurm: srun' <<<"$ERR")"
expect_in "ranks ran data parallel" "data parallel: 2 ranks" "$ERR"
expect_in "SLURM_HOSTFILE reached the ranks" "SLURM_HOSTFILE=$TR/hostfile.txt" "$(cat "$TR/env/env_dump.txt" 2>/dev/null)"
printf 'node1 rack1\n' >"$T/topo-bad.txt"
trun slurm srun -N1 --topology "$T/topo-bad.txt" -- train pretrain --config topo.yaml
expect_rc "bad topology file" 2
expect_in "bad topology names file and line" "$T/topo-bad.txt:1: expected NODE RACK IP" "$ERR"

ok "whole test in $((SECONDS - start)) s"
finish
