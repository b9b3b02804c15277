/* ref-impl.h - the reference kernels, written once against `real` and
 * compiled twice: ref32.c (float, prm__ref32_*) and ref64.c (double,
 * prm_ref64_*). The includer defines PRM_REF_DOUBLE to 0 or 1.
 *
 * "Reference" means plain loops whose correctness is easy to read, not slow
 * ones: inner loops walk memory contiguously, OpenMP splits rows (or
 * (batch, kv-group) pairs) with schedule(static), and every reduction has a
 * fixed order, so results are deterministic for a given thread count (most
 * do not depend on the thread count at all). Nothing allocates: scratch is
 * a few small stack arrays.
 *
 * Mixed precision is deliberate where it is cheap: row statistics
 * (rmsnorm's mean square, the softmax denominators, loss sums) accumulate in
 * double in both instantiations.
 */
#include <math.h>
#include <string.h>

#include "primus/prm_base.h"

#if PRM_REF_DOUBLE
#define real double
#define PRM_REF(name) prm_ref64_##name
#define R_EXP exp
#define R_LOG log
#define R_SQRT sqrt
#else
#define real float
#define PRM_REF(name) prm__ref32_##name
#define R_EXP expf
#define R_LOG logf
#define R_SQRT sqrtf
#endif

/* Column block of the GEMM accumulator and of column-parallel reductions. */
#define REF_JB 256
#define REF_CB 64
/* Largest attention head size (the per-row accumulators live on the stack). */
#define REF_MAXD 1024
/* Fixed partition for sums, independent of the thread count. */
#define REF_NPART 256

static inline int64_t ref_min(int64_t a, int64_t b) { return a < b ? a : b; }

static inline real ref_dot(const real *a, const real *b, int64_t n) {
  real s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* ======================================================================== */
/* GEMM and linear                                                          */
/* ======================================================================== */

void PRM_REF(gemm)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha,
                   const real *A, int64_t lda, const real *B, int64_t ldb, real beta, real *C,
                   int64_t ldc) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; i++) {
    real *c = C + i * ldc;
    if (!trans_a && trans_b) {
      /* Both operands are contiguous along k: one dot product per element. */
      const real *a = A + i * lda;
      for (int64_t j = 0; j < N; j++) {
        real s = ref_dot(a, B + j * ldb, K);
        c[j] = beta == 0 ? alpha * s : alpha * s + beta * c[j];
      }
      continue;
    }
    /* Otherwise broadcast one element of op(A) over a block of a row of
     * op(B), accumulating a block of the output row. */
    real acc[REF_JB];
    for (int64_t j0 = 0; j0 < N; j0 += REF_JB) {
      int64_t nb = ref_min(REF_JB, N - j0);
      for (int64_t jj = 0; jj < nb; jj++) acc[jj] = 0;
      for (int64_t k = 0; k < K; k++) {
        real a = trans_a ? A[k * lda + i] : A[i * lda + k];
        if (!trans_b) {
          const real *b = B + k * ldb + j0;
          for (int64_t jj = 0; jj < nb; jj++) acc[jj] += a * b[jj];
        } else {
          const real *b = B + j0 * ldb + k;
          for (int64_t jj = 0; jj < nb; jj++) acc[jj] += a * b[jj * ldb];
        }
      }
      for (int64_t jj = 0; jj < nb; jj++)
        c[j0 + jj] = beta == 0 ? alpha * acc[jj] : alpha * acc[jj] + beta * c[j0 + jj];
    }
  }
}

void PRM_REF(linear_forward)(real *y, const real *x, const real *w, int64_t N, int64_t in,
                             int64_t out) {
  PRM_REF(gemm)(0, 1, N, out, in, 1, x, in, w, in, 0, y, out);
}

void PRM_REF(linear_backward)(real *dx, real *dw, const real *dy, const real *x, const real *w,
                              int64_t N, int64_t in, int64_t out, int dx_accum) {
  if (dx) PRM_REF(gemm)(0, 0, N, in, out, 1, dy, out, w, in, dx_accum ? 1 : 0, dx, in);
  if (dw) PRM_REF(gemm)(1, 0, out, in, N, 1, dy, out, x, in, 1, dw, in);
}

