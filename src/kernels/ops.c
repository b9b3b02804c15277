/* ops.c - element-wise and row-wise operators: embedding, RMSNorm (and the
 * residual add fused with it), RoPE, SwiGLU, add. Embedding and the RoPE
 * tables are the fp32 reference kernels (ref-impl.h); the others route to
 * the vectorised kernels of fast_ew.c. */
#include "kernels/kernels-impl.h"

void prm_embedding_forward(float *out, const int32_t *tok, const float *wte, int64_t N,
                           int64_t C) {
  prm__ref32_embedding_forward(out, tok, wte, N, C);
}

void prm_embedding_backward(float *dwte, const float *dout, const int32_t *tok, int64_t N,
                            int64_t C) {
  prm__ref32_embedding_backward(dwte, dout, tok, N, C);
}

void prm_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int64_t N,
                         int64_t C, float eps) {
  prm__fast_rmsnorm_forward(out, rstd, x, w, N, C, eps);
}

void prm_add_rmsnorm_forward(float *sum, float *out, float *rstd, const float *a,
                             const float *b, const float *w, int64_t N, int64_t C, float eps) {
  prm__fast_add_rmsnorm_forward(sum, out, rstd, a, b, w, N, C, eps);
}

void prm_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                          const float *w, const float *rstd, int64_t N, int64_t C) {
  prm__fast_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
}

void prm_rope_tables(float *cos_t, float *sin_t, int64_t T, int64_t D, double base) {
  prm__ref32_rope_tables(cos_t, sin_t, T, D, base);
}

void prm_rope_forward(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                      int64_t nh, int64_t D, int64_t pos0) {
  prm__fast_rope_apply(x, cos_t, sin_t, B, T, nh, D, pos0, NULL, 1.0f);
}

void prm_rope_backward(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                       int64_t nh, int64_t D, int64_t pos0) {
  prm__fast_rope_apply(dx, cos_t, sin_t, B, T, nh, D, pos0, NULL, -1.0f);
}

void prm_rope_forward_pos(float *x, const float *cos_t, const float *sin_t, int64_t B,
                          int64_t T, int64_t nh, int64_t D, const int32_t *pos) {
  prm__fast_rope_apply(x, cos_t, sin_t, B, T, nh, D, 0, pos, 1.0f);
}

void prm_rope_backward_pos(float *dx, const float *cos_t, const float *sin_t, int64_t B,
                           int64_t T, int64_t nh, int64_t D, const int32_t *pos) {
  prm__fast_rope_apply(dx, cos_t, sin_t, B, T, nh, D, 0, pos, -1.0f);
}

void prm_swiglu_forward(float *h, const float *gate, const float *up, int64_t n) {
  prm__fast_swiglu_forward(h, gate, up, n);
}

void prm_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                         const float *up, int64_t n) {
  prm__fast_swiglu_backward(dgate, dup, dh, gate, up, n);
}

void prm_add(float *y, const float *a, const float *b, int64_t n) { prm__fast_add(y, a, b, n); }
