/* gemm-impl.h - internals of the GEMM files: the bf16 GEMM backends
 * (gemm_bf16.c), the bf16 conversion variants (bf16.c) and the per-shape
 * tuning table (gemm_tune.c) that gemm.c wires into the backend table. The
 * tests (tests/test-gemm.c) force each conversion variant through these
 * names. */
#ifndef PRM_GEMM_IMPL_H
#define PRM_GEMM_IMPL_H

#include "primus/prm_kernels.h"

/* ------------------------------------------------------------------------ */
/* bf16.c                                                                    */
/* ------------------------------------------------------------------------ */

/* prm_f32_to_bf16 with one variant forced: "avx512bf16" (vcvtne2ps2bf16),
 * "avx512", "avx2" or "plain" (NULL: this CPU's best). PRM_EINVAL, touching
 * nothing, when the CPU cannot run it. Every variant gives the same bits. */
int prm__f32_to_bf16_isa(const char *isa, prm_bf16_t *dst, const float *src, int64_t n);

/* ------------------------------------------------------------------------ */
/* gemm_bf16.c: the gemm_bf16 members of the backend table                   */
/* ------------------------------------------------------------------------ */

/* The reference twin: every operand widened to float, products (exact in
 * float) summed in double, one rounding to float at the end. */
void prm__gemm_bf16_reference(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N,
                              int64_t K, float alpha, const prm_bf16_t *A, int64_t lda,
                              const prm_bf16_t *B, int64_t ldb, float beta, float *C,
                              int64_t ldc);
#ifdef PRM_HAVE_DNNL
/* oneDNN's matmul primitive with bf16 source and weights, f32 destination. */
void prm__gemm_bf16_onednn(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const prm_bf16_t *A, int64_t lda, const prm_bf16_t *B,
                           int64_t ldb, float beta, float *C, int64_t ldc);
/* The oneDNN side of prm_gemm_packed_t: p->B (p->trans_b, N, K, ldb set)
 * into p->buf in the layout the matmul of about M rows picks (p->buf
 * reused when the size is unchanged); the GEMM on it; the release of the
 * copy (buf, md and bytes then empty). */
void prm__gemm_bf16_onednn_pack(prm_gemm_packed_t *p, int64_t M);
void prm__gemm_bf16_onednn_packed(const prm_gemm_packed_t *p, int64_t M, float alpha,
                                  const prm_bf16_t *A, int64_t lda, float beta, float *C,
                                  int64_t ldc);
void prm__gemm_bf16_onednn_unpack(prm_gemm_packed_t *p);
#endif

/* For a backend whose gemm_bf16 is NULL: A and B widened to fp32 into
 * buffers allocated for this call, then that backend's sgemm. */
void prm__gemm_bf16_widen(const prm_gemm_i *i, void *ctx, int trans_a, int trans_b, int64_t M,
                          int64_t N, int64_t K, float alpha, const prm_bf16_t *A, int64_t lda,
                          const prm_bf16_t *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* ------------------------------------------------------------------------ */
/* gemm_tune.c: the tuning table behind prm_gemm_init_tuned                  */
/* ------------------------------------------------------------------------ */

/* The ctx of a tuned prm_gemm_t: its own interface (named after the
 * default backend and the file), the default backend and its ctx, and the
 * entries sorted for lookup. */
typedef struct {
  int bf16, trans_a, trans_b;
  int64_t m, n, k;
  const prm_gemm_i *i;
} prm__tune_ent_t;

typedef struct prm__tuned {
  prm_gemm_i self;        /* g->i of the tuned handle */
  char name[96];          /* self.name: "onednn+tuned" */
  const prm_gemm_i *dflt; /* shapes the file does not list */
  void *dflt_ctx;
  prm__tune_ent_t *ent;
  int n;
} prm__tuned_t;

/* The backend for one shape: the file's entry, else the default. Never
 * allocates. */
const prm_gemm_i *prm__tuned_pick(const prm__tuned_t *t, int bf16, int trans_a, int trans_b,
                                  int64_t M, int64_t N, int64_t K);
/* Reads a tuning file (docs/benchmark.md "gemm --tune"); backend names are
 * resolved against the table. Errors name the file and line. The entries
 * are the caller's (free()). */
int prm__tune_read(const char *path, prm__tune_ent_t **ent, int *n, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* gemm_prof.c: the timing wrapper behind prm_gemm_profile                   */
/* ------------------------------------------------------------------------ */

typedef struct prm__prof prm__prof_t;
/* g's profile, or NULL when g is not wrapped. */
prm__prof_t *prm__prof_of(const prm_gemm_t *g);
/* The handle a profiled g wraps (g itself when not profiled). */
const prm_gemm_t *prm__prof_inner(const prm_gemm_t *g);
/* Unwraps a profiled g (g is then the wrapped handle) and frees the profile. */
void prm__prof_free(prm_gemm_t *g);
/* Counts a GEMM that did not go through g->i (a packed one) in g's
 * profile; a no-op when g is not profiled. */
void prm__prof_note(const prm_gemm_t *g, int bf16, int trans_a, int trans_b, int64_t M,
                    int64_t N, int64_t K, double sec);

/* ------------------------------------------------------------------------ */
/* gemm_grouped.c: the grouped GEMM                                          */
/* ------------------------------------------------------------------------ */

/* One GEMM of a batch: C (M,N) = op(A) op(B) + beta C, op(A)(i,k) at
 * A[i sam + k sak], op(B)(k,j) at B[k sbk + j sbn], C row-major (ldc).
 * beta 0 never reads C. (The reference twin needs one unit stride in each
 * of A and B, as every job of the linear layer has.) */
typedef struct {
  int64_t M, N, K;
  const float *A;
  int64_t sam, sak;
  const float *B;
  int64_t sbk, sbn;
  float *C;
  int64_t ldc;
  float beta;
} prm__gemm_job_t;

/* The n jobs in one parallel region, by the variant isa ("avx512", "avx2",
 * "plain"; NULL: this CPU's best). PRM_EINVAL, touching nothing, when the
 * CPU cannot run it. */
int prm__gemm_batch_run(const char *isa, const prm__gemm_job_t *jobs, int64_t n);
/* The reference twin: one prm__ref32_gemm per job. */
void prm__gemm_batch_ref(const prm__gemm_job_t *jobs, int64_t n);
/* The variant this CPU runs. */
const char *prm__gemm_batch_isa(void);

/* One product of the grouped linear layer (arguments as
 * prm_grouped_linear_forward/backward; out is y, dx or dw, a is x or dy, b
 * is w, or x for PRM__GG_DW) by the variant isa, or "reference" for the
 * twin. */
enum { PRM__GG_FWD, PRM__GG_DX, PRM__GG_DW };
/* 1 when prm_grouped_linear_* runs the grouped kernel for G groups of
 * `rows` rows in all on backend g (else one backend GEMM per group). */
int prm__grouped_use_kernel(const prm_gemm_t *g, int64_t rows, int64_t G);
int prm__grouped_linear_isa(const char *isa, int which, float *out, const float *a,
                            const float *b, int64_t wstride, const int32_t *off, int64_t G,
                            int64_t in, int64_t nout, int accum);

#endif
