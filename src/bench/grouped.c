/* grouped.c - the experts' GEMMs of one MoE layer timed two ways: the
 * grouped GEMM (src/kernels/gemm_grouped.c, one call per product over
 * every expert) and the loop of one backend GEMM per expert and product
 * that it replaces, for several token counts per expert. The two are timed
 * alternately, call for call, so that a machine shared with other work
 * slows both alike; the ratio is that of the medians.
 *
 * Like src/bench/kernels.c this calls a kernel-internal name
 * (prm__grouped_linear_isa), to time the grouped kernel on every shape
 * whatever the policy of prm_grouped_linear_* would pick. */
#include "bench/bench-impl.h"
#include "kernels/gemm-impl.h"

#include <stdlib.h>
#include <string.h>

/* The buffers of one MoE layer's experts, R = E rows rows. */
typedef struct {
  int64_t C, F, E, R;
  int32_t *off;
  float *w, *dw;                 /* (E, 3, F, C): w1, w2 (C,F), w3 as moe.c */
  float *x, *g, *u, *h, *y;      /* (R,C), (R,F) x 3, (R,C) */
  float *dy, *dh, *dg, *du, *dx; /* (R,C), (R,F) x 3, (R,C) */
} prm__gb_t;

/* The forward's three products or the backward's six, grouped or looped. */
static void prm__gb_run(const prm__gb_t *b, const prm_gemm_t *g, int bwd, int grouped) {
  int64_t C = b->C, F = b->F, ws = 3 * F * C;
  float *w1 = b->w, *w2 = b->w + F * C, *w3 = b->w + 2 * F * C;
  float *d1 = b->dw, *d2 = b->dw + F * C, *d3 = b->dw + 2 * F * C;
  if (grouped) {
    if (!bwd) {
      prm__grouped_linear_isa(NULL, PRM__GG_FWD, b->g, b->x, w1, ws, b->off, b->E, C, F, 0);
      prm__grouped_linear_isa(NULL, PRM__GG_FWD, b->u, b->x, w3, ws, b->off, b->E, C, F, 0);
      prm__grouped_linear_isa(NULL, PRM__GG_FWD, b->y, b->h, w2, ws, b->off, b->E, F, C, 0);
      return;
    }
    prm__grouped_linear_isa(NULL, PRM__GG_DX, b->dh, b->dy, w2, ws, b->off, b->E, F, C, 0);
    prm__grouped_linear_isa(NULL, PRM__GG_DW, d2, b->dy, b->h, ws, b->off, b->E, F, C, 1);
    prm__grouped_linear_isa(NULL, PRM__GG_DX, b->dx, b->dg, w1, ws, b->off, b->E, C, F, 0);
    prm__grouped_linear_isa(NULL, PRM__GG_DW, d1, b->dg, b->x, ws, b->off, b->E, C, F, 1);
    prm__grouped_linear_isa(NULL, PRM__GG_DX, b->dx, b->du, w3, ws, b->off, b->E, C, F, 1);
    prm__grouped_linear_isa(NULL, PRM__GG_DW, d3, b->du, b->x, ws, b->off, b->E, C, F, 1);
    return;
  }
  for (int64_t e = 0; e < b->E; e++) {
    int64_t r0 = b->off[e], n = b->off[e + 1] - r0, o = e * ws;
    if (!bwd) {
      prm_linear_forward(g, b->g + r0 * F, b->x + r0 * C, w1 + o, n, C, F);
      prm_linear_forward(g, b->u + r0 * F, b->x + r0 * C, w3 + o, n, C, F);
      prm_linear_forward(g, b->y + r0 * C, b->h + r0 * F, w2 + o, n, F, C);
      continue;
    }
    prm_linear_backward(g, b->dh + r0 * F, d2 + o, b->dy + r0 * C, b->h + r0 * F, w2 + o, n, F,
                        C, 0);
    prm_linear_backward(g, b->dx + r0 * C, d1 + o, b->dg + r0 * F, b->x + r0 * C, w1 + o, n, C,
                        F, 0);
    prm_linear_backward(g, b->dx + r0 * C, d3 + o, b->du + r0 * F, b->x + r0 * C, w3 + o, n, C,
                        F, 1);
  }
}

static int prm__gb_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double prm__gb_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, prm__gb_cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Every buffer for the most rows of the list; NULL members on failure. */
static int prm__gb_alloc(prm__gb_t *b, int64_t maxrows, prm_err_t *err) {
  int64_t C = b->C, F = b->F, R = b->E * maxrows, W = b->E * 3 * F * C;
  float **act[] = {&b->x, &b->y, &b->dy, &b->dx};
  float **mid[] = {&b->g, &b->u, &b->h, &b->dh, &b->dg, &b->du};
  if (!(b->w = prm__bench_alloc(W, "the experts' weights", err)) ||
      !(b->dw = prm__bench_alloc(W, "the experts' gradients", err)))
    return PRM_ENOMEM;
  for (int i = 0; i < 4; i++)
    if (!(*act[i] = prm__bench_alloc(R * C, "activations", err))) return PRM_ENOMEM;
  for (int i = 0; i < 6; i++)
    if (!(*mid[i] = prm__bench_alloc(R * F, "activations", err))) return PRM_ENOMEM;
  prm__bench_fill(b->w, W, 1);
  memset(b->dw, 0, (size_t)W * sizeof(float));
  for (int i = 0; i < 4; i++) prm__bench_fill(*act[i], R * C, 2 + (uint64_t)i);
  for (int i = 0; i < 6; i++) prm__bench_fill(*mid[i], R * F, 6 + (uint64_t)i);
  return 0;
}

