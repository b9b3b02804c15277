#!/usr/bin/env bash
# Sequence parallel (issue 28) combined with the other layouts, on the
# tiny model as test-train-sp.sh: T = 2 x D = 2 with the distributed
# optimizer, T = 2 x P = 2, T = 2 x context parallel 2, a MoE model
# (experts split, a shared expert) at T = 2, and fine-tuning on packed
# examples at T = 2 follow the one-rank run (per-step losses and
# whole-model weights after 6 steps within 1e-5 relative); bf16 at T = 2
# follows bf16 T = 2 without it within 1e-3; a sequence-parallel T = 2
# checkpoint resumes at T = 1 to the uninterrupted run's weights.
source "$(dirname "$0")/lib.sh"
multirank_setup

source "$(dirname "$0")/sp-lib.sh"

exp one
launch 1 one
# ---- T = 2 x D = 2 with the distributed optimizer; T = 2 x P = 2 ----
exp sp2dp2 "tensor_model_parallel_size: 2" "$SP" "use_distributed_optimizer: true"
launch 4 sp2dp2
expect_in "sp2dp2: ZeRO-1 over the data-parallel group" "data parallel: 2 ranks with the distributed optimizer (ZeRO-1)" "$ERR"
same sp2dp2 one "T = 2 x D = 2, sequence parallel, ZeRO-1"
exp sp2pp2 "tensor_model_parallel_size: 2" "pipeline_model_parallel_size: 2" "$SP"
launch 4 sp2pp2
same sp2pp2 one "T = 2 x P = 2, sequence parallel"

# ---- Context parallel 2 x T = 2: a rank's rows are half of its 16 rows of
# each sequence ----
exp sp2cp2 "tensor_model_parallel_size: 2" "context_parallel_size: 2" "$SP"
launch 4 sp2cp2
expect_in "sp2cp2: context parallel" "context parallel: 2 ranks per sequence" "$ERR"
expect_in "sp2cp2: its block of the rank's rows" "sequence parallel: token rows" "$ERR"
same sp2cp2 one "CP = 2 x T = 2, sequence parallel"

# ---- Mixture of experts at T = 2 (experts split, a shared expert) ----
moe() { moe_exp "$1" "micro_batch_size: 2" "moe_shared_expert_intermediate_size: 32" "${@:2}"; }
moe one-moe
launch 1 one-moe
moe sp2-moe "tensor_model_parallel_size: 2" "$SP"
launch 2 sp2-moe
same sp2-moe one-moe "MoE, T = 2 with sequence parallel vs one rank"

# ---- bf16: close to bf16 tensor parallel without it ----
exp tp2-bf16 "tensor_model_parallel_size: 2" "bf16: true"
launch 2 tp2-bf16
exp sp2-bf16 "tensor_model_parallel_size: 2" "bf16: true" "$SP"
launch 2 sp2-bf16
same sp2-bf16 tp2-bf16 "bf16, T = 2 with sequence parallel vs without" 1e-3

# ---- Fine-tuning with packed sequences (attention inside each example,
# positions restarting at 0) at T = 2 with sequence parallel ----
cat > sft_model.txt <<'Y'
      hidden_size: 32
      num_layers: 2
      num_attention_heads: 4
      num_query_groups: 2
      ffn_hidden_size: 64
      max_position_embeddings: 256
Y
sft_model() { cat sft_model.txt; }
_exp_write sft_model pre "save: $T/pre" "train_iters: 2" "seq_length: 64"
launch 1 pre
awk 'BEGIN { split("cat dog sun map hat pen cup box", w, " ");
  for (i = 0; i < 16; i++) { x = w[1 + i % 8]; s = "";
    for (j = 1; j <= length(x); j++) s = s (j > 1 ? "-" : "") substr(x, j, 1);
    printf "{\"prompt\": \"spell %s\", \"response\": \"%s\"}\n", x, s } }' > sft.jsonl
post() { # NAME [KEY: VALUE]...: a post_trainer experiment from the checkpoint above
  local n=$1
  shift
  _exp_write sft_model "$n" "data_path: $T/sft.jsonl" "load: $T/pre" 'split: "100,0,0"' \
    "seq_length: 128" "micro_batch_size: 2" "global_batch_size: 4" "train_iters: 6" \
    "log_interval: 3" "lr: 1.0e-2" "lr_warmup_iters: 0" "save: $T/ck-$n" "save_interval: 6" "$@"
  sed -i 's/^  pre_trainer:/  post_trainer:/; s/config: pre_trainer.yaml/config: post_trainer.yaml/' "$n.yaml"
  if [[ "$*" == *tensor_model_parallel_size* ]]; then run direct --nproc 2 -- train posttrain --config "$n.yaml"
  else run train posttrain --config "$n.yaml"; fi
  expect_rc "$n: fine-tuning" 0
}
post sft-one
post sft-sp2 "tensor_model_parallel_size: 2" "$SP"
expect_in "sft-sp2: packed examples" "packed to 128 positions" "$ERR"
same sft-sp2 sft-one "fine-tuning, packed, T = 2 with sequence parallel vs one rank"

# ---- A sequence-parallel checkpoint resumes at T = 1 ----
exp half "tensor_model_parallel_size: 2" "$SP" "train_iters: 3" "save_interval: 3" "save: $T/ck-r"
exp rest "save: $T/ck-r" "load: $T/ck-r" "auto_continue_train: true"
launch 2 half
launch 1 rest
expect_in "resumed from iteration 3" "iteration 3" "$ERR"
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$T/ck-r/iter_0000006/model.safetensors")
if within "$w" 1e-5; then ok "sequence parallel T = 2 -> T = 1: weights within 1e-5 of the uninterrupted run ($w)"
else bad "sequence parallel T = 2 -> T = 1: weights differ by $w"; fi

finish