/* ======================================================================== */
/* Embedding                                                                */
/* ======================================================================== */

void PRM_REF(embedding_forward)(real *out, const int32_t *tok, const real *wte, int64_t N,
                                int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++)
    memcpy(out + n * C, wte + (int64_t)tok[n] * C, (size_t)C * sizeof(real));
}

/* Threads own column blocks and walk the rows in order, so repeated tokens
 * add up in row order whatever the thread count. */
void PRM_REF(embedding_backward)(real *dwte, const real *dout, const int32_t *tok, int64_t N,
                                 int64_t C) {
  int64_t nblk = (C + REF_CB - 1) / REF_CB;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t c0 = blk * REF_CB, nc = ref_min(REF_CB, C - c0);
    for (int64_t n = 0; n < N; n++) {
      real *d = dwte + (int64_t)tok[n] * C + c0;
      const real *g = dout + n * C + c0;
      for (int64_t c = 0; c < nc; c++) d[c] += g[c];
    }
  }
}

/* ======================================================================== */
/* RMSNorm                                                                  */
/* ======================================================================== */

void PRM_REF(rmsnorm_forward)(real *out, real *rstd, const real *x, const real *w, int64_t N,
                              int64_t C, real eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const real *xr = x + n * C;
    real *o = out + n * C;
    double ss = 0;
    for (int64_t c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
    real r = (real)(1.0 / sqrt(ss / (double)C + (double)eps));
    rstd[n] = r;
    for (int64_t c = 0; c < C; c++) o[c] = xr[c] * r * w[c];
  }
}

/* Residual add fused with the next norm: sum = a + b, out = rmsnorm(sum),
 * each row as rmsnorm_forward would do it on the stored sum. sum may alias
 * a or b: each element is read before it is written. */
void PRM_REF(add_rmsnorm_forward)(real *sum, real *out, real *rstd, const real *a,
                                  const real *b, const real *w, int64_t N, int64_t C, real eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const real *ar = a + n * C, *br = b + n * C;
    real *s = sum + n * C, *o = out + n * C;
    double ss = 0;
    for (int64_t c = 0; c < C; c++) {
      real v = ar[c] + br[c];
      s[c] = v;
      ss += (double)v * v;
    }
    real r = (real)(1.0 / sqrt(ss / (double)C + (double)eps));
    rstd[n] = r;
    for (int64_t c = 0; c < C; c++) o[c] = s[c] * r * w[c];
  }
}

void PRM_REF(rmsnorm_backward)(real *dx, real *dw, const real *dout, const real *x,
                               const real *w, const real *rstd, int64_t N, int64_t C) {
  /* dx: rows are independent. */
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const real *xr = x + n * C, *g = dout + n * C;
    real *d = dx + n * C;
    double dot = 0;
    for (int64_t c = 0; c < C; c++) dot += (double)g[c] * w[c] * xr[c];
    double r = rstd[n];
    real coef = (real)(dot * r * r * r / (double)C);
    real rr = rstd[n];
    for (int64_t c = 0; c < C; c++) d[c] += rr * w[c] * g[c] - xr[c] * coef;
  }
  /* dw: threads own column blocks and sum the rows in order. */
  int64_t nblk = (C + REF_CB - 1) / REF_CB;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t c0 = blk * REF_CB, nc = ref_min(REF_CB, C - c0);
    real acc[REF_CB] = {0};
    for (int64_t n = 0; n < N; n++) {
      const real *xr = x + n * C + c0, *g = dout + n * C + c0;
      real r = rstd[n];
      for (int64_t c = 0; c < nc; c++) acc[c] += g[c] * xr[c] * r;
    }
    for (int64_t c = 0; c < nc; c++) dw[c0 + c] += acc[c];
  }
}

/* ======================================================================== */
/* RoPE                                                                     */
/* ======================================================================== */

