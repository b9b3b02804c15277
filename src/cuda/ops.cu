/* ops.cu - the CUDA module's element-wise, row-wise, loss, optimizer and
 * reduction operators. Each matches its CPU reference (src/kernels/
 * ref-impl.h, adamw.c, bf16.c): the same formula in the same order, row
 * statistics in double where the reference keeps them in double.
 *
 * Every kernel says its launch shape and what each thread or block owns.
 * Results are deterministic: no float atomics anywhere; every reduction is
 * a fixed tree or a fixed loop order that depends only on the shape. Some
 * results are bit-identical to the CPU (conversions, embedding backward,
 * AdamW); the others differ by rounding only (order of sums, FMA). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda-impl.h"

#define PRM_CU_THREADS 256     /* element-wise and row kernels */
#define PRM_CU_XENT_THREADS 512 /* one row of logits */
#define PRM_CU_DW_ROWS 64       /* rows per partial of rmsnorm's dw */
#define PRM_CU_EMB_VB 128       /* vocabulary rows per block in embedding backward */
#define PRM_CU_EMB_GRID 512     /* blocks of embedding backward (vocabulary chunks dealt round robin) */
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
static int prm_cu_rows_ok(prm_cu_ctx *c, const char *op, int64_t N, int64_t C) {
  if (N < 0 || C < 0 || N > 0x7fffffff) {
    prm_cu_fail(c, "%s: unsupported shape N=%lld C=%lld", op, (long long)N, (long long)C);
    return 0;
  }
  return 1;
}

/* ======================================================================== */
/* Conversions                                                              */
/* ======================================================================== */

/* Grid-stride, one element per thread per step. */
__global__ static void prm_cu_k_to_bf16(uint16_t *dst, const float *src, int64_t n) {
  PRM_CU_FOR(i, n) dst[i] = prm_cu_bf16_round(src[i]);
}

__global__ static void prm_cu_k_from_bf16(float *dst, const uint16_t *src, int64_t n) {
  PRM_CU_FOR(i, n) dst[i] = prm_cu_bf16_widen(src[i]);
}

/* The same conversions four values per thread (one 16-byte and one 8-byte
 * access) where both pointers allow it: n4 groups of four, the rest by the
 * kernels above. The same bits: each value is rounded on its own. */
__global__ static void prm_cu_k_to_bf16_4(uint32_t *dst, const float *src, int64_t n4) {
  PRM_CU_FOR(i, n4) {
    const float4 x = ((const float4 *)src)[i];
    const uint32_t lo = (uint32_t)prm_cu_bf16_round(x.x) | ((uint32_t)prm_cu_bf16_round(x.y) << 16);
    const uint32_t hi = (uint32_t)prm_cu_bf16_round(x.z) | ((uint32_t)prm_cu_bf16_round(x.w) << 16);
    ((uint2 *)dst)[i] = make_uint2(lo, hi);
  }
}

__global__ static void prm_cu_k_from_bf16_4(float *dst, const uint32_t *src, int64_t n4) {
  PRM_CU_FOR(i, n4) {
    const uint2 w = ((const uint2 *)src)[i];
    ((float4 *)dst)[i] = make_float4(prm_cu_bf16_widen((uint16_t)(w.x & 0xffffu)),
                                     prm_cu_bf16_widen((uint16_t)(w.x >> 16)),
                                     prm_cu_bf16_widen((uint16_t)(w.y & 0xffffu)),
                                     prm_cu_bf16_widen((uint16_t)(w.y >> 16)));
  }
}

/* Groups of four both pointers are aligned for (16 bytes fp32, 8 bf16). */
static int64_t prm_cu_quads(const void *f32, const void *b16, int64_t n) {
  return ((uintptr_t)f32 % 16 == 0 && (uintptr_t)b16 % 8 == 0) ? n / 4 : 0;
}

void prm_cu_f32_to_bf16(void *ctx, prm_dev_bf16_t *dst, const float *src, int64_t n) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "f32_to_bf16");
  if (n <= 0) return;
  const int64_t n4 = prm_cu_quads(src, dst, n), done = 4 * n4;
  if (n4) {
    prm_cu_k_to_bf16_4<<<prm_cu_blocks(n4, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
        (uint32_t *)dst, src, n4);
    if (prm_cu_check(c, "f32_to_bf16")) return;
  }
  if (done == n) return;
  prm_cu_k_to_bf16<<<prm_cu_blocks(n - done, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
      dst + done, src + done, n - done);
  prm_cu_check(c, "f32_to_bf16");
}

void prm_cu_bf16_to_f32(void *ctx, float *dst, const prm_dev_bf16_t *src, int64_t n) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "bf16_to_f32");
  if (n <= 0) return;
  const int64_t n4 = prm_cu_quads(dst, src, n), done = 4 * n4;
  if (n4) {
    prm_cu_k_from_bf16_4<<<prm_cu_blocks(n4, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
        dst, (const uint32_t *)src, n4);
    if (prm_cu_check(c, "bf16_to_f32")) return;
  }
  if (done == n) return;
  prm_cu_k_from_bf16<<<prm_cu_blocks(n - done, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
      dst + done, src + done, n - done);
  prm_cu_check(c, "bf16_to_f32");
}

/* ======================================================================== */
/* Embedding                                                                */
/* ======================================================================== */

/* Grid (N), block 256: block n copies row tok[n] of wte into out[n], thread
 * t the columns t, t+256, ... A negative id (the caller checks ids; V is
 * not passed) raises a flag and leaves the row as is. */
