/* kernels-impl.h - internals shared by the kernel files: the fp32
 * instantiation of the reference kernels (prm__ref32_*), and the fast
 * kernels (prm__fast_*, fast_ew.c and fast_adamw.c) the public kernels route
 * to. The benchmark (src/bench/kernels.c) and the tests time and check each
 * fast kernel against its reference twin through these names. */
#ifndef PRM_KERNELS_IMPL_H
#define PRM_KERNELS_IMPL_H

#include "primus/prm_kernels.h"

#define PRM_REF_DOUBLE 0
#include "kernels/ref-decl.h"
#undef PRM_REF_DOUBLE

/* fast_ew.c: same arguments as the public kernels of the same name. */
void prm__fast_add(float *y, const float *a, const float *b, int64_t n);
void prm__fast_swiglu_forward(float *h, const float *gate, const float *up, int64_t n);
void prm__fast_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                               const float *up, int64_t n);
/* RoPE by +angle (sign 1, forward) or -angle (sign -1, backward); row t of
 * sequence b has position pos[b*T+t] when pos is not NULL, else pos0 + t. */
void prm__fast_rope_apply(float *x /* (B,T,nh,D) */, const float *cos_t, const float *sin_t,
                          int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                          const int32_t *pos /* (B,T) or NULL */, float sign);
void prm__fast_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w,
                               int64_t N, int64_t C, float eps);
void prm__fast_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                                const float *w, const float *rstd, int64_t N, int64_t C);
void prm__fast_add_rmsnorm_forward(float *sum, float *out, float *rstd, const float *a,
                                   const float *b, const float *w, int64_t N, int64_t C,
                                   float eps);
/* Cross-entropy forward and, when dlogits is not NULL, backward in one
 * call (three passes over each row; dlogits may be logits): the per-row
 * losses (losses may be NULL) and their sum in a fixed order, as
 * prm_xent_forward and prm_xent_backward. */
double prm__fast_xent(float *losses /* (N) */, float *dlogits /* (N,V) */,
                      const float *logits /* (N,V) */, const int32_t *targets /* (N) */,
                      int64_t N, int64_t V, float scale);

/* fast_adamw.c: prm_adamw_update, bit-identical to the reference. */
void prm__fast_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float wd, int64_t step);
/* The variant this CPU runs: "avx512", "avx2" or "plain". */
const char *prm__fast_adamw_isa(void);
/* The update with one variant forced (NULL: this CPU's), for the tests;
 * PRM_EINVAL, touching nothing, when the CPU cannot run it. */
int prm__fast_adamw_update_isa(const char *isa, float *p, const float *g, float *m, float *v,
                               int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                               int64_t step);

#endif
