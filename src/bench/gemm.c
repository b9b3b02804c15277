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

int prm_bench_gemm_backends(const char **names, int max) {
  const prm_gemm_i *const *list;
  int n = prm_gemm_backends(&list), k = 0;
  for (int i = 0; i < n && k < max; i++)
    if (list[i]->available()) names[k++] = list[i]->name;
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
  const char *name = o->backend; /* the old "native" too: prm_gemm_init maps it */
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
  if (o->bf16 && !__builtin_cpu_supports("avx512bf16"))
    PRM_WARN("gemm: bf16 on a CPU without avx512_bf16: the backends emulate it");
  int64_t M = o->m, N = o->n, K = o->k;
  /* bf16 operands take half the floats' room (rounded up). */
  int64_t na = o->bf16 ? (M * K + 1) / 2 : M * K, nb = o->bf16 ? (K * N + 1) / 2 : K * N;
  float *A = prm__bench_alloc(na, "gemm operand A", err), *B = NULL, *C = NULL, *A32 = NULL;
  if (A) B = prm__bench_alloc(nb, "gemm operand B", err);
  if (B) C = prm__bench_alloc(M * N, "gemm result C", err);
  if (C && o->bf16) A32 = prm__bench_alloc(M * K, "gemm fp32 copy of A", err);
  if (!C || (o->bf16 && !A32)) {
    prm__bench_free(A, na);
    prm__bench_free(B, nb);
    prm__bench_free(C, M * N);
    return err ? err->code : PRM_ENOMEM;
  }
  if (o->bf16) {
    /* The operands as bf16, and the cost of rounding the activation
     * operand A from fp32 (what a bf16 linear layer does once per call). */
    float *B32 = prm__bench_alloc(K * N, "gemm fp32 copy of B", err);
    if (!B32) {
      prm__bench_free(A, na);
      prm__bench_free(B, nb);
      prm__bench_free(C, M * N);
      prm__bench_free(A32, M * K);
      return err ? err->code : PRM_ENOMEM;
    }
    prm__bench_fill(A32, M * K, 1);
    prm__bench_fill(B32, K * N, 2);
    prm_f32_to_bf16((prm_bf16_t *)B, B32, K * N);
    prm__bench_free(B32, K * N);
    prm_f32_to_bf16((prm_bf16_t *)A, A32, M * K);
    double cbest = 1e300, c0 = prm_time_now();
    for (int rep = 0; rep < 5 || (rep < 1000 && prm_time_now() - c0 < o->duration_s / 10); rep++) {
      double t0 = prm_time_now();
      prm_f32_to_bf16((prm_bf16_t *)A, A32, M * K);
      double dt = prm_time_now() - t0;
      if (dt < cbest) cbest = dt;
    }
    r->cvt_ms = cbest * 1e3;
  } else {
    prm__bench_fill(A, M * K, 1);
    prm__bench_fill(B, K * N, 2);
  }
  int64_t lda = o->trans_a ? M : K, ldb = o->trans_b ? K : N;
#define PRM__RUN()                                                                                 \
  (o->bf16 ? prm_gemm_bf16(&g, o->trans_a, o->trans_b, M, N, K, 1.0f, (const prm_bf16_t *)A, lda, \
                           (const prm_bf16_t *)B, ldb, 0.0f, C, N)                                 \
           : prm_sgemm(&g, o->trans_a, o->trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N))

  /* One warm-up call (backends build their plans and thread pools), then
   * timed calls until the duration is spent; at least one. */
  PRM__RUN();
  double t_start = prm_time_now(), best = 1e300;
  int64_t iters = 0;
  do {
    double t0 = prm_time_now();
    PRM__RUN();
    double dt = prm_time_now() - t0;
    if (dt < best) best = dt;
    iters++;
  } while (prm_time_now() - t_start < o->duration_s);
  double avg = (prm_time_now() - t_start) / (double)iters;
  if (avg <= 0) avg = 1e-9;
  if (best <= 0) best = 1e-9;

#undef PRM__RUN
  double flops = 2.0 * (double)M * (double)N * (double)K;
  double ab = o->bf16 ? 2.0 : 4.0;
  double bytes = ab * ((double)M * K + (double)K * N) + 4.0 * (double)M * N;
  r->ms_avg = avg * 1e3;
  r->ms_min = best * 1e3;
  r->tflops = flops / avg / 1e12;
  r->gbs = bytes / avg / 1e9;
  r->intensity = flops / bytes;
  double peak = prm__bench_peak_gflops();
  r->peak_fraction = peak > 0 ? r->tflops * 1e3 / peak : 0;
  r->iters = iters;
  snprintf(r->backend, sizeof r->backend, "%s", g.i->name);
  prm__bench_free(A, na);
  prm__bench_free(B, nb);
  prm__bench_free(C, M * N);
  prm__bench_free(A32, M * K);
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

/* ------------------------------------------------------------------------ */
/* Per-shape tuning                                                          */
/* ------------------------------------------------------------------------ */

/* Adds the three GEMMs of a linear layer unless an identical one (shape and
 * transposes) is listed already. */
static int prm__add3(prm_bench_dense_gemm_t *o, int n, int max, const char *name, int64_t tokens,
                     int64_t in, int64_t out) {
  prm_bench_dense_gemm_t g[3];
  prm__linear3(g, 0, name, tokens, in, out);
  for (int i = 0; i < 3; i++) {
    int dup = 0;
    for (int j = 0; j < n && !dup; j++)
      dup = o[j].m == g[i].m && o[j].n == g[i].n && o[j].k == g[i].k &&
            o[j].trans_a == g[i].trans_a && o[j].trans_b == g[i].trans_b;
    if (!dup && n < max) o[n++] = g[i];
  }
  return n;
}

int prm_bench_train_gemms(int64_t hidden, int64_t heads, int64_t groups, int64_t ffn,
                          int64_t vocab, int64_t tokens, prm_bench_dense_gemm_t *out, int max) {
  int64_t D = heads > 0 ? hidden / heads : 0;
  int n = 0;
  n = prm__add3(out, n, max, "attn_q", tokens, hidden, heads * D);
  n = prm__add3(out, n, max, "attn_kv", tokens, hidden, groups * D);
  n = prm__add3(out, n, max, "attn_out", tokens, heads * D, hidden);
  n = prm__add3(out, n, max, "mlp_gate_up", tokens, hidden, ffn);
  n = prm__add3(out, n, max, "mlp_down", tokens, ffn, hidden);
  /* The LM head runs over row chunks as the model cuts them, the last
   * one possibly shorter. */
  int64_t chunk = prm_llama_head_chunk(tokens, vocab);
  n = prm__add3(out, n, max, "lm_head", chunk, hidden, vocab);
  if (tokens % chunk) n = prm__add3(out, n, max, "lm_head_tail", tokens % chunk, hidden, vocab);
  return n;
}

const char *const prm_bench_tune_cols[PRM_BENCH_TUNE_NCOLS] = {
    "name",  "phase", "dtype",  "M",      "N",       "K",        "trans_a",       "trans_b",
    "backend", "avg_ms", "gflops", "cvt_ms", "gflops_cvt", "peak_fraction", "chosen"};

/* Reference GEMMs beyond this many FLOPs are not timed (seconds a call). */
#define PRM__TUNE_REF_FLOPS 1e9

int prm_bench_gemm_tune(const prm_bench_dense_gemm_t *g, int n, double duration_s,
                        const char *path, prm_table_t *t, prm_err_t *err) {
  const prm_gemm_i *const *list;
  int nb = prm_gemm_backends(&list), rc = 0, nrows = 0;
  prm_gemm_tune_row_t *rows = prm_xcalloc((size_t)(2 * n) + 1, sizeof *rows);
  char **notes = prm_xcalloc((size_t)(2 * n) + 1, sizeof *notes);
  double peak = prm__bench_peak_gflops();
  for (int s = 0; s < n && !rc; s++)
    for (int bf16 = 0; bf16 < 2 && !rc; bf16++) {
      double flops = 2.0 * (double)g[s].m * (double)g[s].n * (double)g[s].k;
      prm_bench_gemm_result_t res[8];
      const char *name[8];
      int nr = 0, win = -1;
      prm_sb_t note = {0};
      for (int b = 0; b < nb && nr < 8 && !rc; b++) {
        if (!list[b]->available()) continue;
        if (!strcmp(list[b]->name, "reference") && flops > PRM__TUNE_REF_FLOPS) {
          prm_sb_appendf(&note, "%s%s=skipped", note.len ? " " : "", list[b]->name);
          continue;
        }
        prm_bench_gemm_opts_t o = {.m = g[s].m, .n = g[s].n, .k = g[s].k,
                                   .trans_a = g[s].trans_a, .trans_b = g[s].trans_b,
                                   .bf16 = bf16, .backend = list[b]->name,
                                   .duration_s = duration_s};
        if ((rc = prm_bench_gemm(&o, &res[nr], err))) break;
        name[nr] = list[b]->name;
        prm_sb_appendf(&note, "%s%s=%.1f", note.len ? " " : "", name[nr], res[nr].tflops * 1e3);
        if (win < 0 || res[nr].tflops > res[win].tflops) win = nr;
        nr++;
      }
      for (int i = 0; i < nr && !rc; i++) {
        double gf = res[i].tflops * 1e3;
        prm_table_row(t);
        prm_table_str(t, g[s].name);
        prm_table_str(t, g[s].phase);
        prm_table_str(t, bf16 ? "bf16" : "fp32");
        prm_table_int(t, g[s].m);
        prm_table_int(t, g[s].n);
        prm_table_int(t, g[s].k);
        prm_table_int(t, g[s].trans_a);
        prm_table_int(t, g[s].trans_b);
        prm_table_str(t, res[i].backend);
        prm_table_num(t, res[i].ms_avg, 3);
        prm_table_num(t, gf, 1);
        prm_table_num(t, res[i].cvt_ms, 3);
        prm_table_num(t, flops / ((res[i].ms_avg + res[i].cvt_ms) * 1e-3) / 1e9, 1);
        prm_table_num(t, peak > 0 ? gf / peak : 0, 3);
        prm_table_str(t, i == win ? "yes" : "-");
      }
      if (!rc && win >= 0) {
        notes[nrows] = prm_xstrdup(prm_sb_str(&note));
        rows[nrows] = (prm_gemm_tune_row_t){.bf16 = bf16, .trans_a = g[s].trans_a,
                                            .trans_b = g[s].trans_b, .m = g[s].m, .n = g[s].n,
                                            .k = g[s].k, .backend = name[win],
                                            .gflops = res[win].tflops * 1e3,
                                            .note = notes[nrows]};
        nrows++;
      }
      prm_sb_free(&note);
    }
  if (!rc && path) rc = prm_gemm_tune_write(path, rows, nrows, err);
  for (int i = 0; i < nrows; i++) free(notes[i]);
  free(notes);
  free(rows);
  return rc;
}