static void prm__gb_free(prm__gb_t *b, int64_t maxrows) {
  int64_t C = b->C, F = b->F, R = b->E * maxrows, W = b->E * 3 * F * C;
  prm__bench_free(b->w, W);
  prm__bench_free(b->dw, W);
  float *act[] = {b->x, b->y, b->dy, b->dx}, *mid[] = {b->g, b->u, b->h, b->dh, b->dg, b->du};
  for (int i = 0; i < 4; i++) prm__bench_free(act[i], R * C);
  for (int i = 0; i < 6; i++) prm__bench_free(mid[i], R * F);
  free(b->off);
}

int prm_bench_grouped(const prm_bench_grouped_opts_t *o, prm_bench_grouped_row_t **rows, int *n,
                      prm_err_t *err) {
  *rows = NULL;
  *n = 0;
  if (o->hidden < 1 || o->ffn < 1 || o->experts < 1 || o->nrows < 1)
    return prm_errf(err, PRM_EINVAL, "grouped GEMM: hidden, ffn, experts and rows must be positive");
  int64_t maxrows = 0;
  for (int i = 0; i < o->nrows; i++) {
    if (o->rows[i] < 1) return prm_errf(err, PRM_EINVAL, "grouped GEMM: rows per expert must be positive");
    maxrows = o->rows[i] > maxrows ? o->rows[i] : maxrows;
  }
  if ((double)o->experts * (double)maxrows > (double)INT32_MAX)
    return prm_errf(err, PRM_EINVAL, "grouped GEMM: %lld experts x %lld rows exceed the int32 row offsets",
                    (long long)o->experts, (long long)maxrows);
  prm_gemm_t g;
  int rc = prm_gemm_init(&g, o->backend, err);
  if (rc) return rc;
  prm__gb_t b = {.C = o->hidden, .F = o->ffn, .E = o->experts};
  b.off = prm_xcalloc((size_t)(b.E + 1), sizeof *b.off);
  if ((rc = prm__gb_alloc(&b, maxrows, err))) {
    prm__gb_free(&b, maxrows);
    return rc;
  }
  prm_bench_grouped_row_t *out = prm_xcalloc((size_t)(2 * o->nrows), sizeof *out);
  int cap = 1 << 16;
  double *tg = prm_xmalloc((size_t)cap * sizeof *tg), *tl = prm_xmalloc((size_t)cap * sizeof *tl);
  for (int i = 0; i < o->nrows; i++) {
    int64_t per = o->rows[i];
    for (int64_t e = 0; e <= b.E; e++) b.off[e] = (int32_t)(e * per);
    b.R = b.E * per;
    for (int bwd = 0; bwd < 2; bwd++) {
      prm__gb_run(&b, &g, bwd, 1); /* warm-up, both ways */
      prm__gb_run(&b, &g, bwd, 0);
      int k = 0;
      double t_end = prm_time_now() + o->duration_s;
      while (k < cap && (k < 3 || prm_time_now() < t_end)) {
        double t0 = prm_time_now();
        prm__gb_run(&b, &g, bwd, 1);
        double t1 = prm_time_now();
        prm__gb_run(&b, &g, bwd, 0);
        tg[k] = t1 - t0;
        tl[k++] = prm_time_now() - t1;
      }
      prm_bench_grouped_row_t *r = &out[(*n)++];
      r->rows = per;
      r->bwd = bwd;
      snprintf(r->backend, sizeof r->backend, "%s", g.i->name);
      snprintf(r->isa, sizeof r->isa, "%s", prm__gemm_batch_isa());
      r->pairs = k;
      r->grouped_ms = 1e3 * prm__gb_median(tg, k);
      r->loop_ms = 1e3 * prm__gb_median(tl, k);
      double flop = (bwd ? 6.0 : 3.0) * 2.0 * (double)b.R * (double)b.C * (double)b.F;
      r->grouped_gflops = r->grouped_ms > 0 ? flop / (r->grouped_ms * 1e6) : 0;
      r->loop_gflops = r->loop_ms > 0 ? flop / (r->loop_ms * 1e6) : 0;
      r->speedup = r->grouped_ms > 0 ? r->loop_ms / r->grouped_ms : 0;
      r->policy_grouped = prm__grouped_use_kernel(&g, b.R, b.E);
    }
  }
  free(tg);
  free(tl);
  prm__gb_free(&b, maxrows);
  *rows = out;
  return 0;
}

void prm_bench_grouped_free(prm_bench_grouped_row_t *rows) { free(rows); }
