#!/usr/bin/env bash
# projection-validate.sh - checks `primus analyze projection` against measured
# data-parallel runs on this machine (docs/analyze.md, "primus analyze
# projection"). It
#   1. measures this node's rates with primus' own benchmarks at the
#      validation model's shapes (GEMM, attention, memory triad: one core,
#      best of $RATE_RUNS; launch latency; all-reduce bus bandwidth and
#      latency between 2 ranks) and writes them as a hardware file with
#      cores_per_node = nproc (N ranks get nproc/N cores each: 4 ranks on 2
#      cores time-share them),
#   2. trains the model with `primus direct --nproc N -- train pretrain` for
#      N in $RANKS, $REPEATS times each (in turns), and takes the median over steps
#      (without the first $SKIP) of step_ms in events.jsonl, then the median
#      over the repeats,
#   3. projects the same layouts with --gpus-per-node N and prints the table
#      ranks | projected | measured (median run, and best run: the rates are
#      best-of figures too) | error, first with the rates as measured, then
#      with `efficiency` fitted on the best run of FIT_RANKS (2) ranks, so
#      the other rank counts are predictions from that one point.
# Everything runs under `nice`; other work on the machine shows up as noise.
#
#   bench/projection-validate.sh                        # build/primus, 1 2 4 ranks, 5 repeats
#   PRIMUS_BIN=/tmp/hB/primus RANKS="1 2" REPEATS=5 bench/projection-validate.sh
#   HW=hw.yaml bench/projection-validate.sh             # skip step 1, use this hardware file
#   HW=hw.yaml MEASURED=measured.tsv bench/projection-validate.sh   # tables only, from an earlier run
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
P=${PRIMUS_BIN:-$SRC/build/primus}
RANKS=${RANKS:-"1 2 4"}
REPEATS=${REPEATS:-5}
ITERS=${ITERS:-12}
SKIP=${SKIP:-2}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/pj-validate-XXXXXX")}
PY=${PY:-/usr/bin/python3}
NICE=${NICE:-nice -n 5}
mkdir -p "$OUT"
cd "$OUT"
echo "output: $OUT"

# The validation model: ~3 M parameters (12 MB of fp32 gradients), 512
# tokens per step, so that the gradient all-reduce is a few per cent of a step.
cat >model.yaml <<'Y'
hidden_size: 256
num_layers: 4
num_attention_heads: 4
num_query_groups: 2
ffn_hidden_size: 704
vocab_size: 256
seq_length: 64
max_position_embeddings: 64
Y
cat >exp.yaml <<Y
work_group: bench
user_name: projection
exp_name: pj-validate
workspace: $OUT/ws
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
    overrides:
$(sed 's/^/      /' model.yaml)
      mock_data: true
      micro_batch_size: 1
      global_batch_size: 8
      train_iters: $ITERS
      log_interval: $ITERS
      eval_iters: 0
      save: null
      lr_warmup_iters: 0
Y

