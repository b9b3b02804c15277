/* device.c - opening a device (the CPU, or a GPU through the CUDA module
 * loaded with dlopen), describing it, and the composite operators written
 * once over the table (the linear layer's backward, the LM head with its
 * loss). */
#define _GNU_SOURCE
#include "device-impl.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Names                                                                     */
/* ------------------------------------------------------------------------ */

static const char *const prm__kind_names[] = {"cpu", "cuda"};
_Static_assert(PRM_DEV_KIND__COUNT == 2, "one name per device kind");
_Static_assert((int)PRM_DEV_MEM__COUNT == (int)PRM_MEM__COUNT, "device memory categories are prm_mem_cat_t");
_Static_assert(sizeof(prm_dev_bf16_t) == sizeof(prm_bf16_t), "bf16 storage");

int prm_dev_kind_parse(const char *s) {
  for (int k = 0; k < PRM_DEV_KIND__COUNT; k++)
    if (s && !strcmp(s, prm__kind_names[k])) return k;
  return -1;
}

const char *prm_dev_kind_name(prm_dev_kind_t k) {
  return k >= 0 && k < PRM_DEV_KIND__COUNT ? prm__kind_names[k] : "?";
}

/* ------------------------------------------------------------------------ */
/* Finding and loading the CUDA module                                      */
/* ------------------------------------------------------------------------ */

/* The folder of the running binary into buf ("" when unknown). */
static void prm__exe_dir(char *buf, size_t n) {
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  buf[0] = 0;
  if (len <= 0) return;
  exe[len] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return;
  *slash = 0;
  snprintf(buf, n, "%s", exe);
}

int prm_dev_find_module(char *buf, size_t n) {
  const char *env = getenv("PRIMUS_CUDA_MODULE");
  if (env && *env) {
    snprintf(buf, n, "%s", env);
    if (access(env, R_OK) == 0) return 0;
    snprintf(buf, n, "$PRIMUS_CUDA_MODULE=%s", env);
    return PRM_ENOENT;
  }
  char dir[PATH_MAX], cand[2][PATH_MAX + 64];
  prm__exe_dir(dir, sizeof dir);
  snprintf(cand[0], sizeof cand[0], "%s/" PRM__CUDA_MODULE, dir);
  snprintf(cand[1], sizeof cand[1], "%s/../lib/primus/" PRM__CUDA_MODULE, dir);
  for (int i = 0; i < 2; i++)
    if (access(cand[i], R_OK) == 0) {
      snprintf(buf, n, "%s", cand[i]);
      return 0;
    }
  snprintf(buf, n, "%s, %s", cand[0], cand[1]);
  return PRM_ENOENT;
}

int prm_dev_driver_present(char *why, size_t n) {
  /* The driver's user-space library: small next to the module's cuBLAS,
   * and loaded by it anyway. */
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) {
    dlclose(h);
    if (n) why[0] = 0;
    return 1;
  }
  snprintf(why, n, "no NVIDIA driver on this machine (libcuda.so.1 does not load)");
  return 0;
}

/* Opens the CUDA backend into d; on failure returns the error (code and
 * message naming what is missing) without touching d's table. */
