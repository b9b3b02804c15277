/* test-device.c - the device kernel harness: every operator of a device
 * backend's table run on that backend and compared with its CPU kernel
 * (prm_kernels.h), the reference. On the CPU backend the two must agree
 * bit for bit (the table calls the same kernels); on a GPU within each
 * operator's stated tolerance, and bit for bit run to run (determinism).
 * Opening a device is tested too: auto's fallback, and every way the CUDA
 * module can be missing or refuse (through a stand-in module).
 *
 *   test-device                   # the CPU backend
 *   test-device --backend cuda    # the CUDA module; exit 77 (skipped) when
 *                                 # it, the driver or a GPU is missing
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "primus/prm_bench.h"
#include "primus/prm_device.h"
#include "primus/prm_kernels.h"

#define PRM_TEST_SKIP 77

static prm_dev_t *g_dev;  /* the backend under test */
static prm_gemm_t g_gemm; /* the CPU reference's GEMM backend */
static int g_exact;       /* 1: the backend must give the reference's bits */

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static float *falloc(int64_t n) { return prm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static void randn(float *x, int64_t n, prm_rng_t *r, double scale) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * prm_rng_normal(r));
}

/* A device copy of n bytes of host memory (freed with dfree). */
/* Segment ids of a packed batch: three examples of uneven lengths per row
 * (caller frees). */
static int32_t *packed_segments(int64_t B, int64_t T) {
  int32_t *seg = prm_xcalloc((size_t)(B * T), 4);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) seg[b * T + t] = (int32_t)(t < T / 3 ? 1 : t < T / 2 + 3 ? 2 : 3);
  return seg;
}

static void *dup_dev(const void *h, size_t bytes) {
  void *d = prm_dev_alloc(g_dev, PRM_MEM_OTHER, bytes);
  assert_non_null(d);
  prm_err_t err = {0};
  assert_int_equal(prm_dev_upload(g_dev, d, h, bytes, &err), 0);
  return d;
}

static void dfree(void *d, size_t bytes) { prm_dev_free(g_dev, PRM_MEM_OTHER, d, bytes); }

/* Host <- device, after checking the queue for failures. */
static void fetch(void *h, const void *d, size_t bytes) {
  prm_err_t err = {0};
  int rc = prm_dev_sync(g_dev, &err);
  if (rc) fprintf(stderr, "device failure: %s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(prm_dev_download(g_dev, h, d, bytes, &err), 0);
}

/* got against want (n values): bit for bit on an exact backend, else the
 * largest difference within tol x max(1, max |want|). */
static void check(const char *what, const float *got, const float *want, int64_t n, double tol) {
  double worst = 0, scale = 1;
  int64_t at = -1;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)want[i]));
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)want[i]);
    if (isnan(got[i]) != isnan(want[i])) e = INFINITY;
    if (e > worst || (g_exact && e == 0 && memcmp(&got[i], &want[i], 4))) {
      if (e > worst) worst = e;
      at = i;
    }
  }
  if (g_exact) {
    if (memcmp(got, want, (size_t)n * sizeof(float))) {
      fprintf(stderr, "%s: not bit-identical (first difference near %lld: %.9g vs %.9g)\n", what,
              (long long)at, at >= 0 ? got[at] : 0.0, at >= 0 ? want[at] : 0.0);
      fail();
    }
    return;
  }
  if (worst > tol * scale) {
    fprintf(stderr, "%s: worst difference %.3g at %lld (%.9g vs %.9g), allowed %.3g\n", what,
            worst, (long long)at, got[at], want[at], tol * scale);
    fail();
  }
}

/* A device run twice must give the same bits. */
static void check_same(const char *what, const float *a, const float *b, int64_t n) {
  if (memcmp(a, b, (size_t)n * sizeof(float))) {
    fprintf(stderr, "%s: two runs on the device differ\n", what);
    fail();
  }
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                     */
/* ------------------------------------------------------------------------ */

static void test_memory(void **state) {
  (void)state;
  prm_err_t err = {0};
  uint64_t u0, p0, u1, p1;
  prm_dev_usage(g_dev, &u0, &p0);
  size_t n = 1000, bytes = n * sizeof(float);
  float *d = prm_dev_alloc(g_dev, PRM_MEM_ACTS, bytes);
  float *d2 = prm_dev_alloc(g_dev, PRM_MEM_ACTS, bytes);
  assert_non_null(d);
  assert_non_null(d2);
  prm_dev_usage(g_dev, &u1, &p1);
  assert_true(u1 >= u0 + 2 * bytes);
  float *h = falloc((int64_t)n), *back = falloc((int64_t)n);
  fetch(back, d, bytes); /* zero-filled */
  for (size_t i = 0; i < n; i++) assert_true(back[i] == 0.0f);
  for (size_t i = 0; i < n; i++) h[i] = (float)i * 0.5f - 7.0f;
  assert_int_equal(prm_dev_upload(g_dev, d, h, bytes, &err), 0);
  assert_int_equal(prm_dev_copy(g_dev, d2, d, bytes, &err), 0);
  fetch(back, d2, bytes);
  assert_memory_equal(back, h, bytes);
  assert_int_equal(prm_dev_zero(g_dev, d2 + 10, 20 * sizeof(float), &err), 0);
  fetch(back, d2, bytes);
  for (size_t i = 0; i < n; i++) assert_true(back[i] == (i >= 10 && i < 30 ? 0.0f : h[i]));
  prm_sb_t line = {0};
  prm_dev_describe_memory(g_dev, &line);
  assert_non_null(strstr(line.buf, "activations"));
  prm_sb_free(&line);
  prm_dev_free(g_dev, PRM_MEM_ACTS, d, bytes);
  prm_dev_free(g_dev, PRM_MEM_ACTS, d2, bytes);
  prm_dev_usage(g_dev, &u1, &p1);
  assert_true(u1 == u0);
  assert_true(p1 >= p0 + 2 * bytes || p0 >= 2 * bytes);
  free(h);
  free(back);
}

/* ------------------------------------------------------------------------ */
/* GEMMs and conversions                                                      */
/* ------------------------------------------------------------------------ */

static void test_sgemm(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 1);
  /* Odd shapes, padded leading dimensions, every transpose, alpha/beta. */
  int64_t M = 37, N = 29, K = 53, pad = 3;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
      float *A = falloc(na), *B = falloc(nb), *C = falloc(nc), *got = falloc(nc);
      randn(A, na, &r, 1);
      randn(B, nb, &r, 1);
      randn(C, nc, &r, 1);
      float *dA = dup_dev(A, na * 4), *dB = dup_dev(B, nb * 4), *dC = dup_dev(C, nc * 4);
      prm_dev_sgemm(g_dev, ta, tb, M, N, K, 0.75f, dA, lda, dB, ldb, 0.5f, dC, ldc);
      prm_sgemm(&g_gemm, ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.5f, C, ldc);
      fetch(got, dC, nc * 4);
      check("sgemm", got, C, nc, 2e-6 * K);
      dfree(dA, na * 4);
      dfree(dB, nb * 4);
      dfree(dC, nc * 4);
      free(A), free(B), free(C), free(got);
    }
}

static void test_gemm_bf16(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 2);
  int64_t M = 33, N = 40, K = 96;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int64_t lda = ta ? M : K, ldb = tb ? K : N, na = M * K, nb = K * N, nc = M * N;
      float *Af = falloc(na), *Bf = falloc(nb), *C = falloc(nc), *got = falloc(nc);
      prm_bf16_t *A = prm_xcalloc((size_t)na, 2), *B = prm_xcalloc((size_t)nb, 2);
      randn(Af, na, &r, 1);
      randn(Bf, nb, &r, 1);
      randn(C, nc, &r, 1);
      prm_f32_to_bf16(A, Af, na);
      prm_f32_to_bf16(B, Bf, nb);
      void *dA = dup_dev(A, na * 2), *dB = dup_dev(B, nb * 2);
      float *dC = dup_dev(C, nc * 4);
      prm_dev_gemm_bf16(g_dev, ta, tb, M, N, K, 1.0f, dA, lda, dB, ldb, 1.0f, dC, N);
      prm_gemm_bf16(&g_gemm, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, N);
      fetch(got, dC, nc * 4);
      check("gemm_bf16", got, C, nc, 2e-6 * K);
      dfree(dA, na * 2);
      dfree(dB, nb * 2);
      dfree(dC, nc * 4);
      free(Af), free(Bf), free(C), free(got), free(A), free(B);
    }
}

static void test_bf16_convert(void **state) {
  (void)state;
  /* Ties, denormals, infinities, NaNs and ordinary values: the same bits
   * on every backend. */
  uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x00000001u, 0x00018000u,
                        0x807fffffu, 0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffa00000u,
                        0x7f7fffffu, 0x00000000u, 0x80000000u, 0x3f7fffffu};
  int64_t n = 4096, ns = (int64_t)(sizeof special / sizeof special[0]);
  float *x = falloc(n), *back = falloc(n), *want = falloc(n);
  prm_rng_t r;
  prm_rng_seed(&r, 3);
  randn(x, n, &r, 3);
  for (int64_t i = 0; i < ns; i++) memcpy(&x[i], &special[i], 4);
  prm_bf16_t *h16 = prm_xcalloc((size_t)n, 2), *got16 = prm_xcalloc((size_t)n, 2);
  prm_f32_to_bf16(h16, x, n);
  prm_bf16_to_f32(want, h16, n);
  float *dx = dup_dev(x, n * 4), *dback = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 4);
  prm_bf16_t *d16 = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 2);
  prm_dev_f32_to_bf16(g_dev, d16, dx, n);
  prm_dev_bf16_to_f32(g_dev, dback, d16, n);
  fetch(got16, d16, n * 2);
  fetch(back, dback, n * 4);
  assert_memory_equal(got16, h16, (size_t)n * 2);
  assert_memory_equal(back, want, (size_t)n * 4);
  /* Lengths and offsets off the backends' vector widths (CUDA converts
   * four at a time where both pointers allow it): a tail of 3, then bf16
   * at 4 bytes past an 8-byte boundary (no vector access). */
  assert_int_equal(prm_dev_zero(g_dev, d16, n * 2, &(prm_err_t){0}), 0);
  prm_dev_f32_to_bf16(g_dev, d16, dx, n - 3);
  prm_dev_f32_to_bf16(g_dev, d16 + n - 3, dx + n - 3, 3);
  prm_dev_bf16_to_f32(g_dev, dback, d16, n - 3);
  fetch(got16, d16, n * 2);
  fetch(back, dback, (n - 3) * 4);
  assert_memory_equal(got16, h16, (size_t)n * 2);
  assert_memory_equal(back, want, (size_t)(n - 3) * 4);
  prm_dev_f32_to_bf16(g_dev, d16 + 2, dx + 4, n - 8);
  prm_dev_bf16_to_f32(g_dev, dback + 4, d16 + 2, n - 8);
  fetch(got16, d16, n * 2);
  fetch(back, dback, n * 4);
  assert_memory_equal(got16 + 2, h16 + 4, (size_t)(n - 8) * 2);
  assert_memory_equal(back + 4, want + 4, (size_t)(n - 8) * 4);
  dfree(dx, n * 4);
  dfree(dback, n * 4);
  dfree(d16, n * 2);
  free(x), free(back), free(want), free(h16), free(got16);
}

/* ------------------------------------------------------------------------ */
/* Element-wise and row-wise operators                                        */
/* ------------------------------------------------------------------------ */

static void test_embedding(void **state) {
  (void)state;
  int64_t V = 50, C = 72, N = 300;
  prm_rng_t r;
  prm_rng_seed(&r, 4);
  float *wte = falloc(V * C), *out = falloc(N * C), *got = falloc(N * C), *dout = falloc(N * C);
  float *dw = falloc(V * C), *dwgot = falloc(V * C), *dw2 = falloc(V * C);
  int32_t *tok = prm_xcalloc((size_t)N, 4);
  randn(wte, V * C, &r, 1);
  randn(dout, N * C, &r, 1);
  randn(dw, V * C, &r, 1);
  for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)(prm_rng_u64(&r) % 7 == 0 ? 3 : prm_rng_u64(&r) % V);
  float *dwte = dup_dev(wte, V * C * 4), *dout_d = dup_dev(dout, N * C * 4);
  float *dout_out = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * C * 4);
  int32_t *dtok = dup_dev(tok, N * 4);
  float *ddw = dup_dev(dw, V * C * 4), *ddw2 = dup_dev(dw, V * C * 4);
  prm_dev_embedding_forward(g_dev, dout_out, dtok, dwte, N, C);
  prm_embedding_forward(out, tok, wte, N, C);
  fetch(got, dout_out, N * C * 4);
  check("embedding_forward", got, out, N * C, 0); /* a copy: exact everywhere */
  assert_memory_equal(got, out, (size_t)(N * C) * 4);
  prm_dev_embedding_backward(g_dev, ddw, dout_d, dtok, N, C);
  prm_dev_embedding_backward(g_dev, ddw2, dout_d, dtok, N, C);
  prm_embedding_backward(dw, dout, tok, N, C);
  fetch(dwgot, ddw, V * C * 4);
  fetch(dw2, ddw2, V * C * 4);
  check("embedding_backward", dwgot, dw, V * C, 1e-6);
  check_same("embedding_backward", dwgot, dw2, V * C);
  dfree(dwte, V * C * 4), dfree(dout_d, N * C * 4), dfree(dout_out, N * C * 4);
  dfree(dtok, N * 4), dfree(ddw, V * C * 4), dfree(ddw2, V * C * 4);
  free(wte), free(out), free(got), free(dout), free(dw), free(dwgot), free(dw2), free(tok);
}

