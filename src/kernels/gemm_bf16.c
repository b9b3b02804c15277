/* gemm_bf16.c - the bf16 members of the GEMM backend table: C (fp32) =
 * alpha op(A) op(B) + beta C with A and B in bf16 and fp32 accumulation.
 *
 *  - reference: the twin the others are checked against, widened to float
 *    (a product of two bf16 is exact in float) and summed in double;
 *  - onednn: the matmul primitive with bf16 source/weights and an f32
 *    destination (oneDNN 2.6 has no public bf16 GEMM function; its matmul
 *    runs AMX or avx512_bf16 kernels when the CPU has them). The transposes
 *    and row strides become the strides of the memory descriptors, alpha the
 *    output scale and beta a sum post-op;
 *  - openblas: none. Debian's libopenblas 0.3.21 is built without
 *    BUILD_BFLOAT16: cblas.h declares cblas_sbgemm but the library lacks
 *    it. prm_gemm_bf16 runs prm__gemm_bf16_widen for it: A and B widened
 *    to fp32, then cblas_sgemm. */
#include "kernels/gemm-impl.h"
#include "kernels/kernels-impl.h"

#include <stdlib.h>
#include <string.h>

#ifdef PRM_HAVE_DNNL
#include <dnnl.h>
#include <pthread.h>
#endif

/* ------------------------------------------------------------------------ */
/* Reference                                                                 */
/* ------------------------------------------------------------------------ */

void prm__gemm_bf16_reference(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N,
                              int64_t K, float alpha, const prm_bf16_t *A, int64_t lda,
                              const prm_bf16_t *B, int64_t ldb, float beta, float *C,
                              int64_t ldc) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) {
        float a = prm__bf16_to_f32(trans_a ? A[k * lda + i] : A[i * lda + k]);
        float b = prm__bf16_to_f32(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
        s += (double)(a * b);
      }
      float v = alpha * (float)s;
      C[i * ldc + j] = beta == 0 ? v : v + beta * C[i * ldc + j];
    }
  }
}

/* ------------------------------------------------------------------------ */
/* Widening fallback                                                         */
/* ------------------------------------------------------------------------ */

/* Copies the rows x cols block of a bf16 matrix (row stride ld) into a
 * packed float one. */
static float *prm__widen_block(const prm_bf16_t *x, int64_t rows, int64_t cols, int64_t ld) {
  float *w = prm_xmalloc((size_t)rows * (size_t)cols * sizeof(float));
  for (int64_t r = 0; r < rows; r++) prm_bf16_to_f32(w + r * cols, x + r * ld, cols);
  return w;
}

void prm__gemm_bf16_widen(const prm_gemm_i *i, void *ctx, int trans_a, int trans_b, int64_t M,
                          int64_t N, int64_t K, float alpha, const prm_bf16_t *A, int64_t lda,
                          const prm_bf16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  int64_t ar = trans_a ? K : M, ac = trans_a ? M : K;
  int64_t br = trans_b ? N : K, bc = trans_b ? K : N;
  float *a = prm__widen_block(A, ar, ac, lda), *b = prm__widen_block(B, br, bc, ldb);
  i->sgemm(ctx, trans_a, trans_b, M, N, K, alpha, a, ac, b, bc, beta, C, ldc);
  free(a);
  free(b);
}

/* ------------------------------------------------------------------------ */
/* oneDNN                                                                    */
/* ------------------------------------------------------------------------ */

#ifdef PRM_HAVE_DNNL
/* The CPU engine, created once per process and never changed afterwards
 * (a library handle, like the OpenMP runtime's). oneDNN's own primitive
 * cache keeps the compiled kernel of every shape seen; this code keeps no
 * state between calls. */
static pthread_once_t prm__dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t prm__dnnl_engine;

static void prm__dnnl_setup(void) {
  if (dnnl_engine_create(&prm__dnnl_engine, dnnl_cpu, 0) != dnnl_success) prm__dnnl_engine = NULL;
}

