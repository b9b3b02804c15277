#!/bin/bash
# bench/train_vs_torch.sh - training throughput and memory: primus' native
# engine vs a PyTorch fp32 Llama (bench/torch_llama.py), same shapes, same
# hyper-parameters (AdamW 0.9/0.95, clip 1.0, lr 1e-3 warm-up 100, weight
# decay 0.1, tied head), random tokens, on this machine, in one run.
# A benchmark, not a test: it never fails on a figure.
#
#   bench/train_vs_torch.sh                       # everything (~10 min on 2 cores)
#   MODELS="tiny small" THREADS=2 bench/train_vs_torch.sh
#   VARIANTS="torch primus:onednn:passive" bench/train_vs_torch.sh
#
# Environment knobs:
#   MODELS    tiny small wide             (see model_args below): tiny is
#             overhead-bound, small (seq 256) attention-bound, wide (hidden
#             1024, seq 64, vocab 32000) GEMM-bound; 124m is issue 9's
#             reference shape (hidden 768, 12 layers, 12 heads, ffn 2048,
#             vocab 50304, seq 256, micro batch 8), not in the default list
#   THREADS   "2 1"                       OMP_NUM_THREADS values
#   VARIANTS  torch primus:GEMM:WAIT[:bf16] ...  GEMM onednn|openblas|tuned (tuned: a
#             `benchmark gemm --tune` file for the shape, made once in OUT), WAIT passive|active|unset;
#             a fourth field bf16 trains with bf16: true
#             (unset: OMP_WAIT_POLICY removed from the environment, what a
#             user who exports nothing gets: platforms/cpu.sh's passive is
#             setenv()ed inside the primus process, after libgomp has read
#             its environment, so libgomp's default spin-then-sleep applies)
#   VARIANTS_1THREAD  variants for THREADS=1 (default: torch, primus onednn passive)
#   OUT       results folder (default /tmp/primus-bench-<pid>)
#   PRIMUS    the binary (default build/primus); PY: /usr/bin/python3 (Debian torch 1.13)
#   SEQS      "128 256 512 1024": run each model at these sequence lengths
#             with TOKENS tokens per step (micro batch = TOKENS / seq; default
#             the model's seq x batch), and print the step-time curve: ms/step
#             against seq with a straight-line fit (at a fixed number of
#             tokens only attention's work grows with seq, linearly)
#   ROUNDS    N (default 1): run every model/seq/threads/variant N times,
#             in rounds, each round starting with its own `benchmark peak`;
#             every row's ratio and % of peak use its own round's torch run
#             and peak, and a summary gives each variant's median over the
#             rounds (this machine's speed moves by +-30% from one minute
#             to the next: a median of alternated rounds is the figure to
#             quote, one run is not)
#   TABLE_FROM=results.tsv  run nothing, print the table of an earlier run's
#             results.tsv (e.g. merged with a re-run of disturbed rows)
#
# primus: `train pretrain` with mock_data=true save=null eval_iters=0; ms/step
# is the mean step_ms of the run directory's events.jsonl after the first 2
# steps; peak RSS is /usr/bin/time -v's "Maximum resident set size".
# torch: OMP_WAIT_POLICY=passive and, in that command only, OPENBLAS_CORETYPE
# and OPENBLAS_L2_SIZE unset (docs: /work/shared/INFRA.md); its mean excludes
# the first 2 steps too; peak RSS the same way (it includes ~300 MiB of
# PyTorch itself).
# TFLOP/s use primus' formula (prm_llama_flops_per_token): per token
# 6 * matmul params + 12 * layers * hidden * seq; "% peak" divides by the
# fp32 FMA peak per core x threads, measured at the start of the same round
# (`primus benchmark peak`: a VM's clock changes from one day to the next).
# "bg%" is the CPU time other processes used during the run, as a share of
# all cores (from /proc/stat minus the run's own user+sys): above ~10% the
# figure was disturbed; re-run it.
set -u
cd "$(dirname "$0")/.."
PRIMUS=${PRIMUS:-build/primus}
PY=${PY:-/usr/bin/python3}
OUT=${OUT:-/tmp/primus-bench-$$}
MODELS=${MODELS:-tiny small wide}
THREADS=${THREADS:-2 1}
VARIANTS=${VARIANTS:-torch primus:onednn:passive primus:onednn:active primus:onednn:unset primus:openblas:passive primus:openblas:active}
VARIANTS_1THREAD=${VARIANTS_1THREAD:-torch primus:onednn:passive}
CONFIG=configs/examples/llama_tiny-pretrain.yaml
NCPU=$(nproc)
SEQS=${SEQS:-}
mkdir -p "$OUT"
RES=$OUT/results.tsv
if [ -n "${TABLE_FROM:-}" ]; then
  [ "$TABLE_FROM" -ef "$RES" ] || cp "$TABLE_FROM" "$RES"
  MODELS=""
