/* tagged.c - a test backend: the CPU kernels on host memory whose
 * pointers are handed out moved by a fixed distance into unmapped address
 * space, so that any code that reads or writes "device" memory from the
 * host faults at once, while the operators (which move the pointers back)
 * compute the CPU backend's bits. With it the GPU code paths of the model
 * and trainer - uploads, downloads, the optimizer and norms through the
 * table - run and are checked in every build, without a GPU.
 *
 * Chosen by PRIMUS_DEVICE_TAGGED=1 where the CPU would be (prm_dev_open).
 * Not a user feature: it exists for the tests (docs/cuda.md). */
#define _GNU_SOURCE
#include "device-impl.h"

#include <stdlib.h>
#include <string.h>

/* 16 TiB: far from every mapping of an x86-64 or arm64 process (heap,
 * libraries, stacks and the sanitizers' shadow), and a multiple of every
 * alignment. */
#define PRM__TAG ((uintptr_t)1 << 44)

static void *tag(void *p) {
  PRM_ASSERT(!p || (uintptr_t)p > PRM__TAG);
  return p ? (void *)((uintptr_t)p - PRM__TAG) : NULL;
}
/* The host address of a device pointer (NULL stays NULL). */
#define U(p) ((__typeof__(p))((p) ? (void *)((uintptr_t)(p) + PRM__TAG) : NULL))

static const prm_dev_i *cpu(void) { return prm__dev_cpu_table(); }

/* PRIMUS_DEVICE_TAGGED_LIMIT=BYTES: the device's memory, so that running
 * out of it can be tested (0 or unset: the host's). */
static size_t prm__tagged_limit, prm__tagged_used;

static void *t_alloc(void *ctx, int cat, size_t bytes) {
  size_t used = __atomic_load_n(&prm__tagged_used, __ATOMIC_RELAXED);
  if (prm__tagged_limit && used + bytes > prm__tagged_limit) return NULL;
  void *p = cpu()->alloc(ctx, cat, bytes);
  if (p) __atomic_add_fetch(&prm__tagged_used, bytes, __ATOMIC_RELAXED);
  return tag(p);
}
static void t_free(void *ctx, int cat, void *p, size_t bytes) {
  if (!p) return;
  __atomic_sub_fetch(&prm__tagged_used, bytes, __ATOMIC_RELAXED);
  cpu()->free(ctx, cat, U(p), bytes);
}
static int t_upload(void *ctx, void *dst, const void *src, size_t n) { return cpu()->upload(ctx, U(dst), src, n); }
static int t_download(void *ctx, void *dst, const void *src, size_t n) { return cpu()->download(ctx, dst, U(src), n); }
static int t_copy(void *ctx, void *dst, const void *src, size_t n) { return cpu()->copy(ctx, U(dst), U(src), n); }
static int t_zero(void *ctx, void *p, size_t n) { return cpu()->zero(ctx, U(p), n); }

