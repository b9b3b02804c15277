/* gemm_prof.c - a timing wrapper around a prm_gemm_t: every call is timed
 * and added to its shape's row (dtype, transposes, M, N, K), so a training
 * run can say how fast each of its GEMMs ran in place, next to what
 * `benchmark gemm` measures for the same shape alone (PRIMUS_GEMM_PROFILE,
 * docs/train.md "Speed knobs").
 *
 * Like the tuned handle (gemm.c) the wrapper is a backend of its own: g->i
 * is the prm__prof_t's interface, g->ctx the prm__prof_t, which keeps the
 * wrapped interface and ctx. Calls from several threads at once are
 * serialised only around the bookkeeping (a mutex), never around the GEMM. */
#include "kernels/kernels-impl.h"
#include "kernels/gemm-impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PRM__PROF_MAX 512 /* distinct shapes; more go to one "other" row */

typedef struct {
  int bf16, trans_a, trans_b;
  int64_t m, n, k, calls;
  double sec, best; /* total and fastest call, seconds */
} prm__prof_ent_t;

struct prm__prof {
  prm_gemm_i self; /* g->i of the profiled handle */
  char name[112];  /* self.name: "<inner>+profiled" */
  prm_gemm_t inner;
  pthread_mutex_t mu;
  prm__prof_ent_t ent[PRM__PROF_MAX + 1]; /* [PRM__PROF_MAX]: the overflow row */
  int n;
};

static void prm__prof_add(prm__prof_t *p, int bf16, int ta, int tb, int64_t M, int64_t N,
                          int64_t K, double sec) {
  pthread_mutex_lock(&p->mu);
  prm__prof_ent_t *e = NULL;
  for (int i = 0; i < p->n && !e; i++)
    if (p->ent[i].bf16 == bf16 && p->ent[i].trans_a == ta && p->ent[i].trans_b == tb &&
        p->ent[i].m == M && p->ent[i].n == N && p->ent[i].k == K)
      e = &p->ent[i];
  if (!e && p->n < PRM__PROF_MAX) {
    e = &p->ent[p->n++];
    *e = (prm__prof_ent_t){bf16, ta, tb, M, N, K, 0, 0, 0};
  }
  if (!e) e = &p->ent[PRM__PROF_MAX]; /* m = n = k = 0: the FLOPs are not counted */
  if (!e->calls || sec < e->best) e->best = sec;
  e->calls++;
  e->sec += sec;
  pthread_mutex_unlock(&p->mu);
}

static void prm__prof_sgemm(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                            float beta, float *C, int64_t ldc) {
  prm__prof_t *p = ctx;
  double t0 = prm_time_now();
  p->inner.i->sgemm(p->inner.ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
  prm__prof_add(p, 0, trans_a, trans_b, M, N, K, prm_time_now() - t0);
}

static void prm__prof_bf16(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const prm_bf16_t *A, int64_t lda, const prm_bf16_t *B,
                           int64_t ldb, float beta, float *C, int64_t ldc) {
  prm__prof_t *p = ctx;
  double t0 = prm_time_now();
  prm_gemm_bf16(&p->inner, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  prm__prof_add(p, 1, trans_a, trans_b, M, N, K, prm_time_now() - t0);
}

prm__prof_t *prm__prof_of(const prm_gemm_t *g) {
  return g && g->i && g->i->sgemm == prm__prof_sgemm ? g->ctx : NULL;
}

void prm__prof_note(const prm_gemm_t *g, int bf16, int trans_a, int trans_b, int64_t M,
                    int64_t N, int64_t K, double sec) {
  prm__prof_t *p = prm__prof_of(g);
  if (p) prm__prof_add(p, bf16, trans_a, trans_b, M, N, K, sec);
}

const prm_gemm_t *prm__prof_inner(const prm_gemm_t *g) {
  prm__prof_t *p = prm__prof_of(g);
  return p ? &p->inner : g;
}

void prm_gemm_profile(prm_gemm_t *g) {
  if (prm__prof_of(g)) return;
  prm__prof_t *p = prm_xcalloc(1, sizeof *p);
  p->inner = *g;
  pthread_mutex_init(&p->mu, NULL);
  snprintf(p->name, sizeof p->name, "%s+profiled", g->i->name);
  p->self = (prm_gemm_i){p->name, g->i->available, prm__prof_sgemm, prm__prof_bf16};
  g->i = &p->self;
  g->ctx = p;
}

/* Rows by total time, longest first. */
static int prm__prof_cmp(const void *a, const void *b) {
  double x = ((const prm__prof_ent_t *)a)->sec, y = ((const prm__prof_ent_t *)b)->sec;
  return (x < y) - (x > y);
}

char *prm_gemm_profile_report(const prm_gemm_t *g) {
  prm__prof_t *p = prm__prof_of(g);
  if (!p) return NULL;
  pthread_mutex_lock(&p->mu);
  int n = p->n;
  prm__prof_ent_t ent[PRM__PROF_MAX + 1];
  memcpy(ent, p->ent, (size_t)n * sizeof *ent);
  if (p->ent[PRM__PROF_MAX].calls) ent[n++] = p->ent[PRM__PROF_MAX];
  pthread_mutex_unlock(&p->mu);
  qsort(ent, (size_t)n, sizeof *ent, prm__prof_cmp);
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "| dtype | trans_a | trans_b | M | N | K | calls | total_ms | avg_ms | GFLOP/s | best_ms | best GFLOP/s |\n"
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double sec = 0, flop = 0;
  int64_t calls = 0;
  for (int i = 0; i < n; i++) {
    const prm__prof_ent_t *e = &ent[i];
    double f = 2.0 * (double)e->m * (double)e->n * (double)e->k * (double)e->calls;
    sec += e->sec;
    flop += f;
    calls += e->calls;
    if (!e->m)
      prm_sb_appendf(&sb, "| other | | | | | | %lld | %.1f | %.3f | | %.3f | |\n",
                     (long long)e->calls, e->sec * 1e3, e->sec * 1e3 / (double)e->calls,
                     e->best * 1e3);
    else
      prm_sb_appendf(&sb, "| %s | %d | %d | %lld | %lld | %lld | %lld | %.1f | %.3f | %.1f | %.3f | %.1f |\n",
                     e->bf16 ? "bf16" : "fp32", e->trans_a, e->trans_b, (long long)e->m,
                     (long long)e->n, (long long)e->k, (long long)e->calls, e->sec * 1e3,
                     e->sec * 1e3 / (double)e->calls, e->sec > 0 ? f / e->sec / 1e9 : 0.0,
                     e->best * 1e3, e->best > 0 ? f / (double)e->calls / e->best / 1e9 : 0.0);
  }
  prm_sb_appendf(&sb, "| all | | | | | | %lld | %.1f | | %.1f | | |\n", (long long)calls,
                 sec * 1e3, sec > 0 ? flop / sec / 1e9 : 0.0);
  return prm_sb_steal(&sb);
}

void prm__prof_free(prm_gemm_t *g) {
  prm__prof_t *p = prm__prof_of(g);
  if (!p) return;
  *g = p->inner;
  pthread_mutex_destroy(&p->mu);
  free(p);
}
