#!/usr/bin/env bash
# test-gguf.sh - `export gguf` checked by llama.cpp itself, and `import
# gguf` round trips. Tiny models are trained for a few steps (byte and
# GPT-2-style BPE vocabularies, tied and untied heads, MHA and GQA),
# exported, and loaded by llama.cpp's prebuilt CPU binary through the npm
# package node-llama-cpp (tests/oracle/gguf_logits.mjs, F32 KV cache); its
# logits of every position of a token list must agree with primus' own
# (the hidden `export logits`) within 1e-4 for f32 files and 1e-2 for f16.
# `import gguf` of an export must give back the checkpoint's
# model.safetensors byte for byte, and exporting the import again the same
# GGUF file. node-llama-cpp comes from scripts/deps.sh (run here when the
# package is missing); only when that install fails is the test skipped,
# with the reason. The attention variants (Qwen 2's biases, Qwen 3's q/k
# norms and head width, Llama 3.1's RoPE scaling) go through llama.cpp's
# qwen2, qwen3 and llama architectures the same way, and a mixture of
# experts through llama.cpp's Mixtral (llama with experts), imported back
# too; a transformers-style Mixtral folder of the same weights must read as
# the checkpoint and match a float64 PyTorch forward. llama.cpp's
# rope.scaling.* keys (files rewritten by tests/oracle/gguf_edit.py) are
# read or refused naming the key.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=/usr/bin/python3
NM=$PRIMUS_CACHE/npm/node_modules
ORACLE=$PRIMUS_SRC/tests/oracle/gguf_logits.mjs
cd "$T"

have_llama() {
  command -v node >/dev/null && [[ -e $NM/node-llama-cpp/package.json &&
    -e $NM/@node-llama-cpp/linux-x64/package.json ]]
}
if ! have_llama; then
  echo "# node-llama-cpp missing under $NM: running scripts/deps.sh"
  if ! bash "$PRIMUS_SRC/scripts/deps.sh" >"$T/deps.log" 2>&1 || ! have_llama; then
    echo "SKIP: node-llama-cpp could not be installed by scripts/deps.sh (node: $(command -v node || echo missing)):"
    tail -5 "$T/deps.log" | sed 's/^/SKIP:   /'
    exit 0
  fi
fi
if ! $PY -c 'import numpy' 2>/dev/null; then
  bad "$PY cannot import numpy (apt-get install python3-numpy; scripts/deps.sh installs it)"
  finish
  exit
fi

# maxdiff A B: max |A - B| over two raw f32 files of the same size ("size"
# when they differ, "nan" when either holds a NaN).
maxdiff() {
  $PY - "$1" "$2" <<'P'
import sys
import numpy as np
a = np.fromfile(sys.argv[1], dtype="<f4")
b = np.fromfile(sys.argv[2], dtype="<f4")
if a.size != b.size or a.size == 0:
    print("size")
elif np.isnan(a).any() or np.isnan(b).any():
    print("nan")
else:
    print("%.3g" % float(np.abs(a.astype(np.float64) - b).max()))
P
}
# below X LIMIT: X is a number <= LIMIT.
below() { awk -v x="$1" -v l="$2" 'BEGIN { exit !(x ~ /^[0-9.e+-]+$/ && x + 0 <= l + 0) }'; }

# check_llama NAME GGUF CKPT TOKENS VOCAB LIMIT: llama.cpp's logits of
# GGUF against primus' of CKPT.
check_llama() {
  local name=$1 gguf=$2 ckpt=$3 toks=$4 vocab=$5 limit=$6 d
  run export logits --load "$ckpt" --tokens "$toks" --output "$T/$name.prm"
  expect_rc "$name: primus logits" 0
  if node "$ORACLE" "$NM" "$gguf" "$toks" "$T/$name.ll" "$vocab" >"$T/$name.node" 2>&1; then
    ok "$name: llama.cpp loads $gguf"
  else
    bad "$name: llama.cpp failed on $gguf: $(tail -5 "$T/$name.node")"
    return
  fi
  d=$(maxdiff "$T/$name.prm" "$T/$name.ll")
  if below "$d" "$limit"; then
    ok "$name: llama.cpp logits within $limit of primus' (max abs diff $d)"
  else
    bad "$name: llama.cpp logits differ from primus': max abs diff $d (limit $limit)"
  fi
  echo "# $name: max |llama.cpp - primus| = $d over $(tr ',' '\n' <<<"$toks" | wc -l) positions x $vocab"
}

