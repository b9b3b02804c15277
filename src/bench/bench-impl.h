/* bench-impl.h - helpers shared by the measurement files of src/bench. */
#ifndef PRM_BENCH_IMPL_H
#define PRM_BENCH_IMPL_H

#include "primus/prm_bench.h"
#include "primus/prm_kernels.h"

/* Fills x with uniform values in [-1, 1) from a fixed seed. */
void prm__bench_fill(float *x, int64_t n, uint64_t seed);

/* A float buffer of n values from the accounting allocator (scratch), or
 * NULL with PRM_ENOMEM naming `what`. Free with prm__bench_free. */
float *prm__bench_alloc(int64_t n, const char *what, prm_err_t *err);
void prm__bench_free(float *p, int64_t n);

/* The measured fp32 peak of all kernel threads in GFLOP/s; 0 unknown. */
double prm__bench_peak_gflops(void);

#endif
