/* adamw.c - optimizer helpers: the AdamW update (the fused kernel of
 * fast_adamw.c), a deterministic sum of squares (for gradient norms) and
 * in-place scaling. */
#include "kernels/kernels-impl.h"
#include "kernels/vec-impl.h"

/* Products and sums stay separate, so every ISA variant gives the same bits. */
#pragma GCC optimize("fp-contract=off")

void prm_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int64_t step, float gscale) {
  prm__fast_adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, wd, step, gscale);
}

/* A fixed number of slices, each summed in order and combined in order:
 * the result does not depend on the thread count. Within a slice, sixteen
 * running sums (element i goes to sum i mod 16), each in order, combined
 * in a fixed order: independent chains instead of one, and the same bits
 * in every ISA variant. */
#define SUMSQ_PARTS 256
#define SUMSQ_LANES 16

PRM__CLONES static double prm__sumsq_slice(const float *x, int64_t n) {
  prm__v8d a = {0}, b = {0}; /* lanes 0-7 and 8-15 */
  int64_t i = 0;
  for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES) {
    prm__v16 v = prm__ld(x + i);
    prm__v8d lo = prm__lo_d(v), hi = prm__hi_d(v);
    a += lo * lo;
    b += hi * hi;
  }
  for (int j = 0; i + j < n; j++) {
    double xj = x[i + j];
    if (j < 8)
      a[j] += xj * xj;
    else
      b[j - 8] += xj * xj;
  }
  return prm__hsum_d(a + b);
}

double prm_sumsq(const float *x, int64_t n) {
  double part[SUMSQ_PARTS];
  int64_t per = (n + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < SUMSQ_PARTS; p++) {
    int64_t lo = p * per < n ? p * per : n, hi = (p + 1) * per < n ? (p + 1) * per : n;
    part[p] = prm__sumsq_slice(x + lo, hi - lo);
  }
  double total = 0;
  for (int p = 0; p < SUMSQ_PARTS; p++) total += part[p];
  return total;
}

void prm_scale(float *x, int64_t n, float s) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}
