/* test-moe.c - mixture-of-experts layers (src/model/moe.c): the
 * configuration rules, the Mixtral parameter layout next to dense layers,
 * the whole gradient (router, experts, shared expert, aux and z losses)
 * against finite differences with the top-k choice held fixed, capacity
 * dropping, recomputation, and the routing statistics. */
#include "testlib.h"
#include "primus/prm_model.h"
#include "model/model-impl.h"
#include "primus/prm_train.h"
#include "train/train-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Two layers: layer 0 MoE (E = 4, k = 2, a shared expert), layer 1 dense. */
static prm_llama_config_t moe_cfg(void) {
  prm_llama_config_t c = {.vocab = 23, .hidden = 16, .layers = 2, .heads = 4, .groups = 2,
                          .ffn = 24, .max_pos = 16, .norm_eps = 1e-5, .rope_base = 10000,
                          .init_std = 0.3, .tied = 0, .experts = 4, .topk = 2, .moe_ffn = 12,
                          .moe_freq = 2, .shared_ffn = 8, .aux_coeff = 0.1, .z_coeff = 0.01};
  return c;
}

static prm_llama_t *build(prm_llama_config_t c, int64_t B, int64_t T, unsigned flags) {
  prm_gemm_t g;
  prm_err_t err = {0};
  assert_int_equal(prm_gemm_init(&g, "reference", &err), 0);
  prm_llama_t *m = NULL;
  int rc = prm_llama_new(&c, B, T, flags, &g, &m, &err);
  if (rc) fail_msg("prm_llama_new: %s", err.msg);
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
  prm_llama_config_t c = moe_cfg();
  assert_int_equal(prm_llama_config_check(&c, &err), 0);
  c.topk = 5;
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "moe_router_topk: must be between 1 and num_experts (4), got 5"));
  c = moe_cfg();
  c.moe_freq = 0;
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "moe_layer_freq"));
  c = moe_cfg();
  c.moe_ffn = 0;
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "moe_ffn_hidden_size"));
  c = moe_cfg();
  c.aux_coeff = -1;
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "moe_aux_loss_coeff"));
  /* Tensor parallel: the shared expert splits as the dense MLP; the
   * experts split (expert_tensor_parallel_size null or T) or stay whole (1). */
  c = moe_cfg();
  c.vocab = 24;
  assert_int_equal(prm_llama_tp_check_config(&c, 2, &err), 0);
  c.shared_ffn = 7;
  assert_int_equal(prm_llama_tp_check_config(&c, 2, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "moe_shared_expert_intermediate_size (7)"));
  c = moe_cfg();
  assert_int_equal(prm_llama_etp_check_config(&c, 2, 0, &err), 0);
  assert_int_equal(prm_llama_etp_check_config(&c, 2, 1, &err), 0);
  assert_int_equal(prm_llama_etp_check_config(&c, 2, 3, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "expert_tensor_parallel_size 3: expected 1"));
  assert_int_equal(prm_llama_etp_check_config(&c, 1, 2, &err), PRM_ECONFIG);
  assert_int_equal(prm_llama_etp_check_config(&c, 2, 2, &err), 0);
  c.moe_ffn = 13;
  assert_int_equal(prm_llama_etp_check_config(&c, 2, 0, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "must divide moe_ffn_hidden_size (13)"));
  assert_int_equal(prm_llama_etp_check_config(&c, 2, 1, &err), 0); /* whole: any width */
}

/* bf16 mixed precision: the router's, experts' and shared expert's GEMMs
 * on bf16 operands give a loss and gradients close to fp32's (bf16 keeps 8
 * bits: a few parts in 1000), and really differ from them. */
