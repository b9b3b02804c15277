/* test-gemm-grouped.c - the grouped GEMM of the MoE experts
 * (src/kernels/gemm_grouped.c): every ISA variant against the reference
 * twin (one reference GEMM per group) for the linear layer's three
 * products (y = x W^T, dx = dy W with and without accumulation, dW += dy^T
 * x), on random group sizes with empty groups, one group holding every
 * row, rows and columns that are not multiples of the tiles and inner
 * dimensions longer than one packed chunk; independence of the thread
 * count; and the public functions on both sides of the loop/grouped
 * policy against a double model. */
#include "testlib.h"

#include "kernels/gemm-impl.h"
#include "kernels/ref64.h"
#include "primus/prm_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static const char *const isas[] = {"plain", "avx2", "avx512"};

static float *rand_f(prm_rng_t *r, int64_t n) {
  float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(2.0 * prm_rng_uniform(r) - 1.0);
  return x;
}

static float *dup_f(const float *x, int64_t n) {
  float *y = malloc((size_t)(n ? n : 1) * sizeof *y);
  memcpy(y, x, (size_t)n * sizeof *y);
  return y;
}

/* |got - want| within tol (1 + |want|) everywhere; names the first miss. */
static void check_close(const char *what, const char *isa, const float *got, const float *want,
                        int64_t n, double tol) {
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]);
    if (!(d <= tol * (1.0 + fabs((double)want[i]))))
      fail_msg("%s (%s) at %lld: %.9g, reference %.9g", what, isa, (long long)i, (double)got[i],
               (double)want[i]);
  }
}

/* Group sizes: random in [0, maxrows] with some forced empty; `all` puts
 * every row in group `all - 1`. Returns the row count. */
static int64_t make_offsets(int32_t *off, int64_t G, int64_t maxrows, int all, prm_rng_t *r) {
  off[0] = 0;
  for (int64_t g = 0; g < G; g++) {
    int64_t n = (int64_t)(prm_rng_uniform(r) * (double)(maxrows + 1));
    if (n > maxrows) n = maxrows;
    if (prm_rng_uniform(r) < 0.25) n = 0;
    if (all) n = g == all - 1 ? maxrows : 0;
    off[g + 1] = off[g] + (int32_t)n;
  }
  return off[G];
}

/* One shape: the three products of one variant against the twin. The
 * weights are a wstride apart with padding between them (never touched). */
static void grouped_case(const char *isa, int64_t G, int64_t in, int64_t out, int64_t maxrows,
                         int all, prm_rng_t *r) {
  int32_t off[17];
  int64_t R = make_offsets(off, G, maxrows, all, r), ws = out * in + 5, W = G * ws;
  float *x = rand_f(r, R * in), *w = rand_f(r, W), *dy = rand_f(r, R * out);
  float *y0 = rand_f(r, R * out), *dx0 = rand_f(r, R * in), *dw0 = rand_f(r, W);
  float *y = dup_f(y0, R * out), *yr = dup_f(y0, R * out);
  /* The inner dimension bounds each sum's rounding error. */
  double tol = 2e-7 * (double)(in > out ? in : out) + 1e-6;
  char what[128];
  snprintf(what, sizeof what, "y G=%lld in=%lld out=%lld rows=%lld", (long long)G, (long long)in,
           (long long)out, (long long)R);
  assert_int_equal(prm__grouped_linear_isa(isa, PRM__GG_FWD, y, x, w, ws, off, G, in, out, 0), 0);
  prm__grouped_linear_isa("reference", PRM__GG_FWD, yr, x, w, ws, off, G, in, out, 0);
  check_close(what, isa, y, yr, R * out, tol);
  for (int accum = 0; accum < 2; accum++) {
    float *dx = dup_f(dx0, R * in), *dxr = dup_f(dx0, R * in);
    assert_int_equal(
        prm__grouped_linear_isa(isa, PRM__GG_DX, dx, dy, w, ws, off, G, in, out, accum), 0);
    prm__grouped_linear_isa("reference", PRM__GG_DX, dxr, dy, w, ws, off, G, in, out, accum);
    what[0] = 'd', what[1] = 'x';
    check_close(what, isa, dx, dxr, R * in, tol);
    free(dx), free(dxr);
  }
  float *dw = dup_f(dw0, W), *dwr = dup_f(dw0, W);
  assert_int_equal(prm__grouped_linear_isa(isa, PRM__GG_DW, dw, dy, x, ws, off, G, in, out, 1), 0);
  prm__grouped_linear_isa("reference", PRM__GG_DW, dwr, dy, x, ws, off, G, in, out, 1);
  /* dW sums over a group's rows: accumulated onto dw0, padding untouched. */
  double tolw = 2e-7 * (double)(maxrows + 1) + 1e-6;
  check_close("dw", isa, dw, dwr, W, tolw);
  for (int64_t g = 0; g < G; g++)
    for (int64_t i = out * in; i < ws; i++) assert_true(dw[g * ws + i] == dw0[g * ws + i]);
  free(x), free(w), free(dy), free(y0), free(dx0), free(dw0), free(y), free(yr), free(dw),
      free(dwr);
}

