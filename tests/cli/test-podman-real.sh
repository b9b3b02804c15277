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

# The image must still be there (the run used the private store) and the
# container must be gone (--rm).
prm_podman image exists "$image"
if [ -n "$(prm_podman ps --all --quiet)" ]; then
  echo "FAIL: a container was left behind" >&2
  exit 1
fi
end=$(date +%s.%N)
echo "podman-real: ok ($(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s)"
