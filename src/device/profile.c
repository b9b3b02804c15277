/* profile.c - where a device's time goes, operator by operator: a table
 * that wraps any backend's (prm__dev_profile_wrap), waits for each
 * operator it passes on and adds the time the device spent on it (the
 * backend's timer where it has one: CUDA events; else the host's clock) to
 * the operator's line, and to its shape's line for the GEMMs. The report
 * is written when the device closes.
 *
 * Chosen by PRIMUS_DEVICE_PROFILE (prm_dev_open): "1" writes the report to
 * stderr, any other value is a file to write it to (atomically). Waiting
 * after every operator removes the overlap of launches with work, so a
 * profiled step is slower than a plain one; the operators' times are the
 * work itself, the difference is what launches and gaps cost. */
#define _GNU_SOURCE
#include "device-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRM__PROF_OPS(X)                                                                         \
  X(upload) X(download) X(copy) X(zero) X(sgemm) X(gemm_bf16) X(f32_to_bf16) X(bf16_to_f32)      \
  X(embedding_forward) X(embedding_backward) X(rmsnorm_forward) X(add_rmsnorm_forward)           \
  X(rmsnorm_backward) X(rope) X(swiglu_forward) X(swiglu_backward) X(add) X(attention_forward)   \
  X(attention_backward) X(attention_decode) X(xent) X(adamw) X(sumsq) X(sum) X(scale)            \
  X(attention_forward_bf16) X(attention_backward_bf16) X(adamw_multi) X(rmsnorm_forward16)       \
  X(swiglu_forward16) X(sumsq_multi) X(xent16)

enum {
#define PRM__E(n) OP_##n,
  PRM__PROF_OPS(PRM__E)
#undef PRM__E
  OP__COUNT
};
static const char *const op_names[] = {
#define PRM__N(n) #n,
    PRM__PROF_OPS(PRM__N)
#undef PRM__N
};

typedef struct {
  int64_t calls;
  double dev_ms, wall_ms, flops;
} prm__stat_t;

/* GEMM shapes kept apart; beyond this many, the rest share one line. */
#define PRM__PROF_SHAPES 96

typedef struct {
  int bf16, ta, tb;
  int64_t M, N, K;
  prm__stat_t s;
} prm__shape_t;

typedef struct {
  prm_dev_i t;          /* the table handed out: this file's members */
  const prm_dev_i *in;  /* the backend's table and context, owned here */
  void *ctx;
  char *dest;           /* "1": stderr; else a file (owned) */
  prm__stat_t op[OP__COUNT];
  prm__shape_t shape[PRM__PROF_SHAPES + 1];
  int nshape;
} prm__prof_t;

#define PP ((prm__prof_t *)ctx)

static double beg(prm__prof_t *p) {
  char msg[8];
  p->in->sync(p->ctx, msg, sizeof msg); /* a failure stays for the core's sync */
  if (p->in->timer_start) p->in->timer_start(p->ctx);
  return prm_time_now();
}
static prm__stat_t *end(prm__prof_t *p, int op, double t0) {
  double ms = 0;
  char msg[8];
  if (p->in->timer_stop) p->in->timer_stop(p->ctx, &ms);
  else p->in->sync(p->ctx, msg, sizeof msg);
  double wall = (prm_time_now() - t0) * 1e3;
  prm__stat_t *s = &p->op[op];
  s->calls++;
  s->dev_ms += p->in->timer_stop ? ms : wall;
  s->wall_ms += wall;
  return s;
}
#define B double t0_ = beg(PP)
#define E(op) end(PP, OP_##op, t0_)

static void gemm_shape(prm__prof_t *p, const prm__stat_t *s, double ms_before, int bf16, int ta,
                       int tb, int64_t M, int64_t N, int64_t K) {
  prm__shape_t *h = NULL;
  for (int i = 0; i < p->nshape && !h; i++) {
    prm__shape_t *c = &p->shape[i];
    if (c->bf16 == bf16 && c->ta == ta && c->tb == tb && c->M == M && c->N == N && c->K == K) h = c;
  }
  if (!h && p->nshape < PRM__PROF_SHAPES) {
    h = &p->shape[p->nshape++];
    *h = (prm__shape_t){.bf16 = bf16, .ta = ta, .tb = tb, .M = M, .N = N, .K = K};
  }
  if (!h) h = &p->shape[PRM__PROF_SHAPES]; /* "other shapes" */
  h->s.calls++;
  h->s.dev_ms += s->dev_ms - ms_before;
  h->s.flops += 2.0 * (double)M * (double)N * (double)K;
}

