/* test-kernels.c - the kernel harness: gradients of the double-precision
 * reference kernels by central finite differences, every fp32 kernel
 * against its double reference, every GEMM backend against the reference,
 * attention against a materialised softmax, the fused LM head against its
 * unfused chain, AdamW against a hand computation, and determinism. The
 * fused element-wise kernels (issue 9) are also checked against their fp32
 * reference twins: bit for bit where they do the same operations in the
 * same order, within a stated tolerance where they do not, and for
 * independence from the thread count.
 * PRM_BENCH=1 also prints the GFLOP/s of each GEMM backend. */
#define _GNU_SOURCE
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/kernels-impl.h"
#include "kernels/ref64.h"
#include "primus/prm_kernels.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Central differences in double: truncation error ~ eps^2 |f'''| ~ 1e-12,
 * round-off ~ 1e-16 |f| / eps ~ 1e-9 for losses of size ~10. Gradients
 * here are O(0.1..10), so |numeric - analytic| <= 1e-6 * max(|g|, 1)
 * leaves a margin of ~100x over round-off while any real mistake (a missing
 * term, a wrong sign, a wrong index) is off by O(|g|). */
#define FD_EPS 1e-6
#define FD_TOL 1e-6

typedef double (*loss_fn)(void *ctx);

static double *dalloc(int64_t n) { return prm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static float *falloc(int64_t n) { return prm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static void randn(double *x, int64_t n, prm_rng_t *r, double scale) {
  for (int64_t i = 0; i < n; i++) x[i] = scale * prm_rng_normal(r);
}

/* Random fp32 values and their exact double copy, so fp32 kernels and the
 * double reference see the same inputs. */
static void randn_pair(float *f, double *d, int64_t n, prm_rng_t *r, double scale) {
  for (int64_t i = 0; i < n; i++) {
    f[i] = (float)(scale * prm_rng_normal(r));
    d[i] = f[i];
  }
}

static double dot_d(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* Checks grad against central differences of f at every index of x when n
 * <= samples, else at `samples` random indices. */
static void fd_check(const char *what, loss_fn f, void *ctx, double *x, const double *grad,
                     int64_t n, int samples, prm_rng_t *r) {
  double worst = 0;
  int64_t worst_i = -1;
  int64_t count = n <= samples ? n : samples;
  for (int64_t s = 0; s < count; s++) {
    int64_t i = n <= samples ? s : (int64_t)(prm_rng_u64(r) % (uint64_t)n);
    double x0 = x[i];
    x[i] = x0 + FD_EPS;
    double fp = f(ctx);
    x[i] = x0 - FD_EPS;
    double fm = f(ctx);
    x[i] = x0;
    double num = (fp - fm) / (2 * FD_EPS);
    double err = fabs(num - grad[i]) / fmax(fmax(fabs(num), fabs(grad[i])), 1.0);
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  if (getenv("PRM_TEST_VERBOSE"))
    print_message("%-16s %lld points, worst finite-difference error %.2g\n", what, (long long)count,
                  worst);
  if (worst > FD_TOL)
    fail_msg("%s: finite-difference error %.3g at index %lld (analytic %.10g)", what, worst,
             (long long)worst_i, worst_i >= 0 ? grad[worst_i] : 0.0);
}

/* fp32 result against the double reference: |got - want| <= rtol (|want| +
 * max|want|), i.e. relative per element with a floor at the tensor's scale
 * (cancellation makes small elements only accurate to the big ones). */
static void assert_close(const char *what, const float *got, const double *want, int64_t n,
                         double rtol) {
  double mx = 0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) {
    double tol = rtol * (fabs(want[i]) + mx);
    if (!(fabs((double)got[i] - want[i]) <= tol))
      fail_msg("%s[%lld]: got %.9g, want %.9g (tol %.3g)", what, (long long)i, (double)got[i],
               want[i], tol);
  }
}

static void assert_close_ff(const char *what, const float *got, const float *want, int64_t n,
                            double rtol) {
  double *w = dalloc(n);
  for (int64_t i = 0; i < n; i++) w[i] = want[i];
  assert_close(what, got, w, n, rtol);
  free(w);
}

static void set_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

/* ------------------------------------------------------------------------ */
/* GEMM                                                                      */
/* ------------------------------------------------------------------------ */

static void test_gemm_init(void **state) {
  (void)state;
  const prm_gemm_i *const *list = NULL;
  int n = prm_gemm_backends(&list);
  assert_true(n >= 1);
  assert_string_equal(list[n - 1]->name, "reference");
  prm_gemm_t g;
  prm_err_t err = {0};
  assert_int_equal(prm_gemm_init(&g, NULL, &err), 0);
  assert_ptr_equal(g.i, list[0]);
  assert_int_equal(prm_gemm_init(&g, "auto", &err), 0);
  assert_ptr_equal(g.i, list[0]);
  assert_int_equal(prm_gemm_init(&g, "reference", &err), 0);
  assert_string_equal(g.i->name, "reference");
  assert_int_equal(prm_gemm_init(&g, "cublas", &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "cublas"));
  assert_non_null(strstr(err.msg, "reference"));
#ifdef PRM_HAVE_DNNL
  assert_string_equal(list[0]->name, "onednn");
#endif
}

/* One case: every backend against the double reference, with strides
 * wider than the rows, padding that must stay untouched, and beta = 0 on a
 * NaN-filled C (which must not be read). */
static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                      prm_rng_t *r) {
  int64_t arows = ta ? K : M, acols = ta ? M : K, lda = acols + 3;
  int64_t brows = tb ? N : K, bcols = tb ? K : N, ldb = bcols + 2;
  int64_t ldc = N + 5;
  float *A = falloc(arows * lda), *B = falloc(brows * ldb), *C0 = falloc(M * ldc),
        *C = falloc(M * ldc);
  double *Ad = dalloc(arows * lda), *Bd = dalloc(brows * ldb), *Cd = dalloc(M * ldc);
  randn_pair(A, Ad, arows * lda, r, 1);
  randn_pair(B, Bd, brows * ldb, r, 1);
  randn_pair(C0, Cd, M * ldc, r, 1);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = N; j < ldc; j++) C0[i * ldc + j] = 1234.5f;
  if (beta == 0)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C0[i * ldc + j] = NAN;
  prm_ref64_gemm(ta, tb, M, N, K, alpha, Ad, lda, Bd, ldb, beta, Cd, ldc);
  double *want = dalloc(M * N);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) want[i * N + j] = Cd[i * ldc + j];
  float *got = falloc(M * N);

  const prm_gemm_i *const *list = NULL;
  int nb = prm_gemm_backends(&list);
  for (int b = 0; b < nb; b++) {
    if (!list[b]->available()) continue;
    prm_gemm_t g = {list[b], NULL};
    memcpy(C, C0, (size_t)(M * ldc) * sizeof(float));
    prm_sgemm(&g, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    for (int64_t i = 0; i < M; i++) {
      memcpy(got + i * N, C + i * ldc, (size_t)N * sizeof(float));
      for (int64_t j = N; j < ldc; j++) assert_true(C[i * ldc + j] == 1234.5f);
    }
    char what[96];
    snprintf(what, sizeof what, "%s ta=%d tb=%d beta=%g", list[b]->name, ta, tb, (double)beta);
    assert_close(what, got, want, M * N, 1e-5);
  }
  free(A), free(B), free(C0), free(C), free(Ad), free(Bd), free(Cd), free(want), free(got);
}

static void test_gemm_backends(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 1);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      gemm_case(ta, tb, 37, 53, 29, 1.0f, 0.0f, &r);
      gemm_case(ta, tb, 37, 53, 29, 0.7f, 0.3f, &r);
      gemm_case(ta, tb, 5, 300, 3, 1.0f, 1.0f, &r); /* N over one column block */
      gemm_case(ta, tb, 1, 1, 1, 2.0f, 0.5f, &r);
    }
}

static void test_gemm_deterministic(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 2);
  int64_t M = 67, N = 71, K = 130;
  float *A = falloc(M * K), *B = falloc(K * N), *C1 = falloc(M * N), *C2 = falloc(M * N);
  double *tmp = dalloc(M * K + K * N);
  randn_pair(A, tmp, M * K, &r, 1);
  randn_pair(B, tmp, K * N, &r, 1);
  const prm_gemm_i *const *list = NULL;
  int nb = prm_gemm_backends(&list);
  for (int b = 0; b < nb; b++) {
    prm_gemm_t g = {list[b], NULL};
    prm_sgemm(&g, 0, 1, M, N, K, 1, A, K, B, K, 0, C1, N);
    prm_sgemm(&g, 0, 1, M, N, K, 1, A, K, B, K, 0, C2, N);
    assert_memory_equal(C1, C2, (size_t)(M * N) * sizeof(float));
  }
  free(A), free(B), free(C1), free(C2), free(tmp);
}

