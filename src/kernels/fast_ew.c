/* fast_ew.c - the element-wise and row-wise kernels, vectorised and
 * threaded: add, SwiGLU, RoPE, RMSNorm (and the residual add fused with it)
 * and the cross-entropy rows of the fused LM head.
 *
 * The workers are written once against prm__v16 (vec-impl.h) and compiled
 * for AVX-512, AVX2+FMA and plain x86-64 (PRM__CLONES, picked at load time
 * by cpuid); the public functions around them split the work with OpenMP
 * in a fixed way. Every element, row statistic and column sum is computed
 * by one thread in a fixed order, so the results do not depend on the
 * thread count at all.
 *
 * Agreement with the reference twins (ref-impl.h, checked in
 * tests/test-kernels.c):
 *  - add, RoPE, RMSNorm's dw, and the fused add + RMSNorm against add then
 *    RMSNorm: the same operations in the same order, bit-identical (nothing
 *    is contracted into FMAs, see the pragma);
 *  - RMSNorm's row sums (the mean square, dx's dot product): in double as
 *    the reference, in another order (16 lanes), so rstd and dx's row
 *    coefficient may differ in the last bit (tests: 2e-7 of the fp32
 *    reference);
 *  - SwiGLU and cross-entropy use prm__vexp_neg0 instead of expf: relative
 *    error below 2e-7 where the tests ask 1e-6 of the double reference. */
#include "kernels/kernels-impl.h"
#include "kernels/vec-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Products and sums stay separate operations, as in the reference. */
#pragma GCC optimize("fp-contract=off")

/* Element-wise kernels below this many values run on one thread. */
#define PRM__EW_PAR 32768
/* Columns per block of the RMSNorm weight-gradient sum (8 vectors). */
#define PRM__CB 128

#ifdef _OPENMP
#include <omp.h>
#define PRM__NT() omp_get_num_threads()
#define PRM__TID() omp_get_thread_num()
#else
#define PRM__NT() 1
#define PRM__TID() 0
#endif

/* This thread's contiguous part [*lo, *hi) of n values, cut at multiples of
 * 16; call inside a parallel region. */
static inline void prm__split(int64_t n, int64_t *lo, int64_t *hi) {
  int64_t nt = PRM__NT(), t = PRM__TID();
  int64_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
  *lo = t * per < n ? t * per : n;
  *hi = *lo + per < n ? *lo + per : n;
}

/* ======================================================================== */
/* add                                                                      */
/* ======================================================================== */

/* No restrict: y may be a or b (each element is read before written). */
PRM__CLONES static void prm__add_range(float *y, const float *a, const float *b, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) prm__st(y + i, prm__ld(a + i) + prm__ld(b + i));
  for (; i < n; i++) y[i] = a[i] + b[i];
}

void prm__fast_add(float *y, const float *a, const float *b, int64_t n) {
#pragma omp parallel if (n >= PRM__EW_PAR)
  {
    int64_t lo, hi;
    prm__split(n, &lo, &hi);
    if (hi > lo) prm__add_range(y + lo, a + lo, b + lo, hi - lo);
  }
}

/* ======================================================================== */
/* SwiGLU                                                                   */
/* ======================================================================== */

/* sigmoid(x) from e = e^-|x| <= 1: 1/(1+e) for x >= 0, e/(1+e) below, so
 * the exponential never overflows. */
PRM__INLINE float prm__sigmoid(float x) {
  float e = prm__exp_neg0(x < 0 ? x : -x);
  return (x < 0 ? e : 1.0f) / (1.0f + e);
}

PRM__INLINE prm__v16 prm__vsigmoid(prm__v16 x) {
  prm__v16 z = {0};
  prm__v16i neg = x < z;
  prm__v16 e = prm__vexp_neg0(prm__select(neg, x, -x));
  return prm__select(neg, e, prm__splat(1.0f)) / (1.0f + e);
}

PRM__CLONES static void prm__swiglu_fwd_range(float *restrict h, const float *restrict gate,
                                              const float *restrict up, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prm__v16 g = prm__ld(gate + i);
    prm__st(h + i, g * prm__vsigmoid(g) * prm__ld(up + i));
  }
  for (; i < n; i++) h[i] = gate[i] * prm__sigmoid(gate[i]) * up[i];
}

