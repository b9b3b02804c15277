#!/usr/bin/env bash
# `primus benchmark ...` through the real binary, every subcommand in its
# quick mode (tiny sizes, --duration 0.05): exit 0, the output file in each
# format parses back (CSV and TSV field counts, JSON Lines and JSON with
# python's json) with the documented columns, and the figures are positive
# and finite. Speed is never asserted. Bad arguments exit 2 naming the
# option; bf16 GEMM runs.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive

# check_table NAME FILE "col1,col2,..." MINROWS "positive1,positive2,...":
# the file (format by extension) has exactly these columns, at least
# MINROWS rows, and the named columns hold positive finite numbers.
check_table() {
  local msg
  if msg=$(python3 - "$2" "$3" "$4" "$5" <<'PY' 2>&1
import csv, json, math, sys
path, cols, minrows, pos = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), [c for c in sys.argv[4].split(",") if c]
ext = path.rsplit(".", 1)[-1]
text = open(path, newline="").read()
if ext in ("csv", "tsv"):
    rows = list(csv.reader(text.splitlines(), delimiter="," if ext == "csv" else "\t"))
    assert rows[0] == cols, f"header {rows[0]} != {cols}"
    for r in rows[1:]:
        assert len(r) == len(cols), f"{len(r)} fields in {r}"
    recs = [dict(zip(cols, r)) for r in rows[1:]]
elif ext == "jsonl":
    recs = [json.loads(l) for l in text.splitlines() if l.strip()]
elif ext == "json":
    recs = json.loads(text)
    assert isinstance(recs, list)
elif ext == "md":
    lines = [l for l in text.splitlines() if l.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == cols, f"header {head} != {cols}"
    recs = [dict(zip(cols, (c.strip() for c in l.strip("|").split("|")))) for l in lines[2:]]
else:
    raise SystemExit(f"unknown extension {ext}")
assert len(recs) >= minrows, f"{len(recs)} rows, expected at least {minrows}"
for r in recs:
    assert list(r.keys()) == cols, f"keys {list(r.keys())} != {cols}"
    for c in pos:
        v = float(r[c])
        assert math.isfinite(v) and v > 0, f"{c} = {r[c]} in {r}"
    if ext in ("jsonl", "json"):
        for c in pos:
            assert isinstance(r[c], (int, float)), f"{c} is not a JSON number: {r[c]!r}"
PY
  ); then ok "$1"; else bad "$1: $msg"; fi
}

GEMM_COLS=name,phase,backend,dtype,M,N,K,trans_a,trans_b,iters,avg_ms,min_ms,tflops,gbps,intensity,peak_fraction

# ---- gemm: every backend, every format --------------------------------------
for fmt in md csv tsv jsonl json; do
  run benchmark gemm --M 48 --N 40 --K 32 --backend all --duration 0.02 --output-file "gemm.$fmt"
  expect_rc "gemm --backend all -> .$fmt" 0
  check_table "gemm .$fmt parses with the gemm columns" "gemm.$fmt" "$GEMM_COLS" 1 "M,N,K,iters,avg_ms,tflops,gbps,intensity"
done
expect_in "gemm prints a Markdown table" "| backend" "$OUT"
expect_in "gemm has the reference backend" ",reference," "$(cat gemm.csv)"
expect_not_in "no row uses the old name native" "native" "$(cat gemm.csv)"
nb=$(($(wc -l < gemm.csv) - 1))
if ((nb >= 1)); then ok "one row per backend ($nb)"; else bad "no backend rows"; fi
run benchmark gemm --M 16 --N 24 --K 8 --trans_a --trans_b --backend reference --duration 0.01 -o tr.jsonl
expect_rc "gemm transposed, reference" 0
expect_in "the row says reference" '"reference"' "$(cat tr.jsonl)"
run benchmark gemm --M 16 --N 24 --K 8 --backend native --duration 0.01 -o old.csv
expect_rc "--backend native, the old name, still runs" 0
expect_in "with a deprecation note" "--backend native is the old name of reference (deprecated)" "$ERR"
expect_in "and its row says reference" ",reference," "$(cat old.csv)"
check_table "transposed row" tr.jsonl "$GEMM_COLS" 1 "tflops,trans_a,trans_b"
run benchmark gemm --M 32 --N 32 --K 32 --duration 0.01 -o -
expect_rc "gemm -o - (Markdown on stdout)" 0
printf '%s\n' "$OUT" > stdout.md
check_table "gemm on stdout parses as Markdown" stdout.md "$GEMM_COLS" 1 "tflops"

