/* attention.c - causal grouped-query attention in fp32, flash style and
 * vectorised. The forward keeps only out and the per-row log-sum-exp (an
 * online softmax over blocks of keys); the backward recomputes the
 * probabilities block by block (BQ queries x BK keys at a time, in small
 * stack buffers); no T x T buffer exists anywhere. Packed sequences pass
 * segment ids: each query row then starts at its segment's first key, so
 * blocks before it are skipped rather than masked.
 *
 * A block's scores are kept transposed, keys by query rows, so that every
 * step of the softmax (the mask, the row maximum, the exponentials, the row
 * sums) runs along the 32 query rows as two 16-lane vectors, and the only
 * transposition is of the query block (and, in the backward, its output
 * gradient), once per query block rather than once per key block. The
 * products are small matrix products run by two register-blocked
 * micro-kernels (eight keys x 32 rows; four rows x 64 lanes of the head),
 * each loaded value feeding several FMA chains.
 *
 * The workers are compiled for AVX-512, AVX2+FMA and plain x86-64 and the
 * best one is picked at load time by cpuid (GCC target_clones). The
 * reference twin is the fp32 instantiation of ref-impl.h;
 * tests/test-kernels.c checks these against it and against the
 * double-precision reference. bf16 mixed precision runs blocks of bf16
 * operands with vdpbf16ps products in attention16.c. */
#include "kernels/kernels-impl.h"
#include "kernels/vec-impl.h"

#include <math.h>
#include <string.h>

enum {
  PRM__BQ = 32,    /* query rows per block: two 16-lane vectors */
  PRM__BK = 64,    /* keys per block */
  PRM__MAXD = 256, /* larger head sizes take the reference path */
};
_Static_assert(PRM__BQ == 32, "prm__scores8 holds a block's 32 query rows in two vectors");
_Static_assert(PRM__BK % 8 == 0, "key blocks hold whole groups of eight keys");

static inline __attribute__((always_inline)) float prm__dot(const float *restrict a,
                                                            const float *restrict b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* Copies n rows of a (rows, D) block, row stride `stride`, into dst as
 * (D, BQ), rows n..BQ zero. */
PRM__INLINE void prm__transpose_rows(float *restrict dst, const float *restrict src,
                                     int64_t stride, int64_t n, int64_t D) {
  for (int64_t d = 0; d < D; d++) {
    float *row = dst + d * PRM__BQ;
#pragma omp simd
    for (int64_t r = 0; r < PRM__BQ; r++) row[r] = r < n ? src[r * stride + d] : 0.0f;
  }
}

/* st[c][r] = sum_d k[c][d] xt[d][r] for eight keys c < 8 and the 32 rows r
 * of a transposed block xt (D, BQ): sixteen accumulators, each summed over
 * d in order; a loaded pair of row vectors feeds sixteen FMAs. */
PRM__INLINE void prm__scores8(float (*restrict st)[PRM__BQ], const float *const k[8],
                              const float *restrict xt, int64_t D) {
  /* Written out: GCC keeps a loop's array of accumulators in memory. */
  prm__v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
  prm__v16 b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0}, b4 = {0}, b5 = {0}, b6 = {0}, b7 = {0};
  const float *k0 = k[0], *k1 = k[1], *k2 = k[2], *k3 = k[3], *k4 = k[4], *k5 = k[5],
              *k6 = k[6], *k7 = k[7];
  for (int64_t d = 0; d < D; d++) {
    prm__v16 x0 = prm__ld(xt + d * PRM__BQ), x1 = prm__ld(xt + d * PRM__BQ + 16);
    float w;
#define PRM__S8(i) (w = k##i[d], a##i += w * x0, b##i += w * x1)
    PRM__S8(0), PRM__S8(1), PRM__S8(2), PRM__S8(3), PRM__S8(4), PRM__S8(5), PRM__S8(6),
        PRM__S8(7);
#undef PRM__S8
  }
#define PRM__S8(i) (prm__st(st[i], a##i), prm__st(st[i] + 16, b##i))
  PRM__S8(0), PRM__S8(1), PRM__S8(2), PRM__S8(3), PRM__S8(4), PRM__S8(5), PRM__S8(6), PRM__S8(7);
#undef PRM__S8
}

/* The scores of keys [0, nk) of a block, row j0 + c of keys at kb + (j0 +
 * c) * ks, against a transposed query block; rows nk.. of st up to the
 * next multiple of eight hold scores of a repeated key and are not used. */
