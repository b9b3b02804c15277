#!/usr/bin/env bash
# demo.sh - what `make demo` runs: a short tour of the CLI, then the main
# job: the tiny Llama pretrained on the Brown corpus (written by
# scripts/deps.sh into the cache) for a few minutes, its loss falling,
# checkpoints saved, the validation loss, and a sample of generated text.
#   TRAIN_ITERS=N   steps to train (default 1500: about 4 minutes on 2 idle cores)
set -euo pipefail
BUILD=${1:-build}
P=$BUILD/primus
EX=configs/examples/llama_tiny-pretrain.yaml
CACHE=${PRIMUS_CACHE:-$HOME/.cache/primus}
export DATA=${DATA:-$CACHE/data/brown.txt}
export TRAIN_ITERS=${TRAIN_ITERS:-1500}
export PRIMUS_WORKSPACE=${PRIMUS_WORKSPACE:-./output}
CKPT=$PRIMUS_WORKSPACE/llama_tiny-pretrain/checkpoints

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "primus env   (platform detection and its env profile)"
"$P" env | sed -n 1,12p   # sed reads everything: no SIGPIPE under pipefail
step "primus config validate --config $EX"
"$P" config validate --config "$EX"

step "primus train pretrain --config $EX train_iters=$TRAIN_ITERS   (data: $DATA)"
[[ -s $DATA ]] || { echo "demo: $DATA is missing; run scripts/deps.sh" >&2; exit 1; }
rm -rf "$CKPT"
"$P" train pretrain --config "$EX" eval_interval=500 save_interval=500 log_interval=100

step "primus eval --config $EX --load $CKPT"
"$P" eval --config "$EX" --load "$CKPT"

step "primus generate --load $CKPT --prompt 'The jury said'"
"$P" generate --load "$CKPT" --prompt "The jury said" --max_new_tokens 110 --temperature 0.8 --top_k 40
