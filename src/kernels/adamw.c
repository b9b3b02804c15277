/* adamw.c - optimizer helpers: the AdamW update (the fused kernel of
 * fast_adamw.c), a deterministic sum of squares (for gradient norms) and
 * in-place scaling. */
#include "kernels/kernels-impl.h"

void prm_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int64_t step) {
  prm__fast_adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, wd, step);
}

/* A fixed number of slices, each summed in order and combined in order:
 * the result does not depend on the thread count. */
#define SUMSQ_PARTS 256

double prm_sumsq(const float *x, int64_t n) {
  double part[SUMSQ_PARTS];
  int64_t per = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < SUMSQ_PARTS; p++) {
    double s = 0;
    int64_t hi = (p + 1) * per < n ? (p + 1) * per : n;
    for (int64_t i = p * per; i < hi; i++) s += (double)x[i] * x[i];
    part[p] = s;
  }
  double total = 0;
  for (int p = 0; p < SUMSQ_PARTS; p++) total += part[p];
  return total;
}

void prm_scale(float *x, int64_t n, float s) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}
