#!/usr/bin/env bash
# Runtimes in --dry-run (container, slurm srun/sbatch, direct --nproc), the
# launcher config, `primus env`, plugins, docs and completion.
source "$(dirname "$0")/lib.sh"
build_plugin || { bad "plugin build"; finish; exit 1; }
export PRIMUS_PLUGIN_PATH=$T/plugins
cd "$T"
EX=$PRIMUS_SRC/configs/examples/llama_tiny-pretrain.yaml
INJ='x; rm -rf ~'

run --dry-run direct --nproc 4 -- hello run --config "$EX"
expect_rc "direct dry run" 0
expect_in "mpirun command" "mpirun -np 4" "$OUT"
expect_in "oversubscribe beyond the cores" "--oversubscribe" "$OUT"
[[ $(id -u) == 0 ]] && expect_in "root needs --allow-run-as-root" "--allow-run-as-root" "$OUT"
expect_in "dry run shows the environment" "MASTER_PORT=1234" "$OUT"
expect_in "dry run shows the config" "hidden_size:" "$OUT"
if ls "$T"/output 2>/dev/null | grep -q .; then bad "dry run created a run directory"; else ok "dry run created nothing"; fi

run --dry-run container --image my/img:1 --volume /data --volume "/a b:/c" --env "X=$INJ" -- hello run --config "$EX"
expect_rc "container dry run" 0
expect_in "engine run" " run --rm" "$OUT"
expect_in "host network" "--network=host" "$OUT"
expect_in "host-only volume at the same path" "/data:/data" "$OUT"
expect_in "volume with a space stays one word" "'/a b:/c'" "$OUT"
expect_in "injected value quoted as one word" "'X=x; rm -rf ~'" "$OUT"
expect_in "inner primus direct" "direct -- hello run" "$OUT"
expect_in "image" "my/img:1" "$OUT"
run container -- config presets
expect_rc "container without --image" 2
run container --engine no-such-engine --image i -- config presets
expect_rc "missing container engine is a missing dependency" 1
expect_in "engine named" "no-such-engine" "$ERR"
# The engine's own failures map onto primus' exit codes (0-4), its message kept.
mkdir -p "$T/fake-engine"
printf '#!/bin/sh\necho "Error: docker.io/nope: image not known" >&2\nexit ${FAKE_RC:-125}\n' > "$T/fake-engine/podman"
chmod +x "$T/fake-engine/podman"
PATH="$T/fake-engine:$PATH" run container --engine podman --image nope -- config presets
expect_rc "engine failure (125) is a runtime failure" 3
expect_in "the engine's message" "Error: docker.io/nope: image not known" "$ERR"
expect_in "says what 125 means" "podman failed before the container ran (exit 125" "$ERR"
FAKE_RC=127 PATH="$T/fake-engine:$PATH" run container --engine podman --image nope -- config presets
expect_rc "primus missing in the image (127) is a missing dependency" 1
FAKE_RC=4 PATH="$T/fake-engine:$PATH" run container --engine podman --image nope -- config presets
expect_rc "primus' own exit code inside passes through" 4
(cd "$PRIMUS_SRC" && "$PRIMUS_BIN" --dry-run container --image i -- config presets >/dev/null 2>&1)
RC=$?; ERR=""; expect_rc "container from inside the project folder" 0
run --dry-run container --image i --volume "$T" -- config presets
expect_rc "current folder already a volume" 0

# Platform-specific device flags from fixture trees.
PRIMUS_SYSFS_ROOT=$PRIMUS_SRC/tests/fixtures/sysfs/mi300x-8 run --dry-run container --image i -- config presets
expect_in "AMD devices" "/dev/kfd" "$OUT"
PRIMUS_SYSFS_ROOT=$PRIMUS_SRC/tests/fixtures/sysfs/h100-8 run --dry-run container --image i -- config presets
expect_in "NVIDIA gpus" "--gpus" "$OUT"

