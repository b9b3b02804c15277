/* test-model.c - the Llama model as a whole: parameter layout and count,
 * initialisation, the full gradient against finite differences, full
 * recomputation giving the same gradients, bf16 with fp32 attention and
 * with packed weights, micro-batches summing to the
 * batch, pipeline stages giving the whole model's passes, and KV-cache
 * inference agreeing with the training forward; the attention variants
 * (q/k/v biases, q/k norms, a head width of its own, Llama 3.1's RoPE
 * scaling) in the layout, the gradient check and the KV cache. */
#include "testlib.h"
#include "primus/prm_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static prm_llama_config_t tiny_cfg(int tied) {
  prm_llama_config_t c = {.vocab = 23, .hidden = 16, .layers = 2, .heads = 4, .groups = 2,
                          .ffn = 24, .max_pos = 16, .norm_eps = 1e-5, .rope_base = 10000,
                          .init_std = 0.3, .tied = tied};
  return c;
}

/* Every attention variant on: head width 6 (H D = 24 over hidden 16),
 * q/k/v biases, q/k norms, and RoPE scaling whose three frequencies (base
 * 100, D 6: wavelengths 6.3, 29 and 135 against 32 / 4 = 8 and 32 / 1 =
 * 32) fall in the kept, blended and slowed bands. */
static prm_llama_config_t arch_cfg(int tied) {
  prm_llama_config_t c = tiny_cfg(tied);
  c.head_dim = 6;
  c.qkv_bias = 1;
  c.qk_norm = 1;
  c.rope_base = 100;
  c.rope_factor = 8;
  c.rope_low = 1;
  c.rope_high = 4;
  c.rope_orig = 32;
  return c;
}

/* Biases and norm weights away from their initial 0 and 1, so that their
 * gradients and effects are not special cases. */
static void perturb_vectors(prm_llama_t *m, uint64_t seed) {
  prm_rng_t r;
  prm_rng_seed(&r, seed);
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    if (t->ndim != 1) continue;
    for (int64_t j = 0; j < t->numel; j++)
      m->params[t->offset + j] += (float)(0.3 * ((double)(prm_rng_u64(&r) >> 11) / 9007199254740992.0 - 0.5));
  }
  prm_llama_params_changed(m);
}

static prm_gemm_t gemm_ref(void) {
  prm_gemm_t g;
  prm_err_t err = {0};
  assert_int_equal(prm_gemm_init(&g, "reference", &err), 0);
  return g;
}

static prm_llama_t *build(prm_llama_config_t c, int64_t B, int64_t T, unsigned flags) {
  prm_gemm_t g = gemm_ref();
  prm_llama_t *m = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_llama_new(&c, B, T, flags, &g, &m, &err), 0);
  prm_llama_init(m, 42);
  return m;
}

static void random_tokens(int32_t *t, int64_t n, int64_t V, uint64_t seed) {
  prm_rng_t r;
  prm_rng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++) t[i] = (int32_t)(prm_rng_u64(&r) % (uint64_t)V);
}

static void test_config_check(void **state) {
  (void)state;
  prm_err_t err = {0};
  prm_llama_config_t c = tiny_cfg(1);
  assert_int_equal(prm_llama_config_check(&c, &err), 0);
  c.heads = 5;
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "num_attention_heads (5) must divide hidden_size (16)"));
  c = tiny_cfg(1);
  c.groups = 3;
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "num_query_groups"));
  c = tiny_cfg(1);
  c.heads = 16; /* head size 1: odd */
  c.groups = 16;
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "even"));
  /* kv_channels sets the width: heads need not divide hidden then. */
  c = arch_cfg(1);
  c.heads = 5;
  c.groups = 5;
  assert_int_equal(prm_llama_config_check(&c, &err), 0);
  assert_int_equal(prm_llama_head_dim(&c), 6);
  c.head_dim = 5;
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "kv_channels"));
  c = arch_cfg(1);
  c.rope_high = 1; /* not above low_freq_factor */
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "high_freq_factor"));
  /* q/k norms run under tensor parallelism (their gradient summed over the
   * group, tests/cli/test-train-tp-qknorm.sh); biases split with their
   * matrices; sizes must still divide. */
  c = arch_cfg(1);
  c.vocab = 24;
  assert_int_equal(prm_llama_tp_check_config(&c, 2, &err), 0);
  c.vocab = 25;
  assert_int_equal(prm_llama_tp_check_config(&c, 2, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "vocab_size"));
}

/* The variants' tensors: Hugging Face's names in Qwen's order, their
 * shapes, biases initialised at 0 and q/k norms at 1, no weight decay on
 * either, and the count prm_llama_param_count gives. */
