/* test-model-device.c - the Llama model on a device against the same model
 * on the CPU: from the same weights and batches, the losses, every
 * gradient, ten AdamW steps with clipping, and KV-cache logits. fp32 with
 * grouped-query and multi-head attention, tied and untied heads, full
 * recomputation, packed sequences and bf16 (fp32 or bf16 attention, the
 * fused AdamW that writes the bf16 weights); and a model with every
 * attention variant on (q/k/v biases, q/k norms, heads of width 48 over
 * hidden 128, Llama 3.1's RoPE scaling).
 *
 *   test-model-device                   # the tagged test backend (the CPU
 *                                       # kernels on memory the host cannot
 *                                       # reach): the same bits as the CPU
 *   test-model-device --backend cuda    # the GPU: the tolerances
 *                                       # (loss 1e-5, norm 1e-4, params 1e-4);
 *                                       # exit 77 (skipped) without one
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "primus/prm_device.h"
#include "primus/prm_model.h"

#define PRM_TEST_SKIP 77

static prm_dev_t *g_dev;
static prm_gemm_t g_gemm;
static int g_exact; /* the tagged backend: bit for bit */
static double g_loose = 1; /* tolerance multiplier (bf16) */

static prm_llama_config_t cfg(int groups, int tied) {
  prm_llama_config_t c = {.vocab = 97, .hidden = 128, .layers = 2, .heads = 4, .groups = groups,
                          .ffn = 96, .max_pos = 32, .norm_eps = 1e-5, .rope_base = 10000,
                          .init_std = 0.05, .tied = tied};
  return c;
}

/* Every attention variant on. */
static prm_llama_config_t cfg_arch(int groups, int tied) {
  prm_llama_config_t c = cfg(groups, tied);
  c.head_dim = 48;
  c.qkv_bias = 1;
  c.qk_norm = 1;
  c.rope_base = 500000;
  c.rope_factor = 8;
  c.rope_low = 1;
  c.rope_high = 4;
  c.rope_orig = 64;
  return c;
}

/* The CPU model and its device twin with the same weights (biases and
 * norm weights moved off 0 and 1). */
static void build_pair(prm_llama_config_t c, int64_t B, int64_t T, unsigned flags,
                       prm_llama_t **cpu, prm_llama_t **dev) {
  prm_err_t err = {0};
  assert_int_equal(prm_llama_new(&c, B, T, flags, &g_gemm, cpu, &err), 0);
  prm_llama_init(*cpu, 7);
  if (c.qkv_bias || c.qk_norm) {
    prm_rng_t r;
    prm_rng_seed(&r, 8);
    for (int i = 0; i < (*cpu)->ntensors; i++) {
      const prm_tensor_t *t = &(*cpu)->tensors[i];
      float *p = (*cpu)->params + t->offset;
      for (int64_t j = 0; t->ndim == 1 && j < t->numel; j++)
        p[j] += (float)((double)(prm_rng_u64(&r) >> 40) / 16777216.0 - 0.5) * 0.4f;
    }
  }
  int rc = prm_llama_new_dev(&c, B, T, flags, &g_gemm, g_dev, NULL, dev, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(prm_llama_params_set(*dev, (*cpu)->params, &err), 0);
}

static void tokens(int32_t *t, int64_t n, int64_t V, uint64_t seed) {
  prm_rng_t r;
  prm_rng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(prm_rng_u64(&r) % (uint64_t)V);
}

/* Relative closeness of two doubles (losses and norms): within tol on
 * every backend, since a device sums the rows' losses as it keeps them (in
 * fp32) where the CPU kernel sums them in double; 2e-8 on the tagged one. */
static void close_d(const char *what, double got, double want, double tol) {
  tol = g_exact ? 2e-8 : tol * g_loose;
  if (!(fabs(got - want) <= tol * fmax(fabs(want), 1e-30))) {
    fprintf(stderr, "%s: %.12g vs %.12g (tolerance %.1g)\n", what, got, want, tol);
    fail();
  }
}

/* got (device, downloaded) against want (n floats): bit for bit on the
 * tagged backend, else within tol of the largest |want|. */
static void close_v(const char *what, const float *got, const float *want, int64_t n, double tol) {
  double worst = 0, scale = 1e-30;
  int64_t at = 0;
  tol *= g_loose;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (!(e <= worst)) worst = e, at = i; /* NaN counts as worst */
  }
  if (g_exact ? memcmp(got, want, (size_t)n * sizeof(float)) != 0 : !(worst <= tol * scale)) {
    fprintf(stderr, "%s: worst difference %.3g at %lld (%.9g vs %.9g), scale %.3g\n", what, worst,
            (long long)at, got[at], want[at], scale);
    fail();
  }
}

