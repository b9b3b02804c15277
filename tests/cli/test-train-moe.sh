#!/usr/bin/env bash
# Mixture-of-experts layers (issue 11, one rank) against the float64
# PyTorch oracle (tests/oracle/llama_ref.py, its own Mixtral MoE with the
# aux and z losses): for each case a random Mixtral-layout HF checkpoint
# (E = 4, k = 2, layer 0 MoE and layer 1 dense) and dataset are made, primus
# computes the step-1 gradients and trains 10 AdamW steps, and the loss, the
# aux and z losses, the grad norm, every gradient and every weight update
# must match the reference (the dense oracle's tolerances). Then: the HF
# folder evaluates to the reference loss, the saved checkpoint is a Mixtral
# folder that evaluates to PyTorch's loss of its weights, the routing
# statistics are logged, and bad MoE settings are refused naming the key.
# Skipped when /usr/bin/python3 has no torch.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
oracle_python
cd "$T"

# moe_case NAME MAKE-CASE-ARGS...
moe_case() {
  local name=$1 d=$T/$1
  shift
  oracle_prepare "$name" "$d" "$@" || return 0
  cp "$T/step.log" "$d/train.log"
  local rd
  rd=$(ls -td "$d"/out/oracle/test/"$name"/run-* 2>/dev/null | head -1 || true)
  echo "${rd:-none}" >"$d/train_run"
  expect_file "$name: run directory" "${rd:-$d/out/oracle/test/$name/run-*}/events.jsonl"
  step "$name: reference" "$PY" "$REF" reference --case "$d" || return 0
  if "$PY" "$REF" compare --case "$d" --primus-run "${rd:-$d/no-run}" >"$T/cmp.log" 2>&1; then
    ok "$name: primus matches the float64 reference"
    grep -E '^(clip_grad|quantity|step  1 |step 10 |warning)' "$T/cmp.log" || true
    grep -E 'block_sparse_moe.gate|experts.0.w2|shared_expert.down' "$T/cmp.log" | head -8 || true
  else
    bad "$name: primus differs from the float64 reference"
    cat "$T/cmp.log"
  fi
  expect_in "$name: the log shows the routing" "layer 0: tokens" "$(cat "$d/train.log")"
  expect_in "$name: events.jsonl has the moe field" '"moe":{"aux_loss"' \
    "$(head -c 100000 "${rd:-$d/no-run}/events.jsonl" 2>/dev/null)"
  # The Mixtral HF folder evaluates to PyTorch's loss (eval's first global
  # batch is training's first with every document in the validation split).
  oracle_eval "$name" "$d" "$name: eval of the HF folder" || return 0
  # The saved checkpoint: a Mixtral folder; loaded back, it evaluates to
  # PyTorch's float64 loss of the very weights primus wrote.
  local ck=$d/ckpt/iter_0000010
  expect_in "$name: checkpoint config.json is Mixtral" '"MixtralForCausalLM"' \
    "$(cat "$ck/config.json" 2>/dev/null)"
  step "$name: eval of the saved checkpoint" "$PRIMUS_BIN" eval --config "$d/exp.yaml" \
    split=0,1,0 --eval_iters 1 load="$ck" --output "$d/eval_ck.json" || return 0
  if "$PY" - "$REF" "$d" "$ck" <<'PYEOF'; then
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("ref", sys.argv[1])
R = importlib.util.module_from_spec(spec)
spec.loader.exec_module(R)
d, ck = sys.argv[2], sys.argv[3]
e = R.read_exp(d)
cfg = R.load_config(ck, e)
P = R.st_read(os.path.join(ck, "model.safetensors"))
docs = R.idx_read(os.path.join(d, "data"))
inp, tgt = next(R.batches(docs, e["seq_length"], e["global_batch_size"], 1))
want = R.loss_fn(P, cfg, inp, tgt).item()
got = json.load(open(os.path.join(d, "eval_ck.json")))["loss"]
print("saved checkpoint: primus eval %.10f, PyTorch %.10f, rel %.2e" % (got, want, abs(got - want) / want))
sys.exit(0 if abs(got - want) <= 1e-5 * want else 1)
PYEOF
    ok "$name: the saved checkpoint loads back to PyTorch's loss of its weights"
  else
    bad "$name: the saved checkpoint's loss differs"
  fi
  # GGUF export: an all-MoE model without a shared expert is llama.cpp's
  # Mixtral (checked by llama.cpp in test-gguf.sh; these cases' vocabulary
  # of 128 is below GGUF's byte vocabulary); dense layers between the MoE
  # ones are refused, naming why, and nothing is written.
  if [[ $name != moe_c ]]; then
    run export gguf --load "$ck" --output "$d/moe.gguf"
    expect_rc "$name: GGUF export with dense layers refused" 2
    expect_in "$name: says why" "llama.cpp's Mixtral makes every layer MoE" "$ERR"
    if [[ ! -e $d/moe.gguf ]]; then ok "$name: no GGUF written"; else bad "$name: a GGUF was written"; fi
  fi
}