static void test_arch_layout(void **state) {
  (void)state;
  prm_llama_t *m = build(arch_cfg(0), 1, 4, PRM_LLAMA_TRAIN);
  const char *want[] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                        "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
                        "self_attn.v_proj.bias", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
                        "self_attn.k_norm.weight", "post_attention_layernorm.weight",
                        "mlp.gate_proj.weight"};
  int64_t sum = 0;
  for (int i = 0; i < m->ntensors; i++) {
    assert_int_equal(m->tensors[i].offset, sum);
    sum += m->tensors[i].numel;
  }
  assert_int_equal(sum, m->nparams);
  assert_int_equal(m->nparams, prm_llama_param_count(&m->cfg));
  for (int k = 0; k < 12; k++) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.1.%s", want[k]);
    assert_string_equal(m->tensors[1 + 14 + k].name, name);
  }
  /* q (24,16) + bias 24, k/v (12,16) + 12 each, o (16,24), norms 6 each. */
  int64_t attn = 24 * 16 + 24 + 2 * (12 * 16 + 12) + 16 * 24 + 2 * 6;
  int64_t want_n = 23 * 16 * 2 + 2 * (32 + attn + 3 * 24 * 16) + 16;
  assert_int_equal(m->nparams, want_n);
  const prm_tensor_t *o = prm_llama_find(m, "model.layers.0.self_attn.o_proj.weight");
  assert_int_equal(o->shape[0], 16);
  assert_int_equal(o->shape[1], 24);
  const prm_tensor_t *b = prm_llama_find(m, "model.layers.0.self_attn.k_proj.bias");
  const prm_tensor_t *n = prm_llama_find(m, "model.layers.0.self_attn.q_norm.weight");
  assert_int_equal(b->numel, 12);
  assert_int_equal(n->numel, 6);
  assert_false(b->decay || n->decay);
  for (int64_t j = 0; j < b->numel; j++) assert_true(m->params[b->offset + j] == 0.0f);
  for (int64_t j = 0; j < n->numel; j++) assert_true(m->params[n->offset + j] == 1.0f);
  prm_llama_free(m);
}

/* Llama 3.1's RoPE tables: the short-wavelength frequency as without
 * scaling, the long one slowed by the factor exactly, the one between
 * blended (strictly between the two); every value computed in double. */
static void test_rope_scaling_tables(void **state) {
  (void)state;
  prm_llama_config_t c = arch_cfg(0), p = c;
  p.rope_factor = 0;
  float cs[16 * 3], sn[16 * 3], cp[16 * 3], sp[16 * 3];
  prm_llama_rope_tables(&c, cs, sn);
  prm_llama_rope_tables(&p, cp, sp);
  for (int64_t t = 0; t < 16; t++) {
    assert_true(cs[t * 3] == cp[t * 3] && sn[t * 3] == sp[t * 3]);
    double f2 = pow(100.0, -4.0 / 6.0) / 8.0;
    assert_true(fabs(cs[t * 3 + 2] - cos(t * f2)) < 1e-7 && fabs(sn[t * 3 + 2] - sin(t * f2)) < 1e-7);
  }
  /* Band 1: wavelength 2 pi 100^(1/3) = 29.2, smooth = (32 / 29.2 - 1) / 3. */
  double f1 = pow(100.0, -2.0 / 6.0), wl = 2 * M_PI / f1, s1 = (32 / wl - 1) / 3;
  double g1 = (1 - s1) * f1 / 8 + s1 * f1;
  assert_true(s1 > 0 && s1 < 1);
  for (int64_t t = 0; t < 16; t++)
    assert_true(fabs(sn[t * 3 + 1] - sin(t * g1)) < 1e-7);
}

/* The head's chunks: at most 16M logits each (256M on a device), as few
 * chunks as that allows, whole blocks of PRM_HEAD_ROW_BLOCK rows
 * (PRM_DEV_HEAD_ROW_BLOCK) where a block fits, and all rows in one chunk
 * when they fit. */
static void head_chunk_case(int64_t (*fn)(int64_t, int64_t), int64_t most, int64_t block) {
  int64_t vocabs[] = {256, 32000, 50304, 128256, 600000, 40000000, 2000000000};
  for (int v = 0; v < 7; v++)
    for (int64_t rows = 1; rows <= 40000; rows += rows < 70 ? 1 : rows < 5000 ? 37 : 997) {
      int64_t V = vocabs[v], chunk = fn(rows, V);
      int64_t cap = most / V > 1 ? most / V : 1; /* one row even past the most */
      int64_t n = (rows + chunk - 1) / chunk;
      assert_true(chunk >= 1 && chunk <= cap);
      if (rows <= cap) {
        assert_int_equal(chunk, rows);
        continue;
      }
      if (cap >= block) { /* whole blocks, the fewest chunks */
        assert_int_equal(chunk % block, 0);
        int64_t blocks = (rows + block - 1) / block;
        int64_t per = cap / block;
        assert_int_equal(n, (blocks + per - 1) / per);
        if (rows % block == 0) assert_int_equal((rows - (n - 1) * chunk) % block, 0);
      } else {
        assert_int_equal(n, (rows + cap - 1) / cap);
      }
    }
}

static void test_head_chunk(void **state) {
  (void)state;
  /* The race's shape: 2048 rows of vocab 50304, 333 rows at most. */
  assert_int_equal(prm_llama_head_chunk(2048, 50304), 320);
  assert_int_equal(prm_llama_head_chunk(100, 50304), 100);
  assert_int_equal(prm_llama_head_chunk(0, 50304), 1);
  /* The GPU's reference shape: 16 x 1024 rows, 5336 rows at most: four
   * chunks of 4096 (the host's choice there is 52 of 320). */
  assert_int_equal(prm_llama_head_chunk(16384, 50304), 320);
  assert_int_equal(prm_llama_dev_head_chunk(16384, 50304), 4096);
  assert_int_equal(prm_llama_dev_head_chunk(16384, 128256), 2048);
  assert_int_equal(prm_llama_dev_head_chunk(2048, 50304), 2048);
  assert_int_equal(prm_llama_dev_head_chunk(0, 50304), 1);
  head_chunk_case(prm_llama_head_chunk, PRM_HEAD_LOGITS, PRM_HEAD_ROW_BLOCK);
  head_chunk_case(prm_llama_dev_head_chunk, PRM_DEV_HEAD_LOGITS, PRM_DEV_HEAD_ROW_BLOCK);
}

