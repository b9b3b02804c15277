/* test-kernels-attn16.c - the bf16 attention (src/kernels/attention16.c)
 * against its reference twin (the double reference on the same bf16
 * inputs), each ISA variant (vdpbf16ps and the widening fallback) on its
 * own and against the other, on shapes that cross the 32 x 64 blocks, with
 * GQA, odd T, segment ids and head sizes that take the fp32 kernels.
 *
 * Tolerance. The kernel rounds P (forward and backward) and dS (backward)
 * to bf16 before using them as operands: each term of out = sum P v,
 * dv = sum P dO, dk = sum dS q and dq = sum dS k carries a relative error
 * of at most 2^-9, independent from term to term, and the fp32 sums add
 * ~1e-6. So |fast - ref| <= 2^-9 sum |term|. The sum of |term| is of
 * the order of the tensor's largest element, a few times it where the
 * terms cancel (dS sums to zero over a row): 2^-7 (|ref| + max|ref|)
 * bounds it (the errors measured are 0.001-0.003 max|ref|), while any
 * wrong index or missing term is off by O(max|ref|). lse uses the
 * unrounded fp32 P: 1e-5. The two variants do the same roundings and
 * differ only in fp32 summation order: 1e-5. */
#define _GNU_SOURCE
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels-impl.h"
#include "primus/prm_kernels.h"

#define A16_TOL (1.0 / 128)

static float *falloc(int64_t n) { return prm_xcalloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* |got - want| <= rtol (|want| + max|want|) element by element. */
static void assert_close(const char *what, const float *got, const float *want, int64_t n,
                         double rtol) {
  double mx = 0, worst = 0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) {
    double tol = rtol * (fabs(want[i]) + mx), e = fabs((double)got[i] - want[i]);
    worst = fmax(worst, e / (mx > 0 ? mx : 1));
    if (!(e <= tol))
      fail_msg("%s[%lld]: got %.9g, want %.9g (tol %.3g)", what, (long long)i, (double)got[i],
               (double)want[i], tol);
  }
  if (getenv("PRM_TEST_VERBOSE"))
    print_message("%-28s worst error %.3g of max|ref| %.3g\n", what, worst, mx);
}

/* n random normal values rounded to bf16. */
static prm_bf16_t *rand16(int64_t n, prm_rng_t *r) {
  float *f = falloc(n);
  prm_bf16_t *x = prm_xcalloc((size_t)(n > 0 ? n : 1), sizeof *x);
  for (int64_t i = 0; i < n; i++) f[i] = (float)prm_rng_normal(r);
  prm_f32_to_bf16(x, f, n);
  free(f);
  return x;
}

/* Segment ids of runs 1 .. 40 long. */
static int32_t *rand_seg(int64_t B, int64_t T, prm_rng_t *r) {
  int32_t *seg = prm_xcalloc((size_t)(B * T), sizeof *seg);
  for (int64_t b = 0; b < B; b++) {
    int32_t id = 0;
    for (int64_t t = 0, left = 0; t < T; t++, left--) {
      if (left <= 0) {
        left = 1 + (int64_t)(prm_rng_u64(r) % 40);
        id++;
      }
      seg[b * T + t] = id;
    }
  }
  return seg;
}

typedef struct {
  int64_t B, T, H, G, D, nq, nk, nl;
  prm_bf16_t *q, *k, *v, *dout;
  float *o, *l, *dq, *dk, *dv; /* fast */
  float *ro, *rl, *rdq, *rdk, *rdv; /* reference */
} a16_case_t;

static void case_init(a16_case_t *c, const int64_t s[5], prm_rng_t *r) {
  memset(c, 0, sizeof *c);
  c->B = s[0], c->T = s[1], c->H = s[2], c->G = s[3], c->D = s[4];
  c->nq = c->B * c->T * c->H * c->D, c->nk = c->B * c->T * c->G * c->D,
  c->nl = c->B * c->H * c->T;
  c->q = rand16(c->nq, r), c->k = rand16(c->nk, r), c->v = rand16(c->nk, r);
  c->dout = rand16(c->nq, r);
  c->o = falloc(c->nq), c->l = falloc(c->nl), c->dq = falloc(c->nq);
  c->dk = falloc(c->nk), c->dv = falloc(c->nk);
  c->ro = falloc(c->nq), c->rl = falloc(c->nl), c->rdq = falloc(c->nq);
  c->rdk = falloc(c->nk), c->rdv = falloc(c->nk);
}

