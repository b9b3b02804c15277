#!/usr/bin/env bash
# Fine-tuning against a float64 PyTorch oracle (tests/oracle/sft_ref.py,
# written from docs/posttrain.md): random HF checkpoint and JSONL examples
# (prompt/response and chat, some cut at seq_length), primus' step-1
# gradients and a few AdamW steps of `train posttrain` must match the
# reference's masked loss over packed (segment-masked attention, positions
# restarting per example) or padded batches within llama_ref.py's
# tolerances. Skipped when /usr/bin/python3 has no torch.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
oracle_python
SFT=$PRIMUS_SRC/tests/oracle/sft_ref.py
cd "$T"
export OMP_NUM_THREADS=2

step "reference selftest (packed examples equal the examples alone)" "$PY" "$SFT" selftest || true

# sft_case NAME MAKE-CASE-ARGS...
sft_case() {
  local name=$1 d=$T/$1 rd
  shift
  echo "# case $name: $*"
  step "$name: make-case" "$PY" "$SFT" make-case --out "$d" "$@" || return 0
  cat "$T/step.log"
  step "$name: train grads" "$PRIMUS_BIN" train grads --config "$d/exp.yaml" \
    --output "$d/primus_grads.safetensors" || true
  step "$name: train posttrain" "$PRIMUS_BIN" train posttrain --config "$d/exp.yaml" || true
  rd=$(ls -td "$d"/out/oracle/test/"$name"/run-* 2>/dev/null | head -1 || true)
  step "$name: reference" "$PY" "$SFT" reference --case "$d" || return 0
  if "$PY" "$SFT" compare --case "$d" --primus-run "${rd:-$d/no-run}" >"$T/cmp.log" 2>&1; then
    ok "$name: primus matches the float64 reference"
    grep -E '^(clip_grad|step  1 |warning)' "$T/cmp.log" || true
  else
    bad "$name: primus differs from the float64 reference"
    cat "$T/cmp.log"
  fi
}

# (a) packed, GQA 4 heads / 2 groups, untied, 2 micro-batches of 2.
sft_case packed --hidden 64 --heads 4 --groups 2 --ffn 96 --layers 2 --seq 128 --untied --seed 3 \
  --examples 24 --micro-batch 2 --global-batch 4 --steps 6 --packing 1
# (b) padded (packing: false), MHA, tied, one micro-batch.
sft_case padded --hidden 32 --heads 4 --groups 4 --ffn 64 --layers 2 --seq 64 --tied --seed 4 \
  --examples 12 --micro-batch 3 --global-batch 3 --steps 5 --packing 0

finish
