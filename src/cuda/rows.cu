/* rows.cu - the CUDA module's row operators: the embedding (forward and
 * backward) and RMSNorm (forward, with the residual add and the bf16 copy,
 * and backward). Each matches its CPU reference (src/kernels/ref-impl.h):
 * the same formula in the same order, row statistics in double where the
 * reference keeps them in double; the embedding backward and RMSNorm keep
 * the CPU's bits where the comments say so. *
 * Every kernel says its launch shape and what each thread or block owns.
 * Results are deterministic: no float atomics anywhere; every reduction is
 * a fixed tree or a fixed loop order that depends only on the shape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ops-impl.h"

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