# ---- gemm-dense ---------------------------------------------------------------
run benchmark gemm-dense --model llama_tiny --seq_length 16 --micro_batch_size 2 --duration 0.005 -o dense.csv
expect_rc "gemm-dense llama_tiny" 0
check_table "gemm-dense .csv: 15 GEMMs" dense.csv "$GEMM_COLS" 15 "M,N,K,tflops"
for g in attn_qkv attn_out mlp_gate_up mlp_down lm_head; do
  expect_in "gemm-dense lists $g" "$g" "$(cat dense.csv)"
done
for p in fwd dgrad wgrad; do expect_in "gemm-dense has $p" ",$p," "$(cat dense.csv)"; done
expect_in "the forward of attn_qkv is (32 tokens, (4+2x2)x32, 128)" "attn_qkv,fwd,onednn,fp32,32,256,128" "$(sed 's/,openblas,/,onednn,/;s/,reference,/,onednn,/' dense.csv)"
cp "$PRIMUS_SRC/configs/models/native/llama_tiny.yaml" my_model.yaml
cp "$PRIMUS_SRC/configs/models/native/llama_base.yaml" llama_base.yaml
run benchmark gemm-dense --model ./my_model.yaml --seq_length 8 --duration 0 -o dense.json
expect_rc "gemm-dense with a model YAML path" 0
check_table "gemm-dense .json" dense.json "$GEMM_COLS" 15 "tflops"

# ---- gemm-grouped ---------------------------------------------------------------
GG_COLS=pass,rows_per_expert,experts,hidden,ffn,backend,pairs,grouped_ms,loop_ms,grouped_gflops,loop_gflops,loop_over_grouped,policy
run benchmark gemm-grouped --hidden 32 --ffn 48 --experts 3 --rows 3,4096 --duration 0.005 -o grouped.csv
expect_rc "gemm-grouped" 0
check_table "gemm-grouped .csv: forward and backward per row count" grouped.csv "$GG_COLS" 4 "pairs,grouped_ms,loop_ms,loop_over_grouped"
expect_in "gemm-grouped: 3 rows a group run grouped" "forward,3,3,32,48," "$(grep ',grouped$' grouped.csv)"
expect_in "gemm-grouped: 4096 rows a group run a GEMM per expert" "backward,4096,3,32,48," "$(grep ',loop$' grouped.csv)"
err_case_gg() { run benchmark gemm-grouped "$@"; expect_rc "gemm-grouped $*" 2; expect_in "gemm-grouped $*: names the option" "${1}" "$ERR"; }
err_case_gg --rows 16,x
err_case_gg --rows 0
err_case_gg --experts 0

