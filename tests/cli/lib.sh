# lib.sh - helpers for the black-box CLI tests: a private temp folder removed
# on exit (even on failure), assertions that count, and the closing line.
set -uo pipefail
: "${PRIMUS_BIN:?PRIMUS_BIN must point at the primus binary}"
PRIMUS_SRC=${PRIMUS_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
T=$(mktemp -d "${TMPDIR:-/tmp}/primus-cli-XXXXXX")
_pass=0
_fail=0
_cleanup() { [[ -n ${PRIMUS_KEEP_TMP:-} ]] || rm -rf "$T"; }
trap _cleanup EXIT
# The shared cache (npm data, the FMA peak) stays the user's; HOME is private.
export PRIMUS_CACHE=${PRIMUS_CACHE:-$HOME/.cache/primus}
export HOME=$T/home
mkdir -p "$HOME"
unset PRIMUS_HOOKS_DIR PRIMUS_PLUGIN_PATH PRIMUS_RUN_DIR PRIMUS_LAUNCHED PRIMUS_REPLAY_OF
export PRIMUS_SYSFS_ROOT=${PRIMUS_FIXTURES:-$PRIMUS_SRC/tests/fixtures}/sysfs/cpu-only

ok() { _pass=$((_pass + 1)); echo "ok - $1"; }
bad() { _fail=$((_fail + 1)); echo "not ok - $1"; }

# run CMD...: runs primus, keeps stdout in $OUT, stderr in $ERR, status in $RC.
run() {
  OUT=$("$PRIMUS_BIN" "$@" 2>"$T/.err")
  RC=$?
  ERR=$(cat "$T/.err")
}
expect_rc() { # NAME EXPECTED
  if [[ $RC == "$2" ]]; then ok "$1 (exit $RC)"; else bad "$1: exit $RC, expected $2; stderr: $ERR"; fi
}
expect_in() { # NAME NEEDLE HAYSTACK
  if [[ $3 == *"$2"* ]]; then ok "$1"; else bad "$1: '$2' not found in: $3"; fi
}
expect_not_in() {
  if [[ $3 != *"$2"* ]]; then ok "$1"; else bad "$1: '$2' unexpectedly found in: $3"; fi
}
expect_eq() { # NAME A B
  if [[ $2 == "$3" ]]; then ok "$1"; else bad "$1: '$2' != '$3'"; fi
}
expect_file() {
  if [[ -e $2 ]]; then ok "$1"; else bad "$1: $2 missing"; fi
}

# build_plugin: compiles the hello test plugin into $T/plugins.
build_plugin() {
  mkdir -p "$T/plugins"
  "${CC:-cc}" -shared -fPIC -Wall -Werror -I"$PRIMUS_SRC/include" \
    "$PRIMUS_SRC/tests/fixtures/plugins/hello_plugin.c" -o "$T/plugins/hello.so"
}

# exp_header NAME: the start of an experiment file for the native
# pre-trainer on the llama_tiny preset (work_group team, user_name tester,
# workspace $T/ws); the caller appends its `overrides:` keys, indented six
# spaces:  { exp_header tiny; echo "      lr: 0.01"; } > exp.yaml
exp_header() {
  cat <<Y
work_group: team
user_name: tester
exp_name: $1
workspace: $T/ws
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
    overrides:
Y
}

# tiny_model: the model overrides most training tests share (hidden 32, two
# layers, GQA 4/2, ffn 64, seq 32), indented for `overrides:`.
tiny_model() {
  cat <<Y
      hidden_size: 32
      num_layers: 2
      num_attention_heads: 4
      num_query_groups: 2
      ffn_hidden_size: 64
      seq_length: 32
      max_position_embeddings: 64
Y
}

# small_corpus FILE: 80 documents of 30 words from a 13-word vocabulary,
# the same every time (awk's seeded rand), blank-line separated.
small_corpus() {
  awk 'BEGIN { srand(5); split("the a jury said grand county election was to of and in that", w, " ");
    for (p = 0; p < 80; p++) { s = ""; for (i = 0; i < 30; i++) s = s w[1 + int(rand() * 13)] " ";
      print s; print "" } }' > "$1"
}

