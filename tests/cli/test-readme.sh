#!/usr/bin/env bash
# Every command of README.md's ```sh blocks runs (issue 30), so the README
# cannot drift from the program: the blocks are read from README.md itself,
# each command as written, in order, in a fresh folder with the project's
# configs/, shortened only by what it appends or replaces below (a tiny
# model, a few steps, small benchmark sizes) and with its placeholders
# (<task> ..., EXP, RUN_DIR, IMG) filled in. A command this file does not
# know fails the test until it is added here; one that needs what this
# machine lacks says so and counts as skipped.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=1
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR PRIMUS_RUN_ID PRIMUS_WORKSPACE \
  DATA TRAIN_ITERS LR LOAD DATA_PATH PRIMUS_GEMM
export USER=tester PRIMUS_TEAM=team DATA=$T/corpus.txt
mkdir -p bin data shards
ln -s "$PRIMUS_BIN" bin/primus
export PATH="$T/bin:$PATH"
ln -s "$PRIMUS_SRC/configs" configs
small_corpus corpus.txt
EX=configs/examples/llama_tiny-pretrain.yaml
# The model and schedule of every training command: a tiny shape, 4 steps.
SMALL="hidden_size=32 num_layers=2 num_attention_heads=4 num_query_groups=2 ffn_hidden_size=64
  seq_length=32 max_position_embeddings=64 global_batch_size=8 eval_interval=2 eval_iters=1
  log_interval=2 lr_warmup_iters=1 fault_tolerance.restart_backoff_s=0"
PORT=$((20000 + RANDOM % 10000))
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

# README.md's commands: ```sh blocks, continuation lines joined, comments dropped.
mapfile -t CMDS < <(awk '/^```sh$/{f=1;next} /^```/{f=0} f' "$PRIMUS_SRC/README.md" |
  sed -e ':a' -e '/\\$/N; s/\\\n */ /; ta' | sed -E 's/[[:space:]]+#[[:space:]].*$//; s/^[[:space:]]*#.*$//' |
  tr -s ' ' | sed 's/ $//' | grep -v '^$')