else
  : >"$RES"
  maxt=1
  for t in $THREADS; do [ "$t" -gt "$maxt" ] && maxt=$t; done
fi
ROUNDS=${ROUNDS:-1}
[ -n "${TABLE_FROM:-}" ] && ROUNDS=1
# measure_peak FILE: `benchmark peak` on all the run's threads into FILE.
measure_peak() {
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$maxt" \
    "$PRIMUS" benchmark peak -o "$1" >/dev/null 2>"$1.log" ||
    echo "warning: benchmark peak failed; see $1.log" >&2
}
[ -n "${TABLE_FROM:-}" ] || measure_peak "$OUT/peak.tsv"
# The fp32 FMA peak of one core, GFLOP/s: this run's, else the cached one.
PEAK=$(awk -F'\t' '$1=="fp32_fma" && $2==1 {print $3}' "$OUT/peak.tsv" 2>/dev/null)
[ -n "$PEAK" ] || PEAK=$(awk 'NR==1{print $1}' "${PRIMUS_CACHE:-$HOME/.cache/primus}/peak-fp32.txt" 2>/dev/null)
PEAK=${PEAK:-0}

# name: hidden layers heads kv_heads ffn vocab seq batch steps
model_args() {
  case $1 in
    tiny)   echo 128 4 4 2 352 256 128 16 20 ;;
    small)  echo 512 8 8 4 1376 4096 256 4 8 ;;
    wide)   echo 1024 4 16 4 2816 32000 64 16 6 ;;
    124m)   echo 768 12 12 12 2048 50304 256 8 5 ;; # issue 9's reference shape (llama_124M)
    *) echo "unknown model $1" >&2; return 1 ;;
  esac
}

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
hz=$(getconf CLK_TCK)

# run_timed TAG CMD...: runs under /usr/bin/time -v, sets WALL, USER_SYS, RSS_KIB, BG
run_timed() {
  local tag=$1; shift
  local b0 b1 t0 t1
  b0=$(busy_jiffies); t0=$(date +%s.%N)
  /usr/bin/time -v -o "$OUT/$tag.time" "$@" >"$OUT/$tag.log" 2>&1
  local rc=$?
  t1=$(date +%s.%N); b1=$(busy_jiffies)
  WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
  USER_SYS=$(awk -F': ' '/User time|System time/{s+=$2} END{printf "%.2f", s}' "$OUT/$tag.time")
  RSS_KIB=$(awk -F': ' '/Maximum resident set size/{print $2}' "$OUT/$tag.time")
  BG=$(awk -v b="$((b1 - b0))" -v hz="$hz" -v own="$USER_SYS" -v w="$WALL" -v n="$NCPU" \
    'BEGIN{x=(b/hz-own)/(w*n)*100; if (x<0) x=0; printf "%.0f", x}')
  return $rc
}

