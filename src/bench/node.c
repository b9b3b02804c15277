/* node.c - measurements of the node itself: memory bandwidth (STREAM
 * triad), disk bandwidth in a folder, and thread-dispatch latency (the CPU
 * twin of a GPU's kernel-launch overhead). */
#define _GNU_SOURCE
#include "bench/bench-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------------------ */
/* Memory bandwidth                                                          */
/* ------------------------------------------------------------------------ */

double prm_bench_triad(size_t bytes, double duration_s) {
  int64_t n = (int64_t)(bytes / sizeof(double));
  if (n < 1) return 0;
  size_t sz = (size_t)n * sizeof(double);
  double *a = prm_mem_alloc(PRM_MEM_SCRATCH, sz), *b = prm_mem_alloc(PRM_MEM_SCRATCH, sz),
         *c = prm_mem_alloc(PRM_MEM_SCRATCH, sz);
  double best = 0;
  if (a && b && c) {
    /* First touch by the threads that will stream the pages (NUMA). */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
      a[i] = 0;
      b[i] = 1.0;
      c[i] = 2.0;
    }
    const double s = 3.0;
    double t_start = prm_time_now();
    int reps = 0;
    do {
      double t0 = prm_time_now();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
      double dt = prm_time_now() - t0;
      if (dt > 0 && 3.0 * (double)sz / dt / 1e9 > best) best = 3.0 * (double)sz / dt / 1e9;
      reps++;
    } while (reps < 2 || prm_time_now() - t_start < duration_s);
    PRM_ASSERT(a[n - 1] == 7.0); /* the loop was not optimised away */
  }
  if (a) prm_mem_free(PRM_MEM_SCRATCH, a, sz);
  if (b) prm_mem_free(PRM_MEM_SCRATCH, b, sz);
  if (c) prm_mem_free(PRM_MEM_SCRATCH, c, sz);
  return best;
}

/* ------------------------------------------------------------------------ */
/* Disk bandwidth                                                            */
/* ------------------------------------------------------------------------ */

#define PRM__DISK_CHUNK ((size_t)4 << 20)

int prm_bench_disk(const char *dir, size_t bytes, double *write_gbs, double *read_gbs,
                   prm_err_t *err) {
  *write_gbs = *read_gbs = 0;
  if (bytes == 0) return prm_errf(err, PRM_EINVAL, "disk: the size must be at least one byte");
  if (!prm_fs_is_dir(dir)) return prm_errf(err, PRM_ENOENT, "%s: not a folder", dir);
  char *path = prm_xasprintf("%s/.primus-bench-disk.%ld", dir, (long)getpid());
  size_t chunk = bytes < PRM__DISK_CHUNK ? bytes : PRM__DISK_CHUNK;
  unsigned char *buf = prm_xmalloc(chunk);
  prm_rng_t rng;
  prm_rng_seed(&rng, 42);
  for (size_t i = 0; i + 8 <= chunk; i += 8) {
    uint64_t x = prm_rng_u64(&rng);
    memcpy(buf + i, &x, 8);
  }
  int rc = 0, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    rc = prm_errf(err, PRM_EIO, "%s: cannot create: %s", path, strerror(errno));
    goto done;
  }
  double t0 = prm_time_now();
  for (size_t done = 0; done < bytes && !rc;) {
    size_t n = bytes - done < chunk ? bytes - done : chunk;
    ssize_t w = write(fd, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) rc = prm_errf(err, PRM_EIO, "%s: write failed: %s", path, w < 0 ? strerror(errno) : "no space?");
    else done += (size_t)w;
  }
  if (!rc && fsync(fd)) rc = prm_errf(err, PRM_EIO, "%s: fsync failed: %s", path, strerror(errno));
  double tw = prm_time_now() - t0;
  if (close(fd) && !rc) rc = prm_errf(err, PRM_EIO, "%s: close failed: %s", path, strerror(errno));
  if (rc) goto done;
  *write_gbs = (double)bytes / (tw > 0 ? tw : 1e-9) / 1e9;

  /* Read back what is no longer cached: the pages are clean after fsync,
   * so DONTNEED drops them (a hint: on some file systems reads may still
   * hit a cache, which the figure then shows). */
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rc = prm_errf(err, PRM_EIO, "%s: cannot open: %s", path, strerror(errno));
    goto done;
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  t0 = prm_time_now();
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, buf, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = prm_errf(err, PRM_EIO, "%s: read failed: %s", path, strerror(errno));
      break;
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  double tr = prm_time_now() - t0;
  close(fd);
  if (!rc && got != bytes)
    rc = prm_errf(err, PRM_EIO, "%s: read back %zu of %zu bytes", path, got, bytes);
  if (!rc) *read_gbs = (double)bytes / (tr > 0 ? tr : 1e-9) / 1e9;
done:
  unlink(path);
  free(buf);
  free(path);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Dispatch latency                                                          */
/* ------------------------------------------------------------------------ */

static int prm__cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Samples kind 0 (an empty parallel region) or 1 (prm_sumsq of a tiny
 * vector: a wake-up through the kernels' OpenMP pool with a trivial task
 * and a join) for `seconds`, at least 16 times; median microseconds. */
static double prm__dispatch_median(int kind, double seconds) {
  enum { MAX = 200000 };
  double *us = prm_xmalloc(MAX * sizeof *us);
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = (float)i;
  volatile double sink = 0;
  int n = 0;
  /* One untimed round so the pool exists. */
#pragma omp parallel
  {
    sink += 0;
  }
  double t_start = prm_time_now();
  do {
    double t0 = prm_time_now();
    if (kind == 0) {
#pragma omp parallel
      {
        __asm__ __volatile__("" ::: "memory");
      }
    } else {
      sink += prm_sumsq(x, 256);
    }
    us[n++] = (prm_time_now() - t0) * 1e6;
  } while (n < MAX && (n < 16 || prm_time_now() - t_start < seconds));
  (void)sink;
  qsort(us, (size_t)n, sizeof *us, prm__cmp_double);
  double med = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  free(us);
  return med;
}

void prm_bench_dispatch(double duration_s, double *omp_us, double *pool_us) {
  *omp_us = prm__dispatch_median(0, duration_s / 2);
  *pool_us = prm__dispatch_median(1, duration_s / 2);
}