#define PRM__DNNL(call)                                                                           \
  do {                                                                                            \
    dnnl_status_t st_ = (call);                                                                   \
    if (st_ != dnnl_success) prm__assert_fail(#call " == dnnl_success", __FILE__, __LINE__,     \
                                              __func__);                                          \
  } while (0)

/* Runs prim on args to completion, then destroys the args' memories and
 * prim (both made for this one call). */
static void prm__dnnl_run(dnnl_primitive_t prim, int n, dnnl_exec_arg_t *args) {
  dnnl_stream_t s;
  PRM__DNNL(dnnl_stream_create(&s, prm__dnnl_engine, dnnl_stream_default_flags));
  PRM__DNNL(dnnl_primitive_execute(prim, s, n, args));
  PRM__DNNL(dnnl_stream_wait(s));
  dnnl_stream_destroy(s);
  for (int i = 0; i < n; i++) dnnl_memory_destroy(args[i].memory);
  dnnl_primitive_destroy(prim);
}

/* C (md cmd) = alpha A (amd) B (bmd) + beta C: one matmul primitive (from
 * oneDNN's cache after the first call of a shape) run to completion. */
static void prm__dnnl_matmul(const dnnl_memory_desc_t *amd, const void *A,
                             const dnnl_memory_desc_t *bmd, const void *B,
                             const dnnl_memory_desc_t *cmd, float *C, float alpha, float beta) {
  dnnl_engine_t eng = prm__dnnl_engine;
  dnnl_matmul_desc_t md;
  PRM__DNNL(dnnl_matmul_desc_init(&md, amd, bmd, NULL, cmd));
  dnnl_primitive_attr_t attr;
  PRM__DNNL(dnnl_primitive_attr_create(&attr));
  if (alpha != 1.0f) PRM__DNNL(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha));
  if (beta != 0.0f) {
    /* C = alpha A B + beta C through a sum post-op (C is read in place). */
    dnnl_post_ops_t po;
    PRM__DNNL(dnnl_post_ops_create(&po));
    PRM__DNNL(dnnl_post_ops_append_sum(po, beta));
    PRM__DNNL(dnnl_primitive_attr_set_post_ops(attr, po));
    PRM__DNNL(dnnl_post_ops_destroy(po));
  }
  dnnl_primitive_desc_t pd;
  PRM__DNNL(dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL));
  PRM__DNNL(dnnl_primitive_attr_destroy(attr));
  dnnl_primitive_t prim;
  PRM__DNNL(dnnl_primitive_create(&prim, pd));
  PRM__DNNL(dnnl_primitive_desc_destroy(pd));
  dnnl_memory_t ma, mb, mc;
  PRM__DNNL(dnnl_memory_create(&ma, amd, eng, (void *)A));
  PRM__DNNL(dnnl_memory_create(&mb, bmd, eng, (void *)B));
  PRM__DNNL(dnnl_memory_create(&mc, cmd, eng, C));
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  prm__dnnl_run(prim, 3, args);
}

/* The strided descriptors of op(A) (M,K), op(B) (K,N) and C (M,N). */
static void prm__dnnl_mds(dnnl_memory_desc_t *amd, dnnl_memory_desc_t *bmd,
                          dnnl_memory_desc_t *cmd, int trans_a, int trans_b, int64_t M,
                          int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  dnnl_dims_t ad = {M, K}, as = {trans_a ? 1 : lda, trans_a ? lda : 1};
  dnnl_dims_t bd = {K, N}, bs = {trans_b ? 1 : ldb, trans_b ? ldb : 1};
  dnnl_dims_t cd = {M, N}, cs = {ldc, 1};
  PRM__DNNL(dnnl_memory_desc_init_by_strides(amd, 2, ad, dnnl_bf16, as));
  if (bmd) PRM__DNNL(dnnl_memory_desc_init_by_strides(bmd, 2, bd, dnnl_bf16, bs));
  PRM__DNNL(dnnl_memory_desc_init_by_strides(cmd, 2, cd, dnnl_f32, cs));
}

