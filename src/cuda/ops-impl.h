/* ops-impl.h - what the operator files of the CUDA module share (ops.cu,
 * rows.cu, pointwise.cu): launch sizes, the grid-stride loop, the block
 * reductions in a fixed tree, bf16 packing and the shape check. */
#ifndef PRM_CUDA_OPS_IMPL_H
#define PRM_CUDA_OPS_IMPL_H
#include "cuda/cuda-impl.h"

#define PRM_CU_THREADS 256     /* element-wise and row kernels */
#define PRM_CU_XENT_THREADS 512 /* one row of logits */
#define PRM_CU_DW_ROWS 64       /* rows per partial of rmsnorm's dw */
#define PRM_CU_EMB_VB 128       /* vocabulary rows per block in embedding backward */
#define PRM_CU_EMB_GRID 512     /* blocks of embedding backward (vocabulary chunks, round robin) */
#define PRM_CU_SORT_TILE 2048   /* keys one block sorts in shared memory (embedding backward) */
#define PRM_CU_EMB_DEPTH 16     /* rows a lane loads before adding them (embedding backward) */
#define PRM_CU_EMB_WGRID 256    /* blocks along the sorted slots (embedding backward) */
#define PRM_CU_RMS_MAXC 1024    /* widest row of the warp-per-row RMSNorm kernels */

/* ======================================================================== */
/* Device helpers                                                           */
/* ======================================================================== */

/* Grid-stride loop index for 1-D element-wise kernels. */
#define PRM_CU_FOR(i, n)                                                                 \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
       i += (int64_t)gridDim.x * blockDim.x)

/* The sum over the block of v in a fixed tree order (blockDim.x a power of
 * two, sh holds blockDim.x values); every thread gets the same total. */
template <typename T>
__device__ static T prm_cu_block_sum(T v, T *sh) {
  unsigned t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = sh[t] + sh[t + s];
    __syncthreads();
  }
  T r = sh[0];
  __syncthreads(); /* sh may be reused at once */
  return r;
}

/* The maximum over the block, as prm_cu_block_sum (NaN loses, as in the
 * reference's `x > m ? x : m`). */
template <typename T>
__device__ static T prm_cu_block_max(T v, T *sh) {
  unsigned t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = sh[t + s] > sh[t] ? sh[t + s] : sh[t];
    __syncthreads();
  }
  T r = sh[0];
  __syncthreads();
  return r;
}

/* Four values rounded to bf16, packed for one 8-byte store. */
__device__ static inline uint2 prm_cu_bf16x4(float4 y) {
  return make_uint2((uint32_t)prm_cu_bf16_round(y.x) | ((uint32_t)prm_cu_bf16_round(y.y) << 16),
                    (uint32_t)prm_cu_bf16_round(y.z) | ((uint32_t)prm_cu_bf16_round(y.w) << 16));
}

/* Rejects shapes the launch arithmetic cannot hold (rows are grid.x). */
static inline int prm_cu_rows_ok(prm_cu_ctx *c, const char *op, int64_t N, int64_t C) {
  if (N < 0 || C < 0 || N > 0x7fffffff) {
    prm_cu_fail(c, "%s: unsupported shape N=%lld C=%lld", op, (long long)N, (long long)C);
    return 0;
  }
  return 1;
}


#endif /* PRM_CUDA_OPS_IMPL_H */