static void test_layout(void **state) {
  (void)state;
  for (int tied = 0; tied <= 1; tied++) {
    prm_llama_t *m = build(tiny_cfg(tied), 1, 4, PRM_LLAMA_TRAIN);
    int64_t sum = 0;
    for (int i = 0; i < m->ntensors; i++) {
      assert_int_equal(m->tensors[i].offset, sum);
      sum += m->tensors[i].numel;
    }
    assert_int_equal(sum, m->nparams);
    assert_int_equal(m->nparams, prm_llama_param_count(&m->cfg));
    /* 23*16 embed + 2 x (16+16 + q 16*16 + k,v 2*8*16 + o 16*16 + 3*24*16) + 16 [+ head] */
    int64_t want = 23 * 16 + 2 * (32 + 256 + 256 + 256 + 3 * 24 * 16) + 16 + (tied ? 0 : 23 * 16);
    assert_int_equal(m->nparams, want);
    assert_int_equal(m->ntensors, 1 + 2 * 9 + 1 + !tied);
    assert_string_equal(m->tensors[0].name, "model.embed_tokens.weight");
    assert_string_equal(m->tensors[3].name, "model.layers.0.self_attn.k_proj.weight");
    assert_int_equal(m->tensors[3].shape[0], 8);
    assert_int_equal(m->tensors[3].shape[1], 16);
    assert_non_null(prm_llama_find(m, "model.norm.weight"));
    assert_int_equal(prm_llama_find(m, "lm_head.weight") != NULL, !tied);
    assert_true(tied ? m->head == m->embed : m->head != m->embed);
    assert_false(prm_llama_find(m, "model.norm.weight")->decay);
    assert_true(prm_llama_find(m, "model.layers.1.mlp.up_proj.weight")->decay);
    prm_llama_free(m);
  }
}

static double tensor_std(const prm_llama_t *m, const char *name) {
  const prm_tensor_t *t = prm_llama_find(m, name);
  const float *p = m->params + t->offset;
  double s = 0;
  for (int64_t i = 0; i < t->numel; i++) s += (double)p[i] * p[i];
  return sqrt(s / (double)t->numel);
}

static void test_init(void **state) {
  (void)state;
  prm_llama_config_t c = tiny_cfg(0);
  c.hidden = 64;
  c.ffn = 128;
  c.init_std = 0.02;
  prm_llama_t *a = build(c, 1, 4, 0), *b = build(c, 1, 4, 0);
  assert_memory_equal(a->params, b->params, (size_t)a->nparams * sizeof(float));
  prm_llama_init(b, 43);
  assert_memory_not_equal(a->params, b->params, (size_t)a->nparams * sizeof(float));
  const prm_tensor_t *n = prm_llama_find(a, "model.layers.1.input_layernorm.weight");
  for (int64_t i = 0; i < n->numel; i++) assert_true(a->params[n->offset + i] == 1.0f);
  double q = tensor_std(a, "model.layers.0.self_attn.q_proj.weight");
  double o = tensor_std(a, "model.layers.0.self_attn.o_proj.weight");
  double d = tensor_std(a, "model.layers.1.mlp.down_proj.weight");
  assert_true(fabs(q - 0.02) < 0.002);
  assert_true(fabs(o - 0.02 / 2.0) < 0.0015); /* 1/sqrt(2 x 2 layers) */
  assert_true(fabs(d - 0.02 / 2.0) < 0.0015);
  prm_llama_free(a);
  prm_llama_free(b);
}

/* Loss of the whole batch (mean over tokens) in double. */
static double mean_loss(prm_llama_t *m, const int32_t *tok, const int32_t *tgt, int64_t B) {
  int64_t count = 0;
  double s = prm_llama_forward(m, tok, tgt, B, &count);
  return s / (double)count;
}

/* Finite differences of the whole model along each tensor's gradient
 * direction (so every tensor is checked, and a wrong gradient of any
 * component shows) and along random directions. fp32 forward, so eps is
 * chosen where rounding and curvature errors are both ~1e-4. */
static void check_model_grad(prm_llama_config_t c, unsigned flags) {
  int64_t B = 2, T = 7, N = B * T;
  prm_llama_t *m = build(c, B, T, PRM_LLAMA_TRAIN | flags);
  if (c.qkv_bias || c.qk_norm) perturb_vectors(m, 77);
  int32_t tok[14], tgt[14];
  random_tokens(tok, N, c.vocab, 1);
  random_tokens(tgt, N, c.vocab, 2);
  tgt[3] = -1; /* a masked target */
  int64_t count = 0;
  prm_llama_zero_grad(m);
  prm_llama_forward_backward(m, tok, tgt, B, 1.0f / 13.0f, &count);
  assert_int_equal(count, 13);
  float *p0 = malloc((size_t)m->nparams * sizeof(float));
  memcpy(p0, m->params, (size_t)m->nparams * sizeof(float));
  const double eps = 1e-2;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    const float *g = m->grads + t->offset;
    double gn = sqrt(prm_sumsq(g, t->numel));
    assert_true(gn > 0);
    /* Central differences at h and h/2, combined by Richardson
     * extrapolation so the h^2 curvature term cancels. */
    double fdh[2];
    for (int k = 0; k < 2; k++) {
      double h = k ? eps / 2 : eps, l[2];
      for (int side = 0; side < 2; side++) {
        double step = side ? -h : h;
        for (int64_t j = 0; j < t->numel; j++)
          m->params[t->offset + j] = p0[t->offset + j] + (float)(step * g[j] / gn);
        l[side] = mean_loss(m, tok, tgt, B);
      }
      fdh[k] = (l[0] - l[1]) / (2 * h);
    }
    memcpy(m->params + t->offset, p0 + t->offset, (size_t)t->numel * sizeof(float));
    /* Along u = g/|g| the derivative is |g| when the gradient is right. */
    double fd = (4 * fdh[1] - fdh[0]) / 3, rel = fabs(fd - gn) / gn;
    if (rel > 2e-3)
      fail_msg("%s: directional derivative %.6g, gradient norm %.6g (rel %.2e)", t->name, fd, gn,
               rel);
  }
  free(p0);
  prm_llama_free(m);
}

