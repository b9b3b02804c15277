#!/usr/bin/env bash
# slurm-local.sh - a private single-host Slurm for tests: munge, slurmctld
# and one slurmd per node (Debian's slurm-wlm and munge) on 127.0.0.1, with
# every key, socket, state folder, spool, log and pid file inside DIR.
#
#   scripts/slurm-local.sh up DIR      start (or find running), wait until the
#                                      node is idle, print `export SLURM_CONF=...`
#   scripts/slurm-local.sh status DIR  one line per daemon, then sinfo
#   scripts/slurm-local.sh down DIR    cancel jobs, stop every daemon by its
#                                      pid (TERM, KILL after 5 s); idempotent
#
# The configuration (docs/launcher.md "Local Slurm for tests"; the measured
# facts are in ../shared/INFRA.md): partitions `low` (default) and `high`
# with partition-priority preemption by requeue, short scheduler intervals,
# cred_expire=10, proctrack/linuxproc and task/none (no cgroups needed), and
# MpiDefault=none, so a multi-rank step works only when the caller asks for
# --mpi=pmix itself. Ports are picked free below the ephemeral range. Every
# daemon and srun binds 127.0.0.1 only (CommunicationParameters).
#
# SLURM_LOCAL_GRACE_TIME (default 10) and SLURM_LOCAL_CRED_EXPIRE (default
# 10) shorten the preemption timings for tests (whole seconds).
# SLURM_LOCAL_NODES=N (1 to 16, default 1) makes node1..nodeN, one slurmd
# each (`slurmd -N nodeK`, a port of its own): Debian's Slurm is built with
# multiple-slurmd support (`scontrol show config` says MULTIPLE_SLURMD =
# Yes), so several node names share this host. With one node the pid and
# log files are run/slurmd.pid and log/slurmd.log; with more,
# run/slurmd-nodeK.pid and log/slurmd-nodeK.log. Each node's TmpFS is
# DIR/tmp/nodeK: Slurm's PMIx plugin makes a folder per step under it
# (spmix_appdir_UID_JOB.STEP), which under the default /tmp would be the
# same path for every node of a multi-node MPI step here (the second
# slurmstepd then fails: "File exists") and for other private clusters'
# jobs of the same number.
#
# munge, the slurm.conf lines both keep and stopping by pid come from
# scripts/lib/slurm-common.sh, which cluster-local.sh shares.
#
# Exit codes: 0 ok, 1 a program is missing, 2 bad usage, 3 a daemon did not
# start or is not running (the message ends with the tail of its log).
set -euo pipefail
# shellcheck source=lib/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm-common.sh"

usage() {
  echo "usage: $0 up|down|status DIR" >&2
  exit 2
}
[[ $# == 2 ]] || usage
CMD=$1
[[ $CMD == up || $CMD == down || $CMD == status ]] || usage
mkdir -p "$2"
D=$(cd "$2" && pwd)
CONF=$D/etc/slurm.conf
SOCK=$D/munge/munge.socket
UP_TIMEOUT=${SLURM_LOCAL_TIMEOUT:-20} # seconds for the node to become idle
# Preemption timings (written into slurm.conf by `up`): the low partition's
# GraceTime (signal to SIGTERM) and munge's cred_expire, which is also how
# long a requeued job waits before it may start again.
GRACE_TIME=${SLURM_LOCAL_GRACE_TIME:-10}
CRED_EXPIRE=${SLURM_LOCAL_CRED_EXPIRE:-10}
NODES=${SLURM_LOCAL_NODES:-1}

say() { echo "slurm-local: $*" >&2; }
# die CODE MESSAGE: the message, the tail of every daemon log, then (for a
# failed `up`) stops whatever did start, and exits.
die() {
  local code=$1
  shift
  say "$*"
  local f
  for f in "$D"/log/*.log; do
    [[ -s $f ]] || continue
    echo "---- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
  [[ $CMD != up ]] || down >/dev/null 2>&1 || true
  exit "$code"
}

# pid_of NAME: the pid in run/NAME.pid when that process is alive and is
# the program NAME names ("slurmd-node2" is a slurmd; a recycled pid
# belongs to someone else and is never signalled).
pid_of() {
  local f=$D/run/$1.pid pid comm
  [[ -s $f ]] || return 1
  read -r pid <"$f" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "${1%%-*}" ]] || return 1
  echo "$pid"
}

# slurmd_names: the pid-file names of the slurmds - those of a running
# cluster when it has pid files, else those `up` makes for $NODES nodes.
slurmd_names() {
  local f found=0
  for f in "$D"/run/slurmd*.pid; do
    [[ -e $f ]] || continue
    f=${f##*/}
    echo "${f%.pid}"
    found=1
  done
  ((found)) && return 0
  if ((NODES == 1)); then echo slurmd; else
    local k
    for ((k = 1; k <= NODES; k++)); do echo "slurmd-node$k"; done
  fi
}

# Job processes this cluster started and slurmd's step daemons: their
# environment names this SLURM_CONF, and they are slurmstepd or belong to a
# job. The caller and its ancestors are never included.
leftover_pids() {
  local self=$$ anc=" " p pid
  p=$self
  while [[ $p =~ ^[0-9]+$ && $p != 0 && $p != 1 ]]; do
    anc+="$p "
    p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null) || break
  done
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [[ $anc == *" $pid "* ]] && continue
    local env comm
    env=$({ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null) || continue
    grep -qxF "SLURM_CONF=$CONF" <<<"$env" || continue
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
    case $comm in munged | slurmctld | slurmd) continue ;; esac
    if [[ $comm == slurmstepd ]] || grep -q '^SLURM_JOB_ID=' <<<"$env"; then echo "$pid"; fi
  done
}

