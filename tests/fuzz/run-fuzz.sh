#!/usr/bin/env bash
# run-fuzz.sh BUILD SRC NAME... - runs each libFuzzer harness of a
# PRM_FUZZ build for $FUZZ_SECONDS (default 30) over the seeds (made
# first), the saved inputs under SRC/corpus/NAME and its own work corpus,
# with SRC/NAME.dict when there is one. Prints one line per harness
# (executions, cov, ft, findings); exits 1 when any harness found a crash.
set -u
build=$1 src=$2
shift 2
secs=${FUZZ_SECONDS:-30}
"$build/tests/fuzz/fuzz-seeds" "$build/fuzz-seeds" >/dev/null || exit 1
mkdir -p "$build/fuzz-findings" "$build/fuzz-logs"
status=0
for name in "$@"; do
  work="$build/fuzz-work/$name"
  mkdir -p "$work"
  dirs=("$work" "$build/fuzz-seeds/$name")
  [ -d "$src/corpus/$name" ] && dirs+=("$src/corpus/$name")
  dict=()
  [ -f "$src/$name.dict" ] && dict=(-dict="$src/$name.dict")
  log="$build/fuzz-logs/$name.log"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/tests/fuzz/fuzz-$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-findings/$name-" "${dict[@]}" \
    "${dirs[@]}" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '#[0-9]+.*(cov|DONE)' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  found=$(ls "$build/fuzz-findings" 2>/dev/null | grep -c "^$name-" || true)
  printf '%-16s %6ss  execs %-9s cov %-6s ft %-6s findings %s%s\n' "$name" "$secs" "${execs:-?}" \
    "${cov:-?}" "${ft:-?}" "$found" "$([ $rc -ne 0 ] && echo "  (exit $rc: see $log)")"
  [ $rc -ne 0 ] && status=1
done
exit $status