static void test_bf16_close(void **state) {
  (void)state;
  prm_llama_config_t c = moe_cfg();
  int64_t B = 2, T = 9;
  prm_llama_t *a = build(c, B, T, PRM_LLAMA_TRAIN);
  prm_llama_t *b = build(c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_BF16);
  int32_t tok[18], tgt[18];
  random_tokens(tok, B * T, c.vocab, 7);
  random_tokens(tgt, B * T, c.vocab, 8);
  int64_t ca, cb;
  double la = prm_llama_forward_backward(a, tok, tgt, B, 0.1f, &ca);
  double lb = prm_llama_forward_backward(b, tok, tgt, B, 0.1f, &cb);
  assert_true(la > 0 && fabs(la - lb) < 0.01 * la);
  assert_true(la != lb);
  double aa = prm_llama_moe_aux_loss(a), ab = prm_llama_moe_aux_loss(b);
  assert_true(aa > 0 && fabs(aa - ab) < 0.05 * aa);
  double d2 = 0, n2 = 0;
  for (int64_t i = 0; i < a->nparams; i++) {
    double d = (double)a->grads[i] - b->grads[i];
    d2 += d * d;
    n2 += (double)a->grads[i] * a->grads[i];
  }
  assert_true(n2 > 0 && d2 > 0);
  if (!(sqrt(d2 / n2) < 0.05)) fail_msg("bf16 gradients off by %g of their norm", sqrt(d2 / n2));
  prm_llama_free(a);
  prm_llama_free(b);
}

static void test_layout(void **state) {
  (void)state;
  prm_llama_config_t c = moe_cfg();
  prm_llama_t *m = build(c, 1, 4, PRM_LLAMA_TRAIN);
  int64_t sum = 0;
  for (int i = 0; i < m->ntensors; i++) {
    assert_int_equal(m->tensors[i].offset, sum);
    sum += m->tensors[i].numel;
  }
  assert_int_equal(sum, m->nparams);
  assert_int_equal(m->nparams, prm_llama_param_count(&c));
  int64_t attn = 32 + 256 + 2 * 128 + 256;
  int64_t moe = 4 * 16 + 4 * 3 * 12 * 16 + 3 * 8 * 16, dense = 3 * 24 * 16;
  assert_int_equal(m->nparams, 2 * 23 * 16 + 2 * attn + moe + dense + 16);
  /* embed, layer 0: 6 + router + 12 experts + 3 shared, layer 1: 9, norm, head */
  assert_int_equal(m->ntensors, 1 + 22 + 9 + 2);
  assert_string_equal(m->tensors[7].name, "model.layers.0.block_sparse_moe.gate.weight");
  assert_int_equal(m->tensors[7].shape[0], 4);
  assert_string_equal(m->tensors[8].name, "model.layers.0.block_sparse_moe.experts.0.w1.weight");
  assert_string_equal(m->tensors[9].name, "model.layers.0.block_sparse_moe.experts.0.w2.weight");
  assert_int_equal(m->tensors[9].shape[0], 16);
  assert_int_equal(m->tensors[9].shape[1], 12);
  assert_string_equal(m->tensors[19].name, "model.layers.0.block_sparse_moe.experts.3.w3.weight");
  assert_string_equal(m->tensors[20].name,
                      "model.layers.0.block_sparse_moe.shared_expert.gate_proj.weight");
  assert_non_null(prm_llama_find(m, "model.layers.1.mlp.gate_proj.weight"));
  assert_null(prm_llama_find(m, "model.layers.0.mlp.gate_proj.weight"));
  assert_true(m->layer[0].router == m->params + m->tensors[7].offset);
  assert_true(m->layer[0].experts == m->params + m->tensors[8].offset);
  assert_null(m->layer[0].wgate);
  assert_null(m->layer[1].router);
  assert_int_equal(m->layer_t0[1], 23);
  assert_int_equal(m->layer_t0[2], 32);
  prm_llama_free(m);
}

/* The training objective per token: cross-entropy / count + aux + z, the
 * router's losses taken over the n tokens that count (target >= 0) and
 * entering with weight grad_scale x n = n / count (see pass.c). */
static double objective(prm_llama_t *m, const int32_t *tok, const int32_t *tgt, int64_t B,
                        int64_t count) {
  int64_t n = 0;
  double s = prm_llama_forward(m, tok, tgt, B, &n);
  return s / (double)count + (double)n / (double)count * prm_llama_moe_aux_loss(m);
}

