#!/usr/bin/env bash
# test-cluster-preempt.sh - preemption of a multi-host job on the namespace
# cluster (scripts/cluster-local.sh, three hosts, brought down by the EXIT
# trap), test-slurm-preempt.sh's approach across hosts:
#   - `primus slurm sbatch -p low -N2 -n2 --requeue --signal=B:USR1@30`
#     trains one data-parallel rank on each of two hosts
#     (auto_continue_train, save == load);
#   - a job in partition high that wants all three hosts preempts it: the
#     batch shell (on the first host) gets USR1 and passes it to the srun
#     step, which passes it to both ranks; they save a checkpoint and exit
#     4 (a rank that stopped through the other's signal ignores its own
#     late copy: it used to exit 138 here, and the job was not requeued);
#     the script requeues the job (same id, SLURM_RESTART_COUNT=1);
#   - once the hosts are free it resumes on two hosts from that checkpoint
#     and ends with weights byte-identical to an uninterrupted 2-rank run
#     (mpirun on one host); events.jsonl and metadata.json count the
#     preemption.
# Exit 77 (skipped) without root, namespaces or Slurm.
source "$(dirname "$0")/lib.sh"
# Under the sanitizers (multi-host preemption took ~2 minutes there) this test is left to
# the plain build: test-cluster-train and test-cluster-fault run the
# cluster under ASan, and the code paths here are those of
# test-slurm-preempt and the preflight tests, which the ASan build runs.
if [[ -n ${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-} ]]; then
  echo "SKIP: left to the plain build under the sanitizers"
  exit 77
fi

start=$SECONDS
# A requeued job may start again once cred_expire has passed: keep it short.
cluster_up_or_skip 3 CLUSTER_LOCAL_GRACE_TIME=10 CLUSTER_LOCAL_CRED_EXPIRE=5
on_poll_timeout() { tail -n 15 "$C/log/slurmctld.log"; }

small_corpus corpus.txt
# 1000 steps of 8 micro-batches a rank: about 2 s on an idle machine, where
# a step takes about 2 ms; the high job is submitted as soon as step 20 is
# logged and preempts within a few hundred milliseconds (on the idle
# machine: step 64 and step 583 of runs that had waited longer). On a
# loaded machine a step takes 70-300 ms (the all-reduce waits for the
# other rank's turn on the CPU): a few minutes in all.
STEPS=1000
COMMON=("micro_batch_size: 1" "global_batch_size: 16" "train_iters: $STEPS" "save_interval: $STEPS" "log_interval: 500" "auto_continue_train: true")
tiny_exp ref "save: $T/ck-ref" "load: $T/ck-ref" "${COMMON[@]}"
tiny_exp pre "save: $T/ck-pre" "load: $T/ck-pre" "${COMMON[@]}"
run direct --nproc 2 -- train pretrain --config ref.yaml
expect_rc "uninterrupted reference: 2 ranks on one host" 0

crun slurm sbatch -p low -N2 -n2 --requeue --signal=B:USR1@30 -- train pretrain --config pre.yaml
expect_rc "slurm sbatch -p low -N2 -n2 --requeue --signal=B:USR1@30" 0
JOB=$(sed -n 's/^Submitted batch job \([0-9][0-9]*\)$/\1/p' <<<"$OUT")
RD=$(sed -n 's/^run directory: //p' <<<"$OUT")
if [[ -n $JOB && -d $RD ]]; then ok "job $JOB, run directory $RD"; else bad "no job id or run directory in: $OUT $ERR"; fi
poll_until 60 "job running on two hosts, past step 20" bash -c "[[ \$(grep -c '^{\"step\"' '$RD/events.jsonl' 2>/dev/null) -ge 20 ]]"
expect_eq "the job holds two hosts" "$(cx squeue -h -j "${JOB:-0}" -o %N)" "cn[1-2]"
HIGH=$(cx sbatch --parsable -p high -N3 --exclusive -o "$T/high-%j.out" --wrap 'sleep 3' 2>&1)
if [[ $HIGH =~ ^[0-9]+$ ]]; then ok "high job $HIGH (all three hosts) submitted"; else bad "sbatch -p high: $HIGH"; fi
poll_until 40 "the training saw the signal and stopped" grep -q '"event":"preempted"' "$RD/events.jsonl"
PSTEP=$(grep '"event":"preempted"' "$RD/events.jsonl" | head -1 | sed 's/.*"step":\([0-9]*\).*/\1/')
if [[ $PSTEP =~ ^[0-9]+$ ]] && ((PSTEP >= 20 && PSTEP < STEPS)); then ok "preempted mid-run, after step $PSTEP"; else bad "preempted at step '$PSTEP'"; fi
expect_in "preempted by SIGUSR1" '"signal":"SIGUSR1"' "$(cat "$RD/events.jsonl")"
expect_file "checkpoint of the preemption step" "$T/ck-pre/iter_$(printf %07d "${PSTEP:-0}")/DONE"
poll_until 40 "high job ran on all three hosts" bash -c "[[ \$('$CL' exec '$C' ctl -- squeue -h -j ${HIGH:-0} -t all -o %T) == COMPLETED ]]"
poll_until 240 "low job requeued, resumed and completed" bash -c "[[ \$('$CL' exec '$C' ctl -- squeue -h -j ${JOB:-0} -t all -o %T) == COMPLETED ]]"
crun slurm status "${JOB:-0}"
expect_in "status: completed" "job $JOB: COMPLETED" "$OUT"
expect_in "status: one requeue" "restarts: 1" "$OUT"
SLOG=$(cat "$RD/logs/slurm-$JOB.out" 2>/dev/null)
expect_in "log: requeued by the batch script" "requeueing job $JOB" "$SLOG"
expect_in "log: resumed from the preemption checkpoint" "resuming from $T/ck-pre/iter_$(printf %07d "${PSTEP:-0}")" "$SLOG"
for k in 0 1; do
  expect_in "rank $k of the resumed run on cn$((k + 1))" "[rank $k/2 cn$((k + 1))]" "$(cat "$RD/logs/rank-$k.log" 2>/dev/null)"
done
EV=$(cat "$RD/events.jsonl" 2>/dev/null)
expect_in "events: requeue" '"event":"requeue","restart_count":1' "$EV"
expect_eq "every step ran once over both attempts" "$(grep '^{"step"' <<<"$EV" | sed 's/.*"step":\([0-9]*\),.*/\1/' | sort -n | uniq | wc -l) $(grep -c '^{"step"' <<<"$EV")" "$STEPS $STEPS"
if cmp -s "$T/ck-ref/iter_$(printf %07d $STEPS)/model.safetensors" "$T/ck-pre/iter_$(printf %07d $STEPS)/model.safetensors"; then
  ok "preempted + requeued 2-host run: weights byte-identical to the uninterrupted 2-rank run"
else
  bad "weights differ: $(cmp "$T/ck-ref/iter_$(printf %07d $STEPS)/model.safetensors" "$T/ck-pre/iter_$(printf %07d $STEPS)/model.safetensors" 2>&1)"
fi
META=$(tr -d ' \t\n' <"$RD/metadata.json" 2>/dev/null)
expect_in "metadata: one preemption" '"preemptions":1' "$META"
expect_in "metadata: the requeue" '"slurm_restart_count":1' "$META"
ok "whole test in $((SECONDS - start)) s"
finish
