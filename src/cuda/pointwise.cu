/* pointwise.cu - the CUDA module's element-wise operators: RoPE, SwiGLU
 * (forward, with the bf16 copy, and backward), add and scale, each with a
 * float4 kernel and its scalar twin (PRIMUS_CUDA_ELTWISE=scalar) that give
 * the same bits. Each matches its CPU reference (src/kernels/ref-impl.h)
 * within rounding. *
 * Every kernel says its launch shape and what each thread or block owns.
 * Results are deterministic: no float atomics anywhere; every reduction is
 * a fixed tree or a fixed loop order that depends only on the shape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ops-impl.h"

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