run --dry-run slurm srun -N 2 --ntasks-per-node=1 -- --nproc 1 -- hello run --config "$EX"
expect_rc "slurm srun dry run" 0
expect_in "srun flags kept" "srun -N 2 --ntasks-per-node=1" "$OUT"
expect_in "direct options forwarded" "direct --nproc 1 -- hello run" "$OUT"
run --dry-run slurm sbatch -p low --job-name "$INJ" -- hello run --config "$EX" "data_path=$INJ"
expect_rc "slurm sbatch dry run" 0
expect_in "#SBATCH lines" "#SBATCH -p low" "$OUT"
expect_in "sbatch script quotes words" "'data_path=x; rm -rf ~'" "$OUT"
expect_in "srun in the script" "srun " "$OUT"

# Launcher config: sections give defaults, unknown keys are named.
cat > "$HOME/.primus.yaml" <<Y
main:
  debug: false
container:
  image: from-config/img
  volume: [/scratch]
slurm:
  partition: high
Y
run --dry-run container -- config presets
expect_in "container image from ~/.primus.yaml" "from-config/img" "$OUT"
expect_in "container volume from config" "/scratch:/scratch" "$OUT"
run --dry-run slurm srun -- config presets
expect_in "slurm defaults from config" "--partition=high" "$OUT"
cat > "$T/bad-launcher.yaml" <<Y
container:
  imgae: x
Y
run --config "$T/bad-launcher.yaml" --dry-run container -- config presets
expect_rc "unknown launcher key" 2
expect_in "launcher key named with line" "bad-launcher.yaml:2" "$ERR"
expect_in "launcher key suggestion" 'did you mean "image"' "$ERR"
printf 'mian:\n  debug: true\n' > "$T/bad2.yaml"
run --config "$T/bad2.yaml" config presets
expect_rc "unknown launcher section" 2
run --config "$T/none.yaml" config presets
expect_rc "missing launcher config" 2
rm "$HOME/.primus.yaml"

# primus env: platform, profile chain, variables.
PRIMUS_SYSFS_ROOT=$PRIMUS_SRC/tests/fixtures/sysfs/mi300x-8 run env
expect_rc "env on MI300X fixture" 0
expect_in "platform detected" "MI300X" "$OUT"
expect_in "profile chain" "platforms/MI300X.sh" "$OUT"
expect_in "ROCm variable" "HSA_" "$OUT"
run env
expect_in "cpu profile" "platforms/cpu.sh" "$OUT"
expect_in "OMP variables" "OMP_NUM_THREADS" "$OUT"
run env --json
expect_in "platform json" '"name"' "$OUT"

# Plugins: listed with their origin; a broken one is reported, not fatal.
echo "not an elf" > "$T/plugins/broken.so"
run plugins
expect_rc "plugins list" 0
expect_in "plugin task listed" "hello" "$OUT"
expect_in "plugin path shown" "hello.so" "$OUT"
expect_in "broken plugin reported" "broken.so" "$OUT"
rm "$T/plugins/broken.so"
run --help
expect_in "plugin task in help" "[plugin]" "$OUT"

# Docs are generated from the tables and the committed copy is current.
unset PRIMUS_PLUGIN_PATH
run docs --output "$T/docs"
expect_rc "docs" 0
if diff -r "$T/docs" "$PRIMUS_SRC/docs/cli" >"$T/docs.diff"; then
  ok "docs/cli is up to date"
else
  bad "docs/cli is stale: run 'make docs' ($(head -5 "$T/docs.diff"))"
fi

# Completion: the generated script completes runtimes, tasks and options.
run completion bash
expect_rc "completion" 0
echo "$OUT" > "$T/compl.sh"
COMPL=$(bash -c '
  source "$1"
  c() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _primus; echo "${COMPREPLY[*]}"; }
  echo "1:$(c primus co)"; echo "2:$(c primus config s)"; echo "3:$(c primus config show --no)"
  echo "4:$(c primus direct --npr)"; echo "5:$(c primus direct -- conf)"' _ "$T/compl.sh")
expect_in "completes runtimes" "container" "$(grep ^1: <<<"$COMPL")"
expect_in "completes tasks" "completion" "$(grep ^1: <<<"$COMPL")"
expect_in "completes subtasks" "2:show" "$COMPL"
expect_in "completes options" "3:--no-origins" "$COMPL"
expect_in "completes runtime options" "4:--nproc" "$COMPL"
expect_in "completes tasks after --" "5:config" "$COMPL"
run completion zsh
expect_rc "unsupported shell" 2

finish
