#!/usr/bin/env bash
# Supervised fine-tuning end to end through the real binary (`train
# posttrain`, docs/posttrain.md): a tiny pre-training run, then fine-tuning
# from its checkpoint on a small JSONL file (prompt/response and chat
# lines) where the loss on the response tokens falls; packed and padded
# batches holding the same examples give the same step-1 loss and
# gradients; 2 data-parallel ranks and 2 tensor-parallel ranks follow one
# (sequence parallel too: test-train-sp-combo.sh); malformed files fail
# naming file:line, and what fine-tuning does not support (pipeline
# parallel) is refused; a MoE model fine-tunes with the router's losses
# over the response tokens (packed = padded, 2 ranks = 1); a run with a BPE tokenizer leaves tokenizer.json and
# tokenizer_config.json (with the chat template) in its checkpoint.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
PY=/usr/bin/python3

# The tiny model with room for a few byte-level examples per sequence.
sft_model() {
  cat <<Y
      hidden_size: 32
      num_layers: 2
      num_attention_heads: 4
      num_query_groups: 2
      ffn_hidden_size: 64
      max_position_embeddings: 256
Y
}
small_corpus "$T/corpus.txt"
_exp_write sft_model pre "save: $T/pre" "train_iters: 6" "seq_length: 64"
run train pretrain --config pre.yaml
expect_rc "pre-training" 0

# Examples: a word's letters spelled out; prompt/response and chat lines.
awk 'BEGIN { split("cat dog sun map hat pen cup box", w, " ");
  for (i = 0; i < 24; i++) { x = w[1 + i % 8]; s = "";
    for (j = 1; j <= length(x); j++) s = s (j > 1 ? "-" : "") substr(x, j, 1);
    if (i % 2) printf "{\"prompt\": \"spell %s\", \"response\": \"%s\"}\n", x, s;
    else printf "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"spell %s\"}, {\"role\": \"assistant\", \"content\": \"%s\"}]}\n", x, s } }' > sft.jsonl

# post_exp NAME [KEY: VALUE]...: a post_trainer experiment on the tiny
# model, from the pre-training checkpoint.
post_exp() {
  local name=$1
  shift
  _exp_write sft_model "$name" "data_path: $T/sft.jsonl" "load: $T/pre" 'split: "100,0,0"' \
    "seq_length: 128" "lr: 1.0e-2" "lr_warmup_iters: 0" "train_iters: 20" "eval_iters: 0" "$@"
  sed -i 's/^  pre_trainer:/  post_trainer:/; s/config: pre_trainer.yaml/config: post_trainer.yaml/' \
    "$name.yaml"
}

post_exp sft "save: $T/sft" "save_interval: 20"
run train posttrain --config sft.yaml
expect_rc "posttrain from the pre-training checkpoint" 0
expect_in "loads the checkpoint" "loaded weights from $T/pre/iter_0000006" "$ERR"
expect_in "describes the examples" "24 examples, chat template default, packed to 128 positions" "$ERR"
EV=$(run_events sft)
expect_in "steps report their loss tokens" '"loss_tokens":' "$EV"
L=$(run_losses sft)
first=$(echo "$L" | head -1 | cut -d' ' -f2)
last=$(echo "$L" | tail -3 | awk '{s += $2} END {printf "%.6f", s / NR}')
echo "# response-token loss: step 1 $first, mean of the last 3 steps $last"
if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.7 * a) }'; then
  ok "the loss on the response tokens falls (from $first to $last)"
else
  bad "the loss did not fall enough: $first -> $last"
fi
expect_in "starts at step 1 with a fresh optimizer" '{"step":1,' "$EV"
expect_file "checkpoint" "$T/sft/iter_0000020/model.safetensors"