# --- 1. the node's rates ------------------------------------------------------
if [[ -z ${HW:-} ]]; then
  HW=$OUT/hw.yaml
  # One core's rates (one thread): with cores_per_node, N ranks on the node
  # get nproc/N cores each. Each figure is the best of $RATE_RUNS runs, so a
  # run disturbed by other work on the machine does not lower it.
  for i in $(seq "${RATE_RUNS:-3}"); do
    OMP_NUM_THREADS=1 $NICE "$P" benchmark gemm-dense --model model.yaml --seq-length 64 --micro-batch-size 1 \
      --duration 0.3 -o "gemm-$i.jsonl" >/dev/null 2>&1
    OMP_NUM_THREADS=1 $NICE "$P" benchmark attention --batch 1 --seq 64 --heads 4 --kv-heads 2 --head-dim 64 \
      --duration 1 -o "attn-$i.jsonl" >/dev/null 2>&1
    OMP_NUM_THREADS=1 $NICE "$P" benchmark memory --size-mb 64 --duration 1 -o "mem-$i.jsonl" >/dev/null 2>&1
    # Dispatch latency needs the threads of a whole-node rank.
    OMP_NUM_THREADS=$(nproc) $NICE "$P" benchmark launch --duration 1 -o "launch-$i.jsonl" >/dev/null 2>&1
  done
  # The all-reduce is measured at the size of the model's gradients (one bucket).
  printf 'peak_gflops: 1\ngemm_gflops: 1\nmem_bw_gbs: 1\n' >hw-sizes.yaml
  GRAD_BYTES=$("$P" analyze projection --config exp.yaml --hardware hw-sizes.yaml --json |
    "$PY" -c 'import json,sys; print(int(json.load(sys.stdin)["memory_bytes"]["grads"]))')
  for i in $(seq "${RATE_RUNS:-3}"); do
    $NICE "$P" direct --nproc 2 -- benchmark allreduce --min-bytes 8 --max-bytes 8 --num-sizes 1 \
      --warmup 50 --iters 200 -o "ar-small-$i.jsonl" >/dev/null 2>&1
    $NICE "$P" direct --nproc 2 -- benchmark allreduce --min-bytes "$GRAD_BYTES" --max-bytes "$GRAD_BYTES" \
      --num-sizes 1 --warmup 10 --iters 40 -o "ar-grad-$i.jsonl" >/dev/null 2>&1
  done
  "$PY" - "$HW" "${PRIMUS_CACHE:-$HOME/.cache/primus}/peak-fp32.txt" "$(nproc)" "${RATE_RUNS:-3}" <<'PYEOF'
import json, sys
def rows(f): return [json.loads(l) for l in open(f) if l.strip()]
out, peakf, cores, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def gemm_rate(i):
    g = rows(f"gemm-{i}.jsonl")
    # Each GEMM's best call: the machine undisturbed by other work.
    return sum(2.0 * r["M"] * r["N"] * r["K"] for r in g) / sum(r["min_ms"] * 1e-3 for r in g) / 1e9
def attn_rate(i):
    a = {r["pass"]: r for r in rows(f"attn-{i}.jsonl")}
    fl = lambda r: r["tflops"] * 1e12 * r["avg_ms"] * 1e-3
    return (fl(a["forward"]) + fl(a["backward"])) / ((a["forward"]["avg_ms"] + a["backward"]["avg_ms"]) * 1e-3) / 1e9
ix = range(1, runs + 1)
gemm = max(gemm_rate(i) for i in ix)
attn = max(attn_rate(i) for i in ix)
mem = max(rows(f"mem-{i}.jsonl")[0]["gbps"] for i in ix)
launch = min({r["test"]: r["median_us"] for r in rows(f"launch-{i}.jsonl")}["kernel_pool_wakeup"] for i in ix)
# Best calls too. A 2-rank ring all-reduce has 2(n-1) = 2 hops: an 8-byte
# call is two latencies; at 2 ranks busbw = algbw = bytes / time.
lat_us = min(rows(f"ar-small-{i}.jsonl")[0]["min_ms"] for i in ix) * 1e3 / 2.0
busbw = max(rows(f"ar-grad-{i}.jsonl")[0]["bytes"] / (rows(f"ar-grad-{i}.jsonl")[0]["min_ms"] * 1e-3) / 1e9 for i in ix)
peak = float(open(peakf).read().split()[0])
with open(out, "w") as f:
    f.write("# this node, measured by bench/projection-validate.sh at the validation model's shapes;\n")
    f.write("# rates of one core (one thread; GEMM and all-reduce: best call), best of %d runs\n" % runs)
    f.write(f"peak_gflops: {peak:.1f}\ngemm_gflops: {gemm:.1f}\nattention_gflops: {attn:.2f}\n")
    f.write(f"mem_bw_gbs: {mem:.2f}\nintra_node_busbw_gbs: {busbw:.3f}\n")
    f.write(f"intra_node_latency_us: {lat_us:.2f}\nkernel_launch_us: {launch:.2f}\n")
    f.write(f"overlap_fraction: 0\ncores_per_node: {cores}\n")
PYEOF
fi
echo "hardware: $HW"
cat "$HW"

