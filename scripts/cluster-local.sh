#!/usr/bin/env bash
# cluster-local.sh - a private multi-host Slurm cluster on one machine, for
# tests: every host is a network namespace with a UTS namespace (its own
# hostname) and a mount namespace (its own /etc/hosts), joined by veth pairs
# to a bridge this script creates. Debian's slurm-wlm and munge.
#
#   scripts/cluster-local.sh up DIR [--hosts N]   start N hosts cn1..cnN (default
#                        3, at most 16) and a controller host `ctl`; wait until
#                        every node is idle; print `export SLURM_CONF=...`
#   scripts/cluster-local.sh status DIR           the holders and daemons, then sinfo
#   scripts/cluster-local.sh down DIR             stop every process by its pid,
#                        delete the bridge; idempotent, also after a failed `up`
#   scripts/cluster-local.sh exec DIR HOST -- CMD...  run CMD inside HOST's
#                        namespaces (HOST: ctl or cnK); ctl is also the login host:
#                        srun, sbatch, squeue and primus slurm run there
#   scripts/cluster-local.sh pids DIR HOST        the processes inside HOST (its
#                        network namespace), the holder excepted
#   scripts/cluster-local.sh link DIR HOST up|down  plug HOST's cable in or out
#                        (its veth end on the bridge)
#   scripts/cluster-local.sh revive DIR HOST     bring a lost HOST back: its processes
#                        (stopped or not) SIGKILLed, its cable plugged in, its slurmd
#                        started again; Slurm returns the node to service by itself
#                        (ReturnToService=2) once that slurmd registers
#   scripts/cluster-local.sh throttle DIR HOST PERCENT  limit everything HOST runs
#                        (slurmd and the jobs it starts) to PERCENT of one CPU with a
#                        cgroup (v1 cpu controller, or v2); 0 removes the limit
#
# Layout. Each host is held by a `sleep` that `unshare --net --uts --mount`
# started (its pid in DIR/run/ns-HOST.pid); `ip link add ... netns PID`
# gives it the eth0 end of a veth pair whose other end joins the bridge.
# The subnet is 10.213.X.0/24 with the first X that no route of this
# machine mentions; ctl is .254, cnK is .K. The bridge has no address and
# nothing is routed: traffic stays on the bridge among these addresses and
# on each namespace's loopback. The host's interfaces and routes are never
# touched. Because every host has its own port space, slurmctld listens on
# 10.213.X.254:6817 and every slurmd on its own address :6818.
#
# munged runs once, outside the namespaces: its socket is a file under DIR,
# which every namespace sees (they share the file system, like hosts
# sharing one network file system). slurmctld runs in ctl, one slurmd per
# cnK in cnK's namespaces (`NodeName=cnK NodeAddr=10.213.X.K`). Every
# state, spool, log and pid file is under DIR; TmpFS is DIR/tmp/cnK (the
# PMIx plugin's per-step folders). The only things outside DIR are the
# bridge and the veth ends (named prmcNNNNN*, recorded in DIR/run/bridge,
# removed by `down`) and, with `throttle`, a cgroup named after the bridge.
#
# Slurm settles faster than its defaults here: SlurmdTimeout=10 (a host
# that stops answering is DOWN within ~10-20 s), ReturnToService=2 (it comes
# back by itself once its slurmd answers again), KillWait=5, cred_expire=5.
#
# munge, the slurm.conf lines both keep and stopping by pid come from
# scripts/lib/slurm-common.sh, which slurm-local.sh shares.
#
# Exit codes: 0 ok, 1 a program is missing, 2 bad usage, 3 a daemon did not
# start or is not running, 77 this machine cannot make namespaces or
# bridges (not root, no CAP_NET_ADMIN / CAP_SYS_ADMIN): tests skip on it.
set -euo pipefail
# shellcheck source=lib/slurm-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm-common.sh"