/* Not a check: PRM_BENCH=1 prints GFLOP/s per backend on 512^3. */
static void test_gemm_speed(void **state) {
  (void)state;
  if (!getenv("PRM_BENCH")) return;
  int64_t n = 512;
  float *A = falloc(n * n), *B = falloc(n * n), *C = falloc(n * n);
  for (int64_t i = 0; i < n * n; i++) A[i] = B[i] = (float)(i % 7) * 0.1f;
  const prm_gemm_i *const *list = NULL;
  int nb = prm_gemm_backends(&list);
  int maxt = prm_kernels_threads();
  for (int b = 0; b < nb; b++)
    for (int t = 1; t <= maxt; t *= 2) {
      set_threads(t);
      prm_gemm_t g = {list[b], NULL};
      prm_sgemm(&g, 0, 0, n, n, n, 1, A, n, B, n, 0, C, n); /* warm up */
      int reps = 0;
      double t0 = prm_time_now(), el;
      do {
        prm_sgemm(&g, 0, 0, n, n, n, 1, A, n, B, n, 0, C, n);
        reps++;
        el = prm_time_now() - t0;
      } while (el < 0.5);
      print_message("gemm %-10s %d thread(s): %.1f GFLOP/s\n", list[b]->name, t,
                    2.0 * n * n * n * reps / el * 1e-9);
    }
  set_threads(maxt);
  free(A), free(B), free(C);
}

/* ------------------------------------------------------------------------ */
/* Linear                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
  double *x, *w, *y, *r;
  int64_t N, in, out;
} linear_ctx;

static double linear_loss(void *p) {
  linear_ctx *c = p;
  prm_ref64_linear_forward(c->y, c->x, c->w, c->N, c->in, c->out);
  return dot_d(c->y, c->r, c->N * c->out);
}

static void test_linear(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 3);
  int64_t N = 7, in = 11, out = 5;
  linear_ctx c = {dalloc(N * in), dalloc(out * in), dalloc(N * out), dalloc(N * out), N, in, out};
  randn(c.x, N * in, &r, 1);
  randn(c.w, out * in, &r, 1);
  randn(c.r, N * out, &r, 1);
  double *dx = dalloc(N * in), *dw = dalloc(out * in);
  prm_ref64_linear_backward(dx, dw, c.r, c.x, c.w, N, in, out, 0);
  fd_check("linear dx", linear_loss, &c, c.x, dx, N * in, 1000, &r);
  fd_check("linear dw", linear_loss, &c, c.w, dw, out * in, 1000, &r);

  /* fp32, through the default backend, with accumulation. */
  prm_gemm_t g;
  assert_int_equal(prm_gemm_init(&g, NULL, NULL), 0);
  float *xf = falloc(N * in), *wf = falloc(out * in), *dyf = falloc(N * out), *yf = falloc(N * out),
        *dxf = falloc(N * in), *dwf = falloc(out * in);
  double *dy = dalloc(N * out);
  randn_pair(xf, c.x, N * in, &r, 1);
  randn_pair(wf, c.w, out * in, &r, 1);
  randn_pair(dyf, dy, N * out, &r, 1);
  randn_pair(dxf, dx, N * in, &r, 1);
  randn_pair(dwf, dw, out * in, &r, 1);
  prm_linear_forward(&g, yf, xf, wf, N, in, out);
  prm_ref64_linear_forward(c.y, c.x, c.w, N, in, out);
  assert_close("linear y", yf, c.y, N * out, 1e-5);
  prm_linear_backward(&g, dxf, dwf, dyf, xf, wf, N, in, out, 1);
  prm_ref64_linear_backward(dx, dw, dy, c.x, c.w, N, in, out, 1);
  assert_close("linear dx (accum)", dxf, dx, N * in, 1e-5);
  assert_close("linear dw", dwf, dw, out * in, 1e-5);
  prm_linear_backward(&g, dxf, NULL, dyf, xf, wf, N, in, out, 0);
  prm_ref64_linear_backward(dx, NULL, dy, c.x, c.w, N, in, out, 0);
  assert_close("linear dx", dxf, dx, N * in, 1e-5);

  free(c.x), free(c.w), free(c.y), free(c.r), free(dx), free(dw), free(dy);
  free(xf), free(wf), free(dyf), free(yf), free(dxf), free(dwf);
}

/* ------------------------------------------------------------------------ */
/* Embedding                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
  double *wte, *out, *r;
  const int32_t *tok;
  int64_t N, C;
} emb_ctx;

static double emb_loss(void *p) {
  emb_ctx *c = p;
  prm_ref64_embedding_forward(c->out, c->tok, c->wte, c->N, c->C);
  return dot_d(c->out, c->r, c->N * c->C);
}

static void test_embedding(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 4);
  int64_t V = 9, C = 70, N = 12; /* C spans two column blocks */
  static const int32_t tok[12] = {3, 1, 3, 8, 0, 3, 5, 1, 7, 2, 3, 6};
  emb_ctx c = {dalloc(V * C), dalloc(N * C), dalloc(N * C), tok, N, C};
  randn(c.wte, V * C, &r, 1);
  randn(c.r, N * C, &r, 1);
  double *dwte = dalloc(V * C);
  prm_ref64_embedding_backward(dwte, c.r, tok, N, C);
  fd_check("embedding dwte", emb_loss, &c, c.wte, dwte, V * C, 1000, &r);

  float *wf = falloc(V * C), *of = falloc(N * C), *df = falloc(N * C), *dwf = falloc(V * C);
  randn_pair(wf, c.wte, V * C, &r, 1);
  randn_pair(df, c.r, N * C, &r, 1);
  randn_pair(dwf, dwte, V * C, &r, 1);
  prm_embedding_forward(of, tok, wf, N, C);
  prm_ref64_embedding_forward(c.out, tok, c.wte, N, C);
  assert_close("embedding out", of, c.out, N * C, 0);
  prm_embedding_backward(dwf, df, tok, N, C);
  prm_ref64_embedding_backward(dwte, c.r, tok, N, C);
  assert_close("embedding dwte", dwf, dwte, V * C, 1e-6);
  free(c.wte), free(c.out), free(c.r), free(dwte), free(wf), free(of), free(df), free(dwf);
}

/* ------------------------------------------------------------------------ */
/* RMSNorm                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
  double *x, *w, *out, *rstd, *r;
  int64_t N, C;
} rms_ctx;

static double rms_loss(void *p) {
  rms_ctx *c = p;
  prm_ref64_rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, 1e-5);
  return dot_d(c->out, c->r, c->N * c->C);
}

static void test_rmsnorm(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 5);
  int64_t N = 6, C = 67;
  rms_ctx c = {dalloc(N * C), dalloc(C), dalloc(N * C), dalloc(N), dalloc(N * C), N, C};
  randn(c.x, N * C, &r, 1);
  for (int64_t i = 0; i < C; i++) c.w[i] = 1 + 0.3 * prm_rng_normal(&r);
  randn(c.r, N * C, &r, 1);
  double *dx = dalloc(N * C), *dw = dalloc(C);
  rms_loss(&c);
  for (int64_t n = 0; n < N; n++) {
    double ss = dot_d(c.x + n * C, c.x + n * C, C);
    assert_true(fabs(c.rstd[n] - 1 / sqrt(ss / C + 1e-5)) < 1e-14);
  }
  prm_ref64_rmsnorm_backward(dx, dw, c.r, c.x, c.w, c.rstd, N, C);
  fd_check("rmsnorm dx", rms_loss, &c, c.x, dx, N * C, 1000, &r);
  fd_check("rmsnorm dw", rms_loss, &c, c.w, dw, C, 1000, &r);

  float *xf = falloc(N * C), *wf = falloc(C), *of = falloc(N * C), *rf = falloc(N),
        *df = falloc(N * C), *dxf = falloc(N * C), *dwf = falloc(C);
  randn_pair(xf, c.x, N * C, &r, 2);
  randn_pair(wf, c.w, C, &r, 1);
  randn_pair(df, c.r, N * C, &r, 1);
  randn_pair(dxf, dx, N * C, &r, 1); /* both outputs accumulate */
  randn_pair(dwf, dw, C, &r, 1);
  prm_rmsnorm_forward(of, rf, xf, wf, N, C, 1e-5f);
  prm_ref64_rmsnorm_forward(c.out, c.rstd, c.x, c.w, N, C, (double)1e-5f);
  assert_close("rmsnorm out", of, c.out, N * C, 1e-6);
  assert_close("rmsnorm rstd", rf, c.rstd, N, 1e-6);
  prm_rmsnorm_backward(dxf, dwf, df, xf, wf, rf, N, C);
  prm_ref64_rmsnorm_backward(dx, dw, c.r, c.x, c.w, c.rstd, N, C);
  assert_close("rmsnorm dx", dxf, dx, N * C, 1e-5);
  assert_close("rmsnorm dw", dwf, dw, C, 1e-5);
  free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.r), free(dx), free(dw);
  free(xf), free(wf), free(of), free(rf), free(df), free(dxf), free(dwf);
}

