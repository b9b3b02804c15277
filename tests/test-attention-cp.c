/* test-attention-cp.c - the pieces of ring attention (context parallel,
 * src/kernels/attention_cp.c) against the one-rank kernels
 * (prm_attention_forward/_backward, themselves checked against a double
 * reference and finite differences in test-kernels.c). The ring of
 * src/model/cp.c is simulated in one process: each of N ranks holds chunks
 * r and 2N-1-r of every sequence, attends its queries to every rank's
 * block in ring order (merging by log-sum-exp) and adds its share of every
 * block's key/value gradients; the outputs, log-sum-exps and gradients,
 * put back in sequence order, must equal the whole-sequence kernels'. */
#include "testlib.h"

#include "primus/prm_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 24, H = 4, G = 2, D = 16 };

static float *randn(prm_rng_t *r, int64_t n) {
  float *x = malloc((size_t)n * sizeof(float));
  prm_rng_normal_fill(r, x, n, 1.0);
  return x;
}

/* dst (B,Tl,W) <- the rows at positions pos (Tl) of src (B,T,W). */
static void gather(float *dst, const float *src, const int32_t *pos, int64_t Tl, int64_t W) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < Tl; i++)
      memcpy(dst + (b * Tl + i) * W, src + (b * T + pos[i]) * W, (size_t)W * sizeof(float));
}

/* The worst |a - ref| over rows at positions pos (a: (B,Tl,W), ref (B,T,W)). */
static double rows_diff(const float *a, const float *ref, const int32_t *pos, int64_t Tl,
                        int64_t W) {
  double m = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < Tl; i++)
      for (int64_t w = 0; w < W; w++) {
        double d = fabs((double)a[(b * Tl + i) * W + w] - ref[(b * T + pos[i]) * W + w]);
        m = d > m ? d : m;
      }
  return m;
}

/* Rank r's positions of N: chunks r and 2N-1-r. */
static void positions(int32_t *pos, int N, int r) {
  int64_t c = T / (2 * N);
  for (int64_t i = 0; i < c; i++) {
    pos[i] = (int32_t)(r * c + i);
    pos[c + i] = (int32_t)((2 * N - 1 - r) * c + i);
  }
}

typedef struct {
  float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
} prm__case_t;

static void make_case(prm__case_t *c) {
  prm_rng_t r;
  prm_rng_seed(&r, 28);
  c->q = randn(&r, B * T * H * D);
  c->k = randn(&r, B * T * G * D);
  c->v = randn(&r, B * T * G * D);
  c->dout = randn(&r, B * T * H * D);
  c->out = malloc(sizeof(float) * B * T * H * D);
  c->lse = malloc(sizeof(float) * B * H * T);
  c->dq = malloc(sizeof(float) * B * T * H * D);
  c->dk = malloc(sizeof(float) * B * T * G * D);
  c->dv = malloc(sizeof(float) * B * T * G * D);
  prm_attention_forward(c->out, c->lse, c->q, c->k, c->v, B, T, H, G, D);
  prm_attention_backward(c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->out, c->lse, B, T, H,
                         G, D);
}

static void free_case(prm__case_t *c) {
  free(c->q), free(c->k), free(c->v), free(c->dout), free(c->out), free(c->lse);
  free(c->dq), free(c->dk), free(c->dv);
}