PRM__INLINE void prm__scores_block(float (*restrict st)[PRM__BQ], const float *kb, int64_t ks,
                                   int64_t nk, const float *restrict xt, int64_t D) {
  for (int64_t c0 = 0; c0 < nk; c0 += 8) {
    const float *k[8];
    for (int c = 0; c < 8; c++) k[c] = kb + (c0 + c < nk ? c0 + c : nk - 1) * ks;
    prm__scores8(st + c0, k, xt, D);
  }
}

/* y[r][0..D) += sum over t in [t0, t1) of w[r*wr + t*wt] * x[t*xs + 0..D),
 * for the four rows r < 4: the head dimension in pieces of 64 lanes
 * (sixteen accumulators), then 32, 16 and single lanes, each accumulator
 * summed over t in order. Several y may be the same scratch row; none may
 * overlap x or w. */
PRM__INLINE void prm__mm4(float *const y[4], const float *w, int64_t wr, int64_t wt,
                          const float *x, int64_t xs, int64_t t0, int64_t t1, int64_t D) {
  const float *w0 = w, *w1 = w + wr, *w2 = w + 2 * wr, *w3 = w + 3 * wr;
  int64_t d0 = 0;
  for (; d0 + 64 <= D; d0 += 64) {
    prm__v16 a[4][4];
    for (int r = 0; r < 4; r++)
      for (int u = 0; u < 4; u++) a[r][u] = prm__ld(y[r] + d0 + 16 * u);
    for (int64_t t = t0; t < t1; t++) {
      const float *xt = x + t * xs + d0;
      prm__v16 v0 = prm__ld(xt), v1 = prm__ld(xt + 16), v2 = prm__ld(xt + 32),
               v3 = prm__ld(xt + 48);
      float c = w0[t * wt];
      a[0][0] += c * v0, a[0][1] += c * v1, a[0][2] += c * v2, a[0][3] += c * v3;
      c = w1[t * wt];
      a[1][0] += c * v0, a[1][1] += c * v1, a[1][2] += c * v2, a[1][3] += c * v3;
      c = w2[t * wt];
      a[2][0] += c * v0, a[2][1] += c * v1, a[2][2] += c * v2, a[2][3] += c * v3;
      c = w3[t * wt];
      a[3][0] += c * v0, a[3][1] += c * v1, a[3][2] += c * v2, a[3][3] += c * v3;
    }
    for (int r = 0; r < 4; r++)
      for (int u = 0; u < 4; u++) prm__st(y[r] + d0 + 16 * u, a[r][u]);
  }
  for (; d0 + 32 <= D; d0 += 32) {
    prm__v16 a[4][2];
    for (int r = 0; r < 4; r++)
      for (int u = 0; u < 2; u++) a[r][u] = prm__ld(y[r] + d0 + 16 * u);
    for (int64_t t = t0; t < t1; t++) {
      const float *xt = x + t * xs + d0;
      prm__v16 v0 = prm__ld(xt), v1 = prm__ld(xt + 16);
      float c = w0[t * wt];
      a[0][0] += c * v0, a[0][1] += c * v1;
      c = w1[t * wt];
      a[1][0] += c * v0, a[1][1] += c * v1;
      c = w2[t * wt];
      a[2][0] += c * v0, a[2][1] += c * v1;
      c = w3[t * wt];
      a[3][0] += c * v0, a[3][1] += c * v1;
    }
    for (int r = 0; r < 4; r++)
      for (int u = 0; u < 2; u++) prm__st(y[r] + d0 + 16 * u, a[r][u]);
  }
  for (; d0 + 16 <= D; d0 += 16) {
    prm__v16 a0 = prm__ld(y[0] + d0), a1 = prm__ld(y[1] + d0), a2 = prm__ld(y[2] + d0),
             a3 = prm__ld(y[3] + d0);
    for (int64_t t = t0; t < t1; t++) {
      prm__v16 v = prm__ld(x + t * xs + d0);
      a0 += w0[t * wt] * v, a1 += w1[t * wt] * v, a2 += w2[t * wt] * v, a3 += w3[t * wt] * v;
    }
    prm__st(y[0] + d0, a0), prm__st(y[1] + d0, a1), prm__st(y[2] + d0, a2),
        prm__st(y[3] + d0, a3);
  }
  for (; d0 < D; d0++)
    for (int r = 0; r < 4; r++) {
      const float *wrow = w + r * wr;
      float acc = y[r][d0];
      for (int64_t t = t0; t < t1; t++) acc += wrow[t * wt] * x[t * xs + d0];
      y[r][d0] = acc;
    }
}