/* ------------------------------------------------------------------------ */
/* RoPE                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct {
  double *x, *tmp, *r, *cos_t, *sin_t;
  int64_t B, T, nh, D, pos0;
} rope_ctx;

static double rope_loss(void *p) {
  rope_ctx *c = p;
  int64_t n = c->B * c->T * c->nh * c->D;
  memcpy(c->tmp, c->x, (size_t)n * sizeof(double));
  prm_ref64_rope_forward(c->tmp, c->cos_t, c->sin_t, c->B, c->T, c->nh, c->D, c->pos0);
  return dot_d(c->tmp, c->r, n);
}

static void test_rope(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 6);
  int64_t B = 2, T = 5, nh = 3, D = 8, pos0 = 4, TT = T + pos0, n = B * T * nh * D;
  rope_ctx c = {dalloc(n), dalloc(n), dalloc(n), dalloc(TT * D / 2), dalloc(TT * D / 2),
                B, T, nh, D, pos0};
  prm_ref64_rope_tables(c.cos_t, c.sin_t, TT, D, 10000.0);
  float *cf = falloc(TT * D / 2), *sf = falloc(TT * D / 2);
  prm_rope_tables(cf, sf, TT, D, 10000.0);
  for (int64_t t = 0; t < TT; t++)
    for (int64_t i = 0; i < D / 2; i++) {
      double ang = (double)t * pow(10000.0, -2.0 * (double)i / (double)D);
      assert_true(c.cos_t[t * D / 2 + i] == cos(ang) && c.sin_t[t * D / 2 + i] == sin(ang));
      assert_true(cf[t * D / 2 + i] == (float)cos(ang) && sf[t * D / 2 + i] == (float)sin(ang));
    }
  randn(c.x, n, &r, 1);
  randn(c.r, n, &r, 1);
  double *dx = dalloc(n);
  memcpy(dx, c.r, (size_t)n * sizeof(double));
  prm_ref64_rope_backward(dx, c.cos_t, c.sin_t, B, T, nh, D, pos0);
  fd_check("rope dx", rope_loss, &c, c.x, dx, n, 1000, &r);

  /* The convention: HF rotate-half at one hand-computed element. */
  rope_loss(&c);
  {
    int64_t t = 2, h = 1, i = 1, row = ((1 * T + t) * nh + h) * D;
    double ang = (double)(pos0 + t) * pow(10000.0, -2.0 * (double)i / (double)D);
    double x1 = c.x[row + i], x2 = c.x[row + i + D / 2];
    assert_true(fabs(c.tmp[row + i] - (x1 * cos(ang) - x2 * sin(ang))) < 1e-14);
    assert_true(fabs(c.tmp[row + i + D / 2] - (x2 * cos(ang) + x1 * sin(ang))) < 1e-14);
  }

  float *xf = falloc(n), *x0 = falloc(n);
  randn_pair(xf, c.x, n, &r, 1);
  memcpy(x0, xf, (size_t)n * sizeof(float));
  for (int64_t i = 0; i < TT * D / 2; i++) c.cos_t[i] = cf[i], c.sin_t[i] = sf[i];
  prm_rope_forward(xf, cf, sf, B, T, nh, D, pos0);
  prm_ref64_rope_forward(c.x, c.cos_t, c.sin_t, B, T, nh, D, pos0);
  assert_close("rope forward", xf, c.x, n, 1e-6);
  prm_rope_backward(xf, cf, sf, B, T, nh, D, pos0);
  prm_ref64_rope_backward(c.x, c.cos_t, c.sin_t, B, T, nh, D, pos0);
  assert_close("rope backward", xf, c.x, n, 1e-6);
  assert_close_ff("rope round trip", xf, x0, n, 1e-6);
  free(c.x), free(c.tmp), free(c.r), free(c.cos_t), free(c.sin_t), free(dx);
  free(cf), free(sf), free(xf), free(x0);
}

/* ------------------------------------------------------------------------ */
/* SwiGLU and add                                                            */
/* ------------------------------------------------------------------------ */

typedef struct {
  double *gate, *up, *h, *r;
  int64_t n;
} swiglu_ctx;

static double swiglu_loss(void *p) {
  swiglu_ctx *c = p;
  prm_ref64_swiglu_forward(c->h, c->gate, c->up, c->n);
  return dot_d(c->h, c->r, c->n);
}

static void test_swiglu(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 7);
  int64_t n = 300;
  swiglu_ctx c = {dalloc(n), dalloc(n), dalloc(n), dalloc(n), n};
  randn(c.gate, n, &r, 3);
  randn(c.up, n, &r, 1);
  randn(c.r, n, &r, 1);
  double *dg = dalloc(n), *du = dalloc(n);
  prm_ref64_swiglu_backward(dg, du, c.r, c.gate, c.up, n);
  fd_check("swiglu dgate", swiglu_loss, &c, c.gate, dg, n, 1000, &r);
  fd_check("swiglu dup", swiglu_loss, &c, c.up, du, n, 1000, &r);

  float *gf = falloc(n), *uf = falloc(n), *hf = falloc(n), *dhf = falloc(n), *dgf = falloc(n),
        *duf = falloc(n);
  randn_pair(gf, c.gate, n, &r, 3);
  randn_pair(uf, c.up, n, &r, 1);
  randn_pair(dhf, c.r, n, &r, 1);
  gf[0] = -100.0f, c.gate[0] = -100.0; /* exp overflow side */
  gf[1] = 100.0f, c.gate[1] = 100.0;
  prm_swiglu_forward(hf, gf, uf, n);
  prm_ref64_swiglu_forward(c.h, c.gate, c.up, n);
  assert_close("swiglu h", hf, c.h, n, 1e-6);
  prm_swiglu_backward(dgf, duf, dhf, gf, uf, n);
  prm_ref64_swiglu_backward(dg, du, c.r, c.gate, c.up, n);
  assert_close("swiglu dgate", dgf, dg, n, 1e-6);
  assert_close("swiglu dup", duf, du, n, 1e-6);

  prm_add(hf, gf, uf, n); /* y aliasing a is allowed too */
  prm_add(gf, gf, uf, n);
  assert_memory_equal(hf, gf, (size_t)n * sizeof(float));
  assert_true(hf[5] == (float)c.gate[5] + (float)c.up[5]);
  free(c.gate), free(c.up), free(c.h), free(c.r), free(dg), free(du);
  free(gf), free(uf), free(hf), free(dhf), free(dgf), free(duf);
}

/* ------------------------------------------------------------------------ */
/* Attention                                                                 */
/* ------------------------------------------------------------------------ */

enum { AB = 2, AT = 13, AH = 6, AG = 2, AD = 8 };
#define AQN ((int64_t)AB * AT * AH * AD)
#define AKN ((int64_t)AB * AT * AG * AD)
#define ALN ((int64_t)AB * AH * AT)

typedef struct {
  double *q, *k, *v, *out, *lse, *r;
} attn_ctx;

static double attn_loss(void *p) {
  attn_ctx *c = p;
  prm_ref64_attention_forward(c->out, c->lse, c->q, c->k, c->v, AB, AT, AH, AG, AD);
  return dot_d(c->out, c->r, AQN);
}

/* Materialised causal softmax in double, the textbook definition. */
static void attn_naive(double *out, double *lse, const float *q, const float *k, const float *v) {
  double s[AT];
  for (int b = 0; b < AB; b++)
    for (int h = 0; h < AH; h++)
      for (int i = 0; i < AT; i++) {
        int g = h / (AH / AG);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
          s[j] = 0;
          for (int d = 0; d < AD; d++)
            s[j] += (double)q[((b * AT + i) * AH + h) * AD + d] * k[((b * AT + j) * AG + g) * AD + d];
          s[j] /= sqrt((double)AD);
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
        for (int d = 0; d < AD; d++) {
          double acc = 0;
          for (int j = 0; j <= i; j++)
            acc += exp(s[j] - mx) / sum * v[((b * AT + j) * AG + g) * AD + d];
          out[((b * AT + i) * AH + h) * AD + d] = acc;
        }
        lse[(b * AH + h) * AT + i] = mx + log(sum);
      }
}

static void test_attention_grad(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 8);
  attn_ctx c = {dalloc(AQN), dalloc(AKN), dalloc(AKN), dalloc(AQN), dalloc(ALN), dalloc(AQN)};
  randn(c.q, AQN, &r, 1);
  randn(c.k, AKN, &r, 1);
  randn(c.v, AKN, &r, 1);
  randn(c.r, AQN, &r, 1);
  double *dq = dalloc(AQN), *dk = dalloc(AKN), *dv = dalloc(AKN);
  attn_loss(&c);
  prm_ref64_attention_backward(dq, dk, dv, c.r, c.q, c.k, c.v, c.out, c.lse, AB, AT, AH, AG, AD);
  fd_check("attention dq", attn_loss, &c, c.q, dq, AQN, 300, &r);
  fd_check("attention dk", attn_loss, &c, c.k, dk, AKN, 300, &r);
  fd_check("attention dv", attn_loss, &c, c.v, dv, AKN, 300, &r);
  free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.r), free(dq), free(dk), free(dv);
}

/* The fp32 attention is blocked (32 queries x 64 keys) and vectorised in
 * 32-, 16- and 1-lane pieces of the head size; these shapes cross every
 * block boundary and take every piece (D = 64, 50 = 32+16+2, 128), plus a
 * head size above the fast path's limit (the reference then runs). */