[ -n "${TABLE_FROM:-}" ] || {
echo "# primus vs PyTorch training throughput - $(date -u +%FT%TZ)"
echo "# CPU: $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), $NCPU cores; fp32 peak ${PEAK} GFLOP/s/core, measured now by \`primus benchmark peak\`:"
awk -F'\t' 'NR>1{printf "#   %s, %s threads: %s GFLOP/s (%s per core)\n", $1, $2, $3, $4}' "$OUT/peak.tsv" 2>/dev/null
echo "# primus: $PRIMUS ($(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ', dirty tree')); torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null) via $PY"
echo "# env: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-<unset>}; torch runs with OMP_WAIT_POLICY=passive and both unset (env -u) in that command only"
echo "# primus: OMP_WAIT_POLICY (exported, or removed for 'unset') and PRIMUS_GEMM as in the impl column; platforms/cpu.sh's OMP_* are setenv()ed after libgomp started, so only exported values count"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg); logs in $OUT"
}

for round in $(seq 1 "$ROUNDS"); do
# Each round's peak (the first round's is the one measured above).
if [ "$round" -gt 1 ]; then
  measure_peak "$OUT/peak-r$round.tsv"
  RPEAK=$(awk -F'\t' '$1=="fp32_fma" && $2==1 {print $3}' "$OUT/peak-r$round.tsv" 2>/dev/null)
else
  RPEAK=$PEAK
fi
[ -n "$MODELS" ] && echo "# round $round of $ROUNDS: fp32 peak ${RPEAK:-?} GFLOP/s a core" >&2
for model in $MODELS; do
  read -r C L H G F V S0 B0 N <<<"$(model_args "$model")" || exit 2
  for S in ${SEQS:-$S0}; do
  B=$B0
  if [ -n "$SEQS" ]; then
    B=$(( ${TOKENS:-$((S0 * B0))} / S ))
    [ "$B" -ge 1 ] || { echo "TOKENS ${TOKENS:-} is below seq $S" >&2; exit 2; }
  fi
  for t in $THREADS; do
    vlist=$VARIANTS
    [ "$t" = 1 ] && vlist=$VARIANTS_1THREAD
    for v in $vlist; do
      tag="$model-t$t-${v//:/-}${SEQS:+-s$S}"
      [ "$ROUNDS" -gt 1 ] && tag="$tag-r$round"
      load=$(cut -d' ' -f1 /proc/loadavg)
      if [ "$v" = torch ]; then
        impl="torch (openblas, passive)"
        run_timed "$tag" env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
          OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" MKL_NUM_THREADS="$t" OMP_WAIT_POLICY=passive \
          "$PY" bench/torch_llama.py --hidden "$C" --layers "$L" --heads "$H" --kv-heads "$G" --ffn "$F" \
          --vocab "$V" --seq "$S" --batch "$B" --steps "$N" --warmup 2 --threads "$t"
        rc=$?
        ms=$(sed -n 's/^RESULT ms_per_step=\([0-9.]*\).*/\1/p' "$OUT/$tag.log")
      else
        IFS=: read -r _ gemm wait dtype <<<"$v"
        impl="primus $gemm $wait${dtype:+ $dtype}"
        bf16=false
        [ "${dtype:-}" = bf16 ] && bf16=true
        if [ "$wait" = unset ]; then wenv=(-u OMP_WAIT_POLICY); else wenv=(OMP_WAIT_POLICY="$wait"); fi
        genv=(PRIMUS_GEMM="$gemm")
        if [ "$gemm" = tuned ]; then
          # `benchmark gemm --tune` once per shape and thread count, then
          # oneDNN with the per-shape winners (docs/benchmark.md).
          tune="$OUT/tune-$model-s$S-b$B-t$t.tsv"
          [ -f "$tune" ] || env "${wenv[@]}" OMP_NUM_THREADS="$t" "$PRIMUS" benchmark gemm --tune \
            --hidden "$C" --heads "$H" --kv-heads "$G" --ffn "$F" --vocab "$V" --tokens $((S * B)) \
            --output "$tune" >"$OUT/$tag.tune.log" 2>&1 ||
            echo "warning: $tag: benchmark gemm --tune failed; see $OUT/$tag.tune.log" >&2
          genv=(PRIMUS_GEMM=onednn PRIMUS_GEMM_TUNE="$tune")
        fi
        run_timed "$tag" env "${wenv[@]}" OMP_NUM_THREADS="$t" "${genv[@]}" \
          "$PRIMUS" train pretrain --config "$CONFIG" \
          hidden_size="$C" num_layers="$L" num_attention_heads="$H" num_query_groups="$G" \
          ffn_hidden_size="$F" vocab_size="$V" seq_length="$S" max_position_embeddings="$S" \
          micro_batch_size="$B" global_batch_size="$B" train_iters="$N" log_interval="$N" \
          mock_data=true save=null eval_iters=0 bf16="$bf16" workspace="$OUT/ws" exp_name="$tag"
        rc=$?
        rundir=$(sed -n 's/.*run directory: //p' "$OUT/$tag.log" | head -1)
        ms=$(awk -F'"step_ms":' '/"step_ms"/{split($0,a,"\"step\":"); split(a[2],b,","); if (b[1]>2) {split($2,c,"}"); s+=c[1]; n++}} END{if (n) printf "%.3f", s/n}' "$rundir/events.jsonl" 2>/dev/null)
        want="GEMM $gemm"
        [ "$gemm" = tuned ] && want="GEMM onednn+tuned"
        grep -q "$want" "$OUT/$tag.log" || echo "warning: $tag: log does not say $want" >&2
      fi
      if [ "$rc" != 0 ] || [ -z "$ms" ]; then
        echo "warning: $tag failed (rc $rc); see $OUT/$tag.log" >&2
        continue
      fi
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$model" "$t" "$impl" "$ms" "$RSS_KIB" "$load" "$BG" "$C" "$L" "$H" "$G" "$F" "$V" "$S" "$B" "$N" \
        "$round" "${RPEAK:-$PEAK}" >>"$RES"
      echo "# done $tag: $ms ms/step, peak RSS $((RSS_KIB / 1024)) MiB, load $load, bg ${BG}%, wall ${WALL}s" >&2
    done
  done
  done