static void t_sgemm(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc) {
  cpu()->sgemm(ctx, ta, tb, M, N, K, alpha, U(A), lda, U(B), ldb, beta, U(C), ldc);
}
static void t_gemm_bf16(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const prm_dev_bf16_t *A, int64_t lda, const prm_dev_bf16_t *B, int64_t ldb,
                        float beta, float *C, int64_t ldc) {
  cpu()->gemm_bf16(ctx, ta, tb, M, N, K, alpha, U(A), lda, U(B), ldb, beta, U(C), ldc);
}
static void t_f2b(void *ctx, prm_dev_bf16_t *d, const float *s, int64_t n) { cpu()->f32_to_bf16(ctx, U(d), U(s), n); }
static void t_b2f(void *ctx, float *d, const prm_dev_bf16_t *s, int64_t n) { cpu()->bf16_to_f32(ctx, U(d), U(s), n); }
static void t_emb_f(void *ctx, float *o, const int32_t *t, const float *w, int64_t N, int64_t C) {
  cpu()->embedding_forward(ctx, U(o), U(t), U(w), N, C);
}
static void t_emb_b(void *ctx, float *dw, const float *d, const int32_t *t, int64_t N, int64_t C) {
  cpu()->embedding_backward(ctx, U(dw), U(d), U(t), N, C);
}
static void t_rms_f(void *ctx, float *o, float *r, const float *x, const float *w, int64_t N,
                    int64_t C, float eps) {
  cpu()->rmsnorm_forward(ctx, U(o), U(r), U(x), U(w), N, C, eps);
}
static void t_add_rms_f(void *ctx, float *s, float *o, float *r, const float *a, const float *b,
                        const float *w, int64_t N, int64_t C, float eps) {
  cpu()->add_rmsnorm_forward(ctx, U(s), U(o), U(r), U(a), U(b), U(w), N, C, eps);
}
static void t_rms_b(void *ctx, float *dx, float *dw, const float *d, const float *x, const float *w,
                    const float *r, int64_t N, int64_t C) {
  cpu()->rmsnorm_backward(ctx, U(dx), U(dw), U(d), U(x), U(w), U(r), N, C);
}
static void t_rope(void *ctx, float *x, const float *c, const float *s, int64_t B, int64_t T,
                   int64_t nh, int64_t D, int64_t pos0, const int32_t *pos, float sign) {
  cpu()->rope(ctx, U(x), U(c), U(s), B, T, nh, D, pos0, U(pos), sign);
}
static void t_swi_f(void *ctx, float *h, const float *g, const float *u, int64_t n) {
  cpu()->swiglu_forward(ctx, U(h), U(g), U(u), n);
}
static void t_swi_b(void *ctx, float *dg, float *du, const float *dh, const float *g, const float *u,
                    int64_t n) {
  cpu()->swiglu_backward(ctx, U(dg), U(du), U(dh), U(g), U(u), n);
}
static void t_add(void *ctx, float *y, const float *a, const float *b, int64_t n) { cpu()->add(ctx, U(y), U(a), U(b), n); }
static void t_att_f(void *ctx, float *o, float *l, const float *q, const float *k, const float *v,
                    const int32_t *seg, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  cpu()->attention_forward(ctx, U(o), U(l), U(q), U(k), U(v), U(seg), B, T, H, G, D);
}
static void t_att_b(void *ctx, float *dq, float *dk, float *dv, const float *d, const float *q,
                    const float *k, const float *v, const float *o, const float *l,
                    const int32_t *seg, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  cpu()->attention_backward(ctx, U(dq), U(dk), U(dv), U(d), U(q), U(k), U(v), U(o), U(l), U(seg),
                            B, T, H, G, D);
}
static void t_att_d(void *ctx, float *o, const float *q, const float *kc, const float *vc,
                    int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D) {
  cpu()->attention_decode(ctx, U(o), U(q), U(kc), U(vc), Tq, Tk, H, G, D);
}
static void t_xent(void *ctx, float *l, float *dl, const float *lg, const int32_t *t, int64_t N,
                   int64_t V, float s) {
  cpu()->xent(ctx, U(l), U(dl), U(lg), U(t), N, V, s);
}
static void t_adamw(void *ctx, float *p, const float *g, float *m, float *v, int64_t n, float lr,
                    float b1, float b2, float eps, float wd, int64_t step, float gs) {
  cpu()->adamw(ctx, U(p), U(g), U(m), U(v), n, lr, b1, b2, eps, wd, step, gs);
}
static void t_sumsq(void *ctx, double *o, const float *x, int64_t n) { cpu()->sumsq(ctx, o, U(x), n); }
static void t_sum(void *ctx, double *o, const float *x, int64_t n) { cpu()->sum(ctx, o, U(x), n); }
static void t_scale(void *ctx, float *x, int64_t n, float s) { cpu()->scale(ctx, U(x), n, s); }

