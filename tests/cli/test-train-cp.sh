#!/usr/bin/env bash
# Context parallel (context_parallel_size, src/model/cp.c): each rank holds
# 2 of the 2N chunks of every sequence and attention runs as a ring. Over
# 12 steps, CP = 2 (2 ranks), CP = 2 x D = 2 with the distributed
# optimizer, CP = 2 x T = 2 and CP = 4 with full recomputation (4 ranks
# each) follow the one-rank run with
# the same global batch: losses within 1e-5 relative per step (seen:
# ~1e-7, fp32 summation order) and whole-model weights within 1e-5 after
# the run; the validation loss at step 12 too. The memory line shows each
# rank's half of the sequence, and half the activations of one rank.
# eod_mask_loss and bf16 at CP = 2 follow their one-rank runs (6 steps). Checkpoints are whole-model: the one-rank
# step-6 checkpoint resumed at CP = 2 x D = 2 and the CP = 2 one resumed on
# one rank end on the same curve. A seq_length that does not split into 2N
# chunks and too few ranks are refused with exit 2 and the key named.
#
# MoE at CP = 2 follows one rank: losses, weights, the logged aux and z
# losses and the expert counts; so does MoE with context and expert
# parallel at once (CP = 2 x E = 2, CP = 2 x E = 4, CP = 4 x E = 2, CP = 2 x
# T = 2 x E = 2 with ZeRO-1). E and CP that do not divide one another are
# refused.
#
# With a pipeline: CP = 2 x P = 2 with ZeRO-1, MoE at CP = 2 x P = 2 and
# eod_mask_loss at CP = 2 x P = 2 follow one rank, and the CP = 2 x P = 2
# step-6 checkpoint resumed on one rank ends on the same curve.
#
# Under the sanitizers (a launch takes half a minute there) only one rank,
# CP = 2 x D = 2 x ZeRO, CP = 4 and the refusals run; the rest is left to
# the plain build.
source "$(dirname "$0")/lib.sh"
multirank_setup
SAN=
[[ -n ${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-} ]] && SAN=1

exp() { # NAME [KEY: VALUE...]: 2 layers, seq 32, 12 steps of 4 micro-batches of 1, saved at 6 and 12
  local n=$1
  shift
  tiny_exp "$n" "micro_batch_size: 1" "global_batch_size: 4" "train_iters: 12" "log_interval: 6" \
    "save: $T/ck-$n" "load: $T/ck-$n" "auto_continue_train: true" "save_interval: 6" \
    "lr_decay_iters: 12" "eval_interval: 12" "eval_iters: 1" "$@"
}
final() { echo "$T/ck-$1/iter_0000012/model.safetensors"; }
launch() { # NP NAME
  if [[ $1 == 1 ]]; then run train pretrain --config "$2.yaml"
  else run direct --nproc "$1" -- train pretrain --config "$2.yaml"; fi
  expect_rc "$2 on $1 rank(s)" 0
}
# The validation loss logged at step 12.
vloss() { run_events "$1" | grep '"event":"eval"' | grep -o '"loss":[0-9.e+-]*' | tail -1 | cut -d: -f2; }
same() { # NAME REF WHAT [STEPS]
  local n=$1 ref=$2 what=$3 steps=${4:-12} d w a b
  expect_eq "$what: $steps steps logged once" "$(run_losses "$n" | wc -l)" "$steps"
  d=$(loss_diff "$ref" "$n")
  if within "$d" 1e-5; then ok "$what: losses within 1e-5 of $ref (worst $d)"; else bad "$what: losses differ from $ref by $d"; fi
  w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final "$ref")" "$(final "$n")")
  if within "$w" 1e-5; then ok "$what: whole-model weights within 1e-5 of $ref ($w)"; else bad "$what: weights differ by $w"; fi
  a=$(vloss "$ref") b=$(vloss "$n")
  if [[ -n $a && -n $b ]] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }'; then
    ok "$what: validation loss $b against $a"
  else bad "$what: validation loss '$b' against '$a'"; fi
}
resume() { # NAME FROM NP [KEY: VALUE...]: FROM's step-6 checkpoint resumed on NP ranks to step 12
  local n=$1 from=$2 np=$3
  shift 3
  exp "$n" "$@"
  rm -rf "$T/ck-$n" && mkdir -p "$T/ck-$n"
  cp -r "$T/ck-$from/iter_0000006" "$T/ck-$n/"
  echo 6 >"$T/ck-$n/latest_checkpointed_iteration.txt"
  launch "$np" "$n"
  expect_in "$n: from iteration 6" "iteration 6, 24 samples consumed" "$ERR"
}

