/* peak.c - the machine's fp32 FMA peak per core, measured by a short probe
 * (independent chains of fused multiply-adds in the widest vector unit the
 * CPU has) and cached per CPU model, so MFU is reported against what this
 * machine can do rather than a datasheet. */
#define _GNU_SOURCE
#include "primus/prm_train.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

/* Twelve independent accumulators, written out so the compiler keeps them
 * in registers: enough chains to cover the FMA latency on two ports. */
#define PRM__CHAINS 12
#define PRM__FMA12(F)                                                          \
  a0 = F(a0, b, c); a1 = F(a1, b, c); a2 = F(a2, b, c); a3 = F(a3, b, c);     \
  a4 = F(a4, b, c); a5 = F(a5, b, c); a6 = F(a6, b, c); a7 = F(a7, b, c);     \
  a8 = F(a8, b, c); a9 = F(a9, b, c); a10 = F(a10, b, c); a11 = F(a11, b, c)

__attribute__((target("avx512f"))) static float prm__probe_avx512(int64_t iters) {
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),
         a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),
         a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),
         a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  for (int64_t i = 0; i < iters; i++) {
    PRM__FMA12(_mm512_fmadd_ps);
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float prm__probe_avx2(int64_t iters) {
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2),
         a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5),
         a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8),
         a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  for (int64_t i = 0; i < iters; i++) {
    PRM__FMA12(_mm256_fmadd_ps);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float tmp[8], r = 0;
  _mm256_storeu_ps(tmp, s);
  for (int k = 0; k < 8; k++) r += tmp[k];
  return r;
}

/* The same chains with vdpbf16ps: each instruction multiplies 32 bf16
 * pairs and adds them pairwise into 16 fp32 lanes, 64 FLOPs. */
__attribute__((target("avx512f,avx512bf16"))) static float prm__probe_bf16(int64_t iters) {
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3380);
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),
         a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),
         a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),
         a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  for (int64_t i = 0; i < iters; i++) {
    PRM__FMA12(_mm512_dpbf16_ps);
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return _mm512_reduce_add_ps(s);
}

/* FLOPs one probe iteration does: 0 when the CPU lacks the instructions. */
static double prm__probe_flops(int bf16) {
  if (bf16)
    return __builtin_cpu_supports("avx512bf16") ? PRM__CHAINS * 64.0 : 0;
  int wide = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("fma") ? 8 : 0;
  return PRM__CHAINS * wide * 2.0;
}

static float prm__probe(int bf16, int64_t iters) {
  if (bf16) return prm__probe_bf16(iters);
  return __builtin_cpu_supports("avx512f") ? prm__probe_avx512(iters) : prm__probe_avx2(iters);
}

/* GFLOP/s of one thread: the best of five runs of ~30 ms (a run preempted
 * by another process only lowers its own figure). */
static double prm__measure_one(int bf16, int runs) {
  double per_iter = prm__probe_flops(bf16);
  if (per_iter <= 0) return 0;
  int64_t iters = 20000000;
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < runs; r++) {
    double t0 = prm_time_now();
    sink += prm__probe(bf16, iters);
    double dt = prm_time_now() - t0;
    double g = (double)iters * per_iter / dt / 1e9;
    if (g > best) best = g;
  }
  (void)sink;
  return best;
}

/* GFLOP/s of `threads` threads probing at once: the total FLOPs over the
 * wall time of the slowest, the best of `runs`. */
static double prm__measure_all(int bf16, int threads, int runs) {
  double per_iter = prm__probe_flops(bf16);
  if (per_iter <= 0 || threads < 1) return 0;
  int64_t iters = 20000000;
  double best = 0;
  for (int r = 0; r < runs; r++) {
    double t0 = prm_time_now();
    float sink = 0;
#pragma omp parallel for num_threads(threads) schedule(static, 1) reduction(+ : sink)
    for (int t = 0; t < threads; t++) sink += prm__probe(bf16, iters);
    double dt = prm_time_now() - t0;
    double g = (double)iters * per_iter * threads / dt / 1e9;
    if (g > best && sink == sink) best = g;
  }
  return best;
}

static void prm__cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10)) {
      char *colon = strchr(line, ':');
      if (colon) snprintf(buf, n, "%s", prm_strtrim(colon + 1));
      break;
    }
  fclose(f);
}


/* Writes "<gflops>\t<cpu model>\n" to the cache file (atomically). */
static void prm__peak_store(const char *path, const char *what, const char *model, double g) {
  if (!(g > 0)) return;
  char *dir = prm_path_dirname(path);
  char *line = prm_xasprintf("%.1f\t%s\n", g, model);
  if (prm_fs_mkdir_p(dir, 0755, NULL) == 0) prm_fs_write_atomic(path, line, strlen(line), NULL);
  PRM_DEBUG("measured %s peak: %.1f GFLOP/s per core (%s), cached in %s", what, g, model, path);
  free(line);
  free(dir);
}

static const char *prm__peak_file(int bf16) { return bf16 ? "peak-bf16.txt" : "peak-fp32.txt"; }

/* The cached figure of this CPU model, else a probe now (then cached). */
static double prm__peak_cached(int bf16) {
  if (bf16 && prm__probe_flops(1) <= 0) return 0; /* no vdpbf16ps: nothing to cache */
  char model[256];
  prm__cpu_model(model, sizeof model);
  char *path = prm_cache_path(prm__peak_file(bf16));
  char *text = NULL;
  if (prm_fs_read_all(path, &text, NULL, NULL) == 0) {
    /* "<gflops>\t<cpu model>\n" */
    char *tab = strchr(text, '\t');
    double g;
    if (tab) {
      *tab = 0;
      if (!prm_parse_f64(text, &g) && g > 0 && !strcmp(prm_strtrim(tab + 1), model)) {
        free(text);
        free(path);
        return g;
      }
    }
  }
  free(text);
  double g = prm__measure_one(bf16, 5);
  prm__peak_store(path, bf16 ? "bf16 dot-product" : "fp32 FMA", model, g);
  free(path);
  return g;
}

double prm_peak_gflops_per_core(void) { return prm__peak_cached(0); }

double prm_peak_bf16_gflops_per_core(void) { return prm__peak_cached(1); }

int prm_peak_measure(int threads, int runs, prm_peak_t *out) {
  memset(out, 0, sizeof *out);
  if (threads < 1) threads = 1;
  if (runs < 1) runs = 1;
  out->threads = threads;
  prm__cpu_model(out->cpu, sizeof out->cpu);
  out->fp32_core = prm__measure_one(0, runs);
  if (out->fp32_core <= 0) return -1;
  out->fp32_all = prm__measure_all(0, threads, runs);
  out->bf16_core = prm__measure_one(1, runs);
  if (out->bf16_core > 0) out->bf16_all = prm__measure_all(1, threads, runs);
  /* A core's peak is what its best core reached: the one-thread probe may
   * land on a virtual CPU whose host core is shared (seen here: 95.7
   * GFLOP/s alone, 119 a core with both busy). */
  if (out->fp32_all / threads > out->fp32_core) out->fp32_core = out->fp32_all / threads;
  if (out->bf16_all / threads > out->bf16_core) out->bf16_core = out->bf16_all / threads;
  return 0;
}

void prm_peak_save(const prm_peak_t *pk) {
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    char *path = prm_cache_path(prm__peak_file(bf16));
    prm__peak_store(path, bf16 ? "bf16 dot-product" : "fp32 FMA", pk->cpu,
                    bf16 ? pk->bf16_core : pk->fp32_core);
    free(path);
  }
}