static void t_att_f16(void *ctx, float *o, float *l, const prm_dev_bf16_t *q,
                      const prm_dev_bf16_t *k, const prm_dev_bf16_t *v, const int32_t *seg,
                      int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  cpu()->attention_forward_bf16(ctx, U(o), U(l), U(q), U(k), U(v), U(seg), B, T, H, G, D);
}
static void t_att_b16(void *ctx, float *dq, float *dk, float *dv, const prm_dev_bf16_t *d,
                      const prm_dev_bf16_t *q, const prm_dev_bf16_t *k, const prm_dev_bf16_t *v,
                      const float *o, const float *l, const int32_t *seg, int64_t B, int64_t T,
                      int64_t H, int64_t G, int64_t D) {
  cpu()->attention_backward_bf16(ctx, U(dq), U(dk), U(dv), U(d), U(q), U(k), U(v), U(o), U(l),
                                 U(seg), B, T, H, G, D);
}
static void t_adamw_multi(void *ctx, float *p, const float *g, float *m, float *v,
                          prm_dev_bf16_t *p16, const prm_dev_adamw_seg_t *segs, int nseg, float lr,
                          float b1, float b2, float eps, int64_t step, float gs) {
  /* segs is host memory, as the ABI says. */
  cpu()->adamw_multi(ctx, U(p), U(g), U(m), U(v), U(p16), segs, nseg, lr, b1, b2, eps, step, gs);
}
static void t_rms_f16(void *ctx, float *s, float *o, prm_dev_bf16_t *o16, float *r, const float *a,
                      const float *b, const float *w, int64_t N, int64_t C, float eps) {
  cpu()->rmsnorm_forward16(ctx, U(s), U(o), U(o16), U(r), U(a), U(b), U(w), N, C, eps);
}
static void t_swi_f16(void *ctx, float *h, prm_dev_bf16_t *h16, const float *g, const float *u,
                      int64_t n) {
  cpu()->swiglu_forward16(ctx, U(h), U(h16), U(g), U(u), n);
}

static void t_sumsq_multi(void *ctx, double *o, const float *x, const int64_t *off,
                          const int64_t *num, int nseg) {
  cpu()->sumsq_multi(ctx, o, U(x), off, num, nseg); /* o, off, num: host */
}

static void t_xent16(void *ctx, float *l, prm_dev_bf16_t *d16, const float *lg, const int32_t *t,
                     int64_t N, int64_t V, float s) {
  cpu()->xent16(ctx, U(l), U(d16), U(lg), U(t), N, V, s);
}

static prm_dev_i prm__tagged_i;

const prm_dev_i *prm__dev_tagged_table(void) {
  prm_dev_i *t = &prm__tagged_i;
  if (t->name) return t;
  *t = *cpu(); /* close, info, sync, usage: the CPU's, no pointers */
  const char *lim = getenv("PRIMUS_DEVICE_TAGGED_LIMIT");
  prm__tagged_limit = lim ? (size_t)strtoull(lim, NULL, 10) : 0;
  t->host_memory = 0;
  t->alloc = t_alloc, t->free = t_free, t->upload = t_upload, t->download = t_download;
  t->copy = t_copy, t->zero = t_zero, t->sgemm = t_sgemm, t->gemm_bf16 = t_gemm_bf16;
  t->f32_to_bf16 = t_f2b, t->bf16_to_f32 = t_b2f, t->embedding_forward = t_emb_f;
  t->embedding_backward = t_emb_b, t->rmsnorm_forward = t_rms_f;
  t->add_rmsnorm_forward = t_add_rms_f, t->rmsnorm_backward = t_rms_b, t->rope = t_rope;
  t->swiglu_forward = t_swi_f, t->swiglu_backward = t_swi_b, t->add = t_add;
  t->attention_forward = t_att_f, t->attention_backward = t_att_b, t->attention_decode = t_att_d;
  t->xent = t_xent, t->adamw = t_adamw, t->sumsq = t_sumsq, t->sum = t_sum, t->scale = t_scale;
  t->attention_forward_bf16 = t_att_f16, t->attention_backward_bf16 = t_att_b16;
  t->adamw_multi = t_adamw_multi, t->rmsnorm_forward16 = t_rms_f16;
  t->swiglu_forward16 = t_swi_f16, t->sumsq_multi = t_sumsq_multi, t->xent16 = t_xent16;
  t->name = "tagged";
  return t;
}
