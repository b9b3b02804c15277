#!/usr/bin/env bash
# Primus' own experiment files, as Primus ships them (framework: megatron,
# Primus' preset names, Megatron-LM's keys): the BF16 ones of the families
# primus trains validate unchanged and train two steps with the shape made
# small on the command line (Llama 2/3/3.1, Qwen 2.5/3, Mixtral, Qwen 3 MoE);
# the FP8 ones, architectures primus does not
# train, and keys its engine lacks fail with exit 2 naming the key or
# feature; a file with several problems lists them all; the checkpoint keys
# (disable_last_saving, no_save_optim), train_data_path and tokenizers
# named by Hugging Face id in a local cache.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2
unset HF_HUB_CACHE XDG_CACHE_HOME
export HF_HOME=$T/hf

# primus_exp FILE MODEL [LINE]...: an experiment in Primus' layout with the
# overrides of Primus' Llama 3 8B BF16 pretraining example, plus LINEs.
primus_exp() {
  local file=$1 model=$2
  shift 2
  {
    cat <<Y
work_group: \${PRIMUS_TEAM:amd}
user_name: \${PRIMUS_USER:root}
exp_name: \${PRIMUS_EXP_NAME:${file%.yaml}}
workspace: \${PRIMUS_WORKSPACE:./output}

modules:
  pre_trainer:
    framework: megatron
    config: pre_trainer.yaml
    # data_path: ./data

    # model to run
    model: $model
    overrides:
      # log
      wandb_project: "Primus_DeepSeek_Pretrain"
      # disable_wandb: false
      # disable_tensorboard: false
      stderr_sink_level: DEBUG

      log_avg_skip_iterations: 2
      log_avg_reset_interval: 50

      train_iters: 50
      micro_batch_size: 2
      global_batch_size: 16

      seq_length: 8192
      max_position_embeddings: 8192

      lr: 1.0e-5
      min_lr: 0.0
      lr_warmup_iters: 2
      lr_decay_iters: null
      lr_decay_style: cosine
      weight_decay: 0.1
      adam_beta1: 0.9
      adam_beta2: 0.95
      eod_mask_loss: true
      init_method_std: 0.008
      norm_epsilon: 1.0e-6

      # parallel
      tensor_model_parallel_size: 1
      pipeline_model_parallel_size: 1
      expert_model_parallel_size: 1
      overlap_grad_reduce: true
      overlap_param_gather: true
      gradient_accumulation_fusion: false

      # data
      mock_data: true
      train_data_path: null
      valid_data_path: null
      test_data_path: null

      # ckpt
      finetune: false
      load: null
      no_load_optim: null
      no_load_rng: null
      save: null
      save_interval: 20000
      no_save_optim: null
      no_save_rng: null
      disable_last_saving: true
      ckpt_format: torch

      # Turbo
      enable_primus_turbo: true
      use_turbo_attention: true
      use_turbo_grouped_gemm: true
Y
    for l in "$@"; do echo "      $l"; done
  } > "$file"
}
# bf16 FILE MODEL [LINE]...: the BF16 variant (its cross-entropy flags);
# fp8 FILE MODEL: the FP8 variant (fp8: hybrid). line_of FILE TEXT: the
# line number of TEXT in FILE.
bf16() {
  local f=$1 m=$2
  shift 2
  primus_exp "$f" "$m" "# Cross entropy flags" 'cross_entropy_fusion_impl: "te"' \
    "cross_entropy_loss_fusion: true" "$@"
}
fp8() { primus_exp "$1" "$2" "# enable fp8 training" "fp8: hybrid" "moe_use_legacy_grouped_gemm: false"; }
line_of() { grep -n -F -- "$2" "$1" | head -1 | cut -d: -f1; }

# Dimensions made small on the command line; everything else as written.
SMALL=(num_layers=2 hidden_size=32 num_attention_heads=4 num_query_groups=2 ffn_hidden_size=64
  seq_length=32 max_position_embeddings=64 micro_batch_size=1 global_batch_size=2 train_iters=2
  vocab_size=256 "workspace=$T/ws")
