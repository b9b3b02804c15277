#!/usr/bin/env bash
# One option spelling: everything shown to users (README, docs/, --help,
# the generated reference, messages) writes options with dashes
# (--output-prefix), while the parser keeps accepting underscores
# (--output_prefix) silently.
source "$(dirname "$0")/lib.sh"

# An option written with an underscore: --word_word, not inside a longer
# word. nvcc's own --use_fast_math is the one foreign option the docs name.
underscored() { # FILE...: prints FILE:LINE: matches
  grep -nHoE -- '(^|[^A-Za-z0-9-])--[a-z0-9]+(_[a-z0-9]+)+' "$@" 2>/dev/null | grep -v -- '--use_fast_math'
}

# ---- the written pages ----------------------------------------------------------
hits=$(cd "$PRIMUS_SRC" && underscored README.md docs/*.md docs/cli/*.md)
if [[ -z $hits ]]; then ok "README and docs/ write options with dashes"; else bad "underscored options in the docs: $hits"; fi

# The reference as this binary renders it (its help tables and texts).
run docs --output "$T/cli"
expect_rc "primus docs" 0
hits=$(underscored "$T"/cli/*.md)
if [[ -z $hits ]]; then ok "the generated reference writes options with dashes"; else bad "underscored options in primus docs: $hits"; fi

# The self-check: the scan finds an underscored option where there is one.
printf 'run `primus data preprocess --output_prefix x`\n' >"$T/planted.md"
expect_in "the scan finds a planted --output_prefix" "--output_prefix" "$(underscored "$T/planted.md")"

# Every --help screen: the top, the runtimes, every task and subtask.
helps=0
hits=""
for words in "" direct container slurm; do
  out=$("$PRIMUS_BIN" $words --help 2>&1)
  hits+=$(underscored <(printf '%s\n' "$out"))
  helps=$((helps + 1))
done
while read -r task sub; do
  out=$("$PRIMUS_BIN" "$task" --help 2>&1)$'\n'$("$PRIMUS_BIN" "$task" "$sub" --help 2>&1)
  hits+=$(underscored <(printf '%s\n' "$out") | sed "s|^|$task $sub: |")
  helps=$((helps + 1))
done < <(sed -n 's/^## \([a-z]*\) \([a-z-]*\)$/\1 \2/p' "$T"/cli/*.md)
if ((helps > 30)); then ok "$helps help screens read"; else bad "only $helps help screens found"; fi
if [[ -z $hits ]]; then ok "--help writes options with dashes"; else bad "underscored options in --help: $hits"; fi

# Messages written in the sources: no string literal names an option with an
# underscore (messages built from the option tables are checked below).
hits=$(cd "$PRIMUS_SRC" && grep -rnHE -- '"[^"]*(^|[^A-Za-z0-9-])--[a-z0-9]+(_[a-z0-9]+)+' src include \
  | grep -v -- '--use_fast_math')
if [[ -z $hits ]]; then ok "no message in src/ spells an option with an underscore"; else bad "underscored options in src/: $hits"; fi

# ---- both spellings parse, messages use dashes ------------------------------------
printf 'the cat sat\non the mat\nand the dog ran\n' >"$T/corpus.txt"
run data preprocess --input "$T/corpus.txt" --line_docs --json_keys text --output_prefix "$T/under"
expect_rc "preprocess with --output_prefix --line_docs --json_keys" 0
run data preprocess --input "$T/corpus.txt" --line-docs --json-keys text --output-prefix "$T/dash"
expect_rc "preprocess with --output-prefix --line-docs --json-keys" 0
if cmp -s "$T/under.bin" "$T/dash.bin" && cmp -s "$T/under.idx" "$T/dash.idx"; then
  ok "both spellings write the same dataset"
else
  bad "the two spellings wrote different datasets"
fi
run data preprocess --input "$T/corpus.txt" --line-docs --json_keys text --output-prefix "$T/mixed" --log_interval=1
expect_rc "mixed spellings and --key_name=value" 0
expect_file "the mixed run wrote its dataset" "$T/mixed.bin"

# Messages from the tables, from the task code and from the did-you-mean.
run data preprocess --input "$T/corpus.txt"
expect_rc "missing --output-prefix" 2
expect_in "the task's message writes --output-prefix" "--output-prefix PREFIX is required" "$ERR"
run data preprocess --input "$T/corpus.txt" --output_prefix "$T/x" --log_interval 0
expect_rc "--log_interval 0" 2
expect_in "its message writes --log-interval" "--log-interval 0" "$ERR"
run data train-tokenizer --input "$T/corpus.txt" --vocab_size many --output "$T/t.json"
expect_rc "--vocab_size many" 2
expect_in "the parser's message writes --vocab-size" "--vocab-size: expected an integer" "$ERR"
run data preprocess --input "$T/corpus.txt" --output_prefx "$T/x"
expect_rc "misspelled --output_prefx" 2
expect_in "the suggestion writes --output-prefix" "did you mean --output-prefix?" "$ERR"
run data preprocess --input "$T/corpus.txt" --output-prefix
expect_in "a missing value names --output-prefix" "--output-prefix needs a value" "$ERR"
run benchmark allreduce --min_bytes 4096 --max_bytes 1024
expect_rc "--max_bytes below --min_bytes" 2
expect_in "the benchmark's bound writes --max-bytes" "--max-bytes must be at least 4096" "$ERR"
run train pretrain --dry_run
expect_rc "a global option after the task" 2
expect_in "the hint writes --dry-run" "(primus --dry-run <task> ...)" "$ERR"

echo "# $_pass passed, $_fail failed"
((_fail == 0))