static void test_rmsnorm(void **state) {
  (void)state;
  int64_t N = 67, C = 200;
  float eps = 1e-5f;
  prm_rng_t r;
  prm_rng_seed(&r, 5);
  float *x = falloc(N * C), *b = falloc(N * C), *w = falloc(C), *out = falloc(N * C);
  float *rstd = falloc(N), *sum = falloc(N * C), *dout = falloc(N * C), *dx = falloc(N * C);
  float *dw = falloc(C), *got = falloc(N * C);
  randn(x, N * C, &r, 2);
  randn(b, N * C, &r, 1);
  randn(w, C, &r, 1);
  randn(dout, N * C, &r, 1);
  randn(dx, N * C, &r, 1);
  randn(dw, C, &r, 1);
  float *d_x = dup_dev(x, N * C * 4), *d_b = dup_dev(b, N * C * 4), *d_w = dup_dev(w, C * 4);
  float *d_out = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * C * 4);
  float *d_sum = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * C * 4);
  float *d_rstd = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * 4);
  float *d_dout = dup_dev(dout, N * C * 4), *d_dx = dup_dev(dx, N * C * 4), *d_dw = dup_dev(dw, C * 4);

  prm_dev_rmsnorm_forward(g_dev, d_out, d_rstd, d_x, d_w, N, C, eps);
  prm_rmsnorm_forward(out, rstd, x, w, N, C, eps);
  fetch(got, d_out, N * C * 4);
  check("rmsnorm_forward out", got, out, N * C, 2e-6);
  fetch(got, d_rstd, N * 4);
  check("rmsnorm_forward rstd", got, rstd, N, 2e-6);

  prm_dev_rmsnorm_backward(g_dev, d_dx, d_dw, d_dout, d_x, d_w, d_rstd, N, C);
  prm_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
  fetch(got, d_dx, N * C * 4);
  check("rmsnorm_backward dx (accumulated)", got, dx, N * C, 1e-5);
  fetch(got, d_dw, C * 4);
  check("rmsnorm_backward dw (accumulated)", got, dw, C, 1e-5);

  prm_dev_add_rmsnorm_forward(g_dev, d_sum, d_out, d_rstd, d_x, d_b, d_w, N, C, eps);
  prm_add_rmsnorm_forward(sum, out, rstd, x, b, w, N, C, eps);
  fetch(got, d_sum, N * C * 4);
  check("add_rmsnorm_forward sum", got, sum, N * C, 0);
  fetch(got, d_out, N * C * 4);
  check("add_rmsnorm_forward out", got, out, N * C, 2e-6);
  /* In place: the sum over its first input, as the model calls it. */
  prm_dev_add_rmsnorm_forward(g_dev, d_x, d_out, d_rstd, d_x, d_b, d_w, N, C, eps);
  fetch(got, d_x, N * C * 4);
  check("add_rmsnorm_forward in place", got, sum, N * C, 0);

  dfree(d_x, N * C * 4), dfree(d_b, N * C * 4), dfree(d_w, C * 4), dfree(d_out, N * C * 4);
  dfree(d_sum, N * C * 4), dfree(d_rstd, N * 4), dfree(d_dout, N * C * 4);
  dfree(d_dx, N * C * 4), dfree(d_dw, C * 4);
  free(x), free(b), free(w), free(out), free(rstd), free(sum), free(dout), free(dx), free(dw);
  free(got);
}

static void test_rope(void **state) {
  (void)state;
  int64_t B = 2, T = 19, nh = 3, D = 64, P = 64, n = B * T * nh * D;
  prm_rng_t r;
  prm_rng_seed(&r, 6);
  float *cs = falloc(P * D / 2), *sn = falloc(P * D / 2), *x = falloc(n), *got = falloc(n);
  int32_t *pos = prm_xcalloc((size_t)(B * T), 4);
  prm_rope_tables(cs, sn, P, D, 10000.0);
  for (int64_t i = 0; i < B * T; i++) pos[i] = (int32_t)(i % 7 + (i / 11) * 5);
  float *d_cs = dup_dev(cs, P * D / 2 * 4), *d_sn = dup_dev(sn, P * D / 2 * 4);
  int32_t *d_pos = dup_dev(pos, B * T * 4);
  for (int variant = 0; variant < 4; variant++) {
    float sign = variant & 1 ? -1.0f : 1.0f;
    const int32_t *hp = variant & 2 ? pos : NULL, *dp = variant & 2 ? d_pos : NULL;
    randn(x, n, &r, 1);
    float *d_x = dup_dev(x, n * 4);
    prm_dev_rope(g_dev, d_x, d_cs, d_sn, B, T, nh, D, 5, dp, sign);
    if (sign > 0) {
      if (hp) prm_rope_forward_pos(x, cs, sn, B, T, nh, D, hp);
      else prm_rope_forward(x, cs, sn, B, T, nh, D, 5);
    } else {
      if (hp) prm_rope_backward_pos(x, cs, sn, B, T, nh, D, hp);
      else prm_rope_backward(x, cs, sn, B, T, nh, D, 5);
    }
    fetch(got, d_x, n * 4);
    check("rope", got, x, n, 1e-6);
    dfree(d_x, n * 4);
  }
  dfree(d_cs, P * D / 2 * 4), dfree(d_sn, P * D / 2 * 4), dfree(d_pos, B * T * 4);
  free(cs), free(sn), free(x), free(got), free(pos);
}

static void test_swiglu_add(void **state) {
  (void)state;
  int64_t n = 5000;
  prm_rng_t r;
  prm_rng_seed(&r, 7);
  float *g = falloc(n), *u = falloc(n), *dh = falloc(n), *h = falloc(n), *dg = falloc(n);
  float *du = falloc(n), *got = falloc(n);
  randn(g, n, &r, 3);
  randn(u, n, &r, 1);
  randn(dh, n, &r, 1);
  float *d_g = dup_dev(g, n * 4), *d_u = dup_dev(u, n * 4), *d_dh = dup_dev(dh, n * 4);
  float *d_h = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 4);
  float *d_dg = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 4);
  float *d_du = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 4);
  prm_dev_swiglu_forward(g_dev, d_h, d_g, d_u, n);
  prm_swiglu_forward(h, g, u, n);
  fetch(got, d_h, n * 4);
  check("swiglu_forward", got, h, n, 1e-6);
  prm_dev_swiglu_backward(g_dev, d_dg, d_du, d_dh, d_g, d_u, n);
  prm_swiglu_backward(dg, du, dh, g, u, n);
  fetch(got, d_dg, n * 4);
  check("swiglu_backward dgate", got, dg, n, 1e-6);
  fetch(got, d_du, n * 4);
  check("swiglu_backward dup", got, du, n, 1e-6);
  prm_dev_add(g_dev, d_g, d_g, d_u, n); /* in place */
  prm_add(g, g, u, n);
  fetch(got, d_g, n * 4);
  check("add", got, g, n, 0);
  assert_memory_equal(got, g, (size_t)n * 4);
  prm_dev_scale(g_dev, d_g, n, 0.37f);
  prm_scale(g, n, 0.37f);
  fetch(got, d_g, n * 4);
  check("scale", got, g, n, 0);
  assert_memory_equal(got, g, (size_t)n * 4);
  dfree(d_g, n * 4), dfree(d_u, n * 4), dfree(d_dh, n * 4), dfree(d_h, n * 4);
  dfree(d_dg, n * 4), dfree(d_du, n * 4);
  free(g), free(u), free(dh), free(h), free(dg), free(du), free(got);
}

/* ------------------------------------------------------------------------ */
/* Attention                                                                  */
/* ------------------------------------------------------------------------ */

/* One shape: forward and backward against the CPU kernels, with and
 * without packed segments, and the device's backward twice (same bits). */
static void attention_case(int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int packed) {
  prm_rng_t r;
  prm_rng_seed(&r, (uint64_t)(B * 1000 + T * 10 + H + G + D + packed));
  int64_t nq = B * T * H * D, nk = B * T * G * D, nl = B * H * T;
  float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *dout = falloc(nq);
  float *out = falloc(nq), *lse = falloc(nl), *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
  float *got = falloc(nq), *got2 = falloc(nq);
  int32_t *seg = NULL;
  randn(q, nq, &r, 1);
  randn(k, nk, &r, 1);
  randn(v, nk, &r, 1);
  randn(dout, nq, &r, 1);
  if (packed) seg = packed_segments(B, T);
  float *d_q = dup_dev(q, nq * 4), *d_k = dup_dev(k, nk * 4), *d_v = dup_dev(v, nk * 4);
  float *d_do = dup_dev(dout, nq * 4);
  int32_t *d_seg = seg ? dup_dev(seg, B * T * 4) : NULL;
  float *d_out = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nq * 4);
  float *d_lse = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nl * 4);
  float *d_dq = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nq * 4);
  float *d_dk = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nk * 4);
  float *d_dv = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nk * 4);

  prm_dev_attention_forward(g_dev, d_out, d_lse, d_q, d_k, d_v, d_seg, B, T, H, G, D);
  prm_attention_forward_seg(out, lse, q, k, v, seg, B, T, H, G, D);
  fetch(got, d_out, nq * 4);
  check("attention_forward out", got, out, nq, 1e-5);
  fetch(got, d_lse, nl * 4);
  check("attention_forward lse", got, lse, nl, 1e-5);

  /* Backward from the reference's out and lse, so only backward differs. */
  float *d_out_ref = dup_dev(out, nq * 4), *d_lse_ref = dup_dev(lse, nl * 4);
  prm_attention_backward_seg(dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
  prm_dev_attention_backward(g_dev, d_dq, d_dk, d_dv, d_do, d_q, d_k, d_v, d_out_ref, d_lse_ref,
                             d_seg, B, T, H, G, D);
  fetch(got, d_dq, nq * 4);
  check("attention_backward dq", got, dq, nq, 2e-5);
  fetch(got, d_dk, nk * 4);
  check("attention_backward dk", got, dk, nk, 2e-5);
  fetch(got2, d_dv, nk * 4);
  check("attention_backward dv", got2, dv, nk, 2e-5);
  prm_dev_attention_backward(g_dev, d_dq, d_dk, d_dv, d_do, d_q, d_k, d_v, d_out_ref, d_lse_ref,
                             d_seg, B, T, H, G, D);
  float *again = falloc(nk);
  fetch(again, d_dk, nk * 4);
  check_same("attention_backward dk", again, got, nk);
  fetch(again, d_dv, nk * 4);
  check_same("attention_backward dv", again, got2, nk);

  dfree(d_q, nq * 4), dfree(d_k, nk * 4), dfree(d_v, nk * 4), dfree(d_do, nq * 4);
  if (d_seg) dfree(d_seg, B * T * 4);
  dfree(d_out, nq * 4), dfree(d_lse, nl * 4), dfree(d_dq, nq * 4), dfree(d_dk, nk * 4);
  dfree(d_dv, nk * 4), dfree(d_out_ref, nq * 4), dfree(d_lse_ref, nl * 4);
  free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
  free(got), free(got2), free(again), free(seg);
}

static void test_attention(void **state) {
  (void)state;
  attention_case(2, 37, 4, 2, 64, 0);  /* GQA, T not a multiple of any block */
  attention_case(1, 70, 3, 3, 32, 0);  /* MHA, small heads */
  attention_case(2, 45, 4, 1, 64, 1);  /* one KV group, packed segments */
  attention_case(1, 20, 2, 2, 128, 0); /* the largest head size */
  attention_case(1, 150, 4, 2, 64, 1); /* GQA and segments across the CUDA
                                          module's query strips (ctest runs it
                                          with 16-row strips too) */
}