__global__ static void prm_cu_k_emb_fwd(float *out, const int32_t *tok, const float *wte,
                                        int64_t C, unsigned *flags) {
  int64_t n = blockIdx.x;
  int32_t t = tok[n];
  if (t < 0) {
    /* A plain |= racing with other blocks is fine: they all set this same bit. */
    if (threadIdx.x == 0) *flags |= PRM_CU_FLAG_EMB_TOKEN;
    return;
  }
  const float *src = wte + (int64_t)t * C;
  float *dst = out + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

/* Grid (PRM_CU_EMB_GRID), block 256. Block b owns the vocabulary rows of
 * chunks b, b + grid, b + 2 grid, ... (PRM_CU_EMB_VB rows each); thread t
 * owns columns t, t+256, ... of those rows. For each chunk the block walks
 * all N tokens in order (256 at a time through shared memory) and adds
 * dout[n] to dwte[tok[n]] when tok[n] falls in the chunk: every element of
 * dwte is written by one thread, adding the rows of its token in row
 * order, exactly as the CPU reference does (the same bits). V is not
 * passed: a block goes on to its next chunk while some token lies beyond
 * the chunks dealt so far. No atomics, no sort. A negative id raises the
 * flag (its row is skipped). PRIMUS_CUDA_ELTWISE=scalar only: the default
 * is the sorted backward below. */
__global__ static void prm_cu_k_emb_bwd(float *dwte, const float *dout, const int32_t *tok,
                                        int64_t N, int64_t C, unsigned *flags) {
  __shared__ int32_t st[PRM_CU_THREADS];
  __shared__ int32_t smax[PRM_CU_THREADS];
  int64_t v0 = (int64_t)blockIdx.x * PRM_CU_EMB_VB;
  const int64_t stride = (int64_t)gridDim.x * PRM_CU_EMB_VB;
  for (;;) {
    int32_t mx = -1;
    for (int64_t n0 = 0; n0 < N; n0 += PRM_CU_THREADS) {
      int64_t n = n0 + threadIdx.x;
      int32_t t = n < N ? tok[n] : -1;
      if (n < N && t < 0) *flags |= PRM_CU_FLAG_EMB_TOKEN; /* skipped below */
      st[threadIdx.x] = t;
      mx = t > mx ? t : mx;
      __syncthreads();
      int64_t nt = N - n0 < PRM_CU_THREADS ? N - n0 : PRM_CU_THREADS;
      for (int64_t r = 0; r < nt; r++) {
        int64_t tr = st[r]; /* the same for every thread: a uniform branch */
        if (tr < v0 || tr >= v0 + PRM_CU_EMB_VB) continue;
        float *d = dwte + tr * C;
        const float *g = dout + (n0 + r) * C;
        for (int64_t col = threadIdx.x; col < C; col += blockDim.x) d[col] += g[col];
      }
      __syncthreads(); /* st is refilled next */
    }
    int32_t tmax = prm_cu_block_max<int32_t>(mx, smax);
    v0 += stride;
    if ((int64_t)tmax < v0) break;
  }
}

/* The sorted embedding backward (the default; PRIMUS_CUDA_ELTWISE=scalar
 * takes the kernel above). V is not passed, so a counting sort by token id
 * has no table to count into: the N (token, position) pairs are sorted
 * instead, as 64-bit keys token << 32 | position (the token as unsigned:
 * negative ids sort after every valid one), by a bitonic network padded to
 * a power of two M with all-ones keys. The keys are distinct, so the order
 * is the one sorted order whatever the network does: each token's rows
 * end up together and in row order. Then one warp per (run of a token, 128
 * columns, or 32 where C % 4 != 0) adds the run's rows in that order to
 * dwte's row, starting from its value: the CPU reference's additions in its
 * order, the same bits. */

/* Grid-stride over M: key i of (tok[i], i), all ones past N. */
__global__ static void prm_cu_k_emb_keys(uint64_t *key, const int32_t *tok, int64_t N, int64_t M) {
  PRM_CU_FOR(i, M)
  key[i] = i < N ? ((uint64_t)(uint32_t)tok[i] << 32) | (uint64_t)i : ~(uint64_t)0;
}

/* The compare-exchange of the pair (i, i + j) of the bitonic network's
 * stage k: ascending where i & k is 0. */
__device__ static inline void prm_cu_bitonic_cx(uint64_t *a, uint64_t *b, int64_t i, int64_t k) {
  uint64_t x = *a, y = *b;
  if ((x > y) == ((i & k) == 0)) {
    *a = y;
    *b = x;
  }
}

/* Grid-stride over the M/2 pairs of one step (k, j) with j >= the tile:
 * pair p is (i, i + j), i = 2 j (p / j) + p % j. */
__global__ static void prm_cu_k_bitonic_step(uint64_t *key, int64_t M, int64_t k, int64_t j) {
  PRM_CU_FOR(p, M / 2) {
    int64_t i = 2 * j * (p / j) + p % j;
    prm_cu_bitonic_cx(&key[i], &key[i + j], i, k);
  }
}

/* Grid (M / T), block T / 2: block b owns keys [b T, b T + T) in shared
 * memory, thread t the pairs t, t + T/2, ... of each step. kk = 0: every
 * stage k = 2 .. T (the tile sorted, ascending or descending by its place);
 * kk > T: the steps j = T/2 .. 1 of stage kk (after the wider steps). */
__global__ static void prm_cu_k_bitonic_tile(uint64_t *key, int64_t T, int64_t kk) {
  __shared__ uint64_t sk[PRM_CU_SORT_TILE];
  const int64_t base = (int64_t)blockIdx.x * T;
  for (int64_t t = threadIdx.x; t < T; t += blockDim.x) sk[t] = key[base + t];
  __syncthreads();
  for (int64_t k = kk ? kk : 2; k <= (kk ? kk : T); k *= 2)
    for (int64_t j = (kk ? T : k) / 2; j > 0; j /= 2) {
      for (int64_t p = threadIdx.x; p < T / 2; p += blockDim.x) {
        int64_t i = 2 * j * (p / j) + p % j;
        prm_cu_bitonic_cx(&sk[i], &sk[i + j], base + i, k);
      }
      __syncthreads();
    }
  for (int64_t t = threadIdx.x; t < T; t += blockDim.x) key[base + t] = sk[t];
}

/* VEC floats at p (one float4 for 4). */
template <int VEC>
__device__ static inline void prm_cu_ldv(float *v, const float *p) {
  if constexpr (VEC == 4) {
    const float4 f = *(const float4 *)p;
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  } else {
    for (int e = 0; e < VEC; e++) v[e] = p[e];
  }
}

/* Grid (PRM_CU_EMB_WGRID or fewer, ceil(C / (32 VEC))), block 256 (8
 * warps). Warp w of block x looks at sorted slots i = 8 x + w, + 8 grid.x,
 * ...; where slot i starts a run (slot i - 1 holds another token) the warp
 * adds the run's rows to columns [32 VEC y, 32 VEC (y + 1)) of dwte's row,
 * lane l owning columns 32 VEC y + VEC l .. + VEC - 1 (VEC 4: one float4;
 * C % 4 == 0 and both matrices 16-byte aligned): their values, plus each
 * row's in sorted (= row) order. The run's first row is added alone (most
 * runs are one row long); the rest PRM_CU_EMB_DEPTH rows at a time, all
 * loaded before any is added (slots past the run load the batch's first
 * row again, lanes past C column 0: every load is unconditional, so they
 * are issued together). The keys are read by every lane of the warp, one
 * broadcast each: no lane exchange. A run of negative ids raises the flag
 * and is skipped. */
template <int VEC>
__global__ static void __launch_bounds__(PRM_CU_THREADS)
    prm_cu_k_emb_sum(float *dwte, const float *dout, const uint64_t *key, int64_t N, int64_t C,
                     unsigned *flags) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const int64_t col = ((int64_t)blockIdx.y * 32 + lane) * VEC;
  const bool in = col < C; /* VEC 4: C % 4 == 0, so all four are */
  const int64_t cc = in ? col : 0;
  for (int64_t i = (int64_t)blockIdx.x * 8 + warp; i < N; i += (int64_t)gridDim.x * 8) {
    const uint64_t ki = key[i];
    const uint32_t tk = (uint32_t)(ki >> 32); /* the same for the whole warp */
    if (i > 0 && (uint32_t)(key[i - 1] >> 32) == tk) continue;
    if ((int32_t)tk < 0) {
      if (lane == 0 && blockIdx.y == 0) *flags |= PRM_CU_FLAG_EMB_TOKEN;
      continue;
    }
    float *d = dwte + (int64_t)tk * C + cc;
    float acc[VEC], v0[VEC];
    prm_cu_ldv<VEC>(acc, d);
    prm_cu_ldv<VEC>(v0, dout + (int64_t)(uint32_t)ki * C + cc);
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] += v0[e];
    for (int64_t r0 = i + 1; r0 < N && (uint32_t)(key[r0] >> 32) == tk; r0 += PRM_CU_EMB_DEPTH) {
      int32_t row[PRM_CU_EMB_DEPTH];
      float v[PRM_CU_EMB_DEPTH][VEC];
      const int32_t first = (int32_t)(uint32_t)key[r0];
#pragma unroll
      for (int k = 0; k < PRM_CU_EMB_DEPTH; k++) {
        const uint64_t kv = key[r0 + k < N ? r0 + k : N - 1];
        row[k] = r0 + k < N && (uint32_t)(kv >> 32) == tk ? (int32_t)(uint32_t)kv : -1;
      }
#pragma unroll
      for (int k = 0; k < PRM_CU_EMB_DEPTH; k++)
        prm_cu_ldv<VEC>(v[k], dout + (int64_t)(row[k] >= 0 ? row[k] : first) * C + cc);
#pragma unroll
      for (int k = 0; k < PRM_CU_EMB_DEPTH; k++)
        if (row[k] >= 0)
#pragma unroll
          for (int e = 0; e < VEC; e++) acc[e] += v[k][e];
      if (row[PRM_CU_EMB_DEPTH - 1] < 0) break; /* the run ended in this batch */
    }
    if (in)
#pragma unroll
      for (int e = 0; e < VEC; e++) d[e] = acc[e];
  }
}

/* The sorted backward's launches; scratch: the M keys. */
static void prm_cu_emb_bwd_sorted(prm_cu_ctx *c, float *dwte, const float *dout,
                                  const int32_t *tok, int64_t N, int64_t C) {
  const char *op = "embedding_backward";
  int64_t M = 2;
  while (M < N) M *= 2;
  const int64_t T = M < PRM_CU_SORT_TILE ? M : PRM_CU_SORT_TILE;
  uint64_t *key = (uint64_t *)prm_cu_scratch(c, op, (size_t)M * sizeof(uint64_t));
  if (!key) return;
  prm_cu_k_emb_keys<<<prm_cu_blocks(M, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(key, tok,
                                                                                     N, M);
  if (prm_cu_check(c, op)) return;
  prm_cu_k_bitonic_tile<<<(unsigned)(M / T), (unsigned)(T / 2), 0, c->stream>>>(key, T, 0);
  if (prm_cu_check(c, op)) return;
  for (int64_t k = 2 * T; k <= M; k *= 2) {
    for (int64_t j = k / 2; j >= T; j /= 2) {
      prm_cu_k_bitonic_step<<<prm_cu_blocks(M / 2, PRM_CU_THREADS), PRM_CU_THREADS, 0,
                              c->stream>>>(key, M, k, j);
      if (prm_cu_check(c, op)) return;
    }
    prm_cu_k_bitonic_tile<<<(unsigned)(M / T), (unsigned)(T / 2), 0, c->stream>>>(key, T, k);
    if (prm_cu_check(c, op)) return;
  }
  int64_t gx = (N + 7) / 8;
  if (gx > PRM_CU_EMB_WGRID) gx = PRM_CU_EMB_WGRID;
  if (C % 4 == 0 && (uintptr_t)dwte % 16 == 0 && (uintptr_t)dout % 16 == 0)
    prm_cu_k_emb_sum<4><<<dim3((unsigned)gx, (unsigned)((C + 127) / 128)), PRM_CU_THREADS, 0,
                          c->stream>>>(dwte, dout, key, N, C, c->d_flags);
  else
    prm_cu_k_emb_sum<1><<<dim3((unsigned)gx, (unsigned)((C + 31) / 32)), PRM_CU_THREADS, 0,
                          c->stream>>>(dwte, dout, key, N, C, c->d_flags);
  prm_cu_check(c, op);
}

void prm_cu_embedding_forward(void *ctx, float *out, const int32_t *tok, const float *wte,
                              int64_t N, int64_t C) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "embedding_forward");
  if (!prm_cu_rows_ok(c, "embedding_forward", N, C) || N == 0 || C == 0) return;
  prm_cu_k_emb_fwd<<<(unsigned)N, PRM_CU_THREADS, 0, c->stream>>>(out, tok, wte, C, c->d_flags);
  prm_cu_check(c, "embedding_forward");
}

void prm_cu_embedding_backward(void *ctx, float *dwte, const float *dout, const int32_t *tok,
                               int64_t N, int64_t C) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "embedding_backward");
  if (!prm_cu_rows_ok(c, "embedding_backward", N, C) || N == 0 || C == 0) return;
  if (!c->ew_scalar && (C + 31) / 32 <= 65535) {
    prm_cu_emb_bwd_sorted(c, dwte, dout, tok, N, C);
    return;
  }
  prm_cu_k_emb_bwd<<<PRM_CU_EMB_GRID, PRM_CU_THREADS, 0, c->stream>>>(dwte, dout, tok, N, C,
                                                                        c->d_flags);
  prm_cu_check(c, "embedding_backward");
}

/* ======================================================================== */
/* RMSNorm                                                                  */
/* ======================================================================== */

/* Grid (N), block 256: block n owns row n, thread t its columns t, t+256,
 * ... The mean square is summed in double (per thread in column order, then
 * a fixed tree); rstd = 1/sqrt(ms + eps) in double rounded to float, as the
 * reference. With b (the fused add): the row is a + b, stored to sum first
 * (each thread reads and writes only its own columns, so sum may alias a or
 * b), then normalised from the stored values. */
