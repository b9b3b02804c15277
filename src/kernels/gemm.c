/* gemm.c - the GEMM backend table (reference, OpenBLAS, oneDNN), backend
 * selection (plain, or per shape from a tuning file), the prm_sgemm and
 * prm_gemm_bf16 wrappers and the linear layer built on them. The bf16
 * members are in gemm_bf16.c, the tuning file in gemm_tune.c. */
#include "kernels/kernels-impl.h"
#include "kernels/gemm-impl.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef PRM_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef PRM_HAVE_DNNL
#include <dnnl.h>
#endif

int prm_kernels_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* ------------------------------------------------------------------------ */
/* Backends                                                                  */
/* ------------------------------------------------------------------------ */

static int gemm_always(void) { return 1; }

static void gemm_reference(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float beta, float *C, int64_t ldc) {
  prm__ref32_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static const prm_gemm_i gemm_reference_i = {"reference", gemm_always, gemm_reference,
                                            prm__gemm_bf16_reference};

#ifdef PRM_HAVE_OPENBLAS
/* OpenBLAS keeps its own thread pool; it follows the OpenMP thread count
 * so that every backend uses prm_kernels_threads() threads. */
static void gemm_openblas(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc) {
  PRM_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
             ldb <= INT32_MAX && ldc <= INT32_MAX);
  int threads = prm_kernels_threads();
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda, B,
              (int)ldb, beta, C, (int)ldc);
}

/* No bf16 member: Debian's OpenBLAS is built without bf16 (gemm_bf16.c). */
static const prm_gemm_i gemm_openblas_i = {"openblas", gemm_always, gemm_openblas, NULL};
#endif

#ifdef PRM_HAVE_DNNL
static void gemm_onednn(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                        float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                        float beta, float *C, int64_t ldc) {
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc);
  PRM_ASSERT(st == dnnl_success);
}

static const prm_gemm_i gemm_onednn_i = {"onednn", gemm_always, gemm_onednn,
                                         prm__gemm_bf16_onednn};
#endif

static const prm_gemm_i *const gemm_list[] = {
#ifdef PRM_HAVE_DNNL
    &gemm_onednn_i,
#endif
#ifdef PRM_HAVE_OPENBLAS
    &gemm_openblas_i,
#endif
    &gemm_reference_i,
};
#define GEMM_COUNT ((int)(sizeof gemm_list / sizeof gemm_list[0]))

int prm_gemm_backends(const prm_gemm_i *const **out) {
  if (out) *out = gemm_list;
  return GEMM_COUNT;
}

