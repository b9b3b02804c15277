/* bf16.c - conversions between fp32 and bf16 storage.
 *
 * fp32 -> bf16 rounds to nearest even on the bit pattern: add 0x7fff plus
 * the lowest kept bit, keep the upper 16 bits. That is exact IEEE rounding
 * for every finite value, denormals included, and carries the largest
 * finite floats over to Inf as IEEE does. NaN is the one special case: its
 * upper half is kept and the quiet bit set, so it stays a NaN of the same
 * sign whatever its payload.
 *
 * Four variants, chosen on every call by cpuid (__builtin_cpu_supports
 * reads a table libgcc fills at load time), all giving the same bits:
 *  - avx512bf16: vcvtne2ps2bf16, 32 floats per instruction. The instruction
 *    flushes denormal inputs to zero, so a block of 32 that holds one is
 *    redone with the integer rounding (denormal activations are rare);
 *  - avx512 / avx2: the integer rounding, 16 or 8 lanes at a time;
 *  - plain: the same in C.
 * Large arrays are split over the OpenMP threads in fixed blocks. */
#include "kernels/gemm-impl.h"
#include "kernels/kernels-impl.h"

#include <immintrin.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Elements per OpenMP block, and the size below which one thread does it. */
#define PRM__BF16_BLOCK 16384
#define PRM__BF16_PAR 65536

typedef void (*prm__cvt_fn)(prm_bf16_t *dst, const float *src, int64_t n);

static void prm__cvt_plain(prm_bf16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = prm__bf16_from_f32(src[i]);
}

__attribute__((target("avx2"))) static void prm__cvt_avx2(prm_bf16_t *dst, const float *src,
                                                          int64_t n) {
  const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(hi, one)), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
    /* Lanes hold values below 0x10000: the unsigned pack keeps them; it
     * works per 128-bit half, so gather the two low quadwords. */
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
  }
  prm__cvt_plain(dst + i, src + i, n - i);
}

__attribute__((target("avx512f"))) static inline __m256i prm__cvt16_avx512(__m512i u) {
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1),
                quiet = _mm512_set1_epi32(0x40);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(hi, one)), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
  return _mm512_cvtepi32_epi16(r);
}

__attribute__((target("avx512f"))) static void prm__cvt_avx512(prm_bf16_t *dst, const float *src,
                                                               int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(dst + i),
                        prm__cvt16_avx512(_mm512_loadu_si512((const void *)(src + i))));
  prm__cvt_plain(dst + i, src + i, n - i);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void prm__cvt_avx512bf16(
    prm_bf16_t *dst, const float *src, int64_t n) {
  const __m512i expo = _mm512_set1_epi32(0x7f800000), mant = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512i lo = _mm512_loadu_si512((const void *)(src + i));
    __m512i hi = _mm512_loadu_si512((const void *)(src + i + 16));
    /* Denormal: exponent bits all zero, mantissa not zero. */
    __mmask16 dlo = _mm512_testn_epi32_mask(lo, expo) & _mm512_test_epi32_mask(lo, mant);
    __mmask16 dhi = _mm512_testn_epi32_mask(hi, expo) & _mm512_test_epi32_mask(hi, mant);
    if (__builtin_expect(dlo | dhi, 0)) {
      _mm256_storeu_si256((__m256i *)(dst + i), prm__cvt16_avx512(lo));
      _mm256_storeu_si256((__m256i *)(dst + i + 16), prm__cvt16_avx512(hi));
      continue;
    }
    __m512bh r = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo));
    _mm512_storeu_si512((void *)(dst + i), (__m512i)r);
  }
  prm__cvt_plain(dst + i, src + i, n - i);
}

static prm__cvt_fn prm__cvt_pick(const char **name) {
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw"))
    return *name = "avx512bf16", prm__cvt_avx512bf16;
  if (__builtin_cpu_supports("avx512f")) return *name = "avx512", prm__cvt_avx512;
  if (__builtin_cpu_supports("avx2")) return *name = "avx2", prm__cvt_avx2;
  return *name = "plain", prm__cvt_plain;
}

const char *prm_bf16_isa(void) {
  const char *name;
  prm__cvt_pick(&name);
  return name;
}

static void prm__cvt_run(prm__cvt_fn f, prm_bf16_t *dst, const float *src, int64_t n) {
  if (n < PRM__BF16_PAR) {
    f(dst, src, n);
    return;
  }
  int64_t blocks = (n + PRM__BF16_BLOCK - 1) / PRM__BF16_BLOCK;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t lo = b * PRM__BF16_BLOCK, len = n - lo < PRM__BF16_BLOCK ? n - lo : PRM__BF16_BLOCK;
    f(dst + lo, src + lo, len);
  }
}

void prm_f32_to_bf16(prm_bf16_t *dst, const float *src, int64_t n) {
  const char *name;
  prm__cvt_run(prm__cvt_pick(&name), dst, src, n);
}

int prm__f32_to_bf16_isa(const char *isa, prm_bf16_t *dst, const float *src, int64_t n) {
  prm__cvt_fn f = NULL;
  if (!isa) {
    const char *name;
    f = prm__cvt_pick(&name);
  } else if (!strcmp(isa, "plain")) {
    f = prm__cvt_plain;
  } else if (!strcmp(isa, "avx2") && __builtin_cpu_supports("avx2")) {
    f = prm__cvt_avx2;
  } else if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512f")) {
    f = prm__cvt_avx512;
  } else if (!strcmp(isa, "avx512bf16") && __builtin_cpu_supports("avx512bf16") &&
             __builtin_cpu_supports("avx512bw")) {
    f = prm__cvt_avx512bf16;
  }
  if (!f) return PRM_EINVAL;
  prm__cvt_run(f, dst, src, n);
  return 0;
}

/* Exact: a bf16 is the upper half of a float. The plain loop vectorises. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void prm__widen(
    float *dst, const prm_bf16_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)src[i] << 16;
    memcpy(dst + i, &u, 4);
  }
}

void prm_bf16_to_f32(float *dst, const prm_bf16_t *src, int64_t n) {
  if (n < PRM__BF16_PAR) {
    prm__widen(dst, src, n);
    return;
  }
  int64_t blocks = (n + PRM__BF16_BLOCK - 1) / PRM__BF16_BLOCK;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t lo = b * PRM__BF16_BLOCK, len = n - lo < PRM__BF16_BLOCK ? n - lo : PRM__BF16_BLOCK;
    prm__widen(dst + lo, src + lo, len);
  }
}
