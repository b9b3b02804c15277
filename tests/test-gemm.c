/* test-gemm.c - bf16 storage and GEMM, and per-shape GEMM tuning:
 * fp32 -> bf16 rounding (ties to even, NaN, Inf, denormals) in every ISA
 * variant against a scalar model; the bf16 GEMM of every backend (and the
 * widening fallback) against the reference twin for every transpose, odd
 * sizes, wide strides and beta 0/1; a packed B operand on every backend;
 * the tuning file round trip, per-shape
 * dispatch and the errors of malformed files. */
#include "testlib.h"

#include "kernels/gemm-impl.h"
#include "primus/prm_bench.h"
#include "primus/prm_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The model the conversions must match: IEEE round to nearest even on the
 * upper 16 bits, NaN quieted with its sign and upper payload kept. */
static uint16_t model_bf16(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  uint32_t lower = u & 0xffffu, upper = u >> 16;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) upper++;
  return (uint16_t)upper;
}

static const char *const isas[] = {"plain", "avx2", "avx512", "avx512bf16"};

/* ------------------------------------------------------------------------ */
/* Conversions                                                               */
/* ------------------------------------------------------------------------ */

static void test_bf16_specials(void **state) {
  (void)state;
  static const struct {
    uint32_t in;
    uint16_t out;
    const char *what;
  } cases[] = {
      {0x3f800000u, 0x3f80, "1.0"},
      {0x3f808000u, 0x3f80, "tie, even below: down"},
      {0x3f818000u, 0x3f82, "tie, odd below: up"},
      {0x3f808001u, 0x3f81, "just above a tie: up"},
      {0x3f807fffu, 0x3f80, "just below a tie: down"},
      {0xbf818000u, 0xbf82, "negative tie: away to even"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x7f800000u, 0x7f80, "+Inf"},
      {0xff800000u, 0xff80, "-Inf"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX rounds to Inf"},
      {0x7f7f7fffu, 0x7f7f, "below the overflow tie"},
      {0x7fc00000u, 0x7fc0, "quiet NaN"},
      {0x7f800001u, 0x7fc0, "signalling NaN, low payload only: stays NaN"},
      {0xff800001u, 0xffc0, "negative NaN"},
      {0x7fffffffu, 0x7fff, "NaN, all payload"},
      {0x00000001u, 0x0000, "smallest denormal: to 0"},
      {0x00008000u, 0x0000, "denormal tie, even: down"},
      {0x00018000u, 0x0002, "denormal tie, odd: up"},
      {0x00008001u, 0x0001, "denormal above a tie"},
      {0x807fffffu, 0x8080, "largest negative denormal to -FLT_MIN"},
      {0x00400000u, 0x0040, "denormal, exact"},
  };
  int nc = (int)(sizeof cases / sizeof cases[0]);
  for (int c = 0; c < nc; c++) assert_int_equal(model_bf16(cases[c].in), cases[c].out);
  /* Each value at every position of a 100-element array, so the vector
   * bodies (32, 16, 8 wide) and the scalar tails all see it. */
  enum { LEN = 100 };
  float src[LEN];
  uint16_t dst[LEN];
  for (size_t v = 0; v < sizeof isas / sizeof isas[0]; v++)
    for (int c = 0; c < nc; c++)
      for (int pos = 0; pos < LEN; pos += 7) {
        for (int i = 0; i < LEN; i++) src[i] = 1.5f + (float)i;
        src[pos] = float_of(cases[c].in);
        memset(dst, 0xee, sizeof dst);
        int rc = prm__f32_to_bf16_isa(isas[v], dst, src, LEN);
        if (rc == PRM_EINVAL) continue; /* this CPU lacks the variant */
        assert_int_equal(rc, 0);
        if (dst[pos] != cases[c].out)
          fail_msg("%s: %s (0x%08x) at %d: got 0x%04x, want 0x%04x", isas[v], cases[c].what,
                   cases[c].in, pos, dst[pos], cases[c].out);
        for (int i = 0; i < LEN; i++)
          if (i != pos) assert_int_equal(dst[i], model_bf16(bits_of(src[i])));
      }
  /* The public entry point is the best variant. */
  float one = 1.0f;
  uint16_t h;
  prm_f32_to_bf16(&h, &one, 1);
  assert_int_equal(h, 0x3f80);
  const char *isa = prm_bf16_isa();
  assert_true(!strcmp(isa, "plain") || !strcmp(isa, "avx2") || !strcmp(isa, "avx512") ||
              !strcmp(isa, "avx512bf16"));
}

/* Random bit patterns (every class: normal, denormal, NaN, Inf), a length
 * above the threaded threshold: every variant equals the model. */
static void test_bf16_random(void **state) {
  (void)state;
  int64_t n = 200003;
  float *src = malloc((size_t)n * sizeof *src);
  uint16_t *dst = malloc((size_t)n * sizeof *dst);
  prm_rng_t r;
  prm_rng_seed(&r, 7);
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)prm_rng_u64(&r);
    switch (i % 5) {
      case 0: u &= 0x807fffffu; break;            /* denormal or zero */
      case 1: u = (u & 0xffff0000u) | 0x8000u; break; /* a tie */
      case 2: u |= 0x7f800000u; break;            /* NaN or Inf */
      default: break;
    }
    src[i] = float_of(u);
  }
  for (size_t v = 0; v < sizeof isas / sizeof isas[0]; v++) {
    if (prm__f32_to_bf16_isa(isas[v], dst, src, n) == PRM_EINVAL) continue;
    for (int64_t i = 0; i < n; i++)
      if (dst[i] != model_bf16(bits_of(src[i])))
        fail_msg("%s: 0x%08x -> 0x%04x, want 0x%04x", isas[v], bits_of(src[i]), dst[i],
                 model_bf16(bits_of(src[i])));
  }
  free(src);
  free(dst);
}

