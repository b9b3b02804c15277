/* device-impl.h - what the device layer's files share. */
#ifndef PRM_DEVICE_IMPL_H
#define PRM_DEVICE_IMPL_H

#include "primus/prm_device.h"

/* cpu.c: the CPU backend's table and a context for it (freed by the
 * table's close). */
const prm_dev_i *prm__dev_cpu_table(void);
void *prm__dev_cpu_new(const prm_gemm_t *gemm);
/* The GEMM backend's name of a CPU backend context. */
const char *prm__dev_cpu_gemm_name(void *ctx);

/* tagged.c: the CPU backend with its memory moved out of the host's reach
 * (a test backend: PRIMUS_DEVICE_TAGGED=1). */
const prm_dev_i *prm__dev_tagged_table(void);

/* The name of the CUDA module's file. */
#define PRM__CUDA_MODULE "libprimus-cuda.so"

#endif
