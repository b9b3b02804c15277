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

/* profile.c: a table wrapping `in` (whose context in_ctx it then owns)
 * that times every operator and writes a report to dest ("1": stderr;
 * else a file) when closed; *ctx_out is the context to pass it
 * (PRIMUS_DEVICE_PROFILE). */
const prm_dev_i *prm__dev_profile_wrap(const prm_dev_i *in, void *in_ctx, const char *dest,
                                       void **ctx_out);
/* The backend's own context under a profiling table (ctx itself when i is
 * no such table). */
void *prm__dev_unwrapped_ctx(const prm_dev_i *i, void *ctx);

/* The name of the CUDA module's file. */
#define PRM__CUDA_MODULE "libprimus-cuda.so"

#endif