/* bf16 -> f32 is exact, and rounding a widened bf16 gives it back (NaNs
 * stay NaNs). */
static void test_bf16_widen(void **state) {
  (void)state;
  int64_t n = 65536 * 2; /* above the threaded threshold */
  uint16_t *h = malloc((size_t)n * sizeof *h), *back = malloc((size_t)n * sizeof *back);
  float *f = malloc((size_t)n * sizeof *f);
  for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)(i & 0xffff);
  prm_bf16_to_f32(f, h, n);
  prm_f32_to_bf16(back, f, n);
  for (int64_t i = 0; i < n; i++) {
    assert_int_equal(bits_of(f[i]), (uint32_t)h[i] << 16);
    if (isnan(f[i]))
      assert_true(isnan(float_of((uint32_t)back[i] << 16)));
    else
      assert_int_equal(back[i], h[i]);
  }
  free(h);
  free(back);
  free(f);
}

/* ------------------------------------------------------------------------ */
/* bf16 GEMM                                                                 */
/* ------------------------------------------------------------------------ */

static uint16_t rand_bf16(prm_rng_t *r) {
  float x = (float)(2.0 * prm_rng_uniform(r) - 1.0);
  uint16_t h;
  prm_f32_to_bf16(&h, &x, 1);
  return h;
}

/* The backends to check: the table's, plus the reference's sgemm with no
 * bf16 member (the widening fallback). */
static int gemm_list(prm_gemm_i *out, int max) {
  const prm_gemm_i *const *list;
  int n = prm_gemm_backends(&list), k = 0;
  for (int i = 0; i < n && k < max; i++)
    if (list[i]->available()) out[k++] = *list[i];
  if (k < max) {
    out[k] = *list[n - 1];
    out[k].name = "widened-reference";
    out[k].gemm_bf16 = NULL;
    k++;
  }
  return k;
}

