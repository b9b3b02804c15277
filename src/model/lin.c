/* lin.c - the model's linear layers and attention in fp32 or bf16 mixed
 * precision.
 *
 * With PRM_LLAMA_BF16 the matrix multiplications take bf16 operands and
 * accumulate in fp32 (prm_gemm_bf16): the weights come from a bf16 shadow
 * of the fp32 master parameters (refreshed by prm__refresh16 when they
 * changed), the activations and output gradients are rounded into two
 * scratch slots just before use (slot 0: the layer input x, slot 1: the
 * output gradient dy). Attention takes q, k, v (and in backward dO)
 * rounded into the same two slots, once per layer and pass, and runs the
 * bf16 kernels (attention16.c; on a GPU the device's attention_*_bf16,
 * tensor cores), unless PRM_LLAMA_ATTN_FP32 keeps it on the fp32 kernels
 * (where vdpbf16ps is slower than fp32 FMAs: the trainer's bf16_attention).
 * The norms and SwiGLU that feed a GEMM write its bf16 operand in the same
 * pass where the device can (prm__norm16, prm__swiglu16). Everything else - norms, softmax statistics, the loss,
 * gradients, AdamW - stays fp32. Without PRM_LLAMA_BF16 every function is
 * the plain fp32 call.
 *
 * Packed weights: where the GEMM backend keeps its own blocked copy of a
 * weight (oneDNN's bf16 matmul: prm_gemm_bf16_pack), the head's matrix is
 * packed for its two products after each refresh, and with
 * PRM_LLAMA_PACK16 (the trainer's bf16_pack_weights) so is every matrix a
 * dense layer uses whole: q, k, v, o, gate, up, down, the router and the
 * shared expert. The experts' matrices are not packed: their row counts
 * change with the routing every pass. */
#include "model-impl.h"

#include <string.h>

void prm__refresh16(prm_llama_t *m) {
  if (!m->params16 || !m->stale16) return;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    if (t->ndim == 2)
      prm_dev_f32_to_bf16(m->dev, m->params16 + t->offset, m->params + t->offset, t->numel);
  }
  m->stale16 = 0;
  m->ver16++;
}

/* The index of the tensor whose values start at w and number `numel`, or
 * -1. The offsets never decrease (absent experts repeat one). */
static int prm__tensor_at(const prm_llama_t *m, const float *w, int64_t numel) {
  int64_t off = w - m->params;
  int lo = 0, hi = m->ntensors;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (m->tensors[mid].offset < off) lo = mid + 1;
    else hi = mid;
  }
  for (; lo < m->ntensors && m->tensors[lo].offset == off; lo++)
    if (m->tensors[lo].numel == numel) return lo;
  return -1;
}

/* Tensor i's (in, out) matrix w packed for `which` (0: B = W^T, the
 * product by the transpose; 1: B = W), again when params16 changed. */
static const prm_gemm_packed_t *prm__pk16(prm_llama_t *m, int i, int which, int64_t rows,
                                          int64_t in, int64_t out) {
  PRM_ASSERT(m->pk16 && i >= 0 && (which == 0 || which == 1) && m->ver16 > 0);
  prm_gemm_packed_t *p = &m->pk16[2 * i + which];
  if (m->pk16_ver[2 * i + which] != m->ver16) {
    const prm_bf16_t *w16 = m->params16 + m->tensors[i].offset;
    if (which == 0) /* y (rows,out) = x (rows,in) W^T: op(B) (in,out) */
      prm_gemm_bf16_pack(&m->gemm, p, 1, rows, out, in, w16, in);
    else /* dx (rows,in) = dy (rows,out) W: op(B) (out,in) */
      prm_gemm_bf16_pack(&m->gemm, p, 0, rows, in, out, w16, in);
    m->pk16_ver[2 * i + which] = m->ver16;
  }
  return p;
}

