/* kernels.c - the fused element-wise kernels (issue 9) timed against their
 * reference twins on training shapes, with one thread and with all of
 * them, next to the STREAM triad bandwidth measured in the same run.
 *
 * The reference twins live in the kernel layer's internal header: the
 * benchmark is the one place outside src/kernels and the tests that calls
 * them, to report each fast kernel's speed-up over the code it replaced.
 *
 * Memory-bound kernels are only honest on data that is not in cache: every
 * kernel but the cross-entropy rows cycles through enough independent
 * copies of its buffers (cold_mb in all) that each call finds its inputs
 * evicted, as a training step does. The cross-entropy rows run on one hot
 * chunk, as in prm_lmhead_xent, where the GEMM has just written it. */
#define _GNU_SOURCE
#include "bench/bench-impl.h"
#include "kernels/kernels-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

enum {
  PRM__KB_ADAMW,
  PRM__KB_ADD,
  PRM__KB_SWIGLU_FWD,
  PRM__KB_SWIGLU_BWD,
  PRM__KB_ROPE_FWD,
  PRM__KB_ROPE_BWD,
  PRM__KB_RMS_FWD,
  PRM__KB_RMS_BWD,
  PRM__KB_ADD_RMS,
  PRM__KB_XENT,
  PRM__KB_COUNT
};

static const char *const prm__kb_names[] = {
    "adamw",         "add",         "swiglu_fwd",      "swiglu_bwd", "rope_fwd",
    "rope_bwd",      "rmsnorm_fwd", "rmsnorm_bwd",     "add_rmsnorm", "xent_rows",
};
_Static_assert(sizeof prm__kb_names / sizeof prm__kb_names[0] == PRM__KB_COUNT,
               "one name per kernel");

const char *const *prm_bench_kernel_names(int *n) {
  *n = PRM__KB_COUNT;
  return prm__kb_names;
}

/* Implementations: the fast kernel, its reference twin, and for the fused
 * add + RMSNorm also the two fast kernels it replaces (add, then norm). */
enum { PRM__KI_FAST, PRM__KI_REF, PRM__KI_UNFUSED };
static const char *const prm__ki_names[] = {"fast", "reference", "fast_unfused"};

#define PRM__KB_MAXBUF 5

/* One kernel's buffers per copy (floats each) and the bytes a call must
 * move at least: every input read once, every output written once. */
typedef struct {
  int nbuf;
  int64_t n[PRM__KB_MAXBUF];
  double bytes;
  int hot;
  char shape[96];
} prm__kb_t;

typedef struct {
  int64_t N, C, F, H, D, B, T, V, xrows, P;
  float *w, *cos_t, *sin_t;
  int32_t *targets;
} prm__kb_ctx_t;

static void prm__kb_describe(int k, const prm__kb_ctx_t *c, prm__kb_t *d) {
  memset(d, 0, sizeof *d);
  int64_t NC = c->N * c->C, NF = c->N * c->F;
  switch (k) {
  case PRM__KB_ADAMW: /* p g m v: 16 bytes read, 12 written */
    *d = (prm__kb_t){4, {c->P, c->P, c->P, c->P}, 28.0 * c->P, 0, ""};
    snprintf(d->shape, sizeof d->shape, "n=%lld", (long long)c->P);
    break;
  case PRM__KB_ADD: /* y a b */
    *d = (prm__kb_t){3, {NC, NC, NC}, 12.0 * NC, 0, ""};
    snprintf(d->shape, sizeof d->shape, "%lldx%lld", (long long)c->N, (long long)c->C);
    break;
  case PRM__KB_SWIGLU_FWD: /* h gate up */
    *d = (prm__kb_t){3, {NF, NF, NF}, 12.0 * NF, 0, ""};
    snprintf(d->shape, sizeof d->shape, "%lldx%lld", (long long)c->N, (long long)c->F);
    break;
  case PRM__KB_SWIGLU_BWD: /* dgate dup dh gate up */
    *d = (prm__kb_t){5, {NF, NF, NF, NF, NF}, 20.0 * NF, 0, ""};
    snprintf(d->shape, sizeof d->shape, "%lldx%lld", (long long)c->N, (long long)c->F);
    break;
  case PRM__KB_ROPE_FWD:
  case PRM__KB_ROPE_BWD: /* q in place */
    *d = (prm__kb_t){1, {NC}, 8.0 * NC, 0, ""};
    snprintf(d->shape, sizeof d->shape, "%lldx%lldx%lldx%lld", (long long)c->B, (long long)c->T,
             (long long)c->H, (long long)c->D);
    break;
  case PRM__KB_RMS_FWD: /* out x rstd */
    *d = (prm__kb_t){3, {NC, NC, c->N}, 8.0 * NC + 4.0 * c->N, 0, ""};
    snprintf(d->shape, sizeof d->shape, "%lldx%lld", (long long)c->N, (long long)c->C);
    break;
  case PRM__KB_RMS_BWD: /* dx (read and written) dout x rstd dw */
    *d = (prm__kb_t){5, {NC, NC, NC, c->N, c->C}, 16.0 * NC + 4.0 * c->N, 0, ""};
    snprintf(d->shape, sizeof d->shape, "%lldx%lld", (long long)c->N, (long long)c->C);
    break;
  case PRM__KB_ADD_RMS: /* sum out a b rstd */
    *d = (prm__kb_t){5, {NC, NC, NC, NC, c->N}, 16.0 * NC + 4.0 * c->N, 0, ""};
    snprintf(d->shape, sizeof d->shape, "%lldx%lld", (long long)c->N, (long long)c->C);
    break;
  case PRM__KB_XENT: /* one chunk of logits, loss and gradient in place */
    *d = (prm__kb_t){1, {c->xrows * c->V}, 8.0 * c->xrows * c->V, 1, ""};
    snprintf(d->shape, sizeof d->shape, "%lldx%lld", (long long)c->xrows, (long long)c->V);
    break;
  }
}