/* One shape: every backend against the reference twin, C padding kept,
 * beta 0 on a NaN-filled C (never read). The twin itself is checked
 * against a double sum of the widened operands. */
static void bf16_case(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                      prm_rng_t *r) {
  int64_t arows = ta ? K : M, acols = ta ? M : K, lda = acols + 3;
  int64_t brows = tb ? N : K, bcols = tb ? K : N, ldb = bcols + 2;
  int64_t ldc = N + 5;
  uint16_t *A = malloc((size_t)(arows * lda) * 2), *B = malloc((size_t)(brows * ldb) * 2);
  float *C0 = malloc((size_t)(M * ldc) * 4), *C = malloc((size_t)(M * ldc) * 4),
        *want = malloc((size_t)(M * ldc) * 4);
  double *scale = malloc((size_t)(M * N) * sizeof(double));
  for (int64_t i = 0; i < arows * lda; i++) A[i] = rand_bf16(r);
  for (int64_t i = 0; i < brows * ldb; i++) B[i] = rand_bf16(r);
  for (int64_t i = 0; i < M * ldc; i++) C0[i] = beta == 0 ? NAN : (float)prm_rng_uniform(r);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = N; j < ldc; j++) C0[i * ldc + j] = 1234.5f;
  /* The double model and the magnitude each element's error scales with. */
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double a = float_of((uint32_t)(ta ? A[k * lda + i] : A[i * lda + k]) << 16);
        double b = float_of((uint32_t)(tb ? B[j * ldb + k] : B[k * ldb + j]) << 16);
        s += a * b;
        mag += fabs(a * b);
      }
      double c = beta == 0 ? 0 : (double)beta * C0[i * ldc + j];
      scale[i * N + j] = fabs(alpha) * mag + fabs(c) + 1e-30;
      want[i * ldc + j] = (float)(alpha * s + c);
    }
  memcpy(C, C0, (size_t)(M * ldc) * 4);
  prm__gemm_bf16_reference(NULL, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++)
      if (fabs((double)C[i * ldc + j] - want[i * ldc + j]) > 1e-6 * scale[i * N + j])
        fail_msg("reference twin: ta=%d tb=%d %lldx%lldx%lld at (%lld,%lld): %g vs %g", ta, tb,
                 (long long)M, (long long)N, (long long)K, (long long)i, (long long)j,
                 (double)C[i * ldc + j], (double)want[i * ldc + j]);
  memcpy(want, C, (size_t)(M * ldc) * 4);

  prm_gemm_i be[8];
  int nb = gemm_list(be, 8);
  for (int b = 0; b < nb; b++) {
    prm_gemm_t g = {&be[b], NULL};
    memcpy(C, C0, (size_t)(M * ldc) * 4);
    prm_gemm_bf16(&g, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    for (int64_t i = 0; i < M; i++) {
      for (int64_t j = N; j < ldc; j++) assert_true(C[i * ldc + j] == 1234.5f);
      for (int64_t j = 0; j < N; j++) {
        /* fp32 accumulation over K terms: far inside a bf16 ulp (2^-8). */
        double d = fabs((double)C[i * ldc + j] - want[i * ldc + j]);
        if (!(d <= 1e-4 * scale[i * N + j]))
          fail_msg("%s: ta=%d tb=%d %lldx%lldx%lld alpha=%g beta=%g at (%lld,%lld): %g, "
                   "reference %g",
                   be[b].name, ta, tb, (long long)M, (long long)N, (long long)K, (double)alpha,
                   (double)beta, (long long)i, (long long)j, (double)C[i * ldc + j],
                   (double)want[i * ldc + j]);
      }
    }
  }
  free(A), free(B), free(C0), free(C), free(want), free(scale);
}