PRM__CLONES static void prm__swiglu_bwd_range(float *restrict dgate, float *restrict dup,
                                              const float *restrict dh,
                                              const float *restrict gate,
                                              const float *restrict up, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prm__v16 g = prm__ld(gate + i), d = prm__ld(dh + i), s = prm__vsigmoid(g);
    prm__st(dgate + i, d * prm__ld(up + i) * s * (1.0f + g * (1.0f - s)));
    prm__st(dup + i, d * g * s);
  }
  for (; i < n; i++) {
    float g = gate[i], s = prm__sigmoid(g), d = dh[i];
    dgate[i] = d * up[i] * s * (1 + g * (1 - s));
    dup[i] = d * g * s;
  }
}

void prm__fast_swiglu_forward(float *h, const float *gate, const float *up, int64_t n) {
#pragma omp parallel if (n >= PRM__EW_PAR)
  {
    int64_t lo, hi;
    prm__split(n, &lo, &hi);
    if (hi > lo) prm__swiglu_fwd_range(h + lo, gate + lo, up + lo, hi - lo);
  }
}

void prm__fast_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                               const float *up, int64_t n) {
#pragma omp parallel if (n >= PRM__EW_PAR)
  {
    int64_t lo, hi;
    prm__split(n, &lo, &hi);
    if (hi > lo)
      prm__swiglu_bwd_range(dgate + lo, dup + lo, dh + lo, gate + lo, up + lo, hi - lo);
  }
}

/* ======================================================================== */
/* RoPE                                                                     */
/* ======================================================================== */

/* The nh heads of one token row, rotated by +angle (sign 1) or -angle. */
PRM__CLONES static void prm__rope_row(float *x, const float *restrict co,
                                      const float *restrict si, int64_t nh, int64_t D,
                                      float sign) {
  int64_t half = D / 2;
  for (int64_t h = 0; h < nh; h++) {
    float *r = x + h * D;
    int64_t i = 0;
    for (; i + 16 <= half; i += 16) {
      prm__v16 x1 = prm__ld(r + i), x2 = prm__ld(r + i + half), c = prm__ld(co + i),
               s = sign * prm__ld(si + i);
      prm__st(r + i, x1 * c - x2 * s);
      prm__st(r + i + half, x2 * c + x1 * s);
    }
    for (; i < half; i++) {
      float x1 = r[i], x2 = r[i + half], s = sign * si[i];
      r[i] = x1 * co[i] - x2 * s;
      r[i + half] = x2 * co[i] + x1 * s;
    }
  }
}

void prm__fast_rope_apply(float *x, const float *cos_t, const float *sin_t, int64_t B,
                          int64_t T, int64_t nh, int64_t D, int64_t pos0, const int32_t *pos,
                          float sign) {
  PRM_ASSERT(D % 2 == 0);
  int64_t half = D / 2, rows = B * T;
#pragma omp parallel for schedule(static) if (rows * nh * D >= PRM__EW_PAR)
  for (int64_t bt = 0; bt < rows; bt++) {
    int64_t p = pos ? pos[bt] : pos0 + bt % T;
    prm__rope_row(x + bt * nh * D, cos_t + p * half, sin_t + p * half, nh, D, sign);
  }
}

/* ======================================================================== */
/* RMSNorm                                                                  */
/* ======================================================================== */

/* sum of x[c]^2 over one row, in double. */
PRM__INLINE double prm__sumsq_row(const float *x, int64_t C) {
  prm__v8d a0 = {0}, a1 = {0};
  int64_t c = 0;
  for (; c + 16 <= C; c += 16) {
    prm__v16 v = prm__ld(x + c);
    prm__v8d l = prm__lo_d(v), h = prm__hi_d(v);
    a0 += l * l;
    a1 += h * h;
  }
  double ss = prm__hsum_d(a0 + a1);
  for (; c < C; c++) ss += (double)x[c] * x[c];
  return ss;
}

/* o = x * r * w over one row. */
PRM__INLINE void prm__scale_row(float *o, const float *x, const float *w, float r, int64_t C) {
  int64_t c = 0;
  for (; c + 16 <= C; c += 16) prm__st(o + c, prm__ld(x + c) * r * prm__ld(w + c));
  for (; c < C; c++) o[c] = x[c] * r * w[c];
}

