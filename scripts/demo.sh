#!/usr/bin/env bash
# demo.sh - what `make demo` runs: a tour of the CLI on this machine. The
# training engine arrives with the train task; until then the demo resolves
# the default experiment, shows the platform, and does a recorded run plus
# its replay with the dry-run and snapshot machinery.
set -euo pipefail
BUILD=${1:-build}
P=$BUILD/primus
EX=configs/examples/llama_tiny-pretrain.yaml

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "primus --version"
"$P" --version
step "primus env   (platform detection and its env profile)"
"$P" env
step "primus config validate --config $EX"
"$P" config validate --config "$EX"
"$P" config validate --config configs/examples/llama3_8B-pretrain.yaml
step "primus config show --config $EX lr=1e-3   (every value with its origin)"
"$P" config show --config "$EX" lr=1e-3 | head -40
echo "  ..."
step "primus --dry-run direct --env DEMO=1 -- config show --config $EX"
"$P" --dry-run direct --env DEMO=1 -- config show --config "$EX" | head -20
step "primus --dry-run slurm sbatch -N 2 -p low -- config show --config $EX"
"$P" --dry-run slurm sbatch -N 2 -p low -- config show --config "$EX"