int prm_gemm_init(prm_gemm_t *g, const char *name, prm_err_t *err) {
  /* "native" was the benchmark's name for the reference kernel: still taken
   * (PRIMUS_GEMM, --backend, tuning files), with a note once per process. */
  static int noted_native;
  if (name && !strcmp(name, "native")) {
    if (!noted_native) {
      noted_native = 1;
      PRM_WARN("gemm backend \"native\" is the old name of \"reference\" (deprecated): "
               "write reference");
    }
    name = "reference";
  }
  int automatic = !name || !strcmp(name, "auto");
  for (int i = 0; i < GEMM_COUNT; i++) {
    if (!automatic && strcmp(gemm_list[i]->name, name)) continue;
    if (!gemm_list[i]->available()) break;
    g->i = gemm_list[i];
    g->ctx = NULL;
    return 0;
  }
  prm_sb_t sb = {0};
  for (int i = 0; i < GEMM_COUNT; i++)
    if (gemm_list[i]->available()) prm_sb_appendf(&sb, "%s%s", sb.len ? ", " : "", gemm_list[i]->name);
  int rc = prm_errf(err, PRM_EINVAL, "gemm backend \"%s\": unknown or not available in this build; choices: auto, %s",
                    name ? name : "auto", prm_sb_str(&sb));
  prm_sb_free(&sb);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Per-shape dispatch from a tuning file                                     */
/* ------------------------------------------------------------------------ */

/* A tuned handle is a backend of its own: g->i is the prm__tuned_t's
 * interface, g->ctx the prm__tuned_t; each call looks its shape up and runs
 * the winner (with the default backend's ctx when the winner is the default,
 * NULL otherwise: the table's backends keep no per-handle state). */
static void gemm_tuned_sgemm(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N,
                             int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                             int64_t ldb, float beta, float *C, int64_t ldc) {
  const prm__tuned_t *t = ctx;
  const prm_gemm_i *i = prm__tuned_pick(t, 0, trans_a, trans_b, M, N, K);
  i->sgemm(i == t->dflt ? t->dflt_ctx : NULL, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb,
           beta, C, ldc);
}

static void gemm_tuned_bf16(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const prm_bf16_t *A, int64_t lda, const prm_bf16_t *B,
                            int64_t ldb, float beta, float *C, int64_t ldc) {
  const prm__tuned_t *t = ctx;
  const prm_gemm_i *i = prm__tuned_pick(t, 1, trans_a, trans_b, M, N, K);
  void *c = i == t->dflt ? t->dflt_ctx : NULL;
  if (i->gemm_bf16)
    i->gemm_bf16(c, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    prm__gemm_bf16_widen(i, c, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static int gemm_is_tuned(const prm_gemm_t *g) {
  return g && g->i && g->i->sgemm == gemm_tuned_sgemm;
}

int prm_gemm_init_tuned(prm_gemm_t *g, const char *name, const char *tune_path, prm_err_t *err) {
  int rc = prm_gemm_init(g, name, err);
  if (rc || !tune_path || !*tune_path) return rc;
  prm__tuned_t *t = prm_xcalloc(1, sizeof *t);
  if ((rc = prm__tune_read(tune_path, &t->ent, &t->n, err))) {
    free(t);
    return rc;
  }
  t->dflt = g->i;
  t->dflt_ctx = g->ctx;
  snprintf(t->name, sizeof t->name, "%s+tuned", g->i->name);
  t->self = (prm_gemm_i){t->name, g->i->available, gemm_tuned_sgemm, gemm_tuned_bf16};
  g->i = &t->self;
  g->ctx = t;
  return 0;
}

void prm_gemm_free(prm_gemm_t *g) {
  prm__prof_free(g);
  if (!gemm_is_tuned(g)) return;
  prm__tuned_t *t = g->ctx;
  g->i = t->dflt;
  g->ctx = t->dflt_ctx;
  free(t->ent);
  free(t);
}

const prm_gemm_i *prm_gemm_pick(const prm_gemm_t *g, int bf16, int trans_a, int trans_b,
                                int64_t M, int64_t N, int64_t K) {
  g = prm__prof_inner(g);
  if (!gemm_is_tuned(g)) return g->i;
  return prm__tuned_pick(g->ctx, bf16 ? 1 : 0, trans_a, trans_b, M, N, K);
}

/* ------------------------------------------------------------------------ */
/* The wrappers                                                              */
/* ------------------------------------------------------------------------ */

/* The checks both wrappers make; 1 when the backend has nothing to do
 * (an empty C, or K = 0: C = beta C here, as BLAS libraries disagree on
 * their lda checks in that case). */
static int prm__gemm_trivial(const prm_gemm_t *g, int trans_a, int trans_b, int64_t M, int64_t N,
                             int64_t K, int64_t lda, int64_t ldb, float beta, float *C,
                             int64_t ldc) {
  PRM_ASSERT(g && g->i && M >= 0 && N >= 0 && K >= 0);
  if (M == 0 || N == 0) return 1;
  PRM_ASSERT(ldc >= N);
  if (K == 0) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
    return 1;
  }
  PRM_ASSERT(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N));
  return 0;
}

void prm_sgemm(const prm_gemm_t *g, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
               float beta, float *C, int64_t ldc) {
  if (prm__gemm_trivial(g, trans_a, trans_b, M, N, K, lda, ldb, beta, C, ldc)) return;
  g->i->sgemm(g->ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void prm_gemm_bf16(const prm_gemm_t *g, int trans_a, int trans_b, int64_t M, int64_t N,
                   int64_t K, float alpha, const prm_bf16_t *A, int64_t lda,
                   const prm_bf16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (prm__gemm_trivial(g, trans_a, trans_b, M, N, K, lda, ldb, beta, C, ldc)) return;
  if (g->i->gemm_bf16)
    g->i->gemm_bf16(g->ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    prm__gemm_bf16_widen(g->i, g->ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                         ldc);
}

/* ------------------------------------------------------------------------ */
/* Packed bf16 operands                                                      */
/* ------------------------------------------------------------------------ */

int prm_gemm_bf16_copies(const prm_gemm_t *g, int trans_b, int64_t M, int64_t N, int64_t K) {
#ifdef PRM_HAVE_DNNL
  return prm_gemm_pick(g, 1, 0, trans_b, M, N, K)->gemm_bf16 == prm__gemm_bf16_onednn;
#else
  (void)g, (void)trans_b, (void)M, (void)N, (void)K;
  return 0;
#endif
}

void prm_gemm_bf16_pack(const prm_gemm_t *g, prm_gemm_packed_t *p, int trans_b, int64_t M,
                        int64_t N, int64_t K, const prm_bf16_t *B, int64_t ldb) {
  PRM_ASSERT(g && p && M >= 1 && N >= 1 && K >= 1 && ldb >= (trans_b ? K : N));
  p->trans_b = trans_b, p->N = N, p->K = K, p->ldb = ldb, p->B = B;
#ifdef PRM_HAVE_DNNL
  if (prm_gemm_bf16_copies(g, trans_b, M, N, K))
    prm__gemm_bf16_onednn_pack(p, M);
  else
    prm__gemm_bf16_onednn_unpack(p); /* a copy from an earlier pack is not needed */
#endif
}

void prm_gemm_bf16_packed(const prm_gemm_t *g, int64_t M, float alpha, const prm_bf16_t *A,
                          int64_t lda, const prm_gemm_packed_t *p, float beta, float *C,
                          int64_t ldc) {
  PRM_ASSERT(p && p->B);
#ifdef PRM_HAVE_DNNL
  if (p->buf) {
    if (prm__gemm_trivial(g, 0, p->trans_b, M, p->N, p->K, lda, p->ldb, beta, C, ldc)) return;
    double t0 = prm_time_now();
    prm__gemm_bf16_onednn_packed(p, M, alpha, A, lda, beta, C, ldc);
    prm__prof_note(g, 1, 0, p->trans_b, M, p->N, p->K, prm_time_now() - t0);
    return;
  }
#endif
  prm_gemm_bf16(g, 0, p->trans_b, M, p->N, p->K, alpha, A, lda, p->B, p->ldb, beta, C, ldc);
}

void prm_gemm_packed_free(prm_gemm_packed_t *p) {
#ifdef PRM_HAVE_DNNL
  prm__gemm_bf16_onednn_unpack(p);
#endif
  memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------------------ */
/* Linear                                                                    */
/* ------------------------------------------------------------------------ */

void prm_linear_forward(const prm_gemm_t *g, float *y, const float *x, const float *w, int64_t N,
                        int64_t in, int64_t out) {
  prm_sgemm(g, 0, 1, N, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}

void prm_linear_backward(const prm_gemm_t *g, float *dx, float *dw, const float *dy,
                         const float *x, const float *w, int64_t N, int64_t in, int64_t out,
                         int dx_accum) {
  if (dx) prm_sgemm(g, 0, 0, N, in, out, 1.0f, dy, out, w, in, dx_accum ? 1.0f : 0.0f, dx, in);
  if (dw) prm_sgemm(g, 1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dw, in);
}