static void test_gemm_bf16_backends(void **state) {
  (void)state;
  static const int64_t sizes[] = {1, 7, 33, 65};
  prm_rng_t r;
  prm_rng_seed(&r, 3);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int m = 0; m < 4; m++)
        for (int n = 0; n < 4; n++)
          for (int k = 0; k < 4; k++) {
            bf16_case(ta, tb, sizes[m], sizes[n], sizes[k], 1.0f, (m + n + k) % 2 ? 1.0f : 0.0f,
                      &r);
          }
  /* alpha and beta other than 0/1, on one shape per transpose. */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) bf16_case(ta, tb, 33, 65, 7, 0.5f, 0.25f, &r);
}

/* A packed B (prm_gemm_bf16_pack): on every backend, for M other than the
 * one it was packed for, alpha and beta, the products of the reference
 * twin on the plain operands (to fp32 accumulation); oneDNN holds a copy,
 * the others none. Packing again after B changed follows the new B in the
 * same buffer; freeing leaves p empty. */
static void test_gemm_bf16_packed(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 9);
  int64_t N = 65, K = 70;
  static const int64_t Ms[] = {1, 33, 50};
  uint16_t *B = malloc((size_t)((N + 2) * (K + 2)) * 2), *A = malloc((size_t)(50 * (K + 1)) * 2);
  float *C = malloc((size_t)(50 * N) * 4), *want = malloc((size_t)(50 * N) * 4),
        *C0 = malloc((size_t)(50 * N) * 4);
  prm_gemm_i be[8];
  int nb = gemm_list(be, 8);
  for (int b = 0; b < nb; b++)
    for (int tb = 0; tb < 2; tb++) {
      prm_gemm_t g = {&be[b], NULL};
      int64_t ldb = (tb ? K : N) + 2, lda = K + 1;
      prm_gemm_packed_t p = {0};
      void *buf = NULL;
      for (int round = 0; round < 2; round++) { /* round 1: B changed, packed again */
        for (int64_t i = 0; i < (tb ? N : K) * ldb; i++) B[i] = rand_bf16(&r);
        prm_gemm_bf16_pack(&g, &p, tb, 33, N, K, B, ldb);
        int onednn = !strcmp(be[b].name, "onednn");
        assert_true(onednn ? p.buf != NULL && p.bytes >= (size_t)(N * K * 2) : p.buf == NULL);
        if (round == 0) buf = p.buf;
        assert_true(p.buf == buf); /* the same size: the copy is reused */
        for (int m = 0; m < 3; m++) {
          int64_t M = Ms[m];
          float alpha = m == 1 ? 0.5f : 1.0f, beta = m == 2 ? 1.0f : 0.0f;
          for (int64_t i = 0; i < M * lda; i++) A[i] = rand_bf16(&r);
          for (int64_t i = 0; i < M * N; i++) C0[i] = beta == 0 ? NAN : (float)prm_rng_uniform(&r);
          memcpy(want, C0, (size_t)(M * N) * 4);
          prm__gemm_bf16_reference(NULL, 0, tb, M, N, K, alpha, A, lda, B, ldb, beta, want, N);
          memcpy(C, C0, (size_t)(M * N) * 4);
          prm_gemm_bf16_packed(&g, M, alpha, A, lda, &p, beta, C, N);
          for (int64_t i = 0; i < M * N; i++) {
            /* |a b| < 1 per term: K + |c| bounds each element's magnitude. */
            double d = fabs((double)C[i] - want[i]), tol = 1e-4 * (K + (beta ? 1 : 0));
            if (!(d <= tol))
              fail_msg("%s packed: tb=%d M=%lld round %d at %lld: %g, reference %g", be[b].name,
                       tb, (long long)M, round, (long long)i, (double)C[i], (double)want[i]);
          }
        }
      }
      prm_gemm_packed_free(&p);
      assert_null(p.buf);
      assert_null(p.B);
    }
  free(A), free(B), free(C), free(want), free(C0);
}

