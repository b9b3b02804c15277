#!/usr/bin/env bash
# The environment a one-rank run computes (profile, experiment env:, --env,
# hooks) is in force when the task's process starts, not only after
# setenv(): OpenMP, BLAS and malloc read their variables at load time. The
# hello test plugin copies /proc/self/environ (the exec-time environment)
# into env-rank-0.txt as "exec K=V" lines.
source "$(dirname "$0")/lib.sh"
build_plugin || { bad "plugin build"; finish; exit 1; }
export PRIMUS_PLUGIN_PATH=$T/plugins
cd "$T"

cat > "$T/exp.yaml" <<Y
work_group: team
user_name: tester
exp_name: env-exp
workspace: $T/ws
env:
  EXP_VAR: from-experiment
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
Y
sed -e 's/exp_name: env-exp/exp_name: env-exp2/' -e 's/EXP_VAR: from-experiment/OMP_STACKSIZE: 8M/' \
  "$T/exp.yaml" > "$T/exp2.yaml"

# Hooks count their runs; the post hook records the exit code it saw.
H=$T/hooks
mkdir -p "$H/hello/run/post"
printf '#!/bin/bash\necho pre >> "%s/hook-runs"\n' "$T" > "$H/hello/run/10-count.sh"
printf '#!/bin/bash\necho post >> "%s/hook-runs"\necho "$PRIMUS_EXIT_CODE" > "$PRIMUS_RUN_DIR/post-exit-code"\n' \
  "$T" > "$H/hello/run/post/00-post.sh"
export PRIMUS_HOOKS_DIR=$H
# Nothing load-time inherited from the caller, so the profile changes it.
unset $(env | grep -Eo '^(OMP|GOMP|KMP|OPENBLAS|GOTO|MKL|BLIS|DNNL|ONEDNN|MALLOC)[A-Za-z0-9_]*') LD_PRELOAD 2>/dev/null
REEXEC="starting the task in a new process"
runs() { ls -d "$T"/ws/team/tester/$1/run-* 2>/dev/null | sort; }
# new_run EXP BEFORE: the run directory of EXP that is not in BEFORE.
new_run() { comm -13 <(echo "$2") <(runs "$1") | head -1; }

# 1. Profile, experiment env: and --env are in the task's exec environment.
rm -f "$T/hook-runs"
PRIMUS_LOG_LEVEL=debug run direct --env GOMP_SPINCOUNT=1000 -- hello run --config "$T/exp.yaml"
expect_rc "one-rank run" 0
N=$(runs env-exp | wc -l)
expect_eq "one run directory" "$N" "1"
RD=$(runs env-exp | head -1)
E1=$(cat "$RD/env-rank-0.txt" 2>/dev/null)
expect_in "OMP_WAIT_POLICY in force at exec" "exec OMP_WAIT_POLICY=passive" "$E1"
expect_in "OMP_NUM_THREADS in force at exec" "exec OMP_NUM_THREADS=" "$E1"
expect_in "OMP_DYNAMIC in force at exec" "exec OMP_DYNAMIC=false" "$E1"
expect_in "MALLOC_ARENA_MAX in force at exec" "exec MALLOC_ARENA_MAX=8" "$E1"
expect_in "experiment env at exec" "exec EXP_VAR=from-experiment" "$E1"
expect_in "--env at exec" "exec GOMP_SPINCOUNT=1000" "$E1"
expect_in "run directory at exec" "exec PRIMUS_RUN_DIR=$RD" "$E1"
expect_in "task does not inherit the rank marker" "getenv PRIMUS_LAUNCHED=
" "$E1"
expect_in "debug line says why" "$REEXEC" "$ERR"
expect_in "debug line names the variable" "OMP_WAIT_POLICY (the OpenMP runtime)" "$ERR"
expect_eq "hooks ran once, post hooks once" "$(tr '\n' ' ' < "$T/hook-runs")" "pre post "
expect_eq "task output printed once" "$OUT" "hello from rank 0"
expect_eq "task log line once" "$(grep -c 'hello log line from rank 0' <<<"$ERR")" "1"
expect_eq "post hook saw exit code" "$(cat "$RD/post-exit-code" 2>/dev/null)" "0"
META=$(cat "$RD/metadata.json")
expect_in "metadata exit code" '"exit_code":	0' "$META"
expect_in "metadata end time" '"end_time"' "$META"
expect_in "task logged to the rank log" "hello log line from rank 0" "$(cat "$RD/logs/rank-0.log")"
DUMP=$(cat "$RD/env/env_dump.txt")
expect_in "env dump matches" "OMP_WAIT_POLICY=passive" "$DUMP"
expect_not_in "env dump has no rank marker" "PRIMUS_LAUNCHED" "$DUMP"