PRM__CLONES static void prm__rmsnorm_fwd_row(float *restrict o, float *restrict rstd,
                                             const float *restrict x, const float *restrict w,
                                             int64_t C, float eps) {
  double ss = prm__sumsq_row(x, C);
  float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
  *rstd = r;
  prm__scale_row(o, x, w, r, C);
}

/* sum = a + b (sum may be a or b), then the norm of sum. */
PRM__CLONES static void prm__add_rmsnorm_row(float *s, float *restrict o, float *restrict rstd,
                                             const float *a, const float *b,
                                             const float *restrict w, int64_t C, float eps) {
  prm__v8d a0 = {0}, a1 = {0};
  int64_t c = 0;
  for (; c + 16 <= C; c += 16) {
    prm__v16 v = prm__ld(a + c) + prm__ld(b + c);
    prm__st(s + c, v);
    prm__v8d l = prm__lo_d(v), h = prm__hi_d(v);
    a0 += l * l;
    a1 += h * h;
  }
  double ss = prm__hsum_d(a0 + a1);
  for (; c < C; c++) {
    float v = a[c] + b[c];
    s[c] = v;
    ss += (double)v * v;
  }
  float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
  *rstd = r;
  prm__scale_row(o, s, w, r, C);
}

/* dx += rstd w dout - x coef over one row, coef = (dout.w.x) rstd^3 / C. */
PRM__CLONES static void prm__rmsnorm_dx_row(float *restrict d, const float *restrict g,
                                            const float *restrict x, const float *restrict w,
                                            float rr, int64_t C) {
  prm__v8d a0 = {0}, a1 = {0};
  int64_t c = 0;
  for (; c + 16 <= C; c += 16) {
    prm__v16 gv = prm__ld(g + c), wv = prm__ld(w + c), xv = prm__ld(x + c);
    a0 += prm__lo_d(gv) * prm__lo_d(wv) * prm__lo_d(xv);
    a1 += prm__hi_d(gv) * prm__hi_d(wv) * prm__hi_d(xv);
  }
  double dot = prm__hsum_d(a0 + a1);
  for (; c < C; c++) dot += (double)g[c] * w[c] * x[c];
  double r = rr;
  float coef = (float)(dot * r * r * r / (double)C);
  for (c = 0; c + 16 <= C; c += 16)
    prm__st(d + c, prm__ld(d + c) + (rr * prm__ld(w + c) * prm__ld(g + c) -
                                     prm__ld(x + c) * coef));
  for (; c < C; c++) d[c] += rr * w[c] * g[c] - x[c] * coef;
}

/* acc[0 .. nc) += sum over nr rows, in row order, of dout x rstd; the
 * accumulators (nc <= PRM__CB) stay in registers across the rows. */
PRM__CLONES static void prm__rmsnorm_dw_acc(float *restrict acc, const float *restrict g,
                                            const float *restrict x,
                                            const float *restrict rstd, int64_t nr, int64_t C,
                                            int64_t nc) {
  if (nc == PRM__CB) {
    prm__v16 a[PRM__CB / 16];
    for (int k = 0; k < PRM__CB / 16; k++) a[k] = prm__ld(acc + 16 * k);
    for (int64_t n = 0; n < nr; n++) {
      const float *gr = g + n * C, *xr = x + n * C;
      float r = rstd[n];
      for (int k = 0; k < PRM__CB / 16; k++)
        a[k] += prm__ld(gr + 16 * k) * prm__ld(xr + 16 * k) * r;
    }
    for (int k = 0; k < PRM__CB / 16; k++) prm__st(acc + 16 * k, a[k]);
    return;
  }
  for (int64_t n = 0; n < nr; n++) {
    const float *gr = g + n * C, *xr = x + n * C;
    float r = rstd[n];
    for (int64_t c = 0; c < nc; c++) acc[c] += gr[c] * xr[c] * r;
  }
}

void prm__fast_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w,
                               int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= PRM__EW_PAR)
  for (int64_t n = 0; n < N; n++) prm__rmsnorm_fwd_row(out + n * C, rstd + n, x + n * C, w, C, eps);
}

