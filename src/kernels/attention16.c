/* attention16.c - causal grouped-query attention with bf16 operands, the
 * bf16 twin of attention.c: the same flash-style blocks (32 queries x 64
 * keys, online softmax, lse kept, probabilities recomputed in backward, no
 * T x T buffer, segment ids), but every product - the scores Q K^T, P V,
 * dP = dO V^T, dS K and dS^T Q, P^T dO - takes bf16 operands and
 * accumulates in fp32 with the AVX-512 BF16 pair dot product vdpbf16ps
 * (two multiply-adds per fp32 lane per instruction). Softmax statistics
 * (max, sum, lse), D_i = dO_i . O_i, out and the gradients stay fp32; P
 * and dS are rounded to bf16 (nearest even) only as operands of the next
 * product, as flash-attention does on GPUs.
 *
 * vdpbf16ps multiplies pairs of bf16 along the reduction dimension, so the
 * operands are packed once per call (forward) or once per (sequence,
 * group) and head (backward), never per query:
 *  - scores layout, for products reducing over d with keys in the lanes:
 *    per 64-key block, D/2 rows of 64 words, word (p, c) = (K[c][2p],
 *    K[c][2p+1]); the query side is a natural row, read a word (a pair of
 *    d) at a time and broadcast;
 *  - pair-of-rows layout, for products reducing over rows (keys or
 *    queries) with d in the lanes: T/2 rows of D words, word (r, d) =
 *    (X[2r][d], X[2r+1][d]); the other side (P, dS, or P^T / dS^T, whose
 *    pairs run along the query rows) is rounded into pairs as it is made.
 * Rows past T are zero in every packed operand. The packed operands live
 * in PRM_MEM_SCRATCH allocations for the length of one call (so the memory
 * accounting's peak sees them): in forward as large as k and v in bf16,
 * in backward 5 x T x D bf16 values per thread.
 *
 * Two variants, chosen on every call by cpuid (as bf16.c and fast_adamw.c
 * choose): "avx512bf16" (vdpbf16ps) and "widen", which widens each pair to
 * two fp32 products (exact: a bf16 product fits an fp32 mantissa) and is
 * compiled for AVX-512, AVX2+FMA and plain x86-64 (GCC target_clones).
 * Both run the same code (attention16-body.h); they differ only in the
 * rounding of fp32 sums. Head sizes that are not a multiple of 16 or above
 * 256 widen the inputs and run the fp32 kernels.
 *
 * The reference twin, prm__ref_attention_*_bf16, runs the double reference
 * kernels on the widened bf16 inputs; tests/test-kernels-attn16.c checks
 * both variants against it and against each other. */
#include "kernels/kernels-impl.h"
#include "kernels/ref64.h"
#include "kernels/vec-impl.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

enum {
  PRM__A16_BQ = 32,    /* query rows per block */
  PRM__A16_BK = 64,    /* keys per block (four vectors of 16 lanes) */
  PRM__A16_MAXD = 256, /* larger head sizes take the fp32 kernels */
};

/* ------------------------------------------------------------------------ */
/* Packing and rounding                                                      */
/* ------------------------------------------------------------------------ */

typedef uint32_t prm__v16u __attribute__((vector_size(64)));

PRM__INLINE prm__v16u prm__ldi(const uint32_t *p) {
  prm__v16u v;
  memcpy(&v, p, sizeof v);
  return v;
}