static float *grads_of(const prm_llama_t *m) {
  float *h = prm_xcalloc((size_t)m->nparams, sizeof(float));
  prm_err_t err = {0};
  assert_int_equal(prm_llama_grads_get(m, h, &err), 0);
  return h;
}

/* One forward+backward (and an evaluation forward) on both. */
static void pass_case(prm_llama_config_t c, unsigned flags, int packed) {
  int64_t B = 2, T = 24, N = B * T;
  prm_llama_t *cpu, *dev;
  build_pair(c, B, T, PRM_LLAMA_TRAIN | flags, &cpu, &dev);
  int32_t *tok = prm_xcalloc((size_t)N, 4), *tgt = prm_xcalloc((size_t)N, 4);
  int32_t *seg = prm_xcalloc((size_t)N, 4), *pos = prm_xcalloc((size_t)N, 4);
  tokens(tok, N, c.vocab, 1);
  tokens(tgt, N, c.vocab, 2);
  tgt[3] = tgt[N - 1] = -1; /* masked targets */
  if (packed) { /* two examples in row 0, three in row 1 */
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0, s = 0, p = 0; t < T; t++, p++) {
        if ((b == 0 && t == 10) || (b == 1 && (t == 7 || t == 15))) s++, p = 0;
        seg[b * T + t] = (int32_t)s;
        pos[b * T + t] = (int32_t)p;
      }
    prm_llama_set_packing(cpu, seg, pos);
    prm_llama_set_packing(dev, seg, pos);
  }
  int64_t nc = 0, nd = 0;
  double lc = prm_llama_forward_backward(cpu, tok, tgt, B, 1.0f / (float)N, &nc);
  double ld = prm_llama_forward_backward(dev, tok, tgt, B, 1.0f / (float)N, &nd);
  prm_err_t err = {0};
  assert_int_equal(prm_llama_tp_check(dev, &err), 0);
  assert_int_equal(nc, nd);
  close_d("loss", ld, lc, 1e-5);
  float *g = grads_of(dev);
  close_v("gradients", g, cpu->grads, cpu->nparams, 1e-4);
  /* A second pass on the device accumulates the same bits again. */
  float *g1 = grads_of(dev);
  prm_llama_zero_grad(dev);
  prm_llama_forward_backward(dev, tok, tgt, B, 1.0f / (float)N, &nd);
  float *g2 = grads_of(dev);
  prm_llama_zero_grad(dev);
  prm_llama_forward_backward(dev, tok, tgt, B, 1.0f / (float)N, &nd);
  float *g3 = grads_of(dev);
  assert_memory_equal(g2, g3, (size_t)dev->nparams * sizeof(float)); /* deterministic */
  (void)g1;
  /* Evaluation. */
  double ec = prm_llama_forward(cpu, tok, tgt, B, &nc), ed = prm_llama_forward(dev, tok, tgt, B, &nd);
  assert_int_equal(prm_llama_tp_check(dev, &err), 0);
  close_d("eval loss", ed, ec, 1e-5);
  free(g), free(g1), free(g2), free(g3), free(tok), free(tgt), free(seg), free(pos);
  prm_llama_free(cpu);
  prm_llama_free(dev);
}