down() {
  local pid
  if [[ -f $CONF ]] && pid_of slurmctld >/dev/null; then
    # Let Slurm end its jobs first; what is left is stopped by pid below.
    SLURM_CONF=$CONF timeout 5 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    local i
    for ((i = 0; i < 30; i++)); do
      [[ -z $(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  for name in $(slurmd_names) slurmctld; do
    if pid=$(pid_of "$name"); then
      slurm_common_stop "$pid"
      say "stopped $name (pid $pid)"
    fi
    rm -f "$D/run/$name.pid"
  done
  if [[ -f $CONF ]]; then
    for pid in $(leftover_pids); do
      slurm_common_stop "$pid"
      say "stopped leftover job process $pid"
    done
  fi
  if pid=$(pid_of munged); then
    slurm_common_stop "$pid"
    say "stopped munged (pid $pid)"
  fi
  rm -f "$D/run/munged.pid"
  return 0
}

status() {
  local rc=0 name pid
  for name in munged slurmctld $(slurmd_names); do
    if pid=$(pid_of "$name"); then
      echo "$name: running (pid $pid)"
    else
      echo "$name: stopped"
      rc=3
    fi
  done
  if [[ $rc == 0 ]]; then
    echo "SLURM_CONF=$CONF"
    SLURM_CONF=$CONF timeout 5 sinfo -N -o '%N %P %T' || rc=3
  fi
  return $rc
}

# free_port [NOT]: a port free now on 127.0.0.1, below the kernel's
# ephemeral range, so no outgoing or bind-to-0 socket can take it meanwhile.
free_port() {
  python3 - "${1:-0}" <<'P'
import random, socket, sys
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(max(1024, lo - 12000), lo)
    if port == int(sys.argv[1]):
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    sys.exit(0)
sys.exit(1)
P
}

write_conf() {
  local ctld_port=$1 slurmd_port=$2 cpus k nodes=node1 pidf=slurmd logf=slurmd
  ((NODES == 1)) || nodes="node[1-$NODES]" pidf=slurmd-%n logf=slurmd-%n
  # Not nproc: it obeys OMP_NUM_THREADS, and slurmd compares with the hardware.
  cpus=$(getconf _NPROCESSORS_ONLN)
  cat >"$CONF.tmp" <<EOF
# Written by scripts/slurm-local.sh: a private cluster on 127.0.0.1.
ClusterName=primuslocal
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmdPidFile=$D/run/$pidf.pid
SlurmdLogFile=$D/log/$logf.log
EOF
  slurm_common_conf "$CRED_EXPIRE" >>"$CONF.tmp"
  # One node: SlurmdPort. More: each slurmd a port of its own (the next
  # arguments), which multiple-slurmd builds read from the node's line.
  for ((k = 1; k <= NODES; k++)); do
    echo "NodeName=node$k NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$cpus$( ((NODES == 1)) || echo " Port=${*:k+2:1}") State=UNKNOWN"
  done >>"$CONF.tmp"
  slurm_common_partitions "$nodes" "$GRACE_TIME" >>"$CONF.tmp"
  : >"$D/etc/plugstack.conf"
  mv "$CONF.tmp" "$CONF"
}

node_state() { SLURM_CONF=$CONF timeout 5 sinfo -h -N -o %T 2>/dev/null | sort -u | tr '\n' ' '; }

up() {
  local p missing=()
  for p in munged munge unmunge slurmctld slurmd sinfo scontrol squeue scancel srun sbatch python3; do
    command -v "$p" >/dev/null || missing+=("$p")
  done
  [[ $GRACE_TIME =~ ^[0-9]+$ && $CRED_EXPIRE =~ ^[0-9]+$ ]] ||
    die 2 "SLURM_LOCAL_GRACE_TIME=$GRACE_TIME, SLURM_LOCAL_CRED_EXPIRE=$CRED_EXPIRE: expected whole seconds"
  [[ $NODES =~ ^[1-9][0-9]?$ ]] && ((NODES <= 16)) || die 2 "SLURM_LOCAL_NODES=$NODES: expected 1 to 16"
  ((${#missing[@]} == 0)) || die 1 "missing ${missing[*]} (Debian: slurm-wlm munge; scripts/deps.sh installs them)"
  local all_up=1 name
  for name in slurmctld munged $(slurmd_names); do pid_of "$name" >/dev/null || all_up=0; done
  if ((all_up)) && [[ $(node_state) =~ idle|alloc|mix ]]; then
    say "already up in $D"
    printf 'export SLURM_CONF=%q\n' "$CONF"
    return 0
  fi
  down 2>/dev/null # a half-started cluster from before
  mkdir -p "$D"/{munge,etc,state,spool,log,run}
  chmod 755 "$D" "$D"/{munge,etc,state,spool,log,run}
  local k
  for ((k = 1; k <= NODES; k++)); do
    mkdir -p "$D/spool/node$k" "$D/tmp/node$k" && chmod 755 "$D/spool/node$k" "$D/tmp" "$D/tmp/node$k"
  done
  slurm_common_reachable
  slurm_common_munge_up

  local cport dport ports=() used
  cport=$(free_port) || die 3 "no free port below the ephemeral range"
  dport=$(free_port "$cport") || die 3 "no free port below the ephemeral range"
  used=" $cport $dport "
  while ((NODES > 1 && ${#ports[@]} < NODES)); do
    p=$(free_port "$cport") || die 3 "no free port below the ephemeral range"
    [[ $used == *" $p "* ]] || ports+=("$p") used+="$p "
  done
  write_conf "$cport" "$dport" "${ports[@]}"
  : >"$D/log/slurmctld.log"
  SLURM_CONF=$CONF slurmctld -i </dev/null >>"$D/log/slurmctld.log" 2>&1 ||
    die 3 "slurmctld did not start"
  local log
  for ((k = 1; k <= NODES; k++)); do
    log=$D/log/slurmd.log
    ((NODES == 1)) || log=$D/log/slurmd-node$k.log
    : >"$log"
    SLURM_CONF=$CONF slurmd -N "node$k" </dev/null >>"$log" 2>&1 || die 3 "slurmd for node$k did not start"
  done
  local state="" deadline=$((SECONDS + UP_TIMEOUT))
  while ((SECONDS < deadline)); do
    state=$(node_state)
    [[ $state == "idle " ]] && break
    pid_of slurmctld >/dev/null || die 3 "slurmctld exited"
    sleep 0.1
  done
  [[ $state == "idle " ]] ||
    die 3 "$( ((NODES == 1)) && echo node1 || echo "node[1-$NODES]") not idle after ${UP_TIMEOUT}s (state: ${state:-no answer from slurmctld})"
  if ((NODES == 1)); then say "up in $D (slurmctld 127.0.0.1:$cport, slurmd 127.0.0.1:$dport)"
  else say "up in $D (slurmctld 127.0.0.1:$cport, $NODES slurmds node[1-$NODES] on ports ${ports[*]})"; fi
  printf 'export SLURM_CONF=%q\n' "$CONF"
}

case $CMD in
up) up ;;
down) down ;;
status) status ;;
esac