usage() {
  echo "usage: $0 up DIR [--hosts N] | down DIR | status DIR | exec DIR HOST -- CMD... | pids DIR HOST | link DIR HOST up|down | revive DIR HOST | throttle DIR HOST PERCENT" >&2
  exit 2
}
(($# >= 2)) || usage
CMD=$1
DIRARG=$2
shift 2
case $CMD in up | down | status | exec | pids | link | revive | throttle) ;; *) usage ;; esac
NODES=3
if [[ $CMD == up ]]; then
  while (($#)); do
    case $1 in
    --hosts) (($# >= 2)) || usage; NODES=$2; shift 2 ;;
    --hosts=*) NODES=${1#--hosts=}; shift ;;
    *) echo "cluster-local: unknown option $1" >&2; usage ;;
    esac
  done
fi
mkdir -p "$DIRARG"
D=$(cd "$DIRARG" && pwd)
CONF=$D/etc/slurm.conf
SOCK=$D/munge/munge.socket
UP_TIMEOUT=${CLUSTER_LOCAL_TIMEOUT:-30}
CTLD_PORT=6817
SLURMD_PORT=6818

say() { echo "cluster-local: $*" >&2; }
die() {
  local code=$1
  shift
  say "$*"
  local f
  for f in "$D"/log/*.log; do
    [[ -s $f ]] || continue
    echo "---- last lines of $f" >&2
    tail -n 12 "$f" >&2
  done
  [[ $CMD != up ]] || down || true
  exit "$code"
}

# pid_of NAME COMM: the pid in run/NAME.pid when that process is alive, is
# COMM, and (for namespace holders) carries this cluster's marker in its
# environment; a recycled pid belongs to someone else and is never touched.
pid_of() {
  local f=$D/run/$1.pid pid comm
  [[ -s $f ]] || return 1
  read -r pid <"$f" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$2" ]] || return 1
  if [[ $2 == sleep ]]; then
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "PRM_CLUSTER_DIR=$D" || return 1
  fi
  echo "$pid"
}
holder() { pid_of "ns-$1" sleep; }

# host_names: the hosts of a running (or half-started) cluster from its pid
# files, else those `up` makes.
host_names() {
  local f found=0
  for f in "$D"/run/ns-cn*.pid; do
    [[ -e $f ]] || continue
    f=${f##*/ns-}
    echo "${f%.pid}"
    found=1
  done | sort -V
  ((found)) 2>/dev/null || true
}
all_hosts() {
  local h
  h=$(host_names)
  if [[ -z $h ]]; then
    local k
    for ((k = 1; k <= NODES; k++)); do echo "cn$k"; done
  else
    echo "$h"
  fi
}

# ns_pids HOLDER: every process in HOLDER's network namespace but HOLDER.
ns_pids() {
  local h=$1 p
  [[ -e /proc/$h/ns/net ]] || return 0
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$h" ]] && continue
    # -ef: the same namespace (device and inode of the nsfs file).
    [[ /proc/$p/ns/net -ef /proc/$h/ns/net ]] 2>/dev/null && echo "$p"
  done
  return 0
}

# in_host HOST CMD...: runs CMD in HOST's network, UTS and mount namespaces.
in_host() {
  local h=$1 pid
  shift
  pid=$(holder "$h") || { say "host $h is not running in $D"; return 3; }
  nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$@"
}

bridge_name() { cat "$D/run/bridge" 2>/dev/null || true; }

cgroup_path() { # HOST: where `throttle` puts HOST's processes
  local br
  br=$(bridge_name)
  [[ -n $br ]] || return 1
  if [[ -d /sys/fs/cgroup/cpu && -e /sys/fs/cgroup/cpu/cgroup.procs ]]; then
    echo "/sys/fs/cgroup/cpu/$br-$1"
  elif [[ -e /sys/fs/cgroup/cgroup.controllers ]]; then
    echo "/sys/fs/cgroup/$br-$1"
  else
    return 1
  fi
}

down() {
  local pid h
  if [[ -f $CONF ]] && pid_of slurmctld slurmctld >/dev/null; then
    in_host ctl env SLURM_CONF="$CONF" timeout 5 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    local i
    for ((i = 0; i < 25; i++)); do
      [[ -z $(in_host ctl env SLURM_CONF="$CONF" timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  local stop=()
  for h in $(host_names); do
    if pid=$(pid_of "slurmd-$h" slurmd); then
      stop+=("$pid")
      say "stopping slurmd on $h (pid $pid)"
    fi
  done
  if pid=$(pid_of slurmctld slurmctld); then
    stop+=("$pid")
    say "stopping slurmctld (pid $pid)"
  fi
  slurm_common_stop "${stop[@]}"
  rm -f "$D"/run/slurmd-*.pid "$D/run/slurmctld.pid"
  # Whatever still runs inside a host (job steps, ranks, a stopped
  # process), found through the host's network namespace, then the
  # holders themselves.
  stop=()
  local holders=() p
  for h in $(host_names) ctl; do
    pid=$(holder "$h") || continue
    holders+=("$pid")
    for p in $(ns_pids "$pid"); do
      kill -CONT "$p" 2>/dev/null || true
      stop+=("$p")
      say "stopping leftover process $p on $h"
    done
  done
  slurm_common_stop "${stop[@]}"
  slurm_common_stop "${holders[@]}"
  if pid=$(pid_of munged munged); then
    slurm_common_stop "$pid"
    say "stopped munged (pid $pid)"
  fi
  rm -f "$D/run/munged.pid"
  local br
  br=$(bridge_name)
  if [[ -n $br ]]; then
    # The veth pairs went with their namespaces; the bridge is ours to delete.
    local l
    for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$br" || true); do
      ip link del "$l" 2>/dev/null || true
    done
    for h in $(host_names) cn{1..16} ctl; do
      local cg
      cg=$(cgroup_path "$h") || continue
      [[ -d $cg ]] && rmdir "$cg" 2>/dev/null || true
    done
    rm -f "$D/run/bridge"
    say "deleted bridge $br"
  fi
  rm -f "$D"/run/ns-*.pid
  return 0
}

status() {
  local rc=0 h pid
  if pid=$(pid_of munged munged); then echo "munged: running (pid $pid)"; else echo "munged: stopped"; rc=3; fi
  for h in ctl $(all_hosts); do
    if pid=$(holder "$h"); then
      echo "$h: namespace held by pid $pid, $(in_host "$h" hostname 2>/dev/null), $(in_host "$h" ip -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')"
    else
      echo "$h: stopped"
      rc=3
    fi
  done
  if pid=$(pid_of slurmctld slurmctld); then echo "slurmctld: running (pid $pid)"; else echo "slurmctld: stopped"; rc=3; fi
  for h in $(all_hosts); do
    if pid=$(pid_of "slurmd-$h" slurmd); then echo "slurmd-$h: running (pid $pid)"; else echo "slurmd-$h: stopped"; rc=3; fi
  done
  echo "bridge: $(bridge_name)"
  if [[ $rc == 0 ]]; then
    echo "SLURM_CONF=$CONF"
    in_host ctl env SLURM_CONF="$CONF" timeout 5 sinfo -N -o '%N %P %T' || rc=3
  fi
  return $rc
}

# pick_subnet: the first 10.213.X with no route or address of this machine
# in it (the cluster's own traffic never leaves its bridge; this only keeps
# it clear of anything the machine reaches).
pick_subnet() {
  local used x
  used=$({ ip -4 route show table all; ip -4 addr show; } 2>/dev/null)
  for ((x = 0; x < 256; x++)); do
    grep -q "10\.213\.$x\." <<<"$used" || grep -q "10\.213\.$x\.0/" <<<"$used" || { echo "10.213.$x"; return 0; }
  done
  return 1
}

write_conf() {
  local net=$1 cpus k
  cpus=$(getconf _NPROCESSORS_ONLN)
  {
    echo "127.0.0.1 localhost"
    echo "$net.254 ctl"
    for h in $(all_hosts); do echo "$net.${h#cn} $h"; done
  } >"$D/etc/hosts"
  cat >"$CONF.tmp" <<EOF
# Written by scripts/cluster-local.sh: a private cluster of network namespaces.
ClusterName=primusns
SlurmctldHost=ctl($net.254)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
CommunicationParameters=NoCtldInAddrAny
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmdTimeout=10
EOF
  slurm_common_conf "${CLUSTER_LOCAL_CRED_EXPIRE:-5}" "${CLUSTER_LOCAL_KILL_WAIT:-5}" >>"$CONF.tmp"
  for h in $(all_hosts); do
    echo "NodeName=$h NodeHostname=$h NodeAddr=$net.${h#cn} CPUs=$cpus State=UNKNOWN"
  done >>"$CONF.tmp"
  slurm_common_partitions ALL "${CLUSTER_LOCAL_GRACE_TIME:-10}" >>"$CONF.tmp"
  : >"$D/etc/plugstack.conf"
  mv "$CONF.tmp" "$CONF"
}

node_state() { in_host ctl env SLURM_CONF="$CONF" timeout 5 sinfo -h -N -p low -o %T 2>/dev/null | sort -u | tr '\n' ' '; }

# capable: root with the namespace and network capabilities (exit 77 if not).
capable() {
  [[ $(id -u) == 0 ]] || { say "needs root (network namespaces and a bridge)"; exit 77; }
  unshare --net --uts --mount true 2>/dev/null || { say "cannot create network/UTS/mount namespaces here (unshare failed)"; exit 77; }
  local probe=prmcprobe$$
  probe=${probe:0:15}
  ip link add "$probe" type bridge 2>/dev/null || { say "cannot create a bridge here (ip link add type bridge failed)"; exit 77; }
  ip link del "$probe" 2>/dev/null || true
}

# start_host NAME ADDR: the holder, the veth pair, the address.
start_host() {
  local h=$1 addr=$2 br=$3 pid i
  # The holder: names itself, puts the cluster's hosts file over /etc/hosts
  # in its own mount namespace, then sleeps; everything that later enters
  # it with nsenter sees that hostname, that file and its network.
  PRM_CLUSTER_DIR=$D setsid unshare --net --uts --mount --propagation private -- \
    sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec sleep 1000000000' sh "$h" "$D/etc/hosts" \
    </dev/null >>"$D/log/ns-$h.log" 2>&1 &
  pid=$!
  echo "$pid" >"$D/run/ns-$h.pid"
  for ((i = 0; i < 50; i++)); do
    holder "$h" >/dev/null && [[ $(nsenter -t "$pid" -u hostname 2>/dev/null) == "$h" ]] && break
    kill -0 "$pid" 2>/dev/null || die 3 "namespace holder for $h exited"
    sleep 0.05
  done
  holder "$h" >/dev/null || die 3 "namespace holder for $h did not start"
  ip link add "$br$h" type veth peer name eth0 netns "$pid" || die 3 "cannot create the veth pair for $h"
  ip link set "$br$h" master "$br" up || die 3 "cannot attach $br$h to $br"
  nsenter -t "$pid" -n -- sh -c "ip link set lo up && ip addr add $addr/24 dev eth0 && ip link set eth0 up" ||
    die 3 "cannot configure eth0 in $h"
}

up() {
  local p missing=()
  for p in munged munge unmunge slurmctld slurmd sinfo scontrol squeue scancel srun sbatch unshare nsenter ip setsid; do
    command -v "$p" >/dev/null || missing+=("$p")
  done
  [[ $NODES =~ ^[1-9][0-9]?$ ]] && ((NODES <= 16)) || { say "--hosts $NODES: expected 1 to 16"; exit 2; }
  ((${#missing[@]} == 0)) || { say "missing ${missing[*]} (Debian: slurm-wlm munge iproute2 util-linux)"; exit 1; }
  capable
  local all_up=1 h
  for h in ctl $(all_hosts); do holder "$h" >/dev/null || all_up=0; done
  pid_of slurmctld slurmctld >/dev/null || all_up=0
  pid_of munged munged >/dev/null || all_up=0
  if ((all_up)) && [[ $(host_names | wc -l) == "$NODES" && $(node_state) =~ ^(idle |mix |alloc )+$ ]]; then
    say "already up in $D"
    printf 'export SLURM_CONF=%q\n' "$CONF"
    return 0
  fi
  down 2>/dev/null
  rm -rf "$D/state" "$D/spool" "$D/tmp"
  mkdir -p "$D"/{munge,etc,state,spool,log,run,tmp}
  chmod 755 "$D" "$D"/{munge,etc,state,spool,log,run,tmp}
  for h in $(all_hosts); do mkdir -p "$D/spool/$h" "$D/tmp/$h" && chmod 755 "$D/spool/$h" "$D/tmp/$h"; done
  slurm_common_reachable

  # The bridge: a name of our own, recorded before it exists so that a
  # failed `up` still removes it.
  local br net i
  for ((i = 0; i < 20; i++)); do
    br=prmc$(printf '%05d' $((RANDOM % 100000)))
    ip link show "$br" >/dev/null 2>&1 || break
  done
  echo "$br" >"$D/run/bridge"
  ip link add "$br" type bridge || die 3 "cannot create bridge $br"
  ip link set "$br" up || die 3 "cannot bring $br up"
  net=$(pick_subnet) || die 3 "no free 10.213.X.0/24 subnet"
  echo "$net" >"$D/run/subnet"
  write_conf "$net"

  start_host ctl "$net.254" "$br"
  for h in $(all_hosts); do start_host "$h" "$net.${h#cn}" "$br"; done

  slurm_common_munge_up

  : >"$D/log/slurmctld.log"
  in_host ctl env SLURM_CONF="$CONF" slurmctld -i </dev/null >>"$D/log/slurmctld.log" 2>&1 ||
    die 3 "slurmctld did not start"
  for h in $(all_hosts); do
    : >"$D/log/slurmd-$h.log"
    in_host "$h" env SLURM_CONF="$CONF" slurmd -N "$h" </dev/null >>"$D/log/slurmd-$h.log" 2>&1 ||
      die 3 "slurmd on $h did not start"
  done
  local state="" deadline=$((SECONDS + UP_TIMEOUT))
  while ((SECONDS < deadline)); do
    state=$(node_state)
    [[ $state == "idle " ]] && break
    pid_of slurmctld slurmctld >/dev/null || die 3 "slurmctld exited"
    sleep 0.2
  done
  [[ $state == "idle " ]] || die 3 "nodes not idle after ${UP_TIMEOUT}s (state: ${state:-no answer from slurmctld})"
  say "up in $D: bridge $br, $net.0/24, slurmctld on ctl ($net.254:$CTLD_PORT), slurmd on $(all_hosts | tr '\n' ' ')(port $SLURMD_PORT)"
  printf 'export SLURM_CONF=%q\n' "$CONF"
}

case $CMD in
up) up ;;
down) down ;;
status) status ;;
exec)
  (($# >= 3)) && [[ $2 == -- ]] || usage
  H=$1
  shift 2
  in_host "$H" env SLURM_CONF="$CONF" "$@"
  ;;
pids)
  (($# == 1)) || usage
  P=$(holder "$1") || { say "host $1 is not running in $D"; exit 3; }
  ns_pids "$P"
  ;;
link)
  (($# == 2)) && [[ $2 == up || $2 == down ]] || usage
  holder "$1" >/dev/null || { say "host $1 is not running in $D"; exit 3; }
  ip link set "$(bridge_name)$1" "$2"
  ;;
revive)
  (($# == 1)) || usage
  [[ $1 =~ ^cn[0-9]+$ ]] || usage
  P=$(holder "$1") || { say "host $1 is not running in $D"; exit 3; }
  # What is left of the host (a stopped slurmd, orphaned steps) goes first:
  # a new slurmd would find the old one's pid file and port.
  LEFT=()
  for p in $(ns_pids "$P"); do LEFT+=("$p"); kill -KILL "$p" 2>/dev/null || true; done
  for p in "${LEFT[@]}"; do
    for ((i = 0; i < 50; i++)); do [[ -e /proc/$p ]] || break; sleep 0.1; done
  done
  rm -f "$D/run/slurmd-$1.pid"
  ip link set "$(bridge_name)$1" up
  in_host "$1" env SLURM_CONF="$CONF" slurmd -N "$1" </dev/null >>"$D/log/slurmd-$1.log" 2>&1 ||
    { say "slurmd on $1 did not start"; exit 3; }
  for ((i = 0; i < 50; i++)); do pid_of "slurmd-$1" slurmd >/dev/null && break; sleep 0.1; done
  pid_of "slurmd-$1" slurmd >/dev/null || { say "slurmd on $1 did not start"; exit 3; }
  say "$1: killed ${#LEFT[@]} leftover process(es), link up, slurmd started again (pid $(pid_of "slurmd-$1" slurmd))"
  ;;
throttle)
  (($# == 2)) && [[ $2 =~ ^[0-9]+$ ]] || usage
  P=$(holder "$1") || { say "host $1 is not running in $D"; exit 3; }
  CG=$(cgroup_path "$1") || { say "no cgroup cpu controller here"; exit 77; }
  mkdir -p "$CG"
  if [[ -e $CG/cpu.cfs_quota_us ]]; then
    echo 100000 >"$CG/cpu.cfs_period_us"
    if (($2 == 0)); then echo -1 >"$CG/cpu.cfs_quota_us"; else echo $(($2 * 1000)) >"$CG/cpu.cfs_quota_us"; fi
  else
    if (($2 == 0)); then echo "max 100000" >"$CG/cpu.max"; else echo "$(($2 * 1000)) 100000" >"$CG/cpu.max"; fi
  fi
  # slurmd and everything it started (new processes inherit the cgroup).
  for p in $(ns_pids "$P"); do echo "$p" >"$CG/cgroup.procs" 2>/dev/null || true; done
  say "$1: limited to $2% of one CPU ($CG)"
  ;;
esac
