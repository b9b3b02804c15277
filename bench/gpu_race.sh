#!/usr/bin/env bash
# bench/gpu_race.sh - training speed and memory on one GPU: primus
# (device: cuda) against PyTorch (bench/torch_llama.py --device cuda) on the
# same GPU in the same run, at issue 23's reference shape: llama_124M
# (hidden 768, 12 layers, 12 heads, ffn 2048, vocab 50304, tied head), seq
# 1024, micro-batch 16, bf16, random tokens. A benchmark, not a test: it
# never fails on a figure. The variants run in turns, ROUNDS times (odd
# rounds in reverse order, so no variant always runs first or last on a
# warming GPU); each round prints one table row per variant (ms/step,
# tokens/s, MFU against the GPU's dense bf16 peak, peak device memory), and
# the end a table of each variant's medians with its ratio to PyTorch eager
# and to torch.compile (tokens/s over theirs: above 1 is faster).
#
#   bash bench/gpu_race.sh                       # primus, torch eager, torch.compile
#   VARIANTS="primus torch" STEPS=15 ROUNDS=1 bash bench/gpu_race.sh
#   MAXBATCH="primus torch" bash bench/gpu_race.sh   # the largest micro-batch each fits
#
# Knobs: VARIANTS (primus primus-before primus-unfused primus-attn32
# primus-gemmattn (bf16 attention through cuBLAS, not the flash kernels)
# primus-lt (GEMMs through cuBLASLt, PRIMUS_CUDA_GEMM=lt) primus-tuned
# (cuBLASLt with the algorithms timed per shape into $OUT/gemm-tune.txt on
# its first run, read back on the later rounds: PRIMUS_CUDA_GEMM_TUNE)
# primus-scalarew (PRIMUS_CUDA_ELTWISE=scalar: the first element-wise
# kernels) primus-head32 primus-tf32 primus-tiled primus-fp32 primus-fp32-tf32
# torch torch-compile torch-fp32 torch-tf32).
# primus is bf16 as it trains by default: attention on bf16 operands
# (tensor cores), the LM head on bf16 operands, the fused operators (AdamW
# writing the bf16 weights, RMSNorm and SwiGLU writing their GEMMs' bf16
# operands). Each of issue 24's changes has a variant without it, for A/B
# in the same run: primus-unfused (PRIMUS_DEVICE_UNFUSED=1), primus-attn32
# (bf16_attention: fp32, attention's products in fp32), primus-head32
# (PRIMUS_DEVICE_HEAD_FP32=1); primus-before has all three (the engine
# before issue 24's GPU work), primus-tf32 is primus-before with TF32 in
# its fp32 GEMMs, primus-tiled primus-before with the tiled attention
# kernels (PRIMUS_CUDA_ATTENTION=tiled). fp32 training: primus-fp32 and
# torch-fp32 (exact fp32 products), primus-fp32-tf32 and torch-tf32 (TF32
# tensor cores in the fp32 products, each program's own switch). STEPS
# (20; the first WARMUP=5 untimed), ROUNDS (3), SEQ (1024), BATCH (16),
# PEAK_TFLOPS (the dense bf16 peak MFU is against; default 989.4, an H100
# SXM's), PRIMUS (the binary, default: primus on PATH), PY (python3 with
# torch and CUDA), OUT, DEVICE (cuda; cpu for a smoke run of primus here).
# MAXBATCH (a list of variants) replaces the race with a search of the
# largest micro-batch each variant trains at (MAXBATCH_STEPS=3 steps a
# try): doubling from BATCH until a try fails (out of device memory), then
# halving the gap; every try's outcome goes to maxbatch.md.
set -uo pipefail
cd "$(dirname "$0")/.."
VARIANTS=${VARIANTS:-primus torch torch-compile}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-5} SEQ=${SEQ:-1024} BATCH=${BATCH:-16} ROUNDS=${ROUNDS:-3}
MAXBATCH=${MAXBATCH:-} MAXBATCH_STEPS=${MAXBATCH_STEPS:-3}
PEAK_TFLOPS=${PEAK_TFLOPS:-989.4} DEVICE=${DEVICE:-cuda}
PRIMUS=${PRIMUS:-$(command -v primus)}
PY=${PY:-python3}
OUT=${OUT:-/tmp/primus-gpu-race-$$}
mkdir -p "$OUT"
# prm_llama_flops_per_token at this shape: 6 x matmul parameters + 12 L C T.
FPT=$(awk -v C=768 -v L=12 -v F=2048 -v V=50304 -v T="$SEQ" \
  'BEGIN { printf "%.0f", 6 * (L * (4 * C * C + 3 * C * F) + V * C) + 12 * L * C * T }')

