#!/usr/bin/env bash
# Every real task run leaves a run directory (README, docs/launcher.md):
# data, generate, export, import and benchmark as train and preflight do,
# under the same defaults as the example experiments:
# ${PRIMUS_WORKSPACE:./output}/${PRIMUS_TEAM:default}/${USER:user}/<task>-<subtask>/run-*.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || exit 1
export OMP_NUM_THREADS=1 USER=tester
unset PRIMUS_TEAM PRIMUS_WORKSPACE PRIMUS_RUN_ID

# check_rundir NAME TASK SUB EXIT [BASE]: exactly one run directory of TASK-SUB
# under BASE (default output/default/tester), complete, with that exit code.
check_rundir() {
  local name=$1 task=$2 sub=$3 code=$4 base=${5:-output/default/tester}
  local dirs
  mapfile -t dirs < <(ls -d "$base/$task-$sub"/run-* 2>/dev/null)
  if [[ ${#dirs[@]} == 1 ]]; then ok "$name: one run directory"; else
    bad "$name: ${#dirs[@]} run directories under $base/$task-$sub"; return; fi
  local d=${dirs[0]}
  expect_file "$name: env/env_dump.txt" "$d/env/env_dump.txt"
  expect_file "$name: env/platform.json" "$d/env/platform.json"
  expect_file "$name: logs/rank-0.log" "$d/logs/rank-0.log"
  local got
  got=$(/usr/bin/python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))
print(m["task"], m["subtask"], m["exit_code"], len(m["replay_argv"]) > 0)' "$d/metadata.json" 2>&1)
  expect_eq "$name: metadata.json says task, subtask, exit code and the replay" "$task $sub $code True" "$got"
  [[ $d == /* ]] || d=$PWD/$d
  expect_in "$name: the log names the run directory" "run directory: $d" "$ERR"
}

# ---- data -------------------------------------------------------------------------
small_corpus corpus.txt
run data train-tokenizer --input corpus.txt --vocab-size 300 --output tok.json
expect_rc "data train-tokenizer" 0
check_rundir "data train-tokenizer" data train-tokenizer 0
run data preprocess --input corpus.txt --output-prefix corpus
expect_rc "data preprocess" 0
check_rundir "data preprocess" data preprocess 0
# A run that fails has its directory too, with the exit code.
rm -rf output/default/tester/data-preprocess
run data preprocess --input corpus.txt --output-prefix "$T/no/such/folder/x"
check_rundir "a failed data preprocess" data preprocess "$RC"
if [[ $RC != 0 ]]; then ok "that run failed (exit $RC)"; else bad "preprocess into a missing folder succeeded"; fi

# ---- import, export, generate ---------------------------------------------------------
tiny_exp tiny "save: $T/ckpt" "save_interval: 2" "train_iters: 2"
run train pretrain --config tiny.yaml
expect_rc "a tiny checkpoint to export" 0
run export gguf --load ckpt --output tiny.gguf
expect_rc "export gguf" 0
check_rundir "export gguf" export gguf 0
run import gguf --input tiny.gguf --output back
expect_rc "import gguf" 0
check_rundir "import gguf" import gguf 0
run generate --load back --prompt "the" --max-new-tokens 4 --temperature 0
expect_rc "generate" 0
check_rundir "generate" generate run 0

# ---- benchmark, and the shared defaults -------------------------------------------------
PRIMUS_TEAM=lab PRIMUS_WORKSPACE=$T/ws run benchmark gemm --M 8 --N 8 --K 8 --duration 0 -o gemm.csv
expect_rc "benchmark gemm" 0
check_rundir "benchmark gemm under PRIMUS_WORKSPACE and PRIMUS_TEAM" benchmark gemm 0 "$T/ws/lab/tester"
expect_file "its table where it was asked for" gemm.csv
# preflight (a run since before) and the example experiments share them.
PRIMUS_TEAM=lab PRIMUS_WORKSPACE=$T/ws run preflight check --cpu
check_rundir "preflight check" preflight check "$RC" "$T/ws/lab/tester"
ex=$PRIMUS_SRC/configs/examples/llama_tiny-pretrain.yaml
got=$(PRIMUS_TEAM=lab PRIMUS_WORKSPACE=$T/ws "$PRIMUS_BIN" config show --config "$ex" --no-origins 2>&1 |
  grep -E '^(workspace|work_group|user_name):' | tr '\n' ' ')
expect_eq "the example experiment resolves to the same defaults" "work_group: lab user_name: tester workspace: $T/ws " "$got"

# Not runs: a dry run, help and config commands leave nothing.
rm -rf output "$T/ws"
run --dry-run benchmark gemm --M 8 --N 8 --K 8
run benchmark gemm --help
run config presets
if [[ ! -e output && ! -e $T/ws ]]; then ok "dry runs, help and config make no run directory"; else bad "a run directory appeared: $(ls -R output "$T/ws" 2>&1 | head -5)"; fi

finish