static void case_free(a16_case_t *c) {
  free(c->q), free(c->k), free(c->v), free(c->dout);
  free(c->o), free(c->l), free(c->dq), free(c->dk), free(c->dv);
  free(c->ro), free(c->rl), free(c->rdq), free(c->rdk), free(c->rdv);
}

/* Runs variant isa forward and backward into the fast buffers (dk, dv
 * prefilled: the kernel must overwrite them). */
static void case_run(a16_case_t *c, const char *isa, const int32_t *seg) {
  for (int64_t i = 0; i < c->nk; i++) c->dk[i] = c->dv[i] = 7.0f;
  assert_int_equal(prm__attention_forward_bf16_isa(isa, c->o, c->l, c->q, c->k, c->v, seg, c->B,
                                                   c->T, c->H, c->G, c->D),
                   0);
  assert_int_equal(prm__attention_backward_bf16_isa(isa, c->dq, c->dk, c->dv, c->dout, c->q, c->k,
                                                    c->v, c->o, c->l, seg, c->B, c->T, c->H, c->G,
                                                    c->D),
                   0);
}

static void case_ref(a16_case_t *c, const int32_t *seg) {
  prm__ref_attention_forward_bf16(c->ro, c->rl, c->q, c->k, c->v, seg, c->B, c->T, c->H, c->G,
                                  c->D);
  prm__ref_attention_backward_bf16(c->rdq, c->rdk, c->rdv, c->dout, c->q, c->k, c->v, c->ro,
                                   c->rl, seg, c->B, c->T, c->H, c->G, c->D);
}

static int native(void) { return !strcmp(prm_attention_bf16_isa(), "avx512bf16"); }

/* B, T, H, G, D: GQA and not, odd T, T below and across the 32 x 64
 * blocks, head sizes 16 .. 128 (one to two 64-lane passes, 1-3 vector
 * tails), and 24 (not a multiple of 16: the fp32 kernels). */
static const int64_t shapes[][5] = {{1, 70, 4, 2, 64}, {2, 33, 2, 1, 32}, {1, 130, 2, 2, 128},
                                    {1, 9, 4, 4, 16},  {1, 97, 6, 2, 48}, {1, 5, 2, 1, 24}};

static void check_vs_ref(const char *isa, int with_seg) {
  prm_rng_t r;
  prm_rng_seed(&r, with_seg ? 33 : 31);
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    a16_case_t c;
    case_init(&c, shapes[si], &r);
    int32_t *seg = with_seg ? rand_seg(c.B, c.T, &r) : NULL;
    case_ref(&c, seg);
    case_run(&c, isa, seg);
    assert_close("bf16 attention out", c.o, c.ro, c.nq, A16_TOL);
    assert_close("bf16 attention lse", c.l, c.rl, c.nl, 1e-5);
    assert_close("bf16 attention dq", c.dq, c.rdq, c.nq, A16_TOL);
    assert_close("bf16 attention dk", c.dk, c.rdk, c.nk, A16_TOL);
    assert_close("bf16 attention dv", c.dv, c.rdv, c.nk, A16_TOL);
    free(seg);
    case_free(&c);
  }
}

static void test_attn16_native(void **state) {
  (void)state;
  if (!native()) {
    print_message("no avx512_bf16 on this CPU: the vdpbf16ps variant is not tested here\n");
    assert_int_equal(prm__attention_forward_bf16_isa("avx512bf16", NULL, NULL, NULL, NULL, NULL,
                                                     NULL, 1, 1, 1, 1, 16),
                     PRM_EINVAL);
    return;
  }
  check_vs_ref("avx512bf16", 0);
  check_vs_ref("avx512bf16", 1);
}

static void test_attn16_widen(void **state) {
  (void)state;
  check_vs_ref("widen", 0);
  check_vs_ref("widen", 1);
}