static void test_attention_fast_shapes(void **state) {
  (void)state;
  const int64_t shapes[][5] = {/* B, T, H, G, D */
                               {1, 70, 4, 2, 64},
                               {2, 33, 2, 1, 50},
                               {1, 130, 2, 2, 128},
                               {1, 5, 2, 1, 300}};
  prm_rng_t r;
  prm_rng_seed(&r, 21);
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int64_t B = shapes[si][0], T = shapes[si][1], H = shapes[si][2], G = shapes[si][3],
            D = shapes[si][4];
    int64_t nq = B * T * H * D, nk = B * T * G * D, nl = B * H * T;
    float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *o = falloc(nq), *l = falloc(nl),
          *dout = falloc(nq), *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
    double *qd = dalloc(nq), *kd = dalloc(nk), *vd = dalloc(nk), *od = dalloc(nq),
           *ld = dalloc(nl), *doutd = dalloc(nq), *dqd = dalloc(nq), *dkd = dalloc(nk),
           *dvd = dalloc(nk);
    randn_pair(q, qd, nq, &r, 1);
    randn_pair(k, kd, nk, &r, 1);
    randn_pair(v, vd, nk, &r, 1);
    randn_pair(dout, doutd, nq, &r, 1);
    prm_attention_forward(o, l, q, k, v, B, T, H, G, D);
    prm_ref64_attention_forward(od, ld, qd, kd, vd, B, T, H, G, D);
    assert_close("fast attention out", o, od, nq, 1e-5);
    assert_close("fast attention lse", l, ld, nl, 1e-5);
    prm_attention_backward(dq, dk, dv, dout, q, k, v, o, l, B, T, H, G, D);
    prm_ref64_attention_backward(dqd, dkd, dvd, doutd, qd, kd, vd, od, ld, B, T, H, G, D);
    assert_close("fast attention dq", dq, dqd, nq, 1e-5);
    assert_close("fast attention dk", dk, dkd, nk, 1e-5);
    assert_close("fast attention dv", dv, dvd, nk, 1e-5);
    /* A prefill through the decode path equals the forward. */
    float *dec = falloc(T * H * D);
    prm_attention_decode(dec, q, k, v, T, T, H, G, D);
    assert_close_ff("fast attention decode", dec, o, T * H * D, 1e-6);
    free(dec);
    free(q), free(k), free(v), free(o), free(l), free(dout), free(dq), free(dk), free(dv);
    free(qd), free(kd), free(vd), free(od), free(ld), free(doutd), free(dqd), free(dkd), free(dvd);
  }
}

static void test_attention_fp32(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 9);
  float *q = falloc(AQN), *k = falloc(AKN), *v = falloc(AKN), *out = falloc(AQN),
        *lse = falloc(ALN), *dout = falloc(AQN), *dq = falloc(AQN), *dk = falloc(AKN),
        *dv = falloc(AKN);
  double *qd = dalloc(AQN), *kd = dalloc(AKN), *vd = dalloc(AKN), *outd = dalloc(AQN),
         *lsed = dalloc(ALN), *doutd = dalloc(AQN), *dqd = dalloc(AQN), *dkd = dalloc(AKN),
         *dvd = dalloc(AKN);
  randn_pair(q, qd, AQN, &r, 2); /* peaky enough that the running max moves */
  randn_pair(k, kd, AKN, &r, 2);
  randn_pair(v, vd, AKN, &r, 1);
  randn_pair(dout, doutd, AQN, &r, 1);

  prm_attention_forward(out, lse, q, k, v, AB, AT, AH, AG, AD);
  attn_naive(outd, lsed, q, k, v);
  assert_close("attention out vs naive", out, outd, AQN, 1e-5);
  assert_close("attention lse vs naive", lse, lsed, ALN, 1e-5);

  prm_ref64_attention_forward(outd, lsed, qd, kd, vd, AB, AT, AH, AG, AD);
  assert_close("attention out", out, outd, AQN, 1e-5);
  assert_close("attention lse", lse, lsed, ALN, 1e-5);
  /* Outputs are overwritten: start from garbage. */
  for (int64_t i = 0; i < AKN; i++) dk[i] = dv[i] = 7.0f;
  prm_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, AB, AT, AH, AG, AD);
  prm_ref64_attention_backward(dqd, dkd, dvd, doutd, qd, kd, vd, outd, lsed, AB, AT, AH, AG, AD);
  assert_close("attention dq", dq, dqd, AQN, 1e-5);
  assert_close("attention dk", dk, dkd, AKN, 1e-5);
  assert_close("attention dv", dv, dvd, AKN, 1e-5);

  /* Determinism: bit-identical on a second run. */
  float *dq2 = falloc(AQN), *dk2 = falloc(AKN), *dv2 = falloc(AKN), *out2 = falloc(AQN),
        *lse2 = falloc(ALN);
  prm_attention_forward(out2, lse2, q, k, v, AB, AT, AH, AG, AD);
  assert_memory_equal(out, out2, (size_t)AQN * sizeof(float));
  assert_memory_equal(lse, lse2, (size_t)ALN * sizeof(float));
  prm_attention_backward(dq2, dk2, dv2, dout, q, k, v, out, lse, AB, AT, AH, AG, AD);
  assert_memory_equal(dq, dq2, (size_t)AQN * sizeof(float));
  assert_memory_equal(dk, dk2, (size_t)AKN * sizeof(float));
  assert_memory_equal(dv, dv2, (size_t)AKN * sizeof(float));

  /* Decode: the last Tq queries of sequence 1 against its whole cache give
   * the forward's last rows; Tq = Tk is a prefill. */
  for (int64_t Tq = 1; Tq <= AT; Tq += AT - 1) {
    float *od = falloc(Tq * AH * AD);
    int64_t first = (1 * AT + (AT - Tq)) * AH * AD;
    prm_attention_decode(od, q + first, k + AT * AG * AD, v + AT * AG * AD, Tq, AT, AH, AG, AD);
    assert_close_ff("attention decode", od, out + first, Tq * AH * AD, 1e-6);
    free(od);
  }
  {
    int64_t Tq = 4, Tk = 9; /* cache holding the first 9 positions of sequence 0 */
    float *od = falloc(Tq * AH * AD), *o9 = falloc(Tk * AH * AD), *l9 = falloc(AH * Tk);
    float *q9 = falloc(Tk * AH * AD), *k9 = falloc(Tk * AG * AD), *v9 = falloc(Tk * AG * AD);
    memcpy(q9, q, (size_t)(Tk * AH * AD) * sizeof(float));
    memcpy(k9, k, (size_t)(Tk * AG * AD) * sizeof(float));
    memcpy(v9, v, (size_t)(Tk * AG * AD) * sizeof(float));
    prm_attention_forward(o9, l9, q9, k9, v9, 1, Tk, AH, AG, AD);
    prm_attention_decode(od, q9 + (Tk - Tq) * AH * AD, k9, v9, Tq, Tk, AH, AG, AD);
    assert_close_ff("attention decode 4/9", od, o9 + (Tk - Tq) * AH * AD, Tq * AH * AD, 1e-6);
    /* The fp32 forward on the truncated sequence matches the first rows of
     * the full one (causality). */
    for (int64_t t = 0; t < Tk; t++)
      assert_close_ff("attention causal prefix", o9 + t * AH * AD, out + t * AH * AD, AH * AD,
                      1e-6);
    free(od), free(o9), free(l9), free(q9), free(k9), free(v9);
  }

  free(q), free(k), free(v), free(out), free(lse), free(dout), free(dq), free(dk), free(dv);
  free(qd), free(kd), free(vd), free(outd), free(lsed), free(doutd), free(dqd), free(dkd), free(dvd);
  free(dq2), free(dk2), free(dv2), free(out2), free(lse2);
}

/* ------------------------------------------------------------------------ */
/* Cross-entropy                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
  double *logits, *losses;
  const int32_t *tg;
  int64_t N, V;
  double s;
} xent_ctx;

static double xent_loss(void *p) {
  xent_ctx *c = p;
  return c->s * prm_ref64_xent_forward(c->losses, c->logits, c->tg, c->N, c->V);
}

/* ---- Packed sequences: segment ids and restarted RoPE positions ---- */

typedef struct {
  double *q, *k, *v, *out, *lse, *r;
  const int32_t *seg;
} seg_ctx;

/* Segments of the attention shape: runs of 4, 1, 5, 3 in sequence 0 and 13
 * in sequence 1 (one segment: plain causal). */
static const int32_t seg_ids[AB * AT] = {0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 3, 3, 3,
                                         7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};

static double seg_loss(void *p) {
  seg_ctx *c = p;
  prm_ref64_attention_forward_seg(c->out, c->lse, c->q, c->k, c->v, c->seg, AB, AT, AH, AG, AD);
  return dot_d(c->out, c->r, AQN);
}

/* The reference with segments: finite differences of its backward, and
 * each segment's rows equal plain causal attention over the segment alone. */
