/* peak.c - the machine's fp32 FMA peak per core, measured by a short probe
 * (independent chains of fused multiply-adds in the widest vector unit the
 * CPU has) and cached per CPU model, so MFU is reported against what this
 * machine can do rather than a datasheet. */
#define _GNU_SOURCE
#include "primus/prm_train.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define PRM__CHAINS 12

__attribute__((target("avx512f"))) static float prm__probe_avx512(int64_t iters) {
  __m512 acc[PRM__CHAINS];
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  for (int j = 0; j < PRM__CHAINS; j++) acc[j] = _mm512_set1_ps((float)j);
  for (int64_t i = 0; i < iters; i++)
    for (int j = 0; j < PRM__CHAINS; j++) acc[j] = _mm512_fmadd_ps(acc[j], b, c);
  float s = 0;
  for (int j = 0; j < PRM__CHAINS; j++) s += _mm512_reduce_add_ps(acc[j]);
  return s;
}

__attribute__((target("avx2,fma"))) static float prm__probe_avx2(int64_t iters) {
  __m256 acc[PRM__CHAINS];
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  for (int j = 0; j < PRM__CHAINS; j++) acc[j] = _mm256_set1_ps((float)j);
  for (int64_t i = 0; i < iters; i++)
    for (int j = 0; j < PRM__CHAINS; j++) acc[j] = _mm256_fmadd_ps(acc[j], b, c);
  float tmp[8], s = 0;
  for (int j = 0; j < PRM__CHAINS; j++) {
    _mm256_storeu_ps(tmp, acc[j]);
    for (int k = 0; k < 8; k++) s += tmp[k];
  }
  return s;
}

/* GFLOP/s of one thread: the best of three short runs. */
static double prm__measure(void) {
  int wide = __builtin_cpu_supports("avx512f") ? 16 : __builtin_cpu_supports("fma") ? 8 : 0;
  if (!wide) return 0;
  int64_t iters = 2000000;
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < 3; r++) {
    double t0 = prm_time_now();
    sink += wide == 16 ? prm__probe_avx512(iters) : prm__probe_avx2(iters);
    double dt = prm_time_now() - t0;
    double g = (double)iters * PRM__CHAINS * wide * 2 / dt / 1e9;
    if (g > best) best = g;
  }
  (void)sink;
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

static char *prm__cache_path(void) {
  const char *dir = getenv("PRIMUS_CACHE");
  if (dir && *dir) return prm_path_join(dir, "peak-fp32.txt");
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return prm_xasprintf("%s/primus/peak-fp32.txt", xdg);
  const char *home = getenv("HOME");
  return home ? prm_xasprintf("%s/.cache/primus/peak-fp32.txt", home) : NULL;
}

double prm_peak_gflops_per_core(void) {
  char model[256];
  prm__cpu_model(model, sizeof model);
  char *path = prm__cache_path();
  char *text = NULL;
  if (path && prm_fs_read_all(path, &text, NULL, NULL) == 0) {
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
  double g = prm__measure();
  if (path && g > 0) {
    char *dir = prm_path_dirname(path);
    char *line = prm_xasprintf("%.1f\t%s\n", g, model);
    if (prm_fs_mkdir_p(dir, 0755, NULL) == 0) prm_fs_write_atomic(path, line, strlen(line), NULL);
    PRM_DEBUG("measured fp32 FMA peak: %.1f GFLOP/s per core (%s), cached in %s", g, model, path);
    free(line);
    free(dir);
  }
  free(path);
  return g;
}