done
done

# The table: flops per token as prm_llama_flops_per_token; ratio = primus
# tokens/s over the torch run's of the same model and threads (>1: primus
# faster).
awk -F'\t' -v OFS='\t' -v peak="$PEAK" '
  function fpt(C, L, H, G, F, V, S,   D) {
    D = C / H
    return 6 * (L * (2 * C * H * D + 2 * C * G * D + 3 * C * F) + V * C) + 12 * L * C * S
  }
  # The median of the n values v[1..n] (sorted in place).
  function median(v, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  {
    if ($17 == "") $17 = 1          # results.tsv of before ROUNDS
    if ($18 == "") $18 = peak
    r[NR] = $0; if ($3 ~ /^torch/) tms[$1 "/" $2 "/" $14 "/" $17] = $4
    if ($17 > rounds) rounds = $17
  }
  END {
    print "| model | threads | impl | round | ms/step | tokens/s | primus/torch (tok/s) | TFLOP/s | % of peak | peak RSS | load / bg% |"
    print "|---|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= NR; i++) {
      split(r[i], f, "\t")
      tok = f[14] * f[15]; tps = tok / (f[4] / 1000)
      tf = fpt(f[8], f[9], f[10], f[11], f[12], f[13], f[14]) * tps / 1e12
      k = f[1] "/" f[2] "/" f[14] "/" f[17]
      ratio = (f[3] ~ /^torch/) ? "1 (ref)" : ((k in tms) ? sprintf("%.2f", tms[k] / f[4]) : "-")
      pct = f[18] > 0 ? sprintf("%.1f%%", 100 * tf * 1000 / (f[18] * f[2])) : "-"
      printf "| %s | %s | %s | %s | %.1f | %.0f | %s | %.3f | %s | %.0f MiB | %s / %s%% |\n", f[1], f[2], f[3], f[17], f[4], tps, ratio, tf, pct, f[5] / 1024, f[6], f[7]
      # per variant over the rounds, for the summary
      g = f[1] "|" f[2] "|" f[3] "|" f[14]
      if (!(g in cnt)) order[++ng] = g
      c = ++cnt[g]; ms[g, c] = f[4]; mf[g, c] = f[18] > 0 ? 100 * tf * 1000 / (f[18] * f[2]) : 0; rss[g, c] = f[5] / 1024
      if (k in tms) rat[g, c] = tms[k] / f[4]; else rat[g, c] = ""
    }
    if (rounds < 2) exit
    printf "\n### Median over %d rounds (each ratio and %% of peak against its own round)\n\n", rounds
    print "| model | threads | impl | seq | rounds | median ms/step | median primus/torch | ratio range | median % of peak | median peak RSS |"
    print "|---|---|---|---|---|---|---|---|---|---|"
    for (o = 1; o <= ng; o++) {
      g = order[o]; n = cnt[g]; split(g, f, "|")
      nr = 0; lo = hi = ""
      for (i = 1; i <= n; i++) {
        a[i] = ms[g, i]; b[i] = mf[g, i]; d[i] = rss[g, i]
        if (rat[g, i] != "") { x[++nr] = rat[g, i]; if (lo == "" || x[nr] < lo) lo = x[nr]; if (hi == "" || x[nr] > hi) hi = x[nr] }
      }
      rt = f[3] ~ /^torch/ ? "1 (ref)" : (nr ? sprintf("%.2f", median(x, nr)) : "-")
      rg = f[3] ~ /^torch/ || !nr ? "" : sprintf("%.2f-%.2f", lo, hi)
      printf "| %s | %s | %s | %s | %d | %.1f | %s | %s | %.1f%% | %.0f MiB |\n", f[1], f[2], f[3], f[4], n, median(a, n), rt, rg, median(b, n), median(d, n)
    }
  }' "$RES" | tee "$OUT/table.md"