MOE=(num_experts=4 moe_router_topk=2 moe_ffn_hidden_size=32)

run config presets
expect_rc "config presets" 0
for m in llama3_8B qwen2.5_72B qwen3_235B_A22B mixtral_8x22B_v0.1 language_model; do
  expect_in "presets list megatron/$m" "  $m" "$(sed -n '/models\/megatron/,$p' <<<"$OUT")"
done

# ---- the families primus trains: validate unchanged, train two steps ----
for c in "llama3_8B.yaml 8.030B" "llama2_7B 6.738B" "llama3_70B.yaml 70.554B" \
  "mixtral_8x7B_v0.1.yaml 46.703B"; do
  set -- $c
  f=${1%.yaml}-BF16-pretrain.yaml
  # Llama 3 70B as Primus' 70B examples write it: FSDP2, block recompute.
  more=()
  [[ $1 == llama3_70B* ]] && more=("use_torch_fsdp2: true" "use_distributed_optimizer: false"
    "sequence_parallel: 1" "recompute_granularity: full # full, selective"
    "recompute_method: block # uniform, block" "recompute_num_layers: 80 # int")
  bf16 "$f" "$1" "${more[@]}"
  run config validate --config "$f"
  expect_rc "$f validates unchanged" 0
  expect_in "$f: size" "$2 parameters" "$OUT"
  extra=()
  [[ $1 == mixtral* ]] && extra=("${MOE[@]}")
  run train pretrain --config "$f" "${SMALL[@]}" "${extra[@]}"
  expect_rc "$f trains two small steps" 0
  expect_eq "$f: two steps" "$(grep -c '] step [0-9]/2 ' <<<"$ERR")" 2
  expect_eq "$f: the framework said once" "$(grep -c 'framework: megatron' <<<"$ERR")" 1
  expect_eq "$f: one warning line for keys without effect" "$(grep -c 'no effect in primus' <<<"$ERR")" 1
done
expect_in "the warning counts the keys" "12 keys set with no effect in primus" "$ERR"
W=$(grep 'no effect in primus' <<<"$ERR")
for k in wandb_project stderr_sink_level log_avg_skip_iterations log_avg_reset_interval \
  overlap_param_gather gradient_accumulation_fusion ckpt_format enable_primus_turbo \
  use_turbo_attention use_turbo_grouped_gemm cross_entropy_fusion_impl cross_entropy_loss_fusion; do
  expect_in "warning lists $k" "$k" "$W"
done
expect_not_in "implemented keys are not listed" "disable_last_saving" "$W"
expect_in "mock data takes the preset's vocabulary, said so" "mock_data: vocabulary of 256" "$ERR"
expect_in "eod_mask_loss on mock tokens said" "eod_mask_loss: true has no effect on mock tokens" "$ERR"
expect_in "bf16 from Primus' module preset" "bf16" "$ERR"

# Mixtral and Qwen 3 MoE as Primus writes them for benchmarks: forced even
# routing (random router logits from the seed, Megatron-LM's benchmark aid)
# validates unchanged, trains two small steps and warns that the routing is
# not learned.
for m in mixtral_8x7B_v0.1 qwen3_30B_A3B; do
  bf16 "force-$m.yaml" "$m.yaml" "moe_router_force_load_balancing: true" \
    "use_turbo_deepep: true" "moe_router_dtype: fp32" "turbo_deepep_num_cu: 64" \
    "turbo_sync_free_moe_stage: 1" "moe_use_fused_router_with_aux_score: true" "moe_permute_fusion: true"
  run config validate --config "force-$m.yaml"
  expect_rc "$m with forced load balancing validates unchanged" 0
  run train pretrain --config "force-$m.yaml" "${SMALL[@]}" "${MOE[@]}"
  expect_rc "$m with forced load balancing trains two small steps" 0
  expect_eq "$m forced: two steps" "$(grep -c '] step [0-9]/2 ' <<<"$ERR")" 2
  expect_in "$m forced: warned, not learned" "moe_router_force_load_balancing: true: the router's logits are random draws (seed" "$ERR"
