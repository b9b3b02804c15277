#!/usr/bin/env bash
# A real task run end to end (the hello test plugin): run directory and
# snapshot, hooks, patches, --env, failing hooks, post-hooks, replay.
source "$(dirname "$0")/lib.sh"
build_plugin || { bad "plugin build"; finish; exit 1; }
export PRIMUS_PLUGIN_PATH=$T/plugins
cd "$T"

cat > "$T/exp.yaml" <<Y
work_group: team
user_name: tester
exp_name: hello-exp
workspace: $T/ws
env:
  EXP_VAR: from-experiment
  USER_VAR: loses-to-env-file
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
    overrides:
      lr: 0.001
Y

# Hooks: a global one exports a variable, a task one adds an option, a post
# hook sees the exit code.
H=$T/hooks
mkdir -p "$H/hello/run/post"
printf '#!/bin/bash\necho "env.HOOK_VAR=from-hook"\necho "just a log line"\n' > "$H/00-global.sh"
printf '#!/bin/bash\necho "extra.greeting=hi-from-hook"\n' > "$H/hello/run/10-opt.sh"
printf '#!/bin/bash\necho "$PRIMUS_EXIT_CODE" > "$PRIMUS_RUN_DIR/post-exit-code"\n' > "$H/hello/run/post/00-post.sh"
export PRIMUS_HOOKS_DIR=$H
printf '#!/bin/bash\necho "env.PATCH_VAR=patched"\n' > "$T/patch-ok.sh"
printf '#!/bin/bash\necho "env.PATCH_VAR=should-not-apply"\nexit 2\n' > "$T/patch-skip.sh"
printf 'USER_VAR=from-file\n# comment\n' > "$T/vars.env"

export MY_API_KEY=s3cr3t-value
run direct --env "$T/vars.env" --patch "$T/patch-ok.sh" --patch "$T/patch-skip.sh" -- hello run --config "$T/exp.yaml" lr=0.25
expect_rc "hello run" 0
RD=$(ls -d "$T"/ws/team/tester/hello-exp/run-* 2>/dev/null | head -1)
expect_file "run directory layout" "$RD/metadata.json"
H1=$(cat "$RD/hello-rank-0.txt" 2>/dev/null)
expect_in "hook exported env" "HOOK_VAR=from-hook" "$H1"
expect_in "hook appended an option" "greeting=hi-from-hook" "$H1"
expect_in "patch exported env" "PATCH_VAR=patched" "$H1"
expect_in "--env FILE wins over the experiment env" "USER_VAR=from-file" "$H1"
expect_in "experiment env applied" "EXP_VAR=from-experiment" "$(cat "$RD/env/env_dump.txt")"
expect_in "CLI override reached the task" "lr=0.25" "$H1"
expect_in "distributed defaults" "NNODES=1" "$H1"
expect_in "hook log line shown" "just a log line" "$ERR"
expect_eq "post hook saw exit code" "$(cat "$RD/post-exit-code" 2>/dev/null)" "0"
expect_file "env dump" "$RD/env/env_dump.txt"
expect_file "platform.json" "$RD/env/platform.json"
expect_file "resolved config" "$RD/config/resolved.yaml"
expect_file "rank log" "$RD/logs/rank-0.log"
DUMP=$(cat "$RD/env/env_dump.txt")
expect_in "secret masked" "MY_API_KEY=******" "$DUMP"
expect_not_in "secret value absent" "s3cr3t-value" "$DUMP"
expect_in "profile variable recorded" "OMP_NUM_THREADS=" "$DUMP"
N_INPUTS=$(ls "$RD/config/inputs" | wc -l)
if ((N_INPUTS >= 3)); then ok "input configs copied ($N_INPUTS)"; else bad "input configs copied: $N_INPUTS"; fi
META=$(cat "$RD/metadata.json")
expect_in "metadata exit code" '"exit_code":	0' "$META"
expect_in "metadata version" '"primus_version"' "$META"
expect_in "metadata command line" 'lr=0.25' "$META"
expect_in "resolved lr" "0.25" "$(cat "$RD/config/resolved.yaml")"

# Replay: a new run directory with the same result, marked as a replay.
unset HOOK_VAR
sleep 1
run replay "$RD"
expect_rc "replay" 0
RD2=$(ls -d "$T"/ws/team/tester/hello-exp/run-* | grep -v "^$RD\$" | tail -1)
if [[ -n $RD2 && $RD2 != "$RD" ]]; then ok "replay made a new run directory"; else bad "replay run directory"; fi
H2=$(cat "$RD2/hello-rank-0.txt" 2>/dev/null)
expect_eq "replay reproduced the output" "$H2" "$H1"
expect_in "replay recorded its origin" "\"replay_of\":	\"$RD\"" "$(cat "$RD2/metadata.json")"

# An incompatible platform is refused with the difference, unless --force.
python3 - "$RD/env/platform.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["name"] = "MI300X"
p["accelerators"]["count"] = 8
p["accelerators"]["model"] = "MI300X"
p["accelerators"]["devices"] = [{"vendor": "amd", "vendor_id": "0x1002", "device_id": "0x74a1",
    "model": "MI300X", "pci_bus": "0000:%02x:00.0" % i, "vram_bytes": 0, "busy": -1} for i in range(8)]
json.dump(p, open(sys.argv[1], "w"))
PY
run replay "$RD"
expect_rc "incompatible replay refused" 2
expect_in "diff shown" "MI300X" "$ERR"
run replay "$RD" --force
expect_rc "replay --force" 0
run replay "$T/nowhere"
expect_rc "replay of a missing folder" 2