# ---- attention ----------------------------------------------------------------
run benchmark attention --batch 1 --seq 32 --heads 4 --kv_heads 2 --head_dim 16 --causal --duration 0.05 -o attn.tsv
expect_rc "attention" 0
check_table "attention .tsv" attn.tsv pass,dtype,batch,seq,heads,kv_heads,head_dim,causal,iters,avg_ms,tflops 2 "iters,avg_ms,tflops"
expect_in "attention has a backward row" "backward" "$(cat attn.tsv)"
run benchmark attention --batch 1 --seq 40 --heads 4 --kv_heads 2 --head_dim 32 --dtype bf16 --isa widen --duration 0.05 -o attn16.csv
expect_rc "attention in bf16, widening variant" 0
check_table "attention bf16 .csv" attn16.csv pass,dtype,batch,seq,heads,kv_heads,head_dim,causal,iters,avg_ms,tflops 2 "iters,avg_ms,tflops"
expect_in "the bf16 rows say so" "backward,bf16," "$(cat attn16.csv)"
run benchmark attention --seq 8 --isa widen
expect_rc "--isa without --dtype bf16" 2
expect_in "--isa needs bf16: the message says so" "needs --dtype bf16" "$ERR"
run benchmark attention --seq 8 --dtype bf16 --isa sse9
expect_rc "an unknown --isa" 2

# ---- launch, memory, checkpoint-io -------------------------------------------
run benchmark launch --duration 0.05 -o launch.json
expect_rc "launch" 0
check_table "launch .json" launch.json test,threads,median_us 2 "threads,median_us"
run benchmark kernels --rows 64 --seq 32 --vocab 1000 --params 4096 --cold_mb 16 --duration 0.05 -o kern.jsonl
expect_rc "kernels" 0
check_table "kernels .jsonl" kern.jsonl kernel,shape,impl,threads,copies,calls,median_ms,min_ms,gbps,best_gbps,triad_gbps,triad_fraction,fast_speedup 1 "gbps,triad_gbps"
run benchmark memory --size_mb 4 --duration 0.05 -o mem.jsonl
expect_rc "memory" 0
check_table "memory .jsonl" mem.jsonl test,array_mb,threads,gbps 1 "array_mb,gbps"
mkdir peakcache
# A cached figure far from this machine's: kept without --save, and named.
printf '999999.0\t%s\n' "$(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)" >peakcache/peak-fp32.txt
PRIMUS_CACHE=$PWD/peakcache run benchmark peak --runs 1 -o peak.jsonl
expect_rc "peak without --save" 0
expect_in "peak without --save keeps the cache" "999999.0" "$(cat peakcache/peak-fp32.txt)"
expect_in "peak warns about the stale cached figure" "999999.0 cached" "$ERR"
PRIMUS_CACHE=$PWD/peakcache run benchmark peak --runs 1 --save -o peak.jsonl
expect_rc "peak" 0
check_table "peak .jsonl" peak.jsonl test,threads,gflops,gflops_per_core 1 "threads,gflops,gflops_per_core"
# The fp32 one-core figure is the one training's MFU now divides by.
if python3 - peak.jsonl peakcache/peak-fp32.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
one = [r for r in rows if r["test"] == "fp32_fma" and int(r["threads"]) == 1]
cached = float(open(sys.argv[2]).read().split("\t")[0])
assert len(one) == 1 and abs(float(one[0]["gflops"]) - cached) < 0.051, (one, cached)
PY
then ok "peak --save refreshes the cached fp32 figure"; else bad "peak --save: cache not refreshed"; fi
run benchmark peak --runs 0
expect_rc "peak --runs 0" 2
mkdir io
run benchmark checkpoint-io --dir io --size_mb 2 -o io.csv
expect_rc "checkpoint-io" 0
check_table "checkpoint-io .csv" io.csv test,size_mb,gbps 4 "size_mb,gbps"
expect_in "checkpoint-io times a safetensors save" "ckpt_save" "$(cat io.csv)"
if [[ -z $(ls -A io) ]]; then ok "checkpoint-io leaves nothing behind"; else bad "left in io/: $(ls -A io)"; fi
run benchmark checkpoint-io --dir io --size_mb 1 --no_ckpt -o io2.md
expect_rc "checkpoint-io --no_ckpt" 0
check_table "checkpoint-io --no_ckpt .md" io2.md test,size_mb,gbps 2 "gbps"