/* K = 0 and empty outputs follow prm_sgemm: C = beta C, nothing touched. */
static void test_gemm_bf16_edges(void **state) {
  (void)state;
  prm_gemm_t g;
  assert_int_equal(prm_gemm_init(&g, NULL, NULL), 0);
  float C[4] = {1, 2, 3, 4};
  uint16_t a = 0x3f80, b = 0x3f80;
  prm_gemm_bf16(&g, 0, 0, 2, 2, 0, 1.0f, &a, 1, &b, 2, 0.5f, C, 2);
  assert_true(C[0] == 0.5f && C[3] == 2.0f);
  prm_gemm_bf16(&g, 0, 0, 2, 2, 0, 1.0f, &a, 1, &b, 2, 0.0f, C, 2);
  assert_true(C[0] == 0 && C[3] == 0);
  C[0] = 7;
  prm_gemm_bf16(&g, 0, 0, 0, 2, 3, 1.0f, &a, 3, &b, 2, 0.0f, C, 2);
  assert_true(C[0] == 7);
}

/* ------------------------------------------------------------------------ */
/* Tuning                                                                    */
/* ------------------------------------------------------------------------ */

static void fill_f(float *x, int64_t n, uint64_t seed) {
  prm_rng_t r;
  prm_rng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(2.0 * prm_rng_uniform(&r) - 1.0);
}

static void test_tune_dispatch(void **state) {
  (void)state;
  const prm_gemm_i *const *list;
  prm_gemm_backends(&list);
  const char *dflt = list[0]->name;
  /* fp32 (0,1,7,33,65) and bf16 (1,0,33,7,65) go to the reference; the
   * same shapes with the other dtype and every other shape stay on the
   * default backend. */
  prm_gemm_tune_row_t rows[] = {
      {.bf16 = 0, .trans_a = 0, .trans_b = 1, .m = 7, .n = 33, .k = 65, .backend = "reference",
       .gflops = 1.0, .note = "reference=1.0"},
      {.bf16 = 1, .trans_a = 1, .trans_b = 0, .m = 33, .n = 7, .k = 65, .backend = "reference",
       .gflops = 1.0},
      {.bf16 = 0, .trans_a = 0, .trans_b = 0, .m = 5, .n = 5, .k = 5, .backend = dflt,
       .gflops = 2.0},
  };
  char *path = prm_xasprintf("%s/tune.tsv", prm_test_tmpdir());
  prm_err_t err = {0};
  assert_int_equal(prm_gemm_tune_write(path, rows, 3, &err), 0);
  char *text = prm_test_read(path);
  assert_true(!strncmp(text, "# primus gemm tuning v1\n", 24));
  free(text);

  prm_gemm_t g;
  if (prm_gemm_init_tuned(&g, NULL, path, &err)) fail_msg("%s", err.msg);
  char name[64];
  snprintf(name, sizeof name, "%s+tuned", dflt);
  assert_string_equal(g.i->name, name);
  assert_string_equal(prm_gemm_pick(&g, 0, 0, 1, 7, 33, 65)->name, "reference");
  assert_string_equal(prm_gemm_pick(&g, 1, 1, 0, 33, 7, 65)->name, "reference");
  assert_string_equal(prm_gemm_pick(&g, 1, 0, 1, 7, 33, 65)->name, dflt);
  assert_string_equal(prm_gemm_pick(&g, 0, 1, 0, 33, 7, 65)->name, dflt);
  assert_string_equal(prm_gemm_pick(&g, 0, 0, 1, 7, 33, 64)->name, dflt);
  assert_string_equal(prm_gemm_pick(&g, 0, 0, 0, 5, 5, 5)->name, dflt);

  /* The reference ran: bit-identical to calling it directly. */
  prm_gemm_t ref;
  assert_int_equal(prm_gemm_init(&ref, "reference", &err), 0);
  /* "native", the old name (PRIMUS_GEMM, benchmark --backend), is the same. */
  prm_gemm_t old;
  assert_int_equal(prm_gemm_init(&old, "native", &err), 0);
  assert_string_equal(old.i->name, "reference");
  float A[33 * 65], B[65 * 33], C1[33 * 33], C2[33 * 33];
  fill_f(A, 33 * 65, 1);
  fill_f(B, 65 * 33, 2);
  prm_sgemm(&g, 0, 1, 7, 33, 65, 1.0f, A, 65, B, 65, 0.0f, C1, 33);
  prm_sgemm(&ref, 0, 1, 7, 33, 65, 1.0f, A, 65, B, 65, 0.0f, C2, 33);
  assert_memory_equal(C1, C2, 7 * 33 * sizeof(float));
  uint16_t A16[33 * 65], B16[65 * 33];
  prm_f32_to_bf16(A16, A, 33 * 65);
  prm_f32_to_bf16(B16, B, 65 * 33);
  prm_gemm_bf16(&g, 1, 0, 33, 7, 65, 1.0f, A16, 33, B16, 7, 0.0f, C1, 7);
  prm_gemm_bf16(&ref, 1, 0, 33, 7, 65, 1.0f, A16, 33, B16, 7, 0.0f, C2, 7);
  assert_memory_equal(C1, C2, 33 * 7 * sizeof(float));
  /* A shape the file does not list runs the default: same as untuned. */
  prm_gemm_t plain;
  assert_int_equal(prm_gemm_init(&plain, NULL, &err), 0);
  prm_sgemm(&g, 0, 0, 9, 11, 13, 1.0f, A, 13, B, 11, 0.0f, C1, 11);
  prm_sgemm(&plain, 0, 0, 9, 11, 13, 1.0f, A, 13, B, 11, 0.0f, C2, 11);
  assert_memory_equal(C1, C2, 9 * 11 * sizeof(float));

  prm_gemm_free(&g);
  assert_string_equal(g.i->name, dflt);
  prm_gemm_free(&g); /* untuned now: a no-op */
  /* No file: the plain backend. */
  assert_int_equal(prm_gemm_init_tuned(&g, "reference", NULL, &err), 0);
  assert_string_equal(g.i->name, "reference");
  assert_int_equal(prm_gemm_init_tuned(&g, "reference", "", &err), 0);
  assert_string_equal(g.i->name, "reference");
  free(path);
}