step "reference selftest (naive loops incl. MoE, finite differences)" "$PY" "$REF" selftest || true
grep -E 'moe' "$T/step.log" || true

common=(--hidden 64 --heads 4 --groups 2 --ffn 96 --layers 2 --vocab 128 --experts 4 --topk 2
  --moe-ffn 80 --moe-freq 2)
# (a) a shared expert, aux and z losses, untied head, gradient accumulation
#     over 2 micro-batches (the aux losses are per micro-batch).
moe_case moe_a "${common[@]}" --shared 48 --aux 0.01 --zloss 0.001 --seq 16 --untied --seed 41 \
  --docs 30 --micro-batch 2 --global-batch 4
# (b) no shared expert, aux loss only, tied head.
moe_case moe_b "${common[@]}" --aux 0.02 --seq 24 --tied --seed 42 --docs 30 --micro-batch 2 \
  --global-batch 2
# (c) every layer MoE with a capacity factor of 1: assignments are dropped.
moe_case moe_c --hidden 64 --heads 4 --groups 2 --ffn 96 --layers 2 --vocab 128 --experts 4 --topk 2 \
  --moe-ffn 64 --moe-freq 1 --capacity 1.0 --aux 0.01 --seq 16 --untied --seed 43 --docs 30 \
  --micro-batch 2 --global-batch 2
if "$PY" - "$(cat "$T/moe_c/train_run" 2>/dev/null)/events.jsonl" <<'PYEOF'; then
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"moe"' in l]
dropped = sum(l["dropped"] for j in ev for l in j["moe"]["layers"])
print("moe_c: %d assignments dropped over %d steps" % (dropped, len(ev)))
sys.exit(0 if ev and dropped > 0 else 1)
PYEOF
  ok "moe_c: the capacity drops assignments (counted in events.jsonl)"
else
  bad "moe_c: no dropped assignments recorded"
fi

# Bad settings are refused with the key named.
d=$T/moe_a
refuse() { # NAME NEEDLE OVERRIDES...
  local name=$1 needle=$2
  shift 2
  run train pretrain --config "$d/exp.yaml" "$@" train_iters=1
  if [[ $RC != 0 && $ERR == *"$needle"* ]]; then ok "refused: $name"; else
    bad "refused: $name (exit $RC): '$needle' not in: $ERR"; fi
}
refuse "topk above num_experts" "moe_router_topk: must be between 1 and num_experts (4), got 5" \
  moe_router_topk=5
refuse "expert tensor parallel without tensor parallel" \
  "expert_tensor_parallel_size 3 needs tensor_model_parallel_size" expert_tensor_parallel_size=3
refuse "an unknown dispatcher" "moe_token_dispatcher_type" moe_token_dispatcher_type=allgather
refuse "an unknown balancing type" "moe_router_load_balancing_type" \
  moe_router_load_balancing_type=sinkhorn
refuse "a layer frequency of 0" "moe_layer_freq" moe_layer_freq=0

finish
