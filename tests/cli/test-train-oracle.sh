#!/usr/bin/env bash
# The native Llama trainer against a float64 PyTorch oracle
# (tests/oracle/llama_ref.py): for several shapes (GQA/MHA, tied/untied,
# gradient accumulation) a random HF checkpoint and MMIDIDX dataset are made,
# primus computes the step-1 gradients and trains 10 AdamW steps, and the
# loss, grad norm, every gradient and every weight update must match the
# reference. Skipped when /usr/bin/python3 has no torch.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
oracle_python
cd "$T"

# oracle_case NAME MAKE-CASE-ARGS...
oracle_case() {
  local name=$1 d=$T/$1
  shift
  oracle_prepare "$name" "$d" "$@" || return 0
  local rd
  rd=$(ls -td "$d"/out/oracle/test/"$name"/run-* 2>/dev/null | head -1 || true)
  expect_file "$name: run directory" "${rd:-$d/out/oracle/test/$name/run-*}/events.jsonl"
  step "$name: reference" "$PY" "$REF" reference --case "$d" || return 0
  if "$PY" "$REF" compare --case "$d" --primus-run "${rd:-$d/no-run}" >"$T/cmp.log" 2>&1; then
    ok "$name: primus matches the float64 reference"
    grep -E '^(clip_grad|quantity|step  1 |warning)' "$T/cmp.log" || true
  else
    bad "$name: primus differs from the float64 reference"
    cat "$T/cmp.log"
  fi
  # The HF folder evaluates to PyTorch's loss: with every document in the
  # validation split, eval's first global batch is training's first.
  oracle_eval "$name" "$d" "$name: eval" || return 0
}

step "reference selftest (naive loops, finite differences, file round trips)" "$PY" "$REF" selftest ||
  true

# (a) GQA 6 heads / 2 groups, untied head, odd sizes, the data stream wraps.
oracle_case case_a --hidden 96 --heads 6 --groups 2 --ffn 260 --layers 2 --vocab 301 --seq 37 \
  --untied --seed 11 --docs 16 --micro-batch 2 --global-batch 2
# (b) MHA with tied embeddings, 3 layers.
oracle_case case_b --hidden 64 --heads 4 --groups 4 --ffn 128 --layers 3 --vocab 128 --seq 16 \
  --tied --seed 22 --docs 30 --micro-batch 2 --global-batch 2
# (c) GQA 8 heads / 2 groups, tied, gradient accumulation over 2 micro-batches.
oracle_case case_c --hidden 64 --heads 8 --groups 2 --ffn 96 --layers 1 --vocab 97 --seq 24 \
  --tied --seed 33 --docs 40 --micro-batch 2 --global-batch 4

finish