/* The two variants do the same roundings; only fp32 sums differ. */
static void test_attn16_variants_agree(void **state) {
  (void)state;
  if (!native()) return;
  prm_rng_t r;
  prm_rng_seed(&r, 35);
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    a16_case_t c, w;
    case_init(&c, shapes[si], &r);
    int32_t *seg = rand_seg(c.B, c.T, &r);
    case_run(&c, "avx512bf16", seg);
    memcpy(&w, &c, sizeof w);
    w.o = falloc(c.nq), w.l = falloc(c.nl), w.dq = falloc(c.nq);
    w.dk = falloc(c.nk), w.dv = falloc(c.nk);
    case_run(&w, "widen", seg);
    assert_close("variants out", w.o, c.o, c.nq, 1e-5);
    assert_close("variants lse", w.l, c.l, c.nl, 1e-5);
    assert_close("variants dq", w.dq, c.dq, c.nq, 1e-5);
    assert_close("variants dk", w.dk, c.dk, c.nk, 1e-5);
    assert_close("variants dv", w.dv, c.dv, c.nk, 1e-5);
    free(w.o), free(w.l), free(w.dq), free(w.dk), free(w.dv);
    free(seg);
    case_free(&c);
  }
}

/* The public entry points: this CPU's variant; NULL segments equal one
 * segment spanning the sequence bit for bit; a head size the fast path
 * does not take gives the fp32 kernels' results on the widened inputs. */
static void test_attn16_public(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 37);
  const int64_t s[5] = {2, 45, 4, 2, 32};
  a16_case_t c;
  case_init(&c, s, &r);
  int32_t *one = prm_xcalloc((size_t)(c.B * c.T), sizeof *one);
  prm_attention_forward_bf16(c.o, c.l, c.q, c.k, c.v, NULL, c.B, c.T, c.H, c.G, c.D);
  prm_attention_backward_bf16(c.dq, c.dk, c.dv, c.dout, c.q, c.k, c.v, c.o, c.l, NULL, c.B, c.T,
                              c.H, c.G, c.D);
  prm_attention_forward_bf16(c.ro, c.rl, c.q, c.k, c.v, one, c.B, c.T, c.H, c.G, c.D);
  prm_attention_backward_bf16(c.rdq, c.rdk, c.rdv, c.dout, c.q, c.k, c.v, c.o, c.l, one, c.B, c.T,
                              c.H, c.G, c.D);
  assert_memory_equal(c.o, c.ro, (size_t)c.nq * sizeof(float));
  assert_memory_equal(c.dq, c.rdq, (size_t)c.nq * sizeof(float));
  assert_memory_equal(c.dk, c.rdk, (size_t)c.nk * sizeof(float));
  free(one);
  case_free(&c);

  const int64_t s2[5] = {1, 11, 2, 1, 24};
  case_init(&c, s2, &r);
  float *qf = falloc(c.nq), *kf = falloc(c.nk), *vf = falloc(c.nk), *df = falloc(c.nq);
  prm_bf16_to_f32(qf, c.q, c.nq), prm_bf16_to_f32(kf, c.k, c.nk), prm_bf16_to_f32(vf, c.v, c.nk);
  prm_bf16_to_f32(df, c.dout, c.nq);
  prm_attention_forward_bf16(c.o, c.l, c.q, c.k, c.v, NULL, c.B, c.T, c.H, c.G, c.D);
  prm_attention_forward_seg(c.ro, c.rl, qf, kf, vf, NULL, c.B, c.T, c.H, c.G, c.D);
  assert_memory_equal(c.o, c.ro, (size_t)c.nq * sizeof(float));
  prm_attention_backward_bf16(c.dq, c.dk, c.dv, c.dout, c.q, c.k, c.v, c.o, c.l, NULL, c.B, c.T,
                              c.H, c.G, c.D);
  prm_attention_backward_seg(c.rdq, c.rdk, c.rdv, df, qf, kf, vf, c.o, c.l, NULL, c.B, c.T, c.H,
                             c.G, c.D);
  assert_memory_equal(c.dv, c.rdv, (size_t)c.nk * sizeof(float));
  free(qf), free(kf), free(vf), free(df);
  case_free(&c);
  assert_int_equal(prm__attention_forward_bf16_isa("sse9", NULL, NULL, NULL, NULL, NULL, NULL, 1,
                                                   1, 1, 1, 16),
                   PRM_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attn16_native),
      cmocka_unit_test(test_attn16_widen),
      cmocka_unit_test(test_attn16_variants_agree),
      cmocka_unit_test(test_attn16_public),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
