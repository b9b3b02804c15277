# platforms/H100.sh - NVIDIA H100: Hopper, 80/94 GB HBM3, NVLink 4 with NVSwitch.
# Sourced after base.sh; the CUDA/NCCL defaults live in nvidia-common.sh.
# See the rules at the top of base.sh.

. "${BASH_SOURCE[0]%/*}/nvidia-common.sh" || return

# The GPU architecture, for kernels built at run time and for reports.
: "${PRIMUS_GPU_ARCH:=sm_90}"; export PRIMUS_GPU_ARCH
: "${TORCH_CUDA_ARCH_LIST:=9.0}"; export TORCH_CUDA_ARCH_LIST

# NVLink SHARP (NVLS) collectives on NVSwitch systems.
: "${NCCL_NVLS_ENABLE:=1}"; export NCCL_NVLS_ENABLE