ROUND=1
row() { # NAME MS PEAK_BYTES: one round's row; (round, name, ms, peak) kept for the medians
  [[ -n $MAXBATCH ]] && return 0
  printf '%s\t%s\t%s\t%s\n' "$ROUND" "$1" "$2" "$3" >> "$OUT/results.tsv"
  awk -v r="$ROUND" -v n="$1" -v ms="$2" -v pk="$3" -v B="$BATCH" -v T="$SEQ" -v f="$FPT" \
    -v P="$PEAK_TFLOPS" 'BEGIN { tps = B * T / (ms / 1e3);
      printf "| %5d | %-16s | %9.1f | %10.0f | %5.1f%% | %9.2f GiB |\n",
             r, n, ms, tps, 100 * tps * f / 1e12 / P, pk / 2^30 }' | tee -a "$OUT/race.md"
}

primus_run() { # NAME BF16 [TF32 [BF16_ATTENTION]]
  local name=$1 bf16=$2 tf32=${3:-false} attn=${4:-auto} d=$OUT/$1
  mkdir -p "$d"
  cat > "$d/exp.yaml" <<Y
work_group: race
user_name: gpu
exp_name: $name
workspace: $d/ws
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_124M.yaml
    overrides:
      device: $DEVICE
      mock_data: true
      seq_length: $SEQ
      micro_batch_size: $BATCH
      global_batch_size: $BATCH
      train_iters: $STEPS
      lr_warmup_iters: 10
      log_interval: 5
      eval_iters: 0
      bf16: $bf16
      tf32: $tf32
      bf16_attention: $attn
Y
  rm -rf "$d/ws"
  "$PRIMUS" train pretrain --config "$d/exp.yaml" > "$d/log.txt" 2>&1 || { echo "$name failed: $(tail -2 "$d/log.txt")"; return 1; }
  local ev ms peak
  ev=$(ls -d "$d"/ws/race/gpu/"$name"/run-*/events.jsonl | tail -1)
  ms=$(grep '^{"step"' "$ev" | tail -n +$((WARMUP + 1)) | sed 's/.*"step_ms":\([^,]*\),.*/\1/' |
       awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n }')
  peak=$(sed -n 's/.*peak cuda memory .* (\([0-9]*\) bytes).*/\1/p' "$d/log.txt" | tail -1)
  row "$name" "$ms" "${peak:-0}"
}

torch_run() { # NAME EXTRA_ARGS...
  local name=$1 d=$OUT/$1
  shift
  mkdir -p "$d"
  "$PY" bench/torch_llama.py --device "$DEVICE" --hidden 768 --layers 12 --heads 12 --kv-heads 12 \
    --ffn 2048 --vocab 50304 --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
    --warmup-iters 10 "$@" > "$d/log.txt" 2>&1 || { echo "$name failed: $(tail -2 "$d/log.txt")"; return 1; }
  local r
  r=$(grep '^RESULT' "$d/log.txt")
  row "$name" "$(sed 's/.*ms_per_step=\([^ ]*\).*/\1/' <<<"$r")" "$(sed 's/.*peak_device_bytes=\([^ ]*\).*/\1/' <<<"$r")"
}

run_variant() { # VARIANT: one training run of it at BATCH; fails when the run fails
  case $1 in
    primus) primus_run primus-bf16 true ;;
    primus-unfused) PRIMUS_DEVICE_UNFUSED=1 primus_run primus-unfused true ;;
    primus-attn32) primus_run primus-attn32 true false fp32 ;;
    primus-head32) PRIMUS_DEVICE_HEAD_FP32=1 primus_run primus-head32 true ;;
    primus-before) PRIMUS_DEVICE_UNFUSED=1 PRIMUS_DEVICE_HEAD_FP32=1 primus_run primus-before true false fp32 ;;
    primus-fp32) primus_run primus-fp32 false ;;
    primus-fp32-tf32) primus_run primus-fp32-tf32 false true ;;
    primus-tiled) PRIMUS_DEVICE_UNFUSED=1 PRIMUS_DEVICE_HEAD_FP32=1 PRIMUS_CUDA_ATTENTION=tiled primus_run primus-tiled true false fp32 ;;
    primus-gemmattn) PRIMUS_CUDA_ATTENTION=gemm primus_run primus-gemmattn true ;;
    primus-lt) PRIMUS_CUDA_GEMM=lt primus_run primus-lt true ;;
    primus-tuned) PRIMUS_CUDA_GEMM_TUNE=$OUT/gemm-tune.txt primus_run primus-tuned true ;;
    primus-scalarew) PRIMUS_CUDA_ELTWISE=scalar primus_run primus-scalarew true ;;
    primus-tf32) PRIMUS_DEVICE_UNFUSED=1 PRIMUS_DEVICE_HEAD_FP32=1 primus_run primus-bf16-tf32 true true fp32 ;;
    torch) torch_run torch-eager --bf16 ;;
    torch-compile) torch_run torch-compile --bf16 --compile ;;
    torch-fp32) torch_run torch-fp32 ;;
    torch-tf32) torch_run torch-tf32 --tf32 ;;
    *) echo "unknown variant $1"; return 1 ;;
  esac
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"

