/* pass.c - the training and evaluation passes of the Llama model: forward
 * through the layers, the LM head fused with its loss (and, in training,
 * with the head's backward), then backward through the layers in reverse,
 * recomputing a layer's activations first under full recomputation.
 *
 * Under tensor parallelism (tp.c) each rank runs the same code on its
 * slices (Hl heads, Gl groups, Fl ffn columns); the outputs of the
 * row-parallel o_proj and down_proj are summed over the group in forward,
 * and so are the input gradients of the column-parallel q/k/v and gate/up
 * in backward (Megatron's g and f operators).
 *
 * Under sequence parallelism (sp.c) the norms and residual adds run on
 * this rank's Nr = N / T rows: the norms' outputs are gathered before the
 * column-parallel layers, and the row-parallel layers' partial outputs
 * reduce-scattered instead of summed (and the reverse in backward). */
#include "model-impl.h"

#include <string.h>

/* ------------------------------------------------------------------------ */
/* Attention variants                                                         */
/* ------------------------------------------------------------------------ */

/* y (N,n) += 1 b^T: a bias on every row, as a rank-1 product with the
 * model's ones column. */
static void prm__bias_fwd(const prm_llama_t *m, float *y, const float *b, int64_t N, int64_t n) {
  PRM_ASSERT(N <= m->nones);
  prm_dev_sgemm(m->dev, 0, 0, N, n, 1, 1.0f, m->ones, 1, b, n, 1.0f, y, n);
}

/* db (n) += dy^T 1 (dy (N,n)): the bias' gradient, the column sums. */
static void prm__bias_bwd(const prm_llama_t *m, float *db, const float *dy, int64_t N, int64_t n) {
  PRM_ASSERT(N <= m->nones);
  prm_dev_sgemm(m->dev, 1, 0, n, 1, N, 1.0f, dy, n, m->ones, 1, 1.0f, db, 1);
}

/* ------------------------------------------------------------------------ */
/* One layer forward                                                          */
/* ------------------------------------------------------------------------ */

/* out = rmsnorm(a (+ b, into sum when b)) over this rank's rows, and the
 * input of the column-parallel GEMMs that follow: *xf the fp32 rows (out,
 * or every rank's rows gathered under sequence parallelism), the return
 * their bf16 copy in operand slot 0 (NULL in fp32). Without sequence
 * parallelism one fused pass (prm__norm16). */
static const prm_bf16_t *prm__norm_in(prm_llama_t *m, const float **xf, float *sum, float *out,
                                      float *rstd, const float *a, const float *b,
                                      const float *w, int64_t N) {
  int64_t C = m->cfg.hidden, Nr = prm__sp_rows(m, N);
  float eps = (float)m->cfg.norm_eps;
  if (!m->tp.sp) {
    *xf = out;
    return prm__norm16(m, sum, out, rstd, a, b, w, N, C, eps);
  }
  if (b) prm_dev_add_rmsnorm_forward(m->dev, sum, out, rstd, a, b, w, Nr, C, eps);
  else prm_dev_rmsnorm_forward(m->dev, out, rstd, a, w, Nr, C, eps);
  *xf = prm__sp_gather(m, m->acts->spg, out, N);
  return prm__to16(m, 0, *xf, N * C);
}