/* bf16 attention (the optional attention_*_bf16 members) on one shape,
 * against the CPU's bf16 kernels (attention16.c) on the same bf16 inputs:
 * bit for bit on the CPU backends; on a GPU within the rounding of P and
 * dS to bf16. The forward differs most: the CPU kernel rounds the
 * unnormalised exp(s - running max), the CUDA module the normalised P
 * (the host emulation of the module: out within 2e-3 of its largest
 * value, the backward's from the same out and lse within 3e-7). The
 * backward twice gives the same bits. */
static void attention_bf16_case(int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                                int packed) {
  prm_rng_t r;
  prm_rng_seed(&r, (uint64_t)(B * 7000 + T * 10 + H + G + D + packed));
  int64_t nq = B * T * H * D, nk = B * T * G * D, nl = B * H * T;
  float *qf = falloc(nq), *kf = falloc(nk), *vf = falloc(nk), *df = falloc(nq);
  float *out = falloc(nq), *lse = falloc(nl), *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
  float *got = falloc(nq), *got2 = falloc(nk), *again = falloc(nk);
  prm_bf16_t *q = prm_xcalloc((size_t)nq, 2), *k = prm_xcalloc((size_t)nk, 2);
  prm_bf16_t *v = prm_xcalloc((size_t)nk, 2), *dout = prm_xcalloc((size_t)nq, 2);
  int32_t *seg = NULL;
  randn(qf, nq, &r, 1.5);
  randn(kf, nk, &r, 1.5);
  randn(vf, nk, &r, 1);
  randn(df, nq, &r, 1);
  prm_f32_to_bf16(q, qf, nq);
  prm_f32_to_bf16(k, kf, nk);
  prm_f32_to_bf16(v, vf, nk);
  prm_f32_to_bf16(dout, df, nq);
  if (packed) seg = packed_segments(B, T);
  void *d_q = dup_dev(q, nq * 2), *d_k = dup_dev(k, nk * 2), *d_v = dup_dev(v, nk * 2);
  void *d_do = dup_dev(dout, nq * 2);
  int32_t *d_seg = seg ? dup_dev(seg, B * T * 4) : NULL;
  float *d_out = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nq * 4);
  float *d_lse = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nl * 4);
  float *d_dq = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nq * 4);
  float *d_dk = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nk * 4);
  float *d_dv = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nk * 4);

  prm_dev_attention_forward_bf16(g_dev, d_out, d_lse, d_q, d_k, d_v, d_seg, B, T, H, G, D);
  prm_attention_forward_bf16(out, lse, q, k, v, seg, B, T, H, G, D);
  fetch(got, d_out, nq * 4);
  check("attention_forward_bf16 out", got, out, nq, 8e-3);
  fetch(got, d_lse, nl * 4);
  check("attention_forward_bf16 lse", got, lse, nl, 1e-5);

  float *d_out_ref = dup_dev(out, nq * 4), *d_lse_ref = dup_dev(lse, nl * 4);
  prm_attention_backward_bf16(dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
  prm_dev_attention_backward_bf16(g_dev, d_dq, d_dk, d_dv, d_do, d_q, d_k, d_v, d_out_ref,
                                  d_lse_ref, d_seg, B, T, H, G, D);
  fetch(got, d_dq, nq * 4);
  check("attention_backward_bf16 dq", got, dq, nq, 1.5e-2);
  fetch(got2, d_dk, nk * 4);
  check("attention_backward_bf16 dk", got2, dk, nk, 1.5e-2);
  fetch(got, d_dv, nk * 4);
  check("attention_backward_bf16 dv", got, dv, nk, 8e-3);
  prm_dev_attention_backward_bf16(g_dev, d_dq, d_dk, d_dv, d_do, d_q, d_k, d_v, d_out_ref,
                                  d_lse_ref, d_seg, B, T, H, G, D);
  fetch(again, d_dk, nk * 4);
  check_same("attention_backward_bf16 dk", again, got2, nk);
  fetch(again, d_dv, nk * 4);
  check_same("attention_backward_bf16 dv", again, got, nk);

  dfree(d_q, nq * 2), dfree(d_k, nk * 2), dfree(d_v, nk * 2), dfree(d_do, nq * 2);
  if (d_seg) dfree(d_seg, B * T * 4);
  dfree(d_out, nq * 4), dfree(d_lse, nl * 4), dfree(d_dq, nq * 4), dfree(d_dk, nk * 4);
  dfree(d_dv, nk * 4), dfree(d_out_ref, nq * 4), dfree(d_lse_ref, nl * 4);
  free(qf), free(kf), free(vf), free(df), free(out), free(lse), free(dq), free(dk), free(dv);
  free(got), free(got2), free(again), free(q), free(k), free(v), free(dout), free(seg);
}

static void test_attention_bf16(void **state) {
  (void)state;
  if (!prm_dev_has_attention_bf16(g_dev)) {
    printf("%s has no bf16 attention: bf16 runs keep attention in fp32\n", g_dev->i->name);
    assert_true(g_dev->kind != PRM_DEV_KIND_CPU); /* the CPU backends have it */
    return;
  }
  attention_bf16_case(2, 37, 4, 2, 64, 0);  /* GQA, T not a multiple of any block */
  attention_bf16_case(1, 70, 3, 3, 32, 0);  /* MHA, small heads */
  attention_bf16_case(1, 20, 2, 2, 128, 0); /* the largest head size */
  attention_bf16_case(1, 150, 4, 2, 64, 1); /* GQA and segments across query strips */
}

static void test_attention_decode(void **state) {
  (void)state;
  int64_t Tk = 29, Tq = 4, H = 4, G = 2, D = 64;
  prm_rng_t r;
  prm_rng_seed(&r, 8);
  float *q = falloc(Tq * H * D), *kc = falloc(Tk * G * D), *vc = falloc(Tk * G * D);
  float *out = falloc(Tq * H * D), *got = falloc(Tq * H * D);
  randn(q, Tq * H * D, &r, 1);
  randn(kc, Tk * G * D, &r, 1);
  randn(vc, Tk * G * D, &r, 1);
  float *d_q = dup_dev(q, Tq * H * D * 4), *d_k = dup_dev(kc, Tk * G * D * 4);
  float *d_v = dup_dev(vc, Tk * G * D * 4), *d_o = prm_dev_alloc(g_dev, PRM_MEM_OTHER, Tq * H * D * 4);
  prm_dev_attention_decode(g_dev, d_o, d_q, d_k, d_v, Tq, Tk, H, G, D);
  prm_attention_decode(out, q, kc, vc, Tq, Tk, H, G, D);
  fetch(got, d_o, Tq * H * D * 4);
  check("attention_decode", got, out, Tq * H * D, 1e-5);
  dfree(d_q, Tq * H * D * 4), dfree(d_k, Tk * G * D * 4), dfree(d_v, Tk * G * D * 4);
  dfree(d_o, Tq * H * D * 4);
  free(q), free(kc), free(vc), free(out), free(got);
}

/* ------------------------------------------------------------------------ */
/* Loss, LM head, optimizer, reductions                                       */
/* ------------------------------------------------------------------------ */

/* One xent case: N rows of V logits (every fifth row masked), dlogits in
 * place, against the CPU's forward and backward; twice, the same bits.
 * With ninf, row 1's first half and row 2's every other logit are -inf
 * (a padded vocabulary), which add nothing to the sums. */
static void xent_case(int64_t N, int64_t V, uint64_t seed, int ninf) {
  prm_rng_t r;
  prm_rng_seed(&r, seed);
  float *logits = falloc(N * V), *losses = falloc(N), *dl = falloc(N * V), *got = falloc(N * V);
  float *again = falloc(N * V);
  int32_t *tg = prm_xcalloc((size_t)N, 4);
  randn(logits, N * V, &r, 4);
  for (int64_t i = 0; i < N; i++) tg[i] = i % 5 == 4 ? -1 : (int32_t)(prm_rng_u64(&r) % V);
  if (ninf) {
    tg[1] = (int32_t)(V - 1), tg[2] = 1;
    for (int64_t j = 0; j < V / 2; j++) logits[V + j] = -INFINITY;
    for (int64_t j = 0; j < V; j += 2) logits[2 * V + j] = -INFINITY;
  }
  float *d_l = dup_dev(logits, N * V * 4), *d_loss = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * 4);
  int32_t *d_t = dup_dev(tg, N * 4);
  prm_xent_forward(losses, logits, tg, N, V);
  prm_xent_backward(dl, logits, tg, N, V, 0.25f);
  prm_dev_xent(g_dev, d_loss, d_l, d_l, d_t, N, V, 0.25f); /* dlogits in place */
  fetch(got, d_loss, N * 4);
  check("xent losses", got, losses, N, 2e-6);
  for (int64_t i = 0; i < N; i++)
    if (tg[i] < 0) assert_true(got[i] == 0.0f);
  fetch(got, d_l, N * V * 4);
  check("xent dlogits", got, dl, N * V, 1e-6);
  prm_err_t err = {0};
  assert_int_equal(prm_dev_upload(g_dev, d_l, logits, (size_t)(N * V) * 4, &err), 0);
  prm_dev_xent(g_dev, d_loss, d_l, d_l, d_t, N, V, 0.25f);
  fetch(again, d_l, N * V * 4);
  check_same("xent dlogits", again, got, N * V);
  dfree(d_l, N * V * 4), dfree(d_loss, N * 4), dfree(d_t, N * 4);
  free(logits), free(losses), free(dl), free(got), free(again), free(tg);
}

/* V = 1003: one column at a time; V = 1024: float4s on a GPU. A target >=
 * V (not on the CPU, which asserts) fails the next sync, naming xent, and
 * its row is treated as masked. */
static void test_xent(void **state) {
  (void)state;
  xent_case(21, 1003, 9, 0);
  xent_case(21, 1024, 11, 1);
  if (g_dev->kind == PRM_DEV_KIND_CPU) return;
  int64_t N = 3, V = 64;
  float *l = falloc(N * V), *got = falloc(N * V);
  int32_t tg[3] = {5, (int32_t)V, 7};
  float *d_l = dup_dev(l, N * V * 4), *d_loss = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * 4);
  int32_t *d_t = dup_dev(tg, sizeof tg);
  prm_dev_xent(g_dev, d_loss, d_l, d_l, d_t, N, V, 1.0f);
  prm_err_t err = {0};
  assert_int_equal(prm_dev_sync(g_dev, &err), PRM_ERUNTIME);
  assert_non_null(strstr(err.msg, "xent"));
  assert_int_equal(prm_dev_download(g_dev, got, d_l, (size_t)(N * V) * 4, &err), 0);
  for (int64_t j = 0; j < V; j++) assert_true(got[V + j] == 0.0f);
  assert_true(got[0] > 0.0f && got[5] < 0.0f && got[2 * V + 7] < 0.0f); /* the others as usual */
  dfree(d_l, N * V * 4), dfree(d_loss, N * 4), dfree(d_t, sizeof tg);
  free(l), free(got);
}

/* xent16: the losses and the bf16 dlogits, the fused member against its
 * twin (xent in place, then f32_to_bf16; PRIMUS_DEVICE_UNFUSED's path):
 * the same bits, the fused one leaving the logits as they were; against
 * the CPU's dlogits rounded to bf16 within one bf16 step. V = 1003 and
 * 1024 (float4s on a GPU, -inf logits); a row of masked zeros. */
