/* cpu.c - the CPU backend of the device table: host memory from the
 * accounting allocator and today's kernels (prm_kernels.h) with the GEMM
 * backend chosen at open, so a model run through the table computes the
 * same bits as one calling the kernels directly. */
#define _GNU_SOURCE
#include "device-impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  prm_gemm_t gemm;
} prm__cpu_t;

static prm__cpu_t *prm__cpu(void *ctx) { return (prm__cpu_t *)ctx; }

static void prm__cpu_close(void *ctx) { free(ctx); }

static int prm__cpu_info(void *ctx, prm_dev_info_t *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "cpu");
  snprintf(out->arch, sizeof out->arch, "%s", prm_bf16_isa());
  out->sm_count = prm_kernels_threads();
  (void)ctx;
  return 0;
}

static int prm__cpu_sync(void *ctx, char *msg, size_t n) {
  (void)ctx;
  if (n) msg[0] = 0;
  return 0;
}

static void *prm__cpu_alloc(void *ctx, int cat, size_t bytes) {
  (void)ctx;
  return prm_mem_alloc((prm_mem_cat_t)cat, bytes ? bytes : 1);
}

static void prm__cpu_free(void *ctx, int cat, void *p, size_t bytes) {
  (void)ctx;
  prm_mem_free((prm_mem_cat_t)cat, p, bytes ? bytes : 1);
}

static void prm__cpu_usage(void *ctx, uint64_t *in_use, uint64_t *peak) {
  (void)ctx;
  for (int c = 0; c < PRM_DEV_MEM__COUNT; c++) {
    in_use[c] = prm_mem_in_use((prm_mem_cat_t)c);
    peak[c] = prm_mem_peak((prm_mem_cat_t)c);
  }
}

static int prm__cpu_move(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  if (dst != src && bytes) memmove(dst, src, bytes);
  return 0;
}

static int prm__cpu_zero(void *ctx, void *p, size_t bytes) {
  (void)ctx;
  if (bytes) memset(p, 0, bytes);
  return 0;
}

