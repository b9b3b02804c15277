/* ref-decl.h - prototypes of the reference kernels, written once against
 * `real` and instantiated per precision. Deliberately unguarded: include it
 * through kernels-impl.h (fp32, names prm__ref32_*) or ref64.h (double,
 * names prm_ref64_*), which set PRM_REF_DOUBLE first. Argument order and
 * shapes are those of the public kernels in primus/prm_kernels.h.
 */
#include <stdint.h>

#if PRM_REF_DOUBLE
#define real double
#define PRM_REF(name) prm_ref64_##name
#else
#define real float
#define PRM_REF(name) prm__ref32_##name
#endif

/* Naive C = alpha op(A) op(B) + beta C, row-major, any strides; each
 * element sums over k in increasing order. beta == 0 never reads C. */
void PRM_REF(gemm)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, real alpha,
                   const real *A, int64_t lda, const real *B, int64_t ldb, real beta, real *C,
                   int64_t ldc);

void PRM_REF(linear_forward)(real *y /* (N,out) */, const real *x /* (N,in) */,
                             const real *w /* (out,in) */, int64_t N, int64_t in, int64_t out);
void PRM_REF(linear_backward)(real *dx /* (N,in) */, real *dw /* (out,in) */,
                              const real *dy /* (N,out) */, const real *x /* (N,in) */,
                              const real *w /* (out,in) */, int64_t N, int64_t in, int64_t out,
                              int dx_accum);

void PRM_REF(embedding_forward)(real *out /* (N,C) */, const int32_t *tok /* (N) */,
                                const real *wte /* (V,C) */, int64_t N, int64_t C);
void PRM_REF(embedding_backward)(real *dwte /* (V,C) */, const real *dout /* (N,C) */,
                                 const int32_t *tok /* (N) */, int64_t N, int64_t C);

void PRM_REF(rmsnorm_forward)(real *out /* (N,C) */, real *rstd /* (N) */,
                              const real *x /* (N,C) */, const real *w /* (C) */, int64_t N,
                              int64_t C, real eps);
void PRM_REF(add_rmsnorm_forward)(real *sum /* (N,C) */, real *out /* (N,C) */,
                                  real *rstd /* (N) */, const real *a /* (N,C) */,
                                  const real *b /* (N,C) */, const real *w /* (C) */, int64_t N,
                                  int64_t C, real eps);
void PRM_REF(rmsnorm_backward)(real *dx /* (N,C) */, real *dw /* (C) */,
                               const real *dout /* (N,C) */, const real *x /* (N,C) */,
                               const real *w /* (C) */, const real *rstd /* (N) */, int64_t N,
                               int64_t C);

void PRM_REF(rope_tables)(real *cos_t /* (T,D/2) */, real *sin_t /* (T,D/2) */, int64_t T,
                          int64_t D, double base);
void PRM_REF(rope_forward)(real *x /* (B,T,nh,D) */, const real *cos_t, const real *sin_t,
                           int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0);
void PRM_REF(rope_backward)(real *dx /* (B,T,nh,D) */, const real *cos_t, const real *sin_t,
                            int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0);

void PRM_REF(swiglu_forward)(real *h, const real *gate, const real *up, int64_t n);
void PRM_REF(swiglu_backward)(real *dgate, real *dup, const real *dh, const real *gate,
                              const real *up, int64_t n);
void PRM_REF(add)(real *y, const real *a, const real *b, int64_t n);

void PRM_REF(attention_forward)(real *out /* (B,T,H,D) */, real *lse /* (B,H,T) */,
                                const real *q /* (B,T,H,D) */, const real *k /* (B,T,G,D) */,
                                const real *v /* (B,T,G,D) */, int64_t B, int64_t T, int64_t H,
                                int64_t G, int64_t D);
void PRM_REF(attention_backward)(real *dq /* (B,T,H,D) */, real *dk /* (B,T,G,D) */,
                                 real *dv /* (B,T,G,D) */, const real *dout /* (B,T,H,D) */,
                                 const real *q, const real *k, const real *v,
                                 const real *out /* (B,T,H,D) */, const real *lse /* (B,H,T) */,
                                 int64_t B, int64_t T, int64_t H, int64_t G, int64_t D);
/* With segment ids (prm_attention_forward_seg); seg NULL: plain causal. */
void PRM_REF(attention_forward_seg)(real *out /* (B,T,H,D) */, real *lse /* (B,H,T) */,
                                    const real *q, const real *k, const real *v,
                                    const int32_t *seg /* (B,T) or NULL */, int64_t B, int64_t T,
                                    int64_t H, int64_t G, int64_t D);
void PRM_REF(attention_backward_seg)(real *dq, real *dk, real *dv, const real *dout,
                                     const real *q, const real *k, const real *v,
                                     const real *out, const real *lse,
                                     const int32_t *seg /* (B,T) or NULL */, int64_t B, int64_t T,
                                     int64_t H, int64_t G, int64_t D);
void PRM_REF(attention_decode)(real *out /* (Tq,H,D) */, const real *q /* (Tq,H,D) */,
                               const real *kc /* (Tk,G,D) */, const real *vc /* (Tk,G,D) */,
                               int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D);

double PRM_REF(xent_forward)(real *losses /* (N) or NULL */, const real *logits /* (N,V) */,
                             const int32_t *targets /* (N) */, int64_t N, int64_t V);
void PRM_REF(xent_backward)(real *dlogits /* (N,V) */, const real *logits /* (N,V) */,
                            const int32_t *targets /* (N) */, int64_t N, int64_t V, real scale);

void PRM_REF(adamw_update)(real *p, const real *g, real *m, real *v, int64_t n, real lr,
                           real beta1, real beta2, real eps, real wd, int64_t step, real gscale);

#undef real
#undef PRM_REF