/* The top-k choices of every MoE layer's set (training model: one set per
 * layer). */
static void selections(const prm_llama_t *m, int64_t N, int32_t *out) {
  int64_t k = m->cfg.topk, off = 0;
  for (int64_t l = 0; l < m->cfg.layers; l++)
    if (prm_llama_is_moe(&m->cfg, l)) {
      memcpy(out + off, m->acts->set[m->acts->nsets == 1 ? 0 : l].sel,
             (size_t)(N * k) * sizeof(int32_t));
      off += N * k;
    }
}

/* Central differences (Richardson-extrapolated) of the whole objective
 * along each tensor's gradient direction, every perturbed forward checked
 * to route every token to the same experts (top-k is piecewise constant:
 * the derivative is only defined where the choice is stable). */
static void check_moe_grad(prm_llama_config_t c) {
  int64_t B = 2, T = 7, N = B * T;
  prm_llama_t *m = build(c, B, T, PRM_LLAMA_TRAIN);
  /* Routers three times the init: wider gaps between the experts' logits. */
  for (int64_t l = 0; l < c.layers; l++)
    if (m->layer[l].router)
      for (int64_t j = 0; j < c.experts * c.hidden; j++) m->layer[l].router[j] *= 3.0f;
  int32_t tok[14], tgt[14];
  random_tokens(tok, N, c.vocab, 1);
  random_tokens(tgt, N, c.vocab, 2);
  tgt[3] = -1;
  int64_t count = 0;
  prm_llama_zero_grad(m);
  prm_llama_forward_backward(m, tok, tgt, B, 1.0f / 13.0f, &count);
  assert_int_equal(count, 13);
  int64_t nsel = N * c.topk * c.layers;
  int32_t *sel0 = calloc((size_t)nsel, sizeof *sel0), *sel = calloc((size_t)nsel, sizeof *sel);
  objective(m, tok, tgt, B, count);
  selections(m, N, sel0);
  float *p0 = malloc((size_t)m->nparams * sizeof(float));
  memcpy(p0, m->params, (size_t)m->nparams * sizeof(float));
  double worst = 0;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    const float *g = m->grads + t->offset;
    double gn = sqrt(prm_sumsq(g, t->numel));
    if (!(gn > 0)) fail_msg("%s: zero gradient", t->name);
    /* A step of 1e-2 along the unit direction, or 2e-3, then 5e-4, where
     * that flips a choice. */
    double fdh[2], eps = 1e-2;
    int flipped;
    do {
      flipped = 0;
      for (int k = 0; k < 2 && !flipped; k++) {
        double h = k ? eps / 2 : eps, l[2];
        for (int side = 0; side < 2; side++) {
          double step = side ? -h : h;
          for (int64_t j = 0; j < t->numel; j++)
            m->params[t->offset + j] = p0[t->offset + j] + (float)(step * g[j] / gn);
          l[side] = objective(m, tok, tgt, B, count);
          selections(m, N, sel);
          flipped |= memcmp(sel, sel0, (size_t)nsel * sizeof *sel) != 0;
        }
        fdh[k] = (l[0] - l[1]) / (2 * h);
      }
      if (flipped && eps < 1e-3)
        fail_msg("%s: the top-k choice changed under a step of %g", t->name, eps);
      if (flipped) eps = eps > 5e-3 ? 2e-3 : 5e-4;
    } while (flipped);
    memcpy(m->params + t->offset, p0 + t->offset, (size_t)t->numel * sizeof(float));
    double fd = (4 * fdh[1] - fdh[0]) / 3, rel = fabs(fd - gn) / gn;
    worst = rel > worst ? rel : worst;
    if (rel > 2e-3)
      fail_msg("%s: directional derivative %.6g, gradient norm %.6g (rel %.2e)", t->name, fd, gn,
               rel);
  }
  printf("    finite differences over %d tensors: worst rel. error %.2e\n", m->ntensors, worst);
  free(p0);
  free(sel0);
  free(sel);
  prm_llama_free(m);
}

