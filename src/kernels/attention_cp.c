/* attention_cp.c - the pieces of ring attention (context parallel,
 * src/model/cp.c): causal grouped-query attention of a rank's query rows
 * against one block of keys and values at a time, where each row and each
 * key carries its position in the whole sequence, so that any two chunks of
 * a sequence can meet. The forward of a block gives each row its partial
 * output and log-sum-exp and merges them into the running ones (the online
 * softmax across blocks); the backward of a block takes the final
 * log-sum-exp and the rows' dO.O and adds the block's share to dq, dk, dv,
 * which is exactly the whole backward once every block has been seen.
 *
 * Plain loops, one (sequence, head) row at a time with O(D) scratch per
 * thread: the exchange of blocks between ranks, not this arithmetic, is
 * what context parallelism is about, and the one-rank kernels
 * (attention.c) stay the fast path. Positions are increasing within a
 * block (a rank's chunks are in sequence order), so the keys a row sees
 * are a prefix of the block, found by binary search. */
#include "kernels/kernels-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Keys of kpos (n, increasing) at or before position p. */
static int64_t prm__visible(const int32_t *kpos, int64_t n, int32_t p) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (kpos[mid] <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static inline float prm__cp_dot(const float *restrict a, const float *restrict b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* o (D), lse <- the merge of (o, lse) and (o2, lse2): the softmax over the
 * union of both rows' keys. lse -inf: no keys yet. */
static inline void prm__merge_row(float *o, float *lse, const float *o2, float lse2, int64_t D) {
  if (lse2 == -INFINITY) return;
  if (*lse == -INFINITY) {
    memcpy(o, o2, (size_t)D * sizeof(float));
    *lse = lse2;
    return;
  }
  float mx = *lse > lse2 ? *lse : lse2;
  float a = expf(*lse - mx), b = expf(lse2 - mx), s = a + b;
  float wa = a / s, wb = b / s;
#pragma omp simd
  for (int64_t d = 0; d < D; d++) o[d] = o[d] * wa + o2[d] * wb;
  *lse = mx + logf(s);
}

void prm_attention_merge(float *out, float *lse, const float *out2, const float *lse2, int64_t B,
                         int64_t T, int64_t H, int64_t D) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < T; i++) {
        int64_t row = ((b * T + i) * H + h) * D, l = (b * H + h) * T + i;
        prm__merge_row(out + row, lse + l, out2 + row, lse2[l], D);
      }
}

void prm_attention_part_forward(float *out, float *lse, const float *q, const float *k,
                                const float *v, const int32_t *qpos, const int32_t *kpos,
                                int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G,
                                int64_t D, int merge) {
  PRM_ASSERT(G > 0 && H % G == 0);
  int64_t hpg = H / G;
  float scale = (float)(1.0 / sqrt((double)D));
#pragma omp parallel
  {
    float *acc = malloc((size_t)D * sizeof(float));
    PRM_ASSERT(acc);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++) {
        int64_t g = h / hpg;
        for (int64_t i = 0; i < Tq; i++) {
          const float *qi = q + ((b * Tq + i) * H + h) * D;
          float *oi = out + ((b * Tq + i) * H + h) * D, *li = lse + (b * H + h) * Tq + i;
          int64_t n = prm__visible(kpos, Tk, qpos[i]);
          if (!merge) {
            memset(oi, 0, (size_t)D * sizeof(float));
            *li = -INFINITY;
          }
          if (n == 0) continue;
          /* Online softmax over the visible keys: running max mx, sum l. */
          float mx = -INFINITY, l = 0;
          memset(acc, 0, (size_t)D * sizeof(float));
          for (int64_t j = 0; j < n; j++) {
            const float *kj = k + ((b * Tk + j) * G + g) * D, *vj = v + ((b * Tk + j) * G + g) * D;
            float s = prm__cp_dot(qi, kj, D) * scale;
            if (s > mx) {
              float r = expf(mx - s); /* 0 on the first key */
              l *= r;
#pragma omp simd
              for (int64_t d = 0; d < D; d++) acc[d] *= r;
              mx = s;
            }
            float p = expf(s - mx);
            l += p;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) acc[d] += p * vj[d];
          }
          float inv = 1.0f / l;
#pragma omp simd
          for (int64_t d = 0; d < D; d++) acc[d] *= inv;
          prm__merge_row(oi, li, acc, mx + logf(l), D);
        }
      }
    free(acc);
  }
}

void prm_attention_rowdot(float *di, const float *dout, const float *out, int64_t B, int64_t T,
                          int64_t H, int64_t D) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < T; i++) {
        int64_t row = ((b * T + i) * H + h) * D;
        di[(b * H + h) * T + i] = prm__cp_dot(dout + row, out + row, D);
      }
}

void prm_attention_part_backward(float *dq, float *dk, float *dv, const float *dout,
                                 const float *q, const float *k, const float *v, const float *lse,
                                 const float *di, const int32_t *qpos, const int32_t *kpos,
                                 int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G,
                                 int64_t D) {
  PRM_ASSERT(G > 0 && H % G == 0);
  int64_t hpg = H / G;
  float scale = (float)(1.0 / sqrt((double)D));
  /* One (sequence, group) per iteration: the only writer of its dk/dv rows
   * and of its heads' dq rows, in a fixed order (deterministic). */
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t g = 0; g < G; g++)
      for (int64_t h = g * hpg; h < (g + 1) * hpg; h++)
        for (int64_t i = 0; i < Tq; i++) {
          int64_t n = prm__visible(kpos, Tk, qpos[i]);
          if (n == 0) continue;
          int64_t row = ((b * Tq + i) * H + h) * D;
          const float *qi = q + row, *oi = dout + row;
          float *dqi = dq + row, L = lse[(b * H + h) * Tq + i], Di = di[(b * H + h) * Tq + i];
          for (int64_t j = 0; j < n; j++) {
            int64_t kr = ((b * Tk + j) * G + g) * D;
            const float *kj = k + kr, *vj = v + kr;
            float *dkj = dk + kr, *dvj = dv + kr;
            float p = expf(prm__cp_dot(qi, kj, D) * scale - L);
            float ds = p * (prm__cp_dot(oi, vj, D) - Di) * scale;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) {
              dqi[d] += ds * kj[d];
              dkj[d] += ds * qi[d];
              dvj[d] += p * oi[d];
            }
          }
        }
}
