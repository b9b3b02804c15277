/* ckpt.c - checkpoint bandwidth as training sees it: a Llama of about the
 * asked size saved with prm_ckpt_write_hf (safetensors + config.json,
 * fsynced, renamed into place) and loaded back with prm_ckpt_load_hf. */
#define _GNU_SOURCE
#include "bench/bench-impl.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* Drops a file's clean pages from the page cache, so the load reads the
 * disk (a hint; some file systems ignore it). */
static void prm__drop_cache(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

int prm_bench_ckpt(const char *dir, size_t bytes, double *save_gbs, double *load_gbs,
                   size_t *actual, prm_err_t *err) {
  *save_gbs = *load_gbs = 0;
  *actual = 0;
  if (!prm_fs_is_dir(dir)) return prm_errf(err, PRM_ENOENT, "%s: not a folder", dir);
  /* Layers of hidden 256 (four heads, ffn 688): about 3.2 MB each. */
  prm_llama_config_t c = {.vocab = 256, .hidden = 256, .layers = 1, .heads = 4, .groups = 4,
                          .ffn = 688, .max_pos = 8, .norm_eps = 1e-5, .rope_base = 10000,
                          .init_std = 0.02, .tied = 1};
  double per_layer = 4.0 * (4.0 * 256 * 256 + 3.0 * 256 * 688 + 2 * 256);
  c.layers = (int64_t)((double)bytes / per_layer + 0.5);
  if (c.layers < 1) c.layers = 1;
  prm_gemm_t g;
  int rc = prm_gemm_init(&g, NULL, err);
  if (rc) return rc;
  prm_llama_t *m = NULL;
  if ((rc = prm_llama_new(&c, 1, 1, 0, &g, &m, err))) return rc;
  prm_llama_init(m, 1);
  *actual = (size_t)m->nparams * sizeof(float);
  char *path = prm_xasprintf("%s/.primus-bench-ckpt.%ld", dir, (long)getpid());
  char *st = prm_path_join(path, "model.safetensors");
  prm_fs_rm_rf(path);
  double t0 = prm_time_now();
  rc = prm_ckpt_write_hf(m, path, "ByteTokenizer", NULL, NULL, err);
  double ts = prm_time_now() - t0;
  if (!rc) {
    prm__drop_cache(st);
    t0 = prm_time_now();
    rc = prm_ckpt_load_hf(m, path, err);
    double tl = prm_time_now() - t0;
    if (!rc) {
      *save_gbs = (double)*actual / (ts > 0 ? ts : 1e-9) / 1e9;
      *load_gbs = (double)*actual / (tl > 0 ? tl : 1e-9) / 1e9;
    }
  }
  prm_fs_rm_rf(path);
  free(st);
  free(path);
  prm_llama_free(m);
  return rc;
}