/* x (N,C) -> y (N,C); every intermediate goes to `a`. */
static void prm__layer_forward(prm_llama_t *m, const prm_llama_layer_t *w,
                               prm__layer_acts_t *a, const float *x, float *y, int64_t B) {
  const prm_llama_config_t *c = &m->cfg;
  int64_t T = m->T, N = B * T, C = c->hidden, D = prm_llama_head_dim(c), F = m->Fl;
  int64_t H = m->Hl, G = m->Gl, HD = H * D, GD = G * D;
  const prm_bf16_t *x16; /* the bf16 copy of a layer input; NULL in fp32 (lin.c) */
  prm_llama_acts_t *s = m->acts;
  int64_t Nr = prm__sp_rows(m, N); /* x, y and the norms' rows (sequence parallel: N / T) */

  const prm_dev_t *d = m->dev;
  const float *xa; /* the GEMMs' input: ln1, gathered under sequence parallelism */
  x16 = prm__norm_in(m, &xa, NULL, a->ln1, a->rstd1, x, NULL, w->ln1, N);
  /* With q/k norms the projections land in qraw/kraw, normalised into q/k. */
  float *q = w->qn ? a->qraw : a->q, *k = w->qn ? a->kraw : a->k;
  prm__lin_fwd(m, q, xa, x16, w->wq, N, C, HD);
  prm__lin_fwd(m, k, xa, x16, w->wk, N, C, GD);
  prm__lin_fwd(m, a->v, xa, x16, w->wv, N, C, GD);
  if (w->bq) {
    prm__bias_fwd(m, q, w->bq, N, HD);
    prm__bias_fwd(m, k, w->bk, N, GD);
    prm__bias_fwd(m, a->v, w->bv, N, GD);
  }
  if (w->qn) { /* RMSNorm over each head's D values: N H rows, N G rows */
    prm_dev_rmsnorm_forward(d, a->q, a->qrstd, q, w->qn, N * H, D, (float)c->norm_eps);
    prm_dev_rmsnorm_forward(d, a->k, a->krstd, k, w->kn, N * G, D, (float)c->norm_eps);
  }
  prm_dev_rope(d, a->q, m->rope_cos, m->rope_sin, B, T, H, D, 0, m->pass_pos, 1.0f);
  prm_dev_rope(d, a->k, m->rope_cos, m->rope_sin, B, T, G, D, 0, m->pass_pos, 1.0f);
  prm__attn_fwd(m, a, B);
  float *o = m->tp.sp ? s->spp : a->mid; /* the row-parallel output's partial sums */
  prm__lin_fwd(m, o, a->att, prm__to16(m, 0, a->att, N * HD), w->wo, N, HD, C);
  prm__sp_reduce(m, o, a->mid, N);
  /* mid = x + attention; ln2 = rmsnorm(mid), in one pass (with ln2's bf16
   * copy for the dense MLP's GEMMs). */
  o = m->tp.sp ? s->spp : y;
  if (w->router) { /* a mixture-of-experts MLP (moe.c; host memory only) */
    prm_dev_add_rmsnorm_forward(d, a->mid, a->ln2, a->rstd2, a->mid, x, w->ln2, Nr, C,
                                (float)c->norm_eps);
    /* Its output is summed over the group inside (the same on every
     * rank); sequence parallel keeps this rank's rows of it. */
    prm__moe_forward(m, w - m->layer, w, a, prm__sp_gather(m, s->spg, a->ln2, N), o, N);
    prm__sp_slice(m, y, o, N);
    prm_add(y, y, a->mid, Nr * C);
    return;
  }
  const float *xm;
  x16 = prm__norm_in(m, &xm, a->mid, a->ln2, a->rstd2, a->mid, x, w->ln2, N);
  prm__lin_fwd(m, a->gate, xm, x16, w->wgate, N, C, F);
  prm__lin_fwd(m, a->up, xm, x16, w->wup, N, C, F);
  x16 = prm__swiglu16(m, a->h, a->gate, a->up, N * F);
  prm__lin_fwd(m, o, a->h, x16, w->wdown, N, F, C);
  prm__sp_reduce(m, o, y, N);
  prm_dev_add(d, y, y, a->mid, Nr * C);
}

/* ------------------------------------------------------------------------ */
/* One layer backward                                                         */
/* ------------------------------------------------------------------------ */

/* On entry acts->dres holds dL/dy; on return dL/dx. Weight gradients are
 * added to dw. */
