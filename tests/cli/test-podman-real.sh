#!/bin/bash
# test-podman-real.sh - runs a REAL container with the argv that
# prm_container_build produces: a busybox image imported into a private
# podman store, then tests/test-launch-container's test_podman_real, which
# checks argument passing ("x; rm -rf ~" stays one word), env forwarding,
# the project/run-dir mounts (rw) and a :ro volume, and --network=host
# reaching a service on the host's 127.0.0.1.
#
# Skips (exit 0, "SKIP: ...") only when podman, runc or a static busybox is
# not installed. Everything it creates is removed by the EXIT trap, also
# after a failure.
set -euo pipefail

: "${PRIMUS_SRC:?PRIMUS_SRC must point at the source tree}"
: "${PRIMUS_BUILD:?PRIMUS_BUILD must point at the build tree}"
. "$PRIMUS_SRC/scripts/podman-test-env.sh"

if reason=$(prm_podman_missing); then
  echo "SKIP: $reason"
  exit 0
fi

driver=$PRIMUS_BUILD/tests/test-launch-container
if [ ! -x "$driver" ]; then
  echo "FAIL: $driver is missing (build the test-launch-container target)" >&2
  exit 1
fi

prm_podman_setup
trap prm_podman_cleanup EXIT
# Cleanup must also run when ctest kills us at its timeout.
trap 'exit 130' INT TERM

image=localhost/primus-test-busybox:1
start=$(date +%s.%N)
prm_podman_import_busybox "$image"

set +e
out=$(PRIMUS_PODMAN_TEST_IMAGE=$image \
  PRIMUS_PODMAN_ROOT=$PRM_PODMAN_ROOT \
  PRIMUS_PODMAN_RUNROOT=$PRM_PODMAN_RUNROOT \
  PRIMUS_TEST_FILTER=test_podman_real \
  "$driver" 2>&1)
rc=$?
set -e
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: test_podman_real exited $rc" >&2
  exit 1
fi
# A pass must be a real run, never a skip.
if ! grep -q '^\[       OK \] test_podman_real' <<<"$out" ||
  grep -q 'SKIPPED' <<<"$out"; then
  echo "FAIL: test_podman_real did not run" >&2
  exit 1
fi

# Part 2: `primus container` end to end. The host's /usr and /lib are
# mounted read-only so the primus binary (under the mounted project) finds
# its shared libraries inside the busybox image.
EX=$PRIMUS_SRC/configs/examples/llama_tiny-pretrain.yaml
pc() {
  "$PRIMUS_BIN" container --image "$image" --volume "$PRM_PODMAN_DIR" --engine_opt "--root=$PRM_PODMAN_ROOT" \
    --engine_opt "--runroot=$PRM_PODMAN_RUNROOT" --volume /usr:/usr:ro --volume /lib:/lib:ro \
    --volume /lib64:/lib64:ro -- "$@"
}
out=$(pc config show --config "$EX" --no-origins 'data_path=x; rm -rf ~')
if ! grep -q 'data_path: "x; rm -rf ~"' <<<"$out"; then
  echo "FAIL: primus container config show did not print the value verbatim:" >&2
  printf '%s\n' "$out" | tail -20 >&2
  exit 1
fi
# A real run inside: the hello test plugin writes its run directory on the
# host through the mounts, and the snapshot shows podman's container=podman.
W=$PRM_PODMAN_DIR/work
mkdir -p "$W/plugins"
"${CC:-cc}" -shared -fPIC -I"$PRIMUS_SRC/include" "$PRIMUS_SRC/tests/fixtures/plugins/hello_plugin.c" \
  -o "$W/plugins/hello.so"
cat >"$W/exp.yaml" <<Y
exp_name: in-container
workspace: $W/ws
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
Y
PRIMUS_PLUGIN_PATH=$W/plugins pc hello run --config "$W/exp.yaml" >/dev/null
RD=$(ls -d "$W"/ws/*/*/in-container/run-* 2>/dev/null | head -1)
if [ -z "$RD" ] || ! grep -q '^container=podman$' "$RD/env/env_dump.txt" ||
  ! grep -q '^rank=0/1$' "$RD/hello-rank-0.txt"; then
  echo "FAIL: the hello run did not happen inside the container (run dir: ${RD:-none})" >&2
  exit 1
fi
inside="run dir $RD"
echo "primus container: ok ($inside)"

# The image must still be there (the run used the private store) and the
# container must be gone (--rm).
prm_podman image exists "$image"
if [ -n "$(prm_podman ps --all --quiet)" ]; then
  echo "FAIL: a container was left behind" >&2
  exit 1
fi
end=$(date +%s.%N)
echo "podman-real: ok ($(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s)"
