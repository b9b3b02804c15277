#!/usr/bin/env bash
# The train pillar end to end through the real binary: a short pretraining
# run on a text file (events.jsonl, checkpoints, the loss falling), eval
# agreeing with the in-training evaluation, greedy generation, replay and
# full recomputation reproducing the losses exactly, and bad input (shape,
# token out of vocabulary, damaged checkpoints) failing with exit 2 before
# anything is written.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2

# A small structured corpus: paragraphs of sentences over a fixed word list.
awk 'BEGIN { srand(7); split("the a jury said grand county election was to of and in that for it on by city", w, " ");
  for (p = 0; p < 120; p++) { s = ""; n = 3 + int(rand() * 4);
    for (i = 0; i < n; i++) { m = 4 + int(rand() * 8); line = "";
      for (j = 0; j < m; j++) line = line (j ? " " : "") w[1 + int(rand() * 17)];
      s = s line ". " }
    print s; print "" } }' > "$T/corpus.txt"

{ exp_header tiny; tiny_model; cat <<Y
      data_path: $T/corpus.txt
      split: "90,10,0"
      data_shuffle: false
      micro_batch_size: 4
      global_batch_size: 8
      train_iters: 12
      lr: 3.0e-3
      min_lr: 3.0e-4
      lr_warmup_iters: 2
      log_interval: 4
      eval_interval: 6
      eval_iters: 1
      save: $T/ckpt
      save_interval: 6
Y
} > "$T/exp.yaml"

losses() { grep '"step"' "$1" | grep -v '"event"' | sed 's/.*"loss":\([^,]*\),.*/\1/'; }

run train pretrain --config "$T/exp.yaml"
expect_rc "train pretrain" 0
expect_in "memory reported by category" "memory: params" "$ERR"
expect_in "step line has MFU" "MFU" "$ERR"
RD=$(ls -d "$T"/ws/team/tester/tiny/run-* | tail -1)
EV=$RD/events.jsonl
expect_file "events.jsonl in the run directory" "$EV"
N_STEPS=$(grep -c '^{"step"' "$EV")
expect_eq "one event per step" "$N_STEPS" 12
FIRST=$(head -1 "$EV")
for k in step loss lr grad_norm tokens step_ms; do expect_in "event has $k" "\"$k\":" "$FIRST"; done
expect_in "tokens per step = 8 x 32" '"tokens":256' "$FIRST"
L1=$(losses "$EV" | head -1)
L12=$(losses "$EV" | tail -1)
if awk -v a="$L1" -v b="$L12" 'BEGIN { exit !(b < a - 0.3) }'; then ok "loss fell ($L1 -> $L12)"; else bad "loss did not fall: $L1 -> $L12"; fi
expect_in "lr warm-up in events" '"lr":0.0015,' "$FIRST"
expect_file "checkpoint at 6" "$T/ckpt/iter_0000006/model.safetensors"
expect_file "checkpoint at 12" "$T/ckpt/iter_0000012/config.json"
expect_eq "latest checkpointed iteration" "$(cat "$T/ckpt/latest_checkpointed_iteration.txt")" 12
expect_in "HF architecture" "LlamaForCausalLM" "$(cat "$T/ckpt/iter_0000012/config.json")"
if ls "$T/ckpt" | grep -q tmp; then bad "temporary checkpoint folder left"; else ok "no temporary folders"; fi

# eval on the saved weights equals the evaluation done in training at 12.
run eval --config "$T/exp.yaml" --load "$T/ckpt" --output "$T/eval.json"
expect_rc "eval" 0
for k in loss perplexity tokens; do expect_in "eval JSON has $k" "\"$k\":" "$(cat "$T/eval.json")"; done
EVAL_IN_TRAIN=$(grep '"event":"eval","step":12' "$EV" | sed 's/.*"loss":\([^,]*\),.*/\1/')
EVAL_LOAD=$(sed 's/.*"loss": \([^,]*\),.*/\1/' "$T/eval.json")
expect_eq "eval --load equals the in-training eval" "$EVAL_LOAD" "$EVAL_IN_TRAIN"
expect_in "eval counts 8 x 32 tokens" '"tokens": 256' "$OUT"

