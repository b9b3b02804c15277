#!/usr/bin/env bash
# An error every rank hits is printed once: `primus direct --nproc N` folds
# the ranks' final errors into one line under the lowest rank that had it,
# "(same on rank 1)" for the others; each rank's log keeps its own.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
multirank_setup

# A config error every rank hits when it opens the data: data_path names
# nothing (config validate would say so too; the ranks find it themselves).
tiny_exp bad "data_path: $T/no-such-corpus" "train_iters: 2"
MSG="$T/no-such-corpus: no such text file"

run direct --nproc 2 -- train pretrain --config bad.yaml
expect_rc "every rank fails" 2
lines=$(grep -c "^primus: error: .*no-such-corpus" <<<"$ERR")
expect_eq "the error is printed once" "1" "$lines"
expect_in "under rank 0" "primus: error: [rank 0/2] $MSG" "$ERR"
RD=$(ls -d "$T"/ws/team/tester/bad/run-* | tail -1)
# mpirun stops the job when the first rank ends: rank 1 may be stopped before
# it reaches its error. When it reached it (its log says so), it is folded.
if grep -q "\[ERROR\] $MSG" "$RD/logs/rank-1.log" 2>/dev/null; then
  expect_in "rank 1's identical error is folded" "(same on rank 1)" "$ERR"
else
  ok "rank 1 was stopped before its error (nothing to fold)"
fi
expect_in "rank 0's log has the error" "[ERROR] $MSG" "$(cat "$RD/logs/rank-0.log")"
left=$(ls "$RD"/logs/*.error 2>/dev/null)
expect_eq "no rank-R.error file is left behind" "" "$left"
expect_in "the launcher still points at the logs" "each rank's log is $RD/logs/rank-R.log" "$ERR"

# Three ranks: the ranks that reached the error are listed as ranges, and
# the folded line comes before the launcher's closing line.
run direct --nproc 3 -- train pretrain --config bad.yaml
expect_rc "three ranks fail" 2
expect_eq "three ranks: printed once" "1" "$(grep -c "^primus: error: .*no-such-corpus" <<<"$ERR")"
RD=$(ls -d "$T"/ws/team/tester/bad/run-* | tail -1)
reached=()
for r in 1 2; do grep -q "\[ERROR\] $MSG" "$RD/logs/rank-$r.log" 2>/dev/null && reached+=("$r"); done
# A rank writes its .error before its log line, so a rank whose log has the
# error is folded; one stopped between the two may be folded as well.
folded=$(grep -o "(same on ranks\? [0-9, -]*)" <<<"$ERR")
case "${reached[*]}" in
  "1 2") expect_eq "ranks 1 and 2 as a range" "(same on ranks 1-2)" "$folded" ;;
  "1" | "2")
    if [[ $folded == "(same on rank ${reached[0]})" || $folded == "(same on ranks 1-2)" ]]; then
      ok "rank ${reached[0]} is folded ($folded)"
    else bad "rank ${reached[0]} reached the error, folded: '$folded'"; fi ;;
  *) ok "no other rank reached its error (folded: '$folded')" ;;
esac
first=$(grep -n "^primus: error:" <<<"$ERR" | head -1 | cut -d: -f1)
launcher=$(grep -n "mpirun exited with" <<<"$ERR" | head -1 | cut -d: -f1)
if [[ -n $first && -n $launcher && $first -lt $launcher ]]; then
  ok "the folded error comes before the launcher's closing line"
else
  bad "order of the error ($first) and the launcher's line ($launcher): $ERR"
fi

# A single rank prints its error itself, unchanged.
run train pretrain --config bad.yaml
expect_rc "one rank fails" 2
expect_in "one rank: the plain error line" "primus: error: $MSG" "$ERR"

finish
