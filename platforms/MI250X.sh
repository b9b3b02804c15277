# platforms/MI250X.sh - AMD Instinct MI250X: CDNA2 (MI250X/MI250), 128 GB HBM2e per OAM, two GCDs per package.
# Sourced after base.sh; the ROCm/RCCL defaults live in amd-common.sh. See
# the rules at the top of base.sh.

. "${BASH_SOURCE[0]%/*}/amd-common.sh" || return

# The GPU architecture, for kernels built at run time (hipcc/Triton/torch
# extensions) and for primus' own reports.
: "${PRIMUS_GPU_ARCH:=gfx90a}"; export PRIMUS_GPU_ARCH
: "${PYTORCH_ROCM_ARCH:=gfx90a}"; export PYTORCH_ROCM_ARCH