# Greedy generation is deterministic and continues the prompt.
run generate --load "$T/ckpt" --prompt "the jury" --max_new_tokens 40 --temperature 0
expect_rc "generate" 0
G1=$OUT
run generate --load "$T/ckpt" --prompt "the jury" --max_new_tokens 40 --temperature 0
expect_eq "greedy generation is deterministic" "$OUT" "$G1"
expect_in "generation starts with the prompt" "the jury" "${G1:0:8}"
if ((${#G1} >= 40)); then ok "generated 40 tokens"; else bad "generated too little: '$G1'"; fi
run generate --load "$T/ckpt" --prompt "the jury" --max_new_tokens 30 --temperature 0.9 --top_k 5 --top_p 0.9 --seed 3
expect_rc "sampled generation" 0
# The model's context (64 positions) ends the text with its newline; the
# default length stops there quietly, a longer --max_new_tokens says so.
"$PRIMUS_BIN" generate --load "$T/ckpt" --prompt "the jury" --temperature 0 > "$T/gen.txt" 2> "$T/gen.err"
expect_eq "default length: exit 0, no warning" "$?:$(grep -c WARN "$T/gen.err")" "0:0"
expect_eq "the text ends with a newline" "$(tail -c1 "$T/gen.txt" | od -An -c | tr -d ' ')" '\n'
"$PRIMUS_BIN" generate --load "$T/ckpt" --prompt "the jury" --temperature 0 --max_new_tokens 500 > "$T/gen.txt" 2> "$T/gen.err"
expect_in "a longer request says where it stopped" "of --max-new-tokens 500: the model's context (max_position_embeddings 64 tokens) is full" "$(cat "$T/gen.err")"
expect_eq "and the text still ends with a newline" "$(tail -c1 "$T/gen.txt" | od -An -c | tr -d ' ')" '\n'

# Replay reruns the same training: the same losses, bit for bit.
sleep 1
run replay "$RD"
expect_rc "replay of a training run" 0
RD2=$(ls -d "$T"/ws/team/tester/tiny/run-* | grep -v "^$RD\$" | tail -1)
expect_eq "replay reproduced every loss" "$(losses "$RD2/events.jsonl")" "$(losses "$EV")"

# Full recomputation changes memory, not results.
sleep 1
# The same run profiles its GEMMs (PRIMUS_GEMM_PROFILE), which changes no number.
PRIMUS_GEMM_PROFILE=1 run train pretrain --config "$T/exp.yaml" train_iters=3 recompute_granularity=full save=null
expect_rc "train with recompute" 0
expect_in "recompute reported" "full recompute" "$ERR"
RD3=$(ls -d "$T"/ws/team/tester/tiny/run-* | tail -1)
expect_eq "recompute gives identical losses" "$(losses "$RD3/events.jsonl")" "$(losses "$EV" | head -3)"
expect_in "the profiled backend is named" "+profiled" "$ERR"
# Every step makes the same GEMM calls: the "all" row's count is a multiple
# of the 3 steps, and the shapes' counts add up to it.
if python3 - "$ERR" <<'PY'
import sys
rows = [l.strip("|").split("|") for l in sys.argv[1].splitlines() if l.startswith("| ")]
rows = [[c.strip() for c in r] for r in rows if r[0].strip() in ("fp32", "bf16", "all")]
shapes, total = rows[:-1], rows[-1]
assert total[0] == "all" and len(shapes) >= 3, rows
calls = sum(int(r[6]) for r in shapes)
assert calls == int(total[6]) and calls % 3 == 0, (calls, total)
# Times are positive (a shape's average rate may print as 0.0 when its
# first call compiles a kernel, as oneDNN's do, so the times are checked).
assert float(total[7]) > 0 and all(float(r[10]) > 0 for r in shapes), rows
PY
then ok "GEMM profile table"; else bad "GEMM profile table missing or inconsistent: $ERR"; fi

# ---- bad input: exit 2, a message naming the problem, nothing written ----
run train pretrain --config "$T/exp.yaml" num_attention_heads=5 save="$T/bad1"
expect_rc "heads not dividing hidden" 2
expect_in "names the key and the rule" "num_attention_heads: must divide hidden_size (32), got 5" "$ERR"

run train pretrain --config "$T/exp.yaml" vocab_size=100 save="$T/bad2"
expect_rc "token >= vocab_size" 2
expect_in "names the file and token" "corpus.txt" "$ERR"
expect_in "names vocab_size" "100" "$ERR"
if [[ -e $T/bad2 ]]; then bad "nothing saved after a data error"; else ok "nothing saved after a data error"; fi

run train pretrain --config "$T/exp.yaml" data_path="$T/missing.txt"
expect_rc "missing data file" 2

cp -r "$T/ckpt/iter_0000012" "$T/trunc"
truncate -s -64 "$T/trunc/model.safetensors"
run train pretrain --config "$T/exp.yaml" load="$T/trunc" save="$T/bad3"
expect_rc "truncated safetensors" 2
expect_in "names the file" "trunc/model.safetensors" "$ERR"
if [[ -e $T/bad3 ]]; then bad "nothing saved after a load error"; else ok "nothing saved after a load error"; fi

cp -r "$T/ckpt/iter_0000012" "$T/missing"
LC_ALL=C sed -i 's/model\.norm\.weight/model.nrom.weight/' "$T/missing/model.safetensors"
run eval --config "$T/exp.yaml" --load "$T/missing"
expect_rc "missing tensor" 2
expect_in "names the tensor" 'missing tensor "model.norm.weight"' "$ERR"

run train pretrain --config "$T/exp.yaml" load="$T/ckpt" ffn_hidden_size=96 save="$T/bad4"
expect_rc "checkpoint of another shape" 2
expect_in "names the key and both sizes" "intermediate_size (ffn_hidden_size) is 64 but the experiment has 96" "$ERR"

run generate --load "$T/nowhere" --prompt hi
expect_rc "generate from a missing folder" 2

finish