static void prm__layer_backward(prm_llama_t *m, const prm_llama_layer_t *w,
                                const prm_llama_layer_t *dw, const prm__layer_acts_t *a,
                                const float *x, int64_t B) {
  const prm_llama_config_t *c = &m->cfg;
  prm_llama_acts_t *s = m->acts;
  int64_t T = m->T, N = B * T, C = c->hidden, D = prm_llama_head_dim(c), F = m->Fl;
  int64_t H = m->Hl, G = m->Gl, HD = H * D, GD = G * D;
  const prm_bf16_t *x16, *dy16; /* bf16 copies in slots 0 and 1; NULL in fp32 */
  const prm_dev_t *d = m->dev;
  /* Sequence parallel: dres, x and the norms hold Nr rows; the blocks'
   * inputs and output gradients are gathered again (sp.c), and a pass'
   * norm weight gradients go to dnw (ln2, ln1) and are summed at the end. */
  int64_t Nr = prm__sp_rows(m, N);
  float *dln2 = s->dnw ? s->dnw : dw->ln2, *dln1 = s->dnw ? s->dnw + C : dw->ln1;
  if (s->dnw) prm_dev_zero(d, s->dnw, (size_t)(2 * C) * sizeof(float), NULL);
  const float *dl; /* the norm's output gradient, Nr rows */

  /* MLP: y = mid + down(silu(gate) * up). dres flows to mid unchanged. */
  if (w->router) { /* a mixture-of-experts MLP (moe.c) */
    /* Its input gradient is summed over the group inside. */
    float *dy = prm__sp_gather(m, s->spp, s->dres, N);
    prm__moe_backward(m, w, dw, a, prm__sp_gather(m, s->spg, a->ln2, N), dy, s->dln, N);
    dl = prm__sp_slice(m, s->spp, s->dln, N);
  } else {
    const float *dy = prm__sp_gather(m, s->spg, s->dres, N);
    dy16 = prm__to16(m, 1, dy, N * C);
    x16 = prm__to16(m, 0, a->h, N * F);
    prm__lin_bwd(m, s->dh, dw->wdown, dy, dy16, a->h, x16, w->wdown, N, F, C, 0);
    prm_dev_swiglu_backward(d, s->dgate, s->dup, s->dh, a->gate, a->up, N * F);
    const float *xm = prm__sp_gather(m, s->spg, a->ln2, N); /* dy is done with */
    x16 = prm__to16(m, 0, xm, N * C);
    dy16 = prm__to16(m, 1, s->dgate, N * F);
    prm__lin_bwd(m, s->dln, dw->wgate, s->dgate, dy16, xm, x16, w->wgate, N, C, F, 0);
    dy16 = prm__to16(m, 1, s->dup, N * F);
    prm__lin_bwd(m, s->dln, dw->wup, s->dup, dy16, xm, x16, w->wup, N, C, F, 1);
    dl = prm__sp_reduce(m, s->dln, s->spp, N);
  }
  prm_dev_rmsnorm_backward(d, s->dres, dln2, dl, a->mid, w->ln2, a->rstd2, Nr, C);

  /* Attention: mid = x + o(att(rope(q), rope(k), v)). */
  const float *dy = prm__sp_gather(m, s->spg, s->dres, N);
  dy16 = prm__to16(m, 1, dy, N * C);
  x16 = prm__to16(m, 0, a->att, N * HD);
  prm__lin_bwd(m, s->datt, dw->wo, dy, dy16, a->att, x16, w->wo, N, HD, C, 0);
  prm__attn_bwd(m, a, B);
  prm_dev_rope(d, s->dq, m->rope_cos, m->rope_sin, B, T, H, D, 0, m->pass_pos, -1.0f);
  prm_dev_rope(d, s->dk, m->rope_cos, m->rope_sin, B, T, G, D, 0, m->pass_pos, -1.0f);
  float *dq = s->dq, *dk = s->dk;
  if (w->qn) { /* through the q/k norms (their backward adds to dx) */
    prm_dev_zero(d, s->dqn, (size_t)(N * HD) * sizeof(float), NULL);
    prm_dev_zero(d, s->dkn, (size_t)(N * GD) * sizeof(float), NULL);
    /* Under tensor parallelism each rank norms its own heads with the
     * whole (replicated) weights: their gradient is the sum over the group's
     * heads, so this pass' part is summed before it is added, and every rank
     * holds the same gradient, as for the other whole tensors. */
    float *gq = dw->qn, *gk = dw->kn;
    if (s->dqkw) {
      prm_dev_zero(d, s->dqkw, (size_t)(2 * D) * sizeof(float), NULL);
      gq = s->dqkw;
      gk = s->dqkw + D;
    }
    prm_dev_rmsnorm_backward(d, s->dqn, gq, s->dq, a->qraw, w->qn, a->qrstd, N * H, D);
    prm_dev_rmsnorm_backward(d, s->dkn, gk, s->dk, a->kraw, w->kn, a->krstd, N * G, D);
    if (s->dqkw) {
      prm__tp_sum(m, s->dqkw, 2 * D);
      prm_dev_add(d, dw->qn, dw->qn, s->dqkw, D);
      prm_dev_add(d, dw->kn, dw->kn, s->dqkw + D, D);
    }
    dq = s->dqn;
    dk = s->dkn;
  }
  if (w->bq) {
    prm__bias_bwd(m, dw->bq, dq, N, HD);
    prm__bias_bwd(m, dw->bk, dk, N, GD);
    prm__bias_bwd(m, dw->bv, s->dv, N, GD);
  }
  const float *xa = prm__sp_gather(m, s->spg, a->ln1, N); /* dy is done with */
  x16 = prm__to16(m, 0, xa, N * C);
  prm__lin_bwd(m, s->dln, dw->wq, dq, prm__to16(m, 1, dq, N * HD), xa, x16, w->wq, N, C, HD, 0);
  prm__lin_bwd(m, s->dln, dw->wk, dk, prm__to16(m, 1, dk, N * GD), xa, x16, w->wk, N, C, GD, 1);
  prm__lin_bwd(m, s->dln, dw->wv, s->dv, prm__to16(m, 1, s->dv, N * GD), xa, x16, w->wv, N, C,
               GD, 1);
  dl = prm__sp_reduce(m, s->dln, s->spp, N);
  prm_dev_rmsnorm_backward(d, s->dres, dln1, dl, x, w->ln1, a->rstd1, Nr, C);
  if (s->dnw) prm__sp_norm_grads(m, (float *const[]){dw->ln2, dw->ln1}, s->dnw, 2);
}