static int prm__open_cuda(prm_dev_t *d, const prm_dev_opts_t *o, prm_err_t *err) {
  char path[PATH_MAX * 2 + 64], msg[512] = "";
  if (o->module_path) snprintf(path, sizeof path, "%s", o->module_path);
  else if (prm_dev_find_module(path, sizeof path))
    return prm_errf(err, PRM_EPLATFORM,
                    "no CUDA backend module: %s not found (looked in %s); build primus where "
                    "nvcc is found (PRM_CUDA=auto|ON) or set PRIMUS_CUDA_MODULE",
                    PRM__CUDA_MODULE, path);
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *e = dlerror();
    return prm_errf(err, PRM_EPLATFORM, "cannot load the CUDA module %s: %s", path, e ? e : "?");
  }
  prm_dev_entry_fn entry;
  *(void **)&entry = dlsym(dl, PRM_DEV_ENTRY_NAME);
  if (!entry) {
    dlclose(dl);
    return prm_errf(err, PRM_EPLATFORM, "%s: not a primus device module (no %s)", path,
                    PRM_DEV_ENTRY_NAME);
  }
  const prm_dev_i *table = NULL;
  void *ctx = NULL;
  int rc = entry(PRM_DEV_ABI_VERSION, o->local_rank > 0 ? o->local_rank : 0, &table, &ctx, msg,
                 sizeof msg);
  if (rc != PRM_DEV_OPEN_OK || !table) {
    dlclose(dl);
    switch (rc) {
    case PRM_DEV_OPEN_ABI:
      return prm_errf(err, PRM_EPLATFORM, "%s was built for another primus (%s); rebuild it", path, msg);
    case PRM_DEV_OPEN_NO_DRIVER:
      return prm_errf(err, PRM_EPLATFORM, "no usable NVIDIA driver: %s", msg);
    case PRM_DEV_OPEN_NO_DEVICE:
      return prm_errf(err, PRM_EPLATFORM, "no visible GPU: %s", msg);
    default:
      return prm_errf(err, PRM_ERUNTIME, "the CUDA backend failed to start: %s", msg);
    }
  }
  if (table->abi != PRM_DEV_ABI_VERSION) {
    int abi = table->abi; /* the table is the module's: read it before unloading */
    if (table->close) table->close(ctx);
    dlclose(dl);
    return prm_errf(err, PRM_EPLATFORM, "%s: device ABI %d, this primus needs %d; rebuild it", path,
                    abi, PRM_DEV_ABI_VERSION);
  }
  d->i = table;
  d->ctx = ctx;
  d->dl = dl;
  d->kind = PRM_DEV_KIND_CUDA;
  snprintf(d->module, sizeof d->module, "%.500s", path);
  return 0;
}

/* The CPU backend; PRIMUS_DEVICE_TAGGED=1 makes it the tagged test
 * backend (tagged.c), whose memory the host cannot touch. */
static void prm__open_cpu(prm_dev_t *d, const prm_dev_opts_t *o) {
  const char *tagged = getenv("PRIMUS_DEVICE_TAGGED");
  d->i = tagged && !strcmp(tagged, "1") ? prm__dev_tagged_table() : prm__dev_cpu_table();
  d->ctx = prm__dev_cpu_new(&o->gemm);
  d->kind = PRM_DEV_KIND_CPU;
}

prm_dev_t *prm_dev_cpu_new(const prm_gemm_t *gemm) {
  prm_dev_t *d = prm_xcalloc(1, sizeof *d);
  d->i = prm__dev_cpu_table();
  d->ctx = prm__dev_cpu_new(gemm);
  d->kind = PRM_DEV_KIND_CPU;
  snprintf(d->why, sizeof d->why, "device: cpu");
  d->i->info(d->ctx, &d->info);
  return d;
}