# Packed vs padded: seq_length 256 packs 4 examples into one sequence; the
# same 4 padded take 4 sequences. Same examples, same step-1 loss (the
# mean over their response tokens) and gradients.
head -4 sft.jsonl > four.jsonl
grads_of() { # NAME PACKING GLOBAL_BATCH: sets G to "LOSS NORM"
  post_exp "$1" "data_path: $T/four.jsonl" "seq_length: 256" "micro_batch_size: 1" \
    "global_batch_size: $3" "packing: $2"
  run train grads --config "$1.yaml" --output "$1.safetensors"
  expect_rc "train grads ($1)" 0
  G=$(echo "$ERR" | sed -n 's/.*step-1 loss \([0-9.]*\), gradient norm \([0-9.]*\).*/\1 \2/p')
}
grads_of packed true 1
P=$G
expect_in "packed: 4 examples in 1 sequence" "train 4 examples in 1 sequences" "$ERR"
grads_of padded false 4
U=$G
expect_in "padded: 4 examples in 4 sequences" "train 4 examples in 4 sequences" "$ERR"
echo "# packed: loss, grad norm $P; padded: $U"
if [[ -n $P && -n $U ]] && awk -v p="$P" -v u="$U" 'BEGIN { split(p, a, " "); split(u, b, " ");
    for (i = 1; i <= 2; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > 1e-5 * b[i]) exit 1 } }'; then
  ok "packed and padded batches agree on the loss and gradient norm"
else
  bad "packed ($P) and padded ($U) differ"
fi
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" padded.safetensors packed.safetensors 2>&1)
if within "$w" 1e-5; then ok "packed and padded gradients agree ($w)"; else bad "gradients differ: $w"; fi

# Data parallel: 2 ranks count the loss tokens of the whole global batch,
# so they follow the one-rank run.
if command -v mpirun >/dev/null; then
  post_exp dp1 "micro_batch_size: 1" "train_iters: 4"
  run train posttrain --config dp1.yaml
  expect_rc "one rank" 0
  post_exp dp2 "micro_batch_size: 1" "train_iters: 4"
  OMP_NUM_THREADS=1 run direct --nproc 2 -- train posttrain --config dp2.yaml
  expect_rc "two data-parallel ranks" 0
  d=$(loss_diff dp1 dp2)
  if within "$d" 1e-6; then ok "2 ranks: losses within 1e-6 of one rank ($d)"; else bad "2 ranks: losses differ by $d"; fi
  # Tensor parallel (no longer refused): the same losses as one rank.
  post_exp tp2 "micro_batch_size: 1" "train_iters: 4" "tensor_model_parallel_size: 2"
  OMP_NUM_THREADS=1 run direct --nproc 2 -- train posttrain --config tp2.yaml
  expect_rc "tensor parallel 2" 0
  d=$(loss_diff dp1 tp2)
  if within "$d" 1e-6; then ok "T = 2: losses within 1e-6 of one rank ($d)"; else bad "T = 2: losses differ by $d"; fi
else
  echo "# mpirun missing: the data-parallel check is skipped"
fi

# Mixture of experts: the router's aux and z losses are taken over the
# tokens that count (the response tokens). A tiny MoE pre-training run,
# then the same 4 examples packed into one sequence and padded into 4 (one
# micro-batch each way) give the same step-1 loss and gradients: the
# padding and the prompts do not enter the router's losses.
moe_keys=("num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 48"
  "moe_aux_loss_coeff: 0.05" "moe_z_loss_coeff: 0.01" "moe_layer_freq: 1")
_exp_write sft_model premoe "save: $T/premoe" "train_iters: 2" "seq_length: 64" "${moe_keys[@]}"
run train pretrain --config premoe.yaml
expect_rc "MoE pre-training" 0
moe_grads() { # NAME PACKING MICRO_BATCH
  post_exp "$1" "data_path: $T/four.jsonl" "seq_length: 256" "micro_batch_size: $3" \
    "global_batch_size: $3" "packing: $2" "load: $T/premoe" "${moe_keys[@]}"
  run train grads --config "$1.yaml" --output "$1.safetensors"
  expect_rc "MoE: train grads ($1)" 0
  G=$(echo "$ERR" | sed -n 's/.*step-1 loss \([0-9.]*\), gradient norm \([0-9.]*\).*/\1 \2/p')
}
moe_grads moepacked true 1
P=$G
moe_grads moepadded false 4
U=$G
echo "# MoE packed: loss, grad norm $P; padded: $U"
if [[ -n $P && -n $U ]] && awk -v p="$P" -v u="$U" 'BEGIN { split(p, a, " "); split(u, b, " ");
    for (i = 1; i <= 2; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > 1e-5 * b[i]) exit 1 } }'; then
  ok "MoE: packed and padded batches agree on the loss and gradient norm"