static void test_grad_fd_untied(void **state) {
  (void)state;
  check_model_grad(tiny_cfg(0), 0);
}

/* The attention variants' gradients (biases, q/k norms, the wider heads
 * and scaled RoPE) against finite differences, untied GQA and tied MHA
 * with full recomputation; the biases and norm weights perturbed first. */
static void test_grad_fd_arch(void **state) {
  (void)state;
  check_model_grad(arch_cfg(0), 0);
  prm_llama_config_t c = arch_cfg(1);
  c.groups = 4;
  check_model_grad(c, PRM_LLAMA_RECOMPUTE);
  c = arch_cfg(0); /* each variant alone */
  c.qk_norm = 0, c.rope_factor = 0, c.head_dim = 0;
  check_model_grad(c, 0);
  c = arch_cfg(0);
  c.qkv_bias = 0, c.rope_factor = 0;
  check_model_grad(c, 0);
}

static void test_grad_fd_tied_recompute(void **state) {
  (void)state;
  prm_llama_config_t c = tiny_cfg(1);
  c.groups = 4; /* plain multi-head attention */
  check_model_grad(c, PRM_LLAMA_RECOMPUTE);
}

static void test_recompute_identical(void **state) {
  (void)state;
  prm_llama_config_t c = tiny_cfg(0);
  c.layers = 3;
  int64_t B = 2, T = 9;
  prm_llama_t *a = build(c, B, T, PRM_LLAMA_TRAIN);
  prm_llama_t *b = build(c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_RECOMPUTE);
  assert_true(b->acts_bytes < a->acts_bytes);
  int32_t tok[18], tgt[18];
  random_tokens(tok, B * T, c.vocab, 5);
  random_tokens(tgt, B * T, c.vocab, 6);
  int64_t ca, cb;
  double la = prm_llama_forward_backward(a, tok, tgt, B, 0.1f, &ca);
  double lb = prm_llama_forward_backward(b, tok, tgt, B, 0.1f, &cb);
  assert_true(la == lb);
  assert_memory_equal(a->grads, b->grads, (size_t)a->nparams * sizeof(float));
  /* A second pass accumulates: gradients double (to rounding). */
  prm_llama_forward_backward(b, tok, tgt, B, 0.1f, &cb);
  for (int64_t i = 0; i < a->nparams; i++)
    assert_true(fabsf(b->grads[i] - 2 * a->grads[i]) <= 1e-6f * fabsf(a->grads[i]) + 1e-9f);
  prm_llama_free(a);
  prm_llama_free(b);
}

/* bf16 with PRM_LLAMA_ATTN_FP32: the GEMMs in bf16, attention on the fp32
 * kernels (head size 16, which the bf16 kernels take). Its loss and
 * gradients stay close to fp32's, differ from those of the bf16 attention
 * (the flag is in effect), and the bf16 operand slots no longer hold
 * attention's q, k, v (smaller scratch). */
static void test_bf16_attention_fp32(void **state) {
  (void)state;
  prm_llama_config_t c = tiny_cfg(0);
  c.hidden = 64, c.ffn = 48, c.init_std = 0.1;
  int64_t B = 2, T = 9;
  prm_llama_t *m[3] = {build(c, B, T, PRM_LLAMA_TRAIN),
                       build(c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_BF16),
                       build(c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_BF16 | PRM_LLAMA_ATTN_FP32)};
  int32_t tok[18], tgt[18];
  random_tokens(tok, B * T, c.vocab, 11);
  random_tokens(tgt, B * T, c.vocab, 12);
  double l[3];
  for (int i = 0; i < 3; i++) {
    int64_t n;
    l[i] = prm_llama_forward_backward(m[i], tok, tgt, B, 0.1f, &n);
  }
  assert_true(l[0] > 0 && fabs(l[1] - l[0]) < 0.01 * l[0] && fabs(l[2] - l[0]) < 0.01 * l[0]);
  assert_true(l[2] != l[1] && l[2] != l[0]);
  double d2 = 0, n2 = 0, e2 = 0;
  for (int64_t i = 0; i < m[0]->nparams; i++) {
    double d = (double)m[0]->grads[i] - m[2]->grads[i], e = (double)m[1]->grads[i] - m[2]->grads[i];
    d2 += d * d, e2 += e * e;
    n2 += (double)m[0]->grads[i] * m[0]->grads[i];
  }
  assert_true(n2 > 0 && d2 > 0 && e2 > 0);
  if (!(sqrt(d2 / n2) < 0.05)) fail_msg("fp32-attention bf16 gradients off by %g", sqrt(d2 / n2));
  assert_true(m[2]->scratch_bytes < m[1]->scratch_bytes);
  for (int i = 0; i < 3; i++) prm_llama_free(m[i]);
}