int prm_dev_open(const prm_dev_opts_t *o, prm_dev_t **out, prm_err_t *err) {
  const char *want = o->want && *o->want ? o->want : "auto";
  *out = NULL;
  int kind = strcmp(want, "auto") ? prm_dev_kind_parse(want) : -2;
  if (kind == -1)
    return prm_errf(err, PRM_ECONFIG, "device: expected auto, cpu or cuda, got \"%s\"", want);
  if (kind == PRM_DEV_KIND_CPU && !o->gemm.i)
    return prm_errf(err, PRM_EINVAL, "device: the CPU backend needs a GEMM backend");
  prm_dev_t *d = prm_xcalloc(1, sizeof *d);
  prm_err_t e = {0};
  if (kind == PRM_DEV_KIND_CPU) {
    prm__open_cpu(d, o);
    snprintf(d->why, sizeof d->why, "device: cpu");
  } else {
    /* auto on a machine without the NVIDIA driver does not load the module:
     * its CUDA libraries alone add ~170 MB to every CPU run's memory. A
     * module named by PRIMUS_CUDA_MODULE is always tried. */
    const char *env = getenv("PRIMUS_CUDA_MODULE");
    char why[256];
    int rc = kind == -2 && !o->module_path && !(env && *env) && !prm_dev_driver_present(why, sizeof why)
                 ? prm_errf(&e, PRM_EPLATFORM, "%s", why)
                 : prm__open_cuda(d, o, &e);
    if (rc && kind == PRM_DEV_KIND_CUDA) {
      free(d);
      if (err) {
        *err = e;
        prm_err_prefix(err, "device: cuda");
      }
      return rc;
    }
    if (rc) {
      if (!o->gemm.i) {
        free(d);
        return prm_errf(err, PRM_EINVAL, "device: the CPU backend needs a GEMM backend");
      }
      prm__open_cpu(d, o);
      snprintf(d->why, sizeof d->why, "device: auto -> cpu (%.480s)", e.msg);
    } else {
      snprintf(d->why, sizeof d->why, "device: %.8s -> cuda (%.480s)", want, d->module);
    }
  }
  d->i->info(d->ctx, &d->info);
  /* PRIMUS_DEVICE_PROFILE=1 or =FILE: every operator timed (profile.c). */
  const char *prof = getenv("PRIMUS_DEVICE_PROFILE");
  if (prof && *prof && strcmp(prof, "0")) d->i = prm__dev_profile_wrap(d->i, d->ctx, prof, &d->ctx);
  const char *uf = getenv("PRIMUS_DEVICE_UNFUSED");
  d->unfused = uf && !strcmp(uf, "1");
  *out = d;
  return 0;
}

void prm_dev_close(prm_dev_t *d) {
  if (!d) return;
  if (d->i && d->i->close) d->i->close(d->ctx);
  /* The module stays mapped: CUDA's libraries register exit handlers that
   * must still find their code when the process ends. */
  free(d);
}

/* ------------------------------------------------------------------------ */
/* Describing                                                                 */
/* ------------------------------------------------------------------------ */