static void test_fp32_gqa_untied(void **s) { (void)s; pass_case(cfg(2, 0), 0, 0); }
static void test_fp32_mha_tied(void **s) { (void)s; pass_case(cfg(4, 1), 0, 0); }
static void test_recompute(void **s) { (void)s; pass_case(cfg(2, 0), PRM_LLAMA_RECOMPUTE, 0); }
static void test_packed(void **s) { (void)s; pass_case(cfg(2, 0), 0, 1); }

/* bf16 with fp32 attention (bf16_attention: fp32): the device's model
 * rounds the same operands at the same places as the CPU's (the LM head
 * on bf16 operands on both), so on the tagged backend the same bits; on a
 * GPU close (rounding of the fp32 values before each bf16 rounding
 * differs): loss within 1e-2, gradients within 1e-1 of their largest. */
static void test_bf16(void **s) {
  (void)s;
  g_loose = 1000;
  pass_case(cfg(2, 0), PRM_LLAMA_BF16 | PRM_LLAMA_ATTN_FP32, 0);
  g_loose = 1;
}

/* bf16 with bf16 attention on both (the device's attention_*_bf16
 * members, the CPU's attention16.c kernels), plain and packed: the same
 * bits on the tagged backend, the tolerances above on a GPU. */
static void test_bf16_attention(void **s) {
  (void)s;
  g_loose = 1000;
  pass_case(cfg(2, 0), PRM_LLAMA_BF16, 0);
  pass_case(cfg(4, 1), PRM_LLAMA_BF16, 1);
  g_loose = 1;
}

/* bf16 training steps with the fused AdamW that writes the bf16 weights
 * (prm_dev_adamw_multi with params16, then prm_llama_params16_synced: the
 * next pass rounds nothing) against its unfused twin (AdamW per tensor,
 * prm_llama_params_changed, the pass rounding params16 again): the same
 * bits at every step on every device. */
static void test_fused_steps(void **state) {
  (void)state;
  prm_llama_config_t c = cfg(2, 0);
  int64_t B = 2, T = 24, N = B * T;
  prm_err_t err = {0};
  prm_llama_t *cpu, *dev[2];
  build_pair(c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_BF16, &cpu, &dev[0]);
  assert_int_equal(prm_llama_new_dev(&c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_BF16, &g_gemm, g_dev,
                                     NULL, &dev[1], &err), 0);
  assert_int_equal(prm_llama_params_set(dev[1], cpu->params, &err), 0);
  int64_t n = cpu->nparams;
  size_t bytes = (size_t)n * sizeof(float);
  float *mom[2][2];
  for (int t = 0; t < 2; t++)
    for (int j = 0; j < 2; j++) assert_non_null(mom[t][j] = prm_dev_alloc(g_dev, PRM_MEM_OPTIM, bytes));
  prm_dev_adamw_seg_t *segs = prm_xcalloc((size_t)cpu->ntensors, sizeof *segs);
  for (int i = 0; i < cpu->ntensors; i++) {
    const prm_tensor_t *t = &cpu->tensors[i];
    segs[i] = (prm_dev_adamw_seg_t){t->offset, t->numel, t->decay ? 0.1f : 0.0f, t->ndim == 2};
  }
  int32_t *tok = prm_xcalloc((size_t)N, 4), *tgt = prm_xcalloc((size_t)N, 4);
  int keep = g_dev->unfused;
  for (int64_t step = 1; step <= 4; step++) {
    tokens(tok, N, c.vocab, 300 + (uint64_t)step);
    tokens(tgt, N, c.vocab, 400 + (uint64_t)step);
    double loss[2];
    for (int t = 0; t < 2; t++) { /* t 0: fused, 1: the twin */
      prm_llama_t *m = dev[t];
      int64_t cnt;
      prm_llama_zero_grad(m);
      loss[t] = prm_llama_forward_backward(m, tok, tgt, B, 1.0f / (float)N, &cnt);
      g_dev->unfused = t;
      prm_dev_adamw_multi(g_dev, m->params, m->grads, mom[t][0], mom[t][1], t ? NULL : m->params16,
                          segs, m->ntensors, 1e-2f, 0.9f, 0.95f, 1e-8f, step, 1.0f);
      g_dev->unfused = keep;
      if (t == 0) prm_llama_params16_synced(m);
      else prm_llama_params_changed(m);
      assert_int_equal(prm_llama_tp_check(m, &err), 0);
    }
    if (loss[0] != loss[1]) {
      fprintf(stderr, "step %lld: fused %.17g, unfused %.17g\n", (long long)step, loss[0], loss[1]);
      fail();
    }
  }
  float *p0 = prm_xcalloc((size_t)n, 4), *p1 = prm_xcalloc((size_t)n, 4);
  assert_int_equal(prm_llama_params_get(dev[0], p0, &err), 0);
  assert_int_equal(prm_llama_params_get(dev[1], p1, &err), 0);
  assert_memory_equal(p0, p1, bytes);
  /* The fused copy is what a refresh makes from the weights. */
  prm_bf16_t *h0 = prm_xcalloc((size_t)n, 2), *h1 = prm_xcalloc((size_t)n, 2);
  int64_t cnt;
  prm_llama_forward(dev[1], tok, tgt, B, &cnt); /* the twin rounds its last update */
  assert_int_equal(prm_dev_download(g_dev, h0, dev[0]->params16, (size_t)n * 2, &err), 0);
  assert_int_equal(prm_dev_download(g_dev, h1, dev[1]->params16, (size_t)n * 2, &err), 0);
  for (int i = 0; i < cpu->ntensors; i++) {
    const prm_tensor_t *t = &cpu->tensors[i];
    if (t->ndim == 2) assert_memory_equal(h0 + t->offset, h1 + t->offset, (size_t)t->numel * 2);
  }
  for (int t = 0; t < 2; t++)
    for (int j = 0; j < 2; j++) prm_dev_free(g_dev, PRM_MEM_OPTIM, mom[t][j], bytes);
  free(segs), free(tok), free(tgt), free(p0), free(p1), free(h0), free(h1);
  prm_llama_free(cpu);
  prm_llama_free(dev[0]);
  prm_llama_free(dev[1]);
}