static void test_grad_fd_shared_aux(void **state) {
  (void)state;
  check_moe_grad(moe_cfg());
}

/* Every layer MoE, tied head, no shared expert, capacity 0.75: some
 * assignments are dropped, and the gradient is still the derivative. */
static void test_grad_fd_capacity(void **state) {
  (void)state;
  prm_llama_config_t c = moe_cfg();
  c.moe_freq = 1;
  c.tied = 1;
  c.shared_ffn = 0;
  c.capacity = 0.75;
  c.z_coeff = 0.05;
  prm_llama_t *m = build(c, 2, 7, PRM_LLAMA_TRAIN);
  int32_t tok[14], tgt[14];
  random_tokens(tok, 14, c.vocab, 1);
  random_tokens(tgt, 14, c.vocab, 2);
  int64_t count;
  prm_llama_forward_backward(m, tok, tgt, 2, 0.1f, &count);
  prm_llama_moe_stats_t st;
  assert_int_equal(prm_llama_moe_stats(m, &st), 0);
  assert_int_equal(st.nlayers, 2);
  int64_t dropped = st.dropped[0] + st.dropped[1];
  assert_true(dropped > 0); /* capacity ceil(0.75 x 28 / 4) = 6 of 28 assignments */
  for (int i = 0; i < 2; i++) {
    int64_t sum = 0, over = 0;
    for (int e = 0; e < 4; e++) {
      sum += st.counts[i][e];
      over += st.counts[i][e] > 6 ? st.counts[i][e] - 6 : 0;
    }
    assert_int_equal(sum, 28);
    assert_int_equal(over, st.dropped[i]);
  }
  prm_llama_free(m);
  check_moe_grad(c);
}

/* Full recomputation gives the same loss and gradients; passes are
 * deterministic. */
static void test_recompute_identical(void **state) {
  (void)state;
  prm_llama_config_t c = moe_cfg();
  c.layers = 3;
  int64_t B = 2, T = 9;
  prm_llama_t *a = build(c, B, T, PRM_LLAMA_TRAIN);
  prm_llama_t *b = build(c, B, T, PRM_LLAMA_TRAIN | PRM_LLAMA_RECOMPUTE);
  int32_t tok[18], tgt[18];
  random_tokens(tok, B * T, c.vocab, 5);
  random_tokens(tgt, B * T, c.vocab, 6);
  int64_t ca, cb;
  double la = prm_llama_forward_backward(a, tok, tgt, B, 0.1f, &ca);
  double lb = prm_llama_forward_backward(b, tok, tgt, B, 0.1f, &cb);
  assert_true(la == lb);
  assert_true(prm_llama_moe_aux_loss(a) == prm_llama_moe_aux_loss(b));
  assert_true(prm_llama_moe_aux_loss(a) > 0);
  assert_memory_equal(a->grads, b->grads, (size_t)a->nparams * sizeof(float));
  /* The statistics: one pass, N k assignments per MoE layer (0 and 2). */
  prm_llama_moe_stats_t sa, sb;
  assert_int_equal(prm_llama_moe_stats(a, &sa), 0);
  assert_int_equal(prm_llama_moe_stats(b, &sb), 0);
  assert_int_equal(sa.nlayers, 2);
  assert_int_equal(sa.layer[1], 2);
  assert_int_equal(sa.passes, 1);
  assert_memory_equal(sa.counts, sb.counts, sizeof sa.counts);
  for (int i = 0; i < 2; i++) {
    int64_t sum = 0;
    for (int e = 0; e < 4; e++) sum += sa.counts[i][e];
    assert_int_equal(sum, B * T * 2);
    assert_true(sa.imbalance[i] >= 1.0);
    assert_int_equal(sa.dropped[i], 0);
  }
  assert_true(fabs(sa.aux_loss + sa.z_loss - prm_llama_moe_aux_loss(a)) < 1e-12);
  /* Read resets. */
  assert_int_equal(prm_llama_moe_stats(a, &sa), 0);
  assert_int_equal(sa.passes, 0);
  assert_int_equal(sa.counts[0][0] + sa.counts[0][1], 0);
  prm_sb_t js = {0}, ln = {0};
  prm_llama_moe_format(&sb, &js, &ln);
  assert_non_null(strstr(prm_sb_str(&js), "\"layers\":[{\"layer\":0,\"counts\":["));
  assert_non_null(strstr(prm_sb_str(&ln), "layer 2: tokens"));
  prm_sb_free(&js);
  prm_sb_free(&ln);
  /* Eval passes do not count. */
  int64_t n;
  prm_llama_forward(a, tok, tgt, B, &n);
  assert_int_equal(prm_llama_moe_stats(a, &sa), 0);
  assert_int_equal(sa.passes, 0);
  prm_llama_free(a);
  prm_llama_free(b);
}