/* One call of kernel k, implementation impl, on the buffers b of a copy. */
static void prm__kb_call(int k, int impl, float **b, const prm__kb_ctx_t *c) {
  int64_t N = c->N, C = c->C, NC = N * C, NF = N * c->F;
  int fast = impl == PRM__KI_FAST;
  switch (k) {
  case PRM__KB_ADAMW:
    if (fast)
      prm_adamw_update(b[0], b[1], b[2], b[3], c->P, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10, 1.0f);
    else
      prm__ref32_adamw_update(b[0], b[1], b[2], b[3], c->P, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10,
                              1.0f);
    break;
  case PRM__KB_ADD:
    if (fast) prm_add(b[0], b[1], b[2], NC);
    else prm__ref32_add(b[0], b[1], b[2], NC);
    break;
  case PRM__KB_SWIGLU_FWD:
    if (fast) prm_swiglu_forward(b[0], b[1], b[2], NF);
    else prm__ref32_swiglu_forward(b[0], b[1], b[2], NF);
    break;
  case PRM__KB_SWIGLU_BWD:
    if (fast) prm_swiglu_backward(b[0], b[1], b[2], b[3], b[4], NF);
    else prm__ref32_swiglu_backward(b[0], b[1], b[2], b[3], b[4], NF);
    break;
  case PRM__KB_ROPE_FWD:
    if (fast) prm_rope_forward(b[0], c->cos_t, c->sin_t, c->B, c->T, c->H, c->D, 0);
    else prm__ref32_rope_forward(b[0], c->cos_t, c->sin_t, c->B, c->T, c->H, c->D, 0);
    break;
  case PRM__KB_ROPE_BWD:
    if (fast) prm_rope_backward(b[0], c->cos_t, c->sin_t, c->B, c->T, c->H, c->D, 0);
    else prm__ref32_rope_backward(b[0], c->cos_t, c->sin_t, c->B, c->T, c->H, c->D, 0);
    break;
  case PRM__KB_RMS_FWD:
    if (fast) prm_rmsnorm_forward(b[0], b[2], b[1], c->w, N, C, 1e-5f);
    else prm__ref32_rmsnorm_forward(b[0], b[2], b[1], c->w, N, C, 1e-5f);
    break;
  case PRM__KB_RMS_BWD:
    if (fast) prm_rmsnorm_backward(b[0], b[4], b[1], b[2], c->w, b[3], N, C);
    else prm__ref32_rmsnorm_backward(b[0], b[4], b[1], b[2], c->w, b[3], N, C);
    break;
  case PRM__KB_ADD_RMS:
    if (fast) prm_add_rmsnorm_forward(b[0], b[1], b[4], b[2], b[3], c->w, N, C, 1e-5f);
    else if (impl == PRM__KI_REF)
      prm__ref32_add_rmsnorm_forward(b[0], b[1], b[4], b[2], b[3], c->w, N, C, 1e-5f);
    else {
      prm_add(b[0], b[2], b[3], NC);
      prm_rmsnorm_forward(b[1], b[4], b[0], c->w, N, C, 1e-5f);
    }
    break;
  case PRM__KB_XENT:
    if (fast) prm__fast_xent(NULL, b[0], b[0], c->targets, c->xrows, c->V, 1e-4f);
    else {
      prm__ref32_xent_forward(NULL, b[0], c->targets, c->xrows, c->V);
      prm__ref32_xent_backward(b[0], b[0], c->targets, c->xrows, c->V, 1e-4f);
    }
    break;
  }
}

static int prm__cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define PRM__KB_MAXSAMPLES 256

