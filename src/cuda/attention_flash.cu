/* attention_flash.cu - causal grouped-query attention on bf16 q, k, v as
 * fused flash kernels on the tensor cores (issue 24): the scores never
 * leave the multiprocessor. The default for attention_*_bf16 when the head
 * size is 32, 64 or 128 (PRIMUS_CUDA_ATTENTION=gemm takes attention_gemm.cu
 * instead, the twin these kernels are checked against besides the CPU's
 * prm_attention_*_bf16).
 *
 * The same function as the CPU's bf16 kernels (attention16.c): query head
 * h reads key/value group h / (H/G); scores q.k / sqrt(D) in fp32; query i
 * sees key j iff lo(i) <= j <= i (lo: the start of i's segment); online
 * softmax in fp32 with lse kept; P and dS rounded to bf16 (nearest even)
 * only as operands of the products after them; out, lse, dq, dk, dv fp32.
 *
 * The products are warp-wide mma.sync m16n8k16 (bf16 A and B, fp32
 * accumulation), the fragment layouts of the PTX ISA: in a warp, lane
 * l = 4 g + t holds, of a 16 x 16 A, rows g and g + 8 at columns 2t, 2t+1
 * and 2t+8, 2t+9; of a 16 x 8 B, rows 2t, 2t+1 and 2t+8, 2t+9 at column g;
 * of the 16 x 8 C, rows g and g + 8 at columns 2t, 2t+1. A product's C
 * fragments are the next product's A fragments once rounded to bf16 (the
 * flash-attention register reuse). fl_mma falls back to shuffles and fp32
 * FMAs where mma.sync does not exist (before sm_80, HIP, the host
 * emulator), the same function in another summation order.
 *
 * Forward: a block of 4 warps takes 64 query rows of one (b, h), 16 per
 * warp, its Q fragments in registers, and walks the 64-key tiles from the
 * first tile its rows' segments reach to the diagonal, K and V staged in
 * shared memory.
 * Backward, deterministic (no atomics): fl_k_dkdv gives a block 64 keys of
 * one (b, group) and walks, for each query head of the group in order, the
 * query tiles from the diagonal on (K and V fragments in registers, Q, dO,
 * lse, D_i staged): dV += P^T dO, dK += dS^T Q. fl_k_dq walks the key tiles
 * for 64 query rows as the forward does: dQ += dS K. The scores are
 * recomputed in both (the price of no atomics and no T x T buffer). */
#include <math.h>

#include "cuda/cuda-impl.h"

#define FL_M 64 /* query rows of a block (16 per warp) */
#define FL_N 64 /* keys of a tile */
#define FL_THREADS 128
static_assert(FL_M == FL_N, "the backward's query tiles are key-tile sized");

/* ---- warp-level pieces ---- */

[[maybe_unused]] __device__ static inline float fl_lo(uint32_t w) {
  return prm_cu_bf16_widen((uint16_t)(w & 0xffffu));
}
[[maybe_unused]] __device__ static inline float fl_hi(uint32_t w) {
  return prm_cu_bf16_widen((uint16_t)(w >> 16));
}

/* Two floats rounded to bf16 (nearest even), the first in the low half. */
__device__ static inline uint32_t fl_pack(float a, float b) {
  return (uint32_t)prm_cu_bf16_round(a) | ((uint32_t)prm_cu_bf16_round(b) << 16);
}