void PRM_REF(rope_tables)(real *cos_t, real *sin_t, int64_t T, int64_t D, double base) {
  PRM_ASSERT(D % 2 == 0);
  int64_t half = D / 2;
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < half; i++) {
      double inv_freq = pow(base, -2.0 * (double)i / (double)D);
      double angle = (double)t * inv_freq;
      cos_t[t * half + i] = (real)cos(angle);
      sin_t[t * half + i] = (real)sin(angle);
    }
}

/* Rotates every (x[i], x[i+D/2]) pair by +angle (sign 1) or -angle (-1). */
static void ref_rope_apply(real *x, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                           int64_t nh, int64_t D, int64_t pos0, real sign) {
  PRM_ASSERT(D % 2 == 0);
  int64_t half = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      const real *co = cos_t + (pos0 + t) * half, *si = sin_t + (pos0 + t) * half;
      for (int64_t h = 0; h < nh; h++) {
        real *r = x + ((b * T + t) * nh + h) * D;
        for (int64_t i = 0; i < half; i++) {
          real x1 = r[i], x2 = r[i + half], s = sign * si[i];
          r[i] = x1 * co[i] - x2 * s;
          r[i + half] = x2 * co[i] + x1 * s;
        }
      }
    }
}

void PRM_REF(rope_forward)(real *x, const real *cos_t, const real *sin_t, int64_t B, int64_t T,
                           int64_t nh, int64_t D, int64_t pos0) {
  ref_rope_apply(x, cos_t, sin_t, B, T, nh, D, pos0, 1);
}

void PRM_REF(rope_backward)(real *dx, const real *cos_t, const real *sin_t, int64_t B,
                            int64_t T, int64_t nh, int64_t D, int64_t pos0) {
  ref_rope_apply(dx, cos_t, sin_t, B, T, nh, D, pos0, -1);
}

/* ======================================================================== */
/* SwiGLU and add                                                           */
/* ======================================================================== */

static inline real ref_sigmoid(real x) { return 1 / (1 + R_EXP(-x)); }

void PRM_REF(swiglu_forward)(real *h, const real *gate, const real *up, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) h[i] = gate[i] * ref_sigmoid(gate[i]) * up[i];
}

void PRM_REF(swiglu_backward)(real *dgate, real *dup, const real *dh, const real *gate,
                              const real *up, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    real g = gate[i], s = ref_sigmoid(g), d = dh[i];
    dgate[i] = d * up[i] * s * (1 + g * (1 - s));
    dup[i] = d * g * s;
  }
}

void PRM_REF(add)(real *y, const real *a, const real *b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* ======================================================================== */
/* Attention                                                                */
/* ======================================================================== */

/* One query row against nk keys (stride kstride between positions), with
 * an online softmax: running max m, running sum l and an accumulator of D
 * values rescaled whenever the max grows. */
static void ref_attn_row(real *o, real *lse, const real *qi, const real *kb, const real *vb,
                         int64_t kstride, int64_t nk, int64_t D, real scale) {
  real acc[REF_MAXD];
  for (int64_t d = 0; d < D; d++) acc[d] = 0;
  real m = -INFINITY, l = 0;
  for (int64_t j = 0; j < nk; j++) {
    const real *kj = kb + j * kstride, *vj = vb + j * kstride;
    real s = ref_dot(qi, kj, D) * scale;
    if (s > m) {
      real c = R_EXP(m - s);
      l *= c;
      for (int64_t d = 0; d < D; d++) acc[d] *= c;
      m = s;
    }
    real p = R_EXP(s - m);
    l += p;
    for (int64_t d = 0; d < D; d++) acc[d] += p * vj[d];
  }
  real inv = 1 / l;
  for (int64_t d = 0; d < D; d++) o[d] = acc[d] * inv;
  if (lse) *lse = m + R_LOG(l);
}

/* The first position of the run of equal segment ids that holds i (0
 * without segments): the first key query i sees. */
static inline int64_t ref_seg_start(const int32_t *seg, int64_t i) {
  if (!seg) return 0;
  while (i > 0 && seg[i - 1] == seg[i]) i--;
  return i;
}

void PRM_REF(attention_forward_seg)(real *out, real *lse, const real *q, const real *k,
                                    const real *v, const int32_t *seg, int64_t B, int64_t T,
                                    int64_t H, int64_t G, int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0 && D <= REF_MAXD);
  int64_t hpg = H / G;
  real scale = (real)(1.0 / sqrt((double)D));
  /* Row i costs i+1 keys: small chunks of consecutive rows, dealt round
   * robin, balance the causal triangle. */
#pragma omp parallel for collapse(3) schedule(static, 8)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < T; i++) {
        int64_t g = h / hpg, row = (b * T + i) * H + h;
        int64_t lo = ref_seg_start(seg ? seg + b * T : NULL, i);
        const real *kb = k + ((b * T + lo) * G + g) * D, *vb = v + ((b * T + lo) * G + g) * D;
        ref_attn_row(out + row * D, lse + (b * H + h) * T + i, q + row * D, kb, vb, G * D,
                     i + 1 - lo, D, scale);
      }
}

