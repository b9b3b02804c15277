#!/usr/bin/env bash
# The communication layer end to end: every collective benchmark and
# overlap as two ranks through `primus direct --nproc 2` (mpirun), with
# --check, tiny sizes and few iterations; the output files parse with the
# documented columns and positive finite figures; busbw = algbw x the
# nccl-tests factor; --check catches a corrupted element
# (PRIMUS_COMM_CORRUPT_TEST, a test-only knob) and exits 3 naming it; a
# single-rank run works (busbw 0); reduce to a root, blocking and
# non-blocking, over 2 and 3 ranks (the unit test tests/test-comm.c under
# mpirun); the preflight all-reduce check runs, and SKIPs with a hint
# without mpirun. Speed is never asserted.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

if ! command -v mpirun >/dev/null; then
  echo "mpirun is missing (Debian: openmpi-bin); scripts/deps.sh installs it"
  bad "mpirun present"
  finish
  exit
fi

# check_coll NAME FILE RANKS MINROWS: the collective table's columns, rows,
# positive finite figures, the rank count, and busbw / algbw.
COLL_COLS=collective,ranks,bytes,count,iters,p50_ms,p95_ms,min_ms,max_ms,algbw_gbs,busbw_gbs,slowest_rank,slowest_ms
check_coll() {
  local msg
  if msg=$(python3 - "$2" "$COLL_COLS" "$3" "$4" <<'PY' 2>&1
import json, math, sys
path, cols, ranks, minrows = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4])
recs = [json.loads(l) for l in open(path) if l.strip()]
assert len(recs) >= minrows, f"{len(recs)} rows, expected at least {minrows}"
factor = {"allreduce": 2 * (ranks - 1) / ranks, "broadcast": 1.0 if ranks > 1 else 0.0}
for r in recs:
    assert list(r.keys()) == cols, f"keys {list(r.keys())} != {cols}"
    for c in ("bytes", "count", "iters", "p50_ms", "p95_ms", "min_ms", "max_ms", "algbw_gbs", "slowest_ms"):
        v = r[c]
        assert isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{c} = {v!r} in {r}"
    assert r["ranks"] == ranks, f"ranks {r['ranks']} != {ranks}"
    assert 0 <= r["slowest_rank"] < ranks, r
    assert r["min_ms"] <= r["p50_ms"] <= r["p95_ms"] <= r["max_ms"], r
    f = factor.get(r["collective"], (ranks - 1) / ranks)
    assert abs(r["busbw_gbs"] - r["algbw_gbs"] * f) <= 1e-3 + 1e-3 * r["algbw_gbs"], f"busbw {r['busbw_gbs']} != algbw {r['algbw_gbs']} x {f}"
    if ranks > 1:
        assert r["busbw_gbs"] > 0, r
PY
  ); then ok "$1"; else bad "$1: $msg"; fi
}

# ---- every collective, two ranks, values checked ------------------------------
for c in allreduce allgather reducescatter alltoall broadcast; do
  run direct --nproc 2 -- benchmark "$c" --min_bytes 1024 --max_bytes 65536 --num_sizes 3 \
    --warmup 2 --iters 3 --check --output-file "$c.jsonl" --per_rank "$c-ranks.csv"
  expect_rc "$c over 2 ranks with --check" 0
  check_coll "$c .jsonl: columns, figures, busbw factor" "$c.jsonl" 2 3
  expect_in "$c prints the table once (rank 0)" "| $c" "$OUT"
  nrows=$(grep -c "^| $c " <<<"$OUT")
  expect_eq "$c: three sizes printed once" "$nrows" 3
  expect_eq "$c --per_rank: one row per rank and size" "$(($(wc -l <"$c-ranks.csv") - 1))" 6
done
# Sizes of the blocked collectives are whole blocks of p f32 elements.
expect_in "allgather sizes are whole blocks (1024 bytes: 2 x 128 f32)" '"bytes": 1024, "count": 128,' "$(cat allgather.jsonl)"

# ---- --check catches a wrong value ---------------------------------------------
export PRIMUS_COMM_CORRUPT_TEST=1:5
run direct --nproc 2 -- benchmark allreduce --min_bytes 64 --max_bytes 4096 --num_sizes 2 \
  --warmup 1 --iters 2 --check
expect_rc "a corrupted element fails --check" 3
expect_in "the error names size, rank and element" "allreduce --check: 64 bytes: rank 1: element 5 is" "$ERR"
run direct --nproc 2 -- benchmark alltoall --min_bytes 64 --max_bytes 64 --num_sizes 1 \
  --warmup 1 --iters 2 --check
expect_rc "all-to-all corruption fails --check" 3
expect_in "all-to-all error names the expected value" "expected" "$ERR"
run direct --nproc 2 -- benchmark allreduce --min_bytes 64 --max_bytes 64 --num_sizes 1 --warmup 1 --iters 2
expect_rc "without --check nothing is verified" 0
unset PRIMUS_COMM_CORRUPT_TEST