/* ---- pass-through members (the context swapped) ---- */
static void p_close(void *ctx);
static int p_info(void *ctx, prm_dev_info_t *o) { return PP->in->info(PP->ctx, o); }
static int p_sync(void *ctx, char *m, size_t n) { return PP->in->sync(PP->ctx, m, n); }
static void *p_alloc(void *ctx, int cat, size_t n) { return PP->in->alloc(PP->ctx, cat, n); }
static void p_free(void *ctx, int cat, void *q, size_t n) { PP->in->free(PP->ctx, cat, q, n); }
static void p_usage(void *ctx, uint64_t *u, uint64_t *k) { PP->in->usage(PP->ctx, u, k); }
static void p_set_tf32(void *ctx, int on) { PP->in->set_tf32(PP->ctx, on); }
static int p_timer_start(void *ctx) { return PP->in->timer_start(PP->ctx); }
static int p_timer_stop(void *ctx, double *ms) { return PP->in->timer_stop(PP->ctx, ms); }

/* ---- timed members ---- */
static int p_upload(void *ctx, void *d, const void *s, size_t n) {
  B; int rc = PP->in->upload(PP->ctx, d, s, n); E(upload); return rc;
}
static int p_download(void *ctx, void *d, const void *s, size_t n) {
  B; int rc = PP->in->download(PP->ctx, d, s, n); E(download); return rc;
}
static int p_copy(void *ctx, void *d, const void *s, size_t n) {
  B; int rc = PP->in->copy(PP->ctx, d, s, n); E(copy); return rc;
}
static int p_zero(void *ctx, void *d, size_t n) {
  B; int rc = PP->in->zero(PP->ctx, d, n); E(zero); return rc;
}
static void p_sgemm(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float al,
                    const float *A, int64_t lda, const float *Bm, int64_t ldb, float be, float *C,
                    int64_t ldc) {
  double before = PP->op[OP_sgemm].dev_ms;
  B; PP->in->sgemm(PP->ctx, ta, tb, M, N, K, al, A, lda, Bm, ldb, be, C, ldc);
  prm__stat_t *s = E(sgemm);
  s->flops += 2.0 * (double)M * (double)N * (double)K;
  gemm_shape(PP, s, before, 0, ta, tb, M, N, K);
}
static void p_gemm_bf16(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float al,
                        const prm_dev_bf16_t *A, int64_t lda, const prm_dev_bf16_t *Bm,
                        int64_t ldb, float be, float *C, int64_t ldc) {
  double before = PP->op[OP_gemm_bf16].dev_ms;
  B; PP->in->gemm_bf16(PP->ctx, ta, tb, M, N, K, al, A, lda, Bm, ldb, be, C, ldc);
  prm__stat_t *s = E(gemm_bf16);
  s->flops += 2.0 * (double)M * (double)N * (double)K;
  gemm_shape(PP, s, before, 1, ta, tb, M, N, K);
}
static void p_f2b(void *ctx, prm_dev_bf16_t *d, const float *s, int64_t n) {
  B; PP->in->f32_to_bf16(PP->ctx, d, s, n); E(f32_to_bf16);
}
static void p_b2f(void *ctx, float *d, const prm_dev_bf16_t *s, int64_t n) {
  B; PP->in->bf16_to_f32(PP->ctx, d, s, n); E(bf16_to_f32);
}
static void p_emb_f(void *ctx, float *o, const int32_t *t, const float *w, int64_t N, int64_t C) {
  B; PP->in->embedding_forward(PP->ctx, o, t, w, N, C); E(embedding_forward);
}
static void p_emb_b(void *ctx, float *dw, const float *d, const int32_t *t, int64_t N, int64_t C) {
  B; PP->in->embedding_backward(PP->ctx, dw, d, t, N, C); E(embedding_backward);
}
static void p_rms_f(void *ctx, float *o, float *r, const float *x, const float *w, int64_t N,
                    int64_t C, float eps) {
  B; PP->in->rmsnorm_forward(PP->ctx, o, r, x, w, N, C, eps); E(rmsnorm_forward);
}
static void p_add_rms_f(void *ctx, float *s, float *o, float *r, const float *a, const float *b,
                        const float *w, int64_t N, int64_t C, float eps) {
  B; PP->in->add_rmsnorm_forward(PP->ctx, s, o, r, a, b, w, N, C, eps); E(add_rmsnorm_forward);
}
static void p_rms_b(void *ctx, float *dx, float *dw, const float *d, const float *x, const float *w,
                    const float *r, int64_t N, int64_t C) {
  B; PP->in->rmsnorm_backward(PP->ctx, dx, dw, d, x, w, r, N, C); E(rmsnorm_backward);
}
static void p_rope(void *ctx, float *x, const float *c, const float *s, int64_t Bn, int64_t T,
                   int64_t nh, int64_t D, int64_t pos0, const int32_t *pos, float sign) {
  B; PP->in->rope(PP->ctx, x, c, s, Bn, T, nh, D, pos0, pos, sign); E(rope);
}
static void p_swi_f(void *ctx, float *h, const float *g, const float *u, int64_t n) {
  B; PP->in->swiglu_forward(PP->ctx, h, g, u, n); E(swiglu_forward);
}
static void p_swi_b(void *ctx, float *dg, float *du, const float *dh, const float *g,
                    const float *u, int64_t n) {
  B; PP->in->swiglu_backward(PP->ctx, dg, du, dh, g, u, n); E(swiglu_backward);
}
static void p_add(void *ctx, float *y, const float *a, const float *b, int64_t n) {
  B; PP->in->add(PP->ctx, y, a, b, n); E(add);
}
static void p_att_f(void *ctx, float *o, float *l, const float *q, const float *k, const float *v,
                    const int32_t *seg, int64_t Bn, int64_t T, int64_t H, int64_t G, int64_t D) {
  B; PP->in->attention_forward(PP->ctx, o, l, q, k, v, seg, Bn, T, H, G, D); E(attention_forward);
}
static void p_att_b(void *ctx, float *dq, float *dk, float *dv, const float *d, const float *q,
                    const float *k, const float *v, const float *o, const float *l,
                    const int32_t *seg, int64_t Bn, int64_t T, int64_t H, int64_t G, int64_t D) {
  B; PP->in->attention_backward(PP->ctx, dq, dk, dv, d, q, k, v, o, l, seg, Bn, T, H, G, D);
  E(attention_backward);
}
static void p_att_d(void *ctx, float *o, const float *q, const float *kc, const float *vc,
                    int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D) {
  B; PP->in->attention_decode(PP->ctx, o, q, kc, vc, Tq, Tk, H, G, D); E(attention_decode);
}
static void p_xent(void *ctx, float *l, float *dl, const float *lg, const int32_t *t, int64_t N,
                   int64_t V, float s) {
  B; PP->in->xent(PP->ctx, l, dl, lg, t, N, V, s); E(xent);
}
static void p_adamw(void *ctx, float *p, const float *g, float *m, float *v, int64_t n, float lr,
                    float b1, float b2, float eps, float wd, int64_t step, float gs) {
  B; PP->in->adamw(PP->ctx, p, g, m, v, n, lr, b1, b2, eps, wd, step, gs); E(adamw);
}
static void p_sumsq(void *ctx, double *o, const float *x, int64_t n) {
  B; PP->in->sumsq(PP->ctx, o, x, n); E(sumsq);
}
static void p_sum(void *ctx, double *o, const float *x, int64_t n) {
  B; PP->in->sum(PP->ctx, o, x, n); E(sum);
}
static void p_scale(void *ctx, float *x, int64_t n, float s) {
  B; PP->in->scale(PP->ctx, x, n, s); E(scale);
}
static void p_att_f16(void *ctx, float *o, float *l, const prm_dev_bf16_t *q,
                      const prm_dev_bf16_t *k, const prm_dev_bf16_t *v, const int32_t *seg,
                      int64_t Bn, int64_t T, int64_t H, int64_t G, int64_t D) {
  B; PP->in->attention_forward_bf16(PP->ctx, o, l, q, k, v, seg, Bn, T, H, G, D);
  E(attention_forward_bf16);
}
static void p_att_b16(void *ctx, float *dq, float *dk, float *dv, const prm_dev_bf16_t *d,
                      const prm_dev_bf16_t *q, const prm_dev_bf16_t *k, const prm_dev_bf16_t *v,
                      const float *o, const float *l, const int32_t *seg, int64_t Bn, int64_t T,
                      int64_t H, int64_t G, int64_t D) {
  B; PP->in->attention_backward_bf16(PP->ctx, dq, dk, dv, d, q, k, v, o, l, seg, Bn, T, H, G, D);
  E(attention_backward_bf16);
}
static void p_adamw_multi(void *ctx, float *p, const float *g, float *m, float *v,
                          prm_dev_bf16_t *p16, const prm_dev_adamw_seg_t *segs, int nseg, float lr,
                          float b1, float b2, float eps, int64_t step, float gs) {
  B; PP->in->adamw_multi(PP->ctx, p, g, m, v, p16, segs, nseg, lr, b1, b2, eps, step, gs);
  E(adamw_multi);
}
static void p_rms_f16(void *ctx, float *s, float *o, prm_dev_bf16_t *o16, float *r, const float *a,
                      const float *b, const float *w, int64_t N, int64_t C, float eps) {
  B; PP->in->rmsnorm_forward16(PP->ctx, s, o, o16, r, a, b, w, N, C, eps); E(rmsnorm_forward16);
}
static void p_swi_f16(void *ctx, float *h, prm_dev_bf16_t *h16, const float *g, const float *u,
                      int64_t n) {
  B; PP->in->swiglu_forward16(PP->ctx, h, h16, g, u, n); E(swiglu_forward16);
}
static void p_sumsq_multi(void *ctx, double *o, const float *x, const int64_t *off,
                          const int64_t *num, int nseg) {
  B; PP->in->sumsq_multi(PP->ctx, o, x, off, num, nseg); E(sumsq_multi);
}
static void p_xent16(void *ctx, float *l, prm_dev_bf16_t *d16, const float *lg, const int32_t *t,
                     int64_t N, int64_t V, float s) {
  B; PP->in->xent16(PP->ctx, l, d16, lg, t, N, V, s); E(xent16);
}

