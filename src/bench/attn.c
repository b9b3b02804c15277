/* attn.c - the engine's causal grouped-query attention kernels, forward
 * and backward, timed on random inputs. */
#define _GNU_SOURCE
#include "bench/bench-impl.h"
#include "kernels/kernels-impl.h"

#include <string.h>

/* One call; with bf16 (x16: room for q, k, v and dout in bf16) the
 * operands are rounded first, as the model does. */
static void prm__attn_call(int backward, const char *isa, prm_bf16_t *x16, float *out, float *lse,
                           float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, int64_t B, int64_t T, int64_t H,
                           int64_t G, int64_t D) {
  if (!x16) {
    if (backward) prm_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, G, D);
    else prm_attention_forward(out, lse, q, k, v, B, T, H, G, D);
    return;
  }
  int64_t nq = B * T * H * D, nkv = B * T * G * D;
  prm_bf16_t *q16 = x16, *k16 = q16 + nq, *v16 = k16 + nkv, *d16 = v16 + nkv;
  prm_f32_to_bf16(q16, q, nq);
  prm_f32_to_bf16(k16, k, nkv);
  prm_f32_to_bf16(v16, v, nkv);
  if (!backward) {
    prm__attention_forward_bf16_isa(isa, out, lse, q16, k16, v16, NULL, B, T, H, G, D);
    return;
  }
  prm_f32_to_bf16(d16, dout, nq);
  prm__attention_backward_bf16_isa(isa, dq, dk, dv, d16, q16, k16, v16, out, lse, NULL, B, T, H, G,
                                   D);
}

/* Calls forward (backward = 0) or backward until `seconds` are spent (at
 * least once) after one warm-up call; returns the mean seconds per call. */
static double prm__time_attn(int backward, const char *isa, double seconds, int64_t *iters,
                             prm_bf16_t *x16,
                             float *out, float *lse, float *dq, float *dk, float *dv,
                             const float *dout, const float *q, const float *k, const float *v,
                             int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  int64_t n = -1; /* the first call warms up */
  double t0 = 0;
  do {
    if (n == 0) t0 = prm_time_now();
    prm__attn_call(backward, isa, x16, out, lse, dq, dk, dv, dout, q, k, v, B, T, H, G, D);
    n++;
  } while (n < 1 || prm_time_now() - t0 < seconds);
  *iters = n;
  return (prm_time_now() - t0) / (double)n;
}

int prm_bench_attention(const prm_bench_attn_opts_t *o, prm_bench_attn_result_t *r,
                        prm_err_t *err) {
  memset(r, 0, sizeof *r);
  int64_t B = o->batch, T = o->seq, H = o->heads, G = o->kv_heads, D = o->head_dim;
  if (B < 1 || T < 1 || H < 1 || G < 1 || D < 1)
    return prm_errf(err, PRM_EINVAL, "attention: batch, seq, heads, kv_heads and head_dim must be at least 1");
  if (H % G)
    return prm_errf(err, PRM_EINVAL, "attention: kv_heads %lld must divide heads %lld",
                    (long long)G, (long long)H);
  if (o->isa && !o->bf16)
    return prm_errf(err, PRM_EINVAL, "attention: --isa %s needs --dtype bf16", o->isa);
  if (o->isa && strcmp(o->isa, "avx512bf16") && strcmp(o->isa, "widen"))
    return prm_errf(err, PRM_EINVAL, "attention: --isa %s: expected avx512bf16 or widen", o->isa);
  if (o->isa && !strcmp(o->isa, "avx512bf16") && strcmp(prm_attention_bf16_isa(), "avx512bf16"))
    return prm_errf(err, PRM_EINVAL, "attention: --isa avx512bf16: this CPU lacks avx512_bf16");
  if ((double)B * T * H * D > 1e10)
    return prm_errf(err, PRM_EINVAL, "attention: %lld x %lld x %lld x %lld values is too large",
                    (long long)B, (long long)T, (long long)H, (long long)D);
  int64_t nq = B * T * H * D, nkv = B * T * G * D, nl = B * H * T;
  float *q = NULL, *k = NULL, *v = NULL, *out = NULL, *lse = NULL, *dout = NULL, *dq = NULL,
        *dk = NULL, *dv = NULL, *x16 = NULL;
  float **ptrs[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &x16};
  /* x16: the bf16 operands, 2 bytes each, in floats. */
  const int64_t sizes[] = {nq, nkv, nkv, nq, nl, nq, nq, nkv, nkv, o->bf16 ? nq + nkv : 0};
  static const char *const what[] = {"attention q",  "attention k",    "attention v",
                                     "attention out", "attention lse", "attention dout",
                                     "attention dq",  "attention dk",  "attention dv",
                                     "attention bf16 operands"};
  int nb = (int)(sizeof ptrs / sizeof ptrs[0]), rc = 0;
  for (int i = 0; i < nb && !rc; i++) {
    if (!sizes[i]) continue;
    *ptrs[i] = prm__bench_alloc(sizes[i], what[i], err);
    if (!*ptrs[i]) rc = err ? err->code : PRM_ENOMEM;
  }
  if (!rc) {
    prm__bench_fill(q, nq, 11);
    prm__bench_fill(k, nkv, 12);
    prm__bench_fill(v, nkv, 13);
    prm__bench_fill(dout, nq, 14);
    double half = o->duration_s / 2;
    prm_bf16_t *b16 = (prm_bf16_t *)x16;
    double fwd = prm__time_attn(0, o->isa, half, &r->fwd_iters, b16, out, lse, dq, dk, dv, dout,
                                q, k, v, B, T, H, G, D);
    double bwd = prm__time_attn(1, o->isa, half, &r->bwd_iters, b16, out, lse, dq, dk, dv, dout,
                                q, k, v, B, T, H, G, D);
    /* Causal: half of the T x T scores; two GEMM-like products each. */
    double flops = 2.0 * (double)B * H * (double)T * (double)T * D;
    if (fwd <= 0) fwd = 1e-9;
    if (bwd <= 0) bwd = 1e-9;
    r->fwd_ms = fwd * 1e3;
    r->bwd_ms = bwd * 1e3;
    r->fwd_tflops = flops / fwd / 1e12;
    r->bwd_tflops = 2.5 * flops / bwd / 1e12;
  }
  for (int i = 0; i < nb; i++)
    if (sizes[i]) prm__bench_free(*ptrs[i], sizes[i]);
  return rc;
}
