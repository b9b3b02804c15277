# platforms/B200.sh - NVIDIA B200: Blackwell, 180 GB HBM3e, NVLink 5.
# Sourced after base.sh; the CUDA/NCCL defaults live in nvidia-common.sh.
# See the rules at the top of base.sh.

. "${BASH_SOURCE[0]%/*}/nvidia-common.sh" || return

# The GPU architecture, for kernels built at run time and for reports.
: "${PRIMUS_GPU_ARCH:=sm_100}"; export PRIMUS_GPU_ARCH
: "${TORCH_CUDA_ARCH_LIST:=10.0}"; export TORCH_CUDA_ARCH_LIST
