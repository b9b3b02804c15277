#!/usr/bin/env bash
# eod_mask_loss: true with real data. A random case of the float64 PyTorch
# oracle (tests/oracle/llama_ref.py) whose documents each end with the EOD
# token of a BPE tokenizer trained here: the positions whose input is EOD
# leave the loss (Megatron-LM's loss mask), each micro-batch's loss is the
# mean over its other targets and the step's the mean over its micro-batches
# (gradient accumulation: 2 a step). primus' step-1 gradients, ten steps'
# losses, loss_tokens, grad norms and weight updates must match the
# reference; the log names the EOD id; the unmasked loss differs; a
# tokenizer without EOD is refused naming the key. A MoE case adds the
# router's losses, which Megatron-LM takes over every token (no mask), and
# its 2-rank runs add expert parallelism. Skipped without torch.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
oracle_python
cd "$T"
export OMP_NUM_THREADS=2
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR

small_corpus "$T/corpus.txt"
run data train-tokenizer --input "$T/corpus.txt" --vocab_size 300 --output "$T/tok.json"
expect_rc "train a BPE tokenizer (its EOD is <|endoftext|>)" 0
EOD=$("$PY" -c 'import json,sys; print(next(t["id"] for t in json.load(open(sys.argv[1]))["added_tokens"] if t["content"] == "<|endoftext|>"))' "$T/tok.json")
echo "# EOD id $EOD"

# oracle_case NAME ARGS...: make-case, primus' runs and the comparison.
oracle_case() {
  local name=$1
  shift
  d=$T/$name
  rd=
  oracle_prepare "$name" "$d" --hidden 48 --heads 4 --groups 2 --ffn 64 --layers 2 --vocab 300 --seq 16 \
    --untied --seed 91 --docs 40 --micro-batch 2 --global-batch 4 --eod-tokenizer "$T/tok.json" "$@" || return 1
  rd=$(ls -td "$d"/out/oracle/test/"$name"/run-* 2>/dev/null | head -1 || true)
  expect_file "$name: run directory" "${rd:-$d/no-run}/events.jsonl"
  if step "$name: reference" "$PY" "$REF" reference --case "$d"; then
    if "$PY" "$REF" compare --case "$d" --primus-run "${rd:-$d/no-run}" >"$T/cmp.log" 2>&1; then
      ok "$name: primus matches the float64 reference with the loss mask"
      grep -E '^(clip_grad|step  1 )' "$T/cmp.log" || true
    else
      bad "$name: primus differs from the float64 reference"
      cat "$T/cmp.log"
    fi
  fi
}

# MoE (Megatron-LM's router losses under the mask: aux and z over every
# token of a micro-batch, weighted 1 / the global batch's micro-batches;
# the comparison also checks each step's aux and z losses).
oracle_case eodmoe --experts 4 --topk 2 --moe-ffn 32 --aux 0.1 --zloss 0.01
rdm=$rd dm=$d
if oracle_case eod; then
  # The log says which id is masked.
  run train grads --config "$d/exp.yaml" --output "$T/masked.safetensors"
  expect_rc "eod: train grads" 0
  expect_in "eod: the log names the EOD id" "end-of-document token (id $EOD of HuggingFaceTokenizer)" "$ERR"
  run train grads --config "$d/exp.yaml" eod_mask_loss=false --output "$T/plain.safetensors"
  expect_rc "eod: train grads unmasked" 0
  expect_not_in "eod: unmasked run says nothing of the mask" "end-of-document token (id" "$ERR"
  if "$PY" - "$T/masked.safetensors" "$T/plain.safetensors" <<'PYEOF'; then
import json, struct, sys
def meta(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]
    return float(json.loads(f.read(n))["__metadata__"]["loss"])
a, b = meta(sys.argv[1]), meta(sys.argv[2])
print("masked loss %.8f, unmasked %.8f" % (a, b))
sys.exit(0 if abs(a - b) > 1e-4 * abs(b) else 1)
PYEOF
    ok "eod: the masked loss differs from the unmasked one"
  else
    bad "eod: the masked loss equals the unmasked one"
  fi
fi

# The same run on 2 ranks, data parallel and then pipeline parallel: the
# mask and the per-micro-batch means do not depend on where a micro-batch
# runs, so every step's loss and loss_tokens follow the 1-rank run's.
losses() { grep '^{"step"' "$1" | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*"loss_tokens":\([0-9]*\).*/\1 \2 \3/'; }
# MoE: data, pipeline and expert parallel (the router's losses of each
# micro-batch weigh alike wherever it runs).
two_ranks() { # NAME CASE_DIR ONE_RANK_RUN PAR...
  local name=$1 cd=$2 r1=$3 par
  shift 3
  for par in "$@"; do
    extra=()
    [[ $par == data_parallel ]] || extra=("$par")
    run direct --nproc 2 -- train pretrain --config "$cd/exp.yaml" "save=$T/ck-$name-${par%%=*}" \
      exp_name="${name}2-${par%%=*}" "${extra[@]}"
    expect_rc "$name: 2 ranks, $par" 0
    r2=$(ls -td "$cd"/out/oracle/test/"$name"2-"${par%%=*}"/run-* 2>/dev/null | head -1)
    a=$(losses "$r1/events.jsonl")
    b=$(losses "${r2:-$T/none}/events.jsonl" 2>/dev/null)
    w=$(join <(echo "$a") <(echo "$b") | awk '$3 != $5 {bad = 1} {d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > m) m = r}
      END {if (NR != 10 || bad) print "mismatch"; else printf "%.3e", m}')
    if within "$w" 1e-6; then ok "$name: 2 ranks ($par) follow 1 rank: 10 steps, same loss_tokens, worst loss $w"
    else bad "$name: 2 ranks ($par) differ from 1 rank ($w): $b"; fi
  done
}
if command -v mpirun >/dev/null; then
  export OMP_NUM_THREADS=1
  [[ -n ${rd:-} ]] && two_ranks eod "$d" "$rd" data_parallel pipeline_model_parallel_size=2
  [[ -n ${rdm:-} ]] && two_ranks eodmoe "$dm" "$rdm" data_parallel pipeline_model_parallel_size=2 \
    expert_model_parallel_size=2
fi

# A tokenizer without an EOD token cannot mask: exit 2 naming the key.
tiny_exp noeod "eod_mask_loss: true"
run train pretrain --config noeod.yaml
expect_rc "eod_mask_loss with the ByteTokenizer (no EOD)" 2
expect_in "the error names eod_mask_loss" "eod_mask_loss" "$ERR"
expect_in "the error says why" "no end-of-document token" "$ERR"
# Mock tokens: accepted, no effect, said once.
tiny_exp mock "eod_mask_loss: true" "mock_data: true" "train_iters: 1"
run train pretrain --config mock.yaml
expect_rc "eod_mask_loss with mock_data" 0
expect_in "mock data: the mask has no effect" "no effect on mock tokens" "$ERR"

finish