/* Median seconds per call (and the fastest sample in *best): each sample
 * is one call on every copy in turn (divided by the copies); samples until
 * `seconds` are spent, at least 3, after one warm-up sample. */
static double prm__kb_time(int k, int impl, float ***sets, int64_t nsets,
                           const prm__kb_ctx_t *c, double seconds, int64_t *calls, double *best) {
  double s[PRM__KB_MAXSAMPLES];
  int ns = 0;
  for (int64_t i = 0; i < nsets; i++) prm__kb_call(k, impl, sets[i], c);
  double t_start = prm_time_now();
  do {
    double t0 = prm_time_now();
    for (int64_t i = 0; i < nsets; i++) prm__kb_call(k, impl, sets[i], c);
    s[ns++] = (prm_time_now() - t0) / (double)nsets;
  } while (ns < PRM__KB_MAXSAMPLES && (ns < 3 || prm_time_now() - t_start < seconds));
  qsort(s, (size_t)ns, sizeof s[0], prm__cmp_double);
  *calls = ns * nsets;
  *best = s[0];
  return ns % 2 ? s[ns / 2] : 0.5 * (s[ns / 2 - 1] + s[ns / 2]);
}

/* 1 when kernel name k is in the comma-separated list (NULL: all). */
static int prm__kb_wanted(const char *list, const char *k) {
  if (!list || !*list || !strcmp(list, "all")) return 1;
  size_t n = strlen(k);
  for (const char *p = list; p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, k, n)) return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

static void prm__set_threads(int t) {
#ifdef _OPENMP
  omp_set_num_threads(t);
#else
  (void)t;
#endif
}

/* Frees the copies of one kernel. */
static void prm__kb_free_sets(float ***sets, int64_t nsets, const prm__kb_t *d) {
  if (!sets) return;
  for (int64_t i = 0; i < nsets; i++) {
    if (!sets[i]) continue;
    for (int j = 0; j < d->nbuf; j++) prm__bench_free(sets[i][j], d->n[j]);
    free(sets[i]);
  }
  free(sets);
}

/* nsets copies of kernel k's buffers, the first filled with random values
 * (non-negative where the kernel needs it: AdamW's v, RMSNorm's rstd), the
 * others copies of it. NULL with err set when memory runs out. */
static float ***prm__kb_alloc_sets(int k, const prm__kb_t *d, int64_t nsets, prm_err_t *err) {
  float ***sets = prm_xcalloc((size_t)nsets, sizeof *sets);
  for (int64_t i = 0; i < nsets; i++) {
    sets[i] = prm_xcalloc(PRM__KB_MAXBUF, sizeof **sets);
    for (int j = 0; j < d->nbuf; j++) {
      float *p = prm__bench_alloc(d->n[j], prm__kb_names[k], err);
      if (!p) {
        prm__kb_free_sets(sets, nsets, d);
        return NULL;
      }
      sets[i][j] = p;
      if (i == 0) {
        prm__bench_fill(p, d->n[j], 100 + (uint64_t)(k * 8 + j));
        int positive = (k == PRM__KB_ADAMW && j == 3) || (k == PRM__KB_RMS_BWD && j == 3);
        if (positive)
          for (int64_t e = 0; e < d->n[j]; e++) p[e] = fabsf(p[e]) + 0.5f;
      } else {
        memcpy(p, sets[0][j], (size_t)d->n[j] * sizeof(float));
      }
    }
  }
  return sets;
}