static void prm__cpu_sgemm(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K,
                           float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float beta, float *C, int64_t ldc) {
  prm_sgemm(&prm__cpu(ctx)->gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void prm__cpu_gemm_bf16(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K,
                               float alpha, const prm_dev_bf16_t *A, int64_t lda,
                               const prm_dev_bf16_t *B, int64_t ldb, float beta, float *C,
                               int64_t ldc) {
  prm_gemm_bf16(&prm__cpu(ctx)->gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void prm__cpu_f32_to_bf16(void *ctx, prm_dev_bf16_t *dst, const float *src, int64_t n) {
  (void)ctx;
  prm_f32_to_bf16(dst, src, n);
}

static void prm__cpu_bf16_to_f32(void *ctx, float *dst, const prm_dev_bf16_t *src, int64_t n) {
  (void)ctx;
  prm_bf16_to_f32(dst, src, n);
}

static void prm__cpu_emb_fwd(void *ctx, float *out, const int32_t *tok, const float *wte,
                             int64_t N, int64_t C) {
  (void)ctx;
  prm_embedding_forward(out, tok, wte, N, C);
}

static void prm__cpu_emb_bwd(void *ctx, float *dwte, const float *dout, const int32_t *tok,
                             int64_t N, int64_t C) {
  (void)ctx;
  prm_embedding_backward(dwte, dout, tok, N, C);
}

static void prm__cpu_rms_fwd(void *ctx, float *out, float *rstd, const float *x, const float *w,
                             int64_t N, int64_t C, float eps) {
  (void)ctx;
  prm_rmsnorm_forward(out, rstd, x, w, N, C, eps);
}

static void prm__cpu_add_rms_fwd(void *ctx, float *sum, float *out, float *rstd, const float *a,
                                 const float *b, const float *w, int64_t N, int64_t C, float eps) {
  (void)ctx;
  prm_add_rmsnorm_forward(sum, out, rstd, a, b, w, N, C, eps);
}

static void prm__cpu_rms_bwd(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                             const float *w, const float *rstd, int64_t N, int64_t C) {
  (void)ctx;
  prm_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
}

static void prm__cpu_rope(void *ctx, float *x, const float *cos_t, const float *sin_t, int64_t B,
                          int64_t T, int64_t nh, int64_t D, int64_t pos0, const int32_t *pos,
                          float sign) {
  (void)ctx;
  if (sign > 0) {
    if (pos) prm_rope_forward_pos(x, cos_t, sin_t, B, T, nh, D, pos);
    else prm_rope_forward(x, cos_t, sin_t, B, T, nh, D, pos0);
  } else {
    if (pos) prm_rope_backward_pos(x, cos_t, sin_t, B, T, nh, D, pos);
    else prm_rope_backward(x, cos_t, sin_t, B, T, nh, D, pos0);
  }
}

static void prm__cpu_swiglu_fwd(void *ctx, float *h, const float *gate, const float *up,
                                int64_t n) {
  (void)ctx;
  prm_swiglu_forward(h, gate, up, n);
}

static void prm__cpu_swiglu_bwd(void *ctx, float *dgate, float *dup, const float *dh,
                                const float *gate, const float *up, int64_t n) {
  (void)ctx;
  prm_swiglu_backward(dgate, dup, dh, gate, up, n);
}

static void prm__cpu_add(void *ctx, float *y, const float *a, const float *b, int64_t n) {
  (void)ctx;
  prm_add(y, a, b, n);
}

static void prm__cpu_attn_fwd(void *ctx, float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *seg, int64_t B, int64_t T, int64_t H,
                              int64_t G, int64_t D) {
  (void)ctx;
  prm_attention_forward_seg(out, lse, q, k, v, seg, B, T, H, G, D);
}

static void prm__cpu_attn_bwd(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                              const float *q, const float *k, const float *v, const float *out,
                              const float *lse, const int32_t *seg, int64_t B, int64_t T,
                              int64_t H, int64_t G, int64_t D) {
  (void)ctx;
  prm_attention_backward_seg(dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
}

static void prm__cpu_attn_decode(void *ctx, float *out, const float *q, const float *kc,
                                 const float *vc, int64_t Tq, int64_t Tk, int64_t H, int64_t G,
                                 int64_t D) {
  (void)ctx;
  prm_attention_decode(out, q, kc, vc, Tq, Tk, H, G, D);
}

static void prm__cpu_xent(void *ctx, float *losses, float *dlogits, const float *logits,
                          const int32_t *targets, int64_t N, int64_t V, float scale) {
  (void)ctx;
  /* The losses first: dlogits may overwrite the logits in place. */
  prm_xent_forward(losses, logits, targets, N, V);
  if (dlogits) prm_xent_backward(dlogits, logits, targets, N, V, scale);
}

static void prm__cpu_adamw(void *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                           float lr, float b1, float b2, float eps, float wd, int64_t step,
                           float gscale) {
  (void)ctx;
  prm_adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, step, gscale);
}

static void prm__cpu_sumsq(void *ctx, double *out, const float *x, int64_t n) {
  (void)ctx;
  *out = prm_sumsq(x, n);
}

static void prm__cpu_sum(void *ctx, double *out, const float *x, int64_t n) {
  (void)ctx;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i];
  *out = s;
}

static void prm__cpu_scale(void *ctx, float *x, int64_t n, float s) {
  (void)ctx;
  prm_scale(x, n, s);
}

/* The bf16 and fused members (ABI 3): the CPU kernels they stand for, in
 * the unfused order, so a fused call gives the unfused bits. */
static void prm__cpu_attn_fwd16(void *ctx, float *out, float *lse, const prm_dev_bf16_t *q,
                                const prm_dev_bf16_t *k, const prm_dev_bf16_t *v,
                                const int32_t *seg, int64_t B, int64_t T, int64_t H, int64_t G,
                                int64_t D) {
  (void)ctx;
  prm_attention_forward_bf16(out, lse, q, k, v, seg, B, T, H, G, D);
}

static void prm__cpu_attn_bwd16(void *ctx, float *dq, float *dk, float *dv,
                                const prm_dev_bf16_t *dout, const prm_dev_bf16_t *q,
                                const prm_dev_bf16_t *k, const prm_dev_bf16_t *v, const float *out,
                                const float *lse, const int32_t *seg, int64_t B, int64_t T,
                                int64_t H, int64_t G, int64_t D) {
  (void)ctx;
  prm_attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
}

static void prm__cpu_adamw_multi(void *ctx, float *p, const float *g, float *m, float *v,
                                 prm_dev_bf16_t *p16, const prm_dev_adamw_seg_t *segs, int nseg,
                                 float lr, float b1, float b2, float eps, int64_t step,
                                 float gscale) {
  (void)ctx;
  for (int i = 0; i < nseg; i++) {
    const prm_dev_adamw_seg_t *s = &segs[i];
    if (s->numel <= 0) continue;
    prm_adamw_update(p + s->offset, g + s->offset, m + s->offset, v + s->offset, s->numel, lr, b1,
                     b2, eps, s->wd, step, gscale);
    if (p16 && s->bf16) prm_f32_to_bf16(p16 + s->offset, p + s->offset, s->numel);
  }
}

static void prm__cpu_rms_fwd16(void *ctx, float *sum, float *out, prm_dev_bf16_t *out16,
                               float *rstd, const float *a, const float *b, const float *w,
                               int64_t N, int64_t C, float eps) {
  (void)ctx;
  if (b) prm_add_rmsnorm_forward(sum, out, rstd, a, b, w, N, C, eps);
  else prm_rmsnorm_forward(out, rstd, a, w, N, C, eps);
  prm_f32_to_bf16(out16, out, N * C);
}

static void prm__cpu_swiglu_fwd16(void *ctx, float *h, prm_dev_bf16_t *h16, const float *gate,
                                  const float *up, int64_t n) {
  (void)ctx;
  prm_swiglu_forward(h, gate, up, n);
  prm_f32_to_bf16(h16, h, n);
}

static void prm__cpu_sumsq_multi(void *ctx, double *out, const float *x, const int64_t *off,
                                 const int64_t *num, int nseg) {
  (void)ctx;
  for (int i = 0; i < nseg; i++) out[i] = num[i] > 0 ? prm_sumsq(x + off[i], num[i]) : 0.0;
}

/* xent's dlogits a block of rows at a time (at most ~4M values) in an
 * fp32 buffer of its own, each rounded as f32_to_bf16 does: the bits of
 * xent then f32_to_bf16, without writing the logits. */
static void prm__cpu_xent16(void *ctx, float *losses, prm_dev_bf16_t *d16, const float *logits,
                            const int32_t *targets, int64_t N, int64_t V, float scale) {
  (void)ctx;
  prm_xent_forward(losses, logits, targets, N, V);
  int64_t rows = ((int64_t)4 << 20) / (V > 0 ? V : 1);
  if (rows < 1) rows = 1;
  if (rows > N) rows = N;
  float *tmp = prm_xmalloc((size_t)(rows > 0 ? rows * V : 1) * sizeof(float));
  for (int64_t n0 = 0; n0 < N; n0 += rows) {
    int64_t r = N - n0 < rows ? N - n0 : rows;
    prm_xent_backward(tmp, logits + n0 * V, targets + n0, r, V, scale);
    prm_f32_to_bf16(d16 + n0 * V, tmp, r * V);
  }
  free(tmp);
}

static const prm_dev_i prm__cpu_i = {
    .name = "cpu",
    .abi = PRM_DEV_ABI_VERSION,
    .host_memory = 1,
    .close = prm__cpu_close,
    .info = prm__cpu_info,
    .sync = prm__cpu_sync,
    .alloc = prm__cpu_alloc,
    .free = prm__cpu_free,
    .usage = prm__cpu_usage,
    .upload = prm__cpu_move,
    .download = prm__cpu_move,
    .copy = prm__cpu_move,
    .zero = prm__cpu_zero,
    .sgemm = prm__cpu_sgemm,
    .gemm_bf16 = prm__cpu_gemm_bf16,
    .set_tf32 = NULL,
    .f32_to_bf16 = prm__cpu_f32_to_bf16,
    .bf16_to_f32 = prm__cpu_bf16_to_f32,
    .embedding_forward = prm__cpu_emb_fwd,
    .embedding_backward = prm__cpu_emb_bwd,
    .rmsnorm_forward = prm__cpu_rms_fwd,
    .add_rmsnorm_forward = prm__cpu_add_rms_fwd,
    .rmsnorm_backward = prm__cpu_rms_bwd,
    .rope = prm__cpu_rope,
    .swiglu_forward = prm__cpu_swiglu_fwd,
    .swiglu_backward = prm__cpu_swiglu_bwd,
    .add = prm__cpu_add,
    .attention_forward = prm__cpu_attn_fwd,
    .attention_backward = prm__cpu_attn_bwd,
    .attention_decode = prm__cpu_attn_decode,
    .xent = prm__cpu_xent,
    .adamw = prm__cpu_adamw,
    .sumsq = prm__cpu_sumsq,
    .sum = prm__cpu_sum,
    .scale = prm__cpu_scale,
    .attention_forward_bf16 = prm__cpu_attn_fwd16,
    .attention_backward_bf16 = prm__cpu_attn_bwd16,
    .adamw_multi = prm__cpu_adamw_multi,
    .rmsnorm_forward16 = prm__cpu_rms_fwd16,
    .swiglu_forward16 = prm__cpu_swiglu_fwd16,
    .sumsq_multi = prm__cpu_sumsq_multi,
    .xent16 = prm__cpu_xent16,
};

const prm_dev_i *prm__dev_cpu_table(void) { return &prm__cpu_i; }

void *prm__dev_cpu_new(const prm_gemm_t *gemm) {
  prm__cpu_t *c = prm_xcalloc(1, sizeof *c);
  c->gemm = *gemm;
  return c;
}

const char *prm__dev_cpu_gemm_name(void *ctx) { return prm__cpu(ctx)->gemm.i->name; }
