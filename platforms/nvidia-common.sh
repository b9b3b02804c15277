# platforms/nvidia-common.sh - CUDA / NCCL defaults shared by the NVIDIA
# profiles (A100.sh, H100.sh, H200.sh, B200.sh source it). Not a platform
# profile on its own; see the rules at the top of base.sh.

# Device numbering follows the PCI bus, like nvidia-smi and sysfs.
: "${CUDA_DEVICE_ORDER:=PCI_BUS_ID}"; export CUDA_DEVICE_ORDER

# Devices: all accelerators of the node unless already restricted.
if [ -z "${CUDA_VISIBLE_DEVICES:-}" ] && [ "${PRIMUS_ACCEL_COUNT:-0}" -gt 0 ] 2>/dev/null; then
  CUDA_VISIBLE_DEVICES=$(prm_device_list "$PRIMUS_ACCEL_COUNT"); export CUDA_VISIBLE_DEVICES
fi

: "${CUDA_DEVICE_MAX_CONNECTIONS:=1}"; export CUDA_DEVICE_MAX_CONNECTIONS # ordered compute/comm overlap
: "${NCCL_DEBUG:=WARN}"; export NCCL_DEBUG                          # quiet unless something goes wrong
: "${NCCL_CROSS_NIC:=0}"; export NCCL_CROSS_NIC                    # rings stay on one NIC per rail
: "${TORCH_NCCL_ASYNC_ERROR_HANDLING:=1}"; export TORCH_NCCL_ASYNC_ERROR_HANDLING # a failed collective aborts instead of hanging
: "${TORCH_NCCL_HIGH_PRIORITY:=1}"; export TORCH_NCCL_HIGH_PRIORITY # communication streams at high priority