/* d (16 x 8 fp32) += a (16 x 16 bf16) b (16 x 8 bf16). */
__device__ static inline void fl_mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(PRM_HIP)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  /* Gather rows g, g + 8 of A and columns 2t, 2t + 1 of B from the lanes
   * holding them, then dot products in fp32. Every lane calls it. */
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float A0[16], A1[16], B0[16], B1[16];
  for (int s = 0; s < 4; s++) {
    const int src = 4 * g + s;
    uint32_t x0 = PRM_SHFL(a[0], src), x1 = PRM_SHFL(a[1], src);
    uint32_t x2 = PRM_SHFL(a[2], src), x3 = PRM_SHFL(a[3], src);
    A0[2 * s] = fl_lo(x0), A0[2 * s + 1] = fl_hi(x0);
    A0[2 * s + 8] = fl_lo(x2), A0[2 * s + 9] = fl_hi(x2);
    A1[2 * s] = fl_lo(x1), A1[2 * s + 1] = fl_hi(x1);
    A1[2 * s + 8] = fl_lo(x3), A1[2 * s + 9] = fl_hi(x3);
    const int c0 = 4 * (2 * t) + s, c1 = 4 * (2 * t + 1) + s;
    uint32_t y0 = PRM_SHFL(b0, c0), y1 = PRM_SHFL(b1, c0);
    uint32_t z0 = PRM_SHFL(b0, c1), z1 = PRM_SHFL(b1, c1);
    B0[2 * s] = fl_lo(y0), B0[2 * s + 1] = fl_hi(y0);
    B0[2 * s + 8] = fl_lo(y1), B0[2 * s + 9] = fl_hi(y1);
    B1[2 * s] = fl_lo(z0), B1[2 * s + 1] = fl_hi(z0);
    B1[2 * s + 8] = fl_lo(z1), B1[2 * s + 9] = fl_hi(z1);
  }
  for (int k = 0; k < 16; k++) {
    d[0] += A0[k] * B0[k], d[1] += A0[k] * B1[k];
    d[2] += A1[k] * B0[k], d[3] += A1[k] * B1[k];
  }
#endif
}

/* Sum and max over the 4 lanes of a quad (the lanes holding one row). */
__device__ static inline float fl_quad_max(float v) {
  v = fmaxf(v, PRM_SHFL_XOR(v, 1));
  return fmaxf(v, PRM_SHFL_XOR(v, 2));
}
__device__ static inline float fl_quad_sum(float v) {
  v += PRM_SHFL_XOR(v, 1);
  return v + PRM_SHFL_XOR(v, 2);
}

/* Two consecutive bf16 of global memory as one word (al >= 1: the
 * tensors are 4-byte aligned, 2: 16-byte aligned). */
__device__ static inline uint32_t fl_ld2(const uint16_t *p, int al) {
  return al ? *(const uint32_t *)p : ((uint32_t)p[0] | ((uint32_t)p[1] << 16));
}

/* Rows r0 .. r0 + 63 (zero past T) of a (T, stride) bf16 matrix, D wide,
 * into shared memory with row pitch D + 8 (16-byte rows: D is a multiple
 * of 32); 8 values a load where the tensors are 16-byte aligned. */
template <int D>
__device__ static inline void fl_stage(uint16_t *dst, const uint16_t *src, int64_t stride, int r0,
                                       int T, int al) {
  if (al == 2) {
    constexpr int PR = D / 8;
    for (int x = threadIdx.x; x < FL_N * PR; x += FL_THREADS) {
      const int r = x / PR, c = 8 * (x % PR);
      uint4 w = make_uint4(0u, 0u, 0u, 0u);
      if (r0 + r < T) w = *(const uint4 *)(src + (int64_t)(r0 + r) * stride + c);
      *(uint4 *)(dst + r * (D + 8) + c) = w;
    }
    return;
  }
  constexpr int PR = D / 2;
  for (int x = threadIdx.x; x < FL_N * PR; x += FL_THREADS) {
    const int r = x / PR, c = 2 * (x % PR);
    *(uint32_t *)(dst + r * (D + 8) + c) =
        r0 + r < T ? fl_ld2(src + (int64_t)(r0 + r) * stride + c, al) : 0u;
  }
}

/* A fragments (16 rows from `row`, all of D) of a global bf16 matrix. */
template <int D>
__device__ static inline void fl_frag_a(uint32_t (*a)[4], const uint16_t *src, int64_t stride,
                                        int row, int T, int al) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint16_t *p0 = src + (int64_t)(row + g) * stride,
                 *p1 = src + (int64_t)(row + g + 8) * stride;
  const int ok0 = row + g < T, ok1 = row + g + 8 < T;
  for (int kk = 0; kk < D / 16; kk++) {
    const int c = kk * 16 + 2 * t;
    a[kk][0] = ok0 ? fl_ld2(p0 + c, al) : 0u, a[kk][1] = ok1 ? fl_ld2(p1 + c, al) : 0u;
    a[kk][2] = ok0 ? fl_ld2(p0 + c + 8, al) : 0u, a[kk][3] = ok1 ? fl_ld2(p1 + c + 8, al) : 0u;
  }
}