static void test_grouped_variants(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 11);
  int ran = 0;
  for (int v = 0; v < 3; v++) {
    float probe = 0;
    int32_t off1[2] = {0, 0};
    if (prm__grouped_linear_isa(isas[v], PRM__GG_FWD, &probe, &probe, &probe, 1, off1, 1, 1, 1,
                                0) == PRM_EINVAL) {
      print_message("grouped GEMM: %s not runnable on this CPU, skipped\n", isas[v]);
      continue;
    }
    ran++;
    /* Random small shapes: edges of every tile size. */
    for (int t = 0; t < 12; t++) {
      int64_t G = 1 + (int64_t)(prm_rng_uniform(&r) * 8);
      int64_t in = 1 + (int64_t)(prm_rng_uniform(&r) * 70);
      int64_t out = 1 + (int64_t)(prm_rng_uniform(&r) * 70);
      grouped_case(isas[v], G > 8 ? 8 : G, in, out, 1 + (int64_t)(prm_rng_uniform(&r) * 40), 0,
                   &r);
    }
    /* One group holding all rows; one group only; several row blocks. */
    grouped_case(isas[v], 5, 24, 40, 150, 3, &r);
    grouped_case(isas[v], 1, 17, 33, 37, 1, &r);
    /* Inner dimensions over one packed chunk (256), and wider than a
     * column block (8 panels). */
    grouped_case(isas[v], 3, 300, 270, 30, 0, &r);
    grouped_case(isas[v], 2, 41, 530, 300, 0, &r);
    /* Every group empty. */
    grouped_case(isas[v], 4, 8, 8, 0, 0, &r);
  }
  assert_true(ran >= 1);
  assert_int_equal(prm__grouped_linear_isa("sse9", PRM__GG_FWD, NULL, NULL, NULL, 0, NULL, 0, 1,
                                           1, 0),
                   PRM_EINVAL);
}

/* The result does not depend on the thread count: bit-identical. */
static void test_grouped_threads(void **state) {
  (void)state;
#ifdef _OPENMP
  prm_rng_t r;
  prm_rng_seed(&r, 5);
  int32_t off[5];
  int64_t G = 4, in = 96, out = 160, R = make_offsets(off, G, 200, 0, &r);
  float *x = rand_f(&r, R * in), *w = rand_f(&r, G * out * in);
  float *y1 = rand_f(&r, R * out), *y2 = dup_f(y1, R * out);
  float *dw1 = rand_f(&r, G * out * in), *dw2 = dup_f(dw1, G * out * in);
  int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  prm__grouped_linear_isa(NULL, PRM__GG_FWD, y1, x, w, out * in, off, G, in, out, 0);
  prm__grouped_linear_isa(NULL, PRM__GG_DW, dw1, y1, x, out * in, off, G, in, out, 1);
  omp_set_num_threads(nt > 1 ? nt : 2);
  prm__grouped_linear_isa(NULL, PRM__GG_FWD, y2, x, w, out * in, off, G, in, out, 0);
  prm__grouped_linear_isa(NULL, PRM__GG_DW, dw2, y2, x, out * in, off, G, in, out, 1);
  omp_set_num_threads(nt);
  assert_memory_equal(y1, y2, (size_t)(R * out) * sizeof *y1);
  assert_memory_equal(dw1, dw2, (size_t)(G * out * in) * sizeof *dw1);
  free(x), free(w), free(y1), free(y2), free(dw1), free(dw2);
#else
  skip();
#endif
}

/* The public functions, on either side of the policy (threads, rows per
 * group, backend), against the double model of per-group linear layers;
 * the forward is bit for bit the path the policy names. */