# ---- train (mock data, no dataset) -------------------------------------------
{ exp_header bench; tiny_model; cat <<Y
      mock_data: true
      micro_batch_size: 2
      global_batch_size: 2
      train_iters: 1000
      save: $T/ckpt
      save_interval: 1
Y
} > exp.yaml
run benchmark train --config exp.yaml --warmup 1 --iters 2 -o train.json
expect_rc "train on mock data" 0
check_table "train .json" train.json exp_name,params,seq_length,global_batch,threads,steps,step_ms,tokens_per_s,tflops,mfu 1 "params,steps,step_ms,tokens_per_s,tflops,mfu"
steps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["steps"])' train.json)
expect_eq "warm-up steps left out" "$steps" 2
if [[ ! -e $T/ckpt ]]; then ok "benchmark train saves no checkpoint"; else bad "a checkpoint was saved"; fi
run benchmark train --config exp.yaml --warmup 0 --iters 1 micro_batch_size=1 global_batch_size=1
expect_rc "train with key=value overrides" 0
expect_in "prints the table" "tokens_per_s" "$OUT"

# ---- --device: through the device layer (issue 24) ----------------------------
# PRIMUS_DEVICE_TAGGED=1 makes the CPU backend the tagged test device (its
# memory unreachable from the host), so the GPU code path runs here.
export PRIMUS_DEVICE_TAGGED=1
run benchmark gemm --device cpu --M 48 --N 40 --K 32 --dtype bf16 --duration 0.02 -o dgemm.jsonl
expect_rc "gemm --device cpu (tagged)" 0
check_table "gemm --device: the gemm columns, the peak and the timer" dgemm.jsonl "$GEMM_COLS,peak_tflops,timer" 1 "iters,avg_ms,tflops,gbps,intensity,peak_tflops"
expect_in "gemm --device: the device's name as the backend" '"backend": "tagged"' "$(cat dgemm.jsonl)"
expect_in "gemm --device: timed around a sync (no device timer)" '"timer": "host + sync"' "$(cat dgemm.jsonl)"
expect_in "gemm --device: the title names the device" "tagged test memory" "$OUT"
run benchmark attention --device cpu --seq 32 --heads 4 --kv_heads 2 --head_dim 8 --duration 0.02 -o dattn.csv
expect_rc "attention --device cpu" 0
check_table "attention --device .csv" dattn.csv pass,dtype,batch,seq,heads,kv_heads,head_dim,causal,iters,avg_ms,tflops,device,peak_tflops,peak_fraction,timer 2 "iters,avg_ms,tflops"
run benchmark attention --device cpu --dtype bf16 --seq 32 --heads 4 --kv_heads 2 --head_dim 16 --duration 0.02 -o dattn16.jsonl
expect_rc "attention --device --dtype bf16" 0
check_table "attention --device bf16 .jsonl" dattn16.jsonl pass,dtype,batch,seq,heads,kv_heads,head_dim,causal,iters,avg_ms,tflops,device,peak_tflops,peak_fraction,timer 2 "iters,avg_ms,tflops"
expect_in "attention --device bf16: the dtype column" '"dtype": "bf16"' "$(cat dattn16.jsonl)"
expect_in "attention --device bf16: the title" "bf16 operands) on" "$OUT"
run benchmark memory --device cpu --size_mb 2 --duration 0.02 -o dmem.tsv
expect_rc "memory --device cpu" 0
check_table "memory --device: three directions" dmem.tsv test,array_mb,device,iters,avg_ms,gbps,best_gbps,peak_gbps,peak_fraction,timer 3 "iters,avg_ms,gbps,best_gbps"
for t in copy_d2d upload_h2d download_d2h; do expect_in "memory --device: $t" "$t" "$(cat dmem.tsv)"; done
run benchmark peak --device cpu --runs 1 --gemm_size 48 --copy_mb 2 --duration 0.02 -o dpeak.csv
expect_rc "peak --device cpu" 0
check_table "peak with a device: the device columns" dpeak.csv test,threads,gflops,gflops_per_core,device,gbps,peak,peak_fraction 3 ""
for t in device_gemm_bf16 device_gemm_fp32 device_copy_d2d; do expect_in "peak: $t row" "$t" "$(cat dpeak.csv)"; done
run benchmark train --config exp.yaml --warmup 0 --iters 1 --device cpu -o dtrain.csv
expect_rc "train --device cpu (tagged)" 0
check_table "train --device: device and peak columns" dtrain.csv exp_name,params,seq_length,global_batch,threads,steps,step_ms,tokens_per_s,tflops,mfu,device,peak_tflops 1 "steps,step_ms,tokens_per_s,tflops"
expect_in "train --device: the tagged device" ",tagged," "$(cat dtrain.csv)"
unset PRIMUS_DEVICE_TAGGED
# cuda without a GPU: exit 2 naming what is missing, before anything runs.
for s in "gemm" "attention" "memory" "peak" "train --config exp.yaml"; do
  run benchmark $s --device cuda
  expect_rc "$s --device cuda without a GPU" 2
  expect_in "$s --device cuda: names the device and what is missing" "device: cuda" "$ERR"