static void xent16_case(int64_t N, int64_t V, uint64_t seed) {
  prm_rng_t r;
  prm_rng_seed(&r, seed);
  float *logits = falloc(N * V), *losses = falloc(N), *dl = falloc(N * V), *got = falloc(N * V);
  float *loss2 = falloc(N), *want = falloc(N * V);
  prm_bf16_t *w16 = prm_xcalloc((size_t)(N * V), 2), *h16[2];
  int32_t *tg = prm_xcalloc((size_t)N, 4);
  randn(logits, N * V, &r, 4);
  for (int64_t i = 0; i < N; i++) tg[i] = i % 5 == 4 ? -1 : (int32_t)(prm_rng_u64(&r) % V);
  for (int64_t j = 0; j < V / 3; j++) logits[V + 3 * j] = -INFINITY;
  prm_xent_forward(losses, logits, tg, N, V);
  prm_xent_backward(dl, logits, tg, N, V, 0.5f);
  prm_f32_to_bf16(w16, dl, N * V);
  prm_bf16_to_f32(want, w16, N * V);
  int32_t *d_t = dup_dev(tg, N * 4);
  float *d_loss = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * 4);
  int keep = g_dev->unfused;
  for (int u = 0; u < 2; u++) { /* 0: the member (where there is one), 1: the twin */
    float *d_l = dup_dev(logits, N * V * 4);
    prm_bf16_t *d_16 = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * V * 2);
    h16[u] = prm_xcalloc((size_t)(N * V), 2);
    g_dev->unfused = u;
    prm_dev_xent16(g_dev, d_loss, d_16, d_l, d_t, N, V, 0.5f);
    fetch(u ? loss2 : got, d_loss, N * 4);
    fetch(h16[u], d_16, N * V * 2);
    if (!u && g_dev->i->xent16) { /* the logits as they were */
      float *l = falloc(N * V);
      fetch(l, d_l, N * V * 4);
      assert_memory_equal(l, logits, (size_t)(N * V) * 4);
      free(l);
    }
    dfree(d_l, N * V * 4), dfree(d_16, N * V * 2);
  }
  g_dev->unfused = keep;
  check("xent16 losses", got, losses, N, 2e-6);
  assert_memory_equal(got, loss2, (size_t)N * 4);
  assert_memory_equal(h16[0], h16[1], (size_t)(N * V) * 2);
  for (int64_t j = 0; j < V; j++) assert_true(h16[0][4 * V + j] == 0); /* masked */
  prm_bf16_to_f32(got, h16[0], N * V);
  check("xent16 dlogits", got, want, N * V, 4e-3);
  dfree(d_t, N * 4), dfree(d_loss, N * 4);
  free(logits), free(losses), free(dl), free(got), free(loss2), free(want), free(w16), free(tg);
  free(h16[0]), free(h16[1]);
}

static void test_xent16(void **state) {
  (void)state;
  xent16_case(11, 1003, 21);
  xent16_case(11, 1024, 22);
}

static void test_lmhead_xent(void **state) {
  (void)state;
  int64_t N = 50, C = 48, V = 301, chunk = 16;
  prm_rng_t r;
  prm_rng_seed(&r, 10);
  float *x = falloc(N * C), *w = falloc(V * C), *dx = falloc(N * C), *dw = falloc(V * C);
  float *got = falloc(V * C), *scratch = falloc(chunk * V);
  int32_t *tg = prm_xcalloc((size_t)N, 4);
  randn(x, N * C, &r, 1);
  randn(w, V * C, &r, 0.2);
  randn(dw, V * C, &r, 0.1);
  for (int64_t i = 0; i < N; i++) tg[i] = i % 9 == 2 ? -1 : (int32_t)(prm_rng_u64(&r) % V);
  float *d_x = dup_dev(x, N * C * 4), *d_w = dup_dev(w, V * C * 4), *d_dw = dup_dev(dw, V * C * 4);
  float *d_dx = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * C * 4);
  float *d_s = prm_dev_alloc(g_dev, PRM_MEM_OTHER, chunk * V * 4);
  float *d_loss = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * 4);
  int32_t *d_t = dup_dev(tg, N * 4);
  int64_t cnt = 0, dcnt = 0;
  double want = prm_lmhead_xent(&g_gemm, dx, dw, &cnt, x, w, tg, N, C, V, 0.02f, scratch, chunk);
  double have = prm_dev_lmhead_xent(g_dev, d_dx, d_dw, &dcnt, d_x, d_w, d_t, tg, N, C, V, 0.02f,
                                    d_s, d_loss, chunk);
  assert_int_equal(cnt, dcnt);
  if (fabs(have - want) > 1e-5 * fabs(want)) {
    fprintf(stderr, "lmhead_xent loss %.10g vs %.10g\n", have, want);
    fail();
  }
  g_exact = 0; /* the device sums row losses kept in fp32; the kernel in double */
  fetch(got, d_dx, N * C * 4);
  check("lmhead_xent dx", got, dx, N * C, 2e-5);
  fetch(got, d_dw, V * C * 4);
  check("lmhead_xent dw", got, dw, V * C, 2e-5);
  g_exact = g_dev->kind == PRM_DEV_KIND_CPU;
  dfree(d_x, N * C * 4), dfree(d_w, V * C * 4), dfree(d_dw, V * C * 4), dfree(d_dx, N * C * 4);
  dfree(d_s, chunk * V * 4), dfree(d_loss, N * 4), dfree(d_t, N * 4);
  free(x), free(w), free(dx), free(dw), free(got), free(scratch), free(tg);
}

static void test_adamw_reductions(void **state) {
  (void)state;
  int64_t n = 10007;
  prm_rng_t r;
  prm_rng_seed(&r, 11);
  float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n), *got = falloc(n);
  randn(p, n, &r, 1);
  float *d_p = dup_dev(p, n * 4), *d_g = prm_dev_alloc(g_dev, PRM_MEM_GRADS, n * 4);
  float *d_m = prm_dev_alloc(g_dev, PRM_MEM_OPTIM, n * 4);
  float *d_v = prm_dev_alloc(g_dev, PRM_MEM_OPTIM, n * 4);
  prm_err_t err = {0};
  for (int64_t step = 1; step <= 3; step++) {
    randn(g, n, &r, 0.1);
    assert_int_equal(prm_dev_upload(g_dev, d_g, g, n * 4, &err), 0);
    prm_dev_adamw(g_dev, d_p, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
    prm_adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
  }
  fetch(got, d_p, n * 4);
  check("adamw p", got, p, n, 1e-6);
  fetch(got, d_m, n * 4);
  check("adamw m", got, m, n, 1e-6);
  fetch(got, d_v, n * 4);
  check("adamw v", got, v, n, 1e-6);
  double ss = prm_dev_sumsq(g_dev, d_p, n), want = prm_sumsq(p, n);
  double s = prm_dev_sum(g_dev, d_p, n), swant = 0;
  for (int64_t i = 0; i < n; i++) swant += p[i];
  if (g_exact) assert_true(ss == want && s == swant);
  assert_true(fabs(ss - want) <= 1e-6 * want); /* p differs by its own tolerance off the CPU */
  assert_true(fabs(s - swant) <= 1e-6 * prm_sumsq(p, n));
  assert_true(prm_dev_sumsq(g_dev, d_p, n) == ss); /* the same bits again */
  /* Many pieces in one pass (sumsq_multi, issue 24): each the bits of its
   * own sumsq, fused or not; an empty piece is 0. */
  int64_t off[5] = {0, 17, 17, 5000, 9000}, num[5] = {17, 0, 4983, 4000, 1007};
  for (int unf = 0; unf < 2; unf++) {
    double got_ss[5];
    int keep = g_dev->unfused;
    g_dev->unfused = unf;
    prm_dev_sumsq_multi(g_dev, got_ss, d_p, off, num, 5);
    g_dev->unfused = keep;
    for (int i = 0; i < 5; i++) {
      double one = num[i] ? prm_dev_sumsq(g_dev, d_p + off[i], num[i]) : 0.0;
      if (got_ss[i] != one) {
        fprintf(stderr, "sumsq_multi piece %d: %.17g vs sumsq %.17g\n", i, got_ss[i], one);
        fail();
      }
      if (g_exact) assert_true(got_ss[i] == prm_sumsq(p + off[i], num[i]));
    }
    assert_true(got_ss[1] == 0.0);
  }
  dfree(d_p, n * 4);
  prm_dev_free(g_dev, PRM_MEM_GRADS, d_g, n * 4);
  prm_dev_free(g_dev, PRM_MEM_OPTIM, d_m, n * 4);
  prm_dev_free(g_dev, PRM_MEM_OPTIM, d_v, n * 4);
  free(p), free(g), free(m), free(v), free(got);
}

/* The fused operators (issue 24) against their unfused twins: the
 * multi-tensor AdamW with the bf16 copy, RMSNorm and SwiGLU writing their
 * bf16 copies. The fused member and the twin (the same device with
 * PRIMUS_DEVICE_UNFUSED's flag set) give the same bits; the AdamW bits are
 * also the CPU's on every backend (as the single-tensor adamw). */
static void test_fused(void **state) {
  (void)state;
  prm_err_t err = {0};
  int keep = g_dev->unfused;
  /* Segments: odd sizes, one empty, one without a bf16 copy, a tensor
   * larger than the CUDA module's 65536-element chunk, three weight decays. */
  prm_dev_adamw_seg_t segs[] = {{0, 70001, 0.1f, 1}, {70001, 0, 0.1f, 1}, {70001, 33, 0.0f, 0},
                                {70034, 4099, 0.1f, 1}, {74133, 517, 0.05f, 1}};
  int nseg = 5;
  int64_t n = 74650;
  prm_rng_t r;
  prm_rng_seed(&r, 12);
  float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n), *got = falloc(n);
  prm_bf16_t *p16 = prm_xcalloc((size_t)n, 2), *got16 = prm_xcalloc((size_t)n, 2);
  randn(p, n, &r, 1);
  float *d_p[2], *d_m[2], *d_v[2];
  prm_bf16_t *d_16[2];
  for (int t = 0; t < 2; t++) {
    d_p[t] = dup_dev(p, n * 4);
    d_m[t] = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 4);
    d_v[t] = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 4);
    d_16[t] = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 2);
  }
  float *d_g = prm_dev_alloc(g_dev, PRM_MEM_OTHER, n * 4);
  for (int64_t step = 1; step <= 3; step++) {
    randn(g, n, &r, 0.1);
    assert_int_equal(prm_dev_upload(g_dev, d_g, g, n * 4, &err), 0);
    if (step == 3) segs[4].wd = 0.2f; /* a changed table (the CUDA module caches it) */
    for (int t = 0; t < 2; t++) { /* t 0: fused, 1: the twin */
      g_dev->unfused = t;
      prm_dev_adamw_multi(g_dev, d_p[t], d_g, d_m[t], d_v[t], d_16[t], segs, nseg, 1e-3f, 0.9f,
                          0.95f, 1e-8f, step, 0.7f);
    }
    for (int i = 0; i < nseg; i++) {
      prm_dev_adamw_seg_t *sg = &segs[i];
      prm_adamw_update(p + sg->offset, g + sg->offset, m + sg->offset, v + sg->offset, sg->numel,
                       1e-3f, 0.9f, 0.95f, 1e-8f, sg->wd, step, 0.7f);
      if (sg->bf16) prm_f32_to_bf16(p16 + sg->offset, p + sg->offset, sg->numel);
    }
  }
  g_dev->unfused = keep;
  for (int t = 0; t < 2; t++) {
    fetch(got, d_p[t], n * 4);
    assert_memory_equal(got, p, (size_t)n * 4);
    fetch(got, d_m[t], n * 4);
    assert_memory_equal(got, m, (size_t)n * 4);
    fetch(got, d_v[t], n * 4);
    assert_memory_equal(got, v, (size_t)n * 4);
    fetch(got16, d_16[t], n * 2);
    assert_memory_equal(got16, p16, (size_t)n * 2); /* the unmarked segment stays 0 */
  }
  /* More distinct weight decays than the CUDA module's one launch takes. */
  prm_dev_adamw_seg_t many[10];
  for (int i = 0; i < 10; i++) many[i] = (prm_dev_adamw_seg_t){i * 100, 100, 0.01f * (float)i, 1};
  prm_dev_adamw_multi(g_dev, d_p[0], d_g, d_m[0], d_v[0], d_16[0], many, 10, 1e-3f, 0.9f, 0.95f,
                      1e-8f, 4, 1.0f);
  for (int i = 0; i < 10; i++) {
    prm_adamw_update(p + i * 100, g + i * 100, m + i * 100, v + i * 100, 100, 1e-3f, 0.9f, 0.95f,
                     1e-8f, many[i].wd, 4, 1.0f);
    prm_f32_to_bf16(p16 + i * 100, p + i * 100, 100);
  }
  fetch(got, d_p[0], n * 4);
  assert_memory_equal(got, p, (size_t)n * 4);
  fetch(got16, d_16[0], n * 2);
  assert_memory_equal(got16, p16, (size_t)n * 2);
  for (int t = 0; t < 2; t++) {
    dfree(d_p[t], n * 4), dfree(d_m[t], n * 4), dfree(d_v[t], n * 4), dfree(d_16[t], n * 2);
  }
  dfree(d_g, n * 4);

  /* RMSNorm (plain, and with the add in place) and SwiGLU with the bf16
   * copy: fused and twin the same bits; the fp32 result against the CPU
   * kernel, the copy the bf16 of the device's own fp32 result. */
  int64_t N = 67, C = 200, nn = N * C;
  float *x = falloc(nn), *b = falloc(nn), *w = falloc(C), *out = falloc(nn), *rstd = falloc(N);
  float *sum = falloc(nn), *ref16f = falloc(nn);
  prm_bf16_t *ref16 = prm_xcalloc((size_t)nn, 2), *h16a = prm_xcalloc((size_t)nn, 2);
  randn(x, nn, &r, 2);
  randn(b, nn, &r, 1);
  randn(w, C, &r, 1);
  float *d_w = dup_dev(w, C * 4), *d_b = dup_dev(b, nn * 4);
  for (int variant = 0; variant < 3; variant++) { /* rmsnorm, add_rmsnorm in place, swiglu */
    float *res[2];
    prm_bf16_t *res16[2];
    for (int t = 0; t < 2; t++) {
      float *d_x = dup_dev(x, nn * 4);
      float *d_o = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nn * 4);
      float *d_r = prm_dev_alloc(g_dev, PRM_MEM_OTHER, N * 4);
      prm_bf16_t *d_16o = prm_dev_alloc(g_dev, PRM_MEM_OTHER, nn * 2);
      g_dev->unfused = t;
      if (variant == 0)
        prm_dev_rmsnorm_forward16(g_dev, NULL, d_o, d_16o, d_r, d_x, NULL, d_w, N, C, 1e-5f);
      else if (variant == 1)
        prm_dev_rmsnorm_forward16(g_dev, d_x, d_o, d_16o, d_r, d_x, d_b, d_w, N, C, 1e-5f);
      else
        prm_dev_swiglu_forward16(g_dev, d_o, d_16o, d_x, d_b, nn);
      g_dev->unfused = keep;
      res[t] = falloc(nn);
      res16[t] = prm_xcalloc((size_t)nn, 2);
      fetch(res[t], d_o, nn * 4);
      fetch(res16[t], d_16o, nn * 2);
      if (variant == 1) { /* the sum, in place over x */
        fetch(got, d_x, nn * 4);
        prm_add(sum, x, b, nn);
        assert_memory_equal(got, sum, (size_t)nn * 4);
      }
      dfree(d_x, nn * 4), dfree(d_o, nn * 4), dfree(d_r, N * 4), dfree(d_16o, nn * 2);
    }
    const char *what[] = {"rmsnorm_forward16", "add rmsnorm_forward16", "swiglu_forward16"};
    assert_memory_equal(res[0], res[1], (size_t)nn * 4);
    assert_memory_equal(res16[0], res16[1], (size_t)nn * 2);
    prm_f32_to_bf16(h16a, res[0], nn);
    assert_memory_equal(res16[0], h16a, (size_t)nn * 2);
    if (variant == 0) prm_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    else if (variant == 1) prm_add_rmsnorm_forward(sum, out, rstd, x, b, w, N, C, 1e-5f);
    else prm_swiglu_forward(out, x, b, nn);
    check(what[variant], res[0], out, nn, 2e-6);
    prm_f32_to_bf16(ref16, out, nn);
    prm_bf16_to_f32(ref16f, ref16, nn);
    if (g_exact) assert_memory_equal(res16[0], ref16, (size_t)nn * 2);
    for (int t = 0; t < 2; t++) free(res[t]), free(res16[t]);
  }
  dfree(d_w, C * 4), dfree(d_b, nn * 4);
  free(x), free(b), free(w), free(out), free(rstd), free(sum), free(ref16f), free(ref16), free(h16a);
  free(p), free(g), free(m), free(v), free(got), free(p16), free(got16);
}

