#!/usr/bin/env bash
# primus analyze projection: the table and --json on the tiny model with the
# fixture hardware file (tests/fixtures/projection/hw-node.yaml); the JSON's
# parts add up to its totals; more data-parallel ranks shrink the compute
# per rank; tensor parallelism adds its all-reduces (sequence parallelism
# cuts the activations per rank); context parallelism halves a rank's rows
# and adds the ring; the memory per rank is the engine's own (the
# trainer's start-up memory line, also at context parallel 2); the Llama 3
# 8B and 3.1 70B context-parallel recipes validate and project, and so does
# the Mixtral 8x7B recipe (tensor x expert parallel, issue 28); the default
# hardware is the preflight baseline; clear errors (exit 2) for a layout
# that does not divide the model and for hardware files that lack keys.
source "$(dirname "$0")/lib.sh"
cd "$T"
FIX=${PRIMUS_FIXTURES:-$PRIMUS_SRC/tests/fixtures}/projection
HW=$FIX/hw-node.yaml
PY=/usr/bin/python3
small_corpus corpus.txt
tiny_exp pj "micro_batch_size: 1" "global_batch_size: 8" "train_iters: 1" "log_interval: 1"

# jq-like: JSON on stdin, a Python expression over `j`.
jget() { "$PY" -c 'import json, sys; j = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }

# --- the table ---------------------------------------------------------------
run analyze projection --config pj.yaml --hardware "$HW"
expect_rc "table" 0
expect_in "hardware file named" "hardware: $HW" "$OUT"
expect_in "the file's ranks_per_node: 4 data-parallel ranks" "DP 4 x TP 1 x PP 1" "$OUT"
expect_in "2 micro-batches per rank" "global 8 = 2 micro-batches of 1 x 32 tokens" "$OUT"
for row in compute "pipeline bubble" "tensor-parallel comm" "pipeline p2p" "data-parallel comm" optimizer total; do
  expect_in "row: $row" "  $row " "$OUT"
done
expect_in "throughput line" "tokens/s" "$OUT"
expect_in "MFU" "MFU" "$OUT"
TOTAL_TXT=$(awk '$1 == "total" && NF == 3 {print $2; exit}' <<<"$OUT")
TXT=$OUT

# --- JSON --------------------------------------------------------------------
run analyze projection --config pj.yaml --hardware "$HW" --json
expect_rc "json" 0
J=$OUT
expect_eq "valid JSON" "$(jget 'type(j).__name__' <<<"$J")" dict
expect_eq "text total = JSON total" "$TOTAL_TXT" "$(jget '"%.3f" % j["step_ms"]["total"]' <<<"$J")"
expect_eq "parts add up to the step" "$(jget 'abs(sum(j["step_ms"][k] for k in ("compute","bubble","tp_comm","pp_comm","dp_comm","optimizer")) - j["step_ms"]["total"]) < 1e-9 * j["step_ms"]["total"]' <<<"$J")" True
expect_eq "tokens/s = global batch x seq / step" "$(jget 'abs(8 * 32 / (j["step_ms"]["total"] / 1e3) / j["tokens_per_s"] - 1) < 1e-9' <<<"$J")" True
expect_eq "memory parts add up" "$(jget 'abs(sum(v for k, v in j["memory_bytes"].items() if k not in ("total","params_per_rank","micro_batches_in_flight")) - j["memory_bytes"]["total"]) < 1' <<<"$J")" True
expect_eq "data-parallel all-reduce counted" "$(jget 'j["step_ms"]["dp_comm"] > 0 and j["layout"]["dp_link"] == "intra-node"' <<<"$J")" True
expect_eq "MFU in (0, 1)" "$(jget '0 < j["mfu"] < 1' <<<"$J")" True
expect_eq "the tiny model's parameters" "$(jget 'j["model"]["params"]' <<<"$J")" 26784
expect_eq "attention_gflops null in the file" "$(jget 'j["hardware"]["attention_gflops"]' <<<"$J")" None
C4=$(jget 'j["step_ms"]["compute"]' <<<"$J")

# Twice the ranks (two nodes): half the micro-batches, half the compute per
# rank; the all-reduce now crosses nodes.
run analyze projection --config pj.yaml --hardware "$HW" --nodes 2 --json
expect_rc "two nodes" 0
expect_eq "8 data-parallel ranks" "$(jget 'j["layout"]["dp"]' <<<"$OUT")" 8
expect_eq "compute per rank halves" "$(jget "abs(j['step_ms']['compute'] * 2 / $C4 - 1) < 1e-9" <<<"$OUT")" True
expect_eq "inter-node data-parallel link" "$(jget 'j["layout"]["dp_link"]' <<<"$OUT")" inter-node

# ZeRO-1: the optimizer per rank is divided by the data-parallel size.
run analyze projection --config pj.yaml --hardware "$HW" --json use_distributed_optimizer=true
expect_rc "ZeRO-1" 0
expect_eq "optimizer / 4" "$(jget 'j["memory_bytes"]["optimizer"]' <<<"$OUT")" \
  "$(jget 'int(j["memory_bytes"]["optimizer"] / 4)' <<<"$J")"

# Tensor parallel 2 over the node's 4 ranks: DP 2, TP all-reduces, fewer
# parameters per rank.
run analyze projection --config pj.yaml --hardware "$HW" --json tensor_model_parallel_size=2
expect_rc "tensor parallel 2" 0
expect_eq "DP 2 x TP 2" "$(jget '(j["layout"]["dp"], j["layout"]["tp"])' <<<"$OUT")" "(2, 2)"
expect_eq "TP all-reduces counted" "$(jget 'j["step_ms"]["tp_comm"] > 0' <<<"$OUT")" True
expect_eq "fewer parameters per rank" "$(jget "j['memory_bytes']['params_per_rank'] < $(jget 'j["memory_bytes"]["params_per_rank"]' <<<"$J")" <<<"$OUT")" True
# With sequence_parallel the norm and residual rows are split too: fewer
# activation bytes per rank, the same parameters.
TP2=$OUT
run analyze projection --config pj.yaml --hardware "$HW" --json tensor_model_parallel_size=2 sequence_parallel=true
expect_rc "tensor parallel 2, sequence parallel" 0
expect_eq "sequence parallel in the layout" "$(jget 'j["layout"]["sequence_parallel"]' <<<"$OUT")" True
expect_eq "fewer activation bytes per rank" "$(jget "j['memory_bytes']['activations'] < $(jget 'j["memory_bytes"]["activations"]' <<<"$TP2")" <<<"$OUT")" True

# Context parallel 2 over the node's 4 ranks: DP 2 x CP 2. A rank's
# activations are those of half the sequence (the projection of seq 16 on
# 2 ranks), its attention half the whole sequence's; the ring's exchange
# and buffers are counted.
run analyze projection --config pj.yaml --hardware "$HW" --json context_parallel_size=2
expect_rc "context parallel 2" 0
CP2=$OUT
expect_eq "DP 2 x CP 2" "$(jget '(j["layout"]["dp"], j["layout"]["cp"], j["layout"]["cp_link"])' <<<"$CP2")" "(2, 2, 'intra-node')"
expect_eq "the ring's exchange and buffers counted" "$(jget 'j["step_ms"]["cp_comm_total"] > 0 and j["memory_bytes"]["ring_buffers"] > 0' <<<"$CP2")" True
expect_eq "parts add up with the ring" "$(jget 'abs(sum(j["step_ms"][k] for k in ("compute","bubble","tp_comm","pp_comm","cp_comm","dp_comm","optimizer")) - j["step_ms"]["total"]) < 1e-9 * j["step_ms"]["total"]' <<<"$CP2")" True
run analyze projection --config pj.yaml --hardware "$HW" --json --gpus_per_node 2 seq_length=16
expect_rc "half the sequence on 2 ranks" 0
expect_eq "activations of half the sequence" "$(jget 'j["memory_bytes"]["activations"]' <<<"$CP2")" "$(jget 'j["memory_bytes"]["activations"]' <<<"$OUT")"
expect_eq "attention is half the whole sequence's: more compute than half the sequence alone" \
  "$(jget "j['step_ms']['micro_batch'] > $(jget 'j["step_ms"]["micro_batch"]' <<<"$OUT")" <<<"$CP2")" True
run analyze projection --config pj.yaml --hardware "$HW" context_parallel_size=2 use_distributed_optimizer=true
expect_rc "context parallel table" 0
expect_in "CP in the layout" "DP 2 x CP 2 x TP 1 x PP 1" "$OUT"
expect_in "the rank's share of each sequence" "context parallel: 16 of 32 tokens of each sequence per rank" "$OUT"
expect_in "ZeRO-1 over CP x DP" "optimizer shards over CP x DP = 4 ranks" "$OUT"
expect_in "the ring's row" "  context-parallel ring " "$OUT"
expect_in "the ring buffers' row" "  ring buffers " "$OUT"
run analyze projection --config pj.yaml --hardware "$HW" context_parallel_size=3 --gpus_per_node 3
expect_rc "seq 32 does not split into 6 chunks" 2
expect_in "names the keys" "context_parallel_size 3: seq_length 32 must be a multiple of 2 x 3 = 6" "$ERR"

# Pipeline 2 with 2 virtual stages needs layers divisible by 4: an error;
# 2 stages alone give a bubble of (p-1)/(m+p-1).
run analyze projection --config pj.yaml --hardware "$HW" --json pipeline_model_parallel_size=2
expect_rc "pipeline 2" 0
expect_eq "bubble (p-1)/(m+p-1)" "$(jget 'abs(j["bubble_fraction"] - 1 / (j["layout"]["micro_batches"] + 1)) < 1e-12' <<<"$OUT")" True
run analyze projection --config pj.yaml --hardware "$HW" pipeline_model_parallel_size=2 --virtual_stages 2
expect_rc "2 layers over 2 x 2 virtual stages" 2
expect_in "names num_layers" "num_layers 2 is not divisible" "$ERR"
# The experiment's own virtual_pipeline_model_parallel_size is the default.
run analyze projection --config pj.yaml --hardware "$HW" pipeline_model_parallel_size=2 virtual_pipeline_model_parallel_size=2
expect_rc "2 x 2 virtual stages from the experiment" 2
expect_in "the experiment's virtual stages are used" "num_layers 2 is not divisible" "$ERR"

# --- the engine's memory accounting ------------------------------------------
run train pretrain --config pj.yaml
expect_rc "one training step" 0
MEMLINE=$(grep -o 'params [0-9.]* [KMG]*i*B, grads [^,]*, activations [0-9.]* [KMG]*i*B' <<<"$ERR" | head -1)
if [[ -n $MEMLINE ]]; then
  ACTS=$(sed 's/.*activations //' <<<"$MEMLINE")
  PARAMS=$(sed 's/^params \([^,]*\),.*/\1/' <<<"$MEMLINE")
  expect_in "activations as the engine's ($ACTS)" "activations                 $ACTS" "$(sed 's/  */ /g; s/activations /activations                 /' <<<"$TXT")"
  expect_in "parameters as the engine's ($PARAMS)" "parameters $PARAMS" "$(sed 's/  */ /g' <<<"$TXT")"
else
  bad "the trainer's memory line not found in: $ERR"
fi

# Context parallel 2 on 2 ranks: the activations and ring buffers are the
# trainer's own (its memory line); not under the sanitizers (a launch takes
# half a minute there).
if [[ -z ${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-} ]] && command -v mpirun >/dev/null; then
  tiny_exp pjcp "micro_batch_size: 1" "global_batch_size: 2" "train_iters: 1" "log_interval: 1" \
    "context_parallel_size: 2"
  OMP_NUM_THREADS=1 run direct --nproc 2 -- train pretrain --config pjcp.yaml
  expect_rc "one step at context parallel 2" 0
  LINE=$(grep -o 'activations [0-9.]* [KMG]*i*B.*ring buffers [0-9.]* [KMG]*i*B' <<<"$ERR$OUT" | head -1)
  run analyze projection --config pjcp.yaml --hardware "$HW" --gpus_per_node 2
  expect_rc "projection at context parallel 2" 0
  PJ=$(sed 's/  */ /g' <<<"$OUT")
  if [[ -n $LINE ]]; then
    ACTS=$(sed 's/^activations \([0-9.]* [KMG]*i*B\).*/\1/' <<<"$LINE")
    RING=$(sed 's/.*ring buffers //' <<<"$LINE")
    expect_in "activations at CP 2 as the trainer's ($ACTS)" " activations $ACTS " "$PJ"
    expect_in "ring buffers as the trainer's ($RING)" " ring buffers $RING " "$PJ"
  else
    bad "the trainer's context-parallel memory line not found in: $ERR"
  fi
fi

# --- mixture of experts: tensor x expert parallel -----------------------------
# T = 2 x E = 2 (D = 2) on 4 ranks with ZeRO-1: the experts line, the
# all-to-all row, the JSON's layout and each rank's experts (2 of 4, half
# of each: 2 layers x 2 x 3 x 24 x 32 parameters); E not dividing the
# experts is refused naming the key. The parameters, activations and
# optimizer per rank are the trainer's own (its memory line; not under
# the sanitizers).
MOE=("micro_batch_size: 1" "global_batch_size: 4" "train_iters: 1" "log_interval: 1"
  "num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 48"
  "moe_shared_expert_intermediate_size: 32" "tensor_model_parallel_size: 2"
  "expert_model_parallel_size: 2" "use_distributed_optimizer: true")
tiny_exp pjmoe "${MOE[@]}"
run analyze projection --config pjmoe.yaml --hardware "$HW" --gpus_per_node 4
expect_rc "projection of MoE at T = 2 x E = 2" 0
PJ=$(sed 's/  */ /g' <<<"$OUT")
expect_in "the experts line" "experts: 2 MoE layers of 4 experts (top 2, ffn 48, shared expert 32); EP 2 (intra-node): 2 experts per rank, each split over 2 tensor-parallel ranks" "$OUT"
expect_in "the all-to-all row" "  expert all-to-all " "$OUT"
run analyze projection --config pjmoe.yaml --hardware "$HW" --gpus_per_node 4 --json
expect_eq "layout: T 2, E 2, experts split, D 2" \
  "$(jget '(j["layout"]["tp"], j["layout"]["ep"], j["layout"]["etp"], j["layout"]["dp"], j["layout"]["expert_params_per_rank"])' <<<"$OUT")" \
  "(2, 2, 2, 2, 9216)"
expect_eq "parts add up with the all-to-alls" "$(jget 'j["step_ms"]["ep_comm"] > 0 and abs(sum(j["step_ms"][k] for k in ("compute","bubble","tp_comm","pp_comm","cp_comm","ep_comm","dp_comm","optimizer")) - j["step_ms"]["total"]) < 1e-9 * j["step_ms"]["total"]' <<<"$OUT")" True
run analyze projection --config pjmoe.yaml --hardware "$HW" --gpus_per_node 4 expert_model_parallel_size=3
expect_rc "E = 3 with 4 experts" 2
expect_in "names the key" "expert_model_parallel_size 3 must divide num_experts (4)" "$ERR"
if [[ -z ${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-} ]] && command -v mpirun >/dev/null; then
  OMP_NUM_THREADS=1 run direct --nproc 4 -- train pretrain --config pjmoe.yaml
  expect_rc "one step at T = 2 x E = 2 x ZeRO-1" 0
  LINE=$(grep -o 'memory: params [0-9.]* [KMG]*i*B.*optimizer [0-9.]* [KMG]*i*B' <<<"$ERR$OUT" | head -1)
  if [[ -n $LINE ]]; then
    for what in params activations optimizer; do
      v=$(grep -o "$what [0-9.]* [KMG]*i*B" <<<"$LINE" | head -1 | sed "s/^$what //")
      row=$what
      [[ $what == params ]] && row=parameters
      [[ $what == optimizer ]] && row="optimizer (AdamW)"
      expect_in "MoE T = 2 x E = 2: $what as the trainer's ($v)" " $row $v " "$PJ"
    done
  else
    bad "the trainer's memory line not found in: $ERR"
  fi
fi

# --- the recipes: Llama 3 8B and 3.1 70B with context parallel ---------------
# Both validate, and project on nodes of 8 devices: the layout they name,
# each rank's half of the 16384-token sequences, sequence parallel,
# ZeRO-1, and fewer activation bytes per rank than the same run without
# context parallel.
sed 's/^devices_per_node: .*/devices_per_node: 8/; s/^ranks_per_node: .*/ranks_per_node: 8/' "$HW" >hw8.yaml
for c in "llama3_8B-pretrain-cp 1 DP 2 x CP 2 x TP 2 x PP 1 intra-node" \
  "llama3.1_70B-pretrain 8 DP 4 x CP 2 x TP 8 x PP 1 inter-node"; do
  read -r name nodes layout <<<"${c% *}"
  link=${c##* }
  f=$PRIMUS_SRC/configs/examples/$name.yaml
  run config validate --config "$f"
  expect_rc "$name validates" 0
  run analyze projection --config "$f" --hardware hw8.yaml --nodes "$nodes"
  expect_rc "$name projects" 0
  expect_in "$name: the layout" "$layout (sequence parallel); ZeRO-1 on" "$OUT"
  expect_in "$name: half of each sequence per rank" "8192 of 16384 tokens of each sequence" "$OUT"
  run analyze projection --config "$f" --hardware hw8.yaml --nodes "$nodes" --json
  R=$OUT
  expect_eq "$name: the ring's link" "$(jget 'j["layout"]["cp_link"]' <<<"$R")" "$link"
  run analyze projection --config "$f" --hardware hw8.yaml --nodes "$nodes" --json context_parallel_size=1
  expect_rc "$name without context parallel" 0
  expect_eq "$name: activations per rank fall with context parallel" \
    "$(jget "j['memory_bytes']['activations'] < 0.6 * $(jget 'j["memory_bytes"]["activations"]' <<<"$OUT")" <<<"$R")" True
  echo "# $name: activations per rank $(jget '"%.0f" % j["memory_bytes"]["activations"]' <<<"$OUT") -> $(jget '"%.0f" % j["memory_bytes"]["activations"]' <<<"$R") bytes, ring buffers $(jget '"%.0f" % j["memory_bytes"]["ring_buffers"]' <<<"$R"), total $(jget '"%.0f" % j["memory_bytes"]["total"]' <<<"$R"), step $(jget '"%.1f" % j["step_ms"]["total"]' <<<"$R") ms (ring exposed $(jget '"%.2f" % j["step_ms"]["cp_comm"]' <<<"$R") of $(jget '"%.2f" % j["step_ms"]["cp_comm_total"]' <<<"$R") ms)"
done

# The Mixtral 8x7B recipe (T = 2 x P = 2 x D = 8, E = 4 inside D, on 4
# nodes of 8) validates and projects: its layout, the experts a rank holds,
# the all-to-alls inside a node, and parameters per rank under 0.3 of the
# same run's without expert parallel (the experts, most of the model, a
# quarter).
f=$PRIMUS_SRC/configs/examples/mixtral_8x7B-pretrain.yaml
run config validate --config "$f"
expect_rc "mixtral_8x7B-pretrain validates" 0
expect_in "mixtral: 46.7B parameters" "46.703B parameters" "$OUT"
run analyze projection --config "$f" --hardware hw8.yaml --nodes 4 --json
expect_rc "mixtral_8x7B-pretrain projects" 0
R=$OUT
expect_eq "mixtral: the layout" "$(jget '(j["layout"]["dp"], j["layout"]["tp"], j["layout"]["pp"], j["layout"]["ep"], j["layout"]["etp"], j["layout"]["ep_link"])' <<<"$R")" \
  "(8, 2, 2, 4, 2, 'intra-node')"
run analyze projection --config "$f" --hardware hw8.yaml --nodes 4
expect_in "mixtral: the experts line" "experts: 32 MoE layers of 8 experts (top 2, ffn 14336); EP 4 (intra-node): 2 experts per rank" "$OUT"
run analyze projection --config "$f" --hardware hw8.yaml --nodes 4 --json expert_model_parallel_size=1
expect_rc "mixtral without expert parallel" 0
expect_eq "mixtral: parameters per rank under 0.3 of E = 1's" \
  "$(jget "j['memory_bytes']['params_per_rank'] < 0.3 * $(jget 'j["memory_bytes"]["params_per_rank"]' <<<"$OUT")" <<<"$R")" True
echo "# mixtral: parameters per rank $(jget '"%.0f" % j["memory_bytes"]["params_per_rank"]' <<<"$OUT") -> $(jget '"%.0f" % j["memory_bytes"]["params_per_rank"]' <<<"$R") (experts $(jget '"%.0f" % j["layout"]["expert_params_per_rank"]' <<<"$R")), total $(jget '"%.0f" % j["memory_bytes"]["total"]' <<<"$R") bytes, all-to-alls $(jget '"%.1f" % j["step_ms"]["ep_comm"]' <<<"$R") ms"

# --- the default hardware: the preflight baseline ------------------------------
run analyze projection --config pj.yaml
expect_rc "baseline hardware" 0
expect_in "baseline named" "hardware: baseline " "$OUT"
run analyze projection --config pj.yaml --nodes 2
expect_rc "baseline has no inter-node figures" 2
expect_in "names the missing key" "inter_node_busbw_gbs" "$ERR"
expect_in "names the baseline" "baselines/cpu.yaml" "$ERR"

# --- a run on a GPU: the baseline's GPU figures (issue 24) --------------------
# A baseline that `preflight calibrate` wrote on a GPU node (in the user's
# folder, which is searched first); this node has no GPU, so the peak is
# the measured GEMM rate (a known GPU's would be its data sheet's).
mkdir -p "$T/gpuhome/.config/primus/baselines"
cat > "$T/gpuhome/.config/primus/baselines/cpu.yaml" <<Y
platform: cpu
gemm_fp32_gflops: 200
triad_gbs: 20
allreduce_busbw_gbs: 5
gpu_gemm_bf16_tflops: 700
gpu_gemm_fp32_tflops: 50
gpu_hbm_gbs: 2900
Y
HOME="$T/gpuhome" run analyze projection --config pj.yaml device=cuda bf16=true --json
expect_rc "device: cuda, bf16" 0
expect_eq "bf16 GEMM rate from gpu_gemm_bf16_tflops" "$(jget 'j["hardware"]["gemm_gflops"]' <<<"$OUT")" 700000
expect_eq "memory bandwidth from gpu_hbm_gbs" "$(jget 'j["hardware"]["mem_bw_gbs"]' <<<"$OUT")" 2900
expect_eq "no CPU dispatch cost on a GPU" "$(jget 'j["hardware"]["kernel_launch_us"]' <<<"$OUT")" None
expect_in "source says GPU figures" "its GPU figures (bf16 GEMM" "$(jget 'j["hardware"]["source"]' <<<"$OUT")"
HOME="$T/gpuhome" run analyze projection --config pj.yaml device=cuda --json
expect_rc "device: cuda, fp32" 0
expect_eq "fp32 GEMM rate from gpu_gemm_fp32_tflops" "$(jget 'j["hardware"]["gemm_gflops"]' <<<"$OUT")" 50000
HOME="$T/gpuhome" run analyze projection --config pj.yaml --json
expect_rc "device auto on a node without a GPU" 0
expect_eq "auto without a GPU: the CPU's GEMM rate" "$(jget 'j["hardware"]["gemm_gflops"]' <<<"$OUT")" 200
run analyze projection --config pj.yaml device=cuda
expect_rc "device: cuda with a baseline without GPU figures" 2
expect_in "names the missing figure" "gpu_gemm_fp32_tflops" "$ERR"
expect_in "says how to measure it" "preflight calibrate" "$ERR"

# --- errors ------------------------------------------------------------------
run analyze projection --config pj.yaml --hardware "$HW" tensor_model_parallel_size=3 --gpus_per_node 3
expect_rc "heads not divisible by TP" 2
expect_in "names heads and TP" "tensor_model_parallel_size 3 must divide num_attention_heads (4)" "$ERR"
run analyze projection --config pj.yaml --hardware "$FIX/hw-missing.yaml" --gpus_per_node 2
expect_rc "hardware file missing keys" 2
expect_in "names the file" "hw-missing.yaml" "$ERR"
expect_in "names gemm_gflops" "gemm_gflops" "$ERR"
expect_in "names intra_node_busbw_gbs" "intra_node_busbw_gbs" "$ERR"
printf 'peak_gflops: 10\ngemm_gflops: 5\nmem_bw: 3\n' >bad.yaml
run analyze projection --config pj.yaml --hardware bad.yaml
expect_rc "unknown hardware key" 2
expect_in "file:line and key" "bad.yaml:3: mem_bw: unknown hardware key" "$ERR"
run analyze projection --config pj.yaml --hardware nonexistent.yaml
expect_rc "missing hardware file" 2
expect_in "names the file" "nonexistent.yaml" "$ERR"
run analyze projection --config pj.yaml --hardware "$HW" --gpus_per_node 3
expect_rc "batch does not split over 3 ranks" 2
expect_in "names the batch" "global_batch_size 8 is not a multiple" "$ERR"
run analyze projection --hardware "$HW"
expect_rc "no --config" 2

finish