done
run benchmark gemm --device tpu
expect_rc "gemm --device tpu" 2
expect_in "gemm --device tpu: the choices" "expected auto, cpu or cuda" "$ERR"
run benchmark gemm --device cpu --backend onednn
expect_rc "gemm --device with --backend" 2
expect_in "gemm --device with --backend: why" "with --device the device's own GEMM runs" "$ERR"
run benchmark gemm --device cpu --tune
expect_rc "gemm --device with --tune" 2
# auto without a GPU: peak stays the CPU's table.
run benchmark peak --runs 1
expect_rc "peak (auto, no GPU)" 0
expect_not_in "peak without a GPU: no device rows" "device_gemm" "$OUT"

# ---- tokenizer keeps its lines and gains --output-file ------------------------
# 1 MB, so that mb_per_s (two decimals) stays above 0.00 even when a loaded
# machine stalls the run for tens of milliseconds (40 bytes in 8 ms printed
# 0.00 once).
for ((i = 0; i < 25000; i++)); do printf 'the jury said\nthe grand county election\n'; done > corpus.txt
run benchmark tokenizer --input corpus.txt --tokenizer_type ByteTokenizer --repeat 1 -o tok.csv
expect_rc "tokenizer -o tok.csv" 0
expect_in "tokenizer still prints MB/s" "MB/s" "$OUT"
check_table "tokenizer .csv" tok.csv implementation,tokenizer,bytes,documents,tokens,seconds,mb_per_s,workers 1 "bytes,tokens,mb_per_s"

# ---- errors -------------------------------------------------------------------
err_case() { # NAME EXPECTED-RC NEEDLE ARGS...
  local name=$1 rc=$2 needle=$3
  shift 3
  run benchmark "$@"
  expect_rc "$name" "$rc"
  expect_in "$name: names $needle" "$needle" "$ERR"
}
err_case "gemm --M 0" 2 "--M" gemm --M 0
err_case "gemm unknown backend" 2 "--backend" gemm --M 8 --N 8 --K 8 --backend cublas
err_case "gemm bad dtype" 2 "--dtype" gemm --dtype fp16
run benchmark gemm --M 8 --N 8 --K 8 --dtype bf16 --duration 0.01
expect_rc "gemm bf16" 0
expect_in "gemm bf16: the row says bf16" "bf16" "$OUT"
err_case "gemm unknown output extension" 2 ".xlsx" gemm --M 8 --N 8 --K 8 -o out.xlsx
if [[ ! -e out.xlsx ]]; then ok "nothing written for an unknown extension"; else bad "out.xlsx written"; fi
err_case "gemm negative duration" 2 "--duration" gemm --duration -1
err_case "gemm unknown option" 2 "--Q" gemm --Q 3
err_case "gemm-dense without --model" 2 "--model" gemm-dense
err_case "gemm-dense unknown preset" 2 "llama3_8B" gemm-dense --model llama3_8b
err_case "gemm-dense --seq_length 0" 2 "--seq-length" gemm-dense --model llama_tiny --seq_length 0
err_case "attention kv_heads" 2 "--kv-heads" attention --heads 4 --kv_heads 3
err_case "checkpoint-io missing dir" 2 "--dir" checkpoint-io --dir "$T/nope"
err_case "memory --size_mb 0" 2 "--size-mb" memory --size_mb 0
err_case "launch bad extension" 2 ".docx" launch -o x.docx
err_case "train without --config" 2 "--config" train
err_case "train --iters 0" 2 "--iters" train --config exp.yaml --iters 0