/* Which keys of the block starting at j0 row r of a query block sees, as
 * block columns [clo[r], chi[r]] (int32 so the mask vectorises with the
 * float lanes): causal up to key pos0 + i0 + r, from its segment's first
 * key lo[r]; rows nq.. see nothing. */
PRM__INLINE void prm__block_cols(int32_t *clo, int32_t *chi, const int64_t *lo, int64_t i0,
                                 int64_t nq, int64_t pos0, int64_t j0) {
  for (int64_t r = 0; r < PRM__BQ; r++) {
    clo[r] = r < nq ? (int32_t)(lo[r] - j0) : 1;
    chi[r] = r < nq ? (int32_t)(pos0 + i0 + r - j0) : 0;
  }
}

/* y[a] += sum over the keys c < nk that row a sees of w[c][a] * x[c * xs],
 * for the rows a < nq of a query block, four at a time, each group over
 * the keys any of its rows sees (w is zero at the others). w is a block
 * kept transposed (keys by rows); rows nq.. of y up to the next multiple of
 * four are scratch. P V in the forward, dS K in the backward. */
PRM__INLINE void prm__rows_times_block(float (*y)[PRM__MAXD], float (*w)[PRM__BQ],
                                       const float *x, int64_t xs, const int32_t *clo,
                                       const int32_t *chi, int64_t nq, int64_t nk, int64_t D) {
  for (int64_t a0 = 0; a0 < nq; a0 += 4) {
    float *ya[4] = {y[a0], y[a0 + 1], y[a0 + 2], y[a0 + 3]};
    int64_t t0 = nk, t1 = 0;
    for (int64_t r = a0; r < a0 + 4 && r < nq; r++) {
      int64_t lo_c = clo[r] > 0 ? clo[r] : 0, hi_c = chi[r] + 1 < nk ? chi[r] + 1 : nk;
      if (hi_c > lo_c) t0 = lo_c < t0 ? lo_c : t0, t1 = hi_c > t1 ? hi_c : t1;
    }
    if (t1 > t0) prm__mm4(ya, &w[0][a0], 1, PRM__BQ, x, xs, t0, t1, D);
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
  float Qt[PRM__MAXD * PRM__BQ], st[PRM__BK][PRM__BQ];
  float acc[PRM__BQ][PRM__MAXD], m[PRM__BQ], l[PRM__BQ], bm[PRM__BQ], sum[PRM__BQ];
  int64_t lo[PRM__BQ];
  int32_t clo[PRM__BQ], chi[PRM__BQ];
  prm__seg_lo(lo, seg, i0, nq);
  prm__transpose_rows(Qt, q + i0 * qs, qs, nq, D);
  for (int64_t r = 0; r < PRM__BQ; r++) {
    m[r] = -INFINITY;
    l[r] = 0;
    memset(acc[r], 0, (size_t)D * sizeof(float)); /* rows nq.. too: they are scratch */
  }
  int64_t nkeys = pos0 + i0 + nq; /* keys the last row sees */
  for (int64_t j0 = lo[0]; j0 < nkeys; j0 += PRM__BK) {
    int64_t nk = nkeys - j0 < PRM__BK ? nkeys - j0 : PRM__BK;
    prm__scores_block(st, kb + j0 * ks, ks, nk, Qt, D);
    prm__block_cols(clo, chi, lo, i0, nq, pos0, j0);
    /* Scale and mask (-inf), and each row's maximum over the block. */
    for (int64_t r = 0; r < PRM__BQ; r++) bm[r] = -INFINITY;
    for (int64_t c = 0; c < nk; c++) {
      float *x = st[c];
#pragma omp simd
      for (int64_t r = 0; r < PRM__BQ; r++) {
        float s = c >= clo[r] && c <= chi[r] ? x[r] * scale : -INFINITY;
        x[r] = s;
        bm[r] = s > bm[r] ? s : bm[r];
      }
    }
    for (int64_t r = 0; r < nq; r++) prm__softmax_rescale(&m[r], &l[r], acc[r], D, bm[r]);
    /* Probabilities under the running maximum; masked keys exactly 0. */
    for (int64_t r = 0; r < PRM__BQ; r++) sum[r] = 0;
    for (int64_t c = 0; c < nk; c++) {
      float *x = st[c];
#pragma omp simd
      for (int64_t r = 0; r < PRM__BQ; r++) {
        float p = x[r] == -INFINITY ? 0.0f : prm__exp_neg(x[r] - m[r]);
        x[r] = p;
        sum[r] += p;
      }
    }
    for (int64_t r = 0; r < nq; r++) l[r] += sum[r];
    prm__rows_times_block(acc, st, vb + j0 * ks, ks, clo, chi, nq, nk, D); /* acc += P V */
  }
  for (int64_t a = 0; a < nq; a++) {
    float inv = 1.0f / l[a], *o = out + (i0 + a) * qs;
#pragma omp simd
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
  /* P and dS of a block, transposed (keys by query rows), as in the
   * forward; Qt and Ot are the query block and its output gradient
   * transposed once per query block. */
  float P[PRM__BK][PRM__BQ], DS[PRM__BK][PRM__BQ], Di[PRM__BQ], L[PRM__BQ];
  float dqa[PRM__BQ][PRM__MAXD], Qt[PRM__MAXD * PRM__BQ], Ot[PRM__MAXD * PRM__BQ];
  float spare[PRM__MAXD];
  int64_t lo[PRM__BQ];
  int32_t clo[PRM__BQ], chi[PRM__BQ];
  memset(spare, 0, (size_t)D * sizeof(float));
  if (seg) seg += b * T;
  for (int64_t h = g * hpg; h < (g + 1) * hpg; h++) {
    int64_t base = (b * T * H + h) * D; /* row i of head h: base + i * qs */
    for (int64_t i0 = 0; i0 < T; i0 += PRM__BQ) {
      int64_t nq = T - i0 < PRM__BQ ? T - i0 : PRM__BQ;
      const float *qb = q + base + i0 * qs, *ob = dout + base + i0 * qs;
      prm__seg_lo(lo, seg, i0, nq);
      prm__transpose_rows(Qt, qb, qs, nq, D);
      prm__transpose_rows(Ot, ob, qs, nq, D);
      for (int64_t r = 0; r < PRM__BQ; r++) {
        int64_t row = base + (i0 + r) * qs;
        Di[r] = r < nq ? prm__dot(dout + row, out + row, D) : 0;
        L[r] = r < nq ? lse[(b * H + h) * T + i0 + r] : 0;
        memset(dqa[r], 0, (size_t)D * sizeof(float)); /* rows nq.. are scratch */
      }
      for (int64_t j0 = lo[0]; j0 < i0 + nq; j0 += PRM__BK) {
        int64_t nk = i0 + nq - j0 < PRM__BK ? i0 + nq - j0 : PRM__BK;
        prm__scores_block(P, kb + j0 * ks, ks, nk, Qt, D);
        prm__scores_block(DS, vb + j0 * ks, ks, nk, Ot, D);
        prm__block_cols(clo, chi, lo, i0, nq, 0, j0);
        /* Probabilities and score gradients (causal: j <= i; segments:
         * j >= lo); exactly zero outside, and for keys nk.. of the last
         * group of eight. */
        int64_t nk8 = (nk + 7) / 8 * 8;
        for (int64_t c = 0; c < nk8; c++) {
          float *p = P[c], *ds = DS[c];
#pragma omp simd
          for (int64_t r = 0; r < PRM__BQ; r++) {
            int vis = c < nk && c >= clo[r] && c <= chi[r];
            float pr = vis ? prm__exp_neg(p[r] * scale - L[r]) : 0.0f;
            ds[r] = pr * (ds[r] - Di[r]) * scale;
            p[r] = pr;
          }
        }
        /* dv_j += P^T dout and dk_j += dS^T q over the rows that see key j,
         * four keys at a time (keys nk.. accumulate zeros into `spare`). */
        for (int64_t c = 0; c < nk; c += 4) {
          int64_t j = j0 + c, amin = j > i0 ? j - i0 : 0;
          if (amin >= nq) break;
          float *yv[4], *yk[4];
          for (int u = 0; u < 4; u++) {
            yv[u] = c + u < nk ? dvb + (j + u) * ks : spare;
            yk[u] = c + u < nk ? dkb + (j + u) * ks : spare;
          }
          prm__mm4(yv, P[c], PRM__BQ, 1, ob, qs, amin, nq, D);
          prm__mm4(yk, DS[c], PRM__BQ, 1, qb, qs, amin, nq, D);
        }
        /* dq_i += dS k over the keys row i sees. */
        prm__rows_times_block(dqa, DS, kb + j0 * ks, ks, clo, chi, nq, nk, D);
      }
      for (int64_t a = 0; a < nq; a++)
        memcpy(dq + base + (i0 + a) * qs, dqa[a], (size_t)D * sizeof(float));
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