static void expect_tune_error(const char *text, const char *want1, const char *want2) {
  static int seq;
  char name[32];
  snprintf(name, sizeof name, "bad%d.tsv", seq++);
  char *path = prm_test_write(prm_test_tmpdir(), name, text);
  prm_gemm_t g = {0};
  prm_err_t err = {0};
  int rc = prm_gemm_init_tuned(&g, NULL, path, &err);
  if (rc != PRM_EINVAL) fail_msg("%s: rc %d, expected PRM_EINVAL (%s)", name, rc, err.msg);
  char where[600];
  snprintf(where, sizeof where, "%s%s", path, want1);
  if (!strstr(err.msg, where) || (want2 && !strstr(err.msg, want2)))
    fail_msg("error \"%s\" lacks \"%s\" / \"%s\"", err.msg, where, want2 ? want2 : "");
  /* g is left as the plain backend, nothing to free. */
  prm_gemm_free(&g);
  free(path);
}

static void test_tune_errors(void **state) {
  (void)state;
  const char *hdr = "# primus gemm tuning v1\n# comment\ndtype\ttrans_a\ttrans_b\tM\tN\tK\tbackend\n";
  char buf[512];
  expect_tune_error("hello\n", ":1:", "not a GEMM tuning file");
  expect_tune_error("", ": empty file", NULL);
  expect_tune_error("# primus gemm tuning v2\n", ":1:", "version 2");
  snprintf(buf, sizeof buf, "%sfp16\t0\t0\t1\t2\t3\treference\n", hdr);
  expect_tune_error(buf, ":4:", "dtype: expected fp32 or bf16, got \"fp16\"");
  snprintf(buf, sizeof buf, "%sfp32\t2\t0\t1\t2\t3\treference\n", hdr);
  expect_tune_error(buf, ":4:", "expected 0 or 1");
  snprintf(buf, sizeof buf, "%sfp32\t0\t0\tabc\t2\t3\treference\n", hdr);
  expect_tune_error(buf, ":4:", "M: expected a positive integer, got \"abc\"");
  snprintf(buf, sizeof buf, "%sfp32\t0\t0\t1\t2\t0\treference\n", hdr);
  expect_tune_error(buf, ":4:", "K: expected a positive integer");
  snprintf(buf, sizeof buf, "%s\nfp32\t0\t0\t1\t2\t3\tcublas\n", hdr);
  expect_tune_error(buf, ":5:", "backend \"cublas\": unknown or not available");
  snprintf(buf, sizeof buf, "%sfp32 0 0 1 2 3 reference\n", hdr);
  expect_tune_error(buf, ":4:", "at least 7 tab-separated columns");
  snprintf(buf, sizeof buf, "%sbf16\t0\t1\t1\t2\t3\treference\nbf16\t0\t1\t1\t2\t3\tnative\n",
           hdr);
  expect_tune_error(buf, ":5:", "listed twice");
  /* A missing file names it. */
  prm_gemm_t g;
  prm_err_t err = {0};
  assert_int_not_equal(prm_gemm_init_tuned(&g, NULL, "/nonexistent/tune.tsv", &err), 0);
  assert_non_null(strstr(err.msg, "/nonexistent/tune.tsv"));
  /* Extra informational columns, comments, CRLF and "native" are fine. */
  snprintf(buf, sizeof buf, "%sfp32\t0\t0\t1\t2\t3\tnative\t1.5\tnative=1.5\r\n\n# end\n", hdr);
  char *path = prm_test_write(prm_test_tmpdir(), "ok.tsv", buf);
  if (prm_gemm_init_tuned(&g, NULL, path, &err)) fail_msg("%s", err.msg);
  assert_string_equal(prm_gemm_pick(&g, 0, 0, 0, 1, 2, 3)->name, "reference");
  prm_gemm_free(&g);
  free(path);
}