# The activations from the start-up memory line of rank R, in bytes.
acts_bytes() { # R
  grep "rank $1/" <<<"$ERR" | grep -o 'activations [0-9.]* [KMG]*i*B' | head -1 | awk '{ v = $2; u = $3;
    m = u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1; printf "%d", v * m }'
}

exp one
launch 1 one
ONE_ACTS=$(acts_bytes 0)
if [[ -z $SAN ]]; then
exp cp2 "context_parallel_size: 2"
launch 2 cp2
a=$(acts_bytes 1)
if [[ -n $a && -n $ONE_ACTS ]] && awk -v a="$a" -v o="$ONE_ACTS" 'BEGIN { exit !(a >= 0.45 * o && a <= 0.55 * o) }'; then
  ok "cp2: rank 1's activations $a bytes, half of one rank's $ONE_ACTS"
else bad "cp2: rank 1's activations '$a' bytes against one rank's '$ONE_ACTS'"; fi
expect_in "cp2: the layout" "context parallel: 2 ranks per sequence (this is rank 0: 16 of its 32 tokens, chunks 0 and 3 of 4)" "$ERR"
expect_in "cp2: the memory line" "(context-parallel rank 2 of 2: 16 of 32 tokens of each sequence, ring buffers" "$ERR"
same cp2 one "CP = 2"
fi

exp cpdz "context_parallel_size: 2" "use_distributed_optimizer: true"
launch 4 cpdz
expect_in "cpdz: ZeRO-1 over context x data" "data parallel: 4 ranks with the distributed optimizer (ZeRO-1)" "$ERR"
expect_in "cpdz: 2 data-parallel shares" "2 accumulation steps x 2 data-parallel ranks" "$ERR"
same cpdz one "CP = 2 x D = 2 x ZeRO"

if [[ -z $SAN ]]; then
exp cptp "context_parallel_size: 2" "tensor_model_parallel_size: 2"
launch 4 cptp
same cptp one "CP = 2 x T = 2"
fi

# MoE at CP = 2 (plain build only): the router's aux and z losses are the
# micro-batch's, their statistics (f_e, P_e, the token count) summed over
# the group, so the losses, the logged aux/z losses and the expert counts
# follow one rank.
if [[ -z $SAN ]]; then
MOE=("num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 48" "moe_aux_loss_coeff: 0.1"
  "moe_z_loss_coeff: 0.01")
exp moe1 "${MOE[@]}"
launch 1 moe1
exp moecp "${MOE[@]}" "context_parallel_size: 2"
launch 2 moecp
same moecp moe1 "MoE x CP = 2"
moef() { run_events "$1" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }
d=$($PY -c 'import sys; a, b = (list(map(float, x.split())) for x in sys.argv[1:3]); assert len(a) == len(b) > 0; print(max(abs(x - y) / abs(x) for x, y in zip(a, b)))' "$(moef moe1 aux_loss)" "$(moef moecp aux_loss)")
if within "$d" 1e-5; then ok "MoE x CP = 2: the logged aux losses follow one rank's (worst $d)"; else bad "MoE x CP = 2: aux losses differ by '$d'"; fi
d=$($PY -c 'import sys; a, b = (list(map(float, x.split())) for x in sys.argv[1:3]); assert len(a) == len(b) > 0; print(max(abs(x - y) / abs(x) for x, y in zip(a, b)))' "$(moef moe1 z_loss)" "$(moef moecp z_loss)")
if within "$d" 1e-5; then ok "MoE x CP = 2: the logged z losses follow one rank's (worst $d)"; else bad "MoE x CP = 2: z losses differ by '$d'"; fi
c1=$(run_events moe1 | grep -o '"counts":\[[0-9,]*\]' | head -2 | tr '\n' ' ')
expect_in "MoE: expert counts logged" '"counts":[' "$c1"
expect_eq "MoE x CP = 2: the first step's expert counts are the whole sequences'" \
  "$(run_events moecp | grep -o '"counts":\[[0-9,]*\]' | head -2 | tr '\n' ' ')" "$c1"

