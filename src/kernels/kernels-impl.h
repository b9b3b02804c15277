/* kernels-impl.h - internals shared by the kernel files: the fp32
 * instantiation of the reference kernels (prm__ref32_*), and the fast
 * kernels (prm__fast_*, fast_ew.c and fast_adamw.c) the public kernels route
 * to. The benchmark (src/bench/kernels.c) and the tests time and check each
 * fast kernel against its reference twin through these names. */
#ifndef PRM_KERNELS_IMPL_H
#define PRM_KERNELS_IMPL_H

#include "primus/prm_kernels.h"

#include <string.h>

/* One float rounded to bf16 as prm_f32_to_bf16 rounds it (nearest even on
 * the bit pattern, a NaN stays a quiet NaN), and one bf16 widened to float
 * (exact): the scalar forms every vector variant is checked against. */
static inline __attribute__((always_inline)) prm_bf16_t prm__bf16_from_f32(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (prm_bf16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (prm_bf16_t)(u >> 16);
}

static inline __attribute__((always_inline)) float prm__bf16_to_f32(prm_bf16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#define PRM_REF_DOUBLE 0
#include "kernels/ref-decl.h"
#undef PRM_REF_DOUBLE

/* fast_ew.c: same arguments as the public kernels of the same name. */
void prm__fast_add(float *y, const float *a, const float *b, int64_t n);
void prm__fast_swiglu_forward(float *h, const float *gate, const float *up, int64_t n);
void prm__fast_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                               const float *up, int64_t n);
/* RoPE by +angle (sign 1, forward) or -angle (sign -1, backward); row t of
 * sequence b has position pos[b*T+t] when pos is not NULL, else pos0 + t. */
void prm__fast_rope_apply(float *x /* (B,T,nh,D) */, const float *cos_t, const float *sin_t,
                          int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                          const int32_t *pos /* (B,T) or NULL */, float sign);
void prm__fast_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w,
                               int64_t N, int64_t C, float eps);
void prm__fast_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                                const float *w, const float *rstd, int64_t N, int64_t C);
void prm__fast_add_rmsnorm_forward(float *sum, float *out, float *rstd, const float *a,
                                   const float *b, const float *w, int64_t N, int64_t C,
                                   float eps);
/* Cross-entropy forward and, when dlogits is not NULL, backward in one
 * call (three passes over each row; dlogits may be logits): the per-row
 * losses (losses may be NULL) and their sum in a fixed order, as
 * prm_xent_forward and prm_xent_backward. */
double prm__fast_xent(float *losses /* (N) */, float *dlogits /* (N,V) */,
                      const float *logits /* (N,V) */, const int32_t *targets /* (N) */,
                      int64_t N, int64_t V, float scale);

/* fast_adamw.c: prm_adamw_update, bit-identical to the reference. */
void prm__fast_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float wd, int64_t step,
                            float gscale);
/* The variant this CPU runs: "avx512", "avx2" or "plain". */
const char *prm__fast_adamw_isa(void);
/* The update with one variant forced (NULL: this CPU's), for the tests;
 * PRM_EINVAL, touching nothing, when the CPU cannot run it. */
int prm__fast_adamw_update_isa(const char *isa, float *p, const float *g, float *m, float *v,
                               int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                               int64_t step, float gscale);

/* The bf16 attention (attention16.c) with one variant forced: "avx512bf16"
 * (vdpbf16ps) or "widen" (bf16 pairs widened to fp32, AVX-512, AVX2 or
 * plain by cpuid); NULL: this CPU's. PRM_EINVAL, touching nothing, when the
 * CPU cannot run it. For the tests and the benchmark. */
int prm__attention_forward_bf16_isa(const char *isa, float *out, float *lse, const prm_bf16_t *q,
                                    const prm_bf16_t *k, const prm_bf16_t *v, const int32_t *seg,
                                    int64_t B, int64_t T, int64_t H, int64_t G, int64_t D);
int prm__attention_backward_bf16_isa(const char *isa, float *dq, float *dk, float *dv,
                                     const prm_bf16_t *dout, const prm_bf16_t *q,
                                     const prm_bf16_t *k, const prm_bf16_t *v, const float *out,
                                     const float *lse, const int32_t *seg, int64_t B, int64_t T,
                                     int64_t H, int64_t G, int64_t D);
/* The reference twin: the bf16 inputs widened to double, the double
 * reference kernels (ref64), the results rounded to fp32. */
void prm__ref_attention_forward_bf16(float *out, float *lse, const prm_bf16_t *q,
                                     const prm_bf16_t *k, const prm_bf16_t *v, const int32_t *seg,
                                     int64_t B, int64_t T, int64_t H, int64_t G, int64_t D);
void prm__ref_attention_backward_bf16(float *dq, float *dk, float *dv, const prm_bf16_t *dout,
                                      const prm_bf16_t *q, const prm_bf16_t *k,
                                      const prm_bf16_t *v, const float *out, const float *lse,
                                      const int32_t *seg, int64_t B, int64_t T, int64_t H,
                                      int64_t G, int64_t D);

/* Segments (packed sequences), for attention.c and attention16.c: lo[a] =
 * the first key row i0 + a sees, the start of the run of equal ids holding
 * it; all 0 without segments, so the plain causal path only pays for
 * filling a small array per block. The starts never decrease with the row,
 * so lo[0] bounds the block's keys. */
static inline void prm__seg_lo(int64_t *lo, const int32_t *seg, int64_t i0, int64_t nq) {
  lo[0] = 0;
  if (!seg) {
    for (int64_t a = 0; a < nq; a++) lo[a] = 0;
    return;
  }
  int64_t i = i0;
  while (i > 0 && seg[i - 1] == seg[i0]) i--;
  lo[0] = i;
  for (int64_t a = 1; a < nq; a++) lo[a] = seg[i0 + a] == seg[i0 + a - 1] ? lo[a - 1] : i0 + a;
}

#endif