__global__ static void prm_cu_k_rmsnorm_fwd(float *sum, float *out, uint16_t *out16, float *rstd,
                                            const float *a, const float *b, const float *w,
                                            int64_t C, float eps) {
  __shared__ double sh[PRM_CU_THREADS];
  int64_t n = blockIdx.x;
  const float *ar = a + n * C;
  const float *br = b ? b + n * C : NULL;
  float *sr = b ? sum + n * C : NULL;
  double ss = 0;
  for (int64_t col = threadIdx.x; col < C; col += blockDim.x) {
    float v = ar[col];
    if (br) {
      v = ar[col] + br[col];
      sr[col] = v;
    }
    ss += (double)v * v;
  }
  ss = prm_cu_block_sum<double>(ss, sh);
  float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
  if (threadIdx.x == 0) rstd[n] = r;
  const float *xr = br ? sr : ar;
  float *o = out + n * C;
  if (out16) { /* the fused bf16 copy: the same value, then rounded */
    uint16_t *o16 = out16 + n * C;
    for (int64_t col = threadIdx.x; col < C; col += blockDim.x) {
      float y = xr[col] * r * w[col];
      o[col] = y;
      o16[col] = prm_cu_bf16_round(y);
    }
    return;
  }
  for (int64_t col = threadIdx.x; col < C; col += blockDim.x) o[col] = xr[col] * r * w[col];
}

/* One element of dx (accumulated), and one row's term of a dw partial
 * (p = dout x, rounded; r = rstd, one FMA as the compiler made of the
 * first kernel's acc += dout x rstd): both RMSNorm backwards compute them
 * here, explicitly rounded (never contracted), so they give the same bits. */
__device__ static inline float prm_cu_rms_dx1(float d, float rr, float w, float g, float x,
                                              float coef) {
  return __fadd_rn(d, __fsub_rn(__fmul_rn(__fmul_rn(rr, w), g), __fmul_rn(x, coef)));
}

__device__ static inline float prm_cu_rms_dw1(float acc, float p, float r) {
  return __fmaf_rn(p, r, acc);
}

/* Grid (N), block 256: block n owns row n of dx (accumulated):
 * dx += rstd w dout - x (sum(dout w x) rstd^3 / C), the sum in double. */
__global__ static void prm_cu_k_rmsnorm_bwd_dx(float *dx, const float *dout, const float *x,
                                               const float *w, const float *rstd, int64_t C) {
  __shared__ double sh[PRM_CU_THREADS];
  int64_t n = blockIdx.x;
  const float *xr = x + n * C, *g = dout + n * C;
  float *d = dx + n * C;
  double dot = 0;
  for (int64_t col = threadIdx.x; col < C; col += blockDim.x)
    dot += (double)g[col] * w[col] * xr[col];
  dot = prm_cu_block_sum<double>(dot, sh);
  double r = rstd[n];
  float coef = (float)(dot * r * r * r / (double)C);
  float rr = rstd[n];
  for (int64_t col = threadIdx.x; col < C; col += blockDim.x)
    d[col] = prm_cu_rms_dx1(d[col], rr, w[col], g[col], xr[col], coef);
}

/* Grid (ceil(C/256), nchunk), block 256: thread (x, k) owns column
 * c = 256 x + t of row chunk k (rows [k R, k R + R)) and sums
 * dout x rstd over those rows in order into part[k][c]. */
__global__ static void prm_cu_k_rmsnorm_bwd_dw1(float *part, const float *dout, const float *x,
                                               const float *rstd, int64_t N, int64_t C,
                                               int64_t R) {
  int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  int64_t n0 = (int64_t)blockIdx.y * R, n1 = n0 + R < N ? n0 + R : N;
  float acc = 0;
  for (int64_t n = n0; n < n1; n++)
    acc = prm_cu_rms_dw1(acc, __fmul_rn(dout[n * C + col], x[n * C + col]), rstd[n]);
  part[(int64_t)blockIdx.y * C + col] = acc;
}

/* Grid (ceil(C/256)), block 256: thread owns column c and adds the chunk
 * partials in chunk order to dw[c] (accumulated). */
__global__ static void prm_cu_k_rmsnorm_bwd_dw2(float *dw, const float *part, int64_t nchunk,
                                               int64_t C) {
  int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  float s = 0;
  for (int64_t k = 0; k < nchunk; k++) s += part[k * C + col];
  dw[col] += s;
}

/* The warp-per-row RMSNorm kernels (the default where C % 4 == 0, C <=
 * PRM_CU_RMS_MAXC and every row pointer is 16-byte aligned;
 * PRIMUS_CUDA_ELTWISE=scalar takes the kernels above). Lane l of a row's
 * warp loads the float4s l, l + 32, ... (columns 4l + 128m .. 4l + 128m +
 * 3). The kernels above sum a row in double per thread t of 256 over
 * columns t, t + 256, ... in order, then by a fixed tree; here the same
 * per-thread sums are kept in the lanes that hold their columns (lane l
 * holds those of threads 4l .. 4l+3 and 128 + 4l .. 128 + 4l + 3, in ps[0
 * .. 3] and ps[4 .. 7], each in column order) and the tree is walked level
 * by level: 128, 2 and 1 inside a lane, 64 .. 4 across lanes (xor 16 .. 1;
 * IEEE addition commutes, so a lane adding its partner's value to its own
 * gets the bits the tree's t < s side gets). Lane 0 ends with the tree's
 * total, the same bits as the kernels above. */

/* ps += the four squares (sq) or dout w x products of one float4. */
__device__ static inline void prm_cu_rms_acc(double *ps, float4 a) {
  ps[0] += (double)a.x * a.x;
  ps[1] += (double)a.y * a.y;
  ps[2] += (double)a.z * a.z;
  ps[3] += (double)a.w * a.w;
}

__device__ static inline void prm_cu_rms_dot(double *ps, float4 g, float4 w, float4 x) {
  ps[0] += (double)g.x * w.x * x.x;
  ps[1] += (double)g.y * w.y * x.y;
  ps[2] += (double)g.z * w.z * x.z;
  ps[3] += (double)g.w * w.w * x.w;
}

/* The 256-thread tree of prm_cu_block_sum over the lanes' partials; every
 * lane returns lane 0's total. Every lane of the warp calls it. */
__device__ static double prm_cu_rms_tree(double *ps) {
  for (int i = 0; i < 4; i++) ps[i] = ps[i] + ps[i + 4]; /* s = 128 */
  for (int m = 16; m >= 1; m >>= 1)                      /* s = 64 .. 4 */
    for (int i = 0; i < 4; i++) ps[i] = ps[i] + PRM_SHFL_XOR(ps[i], m);
  ps[0] = ps[0] + ps[2]; /* s = 2 */
  ps[1] = ps[1] + ps[3];
  ps[0] = ps[0] + ps[1]; /* s = 1 */
  return PRM_SHFL(ps[0], 0);
}

/* Grid (ceil(N/8)), block 256: warp w owns row 8 x + w (every warp takes
 * part in the lane exchanges, rows past N included). As
 * prm_cu_k_rmsnorm_fwd: with b the row a + b stored to sum first (each lane
 * reads and writes only its own float4s, so sum may alias a or b) and
 * normalised from the stored values; with out16 the bf16 copy. */
__global__ static void __launch_bounds__(PRM_CU_THREADS)
    prm_cu_k_rmsnorm_fwd4(float *sum, float *out, uint16_t *out16, float *rstd, const float *a,
                          const float *b, const float *w, int64_t N, int64_t C, float eps) {
  const int lane = (int)(threadIdx.x & 31u);
  const int64_t n = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5), C4 = C / 4;
  const bool live = n < N;
  const int64_t off = (live ? n : 0) * C;
  const float4 *ar = (const float4 *)(a + off), *br = b ? (const float4 *)(b + off) : NULL;
  float4 *sr = b ? (float4 *)(sum + off) : NULL;
  double ps[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (live)
    for (int64_t q = lane; q < C4; q += 64)
      for (int h = 0; h < 2 && q + 32 * h < C4; h++) {
        const int64_t k = q + 32 * h;
        float4 v = ar[k];
        if (br) {
          const float4 u = br[k];
          v.x = v.x + u.x;
          v.y = v.y + u.y;
          v.z = v.z + u.z;
          v.w = v.w + u.w;
          sr[k] = v;
        }
        prm_cu_rms_acc(ps + 4 * h, v);
      }
  const double ss = prm_cu_rms_tree(ps);
  if (!live) return;
  const float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
  if (lane == 0) rstd[n] = r;
  const float4 *xr = br ? (const float4 *)sr : ar, *w4 = (const float4 *)w;
  float4 *o = (float4 *)(out + off);
  uint2 *o16 = out16 ? (uint2 *)(out16 + off) : NULL;
  for (int64_t q = lane; q < C4; q += 32) {
    const float4 x = xr[q], g = w4[q];
    float4 y;
    y.x = x.x * r * g.x;
    y.y = x.y * r * g.y;
    y.z = x.z * r * g.z;
    y.w = x.w * r * g.w;
    o[q] = y;
    if (o16) o16[q] = prm_cu_bf16x4(y);
  }
}

/* Grid (nchunk), block 256: block k owns rows [k R, k R + R) (R as the dw
 * partials of prm_cu_rmsnorm_backward), in rounds of 8: warp w takes row
 * k R + 8 j + w of round j, adds its dx as prm_cu_k_rmsnorm_bwd_dx (the dot
 * by the tree above) and leaves dout x of each column in shared memory;
 * then thread t adds those 8 rows' dout x rstd, in row order, to its
 * float4 t of the chunk's dw partial, as prm_cu_k_rmsnorm_bwd_dw1 does:
 * dx and the partials in one pass over dout and x, the same bits. */