# With expert parallel too: CP = 2 x E = 2 (the expert-parallel pair is the
# context-parallel pair), CP = 2 x E = 4 (one expert-parallel group of two
# context-parallel pairs, D = 2), CP = 4 x E = 2 (two expert-parallel pairs
# inside the ring) and CP = 2 x T = 2 x E = 2 with ZeRO-1 follow one rank:
# losses, weights, the logged aux and z losses, and every step's expert
# counts (the group's tokens: here all of them).
counts() { run_events "$1" | grep -o '"counts":\[[0-9,]*\]' | tr '\n' ' '; }
for spec in "2 cpe2 2 2" "4 cpe4 2 4" "4 cp4e2 4 2" "4 cpte2 2 2 tensor_model_parallel_size: 2"; do
  read -r np n cp ep more <<<"$spec"
  exp "$n" "${MOE[@]}" "context_parallel_size: $cp" "expert_model_parallel_size: $ep" \
    ${more:+"$more" "use_distributed_optimizer: true"}
  launch "$np" "$n"
  what="MoE x CP = $cp x E = $ep${more:+ x T = 2 x ZeRO-1}"
  same "$n" moe1 "$what"
  for f in aux_loss z_loss; do
    d=$($PY -c 'import sys; a, b = (list(map(float, x.split())) for x in sys.argv[1:3]); assert len(a) == len(b) > 0; print(max(abs(x - y) / abs(x) for x, y in zip(a, b)))' "$(moef moe1 $f)" "$(moef "$n" $f)")
    if within "$d" 1e-5; then ok "$what: the logged $f follows one rank's (worst $d)"; else bad "$what: $f differs by '$d'"; fi
  done
  expect_eq "$what: every step's expert counts are one rank's" "$(counts "$n")" "$(counts moe1)"
done
fi

# CP = 4: a ring of four (chunks of 4 tokens, blocks that pass through
# ranks that see none of them), with full recomputation (the ring runs
# again in backward).
exp cp4 "context_parallel_size: 4" "recompute_granularity: full"
launch 4 cp4
expect_in "cp4: rank 3's chunks" "(this is rank 3: 8 of its 32 tokens, chunks 3 and 4 of 8)" "$ERR"
same cp4 one "CP = 4 x recompute"

if [[ -z $SAN ]]; then
# eod_mask_loss (each micro-batch's mean over its unmasked targets: the
# count is the whole sequences', taken once over the group) and bf16 (the
# ring stays fp32: against one rank with fp32 attention), 6 steps each.
s6() { # NAME [KEY: VALUE...]
  local n=$1
  shift
  tiny_exp "$n" "micro_batch_size: 1" "global_batch_size: 4" "train_iters: 6" "log_interval: 1" \
    "lr_decay_iters: 6" "$@"
}
awk 'NF { printf "{\"text\": \"%s\"}\n", $0 }' corpus.txt >docs.jsonl
run data train-tokenizer --input corpus.txt --vocab_size 300 --output tok.json
run data preprocess --input docs.jsonl --tokenizer-type HuggingFaceTokenizer --tokenizer-model tok.json \
  --append-eod --output_prefix eodd
expect_rc "a dataset with end-of-document tokens" 0
EOD=("eod_mask_loss: true" "tokenizer_type: HuggingFaceTokenizer" "tokenizer_model: $T/tok.json"
  "vocab_size: 320" "data_path: $T/eodd")
s6 eod1 "${EOD[@]}"
launch 1 eod1
s6 eod2 "${EOD[@]}" "context_parallel_size: 2"
launch 2 eod2
lt() { run_events "$1" | grep -o '"loss_tokens":[0-9]*' | cut -d: -f2 | tr '\n' ' '; }
expect_eq "eod: the same loss tokens per step" "$(lt eod2)" "$(lt eod1)"
if [[ $(lt eod1) == *12[0-7]* ]]; then ok "eod: some targets masked ($(lt eod1))"; else bad "eod: nothing masked ($(lt eod1))"; fi
d=$(loss_diff eod1 eod2)
if within "$d" 1e-5; then ok "eod_mask_loss x CP = 2: losses within 1e-5 (worst $d)"; else bad "eod_mask_loss x CP = 2: losses differ by $d"; fi
s6 bf1 "bf16: true" "bf16_attention: fp32"
launch 1 bf1
s6 bf2 "bf16: true" "context_parallel_size: 2"
launch 2 bf2
d=$(loss_diff bf1 bf2)
if within "$d" 1e-5; then ok "bf16 x CP = 2: losses within 1e-5 (worst $d)"; else bad "bf16 x CP = 2: losses differ by $d"; fi

