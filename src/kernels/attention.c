/* attention.c - causal grouped-query attention, flash style: the forward
 * keeps only out and the per-row log-sum-exp, the backward recomputes the
 * probabilities pair by pair; no T x T buffer exists. For now the fp32
 * instantiation of the reference kernels (ref-impl.h). */
#include "kernels/kernels-impl.h"

void prm_attention_forward(float *out, float *lse, const float *q, const float *k,
                           const float *v, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D) {
  prm__ref32_attention_forward(out, lse, q, k, v, B, T, H, G, D);
}

void prm_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const float *out, const float *lse,
                            int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  prm__ref32_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, G, D);
}

void prm_attention_decode(float *out, const float *q, const float *kc, const float *vc,
                          int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D) {
  prm__ref32_attention_decode(out, q, kc, vc, Tq, Tk, H, G, D);
}