__global__ static void __launch_bounds__(PRM_CU_THREADS)
    prm_cu_k_rmsnorm_bwd4(float *dx, float *part, const float *dout, const float *x,
                          const float *w, const float *rstd, int64_t N, int64_t C, int64_t R) {
  __shared__ float4 sp[8][PRM_CU_RMS_MAXC / 4];
  __shared__ float sr[8];
  const int lane = (int)(threadIdx.x & 31u), wp = (int)(threadIdx.x >> 5);
  const int64_t C4 = C / 4, n0 = (int64_t)blockIdx.x * R;
  const int64_t n1 = n0 + R < N ? n0 + R : N;
  const float4 *w4 = (const float4 *)w;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f); /* float4 threadIdx.x of the partial */
  for (int64_t r0 = n0; r0 < n1; r0 += 8) {
    const int64_t n = r0 + wp;
    const bool live = n < n1;
    const int64_t off = (live ? n : 0) * C;
    const float4 *g4 = (const float4 *)(dout + off), *x4 = (const float4 *)(x + off);
    double ps[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (live)
      for (int64_t q = lane; q < C4; q += 64)
        for (int h = 0; h < 2 && q + 32 * h < C4; h++) {
          const int64_t k = q + 32 * h;
          const float4 g = g4[k], xv = x4[k];
          prm_cu_rms_dot(ps + 4 * h, g, w4[k], xv);
          sp[wp][k] = make_float4(__fmul_rn(g.x, xv.x), __fmul_rn(g.y, xv.y),
                                  __fmul_rn(g.z, xv.z), __fmul_rn(g.w, xv.w));
        }
    const double dot = prm_cu_rms_tree(ps);
    if (live) {
      const double r = rstd[n];
      const float coef = (float)(dot * r * r * r / (double)C);
      const float rr = rstd[n];
      if (lane == 0) sr[wp] = rr;
      float4 *d4 = (float4 *)(dx + off);
      for (int64_t q = lane; q < C4; q += 32) {
        const float4 g = g4[q], xv = x4[q], wv = w4[q];
        float4 d = d4[q];
        d.x = prm_cu_rms_dx1(d.x, rr, wv.x, g.x, xv.x, coef);
        d.y = prm_cu_rms_dx1(d.y, rr, wv.y, g.y, xv.y, coef);
        d.z = prm_cu_rms_dx1(d.z, rr, wv.z, g.z, xv.z, coef);
        d.w = prm_cu_rms_dx1(d.w, rr, wv.w, g.w, xv.w, coef);
        d4[q] = d;
      }
    }
    __syncthreads();
    const int64_t q = threadIdx.x;
    if (q < C4)
      for (int64_t i = 0; i < 8 && r0 + i < n1; i++) {
        const float4 p = sp[i][q];
        const float rr = sr[i];
        acc.x = prm_cu_rms_dw1(acc.x, p.x, rr);
        acc.y = prm_cu_rms_dw1(acc.y, p.y, rr);
        acc.z = prm_cu_rms_dw1(acc.z, p.z, rr);
        acc.w = prm_cu_rms_dw1(acc.w, p.w, rr);
      }
    __syncthreads(); /* sp and sr are refilled next */
  }
  if ((int64_t)threadIdx.x < C4) ((float4 *)(part + (int64_t)blockIdx.x * C))[threadIdx.x] = acc;
}

/* The warp-per-row kernels take this row width and these pointers. */
static int prm_cu_rms_vec(const prm_cu_ctx *c, int64_t C, const void *p0, const void *p1,
                          const void *p2, const void *p3, const void *p4) {
  const void *p[] = {p0, p1, p2, p3, p4};
  if (c->ew_scalar || C % 4 != 0 || C > PRM_CU_RMS_MAXC) return 0;
  for (int i = 0; i < 5; i++)
    if ((uintptr_t)p[i] % 16 != 0) return 0; /* NULL passes */
  return 1;
}

static unsigned prm_cu_rows8(int64_t N) { return (unsigned)((N + 7) / 8); }

void prm_cu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *x, const float *w,
                            int64_t N, int64_t C, float eps) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "rmsnorm_forward");
  if (!prm_cu_rows_ok(c, "rmsnorm_forward", N, C) || N == 0 || C == 0) return;
  if (prm_cu_rms_vec(c, C, out, x, w, NULL, NULL)) {
    prm_cu_k_rmsnorm_fwd4<<<prm_cu_rows8(N), PRM_CU_THREADS, 0, c->stream>>>(NULL, out, NULL, rstd,
                                                                           x, NULL, w, N, C, eps);
    prm_cu_check(c, "rmsnorm_forward");
    return;
  }
  prm_cu_k_rmsnorm_fwd<<<(unsigned)N, PRM_CU_THREADS, 0, c->stream>>>(NULL, out, NULL, rstd, x,
                                                                      NULL, w, C, eps);
  prm_cu_check(c, "rmsnorm_forward");
}

void prm_cu_add_rmsnorm_forward(void *ctx, float *sum, float *out, float *rstd, const float *a,
                                const float *b, const float *w, int64_t N, int64_t C, float eps) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "add_rmsnorm_forward");
  if (!prm_cu_rows_ok(c, "add_rmsnorm_forward", N, C) || N == 0 || C == 0) return;
  if (prm_cu_rms_vec(c, C, sum, out, a, b, w)) {
    prm_cu_k_rmsnorm_fwd4<<<prm_cu_rows8(N), PRM_CU_THREADS, 0, c->stream>>>(sum, out, NULL, rstd,
                                                                           a, b, w, N, C, eps);
    prm_cu_check(c, "add_rmsnorm_forward");
    return;
  }
  prm_cu_k_rmsnorm_fwd<<<(unsigned)N, PRM_CU_THREADS, 0, c->stream>>>(sum, out, NULL, rstd, a, b,
                                                                      w, C, eps);
  prm_cu_check(c, "add_rmsnorm_forward");
}

void prm_cu_rmsnorm_forward16(void *ctx, float *sum, float *out, prm_dev_bf16_t *out16,
                              float *rstd, const float *a, const float *b, const float *w,
                              int64_t N, int64_t C, float eps) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "rmsnorm_forward16");
  if (!prm_cu_rows_ok(c, "rmsnorm_forward16", N, C) || N == 0 || C == 0) return;
  if (prm_cu_rms_vec(c, C, b ? sum : NULL, out, a, b, w) && (uintptr_t)out16 % 8 == 0) {
    prm_cu_k_rmsnorm_fwd4<<<prm_cu_rows8(N), PRM_CU_THREADS, 0, c->stream>>>(
        b ? sum : NULL, out, out16, rstd, a, b, w, N, C, eps);
    prm_cu_check(c, "rmsnorm_forward16");
    return;
  }
  prm_cu_k_rmsnorm_fwd<<<(unsigned)N, PRM_CU_THREADS, 0, c->stream>>>(b ? sum : NULL, out, out16,
                                                                      rstd, a, b, w, C, eps);
  prm_cu_check(c, "rmsnorm_forward16");
}

void prm_cu_rmsnorm_backward(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                             const float *w, const float *rstd, int64_t N, int64_t C) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "rmsnorm_backward");
  if (!prm_cu_rows_ok(c, "rmsnorm_backward", N, C) || N == 0 || C == 0) return;
  /* dw: chunks of R rows (at most 65535 chunks, grid.y's limit); the
   * partition depends only on N. */
  int64_t R = PRM_CU_DW_ROWS;
  if ((N + R - 1) / R > 65535) R = (N + 65534) / 65535;
  int64_t nchunk = (N + R - 1) / R;
  unsigned cb = (unsigned)((C + PRM_CU_THREADS - 1) / PRM_CU_THREADS);
  if (prm_cu_rms_vec(c, C, dx, dout, x, w, NULL)) {
    float *part = (float *)prm_cu_scratch(c, "rmsnorm_backward",
                                          (size_t)nchunk * (size_t)C * sizeof(float));
    if (!part) return;
    prm_cu_k_rmsnorm_bwd4<<<(unsigned)nchunk, PRM_CU_THREADS, 0, c->stream>>>(dx, part, dout, x, w,
                                                                             rstd, N, C, R);
    if (prm_cu_check(c, "rmsnorm_backward")) return;
    prm_cu_k_rmsnorm_bwd_dw2<<<cb, PRM_CU_THREADS, 0, c->stream>>>(dw, part, nchunk, C);
    prm_cu_check(c, "rmsnorm_backward");
    return;
  }
  prm_cu_k_rmsnorm_bwd_dx<<<(unsigned)N, PRM_CU_THREADS, 0, c->stream>>>(dx, dout, x, w, rstd,
                                                                         C);
  if (prm_cu_check(c, "rmsnorm_backward")) return;
  float *part = (float *)prm_cu_scratch(c, "rmsnorm_backward",
                                        (size_t)nchunk * (size_t)C * sizeof(float));
  if (!part) return;
  prm_cu_k_rmsnorm_bwd_dw1<<<dim3(cb, (unsigned)nchunk), PRM_CU_THREADS, 0, c->stream>>>(
      part, dout, x, rstd, N, C, R);
  if (prm_cu_check(c, "rmsnorm_backward")) return;
  prm_cu_k_rmsnorm_bwd_dw2<<<cb, PRM_CU_THREADS, 0, c->stream>>>(dw, part, nchunk, C);
  prm_cu_check(c, "rmsnorm_backward");
}

/* ======================================================================== */
/* RoPE                                                                     */
/* ======================================================================== */

/* One pair rotated by sign x the angle (co, si its cosine and sine). */
__device__ static inline void prm_cu_rot(float &x1, float &x2, float co, float si, float sign) {
  const float s = __fmul_rn(sign, si), a = x1, b = x2;
  x1 = __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, s));
  x2 = __fadd_rn(__fmul_rn(b, co), __fmul_rn(a, s));
}

/* Grid-stride over B*T*nh*(D/2) pairs: thread owns the pair (x[i],
 * x[i + D/2]) of one (b, t, head) row, i < D/2, and rotates it by sign x
 * the angle of the row's position (pos[b T + t], or pos0 + t). */
