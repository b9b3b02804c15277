# platforms/base.sh - env defaults for every platform, sourced first.
#
# primus sources this file, then platforms/<PLATFORM>.sh, with `set -a` and
# keeps the variables they set or change (`primus env` shows them). Rules
# for every profile:
#   - only defaults: `: "${VAR:=value}"` never replaces a value the user
#     (or `--env VAR=...`) already set to something non-empty;
#   - pure assignments: no commands with side effects, no network, no files;
#   - temporaries are prefixed _prm_ and unset at the end.
# Facts the launcher exports before sourcing (all optional here):
#   PRIMUS_PLATFORM      platform name ("MI300X", "H100", "cpu", ...)
#   PRIMUS_ACCEL_COUNT   accelerators on this node
#   PRIMUS_CPU_CORES     CPUs in primus' affinity mask
#   PRIMUS_NUMA_NODES    NUMA nodes

# Single-node rendezvous defaults, as in Primus' run scripts; Slurm and
# multi-node launches override them.
: "${MASTER_ADDR:=localhost}"; export MASTER_ADDR
: "${MASTER_PORT:=1234}"; export MASTER_PORT
: "${NNODES:=1}"; export NNODES
: "${NODE_RANK:=0}"; export NODE_RANK

# One rank per accelerator by default.
if [ "${PRIMUS_ACCEL_COUNT:-0}" -gt 0 ] 2>/dev/null; then
  : "${GPUS_PER_NODE:=$PRIMUS_ACCEL_COUNT}"; export GPUS_PER_NODE
fi

# glibc: a training process has few long-lived threads; capping malloc
# arenas keeps resident memory from growing with every helper thread.
: "${MALLOC_ARENA_MAX:=8}"; export MALLOC_ARENA_MAX

# prm_device_list N: prints "0,1,...,N-1" (the vendor profiles use it to make
# every accelerator of the node visible). A shell function, not a variable,
# so it never reaches the task's environment.
prm_device_list() {
  _prm_ids=0
  _prm_i=1
  while [ "$_prm_i" -lt "$1" ]; do
    _prm_ids="$_prm_ids,$_prm_i"
    _prm_i=$(( _prm_i + 1 ))
  done
  printf '%s' "$_prm_ids"
  unset _prm_ids _prm_i
}