/* bf16 with the attention variants (wider heads than hidden: the operand
 * slots hold H D values): close to fp32, both attention kernels. */
static void test_bf16_arch(void **state) {
  (void)state;
  prm_llama_config_t c = arch_cfg(0);
  c.hidden = 32, c.ffn = 48, c.head_dim = 16, c.init_std = 0.1; /* H D = 64 > C */
  int64_t B = 2, T = 9;
  prm_llama_t *m[3] = {build(c, B, T, PRM_LLAMA_TRAIN),
                       build(c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_BF16),
                       build(c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_BF16 | PRM_LLAMA_ATTN_FP32)};
  int32_t tok[18], tgt[18];
  random_tokens(tok, B * T, c.vocab, 31);
  random_tokens(tgt, B * T, c.vocab, 32);
  double l[3];
  for (int i = 0; i < 3; i++) {
    perturb_vectors(m[i], 5);
    int64_t n;
    l[i] = prm_llama_forward_backward(m[i], tok, tgt, B, 0.1f, &n);
  }
  for (int k = 1; k < 3; k++) {
    assert_true(l[0] > 0 && fabs(l[k] - l[0]) < 0.01 * l[0]);
    double d2 = 0, n2 = 0;
    for (int64_t i = 0; i < m[0]->nparams; i++) {
      double d = (double)m[0]->grads[i] - m[k]->grads[i];
      d2 += d * d, n2 += (double)m[0]->grads[i] * m[0]->grads[i];
    }
    if (!(n2 > 0 && sqrt(d2 / n2) < 0.05)) fail_msg("bf16 (%d) gradients off by %g", k, sqrt(d2 / n2));
  }
  for (int i = 0; i < 3; i++) prm_llama_free(m[i]);
}

/* bf16 with the layers' weights packed (PRM_LLAMA_PACK16) against the
 * same model without: on oneDNN (when built in) the layers' products run
 * on the packed copies, which the second pass re-packs after an update;
 * the losses and gradients agree to the GEMMs' rounding either way. */
static void test_bf16_pack_weights(void **state) {
  (void)state;
  prm_llama_config_t c = tiny_cfg(0);
  c.hidden = 64, c.ffn = 96, c.init_std = 0.1;
  int64_t B = 2, T = 16;
  prm_gemm_t g;
  prm_err_t err = {0};
  int dnnl = prm_gemm_init(&g, "onednn", &err) == 0;
  if (!dnnl) g = gemm_ref();
  prm_llama_t *m[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    unsigned f = PRM_LLAMA_TRAIN | PRM_LLAMA_BF16 | PRM_LLAMA_ATTN_FP32 | (k ? PRM_LLAMA_PACK16 : 0);
    assert_int_equal(prm_llama_new(&c, B, T, f, &g, &m[k], &err), 0);
    prm_llama_init(m[k], 42);
  }
  int32_t tok[32], tgt[32];
  random_tokens(tok, B * T, c.vocab, 21);
  random_tokens(tgt, B * T, c.vocab, 22);
  const prm_tensor_t *wq = prm_llama_find(m[1], "model.layers.1.self_attn.q_proj.weight");
  assert_non_null(wq);
  int iq = (int)(wq - m[1]->tensors);
  for (int pass = 0; pass < 2; pass++) {
    double l[2];
    for (int k = 0; k < 2; k++) {
      int64_t n;
      prm_llama_zero_grad(m[k]);
      l[k] = prm_llama_forward_backward(m[k], tok, tgt, B, 1.0f / (float)(B * T), &n);
    }
    assert_true(l[0] > 0 && fabs(l[1] - l[0]) < 1e-5 * l[0]);
    double d2 = 0, n2 = 0;
    for (int64_t i = 0; i < m[0]->nparams; i++) {
      double d = (double)m[0]->grads[i] - m[1]->grads[i];
      d2 += d * d, n2 += (double)m[0]->grads[i] * m[0]->grads[i];
    }
    if (!(n2 > 0 && sqrt(d2 / n2) < 1e-4)) fail_msg("packed gradients off by %g", sqrt(d2 / n2));
    /* On oneDNN the packed model holds both blocked copies of wq, packed at
     * this pass's version; the other holds none. */
    assert_true(!m[0]->pk16[2 * iq].buf && !m[0]->pk16[2 * iq + 1].buf);
    if (dnnl) {
      assert_non_null(m[1]->pk16[2 * iq].buf);
      assert_non_null(m[1]->pk16[2 * iq + 1].buf);
    }
    assert_true(m[1]->pk16_ver[2 * iq] == m[1]->ver16 && m[1]->pk16_ver[2 * iq + 1] == m[1]->ver16);
    /* An update: a different step's weights for the second pass. */
    for (int k = 0; k < 2; k++) {
      for (int64_t i = 0; i < m[k]->nparams; i++) m[k]->params[i] -= 0.5f * m[k]->grads[i];
      prm_llama_params_changed(m[k]);
    }
  }
  prm_sb_t sb[2] = {{0}, {0}};
  for (int k = 0; k < 2; k++) prm_llama_describe_memory(m[k], &sb[k]);
  assert_null(strstr(prm_sb_str(&sb[0]), "packed bf16 weights"));
  if (dnnl) assert_non_null(strstr(prm_sb_str(&sb[1]), "packed bf16 weights"));
  for (int k = 0; k < 2; k++) {
    prm_sb_free(&sb[k]);
    prm_llama_free(m[k]);
  }
  prm_gemm_free(&g);
}