/* ------------------------------------------------------------------------ */
/* Whole model                                                                */
/* ------------------------------------------------------------------------ */

static prm__layer_acts_t *prm__set(const prm_llama_t *m, int64_t l) {
  prm_llama_acts_t *a = m->acts;
  return &a->set[a->nsets == 1 ? 0 : l];
}

/* The pass' ids as the device reads them: the caller's arrays on the host;
 * on a device with its own memory, copies in the model's batch buffers
 * (tokens, targets, and the packing's segments and positions, which the
 * layers find in m->pass_seg / m->pass_pos). A failed copy is kept for
 * prm_llama_tp_check. */
static void prm__pass_ids(prm_llama_t *m, const int32_t *tokens, const int32_t *targets,
                          int64_t B, const int32_t **dtok, const int32_t **dtgt) {
  *dtok = tokens;
  *dtgt = targets;
  m->pass_seg = m->pack_seg;
  /* Context parallel: the rank's rows sit at their chunks' positions. */
  m->pass_pos = m->pack_pos ? m->pack_pos : m->cp_pos;
  if (prm_dev_is_host(m->dev)) return;
  size_t bytes = (size_t)(B * m->T) * sizeof(int32_t);
  prm_err_t err = {0};
  int rc = 0;
  if (tokens && !rc) rc = prm_dev_upload(m->dev, m->dtok, tokens, bytes, &err);
  if (targets && !rc) rc = prm_dev_upload(m->dev, m->dtgt, targets, bytes, &err);
  if (m->pack_seg && !rc) rc = prm_dev_upload(m->dev, m->dseg, m->pack_seg, bytes, &err);
  if (m->pack_pos && !rc) rc = prm_dev_upload(m->dev, m->dpos, m->pack_pos, bytes, &err);
  if (rc && !m->tp_rc) {
    m->tp_rc = rc;
    m->tp_err = err;
  }
  *dtok = tokens ? m->dtok : NULL;
  *dtgt = targets ? m->dtgt : NULL;
  m->pass_seg = m->pack_seg ? m->dseg : NULL;
  m->pass_pos = m->pack_pos ? m->dpos : NULL;
}