done
# What it does: the same small MoE run with learned and with forced
# routing. Forced routing is deterministic (two runs, the same losses and
# expert counts), spreads the step's 128 assignments (64 tokens x top 2)
# over the 4 experts of each layer within 16..48, and differs from the
# learned routing's losses.
moe_counts() { run_events "$1" | grep '^{"step":1,' | grep -o '"counts":\[[0-9,]*\]' | tr -d '"counts:[]' | paste -sd, -; }
for r in learned forced forced2; do
  f=no; [[ $r == forced* ]] && f=true
  tiny_exp "fb-$r" "num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 32" "micro_batch_size: 2" \
    "global_batch_size: 2" "train_iters: 3" "log_interval: 1" "moe_router_force_load_balancing: ${f/no/false}" \
    "moe_aux_loss_coeff: 0.0"
  small_corpus corpus.txt
  run train pretrain --config "fb-$r.yaml"
  expect_rc "small MoE, $r routing" 0
done
expect_eq "forced routing: three steps logged" "$(run_losses fb-forced | wc -l)" 3
expect_eq "forced routing: deterministic losses" "$(run_losses fb-forced)" "$(run_losses fb-forced2)"
expect_eq "forced routing: deterministic counts" "$(moe_counts fb-forced)" "$(moe_counts fb-forced2)"
C=$(moe_counts fb-forced)
echo "# forced counts per layer: $C; learned: $(moe_counts fb-learned)"
if [[ -n $C ]] && awk -v c="$C" 'BEGIN { n = split(c, v, /[ ,]+/); for (i = 1; i <= n; i++) if (v[i] != "" && (v[i] < 16 || v[i] > 48)) exit 1; exit (n < 8) }'; then
  ok "forced routing spreads the assignments over the experts (16..48 each)"
else bad "forced routing counts: $C"; fi
if [[ "$(run_losses fb-forced)" != "$(run_losses fb-learned)" ]]; then ok "forced routing differs from learned routing"
else bad "forced routing has learned routing's losses"; fi

# ---- the attention variants: Llama 3.1's RoPE scaling, Qwen 2.5's q/k/v
# biases, Qwen 3's q/k norms and head width (kv_channels 128, kept from the
# preset): validate unchanged and train two small steps ----
for c in "llama3.1_8B use_rope_scaling 8.030B" "qwen2.5_7B add_qkv_bias 7.616B" \
  "qwen3_8B qk_layernorm 8.191B" "qwen3_30B_A3B qk_layernorm 30.532B"; do
  set -- $c
  bf16 "$1-BF16.yaml" "$1.yaml"
  run config validate --config "$1-BF16.yaml"
  expect_rc "$1 validates" 0
  expect_in "$1: size counts the new tensors" "$3 parameters" "$OUT"
  extra=()
  [[ $1 == *A3B ]] && extra=("${MOE[@]}")
  run train pretrain --config "$1-BF16.yaml" "${SMALL[@]}" "${extra[@]}" save_interval=2 disable_last_saving=false \
    "save=$T/ws/$1-ckpt"
  expect_rc "$1 ($2) trains two small steps" 0
  expect_eq "$1: two steps" "$(grep -c '] step [0-9]/2 ' <<<"$ERR")" 2
  expect_not_in "$1: nothing refused" "not implemented" "$ERR"
done
# The checkpoints carry the variants under Hugging Face's names and keys.
CK=$(ls -d "$T"/ws/qwen2.5_7B-ckpt/iter_* | head -1)
expect_in "Qwen 2.5 checkpoint: model_type qwen2" '"model_type":"qwen2"' "$(tr -d ' \t\n' <"$CK/config.json")"
expect_in "Qwen 2.5 checkpoint: q_proj.bias" "model.layers.0.self_attn.q_proj.bias" \
  "$(head -c 20000 "$CK/model.safetensors" | tr -c '[:print:]' ' ')"