/* The shapes --tune times for llama_124M at 8 x 256 rows. */
static void test_tune_shapes(void **state) {
  (void)state;
  prm_bench_dense_gemm_t g[32];
  int n = prm_bench_train_gemms(768, 12, 12, 2048, 50304, 2048, g, 32);
  /* q = o (square), k/v = q (12 groups): 3 attention shapes, 6 MLP, 3 for
   * the head's chunks (16M logits: 333 rows at most, so 7 chunks, in blocks
   * of 32 rows: 320 rows each) and 3 for the last one's 128 rows, as
   * prm_llama_head_chunk cuts. */
  assert_int_equal(n, 15);
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < i; j++)
      assert_false(g[i].m == g[j].m && g[i].n == g[j].n && g[i].k == g[j].k &&
                   g[i].trans_a == g[j].trans_a && g[i].trans_b == g[j].trans_b);
    if (!strcmp(g[i].name, "lm_head") && !strcmp(g[i].phase, "fwd")) {
      head = 1;
      assert_int_equal(g[i].m, 320);
      assert_int_equal(g[i].n, 50304);
    }
    if (!strcmp(g[i].name, "lm_head_tail") && !strcmp(g[i].phase, "wgrad")) {
      tail = 1;
      assert_int_equal(g[i].k, 2048 - 6 * 320);
    }
  }
  assert_true(head && tail);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16_specials),      cmocka_unit_test(test_bf16_random),
      cmocka_unit_test(test_bf16_widen),         cmocka_unit_test(test_gemm_bf16_backends),
      cmocka_unit_test(test_gemm_bf16_edges),    cmocka_unit_test(test_gemm_bf16_packed),
      cmocka_unit_test(test_tune_dispatch),
      cmocka_unit_test(test_tune_errors),        cmocka_unit_test(test_tune_shapes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
