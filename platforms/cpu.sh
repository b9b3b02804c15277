# platforms/cpu.sh - CPU-only platform (no accelerator found): OpenMP and
# BLAS threading for primus' own kernels. Sourced after base.sh; see the
# rules at the top of base.sh.

# Threads per rank: the CPUs primus may use, divided among the ranks on
# this node when the launcher says how many there are
# (PRIMUS_RANKS_PER_NODE). Left to the OpenMP runtime when unknown.
if [ "${PRIMUS_CPU_CORES:-0}" -gt 0 ] 2>/dev/null; then
  _prm_threads=$PRIMUS_CPU_CORES
  if [ "${PRIMUS_RANKS_PER_NODE:-0}" -gt 1 ] 2>/dev/null; then
    _prm_threads=$(( PRIMUS_CPU_CORES / PRIMUS_RANKS_PER_NODE ))
    [ "$_prm_threads" -ge 1 ] || _prm_threads=1
  fi
  : "${OMP_NUM_THREADS:=$_prm_threads}"; export OMP_NUM_THREADS
  unset _prm_threads
fi

# With several ranks on a node, keep each thread on one core and a rank's
# threads together (cache and NUMA locality), so ranks do not steal each
# other's cores. A single rank is left unpinned: on a 2-vCPU KVM guest,
# binding made training 1.6-1.75x slower (docs/benchmarks.md), because a
# pinned thread cannot move off a vCPU the host has descheduled.
if [ "${PRIMUS_RANKS_PER_NODE:-0}" -gt 1 ] 2>/dev/null; then
  : "${OMP_PROC_BIND:=close}"; export OMP_PROC_BIND
  : "${OMP_PLACES:=cores}"; export OMP_PLACES
fi
# Idle threads sleep instead of spinning, so nothing else on the node
# (another rank, a data loader) waits behind a spinning thread.
: "${OMP_WAIT_POLICY:=passive}"; export OMP_WAIT_POLICY
: "${OMP_DYNAMIC:=false}"; export OMP_DYNAMIC

# BLAS libraries follow the same thread count, so GEMMs and primus' own
# OpenMP loops do not oversubscribe the cores.
if [ -n "${OMP_NUM_THREADS:-}" ]; then
  : "${OPENBLAS_NUM_THREADS:=$OMP_NUM_THREADS}"; export OPENBLAS_NUM_THREADS
  : "${MKL_NUM_THREADS:=$OMP_NUM_THREADS}"; export MKL_NUM_THREADS
fi
