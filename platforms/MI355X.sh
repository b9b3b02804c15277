# platforms/MI355X.sh - AMD Instinct MI355X: CDNA4, 288 GB HBM3E, 8 OAMs per node on XGMI.
# Sourced after base.sh; the ROCm/RCCL defaults live in amd-common.sh. See
# the rules at the top of base.sh.

. "${BASH_SOURCE[0]%/*}/amd-common.sh" || return

# The GPU architecture, for kernels built at run time (hipcc/Triton/torch
# extensions) and for primus' own reports.
: "${PRIMUS_GPU_ARCH:=gfx950}"; export PRIMUS_GPU_ARCH
: "${PYTORCH_ROCM_ARCH:=gfx950}"; export PYTORCH_ROCM_ARCH
