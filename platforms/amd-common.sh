# platforms/amd-common.sh - ROCm / RCCL defaults shared by the AMD Instinct
# profiles (MI250X.sh, MI300X.sh, MI325X.sh, MI355X.sh source it). Not a
# platform profile on its own; see the rules at the top of base.sh.

# Devices: all accelerators of the node, unless the user (or Slurm) already
# restricted them through any of the visibility variables.
if [ -z "${HIP_VISIBLE_DEVICES:-}${ROCR_VISIBLE_DEVICES:-}${CUDA_VISIBLE_DEVICES:-}" ] &&
   [ "${PRIMUS_ACCEL_COUNT:-0}" -gt 0 ] 2>/dev/null; then
  HIP_VISIBLE_DEVICES=$(prm_device_list "$PRIMUS_ACCEL_COUNT"); export HIP_VISIBLE_DEVICES
fi

# HSA runtime
: "${HSA_FORCE_FINE_GRAIN_PCIE:=1}"; export HSA_FORCE_FINE_GRAIN_PCIE # fine-grained host memory over PCIe (RCCL, P2P)
: "${HSA_NO_SCRATCH_RECLAIM:=1}"; export HSA_NO_SCRATCH_RECLAIM    # keep scratch allocated: no stalls between kernels
: "${HSA_ENABLE_SDMA:=0}"; export HSA_ENABLE_SDMA                  # blit kernels instead of SDMA engines for copies
: "${GPU_MAX_HW_QUEUES:=2}"; export GPU_MAX_HW_QUEUES              # fewer HW queues per device: less contention with RCCL

# RCCL (the NCCL_* names are RCCL's too)
: "${NCCL_CHECKS_DISABLE:=1}"; export NCCL_CHECKS_DISABLE          # skip argument checks on every collective
: "${NCCL_IB_GID_INDEX:=3}"; export NCCL_IB_GID_INDEX              # RoCE v2 GID on typical AMD clusters
: "${NCCL_CROSS_NIC:=0}"; export NCCL_CROSS_NIC                    # rings stay on one NIC per rail
: "${RCCL_MSCCL_ENABLE:=0}"; export RCCL_MSCCL_ENABLE              # MSCCL algorithms off: predictable collectives
: "${NCCL_DEBUG:=WARN}"; export NCCL_DEBUG                          # quiet unless something goes wrong

# Framework-side defaults Primus sets for AMD
: "${TORCH_NCCL_HIGH_PRIORITY:=1}"; export TORCH_NCCL_HIGH_PRIORITY # communication streams at high priority
: "${CUDA_DEVICE_MAX_CONNECTIONS:=1}"; export CUDA_DEVICE_MAX_CONNECTIONS # ordered compute/comm overlap