static const prm__v16i prm__a16_iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static inline int64_t prm__a16_round(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The two halves of a pair widened to fp32 (exact). */
PRM__INLINE float prm__a16_lo(uint32_t w) { return prm__bf16_to_f32((prm_bf16_t)w); }
PRM__INLINE float prm__a16_hi(uint32_t w) { return prm__bf16_to_f32((prm_bf16_t)(w >> 16)); }

/* A row of 64 fp32 values as 32 pairs of consecutive elements. */
PRM__INLINE void prm__a16_round_row(uint32_t *dst, const float *src) {
#pragma omp simd
  for (int c = 0; c < PRM__A16_BK / 2; c++)
    dst[c] = (uint32_t)prm__bf16_from_f32(src[2 * c]) |
             (uint32_t)prm__bf16_from_f32(src[2 * c + 1]) << 16;
}

/* Two rows of 64 fp32 values as 64 pairs (r0[c], r1[c]). */
PRM__INLINE void prm__a16_round_pair_rows(uint32_t *dst, const float *r0, const float *r1) {
#pragma omp simd
  for (int c = 0; c < PRM__A16_BK; c++)
    dst[c] = (uint32_t)prm__bf16_from_f32(r0[c]) | (uint32_t)prm__bf16_from_f32(r1[c]) << 16;
}

/* Rows 0 .. n-1 of x (row stride xs elements, D each) into dst as D/2
 * words a row; rows n .. n4-1 zero. */
PRM__INLINE void prm__a16_rows(uint32_t *dst, const prm_bf16_t *x, int64_t xs, int64_t n,
                               int64_t n4, int64_t D) {
  for (int64_t a = 0; a < n; a++) memcpy(dst + a * (D / 2), x + a * xs, (size_t)D * 2);
  memset(dst + n * (D / 2), 0, (size_t)((n4 - n) * D * 2));
}

/* Rows 0 .. T-1 of x (row stride xs) in the scores layout, Tk rows (a
 * multiple of 64) with zeros past T. */
static void prm__a16_pack_scores(uint32_t *dst, const prm_bf16_t *x, int64_t xs, int64_t T,
                                 int64_t Tk, int64_t D) {
  int64_t D2 = D / 2;
  for (int64_t j0 = 0; j0 < Tk; j0 += PRM__A16_BK) {
    uint32_t *blk = dst + j0 * D2;
    for (int64_t c = 0; c < PRM__A16_BK; c++) {
      int64_t j = j0 + c;
      if (j >= T) {
        for (int64_t p = 0; p < D2; p++) blk[p * PRM__A16_BK + c] = 0;
        continue;
      }
      const prm_bf16_t *row = x + j * xs;
      for (int64_t p = 0; p < D2; p++)
        blk[p * PRM__A16_BK + c] = (uint32_t)row[2 * p] | (uint32_t)row[2 * p + 1] << 16;
    }
  }
}

/* Rows 0 .. T-1 of x (row stride xs) in the pair-of-rows layout, Tr/2 rows
 * of D words (Tr even) with zeros past T. */
static void prm__a16_pack_pairs(uint32_t *dst, const prm_bf16_t *x, int64_t xs, int64_t T,
                                int64_t Tr, int64_t D) {
  for (int64_t r = 0; r < Tr / 2; r++) {
    const prm_bf16_t *x0 = 2 * r < T ? x + 2 * r * xs : NULL;
    const prm_bf16_t *x1 = 2 * r + 1 < T ? x + (2 * r + 1) * xs : NULL;
    uint32_t *o = dst + r * D;
    if (x0 && x1) {
      for (int64_t d = 0; d < D; d++) o[d] = (uint32_t)x0[d] | (uint32_t)x1[d] << 16;
    } else {
      for (int64_t d = 0; d < D; d++) o[d] = x0 ? x0[d] : 0;
    }
  }
}

/* ------------------------------------------------------------------------ */
/* The two variants                                                          */
/* ------------------------------------------------------------------------ */

/* avx512bf16: one vdpbf16ps per 16 lanes x 2 products. */
#define PRM__A16_TARGET "arch=x86-64-v4,avx512bf16"
typedef prm__v16u prm__a16n_b;
__attribute__((target(PRM__A16_TARGET), always_inline)) static inline prm__v16
prm__a16n_dp(prm__v16 acc, uint32_t a, prm__v16u b) {
  __m512i bc = _mm512_set1_epi32((int)a);
  return (prm__v16)_mm512_dpbf16_ps((__m512)acc, (__m512bh)bc, (__m512bh)(__m512i)b);
}

#define PRM__A16(name) prm__a16n_##name
#define PRM__A16_FN __attribute__((target(PRM__A16_TARGET)))
#define PRM__A16_INL PRM__A16_FN PRM__INLINE
#define prm__a16b prm__a16n_b
#define PRM__A16_PREP(raw) (raw)
#define PRM__A16_DP(acc, pair, b) prm__a16n_dp(acc, pair, b)
#include "kernels/attention16-body.h"

/* widen: the even and odd halves of each packed pair as two fp32 vectors,
 * prepared once per load and shared by the four rows of a tile. */
typedef struct {
  prm__v16 lo, hi;
} prm__a16w_b;

PRM__INLINE prm__a16w_b prm__a16w_prep(prm__v16u raw) {
  prm__a16w_b b = {(prm__v16)(raw << 16), (prm__v16)(raw & 0xffff0000u)};
  return b;
}

PRM__INLINE prm__v16 prm__a16w_dp(prm__v16 acc, uint32_t a, prm__a16w_b b) {
  return acc + prm__a16_lo(a) * b.lo + prm__a16_hi(a) * b.hi;
}

#define PRM__A16(name) prm__a16w_##name
#define PRM__A16_FN PRM__CLONES
#define PRM__A16_INL PRM__INLINE
#define prm__a16b prm__a16w_b
#define PRM__A16_PREP(raw) prm__a16w_prep(raw)
#define PRM__A16_DP(acc, pair, b) prm__a16w_dp(acc, pair, b)
#include "kernels/attention16-body.h"

typedef void (*prm__a16_fwd_fn)(float *out, float *lse, const prm_bf16_t *q, int64_t qs,
                                const uint32_t *ka, const uint32_t *vb, const int32_t *seg,
                                int64_t i0, int64_t nq, int64_t D, float scale);
typedef void (*prm__a16_bwd_fn)(float *dq, float *dk, float *dv, const prm_bf16_t *dout,
                                const prm_bf16_t *q, const prm_bf16_t *k, const prm_bf16_t *v,
                                const float *out, const float *lse, const int32_t *seg, int64_t b,
                                int64_t g, int64_t T, int64_t H, int64_t G, int64_t D,
                                float scale, uint32_t *buf);

typedef struct {
  const char *name;
  prm__a16_fwd_fn fwd;
  prm__a16_bwd_fn bwd;
} prm__a16_isa_t;

static const prm__a16_isa_t prm__a16_variants[] = {
    {"avx512bf16", prm__a16n_fwd_block, prm__a16n_bwd_group},
    {"widen", prm__a16w_fwd_block, prm__a16w_bwd_group},
};

static int prm__a16_native(void) {
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512f");
}

/* The variant named isa (NULL: this CPU's best); NULL when it cannot run. */
static const prm__a16_isa_t *prm__a16_pick(const char *isa) {
  if (!isa) return &prm__a16_variants[prm__a16_native() ? 0 : 1];
  if (!strcmp(isa, "avx512bf16")) return prm__a16_native() ? &prm__a16_variants[0] : NULL;
  if (!strcmp(isa, "widen")) return &prm__a16_variants[1];
  return NULL;
}

const char *prm_attention_bf16_isa(void) { return prm__a16_pick(NULL)->name; }

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

static int prm__a16_fast(int64_t D) { return D % 16 == 0 && D <= PRM__A16_MAXD; }

static float *prm__a16_widen(const prm_bf16_t *x, int64_t n) {
  float *w = prm_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  prm_bf16_to_f32(w, x, n);
  return w;
}

int prm__attention_forward_bf16_isa(const char *isa, float *out, float *lse, const prm_bf16_t *q,
                                    const prm_bf16_t *k, const prm_bf16_t *v, const int32_t *seg,
                                    int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0);
  const prm__a16_isa_t *f = prm__a16_pick(isa);
  if (!f) return PRM_EINVAL;
  if (!prm__a16_fast(D)) {
    float *qf = prm__a16_widen(q, B * T * H * D), *kf = prm__a16_widen(k, B * T * G * D),
          *vf = prm__a16_widen(v, B * T * G * D);
    prm_attention_forward_seg(out, lse, qf, kf, vf, seg, B, T, H, G, D);
    free(qf), free(kf), free(vf);
    return 0;
  }
  int64_t hpg = H / G, nblk = (T + PRM__A16_BQ - 1) / PRM__A16_BQ;
  int64_t Tk = prm__a16_round(T, PRM__A16_BK), per = Tk * D / 2; /* words per (b, g) */
  float scale = (float)(1.0 / sqrt((double)D));
  /* Packed keys and values of every (sequence, group), shared by all query
   * heads and blocks: as large as k and v themselves. */
  size_t bytes = (size_t)(2 * B * G * per) * sizeof(uint32_t);
  uint32_t *ka = prm_mem_alloc(PRM_MEM_SCRATCH, bytes), *vb = ka + B * G * per;
  PRM_ASSERT(ka); /* out of memory */
#pragma omp parallel
  {
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
      for (int64_t g = 0; g < G; g++) {
        int64_t o = (b * G + g) * per, src = (b * T * G + g) * D;
        prm__a16_pack_scores(ka + o, k + src, G * D, T, Tk, D);
        prm__a16_pack_pairs(vb + o, v + src, G * D, T, Tk, D);
      }
    /* Later blocks see more keys: blocks dealt round robin balance that. */
#pragma omp for collapse(3) schedule(static, 1)
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t blk = 0; blk < nblk; blk++) {
          int64_t i0 = blk * PRM__A16_BQ, nq = T - i0 < PRM__A16_BQ ? T - i0 : PRM__A16_BQ;
          int64_t base = (b * T * H + h) * D, o = (b * G + h / hpg) * per;
          f->fwd(out + base, lse + (b * H + h) * T, q + base, H * D, ka + o, vb + o,
                 seg ? seg + b * T : NULL, i0, nq, D, scale);
        }
  }
  prm_mem_free(PRM_MEM_SCRATCH, ka, bytes);
  return 0;
}