static void test_attention_seg_grad(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 18);
  seg_ctx c = {dalloc(AQN), dalloc(AKN), dalloc(AKN), dalloc(AQN), dalloc(ALN), dalloc(AQN),
               seg_ids};
  randn(c.q, AQN, &r, 1);
  randn(c.k, AKN, &r, 1);
  randn(c.v, AKN, &r, 1);
  randn(c.r, AQN, &r, 1);
  double *dq = dalloc(AQN), *dk = dalloc(AKN), *dv = dalloc(AKN);
  seg_loss(&c);
  prm_ref64_attention_backward_seg(dq, dk, dv, c.r, c.q, c.k, c.v, c.out, c.lse, seg_ids, AB, AT,
                                   AH, AG, AD);
  fd_check("segment attention dq", seg_loss, &c, c.q, dq, AQN, 300, &r);
  fd_check("segment attention dk", seg_loss, &c, c.k, dk, AKN, 300, &r);
  fd_check("segment attention dv", seg_loss, &c, c.v, dv, AKN, 300, &r);
  seg_loss(&c); /* out at the unperturbed inputs again */
  /* Segment [4, 5) of sequence 0 sees only itself: out = v of its row. */
  for (int h = 0; h < AH; h++)
    for (int d = 0; d < AD; d++)
      assert_true(fabs(c.out[(4 * AH + h) * AD + d] - c.v[(4 * AG + h / (AH / AG)) * AD + d]) <
                  1e-12);
  /* Segment [5, 10) alone, as a sequence of its own, gives the same rows. */
  int64_t n = 5, qn = n * AH * AD, kn = n * AG * AD;
  double *o1 = dalloc(qn), *l1 = dalloc(AH * n);
  prm_ref64_attention_forward(o1, l1, c.q + 5 * AH * AD, c.k + 5 * AG * AD, c.v + 5 * AG * AD, 1,
                              n, AH, AG, AD);
  for (int64_t i = 0; i < qn; i++) assert_true(fabs(o1[i] - c.out[5 * AH * AD + i]) < 1e-12);
  (void)kn;
  /* The last sequence is one segment: the plain causal result. */
  double *o2 = dalloc(AQN), *l2 = dalloc(ALN);
  prm_ref64_attention_forward(o2, l2, c.q, c.k, c.v, AB, AT, AH, AG, AD);
  for (int64_t i = AQN / 2; i < AQN; i++) assert_true(o2[i] == c.out[i]);
  free(o1), free(l1), free(o2), free(l2);
  free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.r), free(dq), free(dk), free(dv);
}

/* The fast kernels with segments against the double reference, on shapes
 * whose segments start inside and across the 32-query and 64-key blocks
 * (and one longer than a key block), plus the fallback head size. */
static void test_attention_seg_fast(void **state) {
  (void)state;
  const int64_t shapes[][5] = {/* B, T, H, G, D */
                               {2, 150, 4, 2, 64},
                               {1, 97, 2, 1, 50},
                               {1, 9, 2, 1, 300}};
  prm_rng_t r;
  prm_rng_seed(&r, 23);
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int64_t B = shapes[si][0], T = shapes[si][1], H = shapes[si][2], G = shapes[si][3],
            D = shapes[si][4];
    int64_t nq = B * T * H * D, nk = B * T * G * D, nl = B * H * T;
    int32_t *seg = prm_xcalloc((size_t)(B * T), sizeof *seg);
    /* Segment lengths 1 .. 80 from the stream; the tail is one more. */
    for (int64_t b = 0; b < B; b++) {
      int32_t id = 0;
      for (int64_t t = 0, left = 0; t < T; t++, left--) {
        if (left <= 0) {
          left = 1 + (int64_t)(prm_rng_u64(&r) % 80);
          id++;
        }
        seg[b * T + t] = id;
      }
    }
    float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *o = falloc(nq), *l = falloc(nl),
          *dout = falloc(nq), *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
    double *qd = dalloc(nq), *kd = dalloc(nk), *vd = dalloc(nk), *od = dalloc(nq),
           *ld = dalloc(nl), *doutd = dalloc(nq), *dqd = dalloc(nq), *dkd = dalloc(nk),
           *dvd = dalloc(nk);
    randn_pair(q, qd, nq, &r, 1);
    randn_pair(k, kd, nk, &r, 1);
    randn_pair(v, vd, nk, &r, 1);
    randn_pair(dout, doutd, nq, &r, 1);
    prm_attention_forward_seg(o, l, q, k, v, seg, B, T, H, G, D);
    prm_ref64_attention_forward_seg(od, ld, qd, kd, vd, seg, B, T, H, G, D);
    assert_close("segment attention out", o, od, nq, 1e-5);
    assert_close("segment attention lse", l, ld, nl, 1e-5);
    for (int64_t i = 0; i < nk; i++) dk[i] = dv[i] = 7.0f; /* overwritten */
    prm_attention_backward_seg(dq, dk, dv, dout, q, k, v, o, l, seg, B, T, H, G, D);
    prm_ref64_attention_backward_seg(dqd, dkd, dvd, doutd, qd, kd, vd, od, ld, seg, B, T, H, G, D);
    assert_close("segment attention dq", dq, dqd, nq, 1e-5);
    assert_close("segment attention dk", dk, dkd, nk, 1e-5);
    assert_close("segment attention dv", dv, dvd, nk, 1e-5);
    /* NULL segments are the plain causal kernel, bit for bit. */
    float *o2 = falloc(nq), *l2 = falloc(nl);
    prm_attention_forward_seg(o2, l2, q, k, v, NULL, B, T, H, G, D);
    prm_attention_forward(o, l, q, k, v, B, T, H, G, D);
    assert_memory_equal(o, o2, (size_t)nq * sizeof(float));
    free(o2), free(l2), free(seg);
    free(q), free(k), free(v), free(o), free(l), free(dout), free(dq), free(dk), free(dv);
    free(qd), free(kd), free(vd), free(od), free(ld), free(doutd), free(dqd), free(dkd), free(dvd);
  }
}

/* RoPE with a position per row equals the pos0 form row by row, and the
 * backward undoes the forward. */
static void test_rope_pos(void **state) {
  (void)state;
  enum { B = 2, T = 7, NH = 3, D = 40, TT = 16 };
  float cs[TT * D / 2], sn[TT * D / 2];
  prm_rope_tables(cs, sn, TT, D, 10000.0);
  const int32_t pos[B * T] = {0, 1, 2, 0, 1, 0, 1, 3, 4, 5, 6, 7, 0, 15};
  prm_rng_t r;
  prm_rng_seed(&r, 31);
  float x[B * T * NH * D], y[B * T * NH * D], one[NH * D];
  for (int i = 0; i < B * T * NH * D; i++) x[i] = y[i] = (float)prm_rng_normal(&r);
  prm_rope_forward_pos(y, cs, sn, B, T, NH, D, pos);
  for (int i = 0; i < B * T; i++) {
    memcpy(one, x + i * NH * D, sizeof one);
    prm_rope_forward(one, cs, sn, 1, 1, NH, D, pos[i]);
    assert_memory_equal(one, y + i * NH * D, sizeof one);
  }
  prm_rope_backward_pos(y, cs, sn, B, T, NH, D, pos);
  assert_close_ff("rope pos round trip", y, x, B * T * NH * D, 1e-6);
}

static void test_xent(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 10);
  enum { N = 9, V = 31 };
  static const int32_t tg[N] = {3, -1, 30, 0, 7, -100, 7, 12, 29};
  xent_ctx c = {dalloc(N * V), dalloc(N), tg, N, V, 0.37};
  randn(c.logits, N * V, &r, 3);
  double *dl = dalloc(N * V);
  prm_ref64_xent_backward(dl, c.logits, tg, N, V, 0.37);
  fd_check("xent dlogits", xent_loss, &c, c.logits, dl, N * V, 1000, &r);
  /* Per-row losses against the definition. */
  double total = prm_ref64_xent_forward(c.losses, c.logits, tg, N, V), sum = 0;
  for (int n = 0; n < N; n++) {
    double se = 0;
    for (int j = 0; j < V; j++) se += exp(c.logits[n * V + j]);
    double want = tg[n] < 0 ? 0 : log(se) - c.logits[n * V + tg[n]];
    assert_true(fabs(c.losses[n] - want) < 1e-12);
    sum += c.losses[n];
  }
  assert_true(fabs(total - sum) < 1e-12);

  float *lf = falloc(N * V), *lossf = falloc(N), *dlf = falloc(N * V);
  randn_pair(lf, c.logits, N * V, &r, 3);
  lf[5] = 80.0f, c.logits[5] = 80.0; /* would overflow exp without the max */
  double tf = prm_xent_forward(lossf, lf, tg, N, V);
  double td = prm_ref64_xent_forward(c.losses, c.logits, tg, N, V);
  assert_close("xent losses", lossf, c.losses, N, 1e-6);
  assert_true(fabs(tf - td) <= 1e-6 * fabs(td));
  assert_true(prm_xent_forward(NULL, lf, tg, N, V) == tf);
  prm_xent_backward(dlf, lf, tg, N, V, 0.37f);
  prm_ref64_xent_backward(dl, c.logits, tg, N, V, (double)0.37f);
  assert_close("xent dlogits", dlf, dl, N * V, 1e-6);
  prm_xent_backward(lf, lf, tg, N, V, 0.37f); /* in place */
  assert_memory_equal(lf, dlf, sizeof(float) * N * V);
  free(c.logits), free(c.losses), free(dl), free(lf), free(lossf), free(dlf);
}

/* The vocabulary-slice pieces (tensor-parallel head): the vocabulary cut
 * in two uneven slices, each slice's max / sum / target logit combined as
 * the all-reduces would, against the double reference on the whole rows
 * (targets in either slice, a masked row, a logit that would overflow). */
