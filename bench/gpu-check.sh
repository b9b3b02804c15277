#!/usr/bin/env bash
# bench/gpu-check.sh - issue 23's checks on a GPU machine, in one run of
# about 8 minutes, from a tree packed by bench/gpu-pack.sh:
#
#   bash .device/run-packed.sh .device/primus.tar.xz bash bench/gpu-check.sh
#
# Stages (STAGES="env kernels model parity dp resume bf16 bench race" by default; each
# logs to $OUT/<stage>.log and prints one summary line):
#   env      primus env, nvidia-smi, preflight's gpu.cuda
#   kernels  test-device --backend cuda: every operator against its CPU kernel
#            (bf16 attention and the fused operators too), then attention
#            again with the tiled kernels, (fp32 and bf16) through the GEMM
#            path with 16-row strips, bf16 through the GEMM path (the flash
#            kernels' twin), the GEMMs through cuBLASLt (PRIMUS_CUDA_GEMM=lt),
#            the fused operators with PRIMUS_DEVICE_UNFUSED=1, and the
#            element-wise operators with PRIMUS_CUDA_ELTWISE=scalar
#   model    test-model-device --backend cuda: the model against the CPU model
#            (losses 1e-5, gradients and 10 AdamW steps 1e-4, KV cache)
#   parity   `train pretrain` 10 fp32 steps on cuda and on cpu from the same
#            seed: per-step loss within 1e-5, gradient norm 1e-4, every
#            tensor of the saved weights within 1e-4 (relative)
#   dp       two data-parallel ranks sharing the GPU (primus direct --nproc 2,
#            the machine's mpirun) against one rank: losses within 1e-5
#   resume   a GPU run's iteration-5 checkpoint resumed on the GPU (the same
#            losses, bit for bit) and on the CPU (within 1e-5)
#   bf16     a 300-step llama_tiny curve in bf16 against fp32, both on the
#            GPU: every step's loss within 2%; and the bf16 curve again with
#            PRIMUS_DEVICE_UNFUSED=1: the same losses and norms bit for bit
#   bench    issue 24's GPU benchmarks and preflight: benchmark peak (the
#            GPU's bf16/fp32 8192^3 GEMM and 1 GiB copy), gemm, attention,
#            memory and train with --device cuda (tables as jsonl/csv under
#            $OUT/bench/), figures checked for a device timer and plausible
#            bounds (bf16 GEMM >= 200 TFLOP/s, copy >= 1000 GB/s, nothing
#            above its data-sheet peak); preflight calibrate into a private
#            HOME, then check --perf --only perf.gpu_ against it (no FAIL)
#            and gpu.memory
#   profile  where a step's time goes: the race's primus and primus-before
#            runs (12 steps; PROFILE_VARIANTS picks others, primus-tuned
#            profiled on its second run) with PRIMUS_DEVICE_PROFILE, each operator and
#            GEMM shape timed ($OUT/profile-*.md), and test-device's checks
#            once more through the profiling table
#   safe     NaN rollback, crash restart (both ending on the fault-free
#            run's weights bit for bit), a CPU checkpoint resumed on the GPU,
#            greedy generation against the CPU's, out of device memory
#   attention  benchmark attention --device cuda --dtype bf16, the flash
#            kernels and PRIMUS_CUDA_ATTENTION=gemm, at the race's shape and a
#            Llama-3-8B-like one
#   race     bench/gpu_race.sh: primus (and its variants without each of
#            issue 24's changes, and primus-before without all) against
#            PyTorch eager and compiled at llama_124M, seq 1024, micro-batch
#            16, bf16, in RACE_ROUNDS turns (3) and their medians
#            (RACE_VARIANTS picks the variants)
#   maxbatch the largest micro-batch primus and PyTorch eager train at, the
#            race's shape otherwise (bench/gpu_race.sh's MAXBATCH search from
#            32; MAXBATCH_VARIANTS picks the variants)
# Exit status: the number of stages that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/primus-gpu-check}
mkdir -p "$OUT"
P=${PRIMUS_PACKED:?run through run-packed.sh (PRIMUS_PACKED unset)}
export LD_LIBRARY_PATH=$P/.device/extra:${LD_LIBRARY_PATH:-}
export PRIMUS_CUDA_MODULE=${PRIMUS_CUDA_MODULE:-$P/build/libprimus-cuda.so}
export PRIMUS_HOME=$P
BIN=$P/build/primus
STAGES=${STAGES:-env kernels model parity dp resume bf16 bench race}
W=$(mktemp -d)
failed=0
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
stage() { # NAME SECONDS CMD...: runs CMD (a program or a function below) with a
  # limit, its output in $OUT/NAME.log
  local name=$1 secs=$2 t0=$SECONDS rc
  shift 2
  if declare -F "$1" >/dev/null; then set -- bash -c "$*"; fi
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  if ((rc == 0)); then say "PASS $name ($((SECONDS - t0)) s)"; else
    failed=$((failed + 1)); say "FAIL $name (exit $rc, $((SECONDS - t0)) s): $(tail -3 "$OUT/$name.log" | tr '\n' ' ')"; fi
}

