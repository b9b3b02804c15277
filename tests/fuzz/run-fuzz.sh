#!/usr/bin/env bash
# run-fuzz.sh BUILD SRC NAME[:SECONDS]... - runs each libFuzzer harness of
# a PRM_FUZZ build over the seeds (made first, unless they are newer than
# fuzz-seeds), the saved inputs under SRC/corpus/NAME and its own work
# corpus, with SRC/NAME.dict when there is one.
#   FUZZ_SECONDS=N (default 30): each harness runs N seconds of wall-clock
#     time (NAME:SECONDS gives one harness its own N).
#   FUZZ_CPU_SECONDS=N: each harness runs until it has used N CPU-seconds
#     (user + system, measured), in rounds: on a loaded machine the wall
#     clock says little about how much fuzzing ran. Each round's wall-clock
#     limit is what is left divided by the CPU share of the round before
#     (10 s to 600 s, so that a change of load is seen).
# Prints one line per harness (executions, cov and ft at the end, CPU
# seconds, findings) and the total CPU time; exits 1 when any harness found
# a crash (it stops at its first).
set -u
build=$1 src=$2
shift 2
secs=${FUZZ_SECONDS:-30}
cpu_mode=${FUZZ_CPU_SECONDS:+1}
[ -n "$cpu_mode" ] && secs=$FUZZ_CPU_SECONDS
if ! [ "$build/fuzz-seeds/.made" -nt "$build/tests/fuzz/fuzz-seeds" ]; then
  "$build/tests/fuzz/fuzz-seeds" "$build/fuzz-seeds" >/dev/null || exit 1
  touch "$build/fuzz-seeds/.made"
fi
mkdir -p "$build/fuzz-findings" "$build/fuzz-logs"
status=0 total_cpu=0
TIMEFORMAT='%U %S'
for arg in "$@"; do
  name=${arg%%:*} want=$secs
  [ "$arg" != "$name" ] && want=${arg#*:}
  work="$build/fuzz-work/$name"
  mkdir -p "$work"
  dirs=("$work" "$build/fuzz-seeds/$name")
  [ -d "$src/corpus/$name" ] && dirs+=("$src/corpus/$name")
  dict=()
  [ -f "$src/$name.dict" ] && dict=(-dict="$src/$name.dict")
  log="$build/fuzz-logs/$name.log"
  : >"$log"
  cpu=0 execs=0 rounds=0 share=0.5 rc=0
  while :; do
    if [ -n "$cpu_mode" ]; then
      left=$(awk -v w="$want" -v c="$cpu" 'BEGIN { print w - c }')
      awk -v l="$left" 'BEGIN { exit !(l <= 0) }' && break
      wall=$(awk -v l="$left" -v s="$share" 'BEGIN { t = l / (s > 0.05 ? s : 0.05); t = t < 10 ? 10 : t > 600 ? 600 : t; printf "%d", t + 0.5 }')
    else
      [ $rounds -ge 1 ] && break
      wall=$want
    fi
    t0=$(date +%s.%N)
    { time ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$build/tests/fuzz/fuzz-$name" -max_total_time="$wall" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-findings/$name-" "${dict[@]}" \
        "${dirs[@]}" >"$log.round" 2>&1; } 2>"$log.time"
    rc=$?
    t1=$(date +%s.%N)
    used=$(awk '{ print $1 + $2 }' "$log.time")
    share=$(awk -v u="$used" -v a="$t0" -v b="$t1" 'BEGIN { print (b > a ? u / (b - a) : 0.5) }')
    cpu=$(awk -v c="$cpu" -v u="$used" 'BEGIN { print c + u }')
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log.round" | tail -1)
    execs=$((execs + ${n:-0}))
    last=$(grep -E '#[0-9]+.*(cov|DONE)' "$log.round" | tail -1)
    [ -n "$last" ] && lastline=$last
    echo "== round $((rounds + 1)): wall limit ${wall}s, CPU ${used}s" >>"$log"
    cat "$log.round" >>"$log"
    rounds=$((rounds + 1))
    [ $rc -ne 0 ] && break
  done
  rm -f "$log.round" "$log.time"
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"${lastline:-}")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"${lastline:-}")
  lastline=
  total_cpu=$(awk -v a="$total_cpu" -v c="$cpu" 'BEGIN { print a + c }')
  # libFuzzer's artifacts: <prefix>crash-<sha1>, leak-, timeout-, oom-, slow-unit-.
  found=$(ls "$build/fuzz-findings" 2>/dev/null | grep -cE "^$name-(crash|leak|timeout|oom|slow-unit)-" || true)
  printf '%-16s %6ss  cpu %7.1fs  execs %-9s cov %-6s ft %-6s findings %s%s\n' "$name" "$want" "$cpu" \
    "$execs" "${cov:-?}" "${ft:-?}" "$found" "$([ $rc -ne 0 ] && echo "  (exit $rc: see $log)")"
  [ $rc -ne 0 ] && status=1
done
printf 'total CPU %.1f s (%.1f CPU-minutes)\n' "$total_cpu" "$(awk -v t="$total_cpu" 'BEGIN { print t / 60 }')"
exit $status