/* The ring of N ranks, forward and backward, against the whole sequence. */
static void check_ring(const prm__case_t *c, int N) {
  int64_t Tl = T / N, nq = B * Tl * H * D, nk = B * Tl * G * D;
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)(N * Tl));
  float *q = malloc(sizeof(float) * (size_t)(N * nq)), *dout = malloc(sizeof(float) * (size_t)(N * nq));
  float *k = malloc(sizeof(float) * (size_t)(N * nk)), *v = malloc(sizeof(float) * (size_t)(N * nk));
  float *out = malloc(sizeof(float) * (size_t)(N * nq)), *lse = malloc(sizeof(float) * (size_t)(N * B * H * Tl));
  float *dq = calloc((size_t)(N * nq), sizeof(float));
  float *dk = calloc((size_t)(N * nk), sizeof(float)), *dv = calloc((size_t)(N * nk), sizeof(float));
  float *di = malloc(sizeof(float) * (size_t)(B * H * Tl));
  for (int r = 0; r < N; r++) {
    positions(pos + r * Tl, N, r);
    gather(q + r * nq, c->q, pos + r * Tl, Tl, H * D);
    gather(dout + r * nq, c->dout, pos + r * Tl, Tl, H * D);
    gather(k + r * nk, c->k, pos + r * Tl, Tl, G * D);
    gather(v + r * nk, c->v, pos + r * Tl, Tl, G * D);
  }
  double worst_o = 0, worst_l = 0;
  for (int r = 0; r < N; r++) {
    for (int s = 0; s < N; s++) { /* ring order: rank r holds block (r - s) mod N at step s */
      int j = (r + N - s) % N;
      prm_attention_part_forward(out + r * nq, lse + r * B * H * Tl, q + r * nq, k + j * nk,
                                 v + j * nk, pos + r * Tl, pos + j * Tl, B, Tl, Tl, H, G, D, s > 0);
    }
    double d = rows_diff(out + r * nq, c->out, pos + r * Tl, Tl, H * D);
    worst_o = d > worst_o ? d : worst_o;
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Tl; i++) {
          double e = fabs((double)lse[r * B * H * Tl + (b * H + h) * Tl + i] -
                          c->lse[(b * H + h) * T + pos[r * Tl + i]]);
          worst_l = e > worst_l ? e : worst_l;
        }
  }
  print_message("N = %d: forward worst %.2e (out), %.2e (lse)\n", N, worst_o, worst_l);
  assert_true(worst_o < 2e-6);
  assert_true(worst_l < 2e-6);

  for (int r = 0; r < N; r++) {
    prm_attention_rowdot(di, dout + r * nq, out + r * nq, B, Tl, H, D);
    for (int s = 0; s < N; s++) {
      int j = (r + N - s) % N;
      prm_attention_part_backward(dq + r * nq, dk + j * nk, dv + j * nk, dout + r * nq, q + r * nq,
                                  k + j * nk, v + j * nk, lse + r * B * H * Tl, di, pos + r * Tl,
                                  pos + j * Tl, B, Tl, Tl, H, G, D);
    }
  }
  double wq = 0, wk = 0, wv = 0;
  for (int r = 0; r < N; r++) {
    double a = rows_diff(dq + r * nq, c->dq, pos + r * Tl, Tl, H * D);
    double b = rows_diff(dk + r * nk, c->dk, pos + r * Tl, Tl, G * D);
    double e = rows_diff(dv + r * nk, c->dv, pos + r * Tl, Tl, G * D);
    wq = a > wq ? a : wq, wk = b > wk ? b : wk, wv = e > wv ? e : wv;
  }
  print_message("N = %d: backward worst %.2e (dq), %.2e (dk), %.2e (dv)\n", N, wq, wk, wv);
  assert_true(wq < 1e-5);
  assert_true(wk < 1e-5);
  assert_true(wv < 1e-5);
  free(pos), free(q), free(dout), free(k), free(v), free(out), free(lse), free(dq), free(dk);
  free(dv), free(di);
}

static void test_ring(void **state) {
  (void)state;
  prm__case_t c;
  make_case(&c);
  for (int N = 1; N <= 4; N++) check_ring(&c, N);
  free_case(&c);
}

/* The merge alone: all queries against the first and the second half of
 * the keys separately (the first rows see none of the second half: lse
 * -inf there), merged, equal the whole attention. */
static void test_merge(void **state) {
  (void)state;
  prm__case_t c;
  make_case(&c);
  int32_t qpos[T];
  for (int i = 0; i < T; i++) qpos[i] = i;
  int64_t h2 = T / 2, nk = B * h2 * G * D;
  float *k1 = malloc(sizeof(float) * (size_t)nk), *k2 = malloc(sizeof(float) * (size_t)nk);
  float *v1 = malloc(sizeof(float) * (size_t)nk), *v2 = malloc(sizeof(float) * (size_t)nk);
  gather(k1, c.k, qpos, h2, G * D);
  gather(v1, c.v, qpos, h2, G * D);
  gather(k2, c.k, qpos + h2, h2, G * D);
  gather(v2, c.v, qpos + h2, h2, G * D);
  float *o1 = malloc(sizeof(float) * B * T * H * D), *o2 = malloc(sizeof(float) * B * T * H * D);
  float *l1 = malloc(sizeof(float) * B * H * T), *l2 = malloc(sizeof(float) * B * H * T);
  prm_attention_part_forward(o1, l1, c.q, k1, v1, qpos, qpos, B, T, h2, H, G, D, 0);
  prm_attention_part_forward(o2, l2, c.q, k2, v2, qpos, qpos + h2, B, T, h2, H, G, D, 0);
  assert_true(isinf(l2[0]) && l2[0] < 0); /* row 0 sees no key of the second half */
  double before = rows_diff(o1, c.out, qpos, T, H * D);
  prm_attention_merge(o1, l1, o2, l2, B, T, H, D);
  double after = rows_diff(o1, c.out, qpos, T, H * D), wl = 0;
  for (int64_t i = 0; i < B * H * T; i++) {
    double e = fabs((double)l1[i] - c.lse[i]);
    wl = e > wl ? e : wl;
  }
  print_message("merge: worst %.2e (out; %.2e before the merge), %.2e (lse)\n", after, before, wl);
  assert_true(before > 1e-2); /* the first half alone is not the answer */
  assert_true(after < 2e-6);
  assert_true(wl < 2e-6);
  free(k1), free(k2), free(v1), free(v2), free(o1), free(o2), free(l1), free(l2);
  free_case(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_ring), cmocka_unit_test(test_merge)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