# An experiment on the llama_tiny preset (hidden 128, 4 layers, seq 128) or
# another model preset, with the given overrides, into $W/NAME.yaml.
exp() { # NAME MODEL KEY:VALUE...
  local name=$1 model=$2
  shift 2
  {
    printf 'work_group: gpu\nuser_name: check\nexp_name: %s\nworkspace: %s/ws\n' "$name" "$W"
    printf 'modules:\n  pre_trainer:\n    framework: native\n    config: pre_trainer.yaml\n'
    printf '    model: %s\n    overrides:\n' "$model"
    for kv in "$@"; do printf '      %s\n' "$kv"; done
  } > "$W/$name.yaml"
}
events() { echo "$(ls -d "$W"/ws/gpu/check/"$1"/run-* | tail -1)/events.jsonl"; }

# A structured text corpus (paragraphs over a small word list), for curves
# that fall; Python's seeded generator, so every machine writes the same
# file (the GPU machine's awk gave another corpus on each start).
python3 - "$W/corpus.txt" <<'PY'
import random, sys
r = random.Random(7)
w = "the a jury said grand county election was to of and in that for it on by city".split()
with open(sys.argv[1], "w") as f:
    for p in range(3000):
        f.write(" ".join(" ".join(r.choice(w) for _ in range(r.randint(4, 11))) + "."
                         for _ in range(r.randint(3, 6))) + "\n\n")
PY

check_env() {
  "$BIN" env && nvidia-smi && "$BIN" preflight check --gpu
}

check_parity() {
  local common=("mock_data: true" "micro_batch_size: 4" "global_batch_size: 8" "train_iters: 10"
                "lr: 1.0e-3" "lr_warmup_iters: 2" "save_interval: 10" "log_interval: 1")
  exp par_gpu llama_tiny.yaml "${common[@]}" "device: ${GPU_DEVICE:-cuda}" "save: $W/ck-gpu"
  exp par_cpu llama_tiny.yaml "${common[@]}" "device: cpu" "save: $W/ck-cpu"
  "$BIN" train pretrain --config "$W/par_gpu.yaml" || return 1
  "$BIN" train pretrain --config "$W/par_cpu.yaml" || return 1
  python3 - "$(events par_gpu)" "$(events par_cpu)" "$W/ck-gpu/iter_0000010/model.safetensors" \
    "$W/ck-cpu/iter_0000010/model.safetensors" <<'PY'
import array, json, math, struct, sys
def steps(p):
    return [json.loads(l) for l in open(p) if l.startswith('{"step"')]
def st(p):  # safetensors (F32, little-endian) without numpy
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); d = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a = array.array("f"); a.frombytes(d[v["data_offsets"][0]:v["data_offsets"][1]]); out[k] = a
    return out
def rel(a, b):
    num = math.fsum((x - y) ** 2 for x, y in zip(a, b)); den = math.fsum(y * y for y in b)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)
g, c = steps(sys.argv[1]), steps(sys.argv[2])
assert len(g) == len(c) == 10, (len(g), len(c))
bad = 0
for a, b in zip(g, c):
    rl = abs(a["loss"] - b["loss"]) / abs(b["loss"]); rn = abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"])
    ok = rl <= 1e-5 and rn <= 1e-4
    bad += not ok
    print("step %2d loss %.8f vs %.8f (rel %.2e)  norm %.6f vs %.6f (rel %.2e) %s"
          % (a["step"], a["loss"], b["loss"], rl, a["grad_norm"], b["grad_norm"], rn, "ok" if ok else "OFF"))