/* B fragment of X^T for X staged row-major (rows n0 .. n0 + 7 are the 8
 * columns of B, d from k0): consecutive d, one word each. */
template <int D>
__device__ static inline void fl_frag_bt(uint32_t *b0, uint32_t *b1, const uint16_t *X, int n0,
                                         int k0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(PRM_HIP)
  /* Two 8 x 8 matrices, rows n0 .. n0 + 7 at columns k0 and k0 + 8: lane l
   * gets row l / 4, columns 2 (l % 4) and + 1 of each. */
  const int lane = threadIdx.x & 31;
  const uint16_t *p = X + (n0 + (lane & 7)) * (D + 8) + k0 + (lane & 8);
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(*b0), "=r"(*b1)
               : "r"(a));
#else
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint16_t *p = X + (n0 + g) * (D + 8) + k0 + 2 * t;
  *b0 = *(const uint32_t *)p;
  *b1 = *(const uint32_t *)(p + 8);
#endif
}

/* B fragment of X itself (rows k0 .. k0 + 15 of X are the reduction, its
 * columns n0 .. n0 + 7 the 8 columns of B): two rows per word. */
template <int D>
__device__ static inline void fl_frag_b(uint32_t *b0, uint32_t *b1, const uint16_t *X, int k0,
                                        int n0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(PRM_HIP)
  /* Two 8 x 8 matrices, rows k0 .. k0 + 7 and k0 + 8 .. k0 + 15 at columns
   * n0 .. n0 + 7, transposed as loaded: lane l gets rows 2 (l % 4) and + 1
   * of column l / 4. */
  const int lane = threadIdx.x & 31;
  const uint16_t *p = X + (k0 + (lane & 15)) * (D + 8) + n0;
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(*b0), "=r"(*b1)
               : "r"(a));
#else
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint16_t *p = X + (k0 + 2 * t) * (D + 8) + n0 + g;
  *b0 = (uint32_t)p[0] | ((uint32_t)p[D + 8] << 16);
  *b1 = (uint32_t)p[8 * (D + 8)] | ((uint32_t)p[9 * (D + 8)] << 16);
#endif
}

/* The A fragments of a 16 x 64 tile held as 8 C fragments (c[nt] columns
 * 8 nt ..), rounded to bf16: 4 k-steps of 16. */