# 2. A failing task: the exit code reaches the caller, post hooks and metadata.
rm -f "$T/hook-runs"
B=$(runs env-exp)
run hello run --config "$T/exp.yaml" --fail
expect_rc "failing task" 3
expect_eq "task error printed once" "$(grep -c 'asked to fail' <<<"$ERR")" "1"
RD2=$(new_run env-exp "$B")
expect_eq "post hook saw failure" "$(cat "$RD2/post-exit-code" 2>/dev/null)" "3"
expect_in "metadata failure code" '"exit_code":	3' "$(cat "$RD2/metadata.json")"
expect_eq "hooks ran once on failure" "$(tr '\n' ' ' < "$T/hook-runs")" "pre post "

# 3. Already exported with the same values: the task runs in this process
# (the experiment's EXP_VAR is then only setenv()'d, not in /proc/self/environ).
set -a
eval "$(grep -E '^(OMP|MALLOC|OPENBLAS|MKL)_[A-Z_]*=' "$RD/env/env_dump.txt")"
set +a
B=$(runs env-exp)
PRIMUS_LOG_LEVEL=debug run hello run --config "$T/exp.yaml"
expect_rc "run with the variables exported" 0
expect_not_in "no new process when nothing changes" "$REEXEC" "$ERR"
RD3=$(new_run env-exp "$B")
E3=$(cat "$RD3/env-rank-0.txt" 2>/dev/null)
expect_in "in process: variable seen" "getenv EXP_VAR=from-experiment" "$E3"
expect_not_in "in process: no rank marker" "getenv PRIMUS_LAUNCHED=1" "$E3"
expect_in "in process: exported policy" "exec OMP_WAIT_POLICY=passive" "$E3"
expect_not_in "in process: setenv() does not reach the exec environment" "exec EXP_VAR=" "$E3"

# 4. A load-time variable from the experiment's env: alone is enough.
PRIMUS_LOG_LEVEL=debug run hello run --config "$T/exp2.yaml"
expect_rc "experiment sets OMP_STACKSIZE" 0
expect_in "new process for the experiment's variable" "OMP_STACKSIZE (the OpenMP runtime)" "$ERR"
E4=$(cat "$(runs env-exp2 | head -1)/env-rank-0.txt" 2>/dev/null)
expect_in "OMP_STACKSIZE at exec" "exec OMP_STACKSIZE=8M" "$E4"
unset $(env | grep -Eo '^(OMP|MALLOC|OPENBLAS|MKL)_[A-Z_]*')

# 5. SIGTERM to the launcher reaches the task; the end is still recorded.
B=$(runs env-exp)
"$PRIMUS_BIN" hello run --config "$T/exp.yaml" --sleep 30 >"$T/sig.out" 2>"$T/sig.err" &
LP=$!
for _ in $(seq 100); do
  RDS=$(new_run env-exp "$B")
  [[ -n $RDS && -e $RDS/env-rank-0.txt ]] && grep -q "hello log line" "$T/sig.err" && break
  sleep 0.1
done
kill -TERM "$LP"
wait "$LP"
RC=$?
ERR=$(cat "$T/sig.err")
expect_rc "SIGTERM: 128+15" 143
expect_eq "post hook saw the signal" "$(cat "$RDS/post-exit-code" 2>/dev/null)" "143"
expect_in "metadata records the signal" '"exit_code":	143' "$(cat "$RDS/metadata.json")"
TP=$(sed -n 's/^pid //p' "$RDS/env-rank-0.txt")
if [[ -n $TP ]] && ! kill -0 "$TP" 2>/dev/null; then ok "task process ended"; else bad "task process $TP still running"; fi

# 6. --dry-run is unchanged: nothing started, nothing created.
N0=$(runs env-exp | wc -l)
PRIMUS_LOG_LEVEL=debug run --dry-run hello run --config "$T/exp.yaml"
expect_rc "dry run" 0
expect_in "dry run shows the in-process command" "(in-process)" "$OUT"
expect_in "dry run shows the policy" "OMP_WAIT_POLICY=passive" "$OUT"
expect_not_in "dry run starts nothing" "$REEXEC" "$ERR"
expect_eq "dry run made no run directory" "$(runs env-exp | wc -l)" "$N0"

# 7. Replay starts the recorded environment: still in force at exec.
B=$(runs env-exp)
run replay "$RD"
expect_rc "replay" 0
RDR=$(new_run env-exp "$B")
ER=$(cat "$RDR/env-rank-0.txt" 2>/dev/null)
expect_in "replay: policy at exec" "exec OMP_WAIT_POLICY=passive" "$ER"
expect_in "replay: experiment env at exec" "exec EXP_VAR=from-experiment" "$ER"
expect_in "replay: metadata" '"exit_code":	0' "$(cat "$RDR/metadata.json")"

finish
