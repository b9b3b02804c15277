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
 * bf16 kernels (attention16.c), unless PRM_LLAMA_ATTN_FP32 keeps it on the
 * fp32 kernels (where vdpbf16ps is slower than fp32 FMAs: the trainer's
 * bf16_attention). Everything else - norms, softmax statistics, the loss,
 * gradients, AdamW - stays fp32. Without PRM_LLAMA_BF16 every function is
 * the plain fp32 call. */
#include "model-impl.h"

void prm__refresh16(prm_llama_t *m) {
  if (!m->params16 || !m->stale16) return;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    if (t->ndim == 2) prm_f32_to_bf16(m->params16 + t->offset, m->params + t->offset, t->numel);
  }
  m->stale16 = 0;
  m->ver16++;
}

const prm_gemm_packed_t *prm__head16(prm_llama_t *m, int which, int64_t rows) {
  PRM_ASSERT(m->params16 && (which == 0 || which == 1) && m->ver16 > 0);
  prm_gemm_packed_t *p = &m->head16[which];
  if (m->head16_ver[which] != m->ver16) {
    int64_t C = m->cfg.hidden, V = m->Vl;
    if (which == 0) /* logits (rows,V) = x (rows,C) W^T: op(B) (C,V) */
      prm_gemm_bf16_pack(&m->gemm, p, 1, rows, V, C, prm__w16(m, m->head), C);
    else /* dx (rows,C) = dlogits (rows,V) W: op(B) (V,C) */
      prm_gemm_bf16_pack(&m->gemm, p, 0, rows, C, V, prm__w16(m, m->head), C);
    m->head16_ver[which] = m->ver16;
  }
  return p;
}

void prm_llama_params_changed(prm_llama_t *m) { m->stale16 = 1; }

const prm_bf16_t *prm__to16(prm_llama_t *m, int slot, const float *x, int64_t n) {
  if (!m->params16) return NULL;
  prm_llama_acts_t *a = m->acts;
  PRM_ASSERT(slot == 0 || slot == 1);
  PRM_ASSERT(n <= a->n16[slot]);
  prm_f32_to_bf16(a->x16[slot], x, n);
  return a->x16[slot];
}

void prm__lin_fwd(prm_llama_t *m, float *y, const float *x, const prm_bf16_t *x16, const float *w,
                  int64_t N, int64_t in, int64_t out) {
  if (!x16) {
    prm_linear_forward(&m->gemm, y, x, w, N, in, out);
    return;
  }
  prm_gemm_bf16(&m->gemm, 0, 1, N, out, in, 1.0f, x16, in, prm__w16(m, w), in, 0.0f, y, out);
}

void prm__lin_bwd(prm_llama_t *m, float *dx, float *dw, const float *dy, const prm_bf16_t *dy16,
                  const float *x, const prm_bf16_t *x16, const float *w, int64_t N, int64_t in,
                  int64_t out, int dx_accum) {
  if (!dy16) {
    prm_linear_backward(&m->gemm, dx, dw, dy, x, w, N, in, out, dx_accum);
    return;
  }
  PRM_ASSERT(x16);
  if (dx)
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
  if (!prm__attn16(m)) {
    prm_attention_forward_seg(a->att, a->lse, a->q, a->k, a->v, m->pack_seg, B, T, H, G, D);
    return;
  }
  prm_llama_acts_t *s = m->acts;
  PRM_ASSERT(N * (H + G) * D <= s->n16[0] && N * G * D <= s->n16[1]);
  prm_bf16_t *q16 = s->x16[0], *k16 = q16 + N * H * D, *v16 = s->x16[1];
  prm_f32_to_bf16(q16, a->q, N * H * D);
  prm_f32_to_bf16(k16, a->k, N * G * D);
  prm_f32_to_bf16(v16, a->v, N * G * D);
  prm_attention_forward_bf16(a->att, a->lse, q16, k16, v16, m->pack_seg, B, T, H, G, D);
}

void prm__attn_bwd(prm_llama_t *m, const prm__layer_acts_t *a, int64_t B) {
  int64_t T = m->T, N = B * T, D = prm_llama_head_dim(&m->cfg), H = m->Hl, G = m->Gl;
  prm_llama_acts_t *s = m->acts;
  if (!prm__attn16(m)) {
    prm_attention_backward_seg(s->dq, s->dk, s->dv, s->datt, a->q, a->k, a->v, a->att, a->lse,
                               m->pack_seg, B, T, H, G, D);
    return;
  }
  PRM_ASSERT(N * (H + G) * D <= s->n16[0] && N * (H + G) * D <= s->n16[1]);
  prm_bf16_t *q16 = s->x16[0], *k16 = q16 + N * H * D, *d16 = s->x16[1], *v16 = d16 + N * H * D;
  prm_f32_to_bf16(q16, a->q, N * H * D);
  prm_f32_to_bf16(k16, a->k, N * G * D);
  prm_f32_to_bf16(v16, a->v, N * G * D);
  prm_f32_to_bf16(d16, s->datt, N * H * D);
  prm_attention_backward_bf16(s->dq, s->dk, s->dv, d16, q16, k16, v16, a->att, a->lse,
                              m->pack_seg, B, T, H, G, D);
}