/* The LM head and its loss over the final norm's output (N rows), with the
 * head's backward when dx/dw are given: the vocab-parallel or bf16 path on
 * the host (tp.c), the device's otherwise. tgt: the targets as the device
 * reads them; targets: the host's. */
static double prm__head(prm_llama_t *m, float *dx, float *dw, int64_t *count, const int32_t *tgt,
                        const int32_t *targets, int64_t N, float grad_scale) {
  const prm_llama_config_t *c = &m->cfg;
  prm_llama_acts_t *a = m->acts;
  if (!prm_dev_is_host(m->dev) && m->params16 && !m->head_fp32) /* bf16 operands, as the CPU's */
    return prm_dev_lmhead_xent16(m->dev, dx, dw, count, a->lnf, prm__w16(m, m->head), tgt, targets,
                                 N, c->hidden, c->vocab, grad_scale, a->logits, m->dloss, a->chunk,
                                 a->x16[0], a->x16[1]);
  if (!prm_dev_is_host(m->dev))
    return prm_dev_lmhead_xent(m->dev, dx, dw, count, a->lnf, m->head, tgt, targets, N, c->hidden,
                               c->vocab, grad_scale, a->logits, m->dloss, a->chunk);
  if (m->tp.size > 1 || m->params16) /* sequence parallel: every rank's rows, gathered */
    return prm__tp_lmhead_xent(m, dx, dw, count, prm__sp_gather(m, a->spg, a->lnf, N), m->head,
                               targets, N, grad_scale);
  return prm_lmhead_xent(&m->gemm, dx, dw, count, a->lnf, m->head, targets, N, c->hidden,
                         c->vocab, grad_scale, a->logits, a->chunk);
}

/* The residual stream's stride between layers: its rows at the built
 * batch size (sequence parallel: this rank's) times the hidden size. */
static int64_t prm__resid_stride(const prm_llama_t *m) {
  return prm__sp_rows(m, m->B * m->T) * m->cfg.hidden;
}

/* The final norm's backward from the head's input gradient a->dlnf (N
 * rows; sequence parallel: partial sums, reduce-scattered first) into
 * a->dres (zeroed first) and m->dnorm. */
static void prm__norm_backward(prm_llama_t *m, int64_t N) {
  prm_llama_acts_t *a = m->acts;
  int64_t C = m->cfg.hidden, Nr = prm__sp_rows(m, N);
  const float *x = a->resid + m->cfg.layers * prm__resid_stride(m);
  const float *dl = m->tp.sp ? prm__sp_reduce(m, a->dlnf, a->spp, N) : a->dlnf;
  prm_dev_zero(m->dev, a->dres, (size_t)(Nr * C) * sizeof(float), NULL);
  if (!a->dnw) {
    prm_dev_rmsnorm_backward(m->dev, a->dres, m->dnorm, dl, x, m->norm, a->rstdf, Nr, C);
    return;
  }
  prm_dev_zero(m->dev, a->dnw, (size_t)C * sizeof(float), NULL);
  prm_dev_rmsnorm_backward(m->dev, a->dres, a->dnw, dl, x, m->norm, a->rstdf, Nr, C);
  prm__sp_norm_grads(m, &m->dnorm, a->dnw, 1);
}

