/* fast_adamw.c - the AdamW update in one fused pass over p, g, m and v
 * (16 bytes read and 12 written per parameter), vectorised and threaded,
 * with gradient clipping's coefficient applied to g on the way in (no pass
 * of its own).
 *
 * The arithmetic is that of the reference (ref-impl.h, torch 1.13's
 * single-tensor path) in the same order, element by element: the scalars are
 * computed the same way, nothing is contracted into FMAs, and IEEE division
 * and square root are exact in every ISA, so the result is bit-identical to
 * prm__ref32_adamw_update for any thread count. tests/test-kernels.c checks
 * exactly that.
 *
 * Three variants of the loop: AVX-512, AVX2 and plain C. Vector square roots
 * need intrinsics (GCC does not vectorise sqrtf under errno semantics), so
 * unlike attention.c these are written per ISA and chosen on every call by
 * cpuid (__builtin_cpu_supports reads a table libgcc fills at load time). */
#include "kernels/kernels-impl.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Products and sums stay separate operations, as in the reference. */
#pragma GCC optimize("fp-contract=off")

/* The per-call scalars, rounded to float as torch does for fp32 tensors. */
typedef struct {
  float beta1, beta2, omb1, omb2, bc2_sqrt, eps, decay, step_size, gscale;
} prm__adamw_k;

/* The reference loop body, for the plain variant and the vector tails. */
static inline void prm__adamw_scalar(float *p, const float *g, float *m, float *v, int64_t lo,
                                     int64_t hi, const prm__adamw_k *k) {
  for (int64_t i = lo; i < hi; i++) {
    float gi = g[i] * k->gscale;
    float mi = m[i] * k->beta1 + k->omb1 * gi;
    float vi = v[i] * k->beta2 + k->omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;
    p[i] = p[i] * k->decay - k->step_size * (mi / denom);
  }
}

__attribute__((target("avx512f"))) static void prm__adamw_avx512(float *p, const float *g,
                                                                  float *m, float *v, int64_t lo,
                                                                  int64_t hi,
                                                                  const prm__adamw_k *k) {
  const __m512 b1 = _mm512_set1_ps(k->beta1), b2 = _mm512_set1_ps(k->beta2),
               o1 = _mm512_set1_ps(k->omb1), o2 = _mm512_set1_ps(k->omb2),
               bc = _mm512_set1_ps(k->bc2_sqrt), ep = _mm512_set1_ps(k->eps),
               dc = _mm512_set1_ps(k->decay), ss = _mm512_set1_ps(k->step_size),
               gs = _mm512_set1_ps(k->gscale);
  int64_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gs);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), b1), _mm512_mul_ps(o1, gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), b2),
                              _mm512_mul_ps(_mm512_mul_ps(o2, gi), gi));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc), ep);
    __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(p + i), dc),
                              _mm512_mul_ps(ss, _mm512_div_ps(mi, den)));
    _mm512_storeu_ps(p + i, pi);
  }
  prm__adamw_scalar(p, g, m, v, i, hi, k);
}

__attribute__((target("avx2"))) static void prm__adamw_avx2(float *p, const float *g, float *m,
                                                             float *v, int64_t lo, int64_t hi,
                                                             const prm__adamw_k *k) {
  const __m256 b1 = _mm256_set1_ps(k->beta1), b2 = _mm256_set1_ps(k->beta2),
               o1 = _mm256_set1_ps(k->omb1), o2 = _mm256_set1_ps(k->omb2),
               bc = _mm256_set1_ps(k->bc2_sqrt), ep = _mm256_set1_ps(k->eps),
               dc = _mm256_set1_ps(k->decay), ss = _mm256_set1_ps(k->step_size),
               gs = _mm256_set1_ps(k->gscale);
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gs);
    __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(o1, gi));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2),
                              _mm256_mul_ps(_mm256_mul_ps(o2, gi), gi));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc), ep);
    __m256 pi = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), dc),
                              _mm256_mul_ps(ss, _mm256_div_ps(mi, den)));
    _mm256_storeu_ps(p + i, pi);
  }
  prm__adamw_scalar(p, g, m, v, i, hi, k);
}

static void prm__adamw_plain(float *p, const float *g, float *m, float *v, int64_t lo,
                             int64_t hi, const prm__adamw_k *k) {
  prm__adamw_scalar(p, g, m, v, lo, hi, k);
}

typedef void (*prm__adamw_fn)(float *, const float *, float *, float *, int64_t, int64_t,
                              const prm__adamw_k *);

/* The ISA variant of this CPU: "avx512", "avx2" or "plain". */
static prm__adamw_fn prm__adamw_pick(const char **name) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return *name = "avx512", prm__adamw_avx512;
  if (__builtin_cpu_supports("avx2")) return *name = "avx2", prm__adamw_avx2;
  return *name = "plain", prm__adamw_plain;
}

const char *prm__fast_adamw_isa(void) {
  const char *name;
  prm__adamw_pick(&name);
  return name;
}

/* The variant named `isa`, or this CPU's for NULL; NULL when the name is
 * unknown or the CPU cannot run it. */
static prm__adamw_fn prm__adamw_variant(const char *isa) {
  const char *name;
  prm__adamw_fn best = prm__adamw_pick(&name);
  if (!isa) return best;
  if (!strcmp(isa, "plain")) return prm__adamw_plain;
  if (!strcmp(isa, "avx2") && __builtin_cpu_supports("avx2")) return prm__adamw_avx2;
  if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512f")) return prm__adamw_avx512;
  return NULL;
}

/* Below this many parameters one thread does it all (waking the others
 * costs more than it saves). */
#define PRM__ADAMW_PAR 32768

int prm__fast_adamw_update_isa(const char *isa, float *p, const float *g, float *m, float *v,
                               int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                               int64_t step, float gscale) {
  PRM_ASSERT(step >= 1);
  prm__adamw_fn fn = prm__adamw_variant(isa);
  if (!fn) return PRM_EINVAL;
  double bc1 = 1.0 - pow((double)beta1, (double)step);
  double bc2 = 1.0 - pow((double)beta2, (double)step);
  prm__adamw_k k = {
      .beta1 = beta1,
      .beta2 = beta2,
      .omb1 = (float)(1.0 - (double)beta1),
      .omb2 = (float)(1.0 - (double)beta2),
      .bc2_sqrt = (float)sqrt(bc2),
      .eps = eps,
      .decay = (float)(1.0 - (double)lr * (double)wd),
      .step_size = (float)((double)lr / bc1),
      .gscale = gscale,
  };
  /* Each thread one contiguous range, cut at multiples of 16 values (a
   * cache line when the arrays are aligned); the result is the same for
   * any split since every element is computed alone. */
#pragma omp parallel if (n >= PRM__ADAMW_PAR)
  {
    int64_t nt = 1, t = 0;
#ifdef _OPENMP
    nt = omp_get_num_threads();
    t = omp_get_thread_num();
#endif
    int64_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
    int64_t lo = t * per < n ? t * per : n, hi = lo + per < n ? lo + per : n;
    if (hi > lo) fn(p, g, m, v, lo, hi, &k);
  }
  return 0;
}

void prm__fast_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float wd, int64_t step,
                            float gscale) {
  prm__fast_adamw_update_isa(NULL, p, g, m, v, n, lr, beta1, beta2, eps, wd, step, gscale);
}
