/* rng.c - xoshiro256** seeded through splitmix64, plus Box-Muller normals:
 * the same stream on every machine, so initialisation and sampling are
 * reproducible from `seed`. */
#define _GNU_SOURCE
#include "primus/prm_base.h"

#include <math.h>
#include <stdlib.h>

static uint64_t prm__splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void prm_rng_seed(prm_rng_t *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = prm__splitmix64(&x);
  r->has_spare = 0;
  r->spare = 0;
}

static inline uint64_t prm__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t prm_rng_u64(prm_rng_t *r) {
  uint64_t *s = r->s;
  uint64_t result = prm__rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = prm__rotl(s[3], 45);
  return result;
}

double prm_rng_uniform(prm_rng_t *r) { return (double)(prm_rng_u64(r) >> 11) * 0x1.0p-53; }

/* The next pair's uniforms: u1 in (0, 1), u2 in [0, 1). */
static void prm__bm_uniforms(prm_rng_t *r, double *u1, double *u2) {
  do *u1 = prm_rng_uniform(r);
  while (*u1 <= 0.0);
  *u2 = prm_rng_uniform(r);
}

/* Box-Muller: the pair's two normals (the second is the spare). */
static void prm__bm_pair(double u1, double u2, double *first, double *second) {
  double mag = sqrt(-2.0 * log(u1));
  *second = mag * sin(2.0 * M_PI * u2);
  *first = mag * cos(2.0 * M_PI * u2);
}

double prm_rng_normal(prm_rng_t *r) {
  if (r->has_spare) {
    r->has_spare = 0;
    return r->spare;
  }
  double u1, u2, first;
  prm__bm_uniforms(r, &u1, &u2);
  prm__bm_pair(u1, u2, &first, &r->spare);
  r->has_spare = 1;
  return first;
}

void prm_rng_normal_fill(prm_rng_t *r, float *dst, int64_t n, double scale) {
  int64_t i = 0;
  if (n > 0 && r->has_spare) {
    dst[i++] = (float)(scale * r->spare);
    r->has_spare = 0;
  }
  /* Whole pairs in batches: the uniforms in stream order, then the pairs
   * (log, sin, cos: most of the time) on the threads. Each value is the
   * same expression as prm_rng_normal's, so the bits do not change. */
  enum { PRM__BM_BATCH = 1 << 15 };
  int64_t most = (n - i) / 2 < PRM__BM_BATCH ? (n - i) / 2 : PRM__BM_BATCH;
  double *u = most > 0 ? prm_xmalloc((size_t)(2 * most) * sizeof *u) : NULL;
  while (n - i >= 2) {
    int64_t pairs = (n - i) / 2 < most ? (n - i) / 2 : most;
    for (int64_t p = 0; p < pairs; p++) prm__bm_uniforms(r, &u[2 * p], &u[2 * p + 1]);
    float *d = dst + i;
#pragma omp parallel for schedule(static) if (pairs >= 4096)
    for (int64_t p = 0; p < pairs; p++) {
      double first, second;
      prm__bm_pair(u[2 * p], u[2 * p + 1], &first, &second);
      d[2 * p] = (float)(scale * first);
      d[2 * p + 1] = (float)(scale * second);
    }
    i += 2 * pairs;
  }
  free(u);
  if (i < n) dst[i] = (float)(scale * prm_rng_normal(r)); /* an odd one: the spare stays */
}
