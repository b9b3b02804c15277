#!/usr/bin/env bash
# Live metrics (docs/metrics.md): a training with metrics_port serves
# /metrics in the Prometheus text format (loss, step-time histogram, /proc
# collectors, a loss-spike alert); Debian's prometheus scrapes it and
# returns primus_train_loss through its HTTP API; a port in use is an error
# naming metrics_port; metrics_bind is used when given. Every server is
# stopped by pid on exit, even when a check fails.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=1
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
PY=/usr/bin/python3
FX=${PRIMUS_FIXTURES:-$PRIMUS_SRC/tests/fixtures}
PIDS=()   # servers started here, stopped by pid
PGIDS=()  # `primus direct --nproc` runs: setsid leaders, stopped with their group
          # (mpirun and the ranks outlive a SIGTERM to primus direct alone)
stop_all() {
  local p
  for p in "${PGIDS[@]}"; do kill -- "-$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}" "${PGIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
  PGIDS=()
}
trap 'stop_all; _cleanup' EXIT

# free_port: a port that is free now, below the kernel's ephemeral range
# (ip_local_port_range), so that no other program's outgoing or
# bind-to-0 socket (mpirun's, a parallel test's) can take it meanwhile.
free_port() {
  "$PY" - <<'P'
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(max(1024, lo - 12000), lo)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
P
}
# fetch URL: the body on stdout, or "HTTP <code>" / "ERROR <why>".
fetch() {
  "$PY" - "$1" <<'P'
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    sys.stdout.write("CT " + r.headers.get("Content-Type", "") + "\n" + r.read().decode())
except urllib.error.HTTPError as e:
    print("HTTP %d" % e.code)
except Exception as e:
    print("ERROR %s" % e)
P
}
# value NAME: the sample NAME (no labels) in $BODY, 0 when absent.
value() { echo "$BODY" | awk -v n="$1" '$1 == n { v = $2 } END { print v + 0 }'; }
# wait_step URL N SECONDS: polls until primus_train_step >= N.
wait_step() {
  local end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    BODY=$(fetch "$1")
    (($(value primus_train_step) >= $2)) && return 0
    sleep 0.2
  done
  return 1
}
# wait_for URL NEEDLE SECONDS: polls until the body holds NEEDLE.
wait_for() {
  local end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    BODY=$(fetch "$1")
    [[ $BODY == *"$2"* ]] && return 0
    sleep 0.2
  done
  return 1
}

exp() { # NAME PORT [YAML LINE...]: a long run on mock data
  local n=$1 port=$2
  shift 2
  { exp_header "$n"; tiny_model; cat <<Y
      mock_data: true
      micro_batch_size: 1
      global_batch_size: 2
      train_iters: 1000000
      lr: 1.0e-3
      log_interval: 1000
      metrics_port: $port
Y
    for line in "$@"; do echo "      $line"; done
  } > "$n.yaml"
}

PORT=$(free_port)
# The planted spike multiplies the loss by 10: far above a z-score of 100,
# which the flat loss of random tokens never reaches by itself.
exp live "$PORT" "fault_tolerance: {nan_policy: skip, spike_zscore: 100}" "save: $T/ckpt" \
  "save_interval: 30" "ckpt_keep: 1" "async_save: true" "eval_interval: 30" "eval_iters: 1"