else
  bad "MoE: packed ($P) and padded ($U) differ"
fi
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" moepadded.safetensors moepacked.safetensors 2>&1)
if within "$w" 1e-5; then ok "MoE: packed and padded gradients agree ($w)"; else bad "MoE: gradients differ: $w"; fi
# Fine-tuning the MoE model: the response loss falls, the routing is logged,
# and 2 data-parallel ranks follow one.
post_exp moesft "load: $T/premoe" "micro_batch_size: 1" "global_batch_size: 4" "train_iters: 6" \
  "${moe_keys[@]}" "save: $T/moesft" "save_interval: 6"
run train posttrain --config moesft.yaml
expect_rc "MoE posttrain" 0
expect_in "MoE posttrain: the routing is logged" "layer 0: tokens" "$ERR"
# KV-cache generation of the fine-tuned MoE model: greedy, twice the same.
run generate --load "$T/moesft" --prompt "spell cat" --max_new_tokens 12 --temperature 0
expect_rc "MoE generate" 0
G1=$OUT
expect_in "MoE generate: prints the prompt" "spell cat" "$G1"
run generate --load "$T/moesft" --prompt "spell cat" --max_new_tokens 12 --temperature 0
if [[ $RC == 0 && $OUT == "$G1" ]]; then ok "MoE generate: greedy is deterministic"; else bad "MoE generate: runs differ"; fi
L=$(run_losses moesft)
first=$(echo "$L" | head -1 | cut -d' ' -f2)
last=$(echo "$L" | tail -1 | cut -d' ' -f2)
if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'; then
  ok "MoE posttrain: the loss falls ($first -> $last)"
else
  bad "MoE posttrain: the loss did not fall: $first -> $last"
fi
if command -v mpirun >/dev/null; then
  post_exp moedp2 "load: $T/premoe" "micro_batch_size: 1" "global_batch_size: 4" "train_iters: 6" \
    "${moe_keys[@]}"
  OMP_NUM_THREADS=1 run direct --nproc 2 -- train posttrain --config moedp2.yaml
  expect_rc "MoE posttrain on two data-parallel ranks" 0
  d=$(loss_diff moesft moedp2)
  if within "$d" 1e-6; then ok "MoE, 2 ranks: losses within 1e-6 of one rank ($d)"; else bad "MoE, 2 ranks: losses differ by $d"; fi
fi

# Malformed files: the error names file:line.
bad_file() { # NAME CONTENT NEEDLE
  printf '%b' "$2" > bad.jsonl
  post_exp badx "data_path: $T/bad.jsonl" "train_iters: 1"
  run train posttrain --config badx.yaml
  expect_rc "$1: refused" 2
  expect_in "$1: says why" "$3" "$ERR"
}
bad_file "bad JSON" '{"prompt": "a", "response": "b"}\n{"prompt": "a",\n' "bad.jsonl:2: bad JSON"
bad_file "unknown role" '{"messages": [{"role": "bot", "content": "x"}]}\n' \
  'bad.jsonl:1: messages[0]: unknown role "bot"'
bad_file "no response" '\n{"prompt": "a"}\n' 'bad.jsonl:2: "response": expected a string'
bad_file "no assistant" '{"messages": [{"role": "user", "content": "x"}]}\n' \
  "bad.jsonl:1: no assistant message"