static void test_xent_slices(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 11);
  enum { N = 7, V = 83, V0 = 37 }; /* slices [0, 37) and [37, 83) */
  static const int32_t tg[N] = {3, -1, 82, 36, 37, 50, 0};
  float *lf = falloc(N * V), *e = falloc(N * V);
  double *ld = dalloc(N * V), *loss = dalloc(N), *dl = dalloc(N * V);
  randn_pair(lf, ld, N * V, &r, 3);
  lf[2 * V + 60] = 85.0f, ld[2 * V + 60] = 85.0;
  prm_ref64_xent_forward(loss, ld, tg, N, V);
  prm_ref64_xent_backward(dl, ld, tg, N, V, (double)0.37f);
  for (int keep = 0; keep <= 1; keep++) {
    const int64_t lo[2] = {0, V0}, n[2] = {V0, V - V0};
    float *sl[2], mx[2][N];
    double st[2][2 * N];
    for (int k = 0; k < 2; k++) { /* each "rank" holds its slice's logits */
      sl[k] = falloc(N * n[k]);
      for (int i = 0; i < N; i++) memcpy(sl[k] + i * n[k], lf + i * V + lo[k], sizeof(float) * n[k]);
      prm_xent_slice_max(mx[k], sl[k], N, n[k]);
    }
    for (int i = 0; i < N; i++) mx[0][i] = mx[1][i] = fmaxf(mx[0][i], mx[1][i]); /* MAX */
    for (int k = 0; k < 2; k++) prm_xent_slice_sumexp(st[k], sl[k], mx[k], tg, N, n[k], lo[k], keep);
    for (int i = 0; i < 2 * N; i++) st[0][i] = st[1][i] = st[0][i] + st[1][i]; /* SUM */
    for (int i = 0; i < N; i++) {
      double got = tg[i] < 0 ? 0 : log(st[0][2 * i]) + mx[0][i] - st[0][2 * i + 1];
      assert_true(fabs(got - loss[i]) <= 1e-6 * fmax(1.0, fabs(loss[i])));
    }
    if (!keep) { /* the logits are left alone */
      for (int i = 0; i < N; i++) assert_memory_equal(sl[0] + i * V0, lf + i * V, sizeof(float) * V0);
    } else {
      for (int k = 0; k < 2; k++) {
        prm_xent_slice_grad(sl[k], st[k], tg, N, n[k], lo[k], 0.37f);
        for (int i = 0; i < N; i++) memcpy(e + i * V + lo[k], sl[k] + i * n[k], sizeof(float) * n[k]);
      }
      assert_close("xent slice dlogits", e, dl, N * V, 1e-6);
    }
    free(sl[0]), free(sl[1]);
  }
  free(lf), free(e), free(ld), free(loss), free(dl);
}

/* The fused LM head against logits by GEMM, then xent, then the two
 * gradient GEMMs, for chunk sizes that do and do not divide N. */
static void test_lmhead_xent(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 11);
  enum { N = 23, C = 19, V = 41 };
  int32_t tg[N];
  for (int n = 0; n < N; n++) tg[n] = n % 5 == 2 ? -1 : (int32_t)(prm_rng_u64(&r) % V);
  float *x = falloc(N * C), *w = falloc(V * C), *logits = falloc(N * V), *dx0 = falloc(N * C),
        *dw0 = falloc(V * C), *dwinit = falloc(V * C);
  double *tmp = dalloc(V * C);
  randn_pair(x, tmp, N * C, &r, 1);
  randn_pair(w, tmp, V * C, &r, 1);
  randn_pair(dwinit, tmp, V * C, &r, 1);
  prm_gemm_t g;
  assert_int_equal(prm_gemm_init(&g, NULL, NULL), 0);
  float gs = 1.0f / 19;
  prm_sgemm(&g, 0, 1, N, V, C, 1, x, C, w, C, 0, logits, V);
  double want = prm_xent_forward(NULL, logits, tg, N, V);
  prm_xent_backward(logits, logits, tg, N, V, gs);
  prm_sgemm(&g, 0, 0, N, C, V, 1, logits, V, w, C, 0, dx0, C);
  memcpy(dw0, dwinit, sizeof(float) * V * C);
  prm_sgemm(&g, 1, 0, V, C, N, 1, logits, V, x, C, 1, dw0, C);

  static const int64_t chunks[] = {1, 5, 7, 23, 64};
  for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
    int64_t ch = chunks[ci], count = -1;
    float *scratch = falloc(ch * V), *dx = falloc(N * C), *dw = falloc(V * C);
    for (int64_t i = 0; i < N * C; i++) dx[i] = 99.0f; /* overwritten */
    memcpy(dw, dwinit, sizeof(float) * V * C);          /* accumulated */
    double got = prm_lmhead_xent(&g, dx, dw, &count, x, w, tg, N, C, V, gs, scratch, ch);
    assert_int_equal(count, N - 5);
    assert_true(fabs(got - want) <= 1e-5 * fabs(want));
    assert_close_ff("lmhead dx", dx, dx0, N * C, 1e-5);
    assert_close_ff("lmhead dw", dw, dw0, V * C, 1e-5);
    double got2 = prm_lmhead_xent(&g, NULL, NULL, &count, x, w, tg, N, C, V, gs, scratch, ch);
    assert_true(fabs(got2 - want) <= 1e-5 * fabs(want));
    free(scratch), free(dx), free(dw);
  }
  free(x), free(w), free(logits), free(dx0), free(dw0), free(dwinit), free(tmp);
}

/* ------------------------------------------------------------------------ */
/* Optimizer helpers                                                         */
/* ------------------------------------------------------------------------ */

static void test_adamw(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 12);
  enum { n = 257, steps = 4 };
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  float *p = falloc(n), *m = falloc(n), *v = falloc(n), *g = falloc(n);
  double *pd = dalloc(n), *md = dalloc(n), *vd = dalloc(n), *gd = dalloc(n);
  double *ph = dalloc(n), *mh = dalloc(n), *vh = dalloc(n);
  randn_pair(p, pd, n, &r, 1);
  memcpy(ph, pd, sizeof(double) * n);
  g[0] = 0; /* v stays 0 for a while: denom is eps */
  for (int64_t s = 1; s <= steps; s++) {
    randn_pair(g, gd, n, &r, s == 2 ? 100 : 0.1);
    if (s < 3) g[0] = 0, gd[0] = 0;
    float gs = s == 2 ? 0.0123f : s == 4 ? 0.625f : 1.0f; /* a clipped step, then a milder one */
    prm_adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, s, gs);
    prm_ref64_adamw_update(pd, gd, md, vd, n, lr, b1, b2, eps, wd, s, gs);
    /* By hand, torch 1.13 _single_tensor_adamw, in double. */
    double bc1 = 1 - pow(b1, (double)s), bc2 = 1 - pow(b2, (double)s);
    for (int i = 0; i < n; i++) {
      ph[i] *= 1 - (double)lr * wd;
      double gi = gd[i] * gs;
      mh[i] = mh[i] * b1 + (1 - (double)b1) * gi;
      vh[i] = vh[i] * b2 + (1 - (double)b2) * gi * gi;
      double denom = sqrt(vh[i]) / sqrt(bc2) + eps;
      ph[i] -= (double)lr / bc1 * mh[i] / denom;
    }
    for (int i = 0; i < n; i++)
      assert_true(fabs(pd[i] - ph[i]) <= 1e-14 * (1 + fabs(ph[i])) &&
                  fabs(md[i] - mh[i]) <= 1e-14 * (1 + fabs(mh[i])) &&
                  fabs(vd[i] - vh[i]) <= 1e-14 * (1 + fabs(vh[i])));
    /* fp32 keeps p to a few ulps of the update size: compare p with an
     * absolute bound of lr-relative precision, m and v relatively. */
    assert_close("adamw m", m, mh, n, 1e-6);
    assert_close("adamw v", v, vh, n, 1e-6);
    for (int i = 0; i < n; i++)
      if (!(fabs(p[i] - ph[i]) <= 1e-6 * fabs(ph[i]) + 1e-5 * lr))
        fail_msg("adamw p[%d] step %lld: got %.9g want %.9g", i, (long long)s, (double)p[i], ph[i]);
  }
  free(p), free(m), free(v), free(g), free(pd), free(md), free(vd), free(gd), free(ph), free(mh),
      free(vh);
}

static void test_sumsq_scale(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 13);
  int64_t sizes[] = {0, 1, 255, 256, 257, 10007};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    int64_t n = sizes[si];
    float *x = falloc(n);
    double *xd = dalloc(n);
    randn_pair(x, xd, n, &r, 1);
    double want = dot_d(xd, xd, n), got = prm_sumsq(x, n);
    assert_true(fabs(got - want) <= 1e-13 * want);
    /* Independent of the thread count. */
    int t = prm_kernels_threads();
    set_threads(1);
    double one = prm_sumsq(x, n);
    set_threads(t);
    assert_memory_equal(&one, &got, sizeof got);
    prm_scale(x, n, 0.5f);
    for (int64_t i = 0; i < n; i++) assert_true(x[i] == (float)(xd[i] * 0.5));
    free(x), free(xd);
  }
}


/* ------------------------------------------------------------------------ */
/* Fast element-wise kernels against their reference twins (issue 9)         */
/* ------------------------------------------------------------------------ */

/* Runs with 1 thread and with all of them must give the same bytes. */
static int max_threads(void) { return prm_kernels_threads(); }

/* Sizes that take the scalar tail only, the vector body and a tail, and
 * the threaded path (above the kernels' 32768-value threshold). */
static const int64_t ew_sizes[] = {1, 15, 16, 17, 300, 100003};

