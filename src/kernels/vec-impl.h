/* vec-impl.h - the SIMD vocabulary of the fast kernels (attention.c,
 * fast_ew.c, fast_adamw.c): a 16-float vector written with GCC's vector
 * extensions, its loads and stores, and an expf-free exponential.
 *
 * Code written against prm__v16 compiles to one zmm register per value in
 * an AVX-512 clone and is split into narrower registers by the compiler in
 * the AVX2 and plain x86-64 clones, so one source serves every ISA variant
 * (PRM__CLONES: GCC target_clones, the variant picked at load time by
 * cpuid). Everything here is static inline and always inlined, so no
 * 64-byte vector crosses a call boundary and GCC's ABI note about passing
 * them does not apply. */
#ifndef PRM_VEC_IMPL_H
#define PRM_VEC_IMPL_H

#include <stdint.h>
#include <string.h>

#define PRM__CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define PRM__INLINE static inline __attribute__((always_inline))

#pragma GCC diagnostic ignored "-Wpsabi"

/* Sixteen floats (or ints, or eight doubles) as one value. Loads and stores
 * go through memcpy, so nothing needs alignment. */
typedef float prm__v16 __attribute__((vector_size(64)));
typedef int32_t prm__v16i __attribute__((vector_size(64)));
typedef float prm__v8 __attribute__((vector_size(32)));
typedef double prm__v8d __attribute__((vector_size(64)));

PRM__INLINE prm__v16 prm__ld(const float *p) {
  prm__v16 v;
  memcpy(&v, p, sizeof v);
  return v;
}

PRM__INLINE void prm__st(float *p, prm__v16 v) { memcpy(p, &v, sizeof v); }

PRM__INLINE prm__v16 prm__splat(float x) { return (prm__v16){0} + x; }

/* m ? a : b lane by lane, m from a vector comparison (all ones or zero). */
PRM__INLINE prm__v16 prm__select(prm__v16i m, prm__v16 a, prm__v16 b) {
  return (prm__v16)(((prm__v16i)a & m) | ((prm__v16i)b & ~m));
}

PRM__INLINE prm__v16 prm__vmax(prm__v16 a, prm__v16 b) { return prm__select(a > b, a, b); }

PRM__INLINE float prm__hmax(prm__v16 v) {
  float m = v[0];
  for (int i = 1; i < 16; i++) m = v[i] > m ? v[i] : m;
  return m;
}

/* The 16 lanes widened to double, as two halves (for sums kept in double). */
PRM__INLINE prm__v8d prm__lo_d(prm__v16 v) {
  prm__v8 h;
  memcpy(&h, &v, sizeof h);
  return __builtin_convertvector(h, prm__v8d);
}

PRM__INLINE prm__v8d prm__hi_d(prm__v16 v) {
  prm__v8 h;
  memcpy(&h, (const char *)&v + sizeof h, sizeof h);
  return __builtin_convertvector(h, prm__v8d);
}

/* Sum of the eight lanes in a fixed order (pairwise). */
PRM__INLINE double prm__hsum_d(prm__v8d v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/* e^x for x <= 0 (all attention and softmax need: scores minus their
 * maximum), written so `omp simd` vectorises it: x = n ln2 + r with
 * |r| <= ln2/2, e^r by a degree-6 Taylor polynomial (relative error below
 * 2e-7 on that interval), then 2^n through the exponent bits. Below -87 the
 * argument is clamped: the result stays e^-87 (about 1.6e-38, negligible
 * next to the terms it is summed with) where expf's would go denormal. */
PRM__INLINE float prm__exp_neg(float x) {
  x = x < -87.0f ? -87.0f : x;
  /* Round to nearest by the 1.5 x 2^23 trick (roundf would be a libcall
   * and stop vectorisation). */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693145751953125f - n * 1.42860682030941723e-6f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union {
    int32_t i;
    float f;
  } two_n = {.i = ((int32_t)n + 127) << 23};
  return p * two_n.f;
}

/* The online softmax's step when a block raises a row's maximum m to bm:
 * what was summed under the old maximum (the row sum l, the D outputs in
 * acc) is scaled by e^(m - bm). The fp32 and bf16 attention kernels share
 * it. */
PRM__INLINE void prm__softmax_rescale(float *m, float *l, float *acc, int64_t D, float bm) {
  if (bm > *m) {
    float corr = prm__exp_neg(*m - bm);
    *l *= corr;
#pragma omp simd
    for (int64_t d = 0; d < D; d++) acc[d] *= corr;
    *m = bm;
  }
}

/* prm__exp_neg, but 0 below -87 (the fast kernels' softmax and sigmoid
 * then match expf's underflow instead of leaving 1.6e-38). */
PRM__INLINE float prm__exp_neg0(float x) { return x < -87.0f ? 0.0f : prm__exp_neg(x); }

/* prm__exp_neg0 on 16 lanes, the same operations in the same order, so a
 * vector body and its scalar tail agree bit for bit (when both are compiled
 * with the same contraction setting). */
PRM__INLINE prm__v16 prm__vexp_neg0(prm__v16 x) {
  prm__v16 lo = prm__splat(-87.0f);
  prm__v16i under = x < lo;
  x = prm__select(under, lo, x);
  prm__v16 n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  prm__v16 r = x - n * 0.693145751953125f - n * 1.42860682030941723e-6f;
  prm__v16 p = prm__splat(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  prm__v16i e = (__builtin_convertvector(n, prm__v16i) + 127) << 23;
  return prm__select(under, (prm__v16){0}, p * (prm__v16)e);
}

#endif