CK=$(ls -d "$T"/ws/qwen3_8B-ckpt/iter_* | head -1)
expect_in "Qwen 3 checkpoint: model_type qwen3" '"model_type":"qwen3"' "$(tr -d ' \t\n' <"$CK/config.json")"
expect_in "Qwen 3 checkpoint: head_dim" '"head_dim":128' "$(tr -d ' \t\n' <"$CK/config.json")"
expect_in "Qwen 3 checkpoint: k_norm" "model.layers.1.self_attn.k_norm.weight" \
  "$(head -c 20000 "$CK/model.safetensors" | tr -c '[:print:]' ' ')"
CK=$(ls -d "$T"/ws/llama3.1_8B-ckpt/iter_* | head -1)
expect_in "Llama 3.1 checkpoint: rope_scaling llama3" '"rope_type":"llama3"' "$(tr -d ' \t\n' <"$CK/config.json")"

# ---- FP8 variants: no FP8 arithmetic here ----
for m in llama3_8B llama2_70B mixtral_8x22B_v0.1; do
  fp8 "$m-FP8-pretrain.yaml" "$m.yaml"
  run config validate --config "$m-FP8-pretrain.yaml"
  expect_rc "$m FP8 fails validation" 2
  expect_in "$m FP8: names fp8 and its line" \
    "$m-FP8-pretrain.yaml:$(line_of "$m-FP8-pretrain.yaml" "fp8: hybrid"): fp8: got \"hybrid\"" "$ERR"
  run train pretrain --config "$m-FP8-pretrain.yaml" "${SMALL[@]}"
  expect_rc "$m FP8 does not train" 2
  expect_in "$m FP8 train: names fp8" "fp8:" "$ERR"
done

# ---- architectures primus does not train ----
for c in "deepseek_v3.yaml:multi-latent attention (MLA)" "deepseek_v2_lite.yaml:multi-latent attention" \
  "llama4_17B16E.yaml:Llama 4" "gpt_oss_20B.yaml:attention sinks" "grok1.yaml:Grok" \
  "mamba_370M.yaml:Mamba" "zebra_llama_1B.yaml:hybrid"; do
  m=${c%%:*}
  bf16 "${m%.yaml}-BF16-pretrain.yaml" "$m"
  run config validate --config "${m%.yaml}-BF16-pretrain.yaml"
  expect_rc "$m refused" 2
  expect_in "$m: the feature is named" "${c#*:}" "$ERR"
  expect_not_in "$m: not 'not found'" "not found" "$ERR"
done
bf16 mla.yaml llama3_8B.yaml "multi_latent_attention: true" "q_lora_rank: 1536"
run config validate --config mla.yaml
expect_rc "MLA keys on a Llama preset" 2
expect_in "names multi_latent_attention" "multi_latent_attention: got \"true\": multi-latent attention" "$ERR"
expect_in "names q_lora_rank" "q_lora_rank: got \"1536\"" "$ERR"

# ---- other engines' frameworks ----
bf16 tt.yaml llama3_8B.yaml
sed -i 's/framework: megatron/framework: torchtitan/' tt.yaml
run config validate --config tt.yaml
expect_rc "framework torchtitan" 2
expect_in "names the frameworks primus runs" "tt.yaml:8: framework: primus runs \"megatron\" and \"native\"" "$ERR"

# ---- a file with several problems lists them all ----
bf16 many.yaml llama3_8B.yaml "fp8: e4m3" "hiden_size: 3" "clip_grad: fast" \
  "normalization: LayerNorm" "calculate_per_token_loss: true"
sed -i 's/global_batch_size: 16/global_batch_size: 15/' many.yaml
run config validate --config many.yaml
expect_rc "several problems" 2
expect_in "counted" "6 problems:" "$ERR"
L() { echo "many.yaml:$(line_of many.yaml "$1")"; }
for p in "$(L "fp8: e4m3"): fp8: got \"e4m3\"" \
  "$(L hiden_size): unknown key \"hiden_size\" (did you mean \"hidden_size\"?)" \
  "$(L "clip_grad: fast"): clip_grad: expected a number, got \"fast\"" \
  "$(L "normalization: LayerNorm"): normalization: got \"LayerNorm\"" \
  "$(L "calculate_per_token_loss: true"): calculate_per_token_loss: got \"true\"" \
  "$(L "global_batch_size: 15"): global_batch_size: must be a multiple of micro_batch_size (2), got 15"; do
  expect_in "lists: ${p%%:*}:${p#*:}" "$p" "$ERR"