void PRM_REF(attention_forward)(real *out, real *lse, const real *q, const real *k,
                                const real *v, int64_t B, int64_t T, int64_t H, int64_t G,
                                int64_t D) {
  PRM_REF(attention_forward_seg)(out, lse, q, k, v, NULL, B, T, H, G, D);
}

/* Threads own (b, g) pairs: every write to dk/dv of a group, and to dq of
 * its H/G query heads, comes from one thread in a fixed order. */
void PRM_REF(attention_backward_seg)(real *dq, real *dk, real *dv, const real *dout,
                                     const real *q, const real *k, const real *v,
                                     const real *out, const real *lse, const int32_t *seg,
                                     int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0 && D <= REF_MAXD);
  int64_t hpg = H / G;
  real scale = (real)(1.0 / sqrt((double)D));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t g = 0; g < G; g++) {
      for (int64_t t = 0; t < T; t++) {
        int64_t kv = ((b * T + t) * G + g) * D;
        memset(dk + kv, 0, (size_t)D * sizeof(real));
        memset(dv + kv, 0, (size_t)D * sizeof(real));
      }
      real dqacc[REF_MAXD];
      for (int64_t h = g * hpg; h < (g + 1) * hpg; h++)
        for (int64_t i = 0; i < T; i++) {
          int64_t row = ((b * T + i) * H + h) * D;
          const real *qi = q + row, *doi = dout + row;
          real Di = ref_dot(doi, out + row, D);
          real li = lse[(b * H + h) * T + i];
          for (int64_t d = 0; d < D; d++) dqacc[d] = 0;
          for (int64_t j = ref_seg_start(seg ? seg + b * T : NULL, i); j <= i; j++) {
            int64_t kv = ((b * T + j) * G + g) * D;
            const real *kj = k + kv, *vj = v + kv;
            real *dkj = dk + kv, *dvj = dv + kv;
            real p = R_EXP(ref_dot(qi, kj, D) * scale - li);
            real ds = p * (ref_dot(doi, vj, D) - Di) * scale;
            for (int64_t d = 0; d < D; d++) {
              dvj[d] += p * doi[d];
              dqacc[d] += ds * kj[d];
              dkj[d] += ds * qi[d];
            }
          }
          memcpy(dq + row, dqacc, (size_t)D * sizeof(real));
        }
    }
}

void PRM_REF(attention_backward)(real *dq, real *dk, real *dv, const real *dout, const real *q,
                                 const real *k, const real *v, const real *out, const real *lse,
                                 int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  PRM_REF(attention_backward_seg)(dq, dk, dv, dout, q, k, v, out, lse, NULL, B, T, H, G, D);
}