int prm__attention_backward_bf16_isa(const char *isa, float *dq, float *dk, float *dv,
                                     const prm_bf16_t *dout, const prm_bf16_t *q,
                                     const prm_bf16_t *k, const prm_bf16_t *v, const float *out,
                                     const float *lse, const int32_t *seg, int64_t B, int64_t T,
                                     int64_t H, int64_t G, int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0);
  const prm__a16_isa_t *f = prm__a16_pick(isa);
  if (!f) return PRM_EINVAL;
  if (!prm__a16_fast(D)) {
    float *qf = prm__a16_widen(q, B * T * H * D), *kf = prm__a16_widen(k, B * T * G * D),
          *vf = prm__a16_widen(v, B * T * G * D), *df = prm__a16_widen(dout, B * T * H * D);
    prm_attention_backward_seg(dq, dk, dv, df, qf, kf, vf, out, lse, seg, B, T, H, G, D);
    free(qf), free(kf), free(vf), free(df);
    return 0;
  }
  float scale = (float)(1.0 / sqrt((double)D));
  /* Per thread: keys in both layouts and values in the scores layout (one
   * group), queries and dO in pairs of rows (one head). */
  int64_t Tk = prm__a16_round(T, PRM__A16_BK), Tq = prm__a16_round(T, PRM__A16_BQ);
  size_t words = (size_t)((3 * Tk + 2 * Tq) * (D / 2));