# The step-time curve over seq (SEQS, or a results.tsv with several seqs
# of one model, threads and impl): ms/step = a + b seq fitted by least
# squares, the residual of each point, and the attention FLOPs' share. At
# a fixed number of tokens per step everything but attention does the same
# work at every seq, so a straight line means nothing else grows.
awk -F'\t' '
  { k = $1 "|" $2 "|" $3; n[k]++; x[k, n[k]] = $14; y[k, n[k]] = $4; b[k, n[k]] = $15
    att[k, n[k]] = 12 * $9 * $8 * $14; mm[k, n[k]] = 6 * ($9 * (2 * $8 * $8 + 2 * $8 * $11 * ($8 / $10) + 3 * $8 * $12) + $13 * $8) }
  END {
    for (k in n) {
      if (n[k] < 3) continue
      sx = sy = sxx = sxy = 0
      for (i = 1; i <= n[k]; i++) { sx += x[k, i]; sy += y[k, i]; sxx += x[k, i] ^ 2; sxy += x[k, i] * y[k, i] }
      d = n[k] * sxx - sx * sx; if (d == 0) continue
      bb = (n[k] * sxy - sx * sy) / d; aa = (sy - bb * sx) / n[k]
      split(k, f, "|")
      printf "\n### Step time against seq: %s, %s threads, %s (fixed tokens per step)\n\n", f[1], f[2], f[3]
      printf "fit: ms/step = %.1f + %.3f x seq\n\n", aa, bb
      print "| seq | micro batch | ms/step | fit | residual | attention share of FLOPs |"
      print "|---|---|---|---|---|---|"
      for (i = 1; i <= n[k]; i++) {
        fit = aa + bb * x[k, i]
        printf "| %d | %d | %.1f | %.1f | %+.1f%% | %.1f%% |\n", x[k, i], b[k, i], y[k, i], fit, 100 * (y[k, i] - fit) / fit, 100 * att[k, i] / (att[k, i] + mm[k, i])
      }
    }
  }' "$RES" | tee -a "$OUT/table.md"
[ -n "${TABLE_FROM:-}" ] && exit 0
echo
echo "models: $(for m in $MODELS; do read -r C L H G F V S B N <<<"$(model_args "$m")"; printf '%s = hidden %s, layers %s, heads %s/%s kv, ffn %s, vocab %s, seq %s, batch %s, %s steps; ' "$m" "$C" "$L" "$H" "$G" "$F" "$V" "$S" "$B" "$N"; done)"
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