# A failing hook stops the run with its name and output.
printf '#!/bin/bash\necho "checking the fabric"\necho "fabric is down" >&2\nexit 5\n' > "$H/hello/run/20-fail.sh"
run hello run --config "$T/exp.yaml"
expect_rc "failing hook" 3
expect_in "hook named" "20-fail.sh" "$ERR"
expect_in "hook exit code" "exit code 5" "$ERR"
expect_in "hook output shown" "fabric is down" "$ERR"
rm "$H/hello/run/20-fail.sh"

# A failing task: exit 3, and the post hook still sees the code.
run hello run --config "$T/exp.yaml" --fail
expect_rc "failing task" 3
expect_in "task error" "asked to fail" "$ERR"
RD3=$(ls -td "$T"/ws/team/tester/hello-exp/run-* | head -1)
expect_eq "post hook saw failure" "$(cat "$RD3/post-exit-code" 2>/dev/null)" "3"
expect_in "metadata failure code" '"exit_code":	3' "$(cat "$RD3/metadata.json")"

# Distributed variables are checked.
NODE_RANK=4 NNODES=2 run hello run --config "$T/exp.yaml"
expect_rc "NODE_RANK >= NNODES" 2
expect_in "NODE_RANK named" "NODE_RANK=4" "$ERR"
MASTER_PORT=99999 run hello run --config "$T/exp.yaml"
expect_rc "bad MASTER_PORT" 2

# The Slurm per-node entry derives the distributed variables.
SLURM_JOB_ID=77 SLURM_NODEID=1 SLURM_NNODES=3 SLURM_JOB_NODELIST='gpu[07-09]' \
  run hello run --config "$T/exp.yaml"
expect_rc "slurm node entry" 0
RD4=$(ls -td "$T"/ws/team/tester/hello-exp/run-* | head -1)
H4=$(cat "$RD4/hello-rank-0.txt" 2>/dev/null)
expect_in "NNODES from slurm" "NNODES=3" "$H4"
expect_in "NODE_RANK from slurm" "NODE_RANK=1" "$H4"
expect_in "MASTER_ADDR from the node list" "MASTER_ADDR=gpu07" "$H4"

# On an 8×MI300X node (fixture) the ROCm profile reaches the task.
PRIMUS_SYSFS_ROOT=$PRIMUS_SRC/tests/fixtures/sysfs/mi300x-8 run hello run --config "$T/exp.yaml"
expect_rc "run on the MI300X fixture" 0
RD6=$(ls -td "$T"/ws/team/tester/hello-exp/run-* | head -1)
D6=$(cat "$RD6/env/env_dump.txt")
expect_in "ROCm profile applied" "HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" "$D6"
expect_in "platform fact exported" "PRIMUS_PLATFORM=MI300X" "$D6"
expect_in "platform.json records the GPUs" '"MI300X"' "$(cat "$RD6/env/platform.json")"

# Log lines: one format, PRIMUS_LOG_LEVEL, --log-file, and --numa binding.
PRIMUS_LOG_LEVEL=debug run direct --numa --log-file "$T/launcher.log" -- hello run --config "$T/exp.yaml"
expect_rc "--numa and --log-file" 0
if grep -Eq '^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}\] \[rank 0/1 [^]]+\] \[INFO\] run directory: ' <<<"$ERR"; then
  ok "log line format"
else
  bad "log line format: $ERR"
fi
expect_in "PRIMUS_LOG_LEVEL=debug" "[DEBUG]" "$ERR"
expect_in "--numa bound the rank" "NUMA node" "$ERR"
expect_in "--log-file written" "[INFO] run directory:" "$(cat "$T/launcher.log" 2>/dev/null)"
run hello run --config "$T/exp.yaml"
expect_not_in "debug lines hidden by default" "[DEBUG]" "$ERR"

# N ranks through mpirun.
if command -v mpirun >/dev/null; then
  run direct --nproc 2 -- hello run --config "$T/exp.yaml"
  expect_rc "--nproc 2 through mpirun" 0
  RD5=$(ls -td "$T"/ws/team/tester/hello-exp/run-* | head -1)
  expect_in "rank 0 ran" "rank=0/2" "$(cat "$RD5/hello-rank-0.txt" 2>/dev/null)"
  expect_in "rank 1 ran" "rank=1/2" "$(cat "$RD5/hello-rank-1.txt" 2>/dev/null)"
  expect_file "rank 1 log" "$RD5/logs/rank-1.log"
  # The console shows rank 0 and the last rank; every rank has its file.
  run direct --nproc 3 -- hello run --config "$T/exp.yaml"
  expect_rc "--nproc 3 (oversubscribed)" 0
  RD7=$(ls -td "$T"/ws/team/tester/hello-exp/run-* | head -1)
  expect_in "console shows rank 0" "hello log line from rank 0" "$ERR"
  expect_in "console shows the last rank" "hello log line from rank 2" "$ERR"
  expect_not_in "console hides middle ranks" "hello log line from rank 1" "$ERR"
  expect_in "middle rank logs to its file" "hello log line from rank 1" "$(cat "$RD7/logs/rank-1.log" 2>/dev/null)"
else
  bad "mpirun missing (scripts/deps.sh installs openmpi-bin)"
fi
run direct --nproc 2 -- config presets
expect_rc "--nproc on a one-process task" 2

finish