# ---- one rank ---------------------------------------------------------------------
run benchmark allreduce --min_bytes 1024 --max_bytes 8192 --num_sizes 2 --warmup 1 --iters 3 --check -o one.jsonl
expect_rc "allreduce with one rank (singleton MPI)" 0
check_coll "one rank: busbw is 0" one.jsonl 1 2
expect_in "one rank says why busbw is 0" "one rank" "$OUT"
run benchmark broadcast --max_bytes 4096 --num_sizes 1 --warmup 0 --iters 1 --check
expect_rc "broadcast with one rank" 0

# ---- overlap ------------------------------------------------------------------------
run direct --nproc 2 -- benchmark overlap --M 128 --N 128 --K 128 --bytes 262144 --iters 3 --chunks 4 -o ov.jsonl
expect_rc "overlap over 2 ranks" 0
if msg=$(python3 - ov.jsonl <<'PY' 2>&1
import json, math, sys
cols = "ranks,backend,M,N,K,bytes,chunks,iters,gemm_ms,comm_ms,both_ms,hidden_fraction".split(",")
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(recs) == 1, recs
r = recs[0]
assert list(r.keys()) == cols, list(r.keys())
for c in ("gemm_ms", "comm_ms", "both_ms"):
    assert math.isfinite(r[c]) and r[c] > 0, (c, r)
assert r["ranks"] == 2 and 0 <= r["hidden_fraction"] <= 1, r
PY
); then ok "overlap .jsonl: columns, positive times, hidden in [0,1]"; else bad "overlap .jsonl: $msg"; fi
run benchmark overlap --M 64 --N 64 --K 64 --bytes 4096 --iters 2
expect_rc "overlap with one rank" 0

# ---- reduce to one root: the unit test's multi-rank group -------------------------------
# tests/test-comm.c started by mpirun runs its multi-rank tests: blocking
# reduce at every root (NULL and untouched receive buffers away from it, in
# place), and the distributed optimizer's pattern of non-blocking reduces of
# pieces into their owners' shards, twice to the same bits; the variable-length
# gather (prm_comm_gatherv) of uneven blocks to every root; and expert
# parallelism's uneven all-to-all(v) there and back. 3 ranks gives uneven
# shards and a non-power-of-two tree.
unit=${PRIMUS_BUILD:-$(dirname "$PRIMUS_BIN")}/tests/test-comm
if [[ -x $unit ]]; then
  mpiflags=(--oversubscribe)
  [[ $(id -u) == 0 ]] && mpiflags+=(--allow-run-as-root)
  for np in 2 3; do
    OUT=$(timeout 300 mpirun "${mpiflags[@]}" -np "$np" "$unit" 2>&1)
    RC=$?
    ERR=$OUT
    expect_rc "reduce, ireduce, gatherv and alltoallv over $np ranks (test-comm under mpirun)" 0
    expect_eq "every rank passed the four multi-rank tests" "$(grep -c 'PASSED  \] 4 test' <<<"$OUT")" "$np"
  done
else
  bad "reduce over several ranks: $unit is missing (set PRIMUS_BUILD)"
fi

# ---- bad arguments ------------------------------------------------------------------
run benchmark allreduce --min_bytes 4096 --max_bytes 1024
expect_rc "max_bytes below min_bytes" 2
expect_in "the error names the option" "--max-bytes" "$ERR"
run benchmark allgather --per_rank x.bogus
expect_rc "unknown --per_rank format" 2

# ---- preflight: the all-reduce and overlap checks --------------------------------------------------
run preflight check --perf --quick --workspace "$T"
expect_in "preflight reports the all-reduce check" "perf.allreduce" "$OUT"
line=$(grep "perf.allreduce" <<<"$OUT")
expect_in "the all-reduce check measured GB/s" "GB/s vs baseline" "$line"
line=$(grep "perf.overlap" <<<"$OUT")
expect_in "the overlap check measured a hidden fraction" "hidden vs baseline" "$line"
mkdir -p "$T/nompi"
for tool in bash env python3 cat uname; do ln -s "$(command -v $tool)" "$T/nompi/$tool"; done
OUT=$(PATH="$T/nompi" "$PRIMUS_BIN" preflight check --perf --quick --workspace "$T" 2>"$T/.err")
line=$(grep -A1 "perf.allreduce" <<<"$OUT")
expect_in "without mpirun the check SKIPs" "SKIP" "$line"
expect_in "with a hint" "openmpi-bin" "$line"
line=$(grep -A1 "perf.overlap" <<<"$OUT")
expect_in "the overlap check SKIPs too" "SKIP" "$line"

finish
