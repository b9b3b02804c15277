#!/usr/bin/env bash
# qk_layernorm (Qwen 3's q/k RMSNorm, with kv_channels and q/k/v biases)
# under tensor parallelism: each rank norms its own heads with the whole
# q_norm/k_norm weights, whose gradient is summed over the group. T = 2
# follows the one-rank run: losses within 1e-5 relative per step, the whole
# model within 1e-5 after 10 steps, and the q/k norm weights' own updates
# (well away from zero) within 1e-4; a T = 2 checkpoint resumes at T = 1.
source "$(dirname "$0")/lib.sh"
multirank_setup

exp() { # NAME [KEY: VALUE...]
  local n=$1
  shift
  tiny_exp "$n" "micro_batch_size: 1" "global_batch_size: 4" "train_iters: 10" "log_interval: 5" \
    "save: $T/ck-$n" "save_interval: 10" "lr: 1.0e-2" "lr_warmup_iters: 0" "qk_layernorm: true" \
    "kv_channels: 16" "add_qkv_bias: true" "$@"
}
final() { echo "$T/ck-$1/iter_0000010/model.safetensors"; }
# norm_updates REF RUN: for each q/k norm weight, |update| and the relative
# difference of RUN's update from REF's (the weights start at 1).
norm_updates() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, struct, sys
import numpy as np
def read(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); d = f.read()
    return {k: np.frombuffer(d[v["data_offsets"][0]:v["data_offsets"][1]], dtype="<f4").astype(float)
            for k, v in h.items() if k != "__metadata__"}
a, b = read(sys.argv[1]), read(sys.argv[2])
keys = [k for k in sorted(a) if k.endswith(("q_norm.weight", "k_norm.weight"))]
worst, least = 0.0, 1e30
for k in keys:
    u, v = a[k] - 1, b[k] - 1
    least = min(least, np.linalg.norm(u))
    worst = max(worst, np.linalg.norm(u - v) / np.linalg.norm(u))
print("%d %.3e %.3e" % (len(keys), least, worst))
PYEOF
}

exp one
run train pretrain --config one.yaml
expect_rc "one rank, qk_layernorm" 0
exp tp2 "tensor_model_parallel_size: 2"
run direct --nproc 2 -- train pretrain --config tp2.yaml
expect_rc "T = 2, qk_layernorm (no longer refused)" 0
expect_in "tp2: tensor parallel" "tensor parallel: 2 ranks per group" "$ERR"
expect_eq "tp2: 10 steps" "$(run_losses tp2 | wc -l)" 10
d=$(loss_diff one tp2)
if within "$d" 1e-5; then ok "T = 2: losses within 1e-5 of one rank (worst $d)"; else bad "T = 2: losses differ by $d"; fi
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$(final one)" "$(final tp2)")
if within "$w" 1e-5; then ok "T = 2: weights within 1e-5 after 10 steps ($w)"; else bad "T = 2: weights differ by $w"; fi
read -r n least worst <<<"$(norm_updates "$(final one)" "$(final tp2)")"
expect_eq "the q/k norm weights of 2 layers compared" "${n:-0}" 4
if awk -v a="${least:-0}" 'BEGIN { exit !(a > 1e-3) }'; then ok "the q/k norms moved (smallest update $least)"; else bad "q/k norm updates too small to compare: $least"; fi
if within "${worst:-x}" 1e-4; then ok "T = 2: the q/k norms' updates within 1e-4 of one rank's ($worst)"; else bad "T = 2: q/k norm updates differ by $worst"; fi

# A T = 2 checkpoint resumes at T = 1 (the norms are saved whole).
exp half "tensor_model_parallel_size: 2" "train_iters: 5" "save_interval: 5" "save: $T/ck-r" "lr_decay_iters: 10"
exp rest "save: $T/ck-r" "load: $T/ck-r" "auto_continue_train: true" "lr_decay_iters: 10"
exp ref "lr_decay_iters: 10"
run direct --nproc 2 -- train pretrain --config half.yaml
expect_rc "T = 2: 5 steps" 0
run train pretrain --config rest.yaml
expect_rc "resumed at T = 1" 0
run train pretrain --config ref.yaml
expect_rc "uninterrupted reference" 0
w=$($PY "$PRIMUS_SRC/tests/oracle/st_compare.py" "$T/ck-ref/iter_0000010/model.safetensors" "$T/ck-r/iter_0000010/model.safetensors")
if within "$w" 1e-5; then ok "T = 2 -> 1: weights within 1e-5 of an uninterrupted run ($w)"; else bad "T = 2 -> 1: weights differ by $w"; fi

finish
