/* xent.c - cross-entropy over logits, and the LM head fused with it in
 * chunks of rows so that the full (N,V) logit matrix never exists. The row
 * kernels are fast_ew.c's: one call computes a chunk's losses and its
 * logit gradient in place (three passes over each row instead of five). */
#include "kernels/kernels-impl.h"

double prm_xent_forward(float *losses, const float *logits, const int32_t *targets, int64_t N,
                        int64_t V) {
  return prm__fast_xent(losses, NULL, logits, targets, N, V, 0.0f);
}

void prm_xent_backward(float *dlogits, const float *logits, const int32_t *targets, int64_t N,
                       int64_t V, float scale) {
  prm__fast_xent(NULL, dlogits, logits, targets, N, V, scale);
}

double prm_lmhead_xent(const prm_gemm_t *g, float *dx, float *dw, int64_t *count,
                       const float *x, const float *w, const int32_t *targets, int64_t N,
                       int64_t C, int64_t V, float grad_scale, float *scratch, int64_t chunk) {
  PRM_ASSERT(chunk > 0);
  double total = 0;
  int64_t cnt = 0;
  for (int64_t n = 0; n < N; n++) cnt += targets[n] >= 0;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    int64_t rows = N - n0 < chunk ? N - n0 : chunk;
    const float *xc = x + n0 * C;
    const int32_t *tc = targets + n0;
    /* logits (rows,V) = x_chunk W^T */
    prm_sgemm(g, 0, 1, rows, V, C, 1.0f, xc, C, w, C, 0.0f, scratch, V);
    int grads = dx || dw;
    total += prm__fast_xent(NULL, grads ? scratch : NULL, scratch, tc, rows, V, grad_scale);
    if (!grads) continue;
    /* dx_chunk (rows,C) = dlogits W; dw (V,C) += dlogits^T x_chunk */
    if (dx) prm_sgemm(g, 0, 0, rows, C, V, 1.0f, scratch, V, w, C, 0.0f, dx + n0 * C, C);
    if (dw) prm_sgemm(g, 1, 0, V, C, rows, 1.0f, scratch, V, xc, C, 1.0f, dw, C);
  }
  if (count) *count = cnt;
  return total;
}