/* The embedding, forward into the residual stream's first rows, and its
 * backward from a->dres; dtok: the ids as the device reads them. */
static void prm__embed_forward(prm_llama_t *m, const int32_t *tokens, const int32_t *dtok,
                               int64_t N) {
  prm_llama_acts_t *a = m->acts;
  if (m->tp.size > 1) prm__tp_embedding_forward(m, a->resid, tokens, N);
  else prm_dev_embedding_forward(m->dev, a->resid, dtok, m->embed, N, m->cfg.hidden);
}

static void prm__embed_backward(prm_llama_t *m, const int32_t *tokens, const int32_t *dtok,
                                int64_t N) {
  prm_llama_acts_t *a = m->acts;
  if (m->tp.size > 1)
    prm__tp_embedding_backward(m, m->dembed, prm__sp_gather(m, a->spg, a->dres, N), tokens, N);
  else
    prm_dev_embedding_backward(m->dev, m->dembed, a->dres, dtok, N, m->cfg.hidden);
}

static void prm__forward_layers(prm_llama_t *m, const int32_t *tokens, int64_t B) {
  const prm_llama_config_t *c = &m->cfg;
  prm_llama_acts_t *a = m->acts;
  int64_t N = B * m->T, NC = prm__resid_stride(m);
  prm__embed_forward(m, tokens, tokens, N);
  m->moe_aux_last = 0;
  for (int64_t l = 0; l < c->layers; l++)
    prm__layer_forward(m, &m->layer[l], prm__set(m, l), a->resid + l * NC,
                       a->resid + (l + 1) * NC, B);
  prm_dev_rmsnorm_forward(m->dev, a->lnf, a->rstdf, a->resid + c->layers * NC, m->norm,
                          prm__sp_rows(m, N), c->hidden, (float)c->norm_eps);
}

double prm_llama_forward(prm_llama_t *m, const int32_t *tokens, const int32_t *targets,
                         int64_t B, int64_t *count) {
  PRM_ASSERT(B >= 1 && B <= m->B);
  const int32_t *dtok, *dtgt;
  prm__pass_ids(m, tokens, targets, B, &dtok, &dtgt);
  prm__refresh16(m);
  /* the router's losses over the tokens that count (every token under a
   * loss mask, prm_llama_set_router_weight) */
  m->moe_tgt = m->moe_router_w >= 0 ? NULL : targets;
  prm__forward_layers(m, dtok, B);
  m->moe_tgt = NULL;
  return prm__head(m, NULL, NULL, count, dtgt, targets, B * m->T, 0.0f);
}