__global__ static void prm_cu_k_rope(float *x, const float *cos_t, const float *sin_t, int64_t T,
                                     int64_t nh, int64_t D, int64_t pos0, const int32_t *pos,
                                     float sign, int64_t npairs) {
  int64_t half = D / 2;
  PRM_CU_FOR(idx, npairs) {
    int64_t i = idx % half, rest = idx / half;
    int64_t bt = rest / nh; /* b T + t; rest % nh is the head */
    int64_t t = bt % T;
    int64_t p = pos ? (int64_t)pos[bt] : pos0 + t;
    float *r = x + rest * D;
    prm_cu_rot(r[i], r[i + half], cos_t[p * half + i], sin_t[p * half + i], sign);
  }
}

/* The same rotation four pairs per thread (the default where D/2 % 4 == 0
 * and x and the tables are 16-byte aligned): thread owns float4 q of the
 * row's first half and float4 q of its second half (pairs 4q .. 4q + 3),
 * grid-stride over B*T*nh*(D/8). The same bits: each pair as above. */
__global__ static void prm_cu_k_rope4(float *x, const float *cos_t, const float *sin_t, int64_t T,
                                      int64_t nh, int64_t D, int64_t pos0, const int32_t *pos,
                                      float sign, int64_t nquads) {
  const int64_t half = D / 2, hq = half / 4;
  PRM_CU_FOR(idx, nquads) {
    int64_t q = idx % hq, rest = idx / hq;
    int64_t bt = rest / nh;
    int64_t p = pos ? (int64_t)pos[bt] : pos0 + bt % T;
    float4 *r1 = (float4 *)(x + rest * D), *r2 = (float4 *)(x + rest * D + half);
    const float4 co = ((const float4 *)(cos_t + p * half))[q];
    const float4 si = ((const float4 *)(sin_t + p * half))[q];
    float4 a = r1[q], b = r2[q];
    prm_cu_rot(a.x, b.x, co.x, si.x, sign);
    prm_cu_rot(a.y, b.y, co.y, si.y, sign);
    prm_cu_rot(a.z, b.z, co.z, si.z, sign);
    prm_cu_rot(a.w, b.w, co.w, si.w, sign);
    r1[q] = a;
    r2[q] = b;
  }
}

void prm_cu_rope(void *ctx, float *x, const float *cos_t, const float *sin_t, int64_t B,
                 int64_t T, int64_t nh, int64_t D, int64_t pos0, const int32_t *pos, float sign) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "rope");
  if (D % 2 != 0 || B < 0 || T < 0 || nh < 0 || D < 0) {
    prm_cu_fail(c, "rope: D=%lld must be even (B=%lld T=%lld nh=%lld)", (long long)D,
                (long long)B, (long long)T, (long long)nh);
    return;
  }
  int64_t npairs = B * T * nh * (D / 2);
  if (npairs == 0) return;
  if (!c->ew_scalar && (D / 2) % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)cos_t % 16 == 0 &&
      (uintptr_t)sin_t % 16 == 0) {
    prm_cu_k_rope4<<<prm_cu_blocks(npairs / 4, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
        x, cos_t, sin_t, T, nh, D, pos0, pos, sign, npairs / 4);
    prm_cu_check(c, "rope");
    return;
  }
  prm_cu_k_rope<<<prm_cu_blocks(npairs, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
      x, cos_t, sin_t, T, nh, D, pos0, pos, sign, npairs);
  prm_cu_check(c, "rope");
}

/* ======================================================================== */
/* SwiGLU, add, scale                                                       */
/* ======================================================================== */

/* The element formulas below are written with explicitly rounded
 * operations (__fmul_rn ...: never contracted into FMAs), so the scalar and
 * the float4 kernels, which share them, give the same bits whatever the
 * code generator would contract in each. */
__device__ static inline float prm_cu_sigmoid(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

/* One element of each (the scalar and the float4 kernels share them, so
 * they round and contract alike). */
__device__ static inline float prm_cu_swiglu1(float g, float u) {
  return __fmul_rn(__fmul_rn(g, prm_cu_sigmoid(g)), u);
}

__device__ static inline void prm_cu_swiglu_b1(float &dg, float &du, float d, float g, float u) {
  const float s = prm_cu_sigmoid(g);
  dg = __fmul_rn(__fmul_rn(__fmul_rn(d, u), s), __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, s))));
  du = __fmul_rn(__fmul_rn(d, g), s);
}

/* Grid-stride, one element per thread per step (the scalar kernels, all
 * five below; PRIMUS_CUDA_ELTWISE=scalar, and where a pointer is not
 * 16-byte aligned). */
__global__ static void prm_cu_k_swiglu_fwd(float *h, const float *gate, const float *up,
                                           int64_t n) {
  PRM_CU_FOR(i, n) h[i] = prm_cu_swiglu1(gate[i], up[i]);
}

/* The same h, and its bf16 copy. */
__global__ static void prm_cu_k_swiglu_fwd16(float *h, uint16_t *h16, const float *gate,
                                             const float *up, int64_t n) {
  PRM_CU_FOR(i, n) {
    float y = prm_cu_swiglu1(gate[i], up[i]);
    h[i] = y;
    h16[i] = prm_cu_bf16_round(y);
  }
}

__global__ static void prm_cu_k_swiglu_bwd(float *dgate, float *dup, const float *dh,
                                           const float *gate, const float *up, int64_t n) {
  PRM_CU_FOR(i, n) prm_cu_swiglu_b1(dgate[i], dup[i], dh[i], gate[i], up[i]);
}

__global__ static void prm_cu_k_add(float *y, const float *a, const float *b, int64_t n) {
  PRM_CU_FOR(i, n) y[i] = a[i] + b[i];
}

__global__ static void prm_cu_k_scale(float *x, int64_t n, float s) {
  PRM_CU_FOR(i, n) x[i] *= s;
}

/* The float4 kernels (the default where every pointer is 16-byte aligned,
 * h16 8-byte): grid-stride over the n / 4 float4s, one per thread per step;
 * the last n % 4 elements by the first threads of the grid. Each element
 * as the scalar kernels compute it: the same bits. */

/* h (and with h16 its bf16 copy). */
__global__ static void prm_cu_k_swiglu_fwd4(float *h, uint16_t *h16, const float *gate,
                                            const float *up, int64_t n) {
  const int64_t n4 = n / 4;
  PRM_CU_FOR(i, n4) {
    const float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i];
    const float4 y = make_float4(prm_cu_swiglu1(g.x, u.x), prm_cu_swiglu1(g.y, u.y),
                                 prm_cu_swiglu1(g.z, u.z), prm_cu_swiglu1(g.w, u.w));
    ((float4 *)h)[i] = y;
    if (h16) ((uint2 *)h16)[i] = prm_cu_bf16x4(y);
  }
  PRM_CU_FOR(j, n - 4 * n4) {
    const int64_t i = 4 * n4 + j;
    const float y = prm_cu_swiglu1(gate[i], up[i]);
    h[i] = y;
    if (h16) h16[i] = prm_cu_bf16_round(y);
  }
}

__global__ static void prm_cu_k_swiglu_bwd4(float *dgate, float *dup, const float *dh,
                                            const float *gate, const float *up, int64_t n) {
  const int64_t n4 = n / 4;
  PRM_CU_FOR(i, n4) {
    const float4 d = ((const float4 *)dh)[i], g = ((const float4 *)gate)[i];
    const float4 u = ((const float4 *)up)[i];
    float4 dg, du;
    prm_cu_swiglu_b1(dg.x, du.x, d.x, g.x, u.x);
    prm_cu_swiglu_b1(dg.y, du.y, d.y, g.y, u.y);
    prm_cu_swiglu_b1(dg.z, du.z, d.z, g.z, u.z);
    prm_cu_swiglu_b1(dg.w, du.w, d.w, g.w, u.w);
    ((float4 *)dgate)[i] = dg;
    ((float4 *)dup)[i] = du;
  }
  PRM_CU_FOR(j, n - 4 * n4) {
    const int64_t i = 4 * n4 + j;
    prm_cu_swiglu_b1(dgate[i], dup[i], dh[i], gate[i], up[i]);
  }
}

__global__ static void prm_cu_k_add4(float *y, const float *a, const float *b, int64_t n) {
  const int64_t n4 = n / 4;
  PRM_CU_FOR(i, n4) {
    const float4 u = ((const float4 *)a)[i], v = ((const float4 *)b)[i];
    ((float4 *)y)[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
  }
  PRM_CU_FOR(j, n - 4 * n4) y[4 * n4 + j] = a[4 * n4 + j] + b[4 * n4 + j];
}

__global__ static void prm_cu_k_scale4(float *x, int64_t n, float s) {
  const int64_t n4 = n / 4;
  PRM_CU_FOR(i, n4) {
    float4 v = ((float4 *)x)[i];
    v.x *= s;
    v.y *= s;
    v.z *= s;
    v.w *= s;
    ((float4 *)x)[i] = v;
  }
  PRM_CU_FOR(j, n - 4 * n4) x[4 * n4 + j] *= s;
}

/* The float4 kernels take these pointers (NULL passes). */
static int prm_cu_vec4(const prm_cu_ctx *c, const void *p0, const void *p1, const void *p2,
                       const void *p3, const void *p4) {
  const void *p[] = {p0, p1, p2, p3, p4};
  if (c->ew_scalar) return 0;
  for (int i = 0; i < 5; i++)
    if ((uintptr_t)p[i] % 16 != 0) return 0;
  return 1;
}

/* Blocks for n elements four at a time. */
static unsigned prm_cu_blocks4(int64_t n) { return prm_cu_blocks((n + 3) / 4, PRM_CU_THREADS); }

void prm_cu_swiglu_forward(void *ctx, float *h, const float *gate, const float *up, int64_t n) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "swiglu_forward");
  if (n <= 0) return;
  if (prm_cu_vec4(c, h, gate, up, NULL, NULL)) {
    prm_cu_k_swiglu_fwd4<<<prm_cu_blocks4(n), PRM_CU_THREADS, 0, c->stream>>>(h, NULL, gate, up,
                                                                             n);
    prm_cu_check(c, "swiglu_forward");
    return;
  }
  prm_cu_k_swiglu_fwd<<<prm_cu_blocks(n, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
      h, gate, up, n);
  prm_cu_check(c, "swiglu_forward");
}