void prm__fast_add_rmsnorm_forward(float *sum, float *out, float *rstd, const float *a,
                                   const float *b, const float *w, int64_t N, int64_t C,
                                   float eps) {
#pragma omp parallel for schedule(static) if (N * C >= PRM__EW_PAR)
  for (int64_t n = 0; n < N; n++)
    prm__add_rmsnorm_row(sum + n * C, out + n * C, rstd + n, a + n * C, b + n * C, w, C, eps);
}

/* Rows per block of the backward: the weight-gradient sums of a block run
 * right after its dx rows, while dout and x are still in cache. */
#define PRM__RB 32
/* Widest row the backward keeps its column sums for on the stack. */
#define PRM__MAXC 8192

void prm__fast_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                                const float *w, const float *rstd, int64_t N, int64_t C) {
  int64_t nblk = (C + PRM__CB - 1) / PRM__CB;
  /* dw's column sums start at 0 and take the rows in order, as the
   * reference's, then are added to dw: bit-identical to it. The column
   * blocks are dealt to the threads by the same static schedule in every
   * loop (OpenMP guarantees the same assignment for loops of the same
   * length in one region), so each block's sums stay with one thread and
   * no loop needs a barrier; dx rows are independent. */
  float accbuf[PRM__MAXC];
  float *acc = C <= PRM__MAXC ? accbuf : prm_xcalloc((size_t)C, sizeof(float));
  memset(acc, 0, (size_t)C * sizeof(float));
#pragma omp parallel if (N * C >= PRM__EW_PAR)
  {
    for (int64_t r0 = 0; r0 < N; r0 += PRM__RB) {
      int64_t nr = N - r0 < PRM__RB ? N - r0 : PRM__RB;
#pragma omp for schedule(static) nowait
      for (int64_t n = r0; n < r0 + nr; n++)
        prm__rmsnorm_dx_row(dx + n * C, dout + n * C, x + n * C, w, rstd[n], C);
#pragma omp for schedule(static) nowait
      for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t c0 = blk * PRM__CB, nc = C - c0 < PRM__CB ? C - c0 : PRM__CB;
        prm__rmsnorm_dw_acc(acc + c0, dout + r0 * C + c0, x + r0 * C + c0, rstd + r0, nr, C,
                            nc);
      }
    }
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < nblk; blk++) {
      int64_t c0 = blk * PRM__CB, nc = C - c0 < PRM__CB ? C - c0 : PRM__CB;
      for (int64_t c = c0; c < c0 + nc; c++) dw[c] += acc[c];
    }
  }
  if (acc != accbuf) free(acc);
}

/* ======================================================================== */
/* Cross-entropy rows                                                       */
/* ======================================================================== */

/* Max of one row. */
PRM__INLINE float prm__row_max(const float *x, int64_t V) {
  int64_t j = 0;
  float m = -INFINITY;
  if (V >= 16) {
    prm__v16 m0 = prm__ld(x), m1 = m0;
    for (j = 16; j + 32 <= V; j += 32) {
      m0 = prm__vmax(m0, prm__ld(x + j));
      m1 = prm__vmax(m1, prm__ld(x + j + 16));
    }
    for (; j + 16 <= V; j += 16) m0 = prm__vmax(m0, prm__ld(x + j));
    m = prm__hmax(prm__vmax(m0, m1));
  }
  for (; j < V; j++) m = x[j] > m ? x[j] : m;
  return m;
}

/* Sum of exp(x - m) over one row, in double; when e is not NULL the
 * exponentials are also stored there (e may be x). */
PRM__INLINE double prm__row_sumexp(float *e, const float *x, float m, int64_t V) {
  prm__v8d a0 = {0}, a1 = {0};
  int64_t j = 0;
  for (; j + 16 <= V; j += 16) {
    prm__v16 v = prm__vexp_neg0(prm__ld(x + j) - m);
    if (e) prm__st(e + j, v);
    a0 += prm__lo_d(v);
    a1 += prm__hi_d(v);
  }
  double s = prm__hsum_d(a0 + a1);
  for (; j < V; j++) {
    float v = prm__exp_neg0(x[j] - m);
    if (e) e[j] = v;
    s += v;
  }
  return s;
}

/* One row: returns its loss (0 when masked) and, when d is not NULL, writes
 * scale (softmax - onehot) into d (which may be x). Three passes: the max,
 * the exponentials (kept in d) and their sum, then d scaled. */