# PRIMUS_RESTART_CAUSES is what the supervisor passes a restarted job. The
# amd-smi stand-in (8 x MI300X, distinct figures per GPU) is first in PATH,
# for the accelerator series.
smi_dir() { # CASE: a copy of fixtures/smi/CASE with exec bits
  mkdir -p "$T/smi-$1" && cp "$FX/smi/$1"/* "$T/smi-$1/" && chmod +x "$T/smi-$1"/*
  echo "$T/smi-$1"
}
AMD=$(smi_dir amd-mi300x)
PATH="$AMD:$PATH" PRIMUS_PLATFORM_NO_SMI=0 PRIMUS_RESTART_CAUSES=crash=2,hang=1 \
  PRIMUS_FAULT_INJECT=spike:step=15 "$PRIMUS_BIN" train pretrain --config live.yaml >live.out 2>live.err &
PIDS+=($!)
URL=http://127.0.0.1:$PORT/metrics
if wait_step "$URL" 20 30; then ok "endpoint serves a running training"
else bad "no primus_train_step 20 at $URL: ${BODY:0:300}; stderr: $(tail -5 live.err)"; fi
expect_in "content type 0.0.4" "CT text/plain; version=0.0.4; charset=utf-8" "$BODY"
wait_for "$URL" "primus_checkpoint_bytes " 20 || bad "no checkpoint series: ${BODY:0:200}"
for s in primus_train_loss primus_learning_rate primus_grad_norm primus_tokens_per_second \
  primus_tflops primus_mfu primus_consumed_tokens_total primus_consumed_samples_total \
  primus_restarts primus_process_resident_memory_bytes primus_process_cpu_seconds_total \
  primus_node_cpu_busy_ratio primus_node_memory_available_bytes primus_node_load1 \
  primus_node_network_receive_bytes_total primus_eval_loss primus_checkpoint_save_seconds \
  primus_checkpoint_bytes primus_async_save_wait_seconds_total primus_nan_steps_total \
  primus_data_wait_seconds primus_tp_comm_seconds primus_goodput; do
  expect_in "series $s" $'\n'"$s " "$BODY"
done
expect_in "HELP line" "# HELP primus_train_loss " "$BODY"
expect_in "TYPE of the histogram" "# TYPE primus_step_seconds histogram" "$BODY"
expect_in "histogram +Inf bucket" 'primus_step_seconds_bucket{le="+Inf"} ' "$BODY"
expect_in "histogram count" "primus_step_seconds_count " "$BODY"
expect_in "loss-spike alert counted" 'primus_alerts_total{kind="loss_spike"} 1'$'\n' "$BODY"
expect_in "skipped step counted" 'primus_skipped_steps_total 1'$'\n' "$BODY"
expect_in "restarts by cause, from the supervisor" 'primus_restarts_total{cause="crash"} 2'$'\n' "$BODY"
expect_in "every cause shows" 'primus_restarts_total{cause="nan"} 0'$'\n' "$BODY"
GP=$(echo "$BODY" | sed -n 's/^primus_goodput \([0-9.e+-]*\)$/\1/p')
if [[ -n $GP ]] && awk -v g="$GP" 'BEGIN { exit !(g > 0 && g <= 1) }'; then ok "goodput is a fraction ($GP)"
else bad "primus_goodput '$GP' is not in (0, 1]"; fi
expect_in "log names the endpoint" "metrics: Prometheus endpoint at http://127.0.0.1:$PORT/metrics" "$(cat live.err)"
expect_in "alert WARN line" "alert loss_spike at step 15" "$(cat live.err)"
EV=$(cat "$(ls -d "$T"/ws/team/tester/live/run-* | tail -1)/events.jsonl")
expect_in "alert event" '{"event":"alert","kind":"loss_spike","step":15,' "$EV"
expect_eq "other paths are 404" "$(fetch "http://127.0.0.1:$PORT/")" "HTTP 404"
LOSS=$(echo "$BODY" | sed -n 's/^primus_train_loss \([0-9.e+-]*\)$/\1/p')
[[ -n $LOSS ]] && ok "loss is a number ($LOSS)" || bad "primus_train_loss has no numeric value"
# The stand-in's figures for GPU i: activity 5 + 10i %, (i + 1) GiB used of
# 196592 MiB, hotspot 40 + i C, 300 + 10i W.
expect_in "accelerator utilisation per device" 'primus_accel_utilization_ratio{device="3"} 0.35'$'\n' "$BODY"
expect_in "accelerator memory used" 'primus_accel_memory_used_bytes{device="1"} 2147483648'$'\n' "$BODY"
expect_in "accelerator memory total" 'primus_accel_memory_total_bytes{device="7"} 206141652992'$'\n' "$BODY"
expect_in "accelerator temperature" 'primus_accel_temperature_celsius{device="6"} 46'$'\n' "$BODY"
expect_in "accelerator power" 'primus_accel_power_watts{device="0"} 300'$'\n' "$BODY"
expect_eq "eight devices" "$(echo "$BODY" | grep -c '^primus_accel_power_watts{device=')" 8
expect_not_in "no SMI warning" "accelerator figures" "$(cat live.err)"

# ---- the same port again: a clear error naming the key and the address ----
exp clash "$PORT"
run train pretrain --config clash.yaml
expect_rc "port in use" 3
expect_in "error names metrics_port" "metrics_port $PORT (metrics_bind 127.0.0.1): 127.0.0.1:$PORT: cannot listen: Address already in use" "$ERR"

# ---- the throughput alert's keys are checked before training ----
exp badfrac "$PORT" "alert_throughput_fraction: 1.5"
run train pretrain --config badfrac.yaml
expect_rc "alert_throughput_fraction 1.5 refused" 2
expect_in "error names the key" "alert_throughput_fraction: must be in [0, 1), got 1.5" "$ERR"

# ---- metrics_bind is used when given (another loopback address) ----
# (Every SMI tool in PATH prints garbage here: one WARN, no accelerator
# series, training goes on.)
exp bound "$PORT" "metrics_bind: 127.0.0.2"
PATH="$(smi_dir garbage):$PATH" PRIMUS_PLATFORM_NO_SMI=0 \
  "$PRIMUS_BIN" train pretrain --config bound.yaml >bound.out 2>bound.err &
PIDS+=($!)
if wait_step "http://127.0.0.2:$PORT/metrics" 1 30; then ok "metrics_bind 127.0.0.2 serves there"
else bad "nothing on 127.0.0.2:$PORT: ${BODY:0:200}; $(tail -3 bound.err)"; fi
expect_in "log names the bind address" "http://127.0.0.2:$PORT/metrics" "$(cat bound.err)"
for _ in 1 2 3 4 5 6 7 8 9 10; do grep -q 'accelerator figures' bound.err && break; sleep 0.2; done
expect_eq "garbage SMI output: one WARN" "$(grep -c 'WARN.*accelerator figures left out: amd-smi' bound.err)" 1
expect_not_in "garbage SMI output: no series" "primus_accel_" "$BODY"
kill "${PIDS[1]}" 2>/dev/null

# ---- two ranks: rank 0 serves the per-rank step times ----
DPORT=$(free_port)
exp dp2 "$DPORT"
setsid "$PRIMUS_BIN" direct --nproc 2 -- train pretrain --config dp2.yaml >dp2.out 2>dp2.err &
PGIDS+=($!)
if wait_for "http://127.0.0.1:$DPORT/metrics" 'primus_rank_compute_seconds{rank="1"} ' 40; then
  ok "two ranks: per-rank step times served by rank 0"
  expect_in "spread between the ranks" "primus_rank_compute_spread_seconds " "$BODY"
  expect_in "exposed communication" "primus_comm_exposed_seconds " "$BODY"
else bad "two ranks: no per-rank series: ${BODY:0:200}; $(grep -v '^\[' dp2.err | tail -8)"; fi
kill -- "-${PGIDS[0]}" 2>/dev/null

# ---- prometheus scrapes the training and answers a query ----
if command -v prometheus >/dev/null; then
  PPORT=$(free_port)
  cat > prom.yml <<Y
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: primus
    static_configs:
      - targets: ["127.0.0.1:$PORT"]
Y
  prometheus --config.file=prom.yml --storage.tsdb.path="$T/prom-data" \
    --web.listen-address=127.0.0.1:$PPORT >prom.log 2>&1 &
  PIDS+=($!)
  Q="http://127.0.0.1:$PPORT/api/v1/query?query=primus_train_loss"
  if wait_for "$Q" '"__name__":"primus_train_loss"' 20; then
    ok "prometheus returns primus_train_loss"
    expect_in "scraped from the training" "\"instance\":\"127.0.0.1:$PORT\"" "$BODY"
  else
    bad "prometheus has no primus_train_loss: ${BODY:0:300}; $(tail -3 prom.log)"
  fi
  # Every query of the Grafana dashboard parses, and every primus_ series
  # it names is one the training serves (primus_rank_*: the two-rank run).
  SERVED=$(fetch "$URL")
  DASH=$("$PY" - "$PRIMUS_SRC/deploy/grafana/primus-training.json" "http://127.0.0.1:$PPORT" \
    "$SERVED" <<'P'
import json, re, sys, urllib.parse, urllib.request
dash, prom, served = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
names = set(re.findall(r"^(primus_[a-z0-9_]+)", served, re.M))
bad = []
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
for e in exprs:
    q = e.replace("$instance", ".*")
    r = json.load(urllib.request.urlopen(prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q})))
    if r.get("status") != "success": bad.append("query fails: " + e)
    for n in re.findall(r"primus_[a-z0-9_]+", e):
        if n not in names and not n.startswith("primus_rank_"): bad.append("not served: " + n)
print("%d queries; %s" % (len(exprs), "; ".join(bad) if bad else "all fine"))
P
  )
  expect_in "dashboard queries valid and served" "all fine" "$DASH"
else
  bad "prometheus is not installed (scripts/deps.sh installs it)"
fi
stop_all
finish
