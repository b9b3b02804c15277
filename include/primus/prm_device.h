/* prm_device.h - the device layer: which processor computes (the CPU, or a
 * GPU through a backend module loaded at run time), the memory its tensors
 * live in, and the operators the engine needs, behind one table per
 * backend (src/device/device-abi.h; ggml's backend design).
 *
 * Choosing: `device: auto | cpu | cuda` (the trainer's key). auto takes
 * the GPU when the module loads and sees one, else the CPU, and says why;
 * cuda insists and fails with what is missing (the module, the driver, a
 * visible GPU). The CUDA backend is libprimus-cuda.so, looked for in this
 * order: $PRIMUS_CUDA_MODULE (a file), beside the primus binary, then
 * ../lib/primus/ beside it. The binary never links CUDA.
 *
 * Memory: prm_dev_alloc/free take a prm_mem_cat_t, so device memory is
 * reported by category like host memory (prm_dev_describe_memory). On the
 * CPU backend they are prm_mem_alloc/free, and the operators are today's
 * kernels with the GEMM backend given at open: the same bits as calling
 * them directly.
 *
 * Errors: operators are queued; the first failure is kept and returned by
 * prm_dev_sync (PRM_ERUNTIME with the backend's message).
 */
#ifndef PRM_DEVICE_H
#define PRM_DEVICE_H

#include "primus/prm_base.h"
#include "primus/prm_kernels.h"

/* The table and the module entry point: plain C shared with the backend
 * modules (nvcc, hipcc), which include it from src/. */
#include "../../src/device/device-abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  PRM_DEV_KIND_CPU = 0,
  PRM_DEV_KIND_CUDA = 1,
  PRM_DEV_KIND__COUNT
} prm_dev_kind_t;

/* An open device. Owned by whoever opened it (prm_dev_close). */
typedef struct prm_dev {
  const prm_dev_i *i;
  void *ctx;
  prm_dev_kind_t kind;
  void *dl;              /* the module's dlopen handle; NULL for the CPU */
  char module[512];      /* the module's path; "" for the CPU */
  char why[512];         /* how it was chosen, for the log ("auto: ...") */
  prm_dev_info_t info;   /* filled at open */
  /* PRIMUS_DEVICE_UNFUSED=1 at open: the fused members (adamw_multi,
   * rmsnorm_forward16, swiglu_forward16, sumsq_multi, xent16) are not called; their unfused
   * twins run instead (the same bits; an A/B switch for the benchmarks). */
  int unfused;
} prm_dev_t;

typedef struct {
  const char *want;        /* "auto" (NULL), "cpu" or "cuda" */
  int local_rank;          /* this rank's index on its node: the GPU it takes */
  prm_gemm_t gemm;         /* the CPU backend's GEMM (the engine's choice) */
  const char *module_path; /* NULL: the search order above */
} prm_dev_opts_t;

/* The kind named by s ("cpu", "cuda"), or -1. */
int prm_dev_kind_parse(const char *s);
const char *prm_dev_kind_name(prm_dev_kind_t k);

/* Opens the device o->want asks for. auto never fails for a missing GPU
 * (it falls back to the CPU and says why in d->why); cuda does, with
 * PRM_EPLATFORM (exit 2) when the module is missing or refuses (another
 * ABI), or there is no driver or no visible GPU, each message naming what
 * is missing and where it looked; PRM_ERUNTIME when the GPU is there but
 * its libraries fail to start. An unknown name is PRM_ECONFIG naming the
 * `device` key. The caller frees with prm_dev_close. */
int prm_dev_open(const prm_dev_opts_t *o, prm_dev_t **out, prm_err_t *err);
void prm_dev_close(prm_dev_t *d);
/* A plain CPU device over gemm (never the tagged test backend): what a
 * model built without a device computes on. Close with prm_dev_close. */
prm_dev_t *prm_dev_cpu_new(const prm_gemm_t *gemm);

/* The file the CUDA module would be loaded from (the first existing one
 * of the search order) into buf; returns 0, or PRM_ENOENT listing the
 * places looked in (buf then holds that list). */
int prm_dev_find_module(char *buf, size_t n);

/* 1 when the NVIDIA driver's library (libcuda.so.1) loads; else 0 with
 * the reason in why. auto checks this before loading the module. */
int prm_dev_driver_present(char *why, size_t n);

/* 1 when the device's pointers are host memory (the CPU backend). */
static inline int prm_dev_is_host(const prm_dev_t *d) { return d->i->host_memory; }

/* One line: "cpu (onednn, 2 threads)" or "cuda:0 NVIDIA H100 80GB HBM3 (sm_90,
 * 79.1 GiB, CUDA runtime 13.0, driver 13.0, cuBLAS 13.0.2)". */