void prm_cu_swiglu_forward16(void *ctx, float *h, prm_dev_bf16_t *h16, const float *gate,
                             const float *up, int64_t n) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "swiglu_forward16");
  if (n <= 0) return;
  if (prm_cu_vec4(c, h, gate, up, NULL, NULL) && (uintptr_t)h16 % 8 == 0) {
    prm_cu_k_swiglu_fwd4<<<prm_cu_blocks4(n), PRM_CU_THREADS, 0, c->stream>>>(h, h16, gate, up,
                                                                             n);
    prm_cu_check(c, "swiglu_forward16");
    return;
  }
  prm_cu_k_swiglu_fwd16<<<prm_cu_blocks(n, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
      h, h16, gate, up, n);
  prm_cu_check(c, "swiglu_forward16");
}

void prm_cu_swiglu_backward(void *ctx, float *dgate, float *dup, const float *dh,
                            const float *gate, const float *up, int64_t n) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "swiglu_backward");
  if (n <= 0) return;
  if (prm_cu_vec4(c, dgate, dup, dh, gate, up)) {
    prm_cu_k_swiglu_bwd4<<<prm_cu_blocks4(n), PRM_CU_THREADS, 0, c->stream>>>(dgate, dup, dh,
                                                                             gate, up, n);
    prm_cu_check(c, "swiglu_backward");
    return;
  }
  prm_cu_k_swiglu_bwd<<<prm_cu_blocks(n, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
      dgate, dup, dh, gate, up, n);
  prm_cu_check(c, "swiglu_backward");
}

void prm_cu_add(void *ctx, float *y, const float *a, const float *b, int64_t n) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "add");
  if (n <= 0) return;
  if (prm_cu_vec4(c, y, a, b, NULL, NULL)) {
    prm_cu_k_add4<<<prm_cu_blocks4(n), PRM_CU_THREADS, 0, c->stream>>>(y, a, b, n);
    prm_cu_check(c, "add");
    return;
  }
  prm_cu_k_add<<<prm_cu_blocks(n, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(y, a, b, n);
  prm_cu_check(c, "add");
}

void prm_cu_scale(void *ctx, float *x, int64_t n, float s) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "scale");
  if (n <= 0) return;
  if (prm_cu_vec4(c, x, NULL, NULL, NULL, NULL)) {
    prm_cu_k_scale4<<<prm_cu_blocks4(n), PRM_CU_THREADS, 0, c->stream>>>(x, n, s);
    prm_cu_check(c, "scale");
    return;
  }
  prm_cu_k_scale<<<prm_cu_blocks(n, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(x, n, s);
  prm_cu_check(c, "scale");
}

/* ======================================================================== */
/* Cross-entropy                                                            */
/* ======================================================================== */

/* exp(x - m) for the online sums: 0 for x = -inf whatever m is (m is
 * -inf while a thread has seen only -inf), so a row of -inf before its
 * first finite logit adds nothing; NaN stays NaN. */
__device__ static inline float prm_cu_xent_e(float x, float m) {
  return x == -INFINITY ? 0.0f : expf(x - m);
}

/* One thread's running (max m, sum s of exp(. - m) in double) takes a new
 * group whose maximum is g (NaN loses, as in the reference's max): s is
 * rescaled to the new maximum first. */
__device__ static inline void prm_cu_xent_fold(float &m, double &s, float g) {
  if (g > m) {
    s *= exp((double)m - (double)g); /* m = -inf: exp(-inf) = 0 */
    m = g;
  }
}

/* s scaled from its own maximum m to the larger M: 1 when they are equal
 * (also both -inf or +inf). */
__device__ static inline double prm_cu_xent_rescale(float m, float M) {
  return m == M ? 1.0 : exp((double)m - (double)M);
}

/* Grid (N), block 512: block n owns row n. Its target and the target's
 * logit are read first (dlogits may alias logits). One read pass keeps,
 * per thread, the running maximum of its columns and the sum of exp(x -
 * that maximum) in double, rescaled when the maximum grows (online
 * softmax); a fixed tree over the threads combines the (max, sum) pairs,
 * each sum rescaled to the larger maximum. loss = log(sum) + max -
 * x[target] in double. With dlogits, a second pass has each thread
 * overwrite its own columns: scale e / sum (e = exp(x - max) rounded
 * first), minus scale at the target; with d16 instead (xent16) those
 * values rounded to bf16 as f32_to_bf16 does, the logits left as they are.
 * vec: V is a multiple of 4 and the rows 16-byte aligned (d16 8-byte), so
 * each thread takes float4s (the four exponentials summed in float, then
 * added in double). A negative target
 * gives loss 0 and a zero row; a target >= V raises a flag (reported by
 * sync) and is treated as masked. The columns each thread takes and the
 * tree depend only on V and vec: the same bits every run. */
__global__ static void prm_cu_k_xent(float *losses, float *dlogits, prm_dev_bf16_t *d16,
                                     const float *logits, const int32_t *targets, int64_t V,
                                     float scale, int vec, unsigned *flags) {
  __shared__ double shs[PRM_CU_XENT_THREADS];
  __shared__ float shm[PRM_CU_XENT_THREADS];
  int64_t n = blockIdx.x;
  unsigned tid = threadIdx.x;
  const float *x = logits + n * V;
  float *d = dlogits ? dlogits + n * V : NULL;
  prm_dev_bf16_t *h = d16 ? d16 + n * V : NULL;
  int32_t t = targets[n];
  if (t >= V) {
    if (tid == 0) *flags |= PRM_CU_FLAG_XENT_TARGET;
    t = -1;
  }
  if (t < 0) { /* the whole block takes this branch */
    if (losses && tid == 0) losses[n] = 0.0f;
    if (d)
      for (int64_t j = tid; j < V; j += blockDim.x) d[j] = 0.0f;
    if (h)
      for (int64_t j = tid; j < V; j += blockDim.x) h[j] = 0;
    return;
  }
  float xt = x[t];
  float m = -INFINITY;
  double s = 0;
  if (vec) {
    const float4 *x4 = (const float4 *)x;
    for (int64_t j = tid; j < V / 4; j += blockDim.x) {
      float4 v = x4[j];
      float g = v.x;
      g = v.y > g ? v.y : g;
      g = v.z > g ? v.z : g;
      g = v.w > g ? v.w : g;
      prm_cu_xent_fold(m, s, g);
      float e = (prm_cu_xent_e(v.x, m) + prm_cu_xent_e(v.y, m)) +
                (prm_cu_xent_e(v.z, m) + prm_cu_xent_e(v.w, m));
      s += (double)e;
    }
  } else {
    for (int64_t j = tid; j < V; j += blockDim.x) {
      float v = x[j];
      prm_cu_xent_fold(m, s, v);
      s += (double)prm_cu_xent_e(v, m);
    }
  }
  /* The (max, sum) pairs by a fixed tree; its barriers: every read above
   * is done before any thread writes dlogits. */
  shm[tid] = m;
  shs[tid] = s;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (tid < k) {
      float m1 = shm[tid], m2 = shm[tid + k];
      float M = m2 > m1 ? m2 : m1;
      shs[tid] = shs[tid] * prm_cu_xent_rescale(m1, M) + shs[tid + k] * prm_cu_xent_rescale(m2, M);
      shm[tid] = M;
    }
    __syncthreads();
  }
  float M = shm[0];
  double se = shs[0];
  if (losses && tid == 0) losses[n] = (float)(log(se) + (double)M - (double)xt);
  if (!d && !h) return;
  float inv = (float)((double)scale / se);
  if (vec) {
    const float4 *x4 = (const float4 *)x;
    float4 *d4 = (float4 *)d;
    for (int64_t j = tid; j < V / 4; j += blockDim.x) {
      float4 v = x4[j], o;
      o.x = __fmul_rn(expf(v.x - M), inv);
      o.y = __fmul_rn(expf(v.y - M), inv);
      o.z = __fmul_rn(expf(v.z - M), inv);
      o.w = __fmul_rn(expf(v.w - M), inv);
      int64_t k = t - 4 * j; /* the target's place in this float4, if any */
      if (k == 0) o.x = __fsub_rn(o.x, scale);
      else if (k == 1) o.y = __fsub_rn(o.y, scale);
      else if (k == 2) o.z = __fsub_rn(o.z, scale);
      else if (k == 3) o.w = __fsub_rn(o.w, scale);
      if (h)
        ((uint2 *)h)[j] =
            make_uint2((uint32_t)prm_cu_bf16_round(o.x) | ((uint32_t)prm_cu_bf16_round(o.y) << 16),
                       (uint32_t)prm_cu_bf16_round(o.z) | ((uint32_t)prm_cu_bf16_round(o.w) << 16));
      else
        d4[j] = o;
    }
    return;
  }
  for (int64_t j = tid; j < V; j += blockDim.x) {
    float e = __fmul_rn(expf(x[j] - M), inv);
    e = j == t ? __fsub_rn(e, scale) : e;
    if (h) h[j] = prm_cu_bf16_round(e);
    else d[j] = e;
  }
}