double prm_llama_forward_backward(prm_llama_t *m, const int32_t *tokens, const int32_t *targets,
                                  int64_t B, float grad_scale, int64_t *count) {
  PRM_ASSERT(m->flags & PRM_LLAMA_TRAIN);
  PRM_ASSERT(B >= 1 && B <= m->B);
  const prm_llama_config_t *c = &m->cfg;
  prm_llama_acts_t *a = m->acts;
  int64_t N = B * m->T, NC = prm__resid_stride(m);
  const int32_t *dtok, *dtgt;
  prm__pass_ids(m, tokens, targets, B, &dtok, &dtgt);
  prm__refresh16(m);
  /* MoE: record this pass' routing; the aux/z losses are taken over the
   * tokens that count (target >= 0), n of them, and their gradient weighs
   * grad_scale n: each such token's share of the objective, as its
   * cross-entropy's (N in pre-training, where every token counts). Under
   * a loss mask (moe_router_w >= 0, Megatron-LM's eod_mask_loss) over
   * every token, weighted moe_router_w. */
  int64_t n = 0;
  for (int64_t i = 0; i < N && targets; i++) n += targets[i] >= 0;
  int every = m->moe_router_w >= 0;
  double nn[2] = {(double)n, (double)N};
  if (c->experts && m->tp.cp_size > 1 && !every)
    /* Context parallel: the router's losses are the micro-batch's (summed
     * over the group, moe.c), so their weight counts the group's tokens;
     * each rank's gradient is its rows' part of it. */
    prm__cp_sum(m, nn, 2);
  m->moe_record = 1;
  m->moe_tgt = every ? NULL : targets;
  m->moe_gscale = every ? (float)m->moe_router_w : grad_scale * (float)(targets ? nn[0] : nn[1]);
  prm__forward_layers(m, dtok, B);
  m->moe_record = 0;
  m->moe_passes++;
  double moe_aux = m->moe_aux_last; /* recomputation below adds to it again */

  /* The head and its loss, with the head's backward fused in. */
  double loss = prm__head(m, a->dlnf, m->dhead, count, dtgt, targets, N, grad_scale);
  prm__norm_backward(m, N);
  /* Layer l's tensors start at tensors[layer_t0[l]]; the final norm follows. */
  const prm_tensor_t *t = m->tensors;
  int64_t norm_off = t[m->layer_t0[c->layers]].offset, embed_n = t[0].numel;
  if (m->grads_ready) m->grads_ready(m->grads_ctx, norm_off, m->nparams - norm_off);

  for (int64_t l = c->layers - 1; l >= 0; l--) {
    prm__layer_acts_t *s = prm__set(m, l);
    const float *x = a->resid + l * NC;
    if (a->nsets == 1 && l != c->layers - 1) {
      /* Full recomputation: rebuild this layer's activations from its
       * saved input (the last layer's are still there from the forward;
       * the output goes to dln, which is free at this point). */
      prm__layer_forward(m, &m->layer[l], s, x, a->dln, B);
    }
    prm__layer_backward(m, &m->layer[l], &m->dlayer[l], s, x, B);
    if (m->grads_ready) {
      int64_t lo = t[m->layer_t0[l]].offset, hi = t[m->layer_t0[l + 1]].offset;
      m->grads_ready(m->grads_ctx, lo, hi - lo);
    }
  }
  prm__embed_backward(m, tokens, dtok, N);
  if (m->grads_ready) m->grads_ready(m->grads_ctx, 0, embed_n);
  m->moe_aux_last = moe_aux;
  m->moe_tgt = NULL;
  return loss;
}

/* ------------------------------------------------------------------------ */
/* Pipeline stages                                                            */
/* ------------------------------------------------------------------------ */

/* The same steps as the whole-model passes above, cut at layer boundaries:
 * a stage's layers see exactly the inputs and output gradients they would
 * see in one process, so a pipeline computes the same numbers. */

float *prm_llama_stage_x(prm_llama_t *m, int64_t l) {
  PRM_ASSERT(l >= 0 && l <= m->cfg.layers);
  return m->acts->resid + l * prm__resid_stride(m);
}

int64_t prm_llama_stage_rows(const prm_llama_t *m, int64_t B) { return prm__sp_rows(m, B * m->T); }

float *prm_llama_stage_dx(prm_llama_t *m) { return m->acts->dres; }