static void test_microbatches_sum(void **state) {
  (void)state;
  prm_llama_config_t c = tiny_cfg(0);
  int64_t B = 2, T = 8;
  prm_llama_t *m = build(c, B, T, PRM_LLAMA_TRAIN);
  int32_t tok[16], tgt[16];
  random_tokens(tok, B * T, c.vocab, 7);
  random_tokens(tgt, B * T, c.vocab, 8);
  int64_t n;
  prm_llama_forward_backward(m, tok, tgt, B, 1.0f / 16, &n);
  float *whole = malloc((size_t)m->nparams * sizeof(float));
  memcpy(whole, m->grads, (size_t)m->nparams * sizeof(float));
  prm_llama_zero_grad(m);
  double l1 = prm_llama_forward_backward(m, tok, tgt, 1, 1.0f / 16, &n);
  double l2 = prm_llama_forward_backward(m, tok + T, tgt + T, 1, 1.0f / 16, &n);
  double lw = prm_llama_forward(m, tok, tgt, B, &n);
  assert_true(fabs((l1 + l2) - lw) < 1e-9 * fabs(lw) + 1e-6);
  double num = 0, den = 0;
  for (int64_t i = 0; i < m->nparams; i++) {
    num += ((double)whole[i] - m->grads[i]) * ((double)whole[i] - m->grads[i]);
    den += (double)whole[i] * whole[i];
  }
  assert_true(sqrt(num / den) < 1e-6);
  free(whole);
  prm_llama_free(m);
}

/* Packed sequences: three examples in one row (segment ids, positions
 * restarting at 0) give each example the loss and gradients it has alone
 * (a row of its own, padding after it); without the segments they do not. */
static void test_packed_equals_alone(void **state) {
  (void)state;
  prm_llama_config_t c = tiny_cfg(0);
  enum { T = 16 };
  const int64_t len[3] = {5, 7, 4};
  prm_llama_t *m = build(c, 1, T, PRM_LLAMA_TRAIN);
  int32_t tok[T], tgt[T], seg[T], pos[T], one_tok[T], one_tgt[T];
  random_tokens(tok, T, c.vocab, 11);
  random_tokens(tgt, T, c.vocab, 12);
  for (int64_t e = 0, p = 0; e < 3; e++)
    for (int64_t j = 0; j < len[e]; j++, p++) seg[p] = (int32_t)e, pos[p] = (int32_t)j;
  float *alone = calloc((size_t)m->nparams, sizeof(float));
  double sum_alone = 0, packed[3], nomask[3];
  for (int64_t e = 0, p0 = 0; e < 3; p0 += len[e], e++) {
    int32_t t_only[T];
    int64_t n;
    for (int64_t i = 0; i < T; i++) t_only[i] = seg[i] == e ? tgt[i] : -1;
    prm_llama_set_packing(m, seg, pos);
    packed[e] = prm_llama_forward(m, tok, t_only, 1, &n);
    assert_int_equal(n, len[e]);
    prm_llama_set_packing(m, NULL, NULL);
    nomask[e] = prm_llama_forward(m, tok, t_only, 1, &n);
    /* Alone: the example first, random padding after it, masked. */
    random_tokens(one_tok, T, c.vocab, 13 + (uint64_t)e);
    for (int64_t i = 0; i < T; i++) one_tgt[i] = -1;
    memcpy(one_tok, tok + p0, (size_t)len[e] * sizeof(int32_t));
    memcpy(one_tgt, tgt + p0, (size_t)len[e] * sizeof(int32_t));
    prm_llama_zero_grad(m);
    double l = prm_llama_forward_backward(m, one_tok, one_tgt, 1, 1.0f, &n);
    for (int64_t i = 0; i < m->nparams; i++) alone[i] += m->grads[i];
    sum_alone += l;
    if (fabs(l - packed[e]) > 1e-5 * fabs(l))
      fail_msg("example %lld: packed loss %.9g, alone %.9g", (long long)e, packed[e], l);
  }
  /* The first example sees nothing before it either way; the others do. */
  assert_true(fabs(nomask[0] - packed[0]) < 1e-6 * fabs(packed[0]));
  assert_true(fabs(nomask[1] - packed[1]) > 1e-4 * fabs(packed[1]));
  /* Gradients of the whole packed row = the sum of the examples' alone. */
  prm_llama_set_packing(m, seg, pos);
  prm_llama_zero_grad(m);
  int64_t n;
  double lw = prm_llama_forward_backward(m, tok, tgt, 1, 1.0f, &n);
  assert_true(fabs(lw - sum_alone) < 1e-5 * fabs(sum_alone));
  double num = 0, den = 0;
  for (int64_t i = 0; i < m->nparams; i++) {
    num += ((double)alone[i] - m->grads[i]) * ((double)alone[i] - m->grads[i]);
    den += (double)alone[i] * alone[i];
  }
  if (!(sqrt(num / den) < 1e-5)) fail_msg("packed gradients differ: %.3g", sqrt(num / den));
  free(alone);
  prm_llama_free(m);
}