# case_model NAME VOCAB TOKENS GROUPS [KEY: VALUE]...: trains the tiny
# model (4 heads; GROUPS key/value heads: 4 is MHA, 2 GQA), exports f32 and
# f16, checks both with llama.cpp, and round-trips through import.
case_model() {
  local name=$1 vocab=$2 toks=$3 groups=$4
  shift 4
  tiny_exp "$name" "save: $T/$name" "save_interval: 20" "train_iters: 20" "lr: 1.0e-2" "$@"
  sed -i "s/^      num_query_groups: .*/      num_query_groups: $groups/" "$name.yaml"
  run train pretrain --config "$name.yaml"
  expect_rc "$name: train" 0
  [[ $RC == 0 ]] || return
  local ck=$T/$name/iter_0000020
  run export gguf --load "$T/$name" --output "$name.gguf" --name "$name"
  expect_rc "$name: export gguf" 0
  check_llama "$name-f32" "$name.gguf" "$T/$name" "$toks" "$vocab" 1e-4
  run export gguf --load "$ck" --output "$name-f16.gguf" --dtype f16 --name "$name"
  expect_rc "$name: export gguf --dtype f16" 0
  check_llama "$name-f16" "$name-f16.gguf" "$T/$name" "$toks" "$vocab" 1e-2
  if (($(stat -c %s "$name-f16.gguf") < $(stat -c %s "$name.gguf"))); then
    ok "$name: the f16 file is smaller"
  else
    bad "$name: the f16 file is not smaller"
  fi

  # import -> the same weights; export again -> the same file.
  run import gguf --input "$name.gguf" --output "$T/$name-imp"
  expect_rc "$name: import gguf" 0
  if cmp -s "$ck/model.safetensors" "$T/$name-imp/model.safetensors"; then
    ok "$name: import gives back model.safetensors byte for byte"
  else
    bad "$name: imported model.safetensors differs (st_compare: $($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$ck/model.safetensors" "$T/$name-imp/model.safetensors" 2>&1 | tail -1))"
  fi
  run export gguf --load "$T/$name-imp" --output "$name-again.gguf" --name "$name"
  expect_rc "$name: export the import" 0
  if cmp -s "$name.gguf" "$name-again.gguf"; then ok "$name: export(import(gguf)) == gguf"; else bad "$name: export(import(gguf)) differs"; fi
  run import gguf --input "$name-f16.gguf" --output "$T/$name-imp16"
  expect_rc "$name: import the f16 file" 0
  run export gguf --load "$T/$name-imp16" --output "$name-f16-again.gguf" --dtype f16 --name "$name"
  if cmp -s "$name-f16.gguf" "$name-f16-again.gguf"; then ok "$name: f16 round trip exact"; else bad "$name: f16 round trip differs"; fi
}

