/* attention.c - causal grouped-query attention in fp32, flash style and
 * vectorised. The forward keeps only out and the per-row log-sum-exp (an
 * online softmax over blocks of keys); the backward recomputes the
 * probabilities block by block (BQ queries x BK keys at a time, in small
 * stack buffers); no T x T buffer exists anywhere. Packed sequences pass
 * segment ids: each query row then starts at its segment's first key, so
 * blocks before it are skipped rather than masked.
 *
 * The inner loops run over the head dimension with `omp simd`; the workers
 * are compiled for AVX-512, AVX2+FMA and plain x86-64 and the best one is
 * picked at load time by cpuid (GCC target_clones). The reference twin is
 * the fp32 instantiation of ref-impl.h; tests/test-kernels.c checks these
 * against it and against the double-precision reference. bf16 mixed
 * precision runs the same blocks with bf16 operands and vdpbf16ps
 * products in attention16.c. */
#include "kernels/kernels-impl.h"
#include "kernels/vec-impl.h"

#include <math.h>
#include <string.h>

enum {
  PRM__BQ = 32,    /* query rows per backward block */
  PRM__BK = 64,    /* keys per block */
  PRM__MAXD = 256, /* larger head sizes take the reference path */
};

static inline __attribute__((always_inline)) float prm__dot(const float *restrict a,
                                                            const float *restrict b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* Copies n rows of a (keys, D) block, row stride `stride`, into dst as
 * (D, BK) so that loops over keys run along contiguous memory; columns n..BK
 * are zero. */
static inline __attribute__((always_inline)) void prm__transpose(float *restrict dst,
                                                                 const float *restrict src,
                                                                 int64_t stride, int64_t n,
                                                                 int64_t D) {
  for (int64_t d = 0; d < D; d++)
    for (int64_t c = n; c < PRM__BK; c++) dst[d * PRM__BK + c] = 0;
  for (int64_t c = 0; c < n; c++)
    for (int64_t d = 0; d < D; d++) dst[d * PRM__BK + c] = src[c * stride + d];
}

/* s[c] = sum_d x[d] Kt[d][c] for the BK = 64 keys of a transposed block:
 * eight independent accumulators (two d at a time) hide the FMA latency. */
_Static_assert(PRM__BK == 64, "prm__scores is written for 64-key blocks");
static inline __attribute__((always_inline)) void prm__scores(float *restrict s,
                                                              const float *restrict x,
                                                              const float *restrict Kt,
                                                              int64_t D) {
  prm__v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
  int64_t d = 0;
  for (; d + 2 <= D; d += 2) {
    const float *r = Kt + d * PRM__BK, *r2 = r + PRM__BK;
    float x0 = x[d], x1 = x[d + 1];
    a0 += x0 * prm__ld(r);
    a1 += x0 * prm__ld(r + 16);
    a2 += x0 * prm__ld(r + 32);
    a3 += x0 * prm__ld(r + 48);
    b0 += x1 * prm__ld(r2);
    b1 += x1 * prm__ld(r2 + 16);
    b2 += x1 * prm__ld(r2 + 32);
    b3 += x1 * prm__ld(r2 + 48);
  }
  if (d < D) {
    const float *r = Kt + d * PRM__BK;
    float x0 = x[d];
    a0 += x0 * prm__ld(r);
    a1 += x0 * prm__ld(r + 16);
    a2 += x0 * prm__ld(r + 32);
    a3 += x0 * prm__ld(r + 48);
  }
  prm__st(s, a0 + b0);
  prm__st(s + 16, a1 + b1);
  prm__st(s + 32, a2 + b2);
  prm__st(s + 48, a3 + b3);
}

/* y[0..D) += sum over t < n of w[t*ws] * x[t*xs + 0..D). The accumulator
 * stays in registers across all n terms (a rank-1 update per term would
 * load and store y n times): 32 lanes at a time, two terms per step so
 * four FMA chains run side by side; 16 lanes, then scalars, for the rest. */
static inline __attribute__((always_inline)) void prm__acc_rows(float *restrict y,
                                                                const float *restrict w,
                                                                int64_t ws,
                                                                const float *restrict x,
                                                                int64_t xs, int64_t n, int64_t D) {
  int64_t d0 = 0;
  for (; d0 + 32 <= D; d0 += 32) {
    prm__v16 r0 = prm__ld(y + d0), r1 = prm__ld(y + d0 + 16), u0 = {0}, u1 = {0};
    int64_t t = 0;
    for (; t + 2 <= n; t += 2) {
      const float *x0 = x + t * xs + d0, *x1 = x0 + xs;
      float w0 = w[t * ws], w1 = w[(t + 1) * ws];
      r0 += w0 * prm__ld(x0);
      r1 += w0 * prm__ld(x0 + 16);
      u0 += w1 * prm__ld(x1);
      u1 += w1 * prm__ld(x1 + 16);
    }
    if (t < n) {
      const float *x0 = x + t * xs + d0;
      float w0 = w[t * ws];
      r0 += w0 * prm__ld(x0);
      r1 += w0 * prm__ld(x0 + 16);
    }
    prm__st(y + d0, r0 + u0);
    prm__st(y + d0 + 16, r1 + u1);
  }
  for (; d0 + 16 <= D; d0 += 16) {
    prm__v16 r0 = prm__ld(y + d0);
    for (int64_t t = 0; t < n; t++) r0 += w[t * ws] * prm__ld(x + t * xs + d0);
    prm__st(y + d0, r0);
  }
  for (; d0 < D; d0++) {
    float r = y[d0];
    for (int64_t t = 0; t < n; t++) r += w[t * ws] * x[t * xs + d0];
    y[d0] = r;
  }
}

/* ------------------------------------------------------------------------ */
/* Forward: a block of query rows of one head, online softmax over key      */
/* blocks                                                                    */
/* ------------------------------------------------------------------------ */

/* Rows i0 .. i0+nq-1 of one (sequence, head): query row r sits at q + r *
 * qs, key/value row j at kb/vb + j * ks. Row i sees keys lo .. pos0 + i
 * (pos0 = 0 in training; the cache length before the new tokens when
 * decoding; lo from the segment ids, 0 without them). */
PRM__CLONES static void prm__attn_fwd_block(float *out, float *lse, int64_t lse_stride,
                                            const float *q, int64_t qs, const float *kb,
                                            const float *vb, int64_t ks, const int32_t *seg,
                                            int64_t i0, int64_t nq, int64_t pos0, int64_t D,
                                            float scale) {
  float Kt[PRM__MAXD * PRM__BK], s[PRM__BK];
  float acc[PRM__BQ][PRM__MAXD], m[PRM__BQ], l[PRM__BQ];
  int64_t lo[PRM__BQ];
  prm__seg_lo(lo, seg, i0, nq);
  for (int64_t a = 0; a < nq; a++) {
    m[a] = -INFINITY;
    l[a] = 0;
    for (int64_t d = 0; d < D; d++) acc[a][d] = 0;
  }
  int64_t nkeys = pos0 + i0 + nq; /* keys the last row sees */
  for (int64_t j0 = lo[0]; j0 < nkeys; j0 += PRM__BK) {
    int64_t nk = nkeys - j0 < PRM__BK ? nkeys - j0 : PRM__BK;
    prm__transpose(Kt, kb + j0 * ks, ks, nk, D);
    for (int64_t a = 0; a < nq; a++) {
      int64_t n = pos0 + i0 + a + 1 - j0; /* keys of this block row a sees: [c0, n) */
      int64_t c0 = lo[a] > j0 ? lo[a] - j0 : 0;
      if (n > nk) n = nk;
      if (n <= c0) continue;
      const float *qa = q + (i0 + a) * qs;
      prm__scores(s, qa, Kt, D);
      float bm = -INFINITY;
      for (int64_t c = c0; c < n; c++) {
        s[c] *= scale;
        bm = s[c] > bm ? s[c] : bm;
      }
      prm__softmax_rescale(&m[a], &l[a], acc[a], D, bm);
      float sum = 0, ma = m[a];
#pragma omp simd reduction(+ : sum)
      for (int64_t c = c0; c < n; c++) {
        s[c] = prm__exp_neg(s[c] - ma);
        sum += s[c];
      }
      l[a] += sum;
      prm__acc_rows(acc[a], s + c0, 1, vb + (j0 + c0) * ks, ks, n - c0, D);
    }
  }
  for (int64_t a = 0; a < nq; a++) {
    float inv = 1.0f / l[a], *o = out + (i0 + a) * qs;
    for (int64_t d = 0; d < D; d++) o[d] = acc[a][d] * inv;
    if (lse) lse[(i0 + a) * lse_stride] = m[a] + logf(l[a]);
  }
}

void prm_attention_forward(float *out, float *lse, const float *q, const float *k,
                           const float *v, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D) {
  prm_attention_forward_seg(out, lse, q, k, v, NULL, B, T, H, G, D);
}

void prm_attention_forward_seg(float *out, float *lse, const float *q, const float *k,
                               const float *v, const int32_t *seg, int64_t B, int64_t T,
                               int64_t H, int64_t G, int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0);
  if (D > PRM__MAXD) {
    prm__ref32_attention_forward_seg(out, lse, q, k, v, seg, B, T, H, G, D);
    return;
  }
  int64_t hpg = H / G, nblk = (T + PRM__BQ - 1) / PRM__BQ;
  float scale = (float)(1.0 / sqrt((double)D));
  /* Later blocks see more keys: blocks dealt round robin balance that. */
#pragma omp parallel for collapse(3) schedule(static, 1)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t g = h / hpg, i0 = blk * PRM__BQ, nq = T - i0 < PRM__BQ ? T - i0 : PRM__BQ;
        int64_t base = (b * T * H + h) * D;
        prm__attn_fwd_block(out + base, lse + (b * H + h) * T, 1, q + base, H * D,
                            k + (b * T * G + g) * D, v + (b * T * G + g) * D, G * D,
                            seg ? seg + b * T : NULL, i0, nq, 0, D, scale);
      }
}