void prm_cu_xent(void *ctx, float *losses, float *dlogits, const float *logits,
                 const int32_t *targets, int64_t N, int64_t V, float scale) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "xent");
  if (!prm_cu_rows_ok(c, "xent", N, V) || N == 0) return;
  if (V <= 0) {
    prm_cu_fail(c, "xent: V=%lld", (long long)V);
    return;
  }
  int vec = V % 4 == 0 && (uintptr_t)logits % 16 == 0 && (uintptr_t)dlogits % 16 == 0;
  prm_cu_k_xent<<<(unsigned)N, PRM_CU_XENT_THREADS, 0, c->stream>>>(losses, dlogits, NULL, logits,
                                                                    targets, V, scale, vec,
                                                                    c->d_flags);
  prm_cu_check(c, "xent");
}

void prm_cu_xent16(void *ctx, float *losses, prm_dev_bf16_t *d16, const float *logits,
                   const int32_t *targets, int64_t N, int64_t V, float scale) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "xent16");
  if (!prm_cu_rows_ok(c, "xent16", N, V) || N == 0) return;
  if (V <= 0) {
    prm_cu_fail(c, "xent16: V=%lld", (long long)V);
    return;
  }
  int vec = V % 4 == 0 && (uintptr_t)logits % 16 == 0 && (uintptr_t)d16 % 8 == 0;
  prm_cu_k_xent<<<(unsigned)N, PRM_CU_XENT_THREADS, 0, c->stream>>>(losses, NULL, d16, logits,
                                                                    targets, V, scale, vec,
                                                                    c->d_flags);
  prm_cu_check(c, "xent16");
}

/* ======================================================================== */
/* AdamW                                                                    */
/* ======================================================================== */

/* The per-call scalars, computed on the host in double and rounded to
 * float exactly as the CPU reference does. */
typedef struct {
  float beta1, beta2, omb1, omb2, bc2_sqrt, eps, decay, step_size, gscale;
} prm_cu_adamw_k;

/* Grid-stride, one parameter per thread per step. Explicitly rounded
 * operations (__fmul_rn ...): never contracted into FMAs, so the bits are
 * those of the CPU's (which keeps products and sums separate). This needs
 * the build's defaults: no --use_fast_math, -ftz=false (denormals kept, as
 * on the CPU), IEEE division and square root. */
/* One element's update; returns the new p[i] (stored too). */
__device__ static inline float prm_cu_adamw_one(float *p, const float *g, float *m, float *v,
                                                int64_t i, const prm_cu_adamw_k &k, float decay) {
  float gi = __fmul_rn(g[i], k.gscale);
  float mi = __fadd_rn(__fmul_rn(m[i], k.beta1), __fmul_rn(k.omb1, gi));
  float vi = __fadd_rn(__fmul_rn(v[i], k.beta2), __fmul_rn(__fmul_rn(k.omb2, gi), gi));
  m[i] = mi;
  v[i] = vi;
  float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
  float pi = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
  p[i] = pi;
  return pi;
}

__global__ static void prm_cu_k_adamw(float *p, const float *g, float *m, float *v, int64_t n,
                                      prm_cu_adamw_k k) {
  PRM_CU_FOR(i, n) prm_cu_adamw_one(p, g, m, v, i, k, k.decay);
}

/* The multi-tensor AdamW's per-call scalars: prm_cu_adamw_k (its decay
 * unused) and the decay factor of each distinct weight decay. */
typedef struct {
  prm_cu_adamw_k k;
  float decay[PRM_CU_ADAMW_WDS];
} prm_cu_adamw_multi_k;

/* Grid (chunks), block 256: block x owns chunk x of the table (at most
 * PRM_CU_ADAMW_CHUNK elements of one tensor); thread t its elements t,
 * t + 256, ... Each updates as prm_cu_k_adamw with its tensor's decay and
 * writes the bf16 copy where the chunk's tensor has one. */
__global__ static void prm_cu_k_adamw_multi(float *p, const float *g, float *m, float *v,
                                            uint16_t *p16, const prm_cu_adamw_chunk *chunks,
                                            prm_cu_adamw_multi_k k) {
  prm_cu_adamw_chunk ch = chunks[blockIdx.x];
  float decay = k.decay[ch.wd];
  int64_t end = ch.offset + ch.count;
  uint16_t *q = ch.bf16 ? p16 : NULL;
  for (int64_t i = ch.offset + threadIdx.x; i < end; i += blockDim.x) {
    float pi = prm_cu_adamw_one(p, g, m, v, i, k.k, decay);
    if (q) q[i] = prm_cu_bf16_round(pi);
  }
}

/* The scalars of one call, as the CPU reference computes them. */
static prm_cu_adamw_k prm_cu_adamw_scalars(float lr, float beta1, float beta2, float eps, float wd,
                                           int64_t step, float gscale) {
  double bc1 = 1.0 - pow((double)beta1, (double)step);
  double bc2 = 1.0 - pow((double)beta2, (double)step);
  prm_cu_adamw_k k;
  k.beta1 = beta1;
  k.beta2 = beta2;
  k.decay = (float)(1.0 - (double)lr * (double)wd);
  k.step_size = (float)((double)lr / bc1);
  k.bc2_sqrt = (float)sqrt(bc2);
  k.omb1 = (float)(1.0 - (double)beta1);
  k.omb2 = (float)(1.0 - (double)beta2);
  k.eps = eps;
  k.gscale = gscale;
  return k;
}

void prm_cu_adamw(void *ctx, float *p, const float *g, float *m, float *v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int64_t step, float gscale) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "adamw");
  if (step < 1) {
    prm_cu_fail(c, "adamw: step %lld (must be >= 1)", (long long)step);
    return;
  }
  if (n <= 0) return;
  prm_cu_adamw_k k = prm_cu_adamw_scalars(lr, beta1, beta2, eps, wd, step, gscale);
  prm_cu_k_adamw<<<prm_cu_blocks(n, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(p, g, m, v,
                                                                                    n, k);
  prm_cu_check(c, "adamw");
}

/* The chunk table of segs (on the device, in c->adamw_chunks), made again
 * only when the segments differ from the last call's (the trainer passes
 * the same ones every step); the distinct weight decays into wds. Returns
 * the chunk count, 0 with nothing to do, or -1 (failure recorded, or more
 * than PRM_CU_ADAMW_WDS distinct weight decays: the caller falls back). */
static int64_t prm_cu_adamw_table(prm_cu_ctx *c, const prm_dev_adamw_seg_t *segs, int nseg,
                                  int p16, float *wds, int *nwd) {
  size_t sbytes = (size_t)nseg * sizeof *segs;
  *nwd = 0;
  for (int i = 0; i < nseg; i++) {
    int j = 0;
    while (j < *nwd && memcmp(&wds[j], &segs[i].wd, sizeof(float))) j++;
    if (j == *nwd) {
      if (*nwd == PRM_CU_ADAMW_WDS) return -1;
      wds[(*nwd)++] = segs[i].wd;
    }
  }
  if (c->adamw_segs && c->adamw_nseg == nseg && c->adamw_p16 == p16 &&
      !memcmp(c->adamw_segs, segs, sbytes))
    return c->adamw_nchunks;
  int64_t n = 0;
  for (int i = 0; i < nseg; i++)
    if (segs[i].numel > 0) n += (segs[i].numel + PRM_CU_ADAMW_CHUNK - 1) / PRM_CU_ADAMW_CHUNK;
  if (n > 0x7fffffff) {
    prm_cu_fail(c, "adamw_multi: %lld chunks exceed the grid", (long long)n);
    return -1;
  }
  prm_cu_adamw_chunk *h =
      (prm_cu_adamw_chunk *)calloc((size_t)(n ? n : 1), sizeof(prm_cu_adamw_chunk));
  void *keep = malloc(sbytes ? sbytes : 1);
  if (!h || !keep) {
    free(h), free(keep);
    prm_cu_fail(c, "adamw_multi: out of host memory for %lld chunks", (long long)n);
    return -1;
  }
  int64_t x = 0;
  for (int i = 0; i < nseg; i++) {
    int w = 0;
    while (memcmp(&wds[w], &segs[i].wd, sizeof(float))) w++;
    for (int64_t o = 0; o < segs[i].numel; o += PRM_CU_ADAMW_CHUNK, x++) {
      int64_t left = segs[i].numel - o;
      h[x].offset = segs[i].offset + o;
      h[x].count = (int32_t)(left < PRM_CU_ADAMW_CHUNK ? left : PRM_CU_ADAMW_CHUNK);
      h[x].wd = (int16_t)w;
      h[x].bf16 = (int16_t)(p16 && segs[i].bf16);
    }
  }
  /* The old table may still be read by a queued update: wait first. */
  gpuError_t e = gpuStreamSynchronize(c->stream);
  size_t bytes = (size_t)(n ? n : 1) * sizeof(prm_cu_adamw_chunk);
  if (e == gpuSuccess && bytes > c->adamw_bytes) {
    if (c->adamw_chunks) {
      gpuFree(c->adamw_chunks);
      c->in_use[PRM_DEV_MEM_OPTIM] -= c->adamw_bytes;
    }
    c->adamw_chunks = NULL;
    c->adamw_bytes = 0;
    e = gpuMalloc((void **)&c->adamw_chunks, bytes);
    if (e == gpuSuccess) {
      c->adamw_bytes = bytes;
      c->in_use[PRM_DEV_MEM_OPTIM] += bytes;
      if (c->in_use[PRM_DEV_MEM_OPTIM] > c->peak[PRM_DEV_MEM_OPTIM])
        c->peak[PRM_DEV_MEM_OPTIM] = c->in_use[PRM_DEV_MEM_OPTIM];
    }
  }
  /* A pageable source: the synchronize below makes sure the copy is done
   * before h is freed. */
  if (e == gpuSuccess)
    e = gpuMemcpyAsync(c->adamw_chunks, h, bytes, gpuMemcpyHostToDevice, c->stream);
  if (e == gpuSuccess) e = gpuStreamSynchronize(c->stream);
  free(h);
  if (e != gpuSuccess) {
    free(keep);
    gpuGetLastError();
    prm_cu_fail(c, "adamw_multi: the chunk table (%zu bytes): %s (%s)", bytes, gpuGetErrorString(e),
                gpuGetErrorName(e));
    free(c->adamw_segs);
    c->adamw_segs = NULL;
    return -1;
  }
  memcpy(keep, segs, sbytes);
  free(c->adamw_segs);
  c->adamw_segs = (prm_dev_adamw_seg_t *)keep;
  c->adamw_nseg = nseg;
  c->adamw_p16 = p16;
  c->adamw_nchunks = n;
  return n;
}

