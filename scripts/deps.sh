#!/usr/bin/env bash
# deps.sh - installs what primus needs to build and test: Debian packages
# (apt-get, skipping what is installed) and, later, npm packages into a cache
# folder. Idempotent and quiet when everything is already there.
set -euo pipefail

# Build and run: compiler, CMake, libraries primus links.
PKGS_BUILD=(build-essential cmake pkg-config libyaml-dev libcjson-dev libhwloc-dev
            libdnnl-dev libopenblas-dev)
# Tests: cmocka; OpenMPI for --nproc; podman/runc/busybox for a real container run.
PKGS_TEST=(libcmocka-dev openmpi-bin libopenmpi-dev podman runc busybox-static
           python3-torch python3-numpy)

missing=()
for p in "${PKGS_BUILD[@]}" "${PKGS_TEST[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=()
  if [[ $(id -u) != 0 ]]; then SUDO=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq </dev/null >/dev/null
  "${SUDO[@]}" apt-get install -y -qq "${missing[@]}" </dev/null >/dev/null
fi