A, B = st(sys.argv[3]), st(sys.argv[4])
worst = max((rel(A[k], B[k]), k) for k in B)
print("weights after 10 steps: worst tensor %s rel %.2e" % (worst[1], worst[0]))
bad += worst[0] > 1e-4
sys.exit(1 if bad else 0)
PY
}

check_bf16() {
  local common=("data_path: $W/corpus.txt" "tokenizer_type: ByteTokenizer" "micro_batch_size: 16"
                "global_batch_size: 16" "train_iters: 300" "lr: 1.0e-3" "lr_warmup_iters: 30"
                "log_interval: 50" "device: ${GPU_DEVICE:-cuda}")
  exp b_fp32 llama_tiny.yaml "${common[@]}"
  exp b_bf16 llama_tiny.yaml "${common[@]}" "bf16: true"
  exp b_bf16u llama_tiny.yaml "${common[@]}" "bf16: true"
  "$BIN" train pretrain --config "$W/b_fp32.yaml" || return 1
  "$BIN" train pretrain --config "$W/b_bf16.yaml" || return 1
  # The fused operators' twins: the same curve bit for bit.
  PRIMUS_DEVICE_UNFUSED=1 "$BIN" train pretrain --config "$W/b_bf16u.yaml" || return 1
  cmp <(grep '^{"step"' "$(events b_bf16)" | sed 's/.*"loss":\([^,]*\),.*"grad_norm":\([^,]*\),.*/\1 \2/') \
      <(grep '^{"step"' "$(events b_bf16u)" | sed 's/.*"loss":\([^,]*\),.*"grad_norm":\([^,]*\),.*/\1 \2/') ||
    { echo "bf16: fused and unfused (PRIMUS_DEVICE_UNFUSED=1) curves differ"; return 1; }
  echo "bf16: fused and unfused curves identical"
  python3 - "$(events b_fp32)" "$(events b_bf16)" <<'PY'
import json, sys
f = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.startswith('{"step"')]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if l.startswith('{"step"')]
assert len(f) == len(b) == 300
worst = max(abs(x - y) / y for x, y in zip(b, f))
print("fp32 %.4f -> %.4f, bf16 %.4f -> %.4f, worst step %.3e (bar 2e-2)" % (f[0], f[-1], b[0], b[-1], worst))
sys.exit(0 if worst <= 0.02 and f[-1] < f[0] - 0.5 else 1)
PY
}

# Two data-parallel ranks sharing the GPU (mpirun through primus direct)
# against one rank with the same global batch: per-step losses within 1e-5.
check_dp() {
  local common=("mock_data: true" "micro_batch_size: 4" "global_batch_size: 8" "train_iters: 8"
                "lr: 1.0e-3" "lr_warmup_iters: 2" "log_interval: 1" "device: ${GPU_DEVICE:-cuda}")
  exp dp_one llama_tiny.yaml "${common[@]}"
  exp dp_two llama_tiny.yaml "${common[@]}"
  "$BIN" train pretrain --config "$W/dp_one.yaml" || return 1
  "$BIN" direct --nproc 2 -- train pretrain --config "$W/dp_two.yaml" || return 1
  python3 - "$(events dp_one)" "$(events dp_two)" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.startswith('{"step"')]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if l.startswith('{"step"')]