/* ---- the report ---- */
static int by_time(const void *a, const void *b) {
  double x = ((const prm__stat_t *)a)->dev_ms, y = ((const prm__stat_t *)b)->dev_ms;
  return (x < y) - (x > y);
}
static int shape_by_time(const void *a, const void *b) {
  return by_time(&((const prm__shape_t *)a)->s, &((const prm__shape_t *)b)->s);
}

static void report(prm__prof_t *p, prm_sb_t *o) {
  double total = 0;
  for (int i = 0; i < OP__COUNT; i++) total += p->op[i].dev_ms;
  prm_sb_appendf(o, "## Device profile: %s, every operator waited for (PRIMUS_DEVICE_PROFILE)\n\n",
                p->in->name);
  prm_sb_appendf(o, "%.3f ms of operator time (%s).\n\n", total,
                p->in->timer_stop ? "the device's timer" : "the host's clock");
  prm_sb_appendf(o, "| operator | calls | ms | share | ms per call | TFLOP/s | wall ms |\n");
  prm_sb_appendf(o, "|---|---:|---:|---:|---:|---:|---:|\n");
  struct {
    prm__stat_t s;
    int op;
  } rows[OP__COUNT];
  int n = 0;
  for (int i = 0; i < OP__COUNT; i++)
    if (p->op[i].calls) rows[n].s = p->op[i], rows[n].op = i, n++;
  qsort(rows, (size_t)n, sizeof rows[0], by_time);
  for (int i = 0; i < n; i++) {
    const prm__stat_t *s = &rows[i].s;
    char tf[32] = "";
    if (s->flops > 0 && s->dev_ms > 0) snprintf(tf, sizeof tf, "%.2f", s->flops / s->dev_ms / 1e9);
    prm_sb_appendf(o, "| %s | %lld | %.3f | %.1f%% | %.4f | %s | %.3f |\n", op_names[rows[i].op],
                  (long long)s->calls, s->dev_ms, total > 0 ? 100 * s->dev_ms / total : 0,
                  s->dev_ms / (double)s->calls, tf, s->wall_ms);
  }
  int ns = p->nshape + (p->shape[PRM__PROF_SHAPES].s.calls > 0);
  if (!ns) return;
  prm__shape_t sh[PRM__PROF_SHAPES + 1];
  memcpy(sh, p->shape, sizeof(prm__shape_t) * (size_t)p->nshape);
  if (ns > p->nshape) sh[p->nshape] = p->shape[PRM__PROF_SHAPES];
  qsort(sh, (size_t)ns, sizeof sh[0], shape_by_time);
  prm_sb_appendf(o, "\nGEMMs by shape (C(M,N) = op(A)(M,K) op(B)(K,N); t: transposed):\n\n");
  prm_sb_appendf(o, "| dtype | op | M | N | K | calls | ms | ms per call | TFLOP/s |\n");
  prm_sb_appendf(o, "|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < ns; i++) {
    const prm__shape_t *h = &sh[i];
    if (h->M == 0 && h->N == 0 && h->K == 0 && h == &sh[ns - 1] && ns > p->nshape)
      prm_sb_appendf(o, "| other shapes | | | | | %lld | %.3f | | %.1f |\n", (long long)h->s.calls,
                    h->s.dev_ms, h->s.dev_ms > 0 ? h->s.flops / h->s.dev_ms / 1e9 : 0);
    else
      prm_sb_appendf(o, "| %s | %s%s | %lld | %lld | %lld | %lld | %.3f | %.4f | %.1f |\n",
                    h->bf16 ? "bf16" : "fp32", h->ta ? "t" : "n", h->tb ? "t" : "n",
                    (long long)h->M, (long long)h->N, (long long)h->K, (long long)h->s.calls,
                    h->s.dev_ms, h->s.dev_ms / (double)h->s.calls,
                    h->s.dev_ms > 0 ? h->s.flops / h->s.dev_ms / 1e9 : 0);
  }
}