# bench/train_vs_torch.sh's tables from a results file (TABLE_FROM: nothing
# runs): with three rounds, every primus row's ratio is against its own
# round's torch row and % of peak against its own round's peak, and the
# summary takes medians; a results file of before ROUNDS (16 columns) still
# renders, as round 1 against the cached peak.
race_row() { # impl ms round peak
  printf 'tiny\t2\t%s\t%s\t102400\t0.5\t1\t128\t4\t4\t2\t352\t256\t128\t16\t20\t%s\t%s\n' "$@"
}
{
  race_row "torch (openblas, passive)" 100 1 100
  race_row "primus onednn passive" 80 1 100
  race_row "torch (openblas, passive)" 120 2 200
  race_row "primus onednn passive" 60 2 200
  race_row "torch (openblas, passive)" 90 3 100
  race_row "primus onednn passive" 60 3 100
} >"$T/race.tsv"
race=$(OUT="$T/race" TABLE_FROM="$T/race.tsv" bash "$PRIMUS_SRC/bench/train_vs_torch.sh" 2>&1)
row() { grep -F "| $1 | $2 |" <<<"$race" | head -1; }
expect_in "race: round 1 ratio against round 1's torch" "| 1.25 |" "$(row 'primus onednn passive' 1)"
expect_in "race: round 2 ratio against round 2's torch" "| 2.00 |" "$(row 'primus onednn passive' 2)"
# tiny: 6 x matmul params + 12 L C S flops a token; 2048 tokens in 60 ms on
# 2 threads of a 200 GFLOP/s core (round 2) is half of round 3's share.
p2=$(row 'primus onednn passive' 2 | awk -F'|' '{gsub(/[ %]/, "", $10); print $10}')
p3=$(row 'primus onednn passive' 3 | awk -F'|' '{gsub(/[ %]/, "", $10); print $10}')
if awk -v a="$p2" -v b="$p3" 'BEGIN { exit !(a > 0 && (b / a - 2) ^ 2 < 1e-4) }'; then
  ok "race: % of peak uses each round's own peak ($p2% vs $p3%)"
else
  bad "race: % of peak per round: round 2 $p2%, round 3 $p3%"
fi
summary=$(grep -F "| primus onednn passive | 128 | 3 |" <<<"$race")
expect_in "race: median ms/step over 3 rounds" "| 60.0 |" "$summary"
expect_in "race: median ratio" "| 1.50 |" "$summary"
expect_in "race: ratio range" "| 1.25-2.00 |" "$summary"
cut -f1-16 "$T/race.tsv" >"$T/race16.tsv"
race=$(OUT="$T/race16" TABLE_FROM="$T/race16.tsv" bash "$PRIMUS_SRC/bench/train_vs_torch.sh" 2>&1)
expect_not_in "race: 16-column results have no summary" "Median over" "$race"
expect_in "race: 16-column results render as round 1" "| tiny | 2 | primus onednn passive | 1 |" "$race"

run benchmark --help
expect_rc "benchmark --help" 0
for s in gemm gemm-dense gemm-grouped attention launch memory checkpoint-io train tokenizer; do
  expect_in "help lists $s" "$s" "$OUT"
done
finish