void prm_cu_adamw_multi(void *ctx, float *p, const float *g, float *m, float *v,
                        prm_dev_bf16_t *p16, const prm_dev_adamw_seg_t *segs, int nseg, float lr,
                        float beta1, float beta2, float eps, int64_t step, float gscale) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "adamw_multi");
  if (step < 1) {
    prm_cu_fail(c, "adamw_multi: step %lld (must be >= 1)", (long long)step);
    return;
  }
  float wds[PRM_CU_ADAMW_WDS];
  int nwd = 0;
  int64_t n = nseg > 0 ? prm_cu_adamw_table(c, segs, nseg, p16 != NULL, wds, &nwd) : 0;
  if (n < 0 && c->failed) return;
  if (n < 0) { /* many distinct weight decays: one launch per tensor */
    for (int i = 0; i < nseg; i++) {
      if (segs[i].numel <= 0) continue;
      prm_cu_adamw(ctx, p + segs[i].offset, g + segs[i].offset, m + segs[i].offset,
                   v + segs[i].offset, segs[i].numel, lr, beta1, beta2, eps, segs[i].wd, step,
                   gscale);
      if (p16 && segs[i].bf16)
        prm_cu_f32_to_bf16(ctx, p16 + segs[i].offset, p + segs[i].offset, segs[i].numel);
    }
    return;
  }
  if (n == 0) return;
  prm_cu_adamw_multi_k k;
  k.k = prm_cu_adamw_scalars(lr, beta1, beta2, eps, 0.0f, step, gscale);
  for (int w = 0; w < nwd; w++) k.decay[w] = prm_cu_adamw_scalars(lr, beta1, beta2, eps, wds[w], step, gscale).decay;
  prm_cu_k_adamw_multi<<<(unsigned)n, PRM_CU_THREADS, 0, c->stream>>>(p, g, m, v, p16,
                                                                      c->adamw_chunks, k);
  prm_cu_check(c, "adamw_multi");
}

/* ======================================================================== */
/* Sums in double                                                           */
/* ======================================================================== */

/* Stage 1. Grid (PRM_CU_RED_PARTS), block 256: block b owns the slice
 * [b per, (b+1) per) of x (per = ceil(n / parts)); thread t sums elements
 * t, t+256, ... of the slice in order, in double (squared when sq), then a
 * fixed tree gives part[b]. The partition depends only on n. */
__device__ static void prm_cu_sum1_body(double *part, const float *x, int64_t n, int sq,
                                        double *sh) {
  int64_t per = (n + gridDim.x - 1) / gridDim.x;
  int64_t lo = (int64_t)blockIdx.x * per;
  if (lo > n) lo = n;
  int64_t hi = lo + per < n ? lo + per : n;
  double acc = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    double xi = x[i];
    acc += sq ? xi * xi : xi;
  }
  acc = prm_cu_block_sum<double>(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ static void prm_cu_k_sum1(double *part, const float *x, int64_t n, int sq) {
  __shared__ double sh[PRM_CU_THREADS];
  prm_cu_sum1_body(part, x, n, sq, sh);
}

/* Stage 2. Grid (1), block 256: thread t adds parts t*k .. t*k+k-1 in order
 * (k = parts / 256), a fixed tree adds the threads; *out = total. */
__device__ static void prm_cu_sum2_body(const double *part, double *out, double *sh) {
  const int k = PRM_CU_RED_PARTS / PRM_CU_THREADS;
  double acc = 0;
  for (int i = 0; i < k; i++) acc += part[threadIdx.x * k + i];
  acc = prm_cu_block_sum<double>(acc, sh);
  if (threadIdx.x == 0) *out = acc;
}

__global__ static void prm_cu_k_sum2(double *part) {
  __shared__ double sh[PRM_CU_THREADS];
  prm_cu_sum2_body(part, part + PRM_CU_RED_PARTS, sh);
}

/* sumsq_multi: stage 1 on grid (PRM_CU_RED_PARTS, nseg), block y on piece y
 * (tab[2y] its offset, tab[2y+1] its length) into its own parts; stage 2
 * on grid (nseg), block x on piece x into res[x]. Each piece's bits are
 * those of one sumsq over it (the same partition and trees). */
__global__ static void prm_cu_k_sum1_multi(double *parts, const float *x, const int64_t *tab) {
  __shared__ double sh[PRM_CU_THREADS];
  int64_t y = blockIdx.y;
  prm_cu_sum1_body(parts + y * PRM_CU_RED_PARTS, x + tab[2 * y], tab[2 * y + 1], 1, sh);
}

__global__ static void prm_cu_k_sum2_multi(const double *parts, double *res) {
  __shared__ double sh[PRM_CU_THREADS];
  prm_cu_sum2_body(parts + (int64_t)blockIdx.x * PRM_CU_RED_PARTS, res + blockIdx.x, sh);
}

static void prm_cu_sum_any(prm_cu_ctx *c, const char *op, double *out, const float *x, int64_t n,
                           int sq) {
  const char *prev = c->last_op;
  prm_cu_enter(c, op);
  *out = 0;
  if (n <= 0) return;
  prm_cu_k_sum1<<<PRM_CU_RED_PARTS, PRM_CU_THREADS, 0, c->stream>>>(c->d_red, x, n, sq);
  if (prm_cu_check(c, op)) goto fail;
  prm_cu_k_sum2<<<1, PRM_CU_THREADS, 0, c->stream>>>(c->d_red);
  if (prm_cu_check(c, op)) goto fail;
  {
    gpuError_t e = gpuMemcpyAsync(c->h_red, c->d_red + PRM_CU_RED_PARTS, sizeof(double),
                                  gpuMemcpyDeviceToHost, c->stream);
    if (e == gpuSuccess) e = gpuStreamSynchronize(c->stream);
    if (e != gpuSuccess) {
      prm_cu_fail(c, "%s: %s (%s) (or raised by an operator queued before it; the last was %s)",
                  op, gpuGetErrorString(e), gpuGetErrorName(e), prev ? prev : "none");
      goto fail;
    }
  }
  *out = *c->h_red;
  return;
fail:
  *out = NAN;
}

static_assert(PRM_CU_RED_PARTS % PRM_CU_THREADS == 0, "stage 2 splits the parts evenly");

void prm_cu_sumsq(void *ctx, double *out, const float *x, int64_t n) {
  prm_cu_sum_any((prm_cu_ctx *)ctx, "sumsq", out, x, n, 1);
}

void prm_cu_sum(void *ctx, double *out, const float *x, int64_t n) {
  prm_cu_sum_any((prm_cu_ctx *)ctx, "sum", out, x, n, 0);
}

void prm_cu_sumsq_multi(void *ctx, double *out, const float *x, const int64_t *off,
                        const int64_t *num, int nseg) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  const char *op = "sumsq_multi", *prev = c->last_op;
  prm_cu_enter(c, op);
  if (nseg <= 0) return;
  if (nseg > 65535) { /* grid.y's limit: one sumsq each */
    for (int i = 0; i < nseg; i++) prm_cu_sumsq(ctx, &out[i], x + off[i], num[i]);
    return;
  }
  for (int i = 0; i < nseg; i++) out[i] = NAN;
  /* Scratch: the table (2 nseg int64), the parts, the results. */
  size_t tab_bytes = ((size_t)nseg * 2 * sizeof(int64_t) + 255) & ~(size_t)255;
  size_t parts_bytes = (size_t)nseg * PRM_CU_RED_PARTS * sizeof(double);
  char *scr = (char *)prm_cu_scratch(c, op, tab_bytes + parts_bytes + (size_t)nseg * sizeof(double));
  if (!scr) return;
  int64_t *tab = (int64_t *)malloc((size_t)nseg * 2 * sizeof(int64_t));
  if (!tab) {
    prm_cu_fail(c, "%s: out of host memory", op);
    return;
  }
  for (int i = 0; i < nseg; i++) {
    tab[2 * i] = off[i];
    tab[2 * i + 1] = num[i] > 0 ? num[i] : 0;
  }
  double *parts = (double *)(scr + tab_bytes), *res = parts + (size_t)nseg * PRM_CU_RED_PARTS;
  /* Pageable host memory: both copies are done after the synchronize. */
  gpuError_t e = gpuMemcpyAsync(scr, tab, (size_t)nseg * 2 * sizeof(int64_t),
                                gpuMemcpyHostToDevice, c->stream);
  if (e == gpuSuccess) {
    prm_cu_k_sum1_multi<<<dim3(PRM_CU_RED_PARTS, (unsigned)nseg), PRM_CU_THREADS, 0, c->stream>>>(
        parts, x, (const int64_t *)scr);
    if (prm_cu_check(c, op)) {
      free(tab);
      return;
    }
    prm_cu_k_sum2_multi<<<(unsigned)nseg, PRM_CU_THREADS, 0, c->stream>>>(parts, res);
    if (prm_cu_check(c, op)) {
      free(tab);
      return;
    }
    e = gpuMemcpyAsync(out, res, (size_t)nseg * sizeof(double), gpuMemcpyDeviceToHost, c->stream);
  }
  if (e == gpuSuccess) e = gpuStreamSynchronize(c->stream);
  free(tab);
  if (e != gpuSuccess) {
    for (int i = 0; i < nseg; i++) out[i] = NAN;
    prm_cu_fail(c, "%s: %s (%s) (or raised by an operator queued before it; the last was %s)", op,
                gpuGetErrorString(e), gpuGetErrorName(e), prev ? prev : "none");
  }
}