static void test_fast_add_swiglu(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 31);
  for (size_t si = 0; si < sizeof ew_sizes / sizeof ew_sizes[0]; si++) {
    int64_t n = ew_sizes[si];
    float *a = falloc(n), *b = falloc(n), *dh = falloc(n), *y = falloc(n), *y1 = falloc(n),
          *yr = falloc(n), *h = falloc(n), *h1 = falloc(n), *dg = falloc(n), *du = falloc(n),
          *dg1 = falloc(n), *du1 = falloc(n);
    double *ad = dalloc(n), *bd = dalloc(n), *dhd = dalloc(n), *hd = dalloc(n), *dgd = dalloc(n),
           *dud = dalloc(n);
    randn_pair(a, ad, n, &r, 4); /* gates out to |x| ~ 12: both sigmoid branches */
    randn_pair(b, bd, n, &r, 1);
    randn_pair(dh, dhd, n, &r, 1);
    if (n > 2) { /* (with other values to set the tensor's scale) */
      a[0] = -100.0f, ad[0] = -100.0; /* exp(100) overflows in expf */
      a[1] = 100.0f, ad[1] = 100.0;
    }
    /* add: bit-identical to the reference, in place too. */
    prm_add(y, a, b, n);
    prm__ref32_add(yr, a, b, n);
    assert_memory_equal(y, yr, (size_t)n * sizeof(float));
    memcpy(y1, a, (size_t)n * sizeof(float));
    prm_add(y1, y1, b, n);
    assert_memory_equal(y1, yr, (size_t)n * sizeof(float));
    /* SwiGLU: the polynomial exp (rel. error < 2e-7) against the double
     * reference at 1e-6, as the reference itself is held to. */
    prm_swiglu_forward(h, a, b, n);
    prm_ref64_swiglu_forward(hd, ad, bd, n);
    assert_close("fast swiglu h", h, hd, n, 1e-6);
    prm_swiglu_backward(dg, du, dh, a, b, n);
    prm_ref64_swiglu_backward(dgd, dud, dhd, ad, bd, n);
    assert_close("fast swiglu dgate", dg, dgd, n, 1e-6);
    assert_close("fast swiglu dup", du, dud, n, 1e-6);
    /* The same bytes on one thread. */
    int t = max_threads();
    set_threads(1);
    prm_swiglu_forward(h1, a, b, n);
    prm_swiglu_backward(dg1, du1, dh, a, b, n);
    set_threads(t);
    assert_memory_equal(h, h1, (size_t)n * sizeof(float));
    assert_memory_equal(dg, dg1, (size_t)n * sizeof(float));
    assert_memory_equal(du, du1, (size_t)n * sizeof(float));
    free(a), free(b), free(dh), free(y), free(y1), free(yr), free(h), free(h1), free(dg),
        free(du), free(dg1), free(du1);
    free(ad), free(bd), free(dhd), free(hd), free(dgd), free(dud);
  }
}

/* RoPE: head sizes whose half is scalar only (4), vector only (32), and
 * both (20); bit-identical to the reference. */
static void test_fast_rope(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 32);
  const int64_t Ds[] = {8, 64, 40};
  for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++) {
    int64_t B = 2, T = 37, nh = 3, D = Ds[di], pos0 = 4, TT = T + pos0, n = B * T * nh * D;
    float *ct = falloc(TT * D / 2), *st = falloc(TT * D / 2), *x = falloc(n), *xr = falloc(n);
    double *tmp = dalloc(n);
    prm_rope_tables(ct, st, TT, D, 10000.0);
    randn_pair(x, tmp, n, &r, 1);
    memcpy(xr, x, (size_t)n * sizeof(float));
    prm_rope_forward(x, ct, st, B, T, nh, D, pos0);
    prm__ref32_rope_forward(xr, ct, st, B, T, nh, D, pos0);
    assert_memory_equal(x, xr, (size_t)n * sizeof(float));
    prm_rope_backward(x, ct, st, B, T, nh, D, pos0);
    prm__ref32_rope_backward(xr, ct, st, B, T, nh, D, pos0);
    assert_memory_equal(x, xr, (size_t)n * sizeof(float));
    free(ct), free(st), free(x), free(xr), free(tmp);
  }
}

/* RMSNorm and the fused residual add + RMSNorm. Row widths with a scalar
 * tail (67), whole vectors (768, the 124M model's) and a partial
 * weight-gradient column block (200 = 128 + 72); 8200 is wider than the
 * backward keeps its column sums for on the stack. */
static void test_fast_rmsnorm(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 33);
  const int64_t Cs[] = {67, 768, 200, 8200};
  for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
    int64_t N = 50, C = Cs[ci], n = N * C;
    float *x = falloc(n), *b = falloc(n), *w = falloc(C), *g = falloc(n), *o = falloc(n),
          *orf = falloc(n), *rs = falloc(N), *rsr = falloc(N), *dx = falloc(n), *dxr = falloc(n),
          *dw = falloc(C), *dwr = falloc(C), *sum = falloc(n), *o2 = falloc(n), *rs2 = falloc(N),
          *o1 = falloc(n), *rs1 = falloc(N), *dx1 = falloc(n), *dw1 = falloc(C);
    double *xd = dalloc(n), *bd = dalloc(n), *wd = dalloc(C), *gd = dalloc(n), *od = dalloc(n),
           *rsd = dalloc(N), *dxd = dalloc(n), *dwd = dalloc(C), *sumd = dalloc(n);
    randn_pair(x, xd, n, &r, 2);
    randn_pair(b, bd, n, &r, 1);
    randn_pair(w, wd, C, &r, 1);
    randn_pair(g, gd, n, &r, 1);
    randn_pair(dx, dxd, n, &r, 1); /* dx and dw accumulate */
    randn_pair(dw, dwd, C, &r, 1);
    memcpy(dxr, dx, (size_t)n * sizeof(float));
    memcpy(dwr, dw, (size_t)C * sizeof(float));
    memcpy(dx1, dx, (size_t)n * sizeof(float));
    memcpy(dw1, dw, (size_t)C * sizeof(float));

    /* Forward: the row sum of squares is taken in double in another order,
     * so rstd may move by an ulp: 1e-6 against the double reference, 2e-7
     * against the fp32 one. */
    prm_rmsnorm_forward(o, rs, x, w, N, C, 1e-5f);
    prm__ref32_rmsnorm_forward(orf, rsr, x, w, N, C, 1e-5f);
    prm_ref64_rmsnorm_forward(od, rsd, xd, wd, N, C, (double)1e-5f);
    assert_close("fast rmsnorm out", o, od, n, 1e-6);
    assert_close("fast rmsnorm rstd", rs, rsd, N, 1e-6);
    assert_close_ff("fast rmsnorm out vs ref32", o, orf, n, 2e-7);
    assert_close_ff("fast rmsnorm rstd vs ref32", rs, rsr, N, 2e-7);

    /* Backward from the same rstd: dw is the reference's sum in the same
     * order (bit-identical); dx's row dot is in double in another order. */
    prm_rmsnorm_backward(dx, dw, g, x, w, rsr, N, C);
    prm__ref32_rmsnorm_backward(dxr, dwr, g, x, w, rsr, N, C);
    assert_memory_equal(dw, dwr, (size_t)C * sizeof(float));
    assert_close_ff("fast rmsnorm dx vs ref32", dx, dxr, n, 2e-7);
    for (int64_t i = 0; i < N; i++) rsd[i] = rsr[i];
    prm_ref64_rmsnorm_backward(dxd, dwd, gd, xd, wd, rsd, N, C);
    assert_close("fast rmsnorm dx", dx, dxd, n, 1e-5);
    assert_close("fast rmsnorm dw", dw, dwd, C, 1e-5);

    /* Fused add + norm: sum is a + b exactly, and out and rstd are those of
     * prm_rmsnorm_forward on that sum, bit for bit (same row code). */
    prm_add_rmsnorm_forward(sum, o2, rs2, x, b, w, N, C, 1e-5f);
    prm__ref32_add(orf, x, b, n);
    assert_memory_equal(sum, orf, (size_t)n * sizeof(float));
    prm_rmsnorm_forward(o, rs, sum, w, N, C, 1e-5f);
    assert_memory_equal(o2, o, (size_t)n * sizeof(float));
    assert_memory_equal(rs2, rs, (size_t)N * sizeof(float));
    prm_ref64_add_rmsnorm_forward(sumd, od, rsd, xd, bd, wd, N, C, (double)1e-5f);
    assert_close("fused add+rmsnorm out", o2, od, n, 1e-6);
    assert_close("fused add+rmsnorm rstd", rs2, rsd, N, 1e-6);
    {
      /* The fp32 reference twin agrees too, and sum may alias a. */
      float *s3 = falloc(n), *o3 = falloc(n), *r3 = falloc(N);
      prm__ref32_add_rmsnorm_forward(s3, o3, r3, x, b, w, N, C, 1e-5f);
      assert_memory_equal(s3, sum, (size_t)n * sizeof(float));
      assert_close_ff("fused add+rmsnorm vs ref32", o2, o3, n, 2e-7);
      memcpy(s3, x, (size_t)n * sizeof(float));
      prm_add_rmsnorm_forward(s3, o3, r3, s3, b, w, N, C, 1e-5f);
      assert_memory_equal(s3, sum, (size_t)n * sizeof(float));
      assert_memory_equal(o3, o2, (size_t)n * sizeof(float));
      free(s3), free(o3), free(r3);
    }

    /* One thread: the same bytes. */
    int t = max_threads();
    set_threads(1);
    prm_rmsnorm_forward(o1, rs1, x, w, N, C, 1e-5f);
    prm_rmsnorm_backward(dx1, dw1, g, x, w, rsr, N, C);
    set_threads(t);
    prm_rmsnorm_forward(o, rs, x, w, N, C, 1e-5f);
    assert_memory_equal(o1, o, (size_t)n * sizeof(float));
    assert_memory_equal(rs1, rs, (size_t)N * sizeof(float));
    assert_memory_equal(dx1, dx, (size_t)n * sizeof(float));
    assert_memory_equal(dw1, dw, (size_t)C * sizeof(float));

    free(x), free(b), free(w), free(g), free(o), free(orf), free(rs), free(rsr), free(dx),
        free(dxr), free(dw), free(dwr), free(sum), free(o2), free(rs2), free(o1), free(rs1),
        free(dx1), free(dw1);
    free(xd), free(bd), free(wd), free(gd), free(od), free(rsd), free(dxd), free(dwd), free(sumd);
  }
}