/* Ten AdamW steps with clipping: the trainer's step, written out. */
static void adamw_case(prm_llama_config_t c) {
  int64_t B = 2, T = 24, N = B * T, n;
  prm_llama_t *cpu, *dev;
  build_pair(c, B, T, PRM_LLAMA_TRAIN, &cpu, &dev);
  n = cpu->nparams;
  size_t bytes = (size_t)n * sizeof(float);
  float *m = prm_xcalloc((size_t)n, 4), *v = prm_xcalloc((size_t)n, 4);
  float *dm = prm_dev_alloc(g_dev, PRM_MEM_OPTIM, bytes), *dv = prm_dev_alloc(g_dev, PRM_MEM_OPTIM, bytes);
  assert_non_null(dm);
  assert_non_null(dv);
  int32_t *tok = prm_xcalloc((size_t)N, 4), *tgt = prm_xcalloc((size_t)N, 4);
  prm_err_t err = {0};
  for (int64_t step = 1; step <= 10; step++) {
    tokens(tok, N, c.vocab, 100 + (uint64_t)step);
    tokens(tgt, N, c.vocab, 200 + (uint64_t)step);
    prm_llama_zero_grad(cpu);
    prm_llama_zero_grad(dev);
    int64_t cnt;
    double lc = prm_llama_forward_backward(cpu, tok, tgt, B, 1.0f / (float)N, &cnt);
    double ld = prm_llama_forward_backward(dev, tok, tgt, B, 1.0f / (float)N, &cnt);
    close_d("step loss", ld, lc, 1e-5);
    double nc = sqrt(prm_sumsq(cpu->grads, n)), nd = sqrt(prm_dev_sumsq(g_dev, dev->grads, n));
    close_d("gradient norm", nd, nc, 1e-4);
    float gc = nc > 0.5 ? (float)(0.5 / nc) : 1.0f, gd = nd > 0.5 ? (float)(0.5 / nd) : 1.0f;
    for (int i = 0; i < cpu->ntensors; i++) {
      const prm_tensor_t *t = &cpu->tensors[i];
      float wd = t->decay ? 0.1f : 0.0f;
      prm_adamw_update(cpu->params + t->offset, cpu->grads + t->offset, m + t->offset,
                       v + t->offset, t->numel, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, step, gc);
      prm_dev_adamw(g_dev, dev->params + t->offset, dev->grads + t->offset, dm + t->offset,
                    dv + t->offset, t->numel, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, step, gd);
    }
    prm_llama_params_changed(cpu);
    prm_llama_params_changed(dev);
    assert_int_equal(prm_llama_tp_check(dev, &err), 0);
  }
  float *p = prm_xcalloc((size_t)n, 4);
  assert_int_equal(prm_llama_params_get(dev, p, &err), 0);
  close_v("parameters after 10 steps", p, cpu->params, n, 1e-4);
  free(p), free(m), free(v), free(tok), free(tgt);
  prm_dev_free(g_dev, PRM_MEM_OPTIM, dm, bytes);
  prm_dev_free(g_dev, PRM_MEM_OPTIM, dv, bytes);
  prm_llama_free(cpu);
  prm_llama_free(dev);
}

