#!/usr/bin/env bash
# bench/gpu-pack.sh [OUT_DIR] - prepares the GPU machine's run on this one:
# builds primus with the CUDA module (make build), then packs the binary,
# its libraries, the module, the GPU test programs (with test-device's
# stand-in module) and cmocka (the GPU
# machine has none of primus' Debian packages) with ../shared/device's
# pack-primus.sh into OUT_DIR (default .device, ignored by git), and copies
# run-packed.sh beside the tarball. Then, on the GPU machine (the device
# tool's `run`, with OUT_DIR in `carry`):
#
#   bash .device/run-packed.sh .device/primus.tar.xz bash bench/gpu-check.sh
#
# bench/gpu-check.sh writes its logs under $OUT (the device tool's folder).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.device}
shared=${PRIMUS_SHARED:-../shared/device}
[ -x "$shared/pack-primus.sh" ] || { echo "gpu-pack: no $shared/pack-primus.sh" >&2; exit 2; }
make build >/dev/null
[ -f build/libprimus-cuda.so ] || { echo "gpu-pack: build/libprimus-cuda.so missing (no nvcc?)" >&2; exit 2; }
mkdir -p "$out/extra"
cp -L "$(ldconfig -p | awk '/libcmocka.so.0 /{print $NF; exit}')" "$out/extra/"
PACK_EXTRA="build/tests/test-device build/tests/test-model-device build/tests/libprm-fake-device.so $out/extra" \
  bash "$shared/pack-primus.sh" build "$out"
cp "$shared/run-packed.sh" "$out/"
echo "gpu-pack: $out/primus.tar.xz and $out/run-packed.sh ready; carry $out"