void prm_dev_describe(const prm_dev_t *d, prm_sb_t *out);
/* The device memory in use by category, and the peak, as one line (for a
 * GPU; the CPU's memory is the host's and prm_mem_describe reports it). */
void prm_dev_describe_memory(const prm_dev_t *d, prm_sb_t *out);
/* Bytes in use and the high-water mark, over every category. */
void prm_dev_usage(const prm_dev_t *d, uint64_t *in_use, uint64_t *peak);

/* ---- memory ---- */

/* Zero-filled device memory, or NULL when it does not fit (the caller
 * names what it wanted). Free with the same category and size. */
void *prm_dev_alloc(const prm_dev_t *d, prm_mem_cat_t cat, size_t bytes);
void prm_dev_free(const prm_dev_t *d, prm_mem_cat_t cat, void *p, size_t bytes);
/* Copies and zeroing; PRM_ERUNTIME with the backend's message. */
int prm_dev_upload(const prm_dev_t *d, void *dst, const void *src, size_t bytes, prm_err_t *err);
int prm_dev_download(const prm_dev_t *d, void *dst, const void *src, size_t bytes, prm_err_t *err);
int prm_dev_copy(const prm_dev_t *d, void *dst, const void *src, size_t bytes, prm_err_t *err);
int prm_dev_zero(const prm_dev_t *d, void *p, size_t bytes, prm_err_t *err);
/* Waits for queued work; PRM_ERUNTIME with the first failure since the
 * last sync. */
int prm_dev_sync(const prm_dev_t *d, prm_err_t *err);

/* ---- timing (the benchmarks) ---- */

/* Times work queued between start and stop: on the device's own clock
 * where the backend has a timer (CUDA: events on its stream), else on the
 * host around a sync (the CPU). stop waits for the work and sets *ms;
 * PRM_ERUNTIME with the backend's message when the work or the timer
 * failed. */
typedef struct {
  double t0; /* host start (no device timer) */
} prm_dev_timer_t;
int prm_dev_timer_start(const prm_dev_t *d, prm_dev_timer_t *t, prm_err_t *err);
int prm_dev_timer_stop(const prm_dev_t *d, prm_dev_timer_t *t, double *ms, prm_err_t *err);
/* 1 when the backend times on the device's clock. */
static inline int prm_dev_has_timer(const prm_dev_t *d) {
  return d->i->timer_start && d->i->timer_stop;
}

/* ---- operators (contracts: prm_kernels.h; pointers: device memory) ---- */