# --- 2. measured runs ---------------------------------------------------------
: >measured.tsv
if [[ -n ${MEASURED:-} ]]; then cp "$MEASURED" measured.tsv; RANKS_RUN=""; else RANKS_RUN=$RANKS; fi
# Rank counts take turns (1 2 4 1 2 4 ...), so that load from other work
# falls on all of them alike.
for rep in $(seq "$REPEATS"); do
  for n in $RANKS_RUN; do
    ws=$OUT/ws-$n-$rep
    if [[ $n == 1 ]]; then
      $NICE "$P" train pretrain --config exp.yaml workspace="$ws" >"run-$n-$rep.log" 2>&1
    else
      $NICE "$P" direct --nproc "$n" -- train pretrain --config exp.yaml workspace="$ws" >"run-$n-$rep.log" 2>&1
    fi
    ev=$(ls -d "$ws"/*/*/*/run-*/events.jsonl | tail -1)
    read -r ms comm < <("$PY" -c '
import json, statistics, sys
s = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{\"step\"")][int(sys.argv[2]):]
print(statistics.median(r["step_ms"] for r in s), statistics.median(r.get("comm_ms", 0) for r in s))' "$ev" "$SKIP")
    echo "$n ranks, repeat $rep: median step $ms ms, comm $comm ms, load $(cut -d' ' -f1 /proc/loadavg) ($ev)"
    printf '%s\t%s\t%s\n' "$n" "$ms" "$comm" >>measured.tsv
  done
done

# --- 3. projections and the table ---------------------------------------------
# table HWFILE: one row per rank count.
table() {
  echo "| ranks | projected ms/step | measured ms/step, median of $REPEATS runs | range | error vs median | best run | error vs best | projected / measured comm ms (median) | projected / measured tokens/s (median) |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for n in $RANKS; do
    "$P" analyze projection --config exp.yaml --hardware "$1" --gpus-per-node "$n" --json >"proj-$n.json"
    "$PY" - "$n" "proj-$n.json" <<'PYEOF'
import json, statistics, sys
n, proj = sys.argv[1], json.load(open(sys.argv[2]))
m = [float(l.split()[1]) for l in open("measured.tsv") if l.split()[0] == n]
comm = statistics.median(float(l.split()[2]) for l in open("measured.tsv") if l.split()[0] == n)
med = statistics.median(m)
p = proj["step_ms"]["total"]
tokens = proj["layout"]["global_batch_size"] * proj["model"]["seq_length"]
best = min(m)
print(f"| {n} | {p:.1f} | {med:.1f} | {min(m):.1f}-{max(m):.1f} | {100 * (p - med) / med:+.1f}% | {best:.1f} | "
      f"{100 * (p - best) / best:+.1f}% | {proj['step_ms']['dp_comm']:.1f} / {comm:.1f} | {tokens / p * 1e3:.0f} / {tokens / med * 1e3:.0f} |")
PYEOF
  done
}
echo
echo "With the measured rates as they are (efficiency 1):"
table "$HW"

# The same with `efficiency` fitted on one layout (FIT_RANKS, its best run):
# the projection then predicts the other rank counts from that one point.
FIT_RANKS=${FIT_RANKS:-2}
"$PY" - "$P" "$HW" "$FIT_RANKS" <<'PYEOF'
import json, subprocess, sys
P, hw, n = sys.argv[1], sys.argv[2], sys.argv[3]
best = min(float(l.split()[1]) for l in open("measured.tsv") if l.split()[0] == n)
base = [l for l in open(hw) if not l.startswith("efficiency:")]
def proj(e):
    open("hw-fitted.yaml", "w").writelines(base + [f"efficiency: {e:.4f}\n"])
    out = subprocess.run([P, "analyze", "projection", "--config", "exp.yaml", "--hardware", "hw-fitted.yaml",
                          "--gpus-per-node", n, "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["step_ms"]["total"]
lo, hi = 0.02, 4.0
for _ in range(40):
    mid = (lo + hi) / 2
    if proj(mid) > best: lo = mid
    else: hi = mid
proj((lo + hi) / 2)
print(f"efficiency fitted on {n} ranks (best run {best:.1f} ms): {(lo + hi) / 2:.3f}")
PYEOF
echo
echo "With efficiency fitted on $FIT_RANKS ranks (hw-fitted.yaml):"
table "$OUT/hw-fitted.yaml"