small_corpus corpus.txt
# Byte ids of a sentence of the corpus' words.
BYTES=$(printf 'the jury said the grand county election' | od -An -tu1 -v | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

case_model byte-tied-gqa 256 "$BYTES" 2
case_model byte-untied-mha 256 "$BYTES" 4 "untie_embeddings_and_output_weights: true"
grep -qs '"tie_word_embeddings":.*false' "$T/byte-untied-mha/iter_0000020/config.json" &&
  ok "the untied case is untied" || bad "the untied case has a tied head"
# tokens NAME GGUF PRIMUS_IDS: llama.cpp tokenises sample.txt as primus did.
tokens() {
  local ll
  ll=$(node "$ORACLE" "$NM" "$2" --tokenize sample.txt 2>"$T/tok.err")
  if [[ -n $ll && $ll == "$3" ]]; then
    ok "$1: llama.cpp tokenises the text as primus ($(wc -w <<<"$ll") tokens)"
  else
    bad "$1: llama.cpp's tokens differ: ${ll:0:200} vs ${3:0:200} $(tail -3 "$T/tok.err")"
  fi
}
head -c 600 corpus.txt > sample.txt
printf 'Café 1984 -- naïve!\n\ttabs  and   spaces\n' >> sample.txt
# The attention variants (byte vocabulary, f32 and f16): Qwen 2's q/k/v
# biases (llama.cpp's qwen2), Qwen 3's q/k norms with heads of 16 over
# hidden 32 (qwen3, key_length), Llama 3.1's RoPE scaling on a context
# long enough to reach its blended and slowed bands (llama with
# rope_freqs). Each imports back (qwen2 and qwen3 as such, rope_freqs as
# Hugging Face's rope_scaling) to the same model.safetensors, and exports
# again to the same GGUF file, in f32 and f16.
# roundtrip NAME CKPT: import NAME.gguf and NAME-f16.gguf and export again.
roundtrip() {
  local name=$1 ck=$2 dt
  for dt in f32 f16; do
    local f=$name.gguf
    [[ $dt == f16 ]] && f=$name-f16.gguf
    run import gguf --input "$f" --output "$T/$name-imp-$dt"
    expect_rc "$name: import gguf ($dt)" 0
    if [[ $dt == f32 ]]; then
      if cmp -s "$ck/model.safetensors" "$T/$name-imp-$dt/model.safetensors"; then
        ok "$name: import gives back model.safetensors byte for byte"
      else bad "$name: imported model.safetensors differs"; fi
    fi
    run export gguf --load "$T/$name-imp-$dt" --output "$name-$dt-again.gguf" --dtype "$dt" --name "$name"
    expect_rc "$name: export the import ($dt)" 0
    if cmp -s "$f" "$name-$dt-again.gguf"; then ok "$name: export(import(gguf)) == gguf ($dt)"
    else bad "$name: export(import(gguf)) differs ($dt)"; fi
  done
}
case_variant() { # NAME TOKENS SEQ [KEY: VALUE]...
  local name=$1 toks=$2 seq=$3
  shift 3
  tiny_exp "$name" "save: $T/$name" "save_interval: 20" "train_iters: 20" "lr: 1.0e-2" "$@"
  sed -i "s/^      seq_length: .*/      seq_length: $seq/; s/^      max_position_embeddings: .*/      max_position_embeddings: $((2 * seq))/" "$name.yaml"
  run train pretrain --config "$name.yaml"
  expect_rc "$name: train" 0
  [[ $RC == 0 ]] || return
  run export gguf --load "$T/$name" --output "$name.gguf" --name "$name"
  expect_rc "$name: export gguf" 0
  check_llama "$name-f32" "$name.gguf" "$T/$name" "$toks" 256 1e-4
  run export gguf --load "$T/$name" --output "$name-f16.gguf" --dtype f16 --name "$name"
  expect_rc "$name: export gguf --dtype f16" 0
  check_llama "$name-f16" "$name-f16.gguf" "$T/$name" "$toks" 256 1e-2
}
case_variant qwen2-bias "$BYTES" 32 "add_qkv_bias: true" "untie_embeddings_and_output_weights: true"
expect_in "qwen2-bias: architecture qwen2" "qwen2" "$(head -c 200 qwen2-bias.gguf | tr -c '[:print:]' ' ')"
roundtrip qwen2-bias "$T/qwen2-bias/iter_0000020"
expect_in "qwen2-bias: imported as qwen2" '"model_type":"qwen2"' "$(tr -d ' \t\n' <"$T/qwen2-bias-imp-f32/config.json" 2>/dev/null)"
case_variant qwen3-norm "$BYTES" 32 "qk_layernorm: true" "kv_channels: 16"
expect_in "qwen3-norm: architecture qwen3" "qwen3" "$(head -c 200 qwen3-norm.gguf | tr -c '[:print:]' ' ')"
roundtrip qwen3-norm "$T/qwen3-norm/iter_0000020"
expect_in "qwen3-norm: imported as qwen3 with head_dim 16" '"head_dim":16' "$(tr -d ' \t\n' <"$T/qwen3-norm-imp-f32/config.json" 2>/dev/null)"
LONG=$(printf 'the jury said the grand county election produced no evidence that any irregularities took place the jury further said' | od -An -tu1 -v | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
case_variant llama31-rope "$LONG" 128 "use_rope_scaling: true" "rope_scaling_factor: 8.0" \
  "micro_batch_size: 1" "global_batch_size: 1" "rotary_base: 500000"
roundtrip llama31-rope "$T/llama31-rope/iter_0000020"
expect_in "llama31-rope: rope_freqs imported as rope_scaling" \
  '"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}' \
  "$(tr -d ' \t\n' <"$T/llama31-rope-imp-f32/config.json" 2>/dev/null)"
expect_in "llama31-rope: export writes the original context" "llama.rope.scaling.original_context_length" \
  "$(head -c 4000 llama31-rope.gguf | tr -c '[:print:]' ' ')"
run import gguf --input llama31-rope.gguf --output "$T/llama31-rope-imp-log"
expect_in "llama31-rope: import reads it" "original_max_position_embeddings 8192 (from the file's rope.scaling.original_context_length)" "$ERR"
# llama.cpp's rope.scaling.* keys (tests/oracle/gguf_edit.py rewrites the
# file's keys): an original context the rope_freqs disagree with, and
# position scalings primus' RoPE lacks, are refused naming the key; type
# linear with factor 1 changes nothing.
EDIT=$PRIMUS_SRC/tests/oracle/gguf_edit.py
rope_edit() { # NAME RC NEEDLE EDIT_ARGS...
  local name=$1 rc=$2 needle=$3
  shift 3
  $PY "$EDIT" llama31-rope.gguf "$name.gguf" "$@"
  run import gguf --input "$name.gguf" --output "$T/$name-imp"
  expect_rc "$name: import" "$rc"
  expect_in "$name: the message" "$needle" "$ERR"
}
rope_edit rope-orig4096 2 "llama.rope.scaling.original_context_length disagree" \
  --set llama.rope.scaling.original_context_length=u32:4096
rope_edit rope-yarn 2 'llama.rope.scaling.type is "yarn"' --set llama.rope.scaling.type=str:yarn
rope_edit rope-linear4 2 "llama.rope.scaling.factor is 4: llama.cpp divides positions by it" \
  --set llama.rope.scaling.factor=f32:4
rope_edit rope-linear1 0 "Llama 3.1's RoPE scaling: factor 8, low_freq_factor 1, high_freq_factor 4" \
  --set llama.rope.scaling.type=str:linear --set llama.rope.scaling.factor=f32:1
# Factors other than Llama 3.1's 1 and 4 (2 and 128 over 16384 positions
# put two of the 4 frequencies in the blended band): import solves them from rope_freqs,
# with the original context from the file or, without the key, assuming
# low_freq_factor 1; both export back to the same file.
mkdir -p "$T/llama31-wide" && cp "$T"/llama31-rope/iter_0000020/* "$T/llama31-wide/"
$PY - "$T/llama31-wide/config.json" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_scaling"].update(low_freq_factor=2, high_freq_factor=128, original_max_position_embeddings=16384)
json.dump(c, open(sys.argv[1], "w"))
P
run export gguf --load "$T/llama31-wide" --output llama31-wide.gguf --name llama31-wide
expect_rc "llama31-wide: export gguf" 0
$PY "$EDIT" llama31-wide.gguf llama31-wide-nokey.gguf --del llama.rope.scaling.original_context_length
for v in wide wide-nokey; do
  run import gguf --input "llama31-$v.gguf" --output "$T/llama31-$v-imp"
  expect_rc "llama31-$v: import gguf" 0
  run export gguf --load "$T/llama31-$v-imp" --output "llama31-$v-again.gguf" --name llama31-wide
  expect_rc "llama31-$v: export the import" 0
  # (the key-less file's import writes the key again: compare without it)
  [[ $v == wide ]] || $PY "$EDIT" "llama31-$v-again.gguf" "llama31-$v-again.gguf" \
    --del llama.rope.scaling.original_context_length
  if cmp -s "llama31-$v.gguf" "llama31-$v-again.gguf"; then ok "llama31-$v: export(import(gguf)) == gguf"
  else bad "llama31-$v: export(import(gguf)) differs"; fi
done
expect_in "llama31-wide: the factors read back" \
  '"factor":8,"low_freq_factor":2,"high_freq_factor":128,"original_max_position_embeddings":16384' \
  "$(tr -d ' \t\n' <"$T/llama31-wide-imp/config.json" 2>/dev/null)"
expect_in "llama31-wide-nokey: the same bands with low_freq_factor 1" \
  '"factor":8,"low_freq_factor":1,"high_freq_factor":64,"original_max_position_embeddings":8192' \
  "$(tr -d ' \t\n' <"$T/llama31-wide-nokey-imp/config.json" 2>/dev/null)"
# Over 8192 original positions the scaling barely moves these logits (a
# few 1e-6), so the same weights with original_max_position_embeddings 32
# (every band within the context) check it where it shows; without the
# scaling primus' logits then differ from llama.cpp's.
for v in short plain; do
  mkdir -p "$T/llama31-$v" && cp "$T"/llama31-rope/iter_0000020/* "$T/llama31-$v/"
  $PY - "$T/llama31-$v/config.json" $v <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
if sys.argv[2] == "short":
    c["rope_scaling"]["original_max_position_embeddings"] = 32
else:
    del c["rope_scaling"]
json.dump(c, open(sys.argv[1], "w"))
P
done
run export gguf --load "$T/llama31-short" --output llama31-short.gguf --name llama31-short
expect_rc "llama31-short: export gguf" 0
check_llama "llama31-short" llama31-short.gguf "$T/llama31-short" "$LONG" 256 1e-4
# Its rope_freqs have no blended band: import picks an original context
# that puts every frequency in the same band, so the function, the weights
# and the re-export are the same.
run import gguf --input llama31-short.gguf --output "$T/llama31-short-imp"
expect_rc "llama31-short: import gguf" 0
run export gguf --load "$T/llama31-short-imp" --output llama31-short-again.gguf --name llama31-short
if cmp -s llama31-short.gguf llama31-short-again.gguf; then ok "llama31-short: export(import(gguf)) == gguf"
else bad "llama31-short: export(import(gguf)) differs"; fi
run export logits --load "$T/llama31-plain" --tokens "$LONG" --output "$T/llama31-plain.prm"
d=$(maxdiff "$T/llama31-plain.prm" "$T/llama31-short.ll")
awk -v x="$d" 'BEGIN { exit !(x + 0 > 1e-4) }' && ok "unscaled RoPE is off by more than the check's 1e-4 ($d)" ||
  bad "the RoPE scaling does not show in the logits ($d)"
# Qwen 3 with q/k/v biases has no llama.cpp architecture: refused, naming it.
tiny_exp qwen3-bias "save: $T/qwen3-bias" "save_interval: 2" "train_iters: 2" "qk_layernorm: true" \
  "add_qkv_bias: true"
run train pretrain --config qwen3-bias.yaml
run export gguf --load "$T/qwen3-bias" --output qwen3-bias.gguf
expect_rc "q/k/v biases with q/k norms: export refused" 2
expect_in "names both" "add_qkv_bias" "$ERR"
[[ ! -e qwen3-bias.gguf ]] && ok "nothing written" || bad "a refused export left a file"

# Mixture of experts as llama.cpp's Mixtral (llama with expert_count; the
# router ffn_gate_inp, the experts stacked in ffn_{gate,down,up}_exps):
# 4 experts, top 2, every layer MoE, f32 and f16 (the router stays f32).
MOE=("num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 48" "moe_layer_freq: 1"
  "moe_aux_loss_coeff: 0.01")
case_variant mixtral "$BYTES" 32 "${MOE[@]}" "untie_embeddings_and_output_weights: true"
H=$(head -c 4000 mixtral.gguf | tr -c '[:print:]' ' ')
expect_in "mixtral: expert_count" "llama.expert_count" "$H"
expect_in "mixtral: expert_used_count" "llama.expert_used_count" "$H"
for tn in blk.1.ffn_gate_inp.weight blk.1.ffn_gate_exps.weight blk.1.ffn_down_exps.weight \
  blk.1.ffn_up_exps.weight; do
  grep -qa "$tn" mixtral.gguf && ok "mixtral: has $tn" || bad "mixtral: no $tn"
done
grep -qa "blk.0.ffn_gate.weight" mixtral.gguf && bad "mixtral: a dense ffn_gate" || ok "mixtral: no dense MLP tensors"
# Import: the stacked experts back to Mixtral's per-expert tensors, in
# primus' order (byte for byte), and the same file exported again.
roundtrip mixtral "$T/mixtral/iter_0000020"
expect_in "mixtral: imported as Mixtral" '"model_type":"mixtral"' \
  "$(tr -d ' \t\n' <"$T/mixtral-imp-f32/config.json" 2>/dev/null)"
expect_in "mixtral: 4 experts, 2 a token" '"num_local_experts":4,"num_experts_per_tok":2' \
  "$(tr -d ' \t\n' <"$T/mixtral-imp-f32/config.json" 2>/dev/null)"
# A Mixtral folder as transformers saves one (MixtralForCausalLM's
# config.json keys: router_aux_loss_coef, output_router_logits,
# sliding_window null ...; the weights in two shards listed by
# model.safetensors.index.json) of the same weights: primus reads it
# (export logits equal the checkpoint's, the GGUF export is the same file),
# its logits match a float64 PyTorch forward of Mixtral's equations
# (tests/oracle/llama_ref.py) within 1e-4, and a sliding window shorter
# than the context is refused naming the key.
if [[ -d $T/mixtral/iter_0000020 ]]; then
  $PY - "$PRIMUS_SRC/tests/oracle" "$T/mixtral/iter_0000020" "$T/mixtral-hf" <<'P'
import json, os, sys
sys.path.insert(0, sys.argv[1])
import llama_ref as R
src, dst = sys.argv[2], sys.argv[3]
os.makedirs(dst, exist_ok=True)
c = json.load(open(os.path.join(src, "config.json")))
c.update(architectures=["MixtralForCausalLM"], attention_dropout=0.0, hidden_act="silu",
         initializer_range=0.02, output_router_logits=False, router_aux_loss_coef=0.02,
         router_jitter_noise=0.0, sliding_window=None, torch_dtype="float32",
         transformers_version="4.46.0", use_cache=True)
c.pop("primus_tokenizer_type", None)
json.dump(c, open(os.path.join(dst, "config.json"), "w"), indent=2)
P = R.st_read(os.path.join(src, "model.safetensors"))
names = sorted(P)
shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
          "model-00002-of-00002.safetensors": names[len(names) // 2:]}
wm = {}
for f, ns in shards.items():
    R.st_write(os.path.join(dst, f), {n: P[n] for n in ns}, meta={"format": "pt"})
    wm.update({n: f for n in ns})
json.dump({"metadata": {"total_size": 4 * sum(P[n].numel() for n in names)}, "weight_map": wm},
          open(os.path.join(dst, "model.safetensors.index.json"), "w"), indent=2)
P
  run export logits --load "$T/mixtral-hf" --tokens "$BYTES" --output "$T/mixtral-hf.prm"
  expect_rc "mixtral-hf: primus reads the transformers-style folder" 0
  run export logits --load "$T/mixtral" --tokens "$BYTES" --output "$T/mixtral-ck.prm"
  d=$(maxdiff "$T/mixtral-hf.prm" "$T/mixtral-ck.prm")
  expect_eq "mixtral-hf: the same logits as the checkpoint" "$d" "0"
  run export gguf --load "$T/mixtral-hf" --output mixtral-hf.gguf --name mixtral
  expect_rc "mixtral-hf: export gguf" 0
  if cmp -s mixtral.gguf mixtral-hf.gguf; then ok "mixtral-hf: exports to the checkpoint's GGUF file"
  else bad "mixtral-hf: its GGUF export differs from the checkpoint's"; fi
  if $PY - "$PRIMUS_SRC/tests/oracle" "$T/mixtral-hf" "$BYTES" "$T/mixtral-hf.prm" <<'P'; then
import glob, os, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
import llama_ref as R
d = sys.argv[2]
cfg = R.load_config(d)
P = {}
for f in sorted(glob.glob(os.path.join(d, "model-*.safetensors"))):
    P.update(R.st_read(f))
tok = torch.tensor([[int(t) for t in sys.argv[3].split(",")]])
ref = R.forward(P, cfg, tok)[0].numpy()
got = np.fromfile(sys.argv[4], dtype="<f4").astype(np.float64).reshape(ref.shape)
err = np.abs(got - ref).max()
print("mixtral-hf: max |primus - float64 reference| = %.3g over %d positions x %d" % (err, *ref.shape))
sys.exit(0 if err < 1e-4 else 1)
P
    ok "mixtral-hf: logits match the float64 PyTorch Mixtral forward"
  else
    bad "mixtral-hf: logits differ from the float64 PyTorch Mixtral forward"
  fi
  sed -i 's/"sliding_window": null/"sliding_window": 16/' "$T/mixtral-hf/config.json"
  run export logits --load "$T/mixtral-hf" --tokens "$BYTES" --output "$T/mixtral-sw.prm"
  expect_rc "mixtral-hf with sliding_window 16: refused" 2
  expect_in "names the key" 'key "sliding_window": 16 is shorter than max_position_embeddings' "$ERR"
fi
$PY "$PRIMUS_SRC/tests/oracle/gguf_edit.py" mixtral.gguf mixtral-nokey.gguf --del llama.expert_used_count
run import gguf --input mixtral-nokey.gguf --output "$T/mixtral-nokey-imp"
expect_rc "mixtral without expert_used_count: refused" 2
expect_in "names the key" "llama.expert_used_count" "$ERR"
# Dense layers between MoE ones, or a shared expert: llama.cpp's Mixtral
# has neither; refused, saying which, nothing written.
moe_refused() { # NAME NEEDLE [KEY: VALUE]...
  local name=$1 needle=$2
  shift 2
  tiny_exp "$name" "save: $T/$name" "save_interval: 2" "train_iters: 2" "${MOE[@]}" "$@"
  run train pretrain --config "$name.yaml"
  run export gguf --load "$T/$name" --output "$name.gguf"
  expect_rc "$name: export refused" 2
  expect_in "$name: says why" "$needle" "$ERR"
  [[ ! -e $name.gguf ]] && ok "$name: nothing written" || bad "$name: a refused export left a file"
}
moe_refused moe-dense "llama.cpp's Mixtral makes every layer MoE" "moe_layer_freq: 2"
moe_refused moe-shared "a shared expert" "moe_shared_expert_intermediate_size: 32"

tokens "byte vocabulary" byte-tied-gqa.gguf "$(od -An -tu1 -v sample.txt | xargs)"
run generate --load "$T/byte-tied-gqa-imp" --prompt "the jury" --max_new_tokens 4 --temperature 0
expect_rc "generate from an imported byte-vocabulary checkpoint" 0

# A GPT-2-style BPE tokenizer trained here: 300 tokens padded to 384.
run data train-tokenizer --input corpus.txt --vocab_size 300 --output tok.json
expect_rc "train-tokenizer" 0
run data preprocess --input corpus.txt --output_prefix ds --tokenizer_type HuggingFaceTokenizer \
  --tokenizer_model tok.json
expect_rc "preprocess with it" 0
BPE_TOKS=0,5,17,100,256,257,260,280,299,300,383,42,7,270,290,1
BPE_ARGS=("data_path: $T/ds" "vocab_size: null" "tokenizer_type: HuggingFaceTokenizer"
          "tokenizer_model: $T/tok.json")
case_model bpe-untied-gqa 384 "$BPE_TOKS" 2 "${BPE_ARGS[@]}" "untie_embeddings_and_output_weights: true"
case_model bpe-tied-mha 384 "$BPE_TOKS" 4 "${BPE_ARGS[@]}"
run data preprocess --input sample.txt --output_prefix sample --tokenizer_type HuggingFaceTokenizer \
  --tokenizer_model tok.json
tokens "BPE vocabulary" bpe-tied-mha.gguf "$($PY "$PRIMUS_SRC/tests/oracle/read_mmidx.py" sample | xargs)"
if [[ -e $T/bpe-tied-mha-imp/tokenizer.json ]]; then
  ok "import writes tokenizer.json for a BPE vocabulary"
  run generate --load "$T/bpe-tied-mha-imp" --prompt "the jury" --max_new_tokens 4 --temperature 0
  expect_rc "generate from an imported BPE checkpoint (its tokenizer.json)" 0
  run generate --load "$T/bpe-tied-mha" --prompt "the jury" --max_new_tokens 4 --temperature 0
  orig=$OUT
  run generate --load "$T/bpe-tied-mha-imp" --prompt "the jury" --max_new_tokens 4 --temperature 0
  expect_eq "the imported tokenizer generates the same text" "$OUT" "$orig"
else
  bad "import wrote no tokenizer.json for a BPE vocabulary"
fi

# GPT-2's own BPE (GPT2BPETokenizer: tiktoken ranks, 50257 tokens padded to
# 50304): export derives the merges from the ranks.
if [[ -e $NM/gpt-tokenizer/data/r50k_base.tiktoken ]]; then
  run data preprocess --input corpus.txt --output_prefix ds2 --tokenizer_type GPT2BPETokenizer
  expect_rc "preprocess with GPT-2's tokenizer" 0
  case_model gpt2-untied-gqa 50304 464,3200,50256,262,50303,1000,30000,11,13,50255 2 \
    "data_path: $T/ds2" "vocab_size: null" "tokenizer_type: GPT2BPETokenizer" \
    "untie_embeddings_and_output_weights: true"
  run data preprocess --input sample.txt --output_prefix sample2 --tokenizer_type GPT2BPETokenizer
  tokens "GPT-2 vocabulary" gpt2-untied-gqa.gguf "$($PY "$PRIMUS_SRC/tests/oracle/read_mmidx.py" sample2 | xargs)"
  run generate --load "$T/gpt2-untied-gqa-imp" --prompt "the jury" --max_new_tokens 4 --temperature 0
  expect_rc "generate from an imported GPT-2 checkpoint (its derived tokenizer.json)" 0
else
  echo "# SKIP GPT-2 case: $NM/gpt-tokenizer/data/r50k_base.tiktoken missing (scripts/deps.sh)"
fi

# Errors name the file and what is wrong; nothing is left behind.
run export gguf --output x.gguf
expect_rc "export without --load" 2
expect_in "names --load" "--load" "$ERR"
run export gguf --load "$T/byte-tied-gqa" --output x.gguf --dtype q8
expect_rc "export --dtype q8" 2
expect_in "names the dtype" "q8" "$ERR"
run export gguf --load "$T/nowhere" --output x.gguf
expect_rc "export from a missing folder" 2
expect_in "names the folder" "nowhere" "$ERR"
mkdir -p broken && cp "$T/byte-tied-gqa/iter_0000020/config.json" broken/
run export gguf --load broken --output x.gguf
expect_rc "export from a folder without weights" 2
expect_in "names model.safetensors" "model.safetensors" "$ERR"
[[ ! -e x.gguf ]] && ok "no partial output" || bad "x.gguf was written"
printf 'not a gguf file at all, just text\n' > fake.gguf
run import gguf --input fake.gguf --output fake-imp
expect_rc "import of a non-GGUF file" 2
expect_in "names the file and the magic" "fake.gguf: not a GGUF file" "$ERR"
head -c 3000 byte-tied-gqa.gguf > cut.gguf
run import gguf --input cut.gguf --output cut-imp
expect_rc "import of a truncated file" 2
expect_in "says truncated" "cut.gguf: truncated" "$ERR"
[[ ! -e cut-imp ]] && ok "no folder from a failed import" || bad "cut-imp was created"
run import gguf --input byte-tied-gqa.gguf --output "$T/byte-tied-gqa-imp"
expect_rc "import into an existing folder" 2
expect_in "says it exists" "already exists" "$ERR"
ls "$T"/*.tmp.* >/dev/null 2>&1 && bad "temporary files left: $(ls -d "$T"/*.tmp.*)" || ok "no temporary files left"

finish