__device__ static inline void fl_c_to_a(uint32_t (*a)[4], const float (*c)[4]) {
  for (int kk = 0; kk < FL_N / 16; kk++) {
    a[kk][0] = fl_pack(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = fl_pack(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = fl_pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = fl_pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

/* s (16 x 64 as 8 C fragments) = A X^T: A the warp's 16 rows of D as A
 * fragments, X 64 rows of D staged row-major (scores, dP). */
template <int D>
__device__ static inline void fl_abt(float (*s)[4], const uint32_t (*a)[4], const uint16_t *X) {
  for (int nt = 0; nt < FL_N / 8; nt++) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    for (int kk = 0; kk < D / 16; kk++) {
      uint32_t b0, b1;
      fl_frag_bt<D>(&b0, &b1, X, nt * 8, kk * 16);
      fl_mma(s[nt], a[kk], b0, b1);
    }
  }
}

/* acc (16 x D as D/8 C fragments) += P X: P 16 x 64 as A fragments
 * (fl_c_to_a), X 64 rows of D staged row-major (P V, dS K, P^T dO, dS^T Q). */
template <int D>
__device__ static inline void fl_acc_ab(float (*acc)[4], const uint32_t (*p)[4],
                                        const uint16_t *X) {
  for (int kk = 0; kk < FL_N / 16; kk++)
    for (int dt = 0; dt < D / 8; dt++) {
      uint32_t b0, b1;
      fl_frag_b<D>(&b0, &b1, X, kk * 16, dt * 8);
      fl_mma(acc[dt], p[kk], b0, b1);
    }
}

/* ---- forward ---- */

template <int D>
__global__ __launch_bounds__(FL_THREADS) static void fl_k_fwd(float *out, float *lse,
                                                              const uint16_t *q, const uint16_t *k,
                                                              const uint16_t *v,
                                                              const int32_t *start, int T, int H,
                                                              int G, float scale, int al) {
  __shared__ __align__(16) uint16_t Ks[FL_N * (D + 8)];
  __shared__ __align__(16) uint16_t Vs[FL_N * (D + 8)];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int i0 = blockIdx.x * FL_M, h = blockIdx.y % H, b = blockIdx.y / H, kv = h / (H / G);
  const int64_t qs = (int64_t)H * D, ks = (int64_t)G * D;
  const uint16_t *qb = q + (int64_t)b * T * qs + (int64_t)h * D;
  const uint16_t *kb = k + (int64_t)b * T * ks + (int64_t)kv * D;
  const uint16_t *vb = v + (int64_t)b * T * ks + (int64_t)kv * D;
  const int wr = i0 + warp * 16, r0 = wr + g, r1 = r0 + 8;
  const int lo0 = start && r0 < T ? start[(int64_t)b * T + r0] : 0;
  const int lo1 = start && r1 < T ? start[(int64_t)b * T + r1] : 0;
  uint32_t qa[D / 16][4];
  fl_frag_a<D>(qa, qb, qs, wr, T, al);
  float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int dt = 0; dt < D / 8; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  const int jlo = start ? start[(int64_t)b * T + i0] : 0;
  const int jend = i0 + FL_M < T ? i0 + FL_M : T;
  for (int j0 = jlo / FL_N * FL_N; j0 < jend; j0 += FL_N) {
    __syncthreads(); /* the last tile's readers are done */
    fl_stage<D>(Ks, kb, ks, j0, T, al);
    fl_stage<D>(Vs, vb, ks, j0, T, al);
    __syncthreads();
    float s[FL_N / 8][4];
    fl_abt<D>(s, qa, Ks);
    float mx[2] = {-INFINITY, -INFINITY};
    for (int nt = 0; nt < FL_N / 8; nt++)
      for (int e = 0; e < 4; e++) {
        const int j = j0 + nt * 8 + 2 * t + (e & 1), r = e < 2 ? r0 : r1, lo = e < 2 ? lo0 : lo1;
        const int ok = j <= r && j >= lo && j < T;
        s[nt][e] = ok ? s[nt][e] * scale : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
    float alpha[2], mn[2];
    for (int x = 0; x < 2; x++) {
      mn[x] = fmaxf(m[x], fl_quad_max(mx[x]));
      alpha[x] = mn[x] == -INFINITY ? 1.0f : expf(m[x] - mn[x]);
      m[x] = mn[x];
      l[x] *= alpha[x];
    }
    for (int nt = 0; nt < FL_N / 8; nt++)
      for (int e = 0; e < 4; e++) {
        const float p = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - mn[e >> 1]);
        s[nt][e] = p;
        l[e >> 1] += p;
      }
    for (int dt = 0; dt < D / 8; dt++)
      o[dt][0] *= alpha[0], o[dt][1] *= alpha[0], o[dt][2] *= alpha[1], o[dt][3] *= alpha[1];
    uint32_t pa[FL_N / 16][4];
    fl_c_to_a(pa, s);
    fl_acc_ab<D>(o, pa, Vs);
  }
  for (int x = 0; x < 2; x++) {
    l[x] = fl_quad_sum(l[x]);
    const int r = x ? r1 : r0;
    if (r >= T) continue;
    const float inv = 1.0f / l[x];
    float *ob = out + ((int64_t)b * T + r) * qs + (int64_t)h * D;
    for (int dt = 0; dt < D / 8; dt++) {
      ob[dt * 8 + 2 * t] = o[dt][2 * x] * inv;
      ob[dt * 8 + 2 * t + 1] = o[dt][2 * x + 1] * inv;
    }
    if (t == 0) lse[((int64_t)b * H + h) * T + r] = m[x] + logf(l[x]);
  }
}

/* ---- backward: dK and dV ---- */

template <int D>
__global__ __launch_bounds__(FL_THREADS) static void fl_k_dkdv(
    float *dk, float *dv, const uint16_t *dout, const uint16_t *q, const uint16_t *k,
    const uint16_t *v, const float *lse, const float *Di, const int32_t *start, int T, int H, int G,
    float scale, int al) {
  __shared__ __align__(16) uint16_t Qs[FL_M * (D + 8)];
  __shared__ __align__(16) uint16_t Os[FL_M * (D + 8)];
  __shared__ float Ls[FL_M], Ds[FL_M];
  __shared__ int Ss[FL_M];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int j0 = blockIdx.x * FL_N, kv = blockIdx.y % G, b = blockIdx.y / G, r = H / G;
  const int64_t qs = (int64_t)H * D, ks = (int64_t)G * D;
  const uint16_t *kb = k + (int64_t)b * T * ks + (int64_t)kv * D;
  const uint16_t *vb = v + (int64_t)b * T * ks + (int64_t)kv * D;
  const int wk = j0 + warp * 16, k0 = wk + g, k1 = k0 + 8; /* this thread's key rows */
  uint32_t ka[D / 16][4], va[D / 16][4];
  fl_frag_a<D>(ka, kb, ks, wk, T, al);
  fl_frag_a<D>(va, vb, ks, wk, T, al);
  float dkc[D / 8][4], dvc[D / 8][4];
  for (int dt = 0; dt < D / 8; dt++)
    for (int e = 0; e < 4; e++) dkc[dt][e] = dvc[dt][e] = 0.0f;
  const int jlast = j0 + FL_N - 1 < T - 1 ? j0 + FL_N - 1 : T - 1;
  for (int hh = 0; hh < r; hh++) {
    const int h = kv * r + hh;
    const uint16_t *qb = q + (int64_t)b * T * qs + (int64_t)h * D;
    const uint16_t *ob = dout + (int64_t)b * T * qs + (int64_t)h * D;
    const float *lb = lse + ((int64_t)b * H + h) * T, *db = Di + ((int64_t)b * H + h) * T;
    for (int i0 = j0; i0 < T; i0 += FL_M) {
      /* Rows whose segment starts after this block's last key see none of
       * it, nor do later rows (segment starts never decrease). */
      if (start && start[(int64_t)b * T + i0] > jlast) break;
      __syncthreads();
      fl_stage<D>(Qs, qb, qs, i0, T, al);
      fl_stage<D>(Os, ob, qs, i0, T, al);
      for (int x = threadIdx.x; x < FL_M; x += FL_THREADS) {
        const int i = i0 + x;
        Ls[x] = i < T ? lb[i] : 0.0f;
        Ds[x] = i < T ? db[i] : 0.0f;
        Ss[x] = i < T ? (start ? start[(int64_t)b * T + i] : 0) : 0x7fffffff;
      }
      __syncthreads();
      /* S^T = K Q^T and dP^T = V dO^T: 16 keys x 64 queries per warp. */
      float st[FL_M / 8][4], dp[FL_M / 8][4];
      fl_abt<D>(st, ka, Qs);
      fl_abt<D>(dp, va, Os);
      /* P^T and dS^T = P^T (dP^T - D_i) scale, in place. */
      for (int nt = 0; nt < FL_M / 8; nt++)
        for (int e = 0; e < 4; e++) {
          const int c = nt * 8 + 2 * t + (e & 1), i = i0 + c, j = e < 2 ? k0 : k1;
          const int ok = i < T && j <= i && j >= Ss[c] && j < T;
          const float p = ok ? expf(st[nt][e] * scale - Ls[c]) : 0.0f;
          st[nt][e] = p;
          dp[nt][e] = ok ? p * (dp[nt][e] - Ds[c]) * scale : 0.0f;
        }
      uint32_t pa[FL_M / 16][4], sa[FL_M / 16][4];
      fl_c_to_a(pa, st);
      fl_c_to_a(sa, dp);
      fl_acc_ab<D>(dvc, pa, Os);
      fl_acc_ab<D>(dkc, sa, Qs);
    }
  }
  for (int x = 0; x < 2; x++) {
    const int j = x ? k1 : k0;
    if (j >= T) continue;
    float *dkr = dk + ((int64_t)b * T + j) * ks + (int64_t)kv * D;
    float *dvr = dv + ((int64_t)b * T + j) * ks + (int64_t)kv * D;
    for (int dt = 0; dt < D / 8; dt++) {
      dkr[dt * 8 + 2 * t] = dkc[dt][2 * x], dkr[dt * 8 + 2 * t + 1] = dkc[dt][2 * x + 1];
      dvr[dt * 8 + 2 * t] = dvc[dt][2 * x], dvr[dt * 8 + 2 * t + 1] = dvc[dt][2 * x + 1];
    }
  }
}

/* ---- backward: dQ ---- */

template <int D>
__global__ __launch_bounds__(FL_THREADS) static void fl_k_dq(float *dq, const uint16_t *dout,
                                                             const uint16_t *q, const uint16_t *k,
                                                             const uint16_t *v, const float *lse,
                                                             const float *Di, const int32_t *start,
                                                             int T, int H, int G, float scale,
                                                             int al) {
  __shared__ __align__(16) uint16_t Ks[FL_N * (D + 8)];
  __shared__ __align__(16) uint16_t Vs[FL_N * (D + 8)];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int i0 = blockIdx.x * FL_M, h = blockIdx.y % H, b = blockIdx.y / H, kv = h / (H / G);
  const int64_t qs = (int64_t)H * D, ks = (int64_t)G * D;
  const uint16_t *qb = q + (int64_t)b * T * qs + (int64_t)h * D;
  const uint16_t *ob = dout + (int64_t)b * T * qs + (int64_t)h * D;
  const uint16_t *kb = k + (int64_t)b * T * ks + (int64_t)kv * D;
  const uint16_t *vb = v + (int64_t)b * T * ks + (int64_t)kv * D;
  const int wr = i0 + warp * 16, r0 = wr + g, r1 = r0 + 8;
  const int64_t bh = ((int64_t)b * H + h) * T;
  const int lo[2] = {start && r0 < T ? start[(int64_t)b * T + r0] : 0,
                     start && r1 < T ? start[(int64_t)b * T + r1] : 0};
  const float L[2] = {r0 < T ? lse[bh + r0] : 0.0f, r1 < T ? lse[bh + r1] : 0.0f};
  const float Dr[2] = {r0 < T ? Di[bh + r0] : 0.0f, r1 < T ? Di[bh + r1] : 0.0f};
  uint32_t qa[D / 16][4], oa[D / 16][4];
  fl_frag_a<D>(qa, qb, qs, wr, T, al);
  fl_frag_a<D>(oa, ob, qs, wr, T, al);
  float dqc[D / 8][4];
  for (int dt = 0; dt < D / 8; dt++) dqc[dt][0] = dqc[dt][1] = dqc[dt][2] = dqc[dt][3] = 0.0f;
  const int jlo = start ? start[(int64_t)b * T + i0] : 0;
  const int jend = i0 + FL_M < T ? i0 + FL_M : T;
  for (int j0 = jlo / FL_N * FL_N; j0 < jend; j0 += FL_N) {
    __syncthreads();
    fl_stage<D>(Ks, kb, ks, j0, T, al);
    fl_stage<D>(Vs, vb, ks, j0, T, al);
    __syncthreads();
    float s[FL_N / 8][4], dp[FL_N / 8][4];
    fl_abt<D>(s, qa, Ks);
    fl_abt<D>(dp, oa, Vs);
    for (int nt = 0; nt < FL_N / 8; nt++)
      for (int e = 0; e < 4; e++) {
        const int j = j0 + nt * 8 + 2 * t + (e & 1), x = e >> 1, r = x ? r1 : r0;
        const int ok = j <= r && j >= lo[x] && j < T && r < T;
        const float p = ok ? expf(s[nt][e] * scale - L[x]) : 0.0f;
        dp[nt][e] = ok ? p * (dp[nt][e] - Dr[x]) * scale : 0.0f;
      }
    uint32_t sa[FL_N / 16][4];
    fl_c_to_a(sa, dp);
    fl_acc_ab<D>(dqc, sa, Ks);
  }
  for (int x = 0; x < 2; x++) {
    const int r = x ? r1 : r0;
    if (r >= T) continue;
    float *dqr = dq + ((int64_t)b * T + r) * qs + (int64_t)h * D;
    for (int dt = 0; dt < D / 8; dt++)
      dqr[dt * 8 + 2 * t] = dqc[dt][2 * x], dqr[dt * 8 + 2 * t + 1] = dqc[dt][2 * x + 1];
  }
}

/* ---- entry points ---- */

template <int D>
static void fl_fwd(prm_cu_ctx *c, dim3 grid, float *out, float *lse, const uint16_t *q,
                   const uint16_t *k, const uint16_t *v, const int32_t *start, int64_t T, int64_t H,
                   int64_t G, float scale, int al) {
  fl_k_fwd<D><<<grid, FL_THREADS, 0, c->stream>>>(out, lse, q, k, v, start, (int)T, (int)H, (int)G,
                                                  scale, al);
}

template <int D>
static int fl_bwd(prm_cu_ctx *c, const char *op, dim3 gkv, dim3 gq, float *dq, float *dk, float *dv,
                  const uint16_t *dout, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                  const float *lse, const float *Di, const int32_t *start, int64_t T, int64_t H,
                  int64_t G, float scale, int al) {
  fl_k_dkdv<D><<<gkv, FL_THREADS, 0, c->stream>>>(dk, dv, dout, q, k, v, lse, Di, start, (int)T,
                                                  (int)H, (int)G, scale, al);
  if (prm_cu_check(c, op)) return 1;
  fl_k_dq<D><<<gq, FL_THREADS, 0, c->stream>>>(dq, dout, q, k, v, lse, Di, start, (int)T, (int)H,
                                               (int)G, scale, al);
  return 0;
}

int prm_cu_flash_ok(const prm_cu_ctx *c, int64_t T, int64_t D) {
  return c->attn_flash && (D == 32 || D == 64 || D == 128) && T > 0 && T < 0x7fffffff;
}

/* 2: every tensor 16-byte aligned (rows are: D is a multiple of 32);
 * 1: 4-byte aligned; 0: neither (fl_ld2, fl_stage). */
static int fl_aligned(const void *a, const void *b, const void *c, const void *d) {
  const uintptr_t u = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
  return (u & 15u) == 0 ? 2 : (u & 3u) == 0 ? 1 : 0;
}

void prm_cu_flash_forward(prm_cu_ctx *c, const char *op, float *out, float *lse, const uint16_t *q,
                          const uint16_t *k, const uint16_t *v, const int32_t *seg, int64_t B,
                          int64_t T, int64_t H, int64_t G, int64_t D) {
  int32_t *start = NULL;
  if (seg) {
    start = (int32_t *)prm_cu_scratch(c, op, (size_t)(B * T) * sizeof(int32_t));
    if (!start || prm_cu_at_segstart(c, op, start, seg, B, T)) return;
  }
  const float scale = (float)(1.0 / sqrt((double)D));
  const int al = fl_aligned(q, k, v, NULL);
  dim3 grid((unsigned)((T + FL_M - 1) / FL_M), (unsigned)(B * H));
  if (D == 32)
    fl_fwd<32>(c, grid, out, lse, q, k, v, start, T, H, G, scale, al);
  else if (D == 64)
    fl_fwd<64>(c, grid, out, lse, q, k, v, start, T, H, G, scale, al);
  else
    fl_fwd<128>(c, grid, out, lse, q, k, v, start, T, H, G, scale, al);
  prm_cu_check(c, op);
}

void prm_cu_flash_backward(prm_cu_ctx *c, const char *op, float *dq, float *dk, float *dv,
                           const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, const float *out, const float *lse,
                           const int32_t *seg, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D) {
  float *Di = NULL;
  int32_t *start = NULL;
  if (prm_cu_at_bwd_scratch(c, op, seg, B, T, H, &Di, &start)) return;
  if (prm_cu_at_rowdot16(c, op, Di, dout, out, B, T, H, D)) return;
  const float scale = (float)(1.0 / sqrt((double)D));
  const int al = fl_aligned(q, k, v, dout);
  dim3 gkv((unsigned)((T + FL_N - 1) / FL_N), (unsigned)(B * G));
  dim3 gq((unsigned)((T + FL_M - 1) / FL_M), (unsigned)(B * H));
  int rc = D == 32 ? fl_bwd<32>(c, op, gkv, gq, dq, dk, dv, dout, q, k, v, lse, Di, start, T, H, G,
                                scale, al)
           : D == 64 ? fl_bwd<64>(c, op, gkv, gq, dq, dk, dv, dout, q, k, v, lse, Di, start, T, H,
                                  G, scale, al)
                     : fl_bwd<128>(c, op, gkv, gq, dq, dk, dv, dout, q, k, v, lse, Di, start, T, H,
                                   G, scale, al);
  if (rc) return;
  prm_cu_check(c, op);
}