void PRM_REF(attention_decode)(real *out, const real *q, const real *kc, const real *vc,
                               int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0 && D <= REF_MAXD && Tq <= Tk);
  int64_t hpg = H / G;
  real scale = (real)(1.0 / sqrt((double)D));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < Tq; i++)
    for (int64_t h = 0; h < H; h++) {
      int64_t g = h / hpg, row = (i * H + h) * D;
      ref_attn_row(out + row, NULL, q + row, kc + g * D, vc + g * D, G * D, Tk - Tq + i + 1, D,
                   scale);
    }
}

/* ======================================================================== */
/* Cross-entropy                                                            */
/* ======================================================================== */

/* Max and sum of exp(x - max) of one row, the sum in double. */
static inline void ref_lse_parts(const real *x, int64_t V, real *mx, double *se) {
  real m = -INFINITY;
  for (int64_t j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
  double s = 0;
  for (int64_t j = 0; j < V; j++) s += R_EXP(x[j] - m);
  *mx = m;
  *se = s;
}

/* The rows are cut into REF_NPART fixed slices whose sums are added in
 * slice order: the total does not depend on the thread count. */
double PRM_REF(xent_forward)(real *losses, const real *logits, const int32_t *targets,
                             int64_t N, int64_t V) {
  double part[REF_NPART];
  int64_t per = (N + REF_NPART - 1) / REF_NPART;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < REF_NPART; p++) {
    double s = 0;
    for (int64_t n = p * per; n < ref_min(N, (p + 1) * per); n++) {
      double loss = 0;
      if (targets[n] >= 0) {
        PRM_ASSERT(targets[n] < V);
        const real *x = logits + n * V;
        real mx;
        double se;
        ref_lse_parts(x, V, &mx, &se);
        loss = log(se) + (double)mx - (double)x[targets[n]];
      }
      if (losses) losses[n] = (real)loss;
      s += loss;
    }
    part[p] = s;
  }
  double total = 0;
  for (int64_t p = 0; p < REF_NPART; p++) total += part[p];
  return total;
}

/* No restrict: dlogits may be logits. Each element is read before it is
 * written, and the row statistics are taken first. */
void PRM_REF(xent_backward)(real *dlogits, const real *logits, const int32_t *targets,
                            int64_t N, int64_t V, real scale) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const real *x = logits + n * V;
    real *d = dlogits + n * V;
    int32_t t = targets[n];
    if (t < 0) {
      memset(d, 0, (size_t)V * sizeof(real));
      continue;
    }
    PRM_ASSERT(t < V);
    real mx;
    double se;
    ref_lse_parts(x, V, &mx, &se);
    real inv = (real)((double)scale / se);
    for (int64_t j = 0; j < V; j++) d[j] = R_EXP(x[j] - mx) * inv;
    d[t] -= scale;
  }
}

/* ======================================================================== */
/* AdamW                                                                    */
/* ======================================================================== */

/* torch 1.13 single-tensor AdamW on g x gscale (as torch's clip_grad_norm_
 * scales the gradient in place first). The scalars (decay factor, bias
 * corrections, step size) are computed in double as Python does, then
 * rounded to `real` as torch does for an fp32 tensor. */
void PRM_REF(adamw_update)(real *p, const real *g, real *m, real *v, int64_t n, real lr,
                           real beta1, real beta2, real eps, real wd, int64_t step, real gscale) {
  PRM_ASSERT(step >= 1);
  double bc1 = 1.0 - pow((double)beta1, (double)step);
  double bc2 = 1.0 - pow((double)beta2, (double)step);
  real decay = (real)(1.0 - (double)lr * (double)wd);
  real step_size = (real)((double)lr / bc1);
  real bc2_sqrt = (real)sqrt(bc2);
  real omb1 = (real)(1.0 - (double)beta1), omb2 = (real)(1.0 - (double)beta2);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    real gi = g[i] * gscale;
    real mi = m[i] * beta1 + omb1 * gi;
    real vi = v[i] * beta2 + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    real denom = R_SQRT(vi) / bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

#undef real
#undef PRM_REF
#undef R_EXP
#undef R_LOG
#undef R_SQRT
