# platforms/A100.sh - NVIDIA A100: Ampere, 40/80 GB HBM2e, NVLink 3.
# Sourced after base.sh; the CUDA/NCCL defaults live in nvidia-common.sh.
# See the rules at the top of base.sh.

. "${BASH_SOURCE[0]%/*}/nvidia-common.sh" || return

# The GPU architecture, for kernels built at run time and for reports.
: "${PRIMUS_GPU_ARCH:=sm_80}"; export PRIMUS_GPU_ARCH
: "${TORCH_CUDA_ARCH_LIST:=8.0}"; export TORCH_CUDA_ARCH_LIST