/* Checkpoint round trip: the Mixtral folder (config.json + safetensors)
 * written, read back into a model built from its config.json, the same
 * weights bit for bit and the same loss. */
static void test_ckpt_round_trip(void **state) {
  (void)state;
  prm_llama_config_t c = moe_cfg();
  prm_llama_t *a = build(c, 2, 7, 0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/moe-ckpt", prm_test_tmpdir());
  prm_err_t err = {0};
  assert_int_equal(prm_fs_mkdir_p(dir, 0755, &err), 0);
  int rc = prm__ckpt_write_model(a, dir, "NullTokenizer", NULL, NULL, &err);
  if (rc) fail_msg("write: %s", err.msg);
  char path[600];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(prm_fs_read_all(path, &text, &len, &err), 0);
  assert_non_null(strstr(text, "\"MixtralForCausalLM\""));
  assert_non_null(strstr(text, "\"mixtral\""));
  assert_non_null(strstr(text, "\"num_local_experts\""));
  assert_non_null(strstr(text, "\"primus_dense_intermediate_size\""));
  free(text);
  prm_llama_config_t r;
  assert_int_equal(prm_ckpt_read_config(dir, &r, NULL, 0, &err), 0);
  assert_int_equal(r.experts, 4);
  assert_int_equal(r.topk, 2);
  assert_int_equal(r.moe_ffn, 12);
  assert_int_equal(r.ffn, 24);
  assert_int_equal(r.moe_freq, 2);
  assert_int_equal(r.shared_ffn, 8);
  r.max_pos = c.max_pos;
  r.init_std = c.init_std;
  r.aux_coeff = c.aux_coeff;
  r.z_coeff = c.z_coeff;
  prm_llama_t *b = build(r, 2, 7, 0);
  memset(b->params, 0, (size_t)b->nparams * sizeof(float));
  rc = prm_ckpt_load_hf(b, dir, &err);
  if (rc) fail_msg("load: %s", err.msg);
  assert_int_equal(a->nparams, b->nparams);
  assert_memory_equal(a->params, b->params, (size_t)a->nparams * sizeof(float));
  int32_t tok[14], tgt[14];
  random_tokens(tok, 14, c.vocab, 9);
  random_tokens(tgt, 14, c.vocab, 10);
  int64_t na, nb;
  double la = prm_llama_forward(a, tok, tgt, 2, &na), lb = prm_llama_forward(b, tok, tgt, 2, &nb);
  assert_true(la == lb);
  assert_true(prm_llama_moe_aux_loss(a) == prm_llama_moe_aux_loss(b));
  /* A dense experiment refuses the MoE folder, naming the key. */
  prm_llama_config_t d = moe_cfg();
  d.experts = 0;
  prm_llama_t *m = build(d, 1, 4, 0);
  assert_int_equal(prm_ckpt_load_hf(m, dir, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "num_local_experts (num_experts)"));
  prm_llama_free(m);
  prm_llama_free(a);
  prm_llama_free(b);
}

/* moe_layer_freq as a list (Megatron's [1, 0, 1, 0]): the configuration
 * rules, the layout ([0, 1]: layer 1 MoE, which no int can say; [1, 0]:
 * the same model as the int 2), and config.json's primus_moe_layers round
 * trip, refused by an experiment whose layers differ. */
static void test_layer_list(void **state) {
  (void)state;
  prm_err_t err = {0};
  prm_llama_config_t c = moe_cfg();
  int three[3] = {1, 0, 1}, none[2] = {0, 0}, odd[2] = {0, 1}, even[2] = {1, 0};
  prm_llama_set_moe_list(&c, three, 3);
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "moe_layer_freq: the list has 3 entries but num_layers is 2"));
  prm_llama_set_moe_list(&c, none, 2);
  assert_int_equal(prm_llama_config_check(&c, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "moe_layer_freq: the list marks no layer as MoE"));
  prm_llama_set_moe_list(&c, odd, 2);
  assert_int_equal(prm_llama_config_check(&c, &err), 0);
  assert_false(prm_llama_is_moe(&c, 0));
  assert_true(prm_llama_is_moe(&c, 1));
  assert_false(prm_llama_is_moe(&c, 2));
  prm_llama_t *a = build(c, 2, 7, 0);
  assert_null(prm_llama_find(a, "model.layers.0.block_sparse_moe.gate.weight"));
  assert_non_null(prm_llama_find(a, "model.layers.0.mlp.gate_proj.weight"));
  assert_non_null(prm_llama_find(a, "model.layers.1.block_sparse_moe.experts.3.w2.weight"));
  assert_null(a->layer[0].router);
  assert_non_null(a->layer[1].router);
  /* [1, 0] is the int 2: the same layout and parameters. */
  prm_llama_config_t e = moe_cfg();
  prm_llama_set_moe_list(&e, even, 2);
  prm_llama_t *x = build(e, 1, 4, 0), *y = build(moe_cfg(), 1, 4, 0);
  assert_int_equal(x->nparams, y->nparams);
  assert_memory_equal(x->params, y->params, (size_t)x->nparams * sizeof(float));
  prm_llama_free(x);
  prm_llama_free(y);
  /* config.json carries the list and reads back into it. */
  char dir[512];
  snprintf(dir, sizeof dir, "%s/moe-list", prm_test_tmpdir());
  assert_int_equal(prm_fs_mkdir_p(dir, 0755, &err), 0);
  int rc = prm__ckpt_write_model(a, dir, "NullTokenizer", NULL, NULL, &err);
  if (rc) fail_msg("write: %s", err.msg);
  char path[600], *text = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/config.json", dir);
  assert_int_equal(prm_fs_read_all(path, &text, &len, &err), 0);
  assert_non_null(strstr(text, "\"primus_moe_layers\""));
  assert_null(strstr(text, "\"primus_moe_layer_freq\""));
  free(text);
  prm_llama_config_t r;
  assert_int_equal(prm_ckpt_read_config(dir, &r, NULL, 0, &err), 0);
  assert_int_equal(r.moe_list_n, 2);
  assert_false(prm_llama_is_moe(&r, 0));
  assert_true(prm_llama_is_moe(&r, 1));
  r.max_pos = c.max_pos;
  prm_llama_t *b = build(r, 2, 7, 0);
  memset(b->params, 0, (size_t)b->nparams * sizeof(float));
  if ((rc = prm_ckpt_load_hf(b, dir, &err))) fail_msg("load: %s", err.msg);
  assert_memory_equal(a->params, b->params, (size_t)a->nparams * sizeof(float));
  /* An experiment with the MoE layer elsewhere ([1, 0]) is refused. */
  prm_llama_t *w = build(e, 1, 4, 0);
  assert_int_equal(prm_ckpt_load_hf(w, dir, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "layer 0 is dense but the experiment's moe_layer_freq makes it MoE"));
  prm_llama_free(w);
  prm_llama_free(a);
  prm_llama_free(b);
}