void prm_attention_decode(float *out, const float *q, const float *kc, const float *vc,
                          int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0 && Tq <= Tk);
  if (D > PRM__MAXD) {
    prm__ref32_attention_decode(out, q, kc, vc, Tq, Tk, H, G, D);
    return;
  }
  int64_t hpg = H / G, nblk = (Tq + PRM__BQ - 1) / PRM__BQ;
  float scale = (float)(1.0 / sqrt((double)D));
#pragma omp parallel for collapse(2) schedule(static, 1)
  for (int64_t h = 0; h < H; h++)
    for (int64_t blk = 0; blk < nblk; blk++) {
      int64_t g = h / hpg, i0 = blk * PRM__BQ, nq = Tq - i0 < PRM__BQ ? Tq - i0 : PRM__BQ;
      prm__attn_fwd_block(out + h * D, NULL, 0, q + h * D, H * D, kc + g * D, vc + g * D, G * D,
                          NULL, i0, nq, Tk - Tq, D, scale);
    }
}

/* ------------------------------------------------------------------------ */
/* Backward: one (sequence, key/value group) at a time                      */
/* ------------------------------------------------------------------------ */

/* Everything that writes dk/dv of group g of sequence b (and dq of its H/G
 * query heads) happens here, in a fixed order: deterministic, and no two
 * threads ever touch the same row. */