if [[ -n $MAXBATCH ]]; then
  # The largest micro-batch each variant trains at: a try passes when the
  # run exits 0 (primus exits 3 when the device is out of memory, PyTorch's
  # script dies of its OutOfMemoryError).
  STEPS=$MAXBATCH_STEPS WARMUP=$((MAXBATCH_STEPS - 1))
  echo "largest micro-batch, llama_124M, seq $SEQ, $STEPS steps a try" | tee "$OUT/maxbatch.md"
  for v in $MAXBATCH; do
    good=0 bad=0 b=$BATCH
    while :; do
      BATCH=$b run_variant "$v" > /dev/null 2>&1 && r=ok || r=failed
      echo "  $v micro-batch $b: $r" | tee -a "$OUT/maxbatch.md"
      if [[ $r == ok ]]; then good=$b; else bad=$b; fi
      if ((bad == 0)); then b=$((b * 2)); ((b > 65536)) && break; continue; fi
      ((bad - good <= 1)) && break
      b=$(((good + bad) / 2))
    done
    ((bad == 0)) && bad=none
    echo "| $v | largest micro-batch $good | first failing $bad |" | tee -a "$OUT/maxbatch.md"
  done
  exit 0
fi

echo "llama_124M, seq $SEQ, micro-batch $BATCH, $STEPS steps (mean of the last $((STEPS - WARMUP))), $ROUNDS round(s), MFU against $PEAK_TFLOPS TFLOP/s" | tee "$OUT/race.md"
echo "| round | variant          |  ms/step  |  tokens/s  |  MFU   | peak memory   |" | tee -a "$OUT/race.md"
echo "|-------|------------------|-----------|------------|--------|---------------|" | tee -a "$OUT/race.md"
: > "$OUT/results.tsv"
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
  order=$VARIANTS
  ((ROUND % 2 == 0)) && order=$(tr ' ' '\n' <<<"$VARIANTS" | tac | tr '\n' ' ')
  for v in $order; do run_variant "$v"; done
done

# Medians over the rounds, and each variant's tokens/s over PyTorch's.
echo | tee -a "$OUT/race.md"
echo "medians of $ROUNDS round(s); ratios are tokens/s over torch-eager's and torch-compile's median" | tee -a "$OUT/race.md"
echo "| variant          |  ms/step  |  tokens/s  |  MFU   | peak memory   | x eager | x compile |" | tee -a "$OUT/race.md"
echo "|------------------|-----------|------------|--------|---------------|---------|-----------|" | tee -a "$OUT/race.md"
awk -F'\t' -v B="$BATCH" -v T="$SEQ" -v f="$FPT" -v P="$PEAK_TFLOPS" '
  function median(name,   n, i, j, t, a) {
    n = split(ms[name], a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  $3 != "" { if (!($2 in ms)) order[++nv] = $2; ms[$2] = ms[$2] " " $3; if ($4 + 0 > pk[$2]) pk[$2] = $4 + 0 }
  END {
    e = ("torch-eager" in ms) ? median("torch-eager") : 0
    c = ("torch-compile" in ms) ? median("torch-compile") : 0
    for (i = 1; i <= nv; i++) {
      m = median(order[i]); tps = B * T / (m / 1e3)
      printf "| %-16s | %9.1f | %10.0f | %5.1f%% | %9.2f GiB | %7s | %9s |\n", order[i], m, tps,
             100 * tps * f / 1e12 / P, pk[order[i]] / 2^30,
             e ? sprintf("%.2f", e / m) : "-", c ? sprintf("%.2f", c / m) : "-"
    }
  }' "$OUT/results.tsv" | tee -a "$OUT/race.md"