static double logprob(const float *logits, int64_t V, int32_t t) {
  double mx = logits[0], s = 0;
  for (int64_t i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
  for (int64_t i = 0; i < V; i++) s += exp(logits[i] - mx);
  return logits[t] - mx - log(s);
}

/* KV-cache inference of a MoE model: the prompt at once then one token at
 * a time gives, at every position, the logits of the whole prefix in one
 * call (1e-5), and their cross-entropy is the training forward's loss over
 * the same sequence (full recomputation, 1e-5 relative). */
static void kv_case(prm_llama_config_t c) {
  int64_t T = 11, V = c.vocab;
  prm_llama_t *m = build(c, 1, T, 0);
  for (int64_t l = 0; l < c.layers; l++) /* routers 3x the init: decided choices */
    if (m->layer[l].router)
      for (int64_t j = 0; j < c.experts * c.hidden; j++) m->layer[l].router[j] *= 3.0f;
  int32_t seq[12];
  random_tokens(seq, T + 1, V, 9);
  int64_t n;
  double want = prm_llama_forward(m, seq, seq + 1, 1, &n);
  assert_int_equal(n, T);
  prm_err_t err = {0};
  prm_llama_kv_t *kv = NULL;
  float *logits = malloc((size_t)V * sizeof(float)), *whole = malloc((size_t)V * sizeof(float));
  assert_int_equal(prm_llama_kv_new(m, &kv, &err), 0);
  double got = 0, worst = 0;
  for (int64_t i = 0; i < T; i++) {
    if (i < 4 && i != 3) continue;
    if (i == 3) assert_int_equal(prm_llama_kv_step(m, kv, seq, 4, logits, &err), 0);
    else assert_int_equal(prm_llama_kv_step(m, kv, &seq[i], 1, logits, &err), 0);
    prm_llama_kv_t *kv1 = NULL;
    assert_int_equal(prm_llama_kv_new(m, &kv1, &err), 0);
    assert_int_equal(prm_llama_kv_step(m, kv1, seq, i + 1, whole, &err), 0);
    prm_llama_kv_free(kv1);
    for (int64_t v = 0; v < V; v++) {
      double d = fabs((double)logits[v] - whole[v]);
      worst = d > worst ? d : worst;
    }
  }
  assert_true(worst < 1e-5);
  /* The loss over every position, each from a fresh prefix. */
  for (int64_t i = 0; i < T; i++) {
    prm_llama_kv_t *kv1 = NULL;
    assert_int_equal(prm_llama_kv_new(m, &kv1, &err), 0);
    assert_int_equal(prm_llama_kv_step(m, kv1, seq, i + 1, whole, &err), 0);
    got -= logprob(whole, V, seq[i + 1]);
    prm_llama_kv_free(kv1);
  }
  printf("    KV cache: incremental vs whole logits %.2e; loss %.9g vs forward %.9g\n", worst, got,
         want);
  assert_true(fabs(got - want) < 1e-5 * fabs(want));
  assert_int_equal(prm_llama_kv_len(kv), T);
  /* Inference records no routing statistics. */
  prm_llama_moe_stats_t st;
  assert_int_equal(prm_llama_moe_stats(m, &st), 0);
  assert_int_equal(st.passes, 0);
  assert_int_equal(st.counts[0][0] + st.counts[0][1] + st.counts[0][2] + st.counts[0][3], 0);
  prm_llama_kv_free(kv);
  free(logits);
  free(whole);
  prm_llama_free(m);
}

static void test_kv_cache(void **state) {
  (void)state;
  kv_case(moe_cfg()); /* a MoE layer with a shared expert, then a dense one */
  prm_llama_config_t c = moe_cfg();
  c.moe_freq = 1; /* every layer MoE, tied head, no shared expert, top 1 */
  c.tied = 1;
  c.shared_ffn = 0;
  c.topk = 1;
  kv_case(c);
}

/* Fine-tuning's loss masks: the router's aux and z losses are taken over
 * the tokens whose target counts. A batch of two sequences, the second
 * wholly masked (prompt or padding), gives the first sequence's loss,
 * aux + z and every gradient alone, as a batch of one; unmasked, the
 * second sequence changes the router's losses. */
static void test_router_loss_mask(void **state) {
  (void)state;
  prm_llama_config_t c = moe_cfg();
  c.moe_freq = 1;
  int64_t T = 7;
  prm_llama_t *a = build(c, 2, T, PRM_LLAMA_TRAIN), *b = build(c, 1, T, PRM_LLAMA_TRAIN);
  assert_memory_equal(a->params, b->params, (size_t)a->nparams * sizeof(float));
  int32_t tok[14], tgt[14];
  random_tokens(tok, 14, c.vocab, 11);
  random_tokens(tgt, 14, c.vocab, 12);
  int64_t ca, cb;
  prm_llama_forward_backward(a, tok, tgt, 2, 1.0f / 14.0f, &ca);
  double aux_all = prm_llama_moe_aux_loss(a);
  for (int i = 7; i < 14; i++) tgt[i] = -1;
  prm_llama_zero_grad(a);
  double la = prm_llama_forward_backward(a, tok, tgt, 2, 1.0f / 7.0f, &ca);
  double lb = prm_llama_forward_backward(b, tok, tgt, 1, 1.0f / 7.0f, &cb);
  assert_int_equal(ca, 7);
  assert_int_equal(cb, 7);
  double xa = prm_llama_moe_aux_loss(a), xb = prm_llama_moe_aux_loss(b);
  printf("    masked pass: loss %.9g vs %.9g, aux+z %.9g vs %.9g (unmasked %.9g)\n", la, lb, xa, xb,
         aux_all);
  assert_true(fabs(la - lb) <= 1e-6 * fabs(lb));
  assert_true(xb > 0 && fabs(xa - xb) <= 1e-6 * xb);
  assert_true(fabs(aux_all - xb) > 1e-4 * xb);
  double gmax = 0, dmax = 0;
  for (int64_t i = 0; i < a->nparams; i++) {
    double d = fabs((double)a->grads[i] - b->grads[i]);
    dmax = d > dmax ? d : dmax;
    gmax = fabs(b->grads[i]) > gmax ? fabs(b->grads[i]) : gmax;
  }
  printf("    gradients: worst difference %.2e of a largest %.2e\n", dmax, gmax);
  assert_true(gmax > 0 && dmax <= 1e-5 * gmax);
  /* Every target masked: no router loss, no gradient from it. */
  for (int i = 0; i < 14; i++) tgt[i] = -1;
  prm_llama_zero_grad(a);
  prm_llama_forward_backward(a, tok, tgt, 2, 1.0f, &ca);
  assert_int_equal(ca, 0);
  assert_true(prm_llama_moe_aux_loss(a) == 0.0);
  assert_true(prm_sumsq(a->grads, a->nparams) == 0.0);
  prm_llama_free(a);
  prm_llama_free(b);
}

/* A dense model has no MoE statistics. */
static void test_dense_no_stats(void **state) {
  (void)state;
  prm_llama_config_t c = moe_cfg();
  c.experts = 0;
  prm_llama_t *m = build(c, 1, 4, 0);
  prm_llama_moe_stats_t st;
  assert_int_equal(prm_llama_moe_stats(m, &st), PRM_EINVAL);
  assert_int_equal(m->ntensors, 1 + 2 * 9 + 2);
  prm_llama_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_check),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_bf16_close),
      cmocka_unit_test(test_grad_fd_shared_aux),
      cmocka_unit_test(test_grad_fd_capacity),
      cmocka_unit_test(test_recompute_identical),
      cmocka_unit_test(test_ckpt_round_trip),
      cmocka_unit_test(test_layer_list),
      cmocka_unit_test(test_dense_no_stats),
      cmocka_unit_test(test_kv_cache),
      cmocka_unit_test(test_router_loss_mask),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