static inline void prm_dev_sgemm(const prm_dev_t *d, int ta, int tb, int64_t M, int64_t N, int64_t K,
                                 float alpha, const float *A, int64_t lda, const float *B,
                                 int64_t ldb, float beta, float *C, int64_t ldc) {
  d->i->sgemm(d->ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
static inline void prm_dev_gemm_bf16(const prm_dev_t *d, int ta, int tb, int64_t M, int64_t N,
                                     int64_t K, float alpha, const prm_bf16_t *A, int64_t lda,
                                     const prm_bf16_t *B, int64_t ldb, float beta, float *C,
                                     int64_t ldc) {
  d->i->gemm_bf16(d->ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
/* y (N,out) = x (N,in) W^T, W (out,in). */
static inline void prm_dev_linear_forward(const prm_dev_t *d, float *y, const float *x,
                                          const float *w, int64_t N, int64_t in, int64_t out) {
  d->i->sgemm(d->ctx, 0, 1, N, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}
/* dx = dy W (overwritten, or added with dx_accum); dw += dy^T x; either
 * may be NULL. */
void prm_dev_linear_backward(const prm_dev_t *d, float *dx, float *dw, const float *dy,
                             const float *x, const float *w, int64_t N, int64_t in, int64_t out,
                             int dx_accum);
static inline void prm_dev_f32_to_bf16(const prm_dev_t *d, prm_bf16_t *dst, const float *src,
                                       int64_t n) {
  d->i->f32_to_bf16(d->ctx, dst, src, n);
}
static inline void prm_dev_bf16_to_f32(const prm_dev_t *d, float *dst, const prm_bf16_t *src,
                                       int64_t n) {
  d->i->bf16_to_f32(d->ctx, dst, src, n);
}
static inline void prm_dev_embedding_forward(const prm_dev_t *d, float *out, const int32_t *tok,
                                             const float *wte, int64_t N, int64_t C) {
  d->i->embedding_forward(d->ctx, out, tok, wte, N, C);
}
static inline void prm_dev_embedding_backward(const prm_dev_t *d, float *dwte, const float *dout,
                                              const int32_t *tok, int64_t N, int64_t C) {
  d->i->embedding_backward(d->ctx, dwte, dout, tok, N, C);
}
static inline void prm_dev_rmsnorm_forward(const prm_dev_t *d, float *out, float *rstd,
                                           const float *x, const float *w, int64_t N, int64_t C,
                                           float eps) {
  d->i->rmsnorm_forward(d->ctx, out, rstd, x, w, N, C, eps);
}
static inline void prm_dev_add_rmsnorm_forward(const prm_dev_t *d, float *sum, float *out,
                                               float *rstd, const float *a, const float *b,
                                               const float *w, int64_t N, int64_t C, float eps) {
  d->i->add_rmsnorm_forward(d->ctx, sum, out, rstd, a, b, w, N, C, eps);
}
static inline void prm_dev_rmsnorm_backward(const prm_dev_t *d, float *dx, float *dw,
                                            const float *dout, const float *x, const float *w,
                                            const float *rstd, int64_t N, int64_t C) {
  d->i->rmsnorm_backward(d->ctx, dx, dw, dout, x, w, rstd, N, C);
}
/* sign +1: prm_rope_forward(_pos); -1: prm_rope_backward(_pos). */
static inline void prm_dev_rope(const prm_dev_t *d, float *x, const float *cos_t,
                                const float *sin_t, int64_t B, int64_t T, int64_t nh, int64_t D,
                                int64_t pos0, const int32_t *pos, float sign) {
  d->i->rope(d->ctx, x, cos_t, sin_t, B, T, nh, D, pos0, pos, sign);
}
static inline void prm_dev_swiglu_forward(const prm_dev_t *d, float *h, const float *gate,
                                          const float *up, int64_t n) {
  d->i->swiglu_forward(d->ctx, h, gate, up, n);
}
static inline void prm_dev_swiglu_backward(const prm_dev_t *d, float *dgate, float *dup,
                                           const float *dh, const float *gate, const float *up,
                                           int64_t n) {
  d->i->swiglu_backward(d->ctx, dgate, dup, dh, gate, up, n);
}
static inline void prm_dev_add(const prm_dev_t *d, float *y, const float *a, const float *b,
                               int64_t n) {
  d->i->add(d->ctx, y, a, b, n);
}
static inline void prm_dev_attention_forward(const prm_dev_t *d, float *out, float *lse,
                                             const float *q, const float *k, const float *v,
                                             const int32_t *seg, int64_t B, int64_t T, int64_t H,
                                             int64_t G, int64_t D) {
  d->i->attention_forward(d->ctx, out, lse, q, k, v, seg, B, T, H, G, D);
}
static inline void prm_dev_attention_backward(const prm_dev_t *d, float *dq, float *dk, float *dv,
                                              const float *dout, const float *q, const float *k,
                                              const float *v, const float *out, const float *lse,
                                              const int32_t *seg, int64_t B, int64_t T, int64_t H,
                                              int64_t G, int64_t D) {
  d->i->attention_backward(d->ctx, dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
}
static inline void prm_dev_attention_decode(const prm_dev_t *d, float *out, const float *q,
                                            const float *kc, const float *vc, int64_t Tq,
                                            int64_t Tk, int64_t H, int64_t G, int64_t D) {
  d->i->attention_decode(d->ctx, out, q, kc, vc, Tq, Tk, H, G, D);
}
static inline void prm_dev_xent(const prm_dev_t *d, float *losses, float *dlogits,
                                const float *logits, const int32_t *targets, int64_t N, int64_t V,
                                float scale) {
  d->i->xent(d->ctx, losses, dlogits, logits, targets, N, V, scale);
}
static inline void prm_dev_adamw(const prm_dev_t *d, float *p, const float *g, float *m, float *v,
                                 int64_t n, float lr, float beta1, float beta2, float eps,
                                 float wd, int64_t step, float gscale) {
  d->i->adamw(d->ctx, p, g, m, v, n, lr, beta1, beta2, eps, wd, step, gscale);
}
/* Sum of squares / sum in double, fixed order; waits for the result. */
static inline double prm_dev_sumsq(const prm_dev_t *d, const float *x, int64_t n) {
  double s = 0;
  d->i->sumsq(d->ctx, &s, x, n);
  return s;
}
static inline double prm_dev_sum(const prm_dev_t *d, const float *x, int64_t n) {
  double s = 0;
  d->i->sum(d->ctx, &s, x, n);
  return s;
}
static inline void prm_dev_scale(const prm_dev_t *d, float *x, int64_t n, float s) {
  d->i->scale(d->ctx, x, n, s);
}

/* ---- bf16 and fused operators (issue 24; device-abi.h) ---- */

/* 1 when the backend has bf16 attention (both directions). */
static inline int prm_dev_has_attention_bf16(const prm_dev_t *d) {
  return d->i->attention_forward_bf16 && d->i->attention_backward_bf16;
}
/* The backend's bf16 attention (prm_dev_has_attention_bf16 must hold). */
static inline void prm_dev_attention_forward_bf16(const prm_dev_t *d, float *out, float *lse,
                                                  const prm_bf16_t *q, const prm_bf16_t *k,
                                                  const prm_bf16_t *v, const int32_t *seg,
                                                  int64_t B, int64_t T, int64_t H, int64_t G,
                                                  int64_t D) {
  d->i->attention_forward_bf16(d->ctx, out, lse, q, k, v, seg, B, T, H, G, D);
}
static inline void prm_dev_attention_backward_bf16(const prm_dev_t *d, float *dq, float *dk,
                                                   float *dv, const prm_bf16_t *dout,
                                                   const prm_bf16_t *q, const prm_bf16_t *k,
                                                   const prm_bf16_t *v, const float *out,
                                                   const float *lse, const int32_t *seg,
                                                   int64_t B, int64_t T, int64_t H, int64_t G,
                                                   int64_t D) {
  d->i->attention_backward_bf16(d->ctx, dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
}
/* 1 when prm_dev_adamw_multi / _forward16 below run the backend's fused
 * member (not PRIMUS_DEVICE_UNFUSED=1, and the member is there). */
static inline int prm_dev_fused(const prm_dev_t *d, int has_member) {
  return has_member && !d->unfused;
}
/* AdamW over the segments of one block, and the bf16 copy (p16) of those
 * marked bf16: the fused member, or adamw per segment then f32_to_bf16
 * (the same bits). */
void prm_dev_adamw_multi(const prm_dev_t *d, float *p, const float *g, float *m, float *v,
                         prm_bf16_t *p16, const prm_dev_adamw_seg_t *segs, int nseg, float lr,
                         float beta1, float beta2, float eps, int64_t step, float gscale);
/* (add_)rmsnorm_forward and out16 = bf16(out) (b NULL: no add). */
void prm_dev_rmsnorm_forward16(const prm_dev_t *d, float *sum, float *out, prm_bf16_t *out16,
                               float *rstd, const float *a, const float *b, const float *w,
                               int64_t N, int64_t C, float eps);
/* swiglu_forward and h16 = bf16(h). */
void prm_dev_swiglu_forward16(const prm_dev_t *d, float *h, prm_bf16_t *h16, const float *gate,
                              const float *up, int64_t n);

/* xent's losses and its dlogits in bf16 only (d16, not overlapping
 * logits): the fused member, or xent in place in logits then f32_to_bf16
 * (the same bits in d16; only the twin overwrites logits). */
void prm_dev_xent16(const prm_dev_t *d, float *losses, prm_bf16_t *d16, float *logits,
                    const int32_t *targets, int64_t N, int64_t V, float scale);

/* Sums of squares of nseg pieces of x (off, num, out: host), each the
 * bits prm_dev_sumsq gives: the backend's one pass and one wait, or
 * sumsq per piece (the twin, also under PRIMUS_DEVICE_UNFUSED=1). */
void prm_dev_sumsq_multi(const prm_dev_t *d, double *out, const float *x, const int64_t *off,
                         const int64_t *num, int nseg);

/* The LM head fused with its loss on the device, prm_lmhead_xent's
 * contract: over chunks of `chunk` rows, logits = x W^T into scratch
 * (chunk,V), per-row losses into losses (N), then with dx/dw dlogits in
 * place, dx = dlogits W, dw += dlogits^T x. Returns the summed loss (the
 * rows' losses summed in double on the device) and in *count the unmasked
 * targets, counted from host_targets (the same N ids on the host). */
double prm_dev_lmhead_xent(const prm_dev_t *d, float *dx, float *dw, int64_t *count,
                           const float *x, const float *w, const int32_t *targets,
                           const int32_t *host_targets, int64_t N, int64_t C, int64_t V,
                           float grad_scale, float *scratch, float *losses, int64_t chunk);

/* The same in bf16 mixed precision, as the CPU's bf16 head
 * (prm__tp_lmhead_xent with bf16 weights): x rounded once into x16 (N,C),
 * logits = x16 W16^T (bf16 GEMM, fp32 logits), the loss and dlogits in
 * fp32, dlogits rounded into d16 (chunk,V), dx = d16 W16, dw += d16^T x16.
 * w16: the head's bf16 weight; x16, d16: bf16 device scratch. */
double prm_dev_lmhead_xent16(const prm_dev_t *d, float *dx, float *dw, int64_t *count,
                             const float *x, const prm_bf16_t *w16, const int32_t *targets,
                             const int32_t *host_targets, int64_t N, int64_t C, int64_t V,
                             float grad_scale, float *scratch, float *losses, int64_t chunk,
                             prm_bf16_t *x16, prm_bf16_t *d16);

#ifdef __cplusplus
}
#endif
#endif /* PRM_DEVICE_H */
