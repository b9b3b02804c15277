#!/usr/bin/env bash
# The CLI grammar: help at every level, version, exit codes for bad input.
source "$(dirname "$0")/lib.sh"

run --help
expect_rc "primus --help" 0
expect_in "help names the grammar" "primus [global] <runtime> [runtime-opts] -- <task>" "$OUT"
expect_in "help lists runtimes" "container" "$OUT"
expect_in "help lists tasks" "config" "$OUT"

run --version
expect_rc "--version" 0
expect_in "version text" "primus 0." "$OUT"

run
expect_rc "no arguments" 2
expect_in "no arguments shows help on stderr" "usage: primus" "$ERR"

run bogus
expect_rc "unknown runtime or task" 2
expect_in "unknown names the word" 'unknown runtime or task "bogus"' "$ERR"
run confg show
expect_rc "misspelled task" 2
expect_in "did you mean a task" 'did you mean "config"' "$ERR"
run direkt -- config show
expect_in "did you mean a runtime" 'did you mean "direct"' "$ERR"

run direct config show
expect_rc "missing --" 2
expect_in "missing -- explained" 'missing "--"' "$ERR"

run --bogus config presets
expect_rc "unknown global option" 2
expect_in "global option named" "unknown global option --bogus" "$ERR"
run --debg config presets
expect_in "global option suggestion" "did you mean --debug" "$ERR"

run config shw
expect_rc "unknown subtask" 2
expect_in "subtask suggestion" 'did you mean "config show"' "$ERR"
run config
expect_rc "task without subtask" 2

run direct --help
expect_rc "runtime help" 0
expect_in "runtime help lists --nproc" "--nproc" "$OUT"
run container --help
expect_in "container help lists --image" "--image" "$OUT"
run slurm --help
expect_rc "slurm help" 0
run config --help
expect_rc "task help" 0
expect_in "task help lists subtasks" "validate" "$OUT"
run config show --help
expect_rc "subtask help" 0
expect_in "subtask help lists options" "--no-origins" "$OUT"
run direct -- config show --help
expect_rc "subtask help behind a runtime" 0
run config presets --bogus
expect_rc "unknown task option" 2
expect_in "task option named" "unknown option --bogus" "$ERR"
run replay /nowhere --forse
expect_in "task option suggestion" "did you mean --force" "$ERR"
# Tasks that take --key value config overrides still catch typos and
# global options given after the task.
run train pretrain --confg x.yaml
expect_rc "a misspelt option of a task with overrides" 2
expect_in "did you mean --config" "unknown option --confg (did you mean --config?)" "$ERR"
run train pretrain --config x.yaml --dry-run
expect_rc "--dry-run after the task" 2
expect_in "says where global options go" "--dry-run is a global option: put it before the runtime or the task" "$ERR"

# primus-cli is the same program.
CLI=$(dirname "$PRIMUS_BIN")/primus-cli
if [[ -x $CLI ]]; then
  OUT=$("$CLI" --version); expect_in "primus-cli alias" "primus 0." "$OUT"
else
  bad "primus-cli alias missing next to $PRIMUS_BIN"
fi

# The short form equals the direct runtime.
run config presets
A=$OUT
run direct -- config presets
expect_eq "short form == direct" "$A" "$OUT"
expect_in "presets list model presets" "llama_tiny" "$A"

finish
