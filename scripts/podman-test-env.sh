# shellcheck shell=bash
# podman-test-env.sh - a private, disposable podman for tests. Source it:
#
#   . scripts/podman-test-env.sh
#   reason=$(prm_podman_missing) && { echo "SKIP: $reason"; exit 0; }
#   prm_podman_setup                  # private root, runroot, tmpdir, config
#   trap prm_podman_cleanup EXIT
#   prm_podman_import_busybox localhost/primus-test:1
#   prm_podman run --rm --network=host localhost/primus-test:1 sh -c 'echo hi'
#
# Why each setting (see INFRA.md): crun fails on this host's hybrid cgroups,
# so runc; the default ulimits are above what the host allows; netns "none"
# keeps podman from ever creating its bridge (which takes a private address
# range) - a container that needs the network asks for --network=host. The
# store, run state, tmpdir and network config all live in one mktemp folder
# so a test never touches (or depends on) the host's podman state.
#
# After sourcing: PRM_PODMAN_DIR (the private folder), PRM_PODMAN_ROOT,
# PRM_PODMAN_RUNROOT, CONTAINERS_CONF (exported), and the prm_podman
# wrapper that adds --root/--runroot.

# Prints why a real podman test cannot run here and returns 0, or prints
# nothing and returns 1 when everything needed is installed.
prm_podman_missing() {
  local t
  for t in podman runc; do
    if ! command -v "$t" >/dev/null 2>&1; then
      echo "$t is not installed (apt-get install podman runc busybox-static)"
      return 0
    fi
  done
  if ! prm__podman_busybox >/dev/null; then
    echo "a static busybox is not installed (apt-get install busybox-static)"
    return 0
  fi
  return 1
}

# The static busybox binary (the image has no libc to link against).
prm__podman_busybox() {
  local b
  for b in /bin/busybox /usr/bin/busybox; do
    if [ -x "$b" ] && ! LC_ALL=C ldd "$b" 2>&1 | grep -q '=>'; then
      echo "$b"
      return 0
    fi
  done
  return 1
}

# Host paths podman creates even with a private root (its network run dir
# and the image blob-info cache); removed afterwards when they were absent
# before, so the host is left as found.
PRM__PODMAN_HOST_PATHS="/run/containers /var/lib/containers"

prm_podman_setup() {
  PRM_PODMAN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/primus-podman-XXXXXX") || return 1
  PRM_PODMAN_ROOT=$PRM_PODMAN_DIR/root
  PRM_PODMAN_RUNROOT=$PRM_PODMAN_DIR/runroot
  PRM__PODMAN_CREATED=""
  local p
  for p in $PRM__PODMAN_HOST_PATHS; do
    [ -e "$p" ] || PRM__PODMAN_CREATED="$PRM__PODMAN_CREATED $p"
  done
  PRM__PODMAN_CGROUPS_BEFORE=$(ls -d /sys/fs/cgroup/*/libpod_parent /sys/fs/cgroup/libpod_parent 2>/dev/null || true)
  cat >"$PRM_PODMAN_DIR/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"

[network]
network_config_dir = "$PRM_PODMAN_DIR/net"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$PRM_PODMAN_DIR/tmp"
EOF
  export CONTAINERS_CONF=$PRM_PODMAN_DIR/containers.conf
  export PRM_PODMAN_DIR PRM_PODMAN_ROOT PRM_PODMAN_RUNROOT
}

prm_podman() {
  podman --root "$PRM_PODMAN_ROOT" --runroot "$PRM_PODMAN_RUNROOT" "$@"
}

# Builds a busybox rootfs (every applet as a symlink, a root user) and
# imports it as the local image $1. No registry is needed.
prm_podman_import_busybox() {
  local tag=$1 bb rootfs a
  bb=$(prm__podman_busybox) || return 1
  rootfs=$PRM_PODMAN_DIR/rootfs
  mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/proc" "$rootfs/sys" \
    "$rootfs/dev" "$rootfs/root" || return 1
  chmod 1777 "$rootfs/tmp"
  cp "$bb" "$rootfs/bin/busybox" || return 1
  for a in $("$bb" --list); do
    [ "$a" = busybox ] || ln -s busybox "$rootfs/bin/$a" || return 1
  done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$rootfs/etc/passwd"
  echo 'root:x:0:' >"$rootfs/etc/group"
  tar -C "$rootfs" -cf "$PRM_PODMAN_DIR/rootfs.tar" . || return 1
  prm_podman import --quiet "$PRM_PODMAN_DIR/rootfs.tar" "$tag" >/dev/null || return 1
  rm -rf "$rootfs" "$PRM_PODMAN_DIR/rootfs.tar"
}

# Removes everything prm_podman_setup and the test made. Safe to call twice
# and from an EXIT trap after a failure.
prm_podman_cleanup() {
  [ -n "${PRM_PODMAN_DIR:-}" ] || return 0
  if [ -d "$PRM_PODMAN_ROOT" ]; then
    prm_podman rm --all --force >/dev/null 2>&1 || true
    prm_podman rmi --all --force >/dev/null 2>&1 || true
  fi
  # A crashed run can leave overlay mounts under the private root.
  local m
  awk -v d="$PRM_PODMAN_DIR/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  rm -rf "$PRM_PODMAN_DIR"
  local p
  for p in $PRM__PODMAN_CREATED; do rm -rf "$p"; done
  # Empty libpod_parent cgroup folders (INFRA.md): only those this run
  # created; rmdir refuses any that still hold a process.
  local d
  for d in /sys/fs/cgroup/*/libpod_parent /sys/fs/cgroup/libpod_parent; do
    [ -d "$d" ] || continue
    if grep -qxF "$d" <<<"$PRM__PODMAN_CGROUPS_BEFORE"; then continue; fi
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  PRM_PODMAN_DIR=
}