/* Pipeline stages: two micro-batches through layers [0, 2) and [2, 3),
 * each stage with its own activation slots (slots 0-1 and 2-3, the
 * activations and gradients at the cut copied over as messages would be),
 * interleaved as a pipeline runs them (both forwards, then both
 * backwards), give the whole-model passes' losses and gradients: bit for
 * bit with an untied head; the tied embedding adds its head and embedding
 * parts in another order, so it agrees to rounding. */
static void check_stages(int tied, unsigned flags, int arch) {
  prm_llama_config_t c = arch ? arch_cfg(tied) : tiny_cfg(tied);
  c.layers = 3;
  int64_t B = 1, T = 8, N = B * T, C = c.hidden;
  size_t xb = (size_t)(N * C) * sizeof(float);
  prm_llama_t *a = build(c, B, T, flags), *b = build(c, B, T, flags);
  prm_err_t err = {0};
  assert_int_equal(prm_llama_add_slots(b, 4, &err), 0);
  assert_int_equal(b->nslots, 4);
  int32_t tok[16], tgt[16];
  random_tokens(tok, 2 * N, c.vocab, 11);
  random_tokens(tgt, 2 * N, c.vocab, 12);
  int64_t n;
  double la = 0, lb = 0;
  for (int k = 0; k < 2; k++) la += prm_llama_forward_backward(a, tok + k * N, tgt + k * N, B, 0.05f, &n);
  for (int k = 0; k < 2; k++) {
    prm_llama_use_slot(b, k);
    assert_true(prm_llama_stage_forward(b, 0, 2, tok + k * N, tgt + k * N, B, 1, 0.05f, &n) == 0);
    const float *y = prm_llama_stage_x(b, 2);
    prm_llama_use_slot(b, 2 + k);
    memcpy(prm_llama_stage_x(b, 2), y, xb);
    lb += prm_llama_stage_forward(b, 2, 3, tok + k * N, tgt + k * N, B, 1, 0.05f, &n);
    assert_int_equal(n, N);
  }
  for (int k = 0; k < 2; k++) {
    prm_llama_use_slot(b, 2 + k);
    prm_llama_stage_backward(b, 2, 3, tok + k * N, B);
    const float *dx = prm_llama_stage_dx(b);
    prm_llama_use_slot(b, k);
    memcpy(prm_llama_stage_dx(b), dx, xb);
    prm_llama_stage_backward(b, 0, 2, tok + k * N, B);
  }
  assert_true(la == lb);
  int64_t e = tied ? a->tensors[0].numel : 0; /* bit for bit after the tied embedding */
  assert_memory_equal(a->grads + e, b->grads + e, (size_t)(a->nparams - e) * sizeof(float));
  float big = 0;
  for (int64_t i = 0; i < e; i++) big = fmaxf(big, fabsf(a->grads[i]));
  for (int64_t i = 0; i < e; i++) assert_true(fabsf(a->grads[i] - b->grads[i]) <= 1e-6f * big);
  prm_llama_free(a);
  prm_llama_free(b);
}

static void test_stages_match_whole(void **state) {
  (void)state;
  check_stages(0, PRM_LLAMA_TRAIN, 0);
  check_stages(1, PRM_LLAMA_TRAIN, 0);
  check_stages(0, PRM_LLAMA_TRAIN | PRM_LLAMA_RECOMPUTE, 0);
  check_stages(1, PRM_LLAMA_TRAIN | PRM_LLAMA_RECOMPUTE, 0);
  check_stages(0, PRM_LLAMA_TRAIN, 1); /* the attention variants */
  check_stages(1, PRM_LLAMA_TRAIN | PRM_LLAMA_RECOMPUTE, 1);
}

/* The gradient-readiness hook: contiguous ranges in descending order that
 * cover every parameter once, each already final when announced (tied and
 * untied heads, with and without recomputation). */
typedef struct {
  const prm_llama_t *m;
  float *shadow;
  int64_t next_hi, calls;
} hook_log_t;

static void hook_record(void *ctx, int64_t offset, int64_t numel) {
  hook_log_t *h = ctx;
  assert_true(numel > 0);
  assert_int_equal(offset + numel, h->next_hi); /* contiguous, descending */
  memcpy(h->shadow + offset, h->m->grads + offset, (size_t)numel * sizeof(float));
  h->next_hi = offset;
  h->calls++;
}

static void test_grads_hook(void **state) {
  (void)state;
  for (int v = 0; v < 4; v++) {
    prm_llama_config_t c = tiny_cfg(v & 1);
    c.layers = 3;
    int64_t B = 2, T = 7;
    prm_llama_t *m = build(c, B, T, PRM_LLAMA_TRAIN | (v & 2 ? PRM_LLAMA_RECOMPUTE : 0));
    int32_t tok[14], tgt[14];
    random_tokens(tok, B * T, c.vocab, 11);
    random_tokens(tgt, B * T, c.vocab, 12);
    hook_log_t h = {.m = m, .shadow = calloc((size_t)m->nparams, sizeof(float)), .next_hi = m->nparams};
    int64_t n;
    prm_llama_forward_backward(m, tok, tgt, B, 0.5f, &n); /* a first micro-batch, no hook */
    prm_llama_set_grads_hook(m, hook_record, &h);
    prm_llama_forward_backward(m, tok, tgt, B, 0.5f, &n);
    assert_int_equal(h.next_hi, 0);                /* everything announced */
    assert_int_equal(h.calls, c.layers + 2);       /* norm(+head), layers, embedding */
    assert_memory_equal(h.shadow, m->grads, (size_t)m->nparams * sizeof(float)); /* final then */
    prm_llama_set_grads_hook(m, NULL, NULL);
    h.calls = 0;
    prm_llama_forward_backward(m, tok, tgt, B, 0.5f, &n);
    assert_int_equal(h.calls, 0);
    free(h.shadow);
    prm_llama_free(m);
  }
}