#pragma omp parallel
  {
    uint32_t *buf = prm_mem_alloc(PRM_MEM_SCRATCH, words * sizeof(uint32_t));
    PRM_ASSERT(buf); /* out of memory */
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
      for (int64_t g = 0; g < G; g++)
        f->bwd(dq, dk, dv, dout, q, k, v, out, lse, seg, b, g, T, H, G, D, scale, buf);
    prm_mem_free(PRM_MEM_SCRATCH, buf, words * sizeof(uint32_t));
  }
  return 0;
}

void prm_attention_forward_bf16(float *out, float *lse, const prm_bf16_t *q, const prm_bf16_t *k,
                                const prm_bf16_t *v, const int32_t *seg, int64_t B, int64_t T,
                                int64_t H, int64_t G, int64_t D) {
  prm__attention_forward_bf16_isa(NULL, out, lse, q, k, v, seg, B, T, H, G, D);
}

void prm_attention_backward_bf16(float *dq, float *dk, float *dv, const prm_bf16_t *dout,
                                 const prm_bf16_t *q, const prm_bf16_t *k, const prm_bf16_t *v,
                                 const float *out, const float *lse, const int32_t *seg, int64_t B,
                                 int64_t T, int64_t H, int64_t G, int64_t D) {
  prm__attention_backward_bf16_isa(NULL, dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
}

/* ------------------------------------------------------------------------ */
/* Reference twin                                                            */
/* ------------------------------------------------------------------------ */

static double *prm__a16_dwiden(const prm_bf16_t *x, int64_t n) {
  double *w = prm_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  for (int64_t i = 0; i < n; i++) w[i] = prm__a16_lo(x[i]);
  return w;
}

static double *prm__a16_dcopy(const float *x, int64_t n) {
  double *w = prm_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  for (int64_t i = 0; i < n; i++) w[i] = x[i];
  return w;
}

static void prm__a16_narrow(float *dst, double *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = (float)src[i];
  free(src);
}

void prm__ref_attention_forward_bf16(float *out, float *lse, const prm_bf16_t *q,
                                     const prm_bf16_t *k, const prm_bf16_t *v, const int32_t *seg,
                                     int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  int64_t nq = B * T * H * D, nk = B * T * G * D, nl = B * H * T;
  double *qd = prm__a16_dwiden(q, nq), *kd = prm__a16_dwiden(k, nk), *vd = prm__a16_dwiden(v, nk);
  double *od = prm_xmalloc((size_t)nq * sizeof(double)),
         *ld = prm_xmalloc((size_t)nl * sizeof(double));
  prm_ref64_attention_forward_seg(od, ld, qd, kd, vd, seg, B, T, H, G, D);
  prm__a16_narrow(out, od, nq);
  prm__a16_narrow(lse, ld, nl);
  free(qd), free(kd), free(vd);
}

void prm__ref_attention_backward_bf16(float *dq, float *dk, float *dv, const prm_bf16_t *dout,
                                      const prm_bf16_t *q, const prm_bf16_t *k,
                                      const prm_bf16_t *v, const float *out, const float *lse,
                                      const int32_t *seg, int64_t B, int64_t T, int64_t H,
                                      int64_t G, int64_t D) {
  int64_t nq = B * T * H * D, nk = B * T * G * D, nl = B * H * T;
  double *qd = prm__a16_dwiden(q, nq), *kd = prm__a16_dwiden(k, nk), *vd = prm__a16_dwiden(v, nk),
         *dd = prm__a16_dwiden(dout, nq), *od = prm__a16_dcopy(out, nq),
         *ld = prm__a16_dcopy(lse, nl);
  double *dqd = prm_xmalloc((size_t)nq * sizeof(double)),
         *dkd = prm_xmalloc((size_t)nk * sizeof(double)),
         *dvd = prm_xmalloc((size_t)nk * sizeof(double));
  prm_ref64_attention_backward_seg(dqd, dkd, dvd, dd, qd, kd, vd, od, ld, seg, B, T, H, G, D);
  prm__a16_narrow(dq, dqd, nq);
  prm__a16_narrow(dk, dkd, nk);
  prm__a16_narrow(dv, dvd, nk);
  free(qd), free(kd), free(vd), free(dd), free(od), free(ld);
}