double prm_llama_stage_forward(prm_llama_t *m, int64_t lo, int64_t hi, const int32_t *tokens,
                               const int32_t *targets, int64_t B, int train, float grad_scale,
                               int64_t *count) {
  const prm_llama_config_t *c = &m->cfg;
  PRM_ASSERT(B >= 1 && B <= m->B && 0 <= lo && lo < hi && hi <= c->layers);
  PRM_ASSERT(!train || (m->flags & PRM_LLAMA_TRAIN));
  prm_llama_acts_t *a = m->acts;
  int64_t N = B * m->T, C = c->hidden, NC = prm__resid_stride(m);
  const int32_t *dtok, *dtgt;
  prm__pass_ids(m, lo == 0 ? tokens : NULL, hi == c->layers ? targets : NULL, B, &dtok, &dtgt);
  prm__refresh16(m);
  if (lo == 0) prm__embed_forward(m, tokens, dtok, N);
  /* MoE: a training forward records its routing and sets the aux/z
   * losses' gradient weight, as prm_llama_forward_backward does; a pass is
   * counted where it starts, so the stages' counts add up to the
   * micro-batches. Every token counts in the router's losses (moe_tgt
   * stays NULL): a stage's backward recomputes after later micro-batches'
   * forwards have reused the batch buffers, and fine-tuning does not run
   * in a pipeline. Their weight is grad_scale N (1 / micro-batches in
   * pre-training), or moe_router_w under eod_mask_loss's loss mask, where
   * grad_scale is 1 / the unmasked targets of the micro-batch instead.
   * Context parallel: the losses are the whole sequences' (moe.c), so N
   * counts the group's rows, as in prm_llama_forward_backward. */
  m->moe_aux_last = 0;
  if (train) {
    int64_t Ng = N * (m->tp.cp_size > 1 ? m->tp.cp_size : 1);
    m->moe_record = 1;
    m->moe_gscale = m->moe_router_w >= 0 ? (float)m->moe_router_w : grad_scale * (float)Ng;
    if (lo == 0) m->moe_passes++;
  }
  for (int64_t l = lo; l < hi; l++)
    prm__layer_forward(m, &m->layer[l], prm__set(m, l), a->resid + l * NC, a->resid + (l + 1) * NC,
                       B);
  m->moe_record = 0;
  *count = 0;
  if (hi < c->layers) return 0;
  prm_dev_rmsnorm_forward(m->dev, a->lnf, a->rstdf, a->resid + c->layers * NC, m->norm,
                          prm__sp_rows(m, N), C, (float)c->norm_eps);
  float *dx = train ? a->dlnf : NULL, *dw = train ? m->dhead : NULL;
  return prm__head(m, dx, dw, count, dtgt, targets, N, train ? grad_scale : 0.0f);
}

void prm_llama_stage_backward(prm_llama_t *m, int64_t lo, int64_t hi, const int32_t *tokens,
                              int64_t B) {
  const prm_llama_config_t *c = &m->cfg;
  PRM_ASSERT(m->flags & PRM_LLAMA_TRAIN);
  PRM_ASSERT(B >= 1 && B <= m->B && 0 <= lo && lo < hi && hi <= c->layers);
  prm_llama_acts_t *a = m->acts;
  int64_t N = B * m->T, NC = prm__resid_stride(m);
  const int32_t *dtok, *dtgt;
  prm__pass_ids(m, lo == 0 ? tokens : NULL, NULL, B, &dtok, &dtgt);
  if (hi == c->layers) prm__norm_backward(m, N);
  for (int64_t l = hi - 1; l >= lo; l--) {
    prm__layer_acts_t *s = prm__set(m, l);
    const float *x = a->resid + l * NC;
    /* Full recomputation: the slot's one set holds the stage's last layer. */
    if (a->nsets == 1 && l != hi - 1) prm__layer_forward(m, &m->layer[l], s, x, a->dln, B);
    prm__layer_backward(m, &m->layer[l], &m->dlayer[l], s, x, B);
  }
  if (lo > 0) return;
  prm__embed_backward(m, tokens, dtok, N);
}

void prm_llama_set_grads_hook(prm_llama_t *m, void (*fn)(void *ctx, int64_t offset, int64_t numel),
                              void *ctx) {
  m->grads_ready = fn;
  m->grads_ctx = ctx;
}

void prm_llama_set_packing(prm_llama_t *m, const int32_t *seg, const int32_t *pos) {
  m->pack_seg = seg;
  m->pack_pos = pos;
}