# tiny_exp NAME [KEY: VALUE]...: writes NAME.yaml, an experiment for the
# tiny model on $T/corpus.txt (small_corpus) with the defaults below; each
# "KEY: VALUE" argument (one line, flow style for maps) replaces the
# default or an earlier argument with the same key, or is added.
tiny_exp() { _exp_write tiny_model "$@"; }

# moe_exp NAME [KEY: VALUE]...: tiny_exp with 4 experts (top 2, aux and z
# losses), 4 micro-batches of 1 a step and 6 steps, saved at step 6 in
# $T/ck-NAME: the runs the expert- and pipeline-parallel tests compare.
moe_exp() {
  local n=$1
  shift
  tiny_exp "$n" "num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 48" \
    "moe_aux_loss_coeff: 0.01" "moe_z_loss_coeff: 0.001" "micro_batch_size: 1" \
    "global_batch_size: 4" "train_iters: 6" "log_interval: 3" "save: $T/ck-$n" "save_interval: 6" \
    "lr_decay_iters: 6" "lr_warmup_iters: 0" "$@"
}
# preset_exp NAME [KEY: VALUE]...: the same on the llama_tiny preset itself
# (hidden 128, 4 layers, seq 128), without tiny_model's overrides.
preset_exp() { _exp_write : "$@"; }
_exp_write() { # MODEL_FN NAME [KEY: VALUE]...
  local model=$1 name=$2 kv key i
  shift 2
  local -a keys=() vals=()
  for kv in "data_path: $T/corpus.txt" 'split: "95,5,0"' "micro_batch_size: 2" \
    "global_batch_size: 4" "train_iters: 8" "lr: 3.0e-3" "eval_iters: 0" "log_interval: 2" "$@"; do
    key=${kv%%:*}
    for i in "${!keys[@]}"; do [[ ${keys[i]} == "$key" ]] && break; done
    if [[ ${#keys[@]} -gt 0 && ${keys[i]} == "$key" ]]; then vals[i]=$kv; else keys+=("$key"); vals+=("$kv"); fi
  done
  { exp_header "$name"; $model; for kv in "${vals[@]}"; do echo "      $kv"; done; } > "$name.yaml"
}
# newest_run NAME: the newest run directory of experiment NAME (empty if none).
newest_run() { ls -d "$T"/ws/team/tester/"$1"/run-* 2>/dev/null | tail -1; }
# run_events NAME: events.jsonl of that run.
run_events() { cat "$(newest_run "$1")/events.jsonl" 2>/dev/null; }
# run_losses NAME: "STEP LOSS" per optimizer step of that run.
run_losses() { run_events "$1" | grep '^{"step"' | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
# loss_diff REF NAME: the worst |loss - ref| / ref over the steps both runs
# logged, as %.3e ("none" when they share no step).
loss_diff() {
  join <(run_losses "$1" | sort -k1,1) <(run_losses "$2" | sort -k1,1) |
    awk '{d = $2 - $3; if (d < 0) d = -d; r = d / $2; if (r > m) m = r} END {if (NR == 0) print "none"; else printf "%.3e", m}'
}
# within X TOL: X is a number no larger than TOL.
within() { [[ $1 =~ ^[0-9][0-9.e+-]*$ ]] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
# follows_on2 REF NAME STEPS TOL LABEL: experiments REF and NAME, each on 2
# ranks (`direct --nproc 2`); both exit 0, NAME logs STEPS steps, and its
# losses stay within TOL (relative) of REF's at every step. $ERR is NAME's.
follows_on2() {
  local ref=$1 name=$2 steps=$3 tol=$4 label=$5 d
  run direct --nproc 2 -- train pretrain --config "$ref.yaml"
  expect_rc "$label: $ref on 2 ranks" 0
  run direct --nproc 2 -- train pretrain --config "$name.yaml"
  expect_rc "$label: $name on 2 ranks" 0
  expect_eq "$label: $name logged $steps steps" "$(run_losses "$name" | wc -l)" "$steps"
  d=$(loss_diff "$ref" "$name")
  if within "$d" "$tol"; then ok "$label: $name within $tol of $ref at every step (worst $d)"
  else bad "$label: $name differs from $ref by $d"; fi
}

# bf16_vs_fp32 LABEL N [EXP]: the loss curve of experiment EXP (default
# bf16) against fp32's, N steps: within 2% at every step, not identical (the
# rounding is in effect), and learning (the last loss below 0.8 x the first).
bf16_vs_fp32() {
  local label=$1 n=$2 e=${3:-bf16} d a b
  d=$(loss_diff fp32 "$e")
  if within "$d" 0.02; then ok "$label loss within 2% of fp32 at every one of $n steps (worst $d)"; else bad "$label loss differs from fp32 by $d"; fi
  if [[ $d != none ]] && awk -v a="$d" 'BEGIN { exit !(a > 0) }'; then ok "$label differs from fp32 (it rounds)"; else bad "$label identical to fp32: not in effect"; fi
  a=$(run_losses "$e" | head -1 | awk '{print $2}')
  b=$(run_losses "$e" | tail -1 | awk '{print $2}')
  if awk -v a="$b" -v b="$a" 'BEGIN { exit !(a < 0.8 * b) }'; then ok "$label learns ($a -> $b)"; else bad "$label did not learn: $a -> $b"; fi
}

# step NAME CMD...: runs CMD with its output in $T/step.log, shown on failure.
step() {
  local name=$1
  shift
  if "$@" >"$T/step.log" 2>&1; then
    ok "$name"
  else
    bad "$name (exit $?)"
    sed 's/^/    /' "$T/step.log"
    return 1
  fi
}

# oracle_python: sets PY (PRIMUS_ORACLE_PYTHON or /usr/bin/python3, Debian's
# torch) and REF (the float64 PyTorch oracle), or says SKIP and ends the
# test when PY has no torch.
oracle_python() {
  PY=${PRIMUS_ORACLE_PYTHON:-/usr/bin/python3}
  REF=$PRIMUS_SRC/tests/oracle/llama_ref.py
  if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "SKIP: $PY cannot import torch and numpy; the PyTorch oracle test needs them"
    exit 0
  fi
}

# oracle_prepare NAME DIR MAKE-CASE-ARGS...: the oracle's random case in
# DIR, its config validated, primus' step-1 gradients and its training run;
# non-zero when the case or its config is unusable (the rest cannot run).
oracle_prepare() {
  local name=$1 d=$2
  shift 2
  echo "# case $name: $*"
  step "$name: make-case" "$PY" "$REF" make-case --out "$d" "$@" || return 1
  cat "$T/step.log"
  step "$name: config validate" "$PRIMUS_BIN" config validate --config "$d/exp.yaml" || return 1
  step "$name: train grads" "$PRIMUS_BIN" train grads --config "$d/exp.yaml" \
    --output "$d/primus_grads.safetensors" || true
  step "$name: train pretrain" "$PRIMUS_BIN" train pretrain --config "$d/exp.yaml" || true
}

# tokdump_build OUT: compiles tests/tokenizer/tokdump.c against the build's
# library like the library itself (the same sanitizers, the same libs; $san
# is left set to them); reports ok or bad, and returns 1 when it does not
# compile.
# need_or_skip PATH...: ends the test with SKIP (exit 0) naming the first
# path that does not exist (an empty one stands for node not on PATH).
need_or_skip() {
  local need
  for need in "$@"; do
    if [[ -z $need || ! -e $need ]]; then
      echo "SKIP: missing ${need:-node} (run scripts/deps.sh)"
      exit 0
    fi
  done
}

# hf_compare TAG DIR FILE [--special]: the ids (and, with --special, the
# post-processor's tokens) and decode of the tokenizer.json in DIR on FILE,
# Hugging Face tokenizers' (tests/tokenizer/ref.mjs, needs NODE and NM)
# against primus' (tokdump at $T/tokdump): ok or bad under TAG.
hf_compare() {
  local tag=$1 dir=$2 file=$3 kind=hf
  [[ ${4:-} == --special ]] && kind=hf-special
  if ! "$NODE" "$PRIMUS_SRC/tests/tokenizer/ref.mjs" "$NM" "$kind" "$dir/tokenizer.json" "$file" \
    "$T/g.ref" "$T/g.dec" >/dev/null 2>"$T/node.err"; then
    bad "$tag: the reference failed: $(head -c 600 "$T/node.err")"
    return
  fi
  if ! "$T/tokdump" HuggingFaceTokenizer "$dir" "$file" "$T/g.prm" --decoded "$T/g.dec" ${4:-} \
    >/dev/null 2>"$T/dump.err"; then
    bad "$tag: $(head -c 600 "$T/dump.err")"
    return
  fi
  local res
  if res=$("$NODE" "$PRIMUS_SRC/tests/tokenizer/ref.mjs" --compare "$T/g.ref" "$T/g.prm"); then
    ok "$tag: $res, decode as the reference's"
  else
    bad "$tag: $res"
  fi
}

tokdump_build() {
  local cflags libs dnnl
  san=$(sed -n 's/^PRM_SANITIZE:STRING=//p' "$PRIMUS_BUILD/CMakeCache.txt" 2>/dev/null)
  cflags=(-O2 -Wall -Wextra -Werror -I"$PRIMUS_SRC/include")
  [[ -n $san ]] && cflags+=(-fsanitize="$san" -fno-sanitize-recover=all)
  libs=()
  for pc in yaml-0.1 libcjson hwloc libpcre2-8 zlib libzstd openblas; do
    pkg-config --exists "$pc" && libs+=($(pkg-config --libs "$pc"))
  done
  dnnl=$(sed -n 's/^DNNL_LIB:FILEPATH=//p' "$PRIMUS_BUILD/CMakeCache.txt" 2>/dev/null)
  [[ -n $dnnl && -e $dnnl ]] && libs+=("$dnnl")
  if "${CC:-cc}" "${cflags[@]}" "$PRIMUS_SRC/tests/tokenizer/tokdump.c" \
    "$PRIMUS_BUILD/libprimus_core.a" "${libs[@]}" -fopenmp -ldl -lm -lpthread -o "$1" 2>"$T/cc.err"; then
    ok "tokdump compiled${san:+ (sanitize=$san)}"
  else
    bad "tokdump does not compile: $(cat "$T/cc.err")"
    return 1
  fi
}

finish() {
  echo "$_pass passed, $_fail failed"
  [[ $_fail == 0 ]]
}

# The set-up of a multi-rank training test: work in $T, one thread a rank,
# no fault injection or restart state inherited from the caller, PY, and a
# small corpus.txt. Without mpirun the test ends there with one failure.
multirank_setup() {
  cd "$T" || exit 1
  export OMP_NUM_THREADS=1
  unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
  if ! command -v mpirun >/dev/null; then
    echo "mpirun missing (scripts/deps.sh installs openmpi-bin)"
    bad "mpirun present"
    finish
    exit
  fi
  PY=/usr/bin/python3
  small_corpus corpus.txt
}

# oracle_eval NAME DIR STEP_TITLE: `primus eval` of the case in DIR (its
# first global batch, every document in the validation split) must give the
# reference's first-step loss (DIR/ref.json) within 1e-5 relative. Returns
# 1 when eval itself failed (step already counted it), else 0 after one
# ok/bad.
oracle_eval() {
  local name=$1 d=$2
  step "$3" "$PRIMUS_BIN" eval --config "$d/exp.yaml" split=0,1,0 --eval_iters 1 \
    --output "$d/eval.json" || return 1
  if "$PY" - "$d/eval.json" "$d/ref.json" <<'PYEOF'; then
import json, sys
got = json.load(open(sys.argv[1]))["loss"]
want = json.load(open(sys.argv[2]))["steps"][0]["loss"]
print("eval loss %.10f, reference %.10f, rel %.2e" % (got, want, abs(got - want) / want))
sys.exit(0 if abs(got - want) <= 1e-5 * want else 1)
PYEOF
    ok "$name: eval of the HF folder equals the reference loss"
  else
    bad "$name: eval of the HF folder differs from the reference loss"
  fi
  return 0
}

# ---- live Slurm ---------------------------------------------------------------

# slurm_test_setup: what every test against live Slurm daemons shares: it
# works in $T, which the daemons must reach (munged serves its socket only
# below folders everyone may enter), with one thread a rank, and nothing
# from an outer Slurm job, launcher or fault plan leaks in.
slurm_test_setup() {
  cd "$T" || exit 1
  chmod a+x "$T"
  export OMP_NUM_THREADS=1
  unset $(compgen -v SLURM_) PRIMUS_SUPERVISOR PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
}

# cluster_up_or_skip HOSTS [VAR=VALUE]...: slurm_test_setup, then the
# namespace cluster (scripts/cluster-local.sh up --hosts HOSTS: cn1..cnHOSTS
# and the login host ctl) in C=$T/cluster, VAR=VALUE in the script's
# environment; CL is the script, UP what `up` printed. From here the EXIT
# trap brings the cluster down, every process by its pid, also after a
# failure (test_cleanup runs first when the test defines it: a background
# job to stop). When `up` says this machine cannot (exit 77: not root, no
# namespaces or bridges; exit 1: Slurm or munge missing) the test ends
# skipped (exit 77), or failed with PRIMUS_REQUIRE_SLURM set; any other
# failure of `up` ends it failed.
cluster_up_or_skip() {
  local hosts=$1 rc
  shift
  slurm_test_setup
  CL=$PRIMUS_SRC/scripts/cluster-local.sh
  C=$T/cluster
  trap _cluster_exit EXIT
  trap 'exit 130' INT TERM
  UP=$(env "$@" "$CL" up "$C" --hosts "$hosts" 2>&1)
  rc=$?
  if [[ $rc == 77 || $rc == 1 ]]; then
    echo "SKIP: scripts/cluster-local.sh up: exit $rc:"
    sed 's/^/  /' <<<"$UP" | tail -n 20
    if [[ -n ${PRIMUS_REQUIRE_SLURM:-} ]]; then bad "PRIMUS_REQUIRE_SLURM is set: a live cluster is required"; finish; exit; fi
    exit 77
  fi
  expect_eq "cluster-local.sh up --hosts $hosts" "$rc" 0
  if [[ $rc != 0 ]]; then
    sed 's/^/# /' <<<"$UP"
    finish
    exit
  fi
}
_cluster_exit() {
  if declare -F test_cleanup >/dev/null; then test_cleanup; fi
  "$CL" down "$C" >/dev/null 2>&1
  _cleanup
}

# cx CMD...: CMD on the cluster's login host (srun, sbatch, squeue ...).
cx() { "$CL" exec "$C" ctl -- "$@"; }

# crun CMD...: primus on the login host, ended after CRUN_LIMIT seconds
# (default 120); $OUT, $ERR and $RC as run sets them.
crun() {
  OUT=$("$CL" exec "$C" ctl -- timeout -k 5 "${CRUN_LIMIT:-120}" "$PRIMUS_BIN" "$@" 2>"$T/.err" </dev/null)
  RC=$?
  ERR=$(cat "$T/.err")
}

# poll_until SECONDS WHAT CMD...: runs CMD every 0.2 s until it succeeds
# (ok, with the time it took) or SECONDS pass (a failure naming WHAT,
# followed by what on_poll_timeout prints when the test defines it: the
# daemons' log tails). Returns CMD's last verdict.
poll_until() {
  local limit=$1 what=$2 t0=$SECONDS
  shift 2
  while ((SECONDS - t0 < limit)); do
    "$@" && { ok "$what (after $((SECONDS - t0)) s)"; return 0; }
    sleep 0.2
  done
  bad "$what: not within $limit s"
  if declare -F on_poll_timeout >/dev/null; then on_poll_timeout | sed 's/^/# /'; fi
  return 1
}
