#!/usr/bin/env bash
# demo.sh - what `make demo` runs: the data pipeline and the training engine
# end to end on the Brown corpus (written by scripts/deps.sh into the cache):
#   1. on first use, a 2048-token byte-level BPE tokenizer is trained on the
#      corpus and the corpus is preprocessed into an indexed dataset (both
#      kept in the cache and reused afterwards);
#   2. the tiny Llama trains on it for a few minutes, shuffled, the loss
#      falling, with checkpoints;
#   3. the validation loss of the last checkpoint, and a generated sample.
#   TRAIN_ITERS=N   steps to train (default 1200: about 5 minutes on 2 idle cores)
set -euo pipefail
BUILD=${1:-build}
P=$BUILD/primus
EX=configs/examples/llama_tiny-pretrain.yaml
CACHE=${PRIMUS_CACHE:-$HOME/.cache/primus}
BROWN=$CACHE/data/brown.txt
TOK=$CACHE/data/brown-bpe2k.json
DATA=$CACHE/data/brown-bpe2k
export TRAIN_ITERS=${TRAIN_ITERS:-1200}
export PRIMUS_WORKSPACE=${PRIMUS_WORKSPACE:-./output}
CKPT=$PRIMUS_WORKSPACE/llama_tiny-pretrain/checkpoints

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

[[ -s $BROWN ]] || { echo "demo: $BROWN is missing; run scripts/deps.sh" >&2; exit 1; }
step "primus env   (platform detection and its env profile)"
"$P" env | sed -n 1,12p   # sed reads everything: no SIGPIPE under pipefail

if [[ ! -s $TOK ]]; then
  step "primus data train-tokenizer --input $BROWN --vocab-size 2048 --output $TOK"
  "$P" data train-tokenizer --input "$BROWN" --vocab-size 2048 --output "$TOK"
fi
if [[ ! -s $DATA.idx || $TOK -nt $DATA.idx ]]; then
  step "primus data preprocess --input $BROWN --line-docs --append-eod --output-prefix $DATA"
  "$P" data preprocess --input "$BROWN" --line-docs --append-eod --workers 2 \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOK" --output-prefix "$DATA"
else
  step "reusing $DATA.bin/.idx and $TOK"
fi

TRAIN_ARGS=(data_path="$DATA" tokenizer_type=HuggingFaceTokenizer tokenizer_model="$TOK"
            data_shuffle=true vocab_size=null)
step "primus train pretrain --config $EX ${TRAIN_ARGS[*]} train_iters=$TRAIN_ITERS"
rm -rf "$CKPT"
"$P" train pretrain --config "$EX" "${TRAIN_ARGS[@]}" eval_interval=400 save_interval=400 \
  log_interval=100

step "primus eval --config $EX --load $CKPT"
"$P" eval --config "$EX" "${TRAIN_ARGS[@]}" --load "$CKPT"

step "primus generate --load $CKPT --prompt 'The jury said that the'"
"$P" generate --load "$CKPT" --prompt "The jury said that the" --max-new-tokens 100 \
  --temperature 0.8 --top-k 40