const prm_gemm_packed_t *prm__head16(prm_llama_t *m, int which, int64_t rows) {
  PRM_ASSERT(m->params16);
  int64_t C = m->cfg.hidden, V = m->Vl;
  return prm__pk16(m, prm__tensor_at(m, m->head, V * C), which, rows, C, V);
}

/* Whether PRM_LLAMA_PACK16 packs tensor t when a layer multiplies by it
 * whole: every such matrix but the experts'. */
static int prm__layer_packs(const prm_tensor_t *t) { return !strstr(t->name, ".experts."); }

/* The packed copy of a layer's weight w (in, out) for `which`, or NULL
 * (without PRM_LLAMA_PACK16, or w is not a whole dense matrix). */
static const prm_gemm_packed_t *prm__layer16(prm_llama_t *m, const float *w, int which,
                                             int64_t rows, int64_t in, int64_t out) {
  if (!(m->flags & PRM_LLAMA_PACK16)) return NULL;
  int i = prm__tensor_at(m, w, in * out);
  if (i < 0 || !prm__layer_packs(&m->tensors[i])) return NULL;
  return prm__pk16(m, i, which, rows, in, out);
}

double prm__pk16_bytes(const prm_llama_t *m, double *head) {
  double all = 0, h = 0;
  if (m->params16 && prm_dev_is_host(m->dev)) { /* packs are the CPU GEMMs' */
    int64_t C = m->cfg.hidden, rows = m->acts ? m->B * m->T : 1;
    int hi = m->head ? prm__tensor_at(m, m->head, m->Vl * C) : -1;
    int64_t hrows = m->acts ? m->acts->chunk : 1;
    if (hi >= 0 && prm_gemm_bf16_copies(&m->gemm, 1, hrows, m->Vl, C))
      h = 2.0 * (double)(m->Vl * C) * sizeof(prm_bf16_t);
    all = h;
    for (int i = 0; (m->flags & PRM_LLAMA_PACK16) && i < m->ntensors; i++) {
      const prm_tensor_t *t = &m->tensors[i];
      int embed = m->embed && t->offset == m->embed - m->params; /* a lookup, not a product */
      if (i == hi || embed || t->ndim != 2 || !t->numel || !prm__layer_packs(t)) continue;
      if (prm_gemm_bf16_copies(&m->gemm, 1, rows, t->shape[0], t->shape[1]))
        all += 2.0 * (double)t->numel * sizeof(prm_bf16_t);
    }
  }
  if (head) *head = h;
  return all;
}

void prm_llama_params_changed(prm_llama_t *m) { m->stale16 = 1; }

void prm_llama_params16_synced(prm_llama_t *m) {
  if (!m->params16) return;
  m->stale16 = 0;
  m->ver16++; /* packed copies (the CPU's) are stale */
}

const prm_bf16_t *prm__to16(prm_llama_t *m, int slot, const float *x, int64_t n) {
  if (!m->params16) return NULL;
  prm_llama_acts_t *a = m->acts;
  PRM_ASSERT(slot == 0 || slot == 1);
  PRM_ASSERT(n <= a->n16[slot]);
  prm_dev_f32_to_bf16(m->dev, a->x16[slot], x, n);
  return a->x16[slot];
}

const prm_bf16_t *prm__norm16(prm_llama_t *m, float *sum, float *out, float *rstd, const float *a,
                              const float *b, const float *w, int64_t N, int64_t C, float eps) {
  if (!m->params16) {
    if (b) prm_dev_add_rmsnorm_forward(m->dev, sum, out, rstd, a, b, w, N, C, eps);
    else prm_dev_rmsnorm_forward(m->dev, out, rstd, a, w, N, C, eps);
    return NULL;
  }
  prm_llama_acts_t *s = m->acts;
  PRM_ASSERT(N * C <= s->n16[0]);
  prm_dev_rmsnorm_forward16(m->dev, sum, out, s->x16[0], rstd, a, b, w, N, C, eps);
  return s->x16[0];
}

