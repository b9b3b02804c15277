/* rng.c - xoshiro256** seeded through splitmix64, plus Box-Muller normals:
 * the same stream on every machine, so initialisation and sampling are
 * reproducible from `seed`. */
#define _GNU_SOURCE
#include "primus/prm_base.h"

#include <math.h>

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

double prm_rng_normal(prm_rng_t *r) {
  if (r->has_spare) {
    r->has_spare = 0;
    return r->spare;
  }
  double u1, u2;
  do u1 = prm_rng_uniform(r);
  while (u1 <= 0.0);
  u2 = prm_rng_uniform(r);
  double mag = sqrt(-2.0 * log(u1));
  r->spare = mag * sin(2.0 * M_PI * u2);
  r->has_spare = 1;
  return mag * cos(2.0 * M_PI * u2);
}