if ((${#CMDS[@]} >= 25)); then ok "README.md: ${#CMDS[@]} commands"; else bad "README.md: only ${#CMDS[@]} commands found"; fi

# train_args CMD: the shortening of a training command: SMALL's keys it
# does not set itself, then 4 steps with a checkpoint every 2.
train_args() {
  local kv out=""
  for kv in $SMALL; do [[ $1 == *" ${kv%%=*}="* ]] || out+=" $kv"; done
  [[ $1 == *" micro_batch_size="* ]] || out+=" micro_batch_size=4"
  echo "$out train_iters=4 save_interval=2"
}
# Under the sanitizer build (the suite's second run) the multi-rank and
# benchmark commands are left to the plain build, which runs them all: each
# is tested under the sanitizers by its own test, and here they would cost
# minutes.
SAN=
[[ -n ${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-} ]] && SAN="left to the plain build (sanitizers: minutes here)"

for cmd in "${CMDS[@]}"; do
  want=0 skip="" line=$cmd
  case $cmd in
    "primus data train-tokenizer --input corpus.txt --vocab-size 8192 --output tok.json") ;;
    "primus data preprocess --input 'shards/*.jsonl.zst' --output-prefix data/web --tokenizer-type GPT2BPETokenizer --append-eod --workers 8")
      if [[ -n $SAN ]]; then skip=$SAN
      elif ! command -v zstd >/dev/null; then skip="zstd is not installed"
      elif ! "$PRIMUS_BIN" benchmark tokenizer --input corpus.txt --repeat 1 >/dev/null 2>&1; then
        skip="GPT-2's rank file is not in the primus cache (scripts/deps.sh)"
      else sed 's/.*/{"text": "&"}/' corpus.txt | grep -v '"text": ""' | zstd -q -o shards/a.jsonl.zst; fi ;;
    "primus benchmark tokenizer --workers 2 --compare")
      if [[ -n $SAN ]]; then skip=$SAN
      elif ! command -v node >/dev/null; then skip="node is not installed"; else line+=" --input corpus.txt --repeat 1"; fi ;;
    "primus train pretrain --config $EX train_iters=200" | \
    "primus direct --nproc 2 -- train pretrain --config $EX overlap_grad_reduce=true" | \
    "primus direct --nproc 4 -- train pretrain --config $EX tensor_model_parallel_size=2" | \
    "primus direct --nproc 2 -- train pretrain --config $EX pipeline_model_parallel_size=2 micro_batch_size=4" | \
    "primus direct --nproc 2 -- train pretrain --config $EX context_parallel_size=2")
      line+="$(train_args "$cmd")"
      # (a second run into the same folder is an explicit choice since issue 30)
      [[ $cmd == "primus train pretrain"* ]] || { line+=" save=output/mp-$RANDOM"; skip=$SAN; } ;;
    "primus eval --config $EX --load output/llama_tiny-pretrain/checkpoints")
      line+=" $(echo $SMALL)" ;;
    "primus train posttrain --config configs/examples/llama_tiny-posttrain.yaml")
      line+=" hidden_size=32 num_layers=2 num_attention_heads=4 num_query_groups=2 ffn_hidden_size=64 seq_length=64 max_position_embeddings=64 train_iters=4" ;;
    "primus generate --load output/llama_tiny-pretrain/checkpoints --prompt \"The jury said\" --temperature 0.8")
      line+=" --max-new-tokens 8" ;;
    "primus export gguf --load output/llama_tiny-pretrain/checkpoints --output tiny.gguf") ;;
    "PRIMUS_FAULT_INJECT=crash:step=150 primus train pretrain --config $EX train_iters=200 save_interval=50 fault_tolerance.max_restarts=2 save=output/fire-drill overwrite_checkpoints=true")
      line="${cmd/step=150/step=3}$(train_args "$cmd")" ;;
    "primus train pretrain --config $EX device=cuda bf16=true")
      # Without a GPU the run stops at once, saying why (exit 2).
      line+="$(train_args "$cmd") save=output/gpu-$RANDOM"; ((GPUS)) || want=2 ;;
    "primus generate --load output/llama_tiny-pretrain/checkpoints --prompt \"The jury said\" --device cuda")
      line+=" --max-new-tokens 8"; ((GPUS)) || want=2 ;;
    "primus env" | "primus config presets" | "primus plugins" | \
    "primus config show --config $EX lr=1e-3" | \
    "primus config validate --config configs/examples/llama3_8B-pretrain.yaml") ;;
    "primus --dry-run direct --nproc 2 -- <task> ...")
      line="${cmd/<task> .../train pretrain --config $EX}" ;;
    "primus container --image IMG -v /data -- <task> ...")
      line="primus --dry-run ${cmd#primus }"; line="${line/<task> .../train pretrain --config $EX}" ;;
    "primus slurm sbatch -N 2 -p low -- <task> ...")
      line="primus --dry-run ${cmd#primus }"; line="${line/<task> .../train pretrain --config $EX}" ;;
    "primus replay output/<group>/<user>/<exp>/run-YYYYmmdd-HHMMSS")
      line="primus replay $(ls -d output/team/tester/llama_tiny-pretrain/run-* | head -1)" ;;
    "primus completion bash > /etc/bash_completion.d/primus")
      line="primus completion bash > $T/primus.bash" ;;
    "primus preflight check --expect-gpus 8") want=2 ;; # no GPU here: FAIL is exit 2, as the README says
    "primus preflight calibrate; primus preflight check --perf")
      skip="12-20 s of measurements; tests/cli/test-preflight.sh runs calibrate --quick and check --perf" ;;
    "primus train pretrain --config EXP metrics_port=9464")
      line="primus train pretrain --config $EX metrics_port=$PORT$(train_args "$cmd") save=output/metrics" ;;
    "primus analyze logs RUN_DIR --kernel-log kern.log")
      : > kern.log
      line="primus analyze logs $(ls -d output/team/tester/llama_tiny-pretrain/run-* | head -1) --kernel-log kern.log" ;;
    "primus analyze report RUN_DIR")
      line="primus analyze report $(ls -d output/team/tester/llama_tiny-pretrain/run-* | head -1)" ;;
    "primus benchmark gemm --M 4096 --N 4096 --K 4096 --backend all -o gemm.csv")
      line="${cmd//4096/96}"; skip=$SAN ;;
    "primus direct --nproc 2 -- benchmark allreduce --check")
      line+=" --max-bytes 65536 --num-sizes 2 --warmup 2 --iters 2"; skip=$SAN ;;
    *) bad "README command not covered by tests/cli/test-readme.sh (add it there): $cmd"; continue ;;
  esac
  if [[ -n $skip ]]; then echo "# skipped: $cmd ($skip)"; continue; fi
  t0=$(date +%s.%N)
  OUT=$(bash -c "$line" 2>"$T/.err")
  RC=$?
  ERR=$(cat "$T/.err")
  echo "# $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s: $line"
  if [[ $RC == "$want" ]]; then ok "README: $cmd (exit $RC)"
  else bad "README: $cmd: exit $RC, expected $want; ran: $line; stderr: $(tail -5 "$T/.err")"; fi
done
expect_file "the fire drill saved its own last checkpoint" "$T/output/fire-drill/iter_0000004/DONE"
expect_file "export wrote tiny.gguf" "$T/tiny.gguf"
# Training and the other tasks file their runs under the same
# work_group/user_name ($PRIMUS_TEAM, $USER).
expect_file "preflight's run directory beside training's" "$(ls -d "$T"/output/team/tester/preflight-check/run-* 2>/dev/null | head -1)"
expect_file "training's run directory" "$(ls -d "$T"/output/team/tester/llama_tiny-pretrain/run-* 2>/dev/null | head -1)"
finish