static void p_close(void *ctx) {
  prm__prof_t *p = PP;
  prm_sb_t o = {0};
  report(p, &o);
  if (!strcmp(p->dest, "1")) {
    fputs(prm_sb_str(&o), stderr);
  } else {
    prm_err_t err = {0};
    if (prm_fs_write_atomic(p->dest, prm_sb_str(&o), o.len, &err))
      fprintf(stderr, "PRIMUS_DEVICE_PROFILE: %s\n", err.msg);
  }
  prm_sb_free(&o);
  if (p->in->close) p->in->close(p->ctx);
  free(p->dest);
  free(p);
}

const prm_dev_i *prm__dev_profile_wrap(const prm_dev_i *in, void *in_ctx, const char *dest,
                                       void **ctx_out) {
  prm__prof_t *p = prm_xcalloc(1, sizeof *p);
  p->in = in, p->ctx = in_ctx, p->dest = prm_xstrdup(dest);
  prm_dev_i *t = &p->t;
  *t = *in; /* name, abi, host_memory; and NULL where the backend has no such member */
  t->close = p_close, t->info = p_info, t->sync = p_sync, t->alloc = p_alloc, t->free = p_free;
  t->usage = p_usage;
#define W(m, f) t->m = in->m ? f : NULL
  W(set_tf32, p_set_tf32);
  W(timer_start, p_timer_start);
  W(timer_stop, p_timer_stop);
  W(upload, p_upload), W(download, p_download), W(copy, p_copy), W(zero, p_zero);
  W(sgemm, p_sgemm), W(gemm_bf16, p_gemm_bf16), W(f32_to_bf16, p_f2b), W(bf16_to_f32, p_b2f);
  W(embedding_forward, p_emb_f), W(embedding_backward, p_emb_b), W(rmsnorm_forward, p_rms_f);
  W(add_rmsnorm_forward, p_add_rms_f), W(rmsnorm_backward, p_rms_b), W(rope, p_rope);
  W(swiglu_forward, p_swi_f), W(swiglu_backward, p_swi_b), W(add, p_add);
  W(attention_forward, p_att_f), W(attention_backward, p_att_b), W(attention_decode, p_att_d);
  W(xent, p_xent), W(adamw, p_adamw), W(sumsq, p_sumsq), W(sum, p_sum), W(scale, p_scale);
  W(attention_forward_bf16, p_att_f16), W(attention_backward_bf16, p_att_b16);
  W(adamw_multi, p_adamw_multi), W(rmsnorm_forward16, p_rms_f16);
  W(swiglu_forward16, p_swi_f16), W(sumsq_multi, p_sumsq_multi), W(xent16, p_xent16);
#undef W
  *ctx_out = p;
  return t;
}

void *prm__dev_unwrapped_ctx(const prm_dev_i *i, void *ctx) {
  return i->close == p_close ? ((prm__prof_t *)ctx)->ctx : ctx;
}