# ---- With a pipeline: CP = 2 x P = 2 (each stage's pair a ring) ----
# With ZeRO-1 over the context-parallel pair, against one rank; MoE (the
# router losses' gradient weight counts the pair's rows) with the logged
# aux/z losses and counts; eod_mask_loss (the whole sequences' unmasked
# targets, counted once over the pair: the same loss tokens).
exp cppz "context_parallel_size: 2" "pipeline_model_parallel_size: 2" \
  "use_distributed_optimizer: true"
launch 4 cppz
expect_in "cppz: stage 1 holds layer 1" "pipeline: stage 1 of 2 holds layers [1, 2)" "$ERR"
expect_in "cppz: 4 micro-batches a step per pipeline" "4 micro-batches a step" "$ERR"
same cppz one "CP = 2 x P = 2 x ZeRO-1"
exp moecpp "${MOE[@]}" "context_parallel_size: 2" "pipeline_model_parallel_size: 2"
launch 4 moecpp
same moecpp moe1 "MoE x CP = 2 x P = 2"
for f in aux_loss z_loss; do
  d=$($PY -c 'import sys; a, b = (list(map(float, x.split())) for x in sys.argv[1:3]); assert len(a) == len(b) > 0; print(max(abs(x - y) / abs(x) for x, y in zip(a, b)))' "$(moef moe1 $f)" "$(moef moecpp $f)")
  if within "$d" 1e-5; then ok "MoE x CP = 2 x P = 2: the logged $f follows one rank's (worst $d)"; else bad "MoE x CP = 2 x P = 2: $f differs by '$d'"; fi
done
expect_eq "MoE x CP = 2 x P = 2: every step's expert counts are one rank's" "$(counts moecpp)" "$(counts moe1)"
s6 eodp "${EOD[@]}" "context_parallel_size: 2" "pipeline_model_parallel_size: 2"
launch 4 eodp
expect_eq "eod x CP = 2 x P = 2: the same loss tokens per step" "$(lt eodp)" "$(lt eod1)"
d=$(loss_diff eod1 eodp)
if within "$d" 1e-5; then ok "eod_mask_loss x CP = 2 x P = 2: losses within 1e-5 (worst $d)"; else bad "eod_mask_loss x CP = 2 x P = 2: losses differ by $d"; fi

# ---- Checkpoints across layouts ----
resume one-to-cpdz one 4 "context_parallel_size: 2" "use_distributed_optimizer: true"
same one-to-cpdz one "1 rank -> CP = 2 x D = 2" 6
resume cp2-to-one cp2 1
same cp2-to-one one "CP = 2 -> 1 rank" 6
resume cppz-to-one cppz 1
same cppz-to-one one "CP = 2 x P = 2 x ZeRO-1 -> 1 rank" 6
else
  echo "# sanitizers: CP = 2, CP = 2 x T = 2, eod_mask_loss, bf16 and the resumes are left to the plain build"
fi

# ---- Refusals ----
exp bad-seq "context_parallel_size: 4"
sed -i 's/seq_length: 32/seq_length: 36/' bad-seq.yaml
run train pretrain --config bad-seq.yaml
expect_rc "seq_length 36 with CP = 4" 2
expect_in "bad-seq: says why" "context_parallel_size 4: seq_length 36 must be a multiple of 2 x 4 = 8" "$ERR"
exp bad-ep "context_parallel_size: 2" "num_experts: 6" "moe_ffn_hidden_size: 48" \
  "expert_model_parallel_size: 3"
run train pretrain --config bad-ep.yaml
expect_rc "CP = 2 with E = 3" 2
expect_in "bad-ep: says why" "context_parallel_size 2 with expert_model_parallel_size 3: one must divide the other" "$ERR"
exp bad-one "context_parallel_size: 2"
run train pretrain --config bad-one.yaml
expect_rc "CP = 2 on one rank" 2
expect_in "bad-one: asks for ranks" "context_parallel_size 2 needs 2 ranks or a multiple (this run has 1)" "$ERR"
finish