/* ------------------------------------------------------------------------ */
/* The element-wise kernels' two paths                                        */
/* ------------------------------------------------------------------------ */

/* The CUDA module runs its element-wise operators through float4, warp-per-
 * row and sorted kernels where the shape and the pointers allow, through
 * its first scalar kernels otherwise, and everywhere with
 * PRIMUS_CUDA_ELTWISE=scalar. test_eltwise_paths runs each operator on g_dev
 * and on a second device opened with that knob, on the same inputs, at
 * shapes and offsets that take each path: lengths off the vector width,
 * pointers 4 bytes past a 16-byte boundary, rows whose width is not a
 * multiple of 4 or wider than the warp kernels take, a token repeated over
 * a thousand times among ids in random order. The two devices must agree
 * bit for bit, and with the CPU kernel within its tolerance (the embedding
 * backward bit for bit: both add each token's rows in row order, as the
 * CPU does). On the CPU backends the knob changes nothing; the checks
 * still hold. */

static void *dup_on(prm_dev_t *d, const void *h, size_t bytes) {
  void *p = prm_dev_alloc(d, PRM_MEM_OTHER, bytes);
  assert_non_null(p);
  prm_err_t err = {0};
  assert_int_equal(prm_dev_upload(d, p, h, bytes, &err), 0);
  return p;
}