static void public_case(const prm_gemm_t *g, int64_t G, int64_t rows, prm_rng_t *r) {
  int64_t in = 20, out = 12, ws = in * out;
  int32_t off[9];
  off[0] = 0;
  for (int64_t e = 0; e < G; e++) off[e + 1] = off[e] + (int32_t)(e == 1 ? 0 : rows);
  int64_t R = off[G];
  float *x = rand_f(r, R * in), *w = rand_f(r, G * ws), *dy = rand_f(r, R * out);
  float *y = rand_f(r, R * out), *dx = rand_f(r, R * in), *dw = rand_f(r, G * ws);
  double *xd = malloc((size_t)(R * in) * 8), *wd = malloc((size_t)(G * ws) * 8),
         *dyd = malloc((size_t)(R * out) * 8), *yd = malloc((size_t)(R * out) * 8),
         *dxd = malloc((size_t)(R * in) * 8), *dwd = malloc((size_t)(G * ws) * 8);
  for (int64_t i = 0; i < R * in; i++) xd[i] = x[i], dxd[i] = dx[i];
  for (int64_t i = 0; i < G * ws; i++) wd[i] = w[i], dwd[i] = dw[i];
  for (int64_t i = 0; i < R * out; i++) dyd[i] = dy[i];
  for (int64_t e = 0; e < G; e++) {
    int64_t r0 = off[e], n = off[e + 1] - r0;
    if (!n) continue;
    prm_ref64_linear_forward(yd + r0 * out, xd + r0 * in, wd + e * ws, n, in, out);
    prm_ref64_linear_backward(dxd + r0 * in, dwd + e * ws, dyd + r0 * out, xd + r0 * in,
                              wd + e * ws, n, in, out, 1);
  }
  prm_grouped_linear_forward(g, y, x, w, ws, off, G, in, out);
  prm_grouped_linear_backward(g, dx, dw, dy, x, w, ws, off, G, in, out, 1);
  float *f = malloc((size_t)((R * in > G * ws ? R * in : G * ws) + R * out) * sizeof *f);
  if (prm__grouped_use_kernel(g, R, G)) {
    prm__grouped_linear_isa(NULL, PRM__GG_FWD, f, x, w, ws, off, G, in, out, 0);
  } else {
    for (int64_t e = 0; e < G; e++)
      if (off[e + 1] > off[e])
        prm_linear_forward(g, f + off[e] * out, x + off[e] * in, w + e * ws, off[e + 1] - off[e],
                           in, out);
  }
  assert_memory_equal(y, f, (size_t)(R * out) * sizeof *f);
  for (int64_t i = 0; i < R * out; i++) f[i] = (float)yd[i];
  check_close("public y", g->i->name, y, f, R * out, 1e-5);
  for (int64_t i = 0; i < R * in; i++) f[i] = (float)dxd[i];
  check_close("public dx (accum)", g->i->name, dx, f, R * in, 1e-5);
  for (int64_t i = 0; i < G * ws; i++) f[i] = (float)dwd[i];
  check_close("public dw", g->i->name, dw, f, G * ws, 1e-5 * (double)rows / 16 + 1e-5);
  free(f), free(x), free(w), free(dy), free(y), free(dx), free(dw), free(xd), free(wd),
      free(dyd), free(yd), free(dxd), free(dwd);
}

static void test_grouped_public(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 9);
  const prm_gemm_i *const *list;
  int n = prm_gemm_backends(&list);
#ifdef _OPENMP
  int nt0 = omp_get_max_threads();
  for (int nt = 1; nt <= 2; nt++) {
    omp_set_num_threads(nt);
#else
  {
    int nt = 1;
#endif
    for (int b = 0; b < n; b++) {
      if (!list[b]->available()) continue;
      prm_gemm_t g = {list[b], NULL};
      int ref = !strcmp(list[b]->name, "reference");
      /* Small groups: the grouped kernel, with threads and a real backend. */
      assert_int_equal(prm__grouped_use_kernel(&g, 3 * 7, 3), nt > 1 && !ref);
      assert_int_equal(prm__grouped_use_kernel(&g, 3 * PRM_GROUPED_MAX_ROWS, 3), 0);
      public_case(&g, 3, 7, &r);
      public_case(&g, 3, PRM_GROUPED_MAX_ROWS * 2, &r);
    }
  }
#ifdef _OPENMP
  omp_set_num_threads(nt0);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grouped_variants),
      cmocka_unit_test(test_grouped_threads),
      cmocka_unit_test(test_grouped_public),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
