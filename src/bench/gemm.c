/* gemm.c - GEMM throughput through the kernels' backend table (the same
 * calls the engine makes), and the list of GEMMs of one dense Llama layer
 * that `benchmark gemm-dense` times. */
#define _GNU_SOURCE
#include "bench/bench-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void prm__bench_fill(float *x, int64_t n, uint64_t seed) {
  prm_rng_t r;
  prm_rng_seed(&r, seed);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(2.0 * prm_rng_uniform(&r) - 1.0);
}

float *prm__bench_alloc(int64_t n, const char *what, prm_err_t *err) {
  float *p = prm_mem_alloc(PRM_MEM_SCRATCH, (size_t)n * sizeof(float));
  if (!p) {
    char b[32];
    prm_fmt_bytes(b, sizeof b, (double)n * sizeof(float));
    prm_errf(err, PRM_ENOMEM, "cannot allocate %s (%s)", what, b);
  }
  return p;
}

void prm__bench_free(float *p, int64_t n) {
  if (p) prm_mem_free(PRM_MEM_SCRATCH, p, (size_t)n * sizeof(float));
}

double prm__bench_peak_gflops(void) {
  return prm_peak_gflops_per_core() * prm_kernels_threads();
}

/* The kernel table calls its plain backend "reference"; the benchmark's
 * command line (as Primus') calls it "native". */
static const char *prm__display(const char *table_name) {
  return strcmp(table_name, "reference") ? table_name : "native";
}

int prm_bench_gemm_backends(const char **names, int max) {
  const prm_gemm_i *const *list;
  int n = prm_gemm_backends(&list), k = 0;
  for (int i = 0; i < n && k < max; i++)
    if (list[i]->available()) names[k++] = prm__display(list[i]->name);
  return k;
}

/* Largest dimension any backend takes (OpenBLAS uses int). */
#define PRM__DIM_MAX ((int64_t)1 << 30)