int prm_bench_kernels(const prm_bench_kernels_opts_t *o, prm_bench_kernel_row_t **rows, int *n,
                      prm_err_t *err) {
  *rows = NULL;
  *n = 0;
  prm__kb_ctx_t c = {0};
  c.N = o->rows, c.C = o->hidden, c.F = o->ffn, c.H = o->heads, c.V = o->vocab, c.P = o->params;
  if (c.N < 1 || c.C < 2 || c.F < 1 || c.H < 1 || c.V < 2 || c.P < 1 || o->seq < 1)
    return prm_errf(err, PRM_EINVAL,
                    "kernels: rows, hidden, ffn, heads, vocab, seq and params must be positive");
  if (c.C % c.H || (c.C / c.H) % 2)
    return prm_errf(err, PRM_EINVAL,
                    "kernels: heads %lld must divide hidden %lld into even head sizes",
                    (long long)c.H, (long long)c.C);
  if (c.N % o->seq)
    return prm_errf(err, PRM_EINVAL, "kernels: seq %lld must divide rows %lld", (long long)o->seq,
                    (long long)c.N);
  for (const char *p = o->kernels; p && *p && strcmp(p, "all");) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int known = 0;
    for (int k = 0; k < PRM__KB_COUNT; k++)
      known |= strlen(prm__kb_names[k]) == len && !strncmp(p, prm__kb_names[k], len);
    if (!known)
      return prm_errf(err, PRM_EINVAL,
                      "kernels: unknown kernel \"%.*s\"; choices: adamw, add, swiglu_fwd, "
                      "swiglu_bwd, rope_fwd, rope_bwd, rmsnorm_fwd, rmsnorm_bwd, add_rmsnorm, "
                      "xent_rows, all",
                      (int)len, p);
    p = e ? e + 1 : NULL;
  }
  c.D = c.C / c.H, c.T = o->seq, c.B = c.N / c.T;
  /* The LM head's chunk, as src/model cuts it. */
  c.xrows = prm_llama_head_chunk(c.N, c.V);

  int maxt = prm_kernels_threads(), rc = 0;
  int nthreads = maxt > 1 ? 2 : 1, tlist[2] = {1, maxt};
  c.w = prm_xcalloc((size_t)c.C, sizeof(float));
  c.cos_t = prm_xcalloc((size_t)(c.T * c.D / 2), sizeof(float));
  c.sin_t = prm_xcalloc((size_t)(c.T * c.D / 2), sizeof(float));
  c.targets = prm_xcalloc((size_t)c.xrows, sizeof(int32_t));
  prm__bench_fill(c.w, c.C, 7);
  prm_rope_tables(c.cos_t, c.sin_t, c.T, c.D, 10000.0);
  for (int64_t i = 0; i < c.xrows; i++) c.targets[i] = (int32_t)((i * 7919) % c.V);

  /* The triad on arrays as large as the copies the kernels cycle through
   * (at least 16 MiB; 64 MiB when the kernels run cache-hot). */
  double triad[2] = {0, 0};
  size_t triad_mb = o->cold_mb > 0 ? (size_t)o->cold_mb : 64;
  if (triad_mb < 16) triad_mb = 16;
  for (int ti = 0; ti < nthreads; ti++) {
    prm__set_threads(tlist[ti]);
    triad[ti] = prm_bench_triad(triad_mb << 20, o->duration_s);
  }
  prm__set_threads(maxt);

  int cap = PRM__KB_COUNT * 3 * 2, nr = 0;
  prm_bench_kernel_row_t *out = prm_xcalloc((size_t)cap, sizeof *out);
  for (int k = 0; k < PRM__KB_COUNT && !rc; k++) {
    if (!prm__kb_wanted(o->kernels, prm__kb_names[k])) continue;
    prm__kb_t d;
    prm__kb_describe(k, &c, &d);
    double set_bytes = 0;
    for (int j = 0; j < d.nbuf; j++) set_bytes += 4.0 * (double)d.n[j];
    int64_t nsets = 1;
    if (!d.hot && o->cold_mb > 0) nsets = (int64_t)ceil((double)o->cold_mb * 1048576.0 / set_bytes);
    if (nsets < 1) nsets = 1;
    float ***sets = prm__kb_alloc_sets(k, &d, nsets, err);
    if (!sets) {
      rc = err ? err->code : PRM_ENOMEM;
      break;
    }
    int nimpl = k == PRM__KB_ADD_RMS ? 3 : 2;
    for (int ti = 0; ti < nthreads; ti++) {
      prm__set_threads(tlist[ti]);
      double fast_ms = 0;
      for (int impl = 0; impl < nimpl; impl++) {
        int64_t calls = 0;
        double best = 0, sec = prm__kb_time(k, impl, sets, nsets, &c, o->duration_s, &calls, &best);
        if (sec <= 0) sec = 1e-9;
        if (best <= 0) best = 1e-9;
        prm_bench_kernel_row_t *r = &out[nr++];
        snprintf(r->kernel, sizeof r->kernel, "%s", prm__kb_names[k]);
        snprintf(r->shape, sizeof r->shape, "%s", d.shape);
        snprintf(r->impl, sizeof r->impl, "%s", prm__ki_names[impl]);
        r->threads = tlist[ti];
        r->copies = nsets;
        r->calls = calls;
        r->median_ms = sec * 1e3;
        r->min_ms = best * 1e3;
        r->gbs = d.bytes / sec / 1e9;
        r->best_gbs = d.bytes / best / 1e9;
        r->triad_gbs = triad[ti];
        r->triad_fraction = triad[ti] > 0 ? r->best_gbs / triad[ti] : 0;
        if (impl == PRM__KI_FAST) fast_ms = r->median_ms;
        r->fast_speedup = fast_ms > 0 ? r->median_ms / fast_ms : 0;
      }
    }
    prm__set_threads(maxt);
    prm__kb_free_sets(sets, nsets, &d);
  }
  free(c.w), free(c.cos_t), free(c.sin_t), free(c.targets);
  if (rc) {
    free(out);
    return rc;
  }
  *rows = out;
  *n = nr;
  return 0;
}

void prm_bench_kernels_free(prm_bench_kernel_row_t *rows) { free(rows); }