assert len(a) == len(b) == 8, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("1 rank %.6f -> %.6f, 2 ranks %.6f -> %.6f, worst step rel %.2e (bar 1e-5)" % (a[0], a[-1], b[0], b[-1], worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY
}

# Resume: 10 steps on the GPU saving at 5; from iteration 5 again on the GPU
# (bit-exact: the same losses to the last bit) and on the CPU (within 1e-5).
check_resume() {
  local common=("mock_data: true" "micro_batch_size: 4" "global_batch_size: 8" "train_iters: 10"
                "lr: 1.0e-3" "lr_warmup_iters: 2" "log_interval: 1" "save_interval: 5")
  exp rs_full llama_tiny.yaml "${common[@]}" "device: ${GPU_DEVICE:-cuda}" "save: $W/rs"
  "$BIN" train pretrain --config "$W/rs_full.yaml" || return 1
  for d in "${GPU_DEVICE:-cuda}" cpu; do
    rm -rf "$W/rs-$d" && mkdir -p "$W/rs-$d" && cp -r "$W/rs/iter_0000005" "$W/rs-$d/" &&
      echo 5 > "$W/rs-$d/latest_checkpointed_iteration.txt" || return 1
    exp "rs_$d" llama_tiny.yaml "${common[@]}" "device: $d" "load: $W/rs-$d" "save: $W/rs-$d" \
      "auto_continue_train: true"
    "$BIN" train pretrain --config "$W/rs_$d.yaml" || return 1
  done
  python3 - "$(events rs_full)" "$(events "rs_${GPU_DEVICE:-cuda}")" "$(events rs_cpu)" <<'PY'
import json, sys
def steps(p):
    return {e["step"]: e["loss"] for e in (json.loads(l) for l in open(p) if l.startswith('{"step"'))}
full, same, cpu = (steps(p) for p in sys.argv[1:4])
late = [k for k in sorted(full) if k > 5]
assert late and all(k in same and k in cpu for k in late), (sorted(full), sorted(same), sorted(cpu))
exact = all(full[k] == same[k] for k in late)
worst = max(abs(full[k] - cpu[k]) / abs(full[k]) for k in late)
print("steps %s: same-device resume %s; GPU -> CPU worst rel %.2e (bar 1e-5)"
      % (late, "bit-exact" if exact else "DIFFERS", worst))
sys.exit(0 if exact and worst <= 1e-5 else 1)
PY
}

check_kernels() {
  local t=$P/build/tests/test-device rc=0
  # test_open also checks the module loader against the stand-in module.
  PRM_TEST_FAKE_MODULE=$P/build/tests/libprm-fake-device.so "$t" --backend cuda || rc=1
  echo "== attention, PRIMUS_CUDA_ATTENTION=tiled"
  PRIMUS_CUDA_ATTENTION=tiled "$t" --backend cuda --only test_attention || rc=1
  echo "== attention (fp32 and bf16 through the GEMM path), PRIMUS_CUDA_ATTENTION_STRIP=16"
  PRIMUS_CUDA_ATTENTION=gemm PRIMUS_CUDA_ATTENTION_STRIP=16 "$t" --backend cuda --only 'test_attention*' || rc=1
  echo "== bf16 attention through the GEMM path (the flash kernels' twin), PRIMUS_CUDA_ATTENTION=gemm"
  PRIMUS_CUDA_ATTENTION=gemm "$t" --backend cuda --only test_attention_bf16 || rc=1
  echo "== the GEMMs through cuBLASLt, PRIMUS_CUDA_GEMM=lt"
  PRIMUS_CUDA_GEMM=lt "$t" --backend cuda --only 'test_*gemm*' || rc=1
  PRIMUS_CUDA_GEMM=lt "$t" --backend cuda --only test_lmhead_xent || rc=1
  echo "== the fused operators' twins, PRIMUS_DEVICE_UNFUSED=1 (the harness flips it itself too)"
  PRIMUS_DEVICE_UNFUSED=1 "$t" --backend cuda --only test_fused || rc=1
  echo "== the element-wise operators' first kernels, PRIMUS_CUDA_ELTWISE=scalar (test_eltwise_paths opens both)"
  for x in test_embedding test_rmsnorm test_rope test_swiglu_add test_fused test_eltwise_paths; do
    PRIMUS_CUDA_ELTWISE=scalar "$t" --backend cuda --only $x || rc=1
  done
  return $rc
}

check_profile() {
  local v
  for v in ${PROFILE_VARIANTS:-primus primus-before}; do
    PRIMUS_DEVICE_PROFILE=$OUT/profile-$v.md PRIMUS="$BIN" OUT="$W/prof-$v" VARIANTS=$v STEPS=12 WARMUP=2 \
      ROUNDS=$([[ $v == primus-tuned ]] && echo 2 || echo 1) \
      bash bench/gpu_race.sh || return 1
    grep -q '^| gemm_bf16 |' "$OUT/profile-$v.md" || { echo "no profile from $v"; return 1; }
    head -30 "$OUT/profile-$v.md"
  done
  PRIMUS_DEVICE_PROFILE=$W/profile-test.md PRM_TEST_FAKE_MODULE=$P/build/tests/libprm-fake-device.so \
    "$P/build/tests/test-device" --backend cuda || return 1
  grep -q "the device's timer" "$W/profile-test.md"
}

# SaFE and the rest of a run on the GPU: a NaN rolled back and a crash
# restarted end on the fault-free GPU run's weights (bit for bit: the
# kernels are deterministic); a CPU checkpoint resumed on the GPU (losses
# within 1e-5 of the CPU's own run); greedy generation with the KV cache
# gives the CPU's text; a micro-batch too large for the GPU is exit 3
# naming the largest that fits.
check_safe() {
  local d=${GPU_DEVICE:-cuda} rc=0
  local common=("data_path: $W/corpus.txt" "tokenizer_type: ByteTokenizer" "micro_batch_size: 4"
                "global_batch_size: 8" "train_iters: 8" "lr: 1.0e-3" "lr_warmup_iters: 2"
                "log_interval: 1" "save_interval: 4")
  exp sf_ref llama_tiny.yaml "${common[@]}" "device: $d" "save: $W/sf-ref"
  exp sf_cpu llama_tiny.yaml "${common[@]}" "device: cpu" "save: $W/sf-cpu"
  exp sf_nan llama_tiny.yaml "${common[@]}" "device: $d" "save: $W/sf-nan" "load: $W/sf-nan" \
    "auto_continue_train: true" "fault_tolerance: {nan_policy: rollback}"
  exp sf_crash llama_tiny.yaml "${common[@]}" "device: $d" "save: $W/sf-crash" "load: $W/sf-crash" \
    "auto_continue_train: true" "fault_tolerance: {max_restarts: 2, restart_backoff_s: 0}"
  "$BIN" train pretrain --config "$W/sf_ref.yaml" || return 1
  "$BIN" train pretrain --config "$W/sf_cpu.yaml" || return 1
  PRIMUS_FAULT_INJECT=nan:step=6 "$BIN" train pretrain --config "$W/sf_nan.yaml" 2>&1 | tee "$W/nan.log" | grep -E "rolled back|NaN" || true
  grep -q "rolled back to step 4" "$W/nan.log" || { echo "safe: no rollback to step 4"; rc=1; }
  cmp "$W/sf-ref/iter_0000008/model.safetensors" "$W/sf-nan/iter_0000008/model.safetensors" &&
    echo "safe: NaN rolled back, the fault-free weights bit for bit" || rc=1
  PRIMUS_FAULT_INJECT=crash:step=6 "$BIN" train pretrain --config "$W/sf_crash.yaml" 2>&1 | tee "$W/crash.log" | grep -E "supervisor: restart" || rc=1
  cmp "$W/sf-ref/iter_0000008/model.safetensors" "$W/sf-crash/iter_0000008/model.safetensors" &&
    echo "safe: crash restarted, the fault-free weights bit for bit" || rc=1
  # The CPU's step-4 checkpoint, resumed on the GPU.
  mkdir -p "$W/sf-x" && cp -r "$W/sf-cpu/iter_0000004" "$W/sf-x/" && echo 4 > "$W/sf-x/latest_checkpointed_iteration.txt"
  exp sf_x llama_tiny.yaml "${common[@]}" "device: $d" "save: $W/sf-x" "load: $W/sf-x" "auto_continue_train: true"
  "$BIN" train pretrain --config "$W/sf_x.yaml" || return 1
  python3 - "$(events sf_cpu)" "$(events sf_x)" <<'PY' || rc=1
import json, sys
def steps(p):
    return {e["step"]: e["loss"] for e in (json.loads(l) for l in open(p) if l.startswith('{"step"'))}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
late = [k for k in sorted(a) if k > 4]
assert late and all(k in b for k in late), (sorted(a), sorted(b))
worst = max(abs(a[k] - b[k]) / abs(a[k]) for k in late)
print("safe: CPU checkpoint resumed on the GPU, steps %s, worst rel %.2e (bar 1e-5)" % (late, worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY
  # Generation from a model trained long enough to write words.
  exp sf_gen llama_tiny.yaml "data_path: $W/corpus.txt" "tokenizer_type: ByteTokenizer" \
    "micro_batch_size: 16" "global_batch_size: 16" "train_iters: 150" "lr: 1.0e-3" \
    "lr_warmup_iters: 10" "log_interval: 50" "save_interval: 150" "device: $d" "save: $W/sf-gen"
  "$BIN" train pretrain --config "$W/sf_gen.yaml" >/dev/null 2>&1 || { echo "safe: sf_gen failed"; return 1; }
  local g1 g2
  g1=$("$BIN" generate --load "$W/sf-gen" --prompt "the jury said" --temperature 0 --max_new_tokens 40 --device cpu) || rc=1
  g2=$("$BIN" generate --load "$W/sf-gen" --prompt "the jury said" --temperature 0 --max_new_tokens 40 --device "$d") || rc=1
  echo "generate cpu:  $g1"; echo "generate $d: $g2"
  [[ -n $g1 && $g1 == "$g2" ]] && echo "safe: the same greedy text" || { echo "safe: greedy texts differ"; rc=1; }
  # Far too large a micro-batch for the device (GPU_DEVICE=cpu: llama_tiny
  # on the tagged device limited to 40 MB).
  if [[ $d == cpu ]]; then
    exp sf_big llama_tiny.yaml "mock_data: true" "micro_batch_size: 16" "global_batch_size: 16" \
      "train_iters: 1" "device: $d"
  else
    exp sf_big llama_124M.yaml "mock_data: true" "micro_batch_size: 4096" "global_batch_size: 4096" \
      "train_iters: 1" "device: $d"
  fi
  local out
  out=$(PRIMUS_DEVICE_TAGGED_LIMIT=40000000 "$BIN" train pretrain --config "$W/sf_big.yaml" 2>&1)
  local brc=$?
  echo "$out" | grep -E "does not fit" | tail -1
  [[ $brc == 3 ]] && grep -q "the largest that does is" <<<"$out" || { echo "safe: out of memory gave exit $brc"; rc=1; }
  return $rc
}

# bf16 attention alone: the flash kernels and their GEMM twin, at the race's
# shape and at a Llama-3-8B-like one (GQA 32/8, head size 128, 8192 tokens).
check_attention() {
  local a rc=0
  for a in flash gemm; do
    for shape in "--batch 16 --seq 1024 --heads 12 --head-dim 64" \
                 "--batch 1 --seq 8192 --heads 32 --kv-heads 8 --head-dim 128"; do
      echo "== PRIMUS_CUDA_ATTENTION=$a $shape"
      # shellcheck disable=SC2086
      PRIMUS_CUDA_ATTENTION=$a "$BIN" benchmark attention --device cuda --dtype bf16 $shape \
        --duration 1 -o - | grep -E '^\| (forward|backward)' || rc=1
    done
  done
  return $rc
}

check_bench() {
  # GPU_DEVICE=cpu smoke-tests the stage without a GPU: the tagged test
  # device, small shapes, no speed bounds.
  local b=$OUT/bench rc=0 dev=$GPU_DEVICE big=8192 mid=4096 seq=1024 mb=1024 bat=16 d=1
  if [[ $dev != cuda ]]; then
    big=128 mid=96 seq=64 mb=8 bat=1 d=0.1
    export PRIMUS_DEVICE_TAGGED=1
  fi
  mkdir -p "$b"
  "$BIN" benchmark peak --device "$dev" --runs 1 --gemm_size $big --copy_mb $mb --duration $d -o "$b/peak.csv" || rc=1
  "$BIN" benchmark gemm --device "$dev" --M $big --N $big --K $big --dtype bf16 --duration $d -o "$b/gemm-bf16.jsonl" || rc=1
  "$BIN" benchmark gemm --device "$dev" --M $mid --N $mid --K $mid --duration $d -o "$b/gemm-fp32.jsonl" || rc=1
  "$BIN" benchmark attention --device "$dev" --batch $bat --seq $seq --heads 12 --head_dim 64 --duration $d -o "$b/attention.jsonl" || rc=1
  "$BIN" benchmark memory --device "$dev" --size_mb $mb --duration $d -o "$b/memory.jsonl" || rc=1
  exp bench_train llama_tiny.yaml "mock_data: true" "micro_batch_size: $bat" "global_batch_size: $bat"
  "$BIN" benchmark train --config "$W/bench_train.yaml" --device "$dev" --warmup 1 --iters 3 -o "$b/train.jsonl" || rc=1
  python3 - "$b" "$dev" <<'PY' || rc=1
import csv, json, sys
b, real = sys.argv[1], sys.argv[2] == "cuda"
timer = "device events" if real else "host + sync"
def rows(name):
    return [json.loads(l) for l in open(f"{b}/{name}") if l.strip()]
bad = 0
def need(what, ok):
    global bad
    print(("ok   " if ok else "FAIL ") + what)
    bad += not ok
peak = {r["test"]: r for r in csv.DictReader(open(f"{b}/peak.csv"))}
for t in ("device_gemm_bf16", "device_gemm_fp32", "device_copy_d2d"):
    need(f"peak has {t}", t in peak)
if real and "device_gemm_bf16" in peak:
    g = float(peak["device_gemm_bf16"]["gflops"]) / 1e3
    need(f"peak: bf16 GEMM {g:.1f} TFLOP/s >= 200 and at most its data sheet", g >= 200 and float(peak["device_gemm_bf16"]["peak_fraction"]) <= 1.05)
if real and "device_copy_d2d" in peak:
    c = float(peak["device_copy_d2d"]["gbps"])
    need(f"peak: copy {c:.0f} GB/s >= 1000 and at most its data sheet", c >= 1000 and float(peak["device_copy_d2d"]["peak_fraction"]) <= 1.05)
for name in ("gemm-bf16.jsonl", "gemm-fp32.jsonl"):
    for r in rows(name):
        need(f"{name}: {r['tflops']:.1f} TFLOP/s ({r['peak_fraction']:.2f} of {r['peak_tflops']}), timer {r['timer']}",
             r["timer"] == timer and 0 < r["peak_fraction"] <= 1.05)
for r in rows("attention.jsonl"):
    need(f"attention {r['pass']}: {r['avg_ms']:.3f} ms, {r['tflops']:.2f} TFLOP/s, timer {r['timer']}", r["timer"] == timer and r["tflops"] > 0)
for r in rows("memory.jsonl"):
    need(f"memory {r['test']}: {r['best_gbps']:.0f} GB/s best (peak {r['peak_gbps']})",
         r["best_gbps"] > 0 and (not real or r["test"] != "copy_d2d" or (r["best_gbps"] >= 1000 and r["peak_fraction"] <= 1.05)))
for r in rows("train.jsonl"):
    need(f"train on {r['device']}: {r['tokens_per_s']:.0f} tokens/s, mfu {r['mfu']:.4f} of {r['peak_tflops']} TFLOP/s",
         r["tokens_per_s"] > 0 and 0 < r["mfu"] <= 1)
sys.exit(1 if bad else 0)
PY
  # Preflight: a baseline of this GPU, then a check against it seconds later.
  HOME=$W/pfhome "$BIN" preflight calibrate --quick --workspace "$W" || rc=1
  cat "$W"/pfhome/.config/primus/baselines/*.yaml
  grep -q '^gpu_gemm_bf16_tflops: [0-9]' "$W"/pfhome/.config/primus/baselines/*.yaml || { echo "calibrate recorded no GPU figures"; rc=1; }
  HOME=$W/pfhome "$BIN" preflight check --perf --only perf.gpu_ --quick || rc=1
  "$BIN" preflight check --gpu --only gpu.memory,gpu.cuda | tee "$b/preflight-gpu.txt"
  [[ $dev != cuda ]] || grep -Eq 'gpu.memory +(OK|WARN)' "$b/preflight-gpu.txt" || { echo "gpu.memory is not OK/WARN"; rc=1; }
  return $rc
}

export -f exp events check_profile check_attention check_safe check_env check_parity check_bf16 check_kernels check_dp check_resume check_bench
export W BIN P OUT GPU_DEVICE=${GPU_DEVICE:-cuda}
for s in $STAGES; do
  case $s in
    env) stage env 60 check_env ;;
    kernels) stage kernels 180 check_kernels ;;
    dp) stage dp 120 check_dp ;;
    resume) stage resume 120 check_resume ;;
    model) stage model 150 "$P/build/tests/test-model-device" --backend cuda ;;
    parity) stage parity 150 check_parity ;;
    bf16) stage bf16 260 check_bf16 ;;
    bench) stage bench 150 check_bench ;;
    profile) stage profile 150 check_profile ;;
    attention) stage attention 60 check_attention ;;
    safe) stage safe 120 check_safe ;;
    race) stage race 420 env PRIMUS="$BIN" OUT="$OUT/race" ROUNDS="${RACE_ROUNDS:-3}" VARIANTS="${RACE_VARIANTS:-primus torch torch-compile}" bash bench/gpu_race.sh ;;
    maxbatch) stage maxbatch 300 env PRIMUS="$BIN" OUT="$OUT/maxbatch" BATCH=32 MAXBATCH="${MAXBATCH_VARIANTS:-primus torch}" bash bench/gpu_race.sh ;;
    *) say "unknown stage $s"; failed=$((failed + 1)) ;;
  esac
done
rm -rf "$W"
exit "$failed"