PRM__CLONES static void prm__attn_bwd_group(float *dq, float *dk, float *dv, const float *dout,
                                            const float *q, const float *k, const float *v,
                                            const float *out, const float *lse,
                                            const int32_t *seg, int64_t b, int64_t g, int64_t T,
                                            int64_t H, int64_t G, int64_t D, float scale) {
  int64_t hpg = H / G, ks = G * D, qs = H * D;
  const float *kb = k + (b * T * G + g) * D, *vb = v + (b * T * G + g) * D;
  float *dkb = dk + (b * T * G + g) * D, *dvb = dv + (b * T * G + g) * D;
  for (int64_t t = 0; t < T; t++) {
    memset(dkb + t * ks, 0, (size_t)D * sizeof(float));
    memset(dvb + t * ks, 0, (size_t)D * sizeof(float));
  }
  float P[PRM__BQ][PRM__BK], DS[PRM__BQ][PRM__BK], Di[PRM__BQ], L[PRM__BQ];
  float dqa[PRM__BQ * PRM__MAXD], Kt[PRM__MAXD * PRM__BK], Vt[PRM__MAXD * PRM__BK];
  int64_t lo[PRM__BQ];
  if (seg) seg += b * T;
  for (int64_t h = g * hpg; h < (g + 1) * hpg; h++) {
    int64_t base = (b * T * H + h) * D; /* row i of head h: base + i * qs */
    for (int64_t i0 = 0; i0 < T; i0 += PRM__BQ) {
      int64_t nq = T - i0 < PRM__BQ ? T - i0 : PRM__BQ;
      prm__seg_lo(lo, seg, i0, nq);
      for (int64_t a = 0; a < nq; a++) {
        int64_t r = base + (i0 + a) * qs;
        Di[a] = prm__dot(dout + r, out + r, D);
        L[a] = lse[(b * H + h) * T + i0 + a];
        memset(dqa + a * D, 0, (size_t)D * sizeof(float));
      }
      for (int64_t j0 = lo[0]; j0 < i0 + nq; j0 += PRM__BK) {
        int64_t nk = i0 + nq - j0 < PRM__BK ? i0 + nq - j0 : PRM__BK;
        prm__transpose(Kt, kb + j0 * ks, ks, nk, D);
        prm__transpose(Vt, vb + j0 * ks, ks, nk, D);
        /* Probabilities and score gradients of the block (causal: j <= i;
         * segments: j >= lo); zero outside [c0, n). */
        for (int64_t a = 0; a < nq; a++) {
          int64_t i = i0 + a, r = base + i * qs;
          int64_t n = i - j0 + 1 < nk ? i - j0 + 1 : nk; /* keys j <= i */
          int64_t c0 = lo[a] > j0 ? lo[a] - j0 : 0;
          if (c0 > nk) c0 = nk; /* the row's segment starts after this block */
          if (n < c0) n = c0;
          prm__scores(P[a], q + r, Kt, D);
          prm__scores(DS[a], dout + r, Vt, D);
          float La = L[a], Da = Di[a];
#pragma omp simd
          for (int64_t c = c0; c < n; c++) {
            P[a][c] = prm__exp_neg(P[a][c] * scale - La);
            DS[a][c] = P[a][c] * (DS[a][c] - Da) * scale;
          }
          for (int64_t c = 0; c < c0; c++) P[a][c] = DS[a][c] = 0;
          for (int64_t c = n; c < nk; c++) P[a][c] = DS[a][c] = 0;
        }
        /* dv_j += P^T dout and dk_j += DS^T q over the rows that see key j;
         * dq_i += DS k over the keys row i sees. */
        for (int64_t c = 0; c < nk; c++) {
          int64_t j = j0 + c, amin = j > i0 ? j - i0 : 0;
          if (amin >= nq) continue;
          int64_t r0 = base + (i0 + amin) * qs;
          prm__acc_rows(dvb + j * ks, &P[amin][c], PRM__BK, dout + r0, qs, nq - amin, D);
          prm__acc_rows(dkb + j * ks, &DS[amin][c], PRM__BK, q + r0, qs, nq - amin, D);
        }
        for (int64_t a = 0; a < nq; a++) {
          int64_t last = i0 + a - j0 + 1 < nk ? i0 + a - j0 + 1 : nk;
          int64_t c0 = lo[a] > j0 ? lo[a] - j0 : 0;
          if (last > c0)
            prm__acc_rows(dqa + a * D, DS[a] + c0, 1, kb + (j0 + c0) * ks, ks, last - c0, D);
        }
      }
      for (int64_t a = 0; a < nq; a++)
        memcpy(dq + base + (i0 + a) * qs, dqa + a * D, (size_t)D * sizeof(float));
    }
  }
}

void prm_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const float *out, const float *lse,
                            int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  prm_attention_backward_seg(dq, dk, dv, dout, q, k, v, out, lse, NULL, B, T, H, G, D);
}

void prm_attention_backward_seg(float *dq, float *dk, float *dv, const float *dout,
                                const float *q, const float *k, const float *v, const float *out,
                                const float *lse, const int32_t *seg, int64_t B, int64_t T,
                                int64_t H, int64_t G, int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0);
  if (D > PRM__MAXD) {
    prm__ref32_attention_backward_seg(dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
    return;
  }
  float scale = (float)(1.0 / sqrt((double)D));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t g = 0; g < G; g++)
      prm__attn_bwd_group(dq, dk, dv, dout, q, k, v, out, lse, seg, b, g, T, H, G, D, scale);
}
