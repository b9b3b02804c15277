/* ops.c - element-wise and row-wise operators: embedding, RMSNorm, RoPE,
 * SwiGLU, add. For now each is the fp32 instantiation of the reference
 * kernel (ref-impl.h). */
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
  prm__ref32_rmsnorm_forward(out, rstd, x, w, N, C, eps);
}

void prm_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                          const float *w, const float *rstd, int64_t N, int64_t C) {
  prm__ref32_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
}

void prm_rope_tables(float *cos_t, float *sin_t, int64_t T, int64_t D, double base) {
  prm__ref32_rope_tables(cos_t, sin_t, T, D, base);
}

void prm_rope_forward(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                      int64_t nh, int64_t D, int64_t pos0) {
  prm__ref32_rope_forward(x, cos_t, sin_t, B, T, nh, D, pos0);
}

void prm_rope_backward(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                       int64_t nh, int64_t D, int64_t pos0) {
  prm__ref32_rope_backward(dx, cos_t, sin_t, B, T, nh, D, pos0);
}

void prm_swiglu_forward(float *h, const float *gate, const float *up, int64_t n) {
  prm__ref32_swiglu_forward(h, gate, up, n);
}

void prm_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                         const float *up, int64_t n) {
  prm__ref32_swiglu_backward(dgate, dup, dh, gate, up, n);
}

void prm_add(float *y, const float *a, const float *b, int64_t n) { prm__ref32_add(y, a, b, n); }
