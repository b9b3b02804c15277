#!/usr/bin/env bash
# bf16 mixed precision with mixture-of-experts layers: the router's, the
# experts' and the shared expert's GEMMs on bf16 operands with fp32
# accumulation (the router's softmax, top k and losses, the norms, the
# loss and AdamW stay fp32). Over 200 steps of a tiny MoE model (4 experts,
# top 2, a shared expert, on every other layer) the loss curve stays within
# 2% of fp32's at every step, really differs from it, and learns; the
# router's statistics are logged as in fp32. With expert parallelism (2
# ranks holding 2 experts each) bf16 follows the 2-rank data-parallel bf16
# run of the same model. Under the sanitizers
# (PRIMUS_SANITIZED) the curves are compared over 50 steps.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=1
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
small_corpus corpus.txt

N=200
[[ -n ${PRIMUS_SANITIZED:-} ]] && N=50
exp() { # NAME [KEY: VALUE...]
  local n=$1
  shift
  tiny_exp "$n" "num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 48" \
    "moe_shared_expert_intermediate_size: 32" "moe_layer_freq: 2" "moe_aux_loss_coeff: 0.01" \
    "moe_z_loss_coeff: 0.001" "train_iters: $N" "log_interval: 50" "lr: 1.0e-3" \
    "lr_warmup_iters: 10" "$@"
}

exp fp32
run train pretrain --config fp32.yaml
expect_rc "MoE fp32, $N steps" 0
exp bf16 "bf16: true"
run train pretrain --config bf16.yaml
expect_rc "MoE bf16, $N steps" 0
expect_in "the memory line counts the bf16 weights" "bf16 weights" "$ERR"
expect_in "the router's statistics are logged" "moe aux" "$ERR"
expect_eq "$N bf16 steps logged" "$(run_losses bf16 | wc -l)" "$N"
bf16_vs_fp32 "MoE bf16" "$N"

# Expert parallel (when mpirun is here): E = 2 against data parallel, both bf16.
if command -v mpirun >/dev/null; then
  exp dp2 "bf16: true" "train_iters: 6" "micro_batch_size: 1"
  exp ep2 "bf16: true" "train_iters: 6" "micro_batch_size: 1" "expert_model_parallel_size: 2"
  follows_on2 dp2 ep2 6 1e-3 "MoE bf16, expert parallel on 2 ranks against data parallel"
else
  bad "mpirun present (scripts/deps.sh installs openmpi-bin)"
fi
finish