static void prm__version(char *buf, size_t n, int v) {
  if (v <= 0) snprintf(buf, n, "?");
  else snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

void prm_dev_describe(const prm_dev_t *d, prm_sb_t *out) {
  const prm_dev_info_t *f = &d->info;
  if (d->kind == PRM_DEV_KIND_CPU) {
    void *ctx = prm__dev_unwrapped_ctx(d->i, d->ctx); /* under PRIMUS_DEVICE_PROFILE */
    prm_sb_appendf(out, "cpu (%s, %d threads%s)", prm__dev_cpu_gemm_name(ctx), f->sm_count,
                   d->i->host_memory ? "" : ", tagged test memory");
    return;
  }
  char rt[16], drv[16], mem[32];
  prm__version(rt, sizeof rt, f->runtime_version);
  prm__version(drv, sizeof drv, f->driver_version);
  prm_fmt_bytes(mem, sizeof mem, (double)f->total_bytes);
  prm_sb_appendf(out, "%s:%d %s (%s, compute capability %d.%d, %d SMs, %s, CUDA runtime %s, "
                 "driver %s", d->i->name, f->ordinal, f->name, f->arch, f->cc_major, f->cc_minor,
                 f->sm_count, mem, rt, drv);
  if (f->blas_version > 0)
    prm_sb_appendf(out, ", cuBLAS %d.%d.%d", f->blas_version / 10000,
                   (f->blas_version / 100) % 100, f->blas_version % 100);
  prm_sb_appendf(out, ")");
}

void prm_dev_usage(const prm_dev_t *d, uint64_t *in_use, uint64_t *peak) {
  uint64_t u[PRM_DEV_MEM__COUNT] = {0}, p[PRM_DEV_MEM__COUNT] = {0};
  d->i->usage(d->ctx, u, p);
  *in_use = *peak = 0;
  for (int c = 0; c < PRM_DEV_MEM__COUNT; c++) {
    *in_use += u[c];
    *peak += p[c];
  }
}

void prm_dev_describe_memory(const prm_dev_t *d, prm_sb_t *out) {
  uint64_t u[PRM_DEV_MEM__COUNT] = {0}, p[PRM_DEV_MEM__COUNT] = {0}, total = 0;
  d->i->usage(d->ctx, u, p);
  char b[32];
  prm_sb_appendf(out, "%s memory:", d->i->name);
  for (int c = 0; c < PRM_DEV_MEM__COUNT; c++) {
    total += u[c];
    if (!u[c]) continue;
    prm_fmt_bytes(b, sizeof b, (double)u[c]);
    prm_sb_appendf(out, " %s %s,", prm_mem_cat_name((prm_mem_cat_t)c), b);
  }
  prm_fmt_bytes(b, sizeof b, (double)total);
  prm_sb_appendf(out, " total %s", b);
  if (d->info.total_bytes) {
    prm_fmt_bytes(b, sizeof b, (double)d->info.total_bytes);
    prm_sb_appendf(out, " of %s", b);
  }
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                     */
/* ------------------------------------------------------------------------ */

void *prm_dev_alloc(const prm_dev_t *d, prm_mem_cat_t cat, size_t bytes) {
  return d->i->alloc(d->ctx, (int)cat, bytes);
}

void prm_dev_free(const prm_dev_t *d, prm_mem_cat_t cat, void *p, size_t bytes) {
  if (p) d->i->free(d->ctx, (int)cat, p, bytes);
}

/* The backend's first failure as err (PRM_ERUNTIME), after a failed call. */
static int prm__dev_fail(const prm_dev_t *d, const char *what, prm_err_t *err) {
  char msg[512] = "";
  d->i->sync(d->ctx, msg, sizeof msg);
  return prm_errf(err, PRM_ERUNTIME, "%s %s: %s", d->i->name, what, msg[0] ? msg : "failed");
}

int prm_dev_upload(const prm_dev_t *d, void *dst, const void *src, size_t bytes, prm_err_t *err) {
  return d->i->upload(d->ctx, dst, src, bytes) ? prm__dev_fail(d, "upload", err) : 0;
}

int prm_dev_download(const prm_dev_t *d, void *dst, const void *src, size_t bytes,
                     prm_err_t *err) {
  return d->i->download(d->ctx, dst, src, bytes) ? prm__dev_fail(d, "download", err) : 0;
}

int prm_dev_copy(const prm_dev_t *d, void *dst, const void *src, size_t bytes, prm_err_t *err) {
  return d->i->copy(d->ctx, dst, src, bytes) ? prm__dev_fail(d, "copy", err) : 0;
}

int prm_dev_zero(const prm_dev_t *d, void *p, size_t bytes, prm_err_t *err) {
  return d->i->zero(d->ctx, p, bytes) ? prm__dev_fail(d, "zero", err) : 0;
}

int prm_dev_sync(const prm_dev_t *d, prm_err_t *err) {
  char msg[512] = "";
  if (d->i->sync(d->ctx, msg, sizeof msg) == 0) return 0;
  return prm_errf(err, PRM_ERUNTIME, "%s: %s", d->i->name, msg[0] ? msg : "failed");
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                     */
/* ------------------------------------------------------------------------ */

int prm_dev_timer_start(const prm_dev_t *d, prm_dev_timer_t *t, prm_err_t *err) {
  t->t0 = 0;
  if (prm_dev_has_timer(d)) return d->i->timer_start(d->ctx) ? prm__dev_fail(d, "timer", err) : 0;
  /* Host time: what was queued before start is not the measured work. */
  int rc = prm_dev_sync(d, err);
  t->t0 = prm_time_now();
  return rc;
}

int prm_dev_timer_stop(const prm_dev_t *d, prm_dev_timer_t *t, double *ms, prm_err_t *err) {
  *ms = 0;
  if (prm_dev_has_timer(d)) {
    if (d->i->timer_stop(d->ctx, ms)) return prm__dev_fail(d, "timer", err);
    return prm_dev_sync(d, err); /* an operator's failure inside the timed work */
  }
  int rc = prm_dev_sync(d, err);
  *ms = (prm_time_now() - t->t0) * 1e3;
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Composite operators                                                        */
/* ------------------------------------------------------------------------ */

void prm_dev_linear_backward(const prm_dev_t *d, float *dx, float *dw, const float *dy,
                             const float *x, const float *w, int64_t N, int64_t in, int64_t out,
                             int dx_accum) {
  /* dx (N,in) = dy (N,out) W (out,in); dw (out,in) += dy^T x. */
  if (dx) d->i->sgemm(d->ctx, 0, 0, N, in, out, 1.0f, dy, out, w, in, dx_accum ? 1.0f : 0.0f, dx, in);
  if (dw) d->i->sgemm(d->ctx, 1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dw, in);
}

void prm_dev_adamw_multi(const prm_dev_t *d, float *p, const float *g, float *m, float *v,
                         prm_bf16_t *p16, const prm_dev_adamw_seg_t *segs, int nseg, float lr,
                         float beta1, float beta2, float eps, int64_t step, float gscale) {
  if (prm_dev_fused(d, d->i->adamw_multi != NULL)) {
    d->i->adamw_multi(d->ctx, p, g, m, v, p16, segs, nseg, lr, beta1, beta2, eps, step, gscale);
    return;
  }
  for (int i = 0; i < nseg; i++) {
    const prm_dev_adamw_seg_t *s = &segs[i];
    if (s->numel <= 0) continue;
    d->i->adamw(d->ctx, p + s->offset, g + s->offset, m + s->offset, v + s->offset, s->numel, lr,
                beta1, beta2, eps, s->wd, step, gscale);
    if (p16 && s->bf16) d->i->f32_to_bf16(d->ctx, p16 + s->offset, p + s->offset, s->numel);
  }
}

void prm_dev_sumsq_multi(const prm_dev_t *d, double *out, const float *x, const int64_t *off,
                         const int64_t *num, int nseg) {
  if (prm_dev_fused(d, d->i->sumsq_multi != NULL)) {
    d->i->sumsq_multi(d->ctx, out, x, off, num, nseg);
    return;
  }
  for (int i = 0; i < nseg; i++) {
    out[i] = 0;
    if (num[i] > 0) d->i->sumsq(d->ctx, &out[i], x + off[i], num[i]);
  }
}

void prm_dev_rmsnorm_forward16(const prm_dev_t *d, float *sum, float *out, prm_bf16_t *out16,
                               float *rstd, const float *a, const float *b, const float *w,
                               int64_t N, int64_t C, float eps) {
  if (prm_dev_fused(d, d->i->rmsnorm_forward16 != NULL)) {
    d->i->rmsnorm_forward16(d->ctx, sum, out, out16, rstd, a, b, w, N, C, eps);
    return;
  }
  if (b) d->i->add_rmsnorm_forward(d->ctx, sum, out, rstd, a, b, w, N, C, eps);
  else d->i->rmsnorm_forward(d->ctx, out, rstd, a, w, N, C, eps);
  d->i->f32_to_bf16(d->ctx, out16, out, N * C);
}

void prm_dev_swiglu_forward16(const prm_dev_t *d, float *h, prm_bf16_t *h16, const float *gate,
                              const float *up, int64_t n) {
  if (prm_dev_fused(d, d->i->swiglu_forward16 != NULL)) {
    d->i->swiglu_forward16(d->ctx, h, h16, gate, up, n);
    return;
  }
  d->i->swiglu_forward(d->ctx, h, gate, up, n);
  d->i->f32_to_bf16(d->ctx, h16, h, n);
}

void prm_dev_xent16(const prm_dev_t *d, float *losses, prm_bf16_t *d16, float *logits,
                    const int32_t *targets, int64_t N, int64_t V, float scale) {
  if (prm_dev_fused(d, d->i->xent16 != NULL)) {
    d->i->xent16(d->ctx, losses, d16, logits, targets, N, V, scale);
    return;
  }
  d->i->xent(d->ctx, losses, logits, logits, targets, N, V, scale);
  d->i->f32_to_bf16(d->ctx, d16, logits, N * V);
}

/* Targets that count in the loss: a negative target is masked. */
static int64_t count_targets(const int32_t *host_targets, int64_t N) {
  int64_t cnt = 0;
  for (int64_t n = 0; n < N; n++) cnt += host_targets[n] >= 0;
  return cnt;
}

double prm_dev_lmhead_xent(const prm_dev_t *d, float *dx, float *dw, int64_t *count,
                           const float *x, const float *w, const int32_t *targets,
                           const int32_t *host_targets, int64_t N, int64_t C, int64_t V,
                           float grad_scale, float *scratch, float *losses, int64_t chunk) {
  PRM_ASSERT(chunk > 0);
  int64_t cnt = count_targets(host_targets, N);
  int grads = dx || dw;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    int64_t rows = N - n0 < chunk ? N - n0 : chunk;
    const float *xc = x + n0 * C;
    /* logits (rows,V) = x_chunk W^T; the losses, then dlogits in place. */
    d->i->sgemm(d->ctx, 0, 1, rows, V, C, 1.0f, xc, C, w, C, 0.0f, scratch, V);
    d->i->xent(d->ctx, losses + n0, grads ? scratch : NULL, scratch, targets + n0, rows, V,
               grad_scale);
    if (!grads) continue;
    /* dx_chunk (rows,C) = dlogits W; dw (V,C) += dlogits^T x_chunk. */
    if (dx) d->i->sgemm(d->ctx, 0, 0, rows, C, V, 1.0f, scratch, V, w, C, 0.0f, dx + n0 * C, C);
    if (dw) d->i->sgemm(d->ctx, 1, 0, V, C, rows, 1.0f, scratch, V, xc, C, 1.0f, dw, C);
  }
  if (count) *count = cnt;
  double total = 0;
  d->i->sum(d->ctx, &total, losses, N);
  return total;
}

double prm_dev_lmhead_xent16(const prm_dev_t *d, float *dx, float *dw, int64_t *count,
                             const float *x, const prm_bf16_t *w16, const int32_t *targets,
                             const int32_t *host_targets, int64_t N, int64_t C, int64_t V,
                             float grad_scale, float *scratch, float *losses, int64_t chunk,
                             prm_bf16_t *x16, prm_bf16_t *d16) {
  PRM_ASSERT(chunk > 0);
  int64_t cnt = count_targets(host_targets, N);
  int grads = dx || dw;
  d->i->f32_to_bf16(d->ctx, x16, x, N * C);
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    int64_t rows = N - n0 < chunk ? N - n0 : chunk;
    const prm_bf16_t *xc = x16 + n0 * C;
    d->i->gemm_bf16(d->ctx, 0, 1, rows, V, C, 1.0f, xc, C, w16, C, 0.0f, scratch, V);
    if (!grads) {
      d->i->xent(d->ctx, losses + n0, NULL, scratch, targets + n0, rows, V, grad_scale);
      continue;
    }
    /* dlogits straight into bf16 (xent16), or in place then converted. */
    prm_dev_xent16(d, losses + n0, d16, scratch, targets + n0, rows, V, grad_scale);
    if (dx) d->i->gemm_bf16(d->ctx, 0, 0, rows, C, V, 1.0f, d16, V, w16, C, 0.0f, dx + n0 * C, C);
    if (dw) d->i->gemm_bf16(d->ctx, 1, 0, V, C, rows, 1.0f, d16, V, xc, C, 1.0f, dw, C);
  }
  if (count) *count = cnt;
  double total = 0;
  d->i->sum(d->ctx, &total, losses, N);
  return total;
}
