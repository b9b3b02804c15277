#!/usr/bin/env bash
# `primus analyze logs RUN_DIR`: the diagnosis of recorded run directories
# (tests/fixtures/runs/, text and JSON), kernel-log matches with
# --kernel_log, a bad run directory (exit 2), and fresh failures produced
# by the binary itself (an injected crash under the supervisor and a NaN
# stop on the tiny model), so the rules hold on real output.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=1 TZ=UTC
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
RUNS=${PRIMUS_FIXTURES:-$PRIMUS_SRC/tests/fixtures}/runs
KLOG=${PRIMUS_FIXTURES:-$PRIMUS_SRC/tests/fixtures}/preflight/kernel.log

# ---- recorded runs: text ----
run analyze logs "$RUNS/signal" --no_dmesg
expect_rc "signal fixture analysed" 0
expect_eq "summary line first" "$(head -1 <<<"$OUT")" "FAILED: rank 1 at step 2 (2026-11-22 16:53:57): signal (SIGABRT)"
expect_in "evidence names file:line" "logs/launcher.log:" "$OUT"
expect_in "mpirun's line is evidence" "mpirun noticed that process rank 1" "$OUT"
expect_in "next action" "next action: read the failing rank's last log lines" "$OUT"

run analyze logs "$RUNS/hang-recovered" --no_dmesg
expect_rc "hang fixture analysed" 0
expect_in "a recovered hang" "RECOVERED: rank 0 at step 2" "$OUT"
expect_in "after the restart" "the run succeeded after 1 restart" "$OUT"

run analyze logs "$RUNS/success" --no-dmesg
expect_eq "success" "$(head -1 <<<"$OUT")" "SUCCEEDED: exit code 0, 8 steps, no faults"

# ---- JSON, atomically written ----
run analyze logs "$RUNS/disk-full" --no_dmesg --output-file "$T/diag.json"
expect_rc "disk-full fixture with --output-file" 0
expect_in "says where it wrote" "written: $T/diag.json" "$OUT"
J=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["class"], d["rank"], d["step"], d["detail"], d["outcome"], any("File too large" in e["text"] for e in d["evidence"]))' "$T/diag.json")
expect_eq "JSON parses: class, rank, step, detail, evidence" "$J" "io 0 40 File too large failed True"
expect_eq "no temporary left" "$(ls "$T" | grep -c tmp)" 0

# ---- kernel log through the preflight pattern table ----
run analyze logs "$RUNS/oom" --kernel_log "$KLOG" -o "$T/oom.json"
expect_rc "oom fixture with --kernel_log" 0
expect_in "oom class" "out of memory (Cannot allocate memory)" "$(head -1 <<<"$OUT")"
expect_in "kernel matches listed" "kernel log $KLOG: 12 matches" "$OUT"
expect_in "GPU reset line shown" "FAIL gpu-reset  line 4: [ 1021.554433] amdgpu 0000:26:00.0: amdgpu: GPU reset begin!" "$OUT"
K=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sorted({m["category"] for m in d["kernel_log"]["matches"]}))' "$T/oom.json")
expect_in "kernel matches in JSON" "'oom-kill'" "$K"

# ---- bad input ----
run analyze logs "$T/no-such-run"
expect_rc "missing run dir" 2
expect_in "names the path" "$T/no-such-run" "$ERR"
mkdir -p "$T/empty"
run analyze logs "$T/empty"
expect_rc "not a run dir" 2
expect_in "says what it expected" "expected metadata.json, events.jsonl or logs/" "$ERR"

# ---- fresh failures from the binary ----
small_corpus corpus.txt
exp() { # NAME [KEY: VALUE...]
  local n=$1
  shift
  tiny_exp "$n" "save: $T/$n" "save_interval: 4" "$@"
}
rundir() { newest_run "$1"; }

exp crash "fault_tolerance: {max_restarts: 0, hang_timeout_s: 60}"
PRIMUS_FAULT_INJECT=crash:step=3 run train pretrain --config crash.yaml
expect_rc "injected crash fails the run" 3
run analyze logs "$(rundir crash)" --no_dmesg --output-file "$T/crash.json"
expect_rc "real crash analysed" 0
expect_in "real crash: signal on rank 0 after step 2" "FAILED: rank 0 at step 2 (" "$(head -1 <<<"$OUT")"
expect_in "real crash: SIGABRT" "signal (SIGABRT)" "$(head -1 <<<"$OUT")"
expect_in "real crash: the supervisor's line" "supervisor: rank 0 crashed: killed by SIGABRT" "$OUT"
expect_eq "real crash JSON" "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["class"], d["rank"], d["exit_code"])' "$T/crash.json")" "signal 0 3"

exp nan "fault_tolerance: {nan_policy: stop}"
PRIMUS_FAULT_INJECT=nan:step=5 run train pretrain --config nan.yaml
expect_rc "NaN stop fails the run" 3
run analyze logs "$(rundir nan)" --no_dmesg
expect_rc "real NaN analysed" 0
expect_in "real NaN: class and step" "FAILED: rank 0 at step 5 (" "$(head -1 <<<"$OUT")"
expect_in "real NaN: title" "NaN/Inf loss or gradient" "$(head -1 <<<"$OUT")"
expect_in "real NaN: the bad_step event" '"event":"bad_step","step":5' "$OUT"

# ---- help and docs come from the table ----
run analyze --help
expect_in "analyze lists logs" "logs" "$OUT"
finish