static void test_adamw_steps(void **state) {
  (void)state;
  adamw_case(cfg(2, 0));
}

/* Generation: a prompt, then one token at a time, the same logits. */
static void kv_case(prm_llama_config_t c) {
  prm_llama_t *cpu, *dev;
  build_pair(c, 1, 1, 0, &cpu, &dev);
  prm_llama_kv_t *kc, *kd;
  prm_err_t err = {0};
  assert_int_equal(prm_llama_kv_new(cpu, &kc, &err), 0);
  assert_int_equal(prm_llama_kv_new(dev, &kd, &err), 0);
  float *lc = prm_xcalloc((size_t)c.vocab, 4), *ld = prm_xcalloc((size_t)c.vocab, 4);
  int32_t prompt[5] = {3, 14, 15, 92, 6};
  assert_int_equal(prm_llama_kv_step(cpu, kc, prompt, 5, lc, &err), 0);
  assert_int_equal(prm_llama_kv_step(dev, kd, prompt, 5, ld, &err), 0);
  close_v("prompt logits", ld, lc, c.vocab, 1e-5);
  for (int i = 0; i < 3; i++) {
    int32_t t = (int32_t)(i * 31 % c.vocab);
    assert_int_equal(prm_llama_kv_step(cpu, kc, &t, 1, lc, &err), 0);
    assert_int_equal(prm_llama_kv_step(dev, kd, &t, 1, ld, &err), 0);
    close_v("decode logits", ld, lc, c.vocab, 1e-5);
  }
  prm_llama_kv_free(kc);
  prm_llama_kv_free(kd);
  free(lc), free(ld);
  prm_llama_free(cpu);
  prm_llama_free(dev);
}

static void test_kv_cache(void **state) {
  (void)state;
  kv_case(cfg(2, 1));
}

/* Every attention variant: passes (GQA untied; MHA tied with
 * recomputation and packed sequences), ten AdamW steps and the KV cache. */
static void test_arch(void **state) {
  (void)state;
  pass_case(cfg_arch(2, 0), 0, 0);
  pass_case(cfg_arch(4, 1), PRM_LLAMA_RECOMPUTE, 1);
  adamw_case(cfg_arch(2, 0));
  kv_case(cfg_arch(2, 1));
}

/* PRIMUS_DEVICE_HEAD_CHUNK=7: the head's 48 rows in seven chunks (the
 * last of 6), fp32 and bf16, against the CPU's one chunk: the loss sums
 * the same row losses; dW adds the chunks' products in turn, so the
 * gradients agree within rounding even on the tagged backend. The memory
 * line names the chunk. A value that is no row count is refused, naming
 * the variable. */