done

# ---- checkpoint keys: disable_last_saving, no_save_optim, valid_data_path ----
bf16 ck.yaml llama3_8B.yaml
run train pretrain --config ck.yaml "${SMALL[@]}" "save=$T/ck1" save_interval=5
expect_rc "disable_last_saving: true" 0
if [[ -e $T/ck1/iter_0000002 ]]; then bad "a last checkpoint was written"; else ok "no last checkpoint"; fi
run train pretrain --config ck.yaml "${SMALL[@]}" "save=$T/ck2" save_interval=5 disable_last_saving=false
expect_rc "disable_last_saving: false" 0
expect_file "the last checkpoint" "$T/ck2/iter_0000002/model.safetensors"
run train pretrain --config ck.yaml "${SMALL[@]}" "save=$T/ck3" no_save_optim=true \
  disable_last_saving=false
expect_rc "no_save_optim with save" 0
expect_in "no_save_optim: warned" "no_save_optim: checkpoints in $T/ck3 leave out the optimizer state" "$ERR"
if [[ -e $T/ck3/iter_0000002/DONE && ! -e $T/ck3/iter_0000002/optim-rank-00000.bin ]]; then
  ok "no_save_optim: the checkpoint has no optimizer file"
else bad "no_save_optim: $(ls "$T/ck3/iter_0000002" 2>&1)"; fi
run train pretrain --config ck.yaml "${SMALL[@]}" valid_data_path=/x/valid
expect_rc "valid_data_path with mock data" 0
expect_in "says valid_data_path is not read" "valid_data_path: not read with mock_data" "$ERR"

# ---- train_data_path stands for data_path; eod_mask_loss needs the tokenizer's EOD ----
small_corpus corpus.txt
run train pretrain --config ck.yaml "${SMALL[@]}" mock_data=false "train_data_path=$T/corpus.txt" \
  eod_mask_loss=false tokenizer_type=ByteTokenizer
expect_rc "train_data_path" 0
expect_in "reads the file" "corpus.txt" "$ERR"
run train pretrain --config ck.yaml "${SMALL[@]}" mock_data=false "train_data_path=$T/corpus.txt" \
  tokenizer_type=ByteTokenizer
expect_rc "eod_mask_loss with real data and a tokenizer without EOD" 2
expect_in "names eod_mask_loss" "eod_mask_loss: true, but tokenizer ByteTokenizer" "$ERR"
expect_in "says what is missing" "has no end-of-document token to mask" "$ERR"

# ---- tokenizer_model by Hugging Face id, from the local cache only ----
run train pretrain --config ck.yaml "${SMALL[@]}" vocab_size=null
expect_rc "no cache, no vocab_size" 2
expect_in "says the id is not cached" "meta-llama/Meta-Llama-3-8B is not in the Hugging Face cache ($T/hf/hub)" "$ERR"
run data train-tokenizer --input corpus.txt --vocab_size 300 --output tok.json
expect_rc "a tokenizer to cache" 0
SNAP=$T/hf/hub/models--meta-llama--Meta-Llama-3-8B/snapshots/0123abc
mkdir -p "$SNAP" "$T/hf/hub/models--meta-llama--Meta-Llama-3-8B/refs"
cp tok.json "$SNAP/tokenizer.json"
echo 0123abc > "$T/hf/hub/models--meta-llama--Meta-Llama-3-8B/refs/main"
run train pretrain --config ck.yaml "${SMALL[@]}" vocab_size=null
expect_rc "the id resolved in the cache" 0
expect_in "vocabulary from the cached tokenizer, padded to 128" "vocab 384" "$ERR"

echo "# $_pass passed, $_fail failed"
((_fail == 0))