PRM__CLONES static double prm__xent_row(float *d, const float *x, int32_t t, int64_t V,
                                        float scale) {
  if (t < 0) {
    if (d) memset(d, 0, (size_t)V * sizeof(float));
    return 0;
  }
  PRM_ASSERT(t < V);
  float mx = prm__row_max(x, V), xt = x[t];
  double se = prm__row_sumexp(d, x, mx, V);
  double loss = log(se) + (double)mx - (double)xt;
  if (d) {
    float inv = (float)((double)scale / se);
    int64_t j = 0;
    for (; j + 16 <= V; j += 16) prm__st(d + j, prm__ld(d + j) * inv);
    for (; j < V; j++) d[j] *= inv;
    d[t] -= scale;
  }
  return loss;
}

/* Fixed partition of the rows for the loss sum, as the reference's; the
 * slices are dealt round robin so that a chunk of few rows still spreads
 * over the threads. */
#define PRM__NPART 256

double prm__fast_xent(float *losses, float *dlogits, const float *logits,
                      const int32_t *targets, int64_t N, int64_t V, float scale) {
  double part[PRM__NPART];
  int64_t per = (N + PRM__NPART - 1) / PRM__NPART;
#pragma omp parallel for schedule(static, 1) if (N * V >= PRM__EW_PAR)
  for (int64_t p = 0; p < PRM__NPART; p++) {
    double s = 0;
    for (int64_t n = p * per; n < N && n < (p + 1) * per; n++) {
      double loss = prm__xent_row(dlogits ? dlogits + n * V : NULL, logits + n * V, targets[n],
                                  V, scale);
      if (losses) losses[n] = (float)loss;
      s += loss;
    }
    part[p] = s;
  }
  double total = 0;
  for (int64_t p = 0; p < PRM__NPART; p++) total += part[p];
  return total;
}

/* ======================================================================== */
/* Cross-entropy over a vocabulary slice (tensor-parallel LM head)          */
/* ======================================================================== */

PRM__CLONES static float prm__slice_max_row(const float *x, int64_t V) { return prm__row_max(x, V); }

/* st[0] = sum of exp(l - m), st[1] = the target's logit or 0, read before
 * keep overwrites l with the exponentials. */
PRM__CLONES static void prm__slice_sumexp_row(double *st, float *l, float m, int64_t t, int64_t V,
                                              int keep) {
  st[1] = t >= 0 && t < V ? (double)l[t] : 0.0;
  st[0] = prm__row_sumexp(keep ? l : NULL, l, m, V);
}

PRM__CLONES static void prm__slice_grad_row(float *d, double se, int64_t t, int64_t V,
                                            float scale) {
  float inv = (float)((double)scale / se);
  int64_t j = 0;
  for (; j + 16 <= V; j += 16) prm__st(d + j, prm__ld(d + j) * inv);
  for (; j < V; j++) d[j] *= inv;
  if (t >= 0 && t < V) d[t] -= scale;
}

void prm_xent_slice_max(float *mx, const float *logits, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V >= PRM__EW_PAR)
  for (int64_t r = 0; r < N; r++) mx[r] = prm__slice_max_row(logits + r * V, V);
}

void prm_xent_slice_sumexp(double *st, float *logits, const float *mx, const int32_t *targets,
                           int64_t N, int64_t V, int64_t v0, int keep) {
#pragma omp parallel for schedule(static) if (N * V >= PRM__EW_PAR)
  for (int64_t r = 0; r < N; r++)
    prm__slice_sumexp_row(st + 2 * r, logits + r * V, mx[r], (int64_t)targets[r] - v0, V, keep);
}

void prm_xent_slice_grad(float *e, const double *st, const int32_t *targets, int64_t N, int64_t V,
                         int64_t v0, float scale) {
#pragma omp parallel for schedule(static) if (N * V >= PRM__EW_PAR)
  for (int64_t r = 0; r < N; r++) {
    if (targets[r] < 0)
      memset(e + r * V, 0, (size_t)V * sizeof(float));
    else
      prm__slice_grad_row(e + r * V, st[2 * r], (int64_t)targets[r] - v0, V, scale);
  }
}