/* log softmax(logits)[t] */
static double logprob(const float *logits, int64_t V, int32_t t) {
  double mx = logits[0];
  for (int64_t i = 1; i < V; i++) mx = fmax(mx, logits[i]);
  double s = 0;
  for (int64_t i = 0; i < V; i++) s += exp(logits[i] - mx);
  return logits[t] - mx - log(s);
}

static void kv_case(prm_llama_config_t c) {
  int64_t T = 11;
  prm_llama_t *m = build(c, 1, T, 0);
  if (c.qkv_bias || c.qk_norm) perturb_vectors(m, 78);
  int32_t seq[12];
  random_tokens(seq, T + 1, c.vocab, 9);
  int64_t n;
  double want = prm_llama_forward(m, seq, seq + 1, 1, &n);
  assert_int_equal(n, T);

  prm_err_t err = {0};
  prm_llama_kv_t *kv = NULL;
  float logits[23];
  assert_int_equal(prm_llama_kv_new(m, &kv, &err), 0);
  /* A 4-token prompt in one call, then one token at a time. */
  double got = 0;
  for (int64_t i = 0; i < 4; i++) {
    prm_llama_kv_t *kv1 = NULL;
    assert_int_equal(prm_llama_kv_new(m, &kv1, &err), 0);
    assert_int_equal(prm_llama_kv_step(m, kv1, seq, i + 1, logits, &err), 0);
    got -= logprob(logits, c.vocab, seq[i + 1]);
    prm_llama_kv_free(kv1);
  }
  assert_int_equal(prm_llama_kv_step(m, kv, seq, 4, logits, &err), 0);
  for (int64_t i = 4; i < T; i++) {
    assert_int_equal(prm_llama_kv_step(m, kv, &seq[i], 1, logits, &err), 0);
    got -= logprob(logits, c.vocab, seq[i + 1]);
  }
  assert_int_equal(prm_llama_kv_len(kv), T);
  assert_true(fabs(got - want) < 1e-4 * fabs(want));
  /* Past max_pos is a clear error, not a write out of bounds. */
  int32_t more[16] = {0};
  assert_int_equal(prm_llama_kv_step(m, kv, more, 6, logits, &err), PRM_ERANGE);
  assert_non_null(strstr(err.msg, "max_position_embeddings"));
  int32_t bad = 99;
  assert_int_equal(prm_llama_kv_step(m, kv, &bad, 1, logits, &err), PRM_EINVAL);
  prm_llama_kv_free(kv);
  prm_llama_free(m);
}

static void test_kv_cache_matches_forward(void **state) {
  (void)state;
  kv_case(tiny_cfg(0));
  kv_case(arch_cfg(0)); /* biases, q/k norms, wider heads, scaled RoPE */
  prm_llama_config_t c = arch_cfg(1);
  c.qk_norm = 0;
  kv_case(c);
}

static void test_memory_accounting(void **state) {
  (void)state;
  size_t before = prm_mem_in_use(PRM_MEM_PARAMS) + prm_mem_in_use(PRM_MEM_GRADS) +
                  prm_mem_in_use(PRM_MEM_ACTS);
  prm_llama_t *m = build(tiny_cfg(0), 2, 8, PRM_LLAMA_TRAIN);
  assert_true(prm_mem_in_use(PRM_MEM_PARAMS) >= (size_t)m->nparams * 4);
  assert_true(prm_mem_in_use(PRM_MEM_GRADS) >= (size_t)m->nparams * 4);
  prm_sb_t sb = {0};
  prm_llama_describe_memory(m, &sb);
  assert_non_null(strstr(prm_sb_str(&sb), "activations"));
  prm_sb_free(&sb);
  prm_llama_free(m);
  assert_int_equal(prm_mem_in_use(PRM_MEM_PARAMS) + prm_mem_in_use(PRM_MEM_GRADS) +
                       prm_mem_in_use(PRM_MEM_ACTS),
                   before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_check),
      cmocka_unit_test(test_head_chunk),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_arch_layout),
      cmocka_unit_test(test_rope_scaling_tables),
      cmocka_unit_test(test_grad_fd_arch),
      cmocka_unit_test(test_init),
      cmocka_unit_test(test_grad_fd_untied),
      cmocka_unit_test(test_grad_fd_tied_recompute),
      cmocka_unit_test(test_recompute_identical),
      cmocka_unit_test(test_bf16_attention_fp32),
      cmocka_unit_test(test_bf16_pack_weights),
      cmocka_unit_test(test_bf16_arch),
      cmocka_unit_test(test_microbatches_sum),
      cmocka_unit_test(test_packed_equals_alone),
      cmocka_unit_test(test_grads_hook),
      cmocka_unit_test(test_stages_match_whole),
      cmocka_unit_test(test_kv_cache_matches_forward),
      cmocka_unit_test(test_memory_accounting),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