static void test_head_chunks(void **state) {
  (void)state;
  setenv("PRIMUS_DEVICE_HEAD_CHUNK", "7", 1);
  int exact = g_exact;
  g_exact = 0;
  pass_case(cfg(2, 0), 0, 0);
  g_loose = 1000;
  pass_case(cfg(4, 1), PRM_LLAMA_BF16, 0);
  g_loose = 1;
  g_exact = exact;
  prm_llama_config_t c = cfg(2, 0);
  prm_llama_t *m = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_llama_new_dev(&c, 2, 24, PRM_LLAMA_TRAIN, &g_gemm, g_dev, NULL, &m, &err), 0);
  prm_sb_t line = {0};
  prm_llama_describe_memory(m, &line);
  assert_non_null(strstr(line.buf, "7 rows a chunk by PRIMUS_DEVICE_HEAD_CHUNK"));
  prm_sb_free(&line);
  prm_llama_free(m);
  const char *bad[] = {"0", "-3", "12x", "many"};
  for (int i = 0; i < 4; i++) {
    setenv("PRIMUS_DEVICE_HEAD_CHUNK", bad[i], 1);
    m = NULL;
    assert_int_equal(prm_llama_new_dev(&c, 2, 24, PRM_LLAMA_TRAIN, &g_gemm, g_dev, NULL, &m, &err),
                     PRM_ECONFIG);
    assert_null(m);
    assert_non_null(strstr(err.msg, "PRIMUS_DEVICE_HEAD_CHUNK"));
  }
  unsetenv("PRIMUS_DEVICE_HEAD_CHUNK");
  /* Unset: the default chunk (all 48 rows fit in one). */
  assert_int_equal(prm_llama_new_dev(&c, 2, 24, PRM_LLAMA_TRAIN, &g_gemm, g_dev, NULL, &m, &err), 0);
  prm_llama_describe_memory(m, &line);
  assert_non_null(strstr(line.buf, "48 rows a chunk: fp32"));
  prm_sb_free(&line);
  prm_llama_free(m);
}

/* What a device with its own memory refuses, by key. */
static void test_refused(void **state) {
  (void)state;
  prm_llama_config_t c = cfg(2, 0);
  c.experts = 4;
  c.topk = 2;
  c.moe_ffn = 32;
  c.moe_freq = 1;
  prm_llama_t *m = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_llama_new_dev(&c, 1, 8, PRM_LLAMA_TRAIN, &g_gemm, g_dev, NULL, &m, &err),
                   PRM_ECONFIG);
  assert_null(m);
  assert_non_null(strstr(err.msg, "num_experts"));
}

int main(int argc, char **argv) {
  const char *backend = "tagged";
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
  prm_err_t err = {0};
  if (prm_gemm_init(&g_gemm, NULL, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  if (!strcmp(backend, "tagged")) setenv("PRIMUS_DEVICE_TAGGED", "1", 1);
  prm_dev_opts_t o = {.want = strcmp(backend, "tagged") ? backend : "cpu", .gemm = g_gemm};
  if (prm_dev_open(&o, &g_dev, &err)) {
    printf("SKIP: %s\n", err.msg);
    return strcmp(backend, "tagged") ? PRM_TEST_SKIP : 1;
  }
  unsetenv("PRIMUS_DEVICE_TAGGED");
  if (prm_dev_is_host(g_dev)) {
    fprintf(stderr, "%s: the backend shares the host's memory; nothing to compare\n", backend);
    return 1;
  }
  g_exact = g_dev->kind == PRM_DEV_KIND_CPU;
  prm_sb_t line = {0};
  prm_dev_describe(g_dev, &line);
  printf("device under test: %s\n", line.buf);
  prm_sb_free(&line);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp32_gqa_untied), cmocka_unit_test(test_fp32_mha_tied),
      cmocka_unit_test(test_recompute),       cmocka_unit_test(test_packed),
      cmocka_unit_test(test_bf16),            cmocka_unit_test(test_bf16_attention),
      cmocka_unit_test(test_fused_steps),     cmocka_unit_test(test_adamw_steps),
      cmocka_unit_test(test_kv_cache),        cmocka_unit_test(test_arch),
      cmocka_unit_test(test_refused),         cmocka_unit_test(test_head_chunks),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  prm_dev_close(g_dev);
  return rc;
}
