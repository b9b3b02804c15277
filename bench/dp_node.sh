#!/usr/bin/env bash
# dp_node.sh - one node's training throughput with 1 rank against
# `primus direct --nproc N` (issue 30: N data-parallel ranks on one node must
# be no slower than one rank with all the cores; docs/benchmarks.md).
#
# The same experiment (mock data, the same global batch, so the same tokens a
# step) runs as 1 rank and as N ranks, in rounds; the order inside a round
# alternates (1 then N, N then 1, ...) so that drift in the machine's load
# falls on both. OMP_NUM_THREADS is left unset: the launcher gives the one
# rank every core and each of N ranks a disjoint share (docs/launcher.md).
# Throughput of a run = the tokens over the step time of its steps after the
# first $SKIP (events.jsonl of rank 0: global tokens and step_ms a step).
# Prints a row per run, then the median tokens/s of each set-up and the ratio
# N ranks / 1 rank, and says whether N ranks were no lower than one.
# Run it on a quiet machine: other work shows up as noise.
#
#   bench/dp_node.sh                                  # 2 ranks, 5 rounds, the default model
#   NPROC=4 ROUNDS=3 bench/dp_node.sh
#   HIDDEN=64 LAYERS=2 SEQ=32 GBS=4 ITERS=4 SKIP=1 ROUNDS=1 bench/dp_node.sh   # a dry run
#
# Settings (environment): PRIMUS_BIN (build/primus), NPROC (2), ROUNDS (5),
# ITERS (14), SKIP (2), HIDDEN (256), LAYERS (4), HEADS (4), KV (2),
# FFN (704), VOCAB (4096), SEQ (256), GBS (8, global batch; a multiple of
# NPROC x MBS), MBS (GBS / NPROC: one micro-batch a rank a step with N ranks,
# N with one), OUT (a new temporary folder), NICE (empty; e.g. "nice -n 5").
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
P=${PRIMUS_BIN:-$SRC/build/primus}
NPROC=${NPROC:-2}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-14}
SKIP=${SKIP:-2}
HIDDEN=${HIDDEN:-256}
LAYERS=${LAYERS:-4}
HEADS=${HEADS:-4}
KV=${KV:-2}
FFN=${FFN:-704}
VOCAB=${VOCAB:-4096}
SEQ=${SEQ:-256}
GBS=${GBS:-8}
MBS=${MBS:-$((GBS / NPROC))}
NICE=${NICE:-}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dp-node-XXXXXX")}

die() { echo "dp_node.sh: $*" >&2; exit 2; }
[[ -x $P ]] || die "$P: no primus binary (build it, or set PRIMUS_BIN)"
command -v mpirun >/dev/null || die "mpirun is missing (Debian: openmpi-bin)"
((NPROC >= 2)) || die "NPROC=$NPROC: compare at least 2 ranks with 1"
((ITERS > SKIP)) || die "ITERS=$ITERS must exceed SKIP=$SKIP"
((MBS >= 1 && GBS % (MBS * NPROC) == 0)) ||
  die "GBS=$GBS must be a multiple of MBS=$MBS x NPROC=$NPROC"
mkdir -p "$OUT"
cd "$OUT"
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS MKL_NUM_THREADS PRIMUS_RANKS_PER_NODE
unset PRIMUS_FAULT_INJECT PRIMUS_RUN_DIR PRIMUS_RUN_ID

cat >exp.yaml <<Y
work_group: bench
user_name: dp-node
exp_name: dp-node
workspace: $OUT/ws
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
    overrides:
      hidden_size: $HIDDEN
      num_layers: $LAYERS
      num_attention_heads: $HEADS
      num_query_groups: $KV
      ffn_hidden_size: $FFN
      vocab_size: $VOCAB
      seq_length: $SEQ
      max_position_embeddings: $SEQ
      micro_batch_size: $MBS
      global_batch_size: $GBS
      train_iters: $ITERS
      log_interval: $ITERS
      eval_iters: 0
      mock_data: true
      save: null
Y

# tps RUN_DIR: tokens/s over the steps after SKIP (rank 0's events.jsonl).
tps() {
  awk -v skip="$SKIP" '
    /^\{"step":/ {
      if (match($0, /"step":[0-9]+/) == 0) next
      s = substr($0, RSTART + 7, RLENGTH - 7) + 0
      if (s <= skip) next
      if (!match($0, /"tokens":[0-9]+/)) next
      t = substr($0, RSTART + 9, RLENGTH - 9) + 0
      if (!match($0, /"step_ms":[0-9.]+/)) next
      ms = substr($0, RSTART + 10, RLENGTH - 10) + 0
      tok += t; sec += ms / 1e3; n++
    }
    END { if (n && sec > 0) printf "%.1f %d\n", tok / sec, n; else print "nan 0" }' "$1/events.jsonl"
}

# one RANKS ROUND: trains once, prints "RANKS ROUND tokens/s steps".
one() {
  local ranks=$1 round=$2 log="run-$1-$2.log" rc=0 before after rd
  before=$(ls -d ws/bench/dp-node/dp-node/run-* 2>/dev/null | wc -l)
  if ((ranks == 1)); then
    $NICE "$P" train pretrain --config exp.yaml >"$log" 2>&1 || rc=$?
  else
    $NICE "$P" direct --nproc "$ranks" -- train pretrain --config exp.yaml >"$log" 2>&1 || rc=$?
  fi
  rd=$(ls -td ws/bench/dp-node/dp-node/run-* 2>/dev/null | head -1)
  after=$(ls -d ws/bench/dp-node/dp-node/run-* 2>/dev/null | wc -l)
  if ((rc != 0 || after <= before)) || [[ ! -s $rd/events.jsonl ]]; then
    echo "dp_node.sh: the $ranks-rank run of round $round failed (exit $rc); its output: $OUT/$log" >&2
    tail -5 "$log" >&2
    exit 3
  fi
  echo "$ranks $round $(tps "$rd")"
}

echo "# output: $OUT"
echo "# model: hidden $HIDDEN, $LAYERS layers, $HEADS heads / $KV KV groups, FFN $FFN, vocab $VOCAB," \
  "seq $SEQ; global batch $GBS (micro-batch $MBS); $ITERS steps, the first $SKIP left out; $(nproc) CPUs"
printf '%-6s %-6s %12s %6s\n' ranks round tokens/s steps
: >results.txt
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order="1 $NPROC"; else order="$NPROC 1"; fi
  for n in $order; do
    line=$(one "$n" "$r")
    echo "$line" >>results.txt
    read -r a b c d <<<"$line"
    printf '%-6s %-6s %12s %6s\n' "$a" "$b" "$c" "$d"
  done
done

# The medians and the ratio.
awk -v n="$NPROC" '
  function median(arr, k,   i, j, t) {
    for (i = 2; i <= k; i++) for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
    return k % 2 ? arr[(k + 1) / 2] : (arr[k / 2] + arr[k / 2 + 1]) / 2
  }
  $1 == 1 { one[++a] = $3 }
  $1 == n { many[++b] = $3 }
  END {
    m1 = median(one, a); mn = median(many, b)
    printf "median tokens/s: 1 rank %.1f, %d ranks %.1f; ratio %d ranks / 1 rank: %.3f\n", m1, n, mn, n, mn / m1
    if (mn >= m1) printf "%d ranks are no lower than 1 rank on this node\n", n
    else printf "%d ranks are LOWER than 1 rank on this node (%.1f%% less)\n", n, 100 * (1 - mn / m1)
  }' results.txt
