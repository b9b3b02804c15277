# slurm-common.sh - what scripts/slurm-local.sh (a private Slurm on
# 127.0.0.1) and scripts/cluster-local.sh (a private cluster of network
# namespaces) share, sourced by both: munge with a key of its own, the
# check that munged can serve its socket, the slurm.conf lines both
# clusters use, and stopping processes by pid. Every function works under
# the caller's D (the cluster's folder) and SOCK (munge's socket), and
# reports failures through the caller's die CODE MESSAGE.

# slurm_common_reachable: munged refuses a socket in a folder that others
# cannot reach: every folder from D up must be executable by owner, group
# and others.
slurm_common_reachable() {
  local p=$D
  while [[ $p != / ]]; do
    (((8#$(stat -c %a "$p") & 8#111) == 8#111)) ||
      die 3 "$p is not executable by all (chmod a+x it): munged cannot serve a socket below it"
    p=$(dirname "$p")
  done
}

# slurm_common_munge_up: munged on SOCK with a key of this cluster's own
# (1024 random bytes, readable by the owner only, kept across `up`s), its
# pid in run/munged.pid; waits until a credential round-trips.
slurm_common_munge_up() {
  local i
  if [[ ! -s $D/munge/munge.key ]]; then
    (umask 077 && head -c 1024 /dev/urandom >"$D/munge/munge.key")
  fi
  chmod 0400 "$D/munge/munge.key"
  munged --socket="$SOCK" --key-file="$D/munge/munge.key" --log-file="$D/log/munged.log" \
    --pid-file="$D/run/munged.pid" --seed-file="$D/munge/munged.seed" </dev/null ||
    die 3 "munged did not start"
  for ((i = 0; i < 50; i++)); do
    munge -S "$SOCK" -n 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die 3 "munge does not answer on $SOCK"
}

# slurm_common_conf CRED_EXPIRE [KILL_WAIT]: the slurm.conf lines both
# clusters share (KillWait: KILL_WAIT seconds, default 5)
# (after their own ClusterName, hosts, ports and CommunicationParameters):
# munge on SOCK, every state, spool, log and pid file under D (a slurmd's
# named after its node, %n), per-node TmpFS (the PMIx plugin's per-step
# folders), no cgroups (proctrack/linuxproc, task/none), MpiDefault=none
# (a multi-rank step asks for --mpi=pmix itself), short scheduler
# intervals, and partition-priority preemption by requeue with the user's
# --signal sent first.
slurm_common_conf() {
  cat <<CONF
SlurmUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK,cred_expire=$1
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
TmpFS=$D/tmp/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmctldLogFile=$D/log/slurmctld.log
PlugStackConfig=$D/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=300
KillWait=${2:-5}
InactiveLimit=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
CONF
}

# slurm_common_partitions NODES GRACE_TIME: partition `low` (the default,
# preempted by requeue after GRACE_TIME seconds) and `high`, both over
# NODES.
slurm_common_partitions() {
  cat <<CONF
PartitionName=low Nodes=$1 Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=$2
PartitionName=high Nodes=$1 MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
CONF
}

# slurm_common_stop PID...: SIGTERM to all at once, SIGKILL to those still
# there after 5 s.
slurm_common_stop() {
  local pid i left
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    left=0
    for pid; do kill -0 "$pid" 2>/dev/null && left=1; done
    ((left)) || return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}
