/* lin.c - the model's linear layers in fp32 or bf16 mixed precision.
 *
 * With PRM_LLAMA_BF16 the matrix multiplications take bf16 operands and
 * accumulate in fp32 (prm_gemm_bf16): the weights come from a bf16 shadow
 * of the fp32 master parameters (refreshed by prm__refresh16 when they
 * changed), the activations and output gradients are rounded into two
 * scratch slots just before use (slot 0: the layer input x, slot 1: the
 * output gradient dy). Everything else - norms, softmax statistics, the
 * loss, gradients, AdamW - stays fp32. Without the flag every function is
 * the plain fp32 call. */
#include "model-impl.h"

void prm__refresh16(prm_llama_t *m) {
  if (!m->params16 || !m->stale16) return;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    if (t->ndim == 2) prm_f32_to_bf16(m->params16 + t->offset, m->params + t->offset, t->numel);
  }
  m->stale16 = 0;
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