void prm__gemm_bf16_onednn(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const prm_bf16_t *A, int64_t lda, const prm_bf16_t *B,
                           int64_t ldb, float beta, float *C, int64_t ldc) {
  (void)ctx;
  pthread_once(&prm__dnnl_once, prm__dnnl_setup);
  PRM_ASSERT(prm__dnnl_engine);
  dnnl_memory_desc_t amd, bmd, cmd;
  prm__dnnl_mds(&amd, &bmd, &cmd, trans_a, trans_b, M, N, K, lda, ldb, ldc);
  prm__dnnl_matmul(&amd, A, &bmd, B, &cmd, C, alpha, beta);
}

void prm__gemm_bf16_onednn_pack(prm_gemm_packed_t *p, int64_t M) {
  pthread_once(&prm__dnnl_once, prm__dnnl_setup);
  PRM_ASSERT(prm__dnnl_engine);
  dnnl_engine_t eng = prm__dnnl_engine;
  dnnl_memory_desc_t amd, bmd, cmd, bany;
  prm__dnnl_mds(&amd, &bmd, &cmd, 0, p->trans_b, M, p->N, p->K, p->K, p->ldb, p->N);
  dnnl_dims_t bd = {p->K, p->N};
  PRM__DNNL(dnnl_memory_desc_init_by_tag(&bany, 2, bd, dnnl_bf16, dnnl_format_tag_any));
  /* The layout the matmul of about M rows wants for B. */
  dnnl_matmul_desc_t md;
  PRM__DNNL(dnnl_matmul_desc_init(&md, &amd, &bany, NULL, &cmd));
  dnnl_primitive_desc_t pd;
  PRM__DNNL(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
  const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  size_t bytes = dnnl_memory_desc_get_size(wmd);
  if (!p->md) p->md = prm_xmalloc(sizeof(dnnl_memory_desc_t));
  memcpy(p->md, wmd, sizeof(dnnl_memory_desc_t));
  PRM__DNNL(dnnl_primitive_desc_destroy(pd));
  if (p->buf && p->bytes != bytes) {
    prm_mem_free(PRM_MEM_PARAMS, p->buf, p->bytes);
    p->buf = NULL;
  }
  if (!p->buf) {
    p->buf = prm_mem_alloc(PRM_MEM_PARAMS, bytes);
    PRM_ASSERT(p->buf); /* out of memory */
    p->bytes = bytes;
  }
  /* B's strided layout into the blocked one. */
  dnnl_primitive_desc_t rpd;
  PRM__DNNL(dnnl_reorder_primitive_desc_create(&rpd, &bmd, eng, p->md, eng, NULL));
  dnnl_primitive_t r;
  PRM__DNNL(dnnl_primitive_create(&r, rpd));
  PRM__DNNL(dnnl_primitive_desc_destroy(rpd));
  dnnl_memory_t from, to;
  PRM__DNNL(dnnl_memory_create(&from, &bmd, eng, (void *)p->B));
  PRM__DNNL(dnnl_memory_create(&to, p->md, eng, p->buf));
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  prm__dnnl_run(r, 2, args);
}

void prm__gemm_bf16_onednn_packed(const prm_gemm_packed_t *p, int64_t M, float alpha,
                                  const prm_bf16_t *A, int64_t lda, float beta, float *C,
                                  int64_t ldc) {
  dnnl_memory_desc_t amd, cmd;
  prm__dnnl_mds(&amd, NULL, &cmd, 0, p->trans_b, M, p->N, p->K, lda, p->ldb, ldc);
  prm__dnnl_matmul(&amd, A, p->md, p->buf, &cmd, C, alpha, beta);
}

void prm__gemm_bf16_onednn_unpack(prm_gemm_packed_t *p) {
  if (p->buf) prm_mem_free(PRM_MEM_PARAMS, p->buf, p->bytes);
  free(p->md);
  p->buf = NULL, p->md = NULL, p->bytes = 0;
}
#endif