int prm_bench_gemm(const prm_bench_gemm_opts_t *o, prm_bench_gemm_result_t *r, prm_err_t *err) {
  memset(r, 0, sizeof *r);
  if (o->m < 1 || o->n < 1 || o->k < 1 || o->m > PRM__DIM_MAX || o->n > PRM__DIM_MAX ||
      o->k > PRM__DIM_MAX)
    return prm_errf(err, PRM_EINVAL, "gemm: M, N and K must be between 1 and %lld (got %lld x %lld x %lld)",
                    (long long)PRM__DIM_MAX, (long long)o->m, (long long)o->n, (long long)o->k);
  if ((o->trans_a != 0 && o->trans_a != 1) || (o->trans_b != 0 && o->trans_b != 1))
    return prm_errf(err, PRM_EINVAL, "gemm: trans_a and trans_b must be 0 or 1");
  const char *name = o->backend;
  if (prm_streq(name, "native")) name = "reference";
  prm_gemm_t g;
  prm_err_t e = {0};
  if (prm_gemm_init(&g, name, &e)) {
    const char *avail[8];
    int n = prm_bench_gemm_backends(avail, 8);
    prm_sb_t sb = {0};
    for (int i = 0; i < n; i++) prm_sb_appendf(&sb, "%s%s", i ? ", " : "", avail[i]);
    int rc = prm_errf(err, PRM_EINVAL, "gemm: backend \"%s\" is unknown or not built in; choices: %s",
                      o->backend, prm_sb_str(&sb));
    prm_sb_free(&sb);
    return rc;
  }
  if (o->bf16) {
    int cpu = __builtin_cpu_supports("avx512bf16");
    return prm_errf(err, PRM_EDEP,
                    "gemm: bf16 GEMM arrives with the Turbo kernels (issue 9); the GEMM table "
                    "has fp32 only%s",
                    cpu ? " (this CPU has avx512_bf16)" : " (and this CPU lacks avx512_bf16)");
  }
  int64_t M = o->m, N = o->n, K = o->k;
  float *A = prm__bench_alloc(M * K, "gemm operand A", err), *B = NULL, *C = NULL;
  if (A) B = prm__bench_alloc(K * N, "gemm operand B", err);
  if (B) C = prm__bench_alloc(M * N, "gemm result C", err);
  if (!C) {
    prm__bench_free(A, M * K);
    prm__bench_free(B, K * N);
    return err ? err->code : PRM_ENOMEM;
  }
  prm__bench_fill(A, M * K, 1);
  prm__bench_fill(B, K * N, 2);
  int64_t lda = o->trans_a ? M : K, ldb = o->trans_b ? K : N;

  /* One warm-up call (backends build their plans and thread pools), then
   * timed calls until the duration is spent; at least one. */
  prm_sgemm(&g, o->trans_a, o->trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
  double t_start = prm_time_now(), best = 1e300;
  int64_t iters = 0;
  do {
    double t0 = prm_time_now();
    prm_sgemm(&g, o->trans_a, o->trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
    double dt = prm_time_now() - t0;
    if (dt < best) best = dt;
    iters++;
  } while (prm_time_now() - t_start < o->duration_s);
  double avg = (prm_time_now() - t_start) / (double)iters;
  if (avg <= 0) avg = 1e-9;
  if (best <= 0) best = 1e-9;

  double flops = 2.0 * (double)M * (double)N * (double)K;
  double bytes = 4.0 * ((double)M * K + (double)K * N + (double)M * N);
  r->ms_avg = avg * 1e3;
  r->ms_min = best * 1e3;
  r->tflops = flops / avg / 1e12;
  r->gbs = bytes / avg / 1e9;
  r->intensity = flops / bytes;
  double peak = prm__bench_peak_gflops();
  r->peak_fraction = peak > 0 ? r->tflops * 1e3 / peak : 0;
  r->iters = iters;
  snprintf(r->backend, sizeof r->backend, "%s", prm__display(g.i->name));
  prm__bench_free(A, M * K);
  prm__bench_free(B, K * N);
  prm__bench_free(C, M * N);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The GEMMs of one dense layer                                              */
/* ------------------------------------------------------------------------ */

/* Adds the three GEMMs of a linear layer y(T,out) = x(T,in) W(out,in)^T:
 * forward (T,out,in), dgrad dx = dy W (T,in,out), wgrad dW = dy^T x
 * (out,in,T), with the transposes the engine uses (prm_linear_*). */
static int prm__linear3(prm_bench_dense_gemm_t *o, int at, const char *name, int64_t tokens,
                        int64_t in, int64_t out) {
  const struct {
    const char *phase;
    int64_t m, n, k;
    int ta, tb;
  } g[3] = {{"fwd", tokens, out, in, 0, 1}, {"dgrad", tokens, in, out, 0, 0},
            {"wgrad", out, in, tokens, 1, 0}};
  for (int i = 0; i < 3; i++) {
    prm_bench_dense_gemm_t *d = &o[at + i];
    snprintf(d->name, sizeof d->name, "%s", name);
    d->phase = g[i].phase;
    d->m = g[i].m;
    d->n = g[i].n;
    d->k = g[i].k;
    d->trans_a = g[i].ta;
    d->trans_b = g[i].tb;
  }
  return at + 3;
}

int prm_bench_dense_gemms(int64_t hidden, int64_t heads, int64_t groups, int64_t ffn,
                          int64_t vocab, int64_t tokens, prm_bench_dense_gemm_t *out) {
  int64_t D = heads > 0 ? hidden / heads : 0;
  int n = 0;
  n = prm__linear3(out, n, "attn_qkv", tokens, hidden, (heads + 2 * groups) * D);
  n = prm__linear3(out, n, "attn_out", tokens, heads * D, hidden);
  n = prm__linear3(out, n, "mlp_gate_up", tokens, hidden, 2 * ffn);
  n = prm__linear3(out, n, "mlp_down", tokens, ffn, hidden);
  n = prm__linear3(out, n, "lm_head", tokens, hidden, vocab);
  return n;
}