const prm_bf16_t *prm__swiglu16(prm_llama_t *m, float *h, const float *gate, const float *up,
                                int64_t n) {
  if (!m->params16) {
    prm_dev_swiglu_forward(m->dev, h, gate, up, n);
    return NULL;
  }
  prm_llama_acts_t *s = m->acts;
  PRM_ASSERT(n <= s->n16[0]);
  prm_dev_swiglu_forward16(m->dev, h, s->x16[0], gate, up, n);
  return s->x16[0];
}

void prm__lin_fwd(prm_llama_t *m, float *y, const float *x, const prm_bf16_t *x16, const float *w,
                  int64_t N, int64_t in, int64_t out) {
  if (!prm_dev_is_host(m->dev)) { /* the device's GEMMs; no packed weights */
    if (x16)
      prm_dev_gemm_bf16(m->dev, 0, 1, N, out, in, 1.0f, x16, in, prm__w16(m, w), in, 0.0f, y, out);
    else
      prm_dev_linear_forward(m->dev, y, x, w, N, in, out);
    return;
  }
  if (!x16) {
    prm_linear_forward(&m->gemm, y, x, w, N, in, out);
    return;
  }
  const prm_gemm_packed_t *p = prm__layer16(m, w, 0, N, in, out);
  if (p)
    prm_gemm_bf16_packed(&m->gemm, N, 1.0f, x16, in, p, 0.0f, y, out);
  else
    prm_gemm_bf16(&m->gemm, 0, 1, N, out, in, 1.0f, x16, in, prm__w16(m, w), in, 0.0f, y, out);
}

void prm__lin_bwd(prm_llama_t *m, float *dx, float *dw, const float *dy, const prm_bf16_t *dy16,
                  const float *x, const prm_bf16_t *x16, const float *w, int64_t N, int64_t in,
                  int64_t out, int dx_accum) {
  if (!prm_dev_is_host(m->dev) && !dy16) {
    prm_dev_linear_backward(m->dev, dx, dw, dy, x, w, N, in, out, dx_accum);
    return;
  }
  if (!prm_dev_is_host(m->dev)) {
    PRM_ASSERT(x16);
    if (dx)
      prm_dev_gemm_bf16(m->dev, 0, 0, N, in, out, 1.0f, dy16, out, prm__w16(m, w), in,
                        dx_accum ? 1.0f : 0.0f, dx, in);
    if (dw) prm_dev_gemm_bf16(m->dev, 1, 0, out, in, N, 1.0f, dy16, out, x16, in, 1.0f, dw, in);
    return;
  }
  if (!dy16) {
    prm_linear_backward(&m->gemm, dx, dw, dy, x, w, N, in, out, dx_accum);
    return;
  }
  PRM_ASSERT(x16);
  const prm_gemm_packed_t *p = dx ? prm__layer16(m, w, 1, N, in, out) : NULL;
  if (p)
    prm_gemm_bf16_packed(&m->gemm, N, 1.0f, dy16, out, p, dx_accum ? 1.0f : 0.0f, dx, in);
  else if (dx)
    prm_gemm_bf16(&m->gemm, 0, 0, N, in, out, 1.0f, dy16, out, prm__w16(m, w), in,
                  dx_accum ? 1.0f : 0.0f, dx, in);
  if (dw) prm_gemm_bf16(&m->gemm, 1, 0, out, in, N, 1.0f, dy16, out, x16, in, 1.0f, dw, in);
}

/* Attention in bf16: PRM_LLAMA_BF16 without PRM_LLAMA_ATTN_FP32. */
static int prm__attn16(const prm_llama_t *m) {
  return m->params16 && !(m->flags & PRM_LLAMA_ATTN_FP32);
}

/* Slot 0 holds q then k, slot 1 v (forward) or dO then v (backward):
 * prm__layout_scratch sizes both slots for N (H + G) D values when
 * attention runs in bf16. */