/* The cross-entropy rows on a GPT-2-sized vocabulary (50304 = 3144 whole
 * vectors) and on one with a tail (50311), peaky logits, masked rows. */
static void test_fast_xent(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 34);
  const int64_t Vs[] = {50304, 50311};
  for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
    enum { N = 5 };
    int64_t V = Vs[vi], n = N * V;
    int32_t tg[N] = {0, -1, (int32_t)(V - 1), 777, (int32_t)(V / 2)};
    float *lf = falloc(n), *loss = falloc(N), *loss1 = falloc(N), *dl = falloc(n),
          *dl1 = falloc(n), *lr = falloc(N), *dlr = falloc(n);
    double *ld = dalloc(n), *lossd = dalloc(N), *dld = dalloc(n);
    randn_pair(lf, ld, n, &r, 3);
    lf[3 * V + 777] = 30.0f, ld[3 * V + 777] = 30.0; /* the target dominates */
    lf[4 * V + 5] = 60.0f, ld[4 * V + 5] = 60.0;     /* another logit dominates */
    double tf = prm_xent_forward(loss, lf, tg, N, V);
    double td = prm_ref64_xent_forward(lossd, ld, tg, N, V);
    double tr = prm__ref32_xent_forward(lr, lf, tg, N, V);
    assert_close("fast xent losses", loss, lossd, N, 1e-6);
    assert_true(fabs(tf - td) <= 1e-6 * fabs(td));
    assert_true(fabs(tf - tr) <= 1e-6 * fabs(td));
    prm_xent_backward(dl, lf, tg, N, V, 0.37f);
    prm_ref64_xent_backward(dld, ld, tg, N, V, (double)0.37f);
    prm__ref32_xent_backward(dlr, lf, tg, N, V, 0.37f);
    assert_close("fast xent dlogits", dl, dld, n, 1e-6);
    assert_close_ff("fast xent dlogits vs ref32", dl, dlr, n, 1e-6);
    int t = max_threads();
    set_threads(1);
    double t1 = prm_xent_forward(loss1, lf, tg, N, V);
    prm_xent_backward(dl1, lf, tg, N, V, 0.37f);
    set_threads(t);
    assert_memory_equal(&t1, &tf, sizeof tf);
    assert_memory_equal(loss1, loss, N * sizeof(float));
    assert_memory_equal(dl1, dl, (size_t)n * sizeof(float));
    free(lf), free(loss), free(loss1), free(dl), free(dl1), free(lr), free(dlr);
    free(ld), free(lossd), free(dld);
  }
}

/* AdamW: every variant this CPU can run (AVX-512, AVX2, plain) is bit for
 * bit the reference, for several steps, on sizes with and without tails,
 * threaded or not; an unknown variant is refused without touching p. */
static void test_fast_adamw(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 35);
  const char *isas[] = {"avx512", "avx2", "plain"};
  for (size_t si = 0; si < sizeof ew_sizes / sizeof ew_sizes[0]; si++) {
    int64_t n = ew_sizes[si];
    float *p0 = falloc(n), *g = falloc(4 * n), *pr = falloc(n), *mr = falloc(n), *vr = falloc(n);
    float *p = falloc(n), *m = falloc(n), *v = falloc(n);
    double *tmp = dalloc(4 * n);
    randn_pair(p0, tmp, n, &r, 1);
    randn_pair(g, tmp, 4 * n, &r, 0.1);
    g[0] = 0; /* v = 0: denom is eps */
    g[2 * n] = 1e4f;
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
      memcpy(pr, p0, (size_t)n * sizeof(float));
      memcpy(p, p0, (size_t)n * sizeof(float));
      memset(mr, 0, (size_t)n * sizeof(float)), memset(vr, 0, (size_t)n * sizeof(float));
      memset(m, 0, (size_t)n * sizeof(float)), memset(v, 0, (size_t)n * sizeof(float));
      int ok = 1;
      for (int64_t s = 1; s <= 4 && ok; s++) {
        if (s == 3) set_threads(1);
        float gs = s == 2 ? 0.3f : 1.0f; /* step 2 clipped */
        prm__ref32_adamw_update(pr, g + (s - 1) * n, mr, vr, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s,
                                gs);
        ok = prm__fast_adamw_update_isa(isas[ii], p, g + (s - 1) * n, m, v, n, 3e-3f, 0.9f, 0.95f,
                                        1e-8f, 0.1f, s, gs) == 0;
        set_threads(max_threads());
        if (!ok) break;
        char what[64];
        snprintf(what, sizeof what, "adamw %s n=%lld step %lld", isas[ii], (long long)n,
                 (long long)s);
        if (memcmp(p, pr, (size_t)n * sizeof(float)) || memcmp(m, mr, (size_t)n * sizeof(float)) ||
            memcmp(v, vr, (size_t)n * sizeof(float)))
          fail_msg("%s: not bit-identical to the reference", what);
      }
      if (!ok) { /* refused: only for a variant this CPU lacks */
        assert_false(strcmp(isas[ii], "plain") == 0);
        assert_memory_equal(p, p0, (size_t)n * sizeof(float));
      }
    }
    /* The public kernel is this CPU's variant. */
    memcpy(p, p0, (size_t)n * sizeof(float));
    memcpy(pr, p0, (size_t)n * sizeof(float));
    memset(m, 0, (size_t)n * sizeof(float)), memset(v, 0, (size_t)n * sizeof(float));
    memset(mr, 0, (size_t)n * sizeof(float)), memset(vr, 0, (size_t)n * sizeof(float));
    prm_adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f);
    prm__ref32_adamw_update(pr, g, mr, vr, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f);
    assert_memory_equal(p, pr, (size_t)n * sizeof(float));
    /* gscale is clipping's prm_scale folded in: the same bits as scaling a
     * copy of g first, and g itself untouched. */
    float *gc = falloc(n);
    memcpy(gc, g + n, (size_t)n * sizeof(float));
    prm_scale(gc, n, 0.0731f);
    prm_adamw_update(p, g + n, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 2, 0.0731f);
    prm_adamw_update(pr, gc, mr, vr, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 2, 1.0f);
    assert_memory_equal(p, pr, (size_t)n * sizeof(float));
    assert_memory_equal(m, mr, (size_t)n * sizeof(float));
    assert_memory_equal(v, vr, (size_t)n * sizeof(float));
    assert_false(memcmp(gc, g + n, (size_t)n * sizeof(float)) == 0);
    free(gc);
    free(p0), free(g), free(pr), free(mr), free(vr), free(p), free(m), free(v), free(tmp);
  }
  float x = 1;
  assert_int_equal(
      prm__fast_adamw_update_isa("sse9", &x, &x, &x, &x, 1, 1, 0.9f, 0.9f, 1, 0, 1, 1.0f),
      PRM_EINVAL);
  assert_true(x == 1);
  const char *isa = prm__fast_adamw_isa();
  assert_true(!strcmp(isa, "avx512") || !strcmp(isa, "avx2") || !strcmp(isa, "plain"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_init),      cmocka_unit_test(test_gemm_backends),
      cmocka_unit_test(test_gemm_deterministic), cmocka_unit_test(test_linear),
      cmocka_unit_test(test_embedding),      cmocka_unit_test(test_rmsnorm),
      cmocka_unit_test(test_rope),           cmocka_unit_test(test_swiglu),
      cmocka_unit_test(test_attention_grad), cmocka_unit_test(test_attention_fp32),
      cmocka_unit_test(test_attention_fast_shapes),
      cmocka_unit_test(test_attention_seg_grad), cmocka_unit_test(test_attention_seg_fast),
      cmocka_unit_test(test_rope_pos),
      cmocka_unit_test(test_xent),           cmocka_unit_test(test_xent_slices),
      cmocka_unit_test(test_lmhead_xent),
      cmocka_unit_test(test_adamw),          cmocka_unit_test(test_sumsq_scale),
      cmocka_unit_test(test_fast_add_swiglu), cmocka_unit_test(test_fast_rope),
      cmocka_unit_test(test_fast_rmsnorm),    cmocka_unit_test(test_fast_xent),
      cmocka_unit_test(test_fast_adamw),      cmocka_unit_test(test_gemm_speed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