bad_file "empty file" '' "bad.jsonl: no examples (empty file)"
post_exp badct "chat_template: chatml"
run train posttrain --config badct.yaml
expect_rc "unknown chat_template: refused" 2
expect_in "unknown chat_template: names the key" "chat_template" "$ERR"
post_exp badpp "pipeline_model_parallel_size: 2"
run train posttrain --config badpp.yaml
expect_rc "pipeline parallel: refused" 2
expect_in "pipeline parallel: says so" "pipeline_model_parallel_size: fine-tuning (post_trainer) runs with data parallelism only" "$ERR"
run train pretrain --config sft.yaml
expect_rc "train pretrain on a post_trainer experiment: refused" 2
expect_in "points at posttrain" "train posttrain" "$ERR"

# A BPE tokenizer (trained here on the examples' text): the checkpoint can
# be loaded by Hugging Face tooling (tokenizer.json, tokenizer_config.json).
run data train-tokenizer --input sft.jsonl --vocab_size 300 --output tok.json
expect_rc "train a BPE tokenizer" 0
post_exp bpe "load: null" "tokenizer_type: HuggingFaceTokenizer" "tokenizer_model: $T/tok.json" \
  "vocab_size: null" "train_iters: 2" "save: $T/bpe" "save_interval: 2" "chat_template: llama3" \
  "seq_length: 256"
run train posttrain --config bpe.yaml
expect_rc "posttrain with the BPE tokenizer, llama3 template" 0
expect_file "tokenizer.json in the checkpoint" "$T/bpe/iter_0000002/tokenizer.json"
expect_file "tokenizer_config.json in the checkpoint" "$T/bpe/iter_0000002/tokenizer_config.json"
TC=$(cat "$T/bpe/iter_0000002/tokenizer_config.json" 2>/dev/null)
expect_in "tokenizer_config: the class" '"tokenizer_class":	"PreTrainedTokenizerFast"' "$TC"
expect_in "tokenizer_config: eos" '"eos_token":	"<|endoftext|>"' "$TC"
expect_in "tokenizer_config: model_max_length" '"model_max_length":	256' "$TC"
expect_in "tokenizer_config: the llama3 chat template" "<|start_header_id|>" "$TC"
loss_tokens() { echo "$ERR" | sed -n 's/.*train 24 examples in [0-9]* sequences (\([0-9]*\) loss tokens).*/\1/p'; }
PLAIN=$(loss_tokens)

# The same tokenizer with Llama-3's markers as added tokens: each marker is
# one token (<|eot_id|> ends every turn as one loss token), and the config
# names them as bos/eos.
$PY - tok.json tok3.json <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
n = 1 + max(max(t["model"]["vocab"].values()), max(a["id"] for a in t["added_tokens"]))
for i, m in enumerate(["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]):
    t["added_tokens"].append({"id": n + i, "content": m, "special": True, "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False})
json.dump(t, open(sys.argv[2], "w"))
PYEOF
post_exp bpe3 "load: null" "tokenizer_type: HuggingFaceTokenizer" "tokenizer_model: $T/tok3.json" \
  "vocab_size: null" "train_iters: 1" "save: $T/bpe3" "save_interval: 1" "chat_template: llama3" \
  "seq_length: 256"
run train posttrain --config bpe3.yaml
expect_rc "posttrain with Llama-3 markers as tokens" 0
MARK=$(loss_tokens)
# 24 assistant turns: "<|eot_id|>" as text is several tokens, as a marker one.
if [[ -n $PLAIN && -n $MARK ]] && ((PLAIN - MARK >= 24)); then
  ok "markers are single tokens when the tokenizer has them ($PLAIN -> $MARK loss tokens)"
else
  bad "markers not single tokens: $PLAIN -> $MARK loss tokens"
fi
TC=$(cat "$T/bpe3/iter_0000001/tokenizer_config.json" 2>/dev/null)
expect_in "tokenizer_config: eos <|eot_id|>" '"eos_token":	"<|eot_id|>"' "$TC"
expect_in "tokenizer_config: bos <|begin_of_text|>" '"bos_token":	"<|begin_of_text|>"' "$TC"

finish