void prm__attn_fwd(prm_llama_t *m, prm__layer_acts_t *a, int64_t B) {
  int64_t T = m->T, N = B * T, D = prm_llama_head_dim(&m->cfg), H = m->Hl, G = m->Gl;
  if (m->tp.cp_size > 1) { /* ring attention over the sequence's ranks, fp32 (cp.c) */
    prm__cp_attn_fwd(m, a, B);
    return;
  }
  if (!prm__attn16(m)) {
    prm_dev_attention_forward(m->dev, a->att, a->lse, a->q, a->k, a->v, m->pass_seg, B, T, H, G,
                              D);
    return;
  }
  prm_llama_acts_t *s = m->acts;
  PRM_ASSERT(N * (H + G) * D <= s->n16[0] && N * G * D <= s->n16[1]);
  prm_bf16_t *q16 = s->x16[0], *k16 = q16 + N * H * D, *v16 = s->x16[1];
  if (!prm_dev_is_host(m->dev)) { /* the device's bf16 attention (llama.c checked it has one) */
    prm_dev_f32_to_bf16(m->dev, q16, a->q, N * H * D);
    prm_dev_f32_to_bf16(m->dev, k16, a->k, N * G * D);
    prm_dev_f32_to_bf16(m->dev, v16, a->v, N * G * D);
    prm_dev_attention_forward_bf16(m->dev, a->att, a->lse, q16, k16, v16, m->pass_seg, B, T, H, G,
                                   D);
    return;
  }
  prm_f32_to_bf16(q16, a->q, N * H * D);
  prm_f32_to_bf16(k16, a->k, N * G * D);
  prm_f32_to_bf16(v16, a->v, N * G * D);
  prm_attention_forward_bf16(a->att, a->lse, q16, k16, v16, m->pack_seg, B, T, H, G, D);
}

void prm__attn_bwd(prm_llama_t *m, const prm__layer_acts_t *a, int64_t B) {
  int64_t T = m->T, N = B * T, D = prm_llama_head_dim(&m->cfg), H = m->Hl, G = m->Gl;
  prm_llama_acts_t *s = m->acts;
  if (m->tp.cp_size > 1) {
    prm__cp_attn_bwd(m, a, B);
    return;
  }
  if (!prm__attn16(m)) {
    prm_dev_attention_backward(m->dev, s->dq, s->dk, s->dv, s->datt, a->q, a->k, a->v, a->att,
                               a->lse, m->pass_seg, B, T, H, G, D);
    return;
  }
  PRM_ASSERT(N * (H + G) * D <= s->n16[0] && N * (H + G) * D <= s->n16[1]);
  prm_bf16_t *q16 = s->x16[0], *k16 = q16 + N * H * D, *d16 = s->x16[1], *v16 = d16 + N * H * D;
  if (!prm_dev_is_host(m->dev)) {
    prm_dev_f32_to_bf16(m->dev, q16, a->q, N * H * D);
    prm_dev_f32_to_bf16(m->dev, k16, a->k, N * G * D);
    prm_dev_f32_to_bf16(m->dev, v16, a->v, N * G * D);
    prm_dev_f32_to_bf16(m->dev, d16, s->datt, N * H * D);
    prm_dev_attention_backward_bf16(m->dev, s->dq, s->dk, s->dv, d16, q16, k16, v16, a->att,
                                    a->lse, m->pass_seg, B, T, H, G, D);
    return;
  }
  prm_f32_to_bf16(q16, a->q, N * H * D);
  prm_f32_to_bf16(k16, a->k, N * G * D);
  prm_f32_to_bf16(v16, a->v, N * G * D);
  prm_f32_to_bf16(d16, s->datt, N * H * D);
  prm_attention_backward_bf16(s->dq, s->dk, s->dv, d16, q16, k16, v16, a->att, a->lse,
                              m->pack_seg, B, T, H, G, D);
}