static void fetch_on(prm_dev_t *d, void *h, const void *p, size_t bytes) {
  prm_err_t err = {0};
  int rc = prm_dev_sync(d, &err);
  if (rc) fprintf(stderr, "device failure: %s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(prm_dev_download(d, h, p, bytes, &err), 0);
}

/* g_dev's backend again, opened with PRIMUS_CUDA_ELTWISE=scalar. */
static prm_dev_t *open_scalar(void) {
  const char *was = getenv("PRIMUS_CUDA_ELTWISE");
  char *keep = was ? prm_xstrdup(was) : NULL;
  setenv("PRIMUS_CUDA_ELTWISE", "scalar", 1);
  prm_dev_opts_t o = {.want = prm_dev_kind_name(g_dev->kind), .local_rank = 0, .gemm = g_gemm,
                      .module_path = g_dev->kind == PRM_DEV_KIND_CUDA ? g_dev->module : NULL};
  prm_dev_t *d = NULL;
  prm_err_t err = {0};
  int rc = prm_dev_open(&o, &d, &err);
  if (keep) setenv("PRIMUS_CUDA_ELTWISE", keep, 1);
  else unsetenv("PRIMUS_CUDA_ELTWISE");
  free(keep);
  if (rc) fprintf(stderr, "PRIMUS_CUDA_ELTWISE=scalar: %s\n", err.msg);
  assert_int_equal(rc, 0);
  return d;
}

/* SwiGLU (fp32, with the bf16 copy, backward), add and scale over n
 * elements at an offset of off floats into their buffers. */
static void eltwise_case(prm_dev_t *dv[2], int64_t n, int64_t off, prm_rng_t *r) {
  const int64_t m = n + 8, nb = m * 4;
  float *g = falloc(m), *u = falloc(m), *dh = falloc(m), *want = falloc(n), *want2 = falloc(n);
  float *got[2][6];
  prm_bf16_t *got16[2], *want16 = prm_xcalloc((size_t)n, 2);
  randn(g, m, r, 3);
  randn(u, m, r, 1);
  randn(dh, m, r, 1);
  for (int k = 0; k < 2; k++) {
    prm_dev_t *d = dv[k];
    float *d_g = dup_on(d, g, nb), *d_u = dup_on(d, u, nb), *d_dh = dup_on(d, dh, nb);
    float *d_o[5];
    for (int j = 0; j < 5; j++) d_o[j] = dup_on(d, dh, nb);
    prm_bf16_t *d_16 = prm_dev_alloc(d, PRM_MEM_OTHER, (size_t)m * 2);
    prm_dev_swiglu_forward(d, d_o[0] + off, d_g + off, d_u + off, n);
    prm_dev_swiglu_forward16(d, d_o[1] + off, d_16 + off, d_g + off, d_u + off, n);
    prm_dev_swiglu_backward(d, d_o[2] + off, d_o[3] + off, d_dh + off, d_g + off, d_u + off, n);
    prm_dev_add(d, d_o[4] + off, d_g + off, d_u + off, n);
    prm_dev_scale(d, d_o[4] + off, n, 0.37f);
    for (int j = 0; j < 5; j++) {
      got[k][j] = falloc(n);
      fetch_on(d, got[k][j], d_o[j] + off, (size_t)n * 4);
    }
    got16[k] = prm_xcalloc((size_t)n, 2);
    fetch_on(d, got16[k], d_16 + off, (size_t)n * 2);
    for (int j = 0; j < 5; j++) prm_dev_free(d, PRM_MEM_OTHER, d_o[j], nb);
    prm_dev_free(d, PRM_MEM_OTHER, d_g, nb), prm_dev_free(d, PRM_MEM_OTHER, d_u, nb);
    prm_dev_free(d, PRM_MEM_OTHER, d_dh, nb), prm_dev_free(d, PRM_MEM_OTHER, d_16, (size_t)m * 2);
  }
  for (int j = 0; j < 5; j++) check_same("eltwise: the two paths", got[0][j], got[1][j], n);
  assert_memory_equal(got16[0], got16[1], (size_t)n * 2);
  prm_swiglu_forward(want, g + off, u + off, n);
  check("swiglu_forward", got[0][0], want, n, 1e-6);
  check("swiglu_forward16 h", got[0][1], want, n, 1e-6);
  prm_f32_to_bf16(want16, got[0][1], n); /* the copy rounds the device's own h */
  assert_memory_equal(got16[0], want16, (size_t)n * 2);
  prm_swiglu_backward(want, want2, dh + off, g + off, u + off, n);
  check("swiglu_backward dgate", got[0][2], want, n, 1e-6);
  check("swiglu_backward dup", got[0][3], want2, n, 1e-6);
  prm_add(want, g + off, u + off, n);
  prm_scale(want, n, 0.37f);
  check("add, scale", got[0][4], want, n, 0);
  assert_memory_equal(got[0][4], want, (size_t)n * 4);
  for (int k = 0; k < 2; k++) {
    for (int j = 0; j < 5; j++) free(got[k][j]);
    free(got16[k]);
  }
  free(g), free(u), free(dh), free(want), free(want2), free(want16);
}

/* RoPE forward with positions and backward from pos0, x at off floats. */
static void rope_case(prm_dev_t *dv[2], int64_t D, int64_t off, prm_rng_t *r) {
  const int64_t B = 2, T = 9, nh = 3, P = 32, n = B * T * nh * D, nb = (n + off) * 4;
  float *cs = falloc(P * D / 2), *sn = falloc(P * D / 2), *x = falloc(n + off), *want = falloc(n);
  float *got[2];
  int32_t *pos = prm_xcalloc((size_t)(B * T), 4);
  prm_rope_tables(cs, sn, P, D, 10000.0);
  for (int64_t i = 0; i < B * T; i++) pos[i] = (int32_t)((i * 7) % P);
  randn(x, n + off, r, 1);
  for (int k = 0; k < 2; k++) {
    prm_dev_t *d = dv[k];
    float *d_cs = dup_on(d, cs, P * D / 2 * 4), *d_sn = dup_on(d, sn, P * D / 2 * 4);
    float *d_x = dup_on(d, x, nb);
    int32_t *d_pos = dup_on(d, pos, B * T * 4);
    prm_dev_rope(d, d_x + off, d_cs, d_sn, B, T, nh, D, 0, d_pos, 1.0f);
    prm_dev_rope(d, d_x + off, d_cs, d_sn, B, T, nh, D, 3, NULL, -1.0f);
    got[k] = falloc(n);
    fetch_on(d, got[k], d_x + off, (size_t)n * 4);
    prm_dev_free(d, PRM_MEM_OTHER, d_cs, P * D / 2 * 4);
    prm_dev_free(d, PRM_MEM_OTHER, d_sn, P * D / 2 * 4);
    prm_dev_free(d, PRM_MEM_OTHER, d_x, nb), prm_dev_free(d, PRM_MEM_OTHER, d_pos, B * T * 4);
  }
  check_same("rope: the two paths", got[0], got[1], n);
  memcpy(want, x + off, (size_t)n * 4);
  prm_rope_forward_pos(want, cs, sn, B, T, nh, D, pos);
  prm_rope_backward(want, cs, sn, B, T, nh, D, 3);
  check("rope", got[0], want, n, 1e-6);
  free(got[0]), free(got[1]);
  free(cs), free(sn), free(x), free(want), free(pos);
}

/* RMSNorm forward (plain, with the add, with the bf16 copy) and backward
 * (accumulated dx and dw, from the CPU's rstd) on N rows of C, every
 * tensor at off floats into its buffer. */
static void rmsnorm_case(prm_dev_t *dv[2], int64_t N, int64_t C, int64_t off, prm_rng_t *r) {
  const int64_t nn = N * C, m = nn + off, nb = m * 4, cb = (C + off) * 4, rb = (N + off) * 4;
  float *x = falloc(m), *b = falloc(m), *w = falloc(C + off), *dout = falloc(m), *dx = falloc(m);
  float *dw = falloc(C + off), *out = falloc(nn), *rstd = falloc(N + off), *sum = falloc(nn);
  float *dxw = falloc(nn), *dww = falloc(C);
  float *got[2][6];
  prm_bf16_t *got16[2], *want16 = prm_xcalloc((size_t)nn, 2);
  randn(x, m, r, 2);
  randn(b, m, r, 1);
  randn(w, C + off, r, 1);
  randn(dout, m, r, 1);
  randn(dx, m, r, 1);
  randn(dw, C + off, r, 1);
  prm_rmsnorm_forward(out, rstd + off, x + off, w + off, N, C, 1e-5f); /* the backward's rstd */
  for (int k = 0; k < 2; k++) {
    prm_dev_t *d = dv[k];
    float *d_x = dup_on(d, x, nb), *d_b = dup_on(d, b, nb), *d_w = dup_on(d, w, cb);
    float *d_do = dup_on(d, dout, nb), *d_dx = dup_on(d, dx, nb), *d_dw = dup_on(d, dw, cb);
    float *d_r = dup_on(d, rstd, rb), *d_r2 = dup_on(d, rstd, rb), *d_o = dup_on(d, x, nb);
    float *d_s = dup_on(d, x, nb), *d_o2 = dup_on(d, x, nb);
    prm_bf16_t *d_16 = prm_dev_alloc(d, PRM_MEM_OTHER, (size_t)m * 2);
    prm_dev_rmsnorm_backward(d, d_dx + off, d_dw + off, d_do + off, d_x + off, d_w + off,
                             d_r + off, N, C);
    prm_dev_rmsnorm_forward(d, d_o + off, d_r2 + off, d_x + off, d_w + off, N, C, 1e-5f);
    prm_dev_rmsnorm_forward16(d, d_s + off, d_o2 + off, d_16 + off, d_r + off, d_x + off,
                              d_b + off, d_w + off, N, C, 1e-5f);
    float *src[6] = {d_dx, d_dw, d_o, d_r2, d_s, d_o2};
    int64_t len[6] = {nn, C, nn, N, nn, nn};
    for (int j = 0; j < 6; j++) {
      got[k][j] = falloc(len[j]);
      fetch_on(d, got[k][j], src[j] + off, (size_t)len[j] * 4);
    }
    got16[k] = prm_xcalloc((size_t)nn, 2);
    fetch_on(d, got16[k], d_16 + off, (size_t)nn * 2);
    float *all[] = {d_x, d_b, d_do, d_dx, d_o, d_s, d_o2};
    for (int j = 0; j < 7; j++) prm_dev_free(d, PRM_MEM_OTHER, all[j], nb);
    prm_dev_free(d, PRM_MEM_OTHER, d_w, cb), prm_dev_free(d, PRM_MEM_OTHER, d_dw, cb);
    prm_dev_free(d, PRM_MEM_OTHER, d_r, rb), prm_dev_free(d, PRM_MEM_OTHER, d_r2, rb);
    prm_dev_free(d, PRM_MEM_OTHER, d_16, (size_t)m * 2);
  }
  const char *what[] = {"rmsnorm_backward dx", "rmsnorm_backward dw", "rmsnorm_forward out",
                        "rmsnorm_forward rstd", "add_rmsnorm_forward16 sum",
                        "add_rmsnorm_forward16 out"};
  int64_t len[6] = {nn, C, nn, N, nn, nn};
  for (int j = 0; j < 6; j++) check_same(what[j], got[0][j], got[1][j], len[j]);
  assert_memory_equal(got16[0], got16[1], (size_t)nn * 2);
  memcpy(dxw, dx + off, (size_t)nn * 4);
  memcpy(dww, dw + off, (size_t)C * 4);
  prm_rmsnorm_backward(dxw, dww, dout + off, x + off, w + off, rstd + off, N, C);
  check(what[0], got[0][0], dxw, nn, 1e-5);
  check(what[1], got[0][1], dww, C, 1e-5);
  check(what[2], got[0][2], out, nn, 2e-6);
  check(what[3], got[0][3], rstd + off, N, 2e-6);
  prm_add_rmsnorm_forward(sum, out, rstd + off, x + off, b + off, w + off, N, C, 1e-5f);
  check(what[4], got[0][4], sum, nn, 0);
  check(what[5], got[0][5], out, nn, 2e-6);
  prm_f32_to_bf16(want16, got[0][5], nn);
  assert_memory_equal(got16[0], want16, (size_t)nn * 2);
  for (int k = 0; k < 2; k++) {
    for (int j = 0; j < 6; j++) free(got[k][j]);
    free(got16[k]);
  }
  free(x), free(b), free(w), free(dout), free(dx), free(dw), free(out), free(rstd), free(sum);
  free(dxw), free(dww), free(want16);
}

/* The embedding backward with token 7 (mod V) in about 60% of N positions (runs
 * longer than the sorted kernel's 32-row batches) and the other ids in
 * random order; on a GPU, a negative id too. */
static void embedding_case(prm_dev_t *dv[2], int64_t N, int64_t V, int64_t C, prm_rng_t *r) {
  float *dout = falloc(N * C), *dw = falloc(V * C), *want = falloc(V * C), *got[2];
  int32_t *tok = prm_xcalloc((size_t)N, 4);
  randn(dout, N * C, r, 1);
  randn(dw, V * C, r, 1);
  for (int64_t i = 0; i < N; i++)
    tok[i] = (int32_t)(prm_rng_u64(r) % 5 < 3 ? 7 % V : prm_rng_u64(r) % V);
  memcpy(want, dw, (size_t)(V * C) * 4);
  prm_embedding_backward(want, dout, tok, N, C);
  for (int k = 0; k < 2; k++) {
    prm_dev_t *d = dv[k];
    float *d_do = dup_on(d, dout, N * C * 4), *d_dw = dup_on(d, dw, V * C * 4);
    int32_t *d_tok = dup_on(d, tok, N * 4);
    prm_dev_embedding_backward(d, d_dw, d_do, d_tok, N, C);
    got[k] = falloc(V * C);
    fetch_on(d, got[k], d_dw, (size_t)(V * C) * 4);
    if (d->kind != PRM_DEV_KIND_CPU) { /* the CPU kernel would write before wte */
      int32_t bad = -3;
      prm_err_t err = {0};
      assert_int_equal(prm_dev_upload(d, d_tok + N / 2, &bad, 4, &err), 0);
      prm_dev_embedding_backward(d, d_dw, d_do, d_tok, N, C);
      assert_int_not_equal(prm_dev_sync(d, &err), 0);
      assert_non_null(strstr(err.msg, "token id"));
      assert_int_equal(prm_dev_sync(d, &err), 0); /* reported once */
    }
    prm_dev_free(d, PRM_MEM_OTHER, d_do, N * C * 4);
    prm_dev_free(d, PRM_MEM_OTHER, d_dw, V * C * 4);
    prm_dev_free(d, PRM_MEM_OTHER, d_tok, N * 4);
  }
  assert_memory_equal(got[0], want, (size_t)(V * C) * 4);
  assert_memory_equal(got[1], want, (size_t)(V * C) * 4);
  free(got[0]), free(got[1]), free(dout), free(dw), free(want), free(tok);
}

static void test_eltwise_paths(void **state) {
  (void)state;
  prm_dev_t *dv[2] = {g_dev, open_scalar()};
  prm_rng_t r;
  prm_rng_seed(&r, 24);
  eltwise_case(dv, 4099, 0, &r); /* float4s and a tail of 3 */
  eltwise_case(dv, 4099, 1, &r); /* 4 bytes past 16: scalar */
  rope_case(dv, 64, 0, &r);      /* D/2 = 32: float4s */
  rope_case(dv, 64, 1, &r);      /* misaligned: scalar */
  rope_case(dv, 12, 0, &r);      /* D/2 = 6: scalar */
  rmsnorm_case(dv, 150, 768, 0, &r); /* warp per row; dw in 3 chunks, the last partial */
  rmsnorm_case(dv, 70, 200, 4, &r);  /* 50 float4s a row, 16 bytes in */
  rmsnorm_case(dv, 37, 768, 1, &r);  /* misaligned: scalar */
  rmsnorm_case(dv, 37, 202, 0, &r);  /* C % 4 != 0: scalar */
  rmsnorm_case(dv, 19, 1028, 0, &r); /* wider than the warp kernels: scalar */
  embedding_case(dv, 2500, 40, 72, &r); /* sorted through the wider bitonic steps; float4s */
  embedding_case(dv, 300, 50, 30, &r);  /* C % 4 != 0: one column a lane */
  embedding_case(dv, 3, 5, 40, &r);
  prm_dev_close(dv[1]);
  if (g_dev->kind == PRM_DEV_KIND_CUDA) { /* a value the module does not know */
    const char *was = getenv("PRIMUS_CUDA_ELTWISE");
    char *keep = was ? prm_xstrdup(was) : NULL;
    setenv("PRIMUS_CUDA_ELTWISE", "fast", 1);
    prm_dev_opts_t o = {.want = "cuda", .local_rank = 0, .gemm = g_gemm,
                        .module_path = g_dev->module};
    prm_dev_t *d = NULL;
    prm_err_t err = {0};
    int rc = prm_dev_open(&o, &d, &err);
    if (keep) setenv("PRIMUS_CUDA_ELTWISE", keep, 1);
    else unsetenv("PRIMUS_CUDA_ELTWISE");
    free(keep);
    assert_int_not_equal(rc, 0);
    assert_null(d);
    assert_non_null(strstr(err.msg, "PRIMUS_CUDA_ELTWISE=fast: expected vector or scalar"));
  }
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                    */
/* ------------------------------------------------------------------------ */

/* Opens `want` with PRIMUS_CUDA_MODULE set to module (NULL: unset); returns
 * the code and closes what opened. */
static int open_with(const char *want, const char *module, const char *fake, prm_err_t *err,
                     char *why, size_t n) {
  if (module) setenv("PRIMUS_CUDA_MODULE", module, 1);
  else unsetenv("PRIMUS_CUDA_MODULE");
  if (fake) setenv("PRM_FAKE_DEVICE", fake, 1);
  prm_dev_opts_t o = {.want = want, .local_rank = 0, .gemm = g_gemm};
  prm_dev_t *d = NULL;
  int rc = prm_dev_open(&o, &d, err);
  if (d) {
    snprintf(why, n, "%s", d->why);
    prm_dev_close(d);
  }
  unsetenv("PRIMUS_CUDA_MODULE");
  unsetenv("PRM_FAKE_DEVICE");
  return rc;
}

static void test_open(void **state) {
  (void)state;
  prm_err_t err = {0};
  char why[512] = "";
  assert_int_equal(prm_dev_kind_parse("cuda"), PRM_DEV_KIND_CUDA);
  assert_int_equal(prm_dev_kind_parse("tpu"), -1);
  /* A name the key does not know. */
  assert_int_equal(open_with("tpu", NULL, NULL, &err, why, sizeof why), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "device"));
  assert_non_null(strstr(err.msg, "tpu"));
  /* No module: cuda fails naming it and where it looked; auto falls back. */
  assert_int_equal(open_with("cuda", "/nonexistent/libprimus-cuda.so", NULL, &err, why, sizeof why),
                   PRM_EPLATFORM);
  assert_non_null(strstr(err.msg, "libprimus-cuda.so"));
  assert_non_null(strstr(err.msg, "/nonexistent"));
  assert_int_equal(open_with("auto", "/nonexistent/libprimus-cuda.so", NULL, &err, why, sizeof why), 0);
  assert_non_null(strstr(why, "auto -> cpu"));
  assert_non_null(strstr(why, "libprimus-cuda.so"));
  assert_int_equal(open_with("cpu", NULL, NULL, &err, why, sizeof why), 0);
  assert_string_equal(why, "device: cpu");
  /* A file that is no shared object. */
  char *junk = prm_test_write(prm_test_tmpdir(), "libjunk.so", "not an ELF file\n");
  assert_int_equal(open_with("cuda", junk, NULL, &err, why, sizeof why), PRM_EPLATFORM);
  assert_non_null(strstr(err.msg, "cannot load"));
  free(junk);
  /* The stand-in module (tests/device/fake-module.c) answers as told. */
  const char *fake = getenv("PRM_TEST_FAKE_MODULE");
  if (!fake || !*fake) {
    fprintf(stderr, "PRM_TEST_FAKE_MODULE is not set: the stand-in module checks need it\n");
    fail();
  }
  struct {
    const char *mode;
    int code;
    const char *says;
  } cases[] = {
      {"nodriver", PRM_EPLATFORM, "driver"},      {"nodevice", PRM_EPLATFORM, "no visible GPU"},
      {"abi", PRM_EPLATFORM, "another primus"},        {"fail", PRM_ERUNTIME, "failed to start"},
      {"tableabi", PRM_EPLATFORM, "rebuild"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    prm_err_clear(&err);
    int rc = open_with("cuda", fake, cases[i].mode, &err, why, sizeof why);
    if (rc != cases[i].code || !strstr(err.msg, cases[i].says)) {
      fprintf(stderr, "fake module %s: rc %d, \"%s\"\n", cases[i].mode, rc, err.msg);
      fail();
    }
    assert_non_null(strstr(err.msg, "device: cuda"));
    /* auto takes the CPU and says why. */
    assert_int_equal(open_with("auto", fake, cases[i].mode, &err, why, sizeof why), 0);
    assert_non_null(strstr(why, cases[i].says));
  }
}

/* ------------------------------------------------------------------------ */
/* The timer and the benchmarks' measurements on this backend (issue 24)   */
/* ------------------------------------------------------------------------ */

static void test_timer(void **state) {
  (void)state;
  /* CUDA times on the device's clock; the CPU backends on the host's. */
  assert_int_equal(prm_dev_has_timer(g_dev), g_dev->kind == PRM_DEV_KIND_CUDA);
  const int64_t n = 192;
  prm_rng_t r;
  prm_rng_seed(&r, 7);
  float *h = falloc(n * n);
  randn(h, n * n, &r, 1.0);
  float *a = dup_dev(h, (size_t)(n * n) * 4), *c = dup_dev(h, (size_t)(n * n) * 4);
  prm_err_t err = {0};
  prm_dev_timer_t t;
  double ms = -1;
  /* The work between the marks: the timer's figure is positive and within
   * the host's wall time around start and stop (the device cannot have
   * spent longer than that on it). */
  double w0 = prm_time_now();
  assert_int_equal(prm_dev_timer_start(g_dev, &t, &err), 0);
  for (int i = 0; i < 4; i++) prm_dev_sgemm(g_dev, 0, 1, n, n, n, 1.0f, a, n, a, n, 0.0f, c, n);
  assert_int_equal(prm_dev_timer_stop(g_dev, &t, &ms, &err), 0);
  double wall = (prm_time_now() - w0) * 1e3;
  assert_true(isfinite(ms) && ms > 0);
  assert_true(ms <= wall * 1.01 + 0.05);
  /* The timed work is done when stop returns: its result is readable and
   * is the product the reference computes. */
  float *got = falloc(n * n), *want = falloc(n * n);
  fetch(got, c, (size_t)(n * n) * 4);
  prm_sgemm(&g_gemm, 0, 1, n, n, n, 1.0f, h, n, h, n, 0.0f, want, n);
  for (int64_t i = 0; i < n * n; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-3f * (1 + fabsf(want[i])));
  /* A failure inside the timed region is reported by stop. */
  if (g_dev->kind == PRM_DEV_KIND_CUDA) {
    assert_int_equal(prm_dev_timer_start(g_dev, &t, &err), 0);
    prm_dev_sgemm(g_dev, 0, 0, -1, n, n, 1.0f, a, n, a, n, 0.0f, c, n);
    assert_int_not_equal(prm_dev_timer_stop(g_dev, &t, &ms, &err), 0);
    assert_non_null(strstr(err.msg, "negative shape"));
  }
  dfree(a, (size_t)(n * n) * 4);
  dfree(c, (size_t)(n * n) * 4);
  free(h);
  free(got);
  free(want);
}

/* ------------------------------------------------------------------------ */
/* cuBLASLt's algorithms and the tuning file (src/cuda/gemm_lt.cu)           */
/* ------------------------------------------------------------------------ */

/* A CUDA device opened with PRIMUS_CUDA_GEMM_TUNE=path (and `gemm` in
 * PRIMUS_CUDA_GEMM when not NULL); NULL with err set when it fails. */
static prm_dev_t *open_tuned(const char *path, const char *gemm, prm_err_t *err) {
  setenv("PRIMUS_CUDA_GEMM_TUNE", path, 1);
  if (gemm) setenv("PRIMUS_CUDA_GEMM", gemm, 1);
  prm_dev_opts_t o = {.want = "cuda", .local_rank = 0, .gemm = g_gemm, .module_path = g_dev->module};
  prm_dev_t *d = NULL;
  prm_err_clear(err);
  if (prm_dev_open(&o, &d, err)) d = NULL;
  unsetenv("PRIMUS_CUDA_GEMM_TUNE");
  unsetenv("PRIMUS_CUDA_GEMM");
  return d;
}

/* Every transpose of a bf16 and an fp32 product on d, against the CPU's;
 * the results (bf16 first) into out (8 x 33 x 40 floats). */
static void tuned_gemms(prm_dev_t *d, float *out) {
  prm_rng_t r;
  prm_rng_seed(&r, 7);
  const int64_t M = 33, N = 40, K = 96, nc = M * N;
  float *Af = falloc(M * K), *Bf = falloc(K * N), *C = falloc(nc);
  prm_bf16_t *A = prm_xcalloc((size_t)(M * K), 2), *B = prm_xcalloc((size_t)(K * N), 2);
  randn(Af, M * K, &r, 1);
  randn(Bf, K * N, &r, 1);
  prm_f32_to_bf16(A, Af, M * K);
  prm_f32_to_bf16(B, Bf, K * N);
  prm_err_t err = {0};
  void *dA = prm_dev_alloc(d, PRM_MEM_OTHER, (size_t)(M * K) * 4);
  void *dB = prm_dev_alloc(d, PRM_MEM_OTHER, (size_t)(K * N) * 4);
  float *dC = prm_dev_alloc(d, PRM_MEM_OTHER, (size_t)nc * 4);
  for (int bf = 1, i = 0; bf >= 0; bf--)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++, i++) {
        int64_t lda = ta ? M : K, ldb = tb ? K : N;
        size_t es = bf ? 2 : 4;
        assert_int_equal(prm_dev_upload(d, dA, bf ? (void *)A : (void *)Af, (size_t)(M * K) * es, &err), 0);
        assert_int_equal(prm_dev_upload(d, dB, bf ? (void *)B : (void *)Bf, (size_t)(K * N) * es, &err), 0);
        assert_int_equal(prm_dev_zero(d, dC, (size_t)nc * 4, &err), 0);
        memset(C, 0, (size_t)nc * 4);
        if (bf) {
          prm_dev_gemm_bf16(d, ta, tb, M, N, K, 1.0f, dA, lda, dB, ldb, 0.0f, dC, N);
          prm_gemm_bf16(&g_gemm, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
        } else {
          prm_dev_sgemm(d, ta, tb, M, N, K, 1.0f, dA, lda, dB, ldb, 0.0f, dC, N);
          prm_sgemm(&g_gemm, ta, tb, M, N, K, 1.0f, Af, lda, Bf, ldb, 0.0f, C, N);
        }
        float *got = out + (int64_t)i * nc;
        assert_int_equal(prm_dev_download(d, got, dC, (size_t)nc * 4, &err), 0);
        check(bf ? "gemm_bf16 (cuBLASLt)" : "sgemm (cuBLASLt)", got, C, nc, 2e-6 * K);
      }
  prm_dev_free(d, PRM_MEM_OTHER, dA, (size_t)(M * K) * 4);
  prm_dev_free(d, PRM_MEM_OTHER, dB, (size_t)(K * N) * 4);
  prm_dev_free(d, PRM_MEM_OTHER, dC, (size_t)nc * 4);
  free(Af), free(Bf), free(C), free(A), free(B);
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void test_gemm_tune(void **state) {
  (void)state;
  if (g_dev->kind != PRM_DEV_KIND_CUDA) skip(); /* the CUDA module's */
  prm_err_t err = {0};
  char *path = prm_xasprintf("%s/gemm-tune.txt", prm_test_tmpdir());
  unlink(path);
  const int64_t nc = 33 * 40;
  float *first = falloc(8 * nc), *again = falloc(8 * nc);
  /* A new file: each of the 8 calls timed once and written. */
  prm_dev_t *d = open_tuned(path, NULL, &err);
  if (!d) fprintf(stderr, "test_gemm_tune: %s\n", err.msg);
  assert_non_null(d);
  tuned_gemms(d, first);
  prm_dev_close(d);
  char *tuned = NULL, *after = NULL;
  size_t len = 0;
  assert_int_equal(prm_fs_read_all(path, &tuned, &len, &err), 0);
  assert_true(strncmp(tuned, "# primus cuda gemm tuning v1:", 29) == 0);
  assert_int_equal(count_lines(tuned), 1 + 8);
  assert_non_null(strstr(tuned, "\nbf16 nt 33 40 96 96 96 40 "));
  assert_non_null(strstr(tuned, "\nfp32 tn 33 40 96 33 40 40 "));
  /* Read back: the same algorithms (the same bits), nothing rewritten. */
  d = open_tuned(path, "lt", &err);
  assert_non_null(d);
  tuned_gemms(d, again);
  prm_dev_close(d);
  assert_memory_equal(first, again, (size_t)(8 * nc) * 4);
  assert_int_equal(prm_fs_read_all(path, &after, &len, &err), 0);
  assert_string_equal(tuned, after);
  /* Two ranks on one file: the second, opened before the first tuned, keeps
   * the first's lines when it tunes a call of its own, and takes the first's
   * choices for the calls the first tuned. */
  unlink(path);
  prm_dev_t *d1 = open_tuned(path, NULL, &err), *d2 = open_tuned(path, NULL, &err);
  assert_non_null(d1);
  assert_non_null(d2);
  tuned_gemms(d1, first);
  {
    float *a = prm_dev_alloc(d2, PRM_MEM_OTHER, 17 * 96 * 2), *c = prm_dev_alloc(d2, PRM_MEM_OTHER, 17 * 17 * 4);
    assert_int_equal(prm_dev_zero(d2, a, 17 * 96 * 2, &err), 0);
    prm_dev_gemm_bf16(d2, 0, 1, 17, 17, 96, 1.0f, (void *)a, 96, (void *)a, 96, 0.0f, c, 17);
    assert_int_equal(prm_dev_sync(d2, &err), 0);
    prm_dev_free(d2, PRM_MEM_OTHER, a, 17 * 96 * 2);
    prm_dev_free(d2, PRM_MEM_OTHER, c, 17 * 17 * 4);
  }
  free(after);
  assert_int_equal(prm_fs_read_all(path, &after, &len, &err), 0);
  assert_int_equal(count_lines(after), 1 + 8 + 1);
  assert_non_null(strstr(after, "\nbf16 nt 17 17 96 96 96 17 "));
  tuned_gemms(d2, again); /* the first's 8 calls, from the file */
  assert_memory_equal(first, again, (size_t)(8 * nc) * 4);
  prm_dev_close(d1);
  prm_dev_close(d2);
  free(tuned);
  assert_int_equal(prm_fs_read_all(path, &tuned, &len, &err), 0);
  assert_string_equal(tuned, after); /* neither close rewrote it */
  /* Bad files and settings: the open fails naming the file and line. */
  char *nl = strchr(tuned, '\n');
  char *header = prm_xstrndup(tuned, (size_t)(nl - tuned + 1));
  struct {
    const char *text, *gemm, *says;
  } bad[] = {
      {"bf16 nt 1 2 3\n", NULL, ":1: not a primus GEMM tuning file"},
      {"# primus cuda gemm tuning v1: another GPU, sm_80, cuBLASLt 1\n", NULL, "was tuned for"},
      {"+bf16 nt 33 40 96 96 96 40 256 0.1 1 2 3 4 5 6 7\n", NULL, ":2: word 8"},
      {"+bf17 nt 33 40 96 96 96 40 256 0.1 1 2 3 4 5 6 7 8\n", NULL, ":2: dtype"},
      {"+bf16 nx 33 40 96 96 96 40 256 0.1 1 2 3 4 5 6 7 8\n", NULL, ":2: transposes"},
      {"+bf16 nt 33 40 -96 96 96 40 256 0.1 1 2 3 4 5 6 7 8\n", NULL, ":2: M N K"},
      {"+bf16 nt 33 40 96 96 96 40 24 0.1 1 2 3 4 5 6 7 8\n", NULL, ":2: alignment 24"},
      {"+bf16 nt 33 40 96 96 96 40 256 0.1 1 2 3 4 5 6 7 -8\n", NULL, ":2: word 8"},
      {"+bf16 nt 33 40 96 96 96 40 256 0.1 1 2 3 4 5 6 7 8 9\n", NULL, ":2: unexpected text"},
      {"+bf16 nt 33 40 96 96 96 40 256 0.1 1 2 3 4 5 6 7 8\n"
       "bf16 nt 33 40 96 96 96 40 256 0.1 1 2 3 4 5 6 7 8\n", NULL, ":3: the same call"},
      {"+", "blas", "PRIMUS_CUDA_GEMM=blas"},
      {"+", "cublas", "PRIMUS_CUDA_GEMM=cublas: expected blas"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *text = bad[i].text[0] == '+' ? prm_xasprintf("%s%s", header, bad[i].text + 1)
                                       : prm_xstrdup(bad[i].text);
    char *f = prm_test_write(prm_test_tmpdir(), "gemm-tune-bad.txt", text);
    d = open_tuned(f, bad[i].gemm, &err);
    if (d || !strstr(err.msg, bad[i].says) ||
        (bad[i].text[1] && bad[i].text[0] != '+' && !strstr(err.msg, f))) {
      fprintf(stderr, "tuning file case %zu: %s (want \"%s\")\n", i, d ? "opened" : err.msg,
              bad[i].says);
      fail();
    }
    free(text), free(f);
  }
  /* A line whose algorithm cuBLASLt does not accept fails the GEMM, naming the file. */
  const char *ff = "ffffffffffffffff";
  char *text = prm_xasprintf("%sbf16 nt 33 40 96 96 96 40 256 0.1 %s %s %s %s %s %s %s %s\n", header,
                             ff, ff, ff, ff, ff, ff, ff, ff);
  char *f = prm_test_write(prm_test_tmpdir(), "gemm-tune-bad.txt", text);
  d = open_tuned(f, NULL, &err);
  assert_non_null(d);
  float *dA = prm_dev_alloc(d, PRM_MEM_OTHER, 33 * 96 * 2), *dB = prm_dev_alloc(d, PRM_MEM_OTHER, 96 * 40 * 2);
  float *dC = prm_dev_alloc(d, PRM_MEM_OTHER, (size_t)nc * 4);
  prm_dev_gemm_bf16(d, 0, 1, 33, 40, 96, 1.0f, (void *)dA, 96, (void *)dB, 96, 0.0f, dC, 40);
  assert_int_not_equal(prm_dev_sync(d, &err), 0);
  assert_non_null(strstr(err.msg, "cublasLtMatmulAlgoCheck"));
  assert_non_null(strstr(err.msg, f));
  prm_dev_free(d, PRM_MEM_OTHER, dA, 33 * 96 * 2);
  prm_dev_free(d, PRM_MEM_OTHER, dB, 96 * 40 * 2);
  prm_dev_free(d, PRM_MEM_OTHER, dC, (size_t)nc * 4);
  prm_dev_close(d);
  free(text), free(f), free(header), free(tuned), free(after), free(path), free(first), free(again);
}

/* PRIMUS_DEVICE_PROFILE: a device opened with it times every operator and
 * writes the report when it closes (src/device/profile.c). */
static void test_profile(void **state) {
  (void)state;
  char *path = prm_xasprintf("%s/profile.md", prm_test_tmpdir());
  const char *was = getenv("PRIMUS_DEVICE_PROFILE");
  char *keep = was ? prm_xstrdup(was) : NULL;
  setenv("PRIMUS_DEVICE_PROFILE", path, 1);
  /* The module g_dev came from (test_open leaves PRIMUS_CUDA_MODULE unset). */
  prm_dev_opts_t o = {.want = prm_dev_kind_name(g_dev->kind), .local_rank = 0, .gemm = g_gemm,
                      .module_path = g_dev->kind == PRM_DEV_KIND_CUDA ? g_dev->module : NULL};
  prm_dev_t *d = NULL;
  prm_err_t err = {0};
  int rc = prm_dev_open(&o, &d, &err);
  if (rc) fprintf(stderr, "test_profile: %s\n", err.msg);
  assert_int_equal(rc, 0);
  if (keep) setenv("PRIMUS_DEVICE_PROFILE", keep, 1);
  else unsetenv("PRIMUS_DEVICE_PROFILE");
  assert_int_equal(prm_dev_is_host(d), prm_dev_is_host(g_dev)); /* the backend's own memory */
  const int64_t n = 48;
  float *h = falloc(n * n);
  for (int64_t i = 0; i < n * n; i++) h[i] = (float)(i % 7) - 3.0f;
  float *a = prm_dev_alloc(d, PRM_MEM_OTHER, (size_t)(n * n) * 4), *c = prm_dev_alloc(d, PRM_MEM_OTHER, (size_t)(n * n) * 4);
  assert_int_equal(prm_dev_upload(d, a, h, (size_t)(n * n) * 4, &err), 0);
  for (int i = 0; i < 3; i++) prm_dev_sgemm(d, 0, 1, n, n, n, 1.0f, a, n, a, n, 0.0f, c, n);
  prm_dev_add(d, c, c, a, n * n);
  /* The work is passed on unchanged: c = a a^T + a. */
  float *got = falloc(n * n), *want = falloc(n * n);
  assert_int_equal(prm_dev_download(d, got, c, (size_t)(n * n) * 4, &err), 0);
  prm_sgemm(&g_gemm, 0, 1, n, n, n, 1.0f, h, n, h, n, 0.0f, want, n);
  for (int64_t i = 0; i < n * n; i++) assert_true(fabsf(got[i] - (want[i] + h[i])) <= 1e-3f * (1 + fabsf(want[i])));
  prm_dev_free(d, PRM_MEM_OTHER, a, (size_t)(n * n) * 4);
  prm_dev_free(d, PRM_MEM_OTHER, c, (size_t)(n * n) * 4);
  prm_dev_close(d);
  char *rep = NULL;
  size_t len = 0;
  assert_int_equal(prm_fs_read_all(path, &rep, &len, &err), 0);
  assert_non_null(strstr(rep, "## Device profile"));
  assert_non_null(strstr(rep, "| sgemm | 3 |"));
  assert_non_null(strstr(rep, "| add | 1 |"));
  assert_non_null(strstr(rep, "| upload | 1 |"));
  assert_non_null(strstr(rep, "| download | 1 |"));
  assert_non_null(strstr(rep, "| fp32 | nt | 48 | 48 | 48 | 3 |"));
  assert_non_null(strstr(rep, g_dev->kind == PRM_DEV_KIND_CUDA ? "the device's timer" : "the host's clock"));
  free(rep), free(path), free(keep), free(h), free(got), free(want);
}

static void test_bench(void **state) {
  (void)state;
  prm_err_t err = {0};
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (int tr = 0; tr < 4; tr++) {
      prm_bench_gemm_opts_t o = {.m = 40, .n = 24, .k = 16, .trans_a = tr & 1, .trans_b = tr >> 1,
                                 .bf16 = bf16, .duration_s = 0.002};
      prm_bench_gemm_result_t r;
      int rc = prm_bench_dev_gemm(g_dev, &o, &r, &err);
      if (rc) fprintf(stderr, "%s\n", err.msg);
      assert_int_equal(rc, 0);
      assert_string_equal(r.backend, g_dev->i->name);
      assert_true(r.iters >= 1);
      assert_true(r.ms_avg > 0 && r.tflops > 0 && r.gbs > 0 && isfinite(r.tflops));
      assert_true(r.ms_min <= r.ms_avg * 1.0000001);
      double es = bf16 ? 2 : 4;
      assert_true(fabs(r.intensity - 2.0 * 40 * 24 * 16 / (es * (40 * 16 + 16 * 24) + 4.0 * 40 * 24)) < 1e-9);
      assert_true(isfinite(r.peak_fraction) && r.peak_fraction >= 0);
    }
  prm_bench_gemm_opts_t bad = {.m = 0, .n = 8, .k = 8};
  prm_bench_gemm_result_t gr;
  assert_int_equal(prm_bench_dev_gemm(g_dev, &bad, &gr, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "M, N and K"));
  /* Attention: fp32 forward and backward, then bf16 where the backend has
   * bf16 attention (refused by name where it has not). */
  prm_bench_attn_opts_t ao = {.batch = 1, .seq = 24, .heads = 4, .kv_heads = 2, .head_dim = 8,
                              .duration_s = 0.004};
  prm_bench_attn_result_t ar;
  assert_int_equal(prm_bench_dev_attention(g_dev, &ao, &ar, &err), 0);
  assert_true(ar.fwd_iters >= 1 && ar.bwd_iters >= 1);
  assert_true(ar.fwd_ms > 0 && ar.bwd_ms > 0 && ar.fwd_tflops > 0 && ar.bwd_tflops > 0);
  assert_true(fabs(ar.fwd_tflops * ar.fwd_ms * 1e9 - 2.0 * 4 * 24 * 24 * 8) < 1e-3 * 2.0 * 4 * 24 * 24 * 8);
  ao.bf16 = 1;
  if (prm_dev_has_attention_bf16(g_dev)) {
    memset(&ar, 0, sizeof ar);
    assert_int_equal(prm_bench_dev_attention(g_dev, &ao, &ar, &err), 0);
    assert_true(ar.fwd_iters >= 1 && ar.bwd_iters >= 1 && ar.fwd_tflops > 0 && ar.bwd_tflops > 0);
    assert_true(fabs(ar.fwd_tflops * ar.fwd_ms * 1e9 - 2.0 * 4 * 24 * 24 * 8) < 1e-3 * 2.0 * 4 * 24 * 24 * 8);
  } else {
    assert_int_equal(prm_bench_dev_attention(g_dev, &ao, &ar, &err), PRM_EINVAL);
    assert_non_null(strstr(err.msg, "fp32 only"));
  }
  ao.bf16 = 0, ao.kv_heads = 3;
  assert_int_equal(prm_bench_dev_attention(g_dev, &ao, &ar, &err), PRM_EINVAL);
  /* Copies each way: a device copy counts read + written bytes. */
  for (int k = PRM_BENCH_COPY_D2D; k <= PRM_BENCH_COPY_D2H; k++) {
    prm_bench_copy_result_t cr;
    int rc = prm_bench_dev_copy(g_dev, (prm_bench_copy_kind_t)k, (size_t)1 << 20, 0.004, &cr, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_true(cr.iters >= 1 && cr.ms_avg > 0 && cr.gbs > 0 && cr.best_gbs >= cr.gbs * 0.999999);
    double moved = (k == PRM_BENCH_COPY_D2D ? 2.0 : 1.0) * (double)(1 << 20);
    assert_true(fabs(cr.gbs - moved / (cr.ms_avg * 1e-3) / 1e9) < 1e-6 * cr.gbs);
  }
  prm_bench_copy_result_t cr;
  assert_int_equal(prm_bench_dev_copy(g_dev, PRM_BENCH_COPY_D2D, 0, 0.01, &cr, &err), PRM_EINVAL);
  /* The device's peak: a GPU's data sheet (known for the lent H100), the
   * CPU's measured FMA peak. */
  prm_bench_dev_peak_t pk;
  prm_bench_dev_peak(g_dev, &pk);
  if (g_dev->kind == PRM_DEV_KIND_CPU) {
    assert_true(pk.fp32_tflops > 0);
    assert_non_null(strstr(pk.source, "measured"));
  } else {
    printf("peak of %s: bf16 %.1f, fp32 %.1f TFLOP/s, %.2f TB/s (%s)\n", g_dev->info.name,
           pk.bf16_tflops, pk.fp32_tflops, pk.mem_tbs, pk.source);
  }
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  const char *backend = "cpu";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      backend = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      cmocka_set_test_filter(argv[++i]); /* one test (a cmocka pattern) */
  }
  prm_err_t err = {0};
  if (prm_gemm_init(&g_gemm, NULL, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  prm_dev_opts_t o = {.want = backend, .local_rank = 0, .gemm = g_gemm};
  int rc = prm_dev_open(&o, &g_dev, &err);
  if (rc) {
    if (strcmp(backend, "cpu")) {
      printf("SKIP: %s\n", err.msg); /* no module, driver or GPU here */
      return PRM_TEST_SKIP;
    }
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  prm_sb_t line = {0};
  prm_dev_describe(g_dev, &line);
  printf("backend under test: %s\n", line.buf);
  prm_sb_free(&line);
  g_exact = g_dev->kind == PRM_DEV_KIND_CPU;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory),        cmocka_unit_test(test_sgemm),
      cmocka_unit_test(test_gemm_bf16),     cmocka_unit_test(test_bf16_convert),
      cmocka_unit_test(test_embedding),     cmocka_unit_test(test_rmsnorm),
      cmocka_unit_test(test_rope),          cmocka_unit_test(test_swiglu_add),
      cmocka_unit_test(test_attention),     cmocka_unit_test(test_attention_decode),
      cmocka_unit_test(test_xent),          cmocka_unit_test(test_xent16),
      cmocka_unit_test(test_lmhead_xent),
      cmocka_unit_test(test_adamw_reductions), cmocka_unit_test(test_attention_bf16),
      cmocka_unit_test(test_fused),         cmocka_unit_test(test_eltwise_paths),
      cmocka_unit_test(test_open),
      cmocka_unit_test(test_timer),         cmocka_unit_test(test_bench),
      cmocka_unit_test(test_profile),       cmocka_unit_test(test_gemm_tune),
  };
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  prm_dev_close(g_dev);
  return rc;
}
